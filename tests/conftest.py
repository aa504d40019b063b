import os

# Deterministic, quiet CPU runs for the test suite.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
