"""Density Descent Search (evotensor.qd.density_archive): the kernel density against a float64
reference of pyribs' formula, the reservoir against Algorithm R one measure at a time (any batching,
uniform inclusion), the density ranker, MAP-Elites with a density search archive, bad input."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.bad_input_table import refusal_test

import evotensor
from evotensor.core import rng
from evotensor.problems.qd import LinearProjection
from evotensor.qd import (
    NEW,
    NOT_ADDED,
    AddInfo,
    BanditMAPElites,
    CMAESEmitter,
    DensityArchive,
    EmitterGroup,
    GaussianEmitter,
    GridArchive,
    MAPElites,
)
from evotensor.qd.density_archive import kde_log_density
from evotensor.qd.emitters import get_ranker

KEY = jax.random.key(0)


def reference_log_density(measures, buffer, h):
    """pyribs' ``gaussian_kde_measures`` in float64, as a logarithm (log-sum-exp, no underflow)."""
    m, b = np.asarray(measures, np.float64), np.asarray(buffer, np.float64)
    if len(b) == 0:
        return np.full(len(m), -np.inf)
    d = np.sqrt(((m[:, None] - b[None]) ** 2).sum(-1)) / h
    e = -0.5 * d**2
    top = e.max(axis=1, keepdims=True)
    log_sum = top[:, 0] + np.log(np.exp(e - top).sum(axis=1))
    return log_sum - np.log(len(b) * h) - 0.5 * np.log(2 * np.pi)


# ---------------------------------------------------------------------------------------------
# the density


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 30), st.integers(0, 30), st.integers(1, 4), st.integers(0, 2**31 - 1))
def test_log_density_is_pyribs_kde_formula(rows, size, dims, seed):
    size = min(size, rows)
    r = np.random.default_rng(seed)
    buffer = r.normal(size=(rows, dims)).astype(np.float32)
    measures = r.normal(scale=2.0, size=(7, dims)).astype(np.float32)
    h = float(r.uniform(0.2, 2.0))
    got = np.asarray(kde_log_density(jnp.asarray(measures), jnp.asarray(buffer), jnp.int32(size), h))
    want = reference_log_density(measures, buffer[:size], h)
    if size == 0:
        assert np.all(got == -np.inf)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        # and the density itself is pyribs' sum of kernels over (n h)
        d = np.sqrt(((measures[:, None] - buffer[None, :size]) ** 2).sum(-1)) / h
        kernels = np.exp(-0.5 * d**2) / np.sqrt(2 * np.pi)
        np.testing.assert_allclose(np.exp(got), kernels.sum(1) / (size * h), rtol=2e-5, atol=1e-30)


def test_far_candidates_still_rank_by_distance_and_nonfinite_ones_are_nan():
    archive = DensityArchive(measure_dim=2, buffer_size=4, bandwidth=0.01)
    state, _ = archive.add(archive.init(), jnp.zeros((2, 1)), jnp.zeros(2), jnp.zeros((2, 2)))
    far = jnp.array([[30.0, 0.0], [10.0, 0.0], [20.0, 0.0], [jnp.nan, 0.0], [0.0, jnp.inf]])
    density = np.asarray(archive.density(state, far))
    log_density = np.asarray(archive.log_density(state, far))
    assert np.all(density[:3] == 0.0)  # float32 underflow: pyribs would rank these as ties
    assert log_density[1] > log_density[2] > log_density[0]  # nearer: denser
    assert np.all(np.isnan(log_density[3:])) and np.all(np.isnan(density[3:]))
    order, _ = get_ranker("density").order(None, None, archive.add(state, None, jnp.zeros(5), far)[1], None)
    assert order.tolist() == [0, 2, 1, 3, 4]  # rarest first, NaN last


def test_an_empty_buffer_gives_zero_density():
    archive = DensityArchive(measure_dim=3, buffer_size=5, bandwidth=1.0)
    _, info = archive.add(archive.init(), jnp.zeros((4, 2)), jnp.zeros(4), jnp.ones((4, 3)))
    assert np.all(np.asarray(info.density) == 0) and np.all(np.asarray(info.log_density) == -np.inf)
    assert info.status.tolist() == [NEW] * 4 and np.all(np.asarray(info.value) == np.inf)


