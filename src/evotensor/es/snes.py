"""Separable natural evolution strategies (Schaul, Glasmachers, Schmidhuber, 2011, "High
dimensions and heavy tails for natural evolution strategies", GECCO; Wierstra et al., 2014,
Algorithm 6).

Search distribution ``N(mean, diag(sigma^2))``. With ``x_i = mean + sigma * z_i`` and utilities
``u_i`` (higher = better)::

    mean  <- mean + eta_mean * sigma * sum_i u_i z_i
    sigma <- sigma * exp(eta_sigma / 2 * sum_i u_i (z_i^2 - 1))

Defaults (Wierstra et al., 2014, Table 1): ``lambda = 4 + floor(3 ln d)``, ``eta_mean = 1``,
``eta_sigma = (3 + ln d) / (5 sqrt d)``, NES rank utilities
(:func:`evotensor.core.fitness_shaping.nes_utilities`).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from evotensor.core import rng
from evotensor.core.numerics import exact_vecmat, rounded
from evotensor.core.pytree import pytree_dataclass
from evotensor.es.core.gradient_es import tell_by_statistics, track_best_row
from evotensor.es.core.nes import NaturalES
from evotensor.es.core.sharding import ShardableStrategy


@pytree_dataclass
class SNESState:
    """Attributes: ``mean [dims]``, ``sigma [dims]``, ``generation []``, ``best_solution [dims]``,
    ``best_fitness []``."""

    mean: jax.Array
    sigma: jax.Array
    generation: jax.Array
    best_solution: jax.Array
    best_fitness: jax.Array


@pytree_dataclass
class SNESParams:
    """Dynamic hyperparameters (vmappable): ``sigma_init`` (1.0), ``eta_mean`` (1.0), ``eta_sigma``
    (``(3 + ln d) / (5 sqrt d)``), ``sigma_min`` (1e-30, keeps float32 sigma above 0)."""

    sigma_init: jax.Array
    eta_mean: jax.Array
    eta_sigma: jax.Array
    sigma_min: jax.Array


def snes_natural_gradients(z: jax.Array, utilities: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(grad_mean [dims], grad_sigma [dims])`` = ``(sum u z, sum u (z^2 - 1))`` for ``z [pop, dims]``."""
    return exact_vecmat(utilities, z), exact_vecmat(utilities, z**2 - 1.0)


class SNES(ShardableStrategy, NaturalES):
    """SNES (Schaul et al., 2011).

    Args:
        population_size: default ``4 + floor(3 ln d)``.
        solution / num_dims: template pytree (initial mean) or flat dimension.
        sigma_init: initial std of every coordinate (default 1.0).
        fitness_shaping: ``[pop] -> weights [pop]`` (lower = better); default NES utilities.

    Closed-form natural-gradient updates: learning rates live in ``params``; no optax optimizer.
    """

    name = "snes"

    def default_params(self) -> SNESParams:
        d = self.num_dims
        f = lambda v: jnp.asarray(v, jnp.float32)
        return SNESParams(
            sigma_init=f(self._sigma_init),
            eta_mean=f(1.0),
            eta_sigma=f((3.0 + math.log(d)) / (5.0 * math.sqrt(d))),
            sigma_min=f(1e-30),
        )

    def _init(self, key, params):
        return SNESState(
            **self._initial_mean_fields(), sigma=jnp.full((self.num_dims,), params.sigma_init, jnp.float32)
        )

    # -- population-sharding hooks (see evotensor.es.core.sharding) ------------------------------------
    shard_pairs = False
    shard_state_fields: tuple[str, ...] = ()

    def _sample(self, key, state, params, rows):
        z = rng.normal(key, (rows, self.num_dims), jnp.float32)
        return state.mean + rounded(state.sigma * z), state

    def _member_weights(self, state, fitness, params):
        return self._utilities(fitness), None

    def _row_statistics(self, state, params, x, u, aux):
        # explicit reciprocal and rounded products keep vmapped runs bit-identical to separate
        # ones under any XLA fusion decision (see evotensor.core.numerics)
        z = (x - state.mean) * (1.0 / state.sigma)
        return snes_natural_gradients(z, u)

    def _update_from_statistics(self, key, state, params, stats, aux, fitness, best_row):
        g_mean, g_sigma = stats
        mean = state.mean + rounded(params.eta_mean * state.sigma * g_mean)
        log_step = rounded(params.eta_sigma / 2.0 * g_sigma)
        sigma = jnp.maximum(state.sigma * jnp.exp(log_step), params.sigma_min)
        ok = jnp.all(jnp.isfinite(mean)) & jnp.all(jnp.isfinite(sigma))
        new, metrics = track_best_row(state, best_row, fitness)
        new = new.replace(
            mean=jnp.where(ok, mean, state.mean),
            sigma=jnp.where(ok, sigma, state.sigma),
            generation=state.generation + 1,
        )
        metrics.update(sigma=jnp.mean(new.sigma))
        return new, metrics

    def _ask(self, key, state, params):
        return self._sample(key, state, params, self.population_size)

    def _tell(self, key, state, x, fitness, params):
        return tell_by_statistics(self, key, state, x, fitness, params)
