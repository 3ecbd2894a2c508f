"""Guided evolution strategies (Maheswaranathan, Metz, Tucker, Choi, Sohl-Dickstein, 2019),
"Guided evolutionary strategies: augmenting random search with surrogate gradients", ICML 2019.

Perturbations are drawn from ``N(0, sigma^2 Sigma)`` with
``Sigma = alpha / d * I + (1 - alpha) / k * U U^T``, where the orthonormal ``U [d, k]`` spans the
``k`` most recent surrogate gradients. With antithetic pairs ``mean +/- eps_i`` and ``P = pop/2``::

    g = beta / (2 sigma^2 P) * sum_i eps_i * (w(mean + eps_i) - w(mean - eps_i))

(paper, Algorithm 1; defaults ``alpha = 0.5``, ``beta = 2``). For linear ``f`` and identity
shaping ``E[g] = beta * Sigma * a``. Surrogate gradients are pushed with
:meth:`GuidedES.add_surrogate_gradient`; with ``es_gradient_as_surrogate=True`` (default) the
strategy also pushes its own estimate ``g`` after every ``tell``, so it runs without an external
surrogate (the subspace then tracks recent descent directions).

Population sharding (:mod:`evotensor.es.core.sharding`): the orthonormal basis ``U`` is the shared part
of sampling (:meth:`GuidedES._sample_context`, one QR per generation in the replicated program);
given ``U`` each shard draws its own pairs, and the estimate is a sum over pairs.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.lax import Precision

from evotensor.core import rng
from evotensor.core.checks import check_fraction, check_int, check_spread
from evotensor.core.pytree import pytree_dataclass
from evotensor.es.core.gradient_es import GradientES, identity_shaping, pair_sum, tell_by_statistics
from evotensor.es.core.optimizers import safe_normalize


@pytree_dataclass
class GuidedESState:
    """Attributes: those of :class:`~evotensor.es.core.gradient_es.GradientESState` plus
    ``surrogates [k, dims]`` (most recent first, unit norm)."""

    mean: jax.Array
    opt_state: Any
    generation: jax.Array
    best_solution: jax.Array
    best_fitness: jax.Array
    surrogates: jax.Array


@pytree_dataclass
class GuidedESParams:
    """Dynamic hyperparameters (vmappable): ``sigma_init`` (0.1), ``alpha`` (0.5: share of the
    isotropic part), ``beta`` (2.0: gradient scale); alpha and beta from Maheswaranathan et al."""

    sigma_init: jax.Array
    alpha: jax.Array
    beta: jax.Array


def guided_basis(surrogates: jax.Array) -> jax.Array:
    """``U = orth(surrogates^T)`` ``[dims, k]``: orthonormal basis of the guiding subspace."""
    U, _ = jnp.linalg.qr(surrogates.T)
    return U


def guided_noise(
    key: jax.Array, num_pairs: int, U: jax.Array, alpha: jax.Array, sigma: jax.Array
) -> jax.Array:
    """``[num_pairs, dims]`` draws of ``N(0, sigma^2 (alpha/d I + (1-alpha)/k U U^T))`` for an
    orthonormal ``U [dims, k]`` (:func:`guided_basis`)."""
    d, k = U.shape
    k1, k2 = jax.random.split(key)
    z_full = rng.normal(k1, (num_pairs, d), jnp.float32)
    z_sub = rng.normal(k2, (num_pairs, k), jnp.float32)
    # HIGHEST: exact float32 on GPUs, whose default float32 matmul precision is TF32
    z_guided = jnp.matmul(jnp.sqrt((1.0 - alpha) / k) * z_sub, U.T, precision=Precision.HIGHEST)
    return sigma * (jnp.sqrt(alpha / d) * z_full + z_guided)


def guided_perturbations(
    key: jax.Array, num_pairs: int, surrogates: jax.Array, alpha: jax.Array, sigma: jax.Array
) -> jax.Array:
    """``[num_pairs, dims]`` draws of ``N(0, sigma^2 (alpha/d I + (1-alpha)/k U U^T))`` with
    ``U = orth(surrogates^T)``."""
    return guided_noise(key, num_pairs, guided_basis(surrogates), alpha, sigma)


class GuidedES(GradientES):
    """Guided ES (Maheswaranathan et al., 2019).

    Args:
        population_size: even (antithetic pairs).
        solution / num_dims: template pytree (initial mean) or flat dimension.
        subspace_dims: ``k`` (static), number of surrogate gradients kept, ``1 <= k <= dims``.
        optimizer: optax transformation, default ``optax.adam(0.01)``.
        sigma_init: default 0.1; or sigma_schedule ``generation -> sigma``.
        alpha, beta: see :class:`GuidedESParams`.
        fitness_shaping: default identity (the paper's estimator uses raw values).
        es_gradient_as_surrogate: push the strategy's own estimate into the surrogate buffer.
    """

    name = "guided_es"
    default_sigma_init = 0.1
    default_fitness_shaping = staticmethod(identity_shaping)
    mirrored_sampling = "Guided ES's antithetic sampling"

    def __init__(
        self,
        population_size,
        solution=None,
        num_dims=None,
        *,
        subspace_dims: int = 1,
        alpha: float = 0.5,
        beta: float = 2.0,
        es_gradient_as_surrogate=True,
        **options,
    ):
        super().__init__(population_size, solution, num_dims, **options)
        self.subspace_dims = check_int(subspace_dims, "subspace_dims", 1, self.num_dims)
        self._alpha = check_fraction(alpha, "alpha", allow_zero=True)
        self._beta = check_spread(beta, "beta")
        self.es_gradient_as_surrogate = bool(es_gradient_as_surrogate)

    def default_params(self) -> GuidedESParams:
        f = lambda v: jnp.asarray(v, jnp.float32)
        return GuidedESParams(sigma_init=f(self._sigma_init), alpha=f(self._alpha), beta=f(self._beta))

    def _init(self, key, params):
        # random unit directions until real surrogates arrive
        surrogates = rng.normal(key, (self.subspace_dims, self.num_dims), jnp.float32)
        surrogates = jax.vmap(safe_normalize)(surrogates)
        return GuidedESState(**self._base_fields(), surrogates=surrogates)

    def add_surrogate_gradient(self, state: GuidedESState, gradient: Any) -> GuidedESState:
        """Push a surrogate gradient (a solution-shaped pytree or ``[dims]``) into the buffer. Pure."""
        g = jnp.asarray(gradient) if isinstance(gradient, jax.Array) and gradient.ndim == 1 else None
        if g is None:
            g = self.space.ravel_population(jax.tree_util.tree_map(lambda a: jnp.asarray(a)[None], gradient))[
                0
            ]
        if g.shape != (self.num_dims,):
            raise ValueError(f"gradient must flatten to ({self.num_dims},), got {g.shape}")
        return state.replace(surrogates=_push(state.surrogates, g))

    # -- population-sharding hooks (see evotensor.es.core.sharding) ------------------------------------
    shard_pairs = True
    shard_state_fields: tuple[str, ...] = ()

    def _sample_context(self, state, params):
        """The basis ``U [dims, k]`` every shard samples with (computed once per generation)."""
        return state, guided_basis(state.surrogates)

    def _sample(self, key, state, params, rows, U):
        eps = guided_noise(key, rows // 2, U, params.alpha, self.sigma(state, params))
        return jnp.concatenate([state.mean + eps, state.mean - eps]), state

    def _member_weights(self, state, fitness, params):
        return self._weights(fitness), None

    def _row_statistics(self, state, params, x, weights, aux):
        # sum_i (w+_i - w-_i) (x+_i - x-_i). Not OpenES' slice-free mirrored_pair_sum: under XLA's
        # default CPU options its unbatched form differs from the vmapped one by an ulp at these shapes
        return pair_sum(weights, x)

    def _update_from_statistics(self, key, state, params, stats, aux, fitness, best_row):
        sigma = self.sigma(state, params)
        # eps_i = (x+_i - x-_i) / 2
        grad = params.beta * stats / (4.0 * sigma**2 * (self.population_size // 2))
        new, metrics = self._apply_gradient_row(state, grad, best_row, fitness, sigma)
        if self.es_gradient_as_surrogate:
            g = jnp.where(jnp.isfinite(grad), grad, 0.0)
            new = new.replace(surrogates=_push(state.surrogates, g))
        return new, metrics

    def _ask(self, key, state, params):
        state, U = self._sample_context(state, params)
        return self._sample(key, state, params, self.population_size, U)

    def _tell(self, key, state, x, fitness, params):
        return tell_by_statistics(self, key, state, x, fitness, params)


def _push(buffer: jax.Array, g: jax.Array) -> jax.Array:
    """Insert unit-normalized ``g`` as row 0, dropping the oldest row; a zero ``g`` is not inserted."""
    g = safe_normalize(g)
    pushed = jnp.concatenate([g[None], buffer[:-1]])
    return jnp.where(jnp.any(g != 0), pushed, buffer)
