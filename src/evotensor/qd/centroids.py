"""Cell centres of MAP-Elites archives: uniform grids, nearest-centroid lookup and CVT k-means.

* :func:`grid_centroids` gives the centre of every cell of a uniform grid, in the row-major
  (``np.ravel_multi_index``) order that grid archives use for their flat cell index.
* :func:`nearest_centroid` maps measure vectors to the index of the nearest centroid. It runs under
  ``jit``/``vmap``; the distances are a matrix product (a GEMM), computed over blocks of centroids
  so that memory stays bounded for archives with many cells, and then checked against the exact
  difference-form distance, so the answer is the exact nearest centroid, not a rounding artefact.
* :func:`kmeans_centroids` computes the centroids of a centroidal Voronoi tessellation (CVT) as in
  CVT-MAP-Elites (Vassiliades et al. 2018) and pyribs: k-means (Lloyd's algorithm, random initial
  centres) on points drawn uniformly in the measure box.

Everything is float32; the distance between a point ``x`` and a centroid ``c`` is the squared
Euclidean distance ``sum((x - c)**2)``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from evotensor.core import rng
from evotensor.core.checks import ArgumentError, check_int, check_ranges
from evotensor.core.numerics import deterministic_segment_sum, exact_sum

_UNIT_ROUNDOFF = 2.0**-24  # float32


def grid_axis_centres(dims: Sequence[int], ranges: Sequence[tuple[float, float]]) -> list[np.ndarray]:
    """Per axis ``d``, the ``[n_d]`` float64 centres ``low + (high - low) (k + 0.5) / n_d`` of its
    intervals (computed on the host: rounded once to float32, each is the nearest float32 to the
    true centre). ``dims`` and ``ranges`` as :func:`grid_centroids` checks them."""
    return [
        low + (high - low) * (np.arange(n) + 0.5) / n for n, (low, high) in zip(dims, ranges, strict=True)
    ]


def grid_centroids(dims: Sequence[int], ranges: Sequence[tuple[float, float]]) -> jax.Array:
    """Centres of the cells of a uniform grid.

    Args:
        dims: cells per dimension, ``(n_1, ..., n_D)``, each an int >= 1.
        ranges: ``(low, high)`` per dimension (finite, ``low < high``); dimension ``d`` is cut into
            ``n_d`` equal intervals.

    Returns:
        ``[prod(dims), D]`` float32: row ``k`` is the centre of the cell whose flat row-major index
        is ``k``, i.e. of the cell ``np.unravel_index(k, dims)``.
    """
    if isinstance(dims, (str, bytes)) or not hasattr(dims, "__len__") or len(dims) < 1:
        raise ArgumentError(f"dims must be a non-empty sequence of ints, got {dims!r}")
    dims = tuple(check_int(n, f"dims[{i}]") for i, n in enumerate(dims))
    ranges = check_ranges(ranges)
    if len(dims) != len(ranges):
        raise ArgumentError(f"dims and ranges must have the same length, got {len(dims)} and {len(ranges)}")
    mesh = np.meshgrid(
        *grid_axis_centres(dims, ranges), indexing="ij"
    )  # "ij": the last dimension varies fastest (row-major)
    return jnp.asarray(np.stack([m.reshape(-1) for m in mesh], axis=1), jnp.float32)


def _exact_sq_distance(x: jax.Array, c: jax.Array) -> jax.Array:
    """``sum((x - c)**2)`` over the last axis as a fixed pairwise tree of rounded squares, so the
    same pair gives the same float32 bits wherever (and however batched) it is computed."""
    diff = x - c
    return exact_sum(diff * diff, axis=-1)


def nearest_centroid(points: jax.Array, centroids: jax.Array, *, chunk_size: int = 1024) -> jax.Array:
    """Index of the nearest centroid of each point (squared Euclidean distance, float32).

    Exact: the result is the index ``j`` that minimizes ``e_j = sum((x - c_j)**2)`` computed in
    float32 in difference form (summed as a fixed pairwise tree, so ``e_j`` has the same bits under
    ``jit``, ``vmap`` and any ``chunk_size``), with ties (equal ``e_j``, e.g. duplicate centroids)
    going to the lowest index. So it is a brute-force float32 argmin of ``sum((x - c)**2)``; it can
    differ from a float64 one only where two centroids are at distances from ``x`` that float32
    rounding cannot tell apart (then either may be returned).

    How: per block of ``chunk_size`` centroids, the distances are first computed as one matrix
    product (a GEMM, at float32 ``Precision.HIGHEST``), ``|x-m|^2 - 2 (x-m).(c-m) + |c-m|^2`` with
    ``m`` the mean centroid (centring keeps the rounding error small when the measure box is far
    from the origin). That form can be off by rounding, so it only selects candidates: every
    centroid of the block whose GEMM distance is within a bound on that rounding error (relative to
    ``|x-m|^2 + max |c-m|^2``, growing with ``D``) of the block's minimum GEMM distance. Only the
    candidates' exact ``e_j`` are computed, one candidate per point per round (a masked min over the
    block gives the next one in index order; static shapes throughout), for as many rounds as the
    largest candidate count in the batch: usually 1, more for a point (nearly) equidistant from
    several centroids, such as a grid vertex. A running (best ``e``, best index) carries over the
    blocks, compared lexicographically. Cost: one GEMM plus a few elementwise passes over
    ``[B, chunk_size]`` per block and round.

    Args:
        points: ``[B, D]`` (``B`` may be 0).
        centroids: ``[C, D]``, ``C >= 1``, ``D >= 1``, finite.
        chunk_size: centroids per block; memory is ``O(B * chunk_size + C * D)`` whatever ``C``
            (1024 was 4x faster than 4096 on a 2-core CPU at B=1024, C=10^4, D=2; see
            ``benchmarks/results_qd.md``).

    Returns:
        ``[B]`` int32 in ``[0, C)``. A point with a non-finite coordinate gets some index in
        ``[0, C)`` (mask such points yourself).
    """
    centroids = jnp.asarray(centroids, jnp.float32)
    num = centroids.shape[0] if centroids.ndim == 2 else 0
    _, best_i = nearest_in_block(
        points, centroids, mean=jnp.mean(centroids, axis=0), count=num, chunk_size=chunk_size
    )
    # nothing chosen only for overflowing (non-finite) distances: any index in range will do
    return jnp.where(best_i < num, best_i, 0).astype(jnp.int32)


def nearest_in_block(
    points: jax.Array,
    centroids: jax.Array,
    *,
    mean: jax.Array,
    count: int | jax.Array,
    first_index: int | jax.Array = 0,
    chunk_size: int = 1024,
) -> tuple[jax.Array, jax.Array]:
    """The nearest of a block of centroids, with its exact distance (what :func:`nearest_centroid`
    does over all centroids; a sharded CVT archive runs it on each device's block and keeps the
    lexicographically smallest ``(distance, index)`` over the devices, which is the same answer).

    Args:
        points: ``[B, D]``.
        centroids: ``[K, D]``, ``K >= 1``; only the first ``count`` rows are centroids (the rest is
            padding, never chosen).
        mean: ``[D]`` centring point of the GEMM (any point near the centroids; it only selects
            candidates, so the answer does not depend on it) and stand-in for non-finite points.
        count: rows of ``centroids`` that are real (an int or a traced ``[]`` int32, ``<= K``).
        first_index: index of row 0 (added to the returned indices).
        chunk_size: centroids per block of the search.

    Returns:
        ``(distance [B] float32, index [B] int32)``: ``sum((x - c)**2)`` in difference form (the
        same bits as for any other block) and ``first_index + row`` of the nearest real row, ties
        to the lowest row; ``(inf, int32 max)`` where there is none (``count = 0``).
    """
    points = jnp.asarray(points, jnp.float32)
    centroids = jnp.asarray(centroids, jnp.float32)
    if points.ndim != 2 or centroids.ndim != 2 or points.shape[1] != centroids.shape[1]:
        shapes = f"{points.shape} and {centroids.shape}"
        raise ArgumentError(f"points must be [B, D] and centroids [C, D] (same D), got {shapes}")
    num, dim = centroids.shape
    if num < 1 or dim < 1:
        raise ArgumentError(f"centroids must be [C, D] with C >= 1 and D >= 1, got {centroids.shape}")
    chunk = min(check_int(chunk_size, "chunk_size"), num, 2**24)
    num_chunks = -(-num // chunk)
    batch = points.shape[0]

    mean = jnp.asarray(mean, jnp.float32)
    # a non-finite point is moved to the mean centroid: any answer is allowed, but it must not
    # turn the GEMM into NaNs that could make padding look nearest
    points = jnp.where(jnp.all(jnp.isfinite(points), axis=1, keepdims=True), points, mean)
    x_c = points - mean
    xx = jnp.sum(x_c * x_c, axis=1)

    pad = num_chunks * chunk - num
    blocks = jnp.pad(centroids, ((0, pad), (0, 0))).reshape(num_chunks, chunk, dim)
    blocks_c = blocks - mean
    cc = jnp.sum(blocks_c * blocks_c, axis=2)
    valid = (jnp.arange(num_chunks * chunk) < count).reshape(num_chunks, chunk)
    cc = jnp.where(valid, cc, 0.0)  # padding: kept out of the error bound and masked below
    starts = jnp.arange(num_chunks, dtype=jnp.int32) * chunk + jnp.asarray(first_index, jnp.int32)
    # |GEMM - exact| <= (4D + 10) u (|x - m|^2 + |c - m|^2) to first order (centring, dot product and
    # norms each add a few ulps of that scale); twice that bounds the difference between two
    # centroids' errors, and another 2x is margin. The absolute term covers flushed subnormals.
    rel_slack = 4 * (4 * dim + 10) * _UNIT_ROUNDOFF
    position = jnp.arange(chunk, dtype=jnp.float32)  # exact: chunk <= 2**24
    no_index = jnp.iinfo(jnp.int32).max

    def block_step(carry, block):
        best_d, best_i = carry
        c, c_c, c2, ok, start = block
        # precision HIGHEST: the error bound assumes true float32 products (no TF32/bf16 passes)
        gemm = xx[:, None] - 2.0 * jnp.dot(x_c, c_c.T, precision=lax.Precision.HIGHEST) + c2[None, :]
        gemm = jnp.where(ok[None, :], gemm, jnp.inf)
        limit = jnp.min(gemm, axis=1) + rel_slack * (xx + jnp.max(c2)) + 1e-30
        # every centroid that might be the nearest of this block once rounding is accounted for
        candidate = ok[None, :] & (gemm <= limit[:, None])
        # float32 reductions (exact for these small integers): XLA:CPU vectorizes them, not int ones
        rounds = jnp.max(jnp.sum(jnp.where(candidate, 1.0, 0.0), axis=1), initial=0.0).astype(jnp.int32)

        def take_next(_, state):
            best_d, best_i, last = state
            # the candidates in index order, one per round: a masked min, much cheaper than top_k
            later = candidate & (position[None, :] > last[:, None])
            nxt = jnp.min(jnp.where(later, position[None, :], float(chunk)), axis=1)
            has = nxt < chunk
            j = jnp.minimum(nxt, chunk - 1).astype(jnp.int32)
            d = _exact_sq_distance(points, c[j])
            i = start + j
            # lexicographic (distance, index) order: the lowest index wins exact ties
            better = has & ((d < best_d) | ((d == best_d) & (i < best_i)))
            return jnp.where(better, d, best_d), jnp.where(better, i, best_i), jnp.where(has, nxt, last)

        state = (best_d, best_i, jnp.full(batch, -1.0, jnp.float32))
        best_d, best_i, _ = lax.fori_loop(0, rounds, take_next, state)
        return (best_d, best_i), None

    init = (jnp.full(batch, jnp.inf, jnp.float32), jnp.full(batch, no_index, jnp.int32))
    (best_d, best_i), _ = lax.scan(block_step, init, (blocks, blocks_c, cc, valid, starts))
    return best_d, best_i


# Lloyd's assignment step in blocks of points too, so memory stays bounded for 100k+ samples.
_POINT_BLOCK = 1024
_CENTROID_BLOCK = 1024


@functools.partial(jax.jit, static_argnames=("point_block",))
def _lloyd(samples: jax.Array, init: jax.Array, iterations: jax.Array, tol: jax.Array, *, point_block: int):
    """Lloyd's algorithm from ``init``; returns ``(centroids, final cluster sizes)``."""
    n, dim = samples.shape
    k = init.shape[0]
    num_blocks = -(-n // point_block)
    padded = jnp.pad(samples, ((0, num_blocks * point_block - n), (0, 0)))
    padded = padded.reshape(num_blocks, point_block, dim)

    def assign(centroids):
        labels = lax.map(lambda b: nearest_centroid(b, centroids, chunk_size=_CENTROID_BLOCK), padded)
        return labels.reshape(-1)[:n]

    def cluster_stats(centroids):
        labels = assign(centroids)
        # fixed summation order on a GPU too (its scatter-add is atomic), so a build is repeatable
        sums = deterministic_segment_sum(samples, labels, k)
        counts = jax.ops.segment_sum(jnp.ones(n, jnp.float32), labels, num_segments=k)  # exact integers
        return sums, counts

    def step(state):
        i, centroids, _ = state
        sums, counts = cluster_stats(centroids)
        # an empty cluster keeps its centre (it may win points back; if not, the caller raises)
        new = jnp.where(counts[:, None] > 0, sums / jnp.maximum(counts, 1.0)[:, None], centroids)
        return i + 1, new, jnp.sum((new - centroids) ** 2)

    # sklearn's convention: tol is relative to the mean per-dimension variance of the data
    threshold = tol * jnp.mean(jnp.var(samples, axis=0))
    keep_going = lambda state: (state[0] < iterations) & (state[2] > threshold)
    _, centroids, _ = lax.while_loop(keep_going, step, (jnp.int32(0), init, jnp.float32(jnp.inf)))
    return centroids, cluster_stats(centroids)[1]


def kmeans_centroids(
    key: jax.Array,
    num_centroids: int,
    ranges: Sequence[tuple[float, float]],
    *,
    samples: int | jax.Array | np.ndarray = 100_000,
    iterations: int = 300,
    tol: float = 1e-4,
) -> tuple[jax.Array, jax.Array]:
    """Centroids of a centroidal Voronoi tessellation of the box ``ranges`` (CVT-MAP-Elites).

    Draws ``samples`` points uniformly in the box and runs k-means on them: ``num_centroids``
    distinct samples chosen at random as initial centres, then Lloyd's algorithm (assign each
    sample to its nearest centre, move each centre to the mean of its samples) until ``iterations``
    steps or until the total squared centre shift is ``<= tol * mean per-dimension variance`` of the
    samples. A centre left without samples keeps its position; if any is empty at the end a
    ``ValueError`` is raised, since such a cell would never be a nearest centroid.

    A setup function (not for use inside ``jit``); the Lloyd loop itself is jitted.

    Args:
        key: PRNG key (samples and initial centres).
        num_centroids: ``k >= 1``, at most the number of samples.
        ranges: ``(low, high)`` per dimension, ``D`` pairs (with given ``samples``, only ``D``
            is used).
        samples: number of uniform samples ``n``, or the ``[n, D]`` finite samples themselves.
        iterations: maximum number of Lloyd steps (``>= 0``).
        tol: relative tolerance on the centre shift (``>= 0``; 0: run until nothing moves).

    Returns:
        ``(centroids [k, D], samples [n, D])``, float32.
    """
    ranges = check_ranges(ranges)
    dim = len(ranges)
    num_centroids = check_int(num_centroids, "num_centroids")
    iterations = check_int(iterations, "iterations", minimum=0)
    if isinstance(tol, bool) or not isinstance(tol, (int, float, np.floating, np.integer)):
        raise ArgumentError(f"tol must be a number, got {tol!r}")
    if not (math.isfinite(tol) and tol >= 0):
        raise ArgumentError(f"tol must be finite and >= 0, got {tol}")
    sample_key, init_key = jax.random.split(key)
    if isinstance(samples, (int, np.integer)) and not isinstance(samples, bool):
        n = check_int(samples, "samples")
        low, high = (jnp.asarray(v, jnp.float32) for v in zip(*ranges))
        points = rng.uniform(sample_key, (n, dim), jnp.float32, low, high)
    else:
        if isinstance(samples, bool):
            raise ArgumentError("samples must be an int or an [n, D] array, got a bool")
        host = np.asarray(samples)
        if host.ndim != 2 or host.shape[0] < 1 or host.shape[1] != dim:
            raise ArgumentError(f"samples must be an int or an [n, {dim}] array, got shape {host.shape}")
        if not (np.issubdtype(host.dtype, np.integer) or np.issubdtype(host.dtype, np.floating)):
            raise ArgumentError(f"samples must be real numbers, got dtype {host.dtype}")
        with np.errstate(over="ignore"):  # reported below, as non-finite
            host = host.astype(np.float32)
        if not np.all(np.isfinite(host)):  # after the cast: values beyond float32's range count too
            raise ArgumentError("samples must be finite (in float32)")
        points = jnp.asarray(host)
    n = points.shape[0]
    if num_centroids > n:
        raise ArgumentError(f"num_centroids ({num_centroids}) must be <= the number of samples ({n})")

    start = points[rng.choice(init_key, n, (num_centroids,), replace=False)]
    centroids, counts = _lloyd(
        points,
        start,
        jnp.asarray(iterations, jnp.int32),
        jnp.asarray(tol, jnp.float32),
        point_block=min(n, _POINT_BLOCK),
    )
    empty = int(np.sum(np.asarray(counts) == 0))
    if empty:
        raise ArgumentError(
            f"k-means left {empty} of {num_centroids} clusters empty (no sample is nearest to their "
            "centre); use more samples, and samples with more distinct points than centroids"
        )
    return centroids, points
