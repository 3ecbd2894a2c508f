"""Self-adaptive mutation-rate GA (SAMR-GA; Clune, Misevic, Ofria, Lenski, Elena & Sanjuán 2008,
"Natural selection fails to optimize mutation rates for long-term adaptation on rugged fitness
landscapes").

Every individual carries its own mutation step size. A child inherits its parent's step size,
perturbed log-uniformly, ``std_child = std_parent * std_meta^U(-1, 1)`` (clipped to
``[std_min, std_max]``), and then mutates its genes with it: ``x_child = x_parent +
std_child * N(0, I)``. Parents are drawn uniformly from the best ``elite_ratio`` of the archive and
survival is elitist plus-selection over parents ∪ offspring (see :mod:`evotensor.es.core.ga_base`),
which carries each survivor's step size along. Defaults follow evosax's SAMR-GA (``std_init = 1``,
``std_meta = 2``, ``std_max = 10``, ``elite_ratio = 0.5``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from evotensor.core.pytree import pytree_dataclass
from evotensor.es.core.ga_base import SelfAdaptiveGA, mutate, take_merged


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


class SAMRGA(SelfAdaptiveGA):
    """GA with per-individual self-adaptive mutation step sizes.

    Args:
        population_size: archive size and children per generation (>= 2).
        solution: template pytree (center of the initial box), exclusive with ``num_dims``.
        num_dims: flat dimension.
        elite_ratio, std_init, std_meta, std_min, std_max, init_range: params defaults, as
            :class:`~evotensor.es.core.ga_base.SelfAdaptiveGA`.

    Example::

        ga = SAMRGA(32, num_dims=10)
        state = ga.init(jax.random.key(0))
        x, state = ga.ask(jax.random.key(1), state)            # x: [32, 10]
        state, metrics = ga.tell(jax.random.key(2), state, x, (x**2).sum(1))
    """

    name = "samr_ga"
    params_cls = SAMRGAParams
    state_cls = SAMRGAState

    def _initial_fields(self, params):
        std = jnp.full((self.population_size,), params.std_init, jnp.float32)
        return {"std": std, "offspring_std": std}

    def _offspring(self, key, state, params, first):
        k_p, k_meta, k_eps = jax.random.split(key, 3)
        parents = self._parents(k_p, state, params)
        std = self._meta_mutate(k_meta, state.std[parents], params)
        children = mutate(k_eps, state.population[parents], std[:, None])
        return children, state.replace(offspring_std=jnp.where(first, state.std, std))

    def _adapt(self, key, state, fitness, idx, params):
        std = take_merged(state.std, state.offspring_std, idx)  # survivors carry their own step sizes
        return {"std": std}, {"std_mean": std.mean()}
