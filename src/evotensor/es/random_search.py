"""Random search (Bergstra & Bengio 2012, "Random search for hyper-parameter optimization").

Every generation samples ``population_size`` points uniformly from the box
``[center - radius, center + radius]`` (``center`` = the solution template) and remembers the
best point seen so far. It is the baseline every other strategy must beat.

This module also holds the small machinery shared by evotensor's population-based and elitist
strategies (GA family, PSO, DE, GLD, hill climbing, simulated annealing, PBT, CEM, DES, iAMaLGaM):

* :class:`InvalidAsInfStrategy` – a :class:`~evotensor.es.base.VectorStrategy` whose ``_tell``
  receives the fitness with every NaN/inf entry replaced by ``+inf``. The base class maps
  non-finite values to "worse than this batch" *finite* numbers, which is right for ranking
  within a generation but wrong for comparisons *across* generations (a mapped NaN could beat an
  older, worse but valid archive member, and an all-NaN batch would become all zeros). With
  ``+inf`` an invalid candidate never wins a strict ``<`` comparison, so it never replaces a
  stored solution and NaN never enters state; ``+inf`` is also the "not evaluated yet" marker of
  every archive's initial fitness.
* :func:`update_best` – best-so-far bookkeeping under that convention.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from evotensor.core.evaluation import Evaluation
from evotensor.core.pytree import pytree_dataclass
from evotensor.es.base import VectorStrategy


class InvalidAsInfStrategy(VectorStrategy):
    """VectorStrategy whose ``_tell`` sees ``+inf`` (not a finite stand-in) for NaN/inf fitness.

    Subclasses implement ``_tell(key, state, x [pop, dims], fitness [pop], params)`` where
    ``fitness`` is minimized and ``+inf`` marks an invalid (NaN/inf) evaluation.
    """

    def tell(
        self,
        key: jax.Array,
        state: Any,
        genotypes: Any,
        evaluation: Evaluation | jax.Array,
        params: Any = None,
    ) -> tuple[Any, dict[str, jax.Array]]:
        """Update from *minimized* fitness ``[pop]`` (or an :class:`Evaluation`)."""
        params = self.default_params() if params is None else params
        fitness = evaluation.fitness if isinstance(evaluation, Evaluation) else jnp.asarray(evaluation)
        if fitness.shape != (self.population_size,):
            raise ValueError(f"fitness must have shape ({self.population_size},), got {fitness.shape}")
        x = self.space.ravel_population(genotypes)
        if x.shape != (self.population_size, self.num_dims):
            raise ValueError(
                f"genotypes flatten to {x.shape}, expected ({self.population_size}, {self.num_dims})"
            )
        fitness = fitness.astype(jnp.float32)
        fitness = jnp.where(jnp.isfinite(fitness), fitness, jnp.inf)
        return self._tell(key, state, x.astype(jnp.float32), fitness, params)

    def best_solution(self, state: Any) -> Any:
        """Best solution seen so far, as a solution pytree."""
        return self.space.unravel(state.best_solution)


def update_best(
    best_x: jax.Array, best_f: jax.Array, x: jax.Array, fitness: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Best-so-far update. ``best_x [dims]``, ``best_f []``, ``x [pop, dims]``, ``fitness [pop]``.

    ``fitness`` uses ``+inf`` for invalid entries, so they never replace the incumbent.
    """
    i = jnp.argmin(fitness)
    better = fitness[i] < best_f
    return jnp.where(better, x[i], best_x), jnp.where(better, fitness[i], best_f)


def check_positive(value: Any, name: str, allow_zero: bool = False) -> float:
    """Validate a positive (or non-negative) float hyperparameter at construction time."""
    value = float(value)
    if not (value >= 0.0 if allow_zero else value > 0.0) or value != value:
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value}")
    return value


def check_fraction(value: Any, name: str) -> float:
    """Validate a fraction in ``(0, 1]``."""
    value = float(value)
    if not 0.0 < value <= 1.0:
        raise ValueError(f"{name} must be in (0, 1], got {value}")
    return value


@pytree_dataclass
class RandomSearchParams:
    """Dynamic hyperparameters.

    Attributes:
        radius: half-width of the sampling box around the template, scalar or ``[dims]``
            (default 1.0).
    """

    radius: jax.Array


@pytree_dataclass
class RandomSearchState:
    """``best_solution [dims]``, ``best_fitness []`` (``+inf`` until a valid evaluation),
    ``generation []``."""

    best_solution: jax.Array
    best_fitness: jax.Array
    generation: jax.Array


class RandomSearch(InvalidAsInfStrategy):
    """Uniform random search in a box around the template.

    Args:
        population_size: samples per generation (>= 1).
        solution: template pytree (the box center), exclusive with ``num_dims`` (center 0).
        num_dims: flat dimension.
        radius: default half-width of the box (also in params).

    Example::

        rs = RandomSearch(64, num_dims=2, radius=5.0)
        state = rs.init(jax.random.key(0))
        x, state = rs.ask(jax.random.key(1), state)            # x: [64, 2] in [-5, 5]^2
        state, metrics = rs.tell(jax.random.key(2), state, x, (x**2).sum(1))
    """

    name = "random_search"

    def __init__(
        self, population_size: int, solution: Any = None, num_dims: int | None = None, *, radius=1.0
    ):
        super().__init__(population_size, solution, num_dims)
        self.radius = check_positive(radius, "radius")

    def default_params(self) -> RandomSearchParams:
        return RandomSearchParams(radius=jnp.float32(self.radius))

    def _init(self, key, params):
        return RandomSearchState(
            best_solution=self.initial_mean(),
            best_fitness=jnp.float32(jnp.inf),
            generation=jnp.zeros((), jnp.int32),
        )

    def _ask(self, key, state, params):
        u = jax.random.uniform(key, (self.population_size, self.num_dims), jnp.float32, -1.0, 1.0)
        return self.initial_mean() + params.radius * u, state

    def _tell(self, key, state, x, fitness, params):
        best_x, best_f = update_best(state.best_solution, state.best_fitness, x, fitness)
        new = RandomSearchState(best_solution=best_x, best_fitness=best_f, generation=state.generation + 1)
        return new, {"best_fitness": best_f, "generation_best_fitness": fitness.min()}
