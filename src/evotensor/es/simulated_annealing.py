"""Simulated annealing (Kirkpatrick, Gelatt & Vecchi 1983; population variant as benchmarked by
Rere, Fanany & Arymurthy 2015 and the evosax ``SimulatedAnnealing`` baseline).

Each generation samples ``population_size`` Gaussian neighbours of the current point, takes the
best one and accepts it with the Metropolis rule: always if it is better, otherwise with
probability ``exp(-(f_new - f_current) / T)``. Temperature and step size cool geometrically,
``T <- max(T * temp_decay, temp_min)`` and ``std <- max(std * std_decay, std_min)``. The best
point ever seen is tracked separately (the current point may be worse). Invalid (NaN/inf)
candidates are never accepted.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from evotensor.core import rng
from evotensor.core.checks import check_fraction, check_real, check_spread
from evotensor.core.pytree import pytree_dataclass
from evotensor.es.core.base import InvalidAsInfStrategy, float32_params


@pytree_dataclass
class SimulatedAnnealingParams:
    """Dynamic hyperparameters (geometric cooling; Kirkpatrick et al. 1983).

    Attributes:
        temp_init: initial temperature T0 (default 1.0, in units of fitness).
        temp_decay: cooling factor per generation, in ``(0, 1]`` (default 0.99).
        temp_min: temperature floor (default 1e-10).
        std_init: initial neighbourhood step size (default 1.0).
        std_decay: step-size decay per generation, in ``(0, 1]`` (default 0.99).
        std_min: step-size floor (default 0.0).
    """

    temp_init: jax.Array
    temp_decay: jax.Array
    temp_min: jax.Array
    std_init: jax.Array
    std_decay: jax.Array
    std_min: jax.Array


@pytree_dataclass
class SimulatedAnnealingState:
    """Current point ``mean [dims]`` and its ``fitness []``; ``best_solution [dims]``,
    ``best_fitness []``; ``temperature []``, ``std []``, ``generation []``."""

    mean: jax.Array
    fitness: jax.Array
    best_solution: jax.Array
    best_fitness: jax.Array
    temperature: jax.Array
    std: jax.Array
    generation: jax.Array


def metropolis_accept(
    u: jax.Array, f_new: jax.Array, f_current: jax.Array, temperature: jax.Array
) -> jax.Array:
    """Metropolis acceptance with ``+inf`` = invalid: an invalid ``f_new`` is never accepted,
    a valid one always replaces an invalid current point. ``u``: a U(0, 1) draw."""
    better = f_new < f_current
    # exp(-delta / T) only matters when both are finite; guard inf - inf and T = 0.
    delta = jnp.where(jnp.isfinite(f_current) & jnp.isfinite(f_new), f_new - f_current, jnp.inf)
    uphill = u < jnp.exp(-delta / jnp.maximum(temperature, jnp.finfo(jnp.float32).tiny))
    return jnp.isfinite(f_new) & (better | uphill)


class SimulatedAnnealing(InvalidAsInfStrategy):
    """Population simulated annealing with Metropolis acceptance of the best neighbour.

    Args:
        population_size: neighbours sampled per generation (>= 1).
        solution: template pytree (starting point), exclusive with ``num_dims``.
        num_dims: flat dimension.
        temp_init, temp_decay, temp_min, std_init, std_decay, std_min: defaults (also in params).

    Example::

        sa = SimulatedAnnealing(16, num_dims=10)
        state = sa.init(jax.random.key(0))
        x, state = sa.ask(jax.random.key(1), state)            # x: [16, 10]
        state, metrics = sa.tell(jax.random.key(2), state, x, (x**2).sum(1))
    """

    name = "simulated_annealing"

    def __init__(
        self,
        population_size,
        solution=None,
        num_dims=None,
        *,
        temp_init=1.0,
        temp_decay=0.99,
        temp_min=1e-10,
        std_init=1.0,
        std_decay=0.99,
        std_min=0.0,
    ):
        super().__init__(population_size, solution, num_dims)
        self.temp_init = check_real(temp_init, "temp_init", 0.0)
        self.temp_decay = check_fraction(temp_decay, "temp_decay")
        self.temp_min = check_real(temp_min, "temp_min", 0.0)
        self.std_init = check_spread(std_init, "std_init")
        self.std_decay = check_fraction(std_decay, "std_decay")
        self.std_min = check_spread(std_min, "std_min", allow_zero=True)

    def default_params(self) -> SimulatedAnnealingParams:
        return float32_params(SimulatedAnnealingParams, self)

    def _init(self, key, params):
        return SimulatedAnnealingState(
            mean=self.initial_mean(),
            fitness=jnp.float32(jnp.inf),
            temperature=jnp.asarray(params.temp_init, jnp.float32),
            std=jnp.asarray(params.std_init, jnp.float32),
            **self._initial_best_fields(),
        )

    def _ask(self, key, state, params):
        z = rng.normal(key, (self.population_size, self.num_dims), jnp.float32)
        return state.mean + state.std * z, state

    def _tell(self, key, state, x, fitness, params):
        i = jnp.argmin(fitness)
        accept = metropolis_accept(
            rng.uniform(key, (), jnp.float32), fitness[i], state.fitness, state.temperature
        )
        mean = jnp.where(accept, x[i], state.mean)
        current = jnp.where(accept, fitness[i], state.fitness)
        best, metrics = self._next_best_fields(state, x, fitness)
        new = SimulatedAnnealingState(
            mean=mean,
            fitness=current,
            temperature=jnp.maximum(state.temperature * params.temp_decay, params.temp_min),
            std=jnp.maximum(state.std * params.std_decay, params.std_min),
            **best,
        )
        return new, {**metrics, "accepted": accept}
