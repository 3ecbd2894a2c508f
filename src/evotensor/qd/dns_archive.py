"""Dominated Novelty Search (Bahlous-Boldi, Faldor et al. 2025): a population of fixed capacity
whose survivors are chosen by novelty among the fitter.

Each ``add`` merges the stored population with the batch and keeps the ``capacity`` members of
highest *dominated novelty*: a member's mean Euclidean distance in measure space to its ``k``
nearest members of higher or equal objective (``+inf`` when none is, so the best always survive).
No cells, no thresholds: a solution survives while it is the best of its neighbourhood or far from
every better one. The rules are pyribs 0.12's ``DNSArchive``, under ``jit``::

    archive = DNSArchive(solution_dim=10, measure_dim=2, capacity=1024, k_neighbors=3)
    state = archive.init()
    state, info = archive.add(state, solutions, objective, measures)   # info.dns [B]

Semantics, pyribs' unless said:

* Competitors: the stored members and the batch's valid candidates (finite objective, measures and
  solution). ``dns_i`` = mean distance to the ``min(k, f_i)`` nearest of the ``f_i`` other
  competitors with objective ``>= objective_i`` (pyribs' ``>=``: equal objectives are fitter to
  each other); ``+inf`` when ``f_i = 0``.
* When the competitors fit, all survive; otherwise the ``capacity`` of highest ``dns``. Equal
  scores (for example several ``+inf``) go to the stored members first, then the batch in order
  (pyribs: ``argpartition``'s order).
* Survivors are stored in rows ``0 .. size - 1`` in that same order (stored members keep their
  relative order; ``occupied`` is a prefix). pyribs stores them sorted by score.
* ``status``: 2 for a batch candidate that survived, 0 otherwise; ``value`` and ``dns``: its
  dominated novelty against the union (``-inf`` for an invalid candidate); ``index``: its new row,
  or -1. A candidate with a non-finite entry never enters (pyribs raises).
* Statistics: ``coverage`` is the size over the capacity, ``norm_qd_score`` the QD score over the
  capacity (pyribs' ``cells = capacity``).

``add`` costs ``O(N^2 D)`` for ``N = capacity + batch`` (every competitor against every other, in
blocks of query rows: memory ``O(block N)``), as pyribs' dense ``cdist``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from evotensor.core.checks import ArgumentError, check_int
from evotensor.core.pytree import pytree_dataclass
from evotensor.qd.archive import (
    NEW,
    NOT_ADDED,
    AddInfo,
    ArchiveState,
    UnstructuredArchive,
    candidate_is_valid,
)

_QUERY_BLOCK = 256  # competitors scored at a time (each against all N)


@pytree_dataclass
class DNSAddInfo(AddInfo):
    """:class:`~evotensor.qd.archive.AddInfo` of a :class:`DNSArchive` (all ``[B]``).

    Attributes:
        dns: float32 dominated novelty of each candidate against the union (``-inf`` if invalid).
    """

    dns: jax.Array


def dominated_novelty(measures: jax.Array, objective: jax.Array, alive: jax.Array, k: int) -> jax.Array:
    """``[N]``: each alive row's mean distance to its ``k`` nearest other alive rows of objective
    ``>=`` its own (fewer if fewer exist; ``+inf`` if none), ``-inf`` for a row not alive.
    ``measures [N, D], objective [N], alive [N]``; blocks of query rows, no ``[N, N]`` matrix."""
    measures = jnp.asarray(measures, jnp.float32)
    n = measures.shape[0]
    if measures.ndim != 2 or jnp.shape(objective) != (n,) or jnp.shape(alive) != (n,):
        raise ArgumentError(
            f"measures, objective and alive must be [N, D], [N] and [N], got {list(measures.shape)}, "
            f"{list(jnp.shape(objective))} and {list(jnp.shape(alive))}"
        )
    k = min(check_int(k, "k"), n)
    rows = jnp.arange(n)

    def one(i):
        d = jnp.sqrt(jnp.sum(jnp.square(measures - measures[i]), axis=1))
        fitter = alive & (rows != i) & (objective >= objective[i])
        nearest = -lax.top_k(-jnp.where(fitter, d, jnp.inf), k)[0]
        found = jnp.isfinite(nearest)
        count = jnp.sum(found, dtype=jnp.int32)
        mean = jnp.sum(jnp.where(found, nearest, 0.0)) / jnp.maximum(count, 1).astype(jnp.float32)
        return jnp.where(alive[i], jnp.where(count > 0, mean, jnp.inf), -jnp.inf)

    return lax.map(one, rows, batch_size=min(_QUERY_BLOCK, n))


class DNSArchive(UnstructuredArchive):
    """Dominated Novelty Search's population of fixed ``capacity`` (module docstring for the rules).

    Args (keyword-only):
        solution_dim: elements of a (flattened) solution (or ``genotype``: a template pytree, see
            :class:`~evotensor.qd.archive.Archive`).
        measure_dim: measure-space dimensions.
        capacity: members kept (the rows of the state).
        k_neighbors: ``k``, the fitter neighbours averaged over.
        qd_score_offset: subtracted from every objective in the QD score.
        extra_fields: ``{name: (shape, dtype)}`` stored next to each member.
    """

    def __init__(
        self,
        *,
        solution_dim: int | None = None,
        measure_dim: int,
        capacity: int,
        k_neighbors: int,
        qd_score_offset: float = 0.0,
        extra_fields: Mapping[str, tuple[Sequence[int], Any]] | None = None,
        genotype: Any = None,
    ):
        super().__init__(
            solution_dim=solution_dim,
            genotype=genotype,
            qd_score_offset=qd_score_offset,
            extra_fields=extra_fields,
        )
        self.measure_dim = check_int(measure_dim, "measure_dim")
        self.num_cells = self.capacity = check_int(capacity, "capacity")
        self.k_neighbors = check_int(k_neighbors, "k_neighbors")
        self._check_memory("capacity")

    def __repr__(self) -> str:
        return (
            f"DNSArchive(solution_dim={self.solution_dim}, measure_dim={self.measure_dim}, "
            f"capacity={self.capacity}, k_neighbors={self.k_neighbors})"
        )

    def init(self) -> ArchiveState:
        """An empty population."""
        return self._empty(self.capacity)

    def _check_state(self, state: Any) -> ArchiveState:
        if not isinstance(state, ArchiveState) or state.objective.shape[0] != self.capacity:
            raise ArgumentError(
                f"state must be this archive's state of {self.capacity} rows (from init), got "
                f"{type(state).__name__}"
            )
        return state

    def _nearest(self, state: ArchiveState, measures: jax.Array) -> jax.Array:
        def one(m):
            d2 = jnp.sum(jnp.square(state.measures - m), axis=1)
            return jnp.argmin(jnp.where(state.occupied, d2, jnp.inf)).astype(jnp.int32)

        if measures.shape[0] == 0:
            return jnp.zeros(0, jnp.int32)
        return lax.map(one, measures, batch_size=_QUERY_BLOCK)

    def add(
        self,
        state: ArchiveState,
        solutions: jax.Array,
        objective: jax.Array | None,
        measures: jax.Array,
        fields: Mapping[str, jax.Array] | None = None,
    ) -> tuple[ArchiveState, DNSAddInfo]:
        """Merge a batch into the population and keep the survivors (module docstring).

        Args:
            state: the population (:meth:`init`).
            solutions: ``[B, solution_dim]`` (genotypes ``[B]`` for an archive of genotypes).
            objective: ``[B]`` (maximized), or ``None`` for 0 everywhere (pure novelty: every
                member is then "fitter" than every other).
            measures: ``[B, measure_dim]``.
            fields: ``{name: [B, *shape]}`` for every declared extra field.

        Returns:
            ``(new_state, DNSAddInfo)``.
        """
        state = self._check_state(state)
        if objective is None:
            objective = jnp.zeros((jnp.shape(jax.tree_util.tree_leaves(solutions)[0])[0],), jnp.float32)
        solutions, objective, measures, fields = self._check_batch(solutions, objective, measures, fields)
        batch, capacity = objective.shape[0], self.capacity
        valid = candidate_is_valid(solutions, objective, measures)
        union_measures = jnp.concatenate([state.measures, jnp.where(valid[:, None], measures, 0.0)])
        union_objective = jnp.concatenate([state.objective, jnp.where(valid, objective, 0.0)])
        alive = jnp.concatenate([state.occupied, valid])
        score = dominated_novelty(union_measures, union_objective, alive, self.k_neighbors)

        # the capacity of highest score survive; equal scores: the lower union row first
        n = capacity + batch
        order = lax.sort((-score, jnp.arange(n, dtype=jnp.int32)), num_keys=2)[1]
        rank = jnp.zeros(n, jnp.int32).at[order].set(jnp.arange(n, dtype=jnp.int32))
        survive = alive & (rank < capacity)
        row = jnp.cumsum(survive, dtype=jnp.int32) - 1  # survivors packed in union order
        target = jnp.where(survive, row, capacity)  # past the end: dropped

        def pack(old, new):
            union = jnp.concatenate([old, new.astype(old.dtype)])
            empty = jnp.zeros_like(old)
            return empty.at[target].set(union, mode="drop")

        size = jnp.sum(survive, dtype=jnp.int32)
        new_state = ArchiveState(
            solutions=jax.tree_util.tree_map(pack, state.solutions, solutions),
            objective=pack(state.objective, objective),
            measures=pack(state.measures, measures),
            threshold=state.threshold,
            occupied=jnp.arange(capacity) < size,
            fields={name: pack(value, fields[name]) for name, value in state.fields.items()},
        )
        mine = score[capacity:]
        entered = survive[capacity:]
        info = DNSAddInfo(
            status=jnp.where(entered, NEW, NOT_ADDED).astype(jnp.int32),
            value=mine,
            index=jnp.where(entered, row[capacity:], -1).astype(jnp.int32),
            dns=mine,
        )
        return new_state, info