def test_density_ranker_orders_lowest_density_first_and_needs_a_density():
    info = AddInfo(status=jnp.full(4, 2), value=jnp.zeros(4), index=jnp.zeros(4, jnp.int32))
    archive = DensityArchive(measure_dim=1, buffer_size=8, bandwidth=0.5)
    state, _ = archive.add(archive.init(), None, jnp.zeros(8), jnp.linspace(0.0, 1.0, 8)[:, None])
    _, dense = archive.add(state, None, jnp.zeros(4), jnp.array([[0.5], [3.0], [1.0], [-1.0]]))
    order, values = get_ranker("density").order(None, None, dense, None)
    assert order.tolist() == [1, 3, 2, 0]
    np.testing.assert_array_equal(values, -dense.log_density)
    with pytest.raises(ValueError, match="'density' needs an archive"):
        get_ranker("density").order(None, None, info, None)


# ---------------------------------------------------------------------------------------------
# the reservoir


def reference_reservoir(archive, stream):
    """Algorithm R one measure at a time, with the archive's draws: ``[N, D]`` buffer, size."""
    n = archive.buffer_size
    buffer = np.zeros((n, archive.measure_dim), np.float32)
    base = archive.init().key
    for t, m in enumerate(stream):
        if t < n:
            buffer[t] = m
        else:
            j = int(rng.randint(jax.random.fold_in(base, t), (), 0, t + 1))
            if j < n:
                buffer[j] = m
    return buffer, min(len(stream), n)


@settings(max_examples=30, deadline=None)
@given(
    st.integers(1, 8),
    st.lists(st.integers(1, 12), min_size=1, max_size=6),
    st.integers(0, 2**32 - 1),
    st.integers(0, 2**31 - 1),
)
def test_reservoir_is_algorithm_r_whatever_the_batches(buffer_size, cuts, seed, data_seed):
    archive = DensityArchive(measure_dim=2, buffer_size=buffer_size, bandwidth=1.0, seed=seed)
    stream = np.random.default_rng(data_seed).normal(size=(sum(cuts), 2)).astype(np.float32)
    add = jax.jit(archive.add)
    state, start = archive.init(), 0
    for cut in cuts:
        batch = stream[start : start + cut]
        state, info = add(state, None, jnp.zeros(cut), jnp.asarray(batch))
        start += cut
        written = np.asarray(info.index)
        # a written candidate's measures are in the buffer at its row, unless a later one overwrote it
        for i in np.flatnonzero(written >= 0):
            later = written[i + 1 :] == written[i]
            assert later.any() or np.array_equal(np.asarray(state.buffer)[written[i]], batch[i])
    want, size = reference_reservoir(archive, stream)
    np.testing.assert_array_equal(np.asarray(state.buffer), want)
    assert int(state.size) == size and int(state.seen) == len(stream)


def test_reservoir_keeps_a_uniform_sample_of_the_stream():
    """Each of T = 200 stream positions is in a buffer of 20 with probability 1/10: over 400 keys the
    inclusion counts pass a chi-square test, and batch-first measures are not favoured (pyribs'
    batched Algorithm L keeps 64 of 100 rows from the first measures of batches)."""
    n, batch, batches, seeds = 20, 25, 8, 400
    stream = np.arange(batch * batches, dtype=np.float32)[:, None]

    archive = DensityArchive(measure_dim=1, buffer_size=n, bandwidth=1.0)

    def run(key):
        state = archive.init(key)
        for b in range(batches):
            state, _ = archive.add(state, None, jnp.zeros(batch), stream[b * batch : (b + 1) * batch])
        return state.buffer[:, 0]

    kept = np.asarray(jax.jit(jax.vmap(run))(jax.random.split(KEY, seeds))).astype(int)  # [seeds, n]
    assert all(len(set(row)) == n for row in kept)  # a sample without repeats
    counts = np.bincount(kept.ravel(), minlength=len(stream))
    expected = seeds * n / len(stream)
    chi2 = ((counts - expected) ** 2 / expected).sum()
    # 199 degrees of freedom: the 0.999 quantile is ~267
    assert chi2 < 267, chi2
    first = np.isin(kept, np.arange(0, len(stream), batch)).sum(axis=1).mean()
    assert first < 2 * n * batches / len(stream), first  # expected 0.8 per buffer


