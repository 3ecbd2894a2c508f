"""Stochastic hill climbing: a (1+λ) search with isotropic Gaussian steps.

Each generation samples ``x_i = incumbent + std * z_i`` and moves the incumbent to the best
sample if it is strictly better (elitist, so the incumbent fitness never increases). The step
size follows the geometric schedule ``std <- max(std * std_decay, std_min)``; with the default
``std_decay = 1`` it is the classic fixed-step stochastic hill climber (e.g. Russell & Norvig,
"Artificial Intelligence: A Modern Approach", sec. 4.1; the evosax ``HillClimbing`` baseline).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from evotensor.core import rng
from evotensor.core.checks import check_fraction, check_spread
from evotensor.core.pytree import pytree_dataclass
from evotensor.es.core.base import InvalidAsInfStrategy, float32_params


@pytree_dataclass
class HillClimbingParams:
    """Dynamic hyperparameters.

    Attributes:
        std_init: initial step size (default 1.0).
        std_decay: per-generation multiplicative decay of the step size, in ``(0, 1]`` (default 1.0 =
            fixed; a factor above 1 is refused: it is not a decay).
        std_min: lower bound of the step size (default 0.0).
    """

    std_init: jax.Array
    std_decay: jax.Array
    std_min: jax.Array


@pytree_dataclass
class HillClimbingState:
    """``best_solution [dims]`` (the incumbent), ``best_fitness []``, ``std []``, ``generation []``."""

    best_solution: jax.Array
    best_fitness: jax.Array
    std: jax.Array
    generation: jax.Array


class HillClimbing(InvalidAsInfStrategy):
    """(1+λ) stochastic hill climbing around the best point found so far.

    Args:
        population_size: neighbours sampled per generation (λ >= 1).
        solution: template pytree (starting point), exclusive with ``num_dims`` (start at 0).
        num_dims: flat dimension.
        std_init, std_decay, std_min: defaults of the step-size schedule (also in params).

    Example::

        hc = HillClimbing(16, num_dims=10, std_decay=0.99)
        state = hc.init(jax.random.key(0))
        x, state = hc.ask(jax.random.key(1), state)            # x: [16, 10]
        state, metrics = hc.tell(jax.random.key(2), state, x, (x**2).sum(1))
    """

    name = "hill_climbing"
    mean_field = "best_solution"  # the incumbent, center of the next generation's samples

    def __init__(
        self, population_size, solution=None, num_dims=None, *, std_init=1.0, std_decay=1.0, std_min=0.0
    ):
        super().__init__(population_size, solution, num_dims)
        self.std_init = check_spread(std_init, "std_init")
        self.std_decay = check_fraction(std_decay, "std_decay")
        self.std_min = check_spread(std_min, "std_min", allow_zero=True)

    def default_params(self) -> HillClimbingParams:
        return float32_params(HillClimbingParams, self)

    def _init(self, key, params):
        return HillClimbingState(**self._initial_best_fields(), std=jnp.asarray(params.std_init, jnp.float32))

    def _ask(self, key, state, params):
        z = rng.normal(key, (self.population_size, self.num_dims), jnp.float32)
        return state.best_solution + state.std * z, state

    def _tell(self, key, state, x, fitness, params):
        best, metrics = self._next_best_fields(state, x, fitness)
        std = jnp.maximum(state.std * params.std_decay, params.std_min)
        return HillClimbingState(**best, std=std), {**metrics, "std": std}
