"""Per-output scaling of classification trees: the logits ``a_k * z_k + b_k`` fitted by Newton's method.

A classification tree's outputs ``f_k(x)`` are read as logits. Their scale is arbitrary: on separable
training data the cross-entropy keeps falling as the logits grow, so evolution rewards trees that
multiply their outputs up (bloat, and a loss that ranks trees by their magnitude more than by how
well they separate the classes). This module is the classification counterpart of linear scaling
(:mod:`evotensor.gp.scaling`): every tree is scored with the best affine map of its outputs.

Per tree, each output is first standardized over the training rows, ``z_k = (f_k - m_k) / s_k``
(``s_k = 0``, a constant output, gives ``z_k = 0``), then the ``2 k`` parameters ``theta = (a, b)`` of
the logits ``u_k = a_k z_k + b_k`` minimize the ridge-regularized mean cross-entropy::

    L(a, b) = mean_i CE(u_i, y_i) + ridge / 2 * (|a|^2 + |b|^2)

(the softmax cross-entropy for ``k > 1`` outputs, the logistic loss of the one logit for two
classes). ``L`` is strictly convex. A few damped Newton steps minimize it, each solving every output's
``2 x 2`` block of the Hessian in closed form (exact Newton for one output; for ``k`` outputs the
softmax's cross-output curvature is left out, so a step costs ``O(k n)`` per tree rather than
``O(k^2 n)``) and accepted only when it lowers ``L``; :data:`DEFAULT_STEPS` steps reach the minimum
to about ``1e-4`` relative on the data sets of :mod:`evotensor.gp.classification`. Because the outputs
are standardized first, the ridge on ``a`` does not depend on the tree's scale: a tree is scored by
how far apart its standardized outputs put the classes (a margin), and no tree gains by
inflating its outputs. The fitted map is written as ``slope_k * f_k + intercept_k`` (``slope_k = a_k
/ s_k``, ``intercept_k = b_k - slope_k * m_k``), which is what a reported model applies.

Example::

    pred = evaluate(forest, X, fs, n_outputs)                    # [pop, n, k]
    slope, intercept, loss = fit_logit_scaling(pred, labels)     # [pop, k], [pop, k], [pop]
    logits = pred * slope[:, None, :] + intercept[:, None, :]
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from evotensor.core.checks import ArgumentError, check_int, check_real

__all__ = ["DEFAULT_RIDGE", "DEFAULT_STEPS", "fit_logit_scaling", "scaled_logits"]

DEFAULT_RIDGE = 1e-2
"""Default ridge weight on the scaling parameters (per mean row loss)."""

DEFAULT_STEPS = 4
"""Default number of damped Newton steps."""


def _loss_grad_curv(z: jax.Array, onehot: jax.Array, a: jax.Array, b: jax.Array, ridge: float, binary: bool):
    """Loss ``[pop]``, gradient and the output-by-output blocks of the Hessian of ``L`` at ``(a, b)``.

    ``z`` ``[pop, k, n]`` standardized outputs (the rows last: every elementwise loop and reduction
    runs along the long axis, which vectorizes on a CPU), ``onehot`` ``[k, n]`` (binary: ``[1, n]``,
    the label itself), ``a, b`` ``[pop, k]``. Returns ``(loss, g_a, g_b, h_aa, h_ab, h_bb)``, the
    gradients and curvatures ``[pop, k]``: the Hessian's ``2 x 2`` block of each output (exact for one
    output; for ``k`` outputs the softmax's cross-output terms ``-p_k p_l`` are left out, which keeps
    a step ``O(k n)`` per tree instead of ``O(k^2 n)``, and the damped steps are accepted only when
    they lower ``L``)."""
    n = z.shape[2]
    u = a[..., None] * z + b[..., None]  # [pop, k, n]
    if binary:
        p = jax.nn.sigmoid(u)
        ce = (jax.nn.softplus(u) - u * onehot)[:, 0]
    else:
        log_p = jax.nn.log_softmax(u, axis=1)
        p = jnp.exp(log_p)
        ce = -jnp.sum(onehot * log_p, axis=1)
    g = p - onehot  # d ce / d u_k
    w = p * (1.0 - p)  # d2 ce / d u_k2
    wz = w * z
    g_a = jnp.sum(g * z, axis=2) / n + ridge * a
    g_b = jnp.sum(g, axis=2) / n + ridge * b
    h_aa = jnp.sum(wz * z, axis=2) / n + ridge
    h_ab = jnp.sum(wz, axis=2) / n
    h_bb = jnp.sum(w, axis=2) / n + ridge
    loss = jnp.mean(ce, axis=1) + 0.5 * ridge * (jnp.sum(a * a, axis=-1) + jnp.sum(b * b, axis=-1))
    return loss, g_a, g_b, h_aa, h_ab, h_bb


def fit_logit_scaling(
    pred: Any,
    labels: Any,
    n_classes: int | None = None,
    ridge: float = DEFAULT_RIDGE,
    steps: int = DEFAULT_STEPS,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Fit every tree's per-output logit scaling on its training outputs.

    Args:
        pred: float ``[pop, n_points, n_outputs]`` tree outputs on the training rows (``n_outputs = 1``
            for two classes, else ``n_classes``).
        labels: int ``[n_points]`` class labels ``0..n_classes-1``.
        n_classes: default ``max(2, n_outputs)``; must agree with ``n_outputs``.
        ridge: ``> 0``, the ridge weight of ``L`` (see the module docstring).
        steps: ``>= 1`` damped Newton steps.

    Returns:
        ``(slope, intercept, loss)``: float32 ``[pop, n_outputs]``, ``[pop, n_outputs]``, ``[pop]``, the
        map ``slope * f + intercept`` of every output and the minimized ``L`` (unregularized mean
        cross-entropy of the scaled logits is :func:`scaled_logits` followed by the metric). A tree
        with a non-finite output on any row gets NaN slopes and intercepts and ``+inf`` loss.
    """
    pred = jnp.asarray(pred, jnp.float32)
    if pred.ndim != 3 or pred.shape[1] < 1 or pred.shape[2] < 1:
        raise ArgumentError(f"pred must be [pop, n_points >= 1, n_outputs >= 1], got shape {pred.shape}")
    k = pred.shape[2]
    n_classes = max(2, k) if n_classes is None else check_int(n_classes, "n_classes", minimum=2)
    if k != (1 if n_classes == 2 else n_classes):
        raise ArgumentError(
            f"pred has {k} output(s) but {n_classes} classes need {1 if n_classes == 2 else n_classes}"
        )
    ridge = check_real(ridge, "ridge", 0.0, float("inf"), low_open=True, high_open=True)
    steps = check_int(steps, "steps", minimum=1)
    labels = jnp.asarray(labels)
    if labels.shape != (pred.shape[1],):
        raise ArgumentError(f"labels must be [n_points] = [{pred.shape[1]}], got shape {labels.shape}")
    return _fit(pred, labels.astype(jnp.int32), ridge, steps)


