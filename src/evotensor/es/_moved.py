"""Old import paths of names that moved within :mod:`evotensor.es` (kept for one release).

The machinery of the strategies moved to :mod:`evotensor.es.core` (and a few helpers to
:mod:`evotensor.core`). Each old module keeps a module-level ``__getattr__`` built here, so
``from evotensor.es.core.base import VectorStrategy`` still works and warns (``DeprecationWarning``)
with the new path. The names a module still uses itself stay its attributes and do not warn.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any


def _resolve(old_module: str, name: str, module: str, new_name: str) -> Any:
    value = getattr(importlib.import_module(module), new_name)
    # name the module that defines it (``module`` may only import it) when that module has it
    home = getattr(value, "__module__", None)
    if isinstance(home, str) and getattr(importlib.import_module(home), new_name, None) is value:
        module = home
    warnings.warn(
        f"{old_module}.{name} moved to {module}.{new_name}; the old path will be removed in the next release",
        DeprecationWarning,
        stacklevel=3,  # the line that reads the attribute (this frame, then the module __getattr__)
    )
    return value


def moved_names(old_module: str, names: Mapping[str, str | tuple[str, str]]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``old_module`` that finds each moved name where it went.

    Args:
        old_module: the module's ``__name__`` (for the messages).
        names: ``{old name: new module}``, or ``{old name: (new module, new name)}`` for a renamed one.
    """

    def __getattr__(name: str) -> Any:
        target = names.get(name)
        if target is None:
            raise AttributeError(f"module {old_module!r} has no attribute {name!r}")
        module, new_name = (target, name) if isinstance(target, str) else target
        return _resolve(old_module, name, module, new_name)

    return __getattr__


def moved_module(
    old_module: str, *new_modules: str, renamed: Mapping[str, tuple[str, str]] | None = None
) -> Callable[[str], Any]:
    """A module ``__getattr__`` for a module whose public names all moved: each is looked up in
    ``new_modules`` in order (``renamed``: ``{old name: (new module, new name)}`` first)."""
    renamed = dict(renamed or {})

    def __getattr__(name: str) -> Any:
        if name in renamed:
            return _resolve(old_module, name, *renamed[name])
        if not name.startswith("_"):
            for module in new_modules:
                if hasattr(importlib.import_module(module), name):
                    return _resolve(old_module, name, module, name)
        raise AttributeError(f"module {old_module!r} has no attribute {name!r}")

    return __getattr__
