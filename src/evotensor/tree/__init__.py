"""``evotensor.tree``: the nested-data container (TreeTensor), a first-class JAX pytree.

* :class:`Tree` -- nested data with string keys, attribute access, leaf-wise operators, sorted
  children, registered with JAX (``jit``, ``vmap`` incl. ``in_axes=Tree(...)``, ``grad``,
  ``lax.scan``/``cond``, ``jax.tree.map``, key paths).
* :func:`treelize` (+ method, class-method and whole-class forms) with the mismatch policies
  ``strict``/``inner``/``outer``/``left`` and ``missing``/``inherit``.
* proxy modules :mod:`evotensor.tree.jnp`, :mod:`evotensor.tree.np`, ``evotensor.tree.torch``
  (when PyTorch is installed): every library function, tree-aware.
* structure: :func:`map`, :func:`filter`, :func:`mask`, :func:`reduce`, :func:`flatten`,
  :func:`unflatten`, :func:`equal` (:mod:`~evotensor.tree.functional`); :func:`union`,
  :func:`subside`, :func:`rise` (:mod:`~evotensor.tree.restructuring`); :func:`stack`,
  :func:`concatenate`, :func:`split` (:mod:`~evotensor.tree.joining`); :func:`index`
  (:mod:`~evotensor.tree.indexing`).
* constraints: :func:`dtype`, :func:`ndim`, :func:`shape_prefix`, :func:`device`,
  :func:`predicate`, :func:`node_predicate` (attach with ``t.with_constraints(...)``).
* I/O: :func:`save`, :func:`load` (npz), :func:`to_dot`, :func:`draw`; pickle works too.

``SPEEDUPS`` is True when ``Tree`` runs on its optional compiled core (``evotensor.tree._speedups``,
built by ``pip install`` where a C compiler exists); ``EVOTENSOR_NO_SPEEDUPS=1`` in the environment
before import selects the pure-Python code, which has the same behaviour.
"""

from evotensor.tree import jnp, np
from evotensor.tree.constraints import (
    Constraint,
    ConstraintError,
    device,
    dtype,
    ndim,
    node_predicate,
    predicate,
    shape_prefix,
)
from evotensor.tree.functional import equal, filter, flatten, map, mask, reduce, unflatten
from evotensor.tree.indexing import index
from evotensor.tree.io import draw, load, save, to_dot
from evotensor.tree.joining import concatenate, split, stack
from evotensor.tree.restructuring import rise, subside, union
from evotensor.tree.tree import SPEEDUPS, Tree, raw
from evotensor.tree.treelize import (
    MISSING,
    treelize,
    treelize_class,
    treelize_classmethod,
    treelize_method,
)

__all__ = [
    "MISSING",
    "SPEEDUPS",
    "Constraint",
    "ConstraintError",
    "Tree",
    "concatenate",
    "device",
    "draw",
    "dtype",
    "equal",
    "filter",
    "flatten",
    "index",
    "jnp",
    "load",
    "map",
    "mask",
    "ndim",
    "node_predicate",
    "np",
    "predicate",
    "raw",
    "reduce",
    "rise",
    "save",
    "shape_prefix",
    "split",
    "stack",
    "subside",
    "to_dot",
    "torch",
    "treelize",
    "treelize_class",
    "treelize_classmethod",
    "treelize_method",
    "unflatten",
    "union",
]


def __getattr__(name: str):
    # imported on first use: `evotensor.tree.torch`, so that importing evotensor never imports torch,
    # and the deprecated `evotensor.tree.structure` (its names warn; they live in the modules above)
    if name in ("torch", "structure"):
        import importlib

        return importlib.import_module(f"evotensor.tree.{name}")
    raise AttributeError(f"module 'evotensor.tree' has no attribute {name!r}")
