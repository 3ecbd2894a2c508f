"""Deprecated path: the CMA-ES emitter moved to :mod:`evotensor.qd.emitters.cma_es` and is named
:class:`~evotensor.qd.emitters.cma_es.CMAESEmitter` (its state
:class:`~evotensor.qd.emitters.cma_es.CMAESEmitterState`).

``EvolutionStrategyEmitter`` (pyribs' name) and ``EvolutionStrategyEmitterState`` still work from here,
from :mod:`evotensor.qd.emitters` and from :mod:`evotensor.qd` until the next release, and warn
(``DeprecationWarning``).
"""

from evotensor.qd.emitters._aliases import deprecated_aliases

__getattr__ = deprecated_aliases(__name__)
