"""MAP-Elites Low-Spread (evotensor.qd.low_spread_archive) and corrected archives
(evotensor.qd.reevaluation): the sample reductions and the insertion against slow references,
MAP-Elites asking every solution num_samples times, whole runs on QDax's noisy arm, bad input."""

import collections
import dataclasses
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.bad_input_table import refusal_test

import evotensor
from evotensor.core import Evaluation
from evotensor.problems.qd import Arm, NoisyArm
from evotensor.qd import (
    IMPROVED,
    NEW,
    NOT_ADDED,
    BanditMAPElites,
    CVTArchive,
    GaussianEmitter,
    GridArchive,
    IsoLineEmitter,
    LowSpreadArchive,
    MAPElites,
    PolicyGradientEmitter,
    corrected_archive,
)
from evotensor.qd.low_spread_archive import modal_cell, sample_spread

KEY = jax.random.key(0)
POLICY = ({"w": np.zeros((3, 2), np.float32)},)
CELLS = GridArchive(solution_dim=2, dims=(3, 2), ranges=[(0, 3), (0, 2)])


# ---------------------------------------------------------------------------------------------
# the reductions against their definitions


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(1, 4), st.integers(0, 2**31 - 1))
def test_spread_is_the_mean_pairwise_distance(samples, dims, seed):
    m = np.random.default_rng(seed).normal(size=(5, samples, dims)).astype(np.float32)
    want = [
        np.mean([np.linalg.norm(a - b) for a, b in itertools.combinations(row.astype(np.float64), 2)])
        if samples > 1
        else 0.0
        for row in m
    ]
    np.testing.assert_allclose(np.asarray(sample_spread(jnp.asarray(m))), want, rtol=1e-5, atol=1e-6)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=7), min_size=1, max_size=6).filter(
        lambda rows: len({len(r) for r in rows}) == 1
    )
)
def test_modal_cell_is_the_most_frequent_then_the_lowest(rows):
    counts = [collections.Counter(r) for r in rows]
    want = [min(c for c, n in count.items() if n == max(count.values())) for count in counts]
    np.testing.assert_array_equal(np.asarray(modal_cell(jnp.asarray(rows, jnp.int32))), want)


# ---------------------------------------------------------------------------------------------
# insertion against a candidate-by-candidate reference of the module docstring's rules


def reference_add(archive, state, solutions, objective, measures):
    """The documented rules, one candidate and one cell at a time (the spread from the tested
    ``sample_spread``, so that ``<=`` compares the same float32 numbers)."""
    spread = np.asarray(sample_spread(jnp.asarray(measures)))
    occupied = np.asarray(state.occupied).copy()
    elite_obj = np.asarray(state.objective).copy()
    elite_spread = np.asarray(state.fields["spread"]).copy()
    elite_x = np.asarray(state.solutions).copy()
    elite_m = np.asarray(state.measures).copy()
    status, index, entries = [], [], []
    for i in range(len(objective)):
        finite = np.all(np.isfinite(objective[i])) and np.all(np.isfinite(measures[i]))
        if not finite or not np.all(np.isfinite(solutions[i])):
            status.append(NOT_ADDED)
            index.append(-1)
            continue
        # CELLS: unit cells, 3 along x and 2 along y (clipped to the edges)
        cells = [int(np.clip(np.floor(x), 0, 2) * 2 + np.clip(np.floor(y), 0, 1)) for x, y in measures[i]]
        count = collections.Counter(cells)
        cell = min(c for c, n in count.items() if n == max(count.values()))
        fitness = np.float32(np.mean(objective[i], dtype=np.float32))
        inside = [m for m, c in zip(measures[i], cells, strict=True) if c == cell]
        mean_m = np.mean(inside, axis=0, dtype=np.float32)
        enters = not occupied[cell] or (fitness > elite_obj[cell] and spread[i] <= elite_spread[cell])
        status.append((IMPROVED if occupied[cell] else NEW) if enters else NOT_ADDED)
        index.append(cell)
        if enters:
            entries.append((cell, -fitness, i, mean_m))
    for cell, group in itertools.groupby(
        sorted(entries, key=lambda e: (e[0], e[1], e[2])), key=lambda e: e[0]
    ):
        _, neg, i, mean_m = next(group)
        occupied[cell], elite_obj[cell], elite_spread[cell] = True, -neg, spread[i]
        elite_x[cell], elite_m[cell] = solutions[i], mean_m
    return occupied, elite_obj, elite_spread, elite_x, elite_m, status, index


