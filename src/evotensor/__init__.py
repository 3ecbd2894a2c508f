"""evotensor: evolutionary computation as fixed-shape tensors on JAX.

Families live in subpackages (``evotensor.es``, ``evotensor.gp``, ``evotensor.qd``,
``evotensor.tree``, ``evotensor.problems``), imported lazily on first attribute access; the run
loop is ``evotensor.run`` / ``evotensor.run_many``.
"""

from __future__ import annotations

import importlib
from typing import Any

from evotensor.core.evaluation import Evaluation
from evotensor.core.run import RunManyResult, RunResult, generation_keys, run, run_many

__version__ = "0.1.0"

_SUBPACKAGES = ("core", "distributed", "es", "gp", "io", "neat", "problems", "qd", "tree", "tasks")

__all__ = ["Evaluation", "RunManyResult", "RunResult", "generation_keys", "run", "run_many", *_SUBPACKAGES]


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'evotensor' has no attribute {name!r}")
