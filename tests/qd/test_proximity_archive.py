"""ProximityArchive (novelty search): batch insertion against a slow float64 reference of the rules in
evotensor.qd.proximity_archive's docstring, invariants, ties, decay, errors and the MAP-Elites loop."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evotensor.core.checks import ArgumentError
from evotensor.qd import MAPElites, ProximityArchive
from evotensor.qd.archive import IMPROVED, NEW, NOT_ADDED
from evotensor.qd.emitters.rankers import get_ranker


def reference_add(archive, state, solutions, objective, measures):
    """The module docstring's rules, one candidate at a time in float64 (the archive as a list of rows).

    Returns ``(rows, threshold, stall, dropped, info)`` where ``rows`` is the list of elites
    ``(solution, objective, measures)`` after the batch and ``info`` a dict of ``[B]`` arrays.
    """
    size = int(np.sum(state["occupied"]))
    stored_m = state["measures"][:size].astype(np.float64)
    stored_f = state["objective"][:size].astype(np.float64)
    rows = [(state["solutions"][i], state["objective"][i], state["measures"][i]) for i in range(size)]
    thr = float(state["threshold"])
    B = len(objective)
    info = {k: np.zeros(B, t) for k, t in (("status", int), ("value", float), ("index", int))}
    info.update(novelty=np.zeros(B), local=np.zeros(B, int))
    novel = np.zeros(B, bool)
    novel_rows, claims = [], {}
    k = min(archive.k_neighbors, size)
    for b in range(B):
        m = measures[b].astype(np.float64)
        ok = np.isfinite(objective[b]) and np.all(np.isfinite(m)) and np.all(np.isfinite(solutions[b]))
        if size == 0:
            nov, near, local = thr, -1, 0
        else:
            d = np.sqrt(np.sum((stored_m - np.where(ok, m, 0.0)) ** 2, axis=1))
            order = sorted(range(size), key=lambda i: (d[i], i))[:k]
            nov = float(np.mean(d[order]))
            near = order[0]
            local = int(sum(stored_f[i] < objective[b] for i in order))
        info["novelty"][b] = nov
        if not ok:
            info["status"][b], info["index"][b] = NOT_ADDED, -1
            info["value"][b] = info["novelty"][b] = -np.inf
            continue
        info["local"][b] = local
        if nov >= thr:
            novel[b] = True
            info["value"][b] = objective[b]
            if size + len(novel_rows) < archive.capacity:
                info["status"][b], info["index"][b] = NEW, size + len(novel_rows)
                novel_rows.append((solutions[b], objective[b], measures[b]))
            else:
                info["status"][b], info["index"][b] = NOT_ADDED, near
            continue
        info["value"][b] = objective[b] - stored_f[near]
        info["index"][b] = near
        if archive.local_competition and objective[b] > stored_f[near]:
            info["status"][b] = IMPROVED
            best = claims.get(near)
            if best is None or objective[b] > objective[best]:
                claims[near] = b
    for near, b in claims.items():
        rows[near] = (solutions[b], objective[b], measures[b])
    dropped = int(state["dropped"]) + int(np.sum(novel & (info["status"] != NEW)))
    stall = int(state["stall"])
    if archive.threshold_decay_rate is not None:
        stall = stall + 1 if not novel.any() else 0
        if stall >= archive.threshold_decay_itrs:
            thr, stall = max(archive.threshold_decay_min, thr * archive.threshold_decay_rate), 0
    return rows + novel_rows, thr, stall, dropped, info


def run_generations(strategy, generations):
    """``generations`` jitted ask/evaluate/tell steps of a MAP-Elites ``strategy`` on ``f = |x|^2``
    with measures ``tanh(x[:2])``: ``-> (state, last metrics)``."""
    from evotensor.core.evaluation import Evaluation

    @jax.jit
    def step(state, key):
        x, state = strategy.ask(key, state, None)
        evaluation = Evaluation(fitness=jnp.sum(x**2, axis=1), descriptor=jnp.tanh(x[:, :2]))
        return strategy.tell(key, state, x, evaluation, None)

    state, metrics = strategy.init(jax.random.key(0), None), None
    for i in range(generations):
        state, metrics = step(state, jax.random.key(i + 1))
    return state, metrics


def as_numpy(state):
    return {
        "solutions": np.asarray(state.solutions),
        "objective": np.asarray(state.objective),
        "measures": np.asarray(state.measures),
        "occupied": np.asarray(state.occupied),
        "threshold": np.asarray(state.novelty_threshold),
        "stall": np.asarray(state.stall),
        "dropped": np.asarray(state.dropped),
    }


@st.composite
def scenarios(draw):
    capacity = draw(st.integers(1, 12))
    archive = ProximityArchive(
        solution_dim=2,
        measure_dim=draw(st.integers(1, 3)),
        capacity=capacity,
        k_neighbors=draw(st.integers(1, 5)),
        novelty_threshold=draw(st.sampled_from([0.0, 0.05, 0.2, 0.5])),
        local_competition=draw(st.booleans()),
        threshold_decay_rate=draw(st.sampled_from([None, 0.5, 0.9])),
        threshold_decay_itrs=draw(st.integers(1, 2)),
        threshold_decay_min=draw(st.sampled_from([0.0, 0.01])),
    )
    seed = draw(st.integers(0, 2**31 - 1))
    sizes = draw(st.lists(st.integers(0, 7), min_size=1, max_size=4))
    nonfinite = draw(st.booleans())
    return archive, seed, sizes, nonfinite


def check_against_reference(archive, seed, sizes, nonfinite, ties=False):
    """Feed batches to ``archive`` and compare every call with :func:`reference_add` (from the same
    state): novelty always, the rest where no candidate lies within float32 rounding of the
    threshold. ``ties``: measures on a coarse lattice, so that many distances are equal."""
    rng = np.random.default_rng(seed)
    state = archive.init()
    add = jax.jit(archive.add)
    for B in sizes:
        x = rng.normal(size=(B, 2)).astype(np.float32)
        f = rng.normal(size=B).astype(np.float32)
        m = rng.uniform(0.0, 1.0, (B, archive.measure_dim)).astype(np.float32)
        if ties:
            m, f = np.round(m * 4) / 4, np.round(f * 2) / 2
        if nonfinite and B:
            f[rng.integers(B)] = np.nan
            m[rng.integers(B), 0] = np.inf
        before = as_numpy(state)
        rows, thr, stall, dropped, ref = reference_add(archive, before, x, f, m)
        state, info = add(state, x, f, m)
        np.testing.assert_allclose(np.asarray(info.novelty), ref["novelty"], rtol=1e-5, atol=1e-6)
        near_boundary = np.abs(ref["novelty"] - before["threshold"]) < 1e-5
        if near_boundary.any() and not ties:  # float32 may decide either way there
            continue
        np.testing.assert_array_equal(np.asarray(info.status), ref["status"])
        np.testing.assert_array_equal(np.asarray(info.index), ref["index"])
        np.testing.assert_allclose(np.asarray(info.value), ref["value"], rtol=1e-6, atol=1e-6)
        valid = np.isfinite(ref["value"])
        np.testing.assert_array_equal(np.asarray(info.local_competition)[valid], ref["local"][valid])
        after = as_numpy(state)
        n = len(rows)
        assert after["occupied"].tolist() == [True] * n + [False] * (archive.capacity - n)  # a prefix
        for i, (sol, obj, mea) in enumerate(rows):
            np.testing.assert_array_equal(after["solutions"][i], sol)
            assert after["objective"][i] == obj
            np.testing.assert_array_equal(after["measures"][i], mea)
        assert np.isfinite(after["objective"][:n]).all() and np.isfinite(after["measures"][:n]).all()
        assert float(after["threshold"]) == pytest.approx(thr, rel=1e-6)
        assert int(after["stall"]) == stall and int(after["dropped"]) == dropped


@settings(max_examples=30, deadline=None)  # each example compiles its archive's add
@given(scenario=scenarios())
def test_add_equals_the_float64_reference_batch_by_batch(scenario):
    check_against_reference(*scenario)


@pytest.mark.parametrize("local_competition", [False, True])
def test_blocks_of_rows_merge_exactly_with_ties_on_a_lattice(monkeypatch, local_competition):
    """Small distance blocks (3 rows) against a larger archive, measures and objectives on a coarse
    lattice: equal distances everywhere, so the lowest-row rule decides the neighbours and the
    replacements across blocks."""
    from evotensor.qd import proximity_archive

    monkeypatch.setattr(proximity_archive, "_BLOCK", 3)
    archive = ProximityArchive(
        solution_dim=2,
        measure_dim=2,
        capacity=20,
        k_neighbors=4,
        novelty_threshold=0.3,
        local_competition=local_competition,
    )
    for seed in range(4):
        check_against_reference(archive, seed, [6, 7, 5, 9, 8], nonfinite=seed % 2 == 1, ties=True)


@pytest.mark.parametrize("ties, local_competition", [(False, True), (True, False)])
def test_the_first_measure_window_is_exact_and_falls_back_where_it_cannot_be(
    monkeypatch, ties, local_competition
):
    """Windows of 12 elites along the first measure against archives of up to 60: some queries are
    answered inside their window, the others (many here, so both the partial and the whole
    fallback run) by the blocks; every call equals the reference, ties included."""
    from evotensor.qd import proximity_archive

    monkeypatch.setattr(proximity_archive, "_HALF_WINDOW", 6)
    monkeypatch.setattr(proximity_archive, "_BLOCK", 7)
    archive = ProximityArchive(
        solution_dim=2,
        measure_dim=2,
        capacity=60,
        k_neighbors=1 if local_competition else 3,
        novelty_threshold=0.08,
        local_competition=local_competition,
    )
    for seed in range(3):
        sizes = [16, 9, 16, 12, 16, 7, 16, 16] if seed else [32, 32, 32]
        check_against_reference(archive, seed, sizes, nonfinite=seed == 1, ties=ties)


def test_the_window_answers_most_queries_and_equals_the_blocks(monkeypatch):
    from evotensor.qd import proximity_archive

    monkeypatch.setattr(proximity_archive, "_HALF_WINDOW", 22)
    archive = ProximityArchive(
        solution_dim=1, measure_dim=2, capacity=400, k_neighbors=4, novelty_threshold=0.0
    )
    rng = np.random.default_rng(5)
    state, _ = archive.add(archive.init(), jnp.zeros((300, 1)), None, rng.uniform(size=(300, 2)))
    queries = jnp.asarray(rng.uniform(size=(64, 2)), jnp.float32)
    d2, row, exact = archive._window(state, queries)
    assert 0.5 < float(exact.mean()) < 1.0  # both kinds of query occur
    d2_all, row_all = archive._blocks(state, queries)
    ok = np.asarray(exact)
    np.testing.assert_array_equal(np.asarray(d2)[ok], np.asarray(d2_all)[ok])
    np.testing.assert_array_equal(np.asarray(row)[ok], np.asarray(row_all)[ok])
    distance, row_n, _ = archive._neighbours(state, queries)
    np.testing.assert_array_equal(np.asarray(distance), np.sqrt(np.asarray(d2_all)))
    np.testing.assert_array_equal(np.asarray(row_n), np.asarray(row_all))


def test_the_first_batch_enters_whole_and_equal_distances_go_to_the_lowest_row():
    archive = ProximityArchive(
        solution_dim=1,
        measure_dim=1,
        capacity=6,
        k_neighbors=2,
        novelty_threshold=10.0,
        local_competition=True,
    )
    state, info = archive.add(
        archive.init(), jnp.zeros((3, 1)), jnp.array([0.0, 1.0, 2.0]), jnp.array([[0.0], [2.0], [0.0]])
    )
    assert info.status.tolist() == [NEW] * 3 and info.novelty.tolist() == [10.0] * 3  # empty: the threshold
    # [1.0] is 1 away from rows 0, 1 and 2; the nearest is row 0 (objective 0), so 0.5 beats it
    state, info = archive.add(state, jnp.ones((2, 1)), jnp.array([0.5, 0.5]), jnp.array([[1.0], [1.0]]))
    assert info.index.tolist() == [0, 0] and info.status.tolist() == [IMPROVED, IMPROVED]
    assert info.novelty.tolist() == [1.0, 1.0] and info.local_competition.tolist() == [1, 1]
    # both beat row 0 with equal objectives: the first in the batch replaces it
    assert float(state.objective[0]) == 0.5 and float(state.measures[0, 0]) == 1.0
    assert archive.nearest(state, jnp.array([[1.9], [-5.0]])).tolist() == [1, 2]  # row 0 is now at 1.0


def test_without_local_competition_nothing_is_replaced_and_a_full_archive_counts_its_drops():
    archive = ProximityArchive(
        solution_dim=1, measure_dim=1, capacity=3, k_neighbors=1, novelty_threshold=0.5
    )
    state, _ = archive.add(archive.init(), jnp.zeros((2, 1)), None, jnp.array([[0.0], [1.0]]))
    state, info = archive.add(
        state, jnp.ones((3, 1)), jnp.array([9.0, 9.0, 9.0]), jnp.array([[0.1], [3.0], [5.0]])
    )
    # 0.1 is not novel and may not replace; 3.0 takes the last row; 5.0 is novel but does not fit
    assert info.status.tolist() == [NOT_ADDED, NEW, NOT_ADDED] and info.index.tolist() == [0, 2, 1]
    assert int(state.dropped) == 1 and int(state.occupied.sum()) == 3
    assert state.objective.tolist() == [0.0, 0.0, 9.0]
    with pytest.raises(ArgumentError, match="local_competition"):
        ProximityArchive(
            solution_dim=1,
            measure_dim=1,
            capacity=3,
            k_neighbors=1,
            novelty_threshold=0.5,
            local_competition=True,
        ).add(state, jnp.ones((1, 1)), None, jnp.ones((1, 1)))


def test_threshold_decays_after_calls_without_novelty_and_not_below_its_minimum():
    archive = ProximityArchive(
        solution_dim=1,
        measure_dim=1,
        capacity=4,
        k_neighbors=1,
        novelty_threshold=1.0,
        threshold_decay_rate=0.5,
        threshold_decay_itrs=2,
        threshold_decay_min=0.3,
    )
    state, _ = archive.add(archive.init(), jnp.zeros((1, 1)), None, jnp.zeros((1, 1)))
    seen = []
    for _ in range(6):  # 0.1 away: novel only once the threshold is below 0.1 (never: min 0.3)
        state, info = archive.add(state, jnp.zeros((1, 1)), None, jnp.array([[0.1]]))
        seen.append(float(state.novelty_threshold))
    assert seen == pytest.approx([1.0, 0.5, 0.5, 0.3, 0.3, 0.3]) and int(state.occupied.sum()) == 1


def test_stats_follow_pyribs_unstructured_conventions_and_map_elites_runs_novelty_search():
    archive = ProximityArchive(
        solution_dim=4,
        measure_dim=2,
        capacity=256,
        k_neighbors=5,
        novelty_threshold=0.1,
        qd_score_offset=-1.0,
    )
    empty = archive.stats(archive.init())
    assert float(empty["coverage"]) == 0.0 and int(empty["num_elites"]) == 0
    from evotensor.qd import GaussianEmitter

    strategy = MAPElites(archive, [GaussianEmitter(0.3, jnp.zeros(4), batch_size=32)])
    state, _ = run_generations(strategy, 20)
    stats = archive.stats(state.archive)
    n = int(stats["num_elites"])
    assert 20 < n <= 256 and float(stats["coverage"]) == 1.0
    objective = np.asarray(state.archive.objective)[:n]
    assert float(stats["norm_qd_score"]) == pytest.approx(float(np.mean(objective + 1.0)), rel=1e-5)
    m = np.asarray(state.archive.measures)[:n]
    gaps = np.sqrt(((m[:, None] - m[None]) ** 2).sum(-1)) + np.eye(n) * 9
    assert gaps.min() > 0.0  # novelty kept duplicates out


def test_vmap_over_archives_equals_one_by_one():
    archive = ProximityArchive(
        solution_dim=2,
        measure_dim=2,
        capacity=8,
        k_neighbors=3,
        novelty_threshold=0.2,
        local_competition=True,
    )
    rng = np.random.default_rng(3)
    x = rng.normal(size=(3, 6, 2)).astype(np.float32)
    f = rng.normal(size=(3, 6)).astype(np.float32)
    m = rng.uniform(size=(3, 6, 2)).astype(np.float32)
    states = jax.vmap(lambda _: archive.init())(jnp.arange(3))
    together, info = jax.vmap(archive.add)(states, x, f, m)
    for i in range(3):
        alone, one = archive.add(archive.init(), x[i], f[i], m[i])
        row = jax.tree.map(lambda t, i=i: t[i], (together, info))
        for a, b in zip(jax.tree.leaves((alone, one)), jax.tree.leaves(row), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"capacity": 0}, "capacity"),
        ({"k_neighbors": 0}, "k_neighbors"),
        ({"novelty_threshold": -1.0}, "novelty_threshold"),
        ({"novelty_threshold": float("nan")}, "novelty_threshold"),
        ({"local_competition": 1}, "local_competition"),
        ({"threshold_decay_rate": 1.5}, "threshold_decay_rate"),
        ({"threshold_decay_itrs": 0}, "threshold_decay_itrs"),
        ({"threshold_decay_min": -0.1}, "threshold_decay_min"),
        ({"measure_dim": 0}, "measure_dim"),
        ({"capacity": 10**12}, "capacity"),
    ],
)
def test_construction_errors_name_the_argument(kwargs, match):
    args = dict(solution_dim=2, measure_dim=2, capacity=8, k_neighbors=3, novelty_threshold=0.1)
    with pytest.raises(ArgumentError, match=match):
        ProximityArchive(**{**args, **kwargs})


def test_bad_state_and_cell_queries_get_clear_errors():
    archive = ProximityArchive(
        solution_dim=2, measure_dim=2, capacity=8, k_neighbors=3, novelty_threshold=0.1
    )
    from evotensor.qd import GridArchive

    grid = GridArchive(solution_dim=2, dims=(4, 4), ranges=[(0, 1), (0, 1)])
    with pytest.raises(ArgumentError, match="ProximityState"):
        archive.add(grid.init(), jnp.zeros((1, 2)), jnp.zeros(1), jnp.zeros((1, 2)))
    with pytest.raises(ArgumentError, match="no cells"):
        archive.index_of(jnp.zeros((1, 2)))
    with pytest.raises(ArgumentError, match="measures must have shape"):
        archive.add(archive.init(), jnp.zeros((1, 2)), jnp.zeros(1), jnp.zeros((1, 3)))
    with pytest.raises(ArgumentError, match=r"measures must have shape \[B, 2\]"):
        archive.nearest(archive.init(), jnp.zeros((4, 3)))
    found, data = archive.retrieve(archive.init(), jnp.zeros((2, 2)))  # empty: nothing found
    assert not found.any() and data["index"].tolist() == [-1, -1]


def test_novelty_ranker_orders_by_novelty_and_a_mesh_is_refused():
    from evotensor.qd import GridArchive, ShardedArchive

    archive = ProximityArchive(
        solution_dim=2, measure_dim=1, capacity=8, k_neighbors=1, novelty_threshold=0.1
    )
    state, _ = archive.add(archive.init(), jnp.zeros((1, 2)), None, jnp.zeros((1, 1)))
    measures = jnp.array([[0.5], [0.05], [2.0], [0.5]])
    _, info = archive.add(state, jnp.zeros((4, 2)), None, measures)
    order, values = get_ranker("nov").order(jnp.zeros(4), measures, info, None)
    assert order.tolist() == [2, 0, 3, 1] and values.tolist() == pytest.approx([0.5, 0.05, 2.0, 0.5])
    grid = GridArchive(solution_dim=2, dims=(4,), ranges=[(0, 1)])
    _, grid_info = grid.add(grid.init(), jnp.zeros((4, 2)), jnp.zeros(4), measures)
    with pytest.raises(ArgumentError, match="'nov' needs an archive"):
        get_ranker("nov").order(jnp.zeros(4), measures, grid_info, None)
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("pop",))
    with pytest.raises(ArgumentError, match="cannot be split over devices"):
        ShardedArchive(archive, mesh, "pop")


@pytest.mark.parametrize("ranker", ["nov", "nslc"])
def test_a_cma_emitter_ranks_its_batch_by_novelty_inside_map_elites(ranker):
    """MAP-Elites hands each emitter every field the archive reports (``novelty``,
    ``local_competition``)."""
    from evotensor.qd import CMAESEmitter

    archive = ProximityArchive(
        solution_dim=3,
        measure_dim=2,
        capacity=200,
        k_neighbors=3,
        novelty_threshold=0.05,
        local_competition=True,
    )
    emitter = CMAESEmitter(np.zeros(3), 0.3, ranker=ranker, batch_size=8)
    state, metrics = run_generations(MAPElites(archive, [emitter]), 15)
    assert int(state.archive.occupied.sum()) > 15 and int(metrics["num_elites"]) > 15
    assert int(state.emitters[0].iterations) == 15


def reference_nslc_order(novelty, local):
    """pyribs' NSLC ranking in plain Python: fronts of the non-dominated sort of (novelty, local
    competition), both maximized, each ordered by NSGA-II crowding distance (largest first, ties by
    position); invalid candidates (non-finite novelty) last, by position."""
    n = len(novelty)
    valid = [i for i in range(n) if np.isfinite(novelty[i])]

    def dominates(a, b):
        return (
            novelty[a] >= novelty[b]
            and local[a] >= local[b]
            and (novelty[a], local[a]) != (novelty[b], local[b])
        )

    left, order = list(valid), []
    while left:
        front = [i for i in left if not any(dominates(j, i) for j in left)]
        crowd = dict.fromkeys(front, 0.0)
        for values in (novelty, local):
            ranked = sorted(front, key=lambda i: (-values[i], i))  # costs (negated), ascending
            crowd[ranked[0]] = crowd[ranked[-1]] = math.inf
            span = values[ranked[0]] - values[ranked[-1]]
            if span == 0:
                continue
            for a, b, c in zip(ranked, ranked[1:], ranked[2:]):
                crowd[b] += (values[a] - values[c]) / span
        order += sorted(front, key=lambda i: (-crowd[i], i))
        left = [i for i in left if i not in front]
    return order + [i for i in range(n) if i not in valid]


# one jitted ranker for every example (a fresh jit per example recompiled each time)
_NSLC_ORDER = jax.jit(lambda info: get_ranker("nslc").order(None, None, info, None))


_NSLC_ROW = st.tuples(st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, float("-inf")]), st.integers(0, 4))


# three batch sizes: each size compiles the ranker once (every size from 1 to 12 compiled twelve times)
@settings(max_examples=80, deadline=None)
@given(data=st.sampled_from([1, 5, 12]).flatmap(lambda n: st.lists(_NSLC_ROW, min_size=n, max_size=n)))
def test_the_nslc_ranker_equals_the_reference(data):
    from evotensor.qd.archive import AddInfo
    from evotensor.qd.proximity_archive import ProximityAddInfo

    novelty = np.array([d[0] for d in data], np.float32)
    local = np.array([d[1] for d in data], np.int32)
    info = ProximityAddInfo(
        status=jnp.zeros(len(data), jnp.int32),
        value=jnp.zeros(len(data)),
        index=jnp.zeros(len(data), jnp.int32),
        novelty=jnp.asarray(novelty),
        local_competition=jnp.asarray(local),
    )
    order, values = _NSLC_ORDER(info)
    assert np.asarray(order).tolist() == reference_nslc_order(novelty.tolist(), local.tolist())
    np.testing.assert_array_equal(np.asarray(values), np.stack([novelty, local], axis=1))
    with pytest.raises(ArgumentError, match="'nslc' needs"):
        get_ranker("nslc").order(None, None, AddInfo(jnp.zeros(1), jnp.zeros(1), jnp.zeros(1)), None)
