"""What the online (truncated-unroll) evolution strategies share: Persistent ES (Vicol et al. 2021)
and Noise-Reuse ES (Li et al. 2023), see :mod:`evotensor.es.persistent_es` and
:mod:`evotensor.es.noise_reuse_es`.

Both are antithetic ES for objectives unrolled in partial unrolls of ``K`` out of ``T`` inner
steps, one partial unroll per generation. Each pair keeps a perturbation row through the truncation
window (PES: the sum of its perturbations; NRES: the one it reuses) and the estimate is ::

    g = 1 / (2 N sigma^2) * sum_i perturbation_i * (w(mean + eps_i) - w(mean - eps_i))    N = pop / 2

``state.inner_step`` (0, K, 2K, ..., T-K) tells the problem where in the unroll the generation is.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.lax import Precision

from evotensor.core.checks import ArgumentError, check_int
from evotensor.core.pytree import pytree_dataclass
from evotensor.es.core.gradient_es import GradientES, identity_shaping, tell_by_statistics


@pytree_dataclass
class OnlineESState:
    """State of PES / NRES.

    Attributes:
        mean, opt_state, generation, best_solution, best_fitness: as
            :class:`~evotensor.es.core.gradient_es.GradientESState`.
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


class OnlineES(GradientES):
    """Base of the online (truncated-unroll) ES, PES and NRES: antithetic pairs whose perturbation
    (one ``[dims]`` row per pair, ``state.perturbation``) lives across the ``T / K`` partial unrolls
    of a truncation window; subclasses write ``_sample`` (how the window's perturbation is drawn and
    kept).

    Args:
        population_size: even (antithetic pairs).
        T: total inner steps of the unrolled computation (static, default 100); K: steps per partial
            unroll (static, default 10); ``T % K == 0``.
        solution, num_dims, optimizer, sigma_init, sigma_schedule, fitness_shaping: as
            :class:`~evotensor.es.core.gradient_es.GradientES` (defaults: Adam(0.01), sigma 0.1,
            identity shaping).
    """

    default_sigma_init = 0.1
    default_fitness_shaping = staticmethod(identity_shaping)

    def __init__(
        self, population_size, solution=None, num_dims=None, *, T: int = 100, K: int = 10, **options
    ):
        super().__init__(population_size, solution, num_dims, **options)
        self.T, self.K = check_int(T, "T"), check_int(K, "K")
        if T % K:
            raise ArgumentError(
                f"T (total inner steps) must be a multiple of K (unroll length), got T={T}, K={K}"
            )

    @property
    def mirrored_sampling(self) -> str:
        """What needs an even population size (named in the error message)."""
        return f"{type(self).__name__}'s antithetic sampling"

    def _init(self, key, params):
        return OnlineESState(
            **self._base_fields(),
            perturbation=jnp.zeros((self.population_size // 2, self.num_dims), jnp.float32),
            inner_step=jnp.zeros((), jnp.int32),
        )

    def _advance(self, state: OnlineESState) -> OnlineESState:
        step = state.inner_step + self.K
        return state.replace(inner_step=jnp.where(step >= self.T, 0, step))

    # -- population-sharding hooks (see evotensor.es.core.sharding) ------------------------------------
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
