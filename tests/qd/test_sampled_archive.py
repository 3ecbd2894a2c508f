"""MAP-Elites-Sampling (evotensor.qd.sampled_archive) and the extractors (evotensor.qd.extractors):
every extractor against a NumPy definition, the insertion against the cells archive's own add on
the extracted values, whole runs on a noisy arm, the task, corrected archives, bad input."""

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.bad_input_table import refusal_test

import evotensor
from evotensor.problems.qd import Arm, NoisyArm
from evotensor.qd import (
    NOT_ADDED,
    GridArchive,
    IsoLineEmitter,
    LowSpreadArchive,
    MAPElites,
    SampledArchive,
    corrected_archive,
)
from evotensor.qd import extractors as ex

KEY = jax.random.key(0)
CELLS = GridArchive(solution_dim=2, dims=(3, 2), ranges=[(0, 3), (0, 2)])


# ---------------------------------------------------------------------------------------------
# the extractors against their definitions


def reference_mode(column):
    counts = collections.Counter(column.tolist())
    most = max(counts.values())
    return min(v for v, c in counts.items() if c == most)


def mean_distances(samples):  # [S, ...] -> [S]: each sample's mean distance to all, in float64
    flat = samples.reshape(len(samples), -1).astype(np.float64)
    return np.array([np.mean([np.linalg.norm(a - b) for b in flat]) for a in flat])


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 7), st.sampled_from([(), (1,), (3,)]), st.booleans(), st.integers(0, 2**31 - 1))
def test_extractors_are_their_definitions(samples, trailing, repeats, seed):
    r = np.random.default_rng(seed)
    shape = (4, samples, *trailing)
    # repeated values make the mode (and ties of the closest) matter
    x = (r.integers(-2, 3, shape) if repeats else r.normal(size=shape)).astype(np.float32)
    got = {
        name: np.asarray(f(jnp.asarray(x))) for name, f in {**ex.EXPECTATIONS, **ex.REPRODUCIBILITY}.items()
    }
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(got["average"], x64.mean(axis=1), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got["median"], np.median(x64, axis=1), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got["std"], x64.std(axis=1), rtol=1e-5, atol=1e-5)
    mad = np.median(np.abs(x64 - np.median(x64, axis=1, keepdims=True)), axis=1)
    np.testing.assert_allclose(got["mad"], mad, rtol=1e-5, atol=1e-6)
    iqr = np.quantile(x64, 0.75, axis=1) - np.quantile(x64, 0.25, axis=1)
    np.testing.assert_allclose(got["iqr"], iqr, rtol=1e-5, atol=1e-5)
    flat = x.reshape(4, samples, -1)
    mode = np.array([[reference_mode(flat[b, :, e]) for e in range(flat.shape[2])] for b in range(4)])
    np.testing.assert_array_equal(got["mode"], mode.reshape(got["mode"].shape))
    for b in range(4):  # a sample of least mean distance (in 1-d every sample between the middle
        # two of an even count ties exactly: float32 rounding picks one)
        d = mean_distances(x[b])
        match = [i for i in range(samples) if np.array_equal(x[b, i], got["closest"][b])]
        assert match and d[match[0]] <= d.min() + 1e-5 * (1 + d.min())
    for name in ("average", "median", "mode", "closest", "std", "mad", "iqr"):
        assert got[name].shape == (4, *trailing), name


def test_average_is_correctly_rounded_and_mode_takes_the_lowest_of_ties():
    # 3 samples of 0.1f: the float32 sum / 3 is 0.1f; a product with the rounded 1/3 is not always
    x = jnp.full((1, 3), np.float32(0.1))
    assert np.asarray(ex.average(x))[0] == np.float32(0.1)
    assert float(ex.mode(jnp.asarray([[3.0, 1.0, 3.0, 1.0, 2.0]]))[0]) == 1.0
    assert int(ex.mode(jnp.asarray([[4, 7, 7, 4]], jnp.int32))[0]) == 4
    # 0 1 2 3: samples 1 and 2 both have mean distance 1: the first wins
    assert float(ex.closest(jnp.asarray([[0.0, 1.0, 2.0, 3.0]]))[0]) == 1.0
    assert float(ex.closest(jnp.asarray([[3.0, 2.0, 1.0, 0.0]]))[0]) == 2.0


