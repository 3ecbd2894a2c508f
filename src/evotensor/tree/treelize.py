"""``treelize``: make any function tree-aware, with TreeTensor's mismatch policies.

``treelize(fn)(*args, **kwargs)``

* calls ``fn`` unchanged when no argument is a :class:`Tree`;
* otherwise recurses over the keys of the tree arguments and calls ``fn`` on the leaves, building
  a tree of the results (of the first tree argument's class, unless ``return_type`` is given);
* non-tree arguments, and a leaf standing opposite a subtree, are passed unchanged to every call
  below (``inherit=True``; with ``inherit=False`` that is an error naming the path).

Key sets at each node follow ``mode``:

=========  ==============================================================================
strict     (default) every tree argument has the same keys; else a KeyError naming the path
inner      keys present in every tree argument
outer      keys present in any tree argument; absent ones come from ``missing``
left       the keys of the first tree argument (positional arguments first, then keyword
           arguments by name); absent ones come from ``missing``
=========  ==============================================================================

``missing`` is a value, or a zero-argument factory called afresh for every absent slot (so
``missing=list`` gives each slot its own list). Without it an absent key is a KeyError naming
the path. At build time, ``missing`` under ``strict`` (it can never be used) and ``outer``
without ``missing`` give a ``RuntimeWarning``. Children are always built in sorted key order
(treevalue uses set order).

Also here: the method form (``self`` is the leaf; ``self_copy=True`` writes the result back into
``self`` and returns it, as ``+=`` does), the class-method form, :func:`treelize_class` (a Tree
class whose methods are a leaf class's methods), and the proxy machinery behind
``evotensor.tree.jnp``, ``.np`` and ``.torch``. The walk itself (:func:`apply_tree`, which
applies the rules above) is in the private module :mod:`evotensor.tree._core`, as ``Tree``'s own
methods (``t(...)``, ``t[idx] = v``) run it too; this module re-exports ``apply_tree``,
``MISSING`` and ``MODES``.
"""

from __future__ import annotations

import functools
import math
import operator
import types
import warnings
from collections.abc import Callable
from typing import Any

from evotensor.tree import restructuring
from evotensor.tree._core import (
    MISSING,
    MODES,  # noqa: F401 - re-exported
    Tree,
    _check_config,
    _walk,
    apply_tree,
    leafwise_getattr,
    set_child,
)

__all__ = [
    "MISSING",
    "apply_tree",
    "treelize",
    "treelize_class",
    "treelize_classmethod",
    "treelize_method",
]


def _has_tree(args: tuple, kwargs: dict) -> bool:
    for a in args:
        if isinstance(a, Tree):
            return True
    if kwargs:
        for a in kwargs.values():
            if isinstance(a, Tree):
                return True
    return False


def _has_tree_in_sequence(args: tuple, kwargs: dict) -> bool:
    for a in (*args, *kwargs.values()) if kwargs else args:
        if isinstance(a, list | tuple) and any(isinstance(x, Tree) for x in a):
            return True
    return False


def _subside_args(args: tuple, kwargs: dict, options: dict) -> tuple[tuple, dict]:
    subside = restructuring.subside
    args = tuple(subside(a, **options) if isinstance(a, list | tuple | dict) else a for a in args)
    kwargs = {
        k: subside(v, **options) if isinstance(v, list | tuple | dict) else v for k, v in kwargs.items()
    }
    return args, kwargs


def _dispatch(
    fn: Callable,
    args: tuple,
    kwargs: dict,
    mode: str,
    missing: Any,
    inherit: bool,
    subside: Any,
    rise: Any,
    return_type: type | None,
) -> Any:
    if subside:
        args, kwargs = _subside_args(args, kwargs, subside if isinstance(subside, dict) else {})
    if not _has_tree(args, kwargs):
        return fn(*args, **kwargs)
    out = _walk(fn, args, kwargs, mode, missing, inherit, return_type, ())
    if rise is not None and rise is not False:
        out = restructuring.rise(out, None if rise is True else rise)
    return out


