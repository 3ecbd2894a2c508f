"""Pallas kernel for forest evaluation on a GPU (Triton), after EvoGP's hybrid and data-parallel
schemes.

One kernel body, launched over a grid ``(tree blocks, row blocks)`` (EvoGP, arXiv 2501.17168,
Sec. IV-C): each program evaluates its block of ``tree_block`` trees one after the other on its
``row_block`` rows.

* **hybrid**: several trees x a medium row block per program (small and medium data);
* **data-parallel**: one tree per program, large row blocks (very large data).

``scheme="auto"`` picks data-parallel when ``n_points >= DATA_PARALLEL_MIN_POINTS``.

**How a tree runs.** Nodes are visited in reverse prefix order on a value stack. The opcode is
uniform across the program's rows, so the per-node work branches on it without divergence (a
``lax.switch`` on the arity class, then on the function). The stack lives in registers: Triton
cannot index registers dynamically, so a read or write of slot ``sp`` is a chain of selects over
the slots, each under a *scalar* condition (one instruction per slot and row). The top of the
stack is cached in its own register (as in a stack machine's TOS register): a unary function
touches no slot, a binary one reads one slot, a leaf writes one, so a node costs about one
select chain instead of three.

**Two stack tiers.** The cost of a select chain grows with the number of slots, but the height a
tree needs (:func:`stack_peak`) is usually far below the worst case for ``max_len``
(``((A - 1) * max_len + 1) // A``). So the forest runs in two launches: every tree whose peak
fits :data:`SMALL_STACK` in the first, the others in a second with the worst-case stack (a tree
skipped by a launch costs one scalar test there). With ``max_stack`` given, one launch with that
stack runs, and trees that need more get NaN predictions (so the worst fitness), never wrong values.

**Division.** Pallas lowers a float32 division to Triton's ``arith.divf``, which compiles to the
correctly rounded ``div.rn.f32`` (equal to XLA's bit for bit on 2^20 random pairs spanning
1e-30..1e30 on an H200; ``tests/gp/test_pallas_kernel.py`` checks it on every GPU run).
Transcendental functions are libdevice's (``__nv_sinf``, ...), whose results may differ from XLA's
by an ulp or so; ill-conditioned trees amplify such differences (see
``benchmarks/results_gpu.md``: the kernel is as close to float64 as the float32 reference is).

Fitness uses a deterministic two-stage reduction, no atomics: each program writes one partial sum
per tree for its row block (stage 1), and a fixed-order sum over row blocks finishes (stage 2), so
results are bit-reproducible.

The body is written in what Pallas's Triton lowering accepts: every array has a power-of-two size
(``max_len``, ``n_vars`` and the output axis are padded up; ``tree_block`` and ``row_block`` are
rounded down to powers of two), no ``slice`` primitive (block loads and reshapes), no
``reduce_or``, and ``lax.switch`` branches return only arrays computed inside them. The CPU tests
run the kernel in Pallas's interpreter (``interpret=True``, slow) and export every entry point for
``platforms=["cuda"]`` (``jax.export``); on a GPU the same tests run the compiled kernel.

Semantics are exactly those of :mod:`evotensor.gp.evaluate` (functions from
:class:`~evotensor.gp.functions.FunctionSet`, Modi outputs as in :mod:`evotensor.gp.reference`,
metrics from :func:`evotensor.gp.metrics.row_terms`). This module depends on
:mod:`evotensor.gp.metrics` only (its checks and metric definitions), never on
:mod:`evotensor.gp.evaluate`, which dispatches to it.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from evotensor.core.checks import check_int
from evotensor.gp.functions import CONST, VAR, FunctionSet
from evotensor.gp.metrics import (
    METRICS,
    check_function_set,
    check_X,
    check_y,
    finalize_metric,
    forest_fields,
    total_sum_of_squares,
)

SCHEMES = ("auto", "hybrid", "data_parallel")
DATA_PARALLEL_MIN_POINTS = 1 << 15
HYBRID_BLOCKS = (4, 128)  # (trees, rows) per program
DATA_PARALLEL_ROWS = 1024
SMALL_STACK = 8  # stack height of the first launch (covers nearly every evolved tree)


def default_max_stack(max_len: int, max_arity: int) -> int:
    """Worst-case stack height of reverse-prefix evaluation of a ``max_len`` tree.

    Every value on the stack but one waits for an unprocessed parent that still lacks its first
    child, and such a parent holds at most ``A - 1`` of them, so ``h <= (A - 1) * parents + 1``
    and ``h + parents <= max_len``.
    """
    return max(1, ((max_arity - 1) * max_len + 1) // max_arity)


def stack_peak(opcode: jax.Array, size: jax.Array, fs: FunctionSet) -> jax.Array:
    """Largest stack height each tree reaches. ``[pop, max_len] -> int32 [pop]``."""
    in_tree = jnp.arange(opcode.shape[-1]) < size[..., :1]
    delta = jnp.where(in_tree, 1 - jnp.asarray(fs.arity)[opcode], 0)
    heights = jnp.cumsum(delta[..., ::-1], axis=-1)
    return jnp.max(heights, axis=-1).astype(jnp.int32)


def _next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def _prev_pow2(n: int) -> int:
    return 1 << (int(n).bit_length() - 1)


def _pick_scheme(scheme: str, n_points: int) -> str:
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
    if scheme == "auto":
        return "data_parallel" if n_points >= DATA_PARALLEL_MIN_POINTS else "hybrid"
    return scheme


# ---- the kernel body ---------------------------------------------------------------------------------


def _kernel_functions(fs: FunctionSet) -> dict[int, list]:
    """``{arity: [(opcode, fn), ...]}``: the set's functions grouped by arity."""
    groups: dict[int, list] = {}
    for f in fs.functions:
        groups.setdefault(f.arity, []).append((f.opcode, f.fn))
    return groups


