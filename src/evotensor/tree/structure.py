"""Deprecated: the structural utilities moved to their own modules (one release of grace).

* :mod:`evotensor.tree.functional`: ``map``, ``filter``, ``mask``, ``reduce``, ``flatten``,
  ``unflatten``, ``equal``;
* :mod:`evotensor.tree.restructuring`: ``subside``, ``rise``, ``union``;
* :mod:`evotensor.tree.joining`: ``stack``, ``concatenate``, ``split``;
* :mod:`evotensor.tree.indexing`: ``index``.

Every one of them is also ``evotensor.tree.<name>``. ``from evotensor.tree.structure import stack``
still works, with a ``DeprecationWarning`` naming the new module.
"""

from __future__ import annotations

import warnings
from typing import Any

from evotensor.tree import functional, indexing, joining, restructuring

# the public names of this module -> their modules now
_MOVED = {
    **dict.fromkeys(("equal", "filter", "flatten", "map", "mask", "reduce", "unflatten"), functional),
    **dict.fromkeys(("rise", "subside", "union"), restructuring),
    **dict.fromkeys(("concatenate", "split", "stack"), joining),
    "index": indexing,
}
__all__ = sorted(_MOVED)


def __getattr__(name: str) -> Any:
    module = _MOVED.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"evotensor.tree.structure.{name} moved to {module.__name__}.{name} (also evotensor.tree.{name})",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(module, name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
