"""``torch``, tree-aware (needs PyTorch installed): every function of ``torch`` leaf by leaf.

``evotensor.tree.torch.stack``-style calls on leaves, ``evotensor.tree.torch.sigmoid(t)``,
``evotensor.tree.torch.nn.functional.relu(t)``: each attribute is looked up in ``torch`` on
first use and treelized (strict matching, non-tree arguments broadcast); classes and constants
(``torch.float32``) are passed through unchanged. Tensor methods need no proxy: ``t.sum(dim=0)``
on a tree of tensors already calls every leaf's method.

Importing this module also registers :class:`~evotensor.tree.Tree` (and every subclass, present
and future) with ``torch.utils._pytree``, so ``torch.func.grad``/``vmap`` take trees.
"""

try:
    import torch as _lib
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "evotensor.tree.torch needs PyTorch: pip install torch (evotensor.tree.jnp and .np work without it)"
    ) from exc

from evotensor.tree.tree import SUBCLASS_HOOKS as _HOOKS
from evotensor.tree.tree import Tree as _Tree
from evotensor.tree.tree import new_node as _new_node
from evotensor.tree.treelize import module_getattr as _module_getattr


def register_torch_pytree(cls: type) -> None:
    """Register a Tree class with ``torch.utils._pytree`` (sorted children, ``MappingKey`` paths).

    Done for ``Tree`` and all its subclasses when this module is imported, so ``torch.func``
    transforms (``grad``, ``vmap``) and ``torch.utils._pytree.tree_map`` accept trees.
    """
    import torch.utils._pytree as tp

    if cls in tp.SUPPORTED_NODES:
        return

    def flatten(t):
        d = t.__dict__
        return list(d.values()), tuple(d)

    def flatten_with_keys(t):
        d = t.__dict__
        return [(tp.MappingKey(k), v) for k, v in d.items()], tuple(d)

    def unflatten(values, keys):
        return _new_node(cls, keys, values)

    tp.register_pytree_node(
        cls,
        flatten,
        unflatten,
        serialized_type_name=f"{cls.__module__}.{cls.__qualname__}",
        flatten_with_keys_fn=flatten_with_keys,
    )


def _register_all(cls: type) -> None:
    register_torch_pytree(cls)
    for sub in cls.__subclasses__():
        _register_all(sub)


_register_all(_Tree)
_HOOKS.append(register_torch_pytree)


def __getattr__(name: str):
    return _module_getattr(_lib, globals(), name)


def __dir__() -> list[str]:
    return sorted(set(dir(_lib)))
