"""Internals shared by the modules of :mod:`evotensor.tree` (private: no public API lives here).

The :class:`~evotensor.tree.Tree` class is defined here, with everything its methods run, because
each of those builds or recognises Tree nodes and so needs the class itself:

* node storage, setting and deleting children with constraint checks, pytree registration and the
  compiled core (``evotensor.tree._speedups``), i.e. what ``Tree`` is made of;
* the leaf-by-leaf walk behind :func:`~evotensor.tree.treelize` (``t(...)``, ``t[idx] = v`` and
  the operators run it);
* indexing every leaf (``t[idx]``);
* the repr (tree art).

After them come the few helpers that the structural modules (functional, restructuring, joining,
indexing) share. The other modules import from here (underscore names included: this is the one
module of the package they may take those from) and this module imports none of them, so the
imports form a chain without a cycle (``a <- b``: ``a`` is imported by ``b``)::

    constraints <- _core <- tree, indexing, io, functional, restructuring, joining, treelize
    restructuring <- treelize <- jnp, np, torch (which also imports tree)
    functional, restructuring, joining, indexing <- structure (the deprecated shim)
    everything but structure and torch <- evotensor.tree (which imports those two on first use)

``Tree``, ``raw`` and ``MISSING`` keep their public modules as ``__module__`` (repr, pickles,
PyTorch's serialized type names), and so does ``_rebuild``, the function pickles of trees call.

Compiled core. When the optional C extension ``evotensor.tree._speedups`` is built (``pip install``
builds it where a C compiler is available), ``Tree`` subclasses its ``TreeBase``: the node's storage
(``__dict__``, the constraint slot, weak references), the hot paths of ``t.a = v``, ``t["a"]``,
``t["a"] = v`` (existing key, unconstrained node, a value needing no conversion) and the pytree
flatten/unflatten are C; every other case calls this module's Python functions (``_setattr``,
``_getitem``, ...), so semantics live here only. Without the extension, or with the environment
variable ``EVOTENSOR_NO_SPEEDUPS=1`` (read once, at import), those Python functions are the methods
themselves. ``evotensor.tree.SPEEDUPS`` says which is active.
"""

from __future__ import annotations

import copy as _copy
import functools
import operator
import os
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np
from jax.tree_util import DictKey

from evotensor.tree import constraints as _c

# ---- the compiled core ----------------------------------------------------------------------------


def _load_speedups() -> Any:
    if os.environ.get("EVOTENSOR_NO_SPEEDUPS", "").strip() not in ("", "0"):
        return None
    try:
        from evotensor.tree import _speedups
    except ImportError:  # not built (no C compiler at install time): the pure-Python code runs
        return None
    return _speedups


_sp = _load_speedups()
SPEEDUPS: bool = _sp is not None  # True when Tree runs on the compiled core

_new = object.__new__
_itemgetter0 = operator.itemgetter(0)
SUBCLASS_HOOKS: list[Callable[[type], None]] = []  # called with every new Tree subclass
_Tracer = jax.core.Tracer

# ---- Tree and its node internals ------------------------------------------------------------------


class _Reserved:
    # Wraps a method/classmethod/staticmethod into a *data* descriptor so keys cannot shadow it.

    def __init__(self, desc: Any):
        self.desc = desc
        self.__doc__ = getattr(desc, "__doc__", None)
        self.__wrapped__ = getattr(desc, "__func__", desc)

    def __get__(self, obj: Any, objtype: Any = None) -> Any:
        return self.desc.__get__(obj, objtype)

    def __set__(self, obj: Any, value: Any) -> None:
        raise AttributeError("Tree methods cannot be overwritten on an instance")

    def __delete__(self, obj: Any) -> None:
        raise AttributeError("Tree methods cannot be deleted on an instance")


def _protect(cls: type) -> None:
    for name, value in list(vars(cls).items()):
        if name.startswith("__") and name.endswith("__"):
            continue
        if callable(value) and not isinstance(value, type) or isinstance(value, classmethod | staticmethod):
            setattr(cls, name, _Reserved(value))


class raw:  # noqa: N801 - lower case like treevalue's `raw`
    """Marks a dict (or any value) to be stored as a leaf: ``Tree(cfg=raw({"lr": 0.1}))``.

    Without it every dict given to the constructor or a set becomes a subtree.
    """

    __module__ = "evotensor.tree.tree"  # its public home (repr, pickles)
    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


# Values that a set must convert (a tuple: no union object per call). The hot set paths test
# `issubclass(type(value), _DICT_OR_RAW)`, cheaper than `isinstance` (which also looks up
# `value.__class__` when the type check fails); they differ only for objects that fake `__class__`.
_DICT_OR_RAW = (dict, raw)
# Values the hot set paths leave to set_child: those it converts, and Trees (set_child refuses a
# Tree that would become its own descendant). Tree is added once the class exists (below it).
_SLOW_VALUES: tuple[type, ...] = _DICT_OR_RAW


