"""What the Gaussian GA family (SimpleGA, SAMR-GA, GESMR-GA, MR-1/5-GA) shares.

Every member keeps an archive of ``population_size`` solutions with their fitness (``+inf`` = not
evaluated yet), draws parents uniformly from the best ``elite_ratio`` of it, mutates them with
Gaussian noise, and survives by elitist "plus" selection: the archive keeps the best
``population_size`` of parents ∪ offspring (ties keep the archive entry, so an invalid child never
displaces anything). The first ``ask`` returns the initial population (uniform in
``template ± init_range``) to be evaluated; later calls return children.

:class:`ElitistGA` implements that loop once. A subclass declares its params/state dataclasses and
only what is specific to it: how children are made (:meth:`ElitistGA._offspring`) and how the
mutation step sizes adapt (:meth:`ElitistGA._adapt`). :class:`ParentTrackingGA` and
:class:`SelfAdaptiveGA` add what two members each share: the parents' fitness recorded by ``ask``,
and log-uniformly mutated step sizes.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar

import jax
import jax.numpy as jnp

from evotensor.core import rng
from evotensor.core.checks import check_fraction, check_spread
from evotensor.es.core.base import InvalidAsInfStrategy, check_std_bounds, float32_params, initial_population


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


def mutate(key: jax.Array, parents: jax.Array, std: jax.Array) -> jax.Array:
    """``parents [pop, dims] + std * N(0, I)``; ``std`` is ``[]`` or ``[pop, 1]`` (per child)."""
    return parents + std * rng.normal(key, parents.shape, jnp.float32)


class ElitistGA(InvalidAsInfStrategy):
    """Base of the GA family: archive, truncation parents, plus-survival, best-so-far.

    The state dataclass (``state_cls``) has at least ``population [pop, dims]``, ``fitness [pop]``,
    ``std``, ``best_solution [dims]``, ``best_fitness []`` and ``generation []``; the params dataclass
    (``params_cls``) at least ``elite_ratio``, ``std_init`` and ``init_range``, each stored on the
    strategy under its field name by the constructor (see :func:`~evotensor.es.core.base.float32_params`).

    Args:
        population_size: archive size and children per generation (>= 2).
        solution: template pytree (center of the initial box), exclusive with ``num_dims``.
        num_dims: flat dimension.
        elite_ratio: fraction of the archive eligible as parents, in ``(0, 1]`` (default 0.5).
        std_init: initial mutation step size (> 0, default 1.0).
        init_range: half-width of the initial uniform box (> 0, default 1.0).

    A member with arguments of its own takes them and passes these on (``**options``).
    """

    min_population_size = 2
    mean_field = "best_solution"  # an archive has no mean: the best solution found so far
    params_cls: ClassVar[type]
    state_cls: ClassVar[type]

    def __init__(
        self, population_size, solution=None, num_dims=None, *, elite_ratio=0.5, std_init=1.0, init_range=1.0
    ):
        super().__init__(population_size, solution, num_dims)
        self.elite_ratio = check_fraction(elite_ratio, "elite_ratio")
        self.std_init = check_spread(std_init, "std_init")
        self.init_range = check_spread(init_range, "init_range")

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
            **self._initial_best_fields(),
            **self._initial_fields(params),
        )

    def _ask(self, key, state, params):
        first = state.generation == 0  # generation 0 evaluates the initial population as is
        children, state = self._offspring(key, state, params, first)
        return jnp.where(first, state.population, children), state

    def _tell(self, key, state, x, fitness, params):
        idx = plus_selection(state.fitness, fitness)
        best, metrics = self._next_best_fields(state, x, fitness)
        changes, extra = self._adapt(key, state, fitness, idx, params)
        new = state.replace(
            population=take_merged(state.population, x, idx),
            fitness=take_merged(state.fitness, fitness, idx),
            **best,
            **changes,
        )
        return new, {**metrics, **extra}


class ParentTrackingGA(ElitistGA):
    """A GA whose step-size rule compares each child with its own parent (GESMR-GA, MR-1/5-GA):
    ``ask`` records ``parent_fitness [pop]`` in the state (``+inf`` at generation 0, when there are
    no parents)."""

    @abc.abstractmethod
    def _initial_std(self, params) -> jax.Array:
        """The step sizes at generation 0 (``state.std``)."""

    @abc.abstractmethod
    def _child_std(self, state) -> jax.Array:
        """Step size of every child: ``[]`` or ``[pop, 1]``."""

    def _initial_fields(self, params):
        parent_fitness = jnp.full((self.population_size,), jnp.inf, jnp.float32)
        return {"std": self._initial_std(params), "parent_fitness": parent_fitness}

    def _offspring(self, key, state, params, first):
        k_p, k_eps = jax.random.split(key)
        parents = self._parents(k_p, state, params)
        children = mutate(k_eps, state.population[parents], self._child_std(state))
        parent_fitness = jnp.where(first, jnp.inf, state.fitness[parents])
        return children, state.replace(parent_fitness=parent_fitness)


class SelfAdaptiveGA(ElitistGA):
    """A GA whose step sizes are themselves mutated log-uniformly, ``std <- std * std_meta^U(-1, 1)``,
    and clipped to ``[std_min, std_max]`` (SAMR-GA, GESMR-GA; defaults of evosax's implementations).

    Args:
        std_meta: meta-mutation factor of the step sizes (> 0, default 2.0).
        std_min, std_max: clipping range of the step sizes (defaults 0.0, 10.0).
        others: as :class:`ElitistGA`.
    """

    def __init__(
        self,
        population_size,
        solution=None,
        num_dims=None,
        *,
        std_meta=2.0,
        std_min=0.0,
        std_max=10.0,
        **options,
    ):
        super().__init__(population_size, solution, num_dims, **options)
        self.std_meta = check_spread(std_meta, "std_meta")
        self.std_min, self.std_max = check_std_bounds(std_min, std_max)

    def _meta_mutate(self, key: jax.Array, std: jax.Array, params: Any) -> jax.Array:
        """``clip(std * std_meta^U(-1, 1), std_min, std_max)``, one draw per entry of ``std [k]``."""
        meta = params.std_meta ** rng.uniform(key, std.shape, jnp.float32, -1.0, 1.0)
        return jnp.clip(std * meta, params.std_min, params.std_max)
