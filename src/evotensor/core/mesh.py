"""Running a family on many devices: the one protocol every family follows.

``evotensor.run(strategy, problem, ..., mesh=mesh)`` runs the same generation on a
``jax.sharding.Mesh`` (one host's devices, or every process's devices after
:func:`evotensor.distributed.initialize`). The population axis of the genotypes is split over the
mesh axis ``axis`` (``"pop"`` by default), so every problem's evaluation is spread over the devices
by XLA's SPMD partitioner without any change to the problem. A family that can do better (keep its
archive or population sharded between generations, run a custom kernel per device) implements the
optional hooks below; nothing else in the library needs to know about meshes.

The protocol (all optional, duck-typed):

* ``strategy.on_mesh(mesh, axis) -> strategy'`` — a strategy with the same ``init/ask/tell``
  protocol whose programs are laid out for ``mesh``. ``strategy'`` may define
  ``state_shardings(state) -> pytree of NamedSharding`` (same structure as ``state``): the run loop
  keeps the state in that layout between compiled chunks (default: replicated).
* ``strategy'.portable_state(state) -> state`` and ``strategy'.from_portable_state(state) -> state``
  — what a checkpoint holds when the layout changes the state's shapes (a QD archive padded to a
  multiple of the device count): the state as one device holds it, and back. With them a
  checkpoint resumes on any number of devices, or none. A leaf that the layout pads along its
  leading axis is returned as :class:`Padded` ``(array, length)`` — "the first ``length`` rows of
  this still-sharded array", no data moved — and :func:`portable_state` either keeps it so (for a
  checkpoint format that writes each device's rows itself: the sharded format, so that no process
  ever holds the whole leaf) or cuts it (``array[:length]``, a gather: the single-file format).
  ``from_portable_state`` takes both: leaves of one device's shapes, and leaves already in the
  padded layout (a sharded checkpoint restored onto a :class:`Padded` template fills rows past
  ``length`` from the template, i.e. with the layout's own padding).
* ``problem.on_mesh(mesh, axis) -> problem'`` — a problem whose ``evaluate`` takes
  population-sharded genotypes (used by problems built on custom kernels that XLA cannot partition,
  such as GP's native and Pallas evaluators, which run them per device inside ``shard_map``).

Without hooks a strategy's state is replicated (every device runs ``tell`` on the whole, small
state) and only the evaluation is split: the right layout for strategies whose state is
``O(dims^2)`` and cannot be split (CMA-ES), whose users still get every device for an expensive
fitness.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from evotensor.core.checks import ArgumentError

POPULATION_AXIS = "pop"


def check_mesh(mesh: Any, axis: Any = POPULATION_AXIS, population_size: int | None = None) -> Mesh:
    """``mesh`` checked: a ``jax.sharding.Mesh`` with an axis named ``axis`` whose size divides
    ``population_size`` (when given). Raises :class:`ArgumentError` naming ``mesh`` or
    ``mesh_axis``."""
    if not isinstance(mesh, Mesh):
        raise ArgumentError(
            "mesh must be a jax.sharding.Mesh (e.g. jax.make_mesh((4,), ('pop',))), "
            f"got {type(mesh).__name__}"
        )
    if not isinstance(axis, str) or axis not in mesh.axis_names:
        raise ArgumentError(
            f"mesh_axis must name one of the mesh's axes {tuple(mesh.axis_names)}, got {axis!r}"
        )
    n = int(mesh.shape[axis])
    if population_size is not None and population_size % n:
        raise ArgumentError(
            f"mesh: the population ({population_size}) must split evenly over the {n} devices of "
            f"mesh axis {axis!r}; choose a population size that is a multiple of {n}"
        )
    return mesh


def auto_mesh(mesh: Mesh) -> Mesh:
    """``mesh`` with every axis of type ``Auto``: the same devices and axis names, sharded by XLA's
    partitioner from the layouts the run loop asks for. ``jax.make_mesh`` makes ``Explicit`` axes
    by default, on which ``with_sharding_constraint`` is refused and every op must state the
    sharding of its result; the library's programs are written for ``Auto``."""
    if all(t == AxisType.Auto for t in mesh.axis_types):
        return mesh
    return Mesh(mesh.devices, mesh.axis_names, axis_types=(AxisType.Auto,) * len(mesh.axis_names))


