"""Cross-entropy method for continuous optimization (Rubinstein 1999; de Boer, Kroese, Mannor &
Rubinstein 2005, "A Tutorial on the Cross-Entropy Method", sec. 4; noisy variant of Szita &
Lőrincz 2006).

A diagonal Gaussian ``N(mean, diag(std^2))`` is refitted to the best ``elite_ratio`` fraction of
each generation (maximum-likelihood mean and standard deviation of the elite), with smoothing::

    mean <- (1 - alpha) mean + alpha mean_elite
    std  <- (1 - beta)  std  + beta  sqrt(var_elite + extra_noise^2)

``alpha = beta = 0.7`` lie in the range recommended by de Boer et al. (smoothing 0.4–0.9);
``elite_ratio = 0.1`` is their usual rarity parameter rho. ``extra_noise`` (default 0) is Szita &
Lőrincz's constant noise injection against premature collapse. At least two elites are used so the
variance estimate is defined. NaN/inf fitness ranks last.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.lax import Precision

from evotensor.core.checks import check_fraction, check_spread
from evotensor.core.pytree import pytree_dataclass
from evotensor.es.core.diagonal_gaussian import DiagonalGaussianStrategy


@pytree_dataclass
class CEMParams:
    """Dynamic hyperparameters.

    Attributes:
        elite_ratio: fraction of the population refitted (rho, default 0.1; at least 2 elites).
        mean_smoothing: alpha (default 0.7).
        std_smoothing: beta (default 0.7).
        extra_noise: standard deviation added in quadrature to the elite spread (default 0.0).
        std_init: initial standard deviation (default 1.0).
    """

    elite_ratio: jax.Array
    mean_smoothing: jax.Array
    std_smoothing: jax.Array
    extra_noise: jax.Array
    std_init: jax.Array


@pytree_dataclass
class CEMState:
    """``mean [dims]``, ``std [dims]``, ``best_solution [dims]``, ``best_fitness []``, ``generation []``."""

    mean: jax.Array
    std: jax.Array
    best_solution: jax.Array
    best_fitness: jax.Array
    generation: jax.Array


def elite_weights(fitness: jax.Array, elite_ratio: jax.Array) -> jax.Array:
    """``[pop]`` weights ``1/k`` on the ``k = max(2, floor(rho * pop))`` best entries, 0 elsewhere."""
    n = fitness.shape[0]
    k = jnp.clip(jnp.floor(elite_ratio * n).astype(jnp.int32), 2, n)
    rank = jnp.zeros(n, jnp.int32).at[jnp.argsort(fitness, stable=True)].set(jnp.arange(n, dtype=jnp.int32))
    return jnp.where(rank < k, 1.0 / k, 0.0).astype(jnp.float32)


class CEM(DiagonalGaussianStrategy):
    """Cross-entropy method with a diagonal Gaussian.

    Args:
        population_size: samples per generation (>= 2).
        solution: template pytree (initial mean), exclusive with ``num_dims`` (mean 0).
        num_dims: flat dimension.
        elite_ratio, mean_smoothing, std_smoothing, extra_noise, std_init: params defaults.

    Example::

        cem = CEM(50, num_dims=10)
        state = cem.init(jax.random.key(0))
        x, state = cem.ask(jax.random.key(1), state)           # x: [50, 10]
        state, metrics = cem.tell(jax.random.key(2), state, x, (x**2).sum(1))
    """

    name = "cem"
    params_cls = CEMParams
    state_cls = CEMState

    def __init__(
        self,
        population_size,
        solution=None,
        num_dims=None,
        *,
        elite_ratio=0.1,
        mean_smoothing=0.7,
        std_smoothing=0.7,
        extra_noise=0.0,
        **options,
    ):
        super().__init__(population_size, solution, num_dims, **options)
        self.elite_ratio = check_fraction(elite_ratio, "elite_ratio")
        self.mean_smoothing = check_fraction(mean_smoothing, "mean_smoothing")
        self.std_smoothing = check_fraction(std_smoothing, "std_smoothing")
        self.extra_noise = check_spread(extra_noise, "extra_noise", allow_zero=True)

    def _refit(self, state, x, fitness, params):
        w = elite_weights(fitness, params.elite_ratio)
        # weighted sums as matvecs: XLA keeps a dot's summation order under vmap, whereas a
        # `sum(axis=0)` reduction may be vectorized differently and break bitwise vmap equality;
        # HIGHEST: exact float32 on GPUs (TF32 would round x itself to ~3 digits)
        elite_mean = jnp.matmul(w, x, precision=Precision.HIGHEST)
        elite_var = jnp.matmul(w, (x - elite_mean) ** 2, precision=Precision.HIGHEST)
        mean = (1.0 - params.mean_smoothing) * state.mean + params.mean_smoothing * elite_mean
        std = (1.0 - params.std_smoothing) * state.std + params.std_smoothing * jnp.sqrt(
            elite_var + params.extra_noise**2
        )
        return mean, std
