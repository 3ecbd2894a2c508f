"""The plain-JAX forest interpreter: the ``backend="jax"`` path of :func:`evotensor.gp.evaluate` and
:func:`evotensor.gp.fitness` (runs anywhere, any function set; written for CPU caches).

A forest is struct-of-arrays in prefix order (see :mod:`evotensor.gp.encoding`); the entry points
:func:`evaluate_jax` and :func:`fitness_jax` take its four arrays already checked
(:func:`evotensor.gp.metrics.forest_fields`) and the block sizes of :func:`block_sizes`. Metric
semantics are those of :mod:`evotensor.gp.metrics`.

How it works (and why):

* Trees are sorted by length and cut into blocks of ``tree_block`` trees; each block runs only as
  many node steps as its longest tree, so padding costs almost nothing.
* Rows are cut into blocks of ``row_block`` rows so the working set
  (``[max_len + 1, tree_block, row_block]`` float32; 8 x 256 by default) stays in cache. One
  buffer is allocated per call and reused by every block.
* Nodes are visited in reverse prefix order (a ``fori_loop``; the tree axis is vectorized). The
  value of node ``i`` is written to slot ``i`` of the buffer; its children sit at known slots
  (``i + 1``, then ``+ size`` of the previous child), so no stack pointer is tracked and the
  first child's read is a static-offset slice.
* Cheap functions (``+ - * /``, ``max min abs neg inv sqrt``, comparisons, ``if_then_else``; see
  :attr:`evotensor.gp.functions.Function.cheap`) are all computed at every step for every tree of
  the block and the one named by each tree's opcode selected (branch-free). The costly ones
  (``sin cos tan sinh cosh tanh exp log pow``, custom functions) are computed only for the trees
  whose node at this step needs one, compacted into 1, 2, 4, ... rows by a ``lax.switch`` (see
  :func:`_block_forward`); a step where no tree needs one skips them.
* ``sin``/``cos``/``tan`` use vectorizable forms (:meth:`FunctionSet.apply_fast`; XLA's CPU
  versions are scalar library calls) that share one range reduction; a block in which one of
  their arguments leaves the fast forms' domain (finite ``|x| >= 3e6``) is recomputed with the
  exact functions.
* :func:`fitness_jax` accumulates per-row terms over the row blocks and reduces them to per-tree
  sums once per tree block, so ``[pop, n_points]`` is never materialized; sums run in a fixed order
  (deterministic).
* XLA's CPU backend splits large fusions across threads; at this granularity that costs more than
  it saves, so the step's arrays are kept small (and children are read by dynamic slices rather
  than a gather, which its cost model charges for the whole buffer).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from evotensor.core.checks import check_int
from evotensor.gp.functions import CONST, FIRST_FUNCTION, VAR, FunctionSet, select_function
from evotensor.gp.metrics import finalize_metric, row_terms, total_sum_of_squares

__all__ = [
    "DEFAULT_ROW_BLOCK",
    "DEFAULT_TREE_BLOCK",
    "block_sizes",
    "child_slots",
    "evaluate_jax",
    "fitness_jax",
    "fitness_sums_jax",
    "moments_jax",
]

# Measured on a 2-core AMD EPYC (benchmarks/results_gp_eval.md): 8 x 256 beat 8 x 128 (fewer steps,
# so less per-step runtime overhead) and 16 x 256 / 8 x 512 (one step's arrays leave L1).
DEFAULT_TREE_BLOCK = 8
DEFAULT_ROW_BLOCK = 256
_CHUNK_ELEMENTS = 1024  # largest [rows, B] chunk of costly values one fusion computes


def block_sizes(pop: int, n_points: int, tree_block: int | None, row_block: int | None) -> tuple[int, int]:
    """``(tree_block, row_block)`` of a call on ``pop`` trees and ``n_points`` rows: at most the
    requested ones (``None``: :data:`DEFAULT_TREE_BLOCK` x :data:`DEFAULT_ROW_BLOCK`), balanced so the
    last block is not mostly padding."""
    t = DEFAULT_TREE_BLOCK if tree_block is None else check_int(tree_block, "tree_block")
    r = DEFAULT_ROW_BLOCK if row_block is None else check_int(row_block, "row_block")
    t = -(-pop // -(-pop // min(t, pop)))
    r = min(r, n_points)
    r_balanced = -(-n_points // -(-n_points // r))
    r = min(r, -(-r_balanced // 8) * 8)  # a multiple of 8 rows vectorizes best
    return t, r


def child_slots(size: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Positions of the 2nd and 3rd child of every node (meaningful only where the arity allows).

    Args:
        size: ``int32 [..., max_len]`` subtree sizes.

    Returns:
        ``(c2, c3)``, each ``int32 [..., max_len]`` in ``[0, max_len]``; the first child of node ``i``
        is always ``i + 1``.
    """
    max_len = size.shape[-1]
    padded = jnp.concatenate([size, jnp.zeros((*size.shape[:-1], 1), size.dtype)], axis=-1)
    pos = jnp.arange(max_len, dtype=jnp.int32)
    c1 = jnp.minimum(pos + 1, max_len)
    c2 = jnp.minimum(c1 + jnp.take_along_axis(padded, jnp.broadcast_to(c1, size.shape), -1), max_len)
    c3 = jnp.minimum(c2 + jnp.take_along_axis(padded, c2, -1), max_len)
    return c2.astype(jnp.int32), c3.astype(jnp.int32)


