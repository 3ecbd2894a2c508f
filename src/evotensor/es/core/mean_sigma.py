"""What the mean-and-step-size strategies (MA-ES, LM-MA-ES, Sep-CMA-ES, Rm-ES; the restart wrappers for
the constructor checks) share.

MA-ES and LM-MA-ES search with ``x = mean + sigma d`` where ``d`` is a transformed standard normal
``z``; ``tell`` ranks the ``z`` drawn by the last ``ask`` (kept in the state) with positive log weights
on the best half, accumulates an evolution path and adapts ``sigma`` multiplicatively. Constants are
computed in float64 and stored in the float dtype of the run (float32, or float64 under x64 as in the
pycma reference tests). :class:`MeanSigmaStrategy` holds the common constructor (default population
size, ``sigma_init``, ``mean_init``), params, state fields and bookkeeping; each strategy keeps its own
update equations. Sep-CMA-ES and Rm-ES keep no ``z`` and use only the constructor, the shared params
and :meth:`MeanSigmaStrategy._advance`.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core import rng
from evotensor.core.checks import ArgumentError, check_spread
from evotensor.core.numerics import exact_sum
from evotensor.es.core.base import (
    VectorStrategy,
    check_finite_template,
    float_dtype,
    population_size_or_default,
    update_best,
)


def expected_norm(num_dims: int) -> float:
    """``E|N(0, I_n)|`` approximated as ``sqrt(n) (1 - 1/(4n) + 1/(21 n^2))`` (Hansen's tutorial)."""
    n = num_dims
    return math.sqrt(n) * (1 - 1 / (4 * n) + 1 / (21 * n**2))


def positive_log_weights(population_size: int) -> np.ndarray:
    """``[pop]`` weights ``ln(mu+1/2) - ln i`` on the best ``mu = pop // 2``, zero after; sum 1."""
    mu = population_size // 2
    i = np.arange(1, population_size + 1)
    w = np.where(i <= mu, np.log(mu + 0.5) - np.log(i), 0.0)
    return w / w.sum()


def check_sigma_init(sigma_init: Any) -> float:
    """A validated initial step size: positive, finite and at most ``1e15``
    (:func:`evotensor.core.checks.check_spread`)."""
    return check_spread(sigma_init, "sigma_init")


def check_mean_init(mean_init: Any, default: Any, num_dims: int) -> np.ndarray:
    """The initial mean ``[num_dims]`` in float64: ``mean_init``, or ``default`` when it is ``None``."""
    mean = np.asarray(default if mean_init is None else mean_init, np.float64)
    if mean.shape != (num_dims,):
        raise ArgumentError(f"mean_init must have shape ({num_dims},), got {mean.shape}")
    check_finite_template(mean, "mean_init")
    return mean


def as_float(value: Any) -> jax.Array:
    """``value`` (a float64 constant) in the run's float dtype."""
    return jnp.asarray(value, float_dtype())


def cumulate(path: jax.Array, c: jax.Array, mu_eff: jax.Array, step: jax.Array) -> jax.Array:
    """Evolution-path update ``(1 - c) path + sqrt(mu_eff c (2 - c)) step`` (broadcasting)."""
    return (1 - c) * path + jnp.sqrt(mu_eff * c * (2 - c)) * step


def step_sigma(sigma: jax.Array, log_step: jax.Array, params: Any) -> jax.Array:
    """``sigma exp(log_step)`` with ``log_step`` clipped to ``[-1, 1]`` and the result to
    ``[params.sigma_min, params.sigma_max]`` (float32 guards far past convergence)."""
    return jnp.clip(sigma * jnp.exp(jnp.clip(log_step, -1.0, 1.0)), params.sigma_min, params.sigma_max)


class MeanSigmaStrategy(VectorStrategy):
    """Base of MA-ES, LM-MA-ES, Sep-CMA-ES and Rm-ES.

    Params have at least ``mean_init [n]``, ``sigma_init``, ``weights [pop]``, ``mu_eff``, ``sigma_min``
    and ``sigma_max``; states at least ``mean [n]``, ``sigma []``, ``generation []`` int32,
    ``best_solution [n]`` and ``best_fitness []``, and ``z [pop, n]`` (the last draw) for the members
    that use :meth:`_shared_state`, :meth:`_sample_z` and :meth:`_ranked`.

    Args:
        population_size: ``None`` -> ``4 + floor(3 ln n)``.
        solution / num_dims: the solution template or flat dimension (exactly one).
        sigma_init: initial step size (> 0, finite; default 1.0).
        mean_init: optional initial mean ``[n]`` (default: the template's values, or 0).

    A member with arguments of its own takes them and passes these on (``**options``).
    """

    min_population_size = 2

    def __init__(self, population_size=None, solution=None, num_dims=None, *, sigma_init=1.0, mean_init=None):
        super().__init__(population_size_or_default(population_size, solution, num_dims), solution, num_dims)
        self.sigma_init = check_sigma_init(sigma_init)
        self._mean_init = check_mean_init(mean_init, self.initial_mean(), self.num_dims)

    def _shared_params(self, weights: np.ndarray) -> dict[str, jax.Array]:
        """The params fields every member has, for recombination ``weights [pop]`` (float64)."""
        return dict(
            mean_init=as_float(self._mean_init),
            sigma_init=as_float(self.sigma_init),
            weights=as_float(weights),
            mu_eff=as_float(1 / np.sum(weights**2)),
            sigma_min=as_float(1e-20),
            sigma_max=as_float(1e20),
        )

    def _shared_state(self, params: Any) -> dict[str, jax.Array]:
        """The state fields every member has, at generation 0."""
        mean = jnp.asarray(params.mean_init)
        return dict(
            mean=mean,
            sigma=jnp.asarray(params.sigma_init, mean.dtype),
            z=jnp.zeros((self.population_size, mean.shape[0]), mean.dtype),
            generation=jnp.zeros((), jnp.int32),
            best_solution=mean,
            best_fitness=jnp.asarray(jnp.inf, mean.dtype),
        )

    def _sample_z(self, key: jax.Array, state: Any) -> jax.Array:
        """``[pop, n]`` standard normal draws in the state's dtype."""
        z = rng.normal(key, (self.population_size, self.num_dims), state.mean.dtype)
        return z + 0 * state.sigma  # batched with the state under vmap (see core.cma.sample)

    def _ranked(self, state: Any, fitness: jax.Array, params: Any):
        """``(order [pop], weights [pop], z sorted best first [pop, n], <z>_w [n])``."""
        order = jnp.argsort(fitness, stable=True)
        w = params.weights.astype(state.mean.dtype)
        zs = state.z[order]
        return order, w, zs, exact_sum(w[:, None] * zs, axis=0)

    def _advance(self, state: Any, x: jax.Array, fitness: jax.Array, **changes: jax.Array):
        """``(state with changes, best-so-far and generation + 1, metrics)``."""
        dtype = state.mean.dtype
        best_x, best_f = update_best(state.best_solution, state.best_fitness, x.astype(dtype), fitness)
        new = state.replace(
            **changes,
            generation=state.generation + 1,
            best_solution=best_x,
            best_fitness=best_f.astype(dtype),
        )
        return new, {"sigma": new.sigma}
