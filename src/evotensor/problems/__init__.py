"""Problems: classic functions, BBOB, classification, control, QD and QD-RL benchmarks.

Submodules are imported lazily so that ``import evotensor.problems`` does not pull in optional
dependencies (gymnax, brax) until a control problem is used. Nothing here imports a strategy
family: symbolic regression, a problem over GP forests, lives in :mod:`evotensor.gp.regression`
(``evotensor.problems.regression`` is its deprecated alias for one release).
"""

from __future__ import annotations

import importlib
from typing import Any

from evotensor.problems.bbob_noisy import BBOBNoisy
from evotensor.problems.classic import (
    Ackley,
    ClassicFunction,
    Rastrigin,
    Rosenbrock,
    Sphere,
    ackley,
    rastrigin,
    rosenbrock,
    sphere,
)

_SUBMODULES = (
    "bbob",
    "bbob_noisy",
    "classic",
    "classification",
    "control",
    "multi_task",
    "networks",
    "qd",
    "qd_control",
    "regression",
)

__all__ = [
    "Ackley",
    "BBOBNoisy",
    "ClassicFunction",
    "Rastrigin",
    "Rosenbrock",
    "Sphere",
    "ackley",
    "rastrigin",
    "rosenbrock",
    "sphere",
    *_SUBMODULES,
]


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'evotensor.problems' has no attribute {name!r}")