class _Each:
    """``t.each.name`` -> every leaf's attribute ``name`` (bypasses keys and Tree methods)."""

    __slots__ = ("_tree",)

    def __init__(self, tree: Tree):
        self._tree = tree

    def __getattr__(self, name: str) -> Tree:
        return leafwise_getattr(self._tree, name)

    def __dir__(self) -> list[str]:
        names: set[str] = set()
        for leaf in iter_leaves(self._tree):
            names.update(dir(leaf))
        return sorted(names)


# ---- the methods the compiled base replaces (its slow paths when it is present) ----------------
# With the extension, TreeBase's C slots do the hot path and call these for everything else; the
# fast-path checks here then repeat, which costs only on the slow path. Without it, Tree uses them
# as its methods, so the fast path is inlined (a Python __setattr__ already costs a call).


def _setattr(self: Tree, name: str, value: Any) -> None:
    # Hot path first: replace an existing child of an unconstrained node.
    d = self.__dict__
    if (
        name in d
        and not self._cons
        and not issubclass(type(value), _SLOW_VALUES)
        and name not in type(self)._reserved_names
    ):
        d[name] = value
        return
    if name in type(self)._reserved_names:
        raise AttributeError(f"{name!r} is a Tree attribute; set the key with t[{name!r}] = value")
    set_child(self, name, value)


def _delattr(self: Tree, name: str) -> None:
    if name not in self.__dict__:
        raise AttributeError(f"no key {name!r} in tree; keys: {list(self.__dict__)}")
    delete_child(self, name)


def _getitem(self: Tree, key: Any) -> Any:
    if type(key) is str:
        try:
            return self.__dict__[key]
        except KeyError:
            raise KeyError(f"no key {key!r} in tree; keys: {list(self.__dict__)}") from None
    if isinstance(key, str):
        return self.__getitem__(str(key))
    return index_leaves(self, key)


def _setitem(self: Tree, key: Any, value: Any) -> None:
    if type(key) is str:
        d = self.__dict__
        if key in d and not self._cons and not issubclass(type(value), _SLOW_VALUES):
            d[key] = value  # fast path: replace an existing child of an unconstrained node
            return
        set_child(self, key, value)
    elif isinstance(key, str):
        set_child(self, str(key), value)
    else:
        setitem_leaves(self, key, value)


def _delitem(self: Tree, key: Any) -> None:
    if isinstance(key, str):
        if key not in self.__dict__:
            raise KeyError(f"no key {key!r} in tree; keys: {list(self.__dict__)}")
        delete_child(self, str(key))
    else:
        delitem_leaves(self, key)


