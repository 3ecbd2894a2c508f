"""The deprecated names of the CMA-ES emitter (kept for one release).

:class:`~evotensor.qd.emitters.cma_es.CMAESEmitter` was ``EvolutionStrategyEmitter`` (pyribs' name),
in ``evotensor.qd.emitters.evolution_strategy``. The old names still resolve, with a
``DeprecationWarning`` naming the new one.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

RENAMED = {
    "EvolutionStrategyEmitter": "CMAESEmitter",
    "EvolutionStrategyEmitterState": "CMAESEmitterState",
}


def deprecated_aliases(module: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``module`` that resolves the old emitter names, with a warning."""

    def __getattr__(name: str) -> Any:
        if name not in RENAMED:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        from evotensor.qd.emitters import cma_es

        new = RENAMED[name]
        warnings.warn(
            f"{module}.{name} is now evotensor.qd.emitters.cma_es.{new} (also evotensor.qd.{new}); "
            "the old name will be removed in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(cma_es, new)

    return __getattr__
