"""Emitters: how MAP-Elites proposes new solutions from its archive (see :mod:`.base`).

Gaussian and Iso+LineDD variation of elites, the CMA-ES emitter of CMA-ME / CMA-MAE, and the
ME-ES emitter (an OpenAI-style ES on fitness or novelty, its samples evaluated but not archived), and
the gradient arborescence emitter of CMA-MEGA / CMA-MAEGA and OMG-MEGA's gradient operator emitter
(differentiable QD), and an emitter of
genotypes of any structure varied by a function the user passes in; QDax's mixing emitter
(polynomial mutation and gene-swap crossover of elites, operators the user may replace; SBX and
Iso+LineDD as two-parent operators too); PGA-ME's
policy-gradient emitter (a TD3 critic trained on every transition, elites improved along it) and
DCRL-ME's descriptor-conditioned emitter (critic and actor conditioned on a target descriptor).
"""

from evotensor.qd.emitters._aliases import deprecated_aliases
from evotensor.qd.emitters.base import Emitter, VariationEmitter
from evotensor.qd.emitters.cma_es import CMAESEmitter, CMAESEmitterState
from evotensor.qd.emitters.dcrl import DCRLEmitter, DCRLState, DCTransitions, dcrl_me_emitters
from evotensor.qd.emitters.gaussian import GaussianEmitter
from evotensor.qd.emitters.genotype import GenotypeEmitter
from evotensor.qd.emitters.gradient_arborescence import (
    GradientArborescenceEmitter,
    GradientArborescenceState,
    problem_jacobian,
)
from evotensor.qd.emitters.gradient_operator import GradientOperatorEmitter, omg_branch
from evotensor.qd.emitters.group import EmitterGroup
from evotensor.qd.emitters.iso_line import IsoLineCrossover, IsoLineEmitter, iso_line_step
from evotensor.qd.emitters.mees import MEESEmitter, MEESEmitterState
from evotensor.qd.emitters.mixing import (
    GeneSwapCrossover,
    MixingEmitter,
    PolynomialMutation,
    SBXCrossover,
    polynomial_step,
    sbx_step,
)
from evotensor.qd.emitters.policy_gradient import (
    PolicyGradientEmitter,
    PolicyGradientState,
    pga_me_emitters,
)
from evotensor.qd.emitters.rankers import BUILTIN_RANKERS, Ranker, get_ranker
from evotensor.qd.emitters.td3 import TD3Learner, TD3State

__all__ = [
    "BUILTIN_RANKERS",
    "CMAESEmitter",
    "CMAESEmitterState",
    "DCRLEmitter",
    "DCRLState",
    "DCTransitions",
    "Emitter",
    "EmitterGroup",
    "GaussianEmitter",
    "GeneSwapCrossover",
    "GenotypeEmitter",
    "GradientArborescenceEmitter",
    "GradientArborescenceState",
    "GradientOperatorEmitter",
    "IsoLineCrossover",
    "IsoLineEmitter",
    "MEESEmitter",
    "MEESEmitterState",
    "MixingEmitter",
    "PolicyGradientEmitter",
    "PolicyGradientState",
    "PolynomialMutation",
    "Ranker",
    "SBXCrossover",
    "TD3Learner",
    "TD3State",
    "VariationEmitter",
    "dcrl_me_emitters",
    "get_ranker",
    "iso_line_step",
    "omg_branch",
    "pga_me_emitters",
    "polynomial_step",
    "problem_jacobian",
    "sbx_step",
]

# EvolutionStrategyEmitter(State): the CMA-ES emitter's old names, deprecated
__getattr__ = deprecated_aliases(__name__)
