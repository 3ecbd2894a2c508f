"""Forward evaluation and fused fitness of GP forests (CPU path in plain JAX; GPU via Pallas).

A forest is struct-of-arrays in prefix order (fields ``opcode, value, size, output`` of shape
``[pop, max_len]``, see :mod:`evotensor.gp.functions` for the opcodes and
:mod:`evotensor.gp.reference` for the output / Modi semantics, which every path shares).

How the JAX path works (and why):

* Trees are sorted by length and cut into blocks of ``tree_block`` trees; each block runs only as
  many node steps as its longest tree, so padding costs almost nothing.
* Rows are cut into blocks of ``row_block`` rows so the working set
  (``[max_len + 1, tree_block, row_block]`` float32; 8 x 128 by default) stays in cache.
* Nodes are visited in reverse prefix order (a ``fori_loop``; the tree axis is vectorized). The
  value of node ``i`` is written to slot ``i`` of a per-block buffer; its children sit at known
  slots (``i + 1``, then ``+ size`` of the previous child), so no stack pointer is tracked and the
  first child's read is a static-offset slice. All functions of the set are computed and the one
  named by each tree's opcode selected (branch-free, as a vectorized program must).
* ``sin``/``cos``/``tan`` use vectorizable forms (:meth:`FunctionSet.apply_fast`; XLA's CPU
  versions are scalar library calls); a block in which one of their arguments leaves the fast
  forms' domain (finite ``|x| >= 3e6``) is recomputed with the exact functions.
* :func:`fitness` reduces each row block to per-tree partial sums inside the loop over row blocks,
  so ``[pop, n_points]`` is never materialized; sums run in a fixed order (deterministic).

On a GPU backend the public functions use the Pallas kernel (:mod:`evotensor.gp.pallas_kernel`)
instead; ``backend="jax"`` / ``"pallas"`` forces a path.

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

from evotensor.gp.functions import CONST, FIRST_FUNCTION, VAR, FunctionSet

METRICS = ("mse", "rmse", "r2", "accuracy", "cross_entropy")
MAXIMIZED_METRICS = frozenset({"r2", "accuracy"})
_CLASSIFICATION = frozenset({"accuracy", "cross_entropy"})

# Measured on a 2-core AMD EPYC (benchmarks/results_gp_eval.md): 8 x 128 beat 16 x 512 by ~2x,
# one step's [8, 128] arrays stay in L1 and the [max_len + 1, 8, 128] buffer in L2.
DEFAULT_TREE_BLOCK = 8
DEFAULT_ROW_BLOCK = 128


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


def _use_pallas(backend: str) -> bool:
    if backend not in ("auto", "jax", "pallas"):
        raise ValueError(f"backend must be 'auto', 'jax' or 'pallas', got {backend!r}")
    return backend == "pallas" or (backend == "auto" and jax.default_backend() == "gpu")


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


def _block_forward(fs: FunctionSet, n_outputs: int, tree: tuple, n_steps: jax.Array, Xb: jax.Array):
    """Evaluate one block of trees on one block of rows.

    Args:
        tree: ``(opcode, value, c2, c3, output)``, each ``[T, L]``.
        n_steps: the block's longest tree length (int32 scalar).
        Xb: ``[n_vars, B]`` rows (transposed).

    Returns:
        ``[n_outputs, T, B]`` predictions.

    Functions with a fast form (``sin cos tan``) use it; if any of their arguments in the block
    fell outside its domain, the block is recomputed with the exact functions (rare, one cond per
    block, so the per-node loop stays one fused pass).
    """
    opcode, value, c2, c3, output = tree
    T, L = opcode.shape
    n_vars, B = Xb.shape
    arity = jnp.asarray(fs.arity)
    var = jnp.clip(value.astype(jnp.int32), 0, n_vars - 1)
    tree_ids = jnp.arange(T, dtype=jnp.int32)
    out_ids = jnp.arange(n_outputs, dtype=jnp.int32)[:, None, None]
    has_fast = any(f.fast_fn is not None for f in fs.functions)

    def run(fast: bool):
        def step(k, carry):
            buf, outs, needs_exact = carry  # buf [L + 1, T, B]: slot j holds the value node j passes up
            i = n_steps - 1 - k
            col = lambda a: lax.dynamic_index_in_dim(a, i, axis=1, keepdims=False)  # noqa: E731
            op, val = col(opcode)[:, None], col(value)[:, None]

            def read(buf):
                flat = buf.reshape((L + 1) * T, B)
                a = lax.dynamic_index_in_dim(buf, i + 1, axis=0, keepdims=False)
                b = flat[col(c2) * T + tree_ids] if fs.max_arity >= 2 else a
                c = flat[col(c3) * T + tree_ids] if fs.max_arity >= 3 else a
                return a, b, c

            # Reading the children inside an (always taken) cond materializes them before the
            # write: otherwise XLA fuses the reads into the buffer update and copies the buffer
            # at every step.
            a, b, c = lax.cond(k >= 0, read, lambda buf: (buf[0], buf[0], buf[0]), buf)
            b = b if fs.max_arity >= 2 else None
            c = c if fs.max_arity >= 3 else None
            x = Xb[col(var)]
            if fast:
                node, bad = fs.apply_fast(op, a, b, c)
                needs_exact = needs_exact | bad  # elementwise: no reduction inside the loop
            else:
                node = fs.apply_unpacked(op, a, b, c)
            node = jnp.where(op == CONST, val, jnp.where(op == VAR, x, node))
            passed = node
            if n_outputs > 1:
                modi = col(output)
                outs = outs + jnp.where(out_ids == modi[None, :, None], node[None], 0.0)
                ar = arity[op]
                if fs.max_arity == 1:
                    right = a
                else:
                    right = jnp.where(ar == 1, a, b if c is None else jnp.where(ar == 2, b, c))
                passed = jnp.where((modi[:, None] >= 0) & (op >= FIRST_FUNCTION), right, node)
            return lax.dynamic_update_index_in_dim(buf, passed, i, axis=0), outs, needs_exact

        buf = jnp.zeros((L + 1, T, B), jnp.float32)
        outs = jnp.zeros((n_outputs if n_outputs > 1 else 0, T, B), jnp.float32)
        buf, outs, needs_exact = lax.fori_loop(0, n_steps, step, (buf, outs, jnp.zeros((T, B), bool)))
        return (buf[0][None] if n_outputs == 1 else outs), jnp.any(needs_exact)

    if not has_fast:
        return run(False)[0]
    result, needs_exact = run(True)
    return lax.cond(needs_exact, lambda: run(False)[0], lambda: result)


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


def _unsort(values: jax.Array, order: jax.Array) -> jax.Array:
    return jnp.zeros_like(values).at[order].set(values)


@functools.partial(jax.jit, static_argnames=("fs", "n_outputs", "tree_block", "row_block"))
def _evaluate_jax(arrays, X, fs, n_outputs, tree_block, row_block):
    pop = arrays[0].shape[0]
    n_points = X.shape[0]
    tree, n_steps, Xblocks, _, order, n_rb, _ = _blocked(arrays, X, tree_block, row_block)

    def per_tree_block(args):
        tb, steps = args
        pred = lax.map(lambda Xb: _block_forward(fs, n_outputs, tb, steps, Xb), Xblocks)
        # [n_rb, n_out, T, B] -> [T, n_rb * B, n_out]
        return pred.transpose(2, 0, 3, 1).reshape(tree_block, n_rb * row_block, n_outputs)

    out = lax.map(per_tree_block, (tree, n_steps))
    out = out.reshape(-1, n_rb * row_block, n_outputs)[:pop, :n_points]
    return _unsort(out, order)


@functools.partial(jax.jit, static_argnames=("fs", "n_outputs", "metric", "tree_block", "row_block"))
def _fitness_jax(arrays, X, yt, fs, n_outputs, metric, tree_block, row_block):
    pop = arrays[0].shape[0]
    n_points = X.shape[0]
    tree, n_steps, Xblocks, valid, order, n_rb, pad_r = _blocked(arrays, X, tree_block, row_block)
    yp = jnp.concatenate([yt, jnp.zeros((yt.shape[0], pad_r), yt.dtype)], axis=1) if pad_r else yt
    yblocks = yp.reshape(yt.shape[0], n_rb, row_block).transpose(1, 0, 2)

    def per_tree_block(args):
        tb, steps = args

        def per_row_block(acc, blk):
            Xb, yb, vb = blk
            term, bad = row_terms(_block_forward(fs, n_outputs, tb, steps, Xb), yb, metric)
            return (
                acc[0] + jnp.sum(jnp.where(vb, term, 0.0), -1),
                acc[1] + jnp.sum(jnp.where(vb, bad, 0.0), -1),
            ), None

        zero = jnp.zeros(tree_block, jnp.float32)
        (term_sum, bad_sum), _ = lax.scan(per_row_block, (zero, zero), (Xblocks, yblocks, valid))
        return term_sum, bad_sum

    term_sum, bad_sum = lax.map(per_tree_block, (tree, n_steps))
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
        backend: ``"auto"`` (Pallas kernel on GPU, JAX elsewhere), ``"jax"`` or ``"pallas"``.
        tree_block, row_block: largest block sizes (default 8 trees x 128 rows on the JAX path, so
            one node step works on L1-resident arrays; balanced so the last block is not mostly
            padding).

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
    if _use_pallas(backend):
        from evotensor.gp import pallas_kernel

        out = pallas_kernel.evaluate_pallas(
            arrays, X, fs, n_outputs, tree_block=tree_block, row_block=row_block
        )
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
    if _use_pallas(backend):
        from evotensor.gp import pallas_kernel

        out = pallas_kernel.fitness_pallas(
            arrays, X, yt, fs, n_out, metric, tree_block=tree_block, row_block=row_block, y_is_transposed=True
        )
    else:
        tb, rb = _block_sizes(arrays[0].shape[0], X.shape[0], tree_block, row_block)
        out = _fitness_jax(arrays, X, yt, fs, n_out, metric, tb, rb)
    return out[0] if single else out