class Tree(_sp.TreeBase if SPEEDUPS else object):
    """Nested data with string keys; a JAX pytree with children in sorted key order.

    Build from a dict and/or keyword arguments; nested dicts become subtrees::

        t = Tree({"a": jnp.ones((2, 3)), "x": {"c": jnp.zeros((3, 4))}})
        t.x.c, t["x"]["c"]          # the same (3, 4) array
        t.x.d = jnp.ones(2)         # set; t["x"]["d"] = ... is the same
        t * 2 + 1                   # leaf-wise operators, any backend
        t.shape                     # Tree(a=(2, 3), x=Tree(c=(3, 4), d=(2,)))
        t[0]                        # non-string index: indexes every leaf
        jax.jit(lambda t: t * 2)(t) # a pytree: jit, vmap, grad, scan, cond, jax.tree.map

    Value nodes may be any objects (JAX/NumPy/PyTorch arrays, numbers, strings, lists, None).
    ``==`` and the other comparisons are leaf-wise (they must be, under ``jit``); use
    :func:`evotensor.tree.equal` for a bool. ``bool(t)`` raises, like an array's would.

    Reserved names (Tree methods, reachable for keys only via ``t[key]``): ``keys``, ``values``,
    ``items``, ``get``, ``pop``, ``to_dict``, ``each``, ``astype``, ``constraints``,
    ``with_constraints``, ``validate``.
    """

    __module__ = "evotensor.tree.tree"  # its public home (repr, pickles, torch's serialized type name)
    # the compiled base already holds __dict__, _cons and __weakref__
    __slots__ = () if SPEEDUPS else ("__dict__", "_cons", "__weakref__")
    __hash__ = None  # type: ignore[assignment]  # mutable, and == is leaf-wise
    __array_ufunc__ = None  # numpy defers `ndarray + tree` to Tree.__radd__

    def __init__(self, data: Any = None, /, **kwargs: Any):
        _set_cons(self, ())
        if data is not None:
            if isinstance(data, Tree):
                _set_cons(self, data._cons)
                self.__dict__.update(data.__dict__)
                if kwargs:
                    for k, v in kwargs.items():
                        set_child(self, k, v)
                return
            if not isinstance(data, dict):
                raise TypeError(
                    f"Tree(data): data must be a dict or a Tree, got {type(data).__name__}; "
                    "use keyword arguments for single values"
                )
            if kwargs:
                data = {**data, **kwargs}
        elif kwargs:
            data = kwargs
        else:
            return
        _fill(self, data, type(self), ())

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _protect(cls)
        _register(cls)
        cls._reserved_names = frozenset(dir(cls))
        for hook in SUBCLASS_HOOKS:  # e.g. torch pytree registration, once evotensor.tree.torch is used
            hook(cls)

    # ---- mapping interface -------------------------------------------------------------
    def keys(self):
        """Child keys in sorted order (a live view)."""
        return self.__dict__.keys()

    def values(self):
        """Children (subtrees or leaves) in sorted key order (a live view)."""
        return self.__dict__.values()

    def items(self):
        """``(key, child)`` pairs in sorted key order (a live view)."""
        return self.__dict__.items()

    def get(self, key: str, default: Any = None) -> Any:
        """The child at ``key``, or ``default``."""
        return self.__dict__.get(key, default)

    def pop(self, key: str, *default: Any) -> Any:
        """Remove ``key`` and return its child (node constraints are re-checked)."""
        if key not in self.__dict__ and default:
            return default[0]
        value = self[key]
        del self[key]
        return value

    def to_dict(self) -> dict[str, Any]:
        """Nested plain dicts (leaves are not copied)."""
        return {k: v.to_dict() if isinstance(v, Tree) else v for k, v in self.__dict__.items()}

    @property
    def each(self) -> _Each:
        """``t.each.name``: every leaf's attribute ``name``, ignoring keys and Tree methods."""
        return _Each(self)

    def __len__(self) -> int:
        return len(self.__dict__)

    def __iter__(self) -> Iterator[str]:
        return iter(self.__dict__)

    def __contains__(self, key: object) -> bool:
        return key in self.__dict__

    def __bool__(self) -> bool:
        raise TypeError(
            "the truth value of a Tree is ambiguous (== is leaf-wise); use evotensor.tree.equal(a, b) "
            "or len(t)"
        )

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            "a Tree is not an array; use evotensor.tree.np / .jnp functions, which apply to every leaf"
        )

    # ---- attribute and item access -----------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        # only reached when `name` is neither a Tree attribute nor a key
        if name.startswith("_"):
            if name == "_cons":
                # a node made by JAX's unflatten leaves its constraint slot empty (one store less
                # per node on every jitted call that returns a Tree): it has none, fill it now
                _set_cons(self, ())
                return ()
            raise AttributeError(f"{type(self).__name__!s} has no key or attribute {name!r}")
        return leafwise_getattr(self, name)

    if not SPEEDUPS:  # otherwise TreeBase's C slots; a Python method here would override them
        __setattr__ = _setattr
        __delattr__ = _delattr
        __getitem__ = _getitem
        __setitem__ = _setitem
        __delitem__ = _delitem

    def __dir__(self) -> list[str]:
        return sorted(set(dir(type(self))) | {k for k in self.__dict__ if k.isidentifier()})

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call every leaf (e.g. the bound methods in ``t.reshape``) with the same arguments.

        Tree arguments are matched leaf by leaf (strict), others broadcast.
        """
        return apply_tree(_call_leaf, (self, *args), kwargs)

    # ---- dtype and constraints ---------------------------------------------------------
    def astype(self, dtype: Any) -> Tree:
        """Every leaf's ``astype(dtype)`` (torch: ``.to(dtype)``); a dtype constraint follows."""
        out = map_nodes(self, lambda x: _astype(x, dtype), lambda c: c.after_astype(dtype))
        return out

    @property
    def constraints(self) -> tuple[_c.Constraint, ...]:
        """Constraints in force at this node: its own and the inherited ones."""
        return tuple(a.constraint for a in self._cons)

    def with_constraints(self, *constraints: _c.Constraint) -> Tree:
        """A structural copy with ``constraints`` attached to its root, checked now.

        Inherited constraints (``dtype``, ``ndim``, ``shape_prefix``, ``device``, ``predicate``)
        reach every leaf below; ``node_predicate`` only this node. Raises
        :class:`~evotensor.tree.constraints.ConstraintError` naming the first violating path.
        The original tree is not modified (its nodes are copied, its leaves shared).
        """
        for c in constraints:
            if not isinstance(c, _c.Constraint):
                raise TypeError(
                    f"with_constraints: expected Constraint objects (evotensor.tree.dtype(...), "
                    f"shape_prefix(...), ...), got {c!r}"
                )
        new = tuple(_c.Attached(c, ()) for c in constraints)
        out = attach_copy(self, new)
        validate_tree(out)
        return out

    def validate(self) -> Tree:
        """Check every constraint below this node now; returns ``self``.

        Needed after in-place mutation of a leaf, which the tree cannot observe.
        """
        validate_tree(self)
        return self

    # ---- copying, pickling, printing ---------------------------------------------------
    def __copy__(self) -> Tree:
        out = _new(type(self))
        _set_cons(out, self._cons)
        out.__dict__.update(self.__dict__)
        return out

    def __deepcopy__(self, memo: dict) -> Tree:
        out = _new(type(self))
        memo[id(self)] = out
        _set_cons(out, self._cons)
        d = out.__dict__
        deepcopy = _copy.deepcopy
        for k, v in self.__dict__.items():
            d[k] = deepcopy(v, memo)
        return out

    def __reduce__(self) -> tuple:
        return (_rebuild, (type(self), dict(self.__dict__), self._cons))

    def __repr__(self) -> str:
        return tree_repr(self)


