"""The ME-ES emitter (evotensor.qd.emitters.mees), MAP-Elites' evaluate-only rows and
``Archive.best_cells``.

The gradient step is checked against a float64 NumPy transcription of QDax's rule (ranks, mirrored
differences, L2, Adam); parent selection against the sets the rules allow; the novelty against brute
force. The schedule (a new parent every ``num_optimizer_steps`` steps, novelty first) is read off
the states of a run.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evotensor.core.checks import ArgumentError
from evotensor.core.evaluation import Evaluation
from evotensor.qd import BanditMAPElites, GaussianEmitter, GridArchive, MAPElites, MEESEmitter
from evotensor.qd.emitters.mees import mean_nearest_distance

DIMS = 4
TARGET = np.array([0.3, -0.2, 0.1, 0.4])
RANGES = [(-1.0, 1.0), (-1.0, 1.0)]


def grid(cells=(8, 8)):
    return GridArchive(solution_dim=DIMS, dims=cells, ranges=RANGES)


def score(x):
    """``(objective [B], measures [B, 2])``: a bowl around TARGET, measures the first two entries."""
    x = np.asarray(x, np.float64)
    return -np.sum((x - TARGET) ** 2, axis=1), np.clip(x[:, :2], -0.99, 0.99)


_COMPILED: dict[int, tuple] = {}


def compiled(me):
    """``(ask, tell)`` of ``me``, jitted once per MAP-Elites object (eager dispatch is slow)."""
    if id(me) not in _COMPILED:
        _COMPILED[id(me)] = (me, jax.jit(me.ask), jax.jit(me.tell))
    return _COMPILED[id(me)][1:]


def generation(me, key, state, objective_of=score):
    """One MAP-Elites generation by hand: ``(state, genotypes, emitter state after ask)``."""
    ask, tell = compiled(me)
    ask_key, tell_key = jax.random.split(key)
    x, state = ask(ask_key, state)
    asked = state.emitters[0]
    objective, measures = objective_of(x)
    evaluation = Evaluation(
        fitness=jnp.asarray(-objective, jnp.float32), descriptor=jnp.asarray(measures, jnp.float32)
    )
    state, _ = tell(tell_key, state, x, evaluation)
    return state, np.asarray(x), asked


# ---- the gradient step against QDax's rule in float64 ------------------------------------------


def qdax_ranks(values):
    """QDax's rank normalisation: ascending ranks of ``values`` mapped to [-0.5, 0.5]."""
    ranks = np.empty(len(values))
    ranks[np.argsort(values, kind="stable")] = np.arange(len(values))
    return ranks / (len(values) - 1) - 0.5


class ReferenceAdam:
    """optax.adam's update (b1 0.9, b2 0.999, eps 1e-8, bias-corrected), in float64."""

    def __init__(self, lr):
        self.lr, self.m, self.v, self.t = lr, 0.0, 0.0, 0

    def step(self, theta, g):
        self.t += 1
        self.m = 0.9 * self.m + 0.1 * g
        self.v = 0.999 * self.v + 0.001 * g * g
        m_hat, v_hat = self.m / (1 - 0.9**self.t), self.v / (1 - 0.999**self.t)
        return theta - self.lr * m_hat / (np.sqrt(v_hat) + 1e-8)


