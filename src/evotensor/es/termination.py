"""Deprecated path: the termination criteria moved to :mod:`evotensor.es.core.termination`.

Importing a name from here still works until the next release and warns (``DeprecationWarning``).
"""

from evotensor.es._moved import moved_module

__getattr__ = moved_module(
    __name__,
    "evotensor.es.core.termination",
)