@st.composite
def sampled_batches(draw):
    n = draw(st.integers(1, 8))
    s = draw(st.integers(1, 4))
    # quarter steps: the float32 means are exact, so fitness comparisons match the reference
    objective = np.asarray(draw(st.lists(st.integers(-8, 8), min_size=n * s, max_size=n * s)), np.float32) / 4
    measures = draw(st.lists(st.floats(-0.5, 3.5, width=32), min_size=n * s * 2, max_size=n * s * 2))
    measures = np.asarray(measures, np.float32).reshape(n, s, 2)
    if draw(st.booleans()):
        measures[0, -1, 0] = np.nan
    return objective.reshape(n, s), measures


@settings(max_examples=50, deadline=None)
@given(st.lists(sampled_batches(), min_size=1, max_size=3), st.data())
def test_add_equals_the_reference(batches, data):
    s = batches[0][0].shape[1]
    batches = [b for b in batches if b[0].shape[1] == s]
    archive = LowSpreadArchive(CELLS, num_samples=s)
    state = archive.init()
    for k, (objective, measures) in enumerate(batches):
        x = np.arange(len(objective) * 2, dtype=np.float32).reshape(-1, 2) + 100 * k
        ref = reference_add(archive, state, x, objective, measures)
        state, info = jax.jit(archive.add)(state, x, objective, measures)
        occupied, obj, spread, elite_x, elite_m, status, index = ref
        np.testing.assert_array_equal(np.asarray(state.occupied), occupied)
        np.testing.assert_array_equal(np.asarray(state.objective)[occupied], obj[occupied])
        # the spread is computed inside the compiled add here and eagerly by the reference: XLA may
        # round a square root of a sum of squares one unit apart (hypothesis found 2.9993458 vs 2.999346)
        np.testing.assert_allclose(np.asarray(state.fields["spread"])[occupied], spread[occupied], rtol=1e-6)
        np.testing.assert_array_equal(np.asarray(state.solutions)[occupied], elite_x[occupied])
        # atol: XLA:CPU flushes subnormal float32 results to 0 (a mean of 2.9e-39)
        np.testing.assert_allclose(
            np.asarray(state.measures)[occupied], elite_m[occupied], rtol=1e-6, atol=1e-37
        )
        np.testing.assert_array_equal(np.asarray(info.status), status)
        np.testing.assert_array_equal(np.asarray(info.index), index)


def test_a_fitter_but_more_spread_candidate_is_refused_and_a_tighter_one_enters():
    archive = LowSpreadArchive(CELLS, num_samples=2)
    tight = np.array([[[0.5, 0.5], [0.6, 0.5]]], np.float32)  # spread 0.1, cell 0
    loose = np.array(
        [
            [
                [0.1, 0.1],
                [0.9, 0.9],
            ]
        ],
        np.float32,
    )  # spread ~1.13, cell 0
    state, info = archive.add(archive.init(), np.zeros((1, 2)), np.array([[1.0, 1.0]]), tight)
    assert int(info.status[0]) == NEW
    state, info = archive.add(state, np.ones((1, 2)), np.array([[5.0, 5.0]]), loose)
    assert int(info.status[0]) == NOT_ADDED and float(info.value[0]) == 4.0
    assert float(state.objective[0]) == 1.0
    state, info = archive.add(state, 2 * np.ones((1, 2)), np.array([[2.0, 2.0]]), tight * 0.99)
    assert int(info.status[0]) == IMPROVED and float(state.objective[0]) == 2.0
    stats = archive.stats(state)
    assert float(stats["spread_mean"]) == pytest.approx(0.099, rel=1e-5)
    assert math.isnan(float(archive.stats(archive.init())["spread_mean"]))


# ---------------------------------------------------------------------------------------------
# MAP-Elites with a sampled archive


def mels(num_samples=3, batch=8, emitter=None):
    archive = LowSpreadArchive(
        GridArchive(solution_dim=6, dims=(8, 8), ranges=[(0, 1), (0, 1)], qd_score_offset=-1.0),
        num_samples=num_samples,
    )
    emitter = emitter or IsoLineEmitter(x0=jnp.full(6, 0.5), batch_size=batch, iso_sigma=0.02, line_sigma=0.1)
    return MAPElites(archive, [emitter])