def _arity_of(fs: FunctionSet, op: jax.Array) -> jax.Array:
    """Arity of opcode ``op`` (scalar int32) as a chain of scalar selects.

    Kept outside ``lax.switch``: Triton cannot yield branch-local literals, and a kernel cannot close
    over a constant table array.
    """
    arity = jnp.int32(0)
    for f in fs.functions:
        arity = jnp.where(op == f.opcode, jnp.int32(f.arity), arity)
    return arity


def _position_in(op: jax.Array, opcodes: list[int]) -> jax.Array:
    """Index of scalar ``op`` in ``opcodes`` (0 if absent), a chain of scalar selects."""
    index = jnp.int32(0)
    for j, code in enumerate(opcodes):
        index = jnp.where(op == code, jnp.int32(j), index)
    return index


def _read(slots: tuple, idx: jax.Array) -> jax.Array:
    """Slot ``idx`` (a scalar) of the register stack: one select per slot."""
    value = slots[0]
    for k in range(1, len(slots)):
        value = jnp.where(idx == k, slots[k], value)
    return value


def _write(slots: tuple, idx: jax.Array, value: jax.Array) -> tuple:
    return tuple(jnp.where(idx == k, value, s) for k, s in enumerate(slots))


def variable_row(opcode: jax.Array, value: jax.Array) -> jax.Array:
    """The row of ``X`` a leaf slot loads: its variable index for ``VAR`` (already clipped to
    ``[0, n_vars)`` when the forest is laid out), row 0 for any other slot.

    Every leaf loads a row before the opcode picks between the variable and the constant, so a
    constant's value must never become the address: on a GPU a row outside ``X`` is an illegal
    memory access (``CUDA_ERROR_ILLEGAL_ADDRESS``), not the clamped read of the CPU interpreter.
    Scalars or arrays of one shape -> ``int32`` of that shape.
    """
    return jnp.where(opcode == VAR, value, 0.0).astype(jnp.int32)


