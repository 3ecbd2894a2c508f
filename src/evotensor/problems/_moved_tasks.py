"""The ``__getattr__`` of the old task modules of this package, whose tasks moved to
:mod:`evotensor.es.tasks` (problems know nothing of families); kept for one release."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import Any


def forward_to_es_tasks(old_module: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` that returns ``evotensor.es.tasks.<name>`` with a DeprecationWarning."""

    def __getattr__(name: str) -> Any:
        module = importlib.import_module("evotensor.es.tasks")
        if name.startswith("__") or not hasattr(module, name):
            raise AttributeError(f"module {old_module!r} has no attribute {name!r}")
        warnings.warn(
            f"{old_module}.{name} moved to evotensor.es.tasks.{name}", DeprecationWarning, stacklevel=2
        )
        return getattr(module, name)

    return __getattr__
