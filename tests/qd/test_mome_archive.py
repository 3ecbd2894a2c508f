"""The MOME archive (:class:`evotensor.qd.MOMEArchive`): Pareto fronts per cell, batch insertion
against a slow reference of the documented rules (hypothesis over objectives on a coarse grid, so
ties, duplicates, dominance chains and overfull fronts are common), hypervolume improvement values,
queries, genotypes, bad input, and MAP-Elites runs over it."""

import functools

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings

import evotensor
from evotensor.core.checks import ArgumentError
from evotensor.core.evaluation import Evaluation
from evotensor.core.pareto import hypervolume
from evotensor.qd import (
    CMAESEmitter,
    CVTArchive,
    GridArchive,
    IsoLineEmitter,
    MAPElites,
    MOMEArchive,
    ProximityArchive,
)

BATCH, CELLS, DIMS = 16, 3, 2
# the hypervolume of each row's points (tested against inclusion-exclusion in tests/core)
volumes = jax.jit(jax.vmap(hypervolume, in_axes=(0, 0, None)))


def dominates(a, b):
    return bool(np.all(a >= b) and np.any(a > b))


def crowding(objectives: list[np.ndarray]) -> np.ndarray:
    """NSGA-II's crowding distance, float32 halves as the archive computes it."""
    n, total = len(objectives), np.zeros(len(objectives))
    for m in range(len(objectives[0])):
        values = np.array([o[m] for o in objectives], np.float32)
        order = sorted(range(n), key=lambda k: (values[k], k))
        half = np.float32(0.5)
        span = values[order[-1]] * half - values[order[0]] * half
        for r, k in enumerate(order):
            if r in (0, n - 1):
                total[k] = np.inf
            elif span > 0:
                total[k] += (values[order[r + 1]] * half - values[order[r - 1]] * half) / span
    return total


def reference_add(fronts, solutions, objective, cells, front_size, truncation):
    """The module docstring's rules, cell by cell: ``(fronts, status)`` with a front ``{slot:
    (objective, solution)}``."""
    status = [0] * len(objective)
    valid = [bool(np.all(np.isfinite(o)) and np.all(np.isfinite(s))) for o, s in zip(objective, solutions)]
    fronts = dict(fronts)
    for c in sorted({c for c, v in zip(cells, valid) if v}):
        front = fronts.get(c, {})
        had = bool(front)
        items = [(("member", slot), o, s) for slot, (o, s) in sorted(front.items())]
        items += [
            (b, objective[b], solutions[b]) for b in range(len(objective)) if valid[b] and cells[b] == c
        ]
        survivors = [
            item
            for k, item in enumerate(items)
            if not any(dominates(other[1], item[1]) for other in items)
            and not any(np.array_equal(items[j][1], item[1]) for j in range(k))
        ]
        if len(survivors) > front_size:
            if truncation == "first":
                keep = set(range(front_size))
            else:
                distance = crowding([item[1] for item in survivors])
                keep = set(sorted(range(len(survivors)), key=lambda k: (-distance[k], k))[:front_size])
            survivors = [item for k, item in enumerate(survivors) if k in keep]
        new = {who[1]: (o, s) for who, o, s in survivors if isinstance(who, tuple)}
        free = iter(slot for slot in range(front_size) if slot not in new)
        for who, o, s in survivors:
            if not isinstance(who, tuple):  # a candidate: the lowest free slot, in batch order
                status[who] = 1 if had else 2
                new[next(free)] = (np.asarray(o, np.float32), np.asarray(s, np.float32))
        fronts[c] = new
    return fronts, status


@functools.cache
def archive_and_add(num_objectives, front_size, truncation):
    cells = GridArchive(solution_dim=DIMS, dims=(CELLS,), ranges=[(0, 1)])
    archive = MOMEArchive(
        cells,
        num_objectives=num_objectives,
        front_size=front_size,
        reference_point=[-1.0] * num_objectives,
        truncation=truncation,
    )
    return archive, jax.jit(archive.add)


