"""ESMC: evolution strategy with meta-loss clipping (Merchant, Metz, Schoenholz, Cubuk, 2021),
"Learn2Hop: Learned Optimization on Rough Landscapes", ICML 2021, arXiv:2107.09661.

Row 0 of the population is the mean itself (the baseline ``f0``); the remaining ``2N`` rows are
antithetic pairs ``mean +/- sigma * eps_i``. Each side is clipped at the baseline before
differencing, so a perturbation can only be credited for improving on the mean ::

    delta_i = min(f(mean + sigma eps_i), f0) - min(f(mean - sigma eps_i), f0)
    g = 1 / (N sigma) * sum_i delta_i * eps_i

For a linear ``f`` exactly one side of each pair is clipped and ``delta_i = sigma * a.eps_i``, so
``E[g] = a`` (tested). The optax optimizer descends ``g``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from evotensor.core.numerics import exact_vecmat, rounded
from evotensor.es.gradient_es import FitnessShaping, GradientES, identity_shaping


def esmc_gradient(x: jax.Array, weights: jax.Array, sigma: jax.Array) -> jax.Array:
    """ESMC estimate. ``x [1 + 2N, dims]`` (row 0 = mean, then ``+eps`` rows, then ``-eps`` rows),
    ``weights [1 + 2N]`` (lower = better), ``sigma []`` -> ``[dims]``."""
    n = (x.shape[0] - 1) // 2
    base = weights[0]
    w_plus, w_minus = weights[1 : n + 1], weights[n + 1 :]
    delta = jnp.minimum(w_plus, base) - jnp.minimum(w_minus, base)
    # eps_i = (x+_i - x-_i) / (2 sigma). exact_vecmat and an explicit reciprocal keep vmapped runs
    # bit-identical to separate ones (see evotensor.core.numerics)
    return exact_vecmat(delta, x[1 : n + 1] - x[n + 1 :]) * (1.0 / (2.0 * n * rounded(sigma**2)))


class ESMC(GradientES):
    """ES with meta-loss clipping (Merchant et al., 2021).

    Args:
        population_size: odd, >= 3 (one baseline + antithetic pairs).
        solution / num_dims: template pytree (initial mean) or flat dimension.
        optimizer: default ``optax.adam(0.01)``.
        sigma_init: default 0.1; or sigma_schedule ``generation -> sigma``.
        fitness_shaping: default identity (clipping at the baseline needs comparable values;
            any monotone shaping computed jointly with the baseline row also works).
    """

    name = "esmc"
    default_sigma_init = 0.1
    min_population_size = 3

    def __init__(
        self,
        population_size: int,
        solution: Any = None,
        num_dims: int | None = None,
        *,
        optimizer: optax.GradientTransformation | None = None,
        sigma_init: float | None = None,
        sigma_schedule: Callable[[jax.Array], jax.Array] | None = None,
        fitness_shaping: FitnessShaping = identity_shaping,
    ):
        super().__init__(
            population_size,
            solution,
            num_dims,
            optimizer=optimizer,
            sigma_init=sigma_init,
            sigma_schedule=sigma_schedule,
            fitness_shaping=fitness_shaping,
        )
        if population_size % 2 == 0:
            raise ValueError(
                f"ESMC needs an odd population_size (the mean + antithetic pairs), got {population_size}"
            )

    def _ask(self, key, state, params):
        sigma = self.sigma(state, params)
        z = jax.random.normal(key, ((self.population_size - 1) // 2, self.num_dims), jnp.float32)
        x = jnp.concatenate([state.mean[None], state.mean + sigma * z, state.mean - sigma * z])
        return x, state

    def _tell(self, key, state, x, fitness, params):
        sigma = self.sigma(state, params)
        grad = esmc_gradient(x, self._weights(fitness), sigma)
        return self._apply_gradient(state, grad, x, fitness, sigma)
