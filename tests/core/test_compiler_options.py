"""XLA compiler options a strategy or problem asks for (evotensor.core.compiler_options): merged by
the run loop and given to XLA for every program of a run, with a clear error on conflicts and bad
input, and XLA's defaults where an XLA does not know an option."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tests.core.test_host_problems import HostSphere
from tests.core.toy import ToyStrategy

import evotensor
from evotensor.core.checks import ArgumentError
from evotensor.core.compiler_options import compile_lowered, flags_set, merged_compiler_options, platform_of
from evotensor.core.run import Loop
from evotensor.problems import Sphere

# an option every XLA of the pinned jaxlib knows (its default value: False) and that the suite's
# XLA_FLAGS never set (tests/conftest.py): a program compiled with a value XLA refuses fails, which
# shows the options reached XLA
REAL = "xla_cpu_enable_fast_min_max"
UNKNOWN = "xla_evotensor_no_such_option"


class Asking(ToyStrategy):
    """The toy strategy asking for ``options`` on every platform."""

    def __init__(self, options, population_size=8, num_dims=3):
        super().__init__(population_size, num_dims)
        self.options = options

    def compiler_options(self, platform):
        return self.options


class AskingSphere:
    """The sphere problem asking for ``options`` on every platform."""

    maximize = False

    def __init__(self, options, num_dims=3):
        self.inner = Sphere(num_dims)
        self.options = options

    def evaluate(self, key, genotypes):
        return self.inner.evaluate(key, genotypes)

    def compiler_options(self, platform):
        return self.options


def test_parts_merge_and_a_conflict_names_both_parts():
    assert merged_compiler_options(Asking({"a": 1}), None, AskingSphere({"b": 2}), platform="cpu") == {
        "a": 1,
        "b": 2,
    }
    assert merged_compiler_options(ToyStrategy(4, 2), Sphere(2), platform="cpu") == {}
    assert merged_compiler_options(Asking(None), AskingSphere({"a": 1}), platform="cpu") == {"a": 1}
    with pytest.raises(ArgumentError, match="'a'.*Asking asks for 1, AskingSphere for 2"):
        merged_compiler_options(Asking({"a": 1}), AskingSphere({"a": 2}), platform="cpu")


@pytest.mark.parametrize("bad", [["xla_cpu_use_fusion_emitters"], {1: True}, "xla"])
def test_a_part_returning_no_mapping_is_refused_by_name(bad):
    with pytest.raises(ArgumentError, match=r"Asking.compiler_options\('cpu'\) must return a mapping"):
        Loop(Asking(bad), Sphere(3))


def test_the_loop_asks_for_the_platform_it_compiles_for():
    seen = []

    class Recording(ToyStrategy):
        def compiler_options(self, platform):
            seen.append(platform)
            return {}

    Loop(Recording(4, 3), Sphere(3))
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("pop",))
    Loop(Recording(4, 3), Sphere(3), mesh=mesh)
    assert seen == [jax.default_backend(), jax.devices()[0].platform]
    assert platform_of() == jax.default_backend()


def test_options_reach_xla_in_run_run_many_and_host_runs():
    # a value XLA refuses makes each of the programs fail: the options were passed to XLA
    bad = {REAL: "not-a-bool"}
    with pytest.raises(Exception, match=REAL):
        evotensor.run(Asking(bad), Sphere(3), generations=2, key=jax.random.key(0))
    with pytest.raises(Exception, match=REAL):
        evotensor.run_many(Asking(bad), Sphere(3), generations=2, keys=jax.random.split(jax.random.key(0), 2))
    with pytest.raises(Exception, match=REAL):
        evotensor.run(Asking(bad), HostSphere(), generations=2, key=jax.random.key(0))


def test_a_known_option_gives_the_same_run_and_an_unknown_one_falls_back_to_the_defaults():
    key = jax.random.key(3)
    plain = evotensor.run(ToyStrategy(8, 3), Sphere(3), generations=5, key=key)
    for options in ({REAL: False}, {UNKNOWN: 1}, {}):
        other = evotensor.run(Asking(options), Sphere(3), generations=5, key=key)
        np.testing.assert_array_equal(np.asarray(other.best_genotype), np.asarray(plain.best_genotype))
        np.testing.assert_array_equal(other.history["best_fitness"], plain.history["best_fitness"])


def test_compile_lowered_falls_back_only_for_unknown_options():
    lowered = jax.jit(lambda x: jnp.sin(x) * 2).lower(jnp.float32(0.5))
    want = float(lowered.compile()(jnp.float32(0.5)))
    for options in (None, {}, {REAL: False}, {UNKNOWN: True}, {UNKNOWN: True}):
        assert float(compile_lowered(lowered, options)(jnp.float32(0.5))) == want
    with pytest.raises(Exception, match=REAL):  # a bad value of a known option is the caller's error
        compile_lowered(lowered, {REAL: "maybe"})
    for bad in ([REAL], {1: True}, "fast"):
        with pytest.raises(ArgumentError, match="options must be a mapping"):
            compile_lowered(lowered, bad)


def test_an_option_that_xla_flags_sets_keeps_the_process_value(monkeypatch):
    lowered = jax.jit(lambda x: jnp.sin(x) * 2).lower(jnp.float32(0.5))
    flags = "--xla_force_host_platform_device_count=1  --xla_cpu_enable_fast_min_max=false"
    monkeypatch.setenv("XLA_FLAGS", flags)
    assert flags_set() == {"xla_force_host_platform_device_count", "xla_cpu_enable_fast_min_max"}
    # the refused value is never passed: the environment's setting wins
    value = compile_lowered(lowered, {REAL: "maybe"})(jnp.float32(0.5))
    assert float(value) == pytest.approx(2 * np.sin(0.5))
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")
    with pytest.raises(Exception, match=REAL):  # other options still reach XLA
        compile_lowered(lowered, {REAL: "maybe"})
    monkeypatch.delenv("XLA_FLAGS")
    assert flags_set() == set()