def treelize(
    fn: Callable | None = None,
    *,
    mode: str = "strict",
    missing: Any = MISSING,
    inherit: bool = True,
    subside: bool | dict | None = None,
    rise: Any = None,
    return_type: type | None = None,
) -> Callable:
    """Make ``fn`` tree-aware (usable as ``@treelize`` or ``@treelize(mode="outer", missing=0)``).

    Args:
        fn: any callable, applied to leaves.
        mode: ``"strict"`` | ``"inner"`` | ``"outer"`` | ``"left"`` (see module docstring).
        missing: value or zero-argument factory for absent keys (``outer``/``left``).
        inherit: broadcast non-tree arguments (and leaves facing subtrees) down the tree.
        subside: if truthy, every list/tuple/dict argument holding trees is first turned into a
            tree of such structures (:func:`evotensor.tree.subside`; a dict gives its options),
            so ``treelize(np.stack, subside=True)([t1, t2])`` stacks leaf by leaf.
        rise: if ``True`` (or a template), lift a structure shared by every result leaf out of
            the tree (:func:`evotensor.tree.rise`), e.g. for functions returning tuples.
        return_type: class of the result trees; default: the first tree argument's class.

    Returns:
        ``F`` with ``F(*args) == fn(*args)`` when no argument is a tree, else a tree of results.

    Example::

        @treelize(mode="outer", missing=0)
        def add(a, b):
            return a + b

        add(Tree(a=1, x={"c": 2}), Tree(a=10, b=5))  # Tree(a=11, b=5, x=Tree(c=2))
    """
    if fn is None:
        return functools.partial(
            treelize,
            mode=mode,
            missing=missing,
            inherit=inherit,
            subside=subside,
            rise=rise,
            return_type=return_type,
        )
    if not callable(fn):
        raise TypeError(f"treelize: fn must be callable, got {fn!r}")
    _check_config(mode, missing, inherit)

    def tree_fn(*args: Any, **kwargs: Any) -> Any:
        return _dispatch(fn, args, kwargs, mode, missing, inherit, subside, rise, return_type)

    try:
        functools.update_wrapper(tree_fn, fn)
    except (AttributeError, TypeError):  # some callables (ufuncs) reject attribute copies
        pass
    return tree_fn


def assign_into(node: Tree, result: Tree) -> None:
    """Write ``result``'s content into ``node`` keeping every existing node's identity."""
    d = node.__dict__
    for k in [k for k in d if k not in result.__dict__]:
        del node[k]
    for k, v in result.__dict__.items():
        cur = d.get(k)
        if isinstance(v, Tree) and isinstance(cur, Tree) and cur is not v:
            assign_into(cur, v)
        else:
            set_child(node, k, v)


def treelize_method(
    fn: Callable | None = None,
    *,
    self_copy: bool = False,
    mode: str = "strict",
    missing: Any = MISSING,
    inherit: bool = True,
    subside: bool | dict | None = None,
    rise: Any = None,
) -> Callable:
    """Method form for :class:`Tree` subclasses: ``fn(self_leaf, *args)`` per leaf.

    The result has ``type(self)``. With ``self_copy=True`` the result is written back into
    ``self`` (node identities kept) and ``self`` is returned (``rise`` is then ignored, with a
    warning). Example::

        class Scores(Tree):
            @treelize_method
            def clipped(self, lo, hi):
                return np.clip(self, lo, hi)
    """
    if fn is None:
        return functools.partial(
            treelize_method,
            self_copy=self_copy,
            mode=mode,
            missing=missing,
            inherit=inherit,
            subside=subside,
            rise=rise,
        )
    _check_config(mode, missing, inherit)
    if self_copy and rise not in (None, False):
        warnings.warn("treelize_method: rise is ignored when self_copy=True", RuntimeWarning, stacklevel=2)
        rise = None

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        cls = type(self) if isinstance(self, Tree) else None
        out = _dispatch(fn, (self, *args), kwargs, mode, missing, inherit, subside, rise, cls)
        if self_copy and isinstance(self, Tree):
            assign_into(self, out)
            return self
        return out

    functools.update_wrapper(method, fn)
    return method


def treelize_classmethod(
    fn: Callable | None = None,
    *,
    mode: str = "strict",
    missing: Any = MISSING,
    inherit: bool = True,
    subside: bool | dict | None = None,
    rise: Any = None,
) -> classmethod:
    """Class-method form: ``cls`` is passed through unchanged, results are trees of class ``cls``.

    Example::

        class Obs(Tree):
            @treelize_classmethod
            def parse(cls, raw):
                return np.asarray(raw, dtype=np.float32)

        Obs.parse(Tree(a=[1, 2]))  # Obs(a=array([1., 2.], dtype=float32))
    """
    if fn is None:
        return functools.partial(  # type: ignore[return-value]
            treelize_classmethod, mode=mode, missing=missing, inherit=inherit, subside=subside, rise=rise
        )
    _check_config(mode, missing, inherit)

    def method(cls: type, *args: Any, **kwargs: Any) -> Any:
        rt = cls if isinstance(cls, type) and issubclass(cls, Tree) else None
        return _dispatch(functools.partial(fn, cls), args, kwargs, mode, missing, inherit, subside, rise, rt)

    functools.update_wrapper(method, fn)
    return classmethod(method)


