"""Every strategy class exported by :mod:`evotensor.es`, discovered from the package (not a list kept
by hand), and how to build a small instance of each; not a test module.

A strategy that ``cls(population_size=8, num_dims=dims)`` cannot build needs a row in :data:`BUILD`;
a new strategy without one fails the table tests that use :func:`build` (on purpose: its argument
checks and contracts must be looked at).
"""

from __future__ import annotations

from typing import Any

import evotensor.es as es_package

STRATEGY_NAMES: tuple[str, ...] = tuple(name for name in es_package.__all__ if name != "VectorStrategy")

# keyword arguments (beyond num_dims) of the strategies that the default build does not fit
BUILD: dict[str, dict[str, Any]] = {
    "ESMC": dict(population_size=9),  # the mean + antithetic pairs: odd
    "IPOPCMAES": dict(max_population_size=32),
    "BIPOPCMAES": dict(max_population_size=32),
}


def build(name: str, num_dims: int = 3, **kwargs: Any) -> Any:
    """A small instance of the strategy ``evotensor.es.<name>``."""
    cls = getattr(es_package, name)
    options = {"population_size": 8, **BUILD.get(name, {}), **kwargs}
    if "max_population_size" in options:
        options.pop("population_size")
    return cls(num_dims=num_dims, **options)
