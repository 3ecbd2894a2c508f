"""A MAP-Elites archive split along its cell axis over a device mesh, with unchanged batch rules.

:class:`ShardedArchive` wraps a :class:`~evotensor.qd.archive.GridArchive`,
:class:`~evotensor.qd.archive.CVTArchive` (or any :class:`~evotensor.qd.archive.Archive`) and keeps
every ``[cells, ...]`` array of its state (solutions, objective, measures, thresholds, occupancy,
extra fields) split into ``n`` contiguous blocks of cells, one per device of the mesh axis, so a
device holds ``ceil(cells / n)`` cells. It has the archive's methods (``init``, ``add``,
``retrieve``, ``sample_elites``, ``stats``, ...) with the same results, bit for bit on a CPU, as
the unsharded archive for the same inputs. :meth:`MAPElites.on_mesh
<evotensor.qd.map_elites.MAPElites.on_mesh>` (which ``evotensor.run(..., mesh=mesh)`` calls) puts
both of a MAP-Elites' archives in this layout::

    mesh = jax.make_mesh((4,), ("pop",))
    archive = ShardedArchive(CVTArchive(solution_dim=100, centroids=10_000, ranges=...), mesh)
    state = archive.init()                         # 2,500 cells per device
    state, info = archive.add(state, solutions, objective, measures)   # [B, 100], [B], [B, D]

How each operation runs (all inside ``jax.shard_map``, so nothing ever gathers the archive; only
batch-sized arrays cross devices — checked on the compiled programs by the tests):

* **add**: every device sees the whole (small) batch. The cell of each candidate is computed once
  per device (grid) or found by a search split over the devices (CVT: each device searches its own
  centroids with :func:`~evotensor.qd.centroids.nearest_in_block`; the smallest
  ``(distance, index)`` over the devices is the global nearest centroid, ties to the lowest
  index). Each candidate's cell occupancy and threshold come from the cell's owner (a ``psum`` of
  the owner's value and zeros elsewhere, on the bit patterns, so it is exact), every device then
  computes the whole batch's :class:`~evotensor.qd.archive.AddInfo` (replicated: what emitters and
  metrics need), and each device inserts the candidates of its own cells with the archive's own
  insertion code (winner per cell, ties to the lowest batch position, CMA-MAE thresholds): a cell's
  result depends only on the candidates that target it, in batch order, so it is the same.
* **sample_elites**: the ``k``-th occupied cell of the whole archive, from per-device occupied
  counts (an ``[n]`` sum) and the owner's local search: the unsharded cells for the same key.
* **elite_solutions**, **retrieve**: each row from its owner (``[B, dims]`` crosses devices).
* **stats**: counts, sums and maxima per device, then ``psum``/``pmax``. ``num_elites``,
  ``coverage`` and ``obj_max`` are exact; ``qd_score``, ``norm_qd_score`` and ``obj_mean`` are
  float32 sums taken in another order than on one device, equal to within float32 rounding (a few
  units in the last place; 2e-7 relative in the tests).

A :class:`~evotensor.qd.MOMEArchive` keeps Pareto fronts, not one elite per cell: its subclass
:class:`~evotensor.qd.sharded_mome.ShardedMOMEArchive` splits the fronts the same way (what
``MAPElites.on_mesh`` builds for it).

Emitters read the archive only through these methods (see :mod:`evotensor.qd.emitters.base`), so
every emitter works on a sharded archive. :class:`~evotensor.qd.map_elites.ShardedMAPElites` runs
the emitters whole on every device (their batch math is ``[batch, dims]``-sized; a CMA-ES sample's
matrix product split by rows would round differently from one device's) and the run loop splits
the population over the devices for its evaluation.

Padding. When ``n`` does not divide the number of cells ``C``, the state has ``ceil(C / n) * n``
rows; the extra rows are empty cells that no measure maps to, so they are never occupied, never
sampled and never counted (``coverage`` and ``norm_qd_score`` divide by ``C``).
:func:`trim_padding` (and ``MAPElites.reported_archive``) cuts them off for anything that reads the
state as the plain archive's (plots, exports); the plain archive's ``add`` refuses a padded state.
Checkpoints hold the ``C`` cells (:meth:`ShardedArchive.portable`, through ``MAPElites``'
``portable_state``), so they resume on any device count: the sharded format writes each device's
own cells from that device (the padded state is handed over as
:class:`~evotensor.core.mesh.Padded` leaves, never gathered) and restores each device's block
straight into the new layout; the single-file format gathers the cells as it gathers everything.

Reproducibility: on a CPU, ``add``/``sample_elites``/``retrieve`` give the unsharded archive's bits.
On a GPU the CMA-MAE threshold mean of a cell that receives several candidates is a sorted segment
sum whose pairing can differ from one device's (last-bit differences, within the GPU tolerance).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from evotensor.core import rng
from evotensor.core.checks import ArgumentError, check_int
from evotensor.core.mesh import POPULATION_AXIS, Padded, axis_size, check_mesh, place
from evotensor.qd.archive import (
    AddInfo,
    Archive,
    ArchiveState,
    CVTArchive,
    best_cells_of,
    candidate_is_valid,
)
from evotensor.qd.centroids import nearest_in_block

_SIGNED = {1: jnp.int8, 2: jnp.int16, 4: jnp.int32, 8: jnp.int64}
_NO_INDEX = np.iinfo(np.int32).max


def from_owner(value: jax.Array, mine: jax.Array, axis: str) -> jax.Array:
    """Inside ``shard_map``: ``value`` of the one device where ``mine`` holds, on every device.

    ``value [B, ...]``, ``mine [B]`` bool, true on exactly one device per row (or none: zeros). The
    sum runs on the bit patterns as integers (the owner's bits plus zeros), so the result is the
    owner's value exactly: a float ``psum`` would turn ``-0.0`` into ``0.0``.
    """
    mask = mine.reshape(mine.shape + (1,) * (value.ndim - 1))
    if value.dtype == jnp.bool_:
        return lax.psum(jnp.where(mask, value, False).astype(jnp.int32), axis) > 0
    signed = jnp.dtype(_SIGNED[value.dtype.itemsize])
    bits = lax.bitcast_convert_type(value, signed) if value.dtype != signed else value
    wide = jnp.int32 if value.dtype.itemsize < 4 else signed  # psum of narrow ints: widen, narrow back
    total = lax.psum(jnp.where(mask, bits, 0).astype(wide), axis).astype(signed)
    return lax.bitcast_convert_type(total, value.dtype) if value.dtype != signed else total


def trim_padding(state: ArchiveState, num_cells: int) -> ArchiveState:
    """``state`` cut to its first ``num_cells`` rows: a :class:`ShardedArchive`'s padded state read
    as the plain archive's (the padding rows are always empty). A state of ``num_cells`` rows is
    returned as it is."""
    if state.objective.shape[0] == num_cells:
        return state
    return jax.tree_util.tree_map(lambda a: _whole(a)[:num_cells], state)


def _whole(a: jax.Array) -> jax.Array:
    """``a`` replicated when its type says it is split (an explicitly sharded mesh axis), so that it
    can be sliced; other arrays unchanged (XLA places an auto-sharded slice itself)."""
    sharding = jax.typeof(a).sharding
    if any(entry is not None for entry in getattr(sharding, "spec", ())):
        return jax.sharding.reshard(a, NamedSharding(sharding.mesh, P()))
    return a


class ShardedArchive:
    """``archive`` with its cells split over the mesh axis ``axis`` (see the module docstring).

    Args:
        archive: a :class:`~evotensor.qd.archive.GridArchive`, :class:`~evotensor.qd.archive.CVTArchive`
            or other :class:`~evotensor.qd.archive.Archive` (a ShardedArchive is re-sharded).
        mesh: a ``jax.sharding.Mesh`` (one host's devices or every process's); other mesh axes
            hold copies.
        axis: the mesh axis that splits the cells (``"pop"``, the run loop's population axis).

    Attributes:
        archive: the plain archive (its cells, ranges, CMA-MAE settings).
        num_shards: devices along ``axis``.
        shard_cells: cells per device, ``ceil(num_cells / num_shards)``.
        padded_cells: rows of the state, ``shard_cells * num_shards``.
        solution_dim, measure_dim, num_cells, extra_fields, learning_rate, threshold_min,
        qd_score_offset, ranges: the plain archive's.

    Example::

        archive = ShardedArchive(GridArchive(solution_dim=8, dims=(100, 100), ranges=[(0, 1)] * 2), mesh)
        state = archive.init()                     # [10000, 8] solutions, 2500 rows per device on 4
        state, info = archive.add(state, x, f, m)  # info: [B] replicated on every device
    """

    def __init__(self, archive: Archive, mesh: Mesh, axis: str = POPULATION_AXIS):
        if isinstance(archive, ShardedArchive):
            archive = archive.archive
        if not isinstance(archive, Archive):
            raise ArgumentError(f"archive must be an evotensor.qd Archive, got {type(archive).__name__}")
        self._check_shardable(archive)
        self.mesh = check_mesh(mesh, axis)
        self.axis = axis
        self.archive = archive
        self.num_shards = axis_size(mesh, axis)
        self.shard_cells = -(-archive.num_cells // self.num_shards)
        self.padded_cells = self.shard_cells * self.num_shards
        self._centroids = None
        # the CVT search is split over the devices unless a subclass changed how cells are found
        if isinstance(archive, CVTArchive) and type(archive).index_of is CVTArchive.index_of:
            centroids = np.asarray(archive.centroids, np.float32)
            pad = np.zeros((self.padded_cells - archive.num_cells, centroids.shape[1]), np.float32)
            self._centroids = np.concatenate([centroids, pad])
            self._centroid_mean = centroids.mean(axis=0, dtype=np.float64).astype(np.float32)

    def _check_shardable(self, archive: Archive) -> None:
        """Refuse, saying why, an archive whose rows this class cannot split (a subclass that
        splits such an archive its own way accepts it)."""
        if not archive.shardable:
            raise ArgumentError(
                f"a {type(archive).__name__} cannot be split over devices by a ShardedArchive: "
                f"{archive.unshardable_because}"
            )

    # -- the plain archive's configuration ------------------------------------------------------
    @property
    def solution_dim(self) -> int:
        return self.archive.solution_dim

    @property
    def genotype(self) -> Any:
        return self.archive.genotype

    def check_genotype(self, genotype: Any, who: str, what: str) -> None:
        """The plain archive's :meth:`~evotensor.qd.archive.Archive.check_genotype`."""
        self.archive.check_genotype(genotype, who, what)

    @property
    def measure_dim(self) -> int:
        return self.archive.measure_dim

    @property
    def num_cells(self) -> int:
        return self.archive.num_cells

    @property
    def extra_fields(self) -> dict[str, tuple[tuple[int, ...], Any]]:
        return self.archive.extra_fields

    @property
    def learning_rate(self) -> float:
        return self.archive.learning_rate

    @property
    def threshold_min(self) -> float:
        return self.archive.threshold_min

    @property
    def qd_score_offset(self) -> float:
        return self.archive.qd_score_offset

    @property
    def ranges(self) -> Any:
        return getattr(self.archive, "ranges", None)

    def cell_centers(self, cells: jax.Array) -> jax.Array:
        """The plain archive's cell centres (``[n] -> [n, D]``; a grid's from the index, a CVT's
        centroids replicated)."""
        return self.archive.cell_centers(cells)

    def __repr__(self) -> str:
        return (
            f"ShardedArchive({type(self.archive).__name__} of {self.num_cells} cells, "
            f"{self.shard_cells} per device on mesh axis {self.axis!r} of {self.num_shards})"
        )

    # -- layout -----------------------------------------------------------------------------------
    def state_shardings(self, state: ArchiveState) -> Any:
        """Every leaf of ``state`` split along its cell axis: a pytree of ``NamedSharding``."""
        split = NamedSharding(self.mesh, P(self.axis))
        return jax.tree_util.tree_map(lambda _: split, state)

    def shard_bytes(self) -> int:
        """Bytes of the state held by each device (``state_bytes`` of ``shard_cells`` cells)."""
        return self.archive.state_bytes() // self.num_cells * self.shard_cells

    def init(self) -> ArchiveState:
        """An empty archive of ``padded_cells`` rows, created in place on each device."""

        def empty():
            return self.archive._empty(self.padded_cells)

        return jax.jit(empty, out_shardings=self.state_shardings(jax.eval_shape(empty)))()

    def pad(self, state: ArchiveState) -> ArchiveState:
        """A plain archive's state (``num_cells`` rows; ``jax`` or NumPy arrays) in this layout
        (padded, split over devices). A state that already has ``padded_cells`` rows (as a sharded
        checkpoint restores it onto :meth:`portable`'s template) is only laid out."""
        rows = state.objective.shape[0]
        if rows not in (self.num_cells, self.padded_cells):
            raise ArgumentError(f"state must hold the archive's {self.num_cells} cells, got {rows}")
        leaves = jax.tree_util.tree_leaves(state)
        shardings = self.state_shardings(state)
        extra = self.padded_cells - rows

        def padded(state, concatenate=jnp.concatenate, convert=lambda e: e):
            empty = self.archive._empty(extra)
            return jax.tree_util.tree_map(lambda a, e: concatenate([a, convert(e)]), state, empty)

        if all(isinstance(a, np.ndarray) for a in leaves):
            # host values (a single-file checkpoint), the same on every process: each process
            # builds only its own devices' rows
            return place(padded(state, np.concatenate, np.asarray) if extra else state, shardings)
        # already padded (a sharded checkpoint's restore): kept as it is when laid out so
        return jax.device_put(padded(state) if extra else state, shardings)

    def portable(self, state: ArchiveState) -> ArchiveState:
        """``state`` as the plain archive holds it, without moving it: when this layout pads, each
        leaf is a :class:`~evotensor.core.mesh.Padded` of its ``num_cells`` rows (still split over
        the devices: a sharded checkpoint writes every device's own cells); else ``state`` itself.
        :meth:`pad` is the inverse."""
        if self.padded_cells == self.num_cells:
            return state
        return jax.tree_util.tree_map(lambda a: Padded(a, self.num_cells), state)

    def replicate(self, tree: Any) -> Any:
        """Inside ``jit``: every leaf of ``tree`` laid out whole on every device of the mesh (a
        barrier that keeps a later split, e.g. of the population, from partitioning the program
        that computed it)."""
        whole = NamedSharding(self.mesh, P())
        if jax.sharding.AxisType.Explicit in self.mesh.axis_types:
            return jax.tree_util.tree_map(lambda a: jax.sharding.reshard(a, whole), tree)
        return jax.tree_util.tree_map(lambda a: lax.with_sharding_constraint(a, whole), tree)

    def data(self, state: ArchiveState) -> dict[str, Any]:
        """:meth:`Archive.data <evotensor.qd.archive.Archive.data>` of the state cut to the plain
        archive's cells (in one process: the rows are read from every device)."""
        self._check_state(state)
        return self.archive.data(self.trim(state))

    def trim(self, state: ArchiveState) -> ArchiveState:
        """The state as the plain archive's (``num_cells`` rows; see :func:`trim_padding`)."""
        return trim_padding(state, self.num_cells)

    # -- shard_map plumbing ---------------------------------------------------------------------
    def _map(self, body: Callable, in_specs: tuple[Any, ...], out_specs: Any) -> Callable:
        """``shard_map(body)`` whose arguments are first laid out as ``in_specs`` says (one spec per
        argument, for all its leaves): on a mesh with explicit axes shard_map takes them only so."""
        # check_vma off: the nearest-centroid search's loops carry values that vary by device into
        # replicated results; every replicated output here is a psum/pmin or built from them
        mapped = jax.shard_map(body, mesh=self.mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)
        if jax.sharding.AxisType.Explicit not in self.mesh.axis_types:
            return mapped  # auto axes: shard_map's own placement is this one

        def call(*args):
            placed = [
                jax.tree_util.tree_map(
                    lambda a, s=spec: jax.sharding.reshard(a, NamedSharding(self.mesh, s)), arg
                )
                for arg, spec in zip(args, in_specs, strict=True)
            ]
            return mapped(*placed)

        return call

    def _first_cell(self) -> jax.Array:
        """Inside ``shard_map``: the global index of this device's first cell."""
        return lax.axis_index(self.axis).astype(jnp.int32) * self.shard_cells

    def _owned(self, cells: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Inside ``shard_map``: ``(mine [B], row [B])``: whether this device holds each cell, and its
        local row (clipped into range where it does not)."""
        first = self._first_cell()
        mine = (cells >= first) & (cells < first + self.shard_cells)
        return mine, jnp.clip(cells - first, 0, self.shard_cells - 1)

    def _cell_index(self, measures: jax.Array, centroids: jax.Array | None) -> jax.Array:
        """Inside ``shard_map``: the archive's ``index_of`` (``[B]``, on every device)."""
        if centroids is None:
            return self.archive.index_of(measures)
        first = self._first_cell()
        count = jnp.clip(self.num_cells - first, 0, self.shard_cells)
        distance, index = nearest_in_block(
            measures,
            centroids,
            mean=self._centroid_mean,
            count=count,
            first_index=first,
            chunk_size=self.archive.chunk_size,
        )
        # lexicographic (distance, index) minimum over the devices: the lowest index wins exact ties
        nearest = lax.pmin(distance, self.axis)
        index = lax.pmin(jnp.where(distance == nearest, index, _NO_INDEX), self.axis)
        return jnp.where(index < self.num_cells, index, 0).astype(jnp.int32)

    def _centroid_args(self) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """``(args, specs)`` that hand each device its block of centroids (nothing for a grid)."""
        if self._centroids is None:
            return (), ()
        return (jnp.asarray(self._centroids),), (P(self.axis),)

    # -- cells ------------------------------------------------------------------------------------
    def index_of(self, measures: jax.Array) -> jax.Array:
        """Cell of each measure vector: ``[B, D] -> [B]`` int32 (the plain archive's)."""
        measures = jnp.asarray(measures, jnp.float32)
        args, specs = self._centroid_args()

        def body(measures, *centroids):
            return self._cell_index(measures, centroids[0] if centroids else None)

        return self._map(body, (P(), *specs), P())(measures, *args)

    # -- insertion --------------------------------------------------------------------------------
    def add(
        self,
        state: ArchiveState,
        solutions: jax.Array,
        objective: jax.Array,
        measures: jax.Array,
        fields: Mapping[str, jax.Array] | None = None,
    ) -> tuple[ArchiveState, AddInfo]:
        """:meth:`Archive.add <evotensor.qd.archive.Archive.add>` on the sharded state (same rules,
        same result): ``-> (new_state, AddInfo)`` with ``AddInfo`` replicated on every device."""
        archive = self.archive
        self._check_state(state)
        solutions, objective, measures, fields = archive._check_batch(solutions, objective, measures, fields)
        args, specs = self._centroid_args()

        def body(state, solutions, objective, measures, fields, *centroids):
            valid = candidate_is_valid(solutions, objective, measures)
            index = jnp.where(valid, self._cell_index(measures, centroids[0] if centroids else None), 0)
            mine, row = self._owned(index)
            mine = mine & valid
            occupied = from_owner(state.occupied[row], mine, self.axis)
            elite_threshold = from_owner(state.threshold[row], mine, self.axis)
            threshold, can, info = archive._assess(objective, valid, index, occupied, elite_threshold)
            state = archive._place(state, can & mine, row, objective, threshold, solutions, measures, fields)
            return state, info

        in_specs = (P(self.axis), P(), P(), P(), P(), *specs)
        return self._map(body, in_specs, (P(self.axis), P()))(
            state, solutions, objective, measures, fields, *args
        )

    def _check_state(self, state: ArchiveState) -> None:
        if state.objective.shape[0] != self.padded_cells:
            raise ArgumentError(
                f"state holds {state.objective.shape[0]} cells, but this ShardedArchive's state has "
                f"{self.padded_cells} ({self.num_cells} cells padded for {self.num_shards} devices); "
                "place a plain archive's state with ShardedArchive.pad"
            )

    # -- queries ----------------------------------------------------------------------------------
    def retrieve(self, state: ArchiveState, measures: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
        """:meth:`Archive.retrieve <evotensor.qd.archive.Archive.retrieve>`: ``[B, D] ->
        (occupied [B], {field: [B, ...]})``, each row fetched from its owner."""
        self._check_state(state)
        measures = jnp.asarray(measures, jnp.float32)
        args, specs = self._centroid_args()

        def body(state, measures, *centroids):
            valid = jnp.all(jnp.isfinite(measures), axis=1)
            index = jnp.where(valid, self._cell_index(measures, centroids[0] if centroids else None), 0)
            mine, row = self._owned(index)
            take = lambda a: from_owner(a[row], mine, self.axis)  # noqa: E731
            data = {
                "solutions": jax.tree_util.tree_map(take, state.solutions),
                "objective": take(state.objective),
                "measures": take(state.measures),
                "threshold": take(state.threshold),
                "index": jnp.where(valid, index, -1),
                **{name: take(value) for name, value in state.fields.items()},
            }
            return valid & take(state.occupied), data

        return self._map(body, (P(self.axis), P(), *specs), P())(state, measures, *args)

    def has_elites(self, state: ArchiveState) -> jax.Array:
        """``[]`` bool: whether any cell is occupied."""

        def body(occupied):
            return lax.psum(occupied.any().astype(jnp.int32), self.axis) > 0

        return self._map(body, (P(self.axis),), P())(state.occupied)

    def sample_elites(self, key: jax.Array, state: ArchiveState, n: int) -> jax.Array:
        """:meth:`Archive.sample_elites <evotensor.qd.archive.Archive.sample_elites>`: ``n`` occupied
        cells drawn uniformly with replacement, ``[n]`` int32, the same cells as the plain archive's
        for the same key (cell ``num_cells - 1`` everywhere while the archive is empty)."""

        def body(occupied, key):
            counts = jnp.cumsum(occupied.astype(jnp.int32))
            me = lax.axis_index(self.axis)
            # occupied cells per device, [num_shards] on every device
            per_device = lax.psum(jnp.zeros(self.num_shards, jnp.int32).at[me].set(counts[-1]), self.axis)
            ends = jnp.cumsum(per_device)
            total = ends[-1]
            k = rng.randint(key, (n,), 0, jnp.maximum(total, 1))  # the plain archive's draw
            owner = jnp.searchsorted(ends, k, side="right")
            # the (k+1)-th occupied cell overall is the (k - start + 1)-th of its owner's block
            local = jnp.searchsorted(counts, k - (ends[me] - per_device[me]), side="right")
            cell = lax.psum(jnp.where(owner == me, self._first_cell() + local, 0), self.axis)
            return jnp.where(total > 0, cell, self.num_cells - 1).astype(jnp.int32)

        return self._map(body, (P(self.axis), P()), P())(state.occupied, key)

    def best_cells(
        self, state: ArchiveState, k: int, score: Callable[[jax.Array, jax.Array], jax.Array] | None = None
    ) -> tuple[jax.Array, jax.Array]:
        """:meth:`Archive.best_cells <evotensor.qd.archive.Archive.best_cells>`: the same cells as
        the plain archive's, replicated. Each device ranks its own cells, the candidates are
        gathered and ranked again (the order is total: score, occupied first, cell)."""
        m = min(check_int(k, "k"), self.num_cells)

        def body(objective, measures, occupied):
            cells, valid, values = best_cells_of(objective, measures, occupied, k, score, self._first_cell())
            cells, valid, values = (lax.all_gather(a, self.axis, tiled=True) for a in (cells, valid, values))
            _, _, cells, valid = lax.sort((-values, (~valid).astype(jnp.int32), cells, valid), num_keys=3)
            return cells[:m], valid[:m]

        return self._map(body, (P(self.axis),) * 3, P())(state.objective, state.measures, state.occupied)

    def elite_solutions(self, state: ArchiveState, cells: jax.Array) -> jax.Array:
        """The solutions stored in ``cells``: ``[n] -> [n, solution_dim]`` (genotypes ``[n]``), each
        from its owner."""

        def body(solutions, cells):
            mine, row = self._owned(cells)
            return jax.tree_util.tree_map(lambda a: from_owner(a[row], mine, self.axis), solutions)

        return self._map(body, (P(self.axis), P()), P())(state.solutions, jnp.asarray(cells, jnp.int32))

    def elite_measures(self, state: ArchiveState, cells: jax.Array) -> jax.Array:
        """The measures of the elites in ``cells``: ``[n] -> [n, measure_dim]``, each from its owner."""

        def body(measures, cells):
            mine, row = self._owned(cells)
            return from_owner(measures[row], mine, self.axis)

        return self._map(body, (P(self.axis), P()), P())(state.measures, jnp.asarray(cells, jnp.int32))

    def stats(self, state: ArchiveState) -> dict[str, jax.Array]:
        """:meth:`Archive.stats <evotensor.qd.archive.Archive.stats>` (replicated scalars): sums and a
        maximum per device, reduced over the devices (see the module docstring on rounding)."""
        offset = self.archive.qd_score_offset

        def body(occupied, objective):
            return (
                lax.psum(occupied.sum(), self.axis),
                lax.psum(jnp.sum(jnp.where(occupied, objective - offset, 0.0)), self.axis),
                lax.pmax(jnp.max(jnp.where(occupied, objective, -jnp.inf)), self.axis),
                lax.psum(jnp.sum(jnp.where(occupied, objective, 0.0)), self.axis),
            )

        sums = self._map(body, (P(self.axis), P(self.axis)), P())(state.occupied, state.objective)
        return self.archive._summarize(*sums)
