"""Forward evaluation and fused fitness of GP forests: a native CPU kernel, a plain-JAX path, and a
GPU kernel in Pallas.

A forest is struct-of-arrays in prefix order (fields ``opcode, value, size, output`` of shape
``[pop, max_len]``, see :mod:`evotensor.gp.functions` for the opcodes and
:mod:`evotensor.gp.reference` for the output / Modi semantics, which every path shares).

Backends (``backend=``):

* ``"native"``: the C++ evaluator of :mod:`evotensor.gp.native`, called through XLA's FFI (it
  traces under ``jit``, runs sequentially under ``vmap``). Each tree is interpreted once per chunk
  of 256 rows, so a node computes only its own function; trees run on XLA's CPU thread pool.
  2-4x the JAX path per CPU-second (``benchmarks/results_gp_eval.md``). Built-in functions only.
* ``"jax"``: the plain-JAX path described below; runs anywhere, any function set.
* ``"pallas"``: the GPU kernel (:mod:`evotensor.gp.pallas_kernel`), Triton-compiled on a GPU; on
  a CPU it runs in Pallas's interpreter (slow: for tests).
* ``"auto"`` (default): ``"pallas"`` when JAX's default backend is a GPU; on a CPU ``"native"`` when
  the extension is built and the function set has only built-in functions, else ``"jax"``. The
  JAX path is written for CPU caches and is never picked on a GPU (it runs there, slowly, when
  asked for by name).

How the JAX path works (and why):

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
* :func:`fitness` accumulates per-row terms over the row blocks and reduces them to per-tree sums
  once per tree block, so ``[pop, n_points]`` is never materialized; sums run in a fixed order
  (deterministic).
* XLA's CPU backend splits large fusions across threads; at this granularity that costs more than
  it saves, so the step's arrays are kept small (and children are read by dynamic slices rather
  than a gather, which its cost model charges for the whole buffer).

Fitness metrics (``metric=``), in natural orientation:

* ``"mse"`` (minimize): mean over rows and outputs of ``(pred - y)**2``; ``"rmse"``: its sqrt.
* ``"r2"`` (maximize): ``1 - SSE / SST`` with ``SST = sum((y - mean_y)**2)`` (per-output means,
  summed over outputs); if ``SST == 0``: 1 for a perfect fit, else 0 (as scikit-learn).
* ``"accuracy"`` (maximize): labels ``y`` in ``{0..n_outputs-1}``; the predicted class is
  ``argmax`` over outputs, or ``pred > 0`` for one output (binary labels ``{0, 1}``).
* ``"cross_entropy"`` (minimize): softmax cross-entropy of the outputs as logits, or the
  logistic loss of the single output for binary labels; mean over rows.

A tree with any non-finite prediction (or a non-finite metric) gets the metric's worst value:
``+inf`` for the minimized metrics, ``-inf`` for the maximized ones (the run loop maps non-finite
fitness to the worst finite value, see :func:`evotensor.core.worst_for_nonfinite`).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from evotensor.gp import native
from evotensor.gp.functions import CONST, FIRST_FUNCTION, VAR, FunctionSet, select_function

METRICS = ("mse", "rmse", "r2", "accuracy", "cross_entropy")
MAXIMIZED_METRICS = frozenset({"r2", "accuracy"})
_CLASSIFICATION = frozenset({"accuracy", "cross_entropy"})

# Measured on a 2-core AMD EPYC (benchmarks/results_gp_eval.md): 8 x 256 beat 8 x 128 (fewer steps,
# so less per-step runtime overhead) and 16 x 256 / 8 x 512 (one step's arrays leave L1).
DEFAULT_TREE_BLOCK = 8
DEFAULT_ROW_BLOCK = 256
_CHUNK_ELEMENTS = 1024  # largest [rows, B] chunk of costly values one fusion computes


# ---- argument handling ---------------------------------------------------------------------------


def _fields(forest: Any) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, bool]:
    """The four forest arrays as ``[pop, max_len]`` and whether the input was a single tree."""
    arrays = []
    for name in ("opcode", "value", "size", "output"):
        if not hasattr(forest, name):
            raise ValueError(f"forest has no field {name!r} (expected opcode, value, size, output)")
        arrays.append(jnp.asarray(getattr(forest, name)))
    shape = arrays[0].shape
    if any(a.shape != shape for a in arrays) or len(shape) not in (1, 2):
        raise ValueError(
            "forest fields opcode, value, size, output must share one shape [pop, max_len] or [max_len], "
            f"got {[a.shape for a in arrays]}"
        )
    single = len(shape) == 1
    if single:
        arrays = [a[None] for a in arrays]
    if arrays[0].shape[0] < 1 or arrays[0].shape[1] < 1:
        raise ValueError(f"forest must have at least one tree and max_len >= 1, got shape {shape}")
    opcode, value, size, output = arrays
    return (
        opcode.astype(jnp.int32),
        value.astype(jnp.float32),
        size.astype(jnp.int32),
        output.astype(jnp.int32),
        single,
    )


def _check_function_set(function_set: Any) -> FunctionSet:
    if not isinstance(function_set, FunctionSet):
        raise ValueError(f"function_set must be a FunctionSet, got {type(function_set).__name__}")
    return function_set


def _check_X(X: Any) -> jax.Array:
    X = jnp.asarray(X, jnp.float32)
    if X.ndim != 2 or X.shape[0] < 1 or X.shape[1] < 1:
        raise ValueError(f"X must be [n_points >= 1, n_vars >= 1], got shape {X.shape}")
    return X


def _check_int(value: Any, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return int(value)


def _check_y(y: Any, n_points: int, metric: str, n_outputs: int | None) -> tuple[jax.Array, int]:
    """``y`` as ``[n_y, n_points]`` float32 and the number of outputs."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
    y = jnp.asarray(y, jnp.float32)
    if y.ndim == 0 or y.shape[0] != n_points or y.ndim > 2:
        raise ValueError(f"y must be [n_points={n_points}] or [n_points, n_outputs], got shape {y.shape}")
    if metric in _CLASSIFICATION:
        if y.ndim != 1:
            raise ValueError(
                f"metric {metric!r} needs integer class labels y [n_points], got shape {y.shape}"
            )
        n_out = 1 if n_outputs is None else _check_int(n_outputs, "n_outputs")
        if not isinstance(y, jax.core.Tracer):  # traced labels cannot be checked here
            labels = np.asarray(y)
            n_classes = max(n_out, 2)
            if not np.all((labels == np.round(labels)) & (labels >= 0) & (labels < n_classes)):
                raise ValueError(
                    f"y must hold integer class labels in 0..{n_classes - 1} for metric {metric!r} with "
                    f"n_outputs={n_out}, got values {np.unique(labels)[:8]}"
                )
        return y[None], n_out
    n_y = 1 if y.ndim == 1 else y.shape[1]
    if n_outputs is not None and _check_int(n_outputs, "n_outputs") != n_y:
        raise ValueError(f"n_outputs={n_outputs} but y has {n_y} output column(s)")
    return (y[None] if y.ndim == 1 else y.T), n_y


