"""The restart machinery of IPOP- and BIPOP-CMA-ES (:class:`~evotensor.es.IPOPCMAES`,
:class:`~evotensor.es.BIPOPCMAES`): a whole restart campaign in one compiled scan.

The population size is *dynamic*: it lives in the state (``state.population_size``, an int32 up to
the static ``max_population_size``). ``ask`` always returns ``max_population_size`` candidates;
those at index ``>= state.population_size`` are padding (equal to the current mean). ``tell``
ignores the fitness and the values of padding candidates: they are ranked after every real
candidate (fitness set to ``+inf``) and receive recombination weight 0, so they never touch the
state. Evaluating them is wasted work but harmless; :meth:`RestartCMAES.active_mask` tells which
candidates are real, and only those decide whether a generation had any finite fitness (all real
ones NaN/inf: the campaign stays as it was, only ``evaluations`` advances). Because shapes never
change, restarts need no recompilation and a campaign can be ``vmap``-ped over seeds or
hyperparameters, each run restarting on its own schedule.

A run ends when any criterion of :mod:`evotensor.es.core.termination` fires (tolfun, tolx,
tolstagnation, tolconditioncov, tolflatfitness, tolfacupx) or after ``maxiter`` generations
(pycma's ``100 + 150 (n+3)^2 / sqrt(lambda)``). Then, inside the same ``tell``:

* IPOP (Auger & Hansen 2005; pycma ``fmin(restarts=..., incpopsize=2)``): ``lambda <- 2 lambda``,
  the mean and ``sigma`` restart from ``mean_init`` and ``sigma_init``;
* BIPOP (Hansen 2009; pycma ``fmin(bipop=True)``): the first run (default ``lambda_0``) counts as
  "small". While the evaluations spent in small runs are below those of large runs, a small run
  starts with ``lambda = floor(lambda_0 (2^k)^(U^2))``, ``sigma = sigma_init 0.01^U`` (``U ~ U(0,1)``,
  ``k`` large runs so far) and at most ``min(maxiter_0, 0.5 evals_large / lambda)`` generations;
  otherwise a large run with ``lambda = lambda_0 2^(k+1)``.

Population sizes are capped at ``max_population_size`` (the campaign then continues at that size).
With ``init_bounds=(low, high)`` every restart draws its mean uniformly in the box (pycma's
``x0`` as a callable), otherwise it restarts from ``mean_init``.

Step size: ``step_size`` as for :class:`~evotensor.es.CMAES` (``"auto"``: CSA below 300
dimensions, two-point adaptation from 300 on, as pycma's restarts do). With TPA, a new run starts
without line samples (its mean shift is 0), and the rank difference is taken over the real
candidates (``z`` divided by ``lambda - 1`` of the current run).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from evotensor.core import rng
from evotensor.core.checks import MAX_SPREAD, check_int, check_ranges, check_real
from evotensor.core.pytree import pytree_dataclass
from evotensor.es.core.base import VectorStrategy, default_population_size, float_dtype, resolve_num_dims
from evotensor.es.core.cma import (
    GUARDS,
    CMAESParams,
    CMAESState,
    cma_constants,
    cma_update,
    initial_state,
    params_from_constants,
    resolve_step_size,
    sample,
)
from evotensor.es.core.mean_sigma import check_mean_init, check_sigma_init
from evotensor.es.core.termination import (
    FLAGS,
    Termination,
    TerminationParams,
    TerminationState,
    cma_quantities,
    default_termination_params,
)


@pytree_dataclass
class RestartParams:
    """Dynamic hyperparameters: ``mean_init [n]``, ``sigma_init []``, the numerical guards of
    CMA-ES, ``inc_popsize []`` (IPOP factor, 2) and the termination tolerances."""

    mean_init: jax.Array
    sigma_init: jax.Array
    sigma_min: jax.Array
    sigma_max: jax.Array
    max_condition: jax.Array
    inc_popsize: jax.Array
    termination: TerminationParams


@pytree_dataclass
class RestartState:
    """State of a restart campaign.

    Attributes:
        cma: the current run's :class:`~evotensor.es.core.cma.CMAESState`.
        run_params: the current run's constants (``weights [max_pop]``, zero beyond ``lambda``).
        term: termination histories of the current run.
        population_size: ``[]`` int32 current ``lambda``.
        run_sigma: ``[]`` initial ``sigma`` of the current run (for ``tolfacupx``).
        run_generation: ``[]`` int32 generations of the current run.
        max_generations: ``[]`` maxiter of the current run.
        restarts: ``[]`` int32 restarts so far; ``large_runs``: ``[]`` int32 large runs (BIPOP).
        evals_small, evals_large: ``[]`` evaluations spent in small / large runs (BIPOP budget).
        is_large: ``[]`` bool, regime of the current run.
        evaluations: ``[]`` int32 real candidates evaluated in total.
        best_solution: ``[n]``, best_fitness: ``[]`` over the whole campaign.
    """

    cma: CMAESState
    run_params: CMAESParams
    term: TerminationState
    population_size: jax.Array
    run_sigma: jax.Array
    run_generation: jax.Array
    max_generations: jax.Array
    restarts: jax.Array
    large_runs: jax.Array
    evals_small: jax.Array
    evals_large: jax.Array
    is_large: jax.Array
    evaluations: jax.Array
    best_solution: jax.Array
    best_fitness: jax.Array


class RestartCMAES(VectorStrategy):
    """Common machinery of :class:`~evotensor.es.IPOPCMAES` and :class:`~evotensor.es.BIPOPCMAES`
    (``bipop`` selects).

    Args:
        solution / num_dims: the solution template or flat dimension (exactly one).
        max_population_size: static upper bound of ``lambda`` (``ask`` returns this many).
        base_population_size: ``lambda_0``; ``None`` -> ``4 + floor(3 ln n)``.
        sigma_init: initial step size of every (large) run.
        mean_init: optional initial mean ``[n]``.
        init_bounds: optional ``(low, high)``: each restart draws its mean uniformly in this box.
        step_size: ``"auto"`` (CSA below 300 dimensions, TPA from 300 on), ``"csa"`` or ``"tpa"``.
    """

    bipop: bool = False
    min_population_size = 2
    square_matrices = 4  # as CMAES: C, B, the updated C, the eigendecomposition's workspace

    def memory_elements(self, population_size: int, num_dims: int) -> int:
        """As :class:`~evotensor.es.CMAES`, plus the termination criteria's fitness histories (two of
        ``100 + 100 n^1.5 / lambda_0`` entries, one of ``10 + 30 n / lambda_0``; ``lambda_0 >= 2``) and
        the padded per-run constants."""
        n = num_dims
        histories = 2 * (100 + 50 * math.ceil(n**1.5)) + 10 + 15 * n + 64
        return super().memory_elements(population_size, num_dims) + histories + 2 * population_size

    def __init__(
        self,
        solution: Any = None,
        num_dims: int | None = None,
        *,
        max_population_size: int,
        base_population_size: int | None = None,
        sigma_init: float = 1.0,
        mean_init: Any = None,
        init_bounds: tuple[float, float] | None = None,
        step_size: str = "auto",
    ):
        n = resolve_num_dims(solution, num_dims)
        lam0 = default_population_size(n) if base_population_size is None else base_population_size
        lam0 = check_int(lam0, "base_population_size", 2)
        max_pop = check_int(max_population_size, "max_population_size", lam0)
        super().__init__(max_pop, solution, num_dims)
        self.base_population_size = lam0
        self.max_population_size = max_pop
        self.sigma_init = check_sigma_init(sigma_init)
        self._mean_init = check_mean_init(mean_init, self.initial_mean(), self.num_dims)
        if init_bounds is not None:
            init_bounds = check_ranges([init_bounds], "init_bounds", count=1)[0]
            for bound in init_bounds:
                check_real(bound, "init_bounds", -MAX_SPREAD, MAX_SPREAD)
        self.init_bounds = init_bounds
        self.termination = Termination(n, max_pop, lam0)
        self.step_size = resolve_step_size(step_size, n)
        self.two_point = self.step_size == "tpa"

    # -- params and per-run constants -------------------------------------------------------
    def default_params(self) -> RestartParams:
        dtype = float_dtype()
        s = lambda v: jnp.asarray(v, dtype)  # noqa: E731
        return RestartParams(
            mean_init=s(self._mean_init),
            sigma_init=s(self.sigma_init),
            **{k: s(v) for k, v in GUARDS.items()},
            inc_popsize=s(2.0),
            termination=default_termination_params(),
        )

    def run_params(self, population_size: jax.Array, params: RestartParams) -> CMAESParams:
        """pycma's constants for a (traced) ``lambda``, weights padded to ``max_population_size``."""
        lam, size = population_size, self.max_population_size
        consts = cma_constants(self.num_dims, lam, size, "pycma", jnp, two_point=self.two_point)
        guards = {k: getattr(params, k) for k in GUARDS}
        return params_from_constants(
            consts, params.sigma_init.dtype, params.mean_init, params.sigma_init, **guards
        )

    def max_iterations(self, population_size: jax.Array) -> jax.Array:
        """pycma's ``maxiter = 100 + 150 (n+3)^2 // sqrt(lambda)``."""
        lam = jnp.asarray(population_size, jnp.float32)
        return 100 + jnp.floor(150 * (self.num_dims + 3) ** 2 / jnp.sqrt(lam))

    def active_mask(self, state: RestartState) -> jax.Array:
        """``[max_population_size]`` bool: which candidates of ``ask`` are real (the rest is padding,
        ignored by ``tell``, also when it decides whether a generation was all invalid)."""
        return jnp.arange(self.max_population_size) < state.population_size

    # -- protocol ----------------------------------------------------------------------------
    def _new_run(self, key, params, lam, sigma, max_generations):
        dtype = params.sigma_init.dtype
        if self.init_bounds is None:
            mean = params.mean_init
        else:
            low, high = self.init_bounds
            mean = rng.uniform(key, (self.num_dims,), dtype, low, high)
        return (
            initial_state(jnp.asarray(mean, dtype), jnp.asarray(sigma, dtype)),
            self.run_params(lam, params),
            self.termination.init(),
            jnp.asarray(max_generations, jnp.float32),
        )

    def _init(self, key, params):
        lam0 = jnp.asarray(self.base_population_size, jnp.int32)
        cma, run_params, term, max_gens = self._new_run(
            key, params, lam0, params.sigma_init, self.max_iterations(lam0)
        )
        dtype = params.sigma_init.dtype
        zero = jnp.zeros((), jnp.int32)
        return RestartState(
            cma=cma,
            run_params=run_params,
            term=term,
            population_size=lam0,
            run_sigma=params.sigma_init,
            run_generation=zero,
            max_generations=max_gens,
            restarts=zero,
            large_runs=zero,
            evals_small=zero,
            evals_large=zero,
            is_large=jnp.asarray(False),
            evaluations=zero,
            best_solution=cma.mean,
            best_fitness=jnp.asarray(jnp.inf, dtype),
        )

    def _ask(self, key, state, params):
        x = sample(key, state.cma, self.max_population_size, self.two_point)
        mask = self.active_mask(state)
        return jnp.where(mask[:, None], x, state.cma.mean), state

    def _next_run(self, key, state: RestartState, params: RestartParams, run_evals):
        """Population size, sigma, maxiter and bookkeeping of the run that follows ``state``'s."""
        lam0 = self.base_population_size
        max_pop = self.max_population_size
        evals_small = state.evals_small + jnp.where(state.is_large, 0, run_evals)
        evals_large = state.evals_large + jnp.where(state.is_large, run_evals, 0)
        inc = params.inc_popsize
        if not self.bipop:
            lam = jnp.floor(lam0 * inc ** (state.restarts + 1).astype(inc.dtype))
            lam = jnp.minimum(lam, max_pop).astype(jnp.int32)
            return (
                lam,
                params.sigma_init,
                self.max_iterations(lam),
                jnp.asarray(True),
                state.large_runs,
                evals_small,
                evals_large,
            )
        u_lam, u_sigma = rng.uniform(key, (2,), params.sigma_init.dtype)
        small = evals_small < jnp.maximum(1, evals_large)
        large_runs = state.large_runs + jnp.where(small, 0, 1)
        big = jnp.floor(lam0 * inc ** large_runs.astype(inc.dtype))
        small_lam = jnp.floor(lam0 * (inc ** state.large_runs.astype(inc.dtype)) ** (u_lam**2))
        lam = jnp.minimum(jnp.where(small, small_lam, big), max_pop).astype(jnp.int32)
        sigma = jnp.where(small, params.sigma_init * 0.01**u_sigma, params.sigma_init)
        maxiter0 = self.max_iterations(lam0)
        max_gens = jnp.where(
            small, jnp.minimum(maxiter0, jnp.floor(0.5 * evals_large / lam.astype(jnp.float32))), maxiter0
        )
        return lam, sigma, max_gens, ~small, large_runs, evals_small, evals_large

    def _tell(self, key, state, x, fitness, params):
        dtype = state.cma.mean.dtype
        lam = state.population_size
        mask = self.active_mask(state)
        f = jnp.where(mask, fitness.astype(dtype), jnp.inf)
        x = jnp.where(mask[:, None], x.astype(dtype), state.cma.mean)
        cma, metrics = cma_update(state.cma, x, f, state.run_params, False, self.two_point, active_size=lam)
        term = self.termination.update(state.term, f, lam)
        stds, path, cond = cma_quantities(cma)
        flags = self.termination.check(term, f, stds, path, cond, state.run_sigma, params.termination, lam)
        run_generation = state.run_generation + 1
        flags["maxiter"] = run_generation.astype(jnp.float32) >= state.max_generations
        stop = jnp.any(jnp.stack(list(flags.values())))

        best = jnp.argmin(f)
        better = f[best] < state.best_fitness
        best_solution = jnp.where(better, x[best], state.best_solution)
        best_fitness = jnp.where(better, f[best], state.best_fitness)
        evaluations = state.evaluations + lam

        k_run, k_mean = jax.random.split(key)
        run_evals = run_generation * lam
        new_lam, new_sigma, new_max, is_large, large_runs, ev_small, ev_large = self._next_run(
            k_run, state, params, run_evals
        )
        new_cma, new_run_params, new_term, new_max = self._new_run(
            k_mean, params, new_lam, new_sigma, new_max
        )
        continued = RestartState(
            cma=cma,
            run_params=state.run_params,
            term=term,
            population_size=lam,
            run_sigma=state.run_sigma,
            run_generation=run_generation,
            max_generations=state.max_generations,
            restarts=state.restarts,
            large_runs=state.large_runs,
            evals_small=state.evals_small,
            evals_large=state.evals_large,
            is_large=state.is_large,
            evaluations=evaluations,
            best_solution=best_solution,
            best_fitness=best_fitness,
        )
        restarted = RestartState(
            cma=new_cma,
            run_params=new_run_params,
            term=new_term,
            population_size=new_lam,
            run_sigma=jnp.asarray(new_sigma, dtype),
            run_generation=jnp.zeros((), jnp.int32),
            max_generations=new_max,
            restarts=state.restarts + 1,
            large_runs=large_runs,
            evals_small=ev_small,
            evals_large=ev_large,
            is_large=is_large,
            evaluations=evaluations,
            best_solution=best_solution,
            best_fitness=best_fitness,
        )
        new_state = jax.tree_util.tree_map(lambda r, c: jnp.where(stop, r, c), restarted, continued)
        out = {
            "sigma": cma.sigma,
            "population_size": lam,
            "restarted": stop,
            "restarts": new_state.restarts,
            **{f"stop_{name}": flags[name] for name in (*FLAGS, "maxiter")},
        }
        return new_state, out

    def mean_solution(self, state: RestartState) -> Any:
        return self.space.unravel(state.cma.mean)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_dims={self.num_dims}, "
            f"base_population_size={self.base_population_size}, "
            f"max_population_size={self.max_population_size}, step_size={self.step_size!r})"
        )
