"""Functional operations on one tree: map, filter, mask, reduce, flatten, unflatten, equal.

:func:`map`, :func:`filter`, :func:`mask` and :func:`reduce` work over the leaves (``map`` and
``filter`` also pass each leaf's path when ``fn`` takes two positional arguments);
:func:`flatten` and :func:`unflatten` convert to and from a dict keyed by paths; :func:`equal`
compares two trees host-side, as one bool.

Paths are tuples of keys, e.g. ``('x', 'c')`` for ``t.x.c``.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable
from types import FunctionType as _FunctionType
from types import MethodType as _MethodType
from typing import Any

import numpy as np

from evotensor.tree import constraints as _c
from evotensor.tree._core import Tree, _backend_of, _empty, _require_tree, _sp, map_nodes

__all__ = ["equal", "filter", "flatten", "map", "mask", "reduce", "unflatten"]


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