def axis_size(mesh: Mesh, axis: str = POPULATION_AXIS) -> int:
    """Number of devices along ``axis``."""
    return int(mesh.shape[axis])


def population_sharding(mesh: Mesh, axis: str = POPULATION_AXIS) -> NamedSharding:
    """Split the leading (population) axis over ``axis``; other axes whole."""
    return NamedSharding(mesh, P(axis))


def replicated(mesh: Mesh) -> NamedSharding:
    """A whole copy on every device."""
    return NamedSharding(mesh, P())


def _leading_split(leaf: Any, mesh: Mesh, axis: str, size: int | None) -> NamedSharding:
    shape = getattr(leaf, "shape", ())
    n = axis_size(mesh, axis)
    if len(shape) >= 1 and shape[0] % n == 0 and (size is None or shape[0] == size):
        return population_sharding(mesh, axis)
    return replicated(mesh)


def population_shardings(tree: Any, mesh: Mesh, axis: str = POPULATION_AXIS, size: int | None = None) -> Any:
    """Per-leaf shardings of a population pytree: a leaf whose leading axis splits evenly over
    ``axis`` (and equals ``size`` when given) is split along it, any other leaf is replicated."""
    return jax.tree_util.tree_map(lambda leaf: _leading_split(leaf, mesh, axis, size), tree)


def constrain_population(tree: Any, mesh: Mesh, axis: str = POPULATION_AXIS, size: int | None = None) -> Any:
    """Inside ``jit``: lay a population pytree out as :func:`population_shardings` says (on
    :func:`auto_mesh` of ``mesh``)."""
    shardings = population_shardings(tree, auto_mesh(mesh), axis, size)
    return jax.tree_util.tree_map(jax.lax.with_sharding_constraint, tree, shardings)


def replicated_shardings(tree: Any, mesh: Mesh) -> Any:
    """``replicated(mesh)`` for every leaf of ``tree``."""
    return jax.tree_util.tree_map(lambda _: replicated(mesh), tree)


def on_mesh(obj: Any, mesh: Mesh, axis: str = POPULATION_AXIS) -> Any:
    """``obj.on_mesh(mesh, axis)`` when ``obj`` implements the hook, else ``obj`` unchanged."""
    hook = getattr(obj, "on_mesh", None)
    return hook(mesh, axis) if callable(hook) else obj


def state_shardings(strategy: Any, state: Any, mesh: Mesh) -> Any:
    """The layout the run loop keeps ``state`` in: ``strategy.state_shardings(state)`` when the
    (mesh-placed) strategy defines it, else replicated."""
    hook = getattr(strategy, "state_shardings", None)
    return hook(state) if callable(hook) else replicated_shardings(state, mesh)


def spans_processes(mesh: Mesh) -> bool:
    """True when some of ``mesh``'s devices belong to other processes (a ``jax.distributed`` job)."""
    here = jax.process_index()
    return any(d.process_index != here for d in mesh.devices.flat)


