"""Exponential natural evolution strategies (Glasmachers, Schaul, Sun, Wierstra, Schmidhuber,
2010, "Exponential natural evolution strategies", GECCO; Wierstra et al., 2014, "Natural
evolution strategies", JMLR 15, Algorithm 5).

Search distribution ``N(mean, sigma^2 B B^T)`` with ``det B = 1``. With samples
``x_i = mean + sigma * B z_i`` and utilities ``u_i`` (higher = better, rank-based)::

    G_delta = sum_i u_i z_i
    G_M     = sum_i u_i (z_i z_i^T - I)
    G_sigma = tr(G_M) / d,      G_B = G_M - G_sigma I
    mean   <- mean + eta_mean * sigma * B G_delta
    sigma  <- sigma * exp(eta_sigma / 2 * G_sigma)
    B      <- B expm(eta_B / 2 * G_B)

Defaults (Wierstra et al., 2014, Table 1): ``lambda = 4 + floor(3 ln d)``, ``eta_mean = 1``,
``eta_sigma = eta_B = 3 (3 + ln d) / (5 d sqrt(d))`` and the utilities
``u_k = max(0, ln(lambda/2 + 1) - ln k) / sum_j max(0, ln(lambda/2 + 1) - ln j) - 1/lambda`` for the
``k``-th best sample. In this package shaped values are *weights* with lower = better, so the
strategies use ``u = -weights`` and the default shaping
:func:`~evotensor.core.fitness_shaping.nes_weights` returns ``-u``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from evotensor.core import rng
from evotensor.core.numerics import exact_matmul, exact_matvec, exact_sum, exact_vecmat, rounded
from evotensor.core.pytree import pytree_dataclass
from evotensor.es._moved import moved_names
from evotensor.es.core.base import track_best
from evotensor.es.core.nes import NaturalES


def sym_expm(s: jax.Array) -> jax.Array:
    """Matrix exponential of a symmetric ``[d, d]`` matrix via its eigendecomposition."""
    # mirror the lower triangle instead of averaging with s.T: when s arrives as a fused product,
    # XLA:CPU may contract ``a * s + a * s.T`` into an FMA in one program and not in another
    lower = jnp.arange(s.shape[0])[:, None] >= jnp.arange(s.shape[0])[None, :]
    s = jnp.where(lower, s, s.T)
    evals, evecs = jnp.linalg.eigh(s, symmetrize_input=False)
    return exact_matmul(evecs * jnp.exp(evals), evecs.T)


@pytree_dataclass
class XNESState:
    """Attributes: ``mean [dims]``, ``sigma []``, ``B [dims, dims]`` (det 1), ``generation []``,
    ``best_solution [dims]``, ``best_fitness []``."""

    mean: jax.Array
    sigma: jax.Array
    B: jax.Array
    generation: jax.Array
    best_solution: jax.Array
    best_fitness: jax.Array


@pytree_dataclass
class XNESParams:
    """Dynamic hyperparameters (vmappable): ``sigma_init`` (1.0), ``eta_mean`` (1.0),
    ``eta_sigma`` and ``eta_B`` (both ``3 (3 + ln d) / (5 d sqrt d)``, Wierstra et al. 2014),
    ``sigma_min`` (1e-30: floor that keeps float32 sigma from reaching 0)."""

    sigma_init: jax.Array
    eta_mean: jax.Array
    eta_sigma: jax.Array
    eta_B: jax.Array
    sigma_min: jax.Array


def xnes_natural_gradients(z: jax.Array, utilities: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Natural gradients ``(G_delta [dims], G_M [dims, dims])``.

    Args: standard samples ``z [pop, dims]`` and ``utilities [pop]`` (higher = better).
    """
    g_delta = exact_vecmat(utilities, z)
    pop, d = z.shape
    # u_i * (z_i z_i^T): the outer product is exactly symmetric, so G_M is too, bit for bit
    outer = (z[:, :, None] * z[:, None, :]).reshape(pop, d * d)
    g_m = exact_vecmat(utilities, outer).reshape(d, d) - exact_sum(utilities) * jnp.eye(d, dtype=z.dtype)
    return g_delta, g_m


