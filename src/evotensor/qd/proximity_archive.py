"""The novelty-search archive (Lehman & Stanley 2011): an unstructured archive of bounded capacity.

Solutions enter by *novelty*, the mean Euclidean distance in measure space to their ``k`` nearest
neighbours in the archive, not by a cell; with *local competition* (Lehman & Stanley 2011b, NSLC) a
candidate that is not novel enough may replace its nearest neighbour when its objective is higher.
The rules are pyribs' ``ProximityArchive`` (0.12), with a fixed capacity so that ``add`` runs under
``jit``/``vmap``/``lax.scan``::

    archive = ProximityArchive(solution_dim=10, measure_dim=2, capacity=10_000,
                               k_neighbors=15, novelty_threshold=0.05)
    state = archive.init()
    state, info = archive.add(state, solutions, objective, measures)   # info.novelty [B]

Batch semantics (every candidate is judged against the archive *before* the batch, as in pyribs):

* ``novelty`` = mean distance to the ``min(k, size)`` nearest stored measures; an empty archive gives
  every candidate the current novelty threshold (so the first batch enters whole).
* A valid candidate (finite objective, measures and solution) with ``novelty >= threshold`` is
  *novel*: it is appended (status 2), in batch order, at the rows after the stored ones. Two novel
  candidates of one batch never see each other. If the archive is full, the novel candidates that
  do not fit are not added (status 0) and are counted in ``state.dropped``: size ``capacity`` for
  the run you have in mind (pyribs' archive grows without bound instead).
* With ``local_competition=True``, a valid candidate that is not novel beats its nearest neighbour
  (the stored measure closest to it; equal distances: the lowest row) if its objective is strictly
  higher (status 1); among the candidates that beat one neighbour, the highest objective replaces it
  (exact ties: the lowest batch position), as in pyribs, whose status is 1 for every candidate that
  beats its neighbour, the replacing one or not.
* ``value``: a novel candidate's objective; otherwise its objective minus its nearest neighbour's
  (pyribs' local-competition values, given in both modes); ``-inf`` for an invalid candidate.
  ``local_competition``: how many of the candidate's ``min(k, size)`` nearest neighbours have a
  lower objective (0 while the archive is empty).
* Threshold decay (``threshold_decay_rate``): after ``threshold_decay_itrs`` calls to ``add`` in a
  row without a novel candidate, ``threshold <- max(threshold_decay_min, threshold * rate)``.
* A candidate with a non-finite objective, measure or solution entry is never added (status 0,
  value and novelty ``-inf``, index -1) and is not counted as novel.

Rows ``0 .. size - 1`` hold the elites (``occupied`` is always a prefix). Statistics follow pyribs:
``coverage`` is 1 for a non-empty archive (it has no cells to cover) and ``norm_qd_score`` is the
QD score over the number of elites. ``add`` costs ``O(B C D)`` for ``B`` candidates against a
capacity of ``C`` (one ``[B, C]`` distance matrix and a top-``k``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from evotensor.core.checks import ArgumentError, check_int, check_memory, check_real
from evotensor.core.pytree import pytree_dataclass
from evotensor.qd.archive import (
    IMPROVED,
    NEW,
    NOT_ADDED,
    AddInfo,
    ArchiveState,
    UnstructuredArchive,
    candidate_is_valid,
)

_BLOCK = 512  # archive rows per distance block (see ProximityArchive._blocks)
_HALF_WINDOW = 256  # elites on each side of a query along the first measure (ProximityArchive._window)


@pytree_dataclass
class ProximityState(ArchiveState):
    """:class:`~evotensor.qd.archive.ArchiveState` of ``C = capacity`` rows, plus:

    Attributes:
        novelty_threshold: ``[]`` float32, the current threshold (it decays where configured).
        stall: ``[]`` int32, calls to ``add`` in a row without a novel candidate (threshold decay).
        dropped: ``[]`` int32, novel candidates not stored because the archive was full (all calls).
    """

    novelty_threshold: jax.Array
    stall: jax.Array
    dropped: jax.Array


@pytree_dataclass
class ProximityAddInfo(AddInfo):
    """:class:`~evotensor.qd.archive.AddInfo` (``status``, ``value``, ``index``: the row the candidate
    was written to, else its nearest neighbour's, -1 when invalid or when the archive was empty and it
    was not added), plus ``novelty [B]`` float32 and ``local_competition [B]`` int32 (see the module
    docstring)."""

    novelty: jax.Array
    local_competition: jax.Array


class ProximityArchive(UnstructuredArchive):
    """Novelty-search archive of fixed ``capacity`` (module docstring for the rules).

    Args (keyword-only):
        solution_dim: elements of a (flattened) solution (or ``genotype``: a template pytree, see
            :class:`~evotensor.qd.archive.Archive`).
        measure_dim: measure-space dimensions.
        capacity: rows of the archive (its most elites).
        k_neighbors: ``k`` of the novelty (fewer while the archive holds fewer elites).
        novelty_threshold: novelty needed to enter (``>= 0``).
        local_competition: let a candidate that is not novel replace a worse nearest neighbour.
        qd_score_offset: subtracted from every objective in the QD score.
        threshold_decay_rate: ``None`` (no decay) or a factor in ``[0, 1]``.
        threshold_decay_itrs: calls without a novel candidate before the threshold decays (``>= 1``).
        threshold_decay_min: the threshold never decays below this (``>= 0``).
        extra_fields: ``{name: (shape, dtype)}`` stored next to each elite.
    """

    def __init__(
        self,
        *,
        solution_dim: int | None = None,
        measure_dim: int,
        capacity: int,
        k_neighbors: int,
        novelty_threshold: float,
        local_competition: bool = False,
        qd_score_offset: float = 0.0,
        threshold_decay_rate: float | None = None,
        threshold_decay_itrs: int = 1,
        threshold_decay_min: float = 0.0,
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
        self.novelty_threshold = check_real(novelty_threshold, "novelty_threshold", low=0.0)
        if not isinstance(local_competition, bool):
            raise ArgumentError(f"local_competition must be a bool, got {local_competition!r}")
        self.local_competition = local_competition
        if threshold_decay_rate is not None:
            threshold_decay_rate = check_real(threshold_decay_rate, "threshold_decay_rate", low=0.0, high=1.0)
        self.threshold_decay_rate = threshold_decay_rate
        self.threshold_decay_itrs = check_int(threshold_decay_itrs, "threshold_decay_itrs")
        self.threshold_decay_min = check_real(threshold_decay_min, "threshold_decay_min", low=0.0)
        self._check_memory("capacity")

    def __repr__(self) -> str:
        return (
            f"ProximityArchive(solution_dim={self.solution_dim}, measure_dim={self.measure_dim}, "
            f"capacity={self.capacity}, k_neighbors={self.k_neighbors}, "
            f"novelty_threshold={self.novelty_threshold}, local_competition={self.local_competition})"
        )

    # -- storage -------------------------------------------------------------------------------
    def init(self) -> ProximityState:
        """An empty archive at the configured novelty threshold."""
        base = self._empty(self.capacity)
        return ProximityState(
            **{name: getattr(base, name) for name in ArchiveState.__dataclass_fields__},
            novelty_threshold=jnp.asarray(self.novelty_threshold, jnp.float32),
            stall=jnp.zeros((), jnp.int32),
            dropped=jnp.zeros((), jnp.int32),
        )

    def _check_state(self, state: Any) -> ProximityState:
        if not isinstance(state, ProximityState):
            raise ArgumentError(
                f"state must be this archive's ProximityState (from init), got {type(state).__name__}"
            )
        if state.objective.shape[0] != self.capacity:
            raise ArgumentError(
                f"state holds {state.objective.shape[0]} rows but the capacity is {self.capacity}"
            )
        return state

    def _neighbours(
        self, state: ProximityState, measures: jax.Array
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``(distance [B, k], row [B, k], count [])``: each measure vector's ``k`` nearest stored
        measures, nearest first (equal distances: lower row first), of which the first ``count =
        min(k, size)`` are elites (the rest: distance ``inf``). Exact.

        An archive of more than ``2 * _HALF_WINDOW`` rows first searches, for each query, the
        ``2 * _HALF_WINDOW`` elites nearest it along the first measure (the elites sorted by it once
        per call): where the ``k``-th distance found is below the first-measure gap to every elite
        outside that window, no outside elite can be nearer, and the answer is exact (the same
        float32 distances, the same ties). The queries where that does not hold (up to a sixteenth
        of the batch; else all) are answered by :meth:`_blocks`. The window pays where measures are
        spread along the first axis (benchmarks/results_qd.md, section 3b, for its size)."""
        batch, k = measures.shape[0], min(self.k_neighbors, self.capacity)
        size = jnp.sum(state.occupied, dtype=jnp.int32)
        if self.capacity <= 2 * _HALF_WINDOW:
            d2, row = self._blocks(state, measures)
            return jnp.sqrt(d2), row, jnp.minimum(size, k)
        d2, row, exact = self._window(state, measures)
        spare = max(1, batch // 16)
        bad = ~exact
        n_bad = jnp.sum(bad, dtype=jnp.int32)

        def some(d2, row):
            which = jnp.nonzero(bad, size=spare, fill_value=0)[0]
            d2_b, row_b = self._blocks(state, measures[which])
            target = jnp.where(jnp.arange(spare) < n_bad, which, batch)  # past the batch: dropped
            return d2.at[target].set(d2_b, mode="drop"), row.at[target].set(row_b, mode="drop")

        def repair(d2, row):
            return lax.cond(n_bad <= spare, some, lambda d2, row: self._blocks(state, measures), d2, row)

        d2, row = lax.cond(n_bad == 0, lambda d2, row: (d2, row), repair, d2, row)
        return jnp.sqrt(d2), row, jnp.minimum(size, k)

    def _window(self, state: ProximityState, measures: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``(d2 [B, k], row [B, k], exact [B])``: the ``k`` nearest (squared distances) among each
        query's window of ``2 * _HALF_WINDOW`` elites along the first measure, and whether that is
        the archive's answer (see :meth:`_neighbours`)."""
        k, width, cap = min(self.k_neighbors, self.capacity), 2 * _HALF_WINDOW, self.capacity
        size = jnp.sum(state.occupied, dtype=jnp.int32)
        key = jnp.where(state.occupied, state.measures[:, 0], jnp.inf)
        order = jnp.argsort(key, stable=True).astype(jnp.int32)  # elites by first measure, then row
        sorted_key = key[order]
        q = measures[:, 0]
        pos = jnp.searchsorted(sorted_key, q, side="left").astype(jnp.int32)
        lo = jnp.clip(pos - _HALF_WINDOW, 0, jnp.maximum(size - width, 0))
        at = lo[:, None] + jnp.arange(width, dtype=jnp.int32)  # [B, width] sorted positions
        inside = at < size
        rows = order[jnp.minimum(at, cap - 1)]
        diff = measures[:, None, :] - state.measures[rows]  # as _blocks computes it: the same bits
        d2 = jnp.where(inside, jnp.sum(diff * diff, axis=-1), jnp.inf)
        extra = min(k + 8, width)  # a few more, to see whether ties at the k-th reach past them
        neg, pick = lax.top_k(-d2, extra)
        cand_d2, cand_row = -neg, jnp.take_along_axis(rows, pick, axis=1)
        cand_row = jnp.where(jnp.isfinite(cand_d2), cand_row, cap)
        cand_d2, cand_row = lax.sort((cand_d2, cand_row), dimension=1, num_keys=2)
        best_d2, best_row = cand_d2[:, :k], jnp.minimum(cand_row[:, :k], cap - 1)
        kth = best_d2[:, k - 1]
        # the first-measure gap to the nearest elite outside the window on either side
        left = jnp.where(lo > 0, q - sorted_key[jnp.maximum(lo - 1, 0)], jnp.inf)
        right = jnp.where(lo + width < size, sorted_key[jnp.minimum(lo + width, cap - 1)] - q, jnp.inf)
        gap = jnp.minimum(left, right)
        whole = (lo == 0) & (lo + width >= size)  # the window holds every elite
        ties_inside = (extra == width) | (cand_d2[:, extra - 1] > kth)
        exact = whole | ((kth < gap * gap) & ties_inside)
        return best_d2, best_row, exact

    def _blocks(self, state: ProximityState, measures: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``(d2 [B, k], row [B, k])``: the ``k`` nearest (squared distances, ``inf`` past the
        elites) by brute force over blocks of :data:`_BLOCK` rows of the occupied prefix, each merged
        into the running ``k`` best: the cost follows the archive's size, not its capacity, and no
        ``[B, capacity]`` matrix is sorted (XLA:CPU sorted a whole one for ``top_k``)."""
        batch, k = measures.shape[0], min(self.k_neighbors, self.capacity)
        block = min(_BLOCK, self.capacity)
        blocks = -(-self.capacity // block)
        check_memory(
            8 * batch * (block + k) * 3,
            f"a batch of {batch} (ProximityArchive's distance blocks of {block} rows)",
        )
        pad = blocks * block - self.capacity
        stored = jnp.pad(state.measures, ((0, pad), (0, 0)))
        occupied = jnp.pad(state.occupied, (0, pad))
        size = jnp.sum(state.occupied, dtype=jnp.int32)

        def merge(i, best):
            best_d, best_r = best
            at = i * block
            rows = at + jnp.arange(block, dtype=jnp.int32)
            diff = measures[:, None, :] - lax.dynamic_slice_in_dim(stored, at, block)[None, :, :]
            d2 = jnp.sum(diff * diff, axis=-1)
            d2 = jnp.where(lax.dynamic_slice_in_dim(occupied, at, block)[None, :], d2, jnp.inf)
            # the running best come first: on equal distances they (lower rows) stay ahead
            all_d = jnp.concatenate([best_d, d2], axis=1)
            all_r = jnp.concatenate([best_r, jnp.broadcast_to(rows, (batch, block))], axis=1)
            neg, pick = lax.top_k(-all_d, k)
            return -neg, jnp.take_along_axis(all_r, pick, axis=1)

        start = (jnp.full((batch, k), jnp.inf, jnp.float32), jnp.full((batch, k), 0, jnp.int32))
        return lax.fori_loop(0, (size + block - 1) // block, merge, start)

    def _nearest(self, state: ProximityState, measures: jax.Array) -> jax.Array:
        return self._neighbours(state, measures)[1][:, 0]

    def add(
        self,
        state: ProximityState,
        solutions: jax.Array,
        objective: jax.Array | None,
        measures: jax.Array,
        fields: Mapping[str, jax.Array] | None = None,
    ) -> tuple[ProximityState, ProximityAddInfo]:
        """Insert a batch with the semantics of the module docstring.

        Args:
            state: the archive contents (:meth:`init`).
            solutions: ``[B, solution_dim]`` (genotypes ``[B]`` for an archive of genotypes).
            objective: ``[B]`` (maximized), or ``None`` for objective 0 everywhere (diversity only;
                refused with ``local_competition``).
            measures: ``[B, measure_dim]``.
            fields: ``{name: [B, *shape]}`` for every declared extra field.

        Returns:
            ``(new_state, ProximityAddInfo)``.
        """
        state = self._check_state(state)
        if objective is None:
            if self.local_competition:
                raise ArgumentError("objective is None, but local_competition=True compares objectives")
            objective = jnp.zeros((jnp.shape(jax.tree_util.tree_leaves(solutions)[0])[0],), jnp.float32)
        solutions, objective, measures, fields = self._check_batch(solutions, objective, measures, fields)
        valid = candidate_is_valid(solutions, objective, measures)
        safe_measures = jnp.where(valid[:, None], measures, 0.0)
        distance, row, count = self._neighbours(state, safe_measures)
        size = jnp.sum(state.occupied, dtype=jnp.int32)
        empty = size == 0
        among = jnp.arange(distance.shape[1]) < count  # [k]: the columns that are elites
        novelty = jnp.sum(jnp.where(among, distance, 0.0), axis=1) / jnp.maximum(count, 1).astype(jnp.float32)
        novelty = jnp.where(empty, state.novelty_threshold, novelty)
        novelty = jnp.where(valid, novelty, -jnp.inf)
        neighbour_objective = state.objective[row]  # [B, k]
        local = jnp.sum(among & (neighbour_objective < objective[:, None]), axis=1, dtype=jnp.int32)

        novel = valid & (novelty >= state.novelty_threshold)
        slot = size + jnp.cumsum(novel, dtype=jnp.int32) - 1  # the row each novel candidate takes
        stored = novel & (slot < self.capacity)
        nearest = row[:, 0]
        nearest_objective = neighbour_objective[:, 0]
        beats = valid & ~novel & ~empty & (objective > nearest_objective)
        can = stored | (beats if self.local_competition else jnp.zeros_like(beats))
        target = jnp.where(novel, slot, nearest)

        status = jnp.where(stored, NEW, jnp.where(can, IMPROVED, NOT_ADDED)).astype(jnp.int32)
        value = jnp.where(novel, objective, objective - nearest_objective)
        value = jnp.where(valid, value, -jnp.inf)
        index = jnp.where(~valid, -1, jnp.where(stored, slot, jnp.where(empty, -1, nearest)))
        info = ProximityAddInfo(
            status=status,
            value=value,
            index=index.astype(jnp.int32),
            novelty=novelty,
            local_competition=jnp.where(valid, local, 0),
        )

        # the winners per row (appends never collide; replacements: best objective, then batch order)
        placed = self._place(
            state, can, jnp.where(can, target, 0), objective, objective, solutions, measures, fields
        )
        n_novel = jnp.sum(novel, dtype=jnp.int32)
        threshold, stall = self._decay(state.novelty_threshold, state.stall, n_novel)
        new_state = ProximityState(
            **{name: getattr(placed, name) for name in ArchiveState.__dataclass_fields__},
            novelty_threshold=threshold,
            stall=stall,
            dropped=state.dropped + jnp.sum(novel & ~stored, dtype=jnp.int32),
        )
        return new_state, info

    def _decay(
        self, threshold: jax.Array, stall: jax.Array, n_novel: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        """pyribs' threshold decay after a call that found ``n_novel`` novel candidates."""
        if self.threshold_decay_rate is None:
            return threshold, stall
        stall = jnp.where(n_novel == 0, stall + 1, 0)
        due = stall >= self.threshold_decay_itrs
        decayed = jnp.maximum(
            jnp.float32(self.threshold_decay_min), threshold * jnp.float32(self.threshold_decay_rate)
        )
        return jnp.where(due, decayed, threshold), jnp.where(due, 0, stall)

    # -- queries -------------------------------------------------------------------------------
    def stats(self, state: ArchiveState) -> dict[str, jax.Array]:
        """:meth:`Archive.stats` with pyribs' unstructured-archive conventions: ``coverage`` 1 when
        non-empty, ``norm_qd_score`` the QD score over the number of elites."""
        out = super().stats(state)
        n = out["num_elites"]
        out["coverage"] = jnp.where(n > 0, 1.0, 0.0).astype(out["coverage"].dtype)
        out["norm_qd_score"] = out["qd_score"] / jnp.maximum(n, 1)
        return out
