"""ASEBO: adaptive ES-active subspaces (Choromanski, Pacchiano, Parker-Holder, Tang, Sindhwani,
2019), "From complexity to simplicity: adaptive ES-active subspaces for blackbox optimization",
NeurIPS 2019, arXiv:1903.04268.

The last ``k`` gradient estimates (decayed by ``decay`` per generation) form a buffer; after ``k``
warm-up generations its principal components explaining ``threshold`` of the variance (at least
``min_subspace_dims``) span the active subspace ``U`` (``l`` rows). Directions are drawn from
``N(0, alpha / d * I + (1 - alpha) / l * U^T U)`` and normalized to unit length; with antithetic
pairs ``mean +/- sigma * e_i`` and standardized weights ::

    g = d / (2 sigma P) * sum_i e_i * (w+_i - w-_i)          P = pop / 2

(the factor ``d / P`` makes ``E[g] = grad f`` for linear ``f``, raw weights and isotropic
sampling). ``alpha <- min(1, |g_perp| / |g_par|)`` after each generation, the ratio of ``g``'s
norms outside and inside the subspace (paper, Algorithm 1); the original samples isotropically
whenever that ratio exceeds 1, which the clipping reproduces.

Adaptations for fixed shapes (as in evosax): a fixed population size every generation (the paper
varies it with ``l``) and a fixed FIFO buffer of ``k`` estimates. Defaults follow the authors'
reference code: ``k = 70`` (capped at ``d``), ``threshold = 0.995``, ``decay = 0.99``,
``min_subspace_dims = 10`` (capped at ``k``), sigma 0.1, Adam with step 0.05.

Population sharding (:mod:`evotensor.es.core.sharding`): the active subspace (the PCA of the buffer),
its size and ``alpha`` are the shared part of sampling (:meth:`ASEBO._sample_context`, one SVD per
generation in the replicated program); given them each shard draws its own pairs, and the estimate
is a sum over pairs.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from evotensor.core import rng
from evotensor.core.checks import check_fraction, check_int
from evotensor.core.fitness_shaping import z_score
from evotensor.core.numerics import exact_matmul, exact_matvec, exact_sum, exact_vecmat, rounded
from evotensor.core.pytree import pytree_dataclass
from evotensor.es.core.gradient_es import GradientES, tell_by_statistics
from evotensor.es.core.optimizers import safe_norm


@pytree_dataclass
class ASEBOState:
    """Attributes: those of :class:`~evotensor.es.core.gradient_es.GradientESState` plus
    ``gradients [k, dims]`` (buffer, newest first), ``basis [k, dims]`` (principal directions,
    rows beyond the active count are zero), ``alpha []``."""

    mean: jax.Array
    opt_state: Any
    generation: jax.Array
    best_solution: jax.Array
    best_fitness: jax.Array
    gradients: jax.Array
    basis: jax.Array
    alpha: jax.Array


@pytree_dataclass
class ASEBOParams:
    """Dynamic hyperparameters (vmappable): ``sigma_init`` (0.1), ``decay`` (0.99),
    ``threshold`` (0.995)."""

    sigma_init: jax.Array
    decay: jax.Array
    threshold: jax.Array


def active_subspace(gradients: jax.Array, threshold: jax.Array, min_dims: int) -> jax.Array:
    """PCA of the buffer ``[k, dims]`` (``k <= dims``) -> ``[k, dims]`` basis rows, ordered by explained
    variance; rows past the active count (first count whose cumulative ratio exceeds ``threshold``,
    at least ``min_dims``) are 0."""
    centered = gradients - rounded(exact_sum(gradients, axis=0) / gradients.shape[0])
    _, s, vt = jnp.linalg.svd(centered, full_matrices=False)  # vt [k, dims]
    var = rounded(s**2)
    k = var.shape[0]
    upto = jnp.arange(k)[None, :] <= jnp.arange(k)[:, None]  # [k, k] row i: entries 0..i
    prefix = exact_sum(jnp.where(upto, var[None, :], 0.0), axis=1)  # batching-invariant cumsum
    ratio = prefix * (1.0 / jnp.maximum(exact_sum(var), jnp.finfo(jnp.float32).tiny))
    count = jnp.argmax(ratio > threshold) + 1  # first index past the threshold
    count = jnp.clip(count, min_dims, vt.shape[0])
    keep = jnp.arange(vt.shape[0]) < count
    return jnp.where(keep[:, None], vt, 0.0)


class ASEBO(GradientES):
    """ASEBO (Choromanski et al., 2019).

    Args:
        population_size: even (antithetic pairs).
        solution / num_dims: template pytree (initial mean) or flat dimension.
        subspace_dims: ``k`` (static) buffer length and warm-up generations; default
            ``min(70, dims)``.
        min_subspace_dims: smallest active dimension (static), default ``min(10, k)``.
        optimizer: default ``optax.adam(0.05)``; sigma_init: 0.1; or sigma_schedule.
        decay, threshold: see :class:`ASEBOParams`.
        fitness_shaping: default z-score over all samples (the reference code standardizes).
    """

    name = "asebo"

    def memory_elements(self, population_size: int, num_dims: int) -> int:
        """The vector strategies' estimate plus the ``[k, n]`` gradient buffer and basis and the
        ``[pop/2, n, k]`` projection products, for the default ``k = min(70, n)`` or more."""
        k = min(70, num_dims)
        extra = (2 * k + (population_size // 2) * k) * num_dims
        return super().memory_elements(population_size, num_dims) + extra

    default_sigma_init = 0.1
    default_learning_rate = 0.05
    default_fitness_shaping = staticmethod(z_score)
    mirrored_sampling = "ASEBO's antithetic sampling"

    def __init__(
        self,
        population_size,
        solution=None,
        num_dims=None,
        *,
        subspace_dims=None,
        min_subspace_dims=None,
        decay: float = 0.99,
        threshold: float = 0.995,
        **options,
    ):
        super().__init__(population_size, solution, num_dims, **options)
        k = min(70, self.num_dims) if subspace_dims is None else subspace_dims
        self.subspace_dims = check_int(k, "subspace_dims", 1, self.num_dims)
        m = min(10, k) if min_subspace_dims is None else min_subspace_dims
        self.min_subspace_dims = check_int(m, "min_subspace_dims", 1, k)
        self._decay = check_fraction(decay, "decay")
        self._threshold = check_fraction(threshold, "threshold")

    def default_params(self) -> ASEBOParams:
        f = lambda v: jnp.asarray(v, jnp.float32)
        return ASEBOParams(sigma_init=f(self._sigma_init), decay=f(self._decay), threshold=f(self._threshold))

    def _init(self, key, params):
        zeros = jnp.zeros((self.subspace_dims, self.num_dims), jnp.float32)
        return ASEBOState(
            **self._base_fields(), gradients=zeros, basis=zeros, alpha=jnp.ones((), jnp.float32)
        )

    # -- population-sharding hooks (see evotensor.es.core.sharding) ------------------------------------
    shard_pairs = True
    shard_state_fields: tuple[str, ...] = ()

    def _sample_context(self, state, params):
        """The active subspace (stored as ``state.basis``), its size and the sampling ``alpha``:
        what every shard samples with, computed once per generation."""
        warm = state.generation >= self.subspace_dims
        basis = jnp.where(
            warm, active_subspace(state.gradients, params.threshold, self.min_subspace_dims), 0.0
        )
        count = jnp.maximum(jnp.sum(jnp.any(basis != 0, axis=1)), 1)
        alpha = jnp.where(warm, state.alpha, 1.0)
        return state.replace(basis=basis), (count, alpha)

    def _sample(self, key, state, params, rows, context):
        count, alpha = context
        basis = state.basis
        sigma = self.sigma(state, params)
        d, h = self.num_dims, rows // 2
        z = rng.normal(key, (h, d), jnp.float32)
        zp = exact_matmul(exact_matmul(z, basis.T), basis)  # projection onto the active subspace
        # sqrt of alpha/d I + (1-alpha)/l P  =  sqrt(alpha/d) (I - P) + sqrt(alpha/d + (1-alpha)/l) P
        a_d = rounded(alpha / d)
        e = rounded(jnp.sqrt(a_d) * (z - zp)) + rounded(jnp.sqrt(a_d + rounded((1.0 - alpha) / count)) * zp)
        e = e * (1.0 / jnp.maximum(jnp.sqrt(exact_sum(e**2, axis=1))[:, None], jnp.finfo(jnp.float32).tiny))
        se = rounded(sigma * e)
        return jnp.concatenate([state.mean + se, state.mean - se]), state

    def _member_weights(self, state, fitness, params):
        return self._weights(fitness), None

    def _row_statistics(self, state, params, x, weights, aux):
        h = x.shape[0] // 2  # sum_i (w+_i - w-_i) (x+_i - x-_i), batching-invariant
        return exact_vecmat(weights[:h] - weights[h:], x[:h] - x[h:])

    def _update_from_statistics(self, key, state, params, stats, aux, fitness, best_row):
        sigma = self.sigma(state, params)
        h, d = self.population_size // 2, self.num_dims
        # e_i = (x+_i - x-_i) / (2 sigma)
        grad = stats * ((d / (4.0 * h)) / rounded(sigma**2))
        grad = jnp.where(jnp.isfinite(grad), grad, 0.0)
        new, metrics = self._apply_gradient_row(state, grad, best_row, fitness, sigma)
        par = exact_vecmat(exact_matvec(state.basis, grad), state.basis)
        par_norm, perp_norm = safe_norm(par), safe_norm(grad - par)
        ratio = jnp.where(par_norm > 0, perp_norm / jnp.where(par_norm > 0, par_norm, 1.0), 1.0)
        alpha = jnp.where(state.generation >= self.subspace_dims, jnp.minimum(ratio, 1.0), 1.0)
        gradients = jnp.concatenate([grad[None], params.decay * state.gradients[:-1]])
        metrics.update(alpha=alpha)
        return new.replace(gradients=gradients, alpha=alpha), metrics

    def _ask(self, key, state, params):
        state, context = self._sample_context(state, params)
        return self._sample(key, state, params, self.population_size, context)

    def _tell(self, key, state, x, fitness, params):
        return tell_by_statistics(self, key, state, x, fitness, params)
