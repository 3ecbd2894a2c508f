"""Optimizers and step-size plumbing for gradient-estimating evolution strategies.

* :func:`clipup` — the ClipUp optimizer (Toklu et al., 2020, "ClipUp: a simple and powerful
  optimizer for distribution-based policy evolution", PPSN XVI) as an optax
  ``GradientTransformation``: normalized-gradient heavy-ball momentum whose velocity norm is
  clipped to ``max_speed``.
* :func:`check_optimizer`, :func:`check_sigma_schedule`, :func:`resolve_sigma_init` — construction
  checks shared by every strategy that takes an optax optimizer and a sigma schedule.
* :func:`safe_normalize` — ``g / ||g||`` that neither overflows nor divides by zero in float32.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree

from evotensor.core.checks import ArgumentError, check_fraction, check_positive, check_spread


def safe_norm(x: jax.Array) -> jax.Array:
    """Euclidean norm of ``x`` (any shape) that does not underflow/overflow in float32.

    Scales by ``max|x|`` first, so vectors with entries ~1e-25 or ~1e25 keep a finite, non-zero
    norm. Returns ``0`` for the zero vector.
    """
    scale = jnp.max(jnp.abs(x))
    safe_scale = jnp.where(scale > 0, scale, 1.0)
    return jnp.where(scale > 0, scale * jnp.sqrt(jnp.sum((x / safe_scale) ** 2)), 0.0)


def safe_normalize(x: jax.Array) -> jax.Array:
    """``x / ||x||``; the zero vector (and non-finite input) maps to zeros. Same shape as ``x``."""
    n = safe_norm(x)
    ok = (n > 0) & jnp.isfinite(n)
    return jnp.where(ok, x / jnp.where(ok, n, 1.0), 0.0)


class ClipUpState(NamedTuple):
    """ClipUp state: the velocity (same pytree structure as the parameters) and a step count."""

    velocity: Any
    count: jax.Array


def clipup(
    learning_rate: float | optax.Schedule,
    momentum: float = 0.9,
    max_speed: float | None = None,
) -> optax.GradientTransformation:
    """ClipUp (Toklu et al., 2020) as an optax transformation.

    One step on a gradient ``g`` (of the *minimized* objective, optax convention)::

        v <- momentum * v + learning_rate * g / ||g||
        v <- v * min(1, max_speed / ||v||)
        updates = -v                      # optax.apply_updates(params, updates) descends

    Norms are taken over the whole pytree. Defaults follow the paper's recommendations: momentum
    0.9 and ``max_speed = 2 * learning_rate`` (the paper sets the step size to half the maximum
    speed). With a schedule as ``learning_rate`` the default ``max_speed`` uses its value at step 0.

    Args:
        learning_rate: step size alpha (a float or an optax schedule ``step -> alpha``), > 0.
        momentum: heavy-ball coefficient in ``[0, 1)``.
        max_speed: upper bound on the velocity norm (> 0); default ``2 * learning_rate``.

    Returns:
        An ``optax.GradientTransformation`` with state :class:`ClipUpState`.

    Example::

        opt = clipup(learning_rate=0.15)
        state = opt.init(params)
        updates, state = opt.update(grads, state)
        params = optax.apply_updates(params, updates)
    """
    if callable(learning_rate):
        lr0 = check_positive(float(learning_rate(0)), "learning_rate(0)")
    else:
        lr0 = check_spread(learning_rate, "learning_rate")
    if not 0.0 <= check_fraction(momentum, "momentum", allow_zero=True) < 1.0:  # 1 would never forget
        raise ArgumentError(f"momentum must be in [0, 1), got {momentum!r}")
    max_speed = check_spread(2.0 * float(lr0) if max_speed is None else max_speed, "max_speed")

    def init_fn(params: Any) -> ClipUpState:
        velocity = jax.tree_util.tree_map(lambda p: jnp.zeros_like(p, dtype=jnp.float32), params)
        return ClipUpState(velocity=velocity, count=jnp.zeros((), jnp.int32))

    def update_fn(updates: Any, state: ClipUpState, params: Any = None) -> tuple[Any, ClipUpState]:
        del params
        lr = learning_rate(state.count) if callable(learning_rate) else learning_rate
        flat_g, unravel = ravel_pytree(updates)
        flat_v, _ = ravel_pytree(state.velocity)
        v = momentum * flat_v + lr * safe_normalize(flat_g.astype(jnp.float32))
        speed = safe_norm(v)
        v = v * jnp.minimum(1.0, max_speed / jnp.where(speed > 0, speed, 1.0))
        velocity = unravel(v.astype(flat_v.dtype))
        new_updates = jax.tree_util.tree_map(lambda x: -x, unravel(v.astype(flat_g.dtype)))
        return new_updates, ClipUpState(velocity=velocity, count=state.count + 1)

    return optax.GradientTransformation(init_fn, update_fn)


def check_optimizer(optimizer: Any, name: str = "optimizer") -> Any:
    """Raise unless ``optimizer`` looks like an optax ``GradientTransformation``."""
    if not (hasattr(optimizer, "init") and hasattr(optimizer, "update")):
        raise TypeError(
            f"{name} must be an optax GradientTransformation (with .init and .update), "
            f"got {type(optimizer).__name__}"
        )
    return optimizer


def check_sigma_schedule(schedule: Any, name: str = "sigma_schedule") -> Callable | None:
    """Raise unless ``schedule`` is None or a callable ``step -> sigma`` (optax schedule)."""
    if schedule is not None and not callable(schedule):
        raise TypeError(f"{name} must be an optax-style schedule (callable step -> sigma), got {schedule!r}")
    return schedule


def resolve_sigma_init(sigma_init: float | None, schedule: Callable | None, default: float) -> float:
    """The initial sigma to store in params: ``sigma_init``, else ``default``.

    ``sigma_init`` and ``sigma_schedule`` are mutually exclusive: a schedule fully determines sigma.
    """
    if sigma_init is not None and schedule is not None:
        raise ArgumentError(
            "give either sigma_init (constant sigma) or sigma_schedule (step -> sigma), not both"
        )
    return check_spread(default if sigma_init is None else sigma_init, "sigma_init")
