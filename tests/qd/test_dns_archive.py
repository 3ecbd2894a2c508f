"""The Dominated Novelty Search archive (evotensor.qd.dns_archive) against a float64 NumPy
transcription of pyribs 0.12's ``DNSArchive.add`` (with this archive's documented tie order)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import evotensor
from evotensor.core.checks import ArgumentError
from evotensor.problems.qd import Arm
from evotensor.qd import DNSArchive, GridArchive, IsoLineEmitter, MAPElites, ShardedArchive
from evotensor.qd.dns_archive import dominated_novelty


def reference_add(members, batch, k, capacity):
    """``(survivors, status [B], dns [B])``: pyribs' DNS add over ``members`` (a list of
    ``(solution, objective, measures)``), the valid candidates of ``batch`` appended; survivors in
    union order; equal scores to the lower union position."""
    union = list(members)
    where = []
    for x, f, m in batch:
        valid = np.isfinite(f) and np.all(np.isfinite(m)) and np.all(np.isfinite(x))
        where.append(len(union) if valid else None)
        if valid:
            union.append((x, f, m))
    n = len(union)
    scores = []
    for i in range(n):
        d = sorted(
            float(np.sqrt(np.sum((np.float64(union[j][2]) - np.float64(union[i][2])) ** 2)))
            for j in range(n)
            if j != i and union[j][1] >= union[i][1]
        )[:k]
        scores.append(np.mean(d) if d else np.inf)
    keep = sorted(sorted(range(n), key=lambda i: (-scores[i], i))[:capacity])
    status = [0 if w is None else (2 if w in keep else 0) for w in where]
    dns = [-np.inf if w is None else scores[w] for w in where]
    return [union[i] for i in keep], np.array(status), np.array(dns)


def as_members(state):
    n = int(np.sum(state.occupied))
    assert np.all(np.asarray(state.occupied)[:n]) and not np.any(np.asarray(state.occupied)[n:])
    return [
        (np.asarray(state.solutions[i]), float(state.objective[i]), np.asarray(state.measures[i]))
        for i in range(n)
    ]


@st.composite
def batches(draw, size):
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    x = rng.normal(size=(size, 2)).astype(np.float32)
    f = rng.normal(size=size).astype(np.float32)
    m = rng.uniform(0, 1, (size, 2)).astype(np.float32)
    if draw(st.booleans()):
        f[rng.integers(size)] = np.nan
    if draw(st.booleans()):
        m[rng.integers(size), 1] = np.inf
    if draw(st.booleans()):  # equal objectives: fitter to each other
        f[: size // 2] = f[0]
    return x, f, m


ARCHIVE = DNSArchive(solution_dim=2, measure_dim=2, capacity=12, k_neighbors=3)
ADD = jax.jit(ARCHIVE.add)


@settings(max_examples=25, deadline=None)
@given(first=batches(9), second=batches(9), third=batches(9))
def test_adds_follow_pyribs_rules(first, second, third):
    state, members = ARCHIVE.init(), []
    for x, f, m in (first, second, third):
        state, info = ADD(state, x, f, m)
        members, status, dns = reference_add(members, list(zip(x, f, m, strict=True)), 3, 12)
        np.testing.assert_array_equal(info.status, status)
        np.testing.assert_allclose(info.dns, dns, rtol=1e-5)
        np.testing.assert_array_equal(info.value, info.dns)
        got = as_members(state)
        assert len(got) == len(members)
        for (gx, gf, gm), (ex, ef, em) in zip(got, members, strict=True):
            np.testing.assert_array_equal(gx, ex)
            assert gf == ef
            np.testing.assert_array_equal(gm, em)
        rows = np.asarray(info.index)
        assert np.all((rows >= 0) == (status == 2))
        for b in np.flatnonzero(status == 2):  # a survivor's index is its row
            np.testing.assert_array_equal(state.solutions[rows[b]], x[b])


def test_the_best_always_survives_and_stats_count_the_capacity():
    archive = DNSArchive(solution_dim=1, measure_dim=1, capacity=4, k_neighbors=2, qd_score_offset=-1.0)
    x = np.arange(8, dtype=np.float32)[:, None]
    f = np.array([0.1, 0.9, 0.2, 0.3, 0.25, 0.5, 0.0, 0.05], np.float32)
    m = np.linspace(0, 1, 8, dtype=np.float32)[:, None]
    state, info = archive.add(archive.init(), x, f, m)
    assert int(info.status[1]) == 2 and np.isinf(info.dns[1])  # the best: no fitter neighbour
    assert int(state.occupied.sum()) == 4
    stats = archive.stats(state)
    assert float(stats["coverage"]) == 1.0
    np.testing.assert_allclose(stats["qd_score"], np.sum(state.objective[:4]) + 4, rtol=1e-6)
    np.testing.assert_allclose(stats["norm_qd_score"], stats["qd_score"] / 4, rtol=1e-6)
    # nearest member by measure, -1 for non-finite
    rows = archive.nearest(state, jnp.asarray([[0.0], [1.0], [np.nan]]))
    members = np.asarray(state.measures)[:4, 0]
    assert rows[2] == -1
    assert members[rows[0]] == members.min() and members[rows[1]] == members.max()
    found, data = archive.retrieve(state, jnp.asarray([[0.5]]))
    assert bool(found[0]) and int(data["index"][0]) >= 0
    assert archive.nearest(archive.init(), jnp.zeros((1, 1))).tolist() == [-1]


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31), n=st.integers(1, 40), k=st.integers(1, 6))
def test_dominated_novelty_is_brute_force(seed, n, k):
    rng = np.random.default_rng(seed)
    m = rng.uniform(size=(n, 3)).astype(np.float32)
    f = rng.integers(0, 4, n).astype(np.float32)  # ties
    alive = rng.random(n) < 0.8
    got = np.asarray(dominated_novelty(jnp.asarray(m), jnp.asarray(f), jnp.asarray(alive), k))
    for i in range(n):
        if not alive[i]:
            assert got[i] == -np.inf
            continue
        d = sorted(
            np.sqrt(np.sum((m[j].astype(np.float64) - m[i]) ** 2))
            for j in range(n)
            if alive[j] and j != i and f[j] >= f[i]
        )[:k]
        if d:
            np.testing.assert_allclose(got[i], np.mean(d), rtol=1e-5)
        else:
            assert got[i] == np.inf


def test_dominated_novelty_names_bad_shapes():
    with pytest.raises(ArgumentError, match=r"\[N, D\], \[N\] and \[N\]"):
        dominated_novelty(jnp.zeros((4, 2)), jnp.zeros(3), jnp.ones(4, bool), 2)
    with pytest.raises(ArgumentError, match="k"):
        dominated_novelty(jnp.zeros((4, 2)), jnp.zeros(4), jnp.ones(4, bool), 0)


def test_map_elites_runs_dns_as_its_search_archive():
    problem = Arm(num_joints=6)
    dns = DNSArchive(solution_dim=6, measure_dim=2, capacity=200, k_neighbors=3, qd_score_offset=-1.0)
    grid = GridArchive(solution_dim=6, dims=(16, 16), ranges=problem.descriptor_ranges, qd_score_offset=-1.0)
    emitter = IsoLineEmitter(np.full(6, 0.5), batch_size=64, bounds=problem.bounds)
    me = MAPElites(dns, [emitter], result_archive=grid)
    result = evotensor.run(me, problem, 15, jax.random.key(0), progress=False)
    state = result.state.archive
    assert int(state.occupied.sum()) == 200  # full after 15 x 64 candidates
    assert result.history["coverage"][-1] > result.history["coverage"][0] > 0
    with pytest.raises(ArgumentError, match="DNSArchive cannot be split"):
        ShardedArchive(dns, jax.make_mesh((1,), ("pop",)))
    with pytest.raises(ArgumentError, match="nearest"):
        dns.index_of(jnp.zeros((1, 2)))
    with pytest.raises(ArgumentError, match="state"):
        dns.add(grid.init(), np.zeros((1, 6)), np.zeros(1), np.zeros((1, 2)))
