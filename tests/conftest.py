"""Shared test configuration: float32 JAX on CPU, hypothesis profile sized for 2-core CI."""

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

# The suite compiles hundreds of small programs on a 2-core CI machine; XLA:CPU's backend
# optimizations cost more compile time there than they save in run time (about 35% less wall time
# for the suite). Results stay deterministic: every bit-exactness test compares programs compiled
# with the same options. EVOTENSOR_TEST_DEFAULT_XLA=1 tests with XLA's default options instead.
if not os.environ.get("EVOTENSOR_TEST_DEFAULT_XLA"):
    _fast = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _fast).strip()

from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "ci", max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


import pytest  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop JAX's in-memory compiled programs after each test module: an xdist worker otherwise
    keeps every program of every module it ran (6.5 GB RSS seen), and late in the full suite an
    XLA:CPU compile of a NEAT program segfaulted three times in such a worker, never in a fresh
    process."""
    yield
    import gc

    import jax

    jax.clear_caches()
    gc.collect()
