"""Shared test configuration: float32 JAX on CPU, hypothesis profile sized for 2-core CI."""

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

# The suite compiles hundreds of small programs on a 2-core CI machine; XLA:CPU's backend
# optimizations cost more compile time there than they save in run time (about 35% less wall time
# for the suite). Results stay deterministic: every bit-exactness test compares programs compiled
# with the same options. EVOTENSOR_TEST_DEFAULT_XLA=1 tests with XLA's default options instead.
#
# EVOTENSOR_TEST_CLASSIC_EMITTERS=1 (what `make test` sets) also selects XLA:CPU's classic emitters:
# fewer, larger kernels, each compiled as its own LLVM module, about 40% less wall time for the suite
# again. Under them two differently compiled programs (vmapped and separate, 4 devices and 1, jit and
# a reference) may differ in the last bits where XLA's default emitters agree exactly, so the tests
# that compare such programs bit for bit carry the mark ``fusion_emitters``: this session leaves them
# out and `make test` runs them in a second session under the default emitters.
DEFAULT_XLA = bool(os.environ.get("EVOTENSOR_TEST_DEFAULT_XLA"))
CLASSIC_EMITTERS = bool(os.environ.get("EVOTENSOR_TEST_CLASSIC_EMITTERS")) and not DEFAULT_XLA
if not DEFAULT_XLA:
    _fast = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
    if CLASSIC_EMITTERS:
        _fast += " --xla_cpu_use_fusion_emitters=false"
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


def pytest_report_header(config):
    header = f"XLA_FLAGS: {os.environ.get('XLA_FLAGS', '')!r}"
    if CLASSIC_EMITTERS:
        header += " (classic emitters: the fusion_emitters tests are left out, see tests/conftest.py)"
    return header


def pytest_collection_modifyitems(config, items):
    """Under the classic emitters, leave out the tests that need XLA's default ones (see above)."""
    if not CLASSIC_EMITTERS:
        return
    needs_fusion = [item for item in items if item.get_closest_marker("fusion_emitters")]
    if needs_fusion:
        config.hook.pytest_deselected(items=needs_fusion)
        items[:] = [item for item in items if not item.get_closest_marker("fusion_emitters")]
