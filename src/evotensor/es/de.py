"""Differential evolution (Storn & Price 1997), DE/rand/1/bin and DE/best/1/bin.

For each target vector ``x_i`` of the population, a trial vector is built from three (two for
``best/1``) *distinct* other members ``r1, r2, r3 != i``::

    mutant  = x_r1 + F (x_r2 - x_r3)            (rand/1)     or   x_best + F (x_r1 - x_r2)   (best/1)
    trial_j = mutant_j  if U_ij < CR or j == j_rand   else x_ij   (binomial crossover)

and replaces ``x_i`` if its fitness is no worse (``f(trial) <= f(x_i)``; invalid trials never
replace). Defaults ``F = 0.5``, ``CR = 0.9`` (Storn & Price's recommended starting point for fast
convergence). The population starts uniform in ``template ± init_range`` with fitness ``+inf`` (not
yet evaluated): the first ``ask`` returns that initial population itself to be evaluated, later
``ask`` calls return trial vectors.

Population size: ``population_size=None`` selects ``NP = max(10 n, 4)`` for ``n`` dimensions,
Storn & Price's (1997) rule of thumb ("a reasonable choice for NP is between 5 D and 10 D").

``ask`` draws the random numbers (``de_draws``) and builds trials (``de_trials``); ``tell`` does the
greedy one-to-one selection. Both kernels are public so they can be tested against a reference.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from evotensor.core import rng
from evotensor.core.checks import check_choice, check_fraction, check_real, check_spread
from evotensor.core.pytree import pytree_dataclass
from evotensor.es.core.base import (
    InvalidAsInfStrategy,
    float32_params,
    initial_population,
    population_size_or_default,
)

VARIANTS = ("rand/1/bin", "best/1/bin")


@pytree_dataclass
class DEParams:
    """Dynamic hyperparameters (Storn & Price 1997).

    Attributes:
        differential_weight: F, in ``(0, 2]`` (Storn & Price's range; default 0.5).
        crossover_rate: CR (default 0.9).
        init_range: half-width of the initial uniform box around the template (default 1.0).
    """

    differential_weight: jax.Array
    crossover_rate: jax.Array
    init_range: jax.Array


@pytree_dataclass
class DEState:
    """``population [pop, dims]``, ``fitness [pop]`` (``+inf`` = not evaluated), ``best_solution [dims]``,
    ``best_fitness []``, ``generation []``."""

    population: jax.Array
    fitness: jax.Array
    best_solution: jax.Array
    best_fitness: jax.Array
    generation: jax.Array


@pytree_dataclass
class DEDraws:
    """The random numbers of one DE generation.

    Attributes:
        donors: ``[pop, 3]`` int32, per row three distinct indices, all different from the row.
        crossover_u: ``[pop, dims]`` U(0, 1) draws of the binomial crossover.
        j_rand: ``[pop]`` int32, the coordinate always taken from the mutant.
    """

    donors: jax.Array
    crossover_u: jax.Array
    j_rand: jax.Array


def _skip(v: jax.Array, excluded: jax.Array) -> jax.Array:
    """Map ``v`` in ``[0, n - m)`` to the v-th smallest index of ``[0, n)`` not in ``excluded`` ``[m]``."""
    for e in jnp.sort(excluded, axis=-1).T:  # ascending order makes single increments exact
        v = v + (v >= e)
    return v


def de_draws(key: jax.Array, population_size: int, num_dims: int) -> DEDraws:
    """Draw donors (distinct, excluding the target), crossover uniforms and ``j_rand``."""
    if population_size < 4:
        raise ValueError(f"population_size must be >= 4 for DE, got {population_size}")
    k1, k2, k3, ku, kj = jax.random.split(key, 5)
    i = jnp.arange(population_size, dtype=jnp.int32)
    a = _skip(rng.randint(k1, (population_size,), 0, population_size - 1, jnp.int32), i[:, None])
    b = _skip(rng.randint(k2, (population_size,), 0, population_size - 2, jnp.int32), jnp.stack([i, a], 1))
    c = _skip(rng.randint(k3, (population_size,), 0, population_size - 3, jnp.int32), jnp.stack([i, a, b], 1))
    return DEDraws(
        donors=jnp.stack([a, b, c], axis=1),
        crossover_u=rng.uniform(ku, (population_size, num_dims), jnp.float32),
        j_rand=rng.randint(kj, (population_size,), 0, num_dims, jnp.int32),
    )


def de_trials(
    population: jax.Array,
    best: jax.Array,
    draws: DEDraws,
    differential_weight: jax.Array,
    crossover_rate: jax.Array,
    variant: str = "rand/1/bin",
) -> jax.Array:
    """Trial vectors ``[pop, dims]`` from ``population [pop, dims]``, ``best [dims]`` and ``draws``."""
    d = draws.donors
    if variant == "rand/1/bin":
        mutant = population[d[:, 0]] + differential_weight * (population[d[:, 1]] - population[d[:, 2]])
    elif variant == "best/1/bin":
        mutant = best + differential_weight * (population[d[:, 0]] - population[d[:, 1]])
    else:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    j = jnp.arange(population.shape[1], dtype=jnp.int32)
    take = (draws.crossover_u < crossover_rate) | (j[None, :] == draws.j_rand[:, None])
    return jnp.where(take, mutant, population)


def default_population_size(num_dims: int) -> int:
    """Storn & Price's (1997) rule of thumb ``NP = 10 n`` (at least DE's minimum of 4)."""
    return max(10 * num_dims, 4)


class DE(InvalidAsInfStrategy):
    """Differential evolution with binomial crossover and greedy one-to-one selection.

    Args:
        population_size: number of target vectors (>= 4); ``None``: :func:`default_population_size`
            (``10 n``).
        solution: template pytree (center of the initial box), exclusive with ``num_dims``.
        num_dims: flat dimension.
        variant: ``"rand/1/bin"`` (default) or ``"best/1/bin"`` (static).
        differential_weight, crossover_rate, init_range: params defaults.

    Example::

        de = DE(32, num_dims=10)
        state = de.init(jax.random.key(0))
        x, state = de.ask(jax.random.key(1), state)            # trials: [32, 10]
        state, metrics = de.tell(jax.random.key(2), state, x, (x**2).sum(1))
    """

    name = "de"
    mean_field = "best_solution"  # the best solution found so far
    min_population_size = 4

    def __init__(
        self,
        population_size=None,
        solution=None,
        num_dims=None,
        *,
        variant="rand/1/bin",
        differential_weight=0.5,
        crossover_rate=0.9,
        init_range=1.0,
    ):
        super().__init__(
            population_size_or_default(population_size, solution, num_dims, default_population_size),
            solution,
            num_dims,
        )
        self.variant = check_choice(variant, "variant", VARIANTS)
        self.differential_weight = check_real(
            differential_weight, "differential_weight", 0.0, 2.0, low_open=True
        )
        self.crossover_rate = check_fraction(crossover_rate, "crossover_rate", allow_zero=True)
        self.init_range = check_spread(init_range, "init_range")

    def default_params(self) -> DEParams:
        return float32_params(DEParams, self)

    def _init(self, key, params):
        return DEState(
            population=initial_population(key, self.initial_mean(), params.init_range, self.population_size),
            fitness=jnp.full((self.population_size,), jnp.inf, jnp.float32),
            **self._initial_best_fields(),
        )

    def _ask(self, key, state, params):
        draws = de_draws(key, self.population_size, self.num_dims)
        best = state.population[jnp.argmin(state.fitness)]
        trials = de_trials(
            state.population, best, draws, params.differential_weight, params.crossover_rate, self.variant
        )
        # Generation 0 evaluates the initial population itself, as in Storn & Price.
        return jnp.where(state.generation == 0, state.population, trials), state

    def _tell(self, key, state, x, fitness, params):
        replace = jnp.isfinite(fitness) & (fitness <= state.fitness)
        population = jnp.where(replace[:, None], x, state.population)
        pop_fitness = jnp.where(replace, fitness, state.fitness)
        best, metrics = self._next_best_fields(state, x, fitness)
        return DEState(population=population, fitness=pop_fitness, **best), metrics