@functools.partial(jax.jit, static_argnames=("ridge", "steps"))
def _fit(pred: jax.Array, labels: jax.Array, ridge: float, steps: int):
    """:func:`fit_logit_scaling` after its checks (one compiled program per shape, ridge and steps)."""
    k = pred.shape[2]
    binary = k == 1
    onehot = labels[None, :].astype(jnp.float32) if binary else jax.nn.one_hot(labels, k, dtype=jnp.float32).T

    bad = jnp.any(~jnp.isfinite(pred), axis=(1, 2))  # [pop]
    f = jnp.where(bad[:, None, None], 0.0, pred)
    mean = jnp.mean(f, axis=1)  # [pop, k]
    centered = f - mean[:, None, :]
    std = jnp.sqrt(jnp.mean(centered * centered, axis=1))
    # an output constant over the rows (to float32 rounding of its size) carries no information
    flat = std <= 1e-6 * (jnp.abs(mean) + 1e-30)
    inv = jnp.where(flat, 0.0, 1.0 / jnp.where(flat, 1.0, std))
    z = jnp.swapaxes(centered * inv[:, None, :], 1, 2)  # [pop, k, n]

    zeros = jnp.zeros((pred.shape[0], k), jnp.float32)
    first = _loss_grad_curv(z, onehot, zeros, zeros, ridge, binary)

    def step(carry, _):
        a, b, (loss, g_a, g_b, h_aa, h_ab, h_bb), damping = carry
        # each output's damped 2 x 2 Newton system, solved in closed form (positive definite: the
        # curvatures include the ridge)
        d = damping[:, None]
        p, q, r = h_aa + d * h_aa, h_ab, h_bb + d * h_bb
        det = p * r - q * q
        da = -(r * g_a - q * g_b) / det
        db = -(p * g_b - q * g_a) / det
        cand = _loss_grad_curv(z, onehot, a + da, b + db, ridge, binary)
        ok = jnp.isfinite(cand[0]) & (cand[0] <= loss)
        keep = lambda new, old: jnp.where(ok.reshape(ok.shape + (1,) * (new.ndim - 1)), new, old)  # noqa: E731
        state = jax.tree_util.tree_map(keep, cand, (loss, g_a, g_b, h_aa, h_ab, h_bb))
        damping = jnp.where(ok, damping * 0.1, damping * 10.0)
        return (keep(a + da, a), keep(b + db, b), state, damping), None

    damping0 = jnp.full((pred.shape[0],), 1e-3, jnp.float32)
    (a, b, (loss, *_), _), _ = jax.lax.scan(step, (zeros, zeros, first, damping0), None, length=steps)
    slope = a * inv
    intercept = b - slope * mean
    nan = jnp.float32(jnp.nan)
    slope = jnp.where(bad[:, None], nan, slope)
    intercept = jnp.where(bad[:, None], nan, intercept)
    loss = jnp.where(bad, jnp.inf, loss)
    return slope, intercept, loss


def scaled_logits(pred: Any, slope: Any, intercept: Any) -> jax.Array:
    """``pred * slope + intercept`` with ``pred`` ``[pop, n, k]`` and ``slope, intercept`` ``[pop, k]``
    (or one tree: ``[n, k]`` and ``[k]``)."""
    pred = jnp.asarray(pred)
    return pred * jnp.expand_dims(slope, -2) + jnp.expand_dims(intercept, -2)
