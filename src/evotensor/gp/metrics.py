"""Fitness metrics of GP forests and the argument checks every evaluation path shares.

Every backend (:mod:`evotensor.gp.jax_evaluator`, :mod:`evotensor.gp.native`,
:mod:`evotensor.gp.pallas_kernel`) reduces per-row terms (:func:`row_terms`) to per-tree sums and
turns them into the metric with :func:`finalize_metric`, so the metric semantics are defined once,
here. The checks (:func:`forest_fields`, :func:`check_function_set`, :func:`check_X`,
:func:`check_y`) turn user input into the arrays the backends take; a failed check raises
:class:`evotensor.core.checks.ArgumentError` (a ``ValueError`` and a ``TypeError``).

Fitness metrics (``metric=``), in natural orientation:

* ``"mse"`` (minimize): mean over rows and outputs of ``(pred - y)**2``; ``"rmse"``: its sqrt.
* ``"r2"`` (maximize): ``1 - SSE / SST`` with ``SST = sum((y - mean_y)**2)`` (per-output means,
  summed over outputs); if ``SST == 0``: 1 for a perfect fit, else 0 (as scikit-learn).
* ``"accuracy"`` (maximize): labels ``y`` in ``{0..n_outputs-1}``; the predicted class is
  ``argmax`` over outputs, or ``pred > 0`` for one output (binary labels ``{0, 1}``).
* ``"cross_entropy"`` (minimize): softmax cross-entropy of the outputs as logits, or the
  logistic loss of the single output for binary labels; mean over rows.

A tree with any non-finite prediction (or a non-finite metric) gets the metric's worst value:
``+inf`` for the minimized metrics, ``-inf`` for the maximized ones (the run loop maps non-finite
fitness to the worst finite value, see :func:`evotensor.core.worst_for_nonfinite`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core.checks import ArgumentError, check_choice, check_int
from evotensor.gp.functions import FunctionSet

__all__ = [
    "CLASSIFICATION_METRICS",
    "MAXIMIZED_METRICS",
    "METRICS",
    "check_X",
    "check_function_set",
    "check_y",
    "finalize_metric",
    "forest_fields",
    "metric_from_predictions",
    "row_terms",
    "total_sum_of_squares",
]

METRICS = ("mse", "rmse", "r2", "accuracy", "cross_entropy")
MAXIMIZED_METRICS = frozenset({"r2", "accuracy"})
CLASSIFICATION_METRICS = frozenset({"accuracy", "cross_entropy"})
"""The metrics whose targets are integer class labels ``[n_points]``."""


# ---- argument checks -------------------------------------------------------------------------------


def forest_fields(forest: Any) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, bool]:
    """The four forest arrays and whether the input was a single tree.

    Args:
        forest: anything with fields ``opcode, value, size, output`` of one shape ``[pop, max_len]``
            (or ``[max_len]``: one tree).

    Returns:
        ``(opcode int32, value float32, size int32, output int32, single)``, each array
        ``[pop, max_len]`` (``pop = 1`` for a single tree).
    """
    arrays = []
    for name in ("opcode", "value", "size", "output"):
        if not hasattr(forest, name):
            raise ArgumentError(f"forest has no field {name!r} (expected opcode, value, size, output)")
        arrays.append(jnp.asarray(getattr(forest, name)))
    shape = arrays[0].shape
    if any(a.shape != shape for a in arrays) or len(shape) not in (1, 2):
        raise ArgumentError(
            "forest fields opcode, value, size, output must share one shape [pop, max_len] or [max_len], "
            f"got {[a.shape for a in arrays]}"
        )
    single = len(shape) == 1
    if single:
        arrays = [a[None] for a in arrays]
    if arrays[0].shape[0] < 1 or arrays[0].shape[1] < 1:
        raise ArgumentError(f"forest must have at least one tree and max_len >= 1, got shape {shape}")
    opcode, value, size, output = arrays
    return (
        opcode.astype(jnp.int32),
        value.astype(jnp.float32),
        size.astype(jnp.int32),
        output.astype(jnp.int32),
        single,
    )


def check_function_set(function_set: Any) -> FunctionSet:
    """``function_set`` if it is a :class:`FunctionSet`."""
    if not isinstance(function_set, FunctionSet):
        raise ArgumentError(f"function_set must be a FunctionSet, got {type(function_set).__name__}")
    return function_set


def check_X(X: Any) -> jax.Array:
    """``X`` as float32 ``[n_points >= 1, n_vars >= 1]``."""
    X = jnp.asarray(X, jnp.float32)
    if X.ndim != 2 or X.shape[0] < 1 or X.shape[1] < 1:
        raise ArgumentError(f"X must be [n_points >= 1, n_vars >= 1], got shape {X.shape}")
    return X


def check_y(y: Any, n_points: int, metric: str, n_outputs: int | None) -> tuple[jax.Array, int]:
    """Targets for ``metric`` on ``n_points`` rows, transposed for the backends.

    Args:
        y: regression targets ``[n_points]`` / ``[n_points, n_outputs]``, or class labels
            ``[n_points]`` in ``{0..max(n_outputs, 2) - 1}`` for the classification metrics (checked
            unless traced).
        n_points: rows of ``X``.
        metric: one of :data:`METRICS`.
        n_outputs: outputs per tree (``None``: inferred from ``y``; 1 for class labels).

    Returns:
        ``(yt, n_outputs)``: ``yt`` float32 ``[n_y, n_points]`` (``n_y = n_outputs`` for regression, 1
        for class labels).
    """
    check_choice(metric, "metric", METRICS)
    y = jnp.asarray(y, jnp.float32)
    if y.ndim == 0 or y.shape[0] != n_points or y.ndim > 2:
        raise ArgumentError(f"y must be [n_points={n_points}] or [n_points, n_outputs], got shape {y.shape}")
    if metric in CLASSIFICATION_METRICS:
        if y.ndim != 1:
            raise ArgumentError(
                f"metric {metric!r} needs integer class labels y [n_points], got shape {y.shape}"
            )
        n_out = 1 if n_outputs is None else check_int(n_outputs, "n_outputs")
        if not isinstance(y, jax.core.Tracer):  # traced labels cannot be checked here
            labels = np.asarray(y)
            n_classes = max(n_out, 2)
            if not np.all((labels == np.round(labels)) & (labels >= 0) & (labels < n_classes)):
                raise ArgumentError(
                    f"y must hold integer class labels in 0..{n_classes - 1} for metric {metric!r} with "
                    f"n_outputs={n_out}, got values {np.unique(labels)[:8]}"
                )
        return y[None], n_out
    n_y = 1 if y.ndim == 1 else y.shape[1]
    if n_outputs is not None and check_int(n_outputs, "n_outputs") != n_y:
        raise ArgumentError(f"n_outputs={n_outputs} but y has {n_y} output column(s)")
    return (y[None] if y.ndim == 1 else y.T), n_y


# ---- metric definitions -------------------------------------------------------------------------------


def row_terms(pred: jax.Array, y: jax.Array, metric: str) -> tuple[jax.Array, jax.Array]:
    """Per-row contribution to a metric and a per-row "non-finite prediction" flag.

    Args:
        pred: ``[n_outputs, ..., B]`` predictions.
        y: ``[n_y, B]`` targets (``n_y = n_outputs`` for regression, 1 for class labels).
        metric: one of :data:`METRICS`.

    Returns:
        ``(term, bad)``, both float32 ``[..., B]``; the metric is a function of the sums of both.
    """
    n_out = pred.shape[0]
    yb = y.reshape(y.shape[:1] + (1,) * (pred.ndim - 2) + y.shape[1:])
    bad = jnp.any(~jnp.isfinite(pred), axis=0).astype(jnp.float32)
    if metric in ("mse", "rmse", "r2"):
        term = jnp.sum(jnp.square(pred - yb), axis=0)
    elif metric == "accuracy":
        label = yb[0]
        if n_out == 1:
            correct = (pred[0] > 0) == (label > 0.5)
        else:
            correct = jnp.argmax(pred, axis=0).astype(jnp.float32) == label
        term = correct.astype(jnp.float32)
    else:  # cross_entropy
        label = yb[0]
        if n_out == 1:
            z = pred[0]
            term = jnp.maximum(z, 0.0) - z * label + jnp.log1p(jnp.exp(-jnp.abs(z)))
        else:
            k = jnp.arange(n_out, dtype=jnp.float32).reshape((n_out,) + (1,) * (pred.ndim - 1))
            picked = jnp.sum(jnp.where(k == label[None], pred, 0.0), axis=0)
            term = jax.nn.logsumexp(pred, axis=0) - picked
    return term, bad


def finalize_metric(
    term_sum: jax.Array, bad_sum: jax.Array, metric: str, n_points: int, n_outputs: int, sst: jax.Array
) -> jax.Array:
    """Turn per-tree sums of :func:`row_terms` into the metric (non-finite -> worst, see module doc).

    Args:
        term_sum, bad_sum: float32 ``[pop]`` sums over the rows of ``term`` and ``bad``.
        metric: one of :data:`METRICS`.
        n_points, n_outputs: rows and outputs the sums ran over.
        sst: ``[]`` :func:`total_sum_of_squares` of the targets (used by ``"r2"`` only).

    Returns:
        float32 ``[pop]`` in natural orientation.
    """
    n = jnp.float32(n_points)
    if metric == "mse":
        value = term_sum / (n * n_outputs)
    elif metric == "rmse":
        value = jnp.sqrt(term_sum / (n * n_outputs))
    elif metric == "r2":
        safe = jnp.where(sst > 0, sst, 1.0)
        value = jnp.where(sst > 0, 1.0 - term_sum / safe, jnp.where(term_sum == 0, 1.0, 0.0))
    else:  # accuracy, cross_entropy
        value = term_sum / n
    worst = -jnp.inf if metric in MAXIMIZED_METRICS else jnp.inf
    return jnp.where((bad_sum > 0) | ~jnp.isfinite(value), worst, value).astype(jnp.float32)


def total_sum_of_squares(y: jax.Array) -> jax.Array:
    """``SST`` of targets ``[n_y, n_points]`` (per-output means, summed): the R^2 denominator, ``[]``."""
    return jnp.sum(jnp.square(y - jnp.mean(y, axis=1, keepdims=True)))


def metric_from_predictions(pred: Any, y: Any, metric: str = "mse") -> jax.Array:
    """The same fitness as :func:`evotensor.gp.fitness`, computed from materialized predictions.

    Args:
        pred: ``[pop, n_points, n_outputs]`` (e.g. from :func:`evotensor.gp.evaluate`).
        y: ``[n_points]`` or ``[n_points, n_outputs]`` targets / ``[n_points]`` class labels.
        metric: one of :data:`METRICS`.

    Returns:
        ``float32 [pop]``.
    """
    pred = jnp.asarray(pred, jnp.float32)
    if pred.ndim != 3:
        raise ArgumentError(f"pred must be [pop, n_points, n_outputs], got shape {pred.shape}")
    yt, n_out = check_y(y, pred.shape[1], metric, pred.shape[2])
    term, bad = row_terms(jnp.moveaxis(pred, 2, 0), yt, metric)
    return finalize_metric(term.sum(-1), bad.sum(-1), metric, pred.shape[1], n_out, total_sum_of_squares(yt))
