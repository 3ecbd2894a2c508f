"""Tasks ``es-sphere``, ``es-rastrigin``, ``es-rosenbrock``, ``es-ackley``: an ES on a classic function.

The initial mean is drawn uniformly from the function's conventional box with the run's seed; the
initial step size is ``sigma_frac`` times the box width (CMA-ES practice: about a third).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from evotensor.problems.classic import ClassicFunction
from evotensor.tasks import Task, register_task

_STRATEGIES = ("cma_es", "simple_es")


def build_classic(name: str, cfg: dict[str, Any], default_generations: int) -> Task:
    """Build an ES task on the classic function ``name`` from a task config."""
    from evotensor import es

    dims = cfg["dims"]
    if isinstance(dims, bool) or not isinstance(dims, int) or dims < 1:
        raise ValueError(f"option dims must be a positive int, got {dims!r}")
    problem = ClassicFunction(name, dims)
    low, high = problem.bounds
    rng = np.random.default_rng(cfg["seed"])
    mean_init = rng.uniform(low, high, size=dims).astype(np.float32)
    sigma = float(cfg["sigma_frac"]) * (high - low)
    if not sigma > 0:
        raise ValueError(f"option sigma_frac must be > 0, got {cfg['sigma_frac']!r}")
    strategy_name = cfg["strategy"]
    if strategy_name == "cma_es":
        strategy = es.CMAES(cfg["pop"], num_dims=dims, sigma_init=sigma, mean_init=mean_init)
    elif strategy_name == "simple_es":
        strategy = es.SimpleES(cfg["pop"] or 4 * dims, num_dims=dims, sigma_init=sigma, mean_init=mean_init)
    else:
        raise ValueError(f"option strategy must be one of {', '.join(_STRATEGIES)}, got {strategy_name!r}")
    return Task(strategy=strategy, problem=problem, generations=cfg["generations"] or default_generations)


def _register(name: str, dims: int, pop: int | None, generations: int, description: str) -> None:
    defaults = {"dims": dims, "strategy": "cma_es", "sigma_frac": 0.3, "pop": pop}

    @register_task(f"es-{name}", description, defaults=defaults)
    def _build(cfg: dict[str, Any]) -> Task:
        return build_classic(name, cfg, generations)


_register("sphere", 10, None, 300, "CMA-ES on the 10-d sphere (smoke test: reaches ~1e-12)")
_register("rastrigin", 30, 200, 1200, "CMA-ES, pop 200, on 30-d Rastrigin")
_register("rosenbrock", 10, None, 2000, "CMA-ES on 10-d Rosenbrock")
_register("ackley", 10, None, 600, "CMA-ES on 10-d Ackley")
