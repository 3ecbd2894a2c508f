"""Shared machinery of the finite-difference gradient strategies (OpenES, PGPE-style, ARS, PES,
NRES, ESMC, GuidedES, ASEBO): an optax optimizer on the mean, a sigma that is constant or follows
a schedule, fitness shaping into weights, and best-so-far tracking with a guard that keeps the
state finite.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from evotensor.core.fitness_shaping import centered_ranks
from evotensor.core.pytree import pytree_dataclass
from evotensor.es.base import VectorStrategy, track_best
from evotensor.es.optimizers import (
    check_optimizer,
    check_sigma_schedule,
    resolve_sigma_init,
    safe_norm,
)

FitnessShaping = Callable[[jax.Array], jax.Array]


@pytree_dataclass
class GradientESState:
    """State of a finite-difference gradient ES.

    Attributes:
        mean: ``[dims]`` search-distribution mean.
        opt_state: the optax optimizer state.
        generation: ``[]`` int32, number of completed ``tell`` calls (the sigma-schedule step).
        best_solution: ``[dims]`` best sample seen so far.
        best_fitness: ``[]`` its (minimized) fitness; ``+inf`` before the first tell.
    """

    mean: jax.Array
    opt_state: Any
    generation: jax.Array
    best_solution: jax.Array
    best_fitness: jax.Array


@pytree_dataclass
class GradientESParams:
    """Dynamic hyperparameters (vmappable).

    Attributes:
        sigma_init: ``[]`` perturbation scale used when no ``sigma_schedule`` is given.
    """

    sigma_init: jax.Array


def check_shaping(fitness_shaping: Any) -> FitnessShaping:
    """Raise unless ``fitness_shaping`` is a callable ``fitness [pop] -> weights [pop]``."""
    if not callable(fitness_shaping):
        raise TypeError(
            f"fitness_shaping must be a callable fitness [pop] -> weights [pop], got {fitness_shaping!r}"
        )
    return fitness_shaping


def identity_shaping(fitness: jax.Array) -> jax.Array:
    """Raw (minimized) fitness used as weights. ``[pop] -> [pop]``."""
    return jnp.asarray(fitness, jnp.float32)


class GradientES(VectorStrategy):
    """Base of the finite-difference gradient strategies (OpenES, ARS, PES, NRES, ESMC, …).

    Subclasses implement ``_ask`` and ``_tell``; ``_tell`` computes a gradient estimate (of the
    minimized objective) and calls :meth:`_apply_gradient`.
    """

    default_sigma_init: float = 0.02
    default_learning_rate: float = 0.01

    def __init__(
        self,
        population_size: int,
        solution: Any = None,
        num_dims: int | None = None,
        *,
        optimizer: optax.GradientTransformation | None = None,
        sigma_init: float | None = None,
        sigma_schedule: Callable[[jax.Array], jax.Array] | None = None,
        fitness_shaping: FitnessShaping = centered_ranks,
    ):
        super().__init__(population_size, solution, num_dims)
        if optimizer is None:
            optimizer = optax.adam(learning_rate=self.default_learning_rate)
        self.optimizer = check_optimizer(optimizer)
        self.sigma_schedule = check_sigma_schedule(sigma_schedule)
        self._sigma_init = resolve_sigma_init(sigma_init, self.sigma_schedule, self.default_sigma_init)
        self.fitness_shaping = check_shaping(fitness_shaping)

    # -- params / sigma -------------------------------------------------------------------
    def default_params(self) -> GradientESParams:
        """``sigma_init`` as given (or the strategy's literature default)."""
        return GradientESParams(sigma_init=jnp.asarray(self._sigma_init, jnp.float32))

    def sigma(self, state: GradientESState, params: Any) -> jax.Array:
        """Current perturbation scale ``[]``: ``sigma_schedule(generation)`` or ``params.sigma_init``."""
        if self.sigma_schedule is not None:
            return jnp.asarray(self.sigma_schedule(state.generation), jnp.float32)
        return jnp.asarray(params.sigma_init, jnp.float32)

    # -- shared pieces ----------------------------------------------------------------------
    def _base_fields(self) -> dict[str, Any]:
        mean = jnp.array(self.initial_mean(), copy=True)  # own buffer: callers may donate state
        return dict(
            mean=mean,
            opt_state=self.optimizer.init(mean),
            generation=jnp.zeros((), jnp.int32),
            best_solution=jnp.array(mean, copy=True),
            best_fitness=jnp.asarray(jnp.inf, jnp.float32),
        )

    def _init(self, key, params):
        return GradientESState(**self._base_fields())

    def _weights(self, fitness: jax.Array) -> jax.Array:
        w = jnp.asarray(self.fitness_shaping(fitness), jnp.float32)
        if w.shape != fitness.shape:
            raise ValueError(f"fitness_shaping must return shape {fitness.shape}, got {w.shape}")
        return w

    def _apply_gradient(
        self, state: Any, grad: jax.Array, x: jax.Array, fitness: jax.Array, sigma: jax.Array
    ) -> tuple[Any, dict[str, jax.Array]]:
        """Optimizer step on ``grad [dims]``, best-so-far tracking, metrics; state stays finite."""
        grad = jnp.where(jnp.isfinite(grad), grad, 0.0)
        updates, opt_state = self.optimizer.update(grad, state.opt_state, state.mean)
        mean = optax.apply_updates(state.mean, updates)
        finite = jnp.all(jnp.isfinite(mean))
        mean = jnp.where(finite, mean, state.mean)
        opt_state = jax.tree_util.tree_map(
            lambda new, old: jnp.where(finite, new, old), opt_state, state.opt_state
        )
        state, metrics = track_best(state, x, fitness)
        metrics.update(sigma=jnp.mean(sigma), grad_norm=safe_norm(grad))
        return state.replace(mean=mean, opt_state=opt_state, generation=state.generation + 1), metrics
