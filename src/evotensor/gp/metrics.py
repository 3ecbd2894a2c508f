"""Fitness metrics of GP forests and the argument checks every evaluation path shares.

Every backend (:mod:`evotensor.gp.jax_evaluator`, :mod:`evotensor.gp.native`,
:mod:`evotensor.gp.pallas_kernel`) reduces per-row terms (:func:`row_terms`) to per-tree sums and
turns them into the metric with :func:`finalize_metric`, so the metric semantics are defined once,
here. The checks (:func:`forest_fields`, :func:`check_function_set`, :func:`check_X`,
:func:`check_y`, :func:`check_finite_data`, :func:`check_evaluation_size`, and
:func:`tree_validity` / :func:`first_invalid_tree` for malformed trees) turn user input into the
arrays the backends take; a failed check raises :class:`evotensor.core.checks.ArgumentError` (a
``ValueError`` and a ``TypeError``).

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

import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core.checks import ArgumentError, check_choice, check_int
from evotensor.gp.functions import CONST, PAD, VAR, FunctionSet, table_lookup

__all__ = [
    "CLASSIFICATION_METRICS",
    "MAXIMIZED_METRICS",
    "METRICS",
    "check_X",
    "check_evaluation_size",
    "check_finite_data",
    "check_function_set",
    "check_y",
    "describe_invalid_tree",
    "finalize_metric",
    "first_invalid_tree",
    "forest_fields",
    "is_concrete",
    "memory_limit",
    "tree_validity",
    "metric_from_predictions",
    "row_terms",
    "total_sum_of_squares",
]

METRICS = ("mse", "rmse", "r2", "accuracy", "cross_entropy")
MAXIMIZED_METRICS = frozenset({"r2", "accuracy"})
CLASSIFICATION_METRICS = frozenset({"accuracy", "cross_entropy"})
"""The metrics whose targets are integer class labels ``[n_points]``."""


# ---- argument checks -------------------------------------------------------------------------------


def forest_fields(forest: Any) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array, bool]:
    """The four forest arrays and whether the input was a single tree.

    Args:
        forest: anything with fields ``opcode, value, size, output`` of one shape ``[pop, max_len]``
            (or ``[max_len]``: one tree). ``opcode``, ``size`` and ``output`` must have an integer
            dtype (a float opcode is refused, not rounded), ``value`` a real one.

    Returns:
        ``(opcode int32, value float32, size int32, output int32, single)``, each array
        ``[pop, max_len]`` (``pop = 1`` for a single tree).
    """
    arrays = []
    for name in ("opcode", "value", "size", "output"):
        if not hasattr(forest, name):
            raise ArgumentError(f"forest has no field {name!r} (expected opcode, value, size, output)")
        a = getattr(forest, name)
        if not isinstance(a, (jax.Array, np.ndarray)):
            a = np.asarray(a)
        kind = np.dtype(a.dtype).kind
        if name == "value" and kind not in "iuf":
            raise ArgumentError(f"forest.value must be a real (float or int) array, got dtype {a.dtype}")
        if name != "value" and kind not in "iu":
            raise ArgumentError(
                f"forest.{name} must be an integer array, got dtype {a.dtype} (values are not rounded: "
                f"cast it with .astype(int32) if it holds whole numbers)"
            )
        arrays.append(a)
    shape = tuple(arrays[0].shape)
    if any(tuple(a.shape) != shape for a in arrays) or len(shape) not in (1, 2):
        raise ArgumentError(
            "forest fields opcode, value, size, output must share one shape [pop, max_len] or [max_len], "
            f"got {[tuple(a.shape) for a in arrays]}"
        )
    single = len(shape) == 1
    pop, max_len = (1, shape[0]) if single else shape
    if pop < 1 or max_len < 1:
        raise ArgumentError(f"forest must have at least one tree and max_len >= 1, got shape {shape}")
    if max_len > _MAX_INT32:
        raise ArgumentError(f"forest max_len={max_len} is over 2**31 - 1 slots")
    if not any(isinstance(a, jax.Array) for a in arrays):
        # host arrays are converted in NumPy and put on the device once: the same conversions as jnp
        # ops, without a program compiled for each in a fresh process
        host = [a[None] if single else a for a in (np.asarray(a) for a in arrays)]
        opcode, value, size, output = host
        fields = (_to_int32(opcode), value.astype(np.float32), _to_int32(size), _to_int32(output))
        return (*jax.device_put(fields), single)
    opcode, value, size, output = (jnp.asarray(a) for a in arrays)
    if single:
        opcode, value, size, output = (a[None] for a in (opcode, value, size, output))
    return (
        _to_int32(opcode),
        value.astype(jnp.float32),
        _to_int32(size),
        _to_int32(output),
        single,
    )


_MAX_INT32 = 2**31 - 1


def _to_int32(a: Any) -> Any:
    """An integer array (JAX or NumPy: the result is of the same kind) as int32, values outside int32
    clamped (not wrapped) so that a huge size or opcode stays out of range instead of turning into a
    valid one."""
    if a.dtype == jnp.int32:
        return a
    xp = np if isinstance(a, np.ndarray) else jnp
    info = np.iinfo(a.dtype)
    if info.min < -_MAX_INT32 - 1 or info.max > _MAX_INT32:
        a = xp.clip(a, -_MAX_INT32 - 1, _MAX_INT32)
    return a.astype(np.int32)


def is_concrete(*arrays: Any) -> bool:
    """Whether none of ``arrays`` is traced (their values can be read on the host now)."""
    return not any(isinstance(a, jax.core.Tracer) for a in arrays)


# ---- malformed trees -------------------------------------------------------------------------------


def tree_validity(opcode: Any, value: Any, size: Any, arity: np.ndarray, n_vars: int, xp: Any = jnp) -> Any:
    """Which trees every evaluation path can run: ``bool [pop]`` (``xp``: ``jnp``, also traced, or ``np``).

    A tree ``[max_len]`` is valid when ``1 <= size[0] <= max_len``; its first ``size[0]`` opcodes are
    known non-``PAD`` opcodes that form exactly one prefix tree (by the arities) and every slot after
    it is ``PAD``; every ``size[i]`` of the tree is its subtree's node count; and every ``VAR`` node's
    value is a whole number in ``[0, n_vars)``. Constants and ``output`` indices are not checked
    (non-finite constants compute as they are; out-of-range outputs contribute nothing, see
    :mod:`evotensor.gp.reference`). ``O(pop * max_len)``.

    Sizes are checked locally (``size[i] = 1 + sum of the children's sizes``, children found
    through the sizes); with a valid opcode sequence that implies every size is right (by induction
    from the last node).
    """
    pop, L = xp.shape(opcode)
    # int32 is wide enough once sizes are clipped to [-1, L + 1] (an out-of-range size stays out of
    # range, so it still fails the check below); sums stay below 4 * L + 4
    wide = np.int64 if L >= 2**28 else np.int32
    opcode = xp.asarray(opcode).astype(wide)
    size = xp.clip(xp.asarray(size).astype(wide), -1, L + 1)
    value = xp.asarray(value)
    n_op = len(arity)
    pos = xp.arange(L)[None, :]
    n = size[:, :1]
    length_ok = (n[:, 0] >= 1) & (n[:, 0] <= L)
    inside = pos < n
    known = (opcode >= CONST) & (opcode < n_op)
    opcodes_ok = xp.all(xp.where(inside, known, opcode == PAD), axis=1)
    table = np.asarray(arity, np.int32)
    at = xp.where(known, opcode, 0)
    ar = (table[at] if xp is np else table_lookup(table, at)).astype(wide)  # jnp: no gather
    # prefix order: with c_i = sum_{j <= i} (arity_j - 1), a tree of n nodes has c_i >= 0 for
    # i < n - 1 (a child is still pending) and c_{n-1} = -1 (nothing is)
    c = xp.cumsum(xp.where(inside, ar - 1, 0), axis=1)
    last = pos == n - 1
    sequence_ok = xp.all(xp.where(inside & ~last, c >= 0, True), axis=1) & xp.any(last & (c == -1), axis=1)
    # sizes: children at i + 1, then + size of the previous child (positions clipped into [0, L])
    padded = xp.concatenate([xp.clip(size, 0, L), xp.zeros((pop, 1), size.dtype)], axis=1)

    def size_at(p):
        return xp.take_along_axis(padded, p, axis=1)

    # the first child is at i + 1 (<= L), its size a shifted slice, not a gather; the later children
    # are gathered only when the function set has functions of that arity (otherwise their term is 0)
    max_arity = int(np.max(arity)) if len(arity) else 0
    c1 = xp.minimum(xp.broadcast_to(pos + 1, (pop, L)), L)
    s1 = padded[:, 1:]
    expected = 1 + xp.where(ar >= 1, s1, 0)
    if max_arity >= 2:
        c2 = xp.minimum(c1 + s1, L)
        s2 = size_at(c2)
        expected = expected + xp.where(ar >= 2, s2, 0)
        if max_arity >= 3:
            c3 = xp.minimum(c2 + s2, L)
            expected = expected + xp.where(ar >= 3, size_at(c3), 0)
    sizes_ok = xp.all(xp.where(inside, size == expected, True), axis=1)
    is_var = inside & (opcode == VAR)
    whole = (value == xp.floor(value)) & (value >= 0) & (value < n_vars)
    vars_ok = xp.all(xp.where(is_var, whole, True), axis=1)
    return length_ok & opcodes_ok & sequence_ok & sizes_ok & vars_ok


def describe_invalid_tree(opcode: Any, value: Any, size: Any, arity: np.ndarray, n_vars: int) -> str:
    """Why one tree (NumPy rows ``[max_len]``) fails :func:`tree_validity`: a short reason naming
    the position (``""`` if it is valid)."""
    opcode, value, size = (np.asarray(a) for a in (opcode, value, size))
    L, n_op = opcode.shape[0], len(arity)
    n = int(size[0])
    if not 1 <= n <= L:
        return f"its length size[0]={n} is outside [1, max_len={L}]"
    for i in range(L):
        o = int(opcode[i])
        if i < n and not CONST <= o < n_op:
            what = "PAD" if o == PAD else "not in the function set"
            return f"position {i}: opcode {o} is {what} inside the tree"
        if i >= n and o != PAD:
            return (
                f"position {i}: opcode {o} after the tree's last node (size[0]={n}); padding must be PAD (0)"
            )
    pending = 1
    for i in range(n):
        if pending == 0:
            return f"the nodes before position {i} already form a whole tree, but size[0]={n}"
        pending += int(arity[opcode[i]]) - 1
    if pending > 0:
        return f"the tree of size[0]={n} nodes ends while {pending} child(ren) are still missing"
    stack: list[int] = []
    true = np.zeros(n, np.int64)
    for i in range(n - 1, -1, -1):
        a = int(arity[opcode[i]])
        true[i] = 1 + sum(stack[len(stack) - a :]) if a else 1
        del stack[len(stack) - a :]
        stack.append(int(true[i]))
    for i in range(n):
        if int(size[i]) != true[i]:
            return f"position {i}: size {int(size[i])} but its subtree has {int(true[i])} nodes"
    for i in range(n):
        if int(opcode[i]) == VAR:
            v = float(value[i])
            if not (v == np.floor(v) and 0 <= v < n_vars):
                return f"position {i}: variable index {v} is not a whole number in [0, n_vars={n_vars})"
    return ""


def first_invalid_tree(arrays: tuple, fs: FunctionSet, n_vars: int) -> str | None:
    """For concrete forest arrays ``(opcode, value, size, output)`` ``[pop, max_len]``: ``None`` if
    every tree is valid (:func:`tree_validity`), else a message naming the first invalid tree."""
    opcode, value, size = (np.asarray(a) for a in arrays[:3])
    pop, L = opcode.shape
    step = max(1, 2**20 // L)  # trees per check: bounded temporaries for any forest
    valid = np.concatenate(
        [
            tree_validity(opcode[i : i + step], value[i : i + step], size[i : i + step], fs.arity, n_vars, np)
            for i in range(0, pop, step)
        ]
    )
    if valid.all():
        return None
    bad = np.flatnonzero(~valid)
    t = int(bad[0])
    reason = describe_invalid_tree(opcode[t], value[t], size[t], fs.arity, n_vars)
    more = f" ({len(bad)} malformed trees in all)" if len(bad) > 1 else ""
    return f"forest tree {t} is malformed: {reason}{more}; Forest.check(function_set, n_vars) lists the rules"


# ---- sizes ---------------------------------------------------------------------------------------------

ROWS_PER_CHUNK = 256
"""Rows a backend works on at once (the native evaluator's chunk, the JAX path's default row block)."""


def memory_limit() -> int:
    """Bytes one GP evaluation may need before it is refused up front: the environment variable
    ``EVOTENSOR_GP_MEMORY_LIMIT`` (bytes) when set, else the machine's physical memory."""
    env = os.environ.get("EVOTENSOR_GP_MEMORY_LIMIT", "").strip()
    if env:
        try:
            return int(float(env))
        except ValueError:
            raise ArgumentError(f"EVOTENSOR_GP_MEMORY_LIMIT must be a number of bytes, got {env!r}") from None
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):  # pragma: no cover - not POSIX
        return 2**36


