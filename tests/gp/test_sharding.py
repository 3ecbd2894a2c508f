"""GP on a device mesh (evotensor.gp.sharding, GP.on_mesh, SymbolicRegression.on_mesh).

The multi-device checks run ``tests/gp/mesh_scenarios.py`` in ONE subprocess with 4 CPU devices
(``tests/distributed/harness.py``), while this process computes the one-device references of the
same scenarios; ``mesh_scenarios.check`` compares them (bit for bit for the population split, within
float32 summation-order tolerances for the data axis). The in-process tests use 1-device meshes.
"""

import functools
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.distributed.harness import run_single
from tests.gp import mesh_scenarios

from evotensor.core.checks import ArgumentError
from evotensor.gp import (
    GP,
    ConstantOptimizer,
    FunctionSet,
    SymbolicClassification,
    SymbolicRegression,
    evaluate,
    fitness,
    native,
    optimize_constants,
)
from evotensor.gp.sharding import (
    ForestMesh,
    _merge_moments,
    _merge_normal_equations,
    _merge_sums,
    evaluate_on_mesh,
    fitness_on_mesh,
)

FS = FunctionSet(mesh_scenarios.FUNCTIONS)


def _scenario(name: str) -> str:
    return f"tests.gp.mesh_scenarios:scenario_{name}"


def _against_references(names: list[str]) -> dict[str, tuple[dict, dict]]:
    """``{name: (4-device result, one-device reference)}``: the subprocess and the references run at
    the same time (the references here, in this process's one device)."""
    launched: dict = {}

    def launch():
        try:
            launched["results"] = run_single([_scenario(n) for n in names], devices=4)
        except BaseException as e:  # raised below, in the test
            launched["error"] = e

    thread = threading.Thread(target=launch)
    thread.start()
    references = {n: getattr(mesh_scenarios, f"reference_{n}")() for n in names}
    thread.join()
    if "error" in launched:
        raise launched["error"]
    return {n: (launched["results"][_scenario(n)], references[n]) for n in names}


@pytest.fixture(scope="module")
def four_devices():
    return _against_references(["pop", "data", "variation"])


def test_population_split_four_ways_is_bit_identical_to_one_device(four_devices):
    result, reference = four_devices["pop"]
    mesh_scenarios.check("pop", result, reference)
    assert result["best_fitness"] < result["history"]["generation_best"][0] * 1.01  # it ran


