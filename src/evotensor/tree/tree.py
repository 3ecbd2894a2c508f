"""The :class:`Tree` container: nested data with string keys, a first-class JAX pytree.

Storage. A node keeps its children in its instance ``__dict__``, always in sorted key order, so
``t.a`` is a plain attribute lookup (no Python code runs) and flattening hands JAX ``values()``.
Tree methods are data descriptors, so they win over keys of the same name: a key called ``keys``
is still reachable as ``t["keys"]``.

Attribute lookup order: Tree methods/properties -> keys -> every leaf's attribute (``t.shape`` is
a tree of shapes, ``t.sum(axis=0)`` a tree of sums). ``t.each.<name>`` always goes to the leaves
(the escape hatch when a leaf attribute is shadowed by a key or a Tree method).

Copy-vs-alias rule of the constructor (like ``dict(d)``): every ``dict`` you pass becomes a fresh
node; ``Tree`` nodes and leaves inside are kept as they are (aliased, not copied); ``Tree(t)`` is a
shallow copy (a new root whose children are ``t``'s). ``copy.copy(t)`` is the same shallow copy,
``copy.deepcopy(t)`` copies nodes and leaves. Outputs of ``jit``/``vmap``/``jax.tree.map`` are
always fresh nodes. One exception: a subtree inserted below a node with inherited constraints is
copied (structure only, leaves shared) so that the constraints can be attached to its nodes
without changing the caller's tree.

Pytree. Every node class is registered with ``jax.tree_util.register_pytree_with_keys``: children
are the values in sorted key order, key paths are ``DictKey(key)``, the aux data is the tuple of
sorted keys (hashable; constraints are not part of it, so constrained and unconstrained trees
have equal treedefs and JAX outputs carry no constraints). Flatten and unflatten do no checks:
JAX may unflatten with placeholder leaves.

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
import operator
import os
from collections.abc import Callable, Iterator
from typing import Any

import jax
from jax.tree_util import DictKey

from evotensor.tree import constraints as _c

__all__ = ["SPEEDUPS", "Tree", "raw"]


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

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


# Values that a set must convert (a tuple: no union object per call). The hot set paths test
# `issubclass(type(value), _DICT_OR_RAW)`, cheaper than `isinstance` (which also looks up
# `value.__class__` when the type check fails); they differ only for objects that fake `__class__`.
_DICT_OR_RAW = (dict, raw)


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
        and not issubclass(type(value), _DICT_OR_RAW)
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
        if key in d and not self._cons and not issubclass(type(value), _DICT_OR_RAW):
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
        from evotensor.tree.treelize import apply_tree

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
        from evotensor.tree.io import tree_repr

        return tree_repr(self)


_CONS = Tree._cons  # the slot descriptor: sets the constraints without going through __setattr__
_set_cons = _CONS.__set__  # bound once: `_CONS.__set__(...)` builds a method wrapper per call


def _rebuild(cls: type, data: dict, cons: tuple) -> Tree:
    out = _new(cls)
    _set_cons(out, cons)
    out.__dict__.update(data)
    return out


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
            if any(isinstance(leaf, _c._Tracer) for leaf in iter_leaves(node)):
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
    from evotensor.tree.treelize import apply_tree

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

# Indexing every leaf lives in its own module (JAX leaves in one jitted call); it imports from
# this one, hence the import at the end.
from evotensor.tree.indexing import index_leaves  # noqa: E402
