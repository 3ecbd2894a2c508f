"""Gaussian genetic algorithm (Such et al. 2017, "Deep Neuroevolution: Genetic Algorithms Are a
Competitive Alternative for Training Deep Neural Networks for Reinforcement Learning").

Truncation selection plus Gaussian mutation: each child copies a parent drawn uniformly from the
best ``elite_ratio`` fraction of the archive and adds ``std * N(0, I)``. Optional uniform
crossover (probability ``crossover_rate`` per child) mixes two such parents gene by gene.

Survival is elitist "plus" selection: the archive keeps the best ``population_size`` of
parents ∪ offspring (Such et al. keep one unmutated elite in a generational scheme; the plus
scheme also never loses the best and keeps shapes fixed). The first ``ask`` returns the initial
population (uniform in ``template ± init_range``) to be evaluated; later calls return children.

The family's shared loop (archive, truncation parents, plus-survival) is
:class:`evotensor.es.core.ga_base.ElitistGA`; this module adds crossover and the decaying global step.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from evotensor.core import rng
from evotensor.core.checks import check_fraction, check_spread
from evotensor.core.pytree import pytree_dataclass
from evotensor.es.core.ga_base import ElitistGA, mutate


@pytree_dataclass
class SimpleGAParams:
    """Dynamic hyperparameters.

    Attributes:
        elite_ratio: fraction of the archive eligible as parents (default 0.5).
        crossover_rate: probability that a child uses uniform crossover (default 0.0: mutation
            only, as in Such et al. 2017).
        std_init: mutation step size (default 1.0).
        std_decay: per-generation multiplicative decay of the step size, in ``(0, 1]`` (default 1.0 =
            fixed).
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


class SimpleGA(ElitistGA):
    """Truncation-selection Gaussian GA with elitist plus-survival.

    Args:
        population_size: archive size and children per generation (>= 2).
        solution: template pytree (center of the initial box), exclusive with ``num_dims``.
        num_dims: flat dimension.
        crossover_rate, std_decay, std_min: params defaults (see :class:`SimpleGAParams`).
        elite_ratio, std_init, init_range: params defaults, as :class:`~evotensor.es.core.ga_base.ElitistGA`.

    Example::

        ga = SimpleGA(32, num_dims=10, std_init=0.1)
        state = ga.init(jax.random.key(0))
        x, state = ga.ask(jax.random.key(1), state)            # x: [32, 10]
        state, metrics = ga.tell(jax.random.key(2), state, x, (x**2).sum(1))
    """

    name = "simple_ga"
    params_cls = SimpleGAParams
    state_cls = SimpleGAState

    def __init__(
        self,
        population_size,
        solution=None,
        num_dims=None,
        *,
        crossover_rate=0.0,
        std_decay=1.0,
        std_min=0.0,
        **options,
    ):
        super().__init__(population_size, solution, num_dims, **options)
        self.crossover_rate = check_fraction(crossover_rate, "crossover_rate", allow_zero=True)
        self.std_decay = check_fraction(std_decay, "std_decay")
        self.std_min = check_spread(std_min, "std_min", allow_zero=True)

    def _initial_fields(self, params):
        return {"std": jnp.asarray(params.std_init, jnp.float32)}

    def _offspring(self, key, state, params, first):
        k_a, k_b, k_do, k_mask, k_eps = jax.random.split(key, 5)
        n, d = self.population_size, self.num_dims
        a = state.population[self._parents(k_a, state, params)]
        b = state.population[self._parents(k_b, state, params)]
        cross = rng.uniform(k_do, (n, 1), jnp.float32) < params.crossover_rate
        genes_from_b = cross & (rng.uniform(k_mask, (n, d), jnp.float32) < 0.5)
        return mutate(k_eps, jnp.where(genes_from_b, b, a), state.std), state

    def _adapt(self, key, state, fitness, idx, params):
        decay = jnp.where(state.generation == 0, 1.0, params.std_decay)
        std = jnp.maximum(state.std * decay, params.std_min)
        return {"std": std}, {"std": std}
