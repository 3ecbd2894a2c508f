"""Corrected archives for noisy problems (Flageat et al. 2023, "Uncertain Quality-Diversity";
QDax's ``reevaluation_function`` and ``reevaluation_reproducibility_function``).

Where fitness and descriptors are noisy, an archive's elites are often lucky samples: their stored
fitness overestimates what they usually get, and they may usually land in another cell. The
*corrected* archive re-evaluates every elite ``num_reevals`` times, reduces the samples (the median
by default, as QDax) and inserts the results, with the usual batch rules, into an empty archive of
the same cells: its QD score is the one to compare algorithms on a noisy problem by::

    result = evotensor.run(me, NoisyArm(), generations=1000, key=key)
    corrected = corrected_archive(me, result.state, NoisyArm(), jax.random.key(1), num_reevals=32)
    # or any archive and its state: corrected_archive(archive, archive_state, problem, key, ...)
    corrected.archive.stats(corrected.state)["qd_score"]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from evotensor.core.checks import ArgumentError, check_int
from evotensor.core.problem import evaluate_genotypes
from evotensor.core.strategy import as_solution_space
from evotensor.qd.archive import Archive, ArchiveState, UnstructuredArchive
from evotensor.qd.extractors import EXPECTATIONS, get_extractor
from evotensor.qd.sampled_archive import SampledCellsArchive


def _over_reevaluations(extract: Callable[[jax.Array], jax.Array]) -> Callable[[jax.Array], jax.Array]:
    """An extractor of :mod:`evotensor.qd.extractors` (samples on axis 1) for ``[R, C, ...]``."""
    return lambda samples: extract(jnp.moveaxis(samples, 0, 1))


# the extractors by name ("mean" is "average"'s older name here)
REDUCERS: dict[str, Callable[[jax.Array], jax.Array]] = {
    **{name: _over_reevaluations(f) for name, f in EXPECTATIONS.items()},
    "mean": _over_reevaluations(EXPECTATIONS["average"]),
}


class CorrectedArchive(NamedTuple):
    """What :func:`corrected_archive` returns.

    Attributes:
        archive: the plain archive the corrected elites were added to.
        state: its state.
        fitness_std: ``[C]`` std of each elite's re-evaluated objectives, by the cell the elite was
            in (NaN where that cell was empty): QDax's fitness reproducibility.
        measures_std: ``[C]`` std of each elite's re-evaluated measures, averaged over the measure
            dimensions (NaN where empty): QDax's descriptor reproducibility.
    """

    archive: Archive
    state: ArchiveState
    fitness_std: jax.Array
    measures_std: jax.Array


def _target(archive: Archive, target: Archive | None) -> Archive:
    """The empty archive to fill: ``target``, or the cells of a sampled archive, or the archive."""
    if target is None:
        target = archive.cells if isinstance(archive, SampledCellsArchive) else archive
        if target.learning_rate != 1.0:
            raise ArgumentError(
                "the archive anneals its thresholds (CMA-MAE): pass target=, a plain archive of its cells"
            )
    if not isinstance(target, Archive) or isinstance(target, (UnstructuredArchive, SampledCellsArchive)):
        raise ArgumentError(f"target must be a GridArchive or CVTArchive, got {type(target).__name__}")
    if getattr(target, "num_objectives", None) is not None:
        raise ArgumentError("target must be a single-objective archive (GridArchive or CVTArchive)")
    if (target.solution_dim, target.genotype, target.measure_dim) != (
        archive.solution_dim,
        archive.genotype,
        archive.measure_dim,
    ):
        raise ArgumentError("target must store the archive's solutions and measures")
    return target


def corrected_archive(
    source: Any,
    state: Any,
    problem: Any,
    key: jax.Array,
    *,
    num_reevals: int,
    target: Archive | None = None,
    solution: Any = None,
    decoder: Any = None,
    fitness_reducer: Any = "median",
    measures_reducer: Any = "median",
) -> CorrectedArchive:
    """Re-evaluate every elite of an archive and add the reduced results to an empty archive.

    Args:
        source: the :class:`~evotensor.qd.MAPElites` (or :class:`~evotensor.qd.BanditMAPElites`)
            that produced ``state`` (its reported archive, solution template and decoder are used),
            or an :class:`~evotensor.qd.archive.Archive` (then ``state`` is its
            :class:`~evotensor.qd.archive.ArchiveState`, and ``solution`` / ``decoder`` say how its
            flat solutions reach the problem).
        state: the strategy's state (``result.state`` of a run), or the archive's.
        problem: the problem to re-evaluate on (``evaluate(key, genotypes)``; a policy problem
            through the decoder), with its ``maximize`` orientation.
        key: the re-evaluations' key; re-evaluation ``r`` scores every cell's solution with
            ``jax.random.fold_in(key, r)`` (the rows of one call draw their own noise, as a batch
            evaluation in the run loop).
        num_reevals: ``R >= 1`` evaluations per elite.
        target: the plain archive to fill (default: the archive's cells for a
            :class:`~evotensor.qd.LowSpreadArchive` or :class:`~evotensor.qd.SampledArchive`, else
            the archive itself; an archive with CMA-MAE thresholds needs one).
        solution: with an archive ``source``: the solution template pytree its flat solutions
            unravel to (a strategy brings its own).
        decoder: the genotype -> phenotype decoder (a policy problem needs one; default: the
            strategy's, as the run loop's ``decoder=`` default).
        fitness_reducer, measures_reducer: ``"median"`` (default), ``"mean"`` (or ``"average"``),
            ``"mode"``, ``"closest"`` (:mod:`evotensor.qd.extractors`) or a callable
            ``samples [R, C, ...] -> [C, ...]``.

    Returns:
        :class:`CorrectedArchive`. Cost: ``R`` evaluations of ``C`` solutions (one batch of ``C``
        at a time).
    """
    num_reevals = check_int(num_reevals, "num_reevals")
    shapes = "samples [R, C, ...] -> [C, ...]"
    reduce_fitness = get_extractor(fitness_reducer, "fitness_reducer", REDUCERS, shapes)
    reduce_measures = get_extractor(measures_reducer, "measures_reducer", REDUCERS, shapes)
    if isinstance(source, Archive):
        archive, archive_state = source, state
        if not isinstance(state, ArchiveState) or state.objective.shape[0] != archive.num_cells:
            raise ArgumentError(f"state must be the archive's ArchiveState of {archive.num_cells} cells")
        if solution is not None and archive.genotype is not None:
            raise ArgumentError("solution is a template of flat solutions; this archive stores genotypes")
        space = None if solution is None else as_solution_space(solution=solution)
        if space is not None and space.num_dims != archive.solution_dim:
            raise ArgumentError(
                f"solution has {space.num_dims} elements but the archive stores {archive.solution_dim}"
            )
    elif callable(getattr(source, "reported_archive", None)):
        if solution is not None:
            raise ArgumentError("solution comes from the strategy (give it with an archive)")
        archive, archive_state = source.reported_archive(state)
        space = getattr(source, "space", None)
        decoder = decoder if decoder is not None else getattr(source, "decoder", None)
    else:
        raise ArgumentError(f"source must be a MAPElites or an Archive, got {type(source).__name__}")
    if not callable(getattr(problem, "evaluate", None)):
        raise ArgumentError(f"problem must have an evaluate() method, got {type(problem).__name__}")
    target = _target(archive, target)
    sign = 1.0 if bool(getattr(problem, "maximize", False)) else -1.0

    @jax.jit
    def run(archive_state: ArchiveState, key: jax.Array):
        genotypes = (
            archive_state.solutions if space is None else space.unravel_population(archive_state.solutions)
        )
        cells = archive_state.objective.shape[0]

        def once(r):
            evaluation = evaluate_genotypes(problem, jax.random.fold_in(key, r), genotypes, decoder)
            if evaluation.descriptor is None:
                raise ArgumentError("the problem must return evaluation.descriptor")
            objective = sign * jnp.asarray(evaluation.fitness, jnp.float32)
            measures = jnp.asarray(evaluation.descriptor, jnp.float32)
            if objective.shape != (cells,) or measures.shape != (cells, target.measure_dim):
                raise ArgumentError(
                    f"the problem must return fitness [{cells}] and descriptor [{cells}, "
                    f"{target.measure_dim}], got {list(objective.shape)} and {list(measures.shape)}"
                )
            return objective, measures

        objective, measures = lax.map(once, jnp.arange(num_reevals))  # [R, C], [R, C, D]
        occupied = archive_state.occupied
        fitness = jnp.where(occupied, reduce_fitness(objective), jnp.nan)  # empty cells never enter
        corrected, _ = target.add(target.init(), archive_state.solutions, fitness, reduce_measures(measures))
        fitness_std = jnp.where(occupied, jnp.std(objective, axis=0), jnp.nan)
        measures_std = jnp.where(occupied, jnp.mean(jnp.std(measures, axis=0), axis=1), jnp.nan)
        return corrected, fitness_std, measures_std

    corrected, fitness_std, measures_std = run(archive_state, key)
    return CorrectedArchive(target, corrected, fitness_std, measures_std)
