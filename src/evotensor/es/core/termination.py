"""Pure termination criteria for CMA-type strategies, with pycma's defaults.

Each criterion is a boolean computed inside ``jit``; under ``vmap`` every run gets its own flags,
so a batch of runs can stop (or restart) independently. The criteria follow pycma's
``_CMAStopDict`` (``cma/evolution_strategy.py``):

* ``tolfun``: the fitness range of this generation *and* of the best-of-generation history over the
  last ``10 + ceil(30 n / lambda)`` generations are below ``tolfun`` (1e-11);
* ``tolx``: every coordinate standard deviation ``sigma sqrt(C_ii)`` and ``sigma |p_c|_i`` is below
  ``tolx`` (1e-11);
* ``tolstagnation``: after ``tolstagnation = int(100 + 100 n^1.5 / lambda)`` generations (and
  more than ``n (5 + 100/lambda)``), the medians of both the best and the median fitness over the
  most recent ``tolstagnation/2`` generations are no better than over the ``tolstagnation/2``
  before. pycma subsamples its histories every 5 generations and adds a condition on when the best
  solution was found; these refinements are left out here;
* ``tolconditioncov``: the condition number of ``C`` exceeds ``tolconditioncov`` (1e14). In
  float32 the covariance guard of :class:`~evotensor.es.CMAES` caps the condition at 1e14, so use a
  smaller value (e.g. 1e12) there;
* ``tolflatfitness``: the best and the 75%-quantile fitness were equal in more than
  ``tolflatfitness`` (1) consecutive generations;
* ``tolfacupx``: some ``sigma sqrt(C_ii)`` grew beyond ``tolfacupx`` (1e3) times the initial
  ``sigma``.

Usage::

    term = Termination(num_dims=n, max_population_size=lam)
    tstate = term.init()
    ...                                           # each generation, after tell:
    tstate = term.update(tstate, fitness)         # fitness [pop], minimized
    flags = term.check(tstate, fitness, stds, path, condition, sigma_init)
    stop = any_flag(flags)

``population_size`` may be a traced integer (restarts with a dynamic population): candidates at
index ``>= population_size`` are ignored, and the history windows adapt to it.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from evotensor.core.checks import check_int
from evotensor.core.pytree import pytree_dataclass

FLAGS = ("tolfun", "tolx", "tolstagnation", "tolconditioncov", "tolflatfitness", "tolfacupx")


@pytree_dataclass
class TerminationParams:
    """Tolerances (pycma defaults), all ``[]`` arrays so they can be vmapped."""

    tolfun: jax.Array
    tolx: jax.Array
    tolconditioncov: jax.Array
    tolflatfitness: jax.Array
    tolfacupx: jax.Array


@pytree_dataclass
class TerminationState:
    """Histories, newest first.

    Attributes:
        best: ``[H]`` best fitness of each of the last generations (``nan`` when not yet filled).
        stag_best: ``[L]`` best fitness per generation for ``tolstagnation``.
        stag_median: ``[L]`` median fitness per generation for ``tolstagnation``.
        flat_count: ``[]`` int32 consecutive generations with a flat fitness.
        generation: ``[]`` int32 generations recorded.
    """

    best: jax.Array
    stag_best: jax.Array
    stag_median: jax.Array
    flat_count: jax.Array
    generation: jax.Array


def default_termination_params() -> TerminationParams:
    """pycma's defaults: tolfun 1e-11, tolx 1e-11, tolconditioncov 1e14, tolflatfitness 1,
    tolfacupx 1e3."""
    dtype = jnp.result_type(float)
    return TerminationParams(
        tolfun=jnp.asarray(1e-11, dtype),
        tolx=jnp.asarray(1e-11, dtype),
        tolconditioncov=jnp.asarray(1e14, dtype),
        tolflatfitness=jnp.asarray(1, jnp.int32),
        tolfacupx=jnp.asarray(1e3, dtype),
    )


def history_length(num_dims: Any, population_size: Any) -> Any:
    """``10 + ceil(30 n / lambda)`` generations of best fitness for ``tolfun`` (works traced)."""
    return 10 + jnp.ceil(30.0 * num_dims / population_size).astype(jnp.int32)


def stagnation_length(num_dims: Any, population_size: Any) -> Any:
    """pycma's ``tolstagnation = int(100 + 100 n^1.5 / lambda)`` (works traced)."""
    return (100 + 100 * num_dims**1.5 / jnp.asarray(population_size, jnp.float32)).astype(jnp.int32)


def _sorted_valid(fitness: jax.Array, population_size: Any) -> tuple[jax.Array, jax.Array]:
    """Fitness sorted ascending with masked entries (index >= population_size) at the end."""
    valid = jnp.arange(fitness.shape[0]) < population_size
    return jnp.sort(jnp.where(valid, fitness, jnp.inf)), jnp.asarray(population_size, jnp.int32)


