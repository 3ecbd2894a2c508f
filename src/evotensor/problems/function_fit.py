"""Fitting a function from a fixed table of cases: XOR (NEAT's classic test) and any ``(X, y)``.

Both are policy problems: a phenotype is applied to each case, ``y_hat = apply(phenotype, x)``.

* :class:`XOR` — the ``2 ** n`` cases of ``n``-input parity (``n = 2``: XOR; ``n = 3``: 3-input XOR),
  fitness ``2 ** n - SSE`` (**maximized**; solved above ``2 ** n - 0.1`` by neat-python's XOR
  example's ``fitness_threshold = 3.9``), the squared error summed over cases and outputs.
* :class:`FunctionFit` — arbitrary arrays ``X [n, d]``, ``y [n, k]`` (or ``[n]``), loss ``"mse"``,
  ``"rmse"``, ``"mae"`` or ``"sse"`` (**minimized**), as TensorNEAT's ``CustomFuncFit``.

A non-finite prediction gives a non-finite fitness, which the run loop treats as the worst.

Example::

    problem = XOR()
    ev = problem.evaluate(key, phenotypes, apply)       # fitness [pop], maximize
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core.checks import ArgumentError, check_choice, check_int
from evotensor.core.evaluation import Evaluation

__all__ = ["XOR", "FunctionFit", "xor_cases"]

Apply = Callable[[Any, jax.Array], jax.Array]


def xor_cases(num_inputs: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """``(X float32 [2**n, n], y float32 [2**n, 1])``: every input pattern in binary counting order
    and its parity."""
    n = check_int(num_inputs, "num_inputs", minimum=2, maximum=16)
    x = np.array(list(itertools.product((0.0, 1.0), repeat=n)), np.float32)
    return x, (x.sum(axis=1) % 2)[:, None].astype(np.float32)


def _predict_all(phenotypes: Any, apply: Apply, x: jax.Array) -> jax.Array:
    """``[pop, n, k]`` predictions: every phenotype on every case."""

    def one(p):
        return jax.vmap(lambda xi: jnp.reshape(apply(p, xi), (-1,)))(x)

    return jax.vmap(one)(phenotypes)


def _real_array(value: Any, name: str) -> np.ndarray:
    """``value`` as a float32 array; an :class:`ArgumentError` naming ``name`` if it is not numbers."""
    if isinstance(value, (str, bytes)) or value is None:
        raise ArgumentError(f"{name} must be an array of numbers, got {value!r}")
    try:
        array = np.asarray(value)
        if array.dtype == np.bool_ or not np.issubdtype(array.dtype, np.number):
            raise TypeError(array.dtype)
        if np.issubdtype(array.dtype, np.complexfloating):
            raise TypeError(array.dtype)
        with np.errstate(over="ignore"):
            return array.astype(np.float32)
    except (TypeError, ValueError) as err:
        raise ArgumentError(f"{name} must be an array of real numbers, got {value!r}") from err


class XOR:
    """``num_inputs``-input parity (2: XOR), fitness ``2 ** num_inputs - SSE`` (maximized).

    Attributes:
        x ``float32 [2**n, n]``, y ``float32 [2**n, 1]``: the cases; ``max_fitness``: ``2 ** n``;
        ``num_inputs``, ``num_outputs`` (1).
    """

    kind = "policy"
    maximize = True

    def __init__(self, num_inputs: int = 2):
        x, y = xor_cases(num_inputs)
        self.num_inputs, self.num_outputs = x.shape[1], 1
        self.x, self.y = jnp.asarray(x), jnp.asarray(y)
        self.max_fitness = float(x.shape[0])

    def evaluate(self, key: jax.Array, phenotypes: Any, apply: Apply) -> Evaluation:
        """``fitness [pop]``: ``2 ** n`` minus the summed squared error."""
        del key
        pred = _predict_all(phenotypes, apply, self.x)
        sse = jnp.sum((pred - self.y[None]) ** 2, axis=(1, 2))
        return Evaluation(fitness=self.max_fitness - sse)

    def __repr__(self) -> str:
        return f"XOR(num_inputs={self.num_inputs})"


class FunctionFit:
    """Fit ``y`` from ``X`` (minimized loss).

    Args:
        x: ``[n, d]`` inputs; y: ``[n, k]`` or ``[n]`` targets (finite).
        loss: ``"mse"`` (default), ``"rmse"``, ``"mae"`` or ``"sse"``, over cases and outputs.
    """

    kind = "policy"
    maximize = False
    LOSSES = ("mse", "rmse", "mae", "sse")

    def __init__(self, x: Any, y: Any, loss: str = "mse"):
        x, y = _real_array(x, "x"), _real_array(y, "y")
        if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 1:
            raise ArgumentError(f"x must be a non-empty [n, d] array, got shape {x.shape}")
        if y.ndim == 1:
            y = y[:, None]
        if y.ndim != 2 or y.shape[0] != x.shape[0] or y.shape[1] < 1:
            raise ArgumentError(
                f"y must be [n] or [n, k] with n = {x.shape[0]} (x's rows), got shape {y.shape}"
            )
        for name, value in (("x", x), ("y", y)):
            if not np.all(np.isfinite(value)):
                raise ArgumentError(f"{name} must be finite (in float32): it holds NaN, inf or |v| > 3.4e38")
        self.loss = check_choice(loss, "loss", self.LOSSES)
        self.x, self.y = jnp.asarray(x), jnp.asarray(y)
        self.num_inputs, self.num_outputs = x.shape[1], y.shape[1]

    def _reduce(self, err: jax.Array, axis: Any) -> jax.Array:
        if self.loss == "mae":
            return jnp.mean(jnp.abs(err), axis=axis)
        if self.loss == "sse":
            return jnp.sum(err**2, axis=axis)
        mse = jnp.mean(err**2, axis=axis)
        return jnp.sqrt(mse) if self.loss == "rmse" else mse

    def evaluate(self, key: jax.Array, phenotypes: Any, apply: Apply) -> Evaluation:
        """``fitness [pop]``: the loss of each phenotype over all cases."""
        del key
        err = _predict_all(phenotypes, apply, self.x) - self.y[None]
        return Evaluation(fitness=self._reduce(err, (1, 2)))

    def loss_of(self, pred: jax.Array) -> jax.Array:
        """The loss ``[]`` of one model's predictions ``pred [n, k]`` on the cases (what
        :meth:`evaluate` gives each phenotype; a local search, e.g. NEAT's ``GradientFit``, minimizes
        it)."""
        return self._reduce(jnp.reshape(pred, self.y.shape) - self.y, None)

    def __repr__(self) -> str:
        n, d, k = self.x.shape[0], self.num_inputs, self.num_outputs
        return f"FunctionFit(n={n}, inputs={d}, outputs={k}, loss={self.loss!r})"
