"""Shared machinery of the finite-difference gradient strategies (OpenES, PGPE-style, ARS, PES,
NRES, ESMC, GuidedES, ASEBO): an optax optimizer on the mean, a sigma that is constant or follows
a schedule, fitness shaping into weights, and best-so-far tracking with a guard that keeps the
state finite.

It also holds the unsharded half of the population-sharding protocol of
:mod:`evotensor.es.sharding`: :func:`tell_by_statistics` runs a shardable strategy's
``_member_weights -> _row_statistics -> _update_from_statistics`` hooks on the whole population,
so the unsharded ``tell`` and the sharded one share every line of update math.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from jax.lax import Precision

from evotensor.core.fitness_shaping import centered_ranks
from evotensor.core.pytree import pytree_dataclass
from evotensor.es.base import VectorStrategy
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


def best_row_update(
    best_x: jax.Array, best_f: jax.Array, row: jax.Array, fitness: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Best-so-far update from the generation's best row.

    Args:
        best_x: ``[dims]`` incumbent; best_f: ``[]`` its fitness.
        row: ``[dims]`` the candidate at ``argmin(fitness)`` (under sharding only that row, not the
            population, is brought to every device).
        fitness: ``[pop]`` minimized, invalid entries already worse than every valid one.

    Returns:
        ``(best_x, best_f)``, exactly :func:`evotensor.es.base.update_best` on the whole population.
    """
    i = jnp.argmin(fitness)
    better = fitness[i] < best_f
    return jnp.where(better, row, best_x), jnp.where(better, fitness[i], best_f)


def track_best_row(state: Any, row: jax.Array, fitness: jax.Array) -> tuple[Any, dict[str, jax.Array]]:
    """:func:`evotensor.es.base.track_best` given the best row ``[dims]`` instead of ``x [pop, dims]``."""
    best_solution, best_fitness = best_row_update(state.best_solution, state.best_fitness, row, fitness)
    metrics = dict(
        best_fitness=best_fitness, generation_best_fitness=jnp.min(fitness), mean_fitness=jnp.mean(fitness)
    )
    return state.replace(best_solution=best_solution, best_fitness=best_fitness), metrics


def pair_sum(weights: jax.Array, x: jax.Array) -> jax.Array:
    """``sum_i (w_i - w_{i+h}) (x_i - x_{i+h})`` over the ``h = rows/2`` mirrored pairs of ``x``.

    Args: weights ``[rows]``, x ``[rows, dims]`` with row ``i + h`` the mirror of row ``i``.

    Returns ``[dims]``: two matrix-vector products that read ``x`` once (the mean is never
    subtracted from the large matrix).
    """
    h = x.shape[0] // 2
    c = weights[:h] - weights[h:]  # [h]
    # HIGHEST: exact float32 on GPUs; x is not centred, so TF32's rounding of x (~|mean| 2^-11)
    # would swamp the small differences between mirrored rows
    head = jnp.matmul(c, x[:h], precision=Precision.HIGHEST)
    return head - jnp.matmul(c, x[h:], precision=Precision.HIGHEST)


def tell_by_statistics(
    strategy: Any, key: jax.Array, state: Any, x: jax.Array, fitness: jax.Array, params: Any
) -> tuple[Any, dict[str, jax.Array]]:
    """Unsharded ``_tell`` of a shardable strategy: its three hooks on the whole population.

    ``x [pop, dims]``, ``fitness [pop]`` (minimized, finite). :func:`evotensor.es.sharding.sharded`
    calls the same hooks with ``_row_statistics`` on each device's rows and a ``psum`` in between.
    """
    weights, aux = strategy._member_weights(state, fitness, params)
    stats = strategy._row_statistics(state, params, x, weights, aux)
    return strategy._update_from_statistics(key, state, params, stats, aux, fitness, x[jnp.argmin(fitness)])


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
        return self._apply_gradient_row(state, grad, x[jnp.argmin(fitness)], fitness, sigma)

    def _apply_gradient_row(
        self, state: Any, grad: jax.Array, best_row: jax.Array, fitness: jax.Array, sigma: jax.Array
    ) -> tuple[Any, dict[str, jax.Array]]:
        """:meth:`_apply_gradient` given the generation's best row ``[dims]`` instead of ``x``."""
        grad = jnp.where(jnp.isfinite(grad), grad, 0.0)
        updates, opt_state = self.optimizer.update(grad, state.opt_state, state.mean)
        mean = optax.apply_updates(state.mean, updates)
        # the optimizer's state too: a finite but huge gradient (~1/sigma as sigma -> 0; where a GPU
        # keeps float32 denormals that a CPU flushes) overflows Adam's second moment to inf
        finite = jnp.all(jnp.isfinite(mean))
        for leaf in jax.tree_util.tree_leaves(opt_state):
            if jnp.issubdtype(leaf.dtype, jnp.inexact):
                finite = finite & jnp.all(jnp.isfinite(leaf))
        mean = jnp.where(finite, mean, state.mean)
        opt_state = jax.tree_util.tree_map(
            lambda new, old: jnp.where(finite, new, old), opt_state, state.opt_state
        )
        state, metrics = track_best_row(state, best_row, fitness)
        metrics.update(sigma=jnp.mean(sigma), grad_norm=safe_norm(grad))
        return state.replace(mean=mean, opt_state=opt_state, generation=state.generation + 1), metrics