@st.composite
def batches(draw, num_objectives):
    levels = st.integers(0, 3)
    objective = np.array(
        draw(
            st.lists(
                st.lists(levels, min_size=num_objectives, max_size=num_objectives),
                min_size=BATCH,
                max_size=BATCH,
            )
        ),
        np.float32,
    )
    holes = np.array(
        draw(st.lists(st.sampled_from([0.0, 0.0, 0.0, np.nan, np.inf]), min_size=BATCH, max_size=BATCH))
    )
    objective[:, 0] += holes.astype(np.float32)
    cell = np.array(draw(st.lists(st.integers(0, CELLS - 1), min_size=BATCH, max_size=BATCH)))
    measures = ((cell + 0.5) / CELLS).astype(np.float32)[:, None]
    solutions = np.array(
        draw(st.lists(st.integers(-5, 5), min_size=BATCH * DIMS, max_size=BATCH * DIMS)), np.float32
    )
    return solutions.reshape(BATCH, DIMS), objective, measures, cell


@st.composite
def scenarios(draw):
    num_objectives = draw(st.sampled_from([1, 2, 3]))
    front_size = draw(st.sampled_from([1, 2, 5]))
    truncation = draw(st.sampled_from(["crowding", "first"]))
    steps = draw(st.lists(batches(num_objectives), min_size=1, max_size=4))
    return num_objectives, front_size, truncation, steps


@settings(max_examples=60, deadline=None)
@given(case=scenarios())
def test_add_equals_the_reference_rules(case):
    num_objectives, front_size, truncation, steps = case
    archive, add = archive_and_add(num_objectives, front_size, truncation)
    state, fronts = archive.init(), {}
    for solutions, objective, measures, cell in steps:
        before = state
        state, info = add(state, solutions, objective, measures)
        fronts, status = reference_add(fronts, solutions, objective, cell, front_size, truncation)
        np.testing.assert_array_equal(np.asarray(info.status), status)
        valid = np.all(np.isfinite(objective), axis=1)
        np.testing.assert_array_equal(np.asarray(info.index), np.where(valid, cell, -1))
        occupied = np.asarray(state.occupied)
        for c in range(CELLS):
            want = fronts.get(c, {})
            assert occupied[c].tolist() == [slot in want for slot in range(front_size)]
            for slot, (o, sol) in want.items():
                np.testing.assert_array_equal(np.asarray(state.objective)[c, slot], o)
                np.testing.assert_array_equal(np.asarray(state.solutions)[c, slot], sol)
        # value: the hypervolume the candidate adds to its cell's front before the batch
        members = np.asarray(before.occupied)[cell]
        front = -np.asarray(before.objective)[cell]
        reference = -archive.reference_point
        base = volumes(front, members, reference)
        grown = volumes(
            np.concatenate([front, -objective[:, None]], axis=1),
            np.c_[members, np.ones(BATCH, bool)],
            reference,
        )
        want = np.where(valid, np.maximum(np.asarray(grown) - np.asarray(base), 0.0), -np.inf)
        np.testing.assert_allclose(np.asarray(info.value), want, atol=1e-5)


def first_of_cell(cells: np.ndarray, f: np.ndarray) -> np.ndarray:
    """``[B]``: the batch position of the first candidate with each candidate's cell and objective."""
    return np.array([np.flatnonzero((cells == c) & (f == v))[0] for c, v in zip(cells, f)])


def test_one_objective_and_front_of_one_is_map_elites():
    rng = np.random.default_rng(0)
    grid = GridArchive(solution_dim=DIMS, dims=(4, 4), ranges=[(0, 1), (0, 1)])
    mome = MOMEArchive(grid, num_objectives=1, front_size=1, reference_point=[-10.0])
    a, b = grid.init(), mome.init()
    add_grid, add_mome = jax.jit(grid.add), jax.jit(mome.add)
    for _ in range(5):
        x = rng.normal(size=(64, DIMS)).astype(np.float32)
        f = np.round(rng.normal(size=64), 1).astype(np.float32)  # ties
        m = rng.uniform(0, 1, (64, 2)).astype(np.float32)
        a, info_a = add_grid(a, x, f, m)
        b, info_b = add_mome(b, x, f[:, None], m)
        # MOME's status is where a candidate ended up: of the grid's adds, only each cell's winner
        winners = np.asarray(a.objective)[np.asarray(info_a.index)] == f
        np.testing.assert_array_equal(
            np.asarray(info_b.status) > 0,
            (np.asarray(info_a.status) > 0)
            & winners
            & (np.arange(64) == first_of_cell(np.asarray(info_a.index), f)),
        )
    np.testing.assert_array_equal(a.occupied, b.occupied[:, 0])
    np.testing.assert_array_equal(a.objective, b.objective[:, 0, 0])
    np.testing.assert_array_equal(a.solutions, b.solutions[:, 0])