class Termination:
    """Static configuration of the termination histories.

    Args:
        num_dims: ``n``.
        max_population_size: the largest population size that will be passed (buffers are sized for
            the *smallest* population, ``min_population_size``, which needs the longest histories).
        min_population_size: smallest population size used (default ``max_population_size``).
    """

    def __init__(self, num_dims: int, max_population_size: int, min_population_size: int | None = None):
        self.num_dims = check_int(num_dims, "num_dims")
        self.max_population_size = check_int(max_population_size, "max_population_size", 2)
        lam_min = self.max_population_size if min_population_size is None else min_population_size
        lam_min = check_int(lam_min, "min_population_size", 2, self.max_population_size)
        self.history = 10 + math.ceil(30 * self.num_dims / lam_min)
        self.stagnation = int(100 + 100 * self.num_dims**1.5 / lam_min)

    def init(self) -> TerminationState:
        dtype = jnp.result_type(float)
        return TerminationState(
            best=jnp.full(self.history, jnp.nan, dtype),
            stag_best=jnp.full(self.stagnation, jnp.nan, dtype),
            stag_median=jnp.full(self.stagnation, jnp.nan, dtype),
            flat_count=jnp.zeros((), jnp.int32),
            generation=jnp.zeros((), jnp.int32),
        )

    def update(
        self, tstate: TerminationState, fitness: jax.Array, population_size: Any = None
    ) -> TerminationState:
        """Record one generation: ``fitness [pop]`` (minimized, finite for valid candidates)."""
        lam = self.max_population_size if population_size is None else population_size
        f, lam = _sorted_valid(fitness.astype(tstate.best.dtype), lam)
        median = (f[(lam - 1) // 2] + f[lam // 2]) / 2
        flat = f[0] >= f[(3 * lam) // 4]
        return TerminationState(
            best=jnp.concatenate([f[:1], tstate.best[:-1]]),
            stag_best=jnp.concatenate([f[:1], tstate.stag_best[:-1]]),
            stag_median=jnp.concatenate([median[None], tstate.stag_median[:-1]]),
            flat_count=jnp.where(flat, tstate.flat_count + 1, 0),
            generation=tstate.generation + 1,
        )

    def check(
        self,
        tstate: TerminationState,
        fitness: jax.Array,
        stds: jax.Array,
        path: jax.Array,
        condition: jax.Array,
        sigma_init: jax.Array,
        params: TerminationParams | None = None,
        population_size: Any = None,
    ) -> dict[str, jax.Array]:
        """All flags for the generation just recorded with :meth:`update`.

        Args:
            tstate: histories including this generation.
            fitness: ``[pop]`` this generation's (minimized) fitness.
            stds: ``[n]`` coordinate standard deviations ``sigma sqrt(C_ii)``.
            path: ``[n]`` ``sigma * p_c`` (zeros for strategies without that path).
            condition: ``[]`` condition number of the covariance (1 if not applicable).
            sigma_init: ``[]`` the initial ``sigma`` (for ``tolfacupx``).
            params: tolerances (default :func:`default_termination_params`).
            population_size: current ``lambda`` (may be traced); default ``max_population_size``.

        Returns:
            ``{name: bool []}`` for every name in :data:`FLAGS`.
        """
        params = default_termination_params() if params is None else params
        lam = self.max_population_size if population_size is None else population_size
        n = self.num_dims
        f, lam = _sorted_valid(fitness.astype(tstate.best.dtype), lam)
        current_range = f[lam - 1] - f[0]
        h = jnp.minimum(history_length(n, lam), self.history)
        in_window = jnp.arange(self.history) < h
        hist = jnp.where(in_window, tstate.best, jnp.nan)
        hist_range = jnp.nanmax(hist) - jnp.nanmin(hist)
        tolfun = (current_range < params.tolfun) & (hist_range < params.tolfun)

        tolx = jnp.all(stds < params.tolx) & jnp.all(jnp.abs(path) < params.tolx)

        stag = jnp.minimum(stagnation_length(n, lam), self.stagnation)
        half = stag // 2
        idx = jnp.arange(self.stagnation)
        recent, older = idx < half, (idx >= half) & (idx < 2 * half)

        def window_median(values, mask):
            return jnp.nanmedian(jnp.where(mask, values, jnp.nan))

        long_enough = (tstate.generation >= stag) & (
            tstate.generation.astype(jnp.float32) > n * (5 + 100 / jnp.asarray(lam, jnp.float32))
        )
        tolstagnation = (
            long_enough
            & (window_median(tstate.stag_median, recent) >= window_median(tstate.stag_median, older))
            & (window_median(tstate.stag_best, recent) >= window_median(tstate.stag_best, older))
        )
        return {
            "tolfun": tolfun,
            "tolx": tolx,
            "tolstagnation": tolstagnation,
            "tolconditioncov": condition > params.tolconditioncov,
            "tolflatfitness": tstate.flat_count > params.tolflatfitness,
            "tolfacupx": jnp.any(stds > sigma_init * params.tolfacupx),
        }


def any_flag(flags: dict[str, jax.Array]) -> jax.Array:
    """``True`` if any criterion is met."""
    return jnp.any(jnp.stack([jnp.asarray(v) for v in flags.values()]))


def cma_quantities(state: Any) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(stds [n], sigma * p_c [n], condition [])`` of a CMA-ES or Sep-CMA-ES state."""
    if hasattr(state, "C"):
        diag = jnp.diagonal(state.C)
        condition = (state.D[-1] / state.D[0]) ** 2
    else:
        diag = state.c
        condition = jnp.max(state.c) / jnp.min(state.c)
    return state.sigma * jnp.sqrt(diag), state.sigma * state.p_c, condition
