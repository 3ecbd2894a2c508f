"""Archives (evotensor.qd.archive): exact batch insertion against a sequential NumPy reference."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evotensor.qd import IMPROVED, NEW, NOT_ADDED, CVTArchive, GridArchive, grid_centroids


def reference_add(archive, state, solutions, objective, measures):
    """pyribs' batch ``add`` written out one candidate at a time (float64 means), on NumPy copies.

    Cells come from ``archive.index_of`` (tested on its own below). Returns (state dict, status,
    value, index)."""
    s = {k: np.array(v) for k, v in state.__dict__.items() if k != "fields"}
    tmin, lr = archive.threshold_min, archive.learning_rate
    objective = np.asarray(objective, np.float32)
    measures = np.asarray(measures, np.float32)
    batch = len(objective)
    cells = np.asarray(archive.index_of(jnp.asarray(np.nan_to_num(measures)))) if batch else np.zeros(0, int)
    status, value, index, can = [], [], [], []
    solutions = np.asarray(solutions, np.float32)
    for i in range(batch):
        valid = (
            np.isfinite(objective[i])
            and np.all(np.isfinite(measures[i]))
            and np.all(np.isfinite(solutions[i]))
        )
        if not valid:
            status.append(NOT_ADDED), value.append(-np.inf), index.append(-1), can.append(False)
            continue
        c = int(cells[i])
        occupied = bool(s["occupied"][c])
        threshold = s["threshold"][c] if occupied else np.float32(tmin)
        ok = bool(objective[i] > threshold)
        base = (0.0 if tmin == -math.inf else tmin) if (ok and not occupied) else threshold
        status.append((IMPROVED if occupied else NEW) if ok else NOT_ADDED)
        value.append(np.float32(objective[i] - np.float32(base)))
        index.append(c)
        can.append(ok)
    new = {k: v.copy() for k, v in s.items()}
    for c in sorted({index[i] for i in range(batch) if can[i]}):
        members = [i for i in range(batch) if can[i] and index[i] == c]
        winner = members[0]
        for i in members[1:]:
            if objective[i] > objective[winner]:  # strict: ties stay with the earliest
                winner = i
        old_threshold = s["threshold"][c] if s["occupied"][c] else tmin
        if tmin == -math.inf:
            threshold = objective[winner]
        else:
            ratio = (1.0 - lr) ** len(members)
            threshold = ratio * old_threshold + np.mean(objective[members].astype(np.float64)) * (1 - ratio)
        new["solutions"][c] = solutions[winner]
        new["objective"][c] = objective[winner]
        new["measures"][c] = measures[winner]
        new["threshold"][c] = threshold
        new["occupied"][c] = True
    return new, np.array(status, np.int32), np.array(value, np.float32), np.array(index, np.int32)


def assert_matches(archive, state, info, ref, threshold_rtol=0.0):
    new, status, value, index = ref
    np.testing.assert_array_equal(np.asarray(info.status), status)
    np.testing.assert_array_equal(np.asarray(info.index), index)
    np.testing.assert_array_equal(np.asarray(info.value), value)
    np.testing.assert_array_equal(np.asarray(state.occupied), new["occupied"])
    for name in ("solutions", "objective", "measures"):
        np.testing.assert_array_equal(np.asarray(getattr(state, name)), new[name], err_msg=name)
    np.testing.assert_allclose(np.asarray(state.threshold), new["threshold"], rtol=threshold_rtol, atol=0)


# candidates drawn from small value sets, so that collisions, exact ties and rejections are common
VALUES = st.sampled_from([-1.0, 0.0, 0.5, 0.5, 1.0, 2.0, np.nan, np.inf, -np.inf])
MEASURES = st.sampled_from([-2.0, -1.0, -0.5, -0.01, 0.0, 0.3, 0.99, 1.0, 3.0, np.nan])


@st.composite
def batches(draw, max_batch=12):
    n = draw(st.integers(0, max_batch))
    objective = draw(st.lists(VALUES, min_size=n, max_size=n))
    measures = draw(st.lists(st.tuples(MEASURES, MEASURES), min_size=n, max_size=n))
    return np.array(objective, np.float32), np.array(measures, np.float32).reshape(n, 2)


# built once: the jitted add compiles once per batch size across all examples
GRID = GridArchive(solution_dim=3, dims=(3, 4), ranges=[(-1, 1), (0, 1)])
GRID_ADD = jax.jit(GRID.add)
MAE = {
    lr: GridArchive(
        solution_dim=2, dims=(3, 4), ranges=[(-1, 1), (0, 1)], learning_rate=lr, threshold_min=0.0
    )
    for lr in (0.0, 0.01, 0.5, 1.0)
}
MAE_ADD = {lr: jax.jit(archive.add) for lr, archive in MAE.items()}


@settings(max_examples=60, deadline=None)
@given(data=st.lists(batches(), min_size=1, max_size=3))
def test_grid_add_equals_sequential_reference(data):
    archive, add = GRID, GRID_ADD
    state = archive.init()
    for k, (objective, measures) in enumerate(data):
        solutions = np.arange(len(objective) * 3, dtype=np.float32).reshape(-1, 3) + 100 * k
        ref = reference_add(archive, state, solutions, objective, measures)
        state, info = add(state, solutions, objective, measures)
        assert_matches(archive, state, info, ref)


@settings(max_examples=40, deadline=None)
@given(data=st.lists(batches(), min_size=1, max_size=3), lr=st.sampled_from([0.0, 0.01, 0.5, 1.0]))
def test_cma_mae_thresholds_equal_reference(data, lr):
    archive, add = MAE[lr], MAE_ADD[lr]
    state = archive.init()
    for objective, measures in data:
        solutions = np.random.default_rng(len(objective)).normal(size=(len(objective), 2)).astype(np.float32)
        ref = reference_add(archive, state, solutions, objective, measures)
        state, info = add(state, solutions, objective, measures)
        assert_matches(archive, state, info, ref, threshold_rtol=1e-5)  # float32 vs float64 means


# solution entries and objectives/measures including NaN, inf and huge values (float64 1e300 is inf
# in float32; 3e38 is finite): a candidate with any non-finite entry never enters
EXTREMES = st.sampled_from([0.0, 1.0, -2.5, 3e38, -3e38, 1e300, np.nan, np.inf, -np.inf])
HUGE_MEASURES = st.sampled_from([-1e30, -0.5, 0.0, 0.3, 0.99, 1e30, 1e300, np.nan, -np.inf])


@st.composite
def extreme_batches(draw, max_batch=10):
    n = draw(st.integers(0, max_batch))
    solutions = draw(st.lists(st.tuples(EXTREMES, EXTREMES, EXTREMES), min_size=n, max_size=n))
    objective = draw(st.lists(st.one_of(VALUES, EXTREMES), min_size=n, max_size=n))
    measures = draw(st.lists(st.tuples(HUGE_MEASURES, MEASURES), min_size=n, max_size=n))
    with np.errstate(over="ignore"):
        return (
            np.array(solutions, np.float64).astype(np.float32).reshape(n, 3),
            np.array(objective, np.float64).astype(np.float32),
            np.array(measures, np.float64).astype(np.float32).reshape(n, 2),
        )


@settings(max_examples=30, deadline=None)
@given(data=st.lists(extreme_batches(), min_size=1, max_size=3))
def test_add_with_nonfinite_huge_or_empty_inputs_equals_reference(data):
    """NaN/inf/huge entries anywhere in a candidate (solution, objective, measures), empty batches:
    the archive equals the sequential reference and every stored elite is finite."""
    archive, add = GRID, GRID_ADD
    state = archive.init()
    for solutions, objective, measures in data:
        ref = reference_add(archive, state, solutions, objective, measures)
        state, info = add(state, solutions, objective, measures)
        assert_matches(archive, state, info, ref)
        invalid = ~(np.isfinite(objective) & np.isfinite(measures).all(1) & np.isfinite(solutions).all(1))
        assert np.all(np.asarray(info.status)[invalid] == NOT_ADDED)
        assert np.all(np.asarray(info.index)[invalid] == -1)
        occupied = np.asarray(state.occupied)
        for name in ("solutions", "objective", "measures"):
            assert np.isfinite(np.asarray(getattr(state, name))[occupied]).all(), name


def test_a_nonfinite_solution_never_enters_even_with_a_finite_objective():
    archive = GridArchive(solution_dim=2, dims=(4,), ranges=[(0, 1)])
    solutions = np.array([[np.nan, 0.0], [0.0, np.inf], [1.0, -np.inf], [1.0, 2.0]], np.float32)
    objective = np.array([5.0, 5.0, 5.0, 1.0], np.float32)
    measures = np.array([[0.1], [0.1], [0.1], [0.1]], np.float32)
    state, info = archive.add(archive.init(), solutions, objective, measures)
    np.testing.assert_array_equal(info.status, [NOT_ADDED, NOT_ADDED, NOT_ADDED, NEW])
    np.testing.assert_array_equal(info.index, [-1, -1, -1, 0])
    np.testing.assert_array_equal(state.solutions[0], [1.0, 2.0])
    assert float(state.objective[0]) == 1.0


def test_ties_go_to_the_first_and_all_fields_come_from_one_candidate():
    archive = GridArchive(solution_dim=2, dims=(2,), ranges=[(0, 1)])
    solutions = np.array([[1, 1], [2, 2], [3, 3], [4, 4]], np.float32)
    objective = np.array([1.0, 5.0, 5.0, 5.0], np.float32)
    measures = np.array([[0.1], [0.2], [0.3], [0.9]], np.float32)
    state, info = archive.add(archive.init(), solutions, objective, measures)
    np.testing.assert_array_equal(state.solutions, [[2, 2], [4, 4]])  # candidate 1 beats 2 (tie, first)
    np.testing.assert_array_equal(state.measures, np.float32([[0.2], [0.9]]))  # from the same candidate
    np.testing.assert_array_equal(info.status, [NEW] * 4)  # against the pre-batch archive
    np.testing.assert_array_equal(info.value, objective)  # new cells count from 0 (CMA-ME)
    # a second equal objective does not replace an elite (strict >); a better one does
    state2, info2 = archive.add(state, solutions[:2] + 10, np.array([5.0, 6.0], np.float32), measures[:2])
    np.testing.assert_array_equal(info2.status, [NOT_ADDED, IMPROVED])
    np.testing.assert_array_equal(info2.value, [0.0, 1.0])
    np.testing.assert_array_equal(state2.solutions[0], [12, 12])


def test_nonfinite_candidates_never_enter():
    archive = GridArchive(solution_dim=1, dims=(4,), ranges=[(0, 1)])
    objective = np.array([np.nan, np.inf, -np.inf, 1.0, 2.0], np.float32)
    measures = np.array([[0.1], [0.1], [0.1], [np.nan], [np.inf]], np.float32)
    state, info = archive.add(archive.init(), np.zeros((5, 1)), objective, measures)
    assert not bool(state.occupied.any())
    np.testing.assert_array_equal(info.status, [0] * 5)
    np.testing.assert_array_equal(info.index, [-1] * 5)
    assert np.all(np.isneginf(info.value))


def test_empty_batch_and_batch_larger_than_archive():
    archive = GridArchive(solution_dim=2, dims=(2,), ranges=[(0, 1)])
    state, info = jax.jit(archive.add)(archive.init(), np.zeros((0, 2)), np.zeros(0), np.zeros((0, 1)))
    assert info.status.shape == (0,) and not bool(state.occupied.any())
    rng = np.random.default_rng(0)
    objective = rng.normal(size=500).astype(np.float32)
    measures = rng.uniform(size=(500, 1)).astype(np.float32)
    state, info = archive.add(state, rng.normal(size=(500, 2)), objective, measures)
    cells = np.asarray(info.index)
    for c in range(2):
        assert state.objective[c] == objective[cells == c].max()


def float64_cells(measures, dims, ranges, epsilon=1e-6):
    """pyribs' grid formula in float64, flattened row-major (the definition, written out)."""
    low, high = np.array(ranges, np.float64).T
    scaled = (np.array(dims) * (np.asarray(measures, np.float64) - low) + epsilon) / (high - low)
    cells = np.clip(np.floor(scaled), 0, np.array(dims) - 1).astype(int)
    return np.ravel_multi_index(cells.T, dims)


