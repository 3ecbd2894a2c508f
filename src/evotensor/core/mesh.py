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
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from evotensor.core.checks import ArgumentError

POPULATION_AXIS = "pop"


def check_mesh(mesh: Any, axis: Any = POPULATION_AXIS, population_size: int | None = None) -> Mesh:
    """``mesh`` checked: a ``jax.sharding.Mesh`` with an axis named ``axis`` whose size divides
    ``population_size`` (when given). Raises :class:`ArgumentError` naming ``mesh`` or
    ``mesh_axis``."""
    if not isinstance(mesh, Mesh):
        raise ArgumentError(
            f"mesh must be a jax.sharding.Mesh (e.g. jax.make_mesh((4,), ('pop',))), got {type(mesh).__name__}"
        )
    if not isinstance(axis, str) or axis not in mesh.axis_names:
        raise ArgumentError(f"mesh_axis must name one of the mesh's axes {tuple(mesh.axis_names)}, got {axis!r}")
    n = int(mesh.shape[axis])
    if population_size is not None and population_size % n:
        raise ArgumentError(
            f"mesh: the population ({population_size}) must split evenly over the {n} devices of "
            f"mesh axis {axis!r}; choose a population size that is a multiple of {n}"
        )
    return mesh


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
    """Inside ``jit``: lay a population pytree out as :func:`population_shardings` says."""
    shardings = population_shardings(tree, mesh, axis, size)
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
