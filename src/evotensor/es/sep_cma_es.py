"""Sep-CMA-ES: CMA-ES with a diagonal covariance matrix (Ros & Hansen, PPSN 2008).

"A Simple Modification in CMA-ES Achieving Linear Time and Space Complexity": the covariance
matrix is restricted to its diagonal ``c`` (so sampling, update and memory are O(n) per
candidate), and because only ``n`` instead of ``n(n+1)/2`` numbers are learned, the covariance
learning rate is multiplied by ``(n+2)/3``. With ``mu_cov = mu_eff``::

    c_cov     = 1/mu_cov * 2/(n+sqrt 2)^2 + (1 - 1/mu_cov) * min(1, (2 mu_eff - 1)/((n+2)^2 + mu_eff))
    c_cov_sep = (n+2)/3 * c_cov,  c_1 = c_cov_sep/mu_cov,  c_mu = c_cov_sep (1 - 1/mu_cov)
    c_c = 4/(n+4),  c_sigma = (mu_eff+2)/(n+mu_eff+3),
    d_sigma = 1 + 2 max(0, sqrt((mu_eff-1)/(n+1)) - 1) + c_sigma

Update per generation (``y_i = (x_i:lambda - m)/sigma``, positive log weights on the best half)::

    m   <- sum w_i x_i:lambda
    p_s <- (1-c_sigma) p_s + sqrt(c_sigma(2-c_sigma) mu_eff) * <y>_w / sqrt(c)
    h   <- |p_s| / sqrt(1-(1-c_sigma)^(2g)) < (1.4 + 2/(n+1)) chi_n
    p_c <- (1-c_c) p_c + h sqrt(c_c(2-c_c) mu_eff) <y>_w
    c   <- (1 - c_1 - c_mu) c + c_1 (p_c^2 + (1-h) c_c (2-c_c) c) + c_mu sum w_i y_i^2
    sigma <- sigma exp(c_sigma/d_sigma (|p_s|/chi_n - 1))

``sigma`` is clipped to ``[sigma_min, sigma_max]`` and ``c`` to a condition number of at most
``max_condition`` so float32 runs far past convergence stay finite.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core import rng
from evotensor.core.numerics import exact_sum
from evotensor.core.pytree import pytree_dataclass
from evotensor.es.core.gradient_es import best_row_update
from evotensor.es.core.mean_sigma import MeanSigmaStrategy, as_float, expected_norm, step_sigma
from evotensor.es.core.sharding import ShardableStrategy


def sep_cma_constants(num_dims: int, population_size: int) -> dict[str, Any]:
    """Ros & Hansen (2008) constants in float64: ``weights [pop]`` and scalars."""
    n, lam = float(num_dims), population_size
    mu = lam // 2
    raw = np.log((lam + 1) / 2.0) - np.log(np.arange(1, lam + 1))
    w = np.where(np.arange(lam) < mu, raw, 0.0)
    w = w / w.sum()
    mu_eff = 1.0 / np.sum(w**2)
    mu_cov = mu_eff
    c_cov = (1 / mu_cov) * 2 / (n + math.sqrt(2)) ** 2 + (1 - 1 / mu_cov) * min(
        1.0, (2 * mu_eff - 1) / ((n + 2) ** 2 + mu_eff)
    )
    c_cov = min(1.0, (n + 2) / 3 * c_cov)
    c_sigma = (mu_eff + 2) / (n + mu_eff + 3)
    return dict(
        weights=w,
        mu_eff=mu_eff,
        c_sigma=c_sigma,
        d_sigma=1 + 2 * max(0.0, math.sqrt((mu_eff - 1) / (n + 1)) - 1) + c_sigma,
        c_c=4 / (n + 4),
        c_1=c_cov / mu_cov,
        c_mu=c_cov * (1 - 1 / mu_cov),
        chi_n=expected_norm(num_dims),
    )


@pytree_dataclass
class SepCMAESParams:
    """Dynamic hyperparameters (vmappable). ``weights [pop]`` best rank first, the rest ``[]``."""

    mean_init: jax.Array
    sigma_init: jax.Array
    weights: jax.Array
    mu_eff: jax.Array
    c_sigma: jax.Array
    d_sigma: jax.Array
    c_c: jax.Array
    c_1: jax.Array
    c_mu: jax.Array
    chi_n: jax.Array
    sigma_min: jax.Array
    sigma_max: jax.Array
    max_condition: jax.Array


@pytree_dataclass
class SepCMAESState:
    """``mean [n]``, ``sigma []``, ``p_sigma [n]``, ``p_c [n]``, ``c [n]`` (diagonal of C),
    ``generation []`` int32, ``best_solution [n]``, ``best_fitness []``."""

    mean: jax.Array
    sigma: jax.Array
    p_sigma: jax.Array
    p_c: jax.Array
    c: jax.Array
    generation: jax.Array
    best_solution: jax.Array
    best_fitness: jax.Array


class SepCMAES(ShardableStrategy, MeanSigmaStrategy):
    """Separable (diagonal) CMA-ES, O(n) memory and time per candidate.

    Args: as :class:`~evotensor.es.core.mean_sigma.MeanSigmaStrategy` (``population_size=None`` ->
    ``4 + floor(3 ln n)``; ``solution`` / ``num_dims``; ``sigma_init > 0``; optional ``mean_init [n]``).
    """

    name = "sep_cma_es"

    def __init__(self, population_size=None, solution=None, num_dims=None, **options):
        super().__init__(population_size, solution, num_dims, **options)
        self.constants = sep_cma_constants(self.num_dims, self.population_size)

    def default_params(self) -> SepCMAESParams:
        c = self.constants
        rates = ("c_sigma", "d_sigma", "c_c", "c_1", "c_mu", "chi_n")
        return SepCMAESParams(
            **self._shared_params(c["weights"]),
            **{k: as_float(c[k]) for k in rates},
            max_condition=as_float(1e14),
        )

    def _init(self, key, params):
        shared = self._shared_state(params)
        n, dtype = self.num_dims, shared["mean"].dtype
        del shared["z"]  # Sep-CMA-ES samples without keeping its draws
        return SepCMAESState(
            **shared, p_sigma=jnp.zeros(n, dtype), p_c=jnp.zeros(n, dtype), c=jnp.ones(n, dtype)
        )

    # -- population-sharding hooks (see evotensor.es.core.sharding) ------------------------------------
    shard_pairs = False
    shard_state_fields: tuple[str, ...] = ()

    def _sample(self, key, state, params, rows):
        z = rng.normal(key, (rows, self.num_dims), state.mean.dtype)
        z = z + 0 * state.sigma  # batched with the state under vmap (see core.cma.sample)
        return state.mean + state.sigma * (z * jnp.sqrt(state.c)), state

    def _member_weights(self, state, fitness, params):
        # each member's recombination weight by its rank: the ranking needs every fitness
        dtype = state.mean.dtype
        order = jnp.argsort(fitness, stable=True)
        return jnp.zeros(self.population_size, dtype).at[order].set(params.weights.astype(dtype)), None

    def _row_statistics(self, state, params, x, weights, aux):
        """``(sum_i w_i y_i, sum_i w_i y_i^2)`` with ``y_i = (x_i - m) / sigma``, ``[n]`` each."""
        inv_sigma = 1 / state.sigma
        ys = (x.astype(state.mean.dtype) - state.mean) * inv_sigma
        return exact_sum(weights[:, None] * ys, axis=0), exact_sum(weights[:, None] * ys**2, axis=0)

    def _update_from_statistics(self, key, state, params, stats, aux, fitness, best_row):
        n = self.num_dims
        dtype = state.mean.dtype
        y_w, wy2 = stats
        mean = state.mean + state.sigma * y_w
        c_s, c_c = params.c_sigma, params.c_c
        p_sigma = (1 - c_s) * state.p_sigma + jnp.sqrt(c_s * (2 - c_s) * params.mu_eff) * y_w / jnp.sqrt(
            state.c
        )
        generation = state.generation + 1
        ps_norm = jnp.sqrt(exact_sum(p_sigma**2))
        h_sigma = (
            ps_norm / jnp.sqrt(1 - (1 - c_s) ** (2 * generation.astype(dtype)))
            < (1.4 + 2 / (n + 1)) * params.chi_n
        )
        h = h_sigma.astype(dtype)
        p_c = (1 - c_c) * state.p_c + h * jnp.sqrt(c_c * (2 - c_c) * params.mu_eff) * y_w
        c1, cmu = params.c_1, params.c_mu
        c = (1 - c1 - cmu) * state.c + c1 * (p_c**2 + (1 - h) * c_c * (2 - c_c) * state.c) + cmu * wy2
        # condition guard: lift the smallest variances (keeps 1/sqrt(c) finite in float32)
        tiny = jnp.finfo(dtype).tiny
        c = jnp.maximum(c, jnp.maximum(jnp.max(c) / params.max_condition, tiny))
        sigma = step_sigma(state.sigma, c_s / params.d_sigma * (ps_norm / params.chi_n - 1), params)
        best_x, best_f = best_row_update(
            state.best_solution, state.best_fitness, best_row.astype(dtype), fitness
        )
        new = SepCMAESState(
            mean=mean,
            sigma=sigma,
            p_sigma=p_sigma,
            p_c=p_c,
            c=c,
            generation=generation,
            best_solution=best_x,
            best_fitness=best_f.astype(dtype),
        )
        return new, {"sigma": sigma, "h_sigma": h_sigma, "axis_ratio": jnp.sqrt(jnp.max(c) / jnp.min(c))}

    def _ask(self, key, state, params):
        return self._sample(key, state, params, self.population_size)

    def _tell(self, key, state, x, fitness, params):
        # unsharded: the candidates sorted by fitness against the rank weights (the sharded tell
        # gives each member its rank's weight instead; same sums)
        order = jnp.argsort(fitness, stable=True)
        xs = x.astype(state.mean.dtype)[order]
        stats = self._row_statistics(state, params, xs, params.weights.astype(state.mean.dtype), None)
        return self._update_from_statistics(key, state, params, stats, None, fitness, x[jnp.argmin(fitness)])
