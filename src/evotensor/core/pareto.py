"""Pareto ranking shared by the families: NSGA-II's non-domination rank and crowding distance (Deb
et al. 2002) of points with two minimized objectives, one of them a small integer, jittable. GP's
NSGA-II survival (:mod:`evotensor.gp.front`) ranks (loss, size); QD's NSLC ranker (novelty, local
competition). The exact hypervolume of a point set with any number of objectives
(:func:`hypervolume`): MOME's archive scores its Pareto fronts with it."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from evotensor.core.checks import ArgumentError, check_int
from evotensor.core.numerics import exact_sum

__all__ = ["crowding_distance", "feasible_loss", "hypervolume", "nondominated_rank"]


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


def hypervolume(loss: jax.Array, valid: jax.Array, reference: jax.Array) -> jax.Array:
    """Exact hypervolume of ``n`` points with ``M`` minimized objectives: the Lebesgue measure of
    the region ``{z : z <= reference, some valid point p <= z}`` (Zitzler & Thiele 1998), jittable.

    A point counts only where it is below ``reference`` (each coordinate is clipped to the
    reference, so a point beyond it in any objective adds nothing); invalid points add nothing.
    Dominated points and duplicates need no filtering first.

    Args:
        loss: ``[n, M]`` finite where ``valid``; ``M >= 1``.
        valid: ``[n]`` bool.
        reference: ``[M]``, the corner that bounds the region.

    Returns:
        float32 ``[]``.

    Method: slicing along the last objective (Knowles' HSO). Sorted by it, ``z_1 <= ... <= z_n``,
    the slab between ``z_k`` and ``z_{k+1}`` (``z_{n+1}`` = the reference) is the
    ``(M - 1)``-objective hypervolume of the first ``k`` points times its height; with one
    objective the measure is ``reference - min``. Two objectives: one sort and a running minimum,
    ``O(n log n)``; ``M`` objectives ``O(n^(M-1) log n)`` time and ``O(n^(M-1))`` memory, meant for
    fronts of tens of points when ``M > 2``.
    """
    loss = jnp.asarray(loss, jnp.float32)
    reference = jnp.asarray(reference, jnp.float32)
    valid = jnp.asarray(valid, bool)
    if loss.ndim != 2 or reference.shape != loss.shape[1:] or valid.shape != loss.shape[:1]:
        raise ArgumentError(
            f"hypervolume needs loss [n, M], valid [n] and reference [M], got {loss.shape}, "
            f"{valid.shape} and {reference.shape}"
        )
    # a point that is not valid sits on the reference: it encloses nothing
    points = jnp.where(valid[:, None], jnp.minimum(loss, reference), reference)
    return _sliced_volume(points, jnp.ones(points.shape[0], bool), reference)


def _sliced_volume(points: jax.Array, member: jax.Array, reference: jax.Array) -> jax.Array:
    """Hypervolume of the rows ``member [n]`` of ``points [n, M]`` (already clipped to
    ``reference [M]``): :func:`hypervolume`'s slicing recursion."""
    n, m = points.shape
    if n == 0:
        return jnp.zeros((), jnp.float32)
    last = jnp.where(member, points[:, -1], reference[-1])
    if m == 1:
        return reference[0] - jnp.min(last)
    idx = jnp.arange(n, dtype=jnp.int32)
    # the order among equal values of the last objective changes no slab (their gaps are 0)
    order = jnp.argsort(last, stable=True)
    z = last[order]
    height = jnp.concatenate([z[1:], reference[-1:]]) - z
    if m == 2:
        # the first k points' one-objective volume is reference - their running minimum
        first = jnp.where(member[order], points[order, 0], reference[0])
        width = reference[0] - jax.lax.cummin(first)
        return exact_sum(width * height)
    ahead = idx[None, :] <= idx[:, None]  # slab k holds the sorted points 0..k
    inner = points[order, :-1]
    widths = jax.vmap(lambda rows: _sliced_volume(inner, rows & member[order], reference[:-1]))(ahead)
    return exact_sum(widths * height)