@pytest.mark.parametrize(
    "dims, ranges",
    [
        ((7, 5, 3), [(-1.0, 2.0), (0.0, 1.0), (-5.0, -4.0)]),
        ((10, 7), [(0, 1), (0, 3)]),
        ((316, 1), [(-0.3, 0.9), (0, 1)]),
        ((1000, 10), [(1e6 + 0.3, 1e6 + 1.3), (-0.3, 0.9)]),  # low not a float32: binary search
    ],
)
def test_grid_index_equals_the_float64_formula_exactly_even_on_boundaries(dims, ranges):
    archive = GridArchive(solution_dim=1, dims=dims, ranges=ranges)
    rng = np.random.default_rng(1)
    low, high = np.array(ranges).T
    points = [rng.uniform(low - 0.5, high + 0.5, size=(3000, len(dims))).astype(np.float32)]
    # every cell boundary, and the float32 neighbours on either side of it, on every axis
    for axis, n in enumerate(dims):
        edges = (low[axis] + (high[axis] - low[axis]) * np.arange(n + 1) / n).astype(np.float32)
        near = np.concatenate([edges, np.nextafter(edges, -np.inf), np.nextafter(edges, np.inf)])
        block = np.tile(((low + high) / 2).astype(np.float32), (near.size, 1))
        block[:, axis] = near
        points.append(block)
    m = np.concatenate(points)
    expected = float64_cells(m, dims, ranges)
    np.testing.assert_array_equal(archive.index_of(jnp.asarray(m)), expected)
    np.testing.assert_array_equal(jax.jit(archive.index_of)(jnp.asarray(m)), expected)  # jit agrees
    # -0.6 on 5 cells of [-1, 1] computes to 0.99999994 in float32: the formula (float64, with
    # epsilon) puts it in cell 1, as pyribs does; out-of-range and infinite values go to the borders
    fifths = GridArchive(solution_dim=1, dims=(5,), ranges=[(-1, 1)])
    assert np.float32(5) * (np.float32(-0.6) + np.float32(1)) / np.float32(2) < 1
    got = fifths.index_of(jnp.asarray([[-0.6], [-1.0], [1.0], [-3.0], [np.inf], [-np.inf]]))
    np.testing.assert_array_equal(got, [1, 0, 4, 0, 4, 0])
    # the cell centres of grid_centroids map back to their own cells (where float32 can tell them apart)
    if np.all(np.abs(low) < 1e3):
        np.testing.assert_array_equal(
            archive.index_of(grid_centroids(dims, ranges)), np.arange(np.prod(dims))
        )