@pytest.mark.parametrize("mirrored", [True, False])
def test_steps_follow_qdax_rule_and_restart_adam_with_each_new_parent(mirrored):
    n, sigma, l2, steps = 16, 0.05, 0.02, 3
    emitter = MEESEmitter(
        np.zeros(DIMS),
        num_samples=n,
        sigma=sigma,
        mirrored=mirrored,
        num_optimizer_steps=steps,
        mode="exploit",
    )
    me = MAPElites(grid(), [emitter])
    state = me.init(jax.random.key(0))
    adam, key = ReferenceAdam(0.01), jax.random.key(1)
    for t in range(7):
        key, sub = jax.random.split(key)
        state, x, asked = generation(me, sub, state)
        parent, samples = np.asarray(asked.parent, np.float64), x[1:].astype(np.float64)
        if t % steps == 0:
            adam = ReferenceAdam(0.01)  # a new parent restarts the optimizer
        else:
            np.testing.assert_array_equal(asked.parent, x[0])  # the parent is the offspring just emitted
        objective, _ = score(samples)
        if mirrored:
            np.testing.assert_allclose(
                samples[0::2] + samples[1::2], np.broadcast_to(2 * parent, (n // 2, DIMS)), atol=1e-6
            )
            eps = (samples[0::2] - samples[1::2]) / (2 * sigma)
            ranks = qdax_ranks(objective)
            g = -((ranks[0::2] - ranks[1::2]) @ eps) / (n * sigma)
        else:
            eps = (samples - parent) / sigma
            g = -(qdax_ranks(objective) @ eps) / (n * sigma)
        expected = adam.step(parent, g + l2 * parent)
        np.testing.assert_allclose(state.emitters[0].offspring, expected, rtol=2e-4, atol=2e-6)
    assert int(state.emitters[0].step) == 7 and int(state.emitters[0].skipped) == 0


def test_only_the_offspring_enters_the_archive():
    emitter = MEESEmitter(np.zeros(DIMS), num_samples=40, sigma=0.5)
    me = MAPElites(grid(), [emitter])
    assert me.insert_mask.tolist() == [True] + [False] * 40
    state, x, _ = generation(me, jax.random.key(0), me.init(jax.random.key(3)))
    # the samples spread over many cells and beat nothing, yet only row 0 (x0) was stored
    archive = state.archive
    assert int(archive.occupied.sum()) == 1
    np.testing.assert_array_equal(archive.solutions[archive.occupied][0], x[0])
    cells = me.archive.index_of(jnp.asarray(score(x[1:])[1], jnp.float32))
    assert len(np.unique(cells)) > 5


def test_bad_insert_masks_and_pools_are_refused():
    emitter = GaussianEmitter(0.1, np.zeros(DIMS), batch_size=4)
    emitter.insert_mask = np.array([True, False, True])
    with pytest.raises(ArgumentError, match=r"emitters\[0\]\.insert_mask"):
        MAPElites(grid(), [emitter])
    emitter.insert_mask = np.ones(4)  # not bool
    with pytest.raises(ArgumentError, match=r"emitters\[0\]\.insert_mask"):
        MAPElites(grid(), [emitter])
    with pytest.raises(ArgumentError, match="insert_mask"):
        BanditMAPElites(grid(), [MEESEmitter(np.zeros(DIMS), num_samples=4)] * 1, 1)


# ---- schedule ------------------------------------------------------------------------------------


def test_explore_then_exploit_and_what_each_step_climbs():
    emitter = MEESEmitter(np.zeros(DIMS), num_samples=8, sigma=0.1, num_optimizer_steps=2)
    assert [bool(emitter.explores(jnp.int32(t))) for t in range(6)] == [True, True, False, False, True, True]
    assert not bool(MEESEmitter(np.zeros(DIMS), num_samples=8, mode="exploit").explores(jnp.int32(0)))
    assert bool(MEESEmitter(np.zeros(DIMS), num_samples=8, mode="explore").explores(jnp.int32(2)))
    me = MAPElites(grid(), [emitter])
    ask, tell = compiled(me)
    state = me.init(jax.random.key(0))
    for t in range(4):
        x, asked_state = ask(jax.random.key(10 + t), state)
        objective, measures = score(x)

        def told(objective, measures, asked_state=asked_state, x=x):
            evaluation = Evaluation(
                fitness=jnp.asarray(-objective, jnp.float32), descriptor=jnp.asarray(measures, jnp.float32)
            )
            return np.asarray(tell(jax.random.key(99), asked_state, x, evaluation)[0].emitters[0].offspring)

        base = told(objective, measures)
        flipped = objective.copy()
        flipped[1:] = flipped[1:][::-1]  # the samples' fitness reordered, the offspring's kept
        moved = measures.copy()
        moved[1:] = moved[1:] * np.linspace(0.1, 1.0, len(moved) - 1)[:, None]
        if emitter.explores(jnp.int32(t)):
            np.testing.assert_array_equal(told(flipped, measures), base)  # fitness is not looked at
            assert not np.array_equal(told(objective, moved), base)
        else:
            np.testing.assert_array_equal(told(objective, moved), base)  # novelty is not looked at
            assert not np.array_equal(told(flipped, measures), base)
        state, _, _ = generation(me, jax.random.key(10 + t), state)


# ---- parents -------------------------------------------------------------------------------------


def filled_archive():
    """A grid of 16 cells holding 9 elites of distinct objectives; solution row = (objective, ...)."""
    archive = GridArchive(solution_dim=DIMS, dims=(4, 4), ranges=RANGES)
    rng = np.random.default_rng(0)
    cells = rng.choice(16, 9, replace=False)
    centres = np.stack([(cells // 4 + 0.5) / 2 - 1, (cells % 4 + 0.5) / 2 - 1], 1).astype(np.float32)
    objective = rng.permutation(9).astype(np.float32) - 4
    solutions = np.repeat(objective[:, None], DIMS, 1) + np.arange(DIMS, dtype=np.float32) / 10
    state, _ = archive.add(archive.init(), solutions, objective, centres)
    return archive, state, objective, centres


def as_key(vector):
    """A solution as a hashable tuple (rounded: float32 rows against float64 expectations)."""
    return tuple(round(float(v), 3) for v in np.asarray(vector))


def parents(emitter, state, archive, archive_state, draws=60):
    ask = jax.jit(lambda key: emitter.ask(key, state, archive, archive_state)[1].parent)
    return {as_key(ask(jax.random.key(i))) for i in range(draws)}


def test_exploit_parents_come_from_the_best_cells_or_the_best_recent_offspring():
    archive, archive_state, objective, _ = filled_archive()
    emitter = MEESEmitter(np.zeros(DIMS), num_samples=4, mode="exploit", recent_size=3)
    state = emitter.init(jax.random.key(0), archive)
    top2 = {as_key(o + np.arange(DIMS) / 10) for o in sorted(objective)[-2:]}
    assert parents(emitter, state, archive, archive_state) == top2  # no recent offspring yet
    recent = np.array([[7.0] * DIMS, [9.0] * DIMS, [8.0] * DIMS], np.float32)
    state = state.replace(
        recent_solutions=jnp.asarray(recent), recent_objective=jnp.asarray([-1.0, 3.0, 2.0], jnp.float32)
    )
    assert parents(emitter, state, archive, archive_state) == top2 | {as_key(recent[1]), as_key(recent[2])}
    empty = emitter.init(jax.random.key(0), archive)
    assert parents(emitter, empty, archive, archive.init(), draws=3) == {as_key(np.zeros(DIMS))}  # x0


def test_explore_parents_are_the_most_novel_cells():
    archive, archive_state, objective, centres = filled_archive()
    emitter = MEESEmitter(np.zeros(DIMS), num_samples=4, mode="explore", novelty_neighbors=2, explore_cells=3)
    state = emitter.init(jax.random.key(0), archive)
    seen = np.array([[-0.9, -0.9], [-0.6, -0.4], [0.2, 0.1]], np.float32)
    state = state.replace(novelty_archive=state.novelty_archive.at[:3].set(seen), novelty_count=jnp.int32(3))
    d = np.sqrt(((centres[:, None].astype(np.float64) - seen[None]) ** 2).sum(-1))
    novelty = np.sort(d, axis=1)[:, :2].mean(1)
    best = np.argsort(-novelty)[:3]
    expected = {as_key(objective[i] + np.arange(DIMS) / 10) for i in best}
    assert parents(emitter, state, archive, archive_state) == expected


# ---- novelty and best cells against brute force ------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    size=st.integers(1, 20),
    filled=st.integers(0, 25),
    k=st.integers(1, 25),
)
def test_mean_nearest_distance_is_brute_force(seed, size, filled, k):
    rng = np.random.default_rng(seed)
    points = rng.normal(size=(size, 3)).astype(np.float32)
    queries = rng.normal(size=(7, 3)).astype(np.float32)
    queries[6, 1] = np.nan
    got = np.asarray(mean_nearest_distance(jnp.asarray(queries), jnp.asarray(points), jnp.int32(filled), k))
    rows = points[: min(filled, size)].astype(np.float64)
    for q, value in zip(queries[:6].astype(np.float64), got[:6], strict=True):
        d = np.sort(np.sqrt(((rows - q) ** 2).sum(1)))[:k]
        np.testing.assert_allclose(value, d.mean() if len(d) else 0.0, rtol=1e-5, atol=1e-6)
    assert np.isnan(got[6])


def test_mean_nearest_distance_names_bad_shapes():
    with pytest.raises(ArgumentError, match=r"\[Q, D\] and \[S, D\]"):
        mean_nearest_distance(jnp.zeros((4, 2)), jnp.zeros((5, 3)), jnp.int32(5), 2)
    with pytest.raises(ArgumentError, match="k"):
        mean_nearest_distance(jnp.zeros((4, 2)), jnp.zeros((5, 2)), jnp.int32(5), 0)


def reference_best_cells(value, occupied, k):
    """Occupied cells by score (NaN as -inf), best first, then empty cells; ties to the lower cell."""
    value = np.where(occupied & ~np.isnan(value), value, -np.inf)
    order = sorted(range(len(value)), key=lambda c: (-value[c], not occupied[c], c))[:k]
    return np.array(order), occupied[order]


BEST_ARCHIVE = GridArchive(solution_dim=2, dims=(4, 4), ranges=RANGES)
BEST_ADD = jax.jit(BEST_ARCHIVE.add)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31), k=st.sampled_from([1, 3, 16, 20]), nan_score=st.booleans())
def test_best_cells_is_the_sorted_reference(seed, k, nan_score):
    rng = np.random.default_rng(seed)
    archive = BEST_ARCHIVE
    measures = rng.uniform(-1, 1, (12, 2)).astype(np.float32)
    objective = rng.integers(-2, 2, 12).astype(np.float32)  # ties
    objective[rng.integers(0, 13) :] = np.nan  # a random number of candidates never enter
    state, _ = BEST_ADD(archive.init(), np.zeros((12, 2), np.float32), objective, measures)
    occupied = np.asarray(state.occupied)

    def by_measure(_, m):
        return jnp.where(m[:, 0] > 0.5, jnp.nan, m[:, 1]) if nan_score else m[:, 1]

    for fn, value in (
        (None, np.asarray(state.objective)),
        (by_measure, np.asarray(by_measure(None, state.measures))),
    ):
        cells, valid = archive.best_cells(state, k, fn)
        expected_cells, expected_valid = reference_best_cells(value, occupied, k)
        np.testing.assert_array_equal(cells, expected_cells)
        np.testing.assert_array_equal(valid, expected_valid)


# ---- robustness ----------------------------------------------------------------------------------


def test_nonfinite_scores_rank_worst_and_a_nonfinite_step_is_skipped():
    def nan_half(x):
        objective, measures = score(x)
        objective[1::2] = np.nan
        measures[2::3] = np.inf
        return objective, measures

    for mode in ("exploit", "explore"):
        me = MAPElites(grid(), [MEESEmitter(np.zeros(DIMS), num_samples=12, mode=mode)])
        state, _, _ = generation(me, jax.random.key(0), me.init(jax.random.key(0)), nan_half)
        s = state.emitters[0]
        assert np.all(np.isfinite(s.offspring)) and int(s.skipped) == 0
        assert not np.array_equal(s.offspring, s.parent)
    # a step to a non-finite offspring keeps the parent and counts the skip
    me = MAPElites(grid(), [MEESEmitter(np.zeros(DIMS), num_samples=12, optimizer=optax.sgd(float("inf")))])
    state = me.init(jax.random.key(0))
    for t in range(2):
        state, _, asked = generation(me, jax.random.key(t), state)
    s = state.emitters[0]
    assert int(s.skipped) == 2 and np.array_equal(s.offspring, asked.parent)
    assert all(np.all(np.isfinite(leaf)) for leaf in jax.tree_util.tree_leaves(s.optimizer))


def test_the_novelty_archive_is_a_ring_buffer_of_offspring_measures():
    me = MAPElites(grid(), [MEESEmitter(np.zeros(DIMS), num_samples=4, sigma=0.3, novelty_capacity=3)])
    state, offspring_measures = me.init(jax.random.key(0)), []
    for t in range(5):
        state, x, _ = generation(me, jax.random.key(t), state)
        offspring_measures.append(score(x[:1])[1][0])
    s = state.emitters[0]
    assert int(s.novelty_count) == 5
    # rows 0, 1 were overwritten by the 4th and 5th offspring
    expected = np.array([offspring_measures[3], offspring_measures[4], offspring_measures[2]], np.float32)
    np.testing.assert_allclose(s.novelty_archive, expected, rtol=1e-6)
