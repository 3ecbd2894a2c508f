"""Group elite selection of mutation rates (GESMR-GA; Kumar et al. 2022, "Effective Mutation Rate
Adaptation through Group Elite Selection", GECCO, arXiv:2204.04817, eqs. 3–7).

The children are split into ``num_groups`` equal groups; group ``g`` mutates with its own step
size ``std_g`` (children copy a parent drawn uniformly from the best ``elite_ratio`` of the
archive and add ``std_g * N(0, I)``). A step size is scored by the *best* fitness change its group
achieved, ``delta_g = min_{i in g} (f(child_i) - f(parent_i))`` (eq. 5): the step sizes are ranked
by ``delta``, the best one is kept and every other group takes one drawn uniformly from the best
``std_ratio`` fraction (eq. 6); then all are perturbed log-uniformly ``std_g <- std_g *
std_meta^U(-1, 1)`` (eq. 7) and clipped. Survival is elitist plus-selection (see
:mod:`evotensor.es.core.ga_base`). Defaults ``elite_ratio = std_ratio = 0.5``, ``std_meta = 2``,
``std_init = 1``, ``std_max = 10`` (as in evosax's implementation); ``num_groups`` defaults to the
largest divisor of the population size not above its square root.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from evotensor.core.checks import ArgumentError, check_fraction, check_int
from evotensor.core.pytree import pytree_dataclass
from evotensor.es.core.ga_base import ParentTrackingGA, SelfAdaptiveGA, truncation_parents


def default_num_groups(population_size: int) -> int:
    """Largest divisor of ``population_size`` that is ``<= sqrt(population_size)``."""
    return max(g for g in range(1, math.isqrt(population_size) + 1) if population_size % g == 0)


@pytree_dataclass
class GESMRGAParams:
    """Dynamic hyperparameters.

    Attributes:
        elite_ratio: fraction of the archive eligible as parents (default 0.5).
        std_ratio: fraction of step sizes eligible for resampling (default 0.5).
        std_init: initial step size of every group (default 1.0).
        std_meta: log-uniform perturbation factor of step sizes (default 2.0).
        std_min, std_max: clipping range (defaults 0.0, 10.0).
        init_range: half-width of the initial uniform box (default 1.0).
    """

    elite_ratio: jax.Array
    std_ratio: jax.Array
    std_init: jax.Array
    std_meta: jax.Array
    std_min: jax.Array
    std_max: jax.Array
    init_range: jax.Array


@pytree_dataclass
class GESMRGAState:
    """Archive ``population [pop, dims]``, ``fitness [pop]``; group step sizes ``std [groups]``;
    ``parent_fitness [pop]`` of the last children; ``best_solution [dims]``, ``best_fitness []``,
    ``generation []``."""

    population: jax.Array
    fitness: jax.Array
    std: jax.Array
    parent_fitness: jax.Array
    best_solution: jax.Array
    best_fitness: jax.Array
    generation: jax.Array


def group_deltas(child_fitness: jax.Array, parent_fitness: jax.Array, num_groups: int) -> jax.Array:
    """``[groups]`` best (minimum) fitness change per group; ``+inf`` entries mean invalid children."""
    change = jnp.where(jnp.isfinite(child_fitness), child_fitness - parent_fitness, jnp.inf)
    return change.reshape(num_groups, -1).min(axis=1)


class GESMRGA(ParentTrackingGA, SelfAdaptiveGA):
    """GA whose mutation step sizes are selected by group elite selection.

    Args:
        population_size: archive size and children per generation (>= 2).
        solution: template pytree (center of the initial box), exclusive with ``num_dims``.
        num_dims: flat dimension.
        num_groups: number of step-size groups (static; must divide ``population_size``).
        std_ratio: params default (see :class:`GESMRGAParams`).
        elite_ratio, std_init, std_meta, std_min, std_max, init_range: params defaults, as
            :class:`~evotensor.es.core.ga_base.SelfAdaptiveGA`.

    Example::

        ga = GESMRGA(36, num_dims=10)                          # 6 groups of 6 children
        state = ga.init(jax.random.key(0))
        x, state = ga.ask(jax.random.key(1), state)            # x: [36, 10]
        state, metrics = ga.tell(jax.random.key(2), state, x, (x**2).sum(1))
    """

    name = "gesmr_ga"
    params_cls = GESMRGAParams
    state_cls = GESMRGAState

    def __init__(
        self, population_size, solution=None, num_dims=None, *, num_groups=None, std_ratio=0.5, **options
    ):
        super().__init__(population_size, solution, num_dims, **options)
        if num_groups is None:
            num_groups = default_num_groups(self.population_size)
        self.num_groups = check_int(num_groups, "num_groups")
        if self.population_size % num_groups:
            raise ArgumentError(
                f"num_groups ({num_groups}) must divide population_size ({self.population_size})"
            )
        self.std_ratio = check_fraction(std_ratio, "std_ratio")

    def _initial_std(self, params):
        return jnp.full((self.num_groups,), params.std_init, jnp.float32)

    def _child_std(self, state):
        # child i belongs to group i // group_size
        return jnp.repeat(state.std, self.population_size // self.num_groups)[:, None]

    def _adapt_std(self, key, state, fitness, params):
        k_sel, k_meta = jax.random.split(key)
        order = jnp.argsort(group_deltas(fitness, state.parent_fitness, self.num_groups), stable=True)
        ranked = state.std[order]
        picks = truncation_parents(
            k_sel, jnp.arange(self.num_groups, dtype=jnp.float32), params.std_ratio, self.num_groups
        )
        std = ranked[picks].at[0].set(ranked[0])  # eq. 6: keep the best, resample the rest from the elite
        return self._meta_mutate(k_meta, std, params)  # eq. 7

    def _adapt(self, key, state, fitness, idx, params):
        std = jnp.where(state.generation == 0, state.std, self._adapt_std(key, state, fitness, params))
        return {"std": std}, {"std_best_group": std[0]}
