"""Closed-form linear scaling of tree outputs (Keijzer 2003), as Operon and PySR-style systems use.

A tree's output ``f`` is scored as ``a * f + b`` with the least-squares ``a, b`` for the data, so
evolution searches for the *shape* of the target and never for its scale and offset. Per output
``k`` of a tree, with ``n`` rows, targets ``y`` and predictions ``p``::

    a = C / M2,   b = mean(y) - a * mean(p),   SSE = Syy - C**2 / M2
    M2 = sum (p - mean(p))**2,   C = sum (p - mean(p)) (y - mean(y)),   Syy = sum (y - mean(y))**2

The closed form's float32 resolution is a few ulps of ``Syy``: the scaled SSE is never reported
below ``4 eps Syy`` (R² ``1 - 4.8e-7``), so near-perfect trees tie instead of being ranked by
rounding noise. A tree whose predictions are constant (``M2`` zero, or within float32 rounding of
its mean: see :func:`coefficients`) gets ``a = 0, b = mean(y)``, ``SSE = Syy`` (R² 0): fitting
rounding noise would give meaningless huge slopes. A tree with any non-finite prediction keeps
the worst fitness.

The evaluators compute ``(mean(p), M2, C)`` per tree and output in their fused pass
(:func:`evotensor.gp.native.scaling_moments`, :func:`evotensor.gp.jax_evaluator.moments_jax`; the
Pallas path reduces materialized predictions with :func:`moments_from_predictions`), so scaling costs
three running sums, not a second evaluation. :func:`evotensor.gp.fitness` with
``linear_scaling=True`` and :func:`evotensor.gp.scaling_coefficients` are the entry points; this
module holds the arithmetic shared by every backend.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = [
    "REFINED_RESOLUTION",
    "centered_targets",
    "coefficients",
    "moments_from_predictions",
    "refined_scaled_sse",
    "scaled_sse",
]

# A prediction spread below this many float32 ulps of its mean is rounding noise, not signal.
_SPREAD_ULPS = 4.0
# Relative resolution of the closed-form scaled SSE (see scaled_sse).
_RESOLUTION = 4.0 * float(jnp.finfo(jnp.float32).eps)

REFINED_RESOLUTION = 2.0**-32
"""Relative floor of :func:`refined_scaled_sse`: ``SSE >= 2**-32 * sum(y**2)`` (an RMS error below
``2**-16 ~ 1.5e-5`` of the targets' RMS). A tree exact up to float32 rounding lands on it: its residuals
are a few ulps of ``y`` each, ``(k eps)**2 ~ 1e-13`` of ``sum(y**2)`` for ``k`` up to ~20 rounding
steps, so trees that differ only in rounding tie (the smallest wins on the front) while a tree off by
``1e-4`` of the targets' scale (a constant wrong in its third decimal) stays above it. (Never above
:func:`scaled_sse`'s floor ``4 eps Syy``, for targets whose offset dwarfs their spread.)"""


def centered_targets(yt: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``yt [n_outputs, n_points]`` -> ``(mean [n_outputs], yt - mean, Syy [n_outputs])``."""
    yt = jnp.asarray(yt, jnp.float32)
    mean = jnp.mean(yt, axis=1)
    yct = yt - mean[:, None]
    return mean, yct, jnp.sum(yct * yct, axis=1)


def moments_from_predictions(pred: jax.Array, yct: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The moments the fused evaluators return, from materialized predictions.

    Args:
        pred: float32 ``[pop, n_points, n_outputs]``.
        yct: ``[n_outputs, n_points]`` centered targets.

    Returns:
        ``(moments [pop, n_outputs, 3], bad_sum [pop])`` as :func:`evotensor.gp.jax_evaluator.moments_jax`.
    """
    p = jnp.moveaxis(pred, 2, 1)  # [pop, n_out, n]
    bad = jnp.sum(jnp.any(~jnp.isfinite(p), axis=1), axis=-1).astype(jnp.float32)
    mean = jnp.mean(p, axis=-1)
    d = p - mean[..., None]
    return jnp.stack([mean, jnp.sum(d * d, -1), jnp.sum(d * yct[None], -1)], axis=-1), bad


def coefficients(moments: jax.Array, y_mean: jax.Array, n_points: int) -> tuple[jax.Array, jax.Array]:
    """Least-squares slope and intercept per tree and output.

    Args:
        moments: ``[pop, n_outputs, 3]`` (mean of p, M2, C) from an evaluator.
        y_mean: ``[n_outputs]`` target means.
        n_points: rows the moments ran over.

    Returns:
        ``(a, b)``, float32 ``[pop, n_outputs]`` each (``a = 0, b = mean(y)`` for a constant tree).
    """
    mean_p, m2, co = moments[..., 0], moments[..., 1], moments[..., 2]
    noise = n_points * jnp.square(_SPREAD_ULPS * jnp.finfo(jnp.float32).eps * jnp.abs(mean_p))
    varies = (m2 > noise) & (m2 > 0)
    a = jnp.where(varies, co / jnp.where(varies, m2, 1.0), 0.0)
    b = y_mean - a * mean_p
    return a.astype(jnp.float32), b.astype(jnp.float32)


def scaled_sse(moments: jax.Array, syy: jax.Array, n_points: int) -> jax.Array:
    """Sum over outputs of the squared error after optimal scaling, ``[pop]`` (``>= 0``; NaN where
    the moments are NaN: the caller's non-finite flag decides those trees)."""
    mean_p, m2, co = moments[..., 0], moments[..., 1], moments[..., 2]
    noise = n_points * jnp.square(_SPREAD_ULPS * jnp.finfo(jnp.float32).eps * jnp.abs(mean_p))
    varies = (m2 > noise) & (m2 > 0)
    explained = jnp.where(varies, co * (co / jnp.where(varies, m2, 1.0)), 0.0)  # co * co overflows first
    # Syy - C**2 / M2 in float32 is exact to a few ulps of Syy only: below that floor two trees
    # cannot be told apart, so none gets a loss of 0 by rounding luck (a hall of fame or PySR's score
    # would prefer a bigger tree on noise); the floor is R^2 = 1 - 4 eps ~ 0.9999995
    floor = _RESOLUTION * syy[None]
    sse = jnp.clip(syy[None] - explained, floor, jnp.maximum(syy[None], floor))
    sse = jnp.where(jnp.isfinite(moments).all(-1), sse, jnp.nan)
    return jnp.sum(sse, axis=-1)


def refined_scaled_sse(pred: jax.Array, yt: jax.Array) -> jax.Array:
    """The squared error after optimal scaling from materialized predictions, by two passes: the
    least-squares slope ``a`` from centered predictions, then ``sum (yc - a * pc)**2`` directly, so it
    has no cancellation floor (:func:`scaled_sse`'s ``4 eps Syy``); floored at
    :data:`REFINED_RESOLUTION` ``* sum(y**2)`` instead.

    Args:
        pred: float32 ``[pop, n_points, n_outputs]``.
        yt: ``[n_outputs, n_points]`` targets.

    Returns:
        float32 ``[pop]``, summed over outputs (NaN where a prediction is not finite; a tree of
        constant output gets ``Syy``, as in :func:`scaled_sse`).
    """
    y_mean, yct, syy = centered_targets(yt)
    p = jnp.moveaxis(pred, 2, 1)  # [pop, n_out, n]
    mean_p = jnp.mean(p, axis=-1)
    pc = p - mean_p[..., None]
    m2 = jnp.sum(pc * pc, -1)
    co = jnp.sum(pc * yct[None], -1)
    n_points = pred.shape[1]
    noise = n_points * jnp.square(_SPREAD_ULPS * jnp.finfo(jnp.float32).eps * jnp.abs(mean_p))
    varies = (m2 > noise) & (m2 > 0)
    a = jnp.where(varies, co / jnp.where(varies, m2, 1.0), 0.0)
    r = yct[None] - a[..., None] * pc
    sse = jnp.where(varies, jnp.sum(r * r, -1), syy[None])
    # never above scaled_sse's floor, so a refined tree never scores worse than an unrefined twin
    floor = jnp.minimum(
        REFINED_RESOLUTION * jnp.sum(jnp.square(jnp.asarray(yt, jnp.float32)), -1), _RESOLUTION * syy
    )
    sse = jnp.clip(sse, floor[None], jnp.maximum(syy[None], floor[None]))
    sse = jnp.where(jnp.all(jnp.isfinite(p), -1), sse, jnp.nan)
    return jnp.sum(sse, axis=-1)
