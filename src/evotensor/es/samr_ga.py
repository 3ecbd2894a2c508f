"""Self-adaptive mutation-rate GA (SAMR-GA; Clune, Misevic, Ofria, Lenski, Elena & Sanjuán 2008,
"Natural selection fails to optimize mutation rates for long-term adaptation on rugged fitness
landscapes").

Every individual carries its own mutation step size. A child inherits its parent's step size,
perturbed log-uniformly, ``std_child = std_parent * std_meta^U(-1, 1)`` (clipped to
``[std_min, std_max]``), and then mutates its genes with it: ``x_child = x_parent +
std_child * N(0, I)``. Parents are drawn uniformly from the best ``elite_ratio`` of the archive and
survival is elitist plus-selection over parents ∪ offspring (see :mod:`evotensor.es.simple_ga`),
which carries each survivor's step size along. Defaults follow evosax's SAMR-GA (``std_init = 1``,
``std_meta = 2``, ``std_max = 10``, ``elite_ratio = 0.5``).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from evotensor.core.pytree import pytree_dataclass
from evotensor.es.base import (
    InvalidAsInfStrategy,
    check_fraction,
    check_positive,
    check_std_bounds,
    float32_params,
    update_best,
)
from evotensor.es.simple_ga import initial_population, plus_selection, take_merged, truncation_parents


@pytree_dataclass
class SAMRGAParams:
    """Dynamic hyperparameters.

    Attributes:
        elite_ratio: fraction of the archive eligible as parents (default 0.5).
        std_init: initial per-individual step size (default 1.0).
        std_meta: meta-mutation factor of the step size (default 2.0).
        std_min, std_max: clipping range of step sizes (defaults 0.0, 10.0).
        init_range: half-width of the initial uniform box (default 1.0).
    """

    elite_ratio: jax.Array
    std_init: jax.Array
    std_meta: jax.Array
    std_min: jax.Array
    std_max: jax.Array
    init_range: jax.Array


@pytree_dataclass
class SAMRGAState:
    """Archive ``population [pop, dims]``, ``fitness [pop]``, ``std [pop]`` (each member's step size),
    ``offspring_std [pop]`` (step sizes of the children of the last ``ask``), ``best_solution [dims]``,
    ``best_fitness []``, ``generation []``."""

    population: jax.Array
    fitness: jax.Array
    std: jax.Array
    offspring_std: jax.Array
    best_solution: jax.Array
    best_fitness: jax.Array
    generation: jax.Array


class SAMRGA(InvalidAsInfStrategy):
    """GA with per-individual self-adaptive mutation step sizes.

    Args:
        population_size: archive size and children per generation (>= 2).
        solution: template pytree (center of the initial box), exclusive with ``num_dims``.
        num_dims: flat dimension.
        elite_ratio, std_init, std_meta, std_min, std_max, init_range: params defaults.

    Example::

        ga = SAMRGA(32, num_dims=10)
        state = ga.init(jax.random.key(0))
        x, state = ga.ask(jax.random.key(1), state)            # x: [32, 10]
        state, metrics = ga.tell(jax.random.key(2), state, x, (x**2).sum(1))
    """

    name = "samr_ga"
    min_population_size = 2

    def __init__(
        self,
        population_size: int,
        solution: Any = None,
        num_dims: int | None = None,
        *,
        elite_ratio: float = 0.5,
        std_init: float = 1.0,
        std_meta: float = 2.0,
        std_min: float = 0.0,
        std_max: float = 10.0,
        init_range: float = 1.0,
    ):
        super().__init__(population_size, solution, num_dims)
        self.elite_ratio = check_fraction(elite_ratio, "elite_ratio")
        self.std_init = check_positive(std_init, "std_init")
        self.std_meta = check_positive(std_meta, "std_meta")
        self.std_min, self.std_max = check_std_bounds(std_min, std_max)
        self.init_range = check_positive(init_range, "init_range")

    def default_params(self) -> SAMRGAParams:
        return float32_params(SAMRGAParams, self)

    def _init(self, key, params):
        std = jnp.full((self.population_size,), params.std_init, jnp.float32)
        return SAMRGAState(
            population=initial_population(key, self.initial_mean(), params.init_range, self.population_size),
            fitness=jnp.full((self.population_size,), jnp.inf, jnp.float32),
            std=std,
            offspring_std=std,
            best_solution=self.initial_mean(),
            best_fitness=jnp.float32(jnp.inf),
            generation=jnp.zeros((), jnp.int32),
        )

    def _ask(self, key, state, params):
        k_p, k_meta, k_eps = jax.random.split(key, 3)
        n, d = self.population_size, self.num_dims
        parents = truncation_parents(k_p, state.fitness, params.elite_ratio, n)
        meta = params.std_meta ** jax.random.uniform(k_meta, (n,), jnp.float32, -1.0, 1.0)
        std = jnp.clip(state.std[parents] * meta, params.std_min, params.std_max)
        children = state.population[parents] + std[:, None] * jax.random.normal(k_eps, (n, d), jnp.float32)
        first = state.generation == 0  # generation 0 evaluates the initial population as is
        x = jnp.where(first, state.population, children)
        return x, state.replace(offspring_std=jnp.where(first, state.std, std))

    def _tell(self, key, state, x, fitness, params):
        idx = plus_selection(state.fitness, fitness)
        best_x, best_f = update_best(state.best_solution, state.best_fitness, x, fitness)
        std = take_merged(state.std, state.offspring_std, idx)
        new = SAMRGAState(
            population=take_merged(state.population, x, idx),
            fitness=take_merged(state.fitness, fitness, idx),
            std=std,
            offspring_std=state.offspring_std,
            best_solution=best_x,
            best_fitness=best_f,
            generation=state.generation + 1,
        )
        return new, {"best_fitness": best_f, "generation_best_fitness": fitness.min(), "std_mean": std.mean()}

    def mean_solution(self, state: Any) -> Any:
        """The best solution found so far."""
        return self.space.unravel(state.best_solution)