def check_evaluation_size(pop: int, max_len: int, n_points: int, n_outputs: int, materialize: bool) -> None:
    """Refuse an evaluation whose memory would exceed :func:`memory_limit`, naming the argument.

    The estimate: the predictions ``[pop, n_points, n_outputs]`` float32 (``materialize``, i.e.
    :func:`evotensor.gp.evaluate`; the fused fitness never builds them), plus the working memory of
    the trees evaluated at once (one per CPU thread, at least 8: ``max_len`` node values and
    ``2 * n_outputs`` output values of :data:`ROWS_PER_CHUNK` rows each, float32). Raises
    :class:`ArgumentError` naming ``n_outputs``, ``max_len`` or the data, with the bytes needed.
    """
    in_flight = max(os.cpu_count() or 1, 8)
    chunk = ROWS_PER_CHUNK * 4 * in_flight  # the native evaluator works on whole chunks
    parts = {
        "max_len": (max_len + 1) * chunk,
        "n_outputs": 2 * n_outputs * chunk,
        "predictions": pop * n_points * n_outputs * 4 if materialize else 0,
    }
    need, limit = sum(parts.values()), memory_limit()
    if need <= limit:
        return
    culprit = max(parts, key=parts.get)
    gib = lambda b: f"{b / 2**30:.3g} GiB"  # noqa: E731
    if culprit == "predictions":
        what = (
            f"n_outputs={n_outputs} with the data's n_points={n_points} and pop={pop}: the predictions "
            f"[pop, n_points, n_outputs] need {gib(parts['predictions'])}"
        )
        name = "n_outputs" if n_outputs > 1 else "X (n_points)"
    else:
        name = culprit
        value = max_len if culprit == "max_len" else n_outputs
        what = f"{culprit}={value} needs {gib(parts[culprit])} of working memory"
    raise ArgumentError(
        f"{name} too large for one GP evaluation: {what} ({gib(need)} in all), over the limit of "
        f"{gib(limit)} (evotensor.gp.metrics.memory_limit(): the physical memory, or "
        "EVOTENSOR_GP_MEMORY_LIMIT bytes)"
    )


