"""Gradientless descent (Golovin, Karro, Kochanski, Lee, Song & Zhang 2019,
"Gradientless Descent: High-Dimensional Zeroth-Order Optimization", Algorithm 1).

Each generation searches ``K + 1 = population_size`` radii spaced geometrically between
``radius_max`` (R) and ``radius_min`` (r): candidate ``k`` is ``x + v_k`` with ``v_k`` uniform in
the ball of radius ``r_k = R (r/R)^(k/K)``. The next iterate is the best of ``x`` and all
candidates (elitist, monotone). The paper's ``K = log2(R/r)`` halvings correspond to choosing
``population_size = K + 1`` with ``r = R 2^-K``; here the spacing follows from R, r and the
population size, so R and r can be vmapped. Defaults R = 1, r = 1e-6.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.lax import Precision

from evotensor.core import rng
from evotensor.core.checks import ArgumentError, check_spread
from evotensor.core.pytree import pytree_dataclass
from evotensor.es.core.base import InvalidAsInfStrategy, float32_params


@pytree_dataclass
class GLDParams:
    """Dynamic hyperparameters.

    Attributes:
        radius_max: largest search radius R (default 1.0).
        radius_min: smallest search radius r (default 1e-6).
    """

    radius_max: jax.Array
    radius_min: jax.Array


@pytree_dataclass
class GLDState:
    """``best_solution [dims]`` (the iterate x_t), ``best_fitness []``, ``generation []``."""

    best_solution: jax.Array
    best_fitness: jax.Array
    generation: jax.Array


def sample_ball(key: jax.Array, shape: tuple[int, int], dtype=jnp.float32) -> jax.Array:
    """Points uniform in the unit ball: ``[n, d]`` (direction uniform on the sphere, radius ``U^(1/d)``)."""
    k_dir, k_rad = jax.random.split(key)
    g = rng.normal(k_dir, shape, dtype)
    # a matvec keeps vmapped runs bitwise equal (XLA:CPU); HIGHEST: exact float32 on GPUs, whose
    # default float32 matmul precision is TF32
    norm = jnp.sqrt(jnp.matmul(g**2, jnp.ones((shape[1], 1), dtype), precision=Precision.HIGHEST))
    direction = g / jnp.maximum(norm, jnp.finfo(dtype).tiny)
    u = rng.uniform(k_rad, (shape[0], 1), dtype)
    return direction * u ** (1.0 / shape[1])


class GLD(InvalidAsInfStrategy):
    """Gradientless descent with geometric radius search.

    Args:
        population_size: number of radii searched per generation (``K + 1``).
        solution: template pytree (starting point), exclusive with ``num_dims``.
        num_dims: flat dimension.
        radius_max, radius_min: defaults of R and r (also in params).

    Example::

        gld = GLD(16, num_dims=10)
        state = gld.init(jax.random.key(0))
        x, state = gld.ask(jax.random.key(1), state)           # x: [16, 10]
        state, metrics = gld.tell(jax.random.key(2), state, x, (x**2).sum(1))
    """

    name = "gld"
    mean_field = "best_solution"  # the current iterate

    def __init__(self, population_size, solution=None, num_dims=None, *, radius_max=1.0, radius_min=1e-6):
        super().__init__(population_size, solution, num_dims)
        self.radius_max = check_spread(radius_max, "radius_max")
        self.radius_min = check_spread(radius_min, "radius_min")
        if self.radius_min > self.radius_max:
            raise ArgumentError(f"radius_min ({radius_min}) must be <= radius_max ({radius_max})")

    def default_params(self) -> GLDParams:
        return float32_params(GLDParams, self)

    def radii(self, params: GLDParams) -> jax.Array:
        """``[pop]`` radii ``R (r/R)^(k/K)``, largest first."""
        k = jnp.arange(self.population_size, dtype=jnp.float32) / max(self.population_size - 1, 1)
        return params.radius_max * (params.radius_min / params.radius_max) ** k

    def _init(self, key, params):
        return GLDState(**self._initial_best_fields())

    def _ask(self, key, state, params):
        v = sample_ball(key, (self.population_size, self.num_dims)) * self.radii(params)[:, None]
        return state.best_solution + v, state

    def _tell(self, key, state, x, fitness, params):
        best, metrics = self._next_best_fields(state, x, fitness)
        return GLDState(**best), metrics