_SLOW_VALUES = (dict, raw, Tree)

_CONS = Tree._cons  # the slot descriptor: sets the constraints without going through __setattr__
_set_cons = _CONS.__set__  # bound once: `_CONS.__set__(...)` builds a method wrapper per call


def _rebuild(cls: type, data: dict, cons: tuple) -> Tree:
    out = _new(cls)
    _set_cons(out, cons)
    out.__dict__.update(data)
    return out


_rebuild.__module__ = "evotensor.tree.tree"  # pickles name it there (tree.py re-exports it)


def new_node(cls: type, keys: tuple | list, children: Any) -> Tree:
    """A node from keys already in sorted order (no checks): the pytree unflatten.

    Its constraint slot stays empty (read as ``()`` by ``Tree.__getattr__``), as in JAX's unflatten.
    """
    out = _new(cls)
    out.__dict__.update(zip(keys, children))
    return out


def _fill(node: Tree, data: dict, cls: type, path: tuple[str, ...]) -> None:
    """Put ``data``'s items into ``node`` in sorted order; dicts become nodes of class ``cls``."""
    try:
        keys = sorted(data)
    except TypeError:
        keys = list(data)
    d = node.__dict__
    for k in keys:
        if type(k) is not str:
            if not isinstance(k, str):
                raise TypeError(f"Tree keys must be strings, got {k!r} at {_c.format_path(path)}")
            k = str(k)
        v = data[k]
        if type(v) is dict or (isinstance(v, dict) and not isinstance(v, Tree)):
            child = _new(cls)
            _set_cons(child, ())
            _fill(child, v, cls, (*path, k))
            v = child
        elif type(v) is raw:
            v = v.value
        d[k] = v


def from_dict(data: dict, cls: type = Tree) -> Tree:
    """A tree of class ``cls`` from nested dicts (fast path used by the constructor)."""
    node = _new(cls)
    _set_cons(node, ())
    _fill(node, data, cls, ())
    return node


# ---- setting and deleting children with constraint checks ------------------------------


def _insert_sorted(d: dict, key: str, value: Any) -> None:
    if key in d or not d or key > next(reversed(d)):
        d[key] = value
        return
    d[key] = value
    items = sorted(d.items(), key=_itemgetter0)
    d.clear()
    d.update(items)


def set_child(node: Tree, key: str, value: Any) -> None:
    """``node[key] = value`` with dict conversion and constraint checks (rolled back on failure)."""
    if type(key) is not str:
        raise TypeError(f"Tree keys must be strings, got {key!r}")
    if isinstance(value, dict) and not isinstance(value, Tree):
        value = from_dict(value, type(node))
    elif type(value) is raw:
        value = value.value
    if isinstance(value, Tree):
        _refuse_cycle(node, key, value)
    cons = node._cons
    if not cons:
        _insert_sorted(node.__dict__, key, value)
        return
    inherited = tuple(a for a in cons if a.constraint.inherit)
    for a in inherited:
        _check_value(a, (key,), value)
    if inherited and isinstance(value, Tree):
        value = attach_copy(value, tuple(_c.Attached(a.constraint, (*a.where, key)) for a in inherited))
    d = node.__dict__
    had, old = key in d, d.get(key)
    _insert_sorted(d, key, value)
    try:
        _check_node_constraints(node)
    except _c.ConstraintError:
        if had:
            d[key] = old
        else:
            del d[key]
        raise


def _refuse_cycle(node: Tree, key: str, value: Tree) -> None:
    """Raise if ``value`` is ``node`` or holds it: ``node[key] = value`` would make a tree that
    contains itself, which no walk (flatten, ``jit``, repr, copy) could finish."""
    seen: set[int] = set()
    pending: list[tuple[Tree, tuple[str, ...]]] = [(value, ())]
    while pending:
        current, path = pending.pop()
        if current is node:
            where = "is this node itself" if not path else f"holds this node at {_c.format_path(path)}"
            raise ValueError(
                f"cannot set key {key!r}: the Tree being set {where}, so the tree would contain itself "
                "(a cycle, which flatten and jit cannot walk); set a copy instead, e.g. "
                "jax.tree.map(lambda x: x, subtree)"
            )
        if id(current) in seen:
            continue
        seen.add(id(current))
        for k, v in current.__dict__.items():
            if isinstance(v, Tree):
                pending.append((v, (*path, k)))