def test_stats_queries_and_sampling():
    cells = GridArchive(solution_dim=1, dims=(2,), ranges=[(0, 1)])
    archive = MOMEArchive(cells, num_objectives=2, front_size=4, reference_point=[0.0, 0.0])
    state = archive.init()
    stats = archive.stats(state)
    assert int(stats["num_elites"]) == 0 and np.isnan(stats["max_sum_objectives"])
    # cell 0: the front (1, 3), (2, 2), (3, 1); (1, 1) is dominated. cell 1: (4, 4)
    objective = np.array([[1, 3], [2, 2], [3, 1], [1, 1], [4, 4]], np.float32)
    measures = np.array([[0.1], [0.2], [0.3], [0.4], [0.9]], np.float32)
    solutions = np.arange(5, dtype=np.float32)[:, None]
    state, info = jax.jit(archive.add)(state, solutions, objective, measures)
    np.testing.assert_array_equal(info.status, [2, 2, 2, 0, 2])
    stats = {k: float(v) for k, v in jax.jit(archive.stats)(state).items()}
    assert stats["num_elites"] == 4 and stats["coverage"] == 1.0
    assert stats["moqd_score"] == 6.0 + 16.0 and stats["max_hypervolume"] == 16.0
    assert stats["global_hypervolume"] == 16.0 and stats["max_sum_objectives"] == 8.0
    np.testing.assert_array_equal(archive.hypervolumes(state), [6.0, 16.0])
    found, front = archive.retrieve(state, np.array([[0.2], [np.nan]], np.float32))
    assert found.tolist() == [True, False] and front["index"].tolist() == [0, -1]
    assert front["occupied"][0].tolist() == [True, True, True, False]
    data = archive.data(state)
    assert data["index"].tolist() == [0, 0, 0, 1] and data["slot"].tolist() == [0, 1, 2, 0]
    np.testing.assert_array_equal(data["solutions"][:, 0], [0, 1, 2, 4])
    # sampling: a cell uniformly, then a member uniformly: cell 1's one member half the time
    slots = np.asarray(archive.sample_elites(jax.random.key(0), state, 4000))
    assert set(slots.tolist()) == {0, 1, 2, 4}
    assert np.mean(slots == 4) == pytest.approx(0.5, abs=0.03)
    picked = archive.elite_solutions(state, jnp.asarray(slots[:8]))
    np.testing.assert_array_equal(np.asarray(picked)[:, 0], np.where(slots[:8] == 4, 4, slots[:8]))


def test_genotype_fronts_keep_integer_leaves_exact():
    template = {"w": jnp.zeros(2), "key": jnp.zeros((), jnp.int32)}
    cells = GridArchive(genotype=template, dims=(2,), ranges=[(0, 1)])
    archive = MOMEArchive(cells, num_objectives=2, front_size=3, reference_point=[0.0, 0.0])
    genotypes = {"w": jnp.ones((3, 2)), "key": jnp.array([2**30 + 1, 2**30 + 2, 2**30 + 3], jnp.int32)}
    state, info = jax.jit(archive.add)(
        archive.init(), genotypes, np.array([[1, 2], [2, 1], [0.5, 0.5]], np.float32), np.full((3, 1), 0.2)
    )
    assert info.status.tolist() == [2, 2, 0]
    assert np.asarray(state.solutions["key"])[0, :2].tolist() == [2**30 + 1, 2**30 + 2]
    assert state.solutions["key"].dtype == jnp.int32


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_objectives": 0}, "num_objectives"),
        ({"front_size": 0}, "front_size"),
        ({"reference_point": [0.0]}, "reference_point"),
        ({"reference_point": [0.0, np.nan]}, "reference_point"),
        ({"reference_point": "ab"}, "reference_point"),
        ({"truncation": "random"}, "truncation"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, match):
    cells = GridArchive(solution_dim=2, dims=(2,), ranges=[(0, 1)])
    args = {"num_objectives": 2, "front_size": 3, "reference_point": [0.0, 0.0], **kwargs}
    with pytest.raises(ArgumentError, match=match):
        MOMEArchive(cells, **args)


