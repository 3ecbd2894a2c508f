"""Simple Gaussian evolution strategy (Rechenberg 1973; the evosax ``SimpleES`` family).

Each generation samples ``x_i = mean + sigma * z_i`` with a diagonal ``sigma``, keeps the best
``mu = ceil(elite_ratio * pop)`` candidates, moves the mean towards their log-weighted average and
re-estimates each coordinate's ``sigma`` from the elite's spread around the *old* mean, with
exponential smoothing. ``sigma`` is clipped to ``[sigma_min, sigma_max]`` so long runs stay finite.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from evotensor.core import rng
from evotensor.core.checks import ArgumentError, check_fraction, check_spread
from evotensor.core.numerics import exact_vecmat
from evotensor.core.pytree import pytree_dataclass
from evotensor.es.core.base import VectorStrategy, check_finite_template
from evotensor.es.core.sharding import ShardableStrategy


@pytree_dataclass
class SimpleESParams:
    """Dynamic hyperparameters (vmap-able).

    Attributes:
        sigma_init: initial step size (scalar).
        c_mean: learning rate of the mean (1.0 = jump to the elite average).
        c_sigma: smoothing rate of sigma (0.1 as in evosax).
        sigma_min, sigma_max: clipping bounds that keep sigma finite and positive.
    """

    sigma_init: jax.Array
    c_mean: jax.Array
    c_sigma: jax.Array
    sigma_min: jax.Array
    sigma_max: jax.Array


@pytree_dataclass
class SimpleESState:
    """``mean [dims]``, ``sigma [dims]``, ``generation []``."""

    mean: jax.Array
    sigma: jax.Array
    generation: jax.Array


class SimpleES(ShardableStrategy, VectorStrategy):
    """Gaussian ES with elite selection and diagonal step sizes.

    Args:
        population_size: candidates per generation (>= 2).
        solution: template pytree (exclusive with ``num_dims``); its values are the initial mean.
        num_dims: flat dimension (initial mean 0).
        elite_ratio: fraction of the population used for the update, in (0, 1].
        sigma_init: default initial step size (also settable through params).
        mean_init: optional flat initial mean ``[num_dims]`` overriding the template's values.

    Example::

        es = SimpleES(population_size=32, num_dims=10)
        state = es.init(jax.random.key(0))
        x, state = es.ask(jax.random.key(1), state)            # x: [32, 10]
        state, metrics = es.tell(jax.random.key(2), state, x, (x**2).sum(1))
    """

    name = "simple_es"
    min_population_size = 2

    def __init__(
        self,
        population_size,
        solution=None,
        num_dims=None,
        *,
        elite_ratio=0.5,
        sigma_init=1.0,
        mean_init=None,
    ):
        super().__init__(population_size, solution, num_dims)
        self.elite_ratio = check_fraction(elite_ratio, "elite_ratio")
        self.num_elites = max(1, math.ceil(self.elite_ratio * self.population_size))
        self.sigma_init = check_spread(sigma_init, "sigma_init")
        self._mean_init = self._check_mean_init(mean_init)
        weights = jnp.log(self.num_elites + 0.5) - jnp.log(jnp.arange(1, self.num_elites + 1))
        self.weights = weights / weights.sum()

    def _check_mean_init(self, mean_init: Any) -> jax.Array:
        if mean_init is None:
            return self.initial_mean()
        check_finite_template(mean_init, "mean_init")  # before the float32 cast turns 1e39 into inf
        mean_init = jnp.asarray(mean_init, jnp.float32).reshape(-1)
        if mean_init.shape != (self.num_dims,):
            raise ArgumentError(f"mean_init must have {self.num_dims} elements, got {mean_init.shape[0]}")
        return mean_init

    def default_params(self) -> SimpleESParams:
        return SimpleESParams(
            sigma_init=jnp.float32(self.sigma_init),
            c_mean=jnp.float32(1.0),
            c_sigma=jnp.float32(0.1),
            sigma_min=jnp.float32(1e-20),
            sigma_max=jnp.float32(1e10),
        )

    def _init(self, key, params):
        return SimpleESState(
            mean=self._mean_init,
            sigma=jnp.full((self.num_dims,), params.sigma_init, jnp.float32),
            generation=jnp.zeros((), jnp.int32),
        )

    # -- population-sharding hooks (see evotensor.es.core.sharding) ------------------------------------
    shard_pairs = False
    shard_state_fields: tuple[str, ...] = ()

    def _sample(self, key, state, params, rows):
        z = rng.normal(key, (rows, self.num_dims), jnp.float32)
        return state.mean + state.sigma * z, state

    def _member_weights(self, state, fitness, params):
        # each member's recombination weight (0 outside the elite): the ranking needs every fitness
        elite = jnp.argsort(fitness, stable=True)[: self.num_elites]
        return jnp.zeros(self.population_size, jnp.float32).at[elite].set(self.weights), None

    def _row_statistics(self, state, params, x, weights, aux):
        step = x - state.mean
        return exact_vecmat(weights, step), exact_vecmat(weights, step**2)

    def _update_from_statistics(self, key, state, params, stats, aux, fitness, best_row):
        mean_step, spread = stats
        mean = state.mean + params.c_mean * mean_step
        variance = (1.0 - params.c_sigma) * state.sigma**2 + params.c_sigma * spread
        sigma = jnp.clip(jnp.sqrt(variance), params.sigma_min, params.sigma_max)
        new = SimpleESState(mean=mean, sigma=sigma, generation=state.generation + 1)
        return new, {"sigma_mean": sigma.mean()}

    def _ask(self, key, state, params):
        return self._sample(key, state, params, self.population_size)

    def _tell(self, key, state, x, fitness, params):
        # unsharded: sum over the sorted elite only (same statistics as the per-member weights)
        elite = x[jnp.argsort(fitness, stable=True)[: self.num_elites]]
        stats = self._row_statistics(state, params, elite, self.weights, None)
        return self._update_from_statistics(key, state, params, stats, None, fitness, None)
