"""Composable fitness shaping.

All functions take a *minimized* fitness vector ``[pop]`` and return ``[pop]`` float weights.
What a strategy receives after shaping is called *weights*, not fitness. Non-finite inputs are
treated as the worst values (see :func:`evotensor.core.worst_for_nonfinite`).

:func:`nes_weights` are the rank utilities of the natural evolution strategies (Wierstra et al.
2014), the default shaping of :class:`evotensor.es.XNES` and :class:`evotensor.es.SNES`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from evotensor.core.evaluation import worst_for_nonfinite
from evotensor.core.numerics import exact_sum, rounded


def _check_vector(fitness: jax.Array, name: str = "fitness") -> jax.Array:
    fitness = jnp.asarray(fitness)
    if fitness.ndim != 1:
        raise ValueError(f"{name} must be a vector [pop], got shape {fitness.shape}")
    return worst_for_nonfinite(fitness.astype(jnp.result_type(fitness, jnp.float32)))


def ranks(fitness: jax.Array) -> jax.Array:
    """Rank of each entry, 0 for the best (smallest); ties broken by index. ``[pop] -> [pop]``.

    XLA flushes subnormal floats to zero, so values below ``finfo.tiny`` in magnitude tie with 0.
    """
    fitness = _check_vector(fitness)
    order = jnp.argsort(fitness, stable=True)
    return jnp.zeros(fitness.shape[0], jnp.int32).at[order].set(jnp.arange(fitness.shape[0], dtype=jnp.int32))


def centered_ranks(fitness: jax.Array) -> jax.Array:
    """Ranks mapped linearly to ``[-0.5, 0.5]``, best = -0.5 (OpenAI-ES shaping). ``[pop]``."""
    r = ranks(fitness).astype(jnp.float32)
    n = fitness.shape[0]
    return r / jnp.maximum(n - 1, 1) - 0.5


def z_score(fitness: jax.Array, eps: float = 1e-8) -> jax.Array:
    """``(f - mean) / (std + eps)``. ``[pop]``.

    Mean and variance use :func:`evotensor.core.numerics.exact_sum`, and the scaling is an explicit
    reciprocal with :func:`~evotensor.core.numerics.rounded` steps, so vmapped runs that shape with
    z-scores stay bit-identical to separate runs (XLA rewrites a division by a broadcast scalar
    into a multiply by its reciprocal in the batched program only).
    """
    f = _check_vector(fitness)
    n = f.shape[0]
    centered = f - rounded(exact_sum(f) / n)
    return centered * (1.0 / (jnp.sqrt(rounded(exact_sum(centered**2) / n)) + eps))


def normalize(fitness: jax.Array, eps: float = 1e-8) -> jax.Array:
    """Min-max normalization to ``[0, 1]`` (0 = best). ``[pop]``."""
    f = _check_vector(fitness)
    lo, hi = f.min(), f.max()
    return (f - lo) / (hi - lo + eps)


def weight_decay(fitness: jax.Array, solutions: jax.Array, coefficient: float) -> jax.Array:
    """Add an L2 penalty ``coefficient * mean(x**2)`` per solution to a minimized fitness.

    Args:
        fitness: ``[pop]``.
        solutions: ``[pop, dims]`` flat solutions.
        coefficient: penalty weight (>= 0).
    """
    f = _check_vector(fitness)
    solutions = jnp.asarray(solutions)
    if solutions.ndim != 2 or solutions.shape[0] != f.shape[0]:
        raise ValueError(f"solutions must be [pop={f.shape[0]}, dims], got shape {solutions.shape}")
    return f + coefficient * jnp.mean(solutions**2, axis=1)


def nes_utilities(population_size: int) -> jax.Array:
    """NES rank utilities ``[pop]``, entry ``k`` for the ``k``-th best sample (higher = better, sum 0).

    ``u_k = max(0, ln(pop/2 + 1) - ln k) / sum_j max(0, ln(pop/2 + 1) - ln j) - 1/pop`` (Wierstra et
    al. 2014, "Natural evolution strategies", JMLR 15, Table 1).
    """
    k = jnp.arange(1, population_size + 1, dtype=jnp.float32)
    raw = jnp.maximum(0.0, jnp.log(population_size / 2.0 + 1.0) - jnp.log(k))
    return raw / jnp.sum(raw) - 1.0 / population_size


def nes_weights(fitness: jax.Array) -> jax.Array:
    """Minus the NES utility of each sample's rank (:func:`nes_utilities`; ties broken by index):
    ``[pop] -> [pop]`` weights, lower = better."""
    return -nes_utilities(fitness.shape[0])[ranks(fitness)]
