"""``run(..., mesh=)`` and the helpers of evotensor.core.mesh.

In this process (one CPU device): a 1-device mesh gives bit-identical results to no mesh (compiled
and host-evaluated problems, resume across the two), the mesh arguments are checked before anything
is written, and ``place`` / ``population_shardings`` keep their invariants. On 4 host devices (one
subprocess running the scenarios of tests/core/mesh_scenarios.py through tests/distributed/harness;
the host-evaluated problem, marked fusion_emitters, in its own)
and on 2 processes x 2 devices (slow tier): the same results as on one device, the evaluation split,
a strategy's state layout kept, resume on another device count.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jax.sharding import AbstractMesh, AxisType, NamedSharding
from jax.sharding import PartitionSpec as P
from tests.core.mesh_scenarios import HostRastrigin, MemberToy
from tests.core.toy import ToyStrategy
from tests.distributed.harness import run_multiprocess, run_single

import evotensor
from evotensor.core.checks import ArgumentError
from evotensor.core.mesh import (
    auto_mesh,
    place,
    population_shardings,
    replicated,
    spans_processes,
)
from evotensor.problems import Rastrigin

SCENARIOS = "tests.core.mesh_scenarios:scenario_"
ALL = [
    SCENARIOS + name
    for name in (
        "toy_equals_one_device",
        "state_hook_keeps_member_state_split",
        "resume_on_another_device_count",
        "refusals",
        "host_problem_on_mesh",
    )
]


def leaves_equal(a, b) -> bool:
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return len(la) == len(lb) and all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(la, lb))


def same_run(a, b) -> None:
    assert leaves_equal(a.state, b.state)
    assert leaves_equal(a.best_genotype, b.best_genotype)
    assert a.best_fitness == b.best_fitness
    assert a.history.keys() == b.history.keys()
    for name in a.history:
        np.testing.assert_array_equal(a.history[name], b.history[name], err_msg=name)


@pytest.fixture(scope="module")
def mesh1():
    return jax.make_mesh((1,), ("pop",))


RUN = dict(chunk_size=3, progress=False)  # 6 generations: two chunks of one compiled length


def _toy_run(problem, **kw):
    return evotensor.run(ToyStrategy(8, 4), problem, 6, jax.random.key(4), **RUN, **kw)


@pytest.fixture(scope="module")
def plain_toy():
    return _toy_run(Rastrigin(4))


@pytest.mark.parametrize(
    "make, problem",
    [(ToyStrategy, Rastrigin), (MemberToy, Rastrigin), (ToyStrategy, lambda n: HostRastrigin())],
    ids=["no-hooks", "hooks", "host-problem"],
)
def test_one_device_mesh_is_bit_identical_to_no_mesh(make, problem, mesh1):
    def once(**kw):
        return evotensor.run(make(8, 4), problem(4), 6, jax.random.key(4), **RUN, **kw)

    plain, meshed = once(), once(mesh=mesh1)
    same_run(plain, meshed)
    assert plain.history["generation_best"][0] != plain.history["generation_best"][-1]
    assert meshed.best_genotype.sharding.is_fully_replicated


def test_a_checkpoint_without_mesh_resumes_on_a_mesh(tmp_path, mesh1, plain_toy):
    evotensor.run(ToyStrategy(8, 4), Rastrigin(4), 3, jax.random.key(4), **RUN, run_dir=tmp_path)
    same_run(plain_toy, _toy_run(Rastrigin(4), run_dir=tmp_path, resume=True, mesh=mesh1))


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"mesh": "cpu:0"}, "mesh must be a jax.sharding.Mesh"),
        ({"mesh": jax.sharding.AbstractMesh((1,), ("pop",))}, "mesh must be a jax.sharding.Mesh"),
        ({"mesh_axis": "batch"}, "mesh_axis must name one of the mesh's axes \\('pop',\\), got 'batch'"),
        ({"mesh_axis": 0}, "mesh_axis must name"),
    ],
)
def test_mesh_arguments_are_refused_by_name_before_anything_is_written(changes, match, tmp_path, mesh1):
    kw = {"mesh": mesh1, **changes}
    with pytest.raises(ArgumentError, match=match):
        _toy_run(Rastrigin(4), run_dir=tmp_path / "run", **kw)
    assert not (tmp_path / "run").exists()


def test_explicit_axes_become_auto_with_the_same_devices(mesh1):
    assert mesh1.axis_types == (AxisType.Explicit,)  # what jax.make_mesh gives by default
    auto = auto_mesh(mesh1)
    assert auto.axis_types == (AxisType.Auto,) and auto.axis_names == mesh1.axis_names
    assert auto.devices.tolist() == mesh1.devices.tolist()
    assert auto_mesh(auto) is auto
    assert not spans_processes(mesh1)


def test_place_puts_keys_numbers_and_arrays_on_the_mesh(mesh1):
    tree = {"key": jax.random.key(7), "step": 0.5, "x": np.arange(6, dtype=np.float64).reshape(3, 2)}
    placed = place(tree, replicated(auto_mesh(mesh1)))
    assert jax.random.key_impl(placed["key"]) == jax.random.key_impl(tree["key"])
    np.testing.assert_array_equal(jax.random.key_data(placed["key"]), jax.random.key_data(tree["key"]))
    assert placed["x"].dtype == jnp.float32  # as JAX computes (no x64)
    np.testing.assert_array_equal(placed["x"], tree["x"])
    assert all(leaf.sharding == replicated(auto_mesh(mesh1)) for leaf in jax.tree_util.tree_leaves(placed))
    again = place(placed, replicated(auto_mesh(mesh1)))
    assert again["x"] is placed["x"]  # already laid out: not copied


@given(
    devices=st.integers(1, 8),
    size=st.integers(1, 24),
    leading=st.lists(st.integers(0, 24), min_size=1, max_size=4),
)
def test_population_leaves_split_only_when_they_are_the_population(devices, size, leading):
    mesh = AbstractMesh((devices,), ("pop",))
    tree = [jax.ShapeDtypeStruct((n, 2), jnp.float32) for n in leading] + [
        jax.ShapeDtypeStruct((), jnp.int32)
    ]
    specs = [s.spec for s in population_shardings(tree, mesh, "pop", size)]
    for n, spec in zip(leading, specs):
        assert spec == (P("pop") if n == size and n % devices == 0 else P())
    assert specs[-1] == P()  # a scalar is never split
    assert all(isinstance(s, NamedSharding) for s in population_shardings(tree, mesh, "pop", size))


HOST_PROBLEM = SCENARIOS + "host_problem_on_mesh"


@pytest.fixture(scope="module")
def four_devices():
    return run_single([name for name in ALL if name != HOST_PROBLEM], devices=4)


def _same_summary(a: dict, b: dict) -> None:
    assert a["center"] == b["center"] and a["best_genotype"] == b["best_genotype"]
    assert a["best_fitness"] == b["best_fitness"]
    assert a["history"].keys() == b["history"].keys()
    for name in a["history"]:  # the run loop sums the fitness whole on every device: exact
        assert a["history"][name] == b["history"][name], name


def test_four_devices_equal_one_device(four_devices):
    toy = four_devices[SCENARIOS + "toy_equals_one_device"]
    _same_summary(toy["mesh"], toy["single"])
    assert toy["rows_per_device"] == [2]  # the 8 individuals, 2 per device, in the one compiled chunk
    assert toy["center_replicated"]
    assert toy["single"]["center"] != [3.0] * 4  # the run moved from its start: equality is not trivial


def test_a_strategy_state_hook_keeps_its_layout_on_four_devices(four_devices):
    got = four_devices[SCENARIOS + "state_hook_keeps_member_state_split"]
    assert got["spec"] == "P('pop',)" and got["rows_here"] == [2, 2, 2, 2]
    _same_summary(got["mesh"], four_devices[SCENARIOS + "toy_equals_one_device"]["single"])


def test_a_four_device_checkpoint_resumes_on_four_devices_and_on_one(four_devices):
    toy = four_devices[SCENARIOS + "toy_equals_one_device"]
    resumed = four_devices[SCENARIOS + "resume_on_another_device_count"]
    _same_summary(resumed["mesh"], toy["mesh"])
    _same_summary(resumed["one_device"], toy["single"])


def test_mesh_refusals_on_four_devices(four_devices):
    messages = four_devices[SCENARIOS + "refusals"]
    assert "population (6) must split evenly over the 4 devices of mesh axis 'pop'" in messages["indivisible"]
    assert "mesh_axis must name one of the mesh's axes ('pop',), got 'batch'" in messages["axis"]


@pytest.mark.fusion_emitters
def test_host_problem_on_four_devices_equals_one_device():
    host = run_single([HOST_PROBLEM], devices=4)[HOST_PROBLEM]
    _same_summary(host["mesh"], host["single"])


@pytest.mark.slow
def test_two_processes_equal_one_process(four_devices):
    """2 processes x 2 devices joined by jax.distributed: every process gets the single-process
    results, resumes a checkpoint written by process 0 on both meshes, and refuses a host-evaluated
    problem on a mesh across processes."""
    toy = four_devices[SCENARIOS + "toy_equals_one_device"]
    for process in run_multiprocess(ALL, processes=2, devices_per_process=2):
        got = process[SCENARIOS + "toy_equals_one_device"]
        _same_summary(got["mesh"], toy["single"])
        assert got["rows_per_device"] == [2]
        hook = process[SCENARIOS + "state_hook_keeps_member_state_split"]
        assert hook["rows_here"] == [2, 2]
        _same_summary(hook["mesh"], toy["single"])
        resumed = process[SCENARIOS + "resume_on_another_device_count"]
        _same_summary(resumed["mesh"], toy["mesh"])
        _same_summary(resumed["one_device"], toy["single"])
        assert "several processes" in process[SCENARIOS + "host_problem_on_mesh"]["refused"]
        assert process[SCENARIOS + "refusals"] == four_devices[SCENARIOS + "refusals"]
