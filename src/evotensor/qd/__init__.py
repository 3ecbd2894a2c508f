"""Quality-diversity: MAP-Elites with static, preallocated archives and exact batch insertion.

* :mod:`.archive` — :class:`GridArchive`, :class:`CVTArchive` (pytree state, ``add`` with pyribs'
  batch semantics made deterministic, ``stats``: QD score, coverage, ...).
* :mod:`.proximity_archive` — :class:`ProximityArchive`: novelty search's unstructured archive of
  bounded capacity (k-nearest-neighbour novelty, optional local competition, threshold decay; the
  add reports ``novelty`` and ``local_competition`` per candidate).
* :mod:`.dns_archive` — :class:`DNSArchive`: Dominated Novelty Search's population of fixed
  capacity (survivors by mean distance to their fitter neighbours; pyribs 0.12's rules).
* :mod:`.density_archive` — :class:`DensityArchive`: Density Descent Search's reservoir of measures
  and its Gaussian kernel density (no elites: a result archive keeps them; emitters rank by
  ``ranker="density"``, lowest density first).
* :mod:`.discount_archive` — :class:`DiscountArchive`: Discount Model Search's discount network
  (CMA-MAE's thresholds as a smooth function of the measures, trained inside the generation on
  the batch and on the result archive's empty cells; emitters rank by ``ranker="imp"``);
  :mod:`.discount_model` — :class:`DiscountMLP` and its minibatch regression.
* :mod:`.mome_archive` — :class:`MOMEArchive`: multi-objective MAP-Elites (MOME), a Pareto front
  of at most ``front_size`` solutions per grid or CVT cell, batch insertion in one step, hypervolume
  improvement as each candidate's value, MOQD score and global hypervolume in ``stats``; split over
  a mesh by :mod:`.sharded_mome`.
* :mod:`.centroids` — grid centres, on-device k-means for CVT, chunked nearest-centroid search.
* :mod:`.emitters` — Gaussian and Iso+LineDD variation; the CMA-ES emitter of CMA-ME and CMA-MAE
  (rankers imp/2imp/obj/2obj/rd/2rd, filter/mu selection, restarts); the ME-ES emitter (Colas et
  al. 2020: an ES on fitness or novelty from archive elites, its samples evaluated, not archived); the
  gradient arborescence emitter of CMA-MEGA / CMA-MAEGA and OMG-MEGA's :class:`GradientOperatorEmitter`
  (differentiable QD, gradients by ``jax.jacrev``);
  :class:`GenotypeEmitter`, any variation function over an archive of genotypes of any structure
  (``GridArchive(genotype=...)``: NEAT genomes, GP trees, parameter pytrees); QDax's
  :class:`MixingEmitter` (polynomial mutation and gene-swap crossover of elites); PGA-ME's
  :class:`PolicyGradientEmitter` (a TD3 critic learnt from every transition; elites improved along
  it, plus its greedy actor) and :func:`pga_me_emitters` (it with Iso+LineDD, QDax's defaults);
  DCRL-ME's :class:`DCRLEmitter` (critic and actor conditioned on a target descriptor: elites
  improved towards their own cell, the actor injected for sampled cells) and :func:`dcrl_me_emitters`.
* :mod:`.map_elites` — :class:`MAPElites`, an ``init / ask / tell`` strategy for the run loop;
  ``MAPElites.on_mesh`` (what ``evotensor.run(..., mesh=)`` calls) gives :class:`ShardedMAPElites`.
* :mod:`.multi_task` — :class:`MultiTaskMAPElites` (Mouret & Maguire 2020): one elite per task of a
  fitness ``f(x, task)``, children aimed at a task near their parent's by a tournament whose size a
  UCB1 bandit tunes (pymap_elites' ``multitask.py``, tensorized).
* :mod:`.metrics` — :func:`cqd_score`, the Continuous QD score (Kent et al. 2022) of any
  single-objective archive against target points (pyribs' ``cqd_score``, the paper's normalisation).
* :mod:`.low_spread_archive` — :class:`LowSpreadArchive`: MAP-Elites Low-Spread (Mace et al.
  2023) for noisy problems: each solution evaluated ``num_samples`` times, its cell the mode of its
  samples' cells, its fitness their mean; an elite is replaced only by a fitter solution whose
  descriptors spread no more (QDax's ``MELS``). :class:`MAPElites` asks each solution that many times.
* :mod:`.sampled_archive` — :class:`SampledArchive`: MAP-Elites-Sampling (QDax's ``sampling``):
  each solution evaluated ``num_samples`` times, its expected fitness and descriptor extracted
  (:mod:`.extractors`: average, median, mode, closest; std, mad, iqr) and inserted by the cells'
  own rules.
* :mod:`.reevaluation` — :func:`corrected_archive`: every elite re-evaluated ``num_reevals``
  times and the medians added to an empty archive (QDax's ``reevaluation_function``), the honest
  QD score on a noisy problem, with each elite's fitness and descriptor std.
* :mod:`.bandit` — :class:`BanditMAPElites`: a pool of emitters of which ``num_active`` run each
  generation, chosen by UCB1 on their success (Cully 2021; pyribs' ``BanditScheduler``).
* :mod:`.sharded_archive` — :class:`ShardedArchive`: an archive split along its cells over a device
  mesh, with the same (bit-identical) insertion, sampling and queries.
"""

