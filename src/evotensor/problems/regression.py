"""Deprecated: symbolic regression moved to :mod:`evotensor.gp.regression`.

``SymbolicRegression``, ``Pagie1``, ``pagie1_data``, ``per_case_errors`` and ``EVOGP_SR_FUNCTIONS``
are problems over GP forests, so they live with GP (``evotensor.problems`` does not depend on
``evotensor.gp``). The names here keep working for one release: each access imports it from
:mod:`evotensor.gp.regression` and warns with a ``DeprecationWarning``.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

_MOVED = ("EVOGP_SR_FUNCTIONS", "Pagie1", "SymbolicRegression", "pagie1_data", "per_case_errors")
_NEW_HOME = "evotensor.gp.regression"

__all__: list[str] = []  # nothing is defined here any more; see _MOVED


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        warnings.warn(
            f"evotensor.problems.regression.{name} moved to {_NEW_HOME}.{name}; the old path will be "
            "removed in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        # imported on access only, so that importing evotensor.problems never imports evotensor.gp
        return getattr(importlib.import_module(_NEW_HOME), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_MOVED])
