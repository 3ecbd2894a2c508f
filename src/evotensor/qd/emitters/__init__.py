"""Emitters: how MAP-Elites proposes new solutions from its archive (see :mod:`.base`).

Gaussian and Iso+LineDD variation of elites, and the CMA-ES emitter of CMA-ME / CMA-MAE.
"""

from evotensor.qd.emitters.base import Emitter, VariationEmitter
from evotensor.qd.emitters.evolution_strategy import EvolutionStrategyEmitter, EvolutionStrategyEmitterState
from evotensor.qd.emitters.gaussian import GaussianEmitter
from evotensor.qd.emitters.iso_line import IsoLineEmitter

__all__ = [
    "Emitter",
    "EvolutionStrategyEmitter",
    "EvolutionStrategyEmitterState",
    "GaussianEmitter",
    "IsoLineEmitter",
    "VariationEmitter",
]