def test_invalid_candidates_are_reported_but_stay_out_of_the_stream():
    archive = DensityArchive(measure_dim=2, buffer_size=6, bandwidth=1.0)
    state, _ = archive.add(archive.init(), jnp.zeros((1, 3)), jnp.zeros(1), jnp.ones((1, 2)))
    solutions = jnp.zeros((5, 3)).at[2, 1].set(jnp.inf)
    objective = jnp.array([0.0, jnp.nan, 1.0, 2.0, 3.0])
    measures = jnp.array([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0], [jnp.nan, 0.0], [4.0, 4.0]])
    new, info = archive.add(state, solutions, objective, measures)
    assert info.status.tolist() == [NEW, NOT_ADDED, NOT_ADDED, NOT_ADDED, NEW]
    assert info.index.tolist() == [1, -1, -1, -1, 2] and int(new.seen) == 3 and int(new.size) == 3
    np.testing.assert_array_equal(archive.buffer(new), [[1, 1], [0, 0], [4, 4]])  # the filled rows
    log_density = np.asarray(info.log_density)
    assert np.all(np.isfinite(log_density[[0, 1, 2, 4]])) and np.isnan(log_density[3])  # NaN measures only
    assert np.isneginf(np.asarray(info.value)[1:4]).all()


# ---------------------------------------------------------------------------------------------
# Density Descent Search


def dds(dims=10, emitters=3, batch=12, **kw):
    problem = LinearProjection(num_dims=dims, function="sphere")
    ranges = problem.descriptor_ranges
    grid = GridArchive(solution_dim=dims, dims=(20, 20), ranges=ranges)
    density = DensityArchive(measure_dim=2, buffer_size=500, bandwidth=0.1 * ranges[0][1])
    emitter = CMAESEmitter(
        np.zeros(dims),
        1.5,
        ranker="density",
        selection_rule="mu",
        restart_rule="basic",
        batch_size=batch,
        **kw,
    )
    return problem, MAPElites(density, [EmitterGroup(emitter, emitters)], result_archive=grid)


def test_dds_spreads_wider_than_the_same_emitters_optimizing_the_objective():
    """The density ranker is what spreads the search: the same CMA-ES emitters (same restarts and
    selection) ranked by objective cover far fewer cells of the result grid in the same evaluations."""
    problem, strategy = dds()
    grid = GridArchive(solution_dim=10, dims=(20, 20), ranges=problem.descriptor_ranges)
    emitter = CMAESEmitter(
        np.zeros(10), 1.5, ranker="obj", selection_rule="mu", restart_rule="basic", batch_size=12
    )
    greedy = MAPElites(grid, [EmitterGroup(emitter, 3)])
    coverage = {}
    for name, s in (("dds", strategy), ("obj", greedy)):
        result = evotensor.run(s, problem, 150, KEY, progress=False)
        archive, state = s.reported_archive(result.state)
        coverage[name] = float(archive.stats(state)["coverage"])
        assert float(result.history["coverage"][-1]) == pytest.approx(coverage[name])
    assert coverage["dds"] > 2 * coverage["obj"], coverage


def test_emitters_read_their_elites_from_the_result_archive():
    problem, strategy = dds(emitters=1, batch=8)
    assert strategy.elites is strategy.result_archive
    state = strategy.init(KEY)
    for g in range(3):
        x, state = strategy.ask(jax.random.key(g), state)
        state, metrics = strategy.tell(jax.random.key(g + 10), state, x, problem.evaluate(KEY, x))
    # the run's counts are the result archive's: new cells, not the density archive's "all new"
    occupied = int(state.result.occupied.sum())
    assert 0 < occupied < 24 and int(metrics["new_cells"]) <= 8
    assert int(state.archive.seen) == 24
    # a restart draws its mean from the result archive's elites
    emitter = strategy.emitters[0].emitter
    one = jax.tree_util.tree_map(lambda a: a[0], state.emitters[0])
    _, info = strategy.archive.add(state.archive, None, jnp.zeros(8), jnp.zeros((8, 2)))
    forced = emitter.tell(
        jax.random.key(5),
        one.replace(iterations=jnp.int32(0)),
        strategy.elites,
        state.result,
        jnp.zeros((8, 10)),
        jnp.zeros(8),
        jnp.zeros((8, 2)),
        info,
    )  # all values equal: the flat-ranking stop fires, so this tell restarts
    assert int(forced.restarts) == int(one.restarts) + 1
    elites = np.asarray(state.result.solutions)[np.asarray(state.result.occupied)]
    assert np.any(np.all(np.isclose(elites, np.asarray(forced.cma.mean)), axis=1))


