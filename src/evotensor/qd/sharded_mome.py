"""A MOME archive split along its cells over a device mesh: :class:`ShardedMOMEArchive`.

What :class:`~evotensor.qd.sharded_archive.ShardedArchive` does for a single-objective archive,
for :class:`~evotensor.qd.MOMEArchive`'s Pareto fronts (``ShardedMOMEArchive(mome_archive, mesh)``;
``evotensor.run(MAPElites(mome_archive, ...), ..., mesh=mesh)`` builds one): each device holds
``ceil(C / n)`` cells' fronts (``[C / n, P, ...]``), and only batch-sized arrays cross devices.

* **add**: every device sees the whole batch and computes its cells (a CVT search split over the
  devices); each candidate's cell front comes from the cell's owner (``[B, P, M]``, exact: a sum of
  the owner's bits and zeros); the comparisons among the candidates, the hypervolume gains and the
  :class:`~evotensor.qd.archive.AddInfo` are computed whole on every device; each device then
  rebuilds the fronts of its own touched cells with the unsharded archive's code. A cell's new
  front depends only on its members and candidates in batch order, so every front, slot and
  status equals the one-device archive's, bit for bit.
* **sample_elites** / **elite_solutions** / **retrieve**: the unsharded draws, each value from its
  owner.
* **stats**: per-device sums of the cells' hypervolumes (``moqd_score`` to within float32
  summation order), exact counts and maxima; the global hypervolume from every device's objectives
  gathered (``[C P, 2]``, small: two floats per slot).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P

from evotensor.core import rng
from evotensor.core.checks import ArgumentError
from evotensor.core.pareto import hypervolume
from evotensor.qd.archive import AddInfo
from evotensor.qd.mome_archive import MOMEArchive, MOMEState, front_hypervolumes
from evotensor.qd.sharded_archive import ShardedArchive, from_owner


class ShardedMOMEArchive(ShardedArchive):
    """``archive`` (a :class:`~evotensor.qd.MOMEArchive`) with its cells split over ``mesh[axis]``;
    the same methods and results as the plain archive (module docstring)."""

    def __init__(self, archive: MOMEArchive, mesh: Any, axis: str = "pop"):
        if isinstance(archive, ShardedArchive):
            archive = archive.archive
        if not isinstance(archive, MOMEArchive):
            raise ArgumentError(f"archive must be a MOMEArchive, got {type(archive).__name__}")
        super().__init__(archive, mesh, axis)

    def _check_shardable(self, archive: MOMEArchive) -> None:
        """A MOME archive's fronts are what this class splits."""

    @property
    def num_objectives(self) -> int:
        return self.archive.num_objectives

    @property
    def front_size(self) -> int:
        return self.archive.front_size

    @property
    def reference_point(self) -> jax.Array:
        return self.archive.reference_point

    # -- insertion --------------------------------------------------------------------------------
    def add(
        self, state: MOMEState, solutions: Any, objective: jax.Array, measures: jax.Array, fields: Any = None
    ) -> tuple[MOMEState, AddInfo]:
        """:meth:`MOMEArchive.add <evotensor.qd.MOMEArchive.add>` on the sharded state (same
        rules, same result): ``-> (new_state, AddInfo)``, ``AddInfo`` replicated."""
        mome = self.archive
        self._check_state(state)
        solutions, objective, measures = mome.check_batch(solutions, objective, measures, fields)
        if objective.shape[0] == 0:
            empty = jnp.zeros(0, jnp.int32)
            return state, AddInfo(status=empty, value=jnp.zeros(0, jnp.float32), index=empty)
        args, specs = self._centroid_args()
        c = self.num_cells

        def body(state, solutions, objective, measures, *centroids):
            valid, objective = mome.valid_candidates(solutions, objective, measures)
            cell = jnp.where(valid, self._cell_index(measures, centroids[0] if centroids else None), 0)
            mine, row = self._owned(cell)
            mine = mine & valid
            front = from_owner(state.objective[row], mine, self.axis)
            members = from_owner(state.occupied[row], mine, self.axis) & valid[:, None]
            rows = mome.touched_rows(cell, valid, c)  # over all cells, on every device
            own_row, local_row = self._owned(rows[0])
            own_row = own_row & (rows[0] < c)
            row_fronts = (
                from_owner(state.objective[local_row], own_row, self.axis),
                from_owner(state.occupied[local_row], own_row, self.axis) & (rows[0] < c)[:, None],
            )
            enters, hits, info = mome.assess(objective, cell, valid, front, members, rows, row_fronts)
            # this device's cells, counted in its block
            stays = mome.staying(state.occupied, hits, row, mine)
            local = mome.touched_rows(row, mine, self.shard_cells)
            state, kept = mome.rewrite(
                state, local, solutions, objective, measures, row, enters & mine, stays
            )
            kept = lax.psum((kept & mine).astype(jnp.int32), self.axis) > 0
            return state, mome.add_info(info, kept)

        in_specs = (P(self.axis), P(), P(), P(), *specs)
        return self._map(body, in_specs, (P(self.axis), P()))(state, solutions, objective, measures, *args)

    # -- queries ----------------------------------------------------------------------------------
    def retrieve(self, state: MOMEState, measures: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
        """:meth:`MOMEArchive.retrieve <evotensor.qd.MOMEArchive.retrieve>`, each front from its
        owner."""
        self._check_state(state)
        measures = jnp.asarray(measures, jnp.float32)
        args, specs = self._centroid_args()

        def body(state, measures, *centroids):
            ok = jnp.all(jnp.isfinite(measures), axis=1)
            index = jnp.where(ok, self._cell_index(measures, centroids[0] if centroids else None), 0)
            mine, row = self._owned(index)
            take = lambda a: from_owner(a[row], mine, self.axis)  # noqa: E731
            occupied = take(state.occupied) & ok[:, None]
            return occupied.any(axis=1), {
                "solutions": jax.tree_util.tree_map(take, state.solutions),
                "objective": take(state.objective),
                "measures": take(state.measures),
                "occupied": occupied,
                "index": jnp.where(ok, index, -1),
            }

        return self._map(body, (P(self.axis), P(), *specs), P())(state, measures, *args)

    def sample_elites(self, key: jax.Array, state: MOMEState, n: int) -> jax.Array:
        """:meth:`MOMEArchive.sample_elites <evotensor.qd.MOMEArchive.sample_elites>`: the same
        slots as the plain archive's for the same key."""
        p = self.front_size

        def body(occupied, key):
            cell_key, member_key = jax.random.split(key)
            filled = occupied.any(axis=1)
            counts = jnp.cumsum(filled.astype(jnp.int32))
            me = lax.axis_index(self.axis)
            per_device = lax.psum(jnp.zeros(self.num_shards, jnp.int32).at[me].set(counts[-1]), self.axis)
            ends = jnp.cumsum(per_device)
            total = ends[-1]
            k = rng.randint(cell_key, (n,), 0, jnp.maximum(total, 1))  # the plain archive's draws
            u = rng.uniform(member_key, (n,), jnp.float32)
            owner = jnp.searchsorted(ends, k, side="right")
            local = jnp.searchsorted(counts, k - (ends[me] - per_device[me]), side="right")
            cell = lax.psum(jnp.where(owner == me, self._first_cell() + local, 0), self.axis)
            cell = jnp.where(total > 0, cell, self.num_cells - 1).astype(jnp.int32)
            mine, row = self._owned(cell)
            slots = from_owner(occupied[row], mine, self.axis)  # [n, P]
            size = jnp.sum(slots, axis=1).astype(jnp.int32)
            member = jnp.minimum((u * size).astype(jnp.int32), jnp.maximum(size - 1, 0))
            seen = jnp.cumsum(slots.astype(jnp.int32), axis=1)
            return cell * p + jnp.argmax(seen > member[:, None], axis=1).astype(jnp.int32)

        return self._map(body, (P(self.axis), P()), P())(state.occupied, key)

    def elite_solutions(self, state: MOMEState, cells: jax.Array) -> Any:
        """The solutions in the slots ``cells [n]`` (``cell * front_size + member``), each from its
        owner: ``[n, dims]`` (genotypes ``[n]``)."""
        p = self.front_size

        def body(solutions, slots):
            mine, row = self._owned(slots // p)
            member = slots % p
            return jax.tree_util.tree_map(lambda a: from_owner(a[row, member], mine, self.axis), solutions)

        return self._map(body, (P(self.axis), P()), P())(state.solutions, jnp.asarray(cells, jnp.int32))

    def elite_measures(self, state: MOMEState, cells: jax.Array) -> jax.Array:
        """The measures of the slots ``cells [n]``, each from its owner: ``[n, D]``."""
        p = self.front_size

        def body(measures, slots):
            mine, row = self._owned(slots // p)
            return from_owner(measures[row, slots % p], mine, self.axis)

        return self._map(body, (P(self.axis), P()), P())(state.measures, jnp.asarray(cells, jnp.int32))

    def best_cells(self, state: Any, k: int, score: Any = None) -> tuple[jax.Array, jax.Array]:
        """Refused, as by the plain archive (its cells hold fronts, not one elite)."""
        return self.archive.best_cells(state, k, score)

    def hypervolumes(self, state: MOMEState) -> jax.Array:
        """``[padded cells]``: each cell's front hypervolume (0 where empty), split as the state."""
        return front_hypervolumes(state.objective, state.occupied, self.archive.reference_point)

    def stats(self, state: MOMEState) -> dict[str, jax.Array]:
        """:meth:`MOMEArchive.stats <evotensor.qd.MOMEArchive.stats>` (replicated scalars)."""
        mome = self.archive
        reference = -mome.reference_point
        two = mome.num_objectives == 2

        def body(objective, occupied):
            volumes = front_hypervolumes(objective, occupied, mome.reference_point)
            total = jnp.sum(objective, axis=-1)
            out = {
                "num_elites": lax.psum(occupied.sum().astype(jnp.int32), self.axis),
                "filled": lax.psum(occupied.any(axis=1).sum().astype(jnp.int32), self.axis),
                "moqd_score": lax.psum(volumes.sum(), self.axis),
                "max_hypervolume": lax.pmax(jnp.max(volumes), self.axis),
                "max_sum": lax.pmax(jnp.max(jnp.where(occupied, total, -jnp.inf)), self.axis),
            }
            if two:
                every = lax.all_gather(-objective.reshape(-1, 2), self.axis, tiled=True)
                filled = lax.all_gather(occupied.reshape(-1), self.axis, tiled=True)
                out["global_hypervolume"] = hypervolume(every, filled, reference)
            return out

        sums = self._map(body, (P(self.axis), P(self.axis)), P())(state.objective, state.occupied)
        stats = {
            "num_elites": sums["num_elites"],
            "coverage": sums["filled"] / self.num_cells,
            "moqd_score": sums["moqd_score"],
            "norm_moqd_score": sums["moqd_score"] / self.num_cells,
            "max_hypervolume": sums["max_hypervolume"],
            "max_sum_objectives": jnp.where(sums["num_elites"] > 0, sums["max_sum"], jnp.nan),
        }
        if two:
            stats["global_hypervolume"] = sums["global_hypervolume"]
        return stats