def test_bad_cells_and_batches_are_refused():
    with pytest.raises(ArgumentError, match="cells"):
        MOMEArchive(
            ProximityArchive(solution_dim=2, measure_dim=1, capacity=4, k_neighbors=1, novelty_threshold=0.1),
            num_objectives=2,
            front_size=2,
            reference_point=[0, 0],
        )
    mae = GridArchive(solution_dim=2, dims=(2,), ranges=[(0, 1)], learning_rate=0.1, threshold_min=0.0)
    with pytest.raises(ArgumentError, match="CMA-MAE"):
        MOMEArchive(mae, num_objectives=2, front_size=2, reference_point=[0, 0])
    archive = MOMEArchive(
        GridArchive(solution_dim=2, dims=(2,), ranges=[(0, 1)]),
        num_objectives=2,
        front_size=2,
        reference_point=[0, 0],
    )
    state = archive.init()
    with pytest.raises(ArgumentError, match=r"objective must have shape \[3, 2\]"):
        archive.add(state, np.zeros((3, 2)), np.zeros(3), np.zeros((3, 1)))
    with pytest.raises(ArgumentError, match="state"):
        archive.add(
            GridArchive(solution_dim=2, dims=(2,), ranges=[(0, 1)]).init(),
            np.zeros((3, 2)),
            np.zeros((3, 2)),
            np.zeros((3, 1)),
        )
    with pytest.raises(ArgumentError, match="best_cells"):
        archive.best_cells(state, 2)


class TwoSpheres:
    """Two objectives (maximized): closeness to 0 and to 1; descriptors the first two genes."""

    maximize = True

    def evaluate(self, key, x):
        f = jnp.stack([-jnp.sum(x**2, axis=1), -jnp.sum((x - 1) ** 2, axis=1)], axis=1)
        return Evaluation(fitness=f, descriptor=jnp.clip(x[:, :2], 0, 1))


def test_map_elites_runs_mome_with_variation_and_cma_emitters():
    cells = CVTArchive(solution_dim=4, centroids=16, ranges=[(0, 1), (0, 1)], samples=2000)
    archive = MOMEArchive(cells, num_objectives=2, front_size=8, reference_point=[-8.0, -8.0])
    emitters = [
        IsoLineEmitter(x0=jnp.full(4, 0.5), iso_sigma=0.05, batch_size=32),
        CMAESEmitter(x0=jnp.full(4, 0.5), sigma0=0.3, batch_size=16, ranker="2imp"),
    ]
    me = MAPElites(archive, emitters)
    result = evotensor.run(me, TwoSpheres(), generations=40, key=jax.random.key(0))
    state = result.state.archive
    stats = archive.stats(state)
    assert float(stats["coverage"]) > 0.5 and int(stats["num_elites"]) > 30
    # every stored front is mutually non-dominated
    objective, occupied = np.asarray(state.objective), np.asarray(state.occupied)
    for c in range(16):
        front = objective[c][occupied[c]]
        assert not any(dominates(a, b) for a in front for b in front)
    history = result.history["moqd_score"]
    assert history[-1] > history[0] and np.all(np.diff(history) >= -1e-3 * abs(history[-1]))
    # the best individual is the best sum of objectives seen
    assert result.best_fitness == pytest.approx(float(np.max(result.history["generation_best"])))