# ---------------------------------------------------------------------------------------------
# the archive


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from(sorted(ex.EXPECTATIONS)),
    st.sampled_from(sorted(ex.EXPECTATIONS)),
    st.integers(1, 4),
    st.integers(0, 2**31 - 1),
)
def test_add_is_the_cells_add_of_the_extracted_values(fitness_extractor, descriptor_extractor, samples, seed):
    r = np.random.default_rng(seed)
    archive = SampledArchive(
        CELLS,
        num_samples=samples,
        fitness_extractor=fitness_extractor,
        descriptor_extractor=descriptor_extractor,
    )
    state = want = CELLS.init()
    for _ in range(3):
        x = r.uniform(0, 1, (6, 2)).astype(np.float32)
        objective = r.integers(0, 4, (6, samples)).astype(np.float32)  # ties between candidates
        measures = r.uniform(-0.5, 3.5, (6, samples, 2)).astype(np.float32)
        if r.random() < 0.5:
            objective[r.integers(6), r.integers(samples)] = np.nan  # that candidate stays out
        state, info = archive.add(state, x, objective, measures)
        f = np.asarray(ex.EXPECTATIONS[fitness_extractor](jnp.asarray(objective)))
        m = np.asarray(ex.EXPECTATIONS[descriptor_extractor](jnp.asarray(measures)))
        finite = np.isfinite(objective).all(axis=1)
        want, want_info = CELLS.add(want, x, np.where(finite, f, np.nan), m)
        for a, b in zip(jax.tree_util.tree_leaves(state), jax.tree_util.tree_leaves(want), strict=True):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(info.status, want_info.status)
        np.testing.assert_array_equal(info.value, want_info.value)
        np.testing.assert_array_equal(info.index, want_info.index)
        np.testing.assert_array_equal(info.objective, f)
        np.testing.assert_array_equal(info.measures, m)
        assert np.all(np.asarray(info.status)[~finite] == NOT_ADDED)


def test_cma_mae_thresholds_of_the_cells_apply():
    cells = GridArchive(
        solution_dim=2, dims=(3, 2), ranges=[(0, 3), (0, 2)], learning_rate=0.5, threshold_min=0.0
    )
    archive = SampledArchive(cells, num_samples=2)
    state, info = archive.add(cells.init(), np.zeros((1, 2)), [[4.0, 2.0]], [[[0.5, 0.5], [0.5, 0.5]]])
    assert float(info.value[0]) == 3.0  # improvement over threshold_min 0 of the mean 3
    assert float(state.threshold[0]) == 1.5  # (1 - 0.5) 0 + 0.5 * 3


class NoisyFitness:
    """The 2-joint arm (fitness 0 - joint-angle spread, at most 0) with noise of std 0.3 on the
    fitness only: the descriptors are exact, so every elite stays in its cell."""

    maximize = True

    def evaluate(self, key, x):
        ev = Arm(num_joints=2).evaluate(key, x)
        return ev.replace(fitness=ev.fitness + 0.3 * jax.random.normal(key, ev.fitness.shape))


def test_sampling_keeps_truer_fitness_than_single_evaluations():
    """Plain MAP-Elites keeps the luckiest evaluation of each cell; ME-Sampling's average of 8
    overestimates the noiseless fitness far less, on the same evaluations per generation."""
    cells = GridArchive(solution_dim=2, dims=(6, 6), ranges=[(0, 1), (0, 1)])
    emitter = lambda b: IsoLineEmitter(x0=jnp.full(2, 0.5), batch_size=b, iso_sigma=0.05, line_sigma=0.1)  # noqa: E731
    overestimate = {}
    for name, me in (
        ("sampling", MAPElites(SampledArchive(cells, num_samples=8), [emitter(16)])),
        ("plain", MAPElites(cells, [emitter(128)])),
    ):
        result = evotensor.run(me, NoisyFitness(), generations=60, key=KEY, progress=False)
        assert result.evaluations == 60 * 128
        state = result.state.archive
        occupied = np.asarray(state.occupied)
        truth = np.asarray(Arm(num_joints=2).evaluate(KEY, state.solutions).fitness)
        overestimate[name] = float(np.mean((np.asarray(state.objective) - truth)[occupied]))
    assert overestimate["plain"] > 0.3 and overestimate["sampling"] < 0.4 * overestimate["plain"], (
        overestimate
    )


