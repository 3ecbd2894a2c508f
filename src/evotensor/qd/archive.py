"""MAP-Elites archives: fixed-capacity struct-of-arrays with exact, deterministic batch insertion.

An archive object holds static configuration (cells, ranges, CMA-MAE settings); its contents are an
:class:`ArchiveState` pytree of preallocated arrays, so ``add`` runs under ``jit``/``vmap``/``scan``
with no Python-side mutation::

    archive = GridArchive(solution_dim=10, dims=(32, 32), ranges=[(-1, 1), (-1, 1)])
    state = archive.init()
    state, info = archive.add(state, solutions, objective, measures)   # [B, 10], [B], [B, 2]
    archive.stats(state)["coverage"]

Orientation: ``objective`` is *maximized* (as in MAP-Elites, pyribs and QDax). Emptiness is an
explicit ``occupied`` mask, never a sentinel value.

Batch semantics (pyribs' ``add``, made deterministic on every backend):

* A candidate may enter its cell iff its objective, measures and every entry of its solution are
  finite and ``objective > threshold``; the threshold of an empty cell is ``threshold_min``, of an
  occupied cell the elite's objective (MAP-Elites) or the CMA-MAE annealed threshold.
* Among the candidates that may enter one cell, the highest objective wins; exact ties go to the
  lowest batch position. Every field of the new elite is taken from that one candidate.
* ``status`` (0 not added, 1 improved an occupied cell, 2 discovered a new cell) and ``value`` are
  computed against the archive *before* the batch: two candidates discovering one cell both get 2.
  ``value = objective - threshold`` where a newly discovered cell counts from 0 when
  ``threshold_min = -inf`` (the CMA-ME improvement) and from ``threshold_min`` otherwise.
* New threshold of a cell that received candidates: the winner's objective when
  ``threshold_min = -inf``; otherwise the CMA-MAE batch rule of Fontaine & Nikolaidis (2023),
  ``t <- (1 - a)^n t + (1 - (1 - a)^n) mean(f)`` over the ``n`` candidates that beat ``t``.
* A candidate with a non-finite objective, measure or solution entry is never added (status 0,
  value ``-inf``, index -1), so an archive's elites are always finite (extra ``fields`` are stored
  as given).

Solutions are flat float32 vectors (``solution_dim``), or, with ``genotype=template``, genotypes of
any pytree structure and dtypes: NEAT genomes, GP trees, network parameters. Such an archive stores
each leaf as ``[C, *leaf_shape]`` in the leaf's own dtype (integer keys stay exact) and checks
finiteness on the floating-point leaves only; the insertion rules are the same::

    archive = GridArchive(genotype=spec.initial(key, 1)[0], dims=(16, 32), ranges=[(0, 16), (0, 32)])
    state, info = archive.add(state, genomes, objective, measures)      # Genome [B], [B], [B, 2]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from evotensor.core import rng
from evotensor.core.checks import (
    ArgumentError,
    check_fraction,
    check_int,
    check_memory,
    check_ranges,
    check_real,
)
from evotensor.core.numerics import deterministic_segment_sum, rounded
from evotensor.core.pytree import pytree_dataclass
from evotensor.qd.centroids import grid_axis_centres, kmeans_centroids, nearest_centroid

NOT_ADDED, IMPROVED, NEW = 0, 1, 2
# up to this many cells per axis a float32 estimate of a grid cell is off by at most one cell
_GUESS_MAX_CELLS = 2**16


@pytree_dataclass
class ArchiveState:
    """Contents of an archive of ``C`` cells (``D`` measures, solutions of ``dims`` elements).

    Attributes:
        solutions: ``[C, dims]`` float32 elite solutions (zeros where empty), or for an archive of
            genotypes a pytree of the genotype's structure with leaves ``[C, *leaf_shape]``.
        objective: ``[C]`` float32 elite objectives, maximized (zeros where empty).
        measures: ``[C, D]`` float32 elite measures (zeros where empty).
        threshold: ``[C]`` float32 acceptance thresholds (``threshold_min`` where empty).
        occupied: ``[C]`` bool.
        fields: extra per-elite fields, ``{name: [C, *shape]}``.
    """

    solutions: Any
    objective: jax.Array
    measures: jax.Array
    threshold: jax.Array
    occupied: jax.Array
    fields: dict[str, jax.Array]


@pytree_dataclass
class AddInfo:
    """What :meth:`Archive.add` reports per candidate (all ``[B]``, against the pre-batch archive).

    Attributes:
        status: int32, 0 not added, 1 improved an occupied cell, 2 discovered a new cell.
        value: float32 ``objective - threshold`` (see the module docstring); ``-inf`` if invalid.
        index: int32 cell of the candidate's measures; -1 if it is invalid (a non-finite objective,
            measure or solution entry).
    """

    status: jax.Array
    value: jax.Array
    index: jax.Array


def candidate_is_valid(solutions: Any, objective: jax.Array, measures: jax.Array) -> jax.Array:
    """``[B]`` bool: the candidate's objective, measures and every solution entry are finite (only
    such a candidate may enter an archive); of a genotype pytree, every floating-point entry."""
    valid = jnp.isfinite(objective) & jnp.all(jnp.isfinite(measures), axis=1)
    for leaf in jax.tree_util.tree_leaves(solutions):
        if jnp.issubdtype(leaf.dtype, jnp.inexact):
            rows = leaf.reshape(leaf.shape[0], math.prod(leaf.shape[1:]))  # -1 fails on an empty batch
            valid = valid & jnp.all(jnp.isfinite(rows), axis=1)
    return valid


def check_objective_measures(objective: Any, measures: Any, measure_dim: int) -> tuple[jax.Array, jax.Array]:
    """``objective [B]`` and ``measures [B, measure_dim]`` as float32, their shapes checked (an
    :class:`ArgumentError` naming both otherwise)."""
    objective = jnp.asarray(objective, jnp.float32)
    measures = jnp.asarray(measures, jnp.float32)
    batch = objective.shape[0] if objective.ndim == 1 else -1
    if objective.ndim != 1 or measures.shape != (batch, measure_dim):
        raise ArgumentError(
            f"objective must be [B] and measures [B, {measure_dim}], got "
            f"{list(objective.shape)} and {list(measures.shape)}"
        )
    return objective, measures


def take_rows(solutions: Any, index: jax.Array) -> Any:
    """Rows ``index [n]`` of every leaf of ``solutions`` (an array or a genotype pytree)."""
    return jax.tree_util.tree_map(lambda a: a[index], solutions)


def genotype_template(genotype: Any) -> Any:
    """One genotype (a pytree of arrays, no population axis) as a pytree of
    ``jax.ShapeDtypeStruct``: what an archive of genotypes stores per cell."""
    leaves, treedef = jax.tree_util.tree_flatten(genotype)
    if not leaves:
        raise ArgumentError(f"genotype must be a pytree with at least one array leaf, got {genotype!r}")
    specs = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(genotype)[0]:
        where = "genotype" + jax.tree_util.keystr(path)
        if isinstance(leaf, jax.ShapeDtypeStruct):
            specs.append(jax.ShapeDtypeStruct(leaf.shape, jax.dtypes.canonicalize_dtype(leaf.dtype)))
            continue
        if isinstance(leaf, (str, bytes)) or leaf is None:
            raise ArgumentError(f"{where} must be an array, got {leaf!r}")
        try:
            array = jnp.asarray(leaf) if isinstance(leaf, jax.Array) else np.asarray(leaf)
        except (TypeError, ValueError) as err:
            raise ArgumentError(f"{where} must be an array, got {leaf!r}") from err
        if array.dtype == object or not (
            jnp.issubdtype(array.dtype, jnp.number) or jnp.issubdtype(array.dtype, jnp.bool_)
        ):
            raise ArgumentError(f"{where} must be an array of numbers or bools, got dtype {array.dtype}")
        # as JAX stores it: a NumPy float64 template is a float32 archive unless x64 is on
        specs.append(jax.ShapeDtypeStruct(array.shape, jax.dtypes.canonicalize_dtype(array.dtype)))
    return jax.tree_util.tree_unflatten(treedef, specs)


def best_cells_of(
    objective: jax.Array,
    measures: jax.Array,
    occupied: jax.Array,
    k: int,
    score: Callable[[jax.Array, jax.Array], jax.Array] | None = None,
    first_cell: Any = 0,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """:meth:`Archive.best_cells` over the rows ``objective [c]``, ``measures [c, D]``, ``occupied
    [c]``, numbered from ``first_cell``: ``(cells, valid, values)``, each ``[min(k, c)]``, with
    ``values`` the scores (``-inf`` where not valid). A sharded archive runs it per device."""
    k = check_int(k, "k")
    value = objective if score is None else jnp.asarray(score(objective, measures), jnp.float32)
    if value.shape != objective.shape:
        raise ArgumentError(
            f"score must give one value per cell {list(objective.shape)}, got {list(value.shape)}"
        )
    value = jnp.where(occupied & ~jnp.isnan(value), value, -jnp.inf)
    # occupied cells first among equal values (an occupied cell may score -inf), then lower cells
    order = lax.sort((-value, (~occupied).astype(jnp.int32), jnp.arange(value.shape[0])), num_keys=3)[2]
    top = order[: min(k, value.shape[0])]
    return (top + first_cell).astype(jnp.int32), occupied[top], jnp.where(occupied[top], value[top], -jnp.inf)


def _check_solution_dim(solution_dim: Any) -> int:
    return check_int(solution_dim, "solution_dim")


def _check_cma_mae(learning_rate: Any, threshold_min: Any) -> tuple[float, float]:
    """pyribs' rule: a finite ``threshold_min`` needs a ``learning_rate`` (CMA-MAE); ``-inf`` needs 1."""
    if not (isinstance(threshold_min, (int, float, np.integer, np.floating)) and threshold_min == -math.inf):
        threshold_min = check_real(threshold_min, "threshold_min")  # finite (in float32) or -inf
    threshold_min = float(threshold_min)
    if learning_rate is None:
        if threshold_min != -math.inf:
            raise ArgumentError(
                "threshold_min was set without learning_rate: a finite threshold_min is CMA-MAE's "
                "annealing threshold, not a filter; set learning_rate too (e.g. 0.01)"
            )
        return 1.0, threshold_min
    learning_rate = check_fraction(learning_rate, "learning_rate", allow_zero=True)
    if threshold_min == -math.inf and learning_rate != 1.0:
        raise ArgumentError(
            f"learning_rate other than 1 needs a finite threshold_min (CMA-MAE), got {learning_rate!r}"
        )
    return learning_rate, threshold_min


