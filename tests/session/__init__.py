"""The test session's harness, in one place: where each test runs and why (lanes.py), what a module may leave on an
engine and what the session leaves (engines.py), and the disk and time each module costs (disk.py). tests/conftest.py
wires them into pytest; tests/README.md says how to add a module (its marks, nothing else)."""