def check_function_set(function_set: Any) -> FunctionSet:
    """``function_set`` if it is a :class:`FunctionSet`."""
    if not isinstance(function_set, FunctionSet):
        raise ArgumentError(f"function_set must be a FunctionSet, got {type(function_set).__name__}")
    return function_set


def check_X(X: Any) -> jax.Array:
    """``X`` as float32 ``[n_points >= 1, n_vars >= 1]`` (host data put on the device as it is: an
    eager ``jnp.asarray`` compiles a program in a fresh process)."""
    X = jnp.asarray(X, jnp.float32) if isinstance(X, jax.Array) else jax.device_put(np.asarray(X, np.float32))
    if X.ndim != 2 or X.shape[0] < 1 or X.shape[1] < 1:
        raise ArgumentError(f"X must be [n_points >= 1, n_vars >= 1], got shape {X.shape}")
    return X


def check_finite_data(a: Any, name: str) -> None:
    """Refuse NaN or inf in data ``a`` (``[n_points]`` or ``[n_points, k]``, concrete), naming the row and
    column of the first one. Traced data is not checked."""
    if not is_concrete(a):
        return
    host = np.asarray(a)  # NumPy: inside a trace, jnp on a concrete array would give a tracer
    if np.isfinite(host).all():
        return
    bad = np.argwhere(~np.isfinite(host))
    where = bad[0]
    at = f"row {where[0]}" + (f", column {where[1]}" if host.ndim > 1 else "")
    raise ArgumentError(
        f"{name} must be finite, but {name}[{', '.join(str(int(i)) for i in where)}] = {host[tuple(where)]} "
        f"({at}; {len(bad)} non-finite value(s) in all): a non-finite target or input makes every tree's "
        "fitness the worst value"
    )