def _tree_value(fs, groups, n_outputs, max_stack, op_ref, val_ref, out_ref, len_ref, x_ref, t):
    """Run tree ``t`` of the program's block on the program's rows -> ``[_next_pow2(n_outputs), rows]``.

    The stack holds ``sp`` values: the top in ``top``, the others in ``slots[0 .. sp - 2]``
    (``max_stack - 1`` slots). Modi indices in the padded output axis land there and are dropped by
    the caller, as the reference ignores indices ``>= n_outputs``.
    """
    rows = x_ref.shape[1]
    n_pad = _next_pow2(n_outputs)
    out_ids = lax.broadcasted_iota(jnp.int32, (n_pad, rows), 0)
    length = len_ref[t]
    classes = [0] + sorted(groups)  # the arity classes present; 0: leaves

    def leaf(op, val, top, slots, sp):
        x = x_ref[pl.ds(variable_row(op, val), 1), :].reshape((rows,)).astype(jnp.float32)
        node = jnp.where(op == VAR, x, jnp.where(op == CONST, val, 0.0))
        slots = _write(slots, sp - 1, top)  # the old top moves into the slots
        return node, node, slots

    def function_class(arity):
        opcodes = [code for code, _ in groups[arity]]
        fns = [fn for _, fn in groups[arity]]

        def call(fn, *args):
            return jnp.broadcast_to(fn(*args), (rows,)).astype(jnp.float32)

        def branch(op, val, top, slots, sp):
            # children: the first is the top (evaluated last), the next ones below it
            args = (top,) + tuple(_read(slots, sp - 1 - k) for k in range(1, arity))
            if len(fns) == 1:
                node = call(fns[0], *args)
            else:
                node = lax.switch(
                    _position_in(op, opcodes), [functools.partial(call, fn) for fn in fns], *args
                )
            return node, args[-1], slots  # Modi: a function passes its rightmost child up

        return branch

    branches = [leaf] + [function_class(a) for a in classes[1:]]

    def step(k, carry):
        top, slots, sp, outs = carry
        i = length - 1 - k
        op = jnp.clip(op_ref[t, i], 0, fs.n_opcodes - 1)
        val = val_ref[t, i]
        arity = _arity_of(fs, op)
        node, right, slots = lax.switch(_position_in(arity, classes), branches, op, val, top, slots, sp)
        top = node
        if n_outputs > 1:
            modi = out_ref[t, i]
            outs = outs + jnp.where(out_ids == modi, node[None, :], 0.0)
            top = jnp.where((modi >= 0) & (arity > 0), right, node)
        return top, slots, sp + 1 - arity, outs

    zero = jnp.zeros((rows,), jnp.float32)
    slots = (zero,) * max(1, max_stack - 1)
    outs = jnp.zeros(out_ids.shape, jnp.float32)
    top, _, _, outs = lax.fori_loop(0, length, step, (zero, slots, jnp.int32(0), outs))
    return top[None, :] if n_outputs == 1 else outs


def _predict_kernel(
    fs, groups, n_outputs, max_stack, op_ref, val_ref, out_ref, len_ref, ok_ref, x_ref, pred_ref
):
    tree_block = op_ref.shape[0]

    def body(t, carry):
        value = _tree_value(fs, groups, n_outputs, max_stack, op_ref, val_ref, out_ref, len_ref, x_ref, t)
        value = jnp.where(ok_ref[t] > 0, value, jnp.nan)  # stack would overflow: NaN, never wrong values
        pred_ref[:, pl.ds(t, 1), :] = value[:, None, :]
        return carry

    lax.fori_loop(0, tree_block, body, 0)