def _costly_tiers(tree_block: int) -> tuple[int, ...]:
    """Row counts a step's costly functions are computed for (powers of two, then ``tree_block``);
    a step uses the smallest that holds the trees needing one."""
    powers = {1 << j for j in range(tree_block.bit_length()) if 1 << j < tree_block}
    return tuple(sorted(powers | {tree_block}))


def _compaction(fs: FunctionSet, opcode: jax.Array, tiers: tuple[int, ...]):
    """Per node position of a block ``opcode [T, L]``, where its costly functions go.

    Returns ``(tier, slot, tree)``: ``tier [L]`` the ``lax.switch`` index (0: no tree needs a costly
    function, ``1 + j``: ``tiers[j]`` rows); ``slot [T, L]`` each tree's row in the compacted arrays
    (-1: its node is not costly); ``tree [T, L]`` each row's tree (0 for unused rows).
    """
    T = opcode.shape[0]
    is_costly = np.isin(np.arange(fs.n_opcodes), [f.opcode for f in fs.functions if not f.cheap])
    need = jnp.asarray(is_costly)[opcode]
    count = jnp.sum(need.astype(jnp.int32), axis=0)
    tier = jnp.where(count == 0, 0, 1 + jnp.sum(jnp.asarray(tiers)[:, None] < count[None], axis=0))
    rank = jnp.cumsum(need.astype(jnp.int32), axis=0) - 1
    ids = jnp.arange(T, dtype=jnp.int32)
    hit = need[None] & (rank[None] == ids[:, None, None])  # [row, tree, L]
    tree = jnp.sum(jnp.where(hit, ids[None, :, None], 0), axis=1)
    return tier.astype(jnp.int32), jnp.where(need, rank, -1), tree


