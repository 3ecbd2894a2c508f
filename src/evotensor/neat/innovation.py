"""Global innovation numbers and node keys, deduplicated within a generation inside ``jit``.

NEAT gives every new structural gene a global historical marker so that crossover and the distance
can line genes up. neat-python 2.1's ``InnovationTracker`` keeps a global counter and, within one
generation, a table of the structural changes already seen: a connection added between the same
``(in, out)`` pair by several genomes gets one innovation number, and splitting the same connection
in several genomes gives them one new node key and one pair of innovation numbers for the two new
connections. The table is cleared every generation (the same change in a later generation is a new
innovation). TensorNEAT gives each offspring its own markers and never deduplicates.

Here the whole population's proposals of one generation are numbered at once, on the device:
the proposals are ``[pop, k]`` arrays (``k`` proposals per genome, each with a ``valid`` flag),
the distinct events are found by one sort (invalid entries last) and a first-occurrence mask, and
event ``r`` in ascending key order gets ``counter + r`` (:func:`rank_distinct`). So the numbers are
assigned in the events' sorted order, not in the order genomes happen to be visited (neat-python
numbers in visiting order); which proposals share a number is exactly the tracker's.

The counters are two ``int32`` scalars in the caller's state: ``next_node_key`` (the next hidden
node key) and ``next_innov`` (the next innovation number); every function returns them advanced by
the number of distinct events it numbered. :func:`initial_counters` gives their start for a fresh
population (:meth:`GenomeSpec.initial` numbers its links ``0 .. num_initial_conns - 1``).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
from jax import lax

from evotensor.neat.genome import EMPTY, Genome, GenomeSpec

__all__ = [
    "counters_from_population",
    "initial_counters",
    "number_connections",
    "number_splits",
    "rank_distinct",
]


def initial_counters(spec: GenomeSpec) -> tuple[jax.Array, jax.Array]:
    """``(next_node_key, next_innov)`` as ``int32`` scalars for a population made by
    :meth:`GenomeSpec.initial`: ``spec.first_hidden_key`` and ``spec.num_initial_conns``."""
    return jnp.int32(spec.first_hidden_key), jnp.int32(spec.num_initial_conns)


def counters_from_population(spec: GenomeSpec, population: Genome) -> tuple[jax.Array, jax.Array]:
    """The smallest counters that collide with nothing in ``population`` (any leading axes): one
    past the largest node key and innovation number in use, and at least :func:`initial_counters`.
    For genomes loaded from elsewhere; ``int32`` scalars."""
    node_key, innov = initial_counters(spec)
    keys = jnp.where(population.node_valid, population.node_key, EMPTY)
    innovs = jnp.where(population.conn_valid, population.conn_innov, EMPTY)
    max_key = jnp.max(keys, initial=EMPTY)
    max_innov = jnp.max(innovs, initial=EMPTY)
    return (
        jnp.maximum(node_key, max_key + 1).astype(jnp.int32),
        jnp.maximum(innov, max_innov + 1).astype(jnp.int32),
    )


def rank_distinct(keys: Sequence[jax.Array], valid: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Rank the distinct valid key tuples in ascending lexicographic order.

    Args:
        keys: one or more ``int32`` arrays of one shape ``S`` (the columns of the key tuple).
        valid: ``bool S``: which entries are events.

    Returns:
        ``(rank int32 S, count int32 [])``: entries with equal key tuples get equal ranks
        ``0 .. count - 1`` (the tuple's position among the distinct valid tuples); invalid
        entries get ``-1``. One sort of ``size(S)`` entries, no ``[M, M]`` tensor.
    """
    keys = [jnp.asarray(k, jnp.int32) for k in keys]
    shape = valid.shape
    flat = [k.reshape(-1) for k in keys]
    v = valid.reshape(-1)
    M = v.shape[0]
    if M == 0:
        return jnp.full(shape, -1, jnp.int32), jnp.int32(0)
    # invalid entries sort last; their key values are never compared with a valid one's
    out = lax.sort((~v, *flat, jnp.arange(M, dtype=jnp.int32)), num_keys=1 + len(flat))
    v_sorted, cols, perm = ~out[0], out[1:-1], out[-1]
    differs = jnp.zeros(M - 1, bool)
    for c in cols:
        differs = differs | (c[1:] != c[:-1])
    first = v_sorted & jnp.concatenate([jnp.ones(1, bool), differs])
    rank_sorted = jnp.cumsum(first, dtype=jnp.int32) - 1
    rank = jnp.zeros(M, jnp.int32).at[perm].set(rank_sorted)
    rank = jnp.where(v, rank, -1)
    return rank.reshape(shape), jnp.sum(first, dtype=jnp.int32)


def number_splits(
    identity: Sequence[jax.Array], valid: jax.Array, next_node_key: jax.Array, next_innov: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array]:
    """Node keys and innovation numbers for this generation's add-node splits.

    Args:
        identity: ``int32 S`` arrays identifying the split connection: ``(in_key, out_key)``
            (neat-python's tracker) or ``(innovation,)``.
        valid: ``bool S``: which entries are splits (e.g. ``[pop]`` or ``[pop, k]``).
        next_node_key, next_innov: ``int32`` counters.

    Returns:
        ``(node_key, innov_in, innov_out, next_node_key, next_innov)``: ``int32 S`` each (``EMPTY``
        where not valid) and the advanced counters. The ``r``-th distinct split gets node key
        ``next_node_key + r`` and the innovation numbers ``next_innov + 2r`` (``in -> new``) and
        ``next_innov + 2r + 1`` (``new -> out``), as neat-python's ``get_node_split`` hands out a
        node id and two consecutive numbers.
    """
    rank, count = rank_distinct(identity, valid)
    node_key = jnp.where(valid, next_node_key + rank, EMPTY).astype(jnp.int32)
    innov_in = jnp.where(valid, next_innov + 2 * rank, EMPTY).astype(jnp.int32)
    innov_out = jnp.where(valid, next_innov + 2 * rank + 1, EMPTY).astype(jnp.int32)
    return (
        node_key,
        innov_in,
        innov_out,
        (next_node_key + count).astype(jnp.int32),
        (next_innov + 2 * count).astype(jnp.int32),
    )


def number_connections(
    conn_in: jax.Array, conn_out: jax.Array, valid: jax.Array, next_innov: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Innovation numbers for this generation's added connections, one per distinct ``(in, out)``.

    Args:
        conn_in, conn_out: ``int32 S``: the new connections' endpoint keys.
        valid: ``bool S``: which entries are new connections.
        next_innov: ``int32`` counter.

    Returns:
        ``(innov int32 S, next_innov)``: ``next_innov + r`` for the ``r``-th distinct pair in
        ascending ``(in, out)`` order, ``EMPTY`` where not valid; the counter advanced by the
        number of distinct pairs.
    """
    rank, count = rank_distinct((conn_in, conn_out), valid)
    innov = jnp.where(valid, next_innov + rank, EMPTY).astype(jnp.int32)
    return innov, (next_innov + count).astype(jnp.int32)
