"""What the Gaussian GA family (SimpleGA, SAMR-GA, GESMR-GA, MR-1/5-GA) shares.

Every member keeps an archive of ``population_size`` solutions with their fitness (``+inf`` = not
evaluated yet), draws parents uniformly from the best ``elite_ratio`` of it, mutates them with
Gaussian noise, and survives by elitist "plus" selection: the archive keeps the best
``population_size`` of parents ∪ offspring (ties keep the archive entry, so an invalid child never
displaces anything). The first ``ask`` returns the initial population (uniform in
``template ± init_range``) to be evaluated; later calls return children.

:class:`ElitistGA` implements that loop once. A subclass declares its params/state dataclasses and
only what is specific to it: how children are made (:meth:`ElitistGA._offspring`) and how the
mutation step sizes adapt (:meth:`ElitistGA._adapt`).
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from evotensor.core import rng
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
    u = rng.uniform(key, (num,), jnp.float32)
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
    u = rng.uniform(key, (population_size, center.shape[0]), jnp.float32, -1.0, 1.0)
    return center + init_range * u


def mutate(key: jax.Array, parents: jax.Array, std: jax.Array) -> jax.Array:
    """``parents [pop, dims] + std * N(0, I)``; ``std`` is ``[]`` or ``[pop, 1]`` (per child)."""
    return parents + std * rng.normal(key, parents.shape, jnp.float32)


class ElitistGA(InvalidAsInfStrategy):
    """Base of the GA family: archive, truncation parents, plus-survival, best-so-far.

    The state dataclass (``state_cls``) has at least ``population [pop, dims]``, ``fitness [pop]``,
    ``std``, ``best_solution [dims]``, ``best_fitness []`` and ``generation []``; the params dataclass
    (``params_cls``) at least ``elite_ratio``, ``std_init`` and ``init_range``, each stored on the
    strategy under its field name by the constructor (see :func:`~evotensor.es.base.float32_params`).

    Args:
        population_size: archive size and children per generation (>= 2).
        solution: template pytree (center of the initial box), exclusive with ``num_dims``.
        num_dims: flat dimension.
        elite_ratio: fraction of the archive eligible as parents, in ``(0, 1]``.
        std_init: initial mutation step size (> 0).
        init_range: half-width of the initial uniform box (> 0).
    """

    min_population_size = 2
    params_cls: ClassVar[type]
    state_cls: ClassVar[type]

    def __init__(self, population_size, solution, num_dims, elite_ratio, std_init, init_range):
        super().__init__(population_size, solution, num_dims)
        self.elite_ratio = check_fraction(elite_ratio, "elite_ratio")
        self.std_init = check_positive(std_init, "std_init")
        self.init_range = check_positive(init_range, "init_range")

    def default_params(self) -> Any:
        return float32_params(self.params_cls, self)

    # -- hooks of the family -------------------------------------------------------------------
    @abc.abstractmethod
    def _initial_fields(self, params: Any) -> dict[str, jax.Array]:
        """The state fields beyond the shared ones (at least ``std``), at generation 0."""

    @abc.abstractmethod
    def _offspring(self, key, state, params, first):
        """``(children [pop, dims], state)`` for the next evaluation; ``first`` is true at generation 0,
        when the initial population is evaluated instead of the children."""

    @abc.abstractmethod
    def _adapt(self, key, state, fitness, idx, params):
        """``(state fields to change, extra metrics)`` after evaluating ``fitness [pop]`` of the
        offspring; ``idx`` are the :func:`plus_selection` survivors."""

    # -- the shared loop -----------------------------------------------------------------------
    def _parents(self, key, state, params) -> jax.Array:
        """``[pop]`` archive indices drawn uniformly from the elite."""
        return truncation_parents(key, state.fitness, params.elite_ratio, self.population_size)

    def _init(self, key, params):
        return self.state_cls(
            population=initial_population(key, self.initial_mean(), params.init_range, self.population_size),
            fitness=jnp.full((self.population_size,), jnp.inf, jnp.float32),
            best_solution=self.initial_mean(),
            best_fitness=jnp.float32(jnp.inf),
            generation=jnp.zeros((), jnp.int32),
            **self._initial_fields(params),
        )

    def _ask(self, key, state, params):
        first = state.generation == 0  # generation 0 evaluates the initial population as is
        children, state = self._offspring(key, state, params, first)
        return jnp.where(first, state.population, children), state

    def _tell(self, key, state, x, fitness, params):
        idx = plus_selection(state.fitness, fitness)
        best_x, best_f = update_best(state.best_solution, state.best_fitness, x, fitness)
        changes, metrics = self._adapt(key, state, fitness, idx, params)
        new = state.replace(
            population=take_merged(state.population, x, idx),
            fitness=take_merged(state.fitness, fitness, idx),
            best_solution=best_x,
            best_fitness=best_f,
            generation=state.generation + 1,
            **changes,
        )
        return new, {"best_fitness": best_f, "generation_best_fitness": fitness.min(), **metrics}

    def mean_solution(self, state: Any) -> Any:
        """The best solution found so far."""
        return self.space.unravel(state.best_solution)


class ParentTrackingGA(ElitistGA):
    """A GA whose step-size rule compares each child with its own parent (GESMR-GA, MR-1/5-GA):
    ``ask`` records ``parent_fitness [pop]`` in the state (``+inf`` at generation 0, when there are
    no parents)."""

    @abc.abstractmethod
    def _child_std(self, state) -> jax.Array:
        """Step size of every child: ``[]`` or ``[pop, 1]``."""

    def _offspring(self, key, state, params, first):
        k_p, k_eps = jax.random.split(key)
        parents = self._parents(k_p, state, params)
        children = mutate(k_eps, state.population[parents], self._child_std(state))
        parent_fitness = jnp.where(first, jnp.inf, state.fitness[parents])
        return children, state.replace(parent_fitness=parent_fitness)
