"""Discount models for Discount Model Search (:class:`~evotensor.qd.DiscountArchive`): a network
that maps measures to discount values, and the minibatch regression that fits it to targets.

A model is any object with ``init(key, measure_dim) -> params`` and
``apply(params, x [N, D]) -> [N]``; :class:`DiscountMLP` is the paper's (Tjanaka et al. 2026,
``config/algo/discount_model/mlp.yaml``: two hidden layers of 128 ReLU units, PyTorch's default
initialisation). :func:`fit_discount_model` is pyribs' ``DiscountModelManager.training_loop``,
compiled: MSE regression by minibatches of a fresh permutation each epoch, the last batch partial,
until the epoch's loss is at most ``cutoff_loss`` or ``epochs`` have run.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import optax
from jax import lax

from evotensor.core import rng
from evotensor.core.checks import ArgumentError
from evotensor.problems.networks import mlp_apply


@dataclasses.dataclass(frozen=True)
class DiscountMLP:
    """A multi-layer perceptron ``[N, D] -> [N]``: ``hidden`` layers with ``activation``, a linear
    output of one unit.

    Weights and biases start as PyTorch's ``nn.Linear`` does (uniform in ``+-1/sqrt(fan_in)``, what
    the paper's ``pytorch_default`` means). Products run at float32 precision on every platform
    (a GPU's default for float32 products is TF32).

    Args:
        hidden: widths of the hidden layers, default ``(128, 128)``.
        activation: a name of :data:`evotensor.problems.networks.ACTIVATIONS` or a callable,
            default ``"relu"``.
    """

    hidden: Sequence[int] = (128, 128)
    activation: str | Callable[[jax.Array], jax.Array] = "relu"

    def __post_init__(self):
        hidden = tuple(self.hidden)
        if any(isinstance(h, bool) or not isinstance(h, int) or h < 1 for h in hidden):
            raise ArgumentError(f"hidden must be positive ints, got {self.hidden!r}")
        object.__setattr__(self, "hidden", hidden)
        mlp_apply((), jnp.zeros((1, 1)), self.activation)  # an unknown activation name fails here

    def init(self, key: jax.Array, measure_dim: int) -> tuple[dict[str, jax.Array], ...]:
        """Layers ``({"w": [in, out], "b": [out]}, ...)`` for inputs of ``measure_dim`` values."""
        sizes = (measure_dim, *self.hidden, 1)
        layers = []
        for k, fan_in, fan_out in zip(
            jax.random.split(key, len(sizes) - 1), sizes[:-1], sizes[1:], strict=True
        ):
            bound = 1.0 / math.sqrt(fan_in)
            kw, kb = jax.random.split(k)
            layers.append(
                {
                    "w": rng.uniform(kw, (fan_in, fan_out), jnp.float32, -bound, bound),
                    "b": rng.uniform(kb, (fan_out,), jnp.float32, -bound, bound),
                }
            )
        return tuple(layers)

    def apply(self, params: Any, x: jax.Array) -> jax.Array:
        """``x [N, D] -> [N]`` float32."""
        with jax.default_matmul_precision("highest"):
            return mlp_apply(params, x, self.activation)[..., 0]


def fit_discount_model(
    apply: Callable[[Any, jax.Array], jax.Array],
    optimizer: optax.GradientTransformation,
    params: Any,
    opt_state: Any,
    key: jax.Array,
    x: jax.Array,
    y: jax.Array,
    valid: jax.Array,
    *,
    epochs: int,
    batch_size: int,
    cutoff_loss: float,
) -> tuple[Any, Any, jax.Array, jax.Array]:
    """Regress ``apply(params, x)`` onto ``y`` by MSE over the rows where ``valid``.

    Each epoch shuffles the ``n = sum(valid)`` valid rows (a permutation drawn from ``key`` folded
    with the epoch) and takes optimizer steps on consecutive minibatches of ``batch_size`` rows, the
    last one holding the ``n mod batch_size`` left over (PyTorch's ``DataLoader(shuffle=True)``);
    each step's loss is the mean over its rows. The epoch's loss is the rows' losses averaged as
    pyribs does (``sum(loss_b * |b|) / n``, each batch measured before its own step). Training stops
    after the first epoch whose loss is ``<= cutoff_loss``, or after ``epochs``. No valid row: no
    step at all.

    Args:
        apply: ``(params, x [N, D]) -> [N]``.
        optimizer: an optax transformation; ``opt_state`` is its state (kept across calls).
        x: ``[N, D]`` inputs; y: ``[N]`` targets; valid: ``[N]`` bool.

    Returns:
        ``(params, opt_state, losses [epochs] (NaN for epochs not run), epochs_run [] int32)``.
    """
    rows = x.shape[0]
    count = jnp.sum(valid, dtype=jnp.int32)
    steps = -(-rows // batch_size)
    pad = steps * batch_size - rows
    x = jnp.concatenate([x, jnp.zeros((pad, x.shape[1]), x.dtype)])
    y = jnp.concatenate([y, jnp.zeros((pad,), y.dtype)])
    position = jnp.arange(steps * batch_size, dtype=jnp.int32).reshape(steps, batch_size)

    def batch_loss(p, xb, yb, inside):
        err = jnp.where(inside, apply(p, xb) - yb, 0.0)
        return jnp.sum(err * err) / jnp.maximum(jnp.sum(inside), 1)

    grad = jax.value_and_grad(batch_loss)

    def epoch(carry):
        e, p, o, losses, _ = carry
        # valid rows first in a random order, the rest (and the padding) after them
        shuffle = rng.uniform(jax.random.fold_in(key, e), (steps * batch_size,))
        invalid = jnp.concatenate([~valid, jnp.ones((pad,), bool)])
        order = lax.sort((invalid.astype(jnp.int32), shuffle, jnp.arange(steps * batch_size)), num_keys=2)[2]

        def step(state, batch):
            p, o = state
            rows_b, position_b = batch
            inside = position_b < count
            loss, g = grad(p, x[rows_b], y[rows_b], inside)

            def update(_):
                u, o2 = optimizer.update(g, o, p)
                return optax.apply_updates(p, u), o2

            # a batch wholly past the valid rows takes no step (Adam would still move on zeros)
            p, o = lax.cond(position_b[0] < count, update, lambda _: (p, o), None)
            return (p, o), loss * jnp.sum(inside)

        (p, o), weighted = lax.scan(step, (p, o), (order.reshape(steps, batch_size), position))
        loss = jnp.sum(weighted) / count
        return e + 1, p, o, losses.at[e].set(loss), loss <= cutoff_loss

    def going(carry):
        e, *_, done = carry
        return (e < epochs) & ~done & (count > 0)

    losses = jnp.full((epochs,), jnp.nan, jnp.float32)
    e, params, opt_state, losses, _ = lax.while_loop(
        going, epoch, (jnp.zeros((), jnp.int32), params, opt_state, losses, jnp.zeros((), bool))
    )
    return params, opt_state, losses, e
