"""QD tasks: ``qd-arm``, ``qd-novelty``, ``qd-dns``, ``qd-mees``, ``qd-cma-mae``, ``qd-dds``,
``qd-dms``, ``qd-cma-mega``, ``qd-omg-mega``, ``qd-mome``, ``qd-multitask-arm``, ``qd-noisy-arm``
and ``qd-brax``.

* ``qd-arm`` — MAP-Elites with Iso+LineDD (pyribs' defaults, iso 0.01 / line 0.2, clipped to the
  genotype box) on the planar arm (QDax's definition, 100 joints), a 64 x 64 grid over the
  end-effector position, batch 1024.
* ``qd-novelty`` — novelty search with local competition (Lehman & Stanley 2011b) on the same arm:
  a :class:`~evotensor.qd.ProximityArchive` (capacity 10,000, ``k`` 15, novelty threshold 0.02 in
  the end-effector plane) is the search archive the Iso+LineDD emitter draws its parents from; a 64
  x 64 grid result archive receives every batch, so coverage means what it does for ``qd-arm``.
* ``qd-dns`` — Dominated Novelty Search (Bahlous-Boldi, Faldor et al. 2025) on the same arm: a
  :class:`~evotensor.qd.DNSArchive` of 2048 members (``k`` 3) is the search archive the Iso+LineDD
  emitter draws its parents from; a 64 x 64 grid result archive receives every batch.
* ``qd-mees`` — ME-ES (Colas et al. 2020; QDax's ``MEESEmitter`` defaults: 1000 mirrored samples,
  sigma 0.02, Adam 0.01, L2 0.02, a new parent every 10 steps, explore and exploit alternating) on
  the same arm and grid: one offspring per generation enters the archive, the samples are only
  evaluated (a population of ``pop``, default 1001: the offspring and ``pop - 1`` samples, rounded
  down to an even number, padded with a copy of the offspring).
* ``qd-cma-mae`` — CMA-MAE (Fontaine & Nikolaidis 2023; the setup of pyribs' CMA-MAE tutorial,
  scaled down: 20-d instead of 100-d, 5 emitters instead of 15) on the linear-projection sphere:
  archive learning rate 0.01, threshold_min 0, emitters with the improvement ranker, mu selection
  and basic restarts (one :class:`~evotensor.qd.emitters.EmitterGroup`), plus a plain result
  archive that keeps the best elites.

* ``qd-dds`` — Density Descent Search (Lee, Boyd & Nikolaidis 2024; pyribs' sphere example
  ``dds``): 15 CMA-ES emitters (sigma0 1.5, ``density`` ranker, ``mu`` selection, basic restarts,
  batch 36) on the 100-d linear-projection sphere, searching a :class:`~evotensor.qd.DensityArchive`
  (10,000 buffered measures, bandwidth a tenth of the measure half-range: pyribs' 25.6 at 100-d); a
  100 x 100 grid result archive keeps the elites and gives the emitters their restart points.
* ``qd-dms`` — Discount Model Search (Tjanaka et al. 2026; the paper's ``sphere_100d``
  configuration): the 100-d linear-projection sphere with its objective in ``[0, 1]``, 15 CMA-ES
  emitters (sigma0 0.5, ``imp`` ranker, ``mu`` selection, basic restarts, batch 36) ranked against a
  :class:`~evotensor.qd.DiscountArchive` (a 128 x 128 ReLU discount model, Adam 1e-3, learning
  rate 0.1, threshold_min 0, at most 5 epochs of batches of 32 per generation, cutoff loss 0.05,
  100 empty points; 1000 at init); a 100 x 100 grid result archive keeps the elites.
  ``--set measures=20`` (or 50) is the paper's ``sphere_20_100d`` (``sphere_50_100d``): as many
  measures, sums of consecutive coordinates, a CVT result archive of ``centroids`` (10,000) k-means
  cells (~15 s of k-means on a 2-core CPU) and restarts every 100 generations (the paper's rule).

* ``qd-cma-mega`` — CMA-MEGA (Fontaine & Nikolaidis 2021; pyribs' sphere example ``cma_mega``, at
  100 dimensions instead of 1000): one gradient arborescence emitter (sigma0 10, plain gradient
  ascent with step 1, ``mu`` selection, 35 branches + the solution point per generation), the
  gradients by ``jax.jacrev`` of the problem, a 100 x 100 grid. ``--set learning_rate=0.01
  emitters=15`` is pyribs' ``cma_maega``: CMA-MAEGA (a search archive with that threshold learning
  rate and ``threshold_min`` 0, a plain result archive, the emitters with the ``imp`` ranker and
  ``basic`` restarts).

* ``qd-omg-mega`` — OMG-MEGA (Fontaine & Nikolaidis 2021) with the setup of QDax's
  ``examples/omgmega.ipynb``: the 1000-d Rastrigin-proj (``RastriginProj``), a 100 x 100 grid over
  its two folded means, one gradient operator emitter (``sigma_g`` sqrt(10): QDax's ``sigma_g=10`` is
  a variance), batch 36, no clipping, 20,000 generations; the first batch 36 N(0, 1) solutions
  (QDax's example initialises with 100). QD score offset: the task's worst fitness.

* ``qd-mome`` — multi-objective MAP-Elites (MOME, Pierrot et al. 2022) with the setup of QDax's
  MOME example: the two-objective Rastrigin (100-d, optima at 0 and 2.2, box [-2, 4]), 64 CVT
  cells over the first two genes (20,000 k-means samples), Pareto fronts of up to 50 solutions,
  batch 100 of gene-swap crossovers (half the genes drawn with replacement) of elites, the first
  batch uniform in the box, 1000 generations. ``--set crossover_fraction=0.5`` mixes in QDax's
  polynomial mutation (eta 1, 60% of the genes). Hypervolumes are measured from the box's worst
  objective values (``MORastrigin.fitness_range``; QDax's example uses (-150, -150), which no
  point of the 100-d task reaches). Reports the MOQD score, the global hypervolume and the fronts;
  writes ``qd.png``, ``archive.png`` (hypervolume per cell) and ``fronts.png``.

* ``qd-multitask-arm`` — multi-task MAP-Elites (Mouret & Maguire 2020) with the setup of
  pymap_elites' ``examples/multitask_arm.py``: a 10-joint arm must reach ``(0.5, 0.5)``; 5000 tasks
  (angular range, length) from a CVT of ``[0, 1]^2`` (``cvt_samples`` = 100,000 k-means samples;
  pymap_elites' 30,000 leave a cell empty with our k-means), batch 100 of SBX children (eta 10)
  aimed by a bandit-sized tournament (1, 10, 50, 100, 500), 10,000 generations
  (pymap_elites' 10^6 evaluations). ``--set variation=iso_dd`` uses Iso+LineDD instead;
  ``tournament_sizes=1`` is the "no distance" variant (a random task). Reports the archive and how
  often each tournament size was chosen; writes ``qd.png`` and ``archive.png`` (best fitness per task).

* ``qd-noisy-arm`` — MAP-Elites Low-Spread (ME-LS, Mace et al. 2023; QDax's ``MELS``) on QDax's
  noisy arm (8 joints, genotype noise 0.05 as QDax's arm test, fitness and descriptor noise 0.01):
  every solution evaluated ``samples`` = 5 times, Iso+LineDD batches of 64 solutions (320
  evaluations), a 32 x 32 grid. ``--set samples=1`` is plain MAP-Elites. Reports the archive and
  the *corrected* archive (every elite re-evaluated ``reevals`` = 16 times, the medians inserted
  into an empty grid, :func:`~evotensor.qd.corrected_archive`), the honest QD score on a noisy task.
  ``--set archive=sampling`` is MAP-Elites-Sampling (QDax's ``sampling``) instead: each solution's
  samples reduced by ``extractor`` (``average``, ``median``, ``mode`` or ``closest``) and inserted
  into the grid.

* ``qd-brax`` — QD-RL: MAP-Elites with Iso+LineDD (QDax's brax example values, iso 0.005 /
  line 0.05) over the parameters of a ``64-64`` tanh MLP policy on a QDax brax task (default
  ``walker2d_uni``: feet-contact descriptors; see :mod:`evotensor.problems.qd_control`). A grid for
  one or two descriptors, a CVT archive (``cvt_cells`` centroids) for more. ``--set emitter=mees``
  runs ME-ES instead (the deep-neuroevolution setting of Colas et al. 2020; ``qd-mees``'s options
  and population rule). ``--set emitter=pga`` runs PGA-ME (QDax's PGAME defaults: half the batch
  Iso+LineDD, half improved along a TD3 critic trained on every transition, plus its greedy actor;
  ``pg_steps``, ``critic_steps``, ``buffer``, ``critic_hidden``, ``transitions_batch`` set them;
  ``pop`` is the whole batch, default 100; the first batch independently initialised policies, as
  QDax's). ``--set emitter=dcrl`` runs DCRL-ME (QDax's DCRL-ME defaults: a batch of 256, half
  Iso+LineDD, a quarter improved along a descriptor-conditioned critic towards their own cell, a
  quarter the conditioned actor injected for sampled cells; ``lengthscale`` and the options above,
  with DCRL-ME's defaults 150 PG steps, 3000 critic steps, 100 transitions; as in QDax's example
  every reward is ``max(r + reward_offset, 0)``, fitness included). ``--set samples=5`` runs
  ME-LS (the brax setup of QDax's ``mels`` example; every policy evaluated 5 times from its own
  resets) and reports the corrected archive (``reevals``, default 16 with ``samples > 1``).
  Needs brax; slow on a CPU, meant for a GPU.

The others report coverage, QD score and the best objective, and write ``qd.png`` (coverage and QD
score per generation) and, for two descriptors, ``archive.png`` (the elites) into the run directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from evotensor.qd.archive import CVTArchive, GridArchive
from evotensor.qd.centroids import kmeans_centroids
from evotensor.qd.density_archive import DensityArchive
from evotensor.qd.discount_archive import DiscountArchive
from evotensor.qd.dns_archive import DNSArchive
from evotensor.qd.emitters import (
    CMAESEmitter,
    EmitterGroup,
    GeneSwapCrossover,
    GradientArborescenceEmitter,
    GradientOperatorEmitter,
    IsoLineCrossover,
    IsoLineEmitter,
    MEESEmitter,
    MixingEmitter,
    PolynomialMutation,
    SBXCrossover,
    dcrl_me_emitters,
    pga_me_emitters,
    problem_jacobian,
)
from evotensor.qd.extractors import EXPECTATIONS
from evotensor.qd.low_spread_archive import LowSpreadArchive
from evotensor.qd.map_elites import MAPElites
from evotensor.qd.mome_archive import MOMEArchive
from evotensor.qd.multi_task import MultiTaskMAPElites
from evotensor.qd.plots import archive_heatmap, plot_pareto_fronts, plot_qd_history
from evotensor.qd.proximity_archive import ProximityArchive
from evotensor.qd.reevaluation import corrected_archive
from evotensor.qd.sampled_archive import SampledArchive
from evotensor.tasks import (
    Task,
    hidden_sizes_option,
    positive_float_option,
    positive_int_option,
    register_task,
)


def _grid(value: Any) -> tuple[int, ...]:
    """``64`` or ``"64,48"`` -> cells per measure (2 measures)."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value, value)
    if isinstance(value, str):
        value = tuple(int(v) for v in value.split(",") if v.strip())
        value = value * 2 if len(value) == 1 else value
    value = tuple(value)
    if len(value) != 2 or not all(isinstance(v, int) and v > 0 for v in value):
        raise ValueError(f"option cells must be a positive int or two (e.g. 64 or '64,48'), got {value!r}")
    return value