def test_each_device_runs_the_kernels_on_its_own_slice_of_the_forest(four_devices):
    calls = four_devices["pop"][0]["custom_call_operands"]
    # the fitness kernel on [pop / 4, max_len], never on the whole forest [24, 16]
    assert ["evotensor_gp_moments", mesh_scenarios.POP // 4, mesh_scenarios.MAX_LEN] in calls
    assert not any(c[1:] == [mesh_scenarios.POP, mesh_scenarios.MAX_LEN] for c in calls), calls


def test_variation_made_per_device_is_bit_identical_to_one_device(four_devices):
    result, reference = four_devices["variation"]
    mesh_scenarios.check("variation", result, reference)  # elites, NSGA-II, a user's operators
    plan = result["plan"]
    children = mesh_scenarios.POP - 3  # 10% elites: 3
    assert plan["local_children"] < children  # each device made a share of the children, not all
    assert plan["whole"] == ["scale"]  # the operator whose draws are not laid out by rows


def test_a_generation_holds_a_handful_of_collectives(four_devices):
    # the run's compiled chunk: the gathers of the parents, the children, the told forest and (for
    # NSGA-II) the parents, of the [pop] fitness; the rejection counts; the run loop's own. Left to
    # XLA's partitioner, the variation made 229 of them here (35 all-gathers, 63 all-to-alls, 115
    # collective-permutes, 16 all-reduces)
    counts = four_devices["variation"][0]["collectives"]
    assert sum(counts.values()) <= 10, counts
    assert "all-to-all" not in counts and "collective-permute" not in counts, counts


def test_constant_tuning_on_a_mesh_holds_a_handful_of_collectives(four_devices):
    # the pop scenario tunes a quarter of the trees each generation: choosing, tuning and writing
    # back run per device (gp.sharding.tune_on_mesh). Left to XLA's partitioner around a sharded
    # forest they made 28 collectives here (10 all-to-alls, 2 collective-permutes)
    counts = four_devices["pop"][0]["collectives"]
    assert sum(counts.values()) <= 12, counts
    assert "all-to-all" not in counts and "collective-permute" not in counts, counts


def test_rows_split_over_a_data_axis_equal_one_device_to_summation_order(four_devices):
    result, reference = four_devices["data"]
    mesh_scenarios.check("data", result, reference)
    tuned, untuned = np.asarray(result["tuned_fitness"]), np.asarray(result["mse/scaled"])
    assert np.all(tuned <= untuned * (1 + 1e-6))  # constant optimization never made a tree worse
    assert np.any(tuned < untuned * 0.999)  # and improved some


def test_mesh_errors_name_what_cannot_be_split(four_devices):
    errors = four_devices["data"][0]["errors"]
    assert "population (22) must split evenly over the 4 devices" in errors["gp_population"]
    assert "X has 1 row(s), fewer than the 2 devices of data axis 'data'" in errors["few_rows"]


@pytest.mark.slow
def test_lexicase_on_four_devices_is_bit_identical():
    result, reference = _against_references(["lexicase"])["lexicase"]
    mesh_scenarios.check("lexicase", result, reference)


# ---- one device, in this process ------------------------------------------------------------------------


@functools.cache
def _forest(pop: int, max_len: int, seed: int):
    return jax.jit(GP(pop, FS, 2, max_len=max_len).init)(jax.random.key(seed)).forest


def _one_device(*names: str) -> jax.sharding.Mesh:
    return jax.make_mesh((1,) * len(names), names)


def test_a_run_on_a_one_device_mesh_equals_a_run_without(four_devices):
    reference = four_devices["pop"][1]  # the scenario's run without a mesh, computed in this process
    placed = mesh_scenarios.run_pop(_one_device("pop"))
    for key, value in mesh_scenarios._leaves(reference).items():  # bit for bit, the mean included
        np.testing.assert_array_equal(mesh_scenarios._leaves(placed)[key], value, err_msg=key)


@pytest.mark.slow  # the 4-device scenarios cover these paths; this adds classification and case errors
def test_placed_problems_score_as_on_one_device():
    X, y = mesh_scenarios._data(50)
    forest = _forest(10, 12, 1)
    mesh = _one_device("pop")
    labels = (y > 0).astype(np.int32)
    for problem in (
        SymbolicRegression(X, y, FS, case_errors=True),
        SymbolicClassification(X, labels, metric="accuracy"),
    ):
        want = jax.jit(problem.evaluate)(jax.random.key(0), forest)
        got = jax.jit(problem.on_mesh(mesh).evaluate)(jax.random.key(0), forest)
        for a, b in zip(jax.tree_util.tree_leaves(want), jax.tree_util.tree_leaves(got)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=repr(problem))


@pytest.mark.slow  # the 4-device data scenario covers it on a 2 x 2 mesh
def test_a_data_axis_of_one_device_keeps_every_metric():
    X, y = mesh_scenarios._data(37)
    forest = _forest(10, 12, 2)
    layout = ForestMesh.of(_one_device("pop", "data"), "pop", data_axis="data")

    def both(f):
        cases = mesh_scenarios.METRIC_CASES
        want = [fitness(f, X, y, FS, m, linear_scaling=s) for m, s in cases] + [evaluate(f, X, FS)]
        got = [fitness_on_mesh(layout, f, X, y, FS, m, linear_scaling=s) for m, s in cases]
        return want, got + [evaluate_on_mesh(layout, f, X, FS)]

    want, got = jax.jit(both)(forest)
    for case, w, g in zip([*mesh_scenarios.METRIC_CASES, "predictions"], want, got):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-6, err_msg=str(case))


def test_a_malformed_forest_is_refused_or_scored_worst_as_on_one_device():
    X, y = mesh_scenarios._data(20)
    forest = _forest(4, 8, 3)
    bad = forest.replace(size=forest.size.at[2, 0].set(99))
    layout = ForestMesh.of(_one_device("pop"))
    with pytest.raises(ArgumentError, match="forest tree 2 is malformed"):
        fitness_on_mesh(layout, bad, X, y, FS)
    got = jax.jit(lambda f: fitness_on_mesh(layout, f, X, y, FS))(bad)
    assert np.isinf(got[2]) and np.isfinite(np.asarray(got)[[0, 1, 3]]).all()


