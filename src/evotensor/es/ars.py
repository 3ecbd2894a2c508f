"""Augmented Random Search (Mania, Guy, Recht, 2018), "Simple random search provides a competitive
approach to reinforcement learning", NeurIPS 2018 (ARS V1-t; observation normalization (V2) is
the problem's business, not the optimizer's).

``N = pop / 2`` directions ``delta_i ~ N(0, I)`` are evaluated at ``mean +/- nu * delta_i``. Only
the ``b`` best directions (by ``min(f+, f-)``, since we minimize) are kept and ::

    g = 1 / (b * sigma_R) * sum_{top b} (f+_i - f-_i) * delta_i

where ``sigma_R`` is the standard deviation of the ``2b`` kept values; the optax optimizer descends
``g`` (plain SGD with step alpha is the paper's update).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from evotensor.es.base import check_even
from evotensor.es.gradient_es import FitnessShaping, GradientES, identity_shaping
from evotensor.es.open_es import antithetic_perturbations


def ars_gradient(x: jax.Array, weights: jax.Array, sigma: jax.Array, num_elite: int) -> jax.Array:
    """ARS update direction.

    Args:
        x: ``[pop, dims]``; rows ``i`` and ``i + pop/2`` are ``mean +/- sigma * delta_i``.
        weights: ``[pop]`` (raw fitness by default; lower = better).
        sigma: ``[]`` the exploration noise ``nu``.
        num_elite: ``b`` (static), ``1 <= b <= pop/2``.

    Returns:
        ``[dims]`` the estimate ``g`` of the module docstring (0 if the kept values are all equal).
    """
    h = x.shape[0] // 2
    w_plus, w_minus = weights[:h], weights[h:]
    score = jnp.minimum(w_plus, w_minus)
    _, elite = jax.lax.top_k(-score, num_elite)  # b best directions
    kept = jnp.concatenate([w_plus[elite], w_minus[elite]])
    sigma_r = jnp.std(kept)
    coeff = jnp.zeros(h, jnp.float32).at[elite].set(w_plus[elite] - w_minus[elite])
    delta_sum = (coeff @ x[:h] - coeff @ x[h:]) / (2.0 * sigma)  # sum_i coeff_i * delta_i
    ok = sigma_r > 0
    return jnp.where(ok, delta_sum / (num_elite * jnp.where(ok, sigma_r, 1.0)), 0.0)


class ARS(GradientES):
    """Augmented Random Search (Mania et al., 2018).

    Args:
        population_size: even; ``pop / 2`` directions.
        solution / num_dims: template pytree (initial mean) or flat dimension.
        optimizer: default ``optax.sgd(0.02)`` — step size alpha = 0.02 and
        sigma_init: nu = 0.03, the paper's HalfCheetah setting (Mania et al., Table 9).
        sigma_schedule: optax-style ``generation -> nu`` (exclusive with ``sigma_init``).
        elite_ratio: ``b / N`` (static), default 0.125 (HalfCheetah: N=32, b=4); ``b >= 1``.
        fitness_shaping: default identity (ARS normalizes by ``sigma_R`` itself).
    """

    name = "ars"
    default_sigma_init = 0.03
    default_learning_rate = 0.02

    def __init__(
        self,
        population_size: int,
        solution: Any = None,
        num_dims: int | None = None,
        *,
        optimizer: optax.GradientTransformation | None = None,
        sigma_init: float | None = None,
        sigma_schedule: Callable[[jax.Array], jax.Array] | None = None,
        elite_ratio: float = 0.125,
        fitness_shaping: FitnessShaping = identity_shaping,
    ):
        if optimizer is None:
            optimizer = optax.sgd(learning_rate=self.default_learning_rate)
        super().__init__(
            population_size,
            solution,
            num_dims,
            optimizer=optimizer,
            sigma_init=sigma_init,
            sigma_schedule=sigma_schedule,
            fitness_shaping=fitness_shaping,
        )
        check_even(population_size, "ARS's antithetic directions")
        if not 0.0 < elite_ratio <= 1.0:
            raise ValueError(f"elite_ratio must be in (0, 1], got {elite_ratio!r}")
        self.elite_ratio = float(elite_ratio)
        self.num_elite = max(1, min(population_size // 2, round(elite_ratio * (population_size // 2))))

    def _ask(self, key, state, params):
        z = antithetic_perturbations(key, self.population_size, self.num_dims)
        return state.mean + self.sigma(state, params) * z, state

    def _tell(self, key, state, x, fitness, params):
        sigma = self.sigma(state, params)
        grad = ars_gradient(x, self._weights(fitness), sigma, self.num_elite)
        return self._apply_gradient(state, grad, x, fitness, sigma)
