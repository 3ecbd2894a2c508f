"""Noise-Reuse evolution strategies (Li, Harrison, Sohl-Dickstein, Smith, Metz, 2023),
"Noise-Reuse in Online Evolution Strategies", NeurIPS 2023.

Like :class:`~evotensor.es.persistent_es.PersistentES`, for objectives unrolled in partial unrolls
of ``K`` out of ``T`` inner steps, but each particle samples its perturbation ``eps_i`` once per
truncation window and *reuses* it for every partial unroll of the window; the estimate is the
antithetic ES estimate with that noise ::

    g = 1 / (2 N sigma^2) * sum_i eps_i * (L(mean + eps_i) - L(mean - eps_i))       N = pop / 2

which has lower variance than PES. ``state.inner_step`` tells the problem where in the unroll the
current generation is.
"""

from __future__ import annotations

import jax.numpy as jnp

from evotensor.core import rng
from evotensor.es.core.online_es import OnlineES, OnlineESState

__all__ = ["NoiseReuseES", "OnlineESState"]


class NoiseReuseES(OnlineES):
    """Noise-Reuse ES (Li et al., 2023).

    Args:
        population_size: even (antithetic pairs).
        solution / num_dims: template pytree (initial mean) or flat dimension.
        optimizer: optax transformation, default ``optax.adam(0.01)``.
        sigma_init: perturbation std, default 0.1; or sigma_schedule ``generation -> sigma``
            (read at the start of each window).
        fitness_shaping: default identity.
        T: total inner steps (default 100); K: steps per partial unroll (default 10). With
            ``T == K`` the noise is fresh every generation (plain antithetic ES).
    """

    name = "noise_reuse_es"

    def _sample(self, key, state, params, rows):
        sigma = self.sigma(state, params)
        fresh = sigma * rng.normal(key, (rows // 2, self.num_dims), jnp.float32)
        eps = jnp.where(state.inner_step == 0, fresh, state.perturbation)
        x = jnp.concatenate([state.mean + eps, state.mean - eps])
        return x, state.replace(perturbation=eps)
