"""MA-ES: the Matrix Adaptation Evolution Strategy (Beyer & Sendhoff, IEEE TEVC 2017).

"Simplify Your Covariance Matrix Adaptation Evolution Strategy": CMA-ES without the covariance
matrix. The search distribution is ``N(m, sigma^2 M M^T)`` and ``M`` is updated multiplicatively,
so no eigendecomposition or matrix square root is ever needed (Algorithm 2 of the paper)::

    z_l ~ N(0, I),  d_l = M z_l,  x_l = m + sigma d_l                  (l = 1..lambda)
    m     <- m + sigma <d>_w
    s     <- (1-c_s) s + sqrt(mu_eff c_s (2-c_s)) <z>_w
    M     <- M [I + c_1/2 (s s^T - I) + c_w/2 (<z z^T>_w - I)]
    sigma <- sigma exp(c_s/d_s (|s| / E|N(0,I)| - 1))

with positive weights ``w_i ~ ln(mu + 1/2) - ln i`` on the ``mu = floor(lambda/2)`` best and the
CMA-ES constants ``c_s = (mu_eff+2)/(mu_eff+n+5)``, ``c_1 = 2/((n+1.3)^2+mu_eff)``,
``c_w = min(1-c_1, 2(mu_eff+1/mu_eff-2)/((n+2)^2+mu_eff))``,
``d_s = 1 + c_s + 2 max(0, sqrt((mu_eff-1)/(n+1)) - 1)``.

``tell`` uses the ``z`` drawn by the last ``ask`` (kept in the state), so ``tell`` must receive the
asked candidates. ``sigma`` is clipped to ``[sigma_min, sigma_max]`` as a float32 guard.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.lax import Precision

from evotensor.core.numerics import exact_sum
from evotensor.core.pytree import pytree_dataclass
from evotensor.es.core.mean_sigma import (
    MeanSigmaStrategy,
    as_float,
    cumulate,
    expected_norm,
    positive_log_weights,
    step_sigma,
)


@pytree_dataclass
class MAESParams:
    """Dynamic hyperparameters (vmappable): ``weights [pop]`` (best first) and scalars."""

    mean_init: jax.Array
    sigma_init: jax.Array
    weights: jax.Array
    mu_eff: jax.Array
    c_sigma: jax.Array
    d_sigma: jax.Array
    c_1: jax.Array
    c_w: jax.Array
    chi_n: jax.Array
    sigma_min: jax.Array
    sigma_max: jax.Array


@pytree_dataclass
class MAESState:
    """``mean [n]``, ``sigma []``, ``s [n]`` (path), ``M [n, n]``, ``z [pop, n]`` (last draw),
    ``generation []`` int32, ``best_solution [n]``, ``best_fitness []``."""

    mean: jax.Array
    sigma: jax.Array
    s: jax.Array
    M: jax.Array
    z: jax.Array
    generation: jax.Array
    best_solution: jax.Array
    best_fitness: jax.Array


class MAES(MeanSigmaStrategy):
    """Matrix Adaptation ES (O(n^2) memory, O(n^3) per generation, no decomposition).

    Args:
        population_size: ``None`` -> ``4 + floor(3 ln n)``.
        solution / num_dims: the solution template or flat dimension (exactly one).
        sigma_init: initial step size (> 0).
        mean_init: optional initial mean ``[n]``.
    """

    name = "ma_es"
    square_matrices = 3  # M, the identity and the updated M

    def default_params(self) -> MAESParams:
        n = float(self.num_dims)
        w = positive_log_weights(self.population_size)
        mu_eff = 1 / np.sum(w**2)
        c_s = (mu_eff + 2) / (mu_eff + n + 5)
        c_1 = 2 / ((n + 1.3) ** 2 + mu_eff)
        c_w = min(1 - c_1, 2 * (mu_eff + 1 / mu_eff - 2) / ((n + 2) ** 2 + mu_eff))
        d_s = 1 + c_s + 2 * max(0.0, math.sqrt((mu_eff - 1) / (n + 1)) - 1)
        return MAESParams(
            **self._shared_params(w),
            c_sigma=as_float(c_s),
            d_sigma=as_float(d_s),
            c_1=as_float(c_1),
            c_w=as_float(c_w),
            chi_n=as_float(expected_norm(self.num_dims)),
        )

    def _init(self, key, params):
        shared = self._shared_state(params)
        n, dtype = self.num_dims, shared["mean"].dtype
        return MAESState(**shared, s=jnp.zeros(n, dtype), M=jnp.eye(n, dtype=dtype))

    def _ask(self, key, state, params):
        z = self._sample_z(key, state)
        # HIGHEST throughout: exact float32 on GPUs (default there: TF32, too coarse for M's updates)
        d = jnp.matmul(z, state.M.T, precision=Precision.HIGHEST)
        return state.mean + state.sigma * d, state.replace(z=z)

    def _tell(self, key, state, x, fitness, params):
        n = self.num_dims
        dtype = state.mean.dtype
        _, w, zs, z_w = self._ranked(state, fitness, params)
        d_w = exact_sum(
            state.M * z_w[None, :], axis=1
        )  # M z_w, batch-invariant (see core.numerics.exact_sum)
        mean = state.mean + state.sigma * d_w
        c_s = params.c_sigma
        s = cumulate(state.s, c_s, params.mu_eff, z_w)
        eye = jnp.eye(n, dtype=dtype)
        zz_w = jnp.matmul(zs.T * w, zs, precision=Precision.HIGHEST)
        update = eye + params.c_1 / 2 * (jnp.outer(s, s) - eye) + params.c_w / 2 * (zz_w - eye)
        log_step = c_s / params.d_sigma * (jnp.sqrt(exact_sum(s**2)) / params.chi_n - 1)
        sigma = step_sigma(state.sigma, log_step, params)
        M = jnp.matmul(state.M, update, precision=Precision.HIGHEST)
        return self._advance(state, x, fitness, mean=mean, sigma=sigma, s=s, M=M)