def delete_child(node: Tree, key: str) -> None:
    d = node.__dict__
    old = d.pop(key)
    if node._cons:
        try:
            _check_node_constraints(node)
        except _c.ConstraintError:
            _insert_sorted(d, key, old)
            raise


def _check_value(a: _c.Attached, path: tuple[str, ...], value: Any) -> None:
    if isinstance(value, Tree):
        for k, v in value.__dict__.items():
            _check_value(a, (*path, k), v)
    else:
        _c.check_leaf(a, path, value)


def _check_node_constraints(node: Tree) -> None:
    for a in node._cons:
        if not a.constraint.inherit:
            if any(isinstance(leaf, _Tracer) for leaf in iter_leaves(node)):
                continue
            reason = a.constraint.check(node)
            if reason is not None:
                raise _c.ConstraintError(a.where, a.constraint, reason)


def attach_copy(tree: Tree, extra: tuple[_c.Attached, ...]) -> Tree:
    """A structural copy of ``tree`` whose every node also carries ``extra`` (paths extended).

    Non-inherited constraints in ``extra`` stay on the root only.
    """
    out = _new(type(tree))
    _set_cons(out, tree._cons + extra)
    inherited = tuple(a for a in extra if a.constraint.inherit)
    d = out.__dict__
    for k, v in tree.__dict__.items():
        if isinstance(v, Tree):
            v = attach_copy(v, tuple(_c.Attached(a.constraint, (*a.where, k)) for a in inherited))
        d[k] = v
    return out


def validate_tree(node: Tree) -> None:
    """Check every constraint attached anywhere below ``node``."""
    for k, v in node.__dict__.items():
        if isinstance(v, Tree):
            validate_tree(v)
        else:
            for a in node._cons:
                if a.constraint.inherit:
                    _c.check_leaf(a, (k,), v)
    _check_node_constraints(node)


# ---- leaf-wise helpers ------------------------------------------------------------------


def iter_leaves(node: Tree) -> Iterator[Any]:
    for v in node.__dict__.values():
        if isinstance(v, Tree):
            yield from iter_leaves(v)
        else:
            yield v


def map_nodes(
    node: Tree,
    leaf_fn: Callable[[Any], Any],
    cons_fn: Callable[[_c.Constraint], _c.Constraint | None] | None = None,
    path: tuple[str, ...] = (),
) -> Tree:
    """Apply ``leaf_fn`` to every leaf; constraints are mapped by ``cons_fn`` (None drops them)."""
    out = _new(type(node))
    cons: tuple = ()
    if cons_fn is not None and node._cons:
        derived = []
        for a in node._cons:
            c = cons_fn(a.constraint)
            if c is not None:
                derived.append(_c.Attached(c, a.where))
        cons = tuple(derived)
    _set_cons(out, cons)
    d = out.__dict__
    for k, v in node.__dict__.items():
        if isinstance(v, Tree):
            d[k] = map_nodes(v, leaf_fn, cons_fn, path + (k,))
        else:
            try:
                d[k] = leaf_fn(v)
            except Exception as exc:
                annotate(exc, path + (k,), v)
                raise
    return out


def annotate(exc: BaseException, path: tuple[str, ...], leaf: Any) -> None:
    """Add a note naming the leaf path to an error raised by a leaf function (once)."""
    notes = getattr(exc, "__notes__", [])
    if not any(n.startswith("while processing the leaf") for n in notes):
        exc.add_note(f"while processing the leaf at {_c.format_path(path)} ({type(leaf).__name__})")


def leafwise_getattr(node: Tree, name: str, path: tuple[str, ...] = ()) -> Tree:
    out = _new(type(node))
    _set_cons(out, ())
    d = out.__dict__
    for k, v in node.__dict__.items():
        if isinstance(v, Tree):
            d[k] = leafwise_getattr(v, name, (*path, k))
        else:
            try:
                d[k] = getattr(v, name)
            except AttributeError:
                raise AttributeError(
                    f"the leaf at {_c.format_path((*path, k))} ({type(v).__name__}) has no attribute "
                    f"{name!r}, and the tree has no key {name!r}"
                ) from None
    return out


def _call_leaf(f: Any, *args: Any, **kwargs: Any) -> Any:
    return f(*args, **kwargs)


def setitem_leaves(node: Tree, index: Any, value: Any) -> None:
    """``leaf[index] = value`` for every leaf (in place; JAX leaves are immutable: use ``t.at``)."""

    def put(leaf: Any, v: Any) -> None:
        leaf[index] = v

    apply_tree(put, (node, value), {})
    if node._cons:
        validate_tree(node)


def delitem_leaves(node: Tree, index: Any) -> None:
    for leaf in iter_leaves(node):
        del leaf[index]


