"""Reductions whose result does not depend on batching.

XLA:CPU vectorizes a reduction (and lowers a matrix-vector ``dot``) differently in a batched
(``vmap``) program than in the unbatched one, so plain ``jnp.sum`` / ``@`` can differ in the last
bit between a vmapped run and separate runs. Elementwise adds of slices are evaluated in the same
order in both, which keeps ``run_many`` over seeds or hyperparameters bit-identical to separate
runs. Each costs ``O(size)`` extra memory.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def exact_sum(x: jax.Array, axis: int = -1) -> jax.Array:
    """Sum over ``axis`` as a fixed pairwise tree of elementwise adds (batching-invariant)."""
    x = jnp.moveaxis(x, axis, -1)
    while x.shape[-1] > 1:
        if x.shape[-1] % 2:
            x = jnp.concatenate([x, jnp.zeros_like(x[..., :1])], axis=-1)
        half = x.shape[-1] // 2
        x = x[..., :half] + x[..., half:]
    return x[..., 0]


def exact_vecmat(w: jax.Array, x: jax.Array) -> jax.Array:
    """``w [n] @ x [n, d] -> [d]`` with :func:`exact_sum` (vmap-bit-exact)."""
    return exact_sum(w[:, None] * x, axis=0)


def exact_matvec(m: jax.Array, v: jax.Array) -> jax.Array:
    """``m [a, b] @ v [b] -> [a]`` with :func:`exact_sum` (vmap-bit-exact)."""
    return exact_sum(m * v[None, :], axis=1)


def exact_matmul(a: jax.Array, b: jax.Array) -> jax.Array:
    """``a [m, k] @ b [k, n] -> [m, n]`` with :func:`exact_sum`; memory ``m * k * n``."""
    return exact_sum(a[:, :, None] * b[None, :, :], axis=1)
