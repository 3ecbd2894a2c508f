"""GP's variation split over a mesh: each device makes its own share of the children.

Left to XLA's SPMD partitioner, a generation's variation on a population-sharded forest (the one
random draw cut into dozens of pieces, the mutation blocks, the exchanges) becomes well over a
hundred collectives, each slice and concatenation re-laid out along the population
(``benchmarks/results_scale.md``). Here it runs per device inside ``shard_map`` instead, with a few
collectives in all:

1. the parents' forest is gathered (one all-gather of the packed ``[pop, max_len]`` forest);
2. every device draws the generation's random numbers itself (the same key: replicated, no
   communication) and selects the parents and elites on the replicated ``[pop]`` fitness, exactly as
   one device does;
3. each device makes its share of the children: ``ceil(count / n)`` consecutive rows of every
   mutation operator's block (and of the unmutated rest), crossed over and mutated with the slices of
   the draws those rows read on one device (a mutation's fused pass runs on the device's rows of each
   of its members, with the members' local counts);
4. the children are gathered (one all-gather) and each device keeps the rows of its own slice of
   the offspring ``[elites, children]``, in one device's order; the rejection counts are summed
   (one all-reduce).

Every child reads only its own tree and its own draws, so the offspring are bit-identical to one
device for the same key. That is the operator contract (:mod:`evotensor.gp.variation`, "rows are
independent"): a draw either has one axis of rows (its members' rows in member order) or none
(shared by every row).
The plan finds each draw's row axis from ``draw_shapes`` itself (the axis that grows by one with one
more row of a member) and checks that the device's slices have the shapes ``draw_shapes`` gives for
its local counts; a block whose draws do not follow that layout (a user's operator) is computed
whole on every device instead (still exact, without the split of its work), and so is everything
when the crossover's draws do not.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from evotensor.core.packing import all_gather_rows, pack_rows, unpack_rows
from evotensor.gp import selection as sel
from evotensor.gp.sharding import ForestMesh
from evotensor.gp.variation import MutationBlock, VariationContext

__all__ = ["VariationPlan", "offspring_on_mesh"]

Shapes = tuple[tuple[int, ...], ...]
# per draw: (row axis, [n, rows] indices along it of each device's rows), or None: the draw whole
DrawSlices = tuple[tuple[int, np.ndarray] | None, ...]


# ---- the static plan -------------------------------------------------------------------------------------


def row_axes(shapes_of: Callable[[tuple[int, ...]], Shapes], counts: Sequence[int]):
    """Each draw's row axis and the members whose rows lie along it, found from the draw shapes:
    ``[(axis, members) or None]`` (``None``: no row axis, the draw is shared by every row), or
    ``None`` when the shapes do not follow the row layout (an axis that grows by other than one
    row per row, by two axes, or a draw list that changes length)."""
    counts = tuple(int(c) for c in counts)
    try:
        base = tuple(tuple(s) for s in shapes_of(counts))
    except Exception:  # noqa: BLE001 - a shapes function that refuses the counts: not splittable
        return None
    axes: list[int | None] = [None] * len(base)
    members: list[list[int]] = [[] for _ in base]
    for i, c in enumerate(counts):
        if not c:
            continue
        try:
            bumped = tuple(tuple(s) for s in shapes_of(counts[:i] + (c + 1,) + counts[i + 1 :]))
        except Exception:  # noqa: BLE001
            return None
        if len(bumped) != len(base):
            return None
        for j, (s0, s1) in enumerate(zip(base, bumped)):
            if len(s0) != len(s1):
                return None
            grown = [a for a in range(len(s0)) if s0[a] != s1[a]]
            if not grown:
                continue
            if len(grown) > 1 or s1[grown[0]] != s0[grown[0]] + 1 or axes[j] not in (None, grown[0]):
                return None
            axes[j] = grown[0]
            members[j].append(i)
    out = []
    for j, shape in enumerate(base):
        if axes[j] is None:
            out.append(None)
        elif shape[axes[j]] != sum(counts[i] for i in members[j]):
            return None  # the axis holds more than the members' rows
        else:
            out.append((axes[j], tuple(members[j])))
    return out


@dataclasses.dataclass(frozen=True)
class _Segment:
    """Consecutive children ``[start, start + count)`` and how the devices share them: split (each
    device ``per_device = ceil(count / n)`` of them, the last device's padded with copies of the last
    row) or whole (every device all of them, device 0's counted)."""

    start: int
    count: int
    split: bool
    n: int

    @property
    def per_device(self) -> int:
        return -(-self.count // self.n) if self.split else self.count

    def local(self) -> tuple[np.ndarray, np.ndarray]:
        """``(offset [n, per_device], valid [n, per_device])``: each device's rows, relative to
        ``start``, and whether the row is its own (not padding, not another device's copy)."""
        k, d = self.per_device, np.arange(self.n)[:, None]
        if not self.split:
            j = np.broadcast_to(np.arange(k), (self.n, k))
            return j, np.broadcast_to(d == 0, (self.n, k))
        j = d * k + np.arange(k)[None, :]
        return np.minimum(j, self.count - 1), j < self.count


@dataclasses.dataclass(frozen=True, eq=False)
class _BlockPlan:
    """One mutation block on the devices: its local block (``counts`` per device), where its rows
    are among a device's children, and the slices of its draws."""

    block: MutationBlock
    local: MutationBlock
    offset: int  # first row of the block among a device's children
    draws: DrawSlices
    valid: np.ndarray  # [n, local.size]


def _draw_slices(
    shapes: Shapes, axes: list, segments: Sequence[_Segment], local_shapes: Shapes
) -> DrawSlices | None:
    """The per-device slices of a block's draws (``segments``: its members', starts relative to the
    block), or ``None`` when they would not have ``local_shapes``."""
    if len(shapes) != len(local_shapes):
        return None
    out = []
    for shape, where, want in zip(shapes, axes, local_shapes):
        if where is None:
            if tuple(shape) != tuple(want):
                return None
            out.append(None)
            continue
        axis, members = where
        parts, base = [], 0
        for i in members:  # the members' rows lie along the axis in member order
            offset, _ = segments[i].local()
            parts.append(base + offset)
            base += segments[i].count
        index = np.concatenate(parts, axis=1).astype(np.int32)
        got = tuple(shape[:axis]) + (index.shape[1],) + tuple(shape[axis + 1 :])
        if got != tuple(want):
            return None
        out.append((axis, index))
    return tuple(out)


def _whole_block(block: MutationBlock, offset: int, n: int) -> _BlockPlan:
    """``block`` computed whole on every device (device 0's rows delivered)."""
    valid = _Segment(0, block.size, False, n).local()[1]
    return _BlockPlan(block, block, offset, (None,) * len(block.shapes), valid)


def _block_plan(block: MutationBlock, offset: int, n: int, ctx: VariationContext) -> _BlockPlan:
    """``block`` split over ``n`` devices (each its ``ceil(count / n)`` rows of every member), or
    whole when its draws do not follow the row layout."""
    if block.fused is not None:
        fused = block.fused

        def shapes_of(counts):
            return tuple(fused.draw_shapes(tuple(counts), ctx))
    else:
        (op,) = block.members

        def shapes_of(counts):
            return tuple(op.draw_shapes(int(counts[0]), ctx))  # type: ignore[union-attr]

    axes = row_axes(shapes_of, block.counts)
    if axes is not None:
        starts = np.concatenate([[0], np.cumsum(block.counts)[:-1]])  # the members' rows in the block
        split = [_Segment(int(s), int(c), True, n) for s, c in zip(starts, block.counts)]
        counts = tuple(s.per_device if s.count else 0 for s in split)
        try:
            local = dataclasses.replace(block, counts=counts, shapes=shapes_of(counts))
            draws = _draw_slices(block.shapes, axes, split, local.shapes)
        except Exception:  # noqa: BLE001 - the local counts refused: computed whole
            draws = None
        if draws is not None:
            valid = np.concatenate([s.local()[1] for s in split if s.count], axis=1)
            return _BlockPlan(block, local, offset, draws, valid)
    return _whole_block(block, offset, n)


@dataclasses.dataclass(frozen=True, eq=False)
class VariationPlan:
    """How ``n`` devices share one generation's children (static; built once per placed GP).

    Attributes:
        n: devices along the population axis.
        children: int32 ``[n, K]``: the child (``0 .. C-1``) of each of a device's ``K`` rows.
        valid: bool ``[n, K]``: whether that row is the device's to deliver.
        blocks: the mutation blocks' plans, in order.
        crossover: the slices of the crossover's draws (``None``: each draw whole).
        rows: ``[n, pop / n]``: each device's offspring rows as indices into ``[elites; children]``.
        gather: whether ``children`` are every device's ``K`` children (gathered, in device order)
            or, when every device makes all of them, its own.
    """

    n: int
    children: np.ndarray
    valid: np.ndarray
    blocks: tuple[_BlockPlan, ...]
    crossover: DrawSlices
    rows: np.ndarray
    gather: bool

    @staticmethod
    def of(gp: Any, n: int) -> VariationPlan:
        """The plan of GP ``gp`` (its operators, counts and elites) on ``n`` devices."""
        ctx, E = gp.context, gp.n_elite
        C = gp.population_size - E
        op = gp.crossover_operator
        cross_axes = row_axes(lambda c: tuple(op.draw_shapes(int(c[0]), ctx)), (C,))
        if cross_axes is None or n == 1:
            return VariationPlan.of_whole(gp, n)
        blocks, segments, start, offset = [], [], 0, 0
        for block in gp.mutation_blocks:
            plan = _block_plan(block, offset, n, ctx)
            if plan.local is plan.block:  # computed whole on every device
                segments.append(_Segment(start, block.size, False, n))
            else:
                starts = np.concatenate([[0], np.cumsum(block.counts)[:-1]])
                segments += [
                    _Segment(start + int(s), int(c), True, n) for s, c in zip(starts, block.counts) if c
                ]
            blocks.append(plan)
            start += block.size
            offset += plan.local.size
        if start < C:
            segments.append(_Segment(start, C - start, True, n))
        local = [s.local() for s in segments]
        children = np.concatenate([s.start + o for s, (o, _) in zip(segments, local)], axis=1).astype(
            np.int32
        )
        valid = np.concatenate([v for _, v in local], axis=1)
        K = children.shape[1]
        # the crossover's draws: each device's rows (every segment's) along their row axis
        sliced, local = [], tuple(op.draw_shapes(K, ctx))
        for shape, where, want in zip(op.draw_shapes(C, ctx), cross_axes, local):
            axis = None if where is None else where[0]
            got = tuple(shape) if axis is None else (*shape[:axis], K, *shape[axis + 1 :])
            if got != tuple(want):
                return VariationPlan.of_whole(gp, n)
            sliced.append(None if axis is None else (axis, children))
        crossover = tuple(sliced)
        # where each child is delivered from: device d's row r is entry d * K + r of the gathered rows
        source = np.full(C, -1, np.int64)
        d, r = np.nonzero(valid)
        source[children[d, r]] = d * K + r
        if (source < 0).any() or int(valid.sum()) != C:
            raise AssertionError("the variation plan must deliver every child exactly once")
        offspring = np.concatenate([np.arange(E), E + source])  # indices into [elites; gathered]
        return VariationPlan(n, children, valid, tuple(blocks), crossover, offspring.reshape(n, -1), True)

    @staticmethod
    def of_whole(gp: Any, n: int) -> VariationPlan:
        """The plan that computes every child on every device, each keeping its own rows (nothing
        gathered): one device's, and the fallback for a crossover whose draws do not follow the
        row layout."""
        C, E = gp.population_size - gp.n_elite, gp.n_elite
        children, valid = _Segment(0, C, False, n).local()
        blocks, offset = [], 0
        for block in gp.mutation_blocks:
            blocks.append(_whole_block(block, offset, n))
            offset += block.size
        crossover = (None,) * len(gp.crossover_operator.draw_shapes(C, gp.context))
        rows = np.arange(E + C).reshape(n, -1)  # indices into [elites; this device's children]
        return VariationPlan(n, children.astype(np.int32), valid, tuple(blocks), crossover, rows, False)

    @property
    def local_children(self) -> int:
        """``K``: the children each device makes (its share, padded to equal counts)."""
        return int(self.children.shape[1])


# ---- the per-device program ------------------------------------------------------------------------------


def _slice_draws(draws: tuple[jax.Array, ...], slices: DrawSlices, d: jax.Array) -> tuple[jax.Array, ...]:
    """This device's slices of ``draws``."""
    out = []
    for u, where in zip(draws, slices):
        if where is None:
            out.append(u)
        else:
            axis, index = where
            out.append(jnp.take(u, jnp.asarray(index)[d], axis=axis))
    return tuple(out)


def offspring_on_mesh(
    gp: Any, layout: ForestMesh, plan: VariationPlan, key: jax.Array, state: Any, params: Any
):
    """GP ``gp``'s offspring of ``state`` (forest split along ``layout.axis``), made per device:
    ``(forest [pop, max_len] split along the axis, crossover_rejected [], mutation_rejected [])``,
    bit-identical to ``gp._offspring`` on one device. Runs inside ``jit``."""
    axis, E = layout.axis, gp.n_elite
    C = gp.population_size - E
    ctx, op = gp.context, gp.crossover_operator
    take = lambda f, idx: jax.tree_util.tree_map(lambda a: a[idx], f)  # noqa: E731

    def per_device(key, state, params):
        d = jax.lax.axis_index(axis)
        like = state.forest
        forest = all_gather_rows(like, axis)  # the parents
        state = state.replace(forest=forest)
        u = gp._draw(key)  # the whole draw, as one device makes it
        parents = gp._parents(u, state, params, key)
        mine = jnp.asarray(plan.children)[d]  # [K] this device's children
        pair = take(forest, jnp.concatenate([parents[mine], parents[C + mine]]))
        draws = tuple(u[f"crossover/{i}"] for i in range(len(plan.crossover)))
        crossing = u["do_cross"][mine] < params.crossover_rate
        children, ok = op.apply(_slice_draws(draws, plan.crossover, d), pair, crossing, ctx, params)
        valid = jnp.asarray(plan.valid)[d]
        rej_c = jnp.sum(crossing & ~ok & valid) if op.grows else jnp.int32(0)
        pieces, rej_m, row = [], jnp.int32(0), 0
        for b in plan.blocks:
            lo, hi = b.offset, b.offset + b.local.size
            if row < lo:
                pieces.append(take(children, slice(row, lo)))
            draws = tuple(u[b.block.draw_name(i)] for i in range(len(b.block.shapes)))
            out, ok = b.local.apply(
                _slice_draws(draws, b.draws, d), take(children, slice(lo, hi)), ctx, params
            )
            grows = b.local.grows
            if grows.any():
                rej_m = rej_m + jnp.sum(~ok & jnp.asarray(grows) & jnp.asarray(b.valid)[d])
            pieces.append(out)
            row = hi
        if row < plan.local_children:
            pieces.append(take(children, slice(row, None)))
        mutated = jax.tree_util.tree_map(lambda *a: jnp.concatenate(a, axis=0), *pieces)
        gathered = pack_rows(mutated)  # [K, fields * L]
        if plan.gather:
            gathered = jax.lax.all_gather(gathered, axis, tiled=True)  # [n * K, fields * L]
        if E:
            elites = pack_rows(take(forest, sel.elite_indices(state.fitness, E)))  # raw fitness
            gathered = jnp.concatenate([elites, gathered])
        out = unpack_rows(gathered[jnp.asarray(plan.rows)[d]], like)
        rejected = jax.lax.psum(jnp.stack([rej_c, rej_m]).astype(jnp.int32), axis)
        return out, rejected[0], rejected[1]

    whole = lambda tree: jax.tree_util.tree_map(lambda _: P(), tree)  # noqa: E731
    state_specs = whole(state).replace(forest=layout.forest_spec(state.forest))
    out_specs = (layout.forest_spec(state.forest), P(), P())
    run = layout.shard_map(per_device, (P(), state_specs, whole(params)), out_specs)
    return run(key, state, params)
