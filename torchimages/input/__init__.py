"""The matrix and what it is checked against: the YAML source, the value grammar, the compatibility facts, image
specs, the lock, the plan."""
