"""Multi-task MAP-Elites (evotensor.qd.multi_task): the bandit, the tournament, the phases of a
generation, and whole runs on pymap_elites' multi-task arm."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tests.bad_input_table import refusal_test

import evotensor
from evotensor.core import Evaluation, rng
from evotensor.problems.multi_task import MultiTaskArm, MultiTaskFunction, TaskBatch
from evotensor.qd import MultiTaskMAPElites
from evotensor.qd.emitters import IsoLineCrossover
from evotensor.qd.multi_task import tournament_tasks, ucb1_arm

KEY = jax.random.key(0)


def grid_tasks(n: int) -> np.ndarray:
    """``n * n`` distinct tasks on a grid of ``[0, 1]^2``."""
    side = (np.arange(n) + 0.5) / n
    return np.stack(np.meshgrid(side, side, indexing="ij"), -1).reshape(-1, 2).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# UCB1 against its definition


def reference_ucb1(pulls, reward):
    scores = [r / p + math.sqrt(2 * math.log(sum(pulls)) / p) for p, r in zip(pulls, reward, strict=True)]
    return int(np.argmax(np.asarray(scores, np.float32)))


@pytest.mark.parametrize("seed", range(20))
def test_ucb1_picks_the_highest_bound_once_every_arm_was_tried(seed):
    g = np.random.default_rng(seed)
    pulls = g.integers(1, 50, 5)
    reward = (g.uniform(0, 1, 5) * pulls).astype(np.float32)
    got = int(ucb1_arm(jax.random.key(seed), jnp.asarray(pulls, jnp.int32), jnp.asarray(reward)))
    assert got == reference_ucb1(pulls.tolist(), reward.astype(np.float64).tolist())


def test_ucb1_tries_untried_arms_first_uniformly():
    pulls = jnp.asarray([3, 0, 7, 0, 0], jnp.int32)
    reward = jnp.asarray([3.0, 0.0, 7.0, 0.0, 0.0])  # the tried arms look perfect
    picks = jax.vmap(lambda k: ucb1_arm(k, pulls, reward))(jax.random.split(KEY, 3000))
    counts = np.bincount(np.asarray(picks), minlength=5)
    assert counts[0] == counts[2] == 0
    assert all(900 < c < 1100 for c in counts[[1, 3, 4]])


# ---------------------------------------------------------------------------------------------
# the tournament against a brute-force loop over the same draws


@pytest.mark.parametrize("size", [1, 3, 17, 40])
def test_tournament_picks_the_drawn_task_nearest_the_parents(size):
    descriptors = np.random.default_rng(size).uniform(0, 1, (60, 3)).astype(np.float32)
    parent = np.random.default_rng(size + 1).integers(0, 60, 32).astype(np.int32)
    got = tournament_tasks(KEY, jnp.asarray(parent), jnp.asarray(descriptors), jnp.int32(size), 40)
    drawn = np.asarray(rng.randint(KEY, (32, 40), 0, 60))
    for b in range(32):
        candidates = drawn[b, :size]
        distance = [
            np.sum((descriptors[c].astype(np.float64) - descriptors[parent[b]]) ** 2) for c in candidates
        ]
        assert got[b] == candidates[int(np.argmin(distance))]


def test_size_one_is_a_random_task_and_a_large_size_the_parents_own():
    descriptors = jnp.asarray(grid_tasks(5))  # 25 tasks
    parent = jnp.zeros((4000,), jnp.int32)
    random = np.asarray(tournament_tasks(KEY, parent, descriptors, jnp.int32(1), 500))
    counts = np.bincount(random, minlength=25)
    assert counts.min() > 110 and counts.max() < 215  # uniform: 160 each
    near = np.asarray(tournament_tasks(KEY, parent, descriptors, jnp.int32(500), 500))
    # the parent's task is missed only if none of 500 draws hits it: (24/25)^500 ~ 1e-9
    assert np.all(near == 0)


# ---------------------------------------------------------------------------------------------
# the generation


def strategy(**kw):
    return MultiTaskMAPElites(grid_tasks(6), **{"solution_dim": 4, "batch_size": 32, **kw})


def evaluate(problem, batch):
    return problem.evaluate(KEY, batch)


def test_seeding_batches_are_random_then_children_are_aimed_by_the_bandit():
    me = strategy(random_init=0.5)  # 18 of 36 tasks filled first
    problem = MultiTaskArm(4)
    state = me.init(KEY)
    phases = []
    for step in range(12):
        batch, state = jax.jit(me.ask)(jax.random.key(step), state)
        x = np.asarray(batch.solutions)
        assert x.shape == (32, 4) and np.all((x >= 0) & (x <= 1))
        np.testing.assert_array_equal(batch.params, me.task_params[batch.task])
        filled = int(state.archive.occupied.sum())
        phases.append(int(state.arm))
        assert (int(state.arm) == -1) == (filled <= 18)
        pulls_before = np.asarray(state.pulls)
        fitness = -evaluate(problem, batch).fitness  # the run loop's orientation: minimized
        state, metrics = jax.jit(me.tell)(KEY, state, batch, Evaluation(fitness=fitness))
        arm = phases[-1]
        if arm >= 0:
            assert np.asarray(state.pulls)[arm] == pulls_before[arm] + 1
            assert int(metrics["tournament_size"]) == me.tournament_sizes[arm]
        else:
            assert np.array_equal(state.pulls, pulls_before) and int(metrics["tournament_size"]) == 0
    assert phases[0] == -1 and phases[-1] >= 0
    # the rewards are the success rates of the variation batches (at most 1 each)
    assert np.all(np.asarray(state.reward) <= np.asarray(state.pulls) + 1e-6)


def test_a_task_keeps_the_best_child_aimed_at_it():
    me = strategy(random_init=1.0)  # always random batches
    problem = MultiTaskArm(4)
    state = me.init(KEY)
    best = {}
    for step in range(6):
        batch, state = me.ask(jax.random.key(step), state)
        fitness = np.asarray(evaluate(problem, batch).fitness)
        for t, f in zip(np.asarray(batch.task), fitness, strict=True):
            best[t] = max(best.get(t, -np.inf), f)
        state, _ = me.tell(KEY, state, batch, Evaluation(fitness=-jnp.asarray(fitness)))
    occupied = np.asarray(state.archive.occupied)
    assert sorted(best) == np.flatnonzero(occupied).tolist()
    for t, f in best.items():
        assert state.archive.objective[t] == np.float32(f)
        np.testing.assert_array_equal(state.archive.measures[t], me.task_descriptors[t])


def test_count_rewards_credit_the_number_added():
    me = strategy(random_init=0.0, bandit_reward="count", tournament_sizes=(3,))
    state = me.init(KEY)
    problem = MultiTaskArm(4)
    added = 0
    for step in range(5):
        batch, state = me.ask(jax.random.key(step), state)
        state, metrics = me.tell(KEY, state, batch, Evaluation(fitness=-evaluate(problem, batch).fitness))
        if step:
            added += int(metrics["added"])
    # the first batch seeds the empty archive; every later one is a variation batch of size 3
    assert int(state.pulls[0]) == 4 and float(state.reward[0]) == added > 0


def test_nonfinite_fitness_never_enters():
    def fitness(x, p):
        return jnp.where(x[:, 0] > 0.5, jnp.nan, -jnp.sum((x - p[:, :1]) ** 2, axis=1))

    me = strategy()
    result = evotensor.run(me, MultiTaskFunction(fitness), 30, KEY, progress=False)
    archive = result.state.archive
    occupied = np.asarray(archive.occupied)
    assert occupied.sum() > 10
    assert np.all(np.isfinite(np.asarray(archive.objective)))
    assert np.all(np.asarray(archive.solutions)[occupied, 0] <= 0.5)


def test_solution_templates_reach_the_problem_as_pytrees():
    def fitness(x, p):
        return -jnp.sum((x["a"] - p[:, :1]) ** 2, axis=1) - jnp.sum(x["b"] ** 2, axis=(1, 2))

    me = MultiTaskMAPElites(
        grid_tasks(3), solution={"a": jnp.zeros(2), "b": jnp.zeros((2, 2))}, batch_size=8, bounds=(-1, 1)
    )
    result = evotensor.run(me, MultiTaskFunction(fitness), 10, KEY, progress=False)
    assert result.state.archive.solutions.shape == (9, 6) and int(result.state.archive.occupied.sum()) > 3


@pytest.mark.parametrize("variation", [None, IsoLineCrossover(0.01, 0.2)])
def test_the_arm_improves_over_its_random_seeding_and_runs_repeat(variation):
    tasks = grid_tasks(10)  # 100 tasks
    problem = MultiTaskArm(10)

    def run(generations):
        me = MultiTaskMAPElites(
            tasks, solution_dim=10, batch_size=50, variation=variation, qd_score_offset=-2
        )
        return evotensor.run(me, problem, generations, KEY, progress=False)

    seeded, long, again = run(1), run(300), run(300)
    # one random batch fills more than 10% of the tasks: variation from the second generation on
    assert long.history["tournament_size"][0] == 0 and np.all(long.history["tournament_size"][1:] > 0)
    assert np.array_equal(long.state.archive.objective, again.state.archive.objective)
    score = long.history["qd_score"]
    assert score[-1] > seeded.history["qd_score"][-1] + 20 and bool(np.all(long.state.archive.occupied))
    # every tournament size was tried, and the run credited them
    assert np.all(np.asarray(long.state.pulls) > 0) and int(long.state.pulls.sum()) > 290


# ---------------------------------------------------------------------------------------------
# bad arguments


def build(**kw):
    return strategy(**kw)


CASES = []
for value in [np.zeros((0, 2)), np.zeros(3), [[0.0, math.nan]], "tasks"]:
    CASES.append(
        ("strategy", lambda **kw: MultiTaskMAPElites(kw["tasks"], solution_dim=3), "tasks", {"tasks": value})
    )
CASES += [
    (
        "strategy",
        lambda **kw: MultiTaskMAPElites([[0.1, 0.2], [0.3, 0.4], [0.1, 0.2]], solution_dim=3),
        "tasks rows 0 and 2",
        {},
    ),
    ("strategy", build, "task_descriptors", {"task_descriptors": np.zeros((3, 2))}),
    ("strategy", build, "task_descriptors", {"task_descriptors": np.zeros((36, 1))}),
    ("strategy", build, "solution_dim", {"solution": jnp.zeros(3)}),
    ("strategy", build, "solution_dim", {"solution_dim": 0}),
    ("strategy", build, "batch_size", {"batch_size": 0}),
    ("strategy", build, "variation", {"variation": "sbx"}),
    ("strategy", build, "bounds", {"bounds": (1.0, 0.0)}),
    ("strategy", build, "bounds", {"bounds": (0.0, math.inf)}),
    ("strategy", build, "bounds", {"bounds": (np.zeros(3), 1.0)}),
    ("strategy", build, "tournament_sizes", {"tournament_sizes": (1, 1)}),
    ("strategy", build, "tournament_sizes", {"tournament_sizes": ()}),
    ("strategy", build, "tournament_sizes", {"tournament_sizes": (1, 0)}),
    ("strategy", build, "tournament_sizes", {"tournament_sizes": (1, 10**9)}),
    ("strategy", build, "random_init", {"random_init": 1.5}),
    ("strategy", build, "bandit_reward", {"bandit_reward": "mean"}),
    ("strategy", build, "qd_score_offset", {"qd_score_offset": math.nan}),
    (
        "variation",
        lambda **kw: jax.jit(strategy(random_init=0.0, variation=lambda k, a, b: a[:, :2]).ask)(
            KEY,
            strategy()
            .init(KEY)
            .replace(archive=strategy().archive.init().replace(occupied=jnp.ones(36, bool))),
        ),
        "variation must return",
        {},
    ),
    (
        "tell",
        lambda **kw: strategy().tell(
            KEY, strategy().init(KEY), jnp.zeros((32, 4)), Evaluation(fitness=jnp.zeros(32))
        ),
        "TaskBatch",
        {},
    ),
    (
        "tell",
        lambda **kw: strategy().tell(
            KEY,
            strategy().init(KEY),
            TaskBatch(solutions=jnp.zeros((32, 4)), task=jnp.zeros(32, jnp.int32), params=jnp.zeros((32, 2))),
            Evaluation(fitness=jnp.zeros(31)),
        ),
        "evaluation.fitness",
        {},
    ),
]

test_bad_argument_is_refused_naming_it = refusal_test(CASES)
