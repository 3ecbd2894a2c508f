"""The CMA-ES emitter of CMA-ME (Fontaine et al. 2020) and CMA-MAE (Fontaine & Nikolaidis 2023).

One CMA-ES instance (the public CMA-ES core, :mod:`evotensor.es.core.cma`) samples each batch; the
batch is ranked by how it fared in the archive, and CMA-ES moves towards the best-ranked part::

    emitter = CMAESEmitter(x0=jnp.zeros(10), sigma0=0.5)                              # CMA-ME
    emitter = CMAESEmitter(jnp.zeros(10), 0.5, ranker="imp", selection_rule="mu",
                           restart_rule="basic")                                      # CMA-MAE
    # (CMA-MAE also needs an archive with learning_rate and a finite threshold_min)

pyribs calls it ``EvolutionStrategyEmitter`` (with its ``cma_es`` optimizer); that name, and this
module's old path ``evotensor.qd.emitters.evolution_strategy``, still work for one release.

Semantics follow pyribs' ``EvolutionStrategyEmitter`` with its ``cma_es`` optimizer (files under
``ribs/emitters/``, line numbers of pyribs at commit ``cac4d9d``):

* Rankers (``rankers.py``): ``"imp"`` by ``AddInfo.value`` (l. 159); ``"2imp"`` by ``status``
  (2 new cell, 1 improved, 0 not added), then value (l. 189-203); ``"obj"`` by objective (l. 356);
  ``"2obj"`` by status, then objective (l. 384-391); ``"rd"`` by the projection ``measures @ d``
  (l. 248-250) and ``"2rd"`` by status, then that projection (l. 312-323). The direction is
  ``d = N(0, I_D) * (high - low)`` of the archive's ``ranges``: drawn, not normalised, and the raw
  measures (not centred) are projected (l. 258-262); it is drawn at ``init`` and at every restart
  (``_evolution_strategy_emitter.py`` l. 143-144, 264). Every key is "higher is better".
* Parents (``_evolution_strategy_emitter.py`` l. 245-256): ``selection_rule="filter"`` takes the
  top ``k`` of the ranking, ``k`` the number of solutions with ``status > 0`` (for the two-stage
  rankers these are exactly the added solutions); ``"mu"`` takes the top ``batch_size // 2``.
* CMA-ES update (``opt/_cma_es.py`` l. 239-328): recomputed every generation for the ``k`` parents,
  ``w_i = ln(k + 1/2) - ln i`` normalised to sum 1, ``mu_eff = 1 / sum w^2``,
  ``c_c = (4 + mu_eff/n) / (n + 4 + 2 mu_eff/n)``, ``c_sigma = (mu_eff + 2) / (n + mu_eff + 5)``,
  ``c_1 = 2 / ((n + 1.3)^2 + mu_eff)``, ``c_mu = min(1 - c_1, 2 (mu_eff - 2 + 1/mu_eff) /
  ((n + 2)^2 + mu_eff))``, ``d_sigma = 1 + 2 max(0, sqrt((mu_eff - 1)/(n + 1)) - 1) + c_sigma``
  and the squared-length step-size rule ``sigma *= exp(min(1, c_sigma/d_sigma (|p_sigma|^2/n - 1)/2))``
  (these are :func:`~evotensor.es.core.cma.cma_constants` with ``preset="tutorial"`` at
  ``lambda = 2k``, with pyribs' ``d_sigma``, fed to :func:`~evotensor.es.core.cma.cma_update` with
  ``squared_csa=True``). With ``k = 0`` there is no
  update, but the generation counter (``h_sigma``'s ``2 g``, the lazy eigendecomposition) advances
  (l. 278-281). The eigendecomposition is lazy with pyribs' gap, fixed at construction for
  ``batch_size // 2`` parents: ``C`` is decomposed when more than ``0.5 / ((c_1 + c_mu) n)``
  generations passed since the last decomposition (l. 130-139, 51-64).
* Stopping (``opt/_cma_es.py`` ``check_stop``, l. 161-179), checked after every update: the
  condition number of ``C`` at the decomposition that sampled the batch exceeds ``1e14``; the
  largest axis ``sigma sqrt(max eig C)`` is below ``1e-11``; or the ranking values of the best and
  the worst solution are within ``1e-12`` (Euclidean norm over (status, value) for two-stage
  rankers). These are pyribs' own criteria, not pycma's, so :mod:`evotensor.es.core.termination`
  is not used: its ``tolconditioncov`` is the same test (``cma_quantities``' condition), but its
  ``tolx`` (every coordinate std *and* ``sigma p_c`` below ``tolx``) and ``tolflatfitness`` (best
  equal to the 75% quantile for more than one generation) are different rules.
* Restarts (``_evolution_strategy_emitter.py`` l. 183-201, 259-265): ``"no_improvement"`` when no
  solution of the batch was added; ``"basic"`` only on the stopping criteria; an int ``m`` when
  the number of ``tell`` calls since ``init`` (pyribs' ``itrs``, *not* reset by restarts) is a
  multiple of ``m``; always also on the stopping criteria. A restart resets CMA-ES (``C = I``,
  paths 0, generation 0) around an elite drawn uniformly from the archive after the batch was
  added, with ``sigma = sigma0``, and draws a new direction; ``state.restarts`` counts them.
* Bounds (``opt/_cma_es.py`` l. 208-235): solutions outside ``[low, high]`` are resampled from the
  same distribution.

Deviations from pyribs, and why:

* Ties of the ranking go to the lower batch position (a stable sort); pyribs reverses an ascending
  argsort, which puts the *later* position first (and ``np.argsort``'s default is not stable).
  NaN keys (an objective or measures that are NaN, for ``"obj"``/``"rd"``) rank last here; in
  pyribs' reversed argsort they would rank first.
* The rank-one term is the standard one of pycma's ``purecma`` (which pyribs says it adapts):
  ``p_c`` accumulates the mean shift *divided by* ``sigma`` and enters ``C`` as ``c_1 p_c p_c^T``.
  pyribs accumulates the undivided shift and multiplies the outer product by ``c_1`` twice
  (``_cma_es.py`` l. 265-268, 313), which we do not reproduce.
* Numerics of :func:`~evotensor.es.core.cma.decompose`: ``C`` is symmetrised by averaging (pyribs
  takes the elementwise max) and eigenvalues are lifted to a condition of at most ``1e16`` (pyribs
  takes ``abs``), so the ``1e14`` stopping test still sees ill-conditioned matrices; ``sigma`` is
  kept in ``[1e-20, 1e20]``.
* Bounds: at most 100 resampling rounds (pyribs' warning threshold; it loops forever), then the
  rows still outside are clipped. Static shapes: every round draws a whole batch.
* A restart with an empty archive starts from ``x0`` (pyribs would fail to sample an elite).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from evotensor.core import rng
from evotensor.core.checks import ArgumentError, check_choice, check_int, check_spread
from evotensor.core.pytree import pytree_dataclass
from evotensor.es.core import cma
from evotensor.es.core.base import default_population_size, float_dtype
from evotensor.qd.archive import AddInfo, Archive, ArchiveState
from evotensor.qd.emitters.base import check_bounds, check_flat_archive, check_vector
from evotensor.qd.emitters.rankers import BUILTIN_RANKERS, Ranker, get_ranker

RANKERS = tuple(BUILTIN_RANKERS)  # the built-in rankers' names (see evotensor.qd.emitters.rankers)
SELECTION_RULES = ("filter", "mu")
RESTART_RULES = ("no_improvement", "basic")
# pyribs' check_stop tolerances (ribs/emitters/opt/_cma_es.py l. 163-177)
TOL_CONDITION = 1e14
TOL_AREA = 1e-11
TOL_FLAT = 1e-12
MAX_CONDITION = 1e16  # eigenvalue-lifting guard, above TOL_CONDITION so the stop test still fires
BOUNDS_RESAMPLES = 100  # pyribs' BOUNDS_SAMPLING_THRESHOLD


@pytree_dataclass
class CMAESEmitterState:
    """State of a :class:`CMAESEmitter`.

    Attributes:
        cma: the CMA-ES state (``mean [n]``, ``sigma []``, ``C [n, n]``, ...).
        direction: ``[measure_dim]`` measure-space direction of the ``"rd"``/``"2rd"`` rankers
            (zeros for the other rankers).
        iterations: ``[]`` int32, ``tell`` calls since ``init`` (not reset by restarts).
        restarts: ``[]`` int32, restarts so far.
    """

    cma: cma.CMAESState
    direction: jax.Array
    iterations: jax.Array
    restarts: jax.Array


def _check_bounds(bounds: Any, shape: tuple[int, ...]) -> tuple[jax.Array, jax.Array] | None:
    bounds = check_bounds(bounds, shape, unbounded=True)
    return None if bounds is None else (jnp.asarray(bounds[0]), jnp.asarray(bounds[1]))


class CMAESEmitter:
    """CMA-ES driven by the archive (see the module docstring for every rule and its source).

    Args:
        x0: ``[dims]`` initial mean (and the restart point while the archive is empty).
        sigma0: initial (and restart) step size, > 0.
        ranker: ``"2imp"`` (default, CMA-ME's improvement emitter), ``"imp"`` (CMA-MAE), ``"obj"``,
            ``"2obj"`` (optimizing emitter), ``"rd"``, ``"2rd"`` (random direction emitter), or a
            :class:`~evotensor.qd.emitters.rankers.Ranker` of your own.
        selection_rule: ``"filter"`` (parents: as many top-ranked solutions as were added) or
            ``"mu"`` (the top ``batch_size // 2``).
        restart_rule: ``"no_improvement"`` (restart when nothing of the batch was added),
            ``"basic"`` (only CMA-ES's stopping criteria) or an int ``m >= 1`` (also every ``m``-th
            ``tell``); CMA-ES's stopping criteria restart under every rule.
        batch_size: solutions per :meth:`ask` (``lambda``); ``None``: ``4 + floor(3 ln dims)``.
        bounds: optional ``(low, high)``, each a scalar or ``[dims]`` (``None``/``inf``: unbounded);
            out-of-bounds solutions are resampled.

    Attributes:
        batch_size, solution_dim, x0 ``[dims]``, sigma0, ranker, selection_rule, restart_rule,
        bounds, lazy_gap (``C`` is decomposed once this many generations passed since the last
        decomposition: the smallest integer above pyribs' gap).
    """

    def __init__(
        self,
        x0: Any,
        sigma0: float,
        *,
        ranker: str | Ranker = "2imp",
        selection_rule: str = "filter",
        restart_rule: str | int = "no_improvement",
        batch_size: int | None = None,
        bounds: tuple[Any, Any] | None = None,
    ):
        x0 = check_vector(x0, "x0")
        self.x0 = jnp.asarray(x0)
        self.solution_dim = n = x0.size
        self.sigma0 = check_spread(sigma0, "sigma0")
        self.ranker = get_ranker(ranker)
        self.selection_rule = check_choice(selection_rule, "selection_rule", SELECTION_RULES)
        if isinstance(restart_rule, (int, np.integer)) and not isinstance(restart_rule, bool):
            restart_rule = check_int(restart_rule, "restart_rule")
        else:
            check_choice(restart_rule, "restart_rule", RESTART_RULES)
        self.restart_rule = restart_rule
        batch_size = default_population_size(n) if batch_size is None else batch_size
        self.batch_size = check_int(batch_size, "batch_size", minimum=2)
        self.bounds = _check_bounds(bounds, x0.shape)
        # pyribs fixes the lazy gap at construction from the constants of batch_size // 2 parents
        # and decomposes when strictly more generations passed; cma_update tests ``>=``, so round up
        mu = self.batch_size // 2
        c = cma.cma_constants(n, 2 * mu, 2 * mu, "tutorial", np)
        self.lazy_gap = math.floor(0.5 / (c["c_1"] + c["c_mu"]) / n) + 1

    # -- constants ---------------------------------------------------------------------------------
    def cma_params(self, num_parents: Any, dtype: Any = None) -> cma.CMAESParams:
        """pyribs' CMA-ES constants for ``num_parents`` parents (an int or a traced ``[]`` int32 >= 1).

        ``weights [batch_size]``: ``ln(k + 1/2) - ln i`` for ranks ``i <= k``, normalised, 0 beyond.
        ``lazy_gap`` is infinite: :meth:`tell` runs the lazy decomposition itself (also when it
        skips the update). ``mean_init = x0``, ``sigma_init = sigma0``.
        """
        dtype = float_dtype() if dtype is None else dtype
        n = self.solution_dim
        k = jnp.maximum(jnp.asarray(num_parents, jnp.int32), 1)
        # the tutorial preset's positive weights at lambda = 2k are exactly ln(k + 1/2) - ln i, i <= k
        c = cma.cma_constants(n, 2 * k, self.batch_size, "tutorial", jnp)
        c["d_sigma"] = 1 + 2 * jnp.maximum(0.0, jnp.sqrt((c["mu_eff"] - 1) / (n + 1)) - 1) + c["c_sigma"]
        c["lazy_gap"] = jnp.inf
        x0, sigma0 = self.x0.astype(dtype), jnp.asarray(self.sigma0, dtype)
        return cma.params_from_constants(
            c, dtype, x0, sigma0, max_condition=jnp.asarray(MAX_CONDITION, dtype)
        )

    # -- helpers ---------------------------------------------------------------------------------
    def _direction(self, key: jax.Array, archive: Archive) -> jax.Array:
        """``[measure_dim]``: ``N(0, I) * (high - low)`` for the random-direction rankers, else 0."""
        if not self.ranker.uses_direction:
            return jnp.zeros((archive.measure_dim,), jnp.float32)
        ranges = getattr(archive, "ranges", None)
        if ranges is None:
            raise ArgumentError(f"ranker {self.ranker.name!r} needs an archive with measure ranges")
        size = jnp.asarray([hi - lo for lo, hi in ranges], jnp.float32)
        return rng.normal(key, (archive.measure_dim,), jnp.float32) * size

    def fresh(self, key: jax.Array, archive: Archive, mean: jax.Array, dtype: Any = None):
        """``(CMA-ES state, direction)``: a (re)started CMA-ES at ``mean`` with ``sigma0`` and
        ``C = I``, and a new ranking direction drawn from ``key``."""
        dtype = float_dtype() if dtype is None else dtype
        state = cma.initial_state(mean.astype(dtype), jnp.asarray(self.sigma0, dtype))
        return state, self._direction(key, archive)

    # -- protocol --------------------------------------------------------------------------------
    def init(self, key: jax.Array, archive: Archive) -> CMAESEmitterState:
        """CMA-ES at ``x0`` with ``sigma0`` and ``C = I``; the ranking direction drawn from ``key``."""
        check_flat_archive(archive, "CMAESEmitter")
        if archive.solution_dim != self.solution_dim:
            raise ArgumentError(
                f"CMAESEmitter: x0 has {self.solution_dim} elements but the archive "
                f"stores solutions of {archive.solution_dim}"
            )
        state, direction = self.fresh(key, archive, self.x0, float_dtype())
        return CMAESEmitterState(
            cma=state,
            direction=direction,
            iterations=jnp.zeros((), jnp.int32),
            restarts=jnp.zeros((), jnp.int32),  # its own buffer: a run's state may be donated
        )

    def ask(
        self,
        key: jax.Array,
        state: CMAESEmitterState,
        archive: Archive,
        archive_state: ArchiveState,
    ) -> tuple[jax.Array, CMAESEmitterState]:
        """``mean + sigma B diag(D) z``: ``-> ([batch_size, dims] float32, state)`` (state unchanged)."""
        x = cma.sample(key, state.cma, self.batch_size)
        if self.bounds is None:
            return x.astype(jnp.float32), state
        low, high = (b.astype(x.dtype) for b in self.bounds)

        def outside(x):
            return jnp.any((x < low) | (x > high), axis=1)

        def again(carry):
            i, x = carry
            return (i < BOUNDS_RESAMPLES) & jnp.any(outside(x))

        def resample(carry):
            i, x = carry
            fresh = cma.sample(jax.random.fold_in(key, i + 1), state.cma, self.batch_size)
            return i + 1, jnp.where(outside(x)[:, None], fresh, x)

        _, x = lax.while_loop(again, resample, (jnp.zeros((), jnp.int32), x))
        return jnp.clip(x.astype(jnp.float32), self.bounds[0], self.bounds[1]), state

    def rank(
        self,
        state: CMAESEmitterState,
        objective: jax.Array,
        measures: jax.Array,
        info: AddInfo,
    ) -> tuple[jax.Array, jax.Array]:
        """The ranker: ``-> (order [B] int32, values)``, best first.

        ``values`` is what the ranker sorts by, in batch order: ``[B]`` for one-stage rankers,
        ``[B, 2]`` (status, key) for two-stage ones. Descending keys; NaN keys rank last; ties go
        to the lower batch position.
        """
        return self.ranker.order(objective, measures, info, state.direction)

    def tell(
        self,
        key: jax.Array,
        state: CMAESEmitterState,
        archive: Archive,
        archive_state: ArchiveState,
        solutions: jax.Array,
        objective: jax.Array,
        measures: jax.Array,
        info: AddInfo,
    ) -> CMAESEmitterState:
        """Rank the batch, update CMA-ES with the selected parents, restart if a rule fires.

        Args:
            solutions: ``[B, dims]`` this emitter's batch; objective ``[B]``; measures ``[B, D]``;
            info: the batch's :class:`AddInfo`; archive_state: the archive after the batch.
        """
        new, stop, _ = self.update(state, solutions, objective, measures, info)
        elite_key, direction_key = jax.random.split(key)
        cell = archive.sample_elites(elite_key, archive_state, 1)[0]
        elite = archive.elite_solutions(archive_state, cell[None])[0]
        mean = jnp.where(archive.has_elites(archive_state), elite, self.x0)
        fresh, direction = self.fresh(direction_key, archive, mean, new.mean.dtype)
        return CMAESEmitterState(
            cma=jax.tree_util.tree_map(lambda r, c: jnp.where(stop, r, c), fresh, new),
            direction=jnp.where(stop, direction, state.direction),
            iterations=state.iterations + 1,
            restarts=state.restarts + stop.astype(jnp.int32),
        )

    def update(
        self,
        state: CMAESEmitterState,
        samples: jax.Array,
        objective: jax.Array,
        measures: jax.Array,
        info: AddInfo,
    ) -> tuple[cma.CMAESState, jax.Array, jax.Array]:
        """:meth:`tell` without the restart itself: ``(CMA-ES state after the update, restart [],
        order [B])``: ``restart`` is true where a stopping criterion or the restart rule fires (the
        rule counts this call), ``order`` is the ranking (best first) the update used. ``samples [B,
        n]`` are the points CMA-ES drew for the batch (the solutions here; the gradient coefficients
        in :class:`~evotensor.qd.emitters.GradientArborescenceEmitter`), ranked by the batch's
        ``objective``, ``measures`` and ``info``."""
        current = state.cma
        dtype = current.mean.dtype
        batch = self.batch_size
        order, values = self.rank(state, objective, measures, info)
        added = jnp.sum(info.status > 0).astype(jnp.int32)
        parents = added if self.selection_rule == "filter" else jnp.asarray(batch // 2, jnp.int32)

        # cma_update ranks by a minimized fitness: give each solution its rank position
        position = jnp.zeros((batch,), dtype).at[order].set(jnp.arange(batch, dtype=dtype))
        updated, _ = cma.cma_update(
            current, samples, position, self.cma_params(parents, dtype), squared_csa=True
        )
        generation = current.generation + 1
        # no parents: pyribs skips the update but its evaluation counter still advances
        skipped = current.replace(generation=generation)
        new = jax.tree_util.tree_map(lambda u, s: jnp.where(parents > 0, u, s), updated, skipped)
        C, B, D, last_eigen = cma.lazy_eigen_update(
            generation - current.last_eigen >= self.lazy_gap,
            new.C,
            new.B,
            new.D,
            new.last_eigen,
            generation,
            jnp.asarray(MAX_CONDITION, dtype),
        )
        new = new.replace(C=C, B=B, D=D, last_eigen=last_eigen)

        # pyribs' check_stop: the eigenvalues that sampled this batch (current.D), sigma after the update
        ranked = values[order]
        spread = ranked[0] - ranked[-1]
        spread = jnp.sqrt(jnp.sum(spread**2)) if spread.ndim else jnp.abs(spread)
        stop = (
            ((current.D[-1] / current.D[0]) ** 2 > TOL_CONDITION)
            | (new.sigma * current.D[-1] < TOL_AREA)
            | (spread < TOL_FLAT)
        )
        iterations = state.iterations + 1
        if isinstance(self.restart_rule, int):
            stop = stop | (iterations % self.restart_rule == 0)
        elif self.restart_rule == "no_improvement":
            stop = stop | (added == 0)
        return new, stop, order

    def __repr__(self) -> str:
        return (
            f"CMAESEmitter(solution_dim={self.solution_dim}, sigma0={self.sigma0}, "
            f"ranker={self.ranker.name!r}, selection_rule={self.selection_rule!r}, "
            f"restart_rule={self.restart_rule!r}, batch_size={self.batch_size})"
        )