def _arm_grid(problem: Any, cfg: dict[str, Any]) -> GridArchive:
    """The arm tasks' grid over the end position (option ``cells``)."""
    return GridArchive(
        solution_dim=problem.num_dims,
        dims=_grid(cfg["cells"]),
        ranges=problem.descriptor_ranges,
        qd_score_offset=-1.0,  # fitness (minus the joint angles' spread) lies in [-0.5, 0]
    )


def _arm_iso_line(problem: Any, cfg: dict[str, Any], batch: int) -> IsoLineEmitter:
    """Iso+LineDD from the arm stretched straight (options ``iso_sigma``, ``line_sigma``, ``pop``,
    default ``batch``), clipped to the arm's box."""
    return IsoLineEmitter(
        x0=np.full(problem.num_dims, 0.5),
        iso_sigma=float(cfg["iso_sigma"]),
        line_sigma=float(cfg["line_sigma"]),
        batch_size=cfg["pop"] or batch,
        bounds=problem.bounds,
    )


def _mees_emitter(x0: Any, cfg: dict[str, Any], bounds: Any = None) -> MEESEmitter:
    """The ME-ES emitter of ``qd-mees`` and ``qd-brax --set emitter=mees``: a population of exactly
    ``pop`` (default 1001): the offspring, ``pop - 1`` mirrored samples rounded down to an even
    number, and one evaluate-only copy of the offspring when ``pop`` is even."""
    pop = cfg["pop"] or 1001
    if pop < 3:
        raise ValueError(f"option pop must be >= 3 for ME-ES (the offspring and two samples), got {pop}")
    return MEESEmitter(
        x0,
        num_samples=2 * ((pop - 1) // 2),
        sigma=float(cfg["sigma"]),
        mode=cfg["mode"],
        novelty_capacity=positive_int_option(cfg, "novelty_capacity"),
        bounds=bounds,
        batch_multiple=pop,
    )


def _report(
    strategy: MAPElites, labels: tuple[str, str], problem: Any = None, reevals: int = 0, decoder: Any = None
):
    """The archive's figures and plots; with ``reevals``, also its corrected archive's (every elite
    re-evaluated on ``problem``, through ``decoder`` for a policy problem)."""

    def report(result: Any, run_dir: Path | None) -> str:
        archive, state = strategy.reported_archive(result.state)
        stats = {k: float(v) for k, v in archive.stats(state).items()}
        lines = [
            f"archive: {int(stats['num_elites'])} of {archive.num_cells} cells "
            f"(coverage {100 * stats['coverage']:.1f}%), QD score {stats['qd_score']:.4g} "
            f"(offset {archive.qd_score_offset:g}), best objective {stats['obj_max']:.4g}, "
            f"mean {stats['obj_mean']:.4g}",
        ]
        if reevals:
            import jax

            key = jax.random.key(2**20)
            fixed = corrected_archive(
                strategy, result.state, problem, key, num_reevals=reevals, decoder=decoder
            )
            good = {k: float(v) for k, v in fixed.archive.stats(fixed.state).items()}
            lines.append(
                f"corrected by {reevals} re-evaluations (medians): {int(good['num_elites'])} elites, "
                f"QD score {good['qd_score']:.4g}, best objective {good['obj_max']:.4g}; descriptor std "
                f"{float(np.nanmean(np.asarray(fixed.measures_std))):.4g}, fitness std "
                f"{float(np.nanmean(np.asarray(fixed.fitness_std))):.4g} (mean over the elites)"
            )
        if run_dir is not None:
            curves = Path(run_dir) / "qd.png"
            plot_qd_history(result.history, curves)
            plots = [str(curves)]
            if archive.measure_dim == 2:
                heatmap = Path(run_dir) / "archive.png"
                archive_heatmap(archive, state, heatmap, labels=labels, title="elites")
                plots.insert(0, str(heatmap))
            lines.append(f"plots: {', '.join(plots)}")
        return "\n".join(lines)

    return report


@register_task(
    "qd-arm",
    "MAP-Elites with Iso+LineDD on the 100-joint planar arm (64 x 64 grid of end positions)",
    defaults={"joints": 100, "cells": 64, "iso_sigma": 0.01, "line_sigma": 0.2},
)
def _build_arm(cfg: dict[str, Any]) -> Task:
    from evotensor.problems.qd import Arm

    problem = Arm(num_joints=positive_int_option(cfg, "joints"))
    strategy = MAPElites(_arm_grid(problem, cfg), [_arm_iso_line(problem, cfg, 1024)])
    return Task(
        strategy=strategy,
        problem=problem,
        generations=cfg["generations"] or 500,
        report=_report(strategy, ("end-effector x", "end-effector y")),
    )


@register_task(
    "qd-novelty",
    "Novelty search with local competition on the 100-joint arm (a 64 x 64 grid result archive)",
    defaults={
        "joints": 100,
        "cells": 64,
        "capacity": 10_000,
        "k_neighbors": 15,
        "novelty_threshold": 0.02,
        "local_competition": True,
        "iso_sigma": 0.01,
        "line_sigma": 0.2,
    },
)
def _build_novelty(cfg: dict[str, Any]) -> Task:
    from evotensor.problems.qd import Arm

    problem = Arm(num_joints=positive_int_option(cfg, "joints"))
    local = cfg["local_competition"]
    if not isinstance(local, bool):
        raise ValueError(f"option local_competition must be true or false, got {local!r}")
    search = ProximityArchive(
        solution_dim=problem.num_dims,
        measure_dim=2,
        capacity=positive_int_option(cfg, "capacity"),
        k_neighbors=positive_int_option(cfg, "k_neighbors"),
        novelty_threshold=float(cfg["novelty_threshold"]),
        local_competition=local,
        qd_score_offset=-1.0,
    )
    result = _arm_grid(problem, cfg)
    emitter = IsoLineEmitter(
        x0=np.full(problem.num_dims, 0.5),
        iso_sigma=float(cfg["iso_sigma"]),
        line_sigma=float(cfg["line_sigma"]),
        batch_size=cfg["pop"] or 1024,
        bounds=problem.bounds,
    )
    strategy = MAPElites(search, [emitter], result_archive=result)
    grid_report = _report(strategy, ("end-effector x", "end-effector y"))

    def report(run: Any, run_dir: Path | None) -> str:
        state = run.state.archive
        n = int(state.occupied.sum())
        threshold = float(state.novelty_threshold)
        line = (
            f"novelty archive: {n} of {search.capacity} rows, threshold {threshold:.4g}, "
            f"{int(state.dropped)} novel candidates dropped (archive full)"
        )
        return grid_report(run, run_dir) + "\n" + line

    return Task(strategy=strategy, problem=problem, generations=cfg["generations"] or 300, report=report)


@register_task(
    "qd-dns",
    "Dominated Novelty Search on the 100-joint arm (a 64 x 64 grid result archive)",
    defaults={
        "joints": 100,
        "cells": 64,
        "capacity": 2048,
        "k_neighbors": 3,
        "iso_sigma": 0.01,
        "line_sigma": 0.2,
    },
)
def _build_dns(cfg: dict[str, Any]) -> Task:
    from evotensor.problems.qd import Arm

    problem = Arm(num_joints=positive_int_option(cfg, "joints"))
    search = DNSArchive(
        solution_dim=problem.num_dims,
        measure_dim=2,
        capacity=positive_int_option(cfg, "capacity"),
        k_neighbors=positive_int_option(cfg, "k_neighbors"),
        qd_score_offset=-1.0,
    )
    emitter = IsoLineEmitter(
        x0=np.full(problem.num_dims, 0.5),
        iso_sigma=float(cfg["iso_sigma"]),
        line_sigma=float(cfg["line_sigma"]),
        batch_size=cfg["pop"] or 1024,
        bounds=problem.bounds,
    )
    strategy = MAPElites(search, [emitter], result_archive=_arm_grid(problem, cfg))
    grid_report = _report(strategy, ("end-effector x", "end-effector y"))

    def report(run: Any, run_dir: Path | None) -> str:
        state = run.state.archive
        n = int(state.occupied.sum())
        best = float(search.stats(state)["obj_max"])
        line = f"DNS population: {n} of {search.capacity}, best objective {best:.4g}"
        return grid_report(run, run_dir) + "\n" + line

    return Task(strategy=strategy, problem=problem, generations=cfg["generations"] or 300, report=report)


@register_task(
    "qd-mees",
    "ME-ES (explore-exploit, QDax's defaults) on the 100-joint arm (64 x 64 grid of end positions)",
    defaults={"joints": 100, "cells": 64, "sigma": 0.02, "mode": "explore_exploit", "novelty_capacity": 1000},
)
def _build_mees(cfg: dict[str, Any]) -> Task:
    from evotensor.problems.qd import Arm

    problem = Arm(num_joints=positive_int_option(cfg, "joints"))
    archive = _arm_grid(problem, cfg)
    emitter = _mees_emitter(np.full(problem.num_dims, 0.5), cfg, bounds=problem.bounds)
    strategy = MAPElites(archive, [emitter])
    grid_report = _report(strategy, ("end-effector x", "end-effector y"))

    def report(run: Any, run_dir: Path | None) -> str:
        state = run.state.emitters[0]
        line = (
            f"ME-ES: {int(state.step)} gradient steps of {emitter.num_samples} samples, "
            f"{int(state.skipped)} skipped (non-finite)"
        )
        return grid_report(run, run_dir) + "\n" + line

    return Task(strategy=strategy, problem=problem, generations=cfg["generations"] or 1000, report=report)


@register_task(
    "qd-cma-mae",
    "CMA-MAE (5 CMA-ES emitters) on the 20-d linear-projection sphere, 50 x 50 grid",
    defaults={"dims": 20, "cells": 50, "emitters": 5, "learning_rate": 0.01, "sigma0": 0.5},
)
def _build_cma_mae(cfg: dict[str, Any]) -> Task:
    from evotensor.problems.qd import LinearProjection

    problem = LinearProjection(num_dims=positive_int_option(cfg, "dims"), function="sphere")
    grid = dict(solution_dim=problem.num_dims, dims=_grid(cfg["cells"]), ranges=problem.descriptor_ranges)
    search = GridArchive(**grid, learning_rate=float(cfg["learning_rate"]), threshold_min=0.0)
    result_archive = GridArchive(**grid)
    emitter = CMAESEmitter(
        np.zeros(problem.num_dims),
        float(cfg["sigma0"]),
        ranker="imp",
        selection_rule="mu",
        restart_rule="basic",
        batch_size=cfg["pop"] or 36,
    )
    # the copies vectorised: one emitter's code compiled, not one per emitter
    emitters = [EmitterGroup(emitter, positive_int_option(cfg, "emitters"))]
    strategy = MAPElites(search, emitters, result_archive=result_archive)
    return Task(
        strategy=strategy,
        problem=problem,
        generations=cfg["generations"] or 1000,
        report=_report(strategy, ("measure 0", "measure 1")),
    )


@register_task(
    "qd-dds",
    "Density Descent Search (15 CMA-ES emitters ranked by density) on the 100-d linear-projection sphere",
    defaults={"dims": 100, "cells": 100, "emitters": 15, "sigma0": 1.5, "buffer": 10_000, "bandwidth": None},
)
def _build_dds(cfg: dict[str, Any]) -> Task:
    from evotensor.problems.qd import LinearProjection

    problem = LinearProjection(num_dims=positive_int_option(cfg, "dims"), function="sphere")
    ranges = problem.descriptor_ranges
    # pyribs' example: 25.6 for the 100-d task's [-256, 256], a tenth of the half-range
    bandwidth = 0.1 * ranges[0][1] if cfg["bandwidth"] is None else positive_float_option(cfg, "bandwidth")
    search = DensityArchive(
        measure_dim=len(ranges), buffer_size=positive_int_option(cfg, "buffer"), bandwidth=bandwidth
    )
    grid = GridArchive(solution_dim=problem.num_dims, dims=_grid(cfg["cells"]), ranges=ranges)
    emitter = CMAESEmitter(
        np.zeros(problem.num_dims),
        positive_float_option(cfg, "sigma0"),
        ranker="density",
        selection_rule="mu",
        restart_rule="basic",
        batch_size=cfg["pop"] or 36,
    )
    strategy = MAPElites(
        search, [EmitterGroup(emitter, positive_int_option(cfg, "emitters"))], result_archive=grid
    )
    report = _report(strategy, ("measure 0", "measure 1"))

    def report_with_buffer(result: Any, run_dir: Path | None) -> str:
        state = result.state.archive
        head = f"density buffer: {int(state.size)} of {search.buffer_size} measures ({int(state.seen)} seen)"
        return head + "\n" + report(result, run_dir)

    return Task(
        strategy=strategy,
        problem=problem,
        generations=cfg["generations"] or 1000,
        report=report_with_buffer,
    )


@register_task(
    "qd-dms",
    "Discount Model Search (15 CMA-ES emitters, a discount network) on the 100-d linear-projection sphere",
    defaults={
        "dims": 100,
        "cells": 100,
        "emitters": 15,
        "sigma0": 0.5,
        "learning_rate": 0.1,
        "cutoff": 0.05,
        "measures": 2,
        "centroids": 10_000,
    },
)
def _build_dms(cfg: dict[str, Any]) -> Task:
    from evotensor.problems.qd import LinearProjection

    measures = positive_int_option(cfg, "measures")
    problem = LinearProjection(
        num_dims=positive_int_option(cfg, "dims"), function="sphere", scale=1.0, num_measures=measures
    )
    if measures == 2:
        grid = GridArchive(
            solution_dim=problem.num_dims, dims=_grid(cfg["cells"]), ranges=problem.descriptor_ranges
        )
    else:  # the paper's sphere_20_100d / sphere_50_100d: a CVT of k-means centroids (seed 42)
        grid = CVTArchive(
            solution_dim=problem.num_dims,
            centroids=positive_int_option(cfg, "centroids"),
            ranges=problem.descriptor_ranges,
            seed=42,
        )
    search = DiscountArchive(
        result_archive=grid,
        learning_rate=positive_float_option(cfg, "learning_rate"),
        threshold_min=problem.fitness_range[0],
        train_cutoff_loss=positive_float_option(cfg, "cutoff"),
    )
    emitter = CMAESEmitter(
        np.zeros(problem.num_dims),
        positive_float_option(cfg, "sigma0"),
        ranker="imp",
        selection_rule="mu",
        restart_rule="basic" if measures == 2 else 100,
        batch_size=cfg["pop"] or 36,
    )
    strategy = MAPElites(
        search, [EmitterGroup(emitter, positive_int_option(cfg, "emitters"))], result_archive=grid
    )
    report = _report(strategy, ("measure 0", "measure 1"))

    def report_with_model(result: Any, run_dir: Path | None) -> str:
        state = result.state.archive
        head = (
            f"discount model: last training {int(state.epochs)} epoch(s), loss "
            f"{float(search.search_metrics(state)['discount_loss']):.3g}, {int(state.empty)} empty cells"
        )
        return head + "\n" + report(result, run_dir)

    return Task(
        strategy=strategy, problem=problem, generations=cfg["generations"] or 1000, report=report_with_model
    )


@register_task(
    "qd-cma-mega",
    "CMA-MEGA (gradient arborescence) on the 100-d linear-projection sphere, 100 x 100 grid",
    defaults={"dims": 100, "cells": 100, "sigma0": 10.0, "lr": 1.0, "emitters": 1, "learning_rate": None},
)
def _build_cma_mega(cfg: dict[str, Any]) -> Task:
    import optax

    from evotensor.problems.qd import LinearProjection

    problem = LinearProjection(num_dims=positive_int_option(cfg, "dims"), function="sphere")
    grid = dict(solution_dim=problem.num_dims, dims=_grid(cfg["cells"]), ranges=problem.descriptor_ranges)
    maega = cfg["learning_rate"] is not None
    rules = dict(ranker="imp", restart_rule="basic") if maega else {}
    emitter = GradientArborescenceEmitter(
        np.zeros(problem.num_dims),
        float(cfg["sigma0"]),
        problem_jacobian(problem),
        optimizer=optax.sgd(float(cfg["lr"])),  # pyribs' "gradient_ascent"
        selection_rule="mu",
        batch_size=(cfg["pop"] or 36) - 1,
        **rules,
    )
    n = positive_int_option(cfg, "emitters")
    emitters = [emitter if n == 1 else EmitterGroup(emitter, n)]
    if maega:  # CMA-MAEGA: annealed thresholds in the search archive, the elites in a plain one
        search = GridArchive(**grid, learning_rate=float(cfg["learning_rate"]), threshold_min=0.0)
        strategy = MAPElites(search, emitters, result_archive=GridArchive(**grid))
    else:
        strategy = MAPElites(GridArchive(**grid), emitters)
    return Task(
        strategy=strategy,
        problem=problem,
        generations=cfg["generations"] or 1000,
        report=_report(strategy, ("measure 0", "measure 1")),
    )


@register_task(
    "qd-omg-mega",
    "OMG-MEGA (gradient operator) on QDax's 1000-d Rastrigin-proj, 100 x 100 grid",
    defaults={"dims": 1000, "cells": 100, "sigma_g": 10**0.5, "sigma": 0.0, "line_sigma": 0.0},
)
def _build_omg_mega(cfg: dict[str, Any]) -> Task:
    from evotensor.problems.qd import RastriginProj

    problem = RastriginProj(num_dims=positive_int_option(cfg, "dims"))
    batch = cfg["pop"] or 36
    first = np.random.default_rng(cfg["seed"]).normal(size=(batch, problem.num_dims))
    emitter = GradientOperatorEmitter(
        np.zeros(problem.num_dims),
        sigma_g=float(cfg["sigma_g"]),
        jacobian=problem_jacobian(problem),
        sigma=float(cfg["sigma"]),
        line_sigma=float(cfg["line_sigma"]),
        batch_size=batch,
        initial_solutions=first,
    )
    archive = GridArchive(
        solution_dim=problem.num_dims,
        dims=_grid(cfg["cells"]),
        ranges=problem.descriptor_ranges,
        qd_score_offset=problem.fitness_range[0],
    )
    strategy = MAPElites(archive, [emitter])
    return Task(
        strategy=strategy,
        problem=problem,
        generations=cfg["generations"] or 20_000,
        report=_report(strategy, ("mean of the first half", "mean of the second half")),
    )


@register_task(
    "qd-mome",
    "Multi-objective MAP-Elites (MOME) on QDax's two-objective 100-d Rastrigin, 64 CVT cells",
    defaults={
        "dims": 100,
        "cells": 64,
        "front_size": 50,
        "crossover_fraction": 1.0,
        "swap": 0.5,
        "eta": 1.0,
        "mutate": 0.6,
        "truncation": "crowding",
    },
)
def _build_mome(cfg: dict[str, Any]) -> Task:
    import jax

    from evotensor.problems.qd import MORastrigin

    problem = MORastrigin(num_dims=positive_int_option(cfg, "dims"))
    low, high = problem.bounds
    cells = CVTArchive(
        solution_dim=problem.num_dims,
        centroids=positive_int_option(cfg, "cells"),
        ranges=problem.descriptor_ranges,
        samples=20_000,
        seed=cfg["seed"],
    )
    archive = MOMEArchive(
        cells,
        num_objectives=2,
        front_size=positive_int_option(cfg, "front_size"),
        reference_point=[worst for worst, _ in problem.fitness_range],
        truncation=cfg["truncation"],
    )
    batch = cfg["pop"] or 100
    first = jax.random.uniform(
        jax.random.key(cfg["seed"]), (batch, problem.num_dims), minval=low, maxval=high
    )
    emitter = MixingEmitter(
        np.full(problem.num_dims, (low + high) / 2),
        mutation=PolynomialMutation(
            low=low, high=high, eta=float(cfg["eta"]), proportion=float(cfg["mutate"])
        ),
        crossover=GeneSwapCrossover(proportion=float(cfg["swap"])),
        crossover_fraction=float(cfg["crossover_fraction"]),
        batch_size=batch,
        bounds=problem.bounds,
        initial_solutions=np.asarray(first),
    )
    strategy = MAPElites(archive, [emitter])

    def report(result: Any, run_dir: Path | None) -> str:
        state = result.state.archive
        stats = {k: float(v) for k, v in archive.stats(state).items()}
        filled = round(stats["coverage"] * archive.num_cells)
        reference = np.asarray(archive.reference_point).tolist()
        lines = [
            f"MOME archive: {int(stats['num_elites'])} solutions in {filled} of {archive.num_cells} cells "
            f"(coverage {100 * stats['coverage']:.1f}%), MOQD score {stats['moqd_score']:.6g}, global "
            f"hypervolume {stats['global_hypervolume']:.6g}, best cell {stats['max_hypervolume']:.6g} "
            f"(reference point {reference}), max sum of objectives {stats['max_sum_objectives']:.5g}",
        ]
        if run_dir is not None:
            run_dir = Path(run_dir)
            plot_qd_history(result.history, run_dir / "qd.png", score="moqd_score")
            volumes = np.where(
                np.asarray(state.occupied).any(axis=1), np.asarray(archive.hypervolumes(state)), np.nan
            )
            archive_heatmap(
                cells,
                None,
                run_dir / "archive.png",
                labels=("gene 0", "gene 1"),
                title="hypervolume per cell",
                values=volumes,
                value_label="hypervolume",
            )
            plot_pareto_fronts(archive, state, run_dir / "fronts.png", title="stored solutions")
            lines.append(f"plots: {run_dir / 'archive.png'}, {run_dir / 'fronts.png'}, {run_dir / 'qd.png'}")
        return "\n".join(lines)

    return Task(strategy=strategy, problem=problem, generations=cfg["generations"] or 1000, report=report)


def _tournament_sizes(value: Any) -> tuple[int, ...]:
    """``"1,10,50"`` or ``10`` or ``[1, 10]`` -> tournament sizes (checked by the strategy)."""
    if isinstance(value, str):
        try:
            return tuple(int(v) for v in value.split(",") if v.strip())
        except ValueError as err:
            raise ValueError(
                f"option tournament_sizes must be ints such as '1,10,50', got {value!r}"
            ) from err
    return tuple(value) if isinstance(value, (list, tuple)) else (value,)


@register_task(
    "qd-multitask-arm",
    "Multi-task MAP-Elites on the 10-joint arm: 5000 tasks (angular range, length), reach (0.5, 0.5)",
    defaults={
        "joints": 10,
        "tasks": 5000,
        "cvt_samples": 100_000,
        "tournament_sizes": "1,10,50,100,500",
        "bandit_reward": "rate",
        "variation": "sbx",
        "eta": 10.0,
        "iso_sigma": 0.01,
        "line_sigma": 0.2,
    },
)
def _build_multitask_arm(cfg: dict[str, Any]) -> Task:
    import jax

    from evotensor.problems.multi_task import MultiTaskArm

    problem = MultiTaskArm(num_joints=positive_int_option(cfg, "joints"))
    tasks, _ = kmeans_centroids(
        jax.random.key(cfg["seed"]),
        positive_int_option(cfg, "tasks"),
        problem.task_ranges,
        samples=positive_int_option(cfg, "cvt_samples"),
    )
    low, high = problem.bounds
    if cfg["variation"] == "sbx":
        variation = SBXCrossover(low=low, high=high, eta=float(cfg["eta"]))
    elif cfg["variation"] == "iso_dd":
        variation = IsoLineCrossover(float(cfg["iso_sigma"]), float(cfg["line_sigma"]))
    else:
        raise ValueError(f"option variation must be 'sbx' or 'iso_dd', got {cfg['variation']!r}")
    strategy = MultiTaskMAPElites(
        tasks,
        solution_dim=problem.num_dims,
        batch_size=cfg["pop"] or 100,
        variation=variation,
        bounds=problem.bounds,
        tournament_sizes=_tournament_sizes(cfg["tournament_sizes"]),
        bandit_reward=cfg["bandit_reward"],
        qd_score_offset=-2.0,  # the distance to (0.5, 0.5) is below 2 for every task
    )
    archive_report = _report(strategy, ("angular range a", "length L"))

    def report(result: Any, run_dir: Path | None) -> str:
        pulls = np.asarray(result.state.pulls)
        rates = np.asarray(result.state.reward) / np.maximum(pulls, 1)
        bandit = ", ".join(
            f"{size}: {int(n)} ({rate:.3f})"
            for size, n, rate in zip(strategy.tournament_sizes, pulls, rates, strict=True)
        )
        return f"{archive_report(result, run_dir)}\ntournament size: generations (mean reward): {bandit}"

    return Task(strategy=strategy, problem=problem, generations=cfg["generations"] or 10_000, report=report)


def _samples_and_reevals(cfg: dict[str, Any]) -> tuple[int, int]:
    """Options ``samples`` (evaluations per solution; > 1: ME-LS) and ``reevals`` (None: 16 with
    ME-LS, else 0)."""
    samples = positive_int_option(cfg, "samples")
    reevals = cfg["reevals"]
    if reevals is None:
        reevals = 16 if samples > 1 else 0
    if isinstance(reevals, bool) or not isinstance(reevals, int) or reevals < 0:
        raise ValueError(f"option reevals must be an int >= 0, got {reevals!r}")
    return samples, reevals


@register_task(
    "qd-noisy-arm",
    "ME-LS (MAP-Elites Low-Spread) on QDax's noisy 8-joint arm, with its corrected archive",
    defaults={
        "joints": 8,
        "cells": 32,
        "samples": 5,
        "reevals": None,
        "params_noise": 0.05,
        "fitness_noise": 0.01,
        "descriptor_noise": 0.01,
        "iso_sigma": 0.01,
        "line_sigma": 0.1,
        "archive": "low-spread",
        "extractor": "average",
    },
)
def _build_noisy_arm(cfg: dict[str, Any]) -> Task:
    from evotensor.problems.qd import NoisyArm

    problem = NoisyArm(
        num_joints=positive_int_option(cfg, "joints"),
        params_noise=float(cfg["params_noise"]),
        fitness_noise=float(cfg["fitness_noise"]),
        descriptor_noise=float(cfg["descriptor_noise"]),
    )
    samples, reevals = _samples_and_reevals(cfg)
    archive = _arm_grid(problem, cfg)
    if cfg["archive"] not in ("low-spread", "sampling"):
        raise ValueError(f"option archive must be 'low-spread' or 'sampling', got {cfg['archive']!r}")
    if cfg["extractor"] not in EXPECTATIONS:
        raise ValueError(
            f"option extractor must be one of {', '.join(EXPECTATIONS)}, got {cfg['extractor']!r}"
        )
    if samples > 1 and cfg["archive"] == "low-spread":
        archive = LowSpreadArchive(archive, num_samples=samples)
    elif samples > 1:
        extract = cfg["extractor"]
        archive = SampledArchive(
            archive, num_samples=samples, fitness_extractor=extract, descriptor_extractor=extract
        )
    strategy = MAPElites(archive, [_arm_iso_line(problem, cfg, 64)])
    return Task(
        strategy=strategy,
        problem=problem,
        generations=cfg["generations"] or 500,
        report=_report(strategy, ("end-effector x", "end-effector y"), problem, reevals),
    )


@register_task(
    "qd-brax",
    "QD-RL: MAP-Elites (Iso+LineDD) evolving MLP policies on a QDax brax task (default walker2d_uni)",
    defaults={
        "env": "walker2d_uni",
        "hidden": "64,64",
        "episode_length": 250,
        "cells": 32,
        "cvt_cells": 1024,
        "iso_sigma": 0.005,
        "line_sigma": 0.05,
        "backend": None,
        "emitter": "iso_line",
        "sigma": 0.02,
        "mode": "explore_exploit",
        "novelty_capacity": 1000,
        "pg_steps": None,  # PGA-ME 100, DCRL-ME 150 (QDax's)
        "critic_steps": None,  # PGA-ME 300, DCRL-ME 3000
        "buffer": 1_000_000,
        "critic_hidden": "256,256",
        "transitions_batch": None,  # PGA-ME 256, DCRL-ME 100
        "lengthscale": 0.1,
        "samples": 1,  # > 1: ME-LS (QDax's mels example: 5)
        "reevals": None,
    },
)
def _build_brax(cfg: dict[str, Any]) -> Task:
    import jax
    from jax.flatten_util import ravel_pytree

    from evotensor.problems.networks import ParamsDecoder, init_mlp, mlp_apply
    from evotensor.problems.qd_control import BraxQDProblem

    rl = cfg["emitter"] in ("pga", "dcrl")
    problem = BraxQDProblem(
        cfg["env"],
        episode_length=positive_int_option(cfg, "episode_length"),
        backend=cfg["backend"],
        transitions=rl,  # the critics of PGA-ME and DCRL-ME learn from every step
        # DCRL-ME's similarity-scaled rewards must be >= 0: QDax's example offsets and clips them
        offset_rewards=cfg["emitter"] == "dcrl",
    )
    params = init_mlp(
        jax.random.key(cfg["seed"]),
        (problem.observation_size, *hidden_sizes_option(cfg), problem.output_size),
    )
    x0, _ = ravel_pytree(params)
    ranges = problem.descriptor_ranges
    common = dict(solution_dim=x0.size, ranges=ranges, qd_score_offset=problem.qd_score_offset)
    if problem.num_descriptors <= 2:
        archive = GridArchive(dims=(positive_int_option(cfg, "cells"),) * problem.num_descriptors, **common)
    else:
        archive = CVTArchive(
            centroids=positive_int_option(cfg, "cvt_cells"), samples=50_000, seed=cfg["seed"], **common
        )
    samples, reevals = _samples_and_reevals(cfg)
    if samples > 1:
        archive = LowSpreadArchive(archive, num_samples=samples)
    decoder = ParamsDecoder(mlp_apply)
    if rl:
        dcrl = cfg["emitter"] == "dcrl"
        batch = cfg["pop"] or (256 if dcrl else 100)
        sizes = (problem.observation_size, *hidden_sizes_option(cfg), problem.output_size)
        # QDax's first batch: independently initialised policies
        initial = np.stack(
            [
                np.asarray(ravel_pytree(init_mlp(k, sizes))[0])
                for k in jax.random.split(jax.random.key(cfg["seed"] + 1), batch)
            ]
        )

        def rl_option(name: str, pga_default: int, dcrl_default: int) -> int:
            value = cfg[name] if cfg[name] is not None else (dcrl_default if dcrl else pga_default)
            return positive_int_option({name: value}, name)

        common = dict(
            initial_solutions=initial,
            iso_sigma=float(cfg["iso_sigma"]),
            line_sigma=float(cfg["line_sigma"]),
            num_pg_training_steps=rl_option("pg_steps", 100, 150),
            num_critic_training_steps=rl_option("critic_steps", 300, 3000),
            replay_buffer_size=positive_int_option(cfg, "buffer"),
            critic_hidden_layer_size=hidden_sizes_option(cfg, "critic_hidden"),
            transitions_batch_size=rl_option("transitions_batch", 256, 100),
        )
        if dcrl:  # QDax's split: half Iso+LineDD, a quarter PG-varied, a quarter injected actors
            if batch < 3:
                raise ValueError(f"option pop must be >= 3 for DCRL-ME, got {batch}")
            ga, pg = batch // 2, max(batch // 4, 1)
            emitters = dcrl_me_emitters(
                params,
                problem.descriptor_ranges,
                activation="tanh",  # the decoder's mlp_apply
                ga_batch_size=ga,
                dcrl_batch_size=pg,
                ai_batch_size=batch - ga - pg,
                lengthscale=positive_float_option(cfg, "lengthscale"),
                **common,
            )
        else:
            emitters = pga_me_emitters(
                params, decoder.apply, problem.observation_size, env_batch_size=batch, **common
            )
    elif cfg["emitter"] == "mees":
        emitters = [_mees_emitter(np.asarray(x0), cfg)]
    elif cfg["emitter"] == "iso_line":
        emitters = [
            IsoLineEmitter(
                x0=np.asarray(x0),
                iso_sigma=float(cfg["iso_sigma"]),
                line_sigma=float(cfg["line_sigma"]),
                batch_size=cfg["pop"] or 256,
            )
        ]
    else:
        raise ValueError(
            f"option emitter must be 'iso_line', 'mees', 'pga' or 'dcrl', got {cfg['emitter']!r}"
        )
    strategy = MAPElites(archive, emitters, solution=params)
    labels = ("descriptor 0", "descriptor 1")
    return Task(
        strategy=strategy,
        problem=problem,
        decoder=decoder,
        generations=cfg["generations"] or 200,
        report=_report(strategy, labels, problem, reevals, decoder),
    )
