"""Shared machinery of vector-space evolution strategies.

A :class:`VectorStrategy` owns a :class:`~evotensor.core.strategy.SolutionSpace`: users pass any
solution template (array, dict, :class:`evotensor.tree.Tree`, network parameters) and receive
populations in that structure with a leading ``pop`` axis; internally everything is a flat
``[pop, num_dims]`` float32 matrix. Subclasses implement three hooks on flat arrays:

* ``_init(key, params) -> State``
* ``_ask(key, state, params) -> (x [pop, dims], State)``
* ``_tell(key, state, x [pop, dims], fitness [pop] (minimized, finite), params) -> (State, metrics)``
"""

from __future__ import annotations

import abc
from typing import Any

import jax
import jax.numpy as jnp

from evotensor.core.evaluation import Evaluation, worst_for_nonfinite
from evotensor.core.strategy import as_solution_space, check_population_size


class VectorStrategy(abc.ABC):
    """Base class: static configuration + ravel/unravel + input checking.

    Args:
        population_size: number of candidates per generation (static).
        solution: template pytree of the solution (exclusive with ``num_dims``).
        num_dims: dimension of a flat solution vector (exclusive with ``solution``).
    """

    name: str = "strategy"

    def __init__(self, population_size: int, solution: Any = None, num_dims: int | None = None):
        self.space = as_solution_space(solution, num_dims)
        self.num_dims = self.space.num_dims
        self.population_size = check_population_size(population_size, self.min_population_size)

    min_population_size: int = 1

    # -- public protocol -------------------------------------------------------------------
    @abc.abstractmethod
    def default_params(self) -> Any:
        """Literature defaults of the dynamic hyperparameters (a pytree users may vmap over)."""

    def init(self, key: jax.Array, params: Any = None) -> Any:
        """Initial state. ``key``: a new-style ``jax.random.key``."""
        params = self.default_params() if params is None else params
        return self._init(key, params)

    def ask(self, key: jax.Array, state: Any, params: Any = None) -> tuple[Any, Any]:
        """Sample a population: ``(genotypes with leading [pop] axis, state)``."""
        params = self.default_params() if params is None else params
        x, state = self._ask(key, state, params)
        return self.space.unravel_population(x), state

    def tell(
        self, key: jax.Array, state: Any, genotypes: Any, evaluation: Evaluation | jax.Array, params: Any = None
    ) -> tuple[Any, dict[str, jax.Array]]:
        """Update from *minimized* fitness. ``evaluation`` may be an :class:`Evaluation` or ``[pop]``."""
        params = self.default_params() if params is None else params
        fitness = evaluation.fitness if isinstance(evaluation, Evaluation) else jnp.asarray(evaluation)
        if fitness.shape != (self.population_size,):
            raise ValueError(f"fitness must have shape ({self.population_size},), got {fitness.shape}")
        x = self.space.ravel_population(genotypes)
        if x.shape != (self.population_size, self.num_dims):
            raise ValueError(
                f"genotypes flatten to {x.shape}, expected ({self.population_size}, {self.num_dims})"
            )
        return self._tell(key, state, x, worst_for_nonfinite(fitness.astype(jnp.float32)), params)

    def mean_solution(self, state: Any) -> Any:
        """The distribution mean as a solution pytree (for strategies that have one)."""
        return self.space.unravel(state.mean)

    # -- hooks -------------------------------------------------------------------------------
    @abc.abstractmethod
    def _init(self, key, params): ...

    @abc.abstractmethod
    def _ask(self, key, state, params): ...

    @abc.abstractmethod
    def _tell(self, key, state, x, fitness, params): ...

    def initial_mean(self) -> jax.Array:
        """The template's values as the starting mean ``[num_dims]``."""
        return self.space.template

    def __repr__(self) -> str:
        return f"{type(self).__name__}(population_size={self.population_size}, num_dims={self.num_dims})"