def test_every_solution_is_asked_num_samples_times_in_a_row_and_told_once():
    me = mels()
    assert me.population_size == 24
    state = me.init(KEY)
    x, state = me.ask(KEY, state)
    assert x.shape == (24, 6)
    np.testing.assert_array_equal(
        np.asarray(x).reshape(8, 3, 6), np.repeat(np.asarray(x)[::3, None], 3, axis=1)
    )
    evaluation = NoisyArm(num_joints=6).evaluate(KEY, x)
    state, metrics = me.tell(KEY, state, x, evaluation)
    told = np.asarray(evaluation.fitness).reshape(8, 3)  # tell takes minimized fitness
    occupied = np.asarray(state.archive.occupied)
    # every stored objective is the mean of one solution's three samples, negated
    means = -told.mean(axis=1)
    for cell in np.flatnonzero(occupied):
        assert np.min(np.abs(means - float(state.archive.objective[cell]))) < 1e-6
    assert int(metrics["num_elites"]) == occupied.sum() > 0 and "spread_mean" in metrics


def test_a_nan_sample_keeps_its_solution_out():
    me = mels(num_samples=3, batch=4)
    state = me.init(KEY)
    x, state = me.ask(KEY, state)
    fitness = jnp.arange(12, dtype=jnp.float32) / 10
    # the fittest solution's second sample is NaN; its other two agree on the cell (so its modal
    # cell, mean fitness and mean measures there are all finite)
    descriptor = jnp.full((12, 2), 0.5).at[1, 0].set(jnp.nan)
    state, _ = me.tell(KEY, state, x, Evaluation(fitness=fitness, descriptor=descriptor))
    # one cell; objectives (minimized fitness negated) -0.1 (the NaN sample), -0.4, -0.7, -1.0
    elite = np.asarray(state.archive.objective)[np.asarray(state.archive.occupied)]
    assert elite == pytest.approx([-0.4])


def test_the_bandit_scheduler_asks_each_solution_num_samples_times():
    centroids = np.array([[0.2, 0.2], [0.8, 0.2], [0.2, 0.8], [0.8, 0.8]], np.float32)
    archive = LowSpreadArchive(
        CVTArchive(solution_dim=4, centroids=centroids, ranges=[(0, 1)] * 2), num_samples=2
    )
    pool = [GaussianEmitter(x0=jnp.zeros(4), sigma=0.1, batch_size=5) for _ in range(3)]
    bandit = BanditMAPElites(archive, pool, num_active=2)
    assert bandit.population_size == 20
    result = evotensor.run(bandit, Arm(num_joints=4), generations=5, key=KEY)
    assert int(result.state.archive.occupied.sum()) >= 1


@dataclasses.dataclass(frozen=True)
class FitButNoisy:
    """Fitness ``x[0]`` (maximized), descriptor ``x[1:3]`` plus noise of std ``x[0] / 4``: the
    fitter a solution, the less reproducible its cell (the trade-off ME-LS resolves)."""

    maximize = True

    def evaluate(self, key, x):
        x = jnp.clip(x, 0.0, 1.0)
        noise = jax.random.normal(key, (x.shape[0], 2)) * x[:, :1] / 4
        return Evaluation(fitness=x[:, 0], descriptor=jnp.clip(x[:, 1:3] + noise, 0.0, 1.0))


def test_low_spread_keeps_reproducible_elites_where_map_elites_keeps_lucky_ones():
    """The same evaluations (128 a generation), corrected by 16 re-evaluations: ME-LS's elites land
    in their cells more reliably, so its corrected archive keeps more of them."""
    problem = FitButNoisy()
    cells = GridArchive(solution_dim=3, dims=(8, 8), ranges=[(0, 1), (0, 1)])
    emitter = lambda b: IsoLineEmitter(x0=jnp.full(3, 0.5), batch_size=b, iso_sigma=0.05, line_sigma=0.1)  # noqa: E731
    std, kept, fit = {}, {}, {}
    for name, me in (
        ("low", MAPElites(LowSpreadArchive(cells, num_samples=4), [emitter(32)])),
        ("plain", MAPElites(cells, [emitter(128)])),
    ):
        result = evotensor.run(me, problem, generations=100, key=KEY)
        corrected = corrected_archive(me, result.state, problem, jax.random.key(1), num_reevals=16)
        std[name] = float(np.nanmean(np.asarray(corrected.measures_std)))
        kept[name] = int(corrected.state.occupied.sum())
        archive = result.state.archive
        fit[name] = float(
            np.mean(np.clip(np.asarray(archive.solutions)[np.asarray(archive.occupied), 0], 0, 1))
        )
    assert fit["plain"] > 0.95 and fit["low"] < 0.9  # ME climbs to the noisiest fitness, ME-LS does not
    assert std["low"] < 0.8 * std["plain"]
    assert kept["low"] > kept["plain"]