def treelize_class(
    leaf_cls: type,
    name: str | None = None,
    *,
    mode: str = "strict",
    missing: Any = MISSING,
    inherit: bool = True,
) -> type[Tree]:
    """A :class:`Tree` subclass whose methods are ``leaf_cls``'s public methods, treelized.

    * instance methods -> method form (``self`` is the leaf), e.g. ``PointTree.norm(t)``;
    * properties and other data descriptors -> a tree of the leaves' values;
    * class and static methods -> called on ``leaf_cls`` per leaf, results of the tree class;
    * ``of(*args, **kwargs)`` -> the treelized constructor ``leaf_cls(...)`` per leaf.

    Names that are Tree methods (``keys``, ``values``, ``items``, ``get``, ``pop``, ``astype``, ...)
    keep their Tree meaning; the leaf versions stay reachable through ``t.each.<name>``.
    """
    if not isinstance(leaf_cls, type):
        raise TypeError(f"treelize_class: leaf_cls must be a class, got {leaf_cls!r}")
    _check_config(mode, missing, inherit)
    cfg = {"mode": mode, "missing": missing, "inherit": inherit}
    reserved = set(dir(Tree)) | {"of"}
    ns: dict[str, Any] = {
        "__doc__": f"Tree of {leaf_cls.__qualname__} leaves (evotensor.tree.treelize_class).",
        "__module__": leaf_cls.__module__,
        "leaf_class": leaf_cls,
    }

    def leaf_attr(attr: str) -> Callable:
        def get(self: Tree) -> Tree:
            return leafwise_getattr(self, attr)

        return property(get, doc=f"Tree of each leaf's ``{attr}``.")

    def leaf_cm(attr: str) -> classmethod:
        target = getattr(leaf_cls, attr)

        def method(tcls: type, *args: Any, **kwargs: Any) -> Any:
            return _dispatch(target, args, kwargs, mode, missing, inherit, None, None, tcls)

        method.__name__ = attr
        method.__doc__ = getattr(target, "__doc__", None)
        return classmethod(method)

    for klass in reversed(leaf_cls.__mro__):
        if klass is object:
            continue
        for attr, value in vars(klass).items():
            if attr.startswith("_") or attr in reserved:
                continue
            if isinstance(value, staticmethod | classmethod):
                ns[attr] = leaf_cm(attr)
            elif isinstance(value, property) or (
                hasattr(value, "__get__") and hasattr(value, "__set__") and not callable(value)
            ):
                ns[attr] = leaf_attr(attr)
            elif callable(value) and not isinstance(value, type):
                ns[attr] = treelize_method(value, **cfg)
    ns["of"] = leaf_cm_ctor(leaf_cls, cfg)
    return type(name or f"{leaf_cls.__name__}Tree", (Tree,), ns)


def leaf_cm_ctor(leaf_cls: type, cfg: dict) -> classmethod:
    def of(tcls: type, *args: Any, **kwargs: Any) -> Any:
        """The treelized constructor: ``leaf_cls(*args, **kwargs)`` for every leaf."""
        return _dispatch(
            leaf_cls, args, kwargs, cfg["mode"], cfg["missing"], cfg["inherit"], None, None, tcls
        )

    return classmethod(of)


# ---- operators on Tree ----------------------------------------------------------------------

_BINARY = {
    "add": (operator.add, operator.iadd),
    "sub": (operator.sub, operator.isub),
    "mul": (operator.mul, operator.imul),
    "matmul": (operator.matmul, operator.imatmul),
    "truediv": (operator.truediv, operator.itruediv),
    "floordiv": (operator.floordiv, operator.ifloordiv),
    "mod": (operator.mod, operator.imod),
    "pow": (operator.pow, operator.ipow),
    "lshift": (operator.lshift, operator.ilshift),
    "rshift": (operator.rshift, operator.irshift),
    "and": (operator.and_, operator.iand),
    "xor": (operator.xor, operator.ixor),
    "or": (operator.or_, operator.ior),
}
_COMPARE = {
    "eq": operator.eq,
    "ne": operator.ne,
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
}
_UNARY = {
    "neg": operator.neg,
    "pos": operator.pos,
    "abs": operator.abs,
    "invert": operator.invert,
    "floor": math.floor,
    "ceil": math.ceil,
    "trunc": math.trunc,
}


