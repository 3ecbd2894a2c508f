"""Pareto ranking shared by the families: NSGA-II's non-domination rank and crowding distance (Deb
et al. 2002) of points with two minimized objectives, one of them a small integer, jittable. GP's
NSGA-II survival (:mod:`evotensor.gp.front`) ranks (loss, size); QD's NSLC ranker (novelty, local
competition)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from evotensor.core.checks import check_int

__all__ = ["crowding_distance", "feasible_loss", "nondominated_rank"]


def feasible_loss(loss: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(key [n], feasible [n])``: ``loss [n]`` as float32 with every non-finite value ``+inf``
    (infeasible), and the bool mask of the finite ones."""
    loss = jnp.asarray(loss, jnp.float32)
    feasible = jnp.isfinite(loss)
    return jnp.where(feasible, loss, jnp.inf), feasible


def _check_max_size(max_size: Any) -> int:
    return check_int(max_size, "max_size")


def nondominated_rank(loss: jax.Array, size: jax.Array, max_size: int) -> jax.Array:
    """NSGA-II's non-domination rank (0 = the Pareto front) of ``n`` points ``(loss, size)``, both
    minimized (Deb et al. 2002, fast non-dominated sorting), jittable.

    ``a`` dominates ``b`` when ``loss_a <= loss_b`` and ``size_a <= size_b`` with one of them strict;
    equal points share a rank. A non-finite loss is infeasible: dominated by every feasible point;
    all infeasible points share the rank after the last feasible one.

    Args:
        loss: ``[n]``.
        size: int ``[n]`` in ``[1, max_size]`` (clipped into it).
        max_size: static bound of ``size`` (a GP's ``max_len``).

    Returns:
        int32 ``[n]``.

    Method: the rank of a point is the length of the longest chain of points dominating it. In the
    order of loss ascending, sweep the sizes ``1..max_size``; a point ``p`` of size ``s`` is dominated
    by the points of smaller size with ``loss <= loss_p`` (their highest rank ``A_p``: a prefix
    maximum over the loss order) and by the points of size ``s`` with a smaller loss, so
    ``rank_p = d_p + max_{q <= p, size s} (A_q + 1 - d_q)`` with ``d`` the dense rank of the loss
    among the size-``s`` points. Each size is a few prefix scans over ``n``: ``O(n * max_size)``.
    """
    max_size = _check_max_size(max_size)
    key, feasible = feasible_loss(loss)
    n = key.shape[0]
    if n == 0:
        return jnp.zeros(0, jnp.int32)
    size = jnp.clip(jnp.asarray(size).astype(jnp.int32), 1, max_size)
    idx = jnp.arange(n, dtype=jnp.int32)
    order = jnp.lexsort((idx, size, key))  # loss, then size, then index
    L, S, F = key[order], size[order], feasible[order]
    # last position of each run of equal losses (all of them are "loss <= l_p")
    is_last = jnp.concatenate([L[1:] != L[:-1], jnp.ones(1, bool)])
    group_end = jnp.flip(jax.lax.cummin(jnp.flip(jnp.where(is_last, idx, n))))
    low = jnp.iinfo(jnp.int32).min // 2

    def level(s, rank):
        in_level = F & (S == s)
        A = jax.lax.cummax(rank)[group_end]  # highest rank of a smaller point with loss <= L
        last = jax.lax.cummax(jnp.where(in_level, idx, -1))
        prev = jnp.concatenate([jnp.full(1, -1, jnp.int32), last[:-1]])
        new_value = in_level & ((prev < 0) | (L[jnp.maximum(prev, 0)] != L))
        dense = jnp.cumsum(new_value.astype(jnp.int32)) - 1
        best = jax.lax.cummax(jnp.where(in_level, A + 1 - dense, low))
        return jnp.where(in_level, dense + best, rank)

    rank = jax.lax.fori_loop(1, max_size + 1, level, jnp.full(n, -1, jnp.int32))
    rank = jnp.where(F, rank, jnp.max(jnp.where(F, rank, -1)) + 1)
    return jnp.zeros(n, jnp.int32).at[order].set(rank)


def crowding_distance(loss: jax.Array, size: jax.Array, rank: jax.Array) -> jax.Array:
    """NSGA-II's crowding distance of each point within its front (Deb et al. 2002), jittable.

    Per objective (loss, then size), a front's points are sorted by the objective (ties by index);
    the two ends get ``+inf``, an interior point ``(f_next - f_prev) / (f_max - f_min)`` (0 when the
    front has one value of the objective); the distance is the sum over the objectives. Infeasible
    points (non-finite loss) get 0.

    Args:
        loss: ``[n]``; size: ``[n]``; rank: int ``[n]`` (:func:`nondominated_rank`).

    Returns:
        float32 ``[n]``.
    """
    key, feasible = feasible_loss(loss)
    n = key.shape[0]
    if n == 0:
        return jnp.zeros(0, jnp.float32)
    rank = jnp.asarray(rank, jnp.int32)
    idx = jnp.arange(n, dtype=jnp.int32)
    total = jnp.zeros(n, jnp.float32)
    for f in (jnp.where(feasible, key, 0.0), jnp.asarray(size, jnp.float32)):
        order = jnp.lexsort((idx, f, rank))
        r, v = rank[order], f[order]
        first = jnp.concatenate([jnp.ones(1, bool), r[1:] != r[:-1]])
        last = jnp.concatenate([r[1:] != r[:-1], jnp.ones(1, bool)])
        start = jax.lax.cummax(jnp.where(first, idx, 0))
        end = jnp.flip(jax.lax.cummin(jnp.flip(jnp.where(last, idx, n - 1))))
        # halves: a difference of two finite float32 values never overflows, and the ratio is the same
        span = v[end] * 0.5 - v[start] * 0.5
        nxt, prv = v[jnp.minimum(idx + 1, n - 1)], v[jnp.maximum(idx - 1, 0)]
        gap = jnp.where(span > 0, (nxt * 0.5 - prv * 0.5) / jnp.where(span > 0, span, 1.0), 0.0)
        d = jnp.where(first | last, jnp.inf, gap)
        total = total + jnp.zeros(n, jnp.float32).at[order].set(d)
    return jnp.where(feasible, total, 0.0)