# ---------------------------------------------------------------------------------------------
# corrected archives


def test_a_deterministic_problem_corrects_to_the_same_archive():
    problem = Arm(num_joints=2)
    me = MAPElites(
        GridArchive(solution_dim=2, dims=(6, 6), ranges=[(0, 1), (0, 1)]),
        [GaussianEmitter(x0=jnp.full(2, 0.5), sigma=0.3, batch_size=16)],
    )
    result = evotensor.run(me, problem, generations=10, key=KEY)
    corrected = corrected_archive(me, result.state, problem, KEY, num_reevals=3)
    for field in ("occupied", "objective", "measures", "solutions"):
        np.testing.assert_array_equal(getattr(corrected.state, field), getattr(result.state.archive, field))
    occupied = np.asarray(result.state.archive.occupied)
    np.testing.assert_allclose(np.asarray(corrected.fitness_std)[occupied], 0.0, atol=1e-6)
    assert np.all(np.isnan(np.asarray(corrected.measures_std)[~occupied]))


@pytest.mark.parametrize("reducer", ["median", "mean"])
def test_corrected_elites_are_the_reduced_reevaluations(reducer):
    problem = NoisyArm(num_joints=3, fitness_noise=0.2, descriptor_noise=0.0)
    me = MAPElites(
        GridArchive(solution_dim=3, dims=(4, 4), ranges=[(0, 1), (0, 1)]),
        [GaussianEmitter(x0=jnp.full(3, 0.5), sigma=0.3, batch_size=16)],
    )
    result = evotensor.run(me, problem, generations=5, key=KEY)
    archive = result.state.archive
    corrected = corrected_archive(
        me, result.state, problem, KEY, num_reevals=5, fitness_reducer=reducer, measures_reducer=reducer
    )
    samples = np.stack(
        [
            np.asarray(problem.evaluate(jax.random.fold_in(KEY, r), archive.solutions).fitness)
            for r in range(5)
        ]
    )
    want = getattr(np, reducer)(samples, axis=0)
    occupied = np.asarray(archive.occupied)
    # no descriptor noise: every elite stays in its cell, with the reduced fitness
    np.testing.assert_array_equal(np.asarray(corrected.state.occupied), occupied)
    np.testing.assert_allclose(np.asarray(corrected.state.objective)[occupied], want[occupied], rtol=1e-6)
    np.testing.assert_allclose(
        np.asarray(corrected.fitness_std)[occupied], samples.std(axis=0)[occupied], rtol=1e-5
    )


def test_an_archive_and_its_state_correct_as_their_strategy_does():
    problem = NoisyArm(num_joints=4)
    template = {"a": jnp.zeros(2), "b": jnp.zeros(2)}
    me = MAPElites(
        GridArchive(solution_dim=4, dims=(4, 4), ranges=[(0, 1), (0, 1)]),
        [GaussianEmitter(x0=jnp.full(4, 0.5), sigma=0.3, batch_size=16)],
        solution=template,
    )

    @dataclasses.dataclass(frozen=True)
    class DictArm:  # the arm on the template's pytrees
        maximize = True

        def evaluate(self, key, genotypes):
            return problem.evaluate(key, jnp.concatenate([genotypes["a"], genotypes["b"]], axis=1))

    result = evotensor.run(me, DictArm(), generations=5, key=KEY)
    by_strategy = corrected_archive(me, result.state, DictArm(), KEY, num_reevals=3)
    by_archive = corrected_archive(
        me.archive, result.state.archive, DictArm(), KEY, num_reevals=3, solution=template
    )
    for a, b in zip(jax.tree.leaves(by_strategy[1:]), jax.tree.leaves(by_archive[1:]), strict=True):
        np.testing.assert_array_equal(a, b)
    assert int(by_archive.state.occupied.sum()) > 0