def test_cvt_archive_uses_nearest_centroid():
    centroids = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]], np.float32)
    archive = CVTArchive(solution_dim=1, centroids=centroids, ranges=[(0, 1), (0, 1)])
    m = np.array([[0.1, 0.2], [0.9, 0.3], [0.2, 0.7], [5.0, -1.0]], np.float32)
    np.testing.assert_array_equal(archive.index_of(m), [0, 1, 2, 1])
    built = CVTArchive(solution_dim=1, centroids=16, ranges=[(0, 1), (0, 1)], samples=2000, seed=3)
    assert built.num_cells == 16 and built.centroids.shape == (16, 2)
    again = CVTArchive(solution_dim=1, centroids=16, ranges=[(0, 1), (0, 1)], samples=2000, seed=3)
    np.testing.assert_array_equal(built.centroids, again.centroids)


def test_known_cells_replace_the_search_and_out_of_range_cells_never_enter():
    archive = CVTArchive(solution_dim=1, centroids=np.eye(3, 2, dtype=np.float32), ranges=[(0, 1)] * 2)
    rng = np.random.default_rng(0)
    measures = rng.uniform(0, 1, (40, 2)).astype(np.float32)
    objective = rng.normal(size=40).astype(np.float32)
    solutions = np.arange(40, dtype=np.float32)[:, None]
    searched, info = archive.add(archive.init(), solutions, objective, measures)
    given_cells, given_info = jax.jit(archive.add)(
        archive.init(), solutions, objective, measures, cells=archive.index_of(measures)
    )
    for a, b in zip(jax.tree.leaves((searched, info)), jax.tree.leaves((given_cells, given_info))):
        np.testing.assert_array_equal(a, b)
    cells = np.array([2, 2, -1, 3], np.int32)  # the given cell wins over the measures' nearest
    state, info = archive.add(archive.init(), solutions[:4], np.ones(4), np.zeros((4, 2)), cells=cells)
    np.testing.assert_array_equal(np.asarray(state.occupied), [False, False, True])
    assert float(state.solutions[2, 0]) == 0.0  # equal objectives: the first candidate
    np.testing.assert_array_equal(np.asarray(info.status), [NEW, NEW, NOT_ADDED, NOT_ADDED])
    np.testing.assert_array_equal(np.asarray(info.index), [2, 2, -1, -1])
    for bad in (np.zeros(3, np.int32), np.zeros(4, np.float32)):
        with pytest.raises(ValueError, match="cells must be integers"):
            archive.add(archive.init(), solutions[:4], np.ones(4), np.zeros((4, 2)), cells=bad)


