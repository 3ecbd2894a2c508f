"""Indexing every leaf of a tree: ``t[idx]`` and :func:`evotensor.tree.index`.

An eager ``x[idx]`` on a JAX array runs JAX's Python indexing logic and dispatches one or more
primitives: 50-300 µs of CPU time per leaf here. So the concrete JAX leaves of a tree are indexed
in ONE jitted call for the whole tree (7-9 µs here), as ``stack``/``split`` do. NumPy, PyTorch and
other leaves are indexed directly (no XLA involved), and so is every leaf inside traced code.

The index goes into the call as a static *spec* plus dynamic operands:
- Python/NumPy integers and integer arrays (NumPy or JAX) are dynamic operands, so ``t[i]`` in a
  loop over ``i`` compiles once per tree structure, not once per ``i``. An eager ``x[i]`` and a
  traced one give the same result for every ``i`` (JAX clamps out-of-bounds integers in both;
  checked against the eager path in the tests).
- slices (with integer or None bounds), ``None`` and ``...`` are static, so each distinct slice
  compiles once per tree structure (an eager slice also compiles per distinct bounds).
- anything else (booleans, boolean masks, lists, tracers, floats) is indexed leaf by leaf with
  the original index, exactly as before.
If the one call raises (e.g. too many indices for one leaf), the JAX leaves are indexed again one
by one: the error then carries a note naming the leaf path, and a call that only the batched form
rejects (e.g. an integer beyond int32 range) still gets the eager result.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np

from evotensor.tree import constraints as _c
from evotensor.tree.tree import Tree, _set_cons, annotate

__all__ = ["index_leaves"]

_new = object.__new__

# static spec items (operands are taken in order for "int" and "array")
_INT, _ARRAY, _NEWAXIS, _ELLIPSIS = "int", "array", "newaxis", "ellipsis"

# type -> True for concrete JAX arrays (batched), False for anything else (indexed directly).
# Decided once per type: `isinstance(x, jax.Array)` goes through an ABC check on every call.
_BATCHED: dict[type, bool] = {}


def _is_batched_type(tp: type, value: Any) -> bool:
    b = _BATCHED.get(tp)
    if b is None:
        b = _BATCHED[tp] = isinstance(value, jax.Array) and not isinstance(value, jax.core.Tracer)
    return b


def _bound(b: Any) -> Any:
    """A slice bound for the static spec: None or a Python int; ``_NOT_STATIC`` otherwise."""
    if b is None or type(b) is int:
        return b
    if isinstance(b, int | np.integer) and not isinstance(b, bool):
        return int(b)
    return _NOT_STATIC


_NOT_STATIC = object()


def _plan(index: Any) -> tuple[tuple, list] | None:
    """``(static spec, dynamic operands)`` of ``index``, or None when it must go leaf by leaf."""
    items = index if type(index) is tuple else (index,)
    spec: list = []
    operands: list = []
    for it in items:
        tp = type(it)
        if tp is int or (tp is not bool and isinstance(it, np.integer)):
            spec.append(_INT)
            operands.append(int(it))
        elif tp is slice:
            bounds = (_bound(it.start), _bound(it.stop), _bound(it.step))
            if _NOT_STATIC in bounds:
                return None
            spec.append(("slice", *bounds))
        elif it is None:
            spec.append(_NEWAXIS)
        elif it is Ellipsis:
            spec.append(_ELLIPSIS)
        elif isinstance(it, np.ndarray) or _is_batched_type(tp, it):
            if it.dtype.kind not in "iu":
                return None  # boolean masks give data-dependent shapes: eager only
            spec.append(_ARRAY)
            operands.append(it)
        else:
            return None
    return tuple(spec), operands


def _rebuild(spec: tuple, operands: list) -> tuple:
    """The index for one trace: static items from ``spec``, dynamic ones from ``operands``."""
    out = []
    it = iter(operands)
    for s in spec:
        if s == _INT or s == _ARRAY:
            out.append(next(it))
        elif s == _NEWAXIS:
            out.append(None)
        elif s == _ELLIPSIS:
            out.append(Ellipsis)
        else:
            out.append(slice(*s[1:]))
    return tuple(out)


# Small integers as ready-made device scalars: a Python int operand is converted to a device
# array on every call (~2 µs here, a quarter of the whole call); a cached scalar is not. Made
# lazily, outside traces only (inside one, device_put would give a tracer, which must not leak).
_INT_OPERANDS: dict[int, jax.Array] = {}
_CACHED_INTS = range(-1024, 1024)
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def _device_operands(operands: list) -> list:
    out = []
    for op in operands:
        if type(op) is int and _INT32_MIN <= op <= _INT32_MAX:
            arr = _INT_OPERANDS.get(op)
            if arr is None:
                # an int32 device scalar like the cached ones: the same compiled program
                arr = jax.device_put(np.int32(op))
                if isinstance(arr, jax.core.Tracer):
                    arr = np.int32(op)
                elif op in _CACHED_INTS:
                    _INT_OPERANDS[op] = arr
            op = arr
        out.append(op)
    return out


@functools.partial(jax.jit, static_argnums=2)
def _jit_index(leaves: list, operands: list, spec: tuple) -> list:
    idx = _rebuild(spec, operands)
    return [x[idx] for x in leaves]


def index_leaves(node: Tree, index: Any) -> Tree:
    """``leaf[index]`` for every leaf; dtype/device/ndim/shape-prefix constraints are derived.

    Concrete JAX leaves are indexed in one jitted call (see the module docstring); the result is
    the same as indexing each leaf eagerly.
    """
    leaves: list = []
    slots: list[tuple[dict, str, tuple[str, ...]]] = []
    out = _walk(node, index, (), leaves, slots)
    if leaves:  # planned only now: trees without JAX leaves pay nothing for it
        plan = _plan(index)
        if plan is None:
            results = _one_by_one(leaves, slots, index)
        else:
            spec, operands = plan
            try:
                results = _jit_index(leaves, _device_operands(operands), spec)
            except Exception:
                results = _one_by_one(leaves, slots, index)
        for (d, k, _), r in zip(slots, results):
            d[k] = r
    return out


def _walk(node: Tree, index: Any, path: tuple[str, ...], leaves: list, slots: list) -> Tree:
    """The result skeleton: non-JAX leaves indexed now, JAX leaves collected with their slots."""
    out = _new(type(node))
    cons: tuple = ()
    if node._cons:
        derived = []
        for a in node._cons:
            c = a.constraint.after_index(index)
            if c is not None:
                derived.append(_c.Attached(c, a.where))
        cons = tuple(derived)
    _set_cons(out, cons)
    d = out.__dict__
    batched = _BATCHED.get
    for k, v in node.__dict__.items():
        tp = type(v)
        b = batched(tp)
        if b is None:
            b = False if issubclass(tp, Tree) else _is_batched_type(tp, v)
        if b:
            d[k] = None  # placeholder keeps the sorted key order
            leaves.append(v)
            slots.append((d, k, path))
        elif issubclass(tp, Tree):
            d[k] = _walk(v, index, path + (k,), leaves, slots)
        else:
            try:
                d[k] = v[index]
            except Exception as exc:
                annotate(exc, path + (k,), v)
                raise
    return out


def _one_by_one(leaves: list, slots: list, index: Any) -> list:
    """Index the JAX leaves eagerly, one by one: an error names the leaf path."""
    results = []
    for x, (_, k, path) in zip(leaves, slots):
        try:
            results.append(x[index])
        except Exception as exc:
            annotate(exc, path + (k,), x)
            raise
    return results
