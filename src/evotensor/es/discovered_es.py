"""Discovered evolution strategy (DES; Lange, Schaul, Chen, Zahavy, Dalibard, Lu, Singh &
Flennerhag 2023, "Discovering Evolution Strategies via Meta-Black-Box Optimization", ICLR).

The paper meta-learns an attention-based ES (LES) and then reverse-engineers it into an explicit
rule, DES, which this module implements. (The meta-learned LES network weights are a trained
checkpoint, not numbers published in the paper, so LES itself is not shipped.) With a diagonal
Gaussian ``N(mean, diag(std^2))`` and candidates ranked ``r = 0`` (best) … ``N - 1``::

    w_r  = softmax_r( -20 * sigmoid( temperature * (r / (N - 1) - 1/2) ) )      (recombination weights)
    mean <- mean + lr_mean * sum_r w_r (x_r - mean)
    std  <- (1 - lr_std) std + lr_std * sqrt( sum_r w_r (x_r - mean)^2 )           (old mean)

Constants: ``temperature = 12.5``, the factor 20, ``lr_mean = 1``, ``lr_std = 0.1`` and
``std_init = 1`` are those of the authors' reference implementation (evosax ``DiscoveredES``, by the
paper's first author; EvoX's ``DES`` uses the same temperature); they have not been checked against the
paper's text, which gives the functional form. All are dynamic params, so they can be vmapped or
meta-optimized.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.lax import Precision

from evotensor.core.checks import check_fraction, check_real
from evotensor.core.pytree import pytree_dataclass
from evotensor.es.core.diagonal_gaussian import DiagonalGaussianStrategy


@pytree_dataclass
class DiscoveredESParams:
    """Dynamic hyperparameters (defaults of the authors' reference implementation).

    Attributes:
        temperature: sharpness of the sigmoid over normalized ranks (default 12.5).
        lr_mean: mean learning rate, in ``(0, 1]`` (default 1.0).
        lr_std: standard-deviation learning rate, in ``(0, 1]`` (default 0.1; above 1 the
            interpolation could make ``std`` negative).
        std_init: initial standard deviation (default 1.0).
    """

    temperature: jax.Array
    lr_mean: jax.Array
    lr_std: jax.Array
    std_init: jax.Array


@pytree_dataclass
class DiscoveredESState:
    """``mean [dims]``, ``std [dims]``, ``best_solution [dims]``, ``best_fitness []``, ``generation []``."""

    mean: jax.Array
    std: jax.Array
    best_solution: jax.Array
    best_fitness: jax.Array
    generation: jax.Array


def des_weights(population_size: int, temperature: jax.Array) -> jax.Array:
    """``[pop]`` DES recombination weights by rank (index 0 = best); they sum to 1."""
    centered = jnp.arange(population_size, dtype=jnp.float32) / (population_size - 1) - 0.5
    return jax.nn.softmax(-20.0 * jax.nn.sigmoid(temperature * centered))


class DiscoveredES(DiagonalGaussianStrategy):
    """The closed-form discovered ES of Lange et al. (2023).

    Args:
        population_size: samples per generation (>= 2).
        solution: template pytree (initial mean), exclusive with ``num_dims`` (mean 0).
        num_dims: flat dimension.
        temperature, lr_mean, lr_std, std_init: params defaults.

    Example::

        des = DiscoveredES(16, num_dims=10)
        state = des.init(jax.random.key(0))
        x, state = des.ask(jax.random.key(1), state)           # x: [16, 10]
        state, metrics = des.tell(jax.random.key(2), state, x, (x**2).sum(1))
    """

    name = "discovered_es"
    params_cls = DiscoveredESParams
    state_cls = DiscoveredESState

    def __init__(
        self,
        population_size,
        solution=None,
        num_dims=None,
        *,
        temperature=12.5,
        lr_mean=1.0,
        lr_std=0.1,
        **options,
    ):
        super().__init__(population_size, solution, num_dims, **options)
        self.temperature = check_real(temperature, "temperature", 0.0)
        self.lr_mean = check_fraction(lr_mean, "lr_mean")
        self.lr_std = check_fraction(lr_std, "lr_std")

    def _refit(self, state, x, fitness, params):
        order = jnp.argsort(fitness, stable=True)
        w = des_weights(self.population_size, params.temperature)
        step = x[order] - state.mean
        # HIGHEST: exact float32 on GPUs, whose default float32 matmul precision is TF32
        mean = state.mean + params.lr_mean * jnp.matmul(w, step, precision=Precision.HIGHEST)
        var = jnp.matmul(w, step**2, precision=Precision.HIGHEST)
        std = (1.0 - params.lr_std) * state.std + params.lr_std * jnp.sqrt(var)
        return mean, std
