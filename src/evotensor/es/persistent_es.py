"""Persistent evolution strategies (Vicol, Metz, Sohl-Dickstein, 2021), "Unbiased gradient
estimation in unrolled computation graphs with persistent evolution strategies", ICML 2021.

For objectives that are unrolled computations of ``T`` inner steps, optimized online in partial
unrolls of ``K`` steps: each generation is one partial unroll. Every particle keeps the sum ``xi``
of all perturbations it received in the current truncation window, and the antithetic estimate ::

    g = 1 / (2 N sigma^2) * sum_i xi_i * (L(mean + eps_i) - L(mean - eps_i))      N = pop / 2

is unbiased for the full-unroll gradient (for a static objective it reduces to an unbiased,
higher-variance ES estimate). ``state.inner_step`` (0, K, 2K, …, T-K) tells the problem where in
the unroll the current generation is; the accumulated perturbations reset every ``T / K``
generations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from jax.lax import Precision

from evotensor.core import rng
from evotensor.core.pytree import pytree_dataclass
from evotensor.es.base import check_even
from evotensor.es.gradient_es import FitnessShaping, GradientES, identity_shaping, tell_by_statistics


@pytree_dataclass
class OnlineESState:
    """State of PES / NRES.

    Attributes:
        mean, opt_state, generation, best_solution, best_fitness: as
            :class:`~evotensor.es.open_es.GradientESState`.
        perturbation: ``[pop/2, dims]`` PES: accumulated perturbations of the window;
            NRES: the perturbations reused throughout the window.
        inner_step: ``[]`` int32, position of this generation's partial unroll in ``[0, T)``.
    """

    mean: jax.Array
    opt_state: Any
    generation: jax.Array
    best_solution: jax.Array
    best_fitness: jax.Array
    perturbation: jax.Array
    inner_step: jax.Array


def paired_sum(weights: jax.Array, directions: jax.Array) -> jax.Array:
    """``sum_i directions_i * (w+_i - w-_i)`` ``[dims]``: weights ``[2N]``, directions ``[N, dims]``."""
    n = directions.shape[0]
    # HIGHEST: exact float32 on GPUs, whose default float32 matmul precision is TF32
    return jnp.matmul(weights[:n] - weights[n:], directions, precision=Precision.HIGHEST)


def paired_gradient(weights: jax.Array, directions: jax.Array, sigma: jax.Array) -> jax.Array:
    """``1/(2 N sigma^2) * sum_i directions_i * (w+_i - w-_i)``.

    Args: weights ``[2N]`` (row ``i + N`` mirrors row ``i``), directions ``[N, dims]``, sigma ``[]``.
    """
    n = directions.shape[0]
    return paired_sum(weights, directions) / (2.0 * n * sigma**2)


class OnlineES(GradientES):
    """Shared configuration of the online (truncated-unroll) ES: ``T`` and ``K`` are static."""

    default_sigma_init = 0.1

    def __init__(
        self,
        population_size: int,
        solution: Any = None,
        num_dims: int | None = None,
        *,
        optimizer: optax.GradientTransformation | None = None,
        sigma_init: float | None = None,
        sigma_schedule: Callable[[jax.Array], jax.Array] | None = None,
        fitness_shaping: FitnessShaping = identity_shaping,
        T: int = 100,
        K: int = 10,
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
        check_even(population_size, f"{type(self).__name__}'s antithetic sampling")
        for name, v in [("T", T), ("K", K)]:
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if T % K:
            raise ValueError(
                f"T (total inner steps) must be a multiple of K (unroll length), got T={T}, K={K}"
            )
        self.T, self.K = T, K

    def _init(self, key, params):
        return OnlineESState(
            **self._base_fields(),
            perturbation=jnp.zeros((self.population_size // 2, self.num_dims), jnp.float32),
            inner_step=jnp.zeros((), jnp.int32),
        )

    def _advance(self, state: OnlineESState) -> OnlineESState:
        step = state.inner_step + self.K
        return state.replace(inner_step=jnp.where(step >= self.T, 0, step))

    # -- population-sharding hooks (see evotensor.es.sharding) ------------------------------------
    # ``perturbation [pop/2, dims]`` holds one row per mirrored pair: under sharding each device
    # keeps the rows of its own pairs (its ``_sample`` reads and writes only those).
    shard_pairs = True
    shard_state_fields: tuple[str, ...] = ("perturbation",)

    def _member_weights(self, state, fitness, params):
        return self._weights(fitness), None

    def _row_statistics(self, state, params, x, weights, aux):
        return paired_sum(weights, state.perturbation)

    def _update_from_statistics(self, key, state, params, stats, aux, fitness, best_row):
        sigma = self.sigma(state, params)
        grad = stats / (2.0 * (self.population_size // 2) * sigma**2)
        state, metrics = self._apply_gradient_row(state, grad, best_row, fitness, sigma)
        return self._advance(state), metrics

    def _ask(self, key, state, params):
        return self._sample(key, state, params, self.population_size)

    def _tell(self, key, state, x, fitness, params):
        return tell_by_statistics(self, key, state, x, fitness, params)


class PersistentES(OnlineES):
    """Persistent ES (Vicol et al., 2021).

    Args:
        population_size: even (antithetic pairs).
        solution / num_dims: template pytree (initial mean) or flat dimension.
        optimizer: optax transformation, default ``optax.adam(0.01)``.
        sigma_init: perturbation std, default 0.1; or sigma_schedule ``generation -> sigma``.
        fitness_shaping: default identity (the estimator is unbiased for raw losses).
        T: total inner steps of the unrolled computation (default 100); K: steps per partial
            unroll (default 10); ``T % K == 0``.
    """

    name = "persistent_es"

    def _sample(self, key, state, params, rows):
        sigma = self.sigma(state, params)
        eps = sigma * rng.normal(key, (rows // 2, self.num_dims), jnp.float32)
        accum = jnp.where(state.inner_step == 0, 0.0, state.perturbation) + eps
        x = jnp.concatenate([state.mean + eps, state.mean - eps])
        return x, state.replace(perturbation=accum)
