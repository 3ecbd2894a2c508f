"""Random search (Bergstra & Bengio 2012, "Random search for hyper-parameter optimization").

Every generation samples ``population_size`` points uniformly from the box
``[center - radius, center + radius]`` (``center`` = the solution template) and remembers the
best point seen so far. It is the baseline every other strategy must beat.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from evotensor.core import rng
from evotensor.core.checks import check_spread
from evotensor.core.pytree import pytree_dataclass
from evotensor.es.core.base import InvalidAsInfStrategy, float32_params


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
    mean_field = "best_solution"  # the box stays put: the best point seen is the answer

    def __init__(self, population_size, solution=None, num_dims=None, *, radius=1.0):
        super().__init__(population_size, solution, num_dims)
        self.radius = check_spread(radius, "radius")

    def default_params(self) -> RandomSearchParams:
        return float32_params(RandomSearchParams, self)

    def _init(self, key, params):
        return RandomSearchState(**self._initial_best_fields())

    def _ask(self, key, state, params):
        u = rng.uniform(key, (self.population_size, self.num_dims), jnp.float32, -1.0, 1.0)
        return self.initial_mean() + params.radius * u, state

    def _tell(self, key, state, x, fitness, params):
        best, metrics = self._next_best_fields(state, x, fitness)
        return RandomSearchState(**best), metrics
