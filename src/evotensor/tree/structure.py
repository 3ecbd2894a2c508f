"""Structural utilities: map/filter/mask/reduce, flatten/unflatten, union/subside/rise,
stack/concatenate/split/index along leading axes (JAX, NumPy or PyTorch leaves).

Paths are tuples of keys, e.g. ``('x', 'c')`` for ``t.x.c``.
"""

from __future__ import annotations

import builtins
import functools
import inspect
import operator
import weakref
from collections.abc import Callable, Sequence
from types import FunctionType as _FunctionType
from types import MethodType as _MethodType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.tree import constraints as _c
from evotensor.tree.tree import Tree, _set_cons, _sp, annotate, index_leaves, map_nodes
from evotensor.tree.treelize import MISSING, _check_config, apply_tree

__all__ = [
    "concatenate",
    "equal",
    "filter",
    "flatten",
    "index",
    "map",
    "mask",
    "reduce",
    "rise",
    "split",
    "stack",
    "subside",
    "unflatten",
    "union",
]

_new = object.__new__


def _require_tree(t: Any, fn: str, arg: str = "t") -> None:
    if not isinstance(t, Tree):
        raise TypeError(f"{fn}: {arg} must be a Tree, got {type(t).__name__}")


# function -> "takes a path": {hash(fn): (weakref to fn, answer)}. A hit reads none of fn's
# attributes and calls no audited builtin: `fn.__code__`/`fn.__defaults__` reads and `id()` raise
# audit events, and with an audit hook installed (filelock >= 3.32 installs one, and jax imports
# filelock when it is present) each costs a Python call. A function's hash is derived from its
# address; the weak reference keeps closures collectable and proves that an entry found under a
# reused address is still the same function. Reassigning `fn.__code__`/`__defaults__` after the
# first use is not seen.
_TAKES_PATH: dict[int, tuple[weakref.ref, bool]] = {}


def _takes_path(fn: Callable) -> bool:
    """True when ``fn`` has at least two required positional parameters: ``fn(value, path)``."""
    if type(fn) is not _FunctionType:
        return _takes_path_fresh(fn)
    key = hash(fn)
    hit = _TAKES_PATH.get(key)
    if hit is not None and hit[0]() is fn:
        return hit[1]
    answer = _takes_path_fresh(fn)
    if len(_TAKES_PATH) >= 4096:  # many short-lived lambdas: keep the table bounded
        _TAKES_PATH.clear()
    _TAKES_PATH[key] = (weakref.ref(fn), answer)
    return answer


def _takes_path_fresh(fn: Callable) -> bool:
    """:func:`_takes_path` without the cache.

    Plain functions and methods are answered from their code object (what ``inspect.signature``
    reports for them, at a fraction of the cost). Anything else (builtins, ufuncs, partials,
    wrappers carrying ``__wrapped__`` or ``__signature__`` in their ``__dict__``) goes through
    ``inspect.signature``.
    """
    tf = type(fn)
    if tf is _FunctionType:
        func, bound = fn, 0
    elif tf is _MethodType and type(fn.__func__) is _FunctionType:
        func, bound = fn.__func__, 1  # the bound first argument is not a parameter of the call
    else:
        return _takes_path_uncached(fn)
    if func.__dict__:  # possibly __wrapped__ / __signature__, which inspect.signature honours
        return _takes_path_uncached(fn)
    defaults = func.__defaults__
    return func.__code__.co_argcount - bound - (len(defaults) if defaults else 0) >= 2


