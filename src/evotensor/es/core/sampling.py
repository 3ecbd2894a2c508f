"""Sampling kernels of the large-population gradient strategies (OpenES, ARS): Gaussian noise
drawn in row blocks, populations written block by block, noise drawn again in the tell instead of
being kept, and the slice-free sum over mirrored pairs.

They exist for memory: at d=100,000, pop=1024 a population is 410 MB in float32, and each of these
keeps XLA from holding a second copy of it (``benchmarks/results_es_openes.md``). Every function
draws the same numbers as the plain one-call version it replaces (same keys, same blocks).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.lax import Precision

from evotensor.core import rng
from evotensor.es.core.gradient_es import pair_sum

NOISE_CHUNK_BYTES = 8 * 2**20


def _per_platform(vectorized: bool | None, operand, loop, at_once):
    """``loop(operand)`` on a CPU, ``at_once(operand)`` elsewhere (or as ``vectorized`` forces).

    The two compute the same blocks of noise. On a CPU a loop over blocks keeps each block in cache;
    on a GPU a loop pays a host round trip per iteration, so the blocks are drawn at once there.
    """
    if vectorized is None:
        return jax.lax.platform_dependent(operand, cpu=loop, default=at_once)
    return at_once(operand) if vectorized else loop(operand)


def chunked_normal(
    key: jax.Array,
    rows: int,
    num_dims: int,
    chunk_bytes: int = NOISE_CHUNK_BYTES,
    vectorized: bool | None = None,
) -> jax.Array:
    """Standard normal ``[rows, dims]`` float32, generated in row blocks of about ``chunk_bytes``.

    Small draws are one ``rng.normal(key, ...)`` call. Large ones are blocks keyed by
    ``fold_in(key, block)``: on a CPU a ``lax.map`` over them, so XLA never holds the random bits of
    the whole matrix at once (at d=100,000, pop=1024 this cuts OpenES' temporaries from ~614 MB to
    ~237 MB and is faster, the blocks staying in cache); on a GPU (or with ``vectorized=True``) the
    same blocks in one ``vmap``.
    """
    per_block = max(1, chunk_bytes // (4 * num_dims))
    if per_block >= rows:
        return rng.normal(key, (rows, num_dims), jnp.float32)
    blocks = -(-rows // per_block)

    def block(i):
        return rng.normal(jax.random.fold_in(key, i), (per_block, num_dims), jnp.float32)

    z = _per_platform(vectorized, jnp.arange(blocks), lambda i: jax.lax.map(block, i), jax.vmap(block))
    return z.reshape(blocks * per_block, num_dims)[:rows]


def sampled_population(
    key: jax.Array,
    mean: jax.Array,
    scale: jax.Array,
    rows: int,
    mirrored: bool,
    chunk_bytes: int = NOISE_CHUNK_BYTES,
    vectorized: bool | None = None,
) -> jax.Array:
    """``[rows, dims]``: ``mean + scale * z`` for ``z = chunked_normal(key, rows, dims)``, or with
    ``mirrored`` the pairs ``[mean + scale * z; mean - scale * z]`` for ``z = chunked_normal(key, rows // 2,
    dims)``.

    The same draw as writing it out with :func:`chunked_normal`, but a large one is written block by
    block into the output (a ``fori_loop`` of in-place ``dynamic_update_slice``), so XLA never holds
    ``z`` (nor the two mirrored halves) next to the population. Values agree within 1 ulp: XLA may
    contract ``mean + scale * z`` into a fused multiply-add in one program and not the other
    (OpenES' recorded runs, eager, jit and vmap, and its d=100,000 generation came out bit-identical).
    At d=100,000, pop=1024 that removes ~205 MB for ``z`` and, with :func:`mirrored_pair_sum` in the
    tell, ~410 MB of half-population copies from OpenES' jitted generation
    (``benchmarks/results_es_openes.md``).

    Args:
        key: noise key; mean: ``[dims]``; scale: ``[]`` (or broadcastable to ``[dims]``).
        rows: population rows (even when ``mirrored``); mirrored: antithetic pairs at ``i, i + rows/2``.
        vectorized: draw the blocks at once, as on a GPU (default: per platform, see
            :func:`chunked_normal`); same numbers.
    """
    num_dims = mean.shape[-1]
    n = rows // 2 if mirrored else rows
    per_block = max(1, chunk_bytes // (4 * num_dims))

    def rows_of(z):  # the population of noise z [n, dims]
        return jnp.concatenate([mean + scale * z, mean - scale * z]) if mirrored else mean + scale * z

    if per_block >= n:
        return rows_of(rng.normal(key, (n, num_dims), jnp.float32))

    def put(x, z, start):
        x = jax.lax.dynamic_update_slice_in_dim(x, mean + scale * z, start, 0)
        if mirrored:
            x = jax.lax.dynamic_update_slice_in_dim(x, mean - scale * z, n + start, 0)
        return x

    def block(i):  # chunked_normal's block i
        return rng.normal(jax.random.fold_in(key, i), (per_block, num_dims), jnp.float32)

    full, tail = divmod(n, per_block)

    def in_place(_):  # block by block, each block staying in cache
        x = jnp.zeros((rows, num_dims), jnp.result_type(mean, scale, jnp.float32))
        x = jax.lax.fori_loop(0, full, lambda i, x: put(x, block(i), i * per_block), x)
        if tail:  # chunked_normal draws the whole last block and keeps its first rows
            x = put(x, block(full)[:tail], full * per_block)
        return x

    def all_blocks(blocks):  # the same blocks at once; XLA fuses the draw into the population's writes
        return rows_of(jax.vmap(block)(blocks).reshape(-1, num_dims)[:n])

    return _per_platform(vectorized, jnp.arange(full + (tail > 0)), in_place, all_blocks)


def noise_weighted_sum(
    key: jax.Array,
    coeffs: jax.Array,
    num_dims: int,
    rows_of: Callable[[jax.Array], jax.Array] | None = None,
    chunk_bytes: int = NOISE_CHUNK_BYTES,
) -> jax.Array:
    """``sum_i coeffs_i r_i``, ``[dims]``, over the rows ``r = rows_of(z)`` of ``z = chunked_normal(key,
    rows, dims)`` (default ``r = z``), ``coeffs [rows]``, without ever holding ``z``: the noise is drawn
    again, block by block, from the same keys, and ``rows_of`` (elementwise, ``[b, dims] -> [b, dims]``)
    is applied to each block.

    The same numbers as :func:`chunked_normal` (block ``b`` from ``fold_in(key, b)``; the padding rows
    of a partial last block get coefficient 0 and add exact zeros); a small draw is one
    matrix-vector product. The tell of ``OpenES(regenerate_noise=True)``: it never reads the population.
    """
    rows = coeffs.shape[0]
    rows_of = (lambda z: z) if rows_of is None else rows_of
    coeffs = coeffs.astype(jnp.float32)
    per_block = max(1, chunk_bytes // (4 * num_dims))
    if per_block >= rows:
        z = rng.normal(key, (rows, num_dims), jnp.float32)
        return jnp.matmul(coeffs, rows_of(z), precision=Precision.HIGHEST)
    blocks = -(-rows // per_block)
    c = jnp.pad(coeffs, (0, blocks * per_block - rows)).reshape(blocks, per_block)

    def body(i, acc):  # chunked_normal's block i
        z = rng.normal(jax.random.fold_in(key, i), (per_block, num_dims), jnp.float32)
        return acc + jnp.matmul(c[i], rows_of(z), precision=Precision.HIGHEST)

    return jax.lax.fori_loop(0, blocks, body, jnp.zeros((num_dims,), jnp.float32))


@jax.custom_batching.custom_vmap
def _mirrored_pair_sum_batchable(weights: jax.Array, x: jax.Array) -> jax.Array:
    h = x.shape[0] // 2
    c = weights[:h] - weights[h:]
    # HIGHEST: exact float32 on GPUs (their default float32 matmul precision is TF32, whose rounding
    # of the uncentred rows, ~|mean| 2^-11, would swamp the differences between mirrored rows)
    halves = jnp.einsum(
        "ph,phd->pd", jnp.stack([c, -c]), x.reshape(2, h, x.shape[1]), precision=Precision.HIGHEST
    )
    return halves[0] + halves[1]


@_mirrored_pair_sum_batchable.def_vmap
def _mirrored_pair_sum_vmap(axis_size, in_batched, weights, x):
    axes = tuple(0 if batched else None for batched in in_batched)
    return jax.vmap(pair_sum, in_axes=axes, axis_size=axis_size)(weights, x), True


@jax.custom_jvp
def mirrored_pair_sum(weights: jax.Array, x: jax.Array) -> jax.Array:
    """``sum_i (w_i - w_{i+h}) (x_i - x_{i+h})``, ``[dims]``, for ``x [rows, dims]`` with row ``i + h``
    (``h = rows/2``) the mirror of row ``i`` and ``weights [rows]``.

    Bit for bit :func:`~evotensor.es.core.gradient_es.pair_sum` (``c @ x[:h] - c @ x[h:]``), written as
    one batched matrix-vector product over ``x.reshape(2, h, dims)``: a reshape is free, whereas XLA
    materializes each slice ``x[:h]``, ``x[h:]`` feeding a ``dot`` as a copy (2 x 205 MB at
    d=100,000, pop=1024). Under ``vmap`` it is ``vmap(pair_sum)``: XLA:CPU rounds the two batched
    forms differently, and vmapped runs stay bit-identical to what they were (and to separate runs).
    Its derivative is that of the bilinear ``pair_sum`` (``custom_vmap`` alone has no reverse-mode rule).
    """
    return _mirrored_pair_sum_batchable(weights, x)


@mirrored_pair_sum.defjvp
def _mirrored_pair_sum_jvp(primals, tangents):
    (weights, x), (dw, dx) = primals, tangents
    return mirrored_pair_sum(weights, x), pair_sum(dw, x) + pair_sum(weights, dx)


def antithetic_perturbations(key: jax.Array, population_size: int, num_dims: int) -> jax.Array:
    """Standard-normal perturbations ``[pop, dims]`` with row ``i + pop/2`` equal to ``-row i``."""
    z = chunked_normal(key, population_size // 2, num_dims)
    return jnp.concatenate([z, -z])