def _row_terms(pred: jax.Array, y: jax.Array, metric: str, n_out: int) -> tuple[jax.Array, jax.Array]:
    """:func:`evotensor.gp.metrics.row_terms` in operations Triton lowers.

    ``pred [_next_pow2(n_out), rows]`` (rows ``>= n_out`` are padding and ignored), ``y [n_y, rows]``
    (regression: zero-padded like ``pred``; class labels: ``n_y = 1``) -> ``(term, bad)``, float32
    ``[rows]``. The same formulas as ``row_terms`` (the tests compare every metric against the JAX
    path), except that the "any output non-finite" flag is a float max (Triton has no
    ``reduce_or``), rows of a ``[1, rows]`` array are read by reshape (no ``slice``) and the padded
    outputs are masked out.
    """
    n_pad, rows = pred.shape
    real = lax.broadcasted_iota(jnp.int32, (n_pad, rows), 0) < n_out
    bad = jnp.max(jnp.where(real & ~jnp.isfinite(pred), 1.0, 0.0), axis=0)
    if metric in ("mse", "rmse", "r2"):
        return jnp.sum(jnp.where(real, jnp.square(pred - y), 0.0), axis=0), bad
    label = y.reshape((rows,))  # class labels: y is [1, rows] (checked by fitness_pallas)
    if metric == "accuracy":
        if n_out == 1:
            correct = (pred.reshape((rows,)) > 0) == (label > 0.5)
        else:
            masked = jnp.where(real, pred, -jnp.inf)
            correct = jnp.argmax(masked, axis=0).astype(jnp.float32) == label
        return correct.astype(jnp.float32), bad
    # cross_entropy
    if n_out == 1:
        z = pred.reshape((rows,))
        return jnp.maximum(z, 0.0) - z * label + jnp.log1p(jnp.exp(-jnp.abs(z))), bad
    k = lax.broadcasted_iota(jnp.int32, (n_pad, rows), 0).astype(jnp.float32)
    picked = jnp.sum(jnp.where(real & (k == label[None, :]), pred, 0.0), axis=0)
    return jax.nn.logsumexp(jnp.where(real, pred, -jnp.inf), axis=0) - picked, bad


def _fitness_kernel(
    fs,
    groups,
    n_outputs,
    max_stack,
    metric,
    op_ref,
    val_ref,
    out_ref,
    len_ref,
    ok_ref,
    x_ref,
    y_ref,
    valid_ref,
    term_ref,
    bad_ref,
):
    tree_block = op_ref.shape[0]
    valid = valid_ref[0] > 0
    lanes = lax.broadcasted_iota(jnp.int32, (1, tree_block), 1)

    def sums(t):
        value = _tree_value(fs, groups, n_outputs, max_stack, op_ref, val_ref, out_ref, len_ref, x_ref, t)
        value = jnp.where(ok_ref[t] > 0, value, jnp.nan)
        term, bad = _row_terms(value, y_ref[...], metric, n_outputs)
        return jnp.sum(jnp.where(valid, term, 0.0)), jnp.sum(jnp.where(valid, bad, 0.0))

    def _skipped(t):
        zero = len_ref[t].astype(jnp.float32)  # 0 here; Triton cannot yield a literal from a branch
        return zero, zero

    def body(t, carry):
        terms, bads = carry
        # a tree this launch skips (length 0) costs one scalar test
        term_sum, bad_sum = lax.cond(len_ref[t] > 0, sums, _skipped, t)
        return jnp.where(lanes == t, term_sum, terms), jnp.where(lanes == t, bad_sum, bads)

    zero = jnp.zeros((1, tree_block), jnp.float32)
    terms, bads = lax.fori_loop(0, tree_block, body, (zero, zero))
    term_ref[...] = terms
    bad_ref[...] = bads


# ---- launch geometry and inputs -----------------------------------------------------------------------


def _blocks(scheme: str, pop: int, n_points: int, tree_block, row_block) -> tuple[int, int]:
    """Trees and rows per program for a (resolved) scheme: powers of two, as Triton wants.

    Requested sizes are upper bounds, rounded down to powers of two, and capped at the next power of
    two of ``pop`` / ``n_points`` (not at those themselves, which need not be powers of two).
    """
    tb, rb = HYBRID_BLOCKS if scheme == "hybrid" else (1, DATA_PARALLEL_ROWS)
    tb = min(tb if tree_block is None else check_int(tree_block, "tree_block"), _next_pow2(pop))
    rb = min(rb if row_block is None else check_int(row_block, "row_block"), _next_pow2(n_points))
    tb, rb = _prev_pow2(tb), _prev_pow2(rb)
    if scheme == "data_parallel" and tb != 1:
        raise ValueError(f"the data-parallel scheme runs one tree per program, got tree_block={tb}")
    return tb, rb