def check_y(y: Any, n_points: int, metric: str, n_outputs: int | None) -> tuple[jax.Array, int]:
    """Targets for ``metric`` on ``n_points`` rows, transposed for the backends.

    Args:
        y: regression targets ``[n_points]`` / ``[n_points, n_outputs]``, or class labels
            ``[n_points]`` in ``{0..max(n_outputs, 2) - 1}`` for the classification metrics (checked
            unless traced).
        n_points: rows of ``X``.
        metric: one of :data:`METRICS`.
        n_outputs: outputs per tree (``None``: inferred from ``y``; 1 for class labels).

    Returns:
        ``(yt, n_outputs)``: ``yt`` float32 ``[n_y, n_points]`` (``n_y = n_outputs`` for regression, 1
        for class labels).
    """
    check_choice(metric, "metric", METRICS)
    # host data stays in NumPy, then is put on the device as it is: an eager jnp op (jnp.asarray
    # included) compiles a program in a fresh process (the estimators' first fit)
    host = not isinstance(y, jax.Array)
    y = np.asarray(y, np.float32) if host else jnp.asarray(y, jnp.float32)
    if y.ndim == 0 or y.shape[0] != n_points or y.ndim > 2:
        raise ArgumentError(f"y must be [n_points={n_points}] or [n_points, n_outputs], got shape {y.shape}")
    if metric in CLASSIFICATION_METRICS:
        if y.ndim != 1:
            raise ArgumentError(
                f"metric {metric!r} needs integer class labels y [n_points], got shape {y.shape}"
            )
        n_out = 1 if n_outputs is None else check_int(n_outputs, "n_outputs")
        if not isinstance(y, jax.core.Tracer):  # traced labels cannot be checked here
            labels = np.asarray(y)
            n_classes = max(n_out, 2)
            if not np.all((labels == np.round(labels)) & (labels >= 0) & (labels < n_classes)):
                raise ArgumentError(
                    f"y must hold integer class labels in 0..{n_classes - 1} for metric {metric!r} with "
                    f"n_outputs={n_out}, got values {np.unique(labels)[:8]}"
                )
        yt = y[None]
    else:
        n_out = 1 if y.ndim == 1 else y.shape[1]
        if n_outputs is not None and check_int(n_outputs, "n_outputs") != n_out:
            raise ArgumentError(f"n_outputs={n_outputs} but y has {n_out} output column(s)")
        yt = y[None] if y.ndim == 1 else y.T
    return (jax.device_put(yt) if host else yt), n_out


