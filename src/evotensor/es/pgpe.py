"""PGPE: policy gradients with parameter-based exploration (Sehnke et al., 2010), ClipUp by default.

Sehnke, Osendorfer, Rückstieß, Graves, Peters, Schmidhuber (2010), "Parameter-exploring policy
gradients", Neural Networks 23(4). Toklu, Liskowski, Srivastava (2020), "ClipUp: a simple and
powerful optimizer for distribution-based policy evolution", PPSN XVI.

Symmetric sampling ``x = mean +/- eps``, ``eps ~ N(0, diag(sigma^2))``. With weights ``w``
(shaped minimized fitness, lower = better), ``h = pop / 2`` pairs and baseline ``b = mean(w)``::

    g_mean  = 1/h * sum_i (w+_i - w-_i) / 2 * eps_i                       [dims]
    g_sigma = 1/h * sum_i ((w+_i + w-_i) / 2 - b) * (eps_i^2 - sigma^2) / sigma

``g_mean`` goes to the optax optimizer (ClipUp by default) and sigma descends ``g_sigma`` with
step ``sigma_learning_rate``, its relative change clipped to ``sigma_max_change`` (ClipUp paper /
EvoTorch defaults 0.1 and 0.2). For a linear ``f`` and identity shaping ``E[g_mean] = sigma^2 * a``
— PGPE's gradient is w.r.t. the mean in its own (un-normalized) parameterization.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from jax.lax import Precision

from evotensor.core import rng
from evotensor.core.checks import MAX_SPREAD, ArgumentError, check_fraction, check_real, check_spread
from evotensor.core.pytree import pytree_dataclass
from evotensor.es.core.base import float32_params
from evotensor.es.core.gradient_es import OptimizerStrategy, tell_by_statistics, track_best_row
from evotensor.es.core.optimizers import clipup, safe_norm


@pytree_dataclass
class PGPEState:
    """Attributes: ``mean [dims]``, ``sigma [dims]``, ``opt_state``, ``generation []``,
    ``best_solution [dims]``, ``best_fitness []``."""

    mean: jax.Array
    sigma: jax.Array
    opt_state: Any
    generation: jax.Array
    best_solution: jax.Array
    best_fitness: jax.Array


@pytree_dataclass
class PGPEParams:
    """Dynamic hyperparameters (vmappable).

    Attributes:
        sigma_init: ``[]`` initial std of every coordinate (default 0.1).
        sigma_learning_rate: ``[]`` step of the sigma update (0.1, ClipUp paper).
        sigma_max_change: ``[]`` largest relative change of sigma per generation (0.2, ClipUp paper).
        sigma_min: ``[]`` floor that keeps float32 sigma from underflowing to 0 (1e-20).
    """

    sigma_init: jax.Array
    sigma_learning_rate: jax.Array
    sigma_max_change: jax.Array
    sigma_min: jax.Array


def pgpe_sums(
    x: jax.Array, weights: jax.Array, baseline: jax.Array, sigma: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """The pair sums behind PGPE's gradients (divide by the number of pairs ``pop / 2``).

    Args:
        x: ``[rows, dims]``, rows ``i`` and ``i + rows/2`` are ``mean + eps_i`` and ``mean - eps_i``.
        weights: ``[rows]`` (lower = better). baseline: ``[]`` the mean weight of the *whole*
            population. sigma: ``[dims]``.

    Returns:
        ``(sum_i (w+_i - w-_i)/2 eps_i, sum_i ((w+_i + w-_i)/2 - b) (eps_i^2 - sigma^2)/sigma)``,
        both ``[dims]``; sums over rows, so the sharded tell adds the shards' sums.
    """
    h = x.shape[0] // 2
    eps = (x[:h] - x[h:]) / 2.0  # [h, dims]
    w_plus, w_minus = weights[:h], weights[h:]
    # HIGHEST: exact float32 on GPUs, whose default float32 matmul precision is TF32
    sum_mean = jnp.matmul((w_plus - w_minus) / 2.0, eps, precision=Precision.HIGHEST)
    safe_sigma = jnp.maximum(sigma, jnp.finfo(jnp.float32).tiny)
    s = (eps**2 - sigma**2) / safe_sigma  # [h, dims]
    sum_sigma = jnp.matmul((w_plus + w_minus) / 2.0 - baseline, s, precision=Precision.HIGHEST)
    return sum_mean, sum_sigma


def pgpe_gradients(
    x: jax.Array, weights: jax.Array, mean: jax.Array, sigma: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """PGPE's symmetric-sampling gradients.

    Args:
        x: ``[pop, dims]``, rows ``i`` and ``i + pop/2`` are ``mean + eps_i`` and ``mean - eps_i``.
        weights: ``[pop]`` (lower = better). mean: ``[dims]``. sigma: ``[dims]``.

    Returns:
        ``(g_mean [dims], g_sigma [dims])`` as in the module docstring.
    """
    h = x.shape[0] // 2
    sum_mean, sum_sigma = pgpe_sums(x, weights, jnp.mean(weights), sigma)
    return sum_mean / h, sum_sigma / h


class PGPE(OptimizerStrategy):
    """PGPE with ClipUp (Sehnke et al., 2010; Toklu et al., 2020).

    Args:
        population_size: even number of samples (symmetric pairs).
        solution / num_dims: template pytree (initial mean) or flat dimension.
        optimizer: optax transformation for the mean; default ``clipup(learning_rate=0.15)``
            (``max_speed = 0.3``; the ClipUp paper recommends step size = max_speed / 2).
        sigma_init: initial std (default 0.1); sigma_learning_rate: 0.1; sigma_max_change: 0.2.
        fitness_shaping: ``[pop] -> [pop]`` weights, default centered ranks (ClipUp paper).

    Sigma is adapted by PGPE's own rule, so there is no ``sigma_schedule``.
    """

    name = "pgpe"
    mirrored_sampling = "PGPE's symmetric sampling"

    def __init__(
        self,
        population_size,
        solution=None,
        num_dims=None,
        *,
        sigma_init: float = 0.1,
        sigma_learning_rate: float = 0.1,
        sigma_max_change: float = 0.2,
        sigma_min: float = 1e-20,
        **options,
    ):
        super().__init__(population_size, solution, num_dims, **options)
        self.sigma_init = check_spread(sigma_init, "sigma_init")
        self.sigma_learning_rate = check_real(sigma_learning_rate, "sigma_learning_rate", 0.0, MAX_SPREAD)
        self.sigma_max_change = check_fraction(sigma_max_change, "sigma_max_change", allow_zero=True)
        if self.sigma_max_change == 1.0:  # a change of -100% would set sigma to 0
            raise ArgumentError(f"sigma_max_change must be in [0, 1), got {sigma_max_change!r}")
        self.sigma_min = check_spread(sigma_min, "sigma_min")

    def default_optimizer(self) -> optax.GradientTransformation:
        """``clipup(learning_rate=0.15)`` (``max_speed = 0.3``; the ClipUp paper recommends step size =
        max_speed / 2)."""
        return clipup(learning_rate=0.15)

    def default_params(self) -> PGPEParams:
        return float32_params(PGPEParams, self)

    def _init(self, key, params):
        return PGPEState(
            **self._base_fields(), sigma=jnp.full((self.num_dims,), params.sigma_init, jnp.float32)
        )

    # -- population-sharding hooks (see evotensor.es.core.sharding) ------------------------------------
    shard_pairs = True
    shard_state_fields: tuple[str, ...] = ()

    def _sample(self, key, state, params, rows):
        z = rng.normal(key, (rows // 2, self.num_dims), jnp.float32)
        eps = state.sigma * z
        return jnp.concatenate([state.mean + eps, state.mean - eps]), state

    def _member_weights(self, state, fitness, params):
        w = jnp.asarray(self.fitness_shaping(fitness), jnp.float32)
        return w, jnp.mean(w)  # the baseline needs every weight: computed before the split

    def _row_statistics(self, state, params, x, weights, baseline):
        return pgpe_sums(x, weights, baseline, state.sigma)

    def _update_from_statistics(self, key, state, params, stats, aux, fitness, best_row):
        h = self.population_size // 2
        g_mean, g_sigma = stats[0] / h, stats[1] / h
        g_mean = jnp.where(jnp.isfinite(g_mean), g_mean, 0.0)
        g_sigma = jnp.where(jnp.isfinite(g_sigma), g_sigma, 0.0)
        updates, opt_state = self.optimizer.update(g_mean, state.opt_state, state.mean)
        mean = optax.apply_updates(state.mean, updates)
        finite = jnp.all(jnp.isfinite(mean))
        mean = jnp.where(finite, mean, state.mean)
        opt_state = jax.tree_util.tree_map(lambda n, o: jnp.where(finite, n, o), opt_state, state.opt_state)
        # descend g_sigma, relative change clipped to +/- sigma_max_change
        sigma = state.sigma - params.sigma_learning_rate * g_sigma
        lo = state.sigma * (1.0 - params.sigma_max_change)
        hi = state.sigma * (1.0 + params.sigma_max_change)
        sigma = jnp.maximum(jnp.clip(sigma, lo, hi), params.sigma_min)
        state, metrics = track_best_row(state, best_row, fitness)
        metrics.update(sigma=jnp.mean(sigma), grad_norm=safe_norm(g_mean))
        state = state.replace(mean=mean, sigma=sigma, opt_state=opt_state, generation=state.generation + 1)
        return state, metrics

    def _ask(self, key, state, params):
        return self._sample(key, state, params, self.population_size)

    def _tell(self, key, state, x, fitness, params):
        return tell_by_statistics(self, key, state, x, fitness, params)
