"""The task registry behind ``evotensor list`` and ``evotensor run TASK``.

A *task* is a named, reproducible experiment: a builder that turns a plain configuration dict into
a strategy, a problem and (optionally) a decoder. Families register their tasks with
:func:`register_task` in a module named ``tasks`` of their package (``evotensor/es/tasks.py``,
``evotensor/gp/tasks.py``, ...); the registry discovers and imports those modules on first use, so
it is complete without importing every family up front and a new family needs no list to edit.

Builders read their options with the public helpers :func:`positive_int_option`,
:func:`positive_float_option` and :func:`hidden_sizes_option`, whose errors name the option.

Example::

    @register_task("es-sphere", "CMA-ES on the 10-d sphere", defaults={"dims": 10, "pop": 0})
    def _build(cfg):
        return Task(strategy=CMAES(...), problem=Sphere(cfg["dims"]), generations=cfg["generations"])
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import pkgutil
from collections.abc import Callable
from typing import Any


def task_modules() -> tuple[str, ...]:
    """The modules whose import registers tasks: ``evotensor.<package>.tasks`` for every
    subpackage of ``evotensor`` that has one (found on disk, not imported here)."""
    import evotensor

    found = []
    for info in pkgutil.iter_modules(evotensor.__path__):
        if info.ispkg and importlib.util.find_spec(f"evotensor.{info.name}.tasks") is not None:
            found.append(f"evotensor.{info.name}.tasks")
    return tuple(sorted(found))


@dataclasses.dataclass(frozen=True)
class Task:
    """What a task builder returns.

    Attributes:
        strategy: an object following :class:`evotensor.core.Strategy`.
        problem: a function or policy problem.
        decoder: genotype -> phenotype map for policy problems (None for function problems).
        generations: default number of generations.
        report: optional ``report(result, run_dir) -> str`` called after the run (prints extra
            lines, writes extra plots); must not change the result.
        best_to_text: optional ``best_to_text(best_genotype) -> str`` for ``best.txt``.
    """

    strategy: Any
    problem: Any
    generations: int
    decoder: Any = None
    report: Callable[[Any, Any], str] | None = None
    best_to_text: Callable[[Any], str] | None = None


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """A registered task: its name, one-line description, defaults and builder."""

    name: str
    description: str
    defaults: dict[str, Any]
    builder: Callable[[dict[str, Any]], Task]

    def build(self, config: dict[str, Any]) -> Task:
        unknown = sorted(set(config) - set(self.defaults))
        if unknown:
            raise ValueError(
                f"task {self.name!r} has no option(s) {', '.join(unknown)}; "
                f"valid options: {', '.join(sorted(self.defaults))}"
            )
        return self.builder({**self.defaults, **config})


_REGISTRY: dict[str, TaskSpec] = {}
_loaded = False

# ---- option helpers for task builders (errors name the option) ------------------------------------


def positive_int_option(cfg: dict[str, Any], name: str) -> int:
    """``cfg[name]`` as an int ``>= 1``; ``ValueError`` naming the option otherwise."""
    value = cfg[name]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"option {name} must be a positive int, got {value!r}")
    return value


def positive_float_option(cfg: dict[str, Any], name: str) -> float:
    """``cfg[name]`` as a finite float ``> 0``; ``ValueError`` naming the option otherwise."""
    value = cfg[name]
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and 0 < float(value) < float("inf")
    if not ok:
        raise ValueError(f"option {name} must be a positive number, got {value!r}")
    return float(value)


def hidden_sizes_option(cfg: dict[str, Any], name: str = "hidden") -> tuple[int, ...]:
    """Hidden layer sizes from ``cfg[name]``: an int, a sequence of ints or a string like ``"32,32"``."""
    hidden = cfg[name]
    if isinstance(hidden, int):
        hidden = (hidden,)
    if isinstance(hidden, str):
        try:
            hidden = tuple(int(h) for h in hidden.split(",") if h.strip())
        except ValueError:
            hidden = (hidden,)
    hidden = tuple(hidden)
    if not all(isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in hidden):
        raise ValueError(f"option {name} must be positive ints (e.g. 32 or '32,32'), got {cfg[name]!r}")
    return hidden


# Options every task understands (the CLI flags); builders receive them in the config dict.
COMMON_DEFAULTS: dict[str, Any] = {"pop": None, "generations": None, "seed": 0}


def register_task(name: str, description: str, defaults: dict[str, Any] | None = None):
    """Decorator registering ``builder(config: dict) -> Task`` under ``name``.

    ``defaults`` lists every option the task accepts besides ``pop``, ``generations`` and
    ``seed`` (which every task accepts; ``None`` means the task's own default).
    """

    def decorate(builder: Callable[[dict[str, Any]], Task]) -> Callable[[dict[str, Any]], Task]:
        if name in _REGISTRY and _REGISTRY[name].builder is not builder:
            raise ValueError(f"task {name!r} is registered twice")
        _REGISTRY[name] = TaskSpec(name, description, {**COMMON_DEFAULTS, **(defaults or {})}, builder)
        return builder

    return decorate


def _load() -> None:
    global _loaded
    if _loaded:
        return
    for module in task_modules():
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as err:
            # A family module (or its package) absent in this build registers nothing; a missing
            # dependency *inside* a present module is a real error.
            if err.name is None or not module.startswith(err.name):
                raise
    _loaded = True


def all_tasks() -> dict[str, TaskSpec]:
    """Every registered task, by name (sorted)."""
    _load()
    return dict(sorted(_REGISTRY.items()))


def get_task(name: str) -> TaskSpec:
    """The task called ``name``; ``KeyError`` with the list of valid names otherwise."""
    tasks = all_tasks()
    if name not in tasks:
        raise KeyError(f"unknown task {name!r}; known tasks: {', '.join(tasks)}")
    return tasks[name]