# ---- metric definitions -------------------------------------------------------------------------------


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
    """Turn per-tree sums of :func:`row_terms` into the metric (non-finite -> worst, see module doc).

    Args:
        term_sum, bad_sum: float32 ``[pop]`` sums over the rows of ``term`` and ``bad``.
        metric: one of :data:`METRICS`.
        n_points, n_outputs: rows and outputs the sums ran over.
        sst: ``[]`` :func:`total_sum_of_squares` of the targets (used by ``"r2"`` only).

    Returns:
        float32 ``[pop]`` in natural orientation.
    """
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
    """``SST`` of targets ``[n_y, n_points]`` (per-output means, summed): the R^2 denominator, ``[]``."""
    return jnp.sum(jnp.square(y - jnp.mean(y, axis=1, keepdims=True)))


def metric_from_predictions(pred: Any, y: Any, metric: str = "mse") -> jax.Array:
    """The same fitness as :func:`evotensor.gp.fitness`, computed from materialized predictions.

    Args:
        pred: ``[pop, n_points, n_outputs]`` (e.g. from :func:`evotensor.gp.evaluate`).
        y: ``[n_points]`` or ``[n_points, n_outputs]`` targets / ``[n_points]`` class labels.
        metric: one of :data:`METRICS`.

    Returns:
        ``float32 [pop]``.
    """
    pred = jnp.asarray(pred, jnp.float32)
    if pred.ndim != 3:
        raise ArgumentError(f"pred must be [pop, n_points, n_outputs], got shape {pred.shape}")
    yt, n_out = check_y(y, pred.shape[1], metric, pred.shape[2])
    term, bad = row_terms(jnp.moveaxis(pred, 2, 0), yt, metric)
    return finalize_metric(term.sum(-1), bad.sum(-1), metric, pred.shape[1], n_out, total_sum_of_squares(yt))
