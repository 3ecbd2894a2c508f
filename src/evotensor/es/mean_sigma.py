"""Deprecated path: the mean-and-step-size strategy base moved to :mod:`evotensor.es.core.mean_sigma` (a few
helpers to :mod:`evotensor.es.core.base`).

Importing a name from here still works until the next release and warns (``DeprecationWarning``).
"""

from evotensor.es._moved import moved_module

__getattr__ = moved_module(
    __name__,
    "evotensor.es.core.mean_sigma",
    "evotensor.es.core.base",
)
