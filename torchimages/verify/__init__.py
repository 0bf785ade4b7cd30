"""The built images started as users run them and put through the smoke suite and the benchmark."""
