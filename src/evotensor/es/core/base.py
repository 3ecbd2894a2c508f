"""Shared machinery of vector-space evolution strategies.

A :class:`VectorStrategy` owns a :class:`~evotensor.core.strategy.SolutionSpace`: users pass any
solution template (array, dict, :class:`evotensor.tree.Tree`, network parameters) and receive
populations in that structure with a leading ``pop`` axis; internally everything is a flat
``[pop, num_dims]`` float32 matrix. Subclasses implement three hooks on flat arrays:

* ``_init(key, params) -> State``
* ``_ask(key, state, params) -> (x [pop, dims], State)``
* ``_tell(key, state, x [pop, dims], fitness [pop] (minimized, finite), params) -> (State, metrics)``

``tell`` around ``_tell``: fitness is cast to the state's float dtype (float64 under x64 when the
state is float64, else float32); NaN/inf become worst-of-batch values (or ``+inf`` for archive
strategies); and a generation without one finite fitness among its real candidates
(:meth:`VectorStrategy.active_mask`, all of them unless a strategy pads its population) leaves the
state as it was, apart from the schedule counters in ``counter_fields`` (see
:func:`keep_state_if_all_invalid`).

Construction checks what can be checked before anything is allocated: ``num_dims`` and
``population_size`` are ints (``>= 1``, ``>= min_population_size``; floats and bools refused), the
template's values are finite, and the memory the state and one generation will need
(:meth:`VectorStrategy.memory_elements`, 4 bytes each) fits
:func:`evotensor.core.checks.memory_limit_bytes` (the default device's memory, or
``EVOTENSOR_MAX_STATE_BYTES``): ``num_dims=10**12``, or CMA-ES's ``[n, n]``
matrices at ``n = 100000``, fail at construction with an error naming ``num_dims`` and the size, not
inside XLA with ``RESOURCE_EXHAUSTED``. Float hyperparameters are checked by each strategy with
:mod:`evotensor.core.checks` (spreads with ``check_spread``: finite, ``> 0`` and ``<= 1e15``).
"""

from __future__ import annotations

import abc
import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core import rng
from evotensor.core.checks import (
    ArgumentError,
    check_int,
    check_spread,
)
from evotensor.core.checks import check_memory as check_memory_bytes
from evotensor.core.evaluation import Evaluation, worst_for_nonfinite
from evotensor.core.strategy import as_solution_space, check_population_size