def _block_forward(
    fs: FunctionSet, n_outputs: int, tree: tuple, n_steps: jax.Array, Xb: jax.Array, buf: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """Evaluate one block of trees on one block of rows.

    Args:
        tree: ``(opcode, value, c2, c3, output)``, each ``[T, L]``.
        n_steps: the block's longest tree length (int32 scalar).
        Xb: ``[n_vars, B]`` rows (transposed).
        buf: ``float32 [L + 1, T, B]`` value buffer (its contents are not read; see
            :func:`_value_buffer`).

    Returns:
        ``([n_outputs, T, B]`` predictions, the buffer to hand to the next block``)``.

    At every step the cheap functions (:attr:`Function.cheap`) are computed for all ``T`` trees and
    selected (one fused pass). The costly ones (``sin cos tan exp log pow``, custom functions, ...)
    only for the trees whose node at this step is costly: their arguments are gathered into the
    smallest of ``K = 1, 2, 4, ..., T`` rows that holds them (a ``lax.switch``, no work when no tree
    needs one), computed there (``sin cos tan`` share one range reduction) and gathered back. In
    random ``+ - * / sin cos tan`` trees ~25 % of the nodes are trigonometric and a step of 8
    trees computes ~2.4 rows on average instead of 8.

    ``sin cos tan`` use their fast forms; if any of their arguments in the block fell outside the
    fast domain (finite ``|x| >= 3e6``, rare), the block is recomputed with the exact functions.
    """
    opcode, value, c2, c3, output = tree
    T, L = opcode.shape
    n_vars, B = Xb.shape
    arity = jnp.asarray(fs.arity)
    var = jnp.clip(value.astype(jnp.int32), 0, n_vars - 1)
    out_ids = jnp.arange(n_outputs, dtype=jnp.int32)[:, None, None]
    cheap = tuple(f for f in fs.functions if f.cheap)
    costly = tuple(f for f in fs.functions if not f.cheap)
    n_args = max([f.arity for f in costly], default=0)
    tiers = _costly_tiers(T)
    # The costly values come back in chunks of C rows of <= 1024 elements: XLA's CPU backend splits
    # a bigger compute-heavy fusion across threads, which costs more than it saves at this size.
    C = max(1, min(T, _CHUNK_ELEMENTS // B))
    n_chunks = -(-T // C)
    has_fast = any(f.fast_fn is not None for f in fs.functions)

    def read(buf, i):
        """The node's children values ``a, b, c`` (``[T, B]`` each; ``a`` where the arity is lower)."""
        a = lax.dynamic_index_in_dim(buf, i + 1, axis=0, keepdims=False)

        def child(pos):
            # one dynamic slice per tree, not a gather: XLA's CPU cost model charges a gather for
            # its whole operand (the buffer) and then splits it across threads
            p = lax.dynamic_index_in_dim(pos, i, 1, False)
            return jnp.concatenate([lax.dynamic_slice(buf, (p[t], t, 0), (1, 1, B))[0] for t in range(T)])

        b = child(c2) if fs.max_arity >= 2 else a
        c = child(c3) if fs.max_arity >= 3 else a
        return a, b, c

    def costly_branch(K):
        def branch(buf, i, op, rows_tree):
            args = read(buf, i)
            # row r of the result holds tree rows_tree[r]'s value; rows >= K are unused
            values, bads = [], []
            for start in range(0, n_chunks * C, C):
                n = max(0, min(K, start + C) - start)
                if n == 0:
                    values.append(jnp.zeros((C, B), jnp.float32))
                    bads.append(jnp.zeros((C, B), bool))
                    continue
                sel = rows_tree[start : start + n]
                v, e = select_function(
                    costly, op[sel][:, None], tuple(x[sel] for x in args[:n_args]), fast=True
                )
                values.append(jnp.pad(v, ((0, C - n), (0, 0))))
                bads.append(jnp.pad(e, ((0, C - n), (0, 0))))
            return args, tuple(values), tuple(bads)

        return branch

    branches = [costly_branch(K) for K in (0, *tiers)]
    if costly:
        tier_all, slot_all, tree_all = _compaction(fs, opcode, tiers)

    def run(fast: bool, buf):
        def step(k, carry):
            buf, outs, needs_exact = carry  # buf [L + 1, T, B]: slot j holds the value node j passes up
            i = n_steps - 1 - k
            col = lambda a: lax.dynamic_index_in_dim(a, i, axis=1, keepdims=False)  # noqa: E731
            op_t = col(opcode)
            op, val = op_t[:, None], col(value)[:, None]
            # The children are read inside a conditional, which materializes them before the write
            # (otherwise XLA fuses the reads into the buffer update and copies the buffer at every
            # step). With costly functions, that conditional is the switch that computes them.
            if fast and costly:
                args, rows, bad = lax.switch(tier_all[i], branches, buf, i, op_t, col(tree_all))
                rows, bad = jnp.concatenate(rows)[:T], jnp.concatenate(bad)[:T]
                # the switch's results are materialized buffers (fused into the gather below, the
                # [K, B] values would be recomputed for every tree); the gather fuses into the write
                slot = col(slot_all)
                node = select_function(cheap, op, args, fast=False)[0]
                node = jnp.where(slot[:, None] >= 0, rows[jnp.maximum(slot, 0)], node)
                needs_exact = needs_exact | bad  # elementwise: no reduction inside the loop
            else:
                args = lax.cond(k >= 0, read, lambda buf, i: (buf[0],) * 3, buf, i)
                node = select_function(fs.functions, op, args, fast=False)[0]
            a, b, c = args
            x = Xb[col(var)]
            node = jnp.where(op == CONST, val, jnp.where(op == VAR, x, node))
            passed = node
            if n_outputs > 1:
                modi = col(output)
                outs = outs + jnp.where(out_ids == modi[None, :, None], node[None], 0.0)
                ar = arity[op]
                if fs.max_arity == 1:
                    right = a
                else:
                    right = jnp.where(ar == 1, a, b if fs.max_arity == 2 else jnp.where(ar == 2, b, c))
                passed = jnp.where((modi[:, None] >= 0) & (op >= FIRST_FUNCTION), right, node)
            return lax.dynamic_update_index_in_dim(buf, passed, i, axis=0), outs, needs_exact

        outs = jnp.zeros((n_outputs if n_outputs > 1 else 0, T, B), jnp.float32)
        buf, outs, needs_exact = lax.fori_loop(0, n_steps, step, (buf, outs, jnp.zeros((T, B), bool)))
        return (buf[0][None] if n_outputs == 1 else outs), jnp.any(needs_exact), buf

    if not costly:
        return run(False, buf)[::2]
    result, needs_exact, buf = run(True, buf)
    if not has_fast:
        return result, buf
    return lax.cond(needs_exact, lambda: run(False, buf)[::2], lambda: (result, buf))


def _blocked(forest_arrays, X: jax.Array, tree_block: int, row_block: int):
    """Sort trees by length, pad and reshape trees into blocks and rows into blocks."""
    opcode, value, size, output = forest_arrays
    pop, L = opcode.shape
    n_points, n_vars = X.shape
    # a block runs as many node steps as its longest tree; clipped to max_len, so a malformed
    # stored length cannot make the loop run longer (evaluate() never sends malformed trees here)
    lengths = jnp.clip(size[:, 0], 0, L)
    order = jnp.argsort(lengths, stable=True)
    c2, c3 = child_slots(size)
    n_tb = -(-pop // tree_block)
    pad_t = n_tb * tree_block - pop

    def blocks(a):
        a = a[order]
        a = jnp.concatenate([a, jnp.zeros((pad_t, L), a.dtype)]) if pad_t else a
        return a.reshape(n_tb, tree_block, L)

    tree = tuple(blocks(a) for a in (opcode, value, c2, c3, output))
    sorted_len = jnp.concatenate([lengths[order], jnp.zeros(pad_t, jnp.int32)]).reshape(n_tb, tree_block)
    n_steps = jnp.max(sorted_len, axis=1)
    n_rb = -(-n_points // row_block)
    pad_r = n_rb * row_block - n_points
    Xp = jnp.concatenate([X, jnp.zeros((pad_r, n_vars), X.dtype)]) if pad_r else X
    Xblocks = Xp.reshape(n_rb, row_block, n_vars).transpose(0, 2, 1)
    valid = (jnp.arange(n_rb * row_block) < n_points).reshape(n_rb, row_block)
    return tree, n_steps, Xblocks, valid, order, n_rb, pad_r


def _value_buffer(arrays, tree_block: int, row_block: int) -> jax.Array:
    """The per-block value buffer ``[max_len + 1, T, B]``, allocated once and reused by every block.

    Every slot a node reads is written earlier in the same block (children before parents), so
    stale values from the previous block are never used; not re-zeroing it per block matters
    because XLA's CPU backend splits a large fill across threads.
    """
    return jnp.zeros((arrays[0].shape[1] + 1, tree_block, row_block), jnp.float32)


def _unsort(values: jax.Array, order: jax.Array) -> jax.Array:
    return jnp.zeros_like(values).at[order].set(values)


@functools.partial(jax.jit, static_argnames=("fs", "n_outputs", "tree_block", "row_block"))
def evaluate_jax(arrays, X, fs, n_outputs, tree_block, row_block):
    """Forward of every tree on every row.

    Args:
        arrays: ``(opcode, value, size, output)``, each ``[pop, max_len]`` (as
            :func:`evotensor.gp.metrics.forest_fields` returns them).
        X: float32 ``[n_points, n_vars]``.
        fs: the :class:`FunctionSet` (static).
        n_outputs: outputs per tree (static).
        tree_block, row_block: block sizes (static; see :func:`block_sizes`).

    Returns:
        float32 ``[pop, n_points, n_outputs]``.
    """
    pop = arrays[0].shape[0]
    n_points = X.shape[0]
    tree, n_steps, Xblocks, _, order, n_rb, _ = _blocked(arrays, X, tree_block, row_block)

    def per_tree_block(buf, args):
        tb, steps = args
        buf, pred = lax.scan(
            lambda buf, Xb: _block_forward(fs, n_outputs, tb, steps, Xb, buf)[::-1], buf, Xblocks
        )
        # [n_rb, n_out, T, B] -> [T, n_rb * B, n_out]
        return buf, pred.transpose(2, 0, 3, 1).reshape(tree_block, n_rb * row_block, n_outputs)

    _, out = lax.scan(per_tree_block, _value_buffer(arrays, tree_block, row_block), (tree, n_steps))
    out = out.reshape(-1, n_rb * row_block, n_outputs)[:pop, :n_points]
    return _unsort(out, order)


@functools.partial(jax.jit, static_argnames=("fs", "n_outputs", "metric", "tree_block", "row_block"))
def fitness_jax(arrays, X, yt, fs, n_outputs, metric, tree_block, row_block):
    """Fused forward + metric without materializing ``[pop, n_points]``.

    Args:
        arrays, X, fs, n_outputs, tree_block, row_block: as in :func:`evaluate_jax`.
        yt: float32 ``[n_y, n_points]`` targets as :func:`evotensor.gp.metrics.check_y` returns them.
        metric: one of :data:`evotensor.gp.metrics.METRICS` (static).

    Returns:
        float32 ``[pop]`` in natural orientation (see :func:`evotensor.gp.metrics.finalize_metric`).
    """
    term_sum, bad_sum = fitness_sums_jax(arrays, X, yt, fs, n_outputs, metric, tree_block, row_block)
    return finalize_metric(term_sum, bad_sum, metric, X.shape[0], n_outputs, total_sum_of_squares(yt))


@functools.partial(jax.jit, static_argnames=("fs", "n_outputs", "metric", "tree_block", "row_block"))
def fitness_sums_jax(arrays, X, yt, fs, n_outputs, metric, tree_block, row_block):
    """The per-tree sums :func:`fitness_jax` turns into the metric, over the rows of ``X``.

    Args: as :func:`fitness_jax`.

    Returns:
        ``(term_sum, bad_sum)``, float32 ``[pop]`` each: the sums over the rows of
        :func:`evotensor.gp.metrics.row_terms` (as :func:`evotensor.gp.native.fitness_sums` returns
        them; sums of row slices add up to the whole data's, which the data axis of
        :mod:`evotensor.gp.sharding` relies on).
    """
    pop = arrays[0].shape[0]
    tree, n_steps, Xblocks, valid, order, n_rb, pad_r = _blocked(arrays, X, tree_block, row_block)
    yp = jnp.concatenate([yt, jnp.zeros((yt.shape[0], pad_r), yt.dtype)], axis=1) if pad_r else yt
    yblocks = yp.reshape(yt.shape[0], n_rb, row_block).transpose(1, 0, 2)

    def per_tree_block(buf, args):
        tb, steps = args

        def per_row_block(carry, blk):
            # per-row partial sums [T, B], reduced once per tree block: an elementwise add per
            # row block instead of a reduction (which XLA's CPU backend may split across threads)
            buf, term_acc, bad_acc = carry
            Xb, yb, vb = blk
            pred, buf = _block_forward(fs, n_outputs, tb, steps, Xb, buf)
            term, bad = row_terms(pred, yb, metric)
            return (buf, term_acc + jnp.where(vb, term, 0.0), bad_acc + jnp.where(vb, bad, 0.0)), None

        zero = jnp.zeros((tree_block, row_block), jnp.float32)
        (buf, term_acc, bad_acc), _ = lax.scan(per_row_block, (buf, zero, zero), (Xblocks, yblocks, valid))
        return buf, (jnp.sum(term_acc, -1), jnp.sum(bad_acc, -1))

    _, (term_sum, bad_sum) = lax.scan(
        per_tree_block, _value_buffer(arrays, tree_block, row_block), (tree, n_steps)
    )
    return _unsort(term_sum.reshape(-1)[:pop], order), _unsort(bad_sum.reshape(-1)[:pop], order)


@functools.partial(jax.jit, static_argnames=("fs", "n_outputs", "tree_block", "row_block"))
def moments_jax(arrays, X, yct, fs, n_outputs, tree_block, row_block):
    """Fused forward + the moments linear scaling needs (:mod:`evotensor.gp.scaling`), without
    materializing ``[pop, n_points]``.

    Args:
        arrays, X, fs, n_outputs, tree_block, row_block: as in :func:`evaluate_jax`.
        yct: float32 ``[n_outputs, n_points]`` targets minus their per-output mean.

    Returns:
        ``(moments, bad_sum)``: float32 ``[pop, n_outputs, 3]`` = (mean of the predictions, sum of
        their squared deviations, sum of prediction * centered target) and ``[pop]`` rows with a
        non-finite prediction. Sums run over ``p - c`` with ``c`` the tree's prediction on row 0:
        float32 sums of ``p`` and ``p**2`` would cancel for a tree with a large offset and a small
        spread (the co-moment needs no shift: the centered targets sum to zero).
    """
    pop = arrays[0].shape[0]
    n_points = X.shape[0]
    tree, n_steps, Xblocks, valid, order, n_rb, pad_r = _blocked(arrays, X, tree_block, row_block)
    yp = jnp.concatenate([yct, jnp.zeros((yct.shape[0], pad_r), yct.dtype)], axis=1) if pad_r else yct
    yblocks = yp.reshape(yct.shape[0], n_rb, row_block).transpose(1, 0, 2)

    def per_tree_block(buf, args):
        tb, steps = args

        def per_row_block(carry, blk):
            buf, shift, s1, s2, sc, bad_acc = carry
            Xb, yb, vb, first = blk
            pred, buf = _block_forward(fs, n_outputs, tb, steps, Xb, buf)  # [n_out, T, B]
            shift = jnp.where(first, pred[:, :, :1], shift)
            d = jnp.where(vb, pred - shift, 0.0)
            bad = jnp.any(~jnp.isfinite(pred), axis=0).astype(jnp.float32)
            return (
                buf,
                shift,
                s1 + d,
                s2 + d * d,
                sc + d * yb[:, None, :],
                bad_acc + jnp.where(vb, bad, 0.0),
            ), None

        acc = jnp.zeros((n_outputs, tree_block, row_block), jnp.float32)
        shift0 = jnp.zeros((n_outputs, tree_block, 1), jnp.float32)
        first = jnp.arange(n_rb) == 0
        carry = (buf, shift0, acc, acc, acc, jnp.zeros((tree_block, row_block), jnp.float32))
        (buf, shift, s1, s2, sc, bad_acc), _ = lax.scan(
            per_row_block, carry, (Xblocks, yblocks, valid, first)
        )
        s1, s2, sc = (jnp.sum(a, -1) for a in (s1, s2, sc))  # [n_out, T]
        mean_d = s1 / n_points
        # sc = sum (p - c) yc; float32 centering leaves sum(yc) != 0, so subtract its share
        co = sc - mean_d * jnp.sum(yct, axis=1)[:, None]
        moments = jnp.stack([shift[..., 0] + mean_d, jnp.maximum(s2 - s1 * mean_d, 0.0), co], axis=-1)
        return buf, (moments.transpose(1, 0, 2), jnp.sum(bad_acc, -1))

    _, (moments, bad_sum) = lax.scan(
        per_tree_block, _value_buffer(arrays, tree_block, row_block), (tree, n_steps)
    )
    moments = moments.reshape(-1, n_outputs, 3)[:pop]
    bad_sum = bad_sum.reshape(-1)[:pop]
    return _unsort(moments, order), _unsort(bad_sum, order)
