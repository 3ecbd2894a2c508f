"""LM-MA-ES: Limited-Memory Matrix Adaptation ES (Loshchilov, Glasmachers & Beyer, IEEE TEVC 2019).

"Large Scale Black-box Optimization by Limited-Memory Matrix Adaptation" (arXiv:1705.06693),
Algorithm 1. The transformation matrix of MA-ES is replaced by ``m = 4 + floor(3 ln n)`` direction
vectors ``M_j``; sampling costs O(m n) per candidate and memory is O(m n)::

    z_i ~ N(0, I);  d_i = z_i;  for j = 1..min(t, m): d_i <- (1 - c_d,j) d_i + c_d,j M_j (M_j . d_i)
    x_i = mean + sigma d_i
    mean <- mean + sigma <d>_w
    p    <- (1 - c_s) p + sqrt(mu_eff c_s (2 - c_s)) <z>_w
    M_j  <- (1 - c_c,j) M_j + sqrt(mu_eff c_c,j (2 - c_c,j)) <z>_w
    sigma <- sigma exp(c_s/2 (|p|^2/n - 1))

with ``c_s = 2 lambda/n``, ``c_d,j = 1/(1.5^(j-1) n)``, ``c_c,j = lambda/(4^(j-1) n)`` and positive
log weights on the best ``floor(lambda/2)``. The paper targets ``n >> lambda``; where ``2 lambda > n``
(or ``lambda > n``) its learning rates exceed 1 and the formulas are undefined, so ``c_s`` and
``c_c,j`` are capped at 1 (the path then holds only the latest step). ``sigma`` is clipped to
``[sigma_min, sigma_max]`` as a float32 guard. ``tell`` uses the ``z`` of the last ``ask``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core.checks import check_int
from evotensor.core.numerics import exact_sum
from evotensor.core.pytree import pytree_dataclass
from evotensor.es.core.base import default_population_size
from evotensor.es.core.mean_sigma import (
    MeanSigmaStrategy,
    as_float,
    cumulate,
    positive_log_weights,
    step_sigma,
)


@pytree_dataclass
class LMMAESParams:
    """Dynamic hyperparameters: ``weights [pop]``, ``c_d [m]``, ``c_c [m]`` and scalars."""

    mean_init: jax.Array
    sigma_init: jax.Array
    weights: jax.Array
    mu_eff: jax.Array
    c_sigma: jax.Array
    c_d: jax.Array
    c_c: jax.Array
    sigma_min: jax.Array
    sigma_max: jax.Array


@pytree_dataclass
class LMMAESState:
    """``mean [n]``, ``sigma []``, ``p_sigma [n]``, ``M [m, n]`` (direction vectors), ``z [pop, n]``,
    ``generation []`` int32, ``best_solution [n]``, ``best_fitness []``."""

    mean: jax.Array
    sigma: jax.Array
    p_sigma: jax.Array
    M: jax.Array
    z: jax.Array
    generation: jax.Array
    best_solution: jax.Array
    best_fitness: jax.Array


def transform(z: jax.Array, M: jax.Array, c_d: jax.Array, generation: jax.Array) -> jax.Array:
    """Apply the ``m`` rank-one transforms in order: ``[pop, n] -> [pop, n]`` (only the first
    ``min(generation, m)`` vectors are in use)."""

    def apply(d, inputs):
        m_j, c_j, j = inputs
        proj = exact_sum(d * m_j, axis=1)  # [pop]
        new = (1 - c_j) * d + c_j * proj[:, None] * m_j
        return jnp.where(j < generation, new, d), None

    steps = jnp.arange(M.shape[0], dtype=jnp.int32)
    return jax.lax.scan(apply, z, (M, c_d, steps))[0]


class LMMAES(MeanSigmaStrategy):
    """Limited-memory MA-ES for large ``n`` (O(m n) memory).

    Args:
        population_size: ``None`` -> ``4 + floor(3 ln n)``.
        solution / num_dims: the solution template or flat dimension (exactly one).
        sigma_init: initial step size (> 0).
        mean_init: optional initial mean ``[n]``.
        memory: number of direction vectors ``m``; ``None`` -> ``4 + floor(3 ln n)``.
    """

    name = "lm_ma_es"

    def __init__(self, population_size=None, solution=None, num_dims=None, *, memory=None, **options):
        super().__init__(population_size, solution, num_dims, **options)
        self.memory = check_int(
            default_population_size(self.num_dims) if memory is None else memory, "memory"
        )

    def default_params(self) -> LMMAESParams:
        n, lam = float(self.num_dims), self.population_size
        j = np.arange(self.memory)
        return LMMAESParams(
            **self._shared_params(positive_log_weights(lam)),
            c_sigma=as_float(min(1.0, 2 * lam / n)),
            c_d=as_float(1 / (1.5**j * n)),
            c_c=as_float(np.minimum(1.0, lam / (4.0**j * n))),
        )

    def _init(self, key, params):
        shared = self._shared_state(params)
        n, dtype = self.num_dims, shared["mean"].dtype
        return LMMAESState(**shared, p_sigma=jnp.zeros(n, dtype), M=jnp.zeros((self.memory, n), dtype))

    def _ask(self, key, state, params):
        z = self._sample_z(key, state)
        d = transform(z, state.M, params.c_d.astype(z.dtype), state.generation)
        return state.mean + state.sigma * d, state.replace(z=z)

    def _tell(self, key, state, x, fitness, params):
        n = self.num_dims
        dtype = state.mean.dtype
        order, w, _, z_w = self._ranked(state, fitness, params)
        # the mean moves by sigma <d>_w with d = x - mean recovered from the candidates
        ds = (x.astype(dtype)[order] - state.mean) * (1 / state.sigma)
        d_w = exact_sum(w[:, None] * ds, axis=0)
        mean = state.mean + state.sigma * d_w
        c_s, c_c = params.c_sigma, params.c_c.astype(dtype)
        p_sigma = cumulate(state.p_sigma, c_s, params.mu_eff, z_w)
        M = cumulate(state.M, c_c[:, None], params.mu_eff, z_w)
        sigma = step_sigma(state.sigma, c_s / 2 * (exact_sum(p_sigma**2) / n - 1), params)
        return self._advance(state, x, fitness, mean=mean, sigma=sigma, p_sigma=p_sigma, M=M)
