"""Innovation numbering: ranks of distinct events and the split/connection numbering against a
pure-Python tracker with neat-python 2.1's semantics."""

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from tests.neat.genome_strategies import ReferenceTracker, same_partition

from evotensor.neat.genome import EMPTY, GenomeSpec
from evotensor.neat.innovation import (
    counters_from_population,
    initial_counters,
    number_connections,
    number_splits,
    rank_distinct,
)

# proposals [pop, k] = [6, 3] (one shape: one compile), few distinct values so that duplicates
# are common, validity drawn per entry


@st.composite
def proposals(draw, columns=2):
    pop, k = 6, 3
    cells = st.tuples(*[st.integers(-3, 4)] * columns, st.booleans())
    rows = draw(st.lists(cells, min_size=pop * k, max_size=pop * k))
    arr = np.array([r[:-1] for r in rows], np.int32).reshape(pop, k, columns)
    valid = np.array([r[-1] for r in rows], bool).reshape(pop, k)
    return [arr[..., c] for c in range(columns)], valid


_rank = jax.jit(rank_distinct)
_splits = jax.jit(number_splits)
_conns = jax.jit(number_connections)


@given(proposals(columns=2))
def test_rank_distinct_is_the_rank_among_sorted_distinct_tuples(case):
    cols, valid = case
    rank, count = _rank(tuple(jnp.asarray(c) for c in cols), jnp.asarray(valid))
    tuples = list(zip(*(c.ravel().tolist() for c in cols)))
    distinct = sorted({t for t, v in zip(tuples, valid.ravel()) if v})
    expected = [distinct.index(t) if v else -1 for t, v in zip(tuples, valid.ravel())]
    assert np.asarray(rank).ravel().tolist() == expected
    assert int(count) == len(distinct)


@given(proposals(columns=1))
def test_rank_distinct_one_column(case):
    cols, valid = case
    rank, count = _rank((jnp.asarray(cols[0]),), jnp.asarray(valid))
    distinct = sorted(set(cols[0][valid].tolist()))
    expected = np.where(valid, [[distinct.index(x) if x in distinct else -1 for x in r] for r in cols[0]], -1)
    np.testing.assert_array_equal(np.asarray(rank), expected)
    assert int(count) == len(distinct)


def test_rank_distinct_edge_cases():
    rank, count = rank_distinct((jnp.zeros((0,), jnp.int32),), jnp.zeros((0,), bool))
    assert rank.shape == (0,) and int(count) == 0
    # extreme values (EMPTY, int32 max) are ordinary keys
    big = np.iinfo(np.int32).max
    keys = jnp.array([big, EMPTY, big, 0, EMPTY], jnp.int32)
    rank, count = rank_distinct((keys,), jnp.array([True, True, True, True, False]))
    assert rank.tolist() == [2, 0, 2, 1, -1] and int(count) == 3
    rank, count = rank_distinct((keys,), jnp.zeros(5, bool))
    assert rank.tolist() == [-1] * 5 and int(count) == 0


@given(proposals(columns=2), st.integers(0, 1000), st.integers(0, 1000))
def test_splits_match_the_reference_tracker(case, node0, innov0):
    (a, b), valid = case
    node, inn_in, inn_out, nk, ni = _splits(
        (jnp.asarray(a), jnp.asarray(b)), jnp.asarray(valid), node0, innov0
    )
    node, inn_in, inn_out = (np.asarray(x) for x in (node, inn_in, inn_out))
    ref = ReferenceTracker(node0, innov0)
    ours, theirs = [], []
    for p, q in zip(*np.nonzero(valid)):  # the population in order, then each genome's proposals
        theirs.append(ref.split(int(a[p, q]), int(b[p, q])))
        ours.append((int(node[p, q]), int(inn_in[p, q]), int(inn_out[p, q])))
    assert same_partition(ours, theirs)
    assert (int(nk), int(ni)) == (ref.next_node_key, ref.next_innov)
    # the same set of numbers is handed out, each node with its two consecutive innovations
    assert {o[0] for o in ours} == {t[0] for t in theirs}
    assert {o[1] for o in ours} | {o[2] for o in ours} == {t[1] for t in theirs} | {t[2] for t in theirs}
    assert all(o[2] == o[1] + 1 and (o[1] - innov0) == 2 * (o[0] - node0) for o in ours)
    assert (
        np.all(node[~valid] == EMPTY) and np.all(inn_in[~valid] == EMPTY) and np.all(inn_out[~valid] == EMPTY)
    )


