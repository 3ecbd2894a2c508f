"""GA with Rechenberg's 1/5th success rule (MR-1/5-GA; Rechenberg 1973, "Evolutionsstrategie";
constant from Schwefel 1981/1995, "Evolution and Optimum Seeking").

One global mutation step size. Children copy a parent drawn uniformly from the best
``elite_ratio`` of the archive and add ``std * N(0, I)``. After each generation the success rate
``p`` = fraction of valid children strictly better than their own parent drives the step size:
``std <- std / c`` if ``p > 1/5``, ``std <- std * c`` if ``p < 1/5`` (``c = 0.817``, Schwefel),
clipped to ``[std_min, std_max]``. Survival is elitist plus-selection (see
:mod:`evotensor.es.core.ga_base`). Generation 0 evaluates the initial population and leaves ``std``
unchanged.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from evotensor.core.checks import check_fraction
from evotensor.core.pytree import pytree_dataclass
from evotensor.es.core.base import check_std_bounds
from evotensor.es.core.ga_base import ParentTrackingGA


@pytree_dataclass
class MR15GAParams:
    """Dynamic hyperparameters.

    Attributes:
        elite_ratio: fraction of the archive eligible as parents (default 0.5).
        std_init: initial step size (default 1.0).
        success_target: target success rate (default 0.2 = 1/5).
        adapt_factor: c in (0, 1), step-size change per generation (default 0.817, Schwefel).
        std_min, std_max: clipping range (defaults 0.0, 1e10).
        init_range: half-width of the initial uniform box (default 1.0).
    """

    elite_ratio: jax.Array
    std_init: jax.Array
    success_target: jax.Array
    adapt_factor: jax.Array
    std_min: jax.Array
    std_max: jax.Array
    init_range: jax.Array


@pytree_dataclass
class MR15GAState:
    """Archive ``population [pop, dims]``, ``fitness [pop]``, global ``std []``,
    ``parent_fitness [pop]`` (fitness of each child's parent, from the last ``ask``),
    ``best_solution [dims]``, ``best_fitness []``, ``generation []``."""

    population: jax.Array
    fitness: jax.Array
    std: jax.Array
    parent_fitness: jax.Array
    best_solution: jax.Array
    best_fitness: jax.Array
    generation: jax.Array


def one_fifth_rule(
    std: jax.Array, child_fitness: jax.Array, parent_fitness: jax.Array, target: jax.Array, factor: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Return ``(new_std, success_rate)``; children/parents ``[pop]`` with ``+inf`` = invalid.

    Only children whose parent has a finite fitness count; with none, ``std`` is unchanged.
    """
    counted = jnp.isfinite(parent_fitness)
    success = counted & (child_fitness < parent_fitness)
    n = counted.sum()
    rate = success.sum() / jnp.maximum(n, 1)
    change = jnp.where(rate > target, 1.0 / factor, jnp.where(rate < target, factor, 1.0))
    return jnp.where(n > 0, std * change, std), rate


class MR15GA(ParentTrackingGA):
    """Gaussian GA whose global step size follows the 1/5th success rule.

    Args:
        population_size: archive size and children per generation (>= 2).
        solution: template pytree (center of the initial box), exclusive with ``num_dims``.
        num_dims: flat dimension.
        success_target, adapt_factor, std_min, std_max: params defaults (see :class:`MR15GAParams`).
        elite_ratio, std_init, init_range: params defaults, as :class:`~evotensor.es.core.ga_base.ElitistGA`.

    Example::

        ga = MR15GA(32, num_dims=10)
        state = ga.init(jax.random.key(0))
        x, state = ga.ask(jax.random.key(1), state)            # x: [32, 10]
        state, metrics = ga.tell(jax.random.key(2), state, x, (x**2).sum(1))
    """

    name = "mr15_ga"
    params_cls = MR15GAParams
    state_cls = MR15GAState

    def __init__(
        self,
        population_size,
        solution=None,
        num_dims=None,
        *,
        success_target=0.2,
        adapt_factor=0.817,
        std_min=0.0,
        std_max=1e10,
        **options,
    ):
        super().__init__(population_size, solution, num_dims, **options)
        self.success_target = check_fraction(success_target, "success_target")
        self.adapt_factor = check_fraction(adapt_factor, "adapt_factor")
        self.std_min, self.std_max = check_std_bounds(std_min, std_max)

    def _initial_std(self, params):
        return jnp.asarray(params.std_init, jnp.float32)

    def _child_std(self, state):
        return state.std

    def _adapt(self, key, state, fitness, idx, params):
        std, rate = one_fifth_rule(
            state.std, fitness, state.parent_fitness, params.success_target, params.adapt_factor
        )
        std = jnp.clip(std, params.std_min, params.std_max)
        return {"std": std}, {"std": std, "success_rate": rate}
