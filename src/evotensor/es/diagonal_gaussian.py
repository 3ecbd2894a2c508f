"""Deprecated path: the diagonal-Gaussian strategy base moved to :mod:`evotensor.es.core.diagonal_gaussian`.

Importing a name from here still works until the next release and warns (``DeprecationWarning``).
"""

from evotensor.es._moved import moved_module

__getattr__ = moved_module(
    __name__,
    "evotensor.es.core.diagonal_gaussian",
)
