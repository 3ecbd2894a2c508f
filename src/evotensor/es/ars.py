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

import jax
import jax.numpy as jnp
import optax

from evotensor.core.checks import check_fraction
from evotensor.es.core.gradient_es import GradientES, identity_shaping, pair_sum, tell_by_statistics
from evotensor.es.core.sampling import antithetic_perturbations


def ars_coefficients(weights: jax.Array, num_elite: int) -> tuple[jax.Array, jax.Array]:
    """Per-member coefficients and ``sigma_R`` of ARS, from the whole population's weights.

    Args:
        weights: ``[pop]``, rows ``i`` and ``i + pop/2`` a mirrored pair (lower = better).
        num_elite: ``b`` (static), ``1 <= b <= pop/2``.

    Returns:
        ``(v [pop], sigma_r [])``: ``v_i = f+_i - f-_i`` for the ``b`` best directions (by
        ``min(f+, f-)``) and 0 elsewhere, including every mirrored row, so that
        ``sum_i (v_i - v_{i+h}) (x_i - x_{i+h}) = 2 nu sum_{top b} (f+_i - f-_i) delta_i``
        (:func:`~evotensor.es.core.gradient_es.pair_sum`); ``sigma_R`` is the std of the ``2b`` kept values.
    """
    h = weights.shape[0] // 2
    w_plus, w_minus = weights[:h], weights[h:]
    score = jnp.minimum(w_plus, w_minus)
    _, elite = jax.lax.top_k(-score, num_elite)  # b best directions
    kept = jnp.concatenate([w_plus[elite], w_minus[elite]])
    coeff = jnp.zeros(h, jnp.float32).at[elite].set(w_plus[elite] - w_minus[elite])
    return jnp.concatenate([coeff, jnp.zeros(h, jnp.float32)]), jnp.std(kept)


def ars_step(pair_total: jax.Array, sigma: jax.Array, sigma_r: jax.Array, num_elite: int) -> jax.Array:
    """``g`` of the module docstring from ``pair_sum(v, x) [dims]``: 0 if the kept values are all equal."""
    delta_sum = pair_total / (2.0 * sigma)  # sum_i coeff_i * delta_i
    ok = sigma_r > 0
    return jnp.where(ok, delta_sum / (num_elite * jnp.where(ok, sigma_r, 1.0)), 0.0)


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
    v, sigma_r = ars_coefficients(weights, num_elite)
    return ars_step(pair_sum(v, x), sigma, sigma_r, num_elite)


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
    default_fitness_shaping = staticmethod(identity_shaping)
    mirrored_sampling = "ARS's antithetic directions"

    def __init__(
        self, population_size, solution=None, num_dims=None, *, elite_ratio: float = 0.125, **options
    ):
        super().__init__(population_size, solution, num_dims, **options)
        self.elite_ratio = check_fraction(elite_ratio, "elite_ratio")
        self.num_elite = max(1, min(population_size // 2, round(elite_ratio * (population_size // 2))))

    def default_optimizer(self) -> optax.GradientTransformation:
        """``optax.sgd(0.02)``: plain steps of size alpha, the paper's update."""
        return optax.sgd(learning_rate=self.default_learning_rate)

    # -- population-sharding hooks (see evotensor.es.core.sharding) ------------------------------------
    shard_pairs = True
    shard_state_fields: tuple[str, ...] = ()

    def _sample(self, key, state, params, rows):
        z = antithetic_perturbations(key, rows, self.num_dims)
        return state.mean + self.sigma(state, params) * z, state

    def _member_weights(self, state, fitness, params):
        # the elite and sigma_R need every weight: computed before the split
        return ars_coefficients(self._weights(fitness), self.num_elite)

    def _row_statistics(self, state, params, x, weights, sigma_r):
        return pair_sum(weights, x)

    def _update_from_statistics(self, key, state, params, stats, sigma_r, fitness, best_row):
        sigma = self.sigma(state, params)
        grad = ars_step(stats, sigma, sigma_r, self.num_elite)
        return self._apply_gradient_row(state, grad, best_row, fitness, sigma)

    def _ask(self, key, state, params):
        return self._sample(key, state, params, self.population_size)

    def _tell(self, key, state, x, fitness, params):
        return tell_by_statistics(self, key, state, x, fitness, params)