class VectorStrategy(abc.ABC):
    """Base class: static configuration + ravel/unravel + input checking.

    Args:
        population_size: number of candidates per generation (static).
        solution: template pytree of the solution (exclusive with ``num_dims``).
        num_dims: dimension of a flat solution vector (exclusive with ``solution``).
    """

    name: str = "strategy"
    # False: ``_tell`` sees NaN/inf replaced by finite values worse than this batch (right for
    # ranking within a generation). True: it sees ``+inf`` instead, for archive/elitist strategies
    # that compare across generations, where a finite stand-in could beat an older valid member.
    invalid_fitness_as_inf: bool = False
    # A generation without a single finite fitness carries no information: ``tell`` then returns the
    # state it was given, except these top-level schedule counters, which advance as usual (they
    # count ``tell`` calls / evaluations spent, and sigma or unroll schedules follow them).
    counter_fields: tuple[str, ...] = ("generation", "evaluations", "inner_step")
    # Whether ``tell`` applies that rule. Off by default for archive/elitist strategies
    # (InvalidAsInfStrategy), whose archives already ignore ``+inf`` candidates; those whose search
    # state would still move on an all-invalid generation (iAMaLGaM's model, CEM and DES's Gaussian)
    # turn it on.
    freeze_on_all_invalid: bool = True

    # the state field that :meth:`mean_solution` returns: the distribution mean, or
    # ``"best_solution"`` for archives and incumbent searches, which have no mean
    mean_field: str = "mean"
    min_population_size: int = 1
    # how many ``[n, n]`` float arrays the state and one generation's update hold at once (CMA-ES: C,
    # B, the updated C and the eigendecomposition's workspace), and how many ``[pop, n, n]`` ones
    # (xNES's per-sample outer products); see :meth:`memory_elements`
    square_matrices: int = 0
    member_square_matrices: int = 0

    def __init__(self, population_size: int, solution: Any = None, num_dims: int | None = None):
        n = resolve_num_dims(solution, num_dims)
        population_size = check_int(population_size, "population_size", self.min_population_size)
        check_memory(self, population_size, n)
        self.space = as_solution_space(solution, num_dims)
        self.num_dims = self.space.num_dims
        self.population_size = check_population_size(population_size, self.min_population_size)
        if solution is not None:
            check_finite_template(self.space.template, "solution")

    # -- public protocol -------------------------------------------------------------------
    @abc.abstractmethod
    def default_params(self) -> Any:
        """Literature defaults of the dynamic hyperparameters (a pytree users may vmap over)."""

    def init(self, key: jax.Array, params: Any = None) -> Any:
        """Initial state. ``key``: a new-style ``jax.random.key``."""
        params = self.default_params() if params is None else params
        return self._init(key, params)

    def ask(self, key: jax.Array, state: Any, params: Any = None) -> tuple[Any, Any]:
        """Sample a population: ``(genotypes with leading [pop] axis, state)``."""
        params = self.default_params() if params is None else params
        x, state = self._ask(key, state, params)
        return self.space.unravel_population(x), state

    def tell(
        self,
        key: jax.Array,
        state: Any,
        genotypes: Any,
        evaluation: Evaluation | jax.Array,
        params: Any = None,
    ) -> tuple[Any, dict[str, jax.Array]]:
        """Update from *minimized* fitness. ``evaluation`` may be an :class:`Evaluation` or ``[pop]``."""
        params = self.default_params() if params is None else params
        fitness = evaluation.fitness if isinstance(evaluation, Evaluation) else jnp.asarray(evaluation)
        if fitness.shape != (self.population_size,):
            raise ValueError(f"fitness must have shape ({self.population_size},), got {fitness.shape}")
        x = self.space.ravel_population(genotypes)
        if x.shape != (self.population_size, self.num_dims):
            raise ValueError(
                f"genotypes flatten to {x.shape}, expected ({self.population_size}, {self.num_dims})"
            )
        # float64 state (x64 on, e.g. CMA-ES's pycma reference runs) gets float64 fitness: a cast to
        # float32 would merge fitness values closer than float32 resolution and change the ranking
        fitness = fitness.astype(state_float_dtype(state))
        if self.invalid_fitness_as_inf:
            shown = jnp.where(jnp.isfinite(fitness), fitness, jnp.inf)
        else:
            shown = worst_for_nonfinite(fitness)
        new_state, metrics = self._tell(key, state, x, shown, params)
        if not self.freeze_on_all_invalid:
            return new_state, metrics
        active = self.active_mask(state)
        return keep_state_if_all_invalid(state, new_state, fitness, self.counter_fields, active), metrics

    def mean_solution(self, state: Any) -> Any:
        """The centre of the search as a solution pytree: ``state.<mean_field>``, the distribution
        mean (or, for strategies without one, the best solution so far)."""
        return self.space.unravel(getattr(state, self.mean_field))

    def memory_elements(self, population_size: int, num_dims: int) -> int:
        """An upper estimate of the float32 elements the state and one generation need at once:
        ``(3 pop + 16) n`` (the population, its samples, the state's vectors) plus
        ``square_matrices * n^2`` plus ``member_square_matrices * pop * n^2``. Called by the
        constructor before anything is allocated (only class attributes may be read here)."""
        n, pop = num_dims, population_size
        return (3 * pop + 16) * n + self.square_matrices * n * n + self.member_square_matrices * pop * n * n

    # -- hooks -------------------------------------------------------------------------------
    def active_mask(self, state: Any) -> jax.Array:
        """``[population_size]`` bool: which candidates of ``ask`` are real (default: all).

        Only real candidates count when ``tell`` decides whether a generation had any finite
        fitness; strategies with padding candidates (dynamic population sizes) override it.
        """
        return jnp.ones((self.population_size,), bool)

    @abc.abstractmethod
    def _init(self, key, params): ...

    @abc.abstractmethod
    def _ask(self, key, state, params): ...

    @abc.abstractmethod
    def _tell(self, key, state, x, fitness, params): ...

    def initial_mean(self) -> jax.Array:
        """The template's values as the starting mean ``[num_dims]``."""
        return self.space.template

    def _initial_mean_fields(self) -> dict[str, jax.Array]:
        """The fields a float32 mean-based state starts with: ``mean [dims]`` (the template's values,
        in an own buffer: callers may donate the state), ``generation`` 0, ``best_solution [dims]`` (a
        copy of the mean) and ``best_fitness`` ``+inf``."""
        mean = jnp.array(self.initial_mean(), copy=True)
        return dict(
            mean=mean,
            generation=jnp.zeros((), jnp.int32),
            best_solution=jnp.array(mean, copy=True),
            best_fitness=jnp.asarray(jnp.inf, jnp.float32),
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(population_size={self.population_size}, num_dims={self.num_dims})"


class InvalidAsInfStrategy(VectorStrategy):
    """Base of archive and elitist strategies (GAs, PSO, DE, GLD, hill climbing, SA, PBT, CEM, DES,
    iAMaLGaM): ``_tell`` sees ``+inf`` for every NaN/inf fitness, so an invalid candidate never wins
    a strict ``<`` comparison and never replaces a stored solution; ``+inf`` is also the "not
    evaluated yet" marker of every archive's initial fitness. States keep ``best_solution``.
    """

    invalid_fitness_as_inf = True
    # their archives never take an invalid candidate, so an all-invalid generation only advances
    # schedules (temperature, mutation-step decay): no freeze unless a subclass turns it on. (Also
    # measured: freezing simulated annealing's state with a select breaks its bit-identical vmap,
    # XLA re-associates a re-computed copy of the winning candidate in the unbatched program.)
    freeze_on_all_invalid = False

    def best_solution(self, state: Any) -> Any:
        """Best solution seen so far, as a solution pytree."""
        return self.space.unravel(state.best_solution)

    def _initial_best_fields(self) -> dict[str, jax.Array]:
        """``best_solution [dims]`` (the template's values), ``best_fitness`` ``+inf`` (nothing
        evaluated yet) and ``generation`` 0: the fields every archive state starts with."""
        return dict(
            best_solution=self.initial_mean(),
            best_fitness=jnp.float32(jnp.inf),
            generation=jnp.zeros((), jnp.int32),
        )

    def _next_best_fields(
        self, state: Any, x: jax.Array, fitness: jax.Array
    ) -> tuple[dict[str, jax.Array], dict[str, jax.Array]]:
        """``(fields, metrics)`` after evaluating ``x [pop, dims]`` with ``fitness [pop]`` (``+inf`` =
        invalid): ``best_solution``, ``best_fitness`` (:func:`update_best`) and ``generation + 1``;
        metrics ``best_fitness`` and ``generation_best_fitness``."""
        best_x, best_f = update_best(state.best_solution, state.best_fitness, x, fitness)
        fields = dict(best_solution=best_x, best_fitness=best_f, generation=state.generation + 1)
        return fields, {"best_fitness": best_f, "generation_best_fitness": fitness.min()}


def resolve_num_dims(solution: Any, num_dims: Any) -> int:
    """The flat dimension of ``solution`` (a template pytree) or ``num_dims`` (exactly one), checked
    and computed without allocating anything (``num_dims`` an int ``>= 1``, bools refused)."""
    if (solution is None) == (num_dims is None):
        raise ArgumentError("give exactly one of `solution` (a template pytree) or `num_dims`")
    if num_dims is not None:
        return check_int(num_dims, "num_dims")
    return sum(int(np.size(leaf)) for leaf in jax.tree_util.tree_leaves(solution))


def check_memory(strategy: Any, population_size: int, num_dims: int) -> None:
    """Raise :class:`~evotensor.core.checks.ArgumentError` naming ``num_dims`` (and
    ``population_size``) when ``strategy.memory_elements(population_size, num_dims)`` float32 values
    exceed :func:`evotensor.core.checks.memory_limit_bytes`."""
    check_memory_bytes(
        4 * strategy.memory_elements(population_size, num_dims),
        f"num_dims={num_dims} with population_size={population_size} for "
        f"{type(strategy).__name__}'s state and one generation",
    )


def check_finite_template(values: Any, name: str) -> None:
    """Raise unless every value of ``values`` (a concrete array) is finite in float32."""
    if isinstance(values, jax.core.Tracer):
        return
    if isinstance(values, jax.Array) and bool(jnp.all(jnp.isfinite(values))):
        return  # decided on the device: a large template is not copied to the host
    array = np.asarray(values, np.float64)
    bad = ~np.isfinite(array) | (np.abs(array) > np.finfo(np.float32).max)
    if bad.any():
        where = np.flatnonzero(bad)[:3].tolist()
        raise ArgumentError(
            f"{name} must be finite (in float32), got {array.ravel()[where]} at flat index {where}"
        )


def float_dtype() -> Any:
    """float32 unless x64 is enabled (then float64, used by the pycma reference tests)."""
    return jnp.result_type(float)


def state_float_dtype(state: Any) -> Any:
    """float64 if any floating leaf of ``state`` is float64 (x64 runs), else float32."""
    for leaf in jax.tree_util.tree_leaves(state):
        if hasattr(leaf, "dtype") and leaf.dtype == jnp.float64:
            return jnp.float64
    return jnp.float32


def keep_state_if_all_invalid(
    old: Any,
    new: Any,
    fitness: jax.Array,
    counter_fields: tuple[str, ...] = (),
    active: jax.Array | None = None,
) -> Any:
    """``new`` unless no entry of ``fitness [pop]`` is finite; then ``old`` with ``new``'s counters.

    With ``active [pop]`` (bool), only the entries where it holds count (padding candidates of a
    dynamic population size never make a generation valid).

    An all-NaN/inf generation has no ranking information; without this guard the tie-break by index
    (or the ``+inf`` stand-ins) would still move a distribution, a swarm or a step size. ``old`` and
    ``new`` must have the same pytree structure (true for every strategy's ``_tell``). The fields
    named in ``counter_fields`` that exist on ``new`` (top level) keep their new values. Exact (a
    choice, no arithmetic) and bit-identical under ``vmap``.

    Note: a strategy whose ``ask`` is deterministic proposes the same candidates again after such a
    generation: a retry, right for transient failures (a crashed simulation).
    """
    finite = jnp.isfinite(fitness)
    any_valid = jnp.any(finite if active is None else finite & active)
    counters = {name: getattr(new, name) for name in counter_fields if hasattr(new, name)}
    frozen = old.replace(**counters) if counters else old
    # an elementwise select in every program: a ``cond`` would be a select only when vmapped, and
    # the unbatched program's different fusion broke bit-identical vmap (CMA-ES, restarts, GLD)
    return jax.tree_util.tree_map(lambda n, f: jnp.where(any_valid, n, f), new, frozen)


def initial_population(
    key: jax.Array, center: jax.Array, init_range: jax.Array, population_size: int
) -> jax.Array:
    """``[pop, dims]`` uniform in ``center ± init_range``."""
    u = rng.uniform(key, (population_size, center.shape[0]), jnp.float32, -1.0, 1.0)
    return center + init_range * u


def update_best(
    best_x: jax.Array, best_f: jax.Array, x: jax.Array, fitness: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Best-so-far update. ``best_x [dims]``, ``best_f []``, ``x [pop, dims]``, ``fitness [pop]``.

    ``fitness`` uses ``+inf`` for invalid entries, so they never replace the incumbent.
    """
    i = jnp.argmin(fitness)
    better = fitness[i] < best_f
    return jnp.where(better, x[i], best_x), jnp.where(better, fitness[i], best_f)


def track_best(state: Any, x: jax.Array, fitness: jax.Array) -> tuple[Any, dict[str, jax.Array]]:
    """Best-so-far bookkeeping shared by all strategies here.

    Args:
        state: has ``best_solution [dims]`` and ``best_fitness []``.
        x: ``[pop, dims]`` evaluated samples; fitness: ``[pop]`` minimized, finite.

    Returns:
        ``(state with updated best, metrics)`` where metrics has ``best_fitness``,
        ``generation_best_fitness`` and ``mean_fitness``.
    """
    best_solution, best_fitness = update_best(state.best_solution, state.best_fitness, x, fitness)
    metrics = dict(
        best_fitness=best_fitness, generation_best_fitness=jnp.min(fitness), mean_fitness=jnp.mean(fitness)
    )
    return state.replace(best_solution=best_solution, best_fitness=best_fitness), metrics


def float32_params(params_cls: type, strategy: Any) -> Any:
    """``params_cls(**{name: float32(strategy.<name>)})`` over every field of the params dataclass.

    The default params of a strategy whose constructor stores each dynamic hyperparameter (already
    validated) under its field's name. A missing attribute raises ``AttributeError`` naming it.
    """
    return params_cls(
        **{f.name: jnp.float32(getattr(strategy, f.name)) for f in dataclasses.fields(params_cls)}
    )


def default_population_size(num_dims: int) -> int:
    """``4 + floor(3 ln n)``: CMA-ES's default (Hansen 2016), also the NES default (Wierstra et al.
    2014) and LM-MA-ES's default memory."""
    return 4 + int(math.floor(3 * math.log(num_dims)))


def population_size_or_default(
    population_size: int | None,
    solution: Any,
    num_dims: int | None,
    default: Callable[[int], int] = default_population_size,
) -> int:
    """``population_size``, or ``default(n)`` of the space's dimension ``n`` when it is ``None``
    (``solution`` / ``num_dims`` as for :class:`VectorStrategy`; ``default`` defaults to
    :func:`default_population_size`)."""
    if population_size is not None:
        return population_size
    return default(resolve_num_dims(solution, num_dims))


def check_std_bounds(std_min: Any, std_max: Any) -> tuple[float, float]:
    """Validated mutation-step bounds ``0 <= std_min <= std_max``, ``std_max > 0`` (both finite)."""
    lo = check_spread(std_min, "std_min", allow_zero=True)
    hi = check_spread(std_max, "std_max")
    if lo > hi:
        raise ArgumentError(f"std_min ({std_min}) must be <= std_max ({std_max})")
    return lo, hi


def check_even(population_size: int, why: str) -> None:
    """Raise :class:`~evotensor.core.checks.ArgumentError` unless ``population_size`` is even;
    ``why`` names what needs it (e.g. ``"ARS's antithetic directions"``)."""
    if population_size % 2:
        raise ArgumentError(f"{why} needs an even population_size, got {population_size}")
