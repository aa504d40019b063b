import os
import tempfile

# Deterministic, quiet CPU runs for the test suite.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# The tests compile many small programs and run each only briefly. Without LLVM's backend
# optimisation passes they compile much faster. Measured on 2 cores: the ClusterGAN, runner and
# IFCA test files took 172 s of CPU instead of 289 s. The passes change rounding, so the tests
# compare within tolerances meant to cover it (a rounding-sensitive geometric median was found
# this way and fixed in core.robust). Subprocesses and the notebook kernel
# inherit the flag. It is not added when XLA_FLAGS already sets a level.
if "--xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = " ".join(
        [os.environ.get("XLA_FLAGS", ""), "--xla_backend_optimization_level=0"]).strip()

# One persistent compilation cache for the whole run (xdist workers and the CLI subprocesses
# inherit the variable): a program compiled by one test is loaded, not recompiled, by the next
# test that builds the same program (the same preset in several CLI tests, a single run beside
# its sweep row). A fresh folder per run unless the caller names one.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="fedclust-test-xla-cache-")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")
