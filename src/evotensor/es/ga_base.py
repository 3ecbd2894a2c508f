"""Deprecated path: the Gaussian GA base moved to :mod:`evotensor.es.core.ga_base` (a few helpers to
:mod:`evotensor.es.core.base`).

Importing a name from here still works until the next release and warns (``DeprecationWarning``).
"""

from evotensor.es._moved import moved_module

__getattr__ = moved_module(
    __name__,
    "evotensor.es.core.ga_base",
    "evotensor.es.core.base",
)
