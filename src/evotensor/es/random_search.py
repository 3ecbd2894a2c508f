"""Random search (Bergstra & Bengio 2012, "Random search for hyper-parameter optimization").

Every generation samples ``population_size`` points uniformly from the box
``[center - radius, center + radius]`` (``center`` = the solution template) and remembers the
best point seen so far. It is the baseline every other strategy must beat.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from evotensor.core import rng
from evotensor.core.pytree import pytree_dataclass
from evotensor.es.base import InvalidAsInfStrategy, check_positive, update_best


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
        u = rng.uniform(key, (self.population_size, self.num_dims), jnp.float32, -1.0, 1.0)
        return self.initial_mean() + params.radius * u, state

    def _tell(self, key, state, x, fitness, params):
        best_x, best_f = update_best(state.best_solution, state.best_fitness, x, fitness)
        new = RandomSearchState(best_solution=best_x, best_fitness=best_f, generation=state.generation + 1)
        return new, {"best_fitness": best_f, "generation_best_fitness": fitness.min()}
