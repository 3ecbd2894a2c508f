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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from evotensor.core.pytree import pytree_dataclass
from evotensor.es.base import check_even
from evotensor.es.gradient_es import FitnessShaping, GradientES, identity_shaping
from evotensor.es.optimizers import safe_normalize


@pytree_dataclass
class GuidedESState:
    """Attributes: those of :class:`~evotensor.es.open_es.GradientESState` plus
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


def guided_perturbations(
    key: jax.Array, num_pairs: int, surrogates: jax.Array, alpha: jax.Array, sigma: jax.Array
) -> jax.Array:
    """``[num_pairs, dims]`` draws of ``N(0, sigma^2 (alpha/d I + (1-alpha)/k U U^T))`` with
    ``U = orth(surrogates^T)``."""
    k, d = surrogates.shape
    U, _ = jnp.linalg.qr(surrogates.T)  # [d, k] orthonormal basis of the guiding subspace
    k1, k2 = jax.random.split(key)
    z_full = jax.random.normal(k1, (num_pairs, d), jnp.float32)
    z_sub = jax.random.normal(k2, (num_pairs, k), jnp.float32)
    return sigma * (jnp.sqrt(alpha / d) * z_full + jnp.sqrt((1.0 - alpha) / k) * z_sub @ U.T)


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

    def __init__(
        self,
        population_size: int,
        solution: Any = None,
        num_dims: int | None = None,
        *,
        subspace_dims: int = 1,
        optimizer: optax.GradientTransformation | None = None,
        sigma_init: float | None = None,
        sigma_schedule: Callable[[jax.Array], jax.Array] | None = None,
        alpha: float = 0.5,
        beta: float = 2.0,
        fitness_shaping: FitnessShaping = identity_shaping,
        es_gradient_as_surrogate: bool = True,
    ):
        super().__init__(
            population_size,
            solution,
            num_dims,
            optimizer=optimizer,
            sigma_init=sigma_init,
            sigma_schedule=sigma_schedule,
            fitness_shaping=fitness_shaping,
        )
        check_even(population_size, "Guided ES's antithetic sampling")
        if (
            isinstance(subspace_dims, bool)
            or not isinstance(subspace_dims, int)
            or not 1 <= subspace_dims <= self.num_dims
        ):
            raise ValueError(
                f"subspace_dims must be an int in [1, num_dims={self.num_dims}], got {subspace_dims!r}"
            )
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {alpha!r}")
        if not beta > 0:
            raise ValueError(f"beta must be > 0, got {beta!r}")
        self.subspace_dims = subspace_dims
        self._alpha, self._beta = float(alpha), float(beta)
        self.es_gradient_as_surrogate = bool(es_gradient_as_surrogate)

    def default_params(self) -> GuidedESParams:
        f = lambda v: jnp.asarray(v, jnp.float32)
        return GuidedESParams(sigma_init=f(self._sigma_init), alpha=f(self._alpha), beta=f(self._beta))

    def _init(self, key, params):
        # random unit directions until real surrogates arrive
        surrogates = jax.random.normal(key, (self.subspace_dims, self.num_dims), jnp.float32)
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

    def _ask(self, key, state, params):
        sigma = self.sigma(state, params)
        eps = guided_perturbations(key, self.population_size // 2, state.surrogates, params.alpha, sigma)
        return jnp.concatenate([state.mean + eps, state.mean - eps]), state

    def _tell(self, key, state, x, fitness, params):
        sigma = self.sigma(state, params)
        w = self._weights(fitness)
        h = self.population_size // 2
        c = w[:h] - w[h:]
        # eps_i = (x+_i - x-_i) / 2
        grad = params.beta * (c @ x[:h] - c @ x[h:]) / (4.0 * sigma**2 * h)
        new, metrics = self._apply_gradient(state, grad, x, fitness, sigma)
        if self.es_gradient_as_surrogate:
            g = jnp.where(jnp.isfinite(grad), grad, 0.0)
            new = new.replace(surrogates=_push(state.surrogates, g))
        return new, metrics


def _push(buffer: jax.Array, g: jax.Array) -> jax.Array:
    """Insert unit-normalized ``g`` as row 0, dropping the oldest row; a zero ``g`` is not inserted."""
    g = safe_normalize(g)
    pushed = jnp.concatenate([g[None], buffer[:-1]])
    return jnp.where(jnp.any(g != 0), pushed, buffer)