def test_stats_follow_pyribs_definitions():
    archive = GridArchive(solution_dim=1, dims=(4,), ranges=[(0, 1)], qd_score_offset=-10.0)
    empty = archive.stats(archive.init())
    assert int(empty["num_elites"]) == 0 and float(empty["qd_score"]) == 0.0
    assert math.isnan(float(empty["obj_max"])) and math.isnan(float(empty["obj_mean"]))
    state, _ = archive.add(
        archive.init(), np.zeros((3, 1)), np.array([1.0, -2.0, 4.0]), np.array([[0.1], [0.4], [0.6]])
    )
    stats = archive.stats(state)
    assert int(stats["num_elites"]) == 3 and float(stats["coverage"]) == 0.75
    assert float(stats["qd_score"]) == pytest.approx(11 + 8 + 14)
    assert float(stats["norm_qd_score"]) == pytest.approx(33 / 4)
    assert float(stats["obj_max"]) == 4.0 and float(stats["obj_mean"]) == pytest.approx(1.0)


def test_sample_elites_is_uniform_over_occupied_cells():
    archive = GridArchive(solution_dim=1, dims=(10,), ranges=[(0, 1)])
    measures = np.array([[0.05], [0.35], [0.95]], np.float32)
    state, _ = archive.add(archive.init(), np.zeros((3, 1)), np.ones(3), measures)
    cells = np.asarray(archive.sample_elites(jax.random.key(0), state, 30000))
    assert set(np.unique(cells)) == {0, 3, 9}
    np.testing.assert_allclose(np.bincount(cells, minlength=10)[[0, 3, 9]] / 30000, 1 / 3, atol=0.015)