def test_a_run_on_a_mesh_resumes_from_its_checkpoint_as_the_plain_run(tmp_path):
    """On a (one-device) mesh the reservoir is laid out whole, written to the checkpoint and laid
    out again on resume (``pad``); the resumed run equals the plain run bit for bit."""
    problem, strategy = dds(emitters=2, batch=4)
    mesh = jax.make_mesh((1,), ("pop",))
    options = dict(progress=False, chunk_size=3)
    plain = evotensor.run(strategy, problem, 6, KEY, **options)
    evotensor.run(strategy, problem, 3, KEY, mesh=mesh, run_dir=tmp_path, **options)
    resumed = evotensor.run(strategy, problem, 6, KEY, mesh=mesh, run_dir=tmp_path, resume=True, **options)
    assert int(resumed.state.archive.seen) == 48
    for a, b in zip(
        jax.tree_util.tree_leaves(resumed.state), jax.tree_util.tree_leaves(plain.state), strict=True
    ):
        if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_bandit_credits_emitters_with_the_result_archive_additions():
    problem = LinearProjection(num_dims=6, function="sphere")
    ranges = problem.descriptor_ranges
    pool = [GaussianEmitter(x0=jnp.zeros(6), sigma=s, batch_size=10) for s in (0.01, 1.0, 5.0)]
    bandit = BanditMAPElites(
        DensityArchive(measure_dim=2, buffer_size=100, bandwidth=1.0),
        pool,
        num_active=2,
        result_archive=GridArchive(solution_dim=6, dims=(10, 10), ranges=ranges),
    )
    result = evotensor.run(bandit, problem, 6, KEY, progress=False)
    state = result.state
    assert int(state.archive.seen) == 120
    assert float(state.success.sum()) == float(result.history["added"].sum()) < 120


def test_the_dds_task_runs_reports_and_resumes_bit_identically(tmp_path):
    from tests.qd.test_tasks_and_plots import run_and_resume

    from evotensor.tasks import get_task

    task = get_task("qd-dds").build({"dims": 8, "cells": 10, "emitters": 2, "pop": 8, "buffer": 50})
    assert task.strategy.archive.bandwidth == pytest.approx(0.1 * 8 / 2 * 5.12)
    first, resumed = run_and_resume(task, tmp_path, 5, 10, 5)
    assert first.history["coverage"][-1] > 0
    text = task.report(resumed, tmp_path)
    assert "density buffer: 50 of 50 measures (160 seen)" in text and "of 100 cells" in text
    assert get_task("qd-dds").build({"bandwidth": 2.0}).strategy.archive.bandwidth == 2.0
    with pytest.raises(ValueError, match="option bandwidth"):
        get_task("qd-dds").build({"bandwidth": -1})


# ---------------------------------------------------------------------------------------------
# bad input


def density(**kw):
    return DensityArchive(**{"measure_dim": 2, "buffer_size": 10, "bandwidth": 1.0, **kw})


def add(**kw):
    args = {
        "state": density().init(),
        "solutions": None,
        "objective": jnp.zeros(3),
        "measures": jnp.zeros((3, 2)),
    }
    args.update(kw)
    return density().add(**args)


def grid(dims=4):
    return GridArchive(solution_dim=dims, dims=(4, 4), ranges=[(0, 1)] * 2)


def me(**kw):
    args = {"archive": density(), "emitters": [GaussianEmitter(x0=jnp.zeros(4), sigma=0.1, batch_size=2)]}
    args.update(kw)
    return MAPElites(args.pop("archive"), args.pop("emitters"), **args)


CASES = [
    ("density", density, "measure_dim", {"measure_dim": 0}),
    ("density", density, "buffer_size", {"buffer_size": 0}),
    ("density", density, "buffer_size", {"buffer_size": 2.5}),
    ("density", density, "bandwidth", {"bandwidth": 0.0}),
    ("density", density, "bandwidth", {"bandwidth": math.nan}),
    ("density", density, "bandwidth", {"bandwidth": "wide"}),
    ("density", density, "seed", {"seed": -1}),
    ("density", density, "seed", {"seed": True}),
    ("density", density, "seed", {"seed": 2**32}),
    ("add", add, "measures", {"measures": jnp.zeros((3, 3))}),
    ("add", add, "objective", {"objective": jnp.zeros((3, 2))}),
    ("add", lambda **kw: density().log_density(density().init(), jnp.zeros(2)), "measures", {}),
    ("map-elites", me, "result_archive", {}),
    (
        "map-elites",
        me,
        "measure_dim",
        {"result_archive": GridArchive(solution_dim=4, dims=(4,), ranges=[(0, 1)])},
    ),
    ("map-elites", me, "solution", {"result_archive": grid(), "solution": np.zeros(3)}),
]

test_bad_argument_is_refused_naming_it = refusal_test(CASES)