def _check_extra_fields(extra_fields: Any) -> dict[str, tuple[tuple[int, ...], Any]]:
    reserved = {"solutions", "objective", "measures", "threshold", "occupied", "index"}
    out = {}
    try:
        items = dict(extra_fields or {}).items()
    except (TypeError, ValueError) as err:
        raise ArgumentError(
            f"extra_fields must be a mapping {{name: (shape, dtype)}}, got {extra_fields!r}"
        ) from err
    for name, spec in items:
        if not isinstance(name, str) or not name.isidentifier() or name in reserved:
            raise ArgumentError(f"extra_fields name {name!r} must be an identifier not in {sorted(reserved)}")
        try:
            shape, dtype = spec
            shape = tuple(check_int(s, f"extra_fields[{name!r}] shape", minimum=0) for s in shape)
            dtype = jnp.dtype(dtype)
        except (TypeError, ValueError) as err:
            raise ArgumentError(f"extra_fields[{name!r}] must be (shape, dtype), got {spec!r}") from err
        out[name] = (shape, dtype)
    return out


class Archive:
    """Common storage and insertion; subclasses define the cells (:meth:`index_of`).

    Args (keyword-only, shared by every archive):
        solution_dim: elements of a (flattened) solution.
        genotype: instead of ``solution_dim``, one genotype of any pytree structure and dtypes (or
            its ``jax.ShapeDtypeStruct`` leaves): the archive stores genotypes of that structure
            (a NEAT ``Genome``, a GP tree); ``solution_dim`` is then ``None``.
        learning_rate: CMA-MAE threshold learning rate (None: plain MAP-Elites, i.e. 1).
        threshold_min: threshold of empty cells (-inf: plain MAP-Elites / CMA-ME).
        qd_score_offset: subtracted from every objective in the QD score (pyribs' sign: pass the
            lowest objective you expect, e.g. -300, so that each elite adds a non-negative amount).
        extra_fields: ``{name: (shape, dtype)}`` stored next to each elite.
    """

    num_cells: int
    measure_dim: int
    # whether a ShardedArchive may split the rows over devices (not where adding needs every row),
    # and why not
    shardable = True
    unshardable_because = ""

    def __init__(
        self,
        *,
        solution_dim: int | None = None,
        genotype: Any = None,
        learning_rate: float | None = None,
        threshold_min: float = -math.inf,
        qd_score_offset: float = 0.0,
        extra_fields: Mapping[str, tuple[Sequence[int], Any]] | None = None,
    ):
        if (solution_dim is None) == (genotype is None):
            given = "None" if genotype is None else "a template"
            raise ArgumentError(
                "give exactly one of solution_dim (flat float32 solutions) and genotype (a template "
                f"pytree), got solution_dim={solution_dim!r} and genotype={given}"
            )
        self.genotype = None if genotype is None else genotype_template(genotype)
        self.solution_dim = None if genotype is not None else _check_solution_dim(solution_dim)
        self.learning_rate, self.threshold_min = _check_cma_mae(learning_rate, threshold_min)
        self.qd_score_offset = check_real(qd_score_offset, "qd_score_offset")
        self.extra_fields = _check_extra_fields(extra_fields)

    def state_bytes(self) -> int:
        """Bytes of :meth:`init`'s state (needs ``num_cells`` and ``measure_dim``)."""
        solution = 4 * self.solution_dim if self.genotype is None else self._genotype_bytes()
        per_cell = solution + 4 * (self.measure_dim + 2) + 1
        for shape, dtype in self.extra_fields.values():
            per_cell += math.prod(shape) * np.dtype(dtype).itemsize
        return self.num_cells * per_cell

    def _check_memory(self, cells: str) -> None:
        """Refuse, naming the cells argument and ``solution_dim``, an archive whose state would not
        fit the device (:func:`evotensor.core.checks.check_memory`); subclasses call it as soon as
        ``num_cells`` is known, before building anything of that size."""
        check_memory(
            self.state_bytes(),
            f"{cells} ({self.num_cells} cells) with {self._solution_size()} ({type(self).__name__}'s state)",
        )

    def _genotype_bytes(self) -> int:
        return sum(math.prod(a.shape) * a.dtype.itemsize for a in jax.tree_util.tree_leaves(self.genotype))

    def _solution_size(self) -> str:
        if self.genotype is None:
            return f"solution_dim={self.solution_dim}"
        return f"genotypes of {self._genotype_bytes()} bytes"

    def check_genotype(self, genotype: Any, who: str, what: str) -> None:
        """Raise :class:`ArgumentError` unless this archive stores genotypes of ``genotype``'s
        structure, shapes and dtypes (one genotype, no population axis): what an emitter of such
        genotypes (``who``, varying ``what``) checks in its ``init``."""
        if self.genotype == genotype_template(genotype):
            return
        stored = "flat solutions" if self.genotype is None else self.genotype
        raise ArgumentError(
            f"{who} needs an archive of {what}: GridArchive(genotype=emitter.genotype, ...) (or "
            f"CVTArchive, ...); the archive stores {stored}"
        )

    def _empty_solutions(self, c: int) -> Any:
        if self.genotype is None:
            return jnp.zeros((c, self.solution_dim), jnp.float32)
        return jax.tree_util.tree_map(lambda a: jnp.zeros((c, *a.shape), a.dtype), self.genotype)

    def _check_solutions(self, solutions: Any) -> tuple[Any, int]:
        """``(solutions, B)``: a flat ``[B, solution_dim]`` float32 batch, or a batch of genotypes
        (the template's structure, every leaf ``[B, *leaf_shape]`` of its kind of dtype)."""
        if self.genotype is None:
            solutions = jnp.asarray(solutions, jnp.float32)
            if solutions.ndim != 2 or solutions.shape[1] != self.solution_dim:
                raise ArgumentError(
                    f"solutions must have shape [B, {self.solution_dim}], got {solutions.shape}"
                )
            return solutions, solutions.shape[0]
        want = jax.tree_util.tree_structure(self.genotype)
        got = jax.tree_util.tree_structure(solutions)
        if got != want:
            raise ArgumentError(f"solutions must be genotypes of the archive's structure {want}, got {got}")
        paths = jax.tree_util.tree_flatten_with_path(solutions)[0]
        batch = None
        checked = []
        for (path, value), spec in zip(paths, jax.tree_util.tree_leaves(self.genotype), strict=True):
            where = "solutions" + jax.tree_util.keystr(path)
            value = jnp.asarray(value)
            if batch is None:
                batch = value.shape[0] if value.ndim else -1
            if value.shape != (batch, *spec.shape):
                raise ArgumentError(
                    f"{where} must have shape [B, *{list(spec.shape)}], got {list(value.shape)}"
                )
            if value.dtype != spec.dtype and not np.can_cast(value.dtype, spec.dtype, "same_kind"):
                raise ArgumentError(f"{where} must be of dtype {spec.dtype}, got {value.dtype}")
            checked.append(value.astype(spec.dtype))
        return jax.tree_util.tree_unflatten(want, checked), batch

    # -- cells ---------------------------------------------------------------------------------
    def index_of(self, measures: jax.Array) -> jax.Array:
        """Cell of each measure vector: ``[B, D] -> [B]`` int32 (any in-range cell if not finite)."""
        raise NotImplementedError(f"{type(self).__name__} must define index_of (see GridArchive, CVTArchive)")

    # -- storage -------------------------------------------------------------------------------
    def init(self) -> ArchiveState:
        """An empty archive."""
        return self._empty(self.num_cells)

    def _empty(self, c: int) -> ArchiveState:
        """``c`` empty rows (``num_cells``, or more for a sharded archive's padded layout)."""
        return ArchiveState(
            solutions=self._empty_solutions(c),
            objective=jnp.zeros((c,), jnp.float32),
            measures=jnp.zeros((c, self.measure_dim), jnp.float32),
            threshold=jnp.full((c,), self.threshold_min, jnp.float32),
            occupied=jnp.zeros((c,), bool),
            fields={
                name: jnp.zeros((c, *shape), dtype) for name, (shape, dtype) in self.extra_fields.items()
            },
        )

    def _check_batch(self, solutions, objective, measures, fields):
        solutions, batch = self._check_solutions(solutions)
        objective = jnp.asarray(objective, jnp.float32)
        measures = jnp.asarray(measures, jnp.float32)
        if objective.shape != (batch,):
            raise ArgumentError(f"objective must have shape [{batch}], got {objective.shape}")
        if measures.shape != (batch, self.measure_dim):
            raise ArgumentError(
                f"measures must have shape [{batch}, {self.measure_dim}], got {measures.shape}"
            )
        fields = dict(fields or {})
        if set(fields) != set(self.extra_fields):
            raise ArgumentError(
                f"fields must have exactly the keys {sorted(self.extra_fields)}, got {sorted(fields)}"
            )
        checked = {}
        for name, (shape, dtype) in self.extra_fields.items():
            value = jnp.asarray(fields[name], dtype)
            if value.shape != (batch, *shape):
                raise ArgumentError(f"fields[{name!r}] must have shape {(batch, *shape)}, got {value.shape}")
            checked[name] = value
        return solutions, objective, measures, checked

    def add(
        self,
        state: ArchiveState,
        solutions: jax.Array,
        objective: jax.Array,
        measures: jax.Array,
        fields: Mapping[str, jax.Array] | None = None,
        cells: jax.Array | None = None,
    ) -> tuple[ArchiveState, AddInfo]:
        """Insert a batch with the semantics of the module docstring.

        Args:
            state: the archive contents.
            solutions: ``[B, solution_dim]`` (or genotypes ``[B]``, see ``genotype``).
            objective: ``[B]`` (maximized).
            measures: ``[B, measure_dim]``.
            fields: ``{name: [B, *shape]}`` for every declared extra field.
            cells: optional ``[B]`` int cell of each candidate, when the caller already knows it
                (multi-task MAP-Elites: the task index); it replaces :meth:`index_of`'s search, and
                a cell outside ``[0, num_cells)`` makes its candidate invalid (never added).

        Returns:
            ``(new_state, AddInfo)``. O(B log B + C) work; the elite arrays are updated by one
            scatter of at most ``B`` rows each (in place when the state is donated).
        """
        if state.objective.shape[0] != self.num_cells:
            raise ArgumentError(
                f"state holds {state.objective.shape[0]} cells but the archive has {self.num_cells}: a "
                "state padded for a device mesh belongs to its ShardedArchive (trim it with "
                "evotensor.qd.sharded_archive.trim_padding to read it)"
            )
        solutions, objective, measures, fields = self._check_batch(solutions, objective, measures, fields)
        valid = candidate_is_valid(solutions, objective, measures)
        if cells is None:
            cells = self.index_of(measures)
        else:
            cells = jnp.asarray(cells)
            if cells.shape != objective.shape or not jnp.issubdtype(cells.dtype, jnp.integer):
                raise ArgumentError(
                    f"cells must be integers of shape {list(objective.shape)}, got {cells.dtype} "
                    f"{list(cells.shape)}"
                )
            valid = valid & (cells >= 0) & (cells < self.num_cells)
        index = jnp.where(valid, cells, 0).astype(jnp.int32)
        threshold, can, info = self._assess(
            objective, valid, index, state.occupied[index], state.threshold[index]
        )
        state = self._place(state, can, index, objective, threshold, solutions, measures, fields)
        return state, info

    def _assess(
        self,
        objective: jax.Array,
        valid: jax.Array,
        index: jax.Array,
        occupied: jax.Array,
        elite_threshold: jax.Array,
    ) -> tuple[jax.Array, jax.Array, AddInfo]:
        """Each candidate against the archive before the batch (the module docstring's rules).

        Args:
            objective, valid, index: ``[B]`` (``index`` 0 where not ``valid``).
            occupied, elite_threshold: ``[B]``, the occupancy and threshold of each candidate's cell.

        Returns:
            ``(threshold [B], can [B] bool, AddInfo)``: the cell's acceptance threshold and whether
            the candidate may enter it.
        """
        threshold = jnp.where(occupied, elite_threshold, self.threshold_min)
        can = valid & (objective > threshold)
        status = jnp.where(can, jnp.where(occupied, IMPROVED, NEW), NOT_ADDED).astype(jnp.int32)
        new_cell_base = 0.0 if self.threshold_min == -math.inf else self.threshold_min
        base = jnp.where(can & ~occupied, new_cell_base, threshold)
        value = jnp.where(valid, objective - base, -jnp.inf)
        return threshold, can, AddInfo(status=status, value=value, index=jnp.where(valid, index, -1))

    def _place(
        self,
        state: ArchiveState,
        can: jax.Array,
        row: jax.Array,
        objective: jax.Array,
        threshold: jax.Array,
        solutions: jax.Array,
        measures: jax.Array,
        fields: Mapping[str, jax.Array],
    ) -> ArchiveState:
        """Write the batch's winners into ``state``, whose ``R`` rows are the cells ``row`` indexes.

        The candidates with ``can`` compete for row ``row`` (``[B]`` in ``0..R-1``): the highest
        objective wins, exact ties go to the lowest batch position, and the row's new threshold
        follows the module docstring. ``state`` may be the whole archive (``row`` = cell) or one
        device's block of cells (``row`` = cell - first cell of the block, ``can`` only for the
        block's own cells): the result of a row depends only on the candidates that target it, in
        batch order, so both give the same bits. O(B log B + R) work.
        """
        batch, rows = objective.shape[0], state.objective.shape[0]
        # winner per row: highest objective, then lowest batch position; segment R collects the rest
        segment = jnp.where(can, row, rows)
        best = jax.ops.segment_max(jnp.where(can, objective, -jnp.inf), segment, num_segments=rows + 1)
        position = jnp.arange(batch, dtype=jnp.int32)
        at_best = can & (objective == best[segment])
        first = jax.ops.segment_min(jnp.where(at_best, position, batch), segment, num_segments=rows + 1)
        wins = can & (first[segment] == position)

        if self.threshold_min == -math.inf:
            new_threshold = objective
        else:
            count = jax.ops.segment_sum(can.astype(jnp.float32), segment, num_segments=rows + 1)[segment]
            # fixed summation order on a GPU too (its scatter-add is atomic)
            total = deterministic_segment_sum(jnp.where(can, objective, 0.0), segment, rows + 1)
            ratio = jnp.power(jnp.float32(1.0 - self.learning_rate), count)
            mean = total[segment] / jnp.maximum(count, 1.0)
            # products pinned to their float32 rounding: no program may fuse them into an FMA
            new_threshold = rounded(ratio * threshold) + rounded(mean * (1.0 - ratio))

        # one row per winner; losers get distinct out-of-range targets, so indices are unique
        target = jnp.where(wins, row, rows + position)

        def put(old, new):
            return old.at[target].set(new.astype(old.dtype), mode="drop", unique_indices=True)

        return ArchiveState(
            solutions=jax.tree_util.tree_map(put, state.solutions, solutions),
            objective=put(state.objective, objective),
            measures=put(state.measures, measures),
            threshold=put(state.threshold, new_threshold),
            occupied=put(state.occupied, jnp.ones((batch,), bool)),
            fields={name: put(state.fields[name], value) for name, value in fields.items()},
        )

    # -- queries -------------------------------------------------------------------------------
    def retrieve(self, state: ArchiveState, measures: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
        """The elite of each measure vector's cell: ``[B, D] -> (occupied [B], {field: [B, ...]})``
        with fields ``solutions, objective, measures, threshold, index`` and the extra fields."""
        measures = jnp.asarray(measures, jnp.float32)
        valid = jnp.all(jnp.isfinite(measures), axis=1)
        index = jnp.where(valid, self.index_of(measures), -1).astype(jnp.int32)
        return valid & state.occupied[jnp.maximum(index, 0)], self._rows(state, index)

    @staticmethod
    def _rows(state: ArchiveState, index: jax.Array) -> dict[str, jax.Array]:
        """``{field: [B, ...]}`` of the rows ``index [B]`` (-1: none; row 0's values stand in), with
        fields ``solutions, objective, measures, threshold, index`` and the extra fields."""
        at = jnp.maximum(index, 0)
        return {
            "solutions": take_rows(state.solutions, at),
            "objective": state.objective[at],
            "measures": state.measures[at],
            "threshold": state.threshold[at],
            "index": index,
            **{name: value[at] for name, value in state.fields.items()},
        }

    def sample_elites(self, key: jax.Array, state: ArchiveState, n: int) -> jax.Array:
        """``n`` cells drawn uniformly, with replacement, among the occupied ones: ``[n]`` int32.

        An empty archive gives cell 0 everywhere; callers check ``state.occupied.any()``.
        """
        counts = jnp.cumsum(state.occupied.astype(jnp.int32))
        k = rng.randint(key, (n,), 0, jnp.maximum(counts[-1], 1))
        # the (k+1)-th occupied cell is the first whose running count exceeds k
        cell = jnp.searchsorted(counts, k, side="right").astype(jnp.int32)
        return jnp.minimum(cell, self.num_cells - 1)

    def has_elites(self, state: ArchiveState) -> jax.Array:
        """``[]`` bool: whether any cell is occupied."""
        return state.occupied.any()

    def elite_solutions(self, state: ArchiveState, cells: jax.Array) -> jax.Array:
        """The solutions stored in ``cells``: ``[n] int32 -> [n, solution_dim]`` (genotypes ``[n]``;
        what emitters vary; a sharded archive fetches each row from the device that holds it)."""
        return take_rows(state.solutions, cells)

    def elite_measures(self, state: ArchiveState, cells: jax.Array) -> jax.Array:
        """The measures of the elites in ``cells``: ``[n] int32 -> [n, measure_dim]`` (what a
        descriptor-conditioned emitter aims its offspring at)."""
        return state.measures[cells]

    def data(self, state: ArchiveState) -> dict[str, Any]:
        """Every elite, on the host (pyribs' ``archive.data()``): ``{"solutions": [n, solution_dim]``
        (genotypes ``[n]``), ``"objective": [n]``, ``"measures": [n, D]``, ``"threshold": [n]``,
        ``"index": [n]`` (the cells), and the extra fields ``[n, ...]``} over the ``n`` occupied
        rows in row order, as NumPy arrays. Not for ``jit`` (``n`` is data); a sharded archive's
        :meth:`~evotensor.qd.sharded_archive.ShardedArchive.data` gathers the rows first."""
        if not isinstance(state, ArchiveState) or state.objective.shape[0] != self.num_cells:
            rows = getattr(getattr(state, "objective", None), "shape", None)
            raise ArgumentError(
                f"state must be this archive's ArchiveState of {self.num_cells} rows, got {rows}"
            )
        rows = np.flatnonzero(np.asarray(state.occupied))

        def take(a: Any) -> np.ndarray:
            return np.asarray(a)[rows]

        return {
            "solutions": jax.tree_util.tree_map(take, state.solutions),
            "objective": take(state.objective),
            "measures": take(state.measures),
            "threshold": take(state.threshold),
            "index": rows.astype(np.int32),
            **{name: take(value) for name, value in state.fields.items()},
        }

    def best_cells(
        self, state: ArchiveState, k: int, score: Callable[[jax.Array, jax.Array], jax.Array] | None = None
    ) -> tuple[jax.Array, jax.Array]:
        """The ``k`` occupied cells of highest ``score``: ``(cells [m] int32, valid [m] bool)`` with
        ``m = min(k, num_cells)``, best first, equal scores to the lower cell; ``valid`` is false
        where fewer than ``m`` cells are occupied (those entries are empty cells).

        ``score(objective [c], measures [c, D]) -> [c]`` rates cells independently of each other
        (default: the objective); a NaN score counts as ``-inf`` (after every finite score, before
        the empty cells). ``k`` is static.
        """
        cells, valid, _ = best_cells_of(state.objective, state.measures, state.occupied, k, score)
        return cells, valid

    def stats(self, state: ArchiveState) -> dict[str, jax.Array]:
        """Scalar archive statistics (pyribs' definitions; QDax reports coverage in percent and adds
        its offset instead):

        ``num_elites``, ``coverage`` (fraction of cells), ``qd_score`` (sum over elites of
        ``objective - qd_score_offset``), ``norm_qd_score`` (``qd_score / C``), ``obj_max`` and
        ``obj_mean`` (NaN while empty).
        """
        occupied = state.occupied
        return self._summarize(
            occupied.sum(),
            jnp.sum(jnp.where(occupied, state.objective - self.qd_score_offset, 0.0)),
            jnp.max(jnp.where(occupied, state.objective, -jnp.inf)),
            jnp.sum(jnp.where(occupied, state.objective, 0.0)),
        )

    def _summarize(
        self, n: jax.Array, qd: jax.Array, obj_max: jax.Array, obj_total: jax.Array
    ) -> dict[str, jax.Array]:
        """:meth:`stats` from the elite count, QD score, maximum and total objective (sums and a max
        over the cells, so a sharded archive reduces them over its devices first)."""
        obj_mean = obj_total / jnp.maximum(n, 1)
        empty = n == 0
        return {
            "num_elites": n.astype(jnp.int32),
            "coverage": n / self.num_cells,
            "qd_score": qd,
            "norm_qd_score": qd / self.num_cells,
            "obj_max": jnp.where(empty, jnp.nan, obj_max),
            "obj_mean": jnp.where(empty, jnp.nan, obj_mean),
        }


class UnstructuredArchive(Archive):
    """An archive of ``capacity`` rows that are not cells: which row holds a solution depends on the
    contents (novelty search's :class:`~evotensor.qd.ProximityArchive`, Dominated Novelty Search's
    :class:`~evotensor.qd.DNSArchive`). Queries go by the nearest stored measures; it is never split
    over devices (adding needs every stored measure). Subclasses set ``measure_dim`` and ``capacity``
    (= ``num_cells``) and define ``_check_state`` and ``_nearest``."""

    shardable = False
    unshardable_because = (
        "adding to it needs every stored measure, not one device's cells; run it without a mesh"
    )

    def index_of(self, measures: jax.Array) -> jax.Array:
        raise ArgumentError(
            f"a {type(self).__name__} has no cells: its rows depend on its contents; use "
            "nearest(state, measures) for the closest elite"
        )

    def _check_state(self, state: Any) -> ArchiveState:
        """``state`` as this archive's state, or an :class:`ArgumentError` naming what is wrong
        (a subclass defines it)."""
        raise NotImplementedError(f"{type(self).__name__} must define _check_state(state)")

    def _nearest(self, state: ArchiveState, measures: jax.Array) -> jax.Array:
        """``[B]`` int32: the occupied row nearest each (finite) measure vector of ``measures [B, D]``,
        equal distances to the lowest row; any row where the archive is empty (a subclass defines
        it)."""
        raise NotImplementedError(f"{type(self).__name__} must define _nearest(state, measures)")

    def nearest(self, state: ArchiveState, measures: jax.Array) -> jax.Array:
        """Row of the elite closest to each measure vector: ``[B, D] -> [B]`` int32 (equal distances:
        the lowest row; -1 for an empty archive or non-finite measures)."""
        state = self._check_state(state)
        measures = jnp.asarray(measures, jnp.float32)
        if measures.ndim != 2 or measures.shape[1] != self.measure_dim:
            raise ArgumentError(f"measures must have shape [B, {self.measure_dim}], got {measures.shape}")
        ok = state.occupied.any() & jnp.all(jnp.isfinite(measures), axis=1)
        return jnp.where(ok, self._nearest(state, measures), -1)

    def retrieve(self, state: ArchiveState, measures: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
        """The elite nearest each measure vector: ``[B, D] -> (found [B], {field: [B, ...]})`` with
        fields ``solutions, objective, measures, threshold, index`` and the extra fields."""
        index = self.nearest(state, measures)
        return index >= 0, self._rows(state, index)


class GridArchive(Archive):
    """The MAP-Elites grid (Mouret & Clune 2015): ``prod(dims)`` cells of a uniform grid over
    ``ranges``. A measure vector's cell is pyribs' formula
    ``clip(int((dims (m - low) + epsilon) / (high - low)), 0, dims - 1)`` per axis, evaluated
    exactly in float64 on the float32 measure (through per-axis float32 cell boundaries computed
    once on the host, so the device only compares), flattened in row-major order; measures outside
    ``ranges`` go to the border cells.

    Args:
        solution_dim: elements of a solution.
        dims: cells per measure, e.g. ``(32, 32)``.
        ranges: ``(low, high)`` per measure.
        epsilon: guards against rounding just below a cell boundary.
        learning_rate, threshold_min, qd_score_offset, extra_fields: see :class:`Archive`.
    """

    def __init__(
        self,
        *,
        solution_dim: int | None = None,
        dims: Sequence[int],
        ranges: Sequence[tuple[float, float]],
        epsilon: float = 1e-6,
        **kwargs: Any,
    ):
        super().__init__(solution_dim=solution_dim, **kwargs)
        if isinstance(dims, (str, bytes)) or not hasattr(dims, "__len__") or len(dims) < 1:
            raise ArgumentError(f"dims must be a non-empty sequence of ints, got {dims!r}")
        self.dims = tuple(check_int(d, f"dims[{i}]") for i, d in enumerate(dims))
        self.ranges = check_ranges(ranges, "ranges", count=len(self.dims))
        self.epsilon = check_real(epsilon, "epsilon", low=0.0)
        self.measure_dim = len(self.dims)
        self.num_cells = math.prod(self.dims)
        if self.num_cells >= 2**31 - 1:
            raise ArgumentError(f"dims {self.dims} give {self.num_cells} cells; at most 2**31 - 2 fit int32")
        self._check_memory(f"dims={self.dims}")
        self.thresholds = tuple(self._thresholds(d) for d in range(self.measure_dim))

    def cell_formula(self, axis: int, measures: np.ndarray) -> np.ndarray:
        """pyribs' cell of ``measures`` along ``axis``, in float64 NumPy (the definition):
        ``clip(floor((dims (m - low) + epsilon) / (high - low)), 0, dims - 1)``."""
        low, high = self.ranges[axis]
        n = self.dims[axis]
        scaled = (n * (np.asarray(measures, np.float64) - low) + self.epsilon) / (high - low)
        return np.clip(np.floor(scaled), 0, n - 1).astype(np.int64)

    def _thresholds(self, axis: int) -> np.ndarray:
        """``[dims - 1]`` float32: entry ``k - 1`` is the smallest float32 that :meth:`cell_formula`
        puts in a cell ``>= k``. The formula is monotone in ``m``, so a float32 measure's cell is the
        number of thresholds ``<= m``: exactly pyribs' float64 cell, under ``jit`` or not (computing
        the formula in float32 on the device lands one cell off near boundaries, and XLA rewrites
        the division differently with and without ``jit``)."""
        low, high = self.ranges[axis]
        n = self.dims[axis]
        k = np.arange(1, n, dtype=np.float64)
        t = (low + (k * (high - low) - self.epsilon) / n).astype(np.float32)
        # the float64 solution rounded to float32 is within a few ulps: walk to the exact one
        for _ in range(64):
            low_enough = self.cell_formula(axis, t) >= k
            down = np.nextafter(t, np.float32(-np.inf))
            lower_works = self.cell_formula(axis, down) >= k
            if np.all(low_enough & ~lower_works):
                return t
            t = np.where(~low_enough, np.nextafter(t, np.float32(np.inf)), np.where(lower_works, down, t))
        raise RuntimeError(f"could not place the cell boundaries of axis {axis}")  # pragma: no cover

    def _guess_is_safe(self, axis: int) -> bool:
        """Whether ``floor(float32(n / (high - low)) * (m - float32(low)))`` is within one cell of
        the exact cell for every float32 ``m``: its error, in cells, is the rounding of ``low`` to
        float32 times ``n / (high - low)`` plus a few float32 roundings of values up to ``n``."""
        low, high = self.ranges[axis]
        n = self.dims[axis]
        error = abs(float(np.float32(low)) - low) * n / (high - low) + 8 * n * 2.0**-24
        return n <= _GUESS_MAX_CELLS and error < 0.5

    def grid_index_of(self, measures: jax.Array) -> jax.Array:
        """Per-axis cell coordinates: ``[B, D] -> [B, D]`` int32 (see :meth:`cell_formula`)."""
        measures = jnp.asarray(measures, jnp.float32)
        columns = []
        for d, (n, (low, high), t) in enumerate(zip(self.dims, self.ranges, self.thresholds, strict=True)):
            m = measures[:, d]
            if not self._guess_is_safe(d):  # a float32 guess could be more than a cell off
                columns.append(jnp.searchsorted(jnp.asarray(t), m, side="right", method="scan"))
                continue
            # lower edge of each cell (-inf for the first), then +inf: edges[k] <= m < edges[k + 1]
            edges = jnp.asarray(np.concatenate([[-np.inf], t, [np.inf]]).astype(np.float32))
            # a float32 guess is within one cell of the exact one; two compares settle it
            guess = jnp.floor(jnp.float32(n / (high - low)) * (m - jnp.float32(low)))
            guess = jnp.clip(jnp.where(jnp.isnan(guess), 0.0, guess), 0.0, n - 1.0).astype(jnp.int32)
            cell = guess + (m >= edges[guess + 1]).astype(jnp.int32) - (m < edges[guess]).astype(jnp.int32)
            columns.append(jnp.clip(cell, 0, n - 1))
        return jnp.stack(columns, axis=1).astype(jnp.int32)

    def cell_centers(self, cells: jax.Array) -> jax.Array:
        """The centre of each cell: ``[n] int -> [n, D]`` float32, the rows ``cells`` of
        :func:`~evotensor.qd.centroids.grid_centroids` (pyribs' cell centres) without building it."""
        cells = jnp.asarray(cells, jnp.int32)
        axes = grid_axis_centres(self.dims, self.ranges)
        columns, rest = [], cells
        for n, centres in zip(self.dims[::-1], axes[::-1], strict=True):  # row-major: last axis fastest
            columns.append(jnp.asarray(centres, jnp.float32)[rest % n])
            rest = rest // n
        return jnp.stack(columns[::-1], axis=1)

    def index_of(self, measures: jax.Array) -> jax.Array:
        grid = self.grid_index_of(measures)
        strides = np.cumprod((1,) + self.dims[:0:-1])[::-1]  # row-major strides
        return jnp.sum(grid * jnp.asarray(strides, jnp.int32), axis=1).astype(jnp.int32)


class CVTArchive(Archive):
    """CVT-MAP-Elites (Vassiliades et al. 2018): one cell per centroid of a centroidal Voronoi
    tessellation of the measure space; a measure vector belongs to its nearest centroid.

    Args:
        solution_dim: elements of a solution.
        centroids: ``[C, D]`` array of centroids, or a number of cells ``C`` to compute them with
            :func:`~evotensor.qd.centroids.kmeans_centroids` from ``samples`` uniform points in
            ``ranges`` (seeded by ``seed``).
        ranges: ``(low, high)`` per measure (the box sampled for the centroids).
        samples: points for k-means when ``centroids`` is a count (pyribs' default 100,000).
        seed: k-means seed.
        chunk_size: centroids per block of the nearest-centroid search (bounds memory).
        learning_rate, threshold_min, qd_score_offset, extra_fields: see :class:`Archive`.
    """

    def __init__(
        self,
        *,
        solution_dim: int | None = None,
        centroids: int | jax.Array | np.ndarray,
        ranges: Sequence[tuple[float, float]],
        samples: int = 100_000,
        seed: int = 0,
        chunk_size: int = 1024,
        **kwargs: Any,
    ):
        super().__init__(solution_dim=solution_dim, **kwargs)
        self.ranges = check_ranges(ranges)
        self.chunk_size = check_int(chunk_size, "chunk_size")
        seed = check_int(seed, "seed", minimum=None)
        if isinstance(centroids, (bool, np.bool_, float, np.floating, str, bytes)):
            raise ArgumentError(f"centroids must be a number of cells or a [C, D] array, got {centroids!r}")
        if isinstance(centroids, (int, np.integer)):
            centroids = check_int(centroids, "centroids")
            self.measure_dim, self.num_cells = len(self.ranges), centroids
            self._check_memory(f"centroids={centroids}")  # before k-means builds anything
            if isinstance(samples, (int, np.integer)) and not isinstance(samples, bool):
                samples = check_int(samples, "samples")
                if centroids > samples:
                    raise ArgumentError(
                        f"centroids ({centroids} cells) must be <= samples ({samples}): k-means needs "
                        "at least one sample per cell"
                    )
            centroids, _ = kmeans_centroids(jax.random.key(seed), centroids, self.ranges, samples=samples)
        try:
            centroids = np.asarray(centroids, np.float32)
        except (TypeError, ValueError) as err:
            raise ArgumentError(
                f"centroids must be a number of cells or a [C, D] array, got {centroids!r}"
            ) from err
        if centroids.ndim != 2 or centroids.shape[0] < 1 or centroids.shape[1] != len(self.ranges):
            raise ArgumentError(f"centroids must have shape [C, {len(self.ranges)}], got {centroids.shape}")
        if not np.all(np.isfinite(centroids)):
            raise ArgumentError("centroids must be finite (in float32)")
        if centroids.shape[0] >= 2**31 - 1:
            raise ArgumentError(f"centroids gives {centroids.shape[0]} cells; at most 2**31 - 2 fit int32")
        self.centroids = jnp.asarray(centroids)
        self.measure_dim = centroids.shape[1]
        self.num_cells = centroids.shape[0]
        self._check_memory(f"centroids of shape {centroids.shape}")

    def cell_centers(self, cells: jax.Array) -> jax.Array:
        """The centroid of each cell: ``[n] int -> [n, D]`` float32."""
        return self.centroids[jnp.asarray(cells, jnp.int32)]

    def index_of(self, measures: jax.Array) -> jax.Array:
        measures = jnp.asarray(measures, jnp.float32)
        return nearest_centroid(measures, self.centroids, chunk_size=self.chunk_size).astype(jnp.int32)