def test_the_sampling_task_runs_reports_and_resumes_bit_identically(tmp_path):
    from tests.qd.test_tasks_and_plots import run_and_resume

    from evotensor.tasks import get_task

    task = get_task("qd-noisy-arm").build(
        {"joints": 4, "cells": 8, "samples": 3, "reevals": 2, "archive": "sampling", "extractor": "median"}
    )
    archive = task.strategy.archive
    assert isinstance(archive, SampledArchive) and archive.fitness_extractor is ex.median
    first, resumed = run_and_resume(task, tmp_path, 3, 6, 3)
    assert first.evaluations == 3 * 64 * 3
    text = task.report(resumed, tmp_path)
    assert "corrected by 2 re-evaluations" in text
    assert isinstance(get_task("qd-noisy-arm").build({}).strategy.archive, LowSpreadArchive)
    with pytest.raises(ValueError, match="option archive"):
        get_task("qd-noisy-arm").build({"archive": "sample"})
    with pytest.raises(ValueError, match="option extractor"):
        get_task("qd-noisy-arm").build({"extractor": "mean"})


@pytest.mark.parametrize("reducer", ["mode", "closest", "average"])
def test_corrected_archives_take_the_extractors_by_name(reducer):
    problem = NoisyArm(num_joints=3, fitness_noise=0.2, descriptor_noise=0.0)
    me = MAPElites(
        SampledArchive(GridArchive(solution_dim=3, dims=(4, 4), ranges=[(0, 1), (0, 1)]), num_samples=2),
        [IsoLineEmitter(x0=jnp.full(3, 0.5), batch_size=8)],
    )
    result = evotensor.run(me, problem, generations=5, key=KEY, progress=False)
    archive = result.state.archive
    corrected = corrected_archive(me, result.state, problem, KEY, num_reevals=5, fitness_reducer=reducer)
    assert corrected.archive is me.archive.cells  # the sampled archive's own cells
    samples = np.stack(
        [
            np.asarray(problem.evaluate(jax.random.fold_in(KEY, r), archive.solutions).fitness)
            for r in range(5)
        ]
    )
    want = np.asarray(ex.EXPECTATIONS[reducer](jnp.asarray(samples.T)))
    occupied = np.asarray(archive.occupied)
    np.testing.assert_allclose(np.asarray(corrected.state.objective)[occupied], want[occupied], rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# bad input


def sampled(**kw):
    return SampledArchive(kw.pop("cells", CELLS), **{"num_samples": 3, **kw})


def add(**kw):
    args = {
        "state": CELLS.init(),
        "solutions": np.zeros((4, 2)),
        "objective": np.zeros((4, 3)),
        "measures": np.zeros((4, 3, 2)),
    }
    args.update(kw)
    return sampled().add(**args)


CASES = [
    ("archive", sampled, "num_samples", {"num_samples": 0}),
    ("archive", sampled, "cells", {"cells": "grid"}),
    ("archive", sampled, "cells", {"cells": sampled()}),
    (
        "archive",
        sampled,
        "cells",
        {
            "cells": GridArchive(
                solution_dim=2, dims=(2,), ranges=[(0, 1)], extra_fields={"a": ((), np.float32)}
            )
        },
    ),
    ("archive", sampled, "fitness_extractor", {"fitness_extractor": "mean"}),
    ("archive", sampled, "descriptor_extractor", {"descriptor_extractor": 3}),
    ("archive", sampled, "fitness_extractor", {"fitness_extractor": "std"}),  # not an expectation
    ("add", add, "objective", {"objective": np.zeros((4, 2))}),
    ("add", add, "objective", {"objective": np.zeros(4)}),
    ("add", add, "measures", {"measures": np.zeros((4, 2))}),
    ("add", add, "fields", {"fields": {"a": np.zeros(4)}}),
    ("extractor", lambda **kw: ex.get_extractor(kw.get("x", "nope"), "my_extractor"), "my_extractor", {}),
]

test_bad_argument_is_refused_naming_it = refusal_test(CASES)