def _install_operators(cls: type) -> None:
    for name, (op, iop) in _BINARY.items():

        def fwd(self: Tree, other: Any, op: Callable = op) -> Any:
            return _walk(op, (self, other), {}, "strict", MISSING, True, None, ())

        def rev(self: Tree, other: Any, op: Callable = op) -> Any:
            return _walk(op, (other, self), {}, "strict", MISSING, True, type(self), ())

        def inplace(self: Tree, other: Any, iop: Callable = iop) -> Tree:
            assign_into(self, _walk(iop, (self, other), {}, "strict", MISSING, True, None, ()))
            return self

        for dunder, f in ((f"__{name}__", fwd), (f"__r{name}__", rev), (f"__i{name}__", inplace)):
            f.__name__ = f.__qualname__ = dunder
            f.__doc__ = f"Leaf-wise ``{dunder}`` (strict key matching, non-trees broadcast)."
            setattr(cls, dunder, f)

    # divmod gives a (quotient tree, remainder tree) pair, like divmod on numbers
    def divmod_(self: Tree, other: Any) -> Any:
        return restructuring.rise(
            _walk(divmod, (self, other), {}, "strict", MISSING, True, None, ()), (None, None)
        )

    def rdivmod_(self: Tree, other: Any) -> Any:
        return restructuring.rise(
            _walk(divmod, (other, self), {}, "strict", MISSING, True, type(self), ()), (None, None)
        )

    cls.__divmod__, cls.__rdivmod__ = divmod_, rdivmod_

    for name, op in _COMPARE.items():

        def cmp(self: Tree, other: Any, op: Callable = op) -> Any:
            return _walk(op, (self, other), {}, "strict", MISSING, True, None, ())

        cmp.__name__ = cmp.__qualname__ = f"__{name}__"
        cmp.__doc__ = f"Leaf-wise ``{name}``: a tree of results (use evotensor.tree.equal for a bool)."
        setattr(cls, f"__{name}__", cmp)

    for name, op in _UNARY.items():

        def un(self: Tree, op: Callable = op) -> Any:
            return _walk(op, (self,), {}, "strict", MISSING, True, None, ())

        un.__name__ = un.__qualname__ = f"__{name}__"
        setattr(cls, f"__{name}__", un)

    def round_(self: Tree, ndigits: int | None = None) -> Any:
        return _walk(
            round, (self,) if ndigits is None else (self, ndigits), {}, "strict", MISSING, True, None, ()
        )

    cls.__round__ = round_


_install_operators(Tree)


# ---- proxy modules (evotensor.tree.jnp / .np / .torch) ---------------------------------------


class LeafFunction:
    """A library callable made tree-aware: calling it treelizes the call; attributes are proxied.

    ``evotensor.tree.np.add(t, 1)`` adds leaf by leaf; ``evotensor.tree.np.add.reduce`` is the
    tree-aware ``np.add.reduce``. A list/tuple argument holding trees is subsided first, so
    ``evotensor.tree.jnp.stack([t1, t2])`` stacks leaf by leaf. Results are not risen: a function
    returning tuples gives a tree of tuples (use :func:`evotensor.tree.rise`). With no tree
    argument it calls the library function unchanged.
    """

    def __init__(self, fn: Callable, qualname: str):
        self.__wrapped__ = fn
        self.__name__ = getattr(fn, "__name__", qualname.rsplit(".", 1)[-1])
        self.__qualname__ = qualname
        self.__doc__ = getattr(fn, "__doc__", None)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        fn = self.__wrapped__
        if not _has_tree(args, kwargs):
            if not _has_tree_in_sequence(args, kwargs):
                return fn(*args, **kwargs)
            # `stack([t1, t2])`: a list/tuple of trees becomes a tree of lists first (subside)
            args, kwargs = _subside_args(args, kwargs, {})
        return _walk(fn, args, kwargs, "strict", MISSING, True, None, ())

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return proxy_value(getattr(self.__wrapped__, name), f"{self.__qualname__}.{name}")

    def __repr__(self) -> str:
        return f"<tree-aware {self.__qualname__}>"


class ProxyNamespace:
    """A library namespace (module) whose callables are tree-aware, created on demand."""

    def __init__(self, lib: Any, qualname: str):
        self._lib = lib
        self._qualname = qualname

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = proxy_value(getattr(self._lib, name), f"{self._qualname}.{name}")
        setattr(self, name, value)  # cache: the next lookup is a plain attribute
        return value

    def __dir__(self) -> list[str]:
        return dir(self._lib)

    def __repr__(self) -> str:
        return f"<tree-aware namespace {self._qualname}>"


def proxy_value(value: Any, qualname: str) -> Any:
    """Modules -> tree-aware namespaces; callables (not classes) -> LeafFunction; others as is."""
    if isinstance(value, types.ModuleType):
        return ProxyNamespace(value, qualname)
    if isinstance(value, type) or not callable(value):
        return value
    return LeafFunction(value, qualname)


def module_getattr(lib: Any, module_globals: dict, name: str) -> Any:
    """``__getattr__`` of a proxy module: look ``name`` up in ``lib``, wrap it, cache it."""
    if name.startswith("__"):
        raise AttributeError(f"module {module_globals['__name__']!r} has no attribute {name!r}")
    try:
        raw = getattr(lib, name)
    except AttributeError:
        raise AttributeError(
            f"module {module_globals['__name__']!r} has no attribute {name!r} "
            f"({lib.__name__} has none either)"
        ) from None
    value = proxy_value(raw, f"{module_globals['__name__']}.{name}")
    module_globals[name] = value
    return value