from typing import Any

from evotensor.qd.archive import (
    IMPROVED,
    NEW,
    NOT_ADDED,
    AddInfo,
    Archive,
    ArchiveState,
    CVTArchive,
    GridArchive,
    UnstructuredArchive,
)
from evotensor.qd.bandit import BanditMAPElites, BanditState
from evotensor.qd.centroids import grid_centroids, kmeans_centroids, nearest_centroid
from evotensor.qd.density_archive import DensityAddInfo, DensityArchive, DensityState
from evotensor.qd.discount_archive import DiscountAddInfo, DiscountArchive, DiscountState
from evotensor.qd.discount_model import DiscountMLP, fit_discount_model
from evotensor.qd.dns_archive import DNSAddInfo, DNSArchive
from evotensor.qd.emitters import (
    CMAESEmitter,
    DCRLEmitter,
    Emitter,
    EmitterGroup,
    GaussianEmitter,
    GeneSwapCrossover,
    GenotypeEmitter,
    GradientArborescenceEmitter,
    GradientOperatorEmitter,
    IsoLineEmitter,
    MEESEmitter,
    MixingEmitter,
    PolicyGradientEmitter,
    PolynomialMutation,
    dcrl_me_emitters,
    pga_me_emitters,
    polynomial_step,
    problem_jacobian,
)
from evotensor.qd.low_spread_archive import LowSpreadAddInfo, LowSpreadArchive
from evotensor.qd.map_elites import MAPElites, MAPElitesState, ShardedMAPElites
from evotensor.qd.metrics import CQDScore, cqd_score
from evotensor.qd.mome_archive import MOMEArchive, MOMEState
from evotensor.qd.multi_task import MultiTaskMAPElites, MultiTaskState
from evotensor.qd.proximity_archive import ProximityAddInfo, ProximityArchive, ProximityState
from evotensor.qd.reevaluation import CorrectedArchive, corrected_archive
from evotensor.qd.sampled_archive import SampledAddInfo, SampledArchive, SampledCellsArchive
from evotensor.qd.sharded_archive import ShardedArchive

__all__ = [
    "IMPROVED",
    "NEW",
    "NOT_ADDED",
    "AddInfo",
    "Archive",
    "ArchiveState",
    "BanditMAPElites",
    "BanditState",
    "CMAESEmitter",
    "CQDScore",
    "CVTArchive",
    "CorrectedArchive",
    "DCRLEmitter",
    "DNSAddInfo",
    "DensityAddInfo",
    "DensityArchive",
    "DensityState",
    "DiscountAddInfo",
    "DiscountArchive",
    "DiscountMLP",
    "DiscountState",
    "DNSArchive",
    "Emitter",
    "EmitterGroup",
    "GaussianEmitter",
    "GeneSwapCrossover",
    "GenotypeEmitter",
    "GradientArborescenceEmitter",
    "GradientOperatorEmitter",
    "GridArchive",
    "IsoLineEmitter",
    "LowSpreadAddInfo",
    "LowSpreadArchive",
    "MAPElites",
    "MAPElitesState",
    "MEESEmitter",
    "MOMEArchive",
    "MOMEState",
    "MixingEmitter",
    "MultiTaskMAPElites",
    "MultiTaskState",
    "PolicyGradientEmitter",
    "PolynomialMutation",
    "ProximityAddInfo",
    "ProximityArchive",
    "ProximityState",
    "SampledAddInfo",
    "SampledArchive",
    "SampledCellsArchive",
    "ShardedArchive",
    "ShardedMAPElites",
    "UnstructuredArchive",
    "corrected_archive",
    "cqd_score",
    "dcrl_me_emitters",
    "fit_discount_model",
    "grid_centroids",
    "kmeans_centroids",
    "nearest_centroid",
    "pga_me_emitters",
    "polynomial_step",
    "problem_jacobian",
]


def __getattr__(name: str) -> Any:
    """``EvolutionStrategyEmitter``, the CMA-ES emitter's old name: deprecated (warns), use
    :class:`CMAESEmitter`."""
    if name == "EvolutionStrategyEmitter":
        from evotensor.qd import emitters

        return getattr(emitters, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
