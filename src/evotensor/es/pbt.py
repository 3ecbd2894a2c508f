"""Population-based training (Jaderberg et al. 2017, "Population Based Training of Neural
Networks"), synchronous truncation-selection variant.

**Protocol.** The solution vector *is* a member's hyperparameter vector (e.g. learning rate, dropout
…, in whatever parametrisation the user chooses). Each member also owns model weights that live
*outside* the strategy. A round is::

    h, state = pbt.ask(key, state)            # h [pop, dims]: hyperparameters to train with
    ... train member i for a while with h[i], starting from its current weights ...
    score_i = validation loss of member i      # minimized (negate a reward/accuracy)
    state, m = pbt.tell(key, state, h, score)
    ... member i now loads the weights of member m["parents"][i] (== i if it was not replaced)

``tell`` performs *exploit* and *explore*: the bottom ``truncation`` fraction of members (by
score; NaN/inf scores rank last) copies the hyperparameters and weights of a member drawn
uniformly from the top ``truncation`` fraction, then *explores* by multiplying each copied
hyperparameter by ``perturb_low`` or ``perturb_high`` (0.8 / 1.2, each with probability 1/2), or,
with probability ``resample_probability``, resampling it from the initial distribution. The
top members keep their hyperparameters. Defaults follow Jaderberg et al. (truncation 20 %,
perturbation factors 0.8 and 1.2); the asynchronous "ready" schedule of the paper becomes one
synchronous round per ``tell``. The stored ``fitness`` of a copied member is its donor's score (the
score of the weights it now holds). A round in which no score is finite replaces nobody (``parents``
is the identity); the stored scores become ``+inf`` (unknown).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from evotensor.core import rng
from evotensor.core.checks import ArgumentError, check_fraction, check_spread
from evotensor.core.pytree import pytree_dataclass
from evotensor.es.core.base import InvalidAsInfStrategy, float32_params, initial_population
from evotensor.es.core.ga_base import num_elites


@pytree_dataclass
class PBTParams:
    """Dynamic hyperparameters (Jaderberg et al. 2017 defaults).

    Attributes:
        truncation: fraction replaced / used as donors, in (0, 0.5] (default 0.2).
        perturb_low, perturb_high: explore factors, ``0 < perturb_low <= perturb_high <= 1e15``
            (defaults 0.8, 1.2).
        resample_probability: per-hyperparameter probability of resampling instead (default 0.0).
        init_range: half-width of the initial (and resampling) uniform box (default 1.0).
    """

    truncation: jax.Array
    perturb_low: jax.Array
    perturb_high: jax.Array
    resample_probability: jax.Array
    init_range: jax.Array


@pytree_dataclass
class PBTState:
    """``population [pop, dims]`` (hyperparameters for the next round), ``fitness [pop]`` (score of
    the weights each member now holds, ``+inf`` = unknown), ``parents [pop]`` (int32, whose weights
    each member must load after the last ``tell``), ``best_solution [dims]``, ``best_fitness []``,
    ``generation []``."""

    population: jax.Array
    fitness: jax.Array
    parents: jax.Array
    best_solution: jax.Array
    best_fitness: jax.Array
    generation: jax.Array


class PBT(InvalidAsInfStrategy):
    """Synchronous population-based training over hyperparameter vectors.

    Args:
        population_size: number of members (>= 2).
        solution: template pytree of one member's hyperparameters (center of the initial box),
            exclusive with ``num_dims``.
        num_dims: number of hyperparameters.
        truncation, perturb_low, perturb_high, resample_probability, init_range: params defaults.

    Example::

        pbt = PBT(10, solution=jnp.array([1e-3, 0.5]), init_range=1e-4)
        state = pbt.init(jax.random.key(0))
        h, state = pbt.ask(jax.random.key(1), state)           # h: [10, 2]
        state, m = pbt.tell(jax.random.key(2), state, h, losses)
        # member i continues from the weights of member m["parents"][i]
    """

    name = "pbt"
    min_population_size = 2
    mean_field = "best_solution"  # the best hyperparameters found so far

    def __init__(
        self,
        population_size,
        solution=None,
        num_dims=None,
        *,
        truncation=0.2,
        perturb_low=0.8,
        perturb_high=1.2,
        resample_probability=0.0,
        init_range=1.0,
    ):
        super().__init__(population_size, solution, num_dims)
        self.truncation = check_fraction(truncation, "truncation")
        if self.truncation > 0.5:  # donors and replaced members would overlap
            raise ArgumentError(f"truncation must be in (0, 0.5], got {truncation}")
        self.perturb_low = check_spread(perturb_low, "perturb_low")
        self.perturb_high = check_spread(perturb_high, "perturb_high")
        if self.perturb_low > self.perturb_high:
            raise ArgumentError(f"perturb_low ({perturb_low}) must be <= perturb_high ({perturb_high})")
        self.resample_probability = check_fraction(
            resample_probability, "resample_probability", allow_zero=True
        )
        self.init_range = check_spread(init_range, "init_range")

    def default_params(self) -> PBTParams:
        return float32_params(PBTParams, self)

    def _init(self, key, params):
        return PBTState(
            population=initial_population(key, self.initial_mean(), params.init_range, self.population_size),
            fitness=jnp.full((self.population_size,), jnp.inf, jnp.float32),
            parents=jnp.arange(self.population_size, dtype=jnp.int32),
            **self._initial_best_fields(),
        )

    def _ask(self, key, state, params):
        return state.population, state

    def _tell(self, key, state, x, fitness, params):
        k_donor, k_factor, k_resample, k_new = jax.random.split(key, 4)
        n, d = self.population_size, self.num_dims
        order = jnp.argsort(fitness, stable=True)
        rank = jnp.zeros(n, jnp.int32).at[order].set(jnp.arange(n, dtype=jnp.int32))
        k = jnp.minimum(num_elites(params.truncation, n), n // 2)
        # a round without one valid score ranks nobody: no member is replaced (``parents`` is the
        # identity, the population stays), instead of copying by the tie-break of the +inf stand-ins
        replaced = (rank >= n - k) & jnp.any(jnp.isfinite(fitness))
        u = rng.uniform(k_donor, (n,), jnp.float32)
        donors = order[jnp.minimum((u * k).astype(jnp.int32), k - 1)]
        parents = jnp.where(replaced, donors, jnp.arange(n, dtype=jnp.int32))
        # explore: perturb each copied hyperparameter, or resample it from the initial box
        up = rng.uniform(k_factor, (n, d), jnp.float32) < 0.5
        perturbed = x[parents] * jnp.where(up, params.perturb_high, params.perturb_low)
        fresh = initial_population(k_new, self.initial_mean(), params.init_range, n)
        resample = rng.uniform(k_resample, (n, d), jnp.float32) < params.resample_probability
        explored = jnp.where(resample, fresh, perturbed)
        best, metrics = self._next_best_fields(state, x, fitness)
        new = PBTState(
            population=jnp.where(replaced[:, None], explored, x),
            fitness=fitness[parents],
            parents=parents,
            **best,
        )
        return new, {**metrics, "parents": parents}