def _takes_path_uncached(fn: Callable) -> bool:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    required = [
        p
        for p in sig.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    return len(required) >= 2


def _empty(cls: type) -> Tree:
    out = _new(cls)
    _set_cons(out, ())
    return out


# ---- map / filter / mask / reduce ------------------------------------------------------------


def map(t: Tree, fn: Callable) -> Tree:  # noqa: A001 - the public name mirrors jax.tree.map
    """A tree of ``fn(value)``, or ``fn(value, path)`` when ``fn`` takes two positional arguments.

    ``path`` is the tuple of keys leading to the leaf. Constraints are not carried over.
    """
    if not isinstance(t, Tree):
        _require_tree(t, "map")
    if not callable(fn):
        raise TypeError(f"map: fn must be callable, got {fn!r}")
    if _takes_path(fn):
        return _map_path(t, fn, ())
    return map_nodes(t, fn)


def _map_path(node: Tree, fn: Callable, path: tuple[str, ...]) -> Tree:
    out = _empty(type(node))
    d = out.__dict__
    for k, v in node.__dict__.items():
        p = (*path, k)
        d[k] = _map_path(v, fn, p) if isinstance(v, Tree) else fn(v, p)
    return out


def filter(t: Tree, fn: Callable, remove_empty: bool = True) -> Tree:  # noqa: A001
    """The leaves for which ``fn(value)`` (or ``fn(value, path)``) is truthy.

    With ``remove_empty`` subtrees left without leaves are dropped.
    """
    _require_tree(t, "filter")
    with_path = _takes_path(fn)
    return _filter(t, (lambda v, p: fn(v, p)) if with_path else (lambda v, p: fn(v)), remove_empty, ())


def _filter(node: Tree, keep: Callable, remove_empty: bool, path: tuple[str, ...]) -> Tree:
    out = _empty(type(node))
    d = out.__dict__
    for k, v in node.__dict__.items():
        p = (*path, k)
        if isinstance(v, Tree):
            sub = _filter(v, keep, remove_empty, p)
            if sub.__dict__ or not remove_empty:
                d[k] = sub
        elif keep(v, p):
            d[k] = v
    return out


def mask(t: Tree, mask_tree: Any, remove_empty: bool = True) -> Tree:
    """The leaves of ``t`` where ``mask_tree`` is true.

    ``mask_tree`` has ``t``'s structure with bool leaves; a bool facing a subtree applies to all of
    it (a plain ``True``/``False`` masks everything). A key of ``t`` absent from the mask is an
    error naming the path.
    """
    _require_tree(t, "mask")
    return _mask(t, mask_tree, remove_empty, ())


def _mask(node: Tree, m: Any, remove_empty: bool, path: tuple[str, ...]) -> Tree:
    if not isinstance(m, Tree):
        return node if bool(m) else _empty(type(node))
    out = _empty(type(node))
    d = out.__dict__
    md = m.__dict__
    for k, v in node.__dict__.items():
        p = (*path, k)
        if k not in md:
            raise KeyError(f"mask: the mask has no key {k!r} at {_c.format_path(path)}")
        mv = md[k]
        if isinstance(v, Tree):
            sub = _mask(v, mv, remove_empty, p)
            if sub.__dict__ or not remove_empty:
                d[k] = sub
        else:
            if isinstance(mv, Tree):
                raise TypeError(
                    f"mask: the mask has a subtree at {_c.format_path(p)} where the tree has a leaf"
                )
            if bool(mv):
                d[k] = v
    return out


def reduce(t: Tree, fn: Callable) -> Any:
    """Fold bottom-up: each node becomes ``fn(**children)`` (children already reduced).

    Example: ``reduce(t, lambda **kw: sum(kw.values()))`` sums every leaf.
    """
    _require_tree(t, "reduce")
    return _reduce(t, fn)


def _reduce(node: Tree, fn: Callable) -> Any:
    return fn(**{k: _reduce(v, fn) if isinstance(v, Tree) else v for k, v in node.__dict__.items()})


# ---- flatten / unflatten --------------------------------------------------------------------


def flatten(t: Tree, sep: str | None = None) -> dict:
    """A flat dict ``{path: leaf}`` in sorted (depth-first) order.

    Paths are tuples of keys, or strings joined with ``sep`` when given (a key containing ``sep``
    is then an error). Empty subtrees appear as an empty ``Tree()`` value, so
    ``unflatten(flatten(t))`` rebuilds ``t`` exactly.
    """
    if not isinstance(t, Tree):
        _require_tree(t, "flatten")
    if _flatten_paths is not None:
        out = _flatten_paths(Tree, t.__dict__)  # the same walk in C
    else:
        out = {}
        for k, v in t.__dict__.items():  # the root level inline: one Python call fewer
            if isinstance(v, Tree):
                vd = v.__dict__
                if vd:
                    _flatten(vd, (k,), out)
                    continue
            out[(k,)] = v
    if sep is None:
        return out
    joined = {}
    for path, v in out.items():
        for k in path:
            if sep in k:
                raise ValueError(
                    f"flatten: key {k!r} at {_c.format_path(path)} contains the separator {sep!r}"
                )
        joined[sep.join(path)] = v
    return joined


_flatten_paths = _sp.flatten_paths if _sp is not None else None


def _flatten(d: dict, path: tuple[str, ...], out: dict, _tree: type = Tree) -> None:
    # `path + (k,)` rather than `(*path, k)`: one concatenation instead of a list round trip
    # (and `() + (k,)` is `(k,)` itself at the root)
    for k, v in d.items():
        if isinstance(v, _tree):
            vd = v.__dict__
            if vd:
                _flatten(vd, path + (k,), out)
                continue
        out[path + (k,)] = v


def unflatten(flat: dict, sep: str | None = None, cls: type[Tree] = Tree) -> Tree:
    """Inverse of :func:`flatten`: ``{path: leaf}`` (tuple paths, or strings split on ``sep``)."""
    if not isinstance(flat, dict):
        raise TypeError(f"unflatten: flat must be a dict of path -> value, got {type(flat).__name__}")
    root = _Node()
    for raw, v in flat.items():
        if isinstance(raw, str):
            path = tuple(raw.split(sep)) if sep is not None else (raw,)
        elif isinstance(raw, tuple) and all(isinstance(k, str) for k in raw):
            path = raw
        else:
            raise TypeError(f"unflatten: paths must be tuples of strings or strings, got {raw!r}")
        if not path:
            raise ValueError("unflatten: the empty path cannot hold a leaf")
        node = root
        for i, k in enumerate(path[:-1]):
            nxt = node.get(k)
            if nxt is None and k not in node:
                nxt = node[k] = _Node()
            elif type(nxt) is not _Node:
                raise ValueError(f"unflatten: {_c.format_path(path[: i + 1])} is both a leaf and a subtree")
            node = nxt
        if path[-1] in node:
            raise ValueError(
                f"unflatten: {_c.format_path(path)} given twice (or is both a leaf and a subtree)"
            )
        node[path[-1]] = v
    return _build(root, cls)


class _Node(dict):
    """An inner node being assembled by :func:`unflatten` (never escapes it), so that a dict given
    as a leaf value is told apart by type alone (no ``id()``, which raises an audit event)."""

    __slots__ = ()


def _build(d: dict, cls: type) -> Tree:
    out = _empty(cls)
    od = out.__dict__
    for k in sorted(d):
        v = d[k]
        od[k] = _build(v, cls) if type(v) is _Node else v
    return out


# ---- subside / rise / union -----------------------------------------------------------------


class _Slot:
    __slots__ = ("i",)

    def __init__(self, i: int):
        self.i = i


def _is_namedtuple(x: Any) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def _make_seq(like: Any, items: list) -> Any:
    if _is_namedtuple(like):
        return type(like)(*items)
    return type(like)(items)


def _template(v: Any, trees: list) -> Any:
    if isinstance(v, Tree):
        trees.append(v)
        return _Slot(len(trees) - 1)
    if isinstance(v, dict):
        return {k: _template(x, trees) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return _make_seq(v, [_template(x, trees) for x in v])
    return v


def _fill_template(tmpl: Any, leaves: tuple) -> Any:
    if isinstance(tmpl, _Slot):
        return leaves[tmpl.i]
    if isinstance(tmpl, dict):
        return {k: _fill_template(x, leaves) for k, x in tmpl.items()}
    if isinstance(tmpl, list | tuple):
        return _make_seq(tmpl, [_fill_template(x, leaves) for x in tmpl])
    return tmpl


def subside(value: Any, mode: str = "strict", missing: Any = MISSING, inherit: bool = True) -> Any:
    """Sink an outer dict/list/tuple structure whose leaves are trees into every leaf.

    ``subside({'a': t1, 'b': [t2, t3], 'k': 'tag'})`` is a tree whose leaf at path ``p`` is
    ``{'a': t1[p], 'b': [t2[p], t3[p]], 'k': 'tag'}``: non-tree values are copied into every leaf.
    The trees are matched with ``mode``/``missing``/``inherit`` as in :func:`treelize`. A value
    holding no tree is returned unchanged. The result has the class of the first tree found.
    """
    _check_config(mode, missing, inherit, stacklevel=3)
    trees: list[Tree] = []
    tmpl = _template(value, trees)
    if not trees:
        return value
    if isinstance(tmpl, _Slot):
        return value

    def build(*leaves: Any) -> Any:
        return _fill_template(tmpl, leaves)

    return apply_tree(build, tuple(trees), {}, mode, missing, inherit, type(trees[0]))


def union(*trees: Tree, mode: str = "strict", missing: Any = MISSING, inherit: bool = True) -> Tree:
    """One tree whose leaves are tuples of the corresponding leaves: ``subside(tuple(trees))``."""
    if not trees:
        raise ValueError("union: give at least one tree")
    for i, t in enumerate(trees):
        _require_tree(t, "union", f"trees[{i}]")
    return subside(tuple(trees), mode=mode, missing=missing, inherit=inherit)


class _Stop:
    """Template marker: keep the leaves here (stop rising)."""

    def __repr__(self) -> str:
        return "STOP"


_STOP = _Stop()


def _infer(values: list) -> Any:
    first = values[0]
    if isinstance(first, dict) and first:
        keys = first.keys()
        if all(type(v) is type(first) and v.keys() == keys for v in values):
            return {k: _infer([v[k] for v in values]) for k in first}
        return _STOP
    if isinstance(first, list | tuple) and first:
        n = len(first)
        if all(type(v) is type(first) and len(v) == n for v in values):
            return _make_seq(first, [_infer([v[i] for v in values]) for i in range(n)])
    return _STOP


def _leaves_with_paths(node: Tree, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    out = []
    for k, v in node.__dict__.items():
        if isinstance(v, Tree):
            out.extend(_leaves_with_paths(v, (*path, k)))
        else:
            out.append(((*path, k), v))
    return out


def _normalize_template(tmpl: Any) -> Any:
    if tmpl is None or tmpl is _STOP:
        return _STOP
    if tmpl is list:
        return [_STOP, ...]
    if tmpl is tuple:
        return (_STOP, ...)
    if tmpl is dict:
        return dict
    if isinstance(tmpl, dict):
        return {k: _normalize_template(v) for k, v in tmpl.items()}
    if isinstance(tmpl, list | tuple):
        items = [x if x is Ellipsis else _normalize_template(x) for x in tmpl]
        if any(x is Ellipsis for x in items[:-1]):
            raise ValueError("rise: `...` may only be the last item of a template sequence")
        if items and items[-1] is Ellipsis and len(items) < 2:
            raise ValueError("rise: a template `[...]` needs an item before `...` to repeat")
        return _make_seq(tmpl, items) if not _is_namedtuple(tmpl) else type(tmpl)(*items)
    return _STOP


def rise(t: Tree, template: Any = None) -> Any:
    """Lift a structure shared by every leaf out of the tree (inverse of :func:`subside`).

    Without ``template`` the structure is inferred: where every leaf is a dict of the same type
    with the same keys, or a list/tuple of the same type and length, it is lifted and the
    inference goes on inside; elsewhere it stops. An explicit ``template`` is a nested
    dict/list/tuple; ``[sub, ...]`` (a trailing ``Ellipsis``) repeats ``sub`` for any length
    (items before it are fixed, so ``[a, b, sub, ...]`` needs at least 2 items); ``None`` stops;
    the types ``list``/``tuple``/``dict`` lift one level of that kind. A leaf that does not fit
    the template raises ValueError naming its path.

    Example::

        rise(Tree(x=raw({'a': [1, 2], 'b': [2, 3]}), y=raw({'a': [5, 6, 7], 'b': [7, 8]})))
        # {'a': Tree(x=[1, 2], y=[5, 6, 7]), 'b': [Tree(x=2, y=7), Tree(x=3, y=8)]}
        rise(subside([t1, t2]))  # [t1, t2] again (as new trees)

    (``raw`` keeps a dict as a leaf; dict leaves usually come from functions or ``subside``.)
    """
    _require_tree(t, "rise")
    leaves = _leaves_with_paths(t)
    if not leaves:
        return t
    tmpl = _infer([v for _, v in leaves]) if template is None else _normalize_template(template)
    return _rise(t, leaves, tmpl)


def _rise(t: Tree, leaves: list, tmpl: Any) -> Any:
    if tmpl is _STOP:
        return t
    if tmpl is dict:
        keys = leaves[0][1].keys() if isinstance(leaves[0][1], dict) else None
        if keys is None:
            raise ValueError(f"rise: the leaf at {_c.format_path(leaves[0][0])} is not a dict")
        tmpl = {k: _STOP for k in keys}
    if isinstance(tmpl, dict):
        keys = set(tmpl)
        for path, v in leaves:
            if not isinstance(v, dict) or set(v) != keys:
                raise ValueError(
                    f"rise: the leaf at {_c.format_path(path)} is {_describe(v)}, the template expects a "
                    f"dict with keys {sorted(keys)}"
                )
        return {k: _rise_sub(t, k, sub) for k, sub in tmpl.items()}
    # a sequence template
    variable = bool(tmpl) and tmpl[-1] is Ellipsis
    fixed = list(tmpl[:-2]) if variable else list(tmpl)
    seq_type = list if isinstance(tmpl, list) else tuple
    n = None
    for path, v in leaves:
        if not isinstance(v, seq_type):
            raise ValueError(
                f"rise: the leaf at {_c.format_path(path)} is {_describe(v)}, the template expects a "
                f"{seq_type.__name__}"
            )
        if variable:
            if len(v) < len(fixed):
                raise ValueError(
                    f"rise: the leaf at {_c.format_path(path)} has {len(v)} items, the template needs "
                    f"at least {len(fixed)}"
                )
            if n is None:
                n = len(v)
            elif len(v) != n:
                raise ValueError(
                    f"rise: the leaf at {_c.format_path(path)} has {len(v)} items, other leaves have {n}; "
                    "variable-length templates need equal lengths"
                )
        elif len(v) != len(fixed):
            raise ValueError(
                f"rise: the leaf at {_c.format_path(path)} has {len(v)} items, the template expects "
                f"{len(fixed)}"
            )
    count = n if variable else len(fixed)
    subs = [fixed[i] if i < len(fixed) else tmpl[-2] for i in builtins.range(count)]
    items = [_rise_sub(t, i, sub) for i, sub in enumerate(subs)]
    like = leaves[0][1]
    return _make_seq(like, items) if _is_namedtuple(like) or isinstance(like, seq_type) else seq_type(items)


def _rise_sub(t: Tree, key: Any, sub: Any) -> Any:
    part = map_nodes(t, lambda v: v[key])
    return _rise(part, _leaves_with_paths(part), sub)


def _describe(v: Any) -> str:
    if isinstance(v, list | tuple):
        return f"a {type(v).__name__} of length {len(v)}"
    return f"a {type(v).__name__}"


# ---- array backends --------------------------------------------------------------------------

_BACKEND_CACHE: dict[type, str] = {}
# The exact types seen so far whose backend is "jax" (arrays, tracers): the compiled walks of
# stack/concatenate/split test leaf types against this set.
_JAX_TYPES: set[type] = set()


def _backend_of(x: Any) -> str:
    tp = type(x)
    b = _BACKEND_CACHE.get(tp)
    if b is None:
        if tp.__module__.startswith("torch"):
            b = "torch"
        elif isinstance(x, jax.Array) or isinstance(x, jax.core.Tracer):
            b = "jax"
            _JAX_TYPES.add(tp)
        else:
            b = "numpy"
        _BACKEND_CACHE[tp] = b
    return b


# JAX leaves: ONE compiled call per tree operation, for all the JAX leaves of the tree at once.
# A jitted call costs ~9 µs of fixed dispatch here plus ~0.3 µs per input array, so one call per
# leaf paid the fixed part once per leaf; inside one call it is paid once (measured faster than
# per-leaf dispatch for every count from 2 to 256: see benchmarks/results_tree.md). Compiled once
# per (group sizes, shapes, dtypes, axis) and cached by jit: the same number of compilations as
# one call per leaf for a given tree structure, only larger programs.
# Exception: a leaf whose data is large (>= _OWN_CALL_BYTES in or out) gets a call of its own.
# Measured here: splitting a (16, 4, 84, 84) float32 leaf into 16 pieces in the same program as
# small leaves took ~185 µs of CPU time, against ~145 µs for two calls (big alone, small ones
# together); stacking 64 leaves of (4, 84, 84) with small ones in one program was 2-3x slower
# than separately. Below ~1 MiB one program was as fast or faster (split 2: 16 µs vs 20 µs).
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
    dicts = list(builtins.map(_dict_of, trees))
    keys = tuple(dicts[0])
    if len(set(builtins.map(len, dicts))) != 1:
        _raise_key_mismatch(dicts, keys, path)
    first = trees[0]
    out = _new(type(first))
    _set_cons(out, _joined_constraints(trees, kind, axis) if first._cons else ())
    d = out.__dict__
    for k in keys:
        try:
            vals = list(builtins.map(operator.itemgetter(k), dicts))
        except KeyError:
            _raise_key_mismatch(dicts, keys, path)
        types = set(builtins.map(type, vals))
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
        types = set(builtins.map(type, vals))
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
    for tp in set(builtins.map(type, trees)):
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
        return [(i * size, (i + 1) * size) for i in builtins.range(n)]
    cuts = [0, *(int(i) for i in sections), length]
    return [(cuts[i], cuts[i + 1]) for i in builtins.range(len(cuts) - 1)]


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
        return tuple(builtins.map(int, sections))
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
    outs = [_empty(cls) for _ in builtins.range(count)]
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


def index(t: Tree, idx: Any, axis: int = 0) -> Tree:
    """``leaf[..., idx, ...]`` at ``axis`` for every leaf (``axis=0`` is ``t[idx]``).

    JAX leaves are indexed in one compiled call for the whole tree (integers and integer arrays
    in ``idx`` are operands of that call, so a loop over ``i`` compiles once); NumPy and PyTorch
    leaves with their own indexing. The result equals indexing each leaf on its own.
    Dtype, device, ndim and shape-prefix constraints are carried to the result where provable.
    """
    _require_tree(t, "index")
    if axis == 0:
        return index_leaves(t, idx)
    if axis > 0:
        return index_leaves(t, (*(slice(None),) * axis, idx))
    return index_leaves(t, (Ellipsis, idx, *(slice(None),) * (-axis - 1)))


# ---- equality --------------------------------------------------------------------------------


def _to_numpy(x: Any) -> Any:
    if _backend_of(x) == "torch":
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _leaf_equal(a: Any, b: Any, equal_nan: bool) -> bool:
    if hasattr(a, "shape") and hasattr(a, "dtype") or hasattr(b, "shape") and hasattr(b, "dtype"):
        try:
            x, y = _to_numpy(a), _to_numpy(b)
        except Exception:
            return False
        if x.shape != y.shape:
            return False
        try:
            return bool(np.array_equal(x, y, equal_nan=equal_nan))
        except TypeError:  # equal_nan on non-numeric dtypes
            return bool(np.array_equal(x, y))
    try:
        r = a == b
        return bool(r) if isinstance(r, bool | np.bool_) else bool(np.all(r))
    except Exception:
        return False


def equal(a: Any, b: Any, *, equal_nan: bool = False) -> bool:
    """``True`` when ``a`` and ``b`` have the same structure and equal leaves (shapes included).

    Host-side (not for use under ``jit``, where ``a == b`` gives a tree of arrays).
    """
    if isinstance(a, Tree) or isinstance(b, Tree):
        if not (isinstance(a, Tree) and isinstance(b, Tree)):
            return False
        da, db = a.__dict__, b.__dict__
        if da.keys() != db.keys():
            return False
        return all(equal(da[k], db[k], equal_nan=equal_nan) for k in da)
    return _leaf_equal(a, b, equal_nan)
