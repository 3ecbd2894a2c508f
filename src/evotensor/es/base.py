"""Deprecated path: the shared strategy base classes and helpers moved to :mod:`evotensor.es.core.base` (a
few helpers to :mod:`evotensor.core.checks`).

Importing a name from here still works until the next release and warns (``DeprecationWarning``).
"""

from evotensor.es._moved import moved_module

__getattr__ = moved_module(
    __name__,
    "evotensor.es.core.base",
    "evotensor.core.checks",
)