def place(tree: Any, shardings: Any) -> Any:
    """Put every leaf of ``tree`` (host values, Python numbers, or arrays this process holds
    whole) into the matching sharding of ``shardings`` (a pytree of the same structure, or one
    sharding for all). Works across processes: every process must pass the same values, each keeps
    only its own shards. Leaves already laid out as asked are returned as they are; typed PRNG keys
    are placed through their key data."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    if isinstance(shardings, jax.sharding.Sharding):
        targets = [shardings] * len(leaves)
    else:
        targets = treedef.flatten_up_to(shardings)
    return jax.tree_util.tree_unflatten(treedef, [_place_leaf(x, s) for x, s in zip(leaves, targets)])


def _place_leaf(leaf: Any, sharding: jax.sharding.Sharding) -> jax.Array:
    if isinstance(leaf, jax.Array) and leaf.sharding == sharding and leaf.committed:
        return leaf
    if isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        data = _place_leaf(jax.random.key_data(leaf), sharding)
        return jax.random.wrap_key_data(data, impl=jax.random.key_impl(leaf))
    host = np.asarray(leaf)  # a leaf this process holds whole (checkpoint data, params, a user's key)
    if host.dtype != jax.dtypes.canonicalize_dtype(host.dtype):
        host = host.astype(jax.dtypes.canonicalize_dtype(host.dtype))
    if sharding.is_fully_addressable:
        return jax.device_put(host, sharding)
    # every process holds the same host value: each builds its own shards, no collective needed
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


class Padded:
    """A leaf of a portable state that is held padded: the value is the first ``length`` rows of
    ``array`` (a ``jax.Array`` or NumPy array, ``[rows >= length, ...]``); the other rows are the
    layout's filler (a sharded QD archive's empty cells). Wrapping moves no data: ``array`` stays
    sharded, and a sharded checkpoint writes each device's rows below ``length`` from that device.

    ``Padded`` is a pytree *leaf* (the tree paths of a state are those of its unpadded form).

    Attributes:
        array: the padded array. length: rows of the value.
        shape, dtype: of the value, ``(length, *array.shape[1:])`` and ``array.dtype``.
    """

    __slots__ = ("array", "length")

    def __init__(self, array: Any, length: int):
        shape = getattr(array, "shape", None)
        if shape is None or len(shape) < 1:
            raise ArgumentError(f"array must be an array of at least one axis, got {type(array).__name__}")
        if jax.dtypes.issubdtype(array.dtype, jax.dtypes.prng_key):
            raise ArgumentError("array must be a numeric array: PRNG key arrays are not padded")
        if not isinstance(length, (int, np.integer)) or not 0 <= length <= shape[0]:
            raise ArgumentError(f"length must be an int in [0, {shape[0]}] (array's rows), got {length!r}")
        self.array, self.length = array, int(length)

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.length, *self.array.shape[1:])

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.array.dtype)

    def __repr__(self) -> str:
        return f"Padded({self.shape} of {tuple(self.array.shape)} {self.dtype})"

    def trim(self) -> Any:
        """``array[:length]``: the value whole (for a sharded ``array`` a gather onto every device;
        with several processes every process must call it)."""
        return self.array if self.length == self.array.shape[0] else self.array[: self.length]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        value = self.trim()
        if isinstance(value, jax.Array) and not value.is_fully_addressable and value.is_fully_replicated:
            value = value.addressable_data(0)  # a whole copy on one of this process's devices
        value = np.asarray(value)
        return value if dtype is None else value.astype(dtype)


def is_padded(leaf: Any) -> bool:
    """Whether ``leaf`` is a :class:`Padded` leaf."""
    return isinstance(leaf, Padded)


def trim_padded(tree: Any) -> Any:
    """``tree`` with every :class:`Padded` leaf replaced by its value (:meth:`Padded.trim`: a
    gather; with several processes every process must call it)."""
    return jax.tree_util.tree_map(lambda leaf: leaf.trim() if is_padded(leaf) else leaf, tree)


def portable_state(strategy: Any, state: Any, keep_padded: bool = False) -> Any:
    """``strategy.portable_state(state)`` when the (mesh-placed) strategy defines it, else
    ``state``: the strategy state in the shapes a checkpoint holds. Leaves the layout pads stay
    :class:`Padded` (still sharded, nothing moved) when ``keep_padded``, else they are cut to their
    rows (:func:`trim_padded`: a gather, which every process must run)."""
    hook = getattr(strategy, "portable_state", None)
    portable = hook(state) if callable(hook) else state
    return portable if keep_padded else trim_padded(portable)


def from_portable_state(strategy: Any, state: Any) -> Any:
    """The inverse of :func:`portable_state`."""
    hook = getattr(strategy, "from_portable_state", None)
    return hook(state) if callable(hook) else state
