"""Constraints attached to :class:`~evotensor.tree.Tree` nodes, and enforced.

treevalue defines constraint classes but never attaches them to trees; here they are attached
with :meth:`Tree.with_constraints` and checked

* when attached (every leaf below, every node they sit on),
* on every set or delete through the node they reach (``t.x.c = v``, ``t["x"] = {...}``),
* on demand with :meth:`Tree.validate`.

In-place mutation of a leaf (``arr[0] = 5`` on a NumPy leaf, ``tensor.add_(1)``) cannot be seen by
the tree: call ``validate()`` after such code. Checks never run on traced values (leaves that are
JAX tracers are skipped), so constraints cost nothing inside ``jit``/``vmap``/``grad``.

Two kinds (the TreeTensor paper's inheritance rule):

* **inherited** constraints (``dtype``, ``ndim``, ``shape_prefix``, ``device``, ``predicate``)
  hold for every leaf below the node they are attached to;
* **node** constraints (``node_predicate``) hold for that one node only, e.g.
  ``node_predicate(lambda n: n.anchor.shape == n.positive.shape)``.

A violation raises one :class:`ConstraintError` naming the path (relative to the node the
constraint was attached to) and the constraint.

Operations that provably preserve a constraint carry it to their result: indexing leaves with a
non-string index (``t[0]``, ``t[:8]``, ``t[idx]``) keeps the dtype and device and shifts shape
prefixes and ndim; ``t.astype(d)`` replaces the dtype constraint; ``stack``/``concatenate`` of
trees carrying the same constraints at a node, and ``split``, update shape prefixes and ndim
(``shape_prefix(T, B)`` stacked 16 times is ``shape_prefix(16, T, B)``). Predicates are never
carried (nothing proves them). Results of JAX
transformations (``jit``, ``vmap``, ``jax.tree.map``) carry no constraints: the pytree aux data
holds only the sorted keys, so a constrained and an unconstrained tree have equal treedefs.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

__all__ = [
    "Constraint",
    "ConstraintError",
    "DeviceConstraint",
    "DtypeConstraint",
    "NdimConstraint",
    "NodePredicate",
    "Predicate",
    "ShapePrefixConstraint",
    "device",
    "dtype",
    "ndim",
    "node_predicate",
    "predicate",
    "shape_prefix",
]

_Tracer = jax.core.Tracer


def format_path(path: tuple[str, ...]) -> str:
    """``('x', 'c')`` -> ``x.c``; keys that are not identifiers are written ``['a b']``."""
    if not path:
        return "<root>"
    out = []
    for i, key in enumerate(path):
        if key.isidentifier():
            out.append(key if i == 0 else "." + key)
        else:
            out.append(f"[{key!r}]")
    return "".join(out)


class ConstraintError(ValueError):
    """A value violates a constraint. ``path`` is a tuple of keys, ``constraint`` the constraint."""

    def __init__(self, path: tuple[str, ...], constraint: Constraint, reason: str):
        self.path = path
        self.constraint = constraint
        self.reason = reason
        super().__init__(f"constraint {constraint!r} violated at {format_path(path)}: {reason}")


class Constraint:
    """Base class. ``inherit`` says whether it reaches every leaf below its node.

    Subclasses implement ``check(value) -> str | None`` (a reason when violated) and may
    implement ``after_index(index)`` / ``after_astype(dtype)`` returning the constraint that the
    result of that operation provably satisfies, or ``None`` when nothing can be said.
    """

    inherit: bool = True

    def check(self, value: Any) -> str | None:  # pragma: no cover - abstract
        raise TypeError(f"{type(self).__name__} must implement check()")

    def after_index(self, index: Any) -> Constraint | None:
        return None

    def after_astype(self, new_dtype: Any) -> Constraint | None:
        return None

    def after_join(self, kind: str, n: int, axis: int) -> Constraint | None:
        """After ``stack`` (``kind='stack'``) or ``concatenate`` (``'concat'``) of ``n`` trees that
        all carry this constraint at the same node, or ``split`` into pieces (``'split'``, ``n``
        = piece length along ``axis`` or -1 when pieces differ)."""
        return None


def dtype_name(d: Any) -> str:
    """Canonical dtype name for NumPy, JAX and PyTorch dtypes (``torch.float32`` -> ``float32``)."""
    if isinstance(d, str):
        s = d
    else:
        try:
            return np.dtype(d).name
        except TypeError:
            s = str(d)
    s = s.removeprefix("torch.")
    try:
        return np.dtype(s).name
    except TypeError:
        return s


def _shape_of(value: Any) -> tuple[int, ...] | None:
    shape = getattr(value, "shape", None)
    if shape is None:
        return None
    try:
        return tuple(int(s) for s in shape)
    except TypeError:
        return None


@dataclasses.dataclass(frozen=True)
class DtypeConstraint(Constraint):
    """Every leaf below has this dtype (compared by canonical name across backends)."""

    dtype: str

    def check(self, value: Any) -> str | None:
        d = getattr(value, "dtype", None)
        if d is None:
            return f"{type(value).__name__} value has no dtype, expected {self.dtype}"
        name = dtype_name(d)
        return None if name == self.dtype else f"dtype is {name}, expected {self.dtype}"

    def after_index(self, index: Any) -> Constraint | None:
        return self

    def after_astype(self, new_dtype: Any) -> Constraint | None:
        return DtypeConstraint(dtype_name(new_dtype))

    def after_join(self, kind: str, n: int, axis: int) -> Constraint | None:
        return self

    def __repr__(self) -> str:
        return f"dtype({self.dtype!r})"


def _index_items(index: Any) -> tuple | None:
    """An index as a tuple of per-axis items, or None when it is not one we can reason about."""
    if not isinstance(index, tuple):
        index = (index,)
    return index


def _is_int(x: Any) -> bool:
    return (
        isinstance(x, numbers.Integral)
        and not isinstance(x, bool)
        or (isinstance(x, np.ndarray | jax.Array) and x.ndim == 0 and np.issubdtype(x.dtype, np.integer))
    )


def _array_info(x: Any) -> tuple[int, bool, int | None] | None:
    """(ndim, is_bool, length) of an array-like advanced index, or None if it is not one."""
    if isinstance(x, list):
        try:
            x = np.asarray(x)
        except ValueError:
            return None
    if isinstance(x, _Tracer) or not hasattr(x, "shape") or not hasattr(x, "dtype"):
        return None
    shape = _shape_of(x)
    if shape is None:
        return None
    is_bool = dtype_name(x.dtype) == "bool"
    length = shape[0] if shape and not is_bool else None
    return len(shape), is_bool, length


def _index_effect(index: Any) -> list[tuple[str, Any]] | None:
    """Per-axis effects of a basic index, read left to right.

    Each item is ``("drop", None)`` (an integer removes an axis), ``("slice", slice)``,
    ``("take", n)`` (a 1-D integer array of length n), ``("mask", None)`` (a 1-D boolean array:
    unknown length), or ``("new", None)`` (``None`` adds an axis of length 1). Returns None when
    the index has an ``Ellipsis`` after other items, several array indices, or arrays of more than
    one dimension; then only dtype and device survive.
    """
    items = _index_items(index)
    effects: list[tuple[str, Any]] = []
    n_arrays = 0
    for item in items:
        if item is None:
            effects.append(("new", None))
        elif item is Ellipsis:
            if effects:  # an ellipsis after leading items moves later items to the end
                return None
            # leading ellipsis: the remaining items index trailing axes, the prefix is unknown
            return None if len(items) > 1 else []
        elif isinstance(item, slice):
            effects.append(("slice", item))
        elif _is_int(item):
            effects.append(("drop", None))
        else:
            info = _array_info(item)
            if info is None:
                return None
            nd, is_bool, length = info
            n_arrays += 1
            if n_arrays > 1 or nd != 1:
                return None
            effects.append(("mask", None) if is_bool else ("take", length))
    return effects


def _ndim_delta(effects: list[tuple[str, Any]]) -> int:
    return sum(-1 if kind == "drop" else 1 if kind == "new" else 0 for kind, _ in effects)


@dataclasses.dataclass(frozen=True)
class NdimConstraint(Constraint):
    """Every leaf below has exactly this many dimensions."""

    ndim: int

    def check(self, value: Any) -> str | None:
        shape = _shape_of(value)
        if shape is None:
            return f"{type(value).__name__} value has no shape, expected ndim {self.ndim}"
        return (
            None if len(shape) == self.ndim else f"ndim is {len(shape)} (shape {shape}), expected {self.ndim}"
        )

    def after_index(self, index: Any) -> Constraint | None:
        effects = _index_effect(index)
        if effects is None:
            return None
        return NdimConstraint(self.ndim + _ndim_delta(effects))

    def after_astype(self, new_dtype: Any) -> Constraint | None:
        return self

    def after_join(self, kind: str, n: int, axis: int) -> Constraint | None:
        return NdimConstraint(self.ndim + 1) if kind == "stack" else self

    def __repr__(self) -> str:
        return f"ndim({self.ndim})"


@dataclasses.dataclass(frozen=True)
class ShapePrefixConstraint(Constraint):
    """Every leaf below has a shape starting with ``dims`` (``None`` matches any length)."""

    dims: tuple[int | None, ...]

    def check(self, value: Any) -> str | None:
        shape = _shape_of(value)
        if shape is None:
            return f"{type(value).__name__} value has no shape, expected a shape starting with {self._fmt()}"
        if len(shape) < len(self.dims) or any(d is not None and s != d for s, d in zip(shape, self.dims)):
            return f"shape {shape} does not start with {self._fmt()}"
        return None

    def _fmt(self) -> str:
        return (
            "("
            + ", ".join("*" if d is None else str(d) for d in self.dims)
            + ("," if len(self.dims) == 1 else "")
            + ")"
        )

    def after_index(self, index: Any) -> Constraint | None:
        effects = _index_effect(index)
        if effects is None:
            return None
        dims = self.dims
        out: list[int | None] = []
        pos = 0  # next axis of the leaf that the index consumes
        for kind, arg in effects:
            if kind == "new":
                out.append(1)
                continue
            known = pos < len(dims)
            d = dims[pos] if known else None
            pos += 1
            if kind == "drop":
                continue
            if kind == "take":
                out.append(arg)
            elif kind == "slice" and d is not None:
                out.append(len(range(*arg.indices(d))))
            else:  # a mask, or a slice of an axis of unknown length
                out.append(None)
        out.extend(dims[pos:])
        return ShapePrefixConstraint(tuple(out)) if out else None

    def after_astype(self, new_dtype: Any) -> Constraint | None:
        return self

    def after_join(self, kind: str, n: int, axis: int) -> Constraint | None:
        dims = list(self.dims)
        if axis < 0:  # a negative axis counts from the end of each leaf: only safe beyond the prefix
            return None
        if kind == "stack":
            if axis > len(dims):
                return self
            return ShapePrefixConstraint((*dims[:axis], n, *dims[axis:]))
        if axis >= len(dims):
            return self
        d = dims[axis]
        if kind == "concat":
            dims[axis] = None if d is None else d * n
        else:  # split: pieces of length n (or unknown)
            dims[axis] = None if n < 0 else n
        return ShapePrefixConstraint(tuple(dims))

    def __repr__(self) -> str:
        return "shape_prefix(" + ", ".join(repr(d) for d in self.dims) + ")"


def _device_names(value: Any) -> set[str] | None:
    """Names of the devices holding a leaf: ``{'cpu:0'}``, ``{'cuda:0'}``; None if unknown."""
    if isinstance(value, jax.Array):
        return {f"{d.platform}:{d.id}" for d in value.devices()}
    dev = getattr(value, "device", None)
    if isinstance(value, np.ndarray | np.generic):
        return {"cpu:0"}
    if dev is not None and type(value).__module__.startswith("torch"):
        index = dev.index if dev.index is not None else 0
        return {f"{dev.type}:{index}"}
    return None


def _normalize_device(d: Any) -> str:
    if isinstance(d, str):
        return d if ":" in d else d + ":0"
    platform = getattr(d, "platform", None)  # a jax Device
    if platform is not None:
        return f"{platform}:{d.id}"
    dtype = getattr(d, "type", None)  # a torch.device
    if dtype is not None:
        return f"{dtype}:{d.index if d.index is not None else 0}"
    raise TypeError(
        f"device: expected a string like 'cpu' or 'cuda:0', a jax Device or a torch.device, got {d!r}"
    )


@dataclasses.dataclass(frozen=True)
class DeviceConstraint(Constraint):
    """Every leaf below lives on this device (``'cpu'``, ``'gpu:0'``, ``'cuda:1'``, a jax Device)."""

    device: str

    def check(self, value: Any) -> str | None:
        names = _device_names(value)
        if names is None:
            return f"{type(value).__name__} value has no device, expected {self.device}"
        # jax calls CUDA devices 'gpu', torch calls them 'cuda': accept either spelling
        want = {self.device, self.device.replace("cuda:", "gpu:"), self.device.replace("gpu:", "cuda:")}
        return None if names <= want else f"on {sorted(names)}, expected {self.device}"

    def after_index(self, index: Any) -> Constraint | None:
        return self

    def after_astype(self, new_dtype: Any) -> Constraint | None:
        return self

    def after_join(self, kind: str, n: int, axis: int) -> Constraint | None:
        return self

    def __repr__(self) -> str:
        return f"device({self.device!r})"


@dataclasses.dataclass(frozen=True, eq=False)
class Predicate(Constraint):
    """Every leaf below satisfies ``fn(leaf)`` (truthy). Not carried through operations."""

    fn: Callable[[Any], Any]
    name: str

    def check(self, value: Any) -> str | None:
        try:
            ok = bool(self.fn(value))
        except Exception as exc:  # a predicate that cannot evaluate is a violation, with its reason
            return f"predicate raised {type(exc).__name__}: {exc}"
        return None if ok else "predicate is false"

    def __repr__(self) -> str:
        return f"predicate({self.name})"


@dataclasses.dataclass(frozen=True, eq=False)
class NodePredicate(Constraint):
    """The node it is attached to (a subtree) satisfies ``fn(node)``. Not inherited."""

    fn: Callable[[Any], Any]
    name: str
    inherit = False

    def check(self, value: Any) -> str | None:
        return Predicate.check(self, value)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"node_predicate({self.name})"


def dtype(d: Any) -> DtypeConstraint:
    """Every leaf below has dtype ``d`` (``'float32'``, ``jnp.float32``, ``np.int8``, ``torch.float16``)."""
    return DtypeConstraint(dtype_name(d))


def ndim(n: int) -> NdimConstraint:
    """Every leaf below has exactly ``n`` dimensions."""
    if not isinstance(n, numbers.Integral) or n < 0:
        raise ValueError(f"ndim: n must be a non-negative integer, got {n!r}")
    return NdimConstraint(int(n))


def shape_prefix(*dims: int | None) -> ShapePrefixConstraint:
    """Every leaf below has a shape starting with ``dims``; ``None`` matches any length.

    Example: ``shape_prefix(T, B)`` for a rollout whose every leaf is ``[T, B, ...]``.
    """
    for d in dims:
        if d is not None and (not isinstance(d, numbers.Integral) or d < 0):
            raise ValueError(f"shape_prefix: dims must be non-negative integers or None, got {dims!r}")
    return ShapePrefixConstraint(tuple(None if d is None else int(d) for d in dims))


def device(d: Any) -> DeviceConstraint:
    """Every leaf below lives on device ``d`` (``'cpu'``, ``'gpu:0'``, a jax Device, a torch.device)."""
    return DeviceConstraint(_normalize_device(d))


def _fn_name(fn: Callable, name: str | None) -> str:
    return name or getattr(fn, "__name__", None) or repr(fn)


def predicate(fn: Callable[[Any], Any], name: str | None = None) -> Predicate:
    """Every leaf below satisfies ``fn(leaf)``, e.g. ``predicate(lambda x: (x >= 0).all(), 'nonneg')``."""
    if not callable(fn):
        raise TypeError(f"predicate: fn must be callable, got {fn!r}")
    return Predicate(fn, _fn_name(fn, name))


def node_predicate(fn: Callable[[Any], Any], name: str | None = None) -> NodePredicate:
    """The node it is attached to satisfies ``fn(node)``; e.g. ``lambda n: n.a.shape == n.b.shape``."""
    if not callable(fn):
        raise TypeError(f"node_predicate: fn must be callable, got {fn!r}")
    return NodePredicate(fn, _fn_name(fn, name))


@dataclasses.dataclass(frozen=True)
class Attached:
    """A constraint as stored on a node: ``where`` is the path from the node it was attached to."""

    constraint: Constraint
    where: tuple[str, ...]


def check_leaf(attached: Attached, key_path: tuple[str, ...], value: Any) -> None:
    """Raise ConstraintError if a leaf violates an inherited constraint (tracers are skipped)."""
    if isinstance(value, _Tracer):
        return
    reason = attached.constraint.check(value)
    if reason is not None:
        raise ConstraintError(attached.where + key_path, attached.constraint, reason)
