"""Gaussian genetic algorithm (Such et al. 2017, "Deep Neuroevolution: Genetic Algorithms Are a
Competitive Alternative for Training Deep Neural Networks for Reinforcement Learning").

Truncation selection plus Gaussian mutation: each child copies a parent drawn uniformly from the
best ``elite_ratio`` fraction of the archive and adds ``std * N(0, I)``. Optional uniform
crossover (probability ``crossover_rate`` per child) mixes two such parents gene by gene.

Survival is elitist "plus" selection: the archive keeps the best ``population_size`` of
parents ∪ offspring (Such et al. keep one unmutated elite in a generational scheme; the plus
scheme also never loses the best and keeps shapes fixed). The first ``ask`` returns the initial
population (uniform in ``template ± init_range``) to be evaluated; later calls return children.

This module also hosts the selection/survival helpers shared by SAMR-GA, GESMR-GA and MR-1/5-GA.
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
    float32_params,
    update_best,
)


def num_elites(elite_ratio: jax.Array, population_size: int) -> jax.Array:
    """``max(1, floor(elite_ratio * pop))`` as a traced int32 (so ``elite_ratio`` can be vmapped)."""
    return jnp.maximum(1, jnp.floor(elite_ratio * population_size).astype(jnp.int32))


def truncation_parents(key: jax.Array, fitness: jax.Array, elite_ratio: jax.Array, num: int) -> jax.Array:
    """``[num]`` int32 indices drawn uniformly from the best ``num_elites`` entries of ``fitness [pop]``."""
    order = jnp.argsort(fitness, stable=True)
    k = num_elites(elite_ratio, fitness.shape[0])
    u = jax.random.uniform(key, (num,), jnp.float32)
    return order[jnp.minimum((u * k).astype(jnp.int32), k - 1)]


def plus_selection(archive_fitness: jax.Array, offspring_fitness: jax.Array) -> jax.Array:
    """Indices into ``concat([archive, offspring])`` of the best ``len(archive)`` entries.

    Ties (including ``+inf`` = invalid/unevaluated) keep the archive entry, so an invalid
    offspring never displaces anything.
    """
    merged = jnp.concatenate([archive_fitness, offspring_fitness])
    return jnp.argsort(merged, stable=True)[: archive_fitness.shape[0]]


def take_merged(archive: jax.Array, offspring: jax.Array, idx: jax.Array) -> jax.Array:
    """Gather ``idx`` from ``concat([archive, offspring])`` along axis 0."""
    return jnp.concatenate([archive, offspring])[idx]


def initial_population(
    key: jax.Array, center: jax.Array, init_range: jax.Array, population_size: int
) -> jax.Array:
    """``[pop, dims]`` uniform in ``center ± init_range``."""
    u = jax.random.uniform(key, (population_size, center.shape[0]), jnp.float32, -1.0, 1.0)
    return center + init_range * u


@pytree_dataclass
class SimpleGAParams:
    """Dynamic hyperparameters.

    Attributes:
        elite_ratio: fraction of the archive eligible as parents (default 0.5).
        crossover_rate: probability that a child uses uniform crossover (default 0.0: mutation
            only, as in Such et al. 2017).
        std_init: mutation step size (default 1.0).
        std_decay: per-generation multiplicative decay of the step size (default 1.0 = fixed).
        std_min: step-size floor (default 0.0).
        init_range: half-width of the initial uniform box (default 1.0).
    """

    elite_ratio: jax.Array
    crossover_rate: jax.Array
    std_init: jax.Array
    std_decay: jax.Array
    std_min: jax.Array
    init_range: jax.Array


@pytree_dataclass
class SimpleGAState:
    """``population [pop, dims]``, ``fitness [pop]`` (``+inf`` = not evaluated), ``std []``,
    ``best_solution [dims]``, ``best_fitness []``, ``generation []``."""

    population: jax.Array
    fitness: jax.Array
    std: jax.Array
    best_solution: jax.Array
    best_fitness: jax.Array
    generation: jax.Array


class SimpleGA(InvalidAsInfStrategy):
    """Truncation-selection Gaussian GA with elitist plus-survival.

    Args:
        population_size: archive size and children per generation (>= 2).
        solution: template pytree (center of the initial box), exclusive with ``num_dims``.
        num_dims: flat dimension.
        elite_ratio, crossover_rate, std_init, std_decay, std_min, init_range: params defaults.

    Example::

        ga = SimpleGA(32, num_dims=10, std_init=0.1)
        state = ga.init(jax.random.key(0))
        x, state = ga.ask(jax.random.key(1), state)            # x: [32, 10]
        state, metrics = ga.tell(jax.random.key(2), state, x, (x**2).sum(1))
    """

    name = "simple_ga"
    min_population_size = 2

    def __init__(
        self,
        population_size: int,
        solution: Any = None,
        num_dims: int | None = None,
        *,
        elite_ratio: float = 0.5,
        crossover_rate: float = 0.0,
        std_init: float = 1.0,
        std_decay: float = 1.0,
        std_min: float = 0.0,
        init_range: float = 1.0,
    ):
        super().__init__(population_size, solution, num_dims)
        self.elite_ratio = check_fraction(elite_ratio, "elite_ratio")
        self.crossover_rate = float(crossover_rate)
        if not 0.0 <= self.crossover_rate <= 1.0:
            raise ValueError(f"crossover_rate must be in [0, 1], got {crossover_rate}")
        self.std_init = check_positive(std_init, "std_init")
        self.std_decay = check_positive(std_decay, "std_decay")
        self.std_min = check_positive(std_min, "std_min", allow_zero=True)
        self.init_range = check_positive(init_range, "init_range")

    def default_params(self) -> SimpleGAParams:
        return float32_params(SimpleGAParams, self)

    def _init(self, key, params):
        return SimpleGAState(
            population=initial_population(key, self.initial_mean(), params.init_range, self.population_size),
            fitness=jnp.full((self.population_size,), jnp.inf, jnp.float32),
            std=jnp.asarray(params.std_init, jnp.float32),
            best_solution=self.initial_mean(),
            best_fitness=jnp.float32(jnp.inf),
            generation=jnp.zeros((), jnp.int32),
        )

    def _ask(self, key, state, params):
        k_a, k_b, k_do, k_mask, k_eps = jax.random.split(key, 5)
        n, d = self.population_size, self.num_dims
        a = state.population[truncation_parents(k_a, state.fitness, params.elite_ratio, n)]
        b = state.population[truncation_parents(k_b, state.fitness, params.elite_ratio, n)]
        cross = jax.random.uniform(k_do, (n, 1), jnp.float32) < params.crossover_rate
        genes_from_b = cross & (jax.random.uniform(k_mask, (n, d), jnp.float32) < 0.5)
        children = jnp.where(genes_from_b, b, a) + state.std * jax.random.normal(k_eps, (n, d), jnp.float32)
        return jnp.where(state.generation == 0, state.population, children), state

    def _tell(self, key, state, x, fitness, params):
        idx = plus_selection(state.fitness, fitness)
        best_x, best_f = update_best(state.best_solution, state.best_fitness, x, fitness)
        decay = jnp.where(state.generation == 0, 1.0, params.std_decay)
        new = SimpleGAState(
            population=take_merged(state.population, x, idx),
            fitness=take_merged(state.fitness, fitness, idx),
            std=jnp.maximum(state.std * decay, params.std_min),
            best_solution=best_x,
            best_fitness=best_f,
            generation=state.generation + 1,
        )
        return new, {"best_fitness": best_f, "generation_best_fitness": fitness.min(), "std": new.std}

    def mean_solution(self, state: Any) -> Any:
        """The best solution found so far."""
        return self.space.unravel(state.best_solution)