def _block_sizes(pop: int, n_points: int, tree_block: int | None, row_block: int | None) -> tuple[int, int]:
    """Block sizes at most the requested ones, balanced so the last block is not mostly padding."""
    t = DEFAULT_TREE_BLOCK if tree_block is None else _check_int(tree_block, "tree_block")
    r = DEFAULT_ROW_BLOCK if row_block is None else _check_int(row_block, "row_block")
    t = -(-pop // -(-pop // min(t, pop)))
    r = min(r, n_points)
    r_balanced = -(-n_points // -(-n_points // r))
    r = min(r, -(-r_balanced // 8) * 8)  # a multiple of 8 rows vectorizes best
    return t, r


BACKENDS = ("auto", "jax", "native", "pallas")


def _choose_backend(backend: str, fs: FunctionSet) -> str:
    """The evaluation path: ``"jax"``, ``"native"`` or ``"pallas"``."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend != "auto":
        return backend
    if jax.default_backend() == "gpu":
        return "pallas"
    if jax.default_backend() == "cpu" and native.supported(fs):
        return "native"
    return "jax"


# ---- shared pieces (also used by the Pallas kernel) -----------------------------------------------


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


def row_terms(pred: jax.Array, y: jax.Array, metric: str) -> tuple[jax.Array, jax.Array]:
    """Per-row contribution to a metric and a per-row "non-finite prediction" flag.

    Args:
        pred: ``[n_outputs, ..., B]`` predictions.
        y: ``[n_y, B]`` targets (``n_y = n_outputs`` for regression, 1 for class labels).
        metric: one of :data:`METRICS`.

    Returns:
        ``(term, bad)``, both float32 ``[..., B]``; the metric is a function of the sums of both.
    """
    n_out = pred.shape[0]
    yb = y.reshape(y.shape[:1] + (1,) * (pred.ndim - 2) + y.shape[1:])
    bad = jnp.any(~jnp.isfinite(pred), axis=0).astype(jnp.float32)
    if metric in ("mse", "rmse", "r2"):
        term = jnp.sum(jnp.square(pred - yb), axis=0)
    elif metric == "accuracy":
        label = yb[0]
        if n_out == 1:
            correct = (pred[0] > 0) == (label > 0.5)
        else:
            correct = jnp.argmax(pred, axis=0).astype(jnp.float32) == label
        term = correct.astype(jnp.float32)
    else:  # cross_entropy
        label = yb[0]
        if n_out == 1:
            z = pred[0]
            term = jnp.maximum(z, 0.0) - z * label + jnp.log1p(jnp.exp(-jnp.abs(z)))
        else:
            k = jnp.arange(n_out, dtype=jnp.float32).reshape((n_out,) + (1,) * (pred.ndim - 1))
            picked = jnp.sum(jnp.where(k == label[None], pred, 0.0), axis=0)
            term = jax.nn.logsumexp(pred, axis=0) - picked
    return term, bad


def finalize_metric(
    term_sum: jax.Array, bad_sum: jax.Array, metric: str, n_points: int, n_outputs: int, sst: jax.Array
) -> jax.Array:
    """Turn per-tree sums of :func:`row_terms` into the metric (non-finite -> worst, see module doc)."""
    n = jnp.float32(n_points)
    if metric == "mse":
        value = term_sum / (n * n_outputs)
    elif metric == "rmse":
        value = jnp.sqrt(term_sum / (n * n_outputs))
    elif metric == "r2":
        safe = jnp.where(sst > 0, sst, 1.0)
        value = jnp.where(sst > 0, 1.0 - term_sum / safe, jnp.where(term_sum == 0, 1.0, 0.0))
    else:  # accuracy, cross_entropy
        value = term_sum / n
    worst = -jnp.inf if metric in MAXIMIZED_METRICS else jnp.inf
    return jnp.where((bad_sum > 0) | ~jnp.isfinite(value), worst, value).astype(jnp.float32)


def total_sum_of_squares(y: jax.Array) -> jax.Array:
    """``SST`` of targets ``[n_y, n_points]`` (per-output means, summed): the R^2 denominator."""
    return jnp.sum(jnp.square(y - jnp.mean(y, axis=1, keepdims=True)))


def metric_from_predictions(pred: Any, y: Any, metric: str = "mse") -> jax.Array:
    """The same fitness as :func:`fitness`, computed from materialized predictions.

    Args:
        pred: ``[pop, n_points, n_outputs]`` (e.g. from :func:`evaluate`).
        y: ``[n_points]`` or ``[n_points, n_outputs]`` targets / ``[n_points]`` class labels.
        metric: one of :data:`METRICS`.

    Returns:
        ``float32 [pop]``.
    """
    pred = jnp.asarray(pred, jnp.float32)
    if pred.ndim != 3:
        raise ValueError(f"pred must be [pop, n_points, n_outputs], got shape {pred.shape}")
    yt, n_out = _check_y(y, pred.shape[1], metric, pred.shape[2])
    term, bad = row_terms(jnp.moveaxis(pred, 2, 0), yt, metric)
    return finalize_metric(term.sum(-1), bad.sum(-1), metric, pred.shape[1], n_out, total_sum_of_squares(yt))


# ---- the JAX path -----------------------------------------------------------------------------------


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
    lengths = size[:, 0]
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
def _evaluate_jax(arrays, X, fs, n_outputs, tree_block, row_block):
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
def _fitness_jax(arrays, X, yt, fs, n_outputs, metric, tree_block, row_block):
    pop = arrays[0].shape[0]
    n_points = X.shape[0]
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
    fit = finalize_metric(
        term_sum.reshape(-1)[:pop],
        bad_sum.reshape(-1)[:pop],
        metric,
        n_points,
        n_outputs,
        total_sum_of_squares(yt),
    )
    return _unsort(fit, order)


# ---- public entry points -----------------------------------------------------------------------------


def evaluate(
    forest: Any,
    X: Any,
    function_set: FunctionSet,
    n_outputs: int = 1,
    *,
    backend: str = "auto",
    tree_block: int | None = None,
    row_block: int | None = None,
) -> jax.Array:
    """Forward of every tree on every row.

    Args:
        forest: a :class:`evotensor.gp.Forest` (or anything with fields ``opcode, value, size,
            output``) of shape ``[pop, max_len]``, or one tree ``[max_len]``. Variable indices must be
            ``< n_vars`` (out-of-range ones are clamped; ``Forest.check`` catches them).
        X: ``[n_points, n_vars]`` data.
        function_set: the opcodes' :class:`FunctionSet`.
        n_outputs: outputs per tree (``> 1``: Modi semantics, see :mod:`evotensor.gp.reference`).
        backend: ``"auto"``, ``"native"``, ``"jax"`` or ``"pallas"`` (see the module docstring).
        tree_block, row_block: largest block sizes of the JAX and Pallas paths (default 8 trees x
            256 rows on the JAX path, so one node step works on L1-resident arrays; balanced so the
            last block is not mostly padding). The native path ignores them.

    Returns:
        ``float32 [pop, n_points, n_outputs]`` (``[n_points, n_outputs]`` for a single tree).
        Non-finite values are kept as computed (raw semantics).

    Works under ``jax.jit`` (the forest may be traced; the function set, ``n_outputs`` and block
    sizes are static).
    """
    fs = _check_function_set(function_set)
    n_outputs = _check_int(n_outputs, "n_outputs")
    X = _check_X(X)
    *arrays, single = _fields(forest)
    arrays = tuple(arrays)
    path = _choose_backend(backend, fs)
    if path == "pallas":
        from evotensor.gp import pallas_kernel

        out = pallas_kernel.evaluate_pallas(
            arrays, X, fs, n_outputs, tree_block=tree_block, row_block=row_block
        )
    elif path == "native":
        out = native.evaluate_native(arrays, X, fs, n_outputs)
    else:
        tb, rb = _block_sizes(arrays[0].shape[0], X.shape[0], tree_block, row_block)
        out = _evaluate_jax(arrays, X, fs, n_outputs, tb, rb)
    return out[0] if single else out


def fitness(
    forest: Any,
    X: Any,
    y: Any,
    function_set: FunctionSet,
    metric: str = "mse",
    n_outputs: int | None = None,
    *,
    backend: str = "auto",
    tree_block: int | None = None,
    row_block: int | None = None,
) -> jax.Array:
    """Fused forward + metric: ``[pop]`` fitness without materializing ``[pop, n_points]``.

    Args:
        forest: ``[pop, max_len]`` forest (or one tree ``[max_len]``), as in :func:`evaluate`.
        X: ``[n_points, n_vars]`` data.
        y: regression targets ``[n_points]`` / ``[n_points, n_outputs]``, or class labels
            ``[n_points]`` in ``{0..n_outputs-1}`` for ``"accuracy"`` / ``"cross_entropy"``.
        function_set: the opcodes' :class:`FunctionSet`.
        metric: ``"mse" | "rmse" | "r2" | "accuracy" | "cross_entropy"`` (see the module docstring).
        n_outputs: outputs per tree; inferred from ``y`` for regression, default 1 (binary) for
            classification.
        backend, tree_block, row_block: as in :func:`evaluate`.

    Returns:
        ``float32 [pop]`` (a scalar for a single tree) in natural orientation; a tree with any
        non-finite prediction gets ``+inf`` (minimized metrics) or ``-inf`` (``r2``, ``accuracy``).
    """
    fs = _check_function_set(function_set)
    X = _check_X(X)
    yt, n_out = _check_y(y, X.shape[0], metric, n_outputs)
    *arrays, single = _fields(forest)
    arrays = tuple(arrays)
    path = _choose_backend(backend, fs)
    if path == "pallas":
        from evotensor.gp import pallas_kernel

        out = pallas_kernel.fitness_pallas(
            arrays, X, yt, fs, n_out, metric, tree_block=tree_block, row_block=row_block, y_is_transposed=True
        )
    elif path == "native":
        term_sum, bad_sum = native.fitness_sums(arrays, X, yt, fs, n_out, METRICS.index(metric))
        out = finalize_metric(term_sum, bad_sum, metric, X.shape[0], n_out, total_sum_of_squares(yt))
    else:
        tb, rb = _block_sizes(arrays[0].shape[0], X.shape[0], tree_block, row_block)
        out = _fitness_jax(arrays, X, yt, fs, n_out, metric, tb, rb)
    return out[0] if single else out