class XNES(NaturalES):
    """xNES (Glasmachers et al., 2010; Wierstra et al., 2014).

    Args:
        population_size: default ``4 + floor(3 ln d)``.
        solution / num_dims: template pytree (initial mean) or flat dimension.
        sigma_init: initial global step size (default 1.0).
        fitness_shaping: ``[pop] -> weights [pop]`` (lower = better); default
            :func:`~evotensor.core.fitness_shaping.nes_weights`.

    xNES' updates are closed-form natural-gradient steps, so it takes learning rates
    (``params.eta_*``), not an optax optimizer.
    """

    name = "xnes"
    square_matrices = 3  # B, the natural gradient, its exponential
    member_square_matrices = 1  # the per-sample outer products z z^T of the gradient

    def default_params(self) -> XNESParams:
        d = self.num_dims
        eta = 3.0 * (3.0 + math.log(d)) / (5.0 * d * math.sqrt(d))
        f = lambda v: jnp.asarray(v, jnp.float32)
        return XNESParams(
            sigma_init=f(self._sigma_init),
            eta_mean=f(1.0),
            eta_sigma=f(eta),
            eta_B=f(eta),
            sigma_min=f(1e-30),
        )

    def _init(self, key, params):
        return XNESState(
            **self._initial_mean_fields(),
            sigma=jnp.asarray(params.sigma_init, jnp.float32),
            B=jnp.eye(self.num_dims, dtype=jnp.float32),
        )

    def _ask(self, key, state, params):
        z = rng.normal(key, (self.population_size, self.num_dims), jnp.float32)
        return state.mean + rounded(state.sigma * exact_matmul(z, state.B.T)), state

    def _tell(self, key, state, x, fitness, params):
        u = self._utilities(fitness)
        # recover z_i = B^-1 (x_i - mean) / sigma; an explicit reciprocal, because XLA rewrites
        # a division by a broadcast sigma into this multiply only in the batched program
        z = jnp.linalg.solve(state.B, ((x - state.mean) * (1.0 / state.sigma)).T).T
        g_delta, g_m = xnes_natural_gradients(z, u)
        d = self.num_dims
        # rounded: else XLA may fold the 1/d into the later constants (eta / 2) in one program only
        g_sigma = rounded(exact_sum(jnp.diagonal(g_m)) / d)
        g_b = g_m - g_sigma * jnp.eye(d, dtype=jnp.float32)
        mean = state.mean + rounded(params.eta_mean * state.sigma * exact_matvec(state.B, g_delta))
        # rounded: XLA's exp starts with an add that could absorb the product (see core.numerics)
        log_step = rounded(params.eta_sigma / 2.0 * g_sigma)
        sigma = jnp.maximum(state.sigma * jnp.exp(log_step), params.sigma_min)
        B = exact_matmul(state.B, sym_expm(params.eta_B / 2.0 * g_b))
        ok = jnp.all(jnp.isfinite(mean)) & jnp.isfinite(sigma) & jnp.all(jnp.isfinite(B))
        new, metrics = track_best(state, x, fitness)
        new = new.replace(
            mean=jnp.where(ok, mean, state.mean),
            sigma=jnp.where(ok, sigma, state.sigma),
            B=jnp.where(ok, B, state.B),
            generation=state.generation + 1,
        )
        metrics.update(sigma=new.sigma)
        return new, metrics


# the NES utilities moved to evotensor.core.fitness_shaping, the population-size default to
# evotensor.es.core.base (merged with the one of the mean-and-step-size strategies)
__getattr__ = moved_names(
    __name__,
    {
        "nes_utilities": "evotensor.core.fitness_shaping",
        "nes_weights": "evotensor.core.fitness_shaping",
        "default_population_size": "evotensor.es.core.base",
        "resolve_population_size": ("evotensor.es.core.base", "population_size_or_default"),
    },
)