def test_mesh_arguments_are_checked():
    X, y = mesh_scenarios._data(20)
    problem = SymbolicRegression(X, y, FS)
    mesh = _one_device("pop", "data")
    with pytest.raises(ArgumentError, match="mesh_axis must name one of the mesh's axes"):
        problem.on_mesh(mesh, "trees")
    with pytest.raises(ArgumentError, match="data_axis must name one of"):
        problem.on_mesh(mesh, "pop", data_axis="rows")
    with pytest.raises(ArgumentError, match="data_axis must differ from the population axis"):
        problem.on_mesh(mesh, "pop", data_axis="pop")
    with pytest.raises(ArgumentError, match="use gp.on_mesh"):
        GP(4, FS, 2).state_shardings(jax.eval_shape(GP(4, FS, 2).init, jax.random.key(0)))
    with pytest.raises(ArgumentError, match="normal_equations replaces the native linearization"):
        stand_in = native.normal_equations
        optimize_constants(_forest(6, 12, 4), _X, _Y, FS, backend="jax", normal_equations=stand_in)
    jax_problem = SymbolicRegression(X, y, FS, constant_optimization=ConstantOptimizer(backend="jax"))
    with pytest.raises(ArgumentError, match="needs the native linearization"):
        jax_problem.on_mesh(mesh, "pop", data_axis="data")
    with pytest.raises(ArgumentError, match="refine_top=4 is not supported on a mesh"):
        SymbolicRegression(X, y, FS, refine_top=4).on_mesh(mesh, "pop")


def test_a_placed_problem_keeps_its_data_axis_when_the_run_places_it_again():
    X, y = mesh_scenarios._data(20)
    mesh = _one_device("pop", "data")
    placed = SymbolicRegression(X, y, FS).on_mesh(mesh, data_axis="data")
    assert placed.on_mesh(mesh, "pop")._mesh_layout.data_axis == "data"
    assert placed.on_mesh(_one_device("pop"), "pop")._mesh_layout.data_axis is None
    assert SymbolicRegression(X, y, FS)._mesh_layout is None  # placing returns a copy


def test_gp_state_shardings_split_only_the_forest():
    gp = GP(8, FS, 2, max_len=8).on_mesh(_one_device("pop"))
    shardings = gp.state_shardings(jax.eval_shape(gp.init, jax.random.key(0)))
    split = jax.tree_util.tree_leaves(shardings.forest)
    assert all(s.spec == jax.sharding.PartitionSpec("pop") for s in split)
    others = jax.tree_util.tree_leaves(shardings.replace(forest=None))
    assert others and all(s.spec == jax.sharding.PartitionSpec() for s in others)


# ---- the merge formulas: any split of the rows adds up to the whole data --------------------------------

_X, _Y = mesh_scenarios._data(64)


def _arrays():
    forest = _forest(6, 12, 4)
    return forest.opcode, forest.value, forest.size, forest.output


# few examples: every new group size compiles the kernels' calls for it
_few = settings(max_examples=6)
_cuts = st.lists(st.integers(1, 63), min_size=1, max_size=3, unique=True).map(sorted)


def _groups(cuts):
    edges = [0, *cuts, 64]
    return [(edges[i], edges[i + 1]) for i in range(len(edges) - 1)]


@_few
@given(_cuts)
def test_merged_sums_and_moments_of_any_row_split_equal_the_whole(cuts):
    yt = _Y[None]
    yct = yt - yt.mean()
    sums = [(True, native.fitness_sums(_arrays(), _X[a:b], yt[:, a:b], FS, 1, 0)) for a, b in _groups(cuts)]
    whole = native.fitness_sums(_arrays(), _X, yt, FS, 1, 0)
    for got, want in zip(_merge_sums(sums, None), whole):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5)
    moments = [
        (True, b - a, native.scaling_moments(_arrays(), _X[a:b], yct[:, a:b], FS, 1), yct[:, a:b].sum(1))
        for a, b in _groups(cuts)
    ]
    got, bad = _merge_moments(moments, 64, None)
    want, want_bad = native.scaling_moments(_arrays(), _X, yct, FS, 1)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=1e-4)
    np.testing.assert_array_equal(np.asarray(bad), np.asarray(want_bad))


@pytest.mark.slow  # the 4-device data scenario's constant optimization covers the merge end to end
@_few
@given(_cuts)
def test_merged_normal_equations_of_any_row_split_equal_the_whole(cuts):
    slots = jnp.tile(jnp.arange(4, dtype=jnp.int32), (6, 1))
    arrays = _arrays()
    stats = [
        (True, b - a, native.normal_equations(arrays, _X[a:b], _Y[a:b], slots, FS)) for a, b in _groups(cuts)
    ]
    got = _merge_normal_equations(stats, None)
    want = native.normal_equations(_arrays(), _X, _Y, slots, FS)
    for name, g, w in zip(("mean", "cov", "sse", "bad"), got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=2e-5, atol=1e-3, err_msg=name)