def _astype(x: Any, dtype: Any) -> Any:
    if type(x).__module__.startswith("torch"):
        import torch

        if not isinstance(dtype, torch.dtype):
            dtype = getattr(torch, _c.dtype_name(dtype))
        return x.to(dtype)
    return x.astype(dtype)


# ---- pytree registration ------------------------------------------------------------------


# JAX calls these once per node on every flatten/unflatten (a jitted call flattens its arguments
# and unflattens its result), so they do the least Python allows: globals and builtins are bound
# as default arguments (fast locals), and flatten hands JAX the live ``values()`` view instead of
# copying it into a tuple (JAX's C++ flattener iterates it at once; nothing can mutate the dict
# in between). The aux data is the tuple of sorted keys. Registered as ``flatten_func`` so that
# plain flattening (jit, tree_map, tree_leaves) never builds key paths.


def _flatten(t: Tree, _tuple=tuple) -> tuple[Any, tuple]:
    d = t.__dict__
    return d.values(), _tuple(d)


def _flatten_with_keys(t: Tree, _key=DictKey, _tuple=tuple) -> tuple[list, tuple]:
    d = t.__dict__
    return [(_key(k), v) for k, v in d.items()], _tuple(d)


def _register(cls: type) -> None:
    if SPEEDUPS:
        # C callbacks: JAX calls them once per node on every flatten/unflatten
        jax.tree_util.register_pytree_with_keys(
            cls, _flatten_with_keys, _sp.make_unflatten(cls), flatten_func=_sp.flatten
        )
        return

    def unflatten(keys: tuple, children: Any, _cls=cls, _new=_new, _zip=zip) -> Tree:
        out = _new(_cls)  # the constraint slot stays empty: `_cons` reads as () (Tree.__getattr__)
        out.__dict__.update(_zip(keys, children))
        return out

    jax.tree_util.register_pytree_with_keys(cls, _flatten_with_keys, unflatten, flatten_func=_flatten)


if SPEEDUPS:
    _sp.configure(_setattr, _delattr, _getitem, _setitem, _delitem, raw)
_protect(Tree)
_register(Tree)
Tree._reserved_names = frozenset(dir(Tree))  # names `t.name = v` may not set (class attributes)


# ---- the walk of treelize (modes, `missing`, `inherit`: see evotensor.tree.treelize) -------------

MODES = ("strict", "inner", "outer", "left")


class _NotSet:
    """Sentinel: ``missing`` not given (absent keys are errors)."""

    __module__ = "evotensor.tree.treelize"  # its public home (repr, pickles of MISSING)
    _instance: _NotSet | None = None

    def __new__(cls) -> _NotSet:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"

    def __reduce__(self) -> str:
        return "MISSING"


MISSING = _NotSet()


def _arg_label(pos: int | None, name: str | None) -> str:
    return f"argument {pos}" if name is None else f"argument {name!r}"


def _child(tree: Tree, key: str, missing: Any, path: tuple[str, ...], label: str) -> Any:
    d = tree.__dict__
    if key in d:
        return d[key]
    if missing is MISSING:
        raise KeyError(
            f"key {key!r} is missing from {label} at {_c.format_path(path)} and no `missing` was given"
        )
    return missing() if callable(missing) else missing


def _keyset(trees: list[Tree], labels: list[str], mode: str, path: tuple[str, ...]) -> list[str]:
    first = tuple(trees[0].__dict__)
    if len(trees) == 1:
        return list(first)
    if mode == "left":
        return list(first)
    if mode == "strict":
        for t, label in zip(trees[1:], labels[1:]):
            other = tuple(t.__dict__)
            if other != first:
                a, b = set(first), set(other)
                diff = sorted(a ^ b)[0]
                where = labels[0] if diff in a else label
                lacking = label if diff in a else labels[0]
                raise KeyError(
                    f"strict mode: key sets differ at {_c.format_path(path)}: key {diff!r} is in "
                    f"{where} but not in {lacking} (keys {sorted(a)} vs {sorted(b)}); pass "
                    "mode='inner'/'outer'/'left' to allow mismatches"
                )
        return list(first)
    sets = [set(t.__dict__) for t in trees]
    keys = set.intersection(*sets) if mode == "inner" else set.union(*sets)
    return sorted(keys)