def test_extra_fields_travel_with_their_elite_and_retrieve():
    archive = GridArchive(
        solution_dim=1,
        dims=(2,),
        ranges=[(0, 1)],
        extra_fields={"age": ((), jnp.int32), "v": ((2,), jnp.float32)},
    )
    fields = {"age": np.array([7, 8, 9]), "v": np.array([[1, 2], [3, 4], [5, 6]], np.float32)}
    state, _ = archive.add(
        archive.init(), np.zeros((3, 1)), np.array([1.0, 3.0, 2.0]), np.array([[0.1], [0.2], [0.8]]), fields
    )
    np.testing.assert_array_equal(state.fields["age"], [8, 9])
    np.testing.assert_array_equal(state.fields["v"], [[3, 4], [5, 6]])
    occupied, data = archive.retrieve(state, np.array([[0.3], [0.7], [np.nan]], np.float32))
    np.testing.assert_array_equal(occupied, [True, True, False])
    np.testing.assert_array_equal(data["age"][:2], [8, 9])
    np.testing.assert_array_equal(data["index"], [0, 1, -1])
    with pytest.raises(ValueError, match="exactly the keys"):
        archive.add(state, np.zeros((1, 1)), np.ones(1), np.zeros((1, 1)))
    with pytest.raises(ValueError, match=r"fields\['v'\]"):
        archive.add(
            state, np.zeros((1, 1)), np.ones(1), np.zeros((1, 1)), {"age": np.ones(1), "v": np.ones((1, 3))}
        )