def test_map_elites_refuses_single_objective_fitness_for_mome():
    cells = GridArchive(solution_dim=2, dims=(2,), ranges=[(0, 1)])
    archive = MOMEArchive(cells, num_objectives=2, front_size=2, reference_point=[0, 0])
    me = MAPElites(archive, [IsoLineEmitter(x0=jnp.zeros(2), batch_size=4)])
    state = me.init(jax.random.key(0))
    x, state = me.ask(jax.random.key(1), state)
    with pytest.raises(ArgumentError, match=r"fitness must be \[4, 2\]"):
        me.tell(jax.random.key(2), state, x, Evaluation(fitness=jnp.zeros(4), descriptor=jnp.zeros((4, 1))))


def test_two_objective_fast_paths_equal_the_general_ones():
    """The O(B log B) in-batch dominance and the sort-free hypervolume gain of two objectives
    against the pairwise comparison and the per-candidate hypervolumes used for any M."""
    rng = np.random.default_rng(5)
    cells = GridArchive(solution_dim=1, dims=(4,), ranges=[(0, 1)])
    archive = MOMEArchive(cells, num_objectives=2, front_size=6, reference_point=[-1.0, -1.0])
    state = archive.init()
    beaten_fast, beaten_slow = jax.jit(archive._beaten_in_batch_2d), jax.jit(archive._beaten_by_candidates)
    gain_fast, gain_slow = jax.jit(archive._improvement_2d), jax.jit(archive._improvement)
    add = jax.jit(archive.add)
    for _ in range(4):
        n = 64
        # conflicting objectives on a coarse grid (real fronts, ties), some below the reference
        first = rng.integers(-2, 6, n)
        objective = np.stack([first, 4 - first + rng.integers(0, 2, n)], axis=1).astype(np.float32)
        cell = jnp.asarray(rng.integers(0, 4, n), jnp.int32)
        valid = jnp.asarray(rng.random(n) < 0.9)
        fast = beaten_fast(jnp.asarray(objective), cell, valid)
        slow = beaten_slow(jnp.asarray(objective), cell, valid)
        np.testing.assert_array_equal(fast, slow & valid)  # an invalid candidate never enters anyway
        rows = archive.touched_rows(cell, valid, archive.num_cells)
        fronts = state.objective[rows[1]], state.occupied[rows[1]] & (rows[0] < archive.num_cells)[:, None]
        gain = gain_fast(*fronts, rows[2], jnp.asarray(objective), valid)
        members = state.occupied[cell] & valid[:, None]
        want = gain_slow(state.objective[cell], members, jnp.asarray(objective), valid)
        np.testing.assert_allclose(gain, want, atol=1e-5)
        state, _ = add(state, objective[:, None, 0] * 0, objective, (np.asarray(cell)[:, None] + 0.5) / 4)
    assert int(state.occupied.sum()) > 8


def test_empty_batch_changes_nothing():
    cells = GridArchive(solution_dim=2, dims=(3,), ranges=[(0, 1)])
    archive = MOMEArchive(cells, num_objectives=2, front_size=2, reference_point=[0.0, 0.0])
    state, _ = archive.add(archive.init(), np.ones((2, 2)), np.ones((2, 2)), np.full((2, 1), 0.5))
    after, info = archive.add(state, np.zeros((0, 2)), np.zeros((0, 2)), np.zeros((0, 1)))
    assert info.status.shape == (0,)
    np.testing.assert_array_equal(after.occupied, state.occupied)
    np.testing.assert_array_equal(after.objective, state.objective)


def test_bandit_scheduler_and_run_many_over_a_mome_archive():
    """The bandit picks emitters by their success on a MOME archive (candidates that entered a
    front), and run_many's vmapped runs equal the single runs bit for bit."""
    from evotensor.qd import BanditMAPElites, EmitterGroup

    cells = GridArchive(solution_dim=4, dims=(4, 4), ranges=[(0, 1), (0, 1)])
    archive = MOMEArchive(cells, num_objectives=2, front_size=4, reference_point=[-8.0, -8.0])
    pool = [
        IsoLineEmitter(x0=jnp.full(4, 0.5), iso_sigma=0.05, batch_size=16),
        EmitterGroup(CMAESEmitter(x0=jnp.full(4, 0.5), sigma0=0.2, batch_size=8, ranker="2imp"), 2),
    ]
    bandit = BanditMAPElites(archive, pool, num_active=1)
    result = evotensor.run(bandit, TwoSpheres(), generations=12, key=jax.random.key(1))
    assert int(archive.stats(result.state.archive)["num_elites"]) > 8
    # one active emitter of 16 candidates per generation; success: those that entered a front
    assert float(jnp.sum(result.state.selection)) == 12 * 16
    assert 0 < float(jnp.sum(result.state.success)) <= 12 * 16
    me = MAPElites(archive, pool[:1])
    keys = jax.random.split(jax.random.key(2), 2)
    many = evotensor.run_many(me, TwoSpheres(), 6, keys)
    for i in range(2):
        one = evotensor.run(me, TwoSpheres(), generations=6, key=keys[i])
        np.testing.assert_array_equal(many.state.archive.objective[i], one.state.archive.objective)
        np.testing.assert_array_equal(many.state.archive.occupied[i], one.state.archive.occupied)


