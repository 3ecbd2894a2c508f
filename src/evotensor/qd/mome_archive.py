"""Multi-objective MAP-Elites (MOME, Pierrot et al. 2022): every cell holds a Pareto front.

A :class:`MOMEArchive` takes its cells from a grid or CVT archive and keeps, in each, up to
``front_size`` solutions no other solution of the cell dominates, for ``M`` maximized objectives.
The state is fixed-shape (``[C, P, ...]``), so ``add`` runs under ``jit``/``vmap``/``scan`` like
any archive, and :class:`~evotensor.qd.MAPElites` runs it with any emitter::

    cells = CVTArchive(solution_dim=100, centroids=64, ranges=[(-2, 4), (-2, 4)])
    archive = MOMEArchive(cells, num_objectives=2, front_size=50, reference_point=(-1500, -1500))
    state = archive.init()
    state, info = archive.add(state, solutions, objective, measures)   # [B, 100], [B, 2], [B, 2]

Batch semantics (deterministic, one batch at once rather than QDax's candidate-by-candidate scan):

* ``a`` dominates ``b`` when ``a >= b`` in every objective and ``a > b`` in one. A candidate may
  enter only with a finite objective vector, measures and solution.
* A cell's new front is the set of its members and its valid candidates that no other member or
  candidate dominates; of equal objective vectors only the first is kept, members before
  candidates and candidates in batch order (so, as in MAP-Elites, a candidate equal to an elite
  does not replace it). With one objective and ``front_size = 1`` this is MAP-Elites' rule.
* If that set exceeds ``front_size``, the ``front_size`` points of largest crowding distance
  within the set are kept (NSGA-II's, Deb et al. 2002: the objective-wise extremes first; equal
  distances to the earlier point) with ``truncation="crowding"``, or the earliest points
  (``truncation="first"``: members, then candidates in batch order, QDax's choice). Members keep
  their slots; new members take the cell's free slots, lowest first, in batch order.
* ``status`` says where the candidate is after the batch: 0 not in its cell's front, 1 in the
  front of a cell that had one before the batch, 2 in the front of a cell empty before it (unlike
  a single-objective archive, whose status asks whether the candidate beat the elite before the
  batch: here several candidates of one cell may all enter). ``value`` is the hypervolume the
  candidate adds to its cell's front as it was before the batch (so the ``"imp"`` rankers of a
  CMA emitter rank by it); ``-inf`` for an invalid candidate, whose ``index`` is -1.

Hypervolumes are measured from ``reference_point`` (below which a point adds nothing); the MOQD
score (Pierrot et al.) is the sum over cells of their fronts' hypervolumes.

On a device mesh (``evotensor.run(..., mesh=)``, or ``ShardedMOMEArchive(archive, mesh)``) the
fronts are split along the cells: :class:`~evotensor.qd.sharded_mome.ShardedMOMEArchive`, the same
fronts bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from evotensor.core import rng
from evotensor.core.checks import ArgumentError, check_int
from evotensor.core.numerics import exact_sum, rounded
from evotensor.core.pareto import hypervolume
from evotensor.core.pytree import pytree_dataclass
from evotensor.qd.archive import (
    IMPROVED,
    NEW,
    NOT_ADDED,
    AddInfo,
    Archive,
    UnstructuredArchive,
    candidate_is_valid,
    take_rows,
)

TRUNCATIONS = ("crowding", "first")
# rows of the candidate-by-candidate comparison per block (bounds its memory to this x B)
_PAIR_BLOCK = 1024


@pytree_dataclass
class MOMEState:
    """Contents of a MOME archive of ``C`` cells with fronts of ``P`` points, ``M`` objectives and
    ``D`` measures.

    Attributes:
        solutions: ``[C, P, dims]`` float32 (or a genotype pytree with leaves ``[C, P, ...]``).
        objective: ``[C, P, M]`` float32, maximized.
        measures: ``[C, P, D]`` float32.
        occupied: ``[C, P]`` bool: which slots hold a member (the others hold zeros or a former
            member's values, never read).
    """

    solutions: Any
    objective: jax.Array
    measures: jax.Array
    occupied: jax.Array


def _dominates(a: jax.Array, b: jax.Array) -> jax.Array:
    """``a [..., M]`` dominates ``b [..., M]`` (maximized): ``[...]`` bool."""
    return jnp.all(a >= b, axis=-1) & jnp.any(a > b, axis=-1)


class MOMEArchive(Archive):
    """An archive of Pareto fronts, one per cell of ``cells`` (module docstring).

    Args:
        cells: a :class:`~evotensor.qd.GridArchive` or :class:`~evotensor.qd.CVTArchive` that
            defines the cells and what a solution is (``solution_dim`` or ``genotype``); its
            CMA-MAE settings and extra fields do not apply (refused if set).
        num_objectives: ``M``, objectives per solution (maximized).
        front_size: ``P``, the most solutions one cell keeps (QDax's ``pareto_front_max_length``).
        reference_point: ``[M]`` finite, the corner hypervolumes are measured from (QDax's
            ``reference_point`` of ``default_moqd_metrics``): below the worst objective values
            that matter.
        truncation: ``"crowding"`` (default) or ``"first"``: which points an overfull front keeps.

    Attributes:
        num_cells, measure_dim, solution_dim, genotype: ``cells``'.
    """

    def __init__(
        self,
        cells: Archive,
        *,
        num_objectives: int,
        front_size: int,
        reference_point: Sequence[float],
        truncation: str = "crowding",
    ):
        if not isinstance(cells, Archive) or isinstance(cells, (UnstructuredArchive, MOMEArchive)):
            raise ArgumentError(
                f"cells must be a GridArchive or CVTArchive (cells by measures), got {type(cells).__name__}"
            )
        if cells.learning_rate != 1.0 or cells.threshold_min != -math.inf or cells.extra_fields:
            raise ArgumentError(
                "cells must be a plain archive: MOME keeps Pareto fronts, so CMA-MAE's learning_rate/"
                "threshold_min and extra_fields do not apply"
            )
        super().__init__(solution_dim=cells.solution_dim, genotype=cells.genotype)
        self.cells = cells
        self.num_cells = cells.num_cells
        self.measure_dim = cells.measure_dim
        self.num_objectives = check_int(num_objectives, "num_objectives")
        self.front_size = check_int(front_size, "front_size")
        if self.num_cells * self.front_size >= 2**31 - 1:
            raise ArgumentError(
                f"{self.num_cells} cells x front_size {self.front_size} slots do not fit int32"
            )
        try:
            point = np.asarray(reference_point, np.float64)
        except (TypeError, ValueError) as err:
            raise ArgumentError(f"reference_point must be {self.num_objectives} numbers") from err
        if point.shape != (self.num_objectives,) or not np.all(np.isfinite(point.astype(np.float32))):
            raise ArgumentError(
                f"reference_point must be {self.num_objectives} finite numbers (one per objective), "
                f"got {reference_point!r}"
            )
        self.reference_point = jnp.asarray(point, jnp.float32)
        if truncation not in TRUNCATIONS:
            raise ArgumentError(f"truncation must be one of {TRUNCATIONS}, got {truncation!r}")
        self.truncation = truncation
        self._check_memory(f"{self.num_cells} cells x front_size={self.front_size}")

    # a ShardedArchive splits single elites; ShardedMOMEArchive splits the fronts
    shardable = False
    unshardable_because = (
        "its cells hold Pareto fronts: use evotensor.qd.sharded_mome.ShardedMOMEArchive(archive, mesh) "
        "(what evotensor.run(..., mesh=) builds for MAPElites)"
    )

    def state_bytes(self) -> int:
        solution = 4 * self.solution_dim if self.genotype is None else self._genotype_bytes()
        slots = self.num_cells * self.front_size
        return slots * (solution + 4 * (self.num_objectives + self.measure_dim) + 1)

    def index_of(self, measures: jax.Array) -> jax.Array:
        """The cell of each measure vector (``cells``' rule): ``[B, D] -> [B]`` int32."""
        return self.cells.index_of(measures)

    # -- storage -------------------------------------------------------------------------------
    def init(self) -> MOMEState:
        """An empty archive."""
        return self._empty(self.num_cells)

    def _empty(self, c: int) -> MOMEState:
        """``c`` empty cells (``num_cells``, or more for a sharded archive's padded layout)."""
        p = self.front_size

        def empty(shape: tuple[int, ...], dtype: Any) -> jax.Array:
            return jnp.zeros((c, p, *shape), dtype)

        if self.genotype is None:
            solutions = empty((self.solution_dim,), jnp.float32)
        else:
            solutions = jax.tree_util.tree_map(lambda a: empty(a.shape, a.dtype), self.genotype)
        return MOMEState(
            solutions=solutions,
            objective=empty((self.num_objectives,), jnp.float32),
            measures=empty((self.measure_dim,), jnp.float32),
            occupied=jnp.zeros((c, p), bool),
        )

    def _check_state(self, state: Any) -> MOMEState:
        want = (self.num_cells, self.front_size, self.num_objectives)
        got = getattr(getattr(state, "objective", None), "shape", None)
        if not isinstance(state, MOMEState) or got != want:
            raise ArgumentError(
                f"state must be this MOMEArchive's MOMEState (objective {list(want)}), got {got}"
            )
        return state

    def add(
        self,
        state: MOMEState,
        solutions: Any,
        objective: jax.Array,
        measures: jax.Array,
        fields: Any = None,
    ) -> tuple[MOMEState, AddInfo]:
        """Insert a batch with the semantics of the module docstring.

        Args:
            state: the archive contents.
            solutions: ``[B, solution_dim]`` (or genotypes ``[B]``).
            objective: ``[B, num_objectives]`` (maximized).
            measures: ``[B, measure_dim]``.
            fields: must be None (a MOME archive stores no extra fields).

        Returns:
            ``(new_state, AddInfo)`` with ``status``, ``value``, ``index`` ``[B]``. Work:
            ``O(B P M)`` against the fronts; the candidates of one cell against each other in one
            sort with two objectives (``O(B^2 M)`` in blocks with more); when a front overflows,
            sorts of the ``B + U P`` points of the ``U <= min(B, C)`` touched cells (one for the
            crowding distance of two objectives, ``M`` with more); the hypervolume gains from one
            sort per touched cell with two objectives (``B`` hypervolumes of ``P + 1`` points with
            more); ``O(B dims)`` written.
        """
        state = self._check_state(state)
        solutions, objective, measures = self.check_batch(solutions, objective, measures, fields)
        if objective.shape[0] == 0:
            empty = jnp.zeros(0, jnp.int32)
            return state, AddInfo(status=empty, value=jnp.zeros(0, jnp.float32), index=empty)
        valid, objective = self.valid_candidates(solutions, objective, measures)
        cell = jnp.where(valid, self.index_of(measures), 0).astype(jnp.int32)
        front = state.objective[cell]  # [B, P, M]
        members = state.occupied[cell] & valid[:, None]  # [B, P]
        rows = self.touched_rows(cell, valid, self.num_cells)
        row_fronts = (state.objective[rows[1]], state.occupied[rows[1]] & (rows[0] < self.num_cells)[:, None])
        enters, hits, info = self.assess(objective, cell, valid, front, members, rows, row_fronts)
        stays = self.staying(state.occupied, hits, cell, valid)
        state, kept = self.rewrite(state, rows, solutions, objective, measures, cell, enters, stays)
        return state, self.add_info(info, kept)

    # -- the steps of add, over the whole archive or one device's block of cells ----------------
    def check_batch(self, solutions: Any, objective: Any, measures: Any, fields: Any) -> tuple:
        """``(solutions, objective [B, M] float32, measures [B, D] float32)`` checked, or an
        :class:`ArgumentError` naming what is wrong."""
        if fields:
            raise ArgumentError("a MOMEArchive stores no extra fields: fields must be None")
        solutions, batch = self._check_solutions(solutions)
        objective = jnp.asarray(objective, jnp.float32)
        measures = jnp.asarray(measures, jnp.float32)
        if objective.shape != (batch, self.num_objectives):
            raise ArgumentError(
                f"objective must have shape [{batch}, {self.num_objectives}] (batch, num_objectives), "
                f"got {list(objective.shape)}"
            )
        if measures.shape != (batch, self.measure_dim):
            raise ArgumentError(
                f"measures must have shape [{batch}, {self.measure_dim}], got {list(measures.shape)}"
            )
        return solutions, objective, measures

    @staticmethod
    def valid_candidates(solutions: Any, objective: jax.Array, measures: jax.Array) -> tuple:
        """``(valid [B], objective)``: which candidates are finite everywhere, and the objectives
        with the invalid rows zeroed (so no NaN reaches a comparison)."""
        finite = jnp.where(jnp.all(jnp.isfinite(objective), axis=1), 0.0, jnp.nan)
        valid = candidate_is_valid(solutions, finite, measures)
        return valid, jnp.where(valid[:, None], objective, 0.0)

    def assess(self, objective, cell, valid, front, members, rows, row_fronts) -> tuple:
        """Each candidate against its cell's front before the batch and the other candidates:
        ``(enters [B], hits [B, P], (had [B], value [B], index [B]))``: whether it survives its
        cell's new front before truncation, which members of its cell it dominates, and what
        :class:`AddInfo` needs. ``front [B, P, M]`` and ``members [B, P]`` are each candidate's
        cell's front; ``rows`` (:meth:`touched_rows` over all cells) and ``row_fronts`` (the rows'
        fronts ``[U, P, M]`` and occupancy ``[U, P]``) serve the two-objective hypervolume gain."""
        x = objective[:, None, :]
        beaten = jnp.any(members & (_dominates(front, x) | jnp.all(front == x, axis=-1)), axis=1)
        among = self._beaten_in_batch_2d if self.num_objectives == 2 else self._beaten_by_candidates
        enters = valid & ~(beaten | among(objective, cell, valid))
        hits = members & _dominates(x, front)
        if self.num_objectives == 2:
            value = self._improvement_2d(*row_fronts, rows[2], objective, valid)
        else:
            value = self._improvement(front, members, objective, valid)
        had = jnp.any(members, axis=1)  # the cell had a front before the batch
        return enters, hits, (had, value, jnp.where(valid, cell, -1))

    @staticmethod
    def staying(occupied: jax.Array, hits: jax.Array, row: jax.Array, mine: jax.Array) -> jax.Array:
        """``[R, P]``: the members of the rows ``occupied [R, P]`` that no candidate dominates
        (``hits [B, P]`` of the candidates ``mine`` in row ``row``)."""
        rows = occupied.shape[0]
        segment = jnp.where(mine, row, rows)
        gone = jax.ops.segment_max((hits & mine[:, None]).astype(jnp.int32), segment, num_segments=rows + 1)
        return occupied & (gone[:rows] == 0)

    @staticmethod
    def add_info(info: tuple, kept: jax.Array) -> AddInfo:
        """:class:`AddInfo` from :meth:`assess`'s ``info`` and whether each candidate was kept."""
        had, value, index = info
        status = jnp.where(kept, jnp.where(had, IMPROVED, NEW), NOT_ADDED).astype(jnp.int32)
        return AddInfo(status=status, value=value, index=index)

    def _beaten_by_candidates(self, objective: jax.Array, cell: jax.Array, valid: jax.Array) -> jax.Array:
        """``[B]`` bool: dominated by a valid candidate of the same cell, or equal to an earlier one
        (blocks of rows, so memory stays ``_PAIR_BLOCK x B``)."""
        batch = objective.shape[0]
        position = jnp.arange(batch, dtype=jnp.int32)

        def block(rows: jax.Array) -> jax.Array:
            mine = objective[rows][:, None, :]
            same = (cell[rows][:, None] == cell[None, :]) & valid[None, :]
            equal_earlier = jnp.all(objective[None] == mine, axis=-1) & (position[None] < rows[:, None])
            return jnp.any(same & (_dominates(objective[None], mine) | equal_earlier), axis=1)

        size = min(batch, _PAIR_BLOCK)
        padded = -(-batch // size) * size if batch else 0
        rows = jnp.minimum(jnp.arange(padded, dtype=jnp.int32), max(batch - 1, 0)).reshape(-1, size)
        return lax.map(block, rows).reshape(-1)[:batch] if batch else jnp.zeros(0, bool)

    def _beaten_in_batch_2d(self, objective: jax.Array, cell: jax.Array, valid: jax.Array) -> jax.Array:
        """:meth:`_beaten_by_candidates` for two objectives in ``O(B log B)``: sorted by cell, then
        objective 0 and 1 descending, then batch position, every candidate that dominates one
        comes before its run of equal points, and of those before it only the ones with a larger
        objective 0 may fail to, so it is dominated iff the largest objective 1 among the cell's
        candidates before its run is at least its own; equal to an earlier one iff not first in
        its run."""
        batch = objective.shape[0]
        if batch == 0:
            return jnp.zeros(0, bool)
        index = jnp.arange(batch, dtype=jnp.int32)
        group = jnp.where(valid, cell, self.num_cells)
        o0, o1 = objective[:, 0], objective[:, 1]
        order = lax.sort((group, -o0, -o1, index), num_keys=3, is_stable=True)[-1]
        g, a, b = group[order], o0[order], o1[order]
        new_cell = jnp.concatenate([jnp.ones(1, bool), g[1:] != g[:-1]])
        new_run = new_cell | jnp.concatenate([jnp.ones(1, bool), (a[1:] != a[:-1]) | (b[1:] != b[:-1])])
        run_start = lax.cummax(jnp.where(new_run, index, 0))
        # largest objective 1 so far within the cell (a scan that restarts at each cell)
        best = lax.associative_scan(
            lambda left, right: (
                left[0] | right[0],
                jnp.where(right[0], right[1], jnp.maximum(left[1], right[1])),
            ),
            (new_cell, b),
        )[1]
        before = jnp.where(new_cell[run_start], -jnp.inf, best[jnp.maximum(run_start - 1, 0)])
        beaten = (before >= b) | (index > run_start)
        return jnp.zeros(batch, bool).at[order].set(beaten) & valid

    def _improvement(self, front, members, objective, valid) -> jax.Array:
        """``[B]``: the hypervolume each valid candidate adds to its cell's front (``-inf`` if
        invalid)."""
        loss = -jnp.concatenate([front, objective[:, None, :]], axis=1)  # [B, P + 1, M]
        with_it = jnp.concatenate([members, valid[:, None]], axis=1)
        reference = -self.reference_point
        before = jax.vmap(hypervolume, in_axes=(0, 0, None))(loss[:, :-1], members, reference)
        after = jax.vmap(hypervolume, in_axes=(0, 0, None))(loss, with_it, reference)
        return jnp.where(valid, jnp.maximum(after - before, 0.0), -jnp.inf)

    def _improvement_2d(self, front, occupied, candidate_row, objective, valid) -> jax.Array:
        """:meth:`_improvement` for two objectives without a sort per candidate: each touched
        cell's front (``front [U, P, 2]``, ``occupied [U, P]``, the rows of :meth:`touched_rows`)
        sorted once by objective 0 (descending; a front's objective 1 then ascends), and the front
        clipped to the candidate's box, ``g_j = max(min(x, f_j), r)``, stays so sorted, so its
        hypervolume is the staircase ``sum_j (g0_j - g0_{j+1}) (g1_j - r1)``. The candidate adds
        its box's area less that."""
        r = self.reference_point
        # empty slots last, as the reference point (they enclose nothing)
        key = jnp.where(occupied, -front[..., 0], jnp.inf)
        order = jnp.argsort(key, axis=1, stable=True)
        front = jnp.where(occupied[..., None], front, r)
        front = jnp.take_along_axis(front, order[..., None], axis=1)[candidate_row]  # [B, P, 2]
        x = jnp.maximum(objective, r)
        g = jnp.maximum(jnp.minimum(front, x[:, None, :]), r)
        next_g0 = jnp.concatenate([g[:, 1:, 0], jnp.broadcast_to(r[0], g[:, :1, 0].shape)], axis=1)
        # a fixed summation tree and no fused multiply-adds: every program (one device, a mesh,
        # vmapped) gives the same bits, which CMA emitters ranking by this value rely on
        covered = exact_sum((g[..., 0] - next_g0) * (g[..., 1] - r[1]), axis=1)
        own = rounded((x[:, 0] - r[0]) * (x[:, 1] - r[1]))
        return jnp.where(valid, jnp.maximum(own - covered, 0.0), -jnp.inf)

    @staticmethod
    def touched_rows(cell: jax.Array, valid: jax.Array, c: int) -> tuple[jax.Array, jax.Array, jax.Array]:
        """One row per cell of ``0..c-1`` the batch touches (at most ``U = min(B, c)``), in the
        order of the cells' first valid candidates: ``(row_cell [U]`` (``c`` for an unused row),
        ``at [U]`` (the row's cell, any cell for an unused row), ``candidate_row [B]`` (each valid
        candidate's row))."""
        batch = cell.shape[0]
        u = min(batch, c)
        position = jnp.arange(batch, dtype=jnp.int32)
        segment = jnp.where(valid, cell, c)
        first = jax.ops.segment_min(jnp.where(valid, position, batch), segment, num_segments=c + 1)
        carrier = valid & (first[segment] == position)
        row_of_carrier = jnp.cumsum(carrier.astype(jnp.int32)) - 1
        row_cell = (
            jnp.full((u,), c, jnp.int32).at[jnp.where(carrier, row_of_carrier, u)].set(cell, mode="drop")
        )
        candidate_row = row_of_carrier[jnp.clip(first[segment], 0, max(batch - 1, 0))]
        return row_cell, jnp.minimum(row_cell, c - 1), jnp.clip(candidate_row, 0, max(u - 1, 0))

    def rewrite(self, state, rows, solutions, objective, measures, cell, enters, stays):
        """Update the fronts of the cells the batch touched: ``(state, kept [B])``. ``state`` holds
        the whole archive or one device's block of cells, ``cell`` and ``rows`` count in it.

        Each touched cell's staying members and entering candidates are its new front, truncated
        (only where a front overflows) by the rule of ``truncation``; members keep their slots,
        the kept candidates take the cell's free slots, lowest first, in batch order. Only the
        kept candidates' rows are written: work ``O(B dims + U P M)``, plus two sorts of the
        ``B + U P`` points when a front overflows."""
        batch, p, c = objective.shape[0], self.front_size, state.occupied.shape[0]
        row_cell, at, candidate_row = rows  # rows without a cell point at c: their writes drop
        u = row_cell.shape[0]
        position = jnp.arange(batch, dtype=jnp.int32)

        # items: the rows' member slots [U * P], then the candidates [B]
        member_item = (row_cell < c)[:, None] & stays[at]  # [U, P]
        active = jnp.concatenate([member_item.reshape(-1), enters])
        item_cell = jnp.concatenate([jnp.repeat(row_cell, p), cell])
        group = jnp.where(active, item_cell, c)  # inactive items sort after every cell
        count = jax.ops.segment_sum(active.astype(jnp.int32), group, num_segments=c + 1)

        def truncated() -> jax.Array:
            if self.truncation == "crowding":
                merit = self._crowding(
                    jnp.concatenate([state.objective[at].reshape(u * p, -1), objective]), group, active
                )
            else:
                merit = jnp.zeros(active.shape, jnp.float32)
            index = jnp.arange(active.shape[0], dtype=jnp.int32)
            # within a cell the items' index order is their order (members by slot, then the
            # candidates in batch order), so a stable sort breaks equal merits by it
            by_merit = lax.sort((group, -merit, index), num_keys=2, is_stable=True)[-1]
            return (
                jnp.zeros(active.shape, bool).at[by_merit].set(_rank_in_group(group[by_merit]) < p) & active
            )

        keep = lax.cond(jnp.any(count[:c] > p), truncated, lambda: active)
        members = keep[: u * p].reshape(u, p)
        kept = keep[u * p :]

        # the k-th kept candidate of a row (batch order) takes the row's k-th free slot
        free = ~members
        free_rank = jnp.cumsum(free.astype(jnp.int32), axis=1) - 1
        slots = jnp.broadcast_to(jnp.arange(p, dtype=jnp.int32), (u, p))
        free_slot = (
            jnp.full((u, p), p, jnp.int32)
            .at[jnp.arange(u)[:, None], jnp.where(free, free_rank, p)]
            .set(slots, mode="drop")
        )
        candidate_group = jnp.where(kept, candidate_row, u)
        by_row = lax.sort((candidate_group, position), num_keys=1, is_stable=True)[-1]
        rank = jnp.zeros(batch, jnp.int32).at[by_row].set(_rank_in_group(candidate_group[by_row]))
        slot = free_slot[candidate_row, jnp.minimum(rank, p - 1)]
        target = jnp.where(kept, row_cell[candidate_row] * p + slot, c * p + position)

        def put(stored: jax.Array, new: jax.Array) -> jax.Array:
            flat = stored.reshape(c * p, *stored.shape[2:])
            flat = flat.at[target].set(new.astype(stored.dtype), mode="drop", unique_indices=True)
            return flat.reshape(stored.shape)

        occupied = state.occupied.at[row_cell].set(members, mode="drop", unique_indices=True)
        state = MOMEState(
            solutions=jax.tree_util.tree_map(put, state.solutions, solutions),
            objective=put(state.objective, objective),
            measures=put(state.measures, measures),
            occupied=put(occupied, jnp.ones(batch, bool)),
        )
        return state, kept

    def _crowding(self, objective: jax.Array, group: jax.Array, active: jax.Array) -> jax.Array:
        """NSGA-II's crowding distance of every active item within its group (cell): ``[n]``.

        The active items of a cell are mutually non-dominated and distinct, so with two objectives
        the order by objective 0 is the reverse order by objective 1: one sort serves both (the
        same neighbours, ends and spans, so the same bits as a sort per objective)."""
        n = objective.shape[0]
        index = jnp.arange(n, dtype=jnp.int32)
        total = jnp.zeros(n, jnp.float32)
        sorts = 1 if self.num_objectives == 2 else self.num_objectives
        for m in range(sorts):
            value = jnp.where(active, objective[:, m], 0.0)
            order = lax.sort((group, value, index), num_keys=2, is_stable=True)[-1]
            g = group[order]
            first = jnp.concatenate([jnp.ones(1, bool), g[1:] != g[:-1]])
            last = jnp.concatenate([g[1:] != g[:-1], jnp.ones(1, bool)])
            start = lax.cummax(jnp.where(first, index, 0))
            end = jnp.flip(lax.cummin(jnp.flip(jnp.where(last, index, n - 1))))
            below, above = jnp.maximum(index - 1, 0), jnp.minimum(index + 1, n - 1)
            ends = [(m, start, end, below, above)]
            if self.num_objectives == 2:  # objective 1 ascends the other way
                ends.append((1, end, start, above, below))
            for k, low, high, prv, nxt in ends:
                v = jnp.where(active, objective[:, k], 0.0)[order]
                span = v[high] * 0.5 - v[low] * 0.5  # halves: no float32 overflow
                gap = (v[nxt] * 0.5 - v[prv] * 0.5) / jnp.where(span > 0, span, 1.0)
                gap = jnp.where(span > 0, gap, 0.0)
                total = total + jnp.zeros(n, jnp.float32).at[order].set(jnp.where(first | last, jnp.inf, gap))
        return jnp.where(active, total, -jnp.inf)

    # -- queries -------------------------------------------------------------------------------
    def retrieve(self, state: MOMEState, measures: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
        """The front of each measure vector's cell: ``[B, D] -> (found [B], {field: ...})`` with
        ``solutions [B, P, ...]``, ``objective [B, P, M]``, ``measures [B, P, D]``, ``occupied
        [B, P]`` and ``index [B]`` (-1 for non-finite measures)."""
        state = self._check_state(state)
        measures = jnp.asarray(measures, jnp.float32)
        ok = jnp.all(jnp.isfinite(measures), axis=1)
        index = jnp.where(ok, self.index_of(measures), -1).astype(jnp.int32)
        at = jnp.maximum(index, 0)
        occupied = state.occupied[at] & ok[:, None]
        return occupied.any(axis=1), {
            "solutions": take_rows(state.solutions, at),
            "objective": state.objective[at],
            "measures": state.measures[at],
            "occupied": occupied,
            "index": index,
        }

    def sample_elites(self, key: jax.Array, state: MOMEState, n: int) -> jax.Array:
        """``n`` solutions: a cell drawn uniformly among the occupied ones, then a member of its
        front uniformly (QDax's ``MOMEUniformSelector``), with replacement; ``[n]`` int32 slots
        ``cell * front_size + member`` for :meth:`elite_solutions`. Slot 0 while empty."""
        cell_key, member_key = jax.random.split(key)
        size = jnp.sum(state.occupied, axis=1).astype(jnp.int32)  # [C]
        counts = jnp.cumsum((size > 0).astype(jnp.int32))
        k = rng.randint(cell_key, (n,), 0, jnp.maximum(counts[-1], 1))
        cell = jnp.minimum(jnp.searchsorted(counts, k, side="right"), self.num_cells - 1).astype(jnp.int32)
        u = rng.uniform(member_key, (n,), jnp.float32)
        member = jnp.minimum((u * size[cell]).astype(jnp.int32), jnp.maximum(size[cell] - 1, 0))
        # the member-th occupied slot of the cell
        seen = jnp.cumsum(state.occupied[cell].astype(jnp.int32), axis=1)  # [n, P]
        slot = jnp.argmax(seen > member[:, None], axis=1).astype(jnp.int32)
        return cell * self.front_size + slot

    def has_elites(self, state: MOMEState) -> jax.Array:
        return state.occupied.any()

    def elite_solutions(self, state: MOMEState, cells: jax.Array) -> Any:
        """The solutions in the slots ``cells [n]`` (from :meth:`sample_elites`): ``[n, dims]``."""
        flat = jax.tree_util.tree_map(lambda a: a.reshape(-1, *a.shape[2:]), state.solutions)
        return take_rows(flat, cells)

    def elite_measures(self, state: MOMEState, cells: jax.Array) -> jax.Array:
        """The measures of the slots ``cells [n]`` (from :meth:`sample_elites`): ``[n, D]``."""
        return state.measures.reshape(-1, state.measures.shape[-1])[cells]

    def best_cells(self, state: Any, k: int, score: Any = None) -> tuple[jax.Array, jax.Array]:
        raise ArgumentError(
            "a MOMEArchive's cells hold Pareto fronts, not one elite: best_cells (ME-ES) needs a "
            "single-objective archive"
        )

    def hypervolumes(self, state: MOMEState) -> jax.Array:
        """``[C]``: each cell's front hypervolume from ``reference_point`` (0 where empty)."""
        state = self._check_state(state)
        return front_hypervolumes(state.objective, state.occupied, self.reference_point)

    def data(self, state: MOMEState) -> dict[str, Any]:
        """Every stored solution on the host: ``{"solutions": [n, dims]`` (genotypes ``[n]``),
        ``"objective": [n, M]``, ``"measures": [n, D]``, ``"index": [n]`` (cells), ``"slot": [n]``
        (place in the front)} in cell order, as NumPy arrays. Not for ``jit``."""
        state = self._check_state(state)
        cell, slot = np.nonzero(np.asarray(state.occupied))

        def take(a: Any) -> np.ndarray:
            return np.asarray(a)[cell, slot]

        return {
            "solutions": jax.tree_util.tree_map(take, state.solutions),
            "objective": take(state.objective),
            "measures": take(state.measures),
            "index": cell.astype(np.int32),
            "slot": slot.astype(np.int32),
        }

    def stats(self, state: MOMEState) -> dict[str, jax.Array]:
        """Scalar statistics (QDax's ``default_moqd_metrics``, coverage as a fraction):

        ``num_elites`` (solutions stored), ``coverage`` (fraction of cells with a front),
        ``moqd_score`` (sum of the cells' hypervolumes), ``norm_moqd_score`` (``/ C``),
        ``max_hypervolume`` (of one cell), ``max_sum_objectives`` (NaN while empty), and with two
        objectives ``global_hypervolume`` (of all stored solutions together).
        """
        volumes = self.hypervolumes(state)
        filled = state.occupied.any(axis=1)
        total = jnp.sum(state.objective, axis=-1)
        stats = {
            "num_elites": state.occupied.sum().astype(jnp.int32),
            "coverage": filled.sum() / self.num_cells,
            "moqd_score": volumes.sum(),
            "norm_moqd_score": volumes.sum() / self.num_cells,
            "max_hypervolume": jnp.max(volumes),
            "max_sum_objectives": jnp.where(
                state.occupied.any(), jnp.max(jnp.where(state.occupied, total, -jnp.inf)), jnp.nan
            ),
        }
        if self.num_objectives == 2:  # an O(n log n) sweep; more objectives cost n^(M-1)
            stats["global_hypervolume"] = hypervolume(
                -state.objective.reshape(-1, 2), state.occupied.reshape(-1), -self.reference_point
            )
        return stats


def front_hypervolumes(objective: jax.Array, occupied: jax.Array, reference_point: jax.Array) -> jax.Array:
    """``[C]``: the hypervolume of each cell's front (``objective [C, P, M]`` maximized, members
    ``occupied [C, P]``) from ``reference_point [M]``; 0 for an empty cell."""
    return jax.vmap(hypervolume, in_axes=(0, 0, None))(-objective, occupied, -reference_point)


def _rank_in_group(group: jax.Array) -> jax.Array:
    """``[n]`` int32: each position's rank within its run of equal values of ``group`` (sorted)."""
    n = group.shape[0]
    index = jnp.arange(n, dtype=jnp.int32)
    first = jnp.concatenate([jnp.ones(1, bool), group[1:] != group[:-1]]) if n else jnp.zeros(0, bool)
    return index - lax.cummax(jnp.where(first, index, 0))
