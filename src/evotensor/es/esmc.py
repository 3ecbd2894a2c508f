"""ESMC: evolution strategy with meta-loss clipping (Merchant, Metz, Schoenholz, Cubuk, 2021),
"Learn2Hop: Learned Optimization on Rough Landscapes", ICML 2021, arXiv:2107.09661.

Row 0 of the population is the mean itself (the baseline ``f0``); the remaining ``2N`` rows are
antithetic pairs ``mean +/- sigma * eps_i``. Each side is clipped at the baseline before
differencing, so a perturbation can only be credited for improving on the mean ::

    delta_i = min(f(mean + sigma eps_i), f0) - min(f(mean - sigma eps_i), f0)
    g = 1 / (N sigma) * sum_i delta_i * eps_i

For a linear ``f`` exactly one side of each pair is clipped and ``delta_i = sigma * a.eps_i``, so
``E[g] = a`` (tested). The optax optimizer descends ``g``.

Population sharding (:mod:`evotensor.es.core.sharding`): the weights are clipped at the baseline before
the population is split, so a shard needs only its own pairs; every shard holds a copy of the mean
as its row 0 (``[mean; +pairs; -pairs]``, the unsharded layout in miniature), so with ``n`` shards
the sharded population has ``pop + n - 1`` rows and shard 0's copy is the baseline.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core import rng
from evotensor.core.checks import ArgumentError
from evotensor.core.numerics import exact_vecmat, rounded
from evotensor.es.core.gradient_es import GradientES, identity_shaping, tell_by_statistics


def clip_at_baseline(weights: jax.Array) -> jax.Array:
    """``min(w_i, w_0)``: every weight clipped at the baseline row's ``w_0``. ``[1 + 2N] -> [1 + 2N]``."""
    return jnp.minimum(weights, weights[0])


def esmc_sum(x: jax.Array, clipped: jax.Array) -> jax.Array:
    """``sum_i (c+_i - c-_i) (x+_i - x-_i)`` over the pairs of ``x [1 + 2m, dims]`` (row 0 = the mean,
    then ``m`` ``+eps`` rows, then their ``-eps`` mirrors), ``clipped [1 + 2m]`` from
    :func:`clip_at_baseline`. ``[dims]``; a sum over pairs, so shards' sums add up."""
    m = (x.shape[0] - 1) // 2
    # exact_vecmat keeps vmapped runs bit-identical to separate ones (see evotensor.core.numerics)
    return exact_vecmat(clipped[1 : m + 1] - clipped[m + 1 :], x[1 : m + 1] - x[m + 1 :])


def esmc_scale(num_pairs: int, sigma: jax.Array) -> jax.Array:
    """Factor turning :func:`esmc_sum` into the gradient: ``1 / (2 N sigma^2)`` (an explicit reciprocal,
    for bit-identical vmapped runs)."""
    return 1.0 / (2.0 * num_pairs * rounded(sigma**2))


def esmc_gradient(x: jax.Array, weights: jax.Array, sigma: jax.Array) -> jax.Array:
    """ESMC estimate. ``x [1 + 2N, dims]`` (row 0 = mean, then ``+eps`` rows, then ``-eps`` rows),
    ``weights [1 + 2N]`` (lower = better), ``sigma []`` -> ``[dims]``.

    ``eps_i = (x+_i - x-_i) / (2 sigma)``, so ``g = sum_i delta_i (x+_i - x-_i) / (2 N sigma^2)``."""
    return esmc_sum(x, clip_at_baseline(weights)) * esmc_scale((x.shape[0] - 1) // 2, sigma)


class ESMC(GradientES):
    """ES with meta-loss clipping (Merchant et al., 2021).

    Args:
        population_size: odd, >= 3 (one baseline + antithetic pairs).
        solution / num_dims: template pytree (initial mean) or flat dimension.
        optimizer: default ``optax.adam(0.01)``.
        sigma_init: default 0.1; or sigma_schedule ``generation -> sigma``.
        fitness_shaping: default identity (clipping at the baseline needs comparable values;
            any monotone shaping computed jointly with the baseline row also works).

    Shardable (:func:`evotensor.es.core.sharding.sharded`) when ``population_size - 1`` is divisible by
    twice the number of shards; the sharded population repeats the mean once per shard (module
    docstring).
    """

    name = "esmc"
    default_sigma_init = 0.1
    default_fitness_shaping = staticmethod(identity_shaping)
    min_population_size = 3

    def __init__(self, population_size, solution=None, num_dims=None, **options):
        super().__init__(population_size, solution, num_dims, **options)
        if population_size % 2 == 0:
            raise ArgumentError(
                f"ESMC needs an odd population_size (the mean + antithetic pairs), got {population_size}"
            )

    # -- population-sharding hooks (see evotensor.es.core.sharding) ------------------------------------
    shard_pairs = False  # its own layout: _shard_layout
    shard_state_fields: tuple[str, ...] = ()

    def _shard_layout(self, num_shards: int) -> np.ndarray:
        """``source [pop + n - 1]``: shard ``s`` holds the mean (row 0), then its ``m`` "+" rows and
        their ``m`` mirrors, ``m = (pop - 1) / (2 n)``."""
        pairs = (self.population_size - 1) // 2
        if pairs % num_shards:
            raise ValueError(
                f"population_size {self.population_size} of ESMC must be 1 + a multiple of 2 * "
                f"{num_shards} (the mean + mirrored pairs, pairs split evenly over {num_shards} shards)"
            )
        m = pairs // num_shards
        plus = 1 + np.arange(pairs).reshape(num_shards, m)
        return np.concatenate([np.zeros((num_shards, 1), np.int64), plus, plus + pairs], axis=1).ravel()

    def _sample(self, key, state, params, rows):
        sigma = self.sigma(state, params)
        z = rng.normal(key, ((rows - 1) // 2, self.num_dims), jnp.float32)
        return jnp.concatenate([state.mean[None], state.mean + sigma * z, state.mean - sigma * z]), state

    def _member_weights(self, state, fitness, params):
        return clip_at_baseline(self._weights(fitness)), None

    def _row_statistics(self, state, params, x, weights, aux):
        return esmc_sum(x, weights)

    def _update_from_statistics(self, key, state, params, stats, aux, fitness, best_row):
        sigma = self.sigma(state, params)
        grad = stats * esmc_scale((self.population_size - 1) // 2, sigma)
        return self._apply_gradient_row(state, grad, best_row, fitness, sigma)

    def _ask(self, key, state, params):
        return self._sample(key, state, params, self.population_size)

    def _tell(self, key, state, x, fitness, params):
        return tell_by_statistics(self, key, state, x, fitness, params)