def test_vmap_over_archives_equals_one_by_one():
    archive = GridArchive(solution_dim=2, dims=(5, 5), ranges=[(0, 1), (0, 1)])
    rng = np.random.default_rng(2)
    x = rng.normal(size=(4, 30, 2)).astype(np.float32)
    f = rng.normal(size=(4, 30)).astype(np.float32)
    m = rng.uniform(size=(4, 30, 2)).astype(np.float32)
    states = jax.vmap(lambda _: archive.init())(jnp.arange(4))
    batched, _ = jax.jit(jax.vmap(archive.add))(states, x, f, m)
    for i in range(4):
        single, _ = archive.add(archive.init(), x[i], f[i], m[i])
        np.testing.assert_array_equal(batched.objective[i], single.objective)
        np.testing.assert_array_equal(batched.solutions[i], single.solutions)


def test_construction_errors_name_the_argument():
    with pytest.raises(ValueError, match="dims\\[1\\]"):
        GridArchive(solution_dim=1, dims=(3, 0), ranges=[(0, 1), (0, 1)])
    with pytest.raises(ValueError, match="ranges\\[0\\]"):
        GridArchive(solution_dim=1, dims=(3,), ranges=[(1, 0)])
    with pytest.raises(ValueError, match="ranges has 1 pairs"):
        GridArchive(solution_dim=1, dims=(3, 3), ranges=[(0, 1)])
    with pytest.raises(ValueError, match="solution_dim"):
        GridArchive(solution_dim=0, dims=(3,), ranges=[(0, 1)])
    with pytest.raises(ValueError, match="without learning_rate"):
        GridArchive(solution_dim=1, dims=(3,), ranges=[(0, 1)], threshold_min=0.0)
    with pytest.raises(ValueError, match="learning_rate other than 1"):
        GridArchive(solution_dim=1, dims=(3,), ranges=[(0, 1)], learning_rate=0.1)
    with pytest.raises(ValueError, match="centroids must have shape"):
        CVTArchive(solution_dim=1, centroids=np.zeros((4, 3)), ranges=[(0, 1), (0, 1)])
    archive = GridArchive(solution_dim=2, dims=(3,), ranges=[(0, 1)])
    with pytest.raises(ValueError, match="solutions must have shape"):
        archive.add(archive.init(), np.zeros((2, 3)), np.zeros(2), np.zeros((2, 1)))
    with pytest.raises(ValueError, match="measures must have shape"):
        archive.add(archive.init(), np.zeros((2, 2)), np.zeros(2), np.zeros((2, 2)))
