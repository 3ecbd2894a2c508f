"""Evolution strategies through ``evotensor.run(..., mesh=)`` (:class:`MeshStrategy`, ``on_mesh``).

In this process (one CPU device): which strategies have the hook, what a placed strategy forwards
and refuses, and a run on a 1-device mesh against its one-device emulation. On 4 host devices (one
subprocess for every scenario of tests/es/mesh_scenarios.py and tests/neat/mesh_scenarios.py):
``run(OpenES, mesh)`` equals the existing sharded ask/tell loop and the one-device emulation, the
compiled program never holds the whole population, CMA-ES (no hook) splits only its evaluation and
equals the plain run bit for bit; SNES and PGPE spot checks. PersistentES (per-pair state kept split by
run) is the slow tier.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jax.sharding import PartitionSpec as P
from tests.es.mesh_scenarios import DIMS, POP, SineSphere, emulated_run, four_devices, two_processes

import evotensor
import evotensor.es
from evotensor.core.checks import ArgumentError
from evotensor.es import ESMC, SNES, OpenES, PersistentES
from evotensor.es.core.sharding import SHARDABLE, MeshStrategy

NAMES = [name.strip() for name in SHARDABLE.split(",")]


@pytest.fixture(scope="module")
def mesh1():
    return jax.make_mesh((1,), ("pop",))


def test_exactly_the_shardable_strategies_have_the_hook():
    strategies = [n for n in evotensor.es.__all__ if n != "VectorStrategy"]
    hooked = {n for n in strategies if callable(getattr(getattr(evotensor.es, n), "on_mesh", None))}
    assert hooked == set(NAMES)
    assert len(NAMES) == 11 and {"CMAES", "XNES", "DE", "PSO", "SimpleGA"}.isdisjoint(hooked)


def test_placed_strategy_reads_like_the_strategy(mesh1):
    es = PersistentES(8, solution={"w": jnp.zeros((2, 2))}, T=4, K=2)
    placed = es.on_mesh(mesh1)
    assert isinstance(placed, MeshStrategy) and placed.strategy is es
    assert placed.population_size == 8 and placed.order.tolist() == list(range(8))
    assert placed.num_dims == 4 and placed.space is es.space and placed.name == es.name
    assert repr(placed) == f"{es!r}.on_mesh(1 devices along 'pop')"
    with pytest.raises(AttributeError, match="_sample"):
        placed._sample  # noqa: B018  (the strategy's private hooks are not forwarded)
    state = placed.init(jax.random.key(0))
    layout = placed.state_shardings(state)
    assert jax.tree_util.tree_structure(layout) == jax.tree_util.tree_structure(state)
    assert layout.perturbation.spec == P("pop") and layout.mean.spec == P()
    assert state.perturbation.sharding.is_equivalent_to(layout.perturbation, 2)  # init placed it
    np.testing.assert_array_equal(placed.mean_solution(state)["w"], np.zeros((2, 2)))
    again = placed.on_mesh(mesh1)  # placed afresh, not nested
    assert isinstance(again, MeshStrategy) and again.strategy is es


def test_esmc_population_has_one_mean_per_device(mesh1):
    placed = ESMC(7, num_dims=2).on_mesh(mesh1)
    assert placed.population_size == 7  # pop + n - 1 with n = 1


def test_bad_mesh_and_axis_are_refused_by_name(mesh1):
    with pytest.raises(ArgumentError, match="mesh must be a jax.sharding.Mesh"):
        OpenES(8, num_dims=2).on_mesh("pop")
    with pytest.raises(ArgumentError, match="mesh_axis must name"):
        SNES(8, num_dims=2).on_mesh(mesh1, "batch")


@given(name=st.sampled_from(NAMES), pairs=st.integers(1, 4))
def test_state_layout_splits_exactly_the_per_member_fields(name, pairs):
    mesh = jax.make_mesh((1,), ("pop",))
    pop = 2 * pairs + (1 if name == "ESMC" else 0)
    kwargs = {"subspace_dims": 1} if name in ("GuidedES", "ASEBO") else {}
    es = getattr(evotensor.es, name)(pop, num_dims=3, **kwargs)
    state = jax.eval_shape(es.init, jax.random.key(0))
    layout = es.on_mesh(mesh).state_shardings(state)
    fields = set(es.shard_state_fields)
    for path, sharding in jax.tree_util.tree_flatten_with_path(layout)[0]:
        field = path[0].name
        assert sharding.spec == (P("pop") if field in fields else P()), (name, field)


def test_one_device_mesh_run_equals_its_emulation(mesh1):
    """``run`` on a 1-device mesh draws from ``fold_in(ask_key, 0)``: not the plain run's sample, but
    exactly what the emulation draws; the update agrees within float32 summation order. PersistentES:
    mirrored pairs and per-pair state (OpenES is checked on 4 devices)."""
    es = PersistentES(POP, solution=jnp.linspace(-1, 1, DIMS), optimizer=optax.sgd(0.02), T=4, K=2)
    key = jax.random.key(7)
    result = evotensor.run(es, SineSphere(), 3, key, mesh=mesh1, chunk_size=3, progress=False)
    want = emulated_run(es, SineSphere(), 3, key, devices=1)
    np.testing.assert_allclose(np.asarray(result.state.mean), want["mean"], rtol=2e-6, atol=1e-7)
    assert result.best_fitness == pytest.approx(want["best_fitness"], rel=1e-6)
    plain = evotensor.run(es, SineSphere(), 3, key, chunk_size=3, progress=False)
    assert not np.allclose(np.asarray(plain.state.mean), want["mean"])  # a different sample


# -- 4 host devices ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fast():
    return four_devices("fast")


def test_open_es_on_four_devices_equals_the_sharded_loop_and_the_emulation(fast):
    out = fast["tests.es.mesh_scenarios:scenario_open_es"]
    mesh, loop, single = out["mesh"], out["loop"], out["single"]
    np.testing.assert_allclose(mesh["mean"], loop["mean"], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(mesh["mean"], single["mean"], rtol=1e-5, atol=1e-6)
    assert mesh["best_fitness"] == pytest.approx(single["best_fitness"], rel=1e-5)
    np.testing.assert_allclose(mesh["best_genotype"], single["best_genotype"], rtol=1e-5, atol=1e-6)
    assert not np.allclose(mesh["mean"], np.linspace(-1, 1, DIMS), atol=1e-3)  # it moved
    assert out["rows_per_device"] == [POP // 4]  # each device evaluates its own rows
    assert mesh["state_specs"] == {"mean": "P()"}


def test_open_es_samples_and_evaluates_per_device(fast):
    programs = fast["tests.es.mesh_scenarios:programs"]
    open_es = programs["OpenES"]
    assert open_es["shard"] and open_es["sine_shapes"] == [f"{POP // 4},{DIMS}"]
    assert "divisible by 2 * 4" in programs["refusal"]  # pairs stay on one device


def test_no_compiled_generation_holds_a_whole_open_es_population(fast):
    open_es = fast["tests.es.mesh_scenarios:programs"]["OpenES"]
    assert not open_es["whole_population"], open_es["all_gathers"]


def test_cma_es_splits_its_evaluation(fast):
    assert fast["tests.es.mesh_scenarios:scenario_cma_es"]["rows_per_device"] == [POP // 4]
    # the compiled evaluation (its sine ops) works on [pop / 4, dims] per device
    assert fast["tests.es.mesh_scenarios:programs"]["CMAES"]["sine_shapes"] == [f"{POP // 4},{DIMS}"]


def test_cma_es_on_four_devices_equals_one_device_bit_for_bit(fast):
    out = fast["tests.es.mesh_scenarios:scenario_cma_es"]
    mesh, single = out["mesh"], out["single"]
    assert mesh["best_fitness"] == single["best_fitness"]
    assert mesh["best_genotype"] == single["best_genotype"]
    for i, (a, b) in enumerate(zip(mesh["state"], single["state"], strict=True)):
        np.testing.assert_array_equal(a, b, err_msg=f"state leaf {i}")
    assert mesh["history"].keys() == single["history"].keys()
    for name in single["history"]:
        np.testing.assert_array_equal(mesh["history"][name], single["history"][name], err_msg=name)


@pytest.mark.parametrize(
    "name, tier",
    [pytest.param(name, "slow", marks=pytest.mark.slow) for name in ("snes", "pgpe", "persistent_es")],
)
def test_more_shardable_strategies_on_four_devices(name, tier):
    out = four_devices(tier)[f"tests.es.mesh_scenarios:scenario_{name}"]
    mesh, single = out["mesh"], out["single"]
    np.testing.assert_allclose(mesh["mean"], single["mean"], rtol=1e-5, atol=1e-6)
    assert mesh["best_fitness"] == pytest.approx(single["best_fitness"], rel=1e-5)
    assert out["rows_per_device"] == [POP // 4]
    if name == "persistent_es":  # its per-pair state stayed split across the chunk boundary
        assert mesh["state_specs"]["perturbation"] == "P('pop',)"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["open_es", "snes", "pgpe", "persistent_es", "cma_es"])
def test_two_processes_with_two_devices_each(name):
    """The same scenarios over 2 processes x 2 devices (gloo): both processes return the same run,
    which matches the one-device emulation (CMA-ES: its split evaluation)."""
    first, second = (process[f"tests.es.mesh_scenarios:scenario_{name}"] for process in two_processes())
    assert first["mesh"] == second["mesh"]
    assert first["rows_per_device"] == [POP // 4]
    if name != "cma_es":
        np.testing.assert_allclose(first["mesh"]["mean"], first["single"]["mean"], rtol=1e-5, atol=1e-6)
