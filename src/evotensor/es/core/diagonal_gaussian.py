"""What the diagonal-Gaussian strategies (CEM, Discovered ES) share.

Both search with ``N(mean, diag(std^2))``: the mean starts at the template's values, every
coordinate's standard deviation at ``std_init``, and ``ask`` samples ``mean + std * N(0, I)``. They
differ only in how ``tell`` refits ``(mean, std)`` to the ranked samples (:meth:`_refit`).
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from evotensor.core import rng
from evotensor.core.checks import check_spread
from evotensor.es.core.base import InvalidAsInfStrategy, float32_params


class DiagonalGaussianStrategy(InvalidAsInfStrategy):
    """Base of strategies whose state is ``mean [dims]``, ``std [dims]``, ``best_solution [dims]``,
    ``best_fitness []`` and ``generation []`` (``state_cls``) and whose params (``params_cls``) include
    ``std_init``, each params field stored on the strategy by the constructor.

    Args:
        population_size: samples per generation (>= 2).
        solution: template pytree (initial mean), exclusive with ``num_dims`` (mean 0).
        num_dims: flat dimension.
        std_init: initial standard deviation of every coordinate (> 0, default 1.0).

    A member with arguments of its own takes them and passes these on (``**options``).
    """

    # an all-invalid generation would still pull the distribution towards arbitrary candidates
    freeze_on_all_invalid = True
    min_population_size = 2
    params_cls: ClassVar[type]
    state_cls: ClassVar[type]

    def __init__(self, population_size, solution=None, num_dims=None, *, std_init=1.0):
        super().__init__(population_size, solution, num_dims)
        self.std_init = check_spread(std_init, "std_init")

    def default_params(self) -> Any:
        return float32_params(self.params_cls, self)

    @abc.abstractmethod
    def _refit(
        self, state: Any, x: jax.Array, fitness: jax.Array, params: Any
    ) -> tuple[jax.Array, jax.Array]:
        """New ``(mean [dims], std [dims])`` from samples ``x [pop, dims]`` and their minimized,
        finite ``fitness [pop]``."""

    def _init(self, key, params):
        return self.state_cls(
            mean=self.initial_mean(),
            std=jnp.full((self.num_dims,), params.std_init, jnp.float32),
            **self._initial_best_fields(),
        )

    def _ask(self, key, state, params):
        z = rng.normal(key, (self.population_size, self.num_dims), jnp.float32)
        return state.mean + state.std * z, state

    def _tell(self, key, state, x, fitness, params):
        mean, std = self._refit(state, x, fitness, params)
        best, metrics = self._next_best_fields(state, x, fitness)
        return self.state_cls(mean=mean, std=std, **best), {**metrics, "std_mean": std.mean()}