def test_a_low_spread_run_corrects_into_its_plain_cells():
    me = mels(num_samples=2, batch=8)
    problem = NoisyArm(num_joints=6)
    result = evotensor.run(me, problem, generations=4, key=KEY)
    corrected = corrected_archive(me, result.state, problem, KEY, num_reevals=2)
    assert corrected.archive is me.archive.cells
    assert "spread" not in corrected.state.fields


# ---------------------------------------------------------------------------------------------
# bad input


def low(**kw):
    return LowSpreadArchive(**{"cells": CELLS, "num_samples": 2, **kw})


def add(**kw):
    archive = low()
    args = {
        "state": archive.init(),
        "solutions": np.zeros((3, 2)),
        "objective": np.zeros((3, 2)),
        "measures": np.zeros((3, 2, 2)),
        **kw,
    }
    return archive.add(**args)


def correct(**kw):
    me = mels(num_samples=2, batch=4)
    args = {
        "source": me,
        "state": me.init(KEY),
        "problem": NoisyArm(num_joints=6),
        "key": KEY,
        "num_reevals": 2,
        **kw,
    }
    return corrected_archive(**args)


MAE = GridArchive(solution_dim=6, dims=(8, 8), ranges=[(0, 1), (0, 1)], learning_rate=0.1, threshold_min=0.0)
CASES = [
    ("archive", low, "num_samples", {"num_samples": 0}),
    ("archive", low, "cells", {"cells": "grid"}),
    ("archive", low, "cells", {"cells": low()}),
    (
        "archive",
        low,
        "cells",
        {
            "cells": GridArchive(
                solution_dim=2, dims=(3,), ranges=[(0, 1)], learning_rate=0.5, threshold_min=0.0
            )
        },
    ),
    ("add", add, "objective", {"objective": np.zeros((3, 3))}),
    ("add", add, "objective", {"objective": np.zeros((2, 2))}),
    ("add", add, "measures", {"measures": np.zeros((3, 2))}),
    ("add", add, "fields", {"fields": {"a": np.zeros(3)}}),
    ("add", add, "state", {"state": CELLS.init()}),
    (
        "map-elites",
        lambda **kw: mels(
            emitter=PolicyGradientEmitter(
                policy=POLICY, apply=lambda p, o: o @ p[0]["w"], observation_size=3, batch_size=4
            )
        ),
        "uses_evaluation",
        {},
    ),
    (
        "map-elites",
        lambda **kw: MAPElites(
            low(), [GaussianEmitter(x0=jnp.zeros(2), sigma=0.1, batch_size=2)], result_archive=CELLS
        ),
        "num_samples",
        {},
    ),
    (
        "map-elites",
        lambda **kw: mels().on_mesh(jax.sharding.Mesh(np.array(jax.devices()[:1]), ("pop",))),
        "LowSpreadArchive",
        {},
    ),
    ("corrected", correct, "num_reevals", {"num_reevals": 0}),
    ("corrected", correct, "fitness_reducer", {"fitness_reducer": "modal"}),
    ("corrected", correct, "measures_reducer", {"measures_reducer": 3}),
    ("corrected", correct, "source", {"source": "me"}),
    ("corrected", correct, "strategy", {"solution": np.zeros(6)}),
    ("corrected", lambda **kw: correct(source=CELLS, **kw), "state", {}),
    (
        "corrected",
        lambda **kw: correct(source=CELLS, state=CELLS.init(), **kw),
        "solution",
        {"solution": np.zeros(3)},
    ),
    ("corrected", correct, "problem", {"problem": object()}),
    ("corrected", correct, "target", {"target": low()}),
    (
        "corrected",
        correct,
        "target",
        {"target": GridArchive(solution_dim=5, dims=(8, 8), ranges=[(0, 1), (0, 1)])},
    ),
    (
        "corrected",
        lambda **kw: corrected_archive(
            MAPElites(MAE, [GaussianEmitter(x0=jnp.zeros(6), sigma=0.1, batch_size=2)]),
            MAPElites(MAE, [GaussianEmitter(x0=jnp.zeros(6), sigma=0.1, batch_size=2)]).init(KEY),
            NoisyArm(num_joints=6),
            KEY,
            num_reevals=1,
        ),
        "target",
        {},
    ),
]

test_bad_argument_is_refused_naming_it = refusal_test(CASES)
