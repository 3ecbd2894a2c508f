"""Rm-ES: the rank-m evolution strategy (Li & Zhang, IEEE TEVC 2018).

"A Simple Yet Efficient Evolution Strategy for Large-Scale Black-Box Optimization". The covariance
is ``(1-c_cov)^m I + c_cov sum_j (1-c_cov)^(m-j) p_j p_j^T`` built from ``m`` stored evolution
paths, sampled in O(m n) per candidate without ever forming a matrix::

    x_i = mean + sigma (a^m z_i + b sum_j a^(m-j) r_ij p_j),  a = sqrt(1-c_cov), b = sqrt(c_cov),
    z_i ~ N(0, I_n), r_ij ~ N(0, 1) independently for every candidate and path.

Update: ``mean <- sum w_i x_i:lambda`` (positive log weights on the best ``mu = floor(lambda/2)``),
``p <- (1-c_c) p + sqrt(c_c(2-c_c) mu_eff) (mean_new - mean)/sigma``. The archive keeps ``m`` past
paths spaced at least ``T`` generations apart (Algorithm 2: when the closest pair is nearer than
``T``, the older of that pair is dropped, otherwise the oldest). The step size follows the
rank-based success rule (RSR): the ``mu`` best fitness values of this and of the previous
generation are ranked together, ``q = sum_i w_i (R_prev,i - R_cur,i) / mu``,
``s <- (1-c_s) s + c_s (q - q*)``, ``sigma <- sigma exp(s / d_sigma)``; the first generation has no
previous one and leaves ``sigma`` unchanged.

Defaults (the paper's Table / pypop7's RMES): ``c_cov = 1/(3 sqrt(n)+5)``, ``c_c = 2/(n+7)``,
``c_s = 0.3``, ``q* = 0.3``, ``d_sigma = 1``, ``m = 2``, ``T = n``. ``sigma`` is clipped to
``[sigma_min, sigma_max]`` as a float32 guard.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax.lax import Precision

from evotensor.core import rng
from evotensor.core.checks import check_int
from evotensor.core.numerics import exact_sum
from evotensor.core.pytree import pytree_dataclass
from evotensor.es.core.mean_sigma import MeanSigmaStrategy, as_float, positive_log_weights


@pytree_dataclass
class RmESParams:
    """Dynamic hyperparameters (vmappable): ``weights [pop]`` and scalars."""

    mean_init: jax.Array
    sigma_init: jax.Array
    weights: jax.Array
    mu_eff: jax.Array
    c_cov: jax.Array
    c_c: jax.Array
    c_s: jax.Array
    q_star: jax.Array
    d_sigma: jax.Array
    gap: jax.Array
    sigma_min: jax.Array
    sigma_max: jax.Array


@pytree_dataclass
class RmESState:
    """``mean [n]``, ``sigma []``, ``p [n]`` (path), ``P [m, n]`` (archived paths, oldest first),
    ``t_hat [m]`` (their generations), ``s []`` (cumulative rank rate), ``prev_fitness [mu]``,
    ``generation []`` int32, ``best_solution [n]``, ``best_fitness []``."""

    mean: jax.Array
    sigma: jax.Array
    p: jax.Array
    P: jax.Array
    t_hat: jax.Array
    s: jax.Array
    prev_fitness: jax.Array
    generation: jax.Array
    best_solution: jax.Array
    best_fitness: jax.Array


class RmES(MeanSigmaStrategy):
    """Rank-m ES for large ``n`` (O(m n) memory).

    Args: as :class:`~evotensor.es.core.mean_sigma.MeanSigmaStrategy` (``population_size=None`` ->
    ``4 + floor(3 ln n)``; ``solution`` / ``num_dims``; ``sigma_init > 0``; optional ``mean_init [n]``),
    plus ``num_paths``: ``m``, the number of archived evolution paths (default 2).
    """

    name = "rm_es"

    def __init__(self, population_size=None, solution=None, num_dims=None, *, num_paths=2, **options):
        super().__init__(population_size, solution, num_dims, **options)
        self.num_paths = check_int(num_paths, "num_paths")
        self.mu = self.population_size // 2

    def default_params(self) -> RmESParams:
        n = float(self.num_dims)
        return RmESParams(
            **self._shared_params(positive_log_weights(self.population_size)),
            c_cov=as_float(1 / (3 * math.sqrt(n) + 5)),
            c_c=as_float(2 / (n + 7)),
            c_s=as_float(0.3),
            q_star=as_float(0.3),
            d_sigma=as_float(1.0),
            gap=as_float(n),
        )

    def _init(self, key, params):
        shared = self._shared_state(params)
        n, dtype, m = self.num_dims, shared["mean"].dtype, self.num_paths
        del shared["z"]  # Rm-ES samples without keeping its draws
        return RmESState(
            **shared,
            p=jnp.zeros(n, dtype),
            P=jnp.zeros((m, n), dtype),
            t_hat=jnp.zeros(m, dtype),
            s=jnp.zeros((), dtype),
            prev_fitness=jnp.full(self.mu, jnp.inf, dtype),
        )

    def _ask(self, key, state, params):
        m = self.num_paths
        dtype = state.mean.dtype
        kz, kr = jax.random.split(key)
        z = rng.normal(kz, (self.population_size, self.num_dims), dtype) + 0 * state.sigma
        r = rng.normal(kr, (self.population_size, m), dtype) + 0 * state.sigma
        a = jnp.sqrt(1 - params.c_cov)
        powers = a ** jnp.arange(m - 1, -1, -1, dtype=dtype)  # a^(m-j) for j = 1..m
        # [pop, n]; HIGHEST: exact float32 on GPUs, whose default float32 matmul precision is TF32
        low_rank = jnp.matmul(r * powers, state.P, precision=Precision.HIGHEST)
        y = a**m * z + jnp.sqrt(params.c_cov) * low_rank
        return state.mean + state.sigma * y, state

    def _tell(self, key, state, x, fitness, params):
        m, mu = self.num_paths, self.mu
        dtype = state.mean.dtype
        order = jnp.argsort(fitness, stable=True)
        w = params.weights.astype(dtype)
        xs = x.astype(dtype)[order]
        mean = exact_sum(w[:, None] * xs, axis=0)
        c_c = params.c_c
        p = (1 - c_c) * state.p + jnp.sqrt(c_c * (2 - c_c) * params.mu_eff) * (mean - state.mean) * (
            1 / state.sigma
        )

        # rank-based success rule on the mu best of the previous and this generation
        current = fitness.astype(dtype)[order][:mu]
        merged = jnp.concatenate([state.prev_fitness, current])
        ranks = jnp.argsort(jnp.argsort(merged, stable=True), stable=True).astype(dtype)
        q = exact_sum(w[:mu] * (ranks[:mu] - ranks[mu:])) / mu
        first = state.generation == 0
        s = jnp.where(first, state.s, (1 - params.c_s) * state.s + params.c_s * (q - params.q_star))
        sigma = jnp.clip(state.sigma * jnp.exp(s / params.d_sigma), params.sigma_min, params.sigma_max)

        # path archive (Algorithm 2): drop the older of the closest pair, or the oldest
        g = state.generation.astype(dtype)
        if m > 1:
            gaps = state.t_hat[1:] - state.t_hat[:-1]
            i_drop = jnp.argmin(gaps) + 1
            i_drop = jnp.where((gaps[i_drop - 1] > params.gap) | (state.generation < m), 0, i_drop)
        else:
            i_drop = jnp.zeros((), jnp.int32)
        idx = jnp.arange(m)
        shifted_P = jnp.concatenate([state.P[1:], p[None]], axis=0)
        shifted_t = jnp.concatenate([state.t_hat[1:], g[None]])
        P = jnp.where((idx >= i_drop)[:, None], shifted_P, state.P)
        t_hat = jnp.where(idx >= i_drop, shifted_t, state.t_hat)

        new, metrics = self._advance(
            state, x, fitness, mean=mean, sigma=sigma, p=p, P=P, t_hat=t_hat, s=s, prev_fitness=current
        )
        return new, {**metrics, "success_rate": q}
