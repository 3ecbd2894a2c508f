"""Persistent evolution strategies (Vicol, Metz, Sohl-Dickstein, 2021), "Unbiased gradient
estimation in unrolled computation graphs with persistent evolution strategies", ICML 2021.

For objectives that are unrolled computations of ``T`` inner steps, optimized online in partial
unrolls of ``K`` steps: each generation is one partial unroll. Every particle keeps the sum ``xi``
of all perturbations it received in the current truncation window, and the antithetic estimate ::

    g = 1 / (2 N sigma^2) * sum_i xi_i * (L(mean + eps_i) - L(mean - eps_i))      N = pop / 2

is unbiased for the full-unroll gradient (for a static objective it reduces to an unbiased,
higher-variance ES estimate). ``state.inner_step`` (0, K, 2K, …, T-K) tells the problem where in
the unroll the current generation is; the accumulated perturbations reset every ``T / K``
generations.
"""

from __future__ import annotations

import jax.numpy as jnp

from evotensor.core import rng
from evotensor.es._moved import moved_names
from evotensor.es.core.online_es import OnlineES, OnlineESState


class PersistentES(OnlineES):
    """Persistent ES (Vicol et al., 2021).

    Args:
        population_size: even (antithetic pairs).
        solution / num_dims: template pytree (initial mean) or flat dimension.
        optimizer: optax transformation, default ``optax.adam(0.01)``.
        sigma_init: perturbation std, default 0.1; or sigma_schedule ``generation -> sigma``.
        fitness_shaping: default identity (the estimator is unbiased for raw losses).
        T: total inner steps of the unrolled computation (default 100); K: steps per partial
            unroll (default 10); ``T % K == 0``.
    """

    name = "persistent_es"

    def _sample(self, key, state, params, rows):
        sigma = self.sigma(state, params)
        eps = sigma * rng.normal(key, (rows // 2, self.num_dims), jnp.float32)
        accum = jnp.where(state.inner_step == 0, 0.0, state.perturbation) + eps
        x = jnp.concatenate([state.mean + eps, state.mean - eps])
        return x, state.replace(perturbation=accum)


__all__ = ["OnlineESState", "PersistentES"]

# the shared base of PES and NRES moved to evotensor.es.core.online_es (paired_gradient, unused, is gone)
__getattr__ = moved_names(__name__, {"paired_sum": "evotensor.es.core.online_es"})
