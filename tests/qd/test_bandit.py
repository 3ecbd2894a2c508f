"""BanditMAPElites: the scheduling rules against a plain-Python reference of evotensor.qd.bandit's
docstring, the record kept, a whole run (resumed bit-identically) and bad arguments."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import evotensor
from evotensor.core.checks import ArgumentError
from evotensor.problems.qd import LinearProjection
from evotensor.qd import BanditMAPElites, CMAESEmitter, GaussianEmitter, GridArchive


def reference_schedule(
    generation, active, success, selection, restarts_before, restarts_now, num_active, zeta, mode
):
    """The docstring's rules one emitter at a time: ``-> active`` (list of bools)."""
    pool = len(active)
    if generation == 0:
        return [i < num_active for i in range(pool)]
    if mode == "terminated":
        reselect = [now > before or now < 0 for before, now in zip(restarts_before, restarts_now)]
    else:
        reselect = list(active)
    active = [a and not r for a, r in zip(active, reselect)]
    total = sum(success)
    scores = []
    for i in range(pool):
        if selection[i] == 0:
            scores.append(math.inf)
        else:
            explore = zeta * math.sqrt(math.log(total) / selection[i]) if total > 0 else 0.0
            scores.append(success[i] / selection[i] + explore)
    for i in sorted(range(pool), key=lambda i: (-scores[i], -i)):
        if sum(active) >= num_active:
            break
        active[i] = True
    return active


def pool_strategy(pool_size, num_active, mode="terminated", zeta=0.05, batch=4):
    archive = GridArchive(solution_dim=3, dims=(5, 5), ranges=[(-1, 1), (-1, 1)])
    pool = [CMAESEmitter(np.zeros(3), 0.3, batch_size=batch) for _ in range(pool_size)]
    return BanditMAPElites(archive, pool, num_active, reselect=mode, zeta=zeta)


@functools.cache
def compiled_schedule(pool, num_active, mode, zeta):
    """``(strategy, jitted schedule)`` per configuration: examples that share one compile once."""
    strategy = pool_strategy(pool, num_active, mode, zeta)
    return strategy, jax.jit(strategy._schedule)


@settings(max_examples=50, deadline=None)
@given(
    pool=st.integers(1, 6),
    data=st.data(),
    mode=st.sampled_from(["terminated", "all"]),
    zeta=st.sampled_from([0.0, 0.05, 1.0]),
)
def test_schedule_equals_the_reference(pool, data, mode, zeta):
    num_active = data.draw(st.integers(1, pool))
    strategy, schedule = compiled_schedule(pool, num_active, mode, zeta)
    state = strategy.init(jax.random.key(0), None)
    generation = data.draw(st.integers(0, 3))
    active = data.draw(st.lists(st.booleans(), min_size=pool, max_size=pool))
    selection = [4.0 * data.draw(st.integers(0, 5)) for _ in range(pool)]
    success = [float(data.draw(st.integers(0, int(s)))) for s in selection]
    before = data.draw(st.lists(st.integers(0, 2), min_size=pool, max_size=pool))
    now = [b + data.draw(st.integers(0, 1)) for b in before]
    emitters = tuple(s.replace(restarts=jnp.int32(n)) for s, n in zip(state.emitters, now, strict=True))
    state = state.replace(
        generation=jnp.int32(generation),
        active=jnp.asarray(active),
        success=jnp.asarray(success, jnp.float32),
        selection=jnp.asarray(selection, jnp.float32),
        restarts=jnp.asarray(before, jnp.int32),
        emitters=emitters,
    )
    got, restarts = schedule(state)
    want = reference_schedule(generation, active, success, selection, before, now, num_active, zeta, mode)
    assert np.asarray(got).tolist() == want
    assert np.asarray(restarts).tolist() == now


def test_a_run_keeps_the_record_and_resumes_bit_identically(tmp_path):
    problem = LinearProjection(num_dims=6, function="sphere")
    archive = GridArchive(solution_dim=6, dims=(10, 10), ranges=problem.descriptor_ranges)
    pool = [CMAESEmitter(np.zeros(6), 0.5, ranker=r, batch_size=8) for r in ("imp", "obj", "rd", "2imp")]
    pool.append(GaussianEmitter(0.2, np.zeros(6), batch_size=8))
    strategy = BanditMAPElites(archive, pool, num_active=2)
    assert strategy.population_size == 16
    full = evotensor.run(strategy, problem, 30, jax.random.key(3), chunk_size=10, progress=False)
    state = full.state
    assert int(state.active.sum()) == 2
    assert float(state.selection.sum()) == 30 * 16  # every candidate credited to its emitter
    added = np.asarray(full.history["added"]).sum()
    assert float(state.success.sum()) == added > 0
    assert (np.asarray(state.selection) > 0).sum() >= 3  # the never-selected ones get their turn
    assert float(full.history["coverage"][-1]) > 0.1
    evotensor.run(strategy, problem, 20, jax.random.key(3), run_dir=tmp_path, chunk_size=10, progress=False)
    resumed = evotensor.run(
        strategy, problem, 30, jax.random.key(3), run_dir=tmp_path, chunk_size=10, resume=True, progress=False
    )
    for a, b in zip(
        jax.tree_util.tree_leaves(resumed.state), jax.tree_util.tree_leaves(full.state), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_each_active_emitter_learns_from_its_own_slice():
    """Two active CMA emitters: each one's iteration count grows only in the generations it ran."""
    problem = LinearProjection(num_dims=4, function="sphere")
    archive = GridArchive(solution_dim=4, dims=(6, 6), ranges=problem.descriptor_ranges)
    pool = [CMAESEmitter(np.zeros(4), 0.5, batch_size=5) for _ in range(3)]
    strategy = BanditMAPElites(archive, pool, num_active=2, reselect="all")
    state = strategy.init(jax.random.key(0), None)
    runs = np.zeros(3, int)
    step = jax.jit(lambda s, k: strategy.tell(k, *_ask_and_score(strategy, problem, s, k)))
    for g in range(8):
        state, _ = step(state, jax.random.key(g))
        runs[np.flatnonzero(np.asarray(state.active))] += 1
        assert [int(s.iterations) for s in state.emitters] == runs.tolist()
    assert np.asarray(state.selection).tolist() == (5.0 * runs).tolist()


def _ask_and_score(strategy, problem, state, key):
    x, state = strategy.ask(key, state, None)
    evaluation = problem.evaluate(key, x)
    return state, x, evaluation


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda a, p: BanditMAPElites(a, p, 0), "num_active"),
        (lambda a, p: BanditMAPElites(a, p, 4), "fewer than num_active"),
        (lambda a, p: BanditMAPElites(a, [p[0], p[0]], 1), "more than once"),
        (
            lambda a, p: BanditMAPElites(a, [p[0], GaussianEmitter(0.1, np.zeros(3), batch_size=7)], 1),
            "batch_size",
        ),
        (lambda a, p: BanditMAPElites(a, p, 1, reselect="some"), "reselect"),
        (lambda a, p: BanditMAPElites(a, p, 1, zeta=-1.0), "zeta"),
        (lambda a, p: BanditMAPElites(a, p, 1).on_mesh(None), "mesh"),
    ],
)
def test_bad_arguments_are_named(make, match):
    archive = GridArchive(solution_dim=3, dims=(4, 4), ranges=[(-1, 1), (-1, 1)])
    pool = [GaussianEmitter(0.1, np.zeros(3), batch_size=4) for _ in range(3)]
    with pytest.raises(ArgumentError, match=match):
        make(archive, pool)
