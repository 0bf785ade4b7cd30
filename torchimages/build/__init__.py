"""Build contexts rendered from the specs, and the images built from them."""