def _walk(
    fn: Callable,
    args: tuple,
    kwargs: dict,
    mode: str,
    missing: Any,
    inherit: bool,
    cls: type | None,
    path: tuple[str, ...],
) -> Any:
    tpos = [i for i, a in enumerate(args) if isinstance(a, Tree)]
    tkw = sorted(k for k, v in kwargs.items() if isinstance(v, Tree)) if kwargs else []
    if not tpos and not tkw:
        if not path:
            return fn(*args, **kwargs)
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            annotate(exc, path, args[0] if args else None)
            raise
    if not inherit and (len(tpos) < len(args) or len(tkw) < len(kwargs)):
        bad = (
            [_arg_label(i, None) for i in range(len(args)) if i not in tpos]
            + [_arg_label(None, k) for k in kwargs if k not in tkw]
        )[0]
        raise TypeError(
            f"inherit=False: {bad} is not a tree at {_c.format_path(path)} (a non-tree value or a "
            "leaf facing a subtree); pass inherit=True to broadcast it"
        )
    trees = [args[i] for i in tpos] + [kwargs[k] for k in tkw]
    if cls is None:
        cls = type(trees[0])
    if len(trees) == 1 and not tkw:
        return _walk_single(fn, list(args), kwargs, tpos[0], cls, path)
    labels = [_arg_label(i, None) for i in tpos] + [_arg_label(None, k) for k in tkw]
    keys = _keyset(trees, labels, mode, path)
    out = _new(cls)
    _set_cons(out, ())
    d = out.__dict__
    a = list(args)
    kw = dict(kwargs)
    for key in keys:
        for i in tpos:
            a[i] = _child(args[i], key, missing, path, _arg_label(i, None))
        for k in tkw:
            kw[k] = _child(kwargs[k], key, missing, path, _arg_label(None, k))
        d[key] = _walk(fn, tuple(a), kw, mode, missing, inherit, cls, (*path, key))
    return out


def _walk_single(fn: Callable, args: list, kwargs: dict, i: int, cls: type, path: tuple[str, ...]) -> Tree:
    """Fast path: one positional tree argument, everything else broadcast."""
    node = args[i]
    out = _new(cls)
    _set_cons(out, ())
    d = out.__dict__
    for k, v in node.__dict__.items():
        args[i] = v
        if isinstance(v, Tree):
            d[k] = _walk_single(fn, list(args), kwargs, i, cls, (*path, k))
        else:
            try:
                d[k] = fn(*args, **kwargs)
            except Exception as exc:
                annotate(exc, (*path, k), v)
                raise
    args[i] = node
    return out


def apply_tree(
    fn: Callable,
    args: tuple,
    kwargs: dict,
    mode: str = "strict",
    missing: Any = MISSING,
    inherit: bool = True,
    return_type: type | None = None,
) -> Any:
    """Apply ``fn`` leaf by leaf over the tree arguments (the engine behind :func:`treelize`)."""
    return _walk(fn, args, kwargs, mode, missing, inherit, return_type, ())


def _check_config(mode: str, missing: Any, inherit: bool, stacklevel: int = 3) -> None:
    if mode not in MODES:
        raise ValueError(f"treelize: mode must be one of {MODES}, got {mode!r}")
    if not isinstance(inherit, bool):
        raise TypeError(f"treelize: inherit must be a bool, got {inherit!r}")
    if mode == "strict" and missing is not MISSING:
        warnings.warn(
            "treelize: `missing` is ignored in strict mode (key sets must match); use mode='outer' or 'left'",
            RuntimeWarning,
            stacklevel=stacklevel,
        )
    if mode == "outer" and missing is MISSING:
        warnings.warn(
            "treelize: mode='outer' without `missing`: any key absent from an argument will raise",
            RuntimeWarning,
            stacklevel=stacklevel,
        )


# ---- indexing every leaf: t[idx] (how and why: the docstring of evotensor.tree.indexing) ---------

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


def _rebuild_index(spec: tuple, operands: list) -> tuple:
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
# array on every call, a sizeable share of the call's cost; a cached scalar is not. Made lazily,
# outside traces only (inside one, device_put would give a tracer, which must not leak).
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
    idx = _rebuild_index(spec, operands)
    return [x[idx] for x in leaves]


def index_leaves(node: Tree, index: Any) -> Tree:
    """``leaf[index]`` for every leaf; dtype/device/ndim/shape-prefix constraints are derived.

    Concrete JAX leaves are indexed in one jitted call (see the docstring of
    :mod:`evotensor.tree.indexing`); the result is the same as indexing each leaf eagerly.
    """
    leaves: list = []
    slots: list[tuple[dict, str, tuple[str, ...]]] = []
    out = _index_walk(node, index, (), leaves, slots)
    if leaves:  # bounds first: JAX would clamp an out-of-range integer where NumPy raises
        bounds = _integer_bounds(index)
        if bounds:
            for x, (_, k, path) in zip(leaves, slots):
                _check_bounds(x, bounds, (*path, k))
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


def _index_walk(node: Tree, index: Any, path: tuple[str, ...], leaves: list, slots: list) -> Tree:
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
            d[k] = _index_walk(v, index, path + (k,), leaves, slots)
        else:
            try:
                d[k] = v[index]
            except Exception as exc:
                annotate(exc, path + (k,), v)
                raise
    return out


