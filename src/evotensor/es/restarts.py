"""Deprecated path: the IPOP/BIPOP restart machinery moved to :mod:`evotensor.es.core.restarts`
(``IPOPCMAES`` and ``BIPOPCMAES`` to :mod:`evotensor.es.ipop_cma_es` and
:mod:`evotensor.es.bipop_cma_es`; they stay ``evotensor.es.IPOPCMAES`` / ``evotensor.es.BIPOPCMAES``).

Importing a name from here still works until the next release and warns (``DeprecationWarning``).
"""

from evotensor.es._moved import moved_module

__getattr__ = moved_module(
    __name__,
    "evotensor.es.core.restarts",
    "evotensor.es.ipop_cma_es",
    "evotensor.es.bipop_cma_es",
)
