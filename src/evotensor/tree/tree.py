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
builds it where a C compiler is available), ``Tree`` subclasses its ``TreeBase``, which does the
node's storage and the hot paths of get, set and flatten/unflatten in C; every other case runs the
pure-Python code, which is also what runs without the extension or with the environment variable
``EVOTENSOR_NO_SPEEDUPS=1`` (read once, at import). ``evotensor.tree.SPEEDUPS`` says which is active.

Where the code is. ``Tree`` is defined in the private module :mod:`evotensor.tree._core`, with the
internals its methods share with the rest of the package (node storage and constraint checks, the
walk behind treelize, indexing every leaf, the repr); this module is its public home and re-exports
it, together with the node helpers other modules use (``new_node``, ``from_dict``, ``set_child``,
``map_nodes``, ``annotate``, ...).
"""

from evotensor.tree._core import (  # noqa: F401 - re-exported: the public names of this module
    SPEEDUPS,
    SUBCLASS_HOOKS,
    Tree,
    _rebuild,  # pickles of trees name evotensor.tree.tree._rebuild
    annotate,
    attach_copy,
    delete_child,
    delitem_leaves,
    from_dict,
    index_leaves,
    iter_leaves,
    leafwise_getattr,
    map_nodes,
    new_node,
    raw,
    set_child,
    setitem_leaves,
    validate_tree,
)

__all__ = ["SPEEDUPS", "Tree", "raw"]
