"""MAP-Elites-Sampling (ME-Sampling; Justesen et al. 2019, Flageat & Cully 2023's baseline; QDax's
``sampling`` scoring wrapper): every solution is evaluated ``S`` times and the archive stores one
*expected* fitness and descriptor per solution, extracted from its samples::

    archive = SampledArchive(CVTArchive(solution_dim=8, centroids=1024, ranges=[(0, 1)] * 2),
                             num_samples=5, fitness_extractor="average", descriptor_extractor="median")
    state, info = archive.add(state, solutions, objective, measures)   # [B, 8], [B, 5], [B, 5, 2]

With :class:`~evotensor.qd.MAPElites` (any emitters) the population asked is each emitter's batch
with every solution repeated ``S`` times in a row, so the run loop evaluates each ``S`` times with
its own noise and counts ``S`` evaluations per solution (as QDax's ``sampling`` does inside its
scoring function).

Rules: the extractors (:mod:`evotensor.qd.extractors`: ``"average"`` (QDax's default),
``"median"``, ``"mode"``, ``"closest"``, or any ``[B, S, ...] -> [B, ...]`` callable) reduce the
objective samples ``[B, S]`` and the measure samples ``[B, S, D]`` independently; the reduced
candidates are then inserted by the cells archive's own rules (``cells.add``: grid or CVT cells,
strict improvement, ties to the lowest batch position, CMA-MAE thresholds if ``cells`` has them).
A candidate is valid only if its solution and every sample's objective and measures are finite (a
NaN sample would make the mean NaN and the median or mode arbitrary). The state is the cells
archive's :class:`~evotensor.qd.archive.ArchiveState`; the archive is not split over devices.

:class:`SampledCellsArchive` is what this archive and ME-LS's
:class:`~evotensor.qd.LowSpreadArchive` share: cells from a grid or CVT archive, ``num_samples``,
and the shape checks of sampled batches.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from evotensor.core.checks import ArgumentError, check_int
from evotensor.core.pytree import pytree_dataclass
from evotensor.qd.archive import AddInfo, Archive, ArchiveState, UnstructuredArchive, candidate_is_valid
from evotensor.qd.extractors import get_extractor


@pytree_dataclass
class SampledAddInfo(AddInfo):
    """:class:`~evotensor.qd.archive.AddInfo` plus each candidate's extracted values.

    Attributes:
        objective: ``[B]`` float32 expected objective.
        measures: ``[B, D]`` float32 expected measures.
    """

    objective: jax.Array
    measures: jax.Array


class SampledCellsArchive(Archive):
    """The cells of a grid or CVT archive, filled with solutions evaluated ``num_samples`` times.

    Args:
        cells: a :class:`~evotensor.qd.GridArchive` or :class:`~evotensor.qd.CVTArchive` that
            defines the cells, what a solution is (``solution_dim`` or ``genotype``), the QD score
            offset and (where ``thresholds`` allows) CMA-MAE's ``learning_rate``/``threshold_min``;
            without extra fields (refused: they would be per sample).
        num_samples: ``S``, evaluations per solution (QDax's ``num_samples``).
        thresholds: whether ``cells`` may carry CMA-MAE settings (ME-LS: no).

    Attributes:
        num_cells, measure_dim, solution_dim, genotype, qd_score_offset: ``cells``'.
    """

    shardable = False
    unshardable_because = "a sampled archive is kept whole on one device (run it without mesh=)"

    def __init__(self, cells: Archive, *, num_samples: int, thresholds: bool = True):
        if not isinstance(cells, Archive) or isinstance(cells, (UnstructuredArchive, SampledCellsArchive)):
            raise ArgumentError(
                f"cells must be a GridArchive or CVTArchive (cells by measures), got {type(cells).__name__}"
            )
        if getattr(cells, "num_objectives", None) is not None:
            raise ArgumentError("cells must be a single-objective archive (GridArchive or CVTArchive)")
        if cells.extra_fields:
            raise ArgumentError(
                "cells must have no extra_fields: a sampled archive stores one value per solution"
            )
        if not thresholds and (cells.learning_rate != 1.0 or cells.threshold_min != -math.inf):
            raise ArgumentError(
                f"cells must be a plain archive: {type(self).__name__} has its own acceptance rule, so "
                "CMA-MAE's learning_rate/threshold_min do not apply"
            )
        kept = (
            {"learning_rate": cells.learning_rate, "threshold_min": cells.threshold_min} if thresholds else {}
        )
        super().__init__(
            solution_dim=cells.solution_dim,
            genotype=cells.genotype,
            qd_score_offset=cells.qd_score_offset,
            **kept,
        )
        self.cells = cells
        self.num_cells = cells.num_cells
        self.measure_dim = cells.measure_dim
        self.num_samples = check_int(num_samples, "num_samples")
        self._check_memory(f"{self.num_cells} cells")

    def __repr__(self) -> str:
        cells = type(self.cells).__name__
        return f"{type(self).__name__}({cells}, {self.num_cells} cells, num_samples={self.num_samples})"

    def index_of(self, measures: jax.Array) -> jax.Array:
        """The cells' :meth:`index_of`: ``[B, D] -> [B]`` int32."""
        return self.cells.index_of(measures)

    def _check_samples(
        self, objective: Any, measures: Any, batch: int | None = None
    ) -> tuple[jax.Array, jax.Array]:
        """``objective [B, S]`` and ``measures [B, S, D]`` as float32, their shapes checked."""
        objective = jnp.asarray(objective, jnp.float32)
        measures = jnp.asarray(measures, jnp.float32)
        s, d = self.num_samples, self.measure_dim
        rows = objective.shape[0] if batch is None and objective.ndim else batch
        if objective.ndim != 2 or objective.shape != (rows, s):
            raise ArgumentError(
                f"objective must have shape [{'B' if batch is None else batch}, num_samples={s}], "
                f"got {list(objective.shape)}"
            )
        if measures.shape != (objective.shape[0], s, d):
            raise ArgumentError(
                f"measures must have shape [B, num_samples, measure_dim] = [{objective.shape[0]}, {s}, {d}], "
                f"got {list(measures.shape)}"
            )
        return objective, measures

    @staticmethod
    def _finite(objective: jax.Array, measures: jax.Array) -> jax.Array:
        """``[B]`` bool: every sample's objective and measures finite."""
        return jnp.all(jnp.isfinite(objective), axis=1) & jnp.all(jnp.isfinite(measures), axis=(1, 2))


class SampledArchive(SampledCellsArchive):
    """ME-Sampling's archive (module docstring).

    Args:
        cells: see :class:`SampledCellsArchive` (CMA-MAE thresholds allowed).
        num_samples: ``S``, evaluations per solution.
        fitness_extractor: ``[B, S] -> [B]``: a name of :data:`evotensor.qd.extractors.EXPECTATIONS`
            or a callable; default ``"average"`` (QDax's).
        descriptor_extractor: ``[B, S, D] -> [B, D]``, likewise.
    """

    def __init__(
        self,
        cells: Archive,
        *,
        num_samples: int,
        fitness_extractor: Any = "average",
        descriptor_extractor: Any = "average",
    ):
        super().__init__(cells, num_samples=num_samples)
        self.fitness_extractor = get_extractor(fitness_extractor, "fitness_extractor")
        self.descriptor_extractor = get_extractor(descriptor_extractor, "descriptor_extractor")

    def aggregate(self, objective: jax.Array, measures: jax.Array) -> dict[str, jax.Array]:
        """``{"objective": [B], "measures": [B, D], "finite": [B] bool}`` of ``objective [B, S]``
        and ``measures [B, S, D]``."""
        objective, measures = self._check_samples(objective, measures)
        return {
            "objective": jnp.asarray(self.fitness_extractor(objective), jnp.float32),
            "measures": jnp.asarray(self.descriptor_extractor(measures), jnp.float32),
            "finite": self._finite(objective, measures),
        }

    def add(
        self,
        state: ArchiveState,
        solutions: Any,
        objective: jax.Array,
        measures: jax.Array,
        fields: Any = None,
    ) -> tuple[ArchiveState, SampledAddInfo]:
        """Extract each candidate's expected objective and measures, then insert them.

        Args:
            state: the archive contents.
            solutions: ``[B, solution_dim]`` (or genotypes ``[B]``).
            objective: ``[B, S]`` every sample's objective (maximized).
            measures: ``[B, S, D]`` every sample's measures.
            fields: must be None (no extra fields).

        Returns:
            ``(new_state, SampledAddInfo)``; ``status``, ``value`` and ``index`` as the cells
            archive reports them for the extracted candidates (an invalid one: 0, ``-inf``, -1).
        """
        if fields:
            raise ArgumentError("fields must be None: a SampledArchive stores no extra fields")
        solutions, batch = self._check_solutions(solutions)
        objective, measures = self._check_samples(objective, measures, batch)
        agg = self.aggregate(objective, measures)
        valid = agg["finite"] & candidate_is_valid(solutions, agg["objective"], agg["measures"])
        # an invalid candidate goes in as a NaN objective: the base add refuses it
        state, info = super().add(
            state, solutions, jnp.where(valid, agg["objective"], jnp.nan), agg["measures"]
        )
        return state, SampledAddInfo(
            status=info.status,
            value=info.value,
            index=info.index,
            objective=agg["objective"],
            measures=agg["measures"],
        )
