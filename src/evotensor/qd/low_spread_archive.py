"""MAP-Elites Low-Spread (ME-LS; Mace, Flageat & Cully 2023): elites that are fit *and* reproducible.

Where fitness and descriptors are noisy (a robot's reset noise, a noisy arm), a solution that once
landed in a cell may rarely land there again. ME-LS evaluates every solution ``S = num_samples``
times and keeps, per cell, a solution whose descriptors vary little::

    archive = LowSpreadArchive(CVTArchive(solution_dim=8, centroids=1024, ranges=[(0, 1)] * 2),
                               num_samples=5)
    state, info = archive.add(state, solutions, objective, measures)   # [B, 8], [B, 5], [B, 5, 2]

With :class:`~evotensor.qd.MAPElites` (any emitters) the population asked is each emitter's batch
with every solution repeated ``S`` times in a row, so the run loop evaluates each ``S`` times with
its own noise and counts ``S`` evaluations per solution (QDax's ``MELS``).

Per candidate (QDax's ``MELSRepertoire`` rules, deterministic):

* its cell is the *mode* of its samples' cells (equal counts: the lowest cell), its fitness the
  mean of its samples' objectives, its ``spread`` the mean Euclidean distance over the
  ``S (S - 1) / 2`` pairs of its samples' measures (0 with one sample);
* the measures stored with it are the mean over its samples that fall in that cell (QDax stores
  the cell's centroid instead);
* it is valid only if its solution and every sample's objective and measures are finite (an
  invalid candidate never enters: status 0, value ``-inf``, index -1);
* it may enter its cell iff its fitness beats the elite's and its spread is no larger than the
  elite's (any valid candidate enters an empty cell);
* among the candidates that may enter one cell the highest fitness wins, exact ties going to the
  lowest batch position (QDax leaves this to the scatter, which is undefined);
* ``status`` and ``value`` (``fitness - elite fitness``, from 0 for an empty cell) are against the
  archive before the batch, as in :class:`~evotensor.qd.archive.Archive`; a candidate that beats the
  elite's fitness but not its spread has status 0 and a positive value.

The state is an :class:`~evotensor.qd.archive.ArchiveState` whose ``fields["spread"]`` holds each
elite's spread (0 where empty). The archive is not split over devices.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from evotensor.core.checks import ArgumentError
from evotensor.core.pytree import pytree_dataclass
from evotensor.qd.archive import NOT_ADDED, AddInfo, Archive, ArchiveState, candidate_is_valid
from evotensor.qd.extractors import average, mode
from evotensor.qd.sampled_archive import SampledCellsArchive


@pytree_dataclass
class LowSpreadAddInfo(AddInfo):
    """:class:`~evotensor.qd.archive.AddInfo` plus each candidate's aggregate (all ``[B]``-leading).

    Attributes:
        objective: ``[B]`` float32 mean of the samples' objectives.
        measures: ``[B, D]`` float32 mean measures of the samples in the candidate's cell.
        spread: ``[B]`` float32 mean pairwise distance of the samples' measures.
    """

    objective: jax.Array
    measures: jax.Array
    spread: jax.Array


def sample_spread(measures: jax.Array) -> jax.Array:
    """Mean Euclidean distance over the ``S (S - 1) / 2`` pairs of samples: ``[B, S, D] -> [B]``
    (0 for ``S = 1``)."""
    num = measures.shape[1]
    if num < 2:
        return jnp.zeros(measures.shape[:1], jnp.float32)
    # the pairs (i, i + k) one offset k at a time: O(B S D) memory, not O(B S^2 D)
    total = jnp.zeros(measures.shape[:1], jnp.float32)
    for k in range(1, num):
        difference = measures[:, k:] - measures[:, :-k]
        total = total + jnp.sum(jnp.sqrt(jnp.sum(jnp.square(difference), axis=-1)), axis=1)
    return total / (num * (num - 1) / 2)


def modal_cell(cells: jax.Array) -> jax.Array:
    """The most frequent cell of each row, equal counts going to the lowest cell: ``[B, S] int ->
    [B]`` (QDax's ``_mode``). O(B S^2)."""
    return mode(cells)


class LowSpreadArchive(SampledCellsArchive):
    """ME-LS's archive over the cells of a grid or CVT archive (module docstring).

    Args:
        cells: a :class:`~evotensor.qd.GridArchive` or :class:`~evotensor.qd.CVTArchive` that
            defines the cells, what a solution is (``solution_dim`` or ``genotype``) and the QD
            score offset; without CMA-MAE settings or extra fields (refused).
        num_samples: ``S``, evaluations per solution (QDax's ``num_samples``; its example uses 5).

    Attributes:
        num_cells, measure_dim, solution_dim, genotype, qd_score_offset: ``cells``'.
    """

    unshardable_because = "ME-LS's archive is kept whole on one device (run it without mesh=)"

    def __init__(self, cells: Archive, *, num_samples: int):
        super().__init__(cells, num_samples=num_samples, thresholds=False)

    def state_bytes(self) -> int:
        return super().state_bytes() + 4 * self.num_cells  # the spread field

    def _empty(self, c: int) -> ArchiveState:
        state = super()._empty(c)
        return state.replace(fields={"spread": jnp.zeros((c,), jnp.float32)})

    def aggregate(self, objective: jax.Array, measures: jax.Array) -> dict[str, jax.Array]:
        """Each candidate's ``S`` samples reduced as the module docstring says.

        Args:
            objective: ``[B, S]`` (maximized).
            measures: ``[B, S, D]``.

        Returns:
            ``{"objective": [B], "measures": [B, D], "spread": [B], "index": [B] int32 (the modal
            cell), "finite": [B] bool (every sample finite)}``.
        """
        objective, measures = self._check_samples(objective, measures)
        batch, s, d = measures.shape
        finite = self._finite(objective, measures)
        cells = self.index_of(measures.reshape(batch * s, d)).reshape(batch, s)
        index = modal_cell(cells)
        inside = (cells == index[:, None])[..., None]
        mean = jnp.sum(jnp.where(inside, measures, 0.0), axis=1) / jnp.sum(inside, axis=1)
        return {
            "objective": average(objective),
            "measures": mean,
            "spread": sample_spread(measures),
            "index": index.astype(jnp.int32),
            "finite": finite,
        }

    def add(
        self,
        state: ArchiveState,
        solutions: Any,
        objective: jax.Array,
        measures: jax.Array,
        fields: Any = None,
    ) -> tuple[ArchiveState, LowSpreadAddInfo]:
        """Insert a batch of sampled candidates (module docstring).

        Args:
            state: the archive contents.
            solutions: ``[B, solution_dim]`` (or genotypes ``[B]``).
            objective: ``[B, S]`` every sample's objective (maximized).
            measures: ``[B, S, D]`` every sample's measures.
            fields: must be None (ME-LS stores no extra fields).

        Returns:
            ``(new_state, LowSpreadAddInfo)``. O(B S^2 + B S search + C) work.
        """
        if fields:
            raise ArgumentError("fields must be None: a LowSpreadArchive stores no extra fields")
        if state.objective.shape[0] != self.num_cells or "spread" not in state.fields:
            raise ArgumentError(f"state must be this archive's state of {self.num_cells} cells (init())")
        solutions, batch = self._check_solutions(solutions)
        objective, measures = self._check_samples(objective, measures, batch)
        agg = self.aggregate(objective, measures)
        valid = agg["finite"] & candidate_is_valid(solutions, agg["objective"], agg["measures"])
        index = jnp.where(valid, agg["index"], 0)
        occupied = state.occupied[index]
        threshold, can, info = self._assess(agg["objective"], valid, index, occupied, state.threshold[index])
        spread_ok = ~occupied | (agg["spread"] <= state.fields["spread"][index])
        can = can & spread_ok
        status = jnp.where(spread_ok, info.status, NOT_ADDED).astype(jnp.int32)
        state = self._place(
            state,
            can,
            index,
            agg["objective"],
            threshold,
            solutions,
            agg["measures"],
            {"spread": agg["spread"]},
        )
        info = LowSpreadAddInfo(
            status=status,
            value=info.value,
            index=info.index,
            objective=agg["objective"],
            measures=agg["measures"],
            spread=agg["spread"],
        )
        return state, info

    def stats(self, state: ArchiveState) -> dict[str, jax.Array]:
        """:meth:`Archive.stats <evotensor.qd.archive.Archive.stats>` plus ``spread_mean``, the
        elites' mean spread (NaN while empty)."""
        stats = super().stats(state)
        n = jnp.sum(state.occupied)
        total = jnp.sum(jnp.where(state.occupied, state.fields["spread"], 0.0))
        stats["spread_mean"] = jnp.where(n > 0, total / jnp.maximum(n, 1), jnp.nan)
        return stats
