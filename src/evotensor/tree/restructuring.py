"""Restructuring: outer structures of trees sink into the leaves, and rise out of them again.

:func:`subside` turns a dict/list/tuple holding trees into one tree whose leaves are such
structures (:func:`union` is the tuple case); :func:`rise` lifts a structure shared by every leaf
out of the tree. ``subside`` and ``union`` match the trees with treelize's ``mode`` / ``missing`` /
``inherit``.

Paths are tuples of keys, e.g. ``('x', 'c')`` for ``t.x.c``.
"""

from __future__ import annotations

from typing import Any

from evotensor.tree import constraints as _c
from evotensor.tree._core import MISSING, Tree, _check_config, _require_tree, apply_tree, map_nodes

__all__ = ["rise", "subside", "union"]


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


def _infer(values: list, where: list[str], top: bool = True) -> Any:
    """The template every value fits (``where``: each value's location, for errors). Below a lifted
    level, ragged values stop the inference (they stay leaves: TreeTensor's rule, the docstring
    example of :func:`rise`). At the top, values that are all lists/tuples of one type but of
    different lengths (or all dicts of one type with different keys) would make ``rise`` lift
    nothing and return the tree as it was, silently: that raises ValueError naming two leaves that
    differ."""
    first = values[0]
    if isinstance(first, dict) and first:
        keys = first.keys()
        if all(type(v) is type(first) and v.keys() == keys for v in values):
            return {k: _infer([v[k] for v in values], [f"{w}[{k!r}]" for w in where], False) for k in first}
        if top and all(type(v) is type(first) for v in values):
            i = next(i for i, v in enumerate(values) if v.keys() != keys)
            raise ValueError(
                f"rise: ragged dicts: the leaf at {where[0]} has keys {sorted(map(str, keys))}, the one at "
                f"{where[i]} has {sorted(map(str, values[i].keys()))}; every leaf needs the same structure "
                "(pass template= to lift less)"
            )
        return _STOP
    if isinstance(first, list | tuple) and first:
        n = len(first)
        if all(type(v) is type(first) and len(v) == n for v in values):
            items = [_infer([v[i] for v in values], [f"{w}[{i}]" for w in where], False) for i in range(n)]
            return _make_seq(first, items)
        if top and all(type(v) is type(first) for v in values):
            i = next(i for i, v in enumerate(values) if len(v) != n)
            raise ValueError(
                f"rise: ragged {type(first).__name__}s: the leaf at {where[0]} has {n} items, the one at "
                f"{where[i]} has {len(values[i])}; every leaf needs the same length (pass template= to "
                "lift less)"
            )
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
    the template raises ValueError naming its path. Inferring from leaves that are ragged at the top
    (all lists/tuples of one type but of different lengths, or all dicts of one type with different
    keys), where nothing could be lifted, raises ValueError naming two leaves and their lengths
    (keys) instead of returning the tree unchanged; below a lifted level ragged values stop the
    inference, as in the example.

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
    if template is None:
        tmpl = _infer([v for _, v in leaves], [_c.format_path(p) for p, _ in leaves])
    else:
        tmpl = _normalize_template(template)
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
    subs = [fixed[i] if i < len(fixed) else tmpl[-2] for i in range(count)]
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