def _integer_bounds(index: Any) -> list[tuple[int, bool, int, int]] | None:
    """The concrete integer parts of ``index`` as ``(position, from_end, low, high)``: the smallest
    and largest integer indexing one axis, ``position`` counting the axes consumed before it (from
    the end, after an ``...``). ``None`` when there are none or the index is not understood (a
    tracer, a list, ...): such leaves are left to JAX."""
    entries = index if isinstance(index, tuple) else (index,)
    out: list[tuple[int, bool, int, int]] = []
    before, after, seen_ellipsis = 0, [], False
    for e in entries:
        if e is None:
            continue
        if e is Ellipsis:
            if seen_ellipsis:
                return None
            seen_ellipsis = True
            continue
        if isinstance(e, slice):
            consumed, bound = 1, None
        elif isinstance(e, (int, np.integer)) and not isinstance(e, (bool, np.bool_)):
            consumed, bound = 1, (int(e), int(e))
        elif isinstance(e, (np.ndarray, jax.Array)) and not isinstance(e, _Tracer):
            if e.dtype == bool:
                consumed, bound = e.ndim, None
            elif np.issubdtype(e.dtype, np.integer):
                if e.size == 0:
                    consumed, bound = 1, None
                else:
                    host = np.asarray(e)
                    consumed, bound = 1, (int(host.min()), int(host.max()))
            else:
                return None
        else:
            return None
        if seen_ellipsis:
            after.append((consumed, bound))
        else:
            if bound is not None:
                out.append((before, False, *bound))
            before += consumed
    remaining = sum(c for c, _ in after)
    for consumed, bound in after:
        if bound is not None:
            out.append((remaining, True, *bound))
        remaining -= consumed
    return out or None


def _check_bounds(x: Any, bounds: list[tuple[int, bool, int, int]], path: tuple[str, ...]) -> None:
    """IndexError naming the leaf if an integer of the index is out of range for ``x``'s axis."""
    shape = x.shape
    for position, from_end, low, high in bounds:
        axis = len(shape) - position if from_end else position
        if not 0 <= axis < len(shape):
            return  # too many indices: JAX's own error (with the leaf path) follows
        n = shape[axis]
        bad = high if high >= n else low if low < -n else None
        if bad is not None:
            raise IndexError(
                f"index {bad} is out of bounds for axis {axis} with size {n} of the leaf at "
                f"{_c.format_path(path)} (shape {tuple(shape)})"
            )


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


# ---- the repr: tree art (evotensor.tree.io's docstring describes it) ----------------------------


def _leaf_text(v: Any, width: int = 70) -> str:
    shape = getattr(v, "shape", None)
    dt = getattr(v, "dtype", None)
    if shape is not None and dt is not None and not isinstance(shape, Tree):
        try:
            shape_t = tuple(int(s) for s in shape)
        except TypeError:
            shape_t = shape
        tname = "Array" if type(v).__name__ == "ArrayImpl" else type(v).__name__
        return f"{tname}(shape={shape_t}, dtype={_c.dtype_name(dt)})"
    text = repr(v).splitlines()
    line = text[0] if text else ""
    if len(text) > 1 or len(line) > width:
        line = line[: width - 3] + "..."
    return line


def tree_repr(t: Tree) -> str:
    """Tree art: ``<Tree keys=[...]>`` then one line per child, sorted, shared nodes printed once."""
    lines: list[str] = []
    seen: dict[int, tuple[str, ...]] = {}

    def header(node: Tree) -> str:
        cons = node.constraints
        extra = f" constraints={list(cons)}" if cons else ""
        return f"<{type(node).__name__} keys={list(node.keys())}{extra}>"

    def walk(node: Tree, prefix: str, path: tuple[str, ...]) -> None:
        items = list(node.__dict__.items())
        for i, (k, v) in enumerate(items):
            last = i == len(items) - 1
            branch = "└── " if last else "├── "
            child_prefix = prefix + ("    " if last else "│   ")
            key = k if k.isidentifier() else repr(k)
            if isinstance(v, Tree):
                if id(v) in seen:
                    first = _c.format_path(seen[id(v)])
                    lines.append(f"{prefix}{branch}{key}: <{type(v).__name__}> (same node as {first})")
                    continue
                seen[id(v)] = (*path, k)
                lines.append(f"{prefix}{branch}{key}: {header(v)}")
                walk(v, child_prefix, (*path, k))
            else:
                lines.append(f"{prefix}{branch}{key}: {_leaf_text(v)}")

    seen[id(t)] = ()
    lines.append(header(t))
    walk(t, "", ())
    return "\n".join(lines)


# ---- helpers of the structural modules (functional, restructuring, joining, indexing) -------------


def _require_tree(t: Any, fn: str, arg: str = "t") -> None:
    if not isinstance(t, Tree):
        raise TypeError(f"{fn}: {arg} must be a Tree, got {type(t).__name__}")


def _empty(cls: type) -> Tree:
    out = _new(cls)
    _set_cons(out, ())
    return out


# Array backend of a leaf ("jax", "torch" or "numpy"), decided once per type.
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
