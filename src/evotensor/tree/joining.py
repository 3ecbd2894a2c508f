"""Joining trees along an axis and splitting them again: stack, concatenate, split.

Leaf by leaf, each leaf joined or split with its own library (JAX, NumPy or PyTorch); all the JAX
leaves of a tree go through one compiled call. With the optional compiled core
(``evotensor.tree._speedups``) the walk over the trees is C in the plain case (see the comment
above ``_join_columns``); otherwise, and for every error naming a path, the Python walk runs.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.tree import constraints as _c
from evotensor.tree._core import (
    _BACKEND_CACHE,
    _JAX_TYPES,
    Tree,
    _backend_of,
    _empty,
    _new,
    _require_tree,
    _set_cons,
    _sp,
    annotate,
)

__all__ = ["concatenate", "split", "stack"]

# JAX leaves: ONE compiled call per tree operation, for all the JAX leaves of the tree at once.
# A jitted call has a fixed dispatch cost plus a small cost per input array, so one call per leaf
# paid the fixed part once per leaf; inside one call it is paid once (faster than per-leaf
# dispatch at every count measured: see benchmarks/results_tree.md). Compiled once per (group
# sizes, shapes, dtypes, axis) and cached by jit: the same number of compilations as one call per
# leaf for a given tree structure, only larger programs.
# Exception: a leaf whose data is large (>= _OWN_CALL_BYTES in or out) gets a call of its own:
# a large leaf in the same program as small ones was slower than two calls (the large leaf alone,
# the small ones together), while below that size one program was as fast or faster (figures in
# benchmarks/results_tree.md).
_OWN_CALL_BYTES = 1 << 20


def _nbytes(x: Any) -> int:
    return x.size * x.dtype.itemsize  # also for tracers (no .nbytes there)


def _calls(nbytes: list[int]) -> list[list[int]]:
    """Leaf indices per compiled call: each large leaf alone, then all the small ones together."""
    small = [i for i, b in enumerate(nbytes) if b < _OWN_CALL_BYTES]
    if len(small) == len(nbytes):
        return [small]
    calls = [[i] for i, b in enumerate(nbytes) if b >= _OWN_CALL_BYTES]
    return [*calls, small] if small else calls


@functools.partial(jax.jit, static_argnums=1)
def _jit_stack_groups(groups: list[list], axis: int) -> list:
    return [jnp.stack(g, axis=axis) for g in groups]


@functools.partial(jax.jit, static_argnums=1)
def _jit_concat_groups(groups: list[list], axis: int) -> list:
    return [jnp.concatenate(g, axis=axis) for g in groups]


@functools.partial(jax.jit, static_argnums=(1, 2))
def _jit_split_leaves(xs: list, cuts: tuple[tuple[int, ...], ...], axes: tuple[int, ...]) -> list:
    return [jnp.split(x, c, axis=a) for x, c, a in zip(xs, cuts, axes)]


def _as_jax(values: list) -> list:
    return [v if isinstance(v, jax.Array) else jnp.asarray(v) for v in values]


def _group_backend(values: list, types: set) -> tuple[str, bool]:
    """Backend of a group of leaves to join (``types``: the set of their types), and whether every
    leaf is already a JAX value. Decided per distinct type, not per value: 256 leaves of one type
    cost one cache lookup.
    """
    kinds = set()
    for tp in types:
        b = _BACKEND_CACHE.get(tp)
        if b is None:
            b = _backend_of(next(v for v in values if type(v) is tp))
        kinds.add(b)
    if "torch" in kinds:
        return "torch", False
    if "jax" in kinds:
        return "jax", len(kinds) == 1
    return "numpy", False


def _host_join(kind: str, backend: str, values: list, axis: int) -> Any:
    """Join one group of NumPy or PyTorch leaves with their own library (no XLA dispatch)."""
    if backend == "torch":
        import torch

        return torch.stack(values, dim=axis) if kind == "stack" else torch.cat(values, dim=axis)
    return np.stack(values, axis=axis) if kind == "stack" else np.concatenate(values, axis=axis)


def _joined_constraints(trees: Sequence[Tree], kind: str, axis: int) -> tuple:
    """Constraints of a stack/concatenate result node: derived only when every input agrees."""
    cons = trees[0]._cons
    if not cons or any(t._cons != cons for t in trees[1:]):
        return ()
    out = []
    for a in cons:
        c = a.constraint.after_join(kind, len(trees), axis)
        if c is not None:
            out.append(_c.Attached(c, a.where))
    return tuple(out)


_dict_of = operator.attrgetter("__dict__")


def _collect_join(
    trees: list, path: tuple[str, ...], kind: str, axis: int, groups: list, slots: list
) -> Tree:
    """The result skeleton of joining the nodes ``trees`` (checked to have equal key sets).

    Leaves of one host library (NumPy, PyTorch) are joined at once. Any other leaf position gets a
    placeholder in the result (keeping the sorted key order); its N input leaves go to ``groups``
    (with their backend) and ``(result dict, key, node path)`` to ``slots``, to be joined
    afterwards, all JAX groups in one compiled call. The checks run over all N trees at C speed
    (``map``/``set``): equal key counts plus every key of ``trees[0]`` found in each node means
    equal key sets, and as keys are kept sorted, equal key orders. Slow loops only run to name the
    offending tree in an error.
    """
    dicts = list(map(_dict_of, trees))
    keys = tuple(dicts[0])
    if len(set(map(len, dicts))) != 1:
        _raise_key_mismatch(dicts, keys, path)
    first = trees[0]
    out = _new(type(first))
    _set_cons(out, _joined_constraints(trees, kind, axis) if first._cons else ())
    d = out.__dict__
    for k in keys:
        try:
            vals = list(map(operator.itemgetter(k), dicts))
        except KeyError:
            _raise_key_mismatch(dicts, keys, path)
        types = set(map(type, vals))
        if len(types) == 1:  # the common case, without building lists
            (tp,) = types
            if issubclass(tp, Tree):
                d[k] = _collect_join(vals, path + (k,), kind, axis, groups, slots)
                continue
            backend = _BACKEND_CACHE.get(tp)
            if backend == "jax":
                group = (vals, ("jax", True))
            elif backend is not None:  # one host library: join now (nothing to batch)
                try:
                    d[k] = _host_join(kind, backend, vals, axis)
                except Exception as exc:
                    annotate(exc, path + (k,), vals[0])
                    raise
                continue
            else:
                group = (vals, _group_backend(vals, types))
        else:
            subtrees = [tp for tp in types if issubclass(tp, Tree)]
            if subtrees:
                if len(subtrees) != len(types):
                    i = next(i for i, v in enumerate(vals) if not isinstance(v, Tree))
                    raise TypeError(
                        f"trees[{i}] is a {type(vals[i]).__name__} at {_c.format_path(path + (k,))}, "
                        "expected a Tree"
                    )
                d[k] = _collect_join(vals, path + (k,), kind, axis, groups, slots)
                continue
            group = (vals, _group_backend(vals, types))
        d[k] = None  # placeholder: filled once every group is joined
        groups.append(group)
        slots.append((d, k, path))
    return out


def _raise_key_mismatch(dicts: list, keys: tuple, path: tuple[str, ...]) -> None:
    i = next(i for i, d in enumerate(dicts) if tuple(d) != keys)
    raise KeyError(
        f"key sets differ at {_c.format_path(path)}: trees[0] has {list(keys)}, trees[{i}] has "
        f"{list(dicts[i])}"
    )


# The compiled walks (None without the extension). They only take the plain case: unconstrained
# nodes and equal key sets; then the operation is one C walk collecting the leaves, the joins or
# splits (all-JAX trees: straight to the jitted call; otherwise leaf by leaf with the decisions of
# the Python walk) and one C rebuild. Anything else, and any error on the way, goes to the Python
# walk below (the reference), which derives constraints and raises the errors naming paths.
# Re-running it after an error is safe: joining and splitting have no side effects.
_join_columns = _sp.join_columns if _sp is not None else None
_plain_leaves = _sp.plain_leaves if _sp is not None else None
_build_tree = _sp.build if _sp is not None else None
_build_pieces = _sp.build_pieces if _sp is not None else None


def _join(trees: Any, kind: str, axis: int, fname: str) -> Tree:
    """:func:`stack` (``kind='stack'``) or :func:`concatenate` (``kind='concat'``)."""
    trees = _check_trees(trees, fname)
    if _join_columns is not None:
        plain = _join_columns(Tree, trees, _JAX_TYPES)
        if plain is not None and plain[0]:
            cols, nbytes = plain
            try:
                if nbytes is not None and max(nbytes) < _OWN_CALL_BYTES:  # the common case: one call
                    joined = (_jit_stack_groups if kind == "stack" else _jit_concat_groups)(cols, axis)
                else:
                    joined = _join_columns_py(cols, kind, axis)
            except Exception:
                pass  # the Python walk raises it again, naming the leaf path
            else:
                return _build_tree(Tree, trees[0], joined)
    return _join_reference(trees, kind, axis, fname)


def _join_columns_py(cols: list, kind: str, axis: int) -> list:
    """The joined value of each leaf column (N leaves each): host columns with their library, JAX
    columns in as few compiled calls as :func:`_calls` allows; the decisions of the Python walk."""
    out = list(cols)
    jax_idx = []
    for i, vals in enumerate(cols):
        types = set(map(type, vals))
        backend = _BACKEND_CACHE.get(next(iter(types))) if len(types) == 1 else None
        pure = True
        if backend is None:
            backend, pure = _group_backend(vals, types)
        if backend == "jax":
            jax_idx.append(i)
            if not pure:
                out[i] = _as_jax(vals)
        else:
            out[i] = _host_join(kind, backend, vals, axis)
    if jax_idx:
        fn = _jit_stack_groups if kind == "stack" else _jit_concat_groups
        groups = [out[i] for i in jax_idx]
        for idx in _calls([len(g) * _nbytes(g[0]) for g in groups]):
            for i, v in zip(idx, fn([groups[i] for i in idx], axis)):
                out[jax_idx[i]] = v
    return out


def _join_reference(trees: list, kind: str, axis: int, fname: str) -> Tree:
    """:func:`_join` by the Python walk: every case (constraints, host leaves, errors naming paths)."""
    groups: list[list] = []
    slots: list[tuple[dict, str, tuple[str, ...]]] = []
    for tp in set(map(type, trees)):
        if not issubclass(tp, Tree):
            i = next(i for i, t in enumerate(trees) if type(t) is tp)
            raise TypeError(f"{fname}: trees[{i}] is a {tp.__name__}, expected a Tree")
    out = _collect_join(trees, (), kind, axis, groups, slots)
    jax_groups: list[list] = []
    jax_slots: list[tuple[dict, str, tuple[str, ...]]] = []
    for (vals, (backend, pure)), slot in zip(groups, slots):
        if backend == "jax":
            jax_groups.append(vals if pure else _as_jax(vals))
            jax_slots.append(slot)
            continue
        try:
            slot[0][slot[1]] = _host_join(kind, backend, vals, axis)
        except Exception as exc:
            annotate(exc, (*slot[2], slot[1]), vals[0])
            raise
    if jax_groups:
        fn = _jit_stack_groups if kind == "stack" else _jit_concat_groups
        for idx in _calls([len(g) * _nbytes(g[0]) for g in jax_groups]):
            try:
                joined = fn([jax_groups[i] for i in idx], axis)
            except Exception:
                _raise_for_leaf(kind, [jax_groups[i] for i in idx], [jax_slots[i] for i in idx], axis)
                raise
            for i, v in zip(idx, joined):
                d, k, _ = jax_slots[i]
                d[k] = v
    return out


def _raise_for_leaf(kind: str, groups: list, slots: list, axis: int) -> None:
    """After the all-leaves call failed: join leaf by leaf to raise the error naming its path."""
    op = jnp.stack if kind == "stack" else jnp.concatenate
    for vals, (_, key, path) in zip(groups, slots):
        try:
            op(vals, axis=axis)
        except Exception as exc:
            annotate(exc, (*path, key), vals[0])
            raise


def _check_trees(trees: Any, fn: str) -> list:
    if isinstance(trees, Tree) or not isinstance(trees, Sequence):
        raise TypeError(f"{fn}: trees must be a list or tuple of Trees, got {type(trees).__name__}")
    if not trees:
        raise ValueError(f"{fn}: trees is empty")
    return list(trees)


def stack(trees: Sequence[Tree], axis: int = 0) -> Tree:
    """Stack N trees of equal structure leaf by leaf: each leaf ``[...]`` -> ``[N, ...]`` (at ``axis``).

    Leaves are stacked with their own library (``np.stack``, ``torch.stack``; JAX leaves with
    ``jnp.stack``, all of a tree's JAX leaves in one compiled call).
    Where every input node carries the same constraints, the result node gets the derived ones
    (``shape_prefix(B)`` -> ``shape_prefix(N, B)``; dtype and device kept; ndim + 1).
    """
    return _join(trees, "stack", axis, "stack")


def concatenate(trees: Sequence[Tree], axis: int = 0) -> Tree:
    """Concatenate N trees of equal structure leaf by leaf along ``axis``.

    JAX leaves are joined in one compiled call for the whole tree, like :func:`stack`.
    Where every input node carries the same constraints, the result node gets the derived ones
    (``shape_prefix(B, T)`` concatenated 3 times on axis 0 -> ``shape_prefix(3 * B, T)``).
    """
    return _join(trees, "concat", axis, "concatenate")


def _split_bounds(length: int, sections: Any, path: tuple[str, ...]) -> list[tuple[int, int]]:
    if isinstance(sections, int | np.integer):
        n = int(sections)
        if n <= 0:
            raise ValueError(f"split: sections must be positive, got {n}")
        if length % n:
            raise ValueError(
                f"split: the leaf at {_c.format_path(path)} has length {length} along the axis, not "
                f"divisible into {n} equal sections"
            )
        size = length // n
        return [(i * size, (i + 1) * size) for i in range(n)]
    cuts = [0, *(int(i) for i in sections), length]
    return [(cuts[i], cuts[i + 1]) for i in range(len(cuts) - 1)]


def _split_plan(x: Any, sections: Any, axis: int, path: tuple[str, ...]) -> tuple[int, list[tuple[int, int]]]:
    """The (non-negative) axis and the ``(start, end)`` bounds of each piece of leaf ``x``."""
    shape = getattr(x, "shape", None)
    if shape is None:
        raise TypeError(f"split: the leaf at {_c.format_path(path)} ({type(x).__name__}) has no shape")
    ax = axis if axis >= 0 else len(shape) + axis
    return ax, _split_bounds(int(shape[ax]), sections, path)


def _split_host_leaf(x: Any, backend: str, ax: int, bounds: list[tuple[int, int]]) -> list:
    """Pieces of one NumPy or PyTorch leaf (views, no XLA dispatch)."""
    if backend == "torch":
        import torch

        if len(bounds) and all(e - s == 1 for s, e in bounds) and ax == 0:
            return list(torch.split(x, 1, dim=0))
        return list(torch.tensor_split(x, [s for s, _ in bounds[1:]], dim=ax))
    lead = (slice(None),) * ax
    return [x[(*lead, slice(s, e))] for s, e in bounds]


def split(t: Tree, sections: int | Sequence[int], axis: int = 0) -> list[Tree]:
    """Split every leaf along ``axis`` and return the pieces as a list of trees.

    ``sections`` is a number of equal sections (e.g. ``n`` for size-1 pieces of length-``n``
    leaves) or a list of split indices, as in ``numpy.split``. Every leaf must give the same
    number of pieces. JAX leaves are split in one compiled call for the whole tree.
    """
    _require_tree(t, "split")
    if isinstance(sections, int | np.integer):
        count = int(sections)
    else:
        sections = list(sections)
        count = len(sections) + 1
    if _plain_leaves is not None:
        plain = _plain_leaves(Tree, t, _JAX_TYPES)
        if plain is not None and plain[0]:
            leaves, nbytes = plain
            try:
                jax_idx, cuts, axes = [], [], []
                parts: list = [None] * len(leaves)
                for i, x in enumerate(leaves):
                    b = "jax" if nbytes is not None else _backend_of(x)
                    shape = x.shape
                    ax = axis if axis >= 0 else len(shape) + axis
                    if b == "jax":
                        jax_idx.append(i)
                        cuts.append(_cuts(int(shape[ax]), sections))
                        axes.append(ax)
                    else:
                        parts[i] = _split_host_leaf(x, b, ax, _split_bounds(int(shape[ax]), sections, ()))
                if jax_idx:
                    sizes = nbytes if nbytes is not None else [_nbytes(leaves[i]) for i in jax_idx]
                    for idx in _calls(sizes):
                        pieces = _jit_split_leaves(
                            [leaves[jax_idx[i]] for i in idx],
                            tuple(cuts[i] for i in idx),
                            tuple(axes[i] for i in idx),
                        )
                        for i, p in zip(idx, pieces):
                            parts[jax_idx[i]] = p
            except Exception:
                pass  # the Python walk raises it again, naming the leaf path
            else:
                return _build_pieces(Tree, t, parts, count)
    return _split_reference(t, sections, axis, count)


def _cuts(length: int, sections: Any) -> tuple[int, ...]:
    """The split indices of a leaf of ``length`` along the axis (what :func:`_split_bounds` gives
    as the starts of pieces 1..); raises where it raises."""
    if isinstance(sections, list):
        return tuple(map(int, sections))
    return _equal_cuts(length, int(sections))


@functools.lru_cache(maxsize=256)
def _equal_cuts(length: int, n: int) -> tuple[int, ...]:
    return tuple(s for s, _ in _split_bounds(length, n, ())[1:])


def _split_reference(t: Tree, sections: Any, axis: int, count: int) -> list[Tree]:
    """:func:`split` by the Python walk: every case (constraints, host leaves, errors naming paths)."""
    jax_leaves: list = []
    jax_cuts: list[tuple[int, ...]] = []
    jax_axes: list[int] = []
    jax_slots: list[tuple[list[dict], str]] = []
    outs = _split_node(t, sections, axis, count, (), (jax_leaves, jax_cuts, jax_axes, jax_slots))
    if jax_leaves:
        for idx in _calls([_nbytes(x) for x in jax_leaves]):
            pieces = _jit_split_leaves(
                [jax_leaves[i] for i in idx], tuple(jax_cuts[i] for i in idx), tuple(jax_axes[i] for i in idx)
            )
            for i, parts in zip(idx, pieces):
                dicts, k = jax_slots[i]
                for d, part in zip(dicts, parts):
                    d[k] = part
    return outs


def _split_constraints(node: Tree, sections: Any, axis: int) -> list[tuple]:
    """Constraints of each split piece: shape prefixes get the piece length where it is known."""
    if not node._cons:
        return []
    out = []
    for a in node._cons:
        c = a.constraint
        if isinstance(c, _c.ShapePrefixConstraint) and 0 <= axis < len(c.dims):
            d = c.dims[axis]
            if isinstance(sections, int | np.integer) and d is not None:
                n = d // int(sections)
            else:
                n = -1
            c2 = c.after_join("split", n, axis)
        else:
            c2 = c.after_join("split", -1, axis)
        if c2 is not None:
            out.append(_c.Attached(c2, a.where))
    return out


def _split_node(
    node: Tree, sections: Any, axis: int, count: int, path: tuple[str, ...], jax_work: tuple
) -> list[Tree]:
    """The ``count`` pieces of ``node``. Host leaves are split here; JAX leaves get a placeholder
    and are appended to ``jax_work`` (leaves, cuts, axes, ``(piece dicts, key)``) for one call."""
    cls = type(node)
    outs = [_empty(cls) for _ in range(count)]
    cons = tuple(_split_constraints(node, sections, axis))
    if cons:
        for o in outs:
            _set_cons(o, cons)
    dicts = [o.__dict__ for o in outs]
    for k, v in node.__dict__.items():
        p = path + (k,)
        if isinstance(v, Tree):
            parts = _split_node(v, sections, axis, count, p, jax_work)
        else:
            ax, bounds = _split_plan(v, sections, axis, p)
            b = _backend_of(v)
            if b == "jax":
                for d in dicts:
                    d[k] = None  # placeholder keeps the sorted key order
                leaves, cuts, axes, slots = jax_work
                leaves.append(v)
                cuts.append(tuple(s for s, _ in bounds[1:]))
                axes.append(ax)
                slots.append((dicts, k))
                continue
            parts = _split_host_leaf(v, b, ax, bounds)
        for d, part in zip(dicts, parts):
            d[k] = part
    return outs
