"""``jax.numpy``, tree-aware: every function of ``jax.numpy`` applied leaf by leaf.

``evotensor.tree.jnp.sin(t)``, ``evotensor.tree.jnp.where(mask_tree, t, 0)``,
``evotensor.tree.jnp.linalg.norm(t, axis=-1)``: each attribute is looked up in ``jax.numpy`` on
first use and treelized (strict matching, non-tree arguments broadcast; a list of trees is
subsided, so ``stack([t1, t2])`` works leaf by leaf); classes and constants
are passed through unchanged. With no tree argument a function behaves exactly like the original.
"""

import jax.numpy as _lib

from evotensor.tree.treelize import module_getattr as _module_getattr


def __getattr__(name: str):
    return _module_getattr(_lib, globals(), name)


def __dir__() -> list[str]:
    return sorted(set(dir(_lib)))
