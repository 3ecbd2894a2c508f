"""Fixed constants as terminals: columns of the data that constant optimization never tunes.

A constant leaf (``CONST``) is tuned by Levenberg-Marquardt when constant optimization is on, so a
leaf drawn as ``1`` does not stay ``1``. Exact formulas often want a literal small constant
(``log(x*x + 1)``, ``exp(log(x) / (1 + 1))`` for ``sqrt(x)``); a *fixed* constant gives them one
without touching the evaluators: each fixed constant ``c`` becomes an extra input column filled with
``c`` (:func:`with_constant_columns`), which a tree reads as a variable (``VAR``), so nothing tunes
it. The variable draw gives those columns a total probability ``prob`` among the variable leaves
(:func:`constant_column_weights`, for ``GP(variable_weights=)``), so they do not crowd the features
out. After the run, :func:`columns_to_constants` rewrites every leaf that reads such a column as the
literal constant (``CONST`` with the value ``c``), which evaluates identically (the column holds
exactly the float32 ``c``) on the original data and prints as the number in every export.

Example::

    from evotensor.gp import GP, terminals

    values = (1.0,)
    X1 = terminals.with_constant_columns(X, values)                  # [n, n_features + 1]
    weights = terminals.constant_column_weights(X.shape[1], values, prob=0.2)
    gp = GP(1000, fs, n_vars=X1.shape[1], variable_weights=weights)  # run it on X1
    tree = terminals.columns_to_constants(best_tree, X.shape[1], values)  # reads X only
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from evotensor.core.checks import ArgumentError, check_fraction, check_int
from evotensor.gp.encoding import CONST, VAR, Forest

__all__ = ["check_constants", "columns_to_constants", "constant_column_weights", "with_constant_columns"]


def check_constants(values: Any, name: str = "fixed_constants") -> tuple[float, ...]:
    """``values`` (a sequence of finite numbers, each exact in float32) as a tuple of floats.

    Raises:
        ArgumentError: not a sequence of numbers, a non-finite value, or a value that float32 would
            round (a column holds float32: the printed literal must be the value evaluated).
    """
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise ArgumentError(f"{name} must be a sequence of numbers, got {values!r}")
    out = []
    for v in values:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise ArgumentError(f"{name} must hold numbers, got {v!r} in {values!r}")
        x = float(v)
        if not np.isfinite(x) or float(np.float32(x)) != x:
            raise ArgumentError(
                f"{name} must be finite numbers exact in float32 (e.g. 1, 2, 0.5), got {v!r} in {values!r}"
            )
        out.append(x)
    return tuple(out)


def with_constant_columns(X: Any, values: Sequence[float]) -> np.ndarray:
    """``X [n, n_features]`` with one column per fixed constant appended: float32
    ``[n, n_features + len(values)]``, column ``n_features + k`` filled with ``values[k]``."""
    X = np.asarray(X, np.float32)
    if X.ndim != 2:
        raise ArgumentError(f"X must have shape [n_points, n_features], got {X.shape}")
    cols = np.broadcast_to(np.asarray(values, np.float32), (X.shape[0], len(values)))
    return np.concatenate([X, cols], axis=1)


def constant_column_weights(n_features: int, values: Sequence[float], prob: float) -> tuple[float, ...]:
    """``variable_weights`` for ``n_features`` features followed by ``len(values)`` constant columns:
    a variable leaf is a fixed constant with probability ``prob`` (spread evenly over the constants),
    otherwise a feature (uniform). ``prob`` in ``(0, 1)``."""
    n_features = check_int(n_features, "n_features", minimum=1)
    prob = check_fraction(prob, "prob")
    if prob >= 1.0:
        raise ArgumentError(f"prob must be in (0, 1) (the features need some weight), got {prob!r}")
    k = len(values)
    if k == 0:
        return (1.0 / n_features,) * n_features
    return (*((1.0 - prob) / n_features,) * n_features, *(prob / k,) * k)


def columns_to_constants(forest: Forest, n_features: int, values: Sequence[float]) -> Forest:
    """``forest`` (any leading shape; NumPy or JAX arrays) with every ``VAR`` leaf that reads constant
    column ``n_features + k`` replaced by a ``CONST`` leaf of value ``values[k]`` (float32): the trees
    then read the first ``n_features`` columns only and evaluate as before on the original data."""
    xp = np if isinstance(forest.opcode, np.ndarray) else jnp
    n_features = check_int(n_features, "n_features", minimum=0)
    if len(values) == 0:
        return forest
    column = forest.value.astype(xp.int32) - n_features  # k for a constant column's leaf
    reads = (forest.opcode == VAR) & (column >= 0) & (column < len(values))
    table = xp.asarray(np.asarray(values, np.float32))
    constant = table[xp.clip(column, 0, len(values) - 1)]
    return Forest(
        opcode=xp.where(reads, CONST, forest.opcode).astype(xp.int32),
        value=xp.where(reads, constant, forest.value).astype(xp.float32),
        size=forest.size,
        output=forest.output,
    )
