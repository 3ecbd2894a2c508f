"""Bandit-scheduled MAP-Elites (Cully 2021, "Multi-emitter MAP-Elites"; pyribs 0.12's ``BanditScheduler``).

A pool of emitters, of which ``num_active`` propose the batch of a generation; which ones is decided
by UCB1 over each emitter's record, ``success`` (its candidates that entered the archive, status >
0) over ``selection`` (its candidates so far)::

    pool = [CMAESEmitter(x0, sigma, ranker=r, batch_size=36) for r in ("imp", "rd", "obj")
            for _ in range(3)]
    strategy = BanditMAPElites(archive, pool, num_active=3)

The rules, per generation (``ask``):

* The first generation runs emitters ``0 .. num_active - 1``.
* Later, ``reselect="terminated"`` (default) deactivates the active emitters that restarted since
  the last generation (an emitter whose state has no ``restarts`` counter, e.g. a Gaussian or
  Iso+LineDD emitter, counts as restarted every generation); ``reselect="all"`` deactivates every
  active emitter.
* The free places are filled by UCB1, ``success / selection + zeta * sqrt(log(total success) /
  selection)`` (``inf`` for an emitter never selected), highest first, among the inactive
  emitters; equal scores go to the higher pool index (pyribs' reversed ``argsort``). Where the total
  success is still 0 the exploration term is 0 (pyribs' ``log(0)`` gives NaN scores there, which
  its sort puts ahead of the never-selected emitters).
* The active emitters, in pool order, each ask one batch; the population is their batches
  concatenated (every emitter of the pool must have the same ``batch_size``).

``tell`` adds the population to the archive(s) as :class:`~evotensor.qd.MAPElites` does, credits
each active emitter with its batch (``selection += batch_size``, ``success += added``) and lets it
learn from its slice. Under ``jit`` every emitter of the pool runs inside a conditional taken
where it is active, so the compiled generation holds each emitter's ``ask`` and ``tell`` once
(compile time grows with the pool; pyribs' examples use up to a dozen emitters).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from evotensor.core.checks import ArgumentError, check_choice, check_int, check_real
from evotensor.core.evaluation import Evaluation
from evotensor.core.pytree import pytree_dataclass
from evotensor.qd.archive import Archive
from evotensor.qd.map_elites import MAPElites, MAPElitesState

RESELECT = ("terminated", "all")


@pytree_dataclass
class BanditState(MAPElitesState):
    """:class:`~evotensor.qd.map_elites.MAPElitesState` plus the scheduler's record of the ``P``
    emitters of the pool.

    Attributes:
        active: ``[P]`` bool, the emitters proposing this generation's batch (in pool order, one
            slice of ``batch_size`` rows each).
        success: ``[P]`` float32, candidates of each emitter that entered the archive.
        selection: ``[P]`` float32, candidates each emitter has proposed.
        restarts: ``[P]`` int32, each emitter's restart count when last looked at (-1: none).
    """

    active: jax.Array
    success: jax.Array
    selection: jax.Array
    restarts: jax.Array


class BanditMAPElites(MAPElites):
    """MAP-Elites whose emitters are scheduled by UCB1 (module docstring for the rules).

    Args:
        archive: the search archive.
        emitter_pool: the emitters to choose from (at least ``num_active``; one ``batch_size``).
        num_active: emitters active per generation.
        reselect: ``"terminated"`` or ``"all"``.
        zeta: UCB1's exploration weight, ``>= 0`` (pyribs' default 0.05).
        result_archive, solution, decoder: as for :class:`~evotensor.qd.MAPElites`.

    Attributes:
        population_size: ``num_active * batch_size`` (times the archive's ``num_samples``).
    """

    def __init__(
        self,
        archive: Archive,
        emitter_pool: Sequence[Any],
        num_active: int,
        *,
        reselect: str = "terminated",
        zeta: float = 0.05,
        result_archive: Archive | None = None,
        solution: Any = None,
        decoder: Any = None,
    ):
        super().__init__(
            archive, emitter_pool, result_archive=result_archive, solution=solution, decoder=decoder
        )
        if self.insert_mask is not None:
            raise ArgumentError(
                "every emitter of emitter_pool must add its whole batch to the archive; an emitter "
                "with evaluate-only rows (insert_mask, e.g. MEESEmitter) runs in MAPElites"
            )
        learning = [type(e).__name__ for e in self.emitters if getattr(e, "uses_evaluation", False)]
        if learning:
            raise ArgumentError(
                f"emitter_pool holds {learning[0]}, which learns from every evaluation (uses_evaluation): "
                "it runs in MAPElites"
            )
        self.num_active = check_int(num_active, "num_active")
        if len(self.emitters) < self.num_active:
            raise ArgumentError(
                f"emitter_pool holds {len(self.emitters)} emitters, fewer than num_active={self.num_active}"
            )
        if len({id(e) for e in self.emitters}) != len(self.emitters):
            raise ArgumentError(
                "emitter_pool holds one emitter object more than once (write [Emitter(...) for _ in "
                "range(n)], not [Emitter(...)] * n)"
            )
        sizes = set(self.batch_sizes)
        if len(sizes) != 1:
            raise ArgumentError(
                f"every emitter of emitter_pool must have one batch_size, got {self.batch_sizes}"
            )
        self.batch_size = self.batch_sizes[0]
        self.reselect = check_choice(reselect, "reselect", RESELECT)
        self.zeta = check_real(zeta, "zeta", low=0.0)
        self.population_size = self.num_active * self.batch_size * self.num_samples

    def __repr__(self) -> str:
        return (
            f"BanditMAPElites({type(self.archive).__name__}, pool of {len(self.emitters)}, "
            f"num_active={self.num_active}, reselect={self.reselect!r}, zeta={self.zeta})"
        )

    def on_mesh(self, mesh: Any, axis: str = "pop") -> Any:
        raise ArgumentError("BanditMAPElites does not run on a device mesh yet: run it without mesh=")

    def init(self, key: jax.Array, params: Any = None) -> BanditState:
        """Empty archive(s), every emitter's state, an empty record; the first ``num_active`` emitters
        active."""
        base = super().init(key, params)
        pool = len(self.emitters)
        return BanditState(
            **{name: getattr(base, name) for name in MAPElitesState.__dataclass_fields__},
            active=jnp.arange(pool) < self.num_active,
            success=jnp.zeros((pool,), jnp.float32),
            selection=jnp.zeros((pool,), jnp.float32),
            restarts=jnp.asarray(self._restart_counts(base.emitters)),
        )

    @staticmethod
    def _restart_counts(states: tuple[Any, ...]) -> jax.Array:
        """``[P]`` int32: each emitter state's ``restarts`` (summed over an
        :class:`~evotensor.qd.emitters.EmitterGroup`'s copies; -1 where it has none)."""
        counts = [getattr(s, "restarts", None) for s in states]
        return jnp.stack([jnp.asarray(-1 if c is None else jnp.sum(c), jnp.int32) for c in counts])

    def _schedule(self, state: BanditState) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``(active [P], restarts [P])`` for this generation."""
        pool = len(self.emitters)
        index = jnp.arange(pool, dtype=jnp.int32)
        counts = self._restart_counts(state.emitters)
        if self.reselect == "terminated":
            reselect = (counts > state.restarts) | (counts < 0)
        else:
            reselect = state.active
        first = state.generation == 0
        active = jnp.where(first, index < self.num_active, state.active & ~reselect)
        ucb = state.success / jnp.maximum(state.selection, 1.0)
        total = jnp.sum(state.success)
        log_total = jnp.where(total > 0, jnp.log(jnp.maximum(total, 1.0)), 0.0)
        ucb = ucb + self.zeta * jnp.sqrt(log_total / jnp.maximum(state.selection, 1.0))
        ucb = jnp.where(state.selection > 0, ucb, jnp.inf)
        # highest score first, equal scores: the higher index first; then fill the free places
        order = lax.sort((-ucb, -index), num_keys=2)[1] * -1
        free = ~active[order]
        need = self.num_active - jnp.sum(active, dtype=jnp.int32)
        take = free & (jnp.cumsum(free, dtype=jnp.int32) <= need)
        return active.at[order].max(take), counts

    def ask(self, key: jax.Array, state: BanditState, params: Any = None) -> tuple[Any, BanditState]:
        """``-> (genotypes [num_active * batch_size, ...], state)``: the scheduled emitters' batches."""
        active, restarts = self._schedule(state)
        keys = jax.random.split(key, self.num_active)
        place_of = jnp.cumsum(active, dtype=jnp.int32) - 1  # [P]: each active emitter's place
        b = self.batch_size
        if self.elites.genotype is None:
            x = jnp.zeros((self.num_active * b, self.elites.solution_dim), jnp.float32)
        else:
            zeros = lambda a: jnp.zeros((self.num_active * b, *a.shape), a.dtype)  # noqa: E731
            x = jax.tree_util.tree_map(zeros, self.elites.genotype)
        elites = self.elite_state(state)
        states = []
        # one conditional per emitter of the pool (its code compiled once), taken where it is active
        for i, (emitter, s) in enumerate(zip(self.emitters, state.emitters, strict=True)):
            at = jnp.clip(place_of[i], 0, self.num_active - 1)

            def run(x, s, emitter=emitter, at=at):
                batch, s = emitter.ask(keys[at], s, self.elites, elites)
                put = lambda a, new: lax.dynamic_update_slice_in_dim(a, new.astype(a.dtype), at * b, axis=0)  # noqa: E731
                return jax.tree_util.tree_map(put, x, batch), s

            x, s = lax.cond(active[i], run, lambda x, s: (x, s), x, s)
            states.append(s)
        state = state.replace(emitters=tuple(states), active=active, restarts=restarts)
        return self._genotypes(x), state

    def tell(
        self,
        key: jax.Array,
        state: BanditState,
        genotypes: Any,
        evaluation: Evaluation,
        params: Any = None,
    ) -> tuple[BanditState, dict[str, jax.Array]]:
        """Add the population, credit each active emitter with its batch, let it learn from it."""
        x, objective, measures, archive_state, result, info, counted = self._add(state, genotypes, evaluation)
        elites = self.elite_state(state.replace(archive=archive_state, result=result))
        keys = jax.random.split(key, self.num_active)
        b = self.batch_size
        place_of = jnp.cumsum(state.active, dtype=jnp.int32) - 1

        def rows(a, at):
            return lax.dynamic_slice_in_dim(a, at * b, b)

        states = []
        for i, (emitter, s) in enumerate(zip(self.emitters, state.emitters, strict=True)):
            at = jnp.clip(place_of[i], 0, self.num_active - 1)

            def learn(s, emitter=emitter, at=at):
                sliced = jax.tree_util.tree_map(lambda a: rows(a, at), info)
                mine = jax.tree_util.tree_map(lambda a: rows(a, at), x)
                part = (mine, rows(objective, at), rows(measures, at))
                return emitter.tell(keys[at], s, self.elites, elites, *part, sliced)

            states.append(lax.cond(state.active[i], learn, lambda s: s, s))
        added = jnp.sum((counted.status > 0).reshape(self.num_active, b), axis=1).astype(jnp.float32)
        added = jnp.where(state.active, added[jnp.clip(place_of, 0, self.num_active - 1)], 0.0)
        state = state.replace(
            archive=archive_state,
            result=result,
            emitters=tuple(states),
            generation=state.generation + 1,
            success=state.success + added,
            selection=state.selection + jnp.where(state.active, jnp.float32(b), 0.0),
        )
        return state, self._metrics(archive_state, result, counted)
