"""Deprecated path: population sharding moved to :mod:`evotensor.es.core.sharding`.

Importing a name from here still works until the next release and warns (``DeprecationWarning``).
"""

from evotensor.es._moved import moved_module

__getattr__ = moved_module(
    __name__,
    "evotensor.es.core.sharding",
)
