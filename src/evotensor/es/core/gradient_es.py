"""Shared machinery of the optax-driven strategies: the finite-difference gradient ES (OpenES, ARS,
PES, NRES, ESMC, GuidedES, ASEBO) and PGPE. An optax optimizer on the mean, a sigma that is constant
or follows a schedule, fitness shaping into weights, and best-so-far tracking with a guard that
keeps the state finite.

:class:`OptimizerStrategy` holds the constructor they share (optimizer, fitness shaping, the even
population of mirrored sampling), :class:`GradientES` adds the sigma schedule and the optimizer step.

It also holds the unsharded half of the population-sharding protocol of
:mod:`evotensor.es.core.sharding`: :func:`tell_by_statistics` runs a shardable strategy's
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

from evotensor.core.checks import ArgumentError
from evotensor.core.fitness_shaping import centered_ranks
from evotensor.core.pytree import pytree_dataclass
from evotensor.es.core.base import VectorStrategy, check_even
from evotensor.es.core.optimizers import (
    check_optimizer,
    check_sigma_schedule,
    resolve_sigma_init,
    safe_norm,
)
from evotensor.es.core.sharding import ShardableStrategy

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
        ``(best_x, best_f)``, exactly :func:`evotensor.es.core.base.update_best` on the whole population.
    """
    i = jnp.argmin(fitness)
    better = fitness[i] < best_f
    return jnp.where(better, row, best_x), jnp.where(better, fitness[i], best_f)


def track_best_row(state: Any, row: jax.Array, fitness: jax.Array) -> tuple[Any, dict[str, jax.Array]]:
    """:func:`evotensor.es.core.base.track_best` given the best row ``[dims]`` instead of
    ``x [pop, dims]``."""
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

    ``x [pop, dims]``, ``fitness [pop]`` (minimized, finite). :func:`evotensor.es.core.sharding.sharded`
    calls the same hooks with ``_row_statistics`` on each device's rows and a ``psum`` in between.
    """
    weights, aux = strategy._member_weights(state, fitness, params)
    stats = strategy._row_statistics(state, params, x, weights, aux)
    return strategy._update_from_statistics(key, state, params, stats, aux, fitness, x[jnp.argmin(fitness)])


def identity_shaping(fitness: jax.Array) -> jax.Array:
    """Raw (minimized) fitness used as weights. ``[pop] -> [pop]``."""
    return jnp.asarray(fitness, jnp.float32)


def check_finite_steps(optimizer: Any, name: str = "optimizer") -> Any:
    """Raise :class:`~evotensor.core.checks.ArgumentError` when ``optimizer``'s first step on a
    one-element parameter with a unit gradient is not finite: a NaN or infinite learning rate
    (``optax.adam(float("nan"))``), found at construction instead of freezing every update. An
    optimizer that cannot take a one-element parameter (one built for a given pytree) is not probed."""
    try:
        params = jnp.zeros((1,), jnp.float32)
        updates, _ = optimizer.update(jnp.ones((1,), jnp.float32), optimizer.init(params), params)
        leaves = [jnp.asarray(leaf) for leaf in jax.tree_util.tree_leaves(updates)]
    except Exception:  # noqa: BLE001 - not probeable this way; the run's finite guard remains
        return optimizer
    if not all(bool(jnp.all(jnp.isfinite(leaf))) for leaf in leaves):
        raise ArgumentError(
            f"{name}'s first step on a unit gradient is not finite (a NaN or infinite learning rate?)"
        )
    return optimizer


class _StrategyDefault:
    """The value of an argument left at the strategy's own default (shown in signatures)."""

    def __repr__(self) -> str:
        return "<strategy default>"


# ``fitness_shaping``'s default: the strategy's ``default_fitness_shaping`` (a sentinel rather than
# None, so that ``fitness_shaping=None`` is still refused as not callable)
STRATEGY_DEFAULT: Any = _StrategyDefault()


