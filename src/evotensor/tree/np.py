"""``numpy``, tree-aware: every function of ``numpy`` applied leaf by leaf.

``evotensor.tree.np.mean(t, axis=0)``, ``evotensor.tree.np.random.default_rng`` (unchanged: it
takes no tree), ``evotensor.tree.np.add.reduce(t)``: each attribute is looked up in ``numpy`` on
first use and treelized (strict matching, non-tree arguments broadcast; a list of trees is
subsided, so ``stack([t1, t2])`` works leaf by leaf); classes and constants
are passed through unchanged.
"""

import numpy as _lib

from evotensor.tree.treelize import module_getattr as _module_getattr


def __getattr__(name: str):
    return _module_getattr(_lib, globals(), name)


def __dir__() -> list[str]:
    return sorted(set(dir(_lib)))