def _stack_tiers(max_stack, max_len: int, fs: FunctionSet) -> tuple[int, ...]:
    """The stack height of each launch: ``(max_stack,)`` if given, else the small tier and the worst
    case (one launch when the worst case is small)."""
    if max_stack is not None:
        return (check_int(max_stack, "max_stack"),)
    worst = default_max_stack(max_len, fs.max_arity)
    return (worst,) if worst <= SMALL_STACK else (SMALL_STACK, worst)


def _prepare(forest: Any, X: jax.Array, fs: FunctionSet, scheme: str, tree_block, row_block, max_stack):
    """Pad trees and rows to whole blocks; returns everything the launches need.

    ``launches`` holds one ``(stack, lengths, ok)`` per stack tier: the tree lengths that launch
    runs (0 for the trees it skips), and whether each tree fits there (NaN predictions otherwise).
    """
    if isinstance(forest, tuple):
        opcode, value, size, output = forest
        single = False
    else:
        opcode, value, size, output, single = forest_fields(forest)
    pop, max_len = opcode.shape
    n_points, n_vars = X.shape
    tb, rb = _blocks(_pick_scheme(scheme, n_points), pop, n_points, tree_block, row_block)
    tiers = _stack_tiers(max_stack, max_len, fs)
    n_tb, n_rb = -(-pop // tb), -(-n_points // rb)
    pad_t, pad_r = n_tb * tb - pop, n_rb * rb - n_points
    lengths = size[:, 0]
    # out-of-range variable indices are clamped as on the JAX path (and a GPU load never leaves X)
    var_index = jnp.clip(value.astype(jnp.int32), 0, n_vars - 1).astype(jnp.float32)
    value = jnp.where(opcode == VAR, var_index, value)
    peak = stack_peak(opcode, size, fs)
    # Triton wants power-of-two block dimensions: round the node axis (PAD columns are never
    # visited) and the variable axis (zero rows are never read) up.
    pad_l, pad_v = _next_pow2(max_len) - max_len, _next_pow2(n_vars) - n_vars

    def pad_trees(a, fill=0):
        if a.ndim == 2 and pad_l:
            a = jnp.concatenate([a, jnp.full((a.shape[0], pad_l), fill, a.dtype)], axis=1)
        return jnp.concatenate([a, jnp.full((pad_t,) + a.shape[1:], fill, a.dtype)]) if pad_t else a

    launches, done = [], jnp.zeros(pop, bool)
    for stack in tiers:
        fits = peak <= stack
        last = stack == tiers[-1]
        run_here = fits & ~done if not last else ~done  # the last tier also runs the misfits (as NaN)
        launches.append(
            (stack, pad_trees(jnp.where(run_here, lengths, 0)), pad_trees(fits.astype(jnp.int32)), run_here)
        )
        done = done | run_here
    trees = (pad_trees(opcode), pad_trees(value), pad_trees(output, -1))
    XT = jnp.pad(X, ((0, pad_r), (0, pad_v))).T
    return dict(
        trees=trees,
        launches=launches,
        XT=XT,
        grid=(tb, rb, n_tb, n_rb),
        pop=pop,
        n_points=n_points,
        pad_r=pad_r,
        single=single,
    )


def _tree_specs(tb: int, max_len: int):
    two_d = pl.BlockSpec((tb, max_len), lambda i, j: (i, 0))
    one_d = pl.BlockSpec((tb,), lambda i, j: (i,))
    return [two_d, two_d, two_d, one_d, one_d]


def _compiler_params(num_warps, row_block=None):
    # Triton's parameters, so jax does not pick Mosaic GPU (which rejects these small blocks). Two
    # warps for blocks of <= 128 rows (one row per thread) measured best on an H200, else four.
    if num_warps is None and row_block is not None:
        num_warps = 2 if row_block <= 128 else 4
    return plgpu.CompilerParams(num_warps=num_warps)


@functools.partial(jax.jit, static_argnames=("fs", "n_outputs", "grid", "stack", "interpret", "num_warps"))
def _predict_call(trees, lengths, ok, XT, fs, n_outputs, grid, stack, interpret, num_warps):
    """One launch of the predict kernel; ``grid = (tree_block, row_block, n_tree_blocks, n_row_blocks)``."""
    tb, rb, n_tb, n_rb = grid
    max_len = trees[0].shape[1]
    n_vars = XT.shape[0]
    kernel = functools.partial(_predict_kernel, fs, _kernel_functions(fs), n_outputs, stack)
    n_pad = _next_pow2(n_outputs)  # Triton: power-of-two blocks; the padded outputs are dropped
    pred = pl.pallas_call(
        kernel,
        grid=(n_tb, n_rb),
        in_specs=[*_tree_specs(tb, max_len), pl.BlockSpec((n_vars, rb), lambda i, j: (0, j))],
        out_specs=pl.BlockSpec((n_pad, tb, rb), lambda i, j: (0, i, j)),
        out_shape=jax.ShapeDtypeStruct((n_pad, n_tb * tb, n_rb * rb), jnp.float32),
        interpret=interpret,
        compiler_params=_compiler_params(num_warps, rb),
    )(*trees, lengths, ok, XT)
    return pred[:n_outputs]


@functools.partial(
    jax.jit, static_argnames=("fs", "n_outputs", "metric", "grid", "stack", "interpret", "num_warps")
)
def _fitness_call(
    trees, lengths, ok, XT, yT, valid, fs, n_outputs, metric, grid, stack, interpret, num_warps
):
    """One launch of the fitness kernel (stage 1) and the fixed-order sum over row blocks (stage 2)."""
    tb, rb, n_tb, n_rb = grid
    max_len = trees[0].shape[1]
    n_vars, n_y = XT.shape[0], yT.shape[0]
    groups = _kernel_functions(fs)
    kernel = functools.partial(_fitness_kernel, fs, groups, n_outputs, stack, metric)
    partial_spec = pl.BlockSpec((1, tb), lambda i, j: (j, i))
    partial_shape = jax.ShapeDtypeStruct((n_rb, n_tb * tb), jnp.float32)
    terms, bads = pl.pallas_call(
        kernel,
        grid=(n_tb, n_rb),
        in_specs=[
            *_tree_specs(tb, max_len),
            pl.BlockSpec((n_vars, rb), lambda i, j: (0, j)),
            pl.BlockSpec((n_y, rb), lambda i, j: (0, j)),
            pl.BlockSpec((1, rb), lambda i, j: (0, j)),
        ],
        out_specs=[partial_spec, partial_spec],
        out_shape=[partial_shape, partial_shape],
        interpret=interpret,
        compiler_params=_compiler_params(num_warps, rb),
    )(*trees, lengths, ok, XT, yT, valid)
    # stage 2: a fixed-order sum over row blocks (deterministic, no atomics)
    return jnp.sum(terms, axis=0), jnp.sum(bads, axis=0)


def _interpret(interpret: bool | None) -> bool:
    return jax.default_backend() != "gpu" if interpret is None else bool(interpret)


def _check_warps(num_warps):
    if num_warps is None:
        return None
    n = check_int(num_warps, "num_warps")
    if n & (n - 1):
        raise ValueError(f"num_warps must be a power of two, got {num_warps!r}")
    return n


# ---- public entry points ------------------------------------------------------------------------------


def evaluate_pallas(
    forest: Any,
    X: Any,
    function_set: FunctionSet,
    n_outputs: int = 1,
    *,
    scheme: str = "auto",
    tree_block: int | None = None,
    row_block: int | None = None,
    max_stack: int | None = None,
    num_warps: int | None = None,
    interpret: bool | None = None,
) -> jax.Array:
    """Forward of a forest with the Pallas kernel.

    Args:
        forest: ``[pop, max_len]`` forest (fields ``opcode, value, size, output``), or the tuple of
            those four arrays.
        X: ``[n_points, n_vars]``.
        function_set, n_outputs: as in :func:`evotensor.gp.evaluate`.
        scheme: ``"auto" | "hybrid" | "data_parallel"`` (see the module docstring).
        tree_block, row_block: largest trees and rows per program (defaults: hybrid 4 x 128,
            data-parallel 1 x 1024), rounded down to powers of two.
        max_stack: stack height (default: two tiers, see the module docstring); trees that need
            more get NaN predictions.
        num_warps: Triton warps per program (default: 2 for row blocks of <= 128 rows, else 4).
        interpret: run in Pallas's interpreter (default: True unless the backend is a GPU).

    Returns:
        ``float32 [pop, n_points, n_outputs]``.
    """
    fs = check_function_set(function_set)
    n_outputs = check_int(n_outputs, "n_outputs")
    X = check_X(X)
    num_warps = _check_warps(num_warps)
    p = _prepare(forest, X, fs, scheme, tree_block, row_block, max_stack)
    pred = None
    for stack, lengths, ok, run_here in p["launches"]:
        part = _predict_call(
            p["trees"],
            lengths,
            ok,
            p["XT"],
            fs,
            n_outputs,
            p["grid"],
            stack,
            _interpret(interpret),
            num_warps,
        )
        part = part.transpose(1, 2, 0)[: p["pop"], : p["n_points"]]
        pred = part if pred is None else jnp.where(run_here[:, None, None], part, pred)
    return pred[0] if p["single"] else pred


def fitness_pallas(
    forest: Any,
    X: Any,
    y: Any,
    function_set: FunctionSet,
    n_outputs: int | None = None,
    metric: str = "mse",
    *,
    scheme: str = "auto",
    tree_block: int | None = None,
    row_block: int | None = None,
    max_stack: int | None = None,
    num_warps: int | None = None,
    interpret: bool | None = None,
    y_is_transposed: bool = False,
) -> jax.Array:
    """Fused fitness with the Pallas kernel (two-stage deterministic reduction).

    Args:
        forest, X, function_set, scheme, tree_block, row_block, max_stack, num_warps, interpret: as
            in :func:`evaluate_pallas`.
        y: targets as in :func:`evotensor.gp.fitness` (``y_is_transposed``: already ``[n_y, n_points]``,
            as :func:`evotensor.gp.fitness` passes them).
        n_outputs: as in :func:`evotensor.gp.fitness`.
        metric: one of :data:`evotensor.gp.metrics.METRICS`.

    Returns:
        ``float32 [pop]`` fitness, identical in meaning to :func:`evotensor.gp.fitness`.
    """
    fs = check_function_set(function_set)
    X = check_X(X)
    num_warps = _check_warps(num_warps)
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
    if y_is_transposed:
        yT = jnp.asarray(y, jnp.float32)
        n_out = check_int(n_outputs, "n_outputs")
        n_y = 1 if metric in ("accuracy", "cross_entropy") else n_out
        if yT.shape != (n_y, X.shape[0]):
            raise ValueError(f"transposed y must have shape {(n_y, X.shape[0])}, got {yT.shape}")
    else:
        yT, n_out = check_y(y, X.shape[0], metric, n_outputs)
    p = _prepare(forest, X, fs, scheme, tree_block, row_block, max_stack)
    pad_r = p["pad_r"]
    # rows padded to whole blocks; regression targets also to a power-of-two output axis (Triton)
    yP = jnp.pad(yT, ((0, _next_pow2(yT.shape[0]) - yT.shape[0]), (0, pad_r)))
    _, rb, _, n_rb = p["grid"]
    valid = (jnp.arange(n_rb * rb) < p["n_points"]).astype(jnp.float32)[None]
    # mse, rmse and r2 share their row terms (they differ in finalize_metric): one compiled kernel
    kernel_metric = "mse" if metric in ("mse", "rmse", "r2") else metric
    term_sum = bad_sum = None
    for stack, lengths, ok, run_here in p["launches"]:
        terms, bads = _fitness_call(
            p["trees"],
            lengths,
            ok,
            p["XT"],
            yP,
            valid,
            fs,
            n_out,
            kernel_metric,
            p["grid"],
            stack,
            _interpret(interpret),
            num_warps,
        )
        terms, bads = terms[: p["pop"]], bads[: p["pop"]]
        term_sum = terms if term_sum is None else jnp.where(run_here, terms, term_sum)
        bad_sum = bads if bad_sum is None else jnp.where(run_here, bads, bad_sum)
    fit = finalize_metric(term_sum, bad_sum, metric, p["n_points"], n_out, total_sum_of_squares(yT))
    return fit[0] if p["single"] else fit
