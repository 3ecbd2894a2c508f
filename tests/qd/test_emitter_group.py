"""EmitterGroup (evotensor.qd.emitters.group): n copies of an emitter, vmapped, against the copies run
one by one with the keys the group gives them."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import evotensor
from evotensor.core import rng
from evotensor.core.checks import ArgumentError
from evotensor.problems.qd import LinearProjection
from evotensor.qd import (
    BanditMAPElites,
    CMAESEmitter,
    EmitterGroup,
    GaussianEmitter,
    GridArchive,
    IsoLineEmitter,
    MAPElites,
    MEESEmitter,
)

PROBLEM = LinearProjection(6, "sphere")


def archive():
    return GridArchive(solution_dim=6, dims=(10, 10), ranges=PROBLEM.descriptor_ranges)


def filled(grid):
    x = np.random.default_rng(0).normal(size=(40, 6)).astype(np.float32)
    evaluation = PROBLEM.evaluate(None, x)
    return grid.add(grid.init(), x, evaluation.fitness, evaluation.descriptor)[0]


@pytest.mark.parametrize(
    "make",
    [
        lambda: IsoLineEmitter(np.zeros(6), batch_size=5),
        lambda: CMAESEmitter(np.zeros(6), 0.5, ranker="imp", restart_rule=2, batch_size=5),
    ],
    ids=["iso_line", "cma_es"],
)
def test_a_group_equals_its_copies_run_one_by_one(make):
    emitter, grid = make(), archive()
    group = EmitterGroup(emitter, 3)
    assert group.batch_size == 15
    archive_state = filled(grid)
    key = jax.random.key(7)
    state = group.init(key, grid)
    copies = [emitter.init(k, grid) for k in rng.split(key, 3)]
    # everything jitted once (eager dispatch of CMA-ES's update is slow)
    group_ask = jax.jit(lambda k, s, a: group.ask(k, s, grid, a))
    group_tell = jax.jit(lambda k, s, a, x, f, m, i: group.tell(k, s, grid, a, x, f, m, i))
    copy_ask = jax.jit(lambda k, s, a: emitter.ask(k, s, grid, a))
    copy_tell = jax.jit(lambda k, s, a, x, f, m, i: emitter.tell(k, s, grid, a, x, f, m, i))
    add = jax.jit(grid.add)
    for t in range(3):  # CMA-ES restarts at the second tell (restart_rule=2)
        ask_key, tell_key = jax.random.split(jax.random.key(t))
        x, state = group_ask(ask_key, state, archive_state)
        parts = []
        for i, k in enumerate(rng.split(ask_key, 3)):
            xi, copies[i] = copy_ask(k, copies[i], archive_state)
            parts.append(xi)
        np.testing.assert_allclose(x, np.concatenate(parts), rtol=1e-5, atol=1e-6)
        evaluation = PROBLEM.evaluate(None, x)
        new_archive, info = add(archive_state, x, evaluation.fitness, evaluation.descriptor)
        state = group_tell(tell_key, state, new_archive, x, evaluation.fitness, evaluation.descriptor, info)
        for i, k in enumerate(rng.split(tell_key, 3)):
            rows = slice(5 * i, 5 * i + 5)
            part = jax.tree_util.tree_map(lambda a, rows=rows: a[rows], info)
            copies[i] = copy_tell(
                k,
                copies[i],
                new_archive,
                x[rows],
                evaluation.fitness[rows],
                evaluation.descriptor[rows],
                part,
            )
        archive_state = new_archive
        for i, copy in enumerate(copies):
            for a, b in zip(jax.tree_util.tree_leaves(state), jax.tree_util.tree_leaves(copy), strict=True):
                np.testing.assert_allclose(np.asarray(a)[i], b, rtol=1e-4, atol=1e-5)
    if isinstance(emitter, CMAESEmitter):
        assert np.asarray(state.restarts).tolist() == [1, 1, 1]


def test_groups_run_in_map_elites_and_bandit_pools():
    grid = archive()
    mees = EmitterGroup(MEESEmitter(np.zeros(6), num_samples=4), 2)
    me = MAPElites(grid, [mees, GaussianEmitter(0.1, np.zeros(6), batch_size=3)])
    assert me.insert_mask.tolist() == [True, False, False, False, False] * 2 + [True] * 3
    result = evotensor.run(me, PROBLEM, 4, jax.random.key(0), progress=False)
    assert max(result.history["added"]) <= 2 + 3  # two offspring and the Gaussian batch at most
    pool = [EmitterGroup(CMAESEmitter(np.zeros(6), 0.5, restart_rule=1, batch_size=4), 2) for _ in range(2)]
    bandit = BanditMAPElites(archive(), pool, 1)
    result = evotensor.run(bandit, PROBLEM, 3, jax.random.key(0), progress=False)
    # every tell restarts both copies of the active group (3 tells: 6 restarts in all)
    per_group = [int(jnp.sum(s.restarts)) for s in result.state.emitters]
    assert sum(per_group) == 6
    # the bandit records a group's restarts as the sum over its copies (as seen at its last ask)
    assert result.state.restarts.shape == (2,) and all(
        0 <= r <= g for r, g in zip(result.state.restarts.tolist(), per_group)
    )
    assert sum(result.state.restarts.tolist()) >= 4


def test_bad_groups_are_refused():
    for n in (0, -1, 2.5, True, "3"):
        with pytest.raises(ArgumentError, match="n"):
            EmitterGroup(IsoLineEmitter(np.zeros(6)), n)
    with pytest.raises(ArgumentError, match="no init"):
        EmitterGroup(object(), 2)
