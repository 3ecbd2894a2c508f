"""What the natural evolution strategies xNES and SNES share (Wierstra et al., 2014, "Natural
evolution strategies", JMLR 15): the constructor (default population size ``4 + floor(3 ln d)``,
``sigma_init``, rank-based fitness shaping into utilities) and the fields their states start with.

Their updates are closed-form natural-gradient steps with learning rates in ``params``, so they
take no optax optimizer. Shaped values in this package are *weights* with lower = better; the
utilities of the NES papers (higher = better) are their negation (:meth:`NaturalES._utilities`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from evotensor.core.checks import check_spread
from evotensor.core.fitness_shaping import nes_weights
from evotensor.es.core.base import VectorStrategy, population_size_or_default
from evotensor.es.core.gradient_es import FitnessShaping, check_shaping


class NaturalES(VectorStrategy):
    """Base of :class:`~evotensor.es.XNES` and :class:`~evotensor.es.SNES`.

    Args:
        population_size: default ``4 + floor(3 ln d)`` (Wierstra et al., 2014, Table 1).
        solution / num_dims: template pytree (initial mean) or flat dimension.
        sigma_init: initial step size, > 0 (default 1.0).
        fitness_shaping: ``[pop] -> weights [pop]`` (lower = better); default
            :func:`~evotensor.core.fitness_shaping.nes_weights`, minus the NES rank utilities.
    """

    min_population_size = 2

    def __init__(
        self,
        population_size: int | None = None,
        solution: Any = None,
        num_dims: int | None = None,
        *,
        sigma_init: float = 1.0,
        fitness_shaping: FitnessShaping = nes_weights,
    ):
        super().__init__(population_size_or_default(population_size, solution, num_dims), solution, num_dims)
        self._sigma_init = check_spread(sigma_init, "sigma_init")
        self.fitness_shaping = check_shaping(fitness_shaping)

    def _utilities(self, fitness: jax.Array) -> jax.Array:
        """``[pop]`` utilities (higher = better): minus the shaped weights, float32."""
        return -jnp.asarray(self.fitness_shaping(fitness), jnp.float32)
