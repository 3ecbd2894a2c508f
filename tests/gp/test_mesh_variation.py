"""The plan of GP's per-device variation (evotensor.gp.mesh_variation), checked without devices.

That the offspring made per device equal one device's bit for bit is checked on 4 CPU devices by
``tests/gp/test_sharding.py`` (``variation`` and ``pop`` scenarios); here, for any population,
device count, elites and mutation mix: every child is made by exactly one device and delivered to
the offspring row one device puts it in, and each device's slices of the draws are the draws of
the children it makes.
"""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from evotensor.gp import GP, FunctionSet
from evotensor.gp.mesh_variation import VariationPlan, row_axes
from evotensor.gp.operators import structural_uniform_shapes
from evotensor.gp.strategy import MUTATIONS
from evotensor.gp.variation import GPOperator, default_registry

FS = FunctionSet(("add", "sub", "mul", "sin"))


def _negate(draws, forest, ctx, params):  # never applied here: only its draw shapes matter
    return forest, forest.length > 0


def _gp(pop, elite_rate, mutation_rate, weights, crossover, user):
    registry = default_registry()
    registry.register(GPOperator("negate", "mutation", lambda n, ctx: ((n,), (1,)), _negate, grows=False))
    registry.register(GPOperator("odd", "mutation", lambda n, ctx: ((2 * n,),), _negate, grows=True))
    probs = dict(zip(MUTATIONS, weights))
    probs.update(negate=float(user[0]), odd=float(user[1]))
    return GP(
        pop, FS, 2, max_len=12, elite_rate=elite_rate, mutation_rate=mutation_rate, crossover=crossover,
        operators=registry, mutation_probs=probs, mutation_depth=(0, 2),
    )  # fmt: skip


def _shapes_of(block, ctx):
    if block.fused is not None:
        return lambda counts: block.fused.draw_shapes(counts, ctx)
    return lambda counts: block.members[0].draw_shapes(counts[0], ctx)


def _delivered(plan: VariationPlan, E: int) -> tuple[np.ndarray, np.ndarray]:
    """What every device's offspring rows hold, simulated: ``(labels, valid)`` over the population
    (labels: ``-1 - e`` for elite ``e``, the child's index for a child)."""
    labels, valid = [], []
    for d in range(plan.n):
        devices = range(plan.n) if plan.gather else [d]
        pool = np.concatenate([-1 - np.arange(E), *(plan.children[e] for e in devices)])
        ok = np.concatenate([np.ones(E, bool), *(plan.valid[e] for e in devices)])
        labels.append(pool[plan.rows[d]])
        valid.append(ok[plan.rows[d]])
    return np.concatenate(labels), np.concatenate(valid)


@given(
    n=st.sampled_from([1, 2, 3, 4, 8]),
    per_device=st.integers(2, 12),
    elite_rate=st.sampled_from([0.0, 0.05, 0.2]),
    mutation_rate=st.floats(0.0, 1.0),
    weights=st.lists(st.integers(0, 3), min_size=len(MUTATIONS), max_size=len(MUTATIONS)),
    user=st.tuples(st.integers(0, 3), st.integers(0, 2)),
    crossover=st.sampled_from(["one_point", "leaf_biased"]),
)
def test_every_child_is_made_once_and_lands_in_one_devices_order(
    n, per_device, elite_rate, mutation_rate, weights, user, crossover
):
    if not any(weights) and not any(user):
        weights = [1] * len(MUTATIONS)
    gp = _gp(n * per_device, elite_rate, mutation_rate, weights, crossover, user)
    E, C = gp.n_elite, gp.population_size - gp.n_elite
    plan = VariationPlan.of(gp, n)
    labels, valid = _delivered(plan, E)
    np.testing.assert_array_equal(labels, np.concatenate([-1 - np.arange(E), np.arange(C)]))
    assert valid.all()  # never a padding row, never another device's copy
    assert plan.valid.sum() == C  # each child counted once (rejections are summed over valid rows)
    K = plan.local_children
    for d in range(n):
        mine = plan.children[d]
        for index in (i for i in plan.crossover if i is not None):
            np.testing.assert_array_equal(index[1][d], mine)  # the crossover draws of its children
        start = 0
        for b in plan.blocks:
            rows = mine[b.offset : b.offset + b.local.size] - start  # the block's children, block-relative
            bounds = np.concatenate([[0], np.cumsum(b.block.counts)])
            local = np.concatenate([[0], np.cumsum(b.local.counts)])
            member = [rows[local[i] : local[i + 1]] for i in range(len(b.block.counts))]
            for i, r in enumerate(member):  # each member's local rows are its own rows
                assert ((r >= bounds[i]) & (r < bounds[i + 1])).all()
            axes = row_axes(_shapes_of(b.block, gp.context), b.block.counts)
            for where, cut in zip(axes or [], b.draws):
                if where is None or cut is None:
                    continue
                # along the draw's axis, the contributing members' rows in order
                offsets = np.cumsum([0] + [b.block.counts[i] for i in where[1]])
                want = np.concatenate([offsets[k] + member[i] - bounds[i] for k, i in enumerate(where[1])])
                np.testing.assert_array_equal(cut[1][d], want)
            start += b.block.size
    if n > 1 and not any(b.local is b.block for b in plan.blocks):
        segments = sum(int(c > 0) for b in plan.blocks for c in b.block.counts) + 1
        assert K <= -(-C // n) + segments  # each device's share, padded by at most a row per segment
        assert plan.gather


def test_row_axes_read_the_layout_from_the_draw_shapes():
    shapes = lambda c: structural_uniform_shapes(
        c, *([_gp(8, 0, 1, [1] * 8, "one_point", (0, 0)).context.subtree_generator] * 2)
    )  # noqa: E731, E501
    # (2, rows) over every member; each generator's (L + 1, 2, rows) over its own member's rows
    assert row_axes(shapes, (3, 1, 2, 0)) == [(1, (0, 1, 2)), (2, (0,)), (2, (2,))]
    assert row_axes(lambda c: ((c[0],), (5,)), (4,)) == [(0, (0,)), None]  # a shared draw: no rows
    assert row_axes(lambda c: ((2 * c[0],),), (4,)) is None  # two draws per row in one axis
    assert row_axes(lambda c: ((c[0] + 1,),), (4,)) is None  # an axis longer than the rows
    assert row_axes(lambda c: ((c[0], c[0]),), (4,)) is None  # rows along two axes