class OptimizerStrategy(ShardableStrategy, VectorStrategy):
    """Base of the strategies whose mean is moved by an optax optimizer along an estimate computed
    from shaped fitness (:class:`GradientES`, PGPE): the constructor checks and stores ``optimizer``
    and ``fitness_shaping`` and, for mirrored sampling, that the population size is even.

    A subclass sets its literature defaults as class attributes: ``default_learning_rate`` (the
    step of the default optimizer, :meth:`default_optimizer`: Adam unless overridden),
    ``default_fitness_shaping`` and ``mirrored_sampling`` (``None``, or what needs pairs, for the
    error message: ``"ARS's antithetic directions"``). Its own constructor takes only its own
    arguments and passes the shared ones on (``**options``).

    Args:
        population_size, solution, num_dims: as :class:`~evotensor.es.core.base.VectorStrategy`.
        optimizer: any optax ``GradientTransformation``; ``None``: :meth:`default_optimizer`.
        fitness_shaping: ``fitness [pop] -> weights [pop]`` (lower = better); default the class's
            ``default_fitness_shaping``.
    """

    default_learning_rate: float = 0.01
    default_fitness_shaping: FitnessShaping = staticmethod(centered_ranks)
    mirrored_sampling: str | None = None

    def __init__(
        self,
        population_size: int,
        solution: Any = None,
        num_dims: int | None = None,
        *,
        optimizer: optax.GradientTransformation | None = None,
        fitness_shaping: FitnessShaping = STRATEGY_DEFAULT,
    ):
        super().__init__(population_size, solution, num_dims)
        self.optimizer = check_finite_steps(
            check_optimizer(self.default_optimizer() if optimizer is None else optimizer)
        )
        if fitness_shaping is STRATEGY_DEFAULT:
            fitness_shaping = self.default_fitness_shaping
        self.fitness_shaping = check_shaping(fitness_shaping)
        if self.mirrored_sampling is not None:
            check_even(self.population_size, self.mirrored_sampling)

    def default_optimizer(self) -> optax.GradientTransformation:
        """The optimizer used when none is given: ``optax.adam(default_learning_rate)``."""
        return optax.adam(learning_rate=self.default_learning_rate)

    def _base_fields(self) -> dict[str, Any]:
        """:meth:`_initial_mean_fields` and the optimizer's state of the mean (``opt_state``)."""
        fields = self._initial_mean_fields()
        return dict(fields, opt_state=self.optimizer.init(fields["mean"]))

    def _weights(self, fitness: jax.Array) -> jax.Array:
        """``fitness_shaping(fitness)`` as float32 ``[pop]``; raises unless it keeps the shape."""
        w = jnp.asarray(self.fitness_shaping(fitness), jnp.float32)
        if w.shape != fitness.shape:
            raise ValueError(f"fitness_shaping must return shape {fitness.shape}, got {w.shape}")
        return w


class GradientES(OptimizerStrategy):
    """Base of the finite-difference gradient strategies (OpenES, ARS, PES, NRES, ESMC, …): an
    :class:`OptimizerStrategy` whose perturbation scale is a constant or a schedule.

    Subclasses implement ``_ask`` and ``_tell``; ``_tell`` computes a gradient estimate (of the
    minimized objective) and calls :meth:`_apply_gradient` (or :meth:`_apply_gradient_row`).

    Args:
        population_size, solution, num_dims, optimizer, fitness_shaping: as
            :class:`OptimizerStrategy`.
        sigma_init: constant perturbation scale; default the class's ``default_sigma_init``.
        sigma_schedule: optax-style schedule ``generation -> sigma`` (exclusive with ``sigma_init``).
    """

    default_sigma_init: float = 0.02

    def __init__(
        self,
        population_size: int,
        solution: Any = None,
        num_dims: int | None = None,
        *,
        sigma_init: float | None = None,
        sigma_schedule: Callable[[jax.Array], jax.Array] | None = None,
        **options: Any,
    ):
        super().__init__(population_size, solution, num_dims, **options)
        self.sigma_schedule = check_sigma_schedule(sigma_schedule)
        self._sigma_init = resolve_sigma_init(sigma_init, self.sigma_schedule, self.default_sigma_init)

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
    def _init(self, key, params):
        return GradientESState(**self._base_fields())

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
