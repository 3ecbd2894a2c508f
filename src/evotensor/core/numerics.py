"""Arithmetic whose result does not depend on batching.

Two things make a vmapped (batched) XLA:CPU program round differently from the unbatched one:

* **Reduction order.** XLA:CPU vectorizes a reduction (and lowers a matrix-vector ``dot``)
  differently in a batched program, so plain ``jnp.sum`` / ``@`` can differ in the last bit.
  :func:`exact_sum` and the product helpers use a fixed pairwise tree of elementwise adds instead,
  evaluated in the same order in both programs (``O(size)`` extra memory).
* **Fused multiply-add.** XLA:CPU always lets LLVM contract a multiply that feeds an add *inside
  one fusion* into an FMA (one rounding instead of two). A product with several users is either
  duplicated into each consuming fusion (contracted) or materialized (not contracted), and that
  choice can differ between the batched and the unbatched program. :func:`rounded` pins such a
  product to its float32 rounding so no later add can absorb it; :func:`exact_sum` applies it
  to its input.

Two rewrites of XLA's algebraic simplifier also depend on the program's shapes, so code that must
stay bit-exact avoids giving them a choice:

* ``a / b`` with ``b`` broadcast (a per-run scalar such as ``sigma``) may become
  ``a * (1 / b)`` in the batched program only: write the reciprocal explicitly,
  ``a * (1.0 / b)``.
* Chains of multiplications by constants may be re-associated (``(eta * 0.5) * (g * 0.1)`` became
  ``(eta * g) * 0.05`` in one program only): put :func:`rounded` after a division by a constant
  whose result is scaled further (``rounded(exact_sum(x) / d)``).

Together they keep ``run_many`` over seeds or hyperparameters bit-identical to separate runs.
Transcendentals (``exp``, ``log``, ``sqrt``, ``tanh``, ``log1p``) were checked to round the same
in scalar and vectorized code; an argument that is a product should still go through
:func:`rounded`, since their first instruction is often an add that could absorb it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def rounded(x: jax.Array) -> jax.Array:
    """``x`` unchanged, but a multiply that produced it can no longer be fused into a later add.

    Use on a product ``a * b`` that is then added to something (``mean + rounded(sigma * y)``)
    whenever bitwise agreement between vmapped and separate runs matters. The select on NaN is
    the identity (NaN stays NaN) but hides the multiply from LLVM's FMA contraction, which only
    looks through direct ``fmul -> fadd`` edges. Cost: one compare and select per element.
    """
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        return x
    return jnp.where(jnp.isnan(x), jnp.asarray(jnp.nan, x.dtype), x)


def exact_sum(x: jax.Array, axis: int = -1) -> jax.Array:
    """Sum over ``axis`` as a fixed pairwise tree of elementwise adds (batching-invariant).

    ``x`` passes through :func:`rounded` first: the tree reads it twice (two slices), so a product
    such as ``v**2`` would otherwise be contracted into the first adds in one program only.
    """
    x = rounded(x)
    axis = axis % x.ndim
    if x.shape[axis] == 0:  # an empty sum is 0, as for jnp.sum
        return jnp.zeros(x.shape[:axis] + x.shape[axis + 1 :], x.dtype)
    # halving along ``axis`` itself (no transpose first): contiguous slices when ``axis`` is leading
    while x.shape[axis] > 1:
        if x.shape[axis] % 2:
            pad = jnp.zeros_like(jax.lax.slice_in_dim(x, 0, 1, axis=axis))
            x = jnp.concatenate([x, pad], axis=axis)
        half = x.shape[axis] // 2
        x = jax.lax.slice_in_dim(x, 0, half, axis=axis) + jax.lax.slice_in_dim(x, half, 2 * half, axis=axis)
    return jnp.squeeze(x, axis)


def exact_vecmat(w: jax.Array, x: jax.Array) -> jax.Array:
    """``w [n] @ x [n, d] -> [d]`` with :func:`exact_sum` (vmap-bit-exact)."""
    return exact_sum(w[:, None] * x, axis=0)


def exact_matvec(m: jax.Array, v: jax.Array) -> jax.Array:
    """``m [a, b] @ v [b] -> [a]`` with :func:`exact_sum` (vmap-bit-exact)."""
    return exact_sum(m * v[None, :], axis=1)


def exact_matmul(a: jax.Array, b: jax.Array) -> jax.Array:
    """``a [m, k] @ b [k, n] -> [m, n]`` with :func:`exact_sum`; memory ``m * k * n``."""
    return exact_sum(a[:, :, None] * b[None, :, :], axis=1)


def sorted_segment_sum(values: jax.Array, segments: jax.Array, num_segments: int) -> jax.Array:
    """Segment sums in a fixed order on every device: a stable sort by segment, then a segmented
    ``associative_scan`` (pairwise within a segment, no cancellation between segments), whose last
    element per segment is written with unique indices (no atomics).

    Args:
        values: ``[n, ...]`` float array.
        segments: ``int [n]`` segment of each row; rows outside ``0..num_segments - 1`` are dropped.
        num_segments: number of segments (static).

    Returns:
        ``[num_segments, ...]`` sums (0 for empty segments).
    """
    n = segments.shape[0]
    out = jnp.zeros((num_segments,) + values.shape[1:], values.dtype)
    if n == 0:
        return out
    order = jnp.argsort(segments, stable=True)
    seg = segments[order]
    vals = values[order]
    start = jnp.concatenate([jnp.ones((1,), bool), seg[1:] != seg[:-1]])
    last = jnp.concatenate([seg[1:] != seg[:-1], jnp.ones((1,), bool)])

    def combine(a, b):
        (fa, va), (fb, vb) = a, b
        fb_ = fb.reshape(fb.shape + (1,) * (vb.ndim - fb.ndim))
        return fa | fb, jnp.where(fb_, vb, va + vb)

    _, sums = jax.lax.associative_scan(combine, (start, vals))
    in_range = (seg >= 0) & (seg < num_segments)
    target = jnp.where(last & in_range, seg, num_segments + jnp.arange(n, dtype=seg.dtype))  # unique
    return out.at[target].set(sums, mode="drop", unique_indices=True)


def deterministic_segment_sum(values: jax.Array, segments: jax.Array, num_segments: int) -> jax.Array:
    """``jax.ops.segment_sum`` whose rounding is the same on every run of the same program.

    On a GPU, XLA lowers ``segment_sum`` to a scatter-add with atomics, which add in whatever order
    the threads arrive, so two runs of one program can differ in the last bits; there this is
    :func:`sorted_segment_sum`. On a CPU it is ``jax.ops.segment_sum`` (deterministic there), so CPU
    results keep their bits.

    Args:
        values: ``[n, ...]`` float array.
        segments: ``int [n]`` segment of each row, in ``0..num_segments - 1``.
        num_segments: number of segments (static).

    Returns:
        ``[num_segments, ...]`` sums (0 for empty segments).
    """
    return jax.lax.platform_dependent(
        values,
        segments,
        cpu=lambda v, s: jax.ops.segment_sum(v, s, num_segments=num_segments),
        default=lambda v, s: sorted_segment_sum(v, s, num_segments),
    )
