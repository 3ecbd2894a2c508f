"""Deprecated: the ES tasks moved to :mod:`evotensor.es.tasks` (problems know nothing of families).

Names are still reachable here for one release, with a ``DeprecationWarning``.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any


def __getattr__(name: str) -> Any:
    module = importlib.import_module("evotensor.es.tasks")
    if name.startswith("__") or not hasattr(module, name):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"evotensor.problems.es_tasks.{name} moved to evotensor.es.tasks.{name}",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(module, name)