def test_sharded_archive_on_one_device_equals_the_plain_archive():
    """ShardedMOMEArchive: the same fronts, slots, statuses, samples and queries as the plain
    archive (4 devices: tests/qd/test_sharded_archive.py); a plain ShardedArchive refuses MOME,
    naming the class to use, and MAPElites.on_mesh picks that class."""
    from evotensor.qd import ShardedArchive
    from evotensor.qd.sharded_mome import ShardedMOMEArchive

    rng = np.random.default_rng(3)
    cells = CVTArchive(solution_dim=3, centroids=rng.uniform(0, 1, (7, 2)), ranges=[(0, 1), (0, 1)])
    plain = MOMEArchive(cells, num_objectives=2, front_size=3, reference_point=[-1.0, -1.0])
    mesh = jax.make_mesh((1,), ("pop",))
    with pytest.raises(ArgumentError, match="ShardedMOMEArchive"):
        ShardedArchive(plain, mesh)
    sharded = ShardedMOMEArchive(plain, mesh)
    assert sharded.num_objectives == 2 and ShardedMOMEArchive(sharded, mesh).archive is plain
    with pytest.raises(ArgumentError, match="MOMEArchive"):
        ShardedMOMEArchive(cells, mesh)
    on_mesh = MAPElites(plain, [IsoLineEmitter(x0=jnp.zeros(3), batch_size=4)]).on_mesh(mesh)
    assert isinstance(on_mesh.archive, ShardedMOMEArchive)
    a, b = plain.init(), sharded.init()
    add_a, add_b = jax.jit(plain.add), jax.jit(sharded.add)
    for _ in range(4):
        first = rng.integers(0, 5, 24)
        objective = np.stack([first, 4 - first + rng.integers(0, 2, 24)], axis=1).astype(np.float32)
        objective[rng.random(24) < 0.1, 0] = np.nan
        x = rng.normal(size=(24, 3)).astype(np.float32)
        m = rng.uniform(0, 1, (24, 2)).astype(np.float32)
        a, info_a = add_a(a, x, objective, m)
        b, info_b = add_b(b, x, objective, m)
        for got, want in zip(jax.tree_util.tree_leaves((b, info_b)), jax.tree_util.tree_leaves((a, info_a))):
            np.testing.assert_array_equal(got, want)
    key = jax.random.key(4)

    def parents(archive, state):
        slots = archive.sample_elites(key, state, 16)
        return slots, archive.elite_solutions(state, slots)

    for got, want in zip(
        jax.jit(parents, static_argnums=0)(sharded, b), jax.jit(parents, static_argnums=0)(plain, a)
    ):
        np.testing.assert_array_equal(got, want)
    probe = np.array([[0.2, 0.3], [np.nan, 0.1]], np.float32)
    for got, want in zip(
        jax.tree_util.tree_leaves(jax.jit(sharded.retrieve)(b, probe)),
        jax.tree_util.tree_leaves(jax.jit(plain.retrieve)(a, probe)),
    ):
        np.testing.assert_array_equal(got, want)
    want = jax.jit(plain.stats)(a)
    for name, value in jax.jit(sharded.stats)(b).items():
        np.testing.assert_allclose(value, want[name], rtol=1e-6, err_msg=name)
    assert sharded.data(b)["index"].tolist() == plain.data(a)["index"].tolist()