@given(proposals(columns=2), st.integers(0, 1000))
def test_connections_match_the_reference_tracker(case, innov0):
    (a, b), valid = case
    innov, ni = _conns(jnp.asarray(a), jnp.asarray(b), jnp.asarray(valid), innov0)
    innov = np.asarray(innov)
    ref = ReferenceTracker(0, innov0)
    ours, theirs = [], []
    for p, q in zip(*np.nonzero(valid)):
        theirs.append(ref.connection(int(a[p, q]), int(b[p, q])))
        ours.append(int(innov[p, q]))
    assert same_partition(ours, theirs)
    assert sorted(set(ours)) == sorted(set(theirs)) == list(range(innov0, ref.next_innov))
    assert int(ni) == ref.next_innov
    assert np.all(innov[~valid] == EMPTY)
    # deterministic order: ascending (in, out)
    pairs = sorted(
        {
            (int(x), int(y), int(i))
            for x, y, i, v in zip(a.ravel(), b.ravel(), innov.ravel(), valid.ravel())
            if v
        }
    )
    assert [p[2] for p in pairs] == sorted(p[2] for p in pairs)


def test_reference_tracker_resets_every_generation():
    ref = ReferenceTracker(5, 10)
    assert ref.connection(1, 2) == ref.connection(1, 2) == 10
    assert ref.split(1, 2) == (5, 11, 12) == ref.split(1, 2)
    ref.reset_generation()
    assert ref.connection(1, 2) == 13 and ref.split(1, 2) == (6, 14, 15)


def test_numbering_vmaps_and_counters_are_int32():
    a = jnp.array([[[1, 2], [1, 1]], [[3, 3], [3, 3]]], jnp.int32)
    b = jnp.array([[[0, 0], [0, 5]], [[0, 0], [0, 1]]], jnp.int32)
    v = jnp.ones((2, 2, 2), bool)
    innov, ni = jax.jit(jax.vmap(number_connections, in_axes=(0, 0, 0, None)))(a, b, v, 7)
    assert innov.dtype == jnp.int32 and ni.dtype == jnp.int32
    assert ni.tolist() == [10, 9]
    assert innov[0].tolist() == [[7, 9], [7, 8]] and innov[1].tolist() == [[7, 7], [7, 8]]
    for p in range(2):
        single, n = _conns(a[p], b[p], v[p], 7)
        assert single.tolist() == innov[p].tolist() and int(n) == int(ni[p])


def test_counters():
    spec = GenomeSpec(3, 2, max_nodes=8, max_conns=10)
    nk, ni = initial_counters(spec)
    assert (int(nk), int(ni)) == (2, 6) and nk.dtype == ni.dtype == jnp.int32
    counters = jax.jit(counters_from_population, static_argnums=0)
    pop = jax.jit(spec.initial, static_argnums=1)(jax.random.key(0), 3)
    assert [int(x) for x in counters(spec, pop)] == [2, 6]
    pop = pop.replace(node_key=pop.node_key.at[1, 6].set(40), conn_innov=pop.conn_innov.at[2, 7].set(99))
    assert [int(x) for x in counters(spec, pop)] == [41, 100]
    empty = spec.empty((3,)).replace(node_key=pop.node_key)  # no connections
    assert [int(x) for x in counters(spec, empty)] == [41, 6]
