"""MAP-Elites (Mouret & Clune 2015) as an evotensor strategy: an archive plus emitters.

One generation: every emitter proposes its batch from the archive (``ask``), the concatenated
population is scored, the whole population is added to the archive at once with exact batch
semantics (except the rows an emitter marks as evaluate-only in its ``insert_mask``, such as
ME-ES's gradient samples), and each emitter learns from its own slice of the batch (``tell``)::

    me = MAPElites(GridArchive(solution_dim=8, dims=(32, 32), ranges=[(0, 1), (0, 1)]),
                   [IsoLineEmitter(x0=jnp.full(8, 0.5), batch_size=128)])
    result = evotensor.run(me, Arm(num_joints=8), generations=500, key=jax.random.key(0))

Genotypes of any structure (NEAT genomes, GP trees): give the archive a ``genotype`` template
(:class:`~evotensor.qd.archive.Archive`), emitters that vary such genotypes
(:class:`~evotensor.qd.GenotypeEmitter`, :class:`evotensor.neat.NEATEmitter`,
:class:`evotensor.gp.GPEmitter`) and, where the problem scores phenotypes, a ``decoder``; the
population is then the emitters' genotype batches concatenated along their leading axis.

Orientation: strategies minimize, so ``tell`` stores ``objective = -evaluation.fitness`` (the run
loop negates a maximized problem's fitness, so the archive holds the natural QD fitness of a
``maximize = True`` problem). Non-finite fitness or descriptors are never stored
(``accepts_nonfinite``: the run loop hands them over unchanged instead of replacing them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from evotensor.core.checks import ArgumentError
from evotensor.core.evaluation import Evaluation
from evotensor.core.mesh import POPULATION_AXIS, replicated
from evotensor.core.pytree import pytree_dataclass
from evotensor.core.strategy import SolutionSpace, as_solution_space
from evotensor.qd.archive import AddInfo, Archive, ArchiveState
from evotensor.qd.density_archive import DensityArchive
from evotensor.qd.discount_archive import DiscountArchive
from evotensor.qd.mome_archive import MOMEArchive
from evotensor.qd.sharded_archive import ShardedArchive, trim_padding
from evotensor.qd.sharded_mome import ShardedMOMEArchive

# folded into the init key for a search archive that draws its own (DDS's reservoir, DMS's model)
_SEARCH_KEY = 0x44445300
_CELLLESS = (DensityArchive, DiscountArchive)  # search archives without cells or elites


def _sharded(archive: Archive, mesh: Mesh, axis: str) -> ShardedArchive | DensityArchive | DiscountArchive:
    """``archive`` split along its cells over ``mesh[axis]``: MOME's fronts by their own class; a
    density or discount archive (no cells) whole on every device."""
    if isinstance(archive, _CELLLESS):
        return archive.on_mesh(mesh, axis)
    layout = ShardedMOMEArchive if isinstance(archive, MOMEArchive) else ShardedArchive
    return layout(archive, mesh, axis)


def insert_mask(emitter: Any, i: int) -> np.ndarray:
    """``[batch_size]`` bool: the rows of ``emitters[i]``'s batch that MAP-Elites adds to the archive
    (its optional ``insert_mask`` attribute; all rows without one). The other rows are evaluated and
    handed to the emitter's ``tell`` only (an ES emitter's gradient samples)."""
    mask = getattr(emitter, "insert_mask", None)
    if mask is None:
        return np.ones(int(emitter.batch_size), bool)
    mask = np.asarray(mask)
    if mask.dtype != bool or mask.shape != (int(emitter.batch_size),):
        raise ArgumentError(
            f"emitters[{i}].insert_mask must be a bool array [batch_size] = [{int(emitter.batch_size)}], "
            f"got {mask.dtype} {list(mask.shape)}"
        )
    return mask


@pytree_dataclass
class MAPElitesState:
    """``archive`` (the search archive), ``result`` (the reported archive, or None when they are the
    same), ``emitters`` (a tuple of emitter states) and ``generation []``."""

    archive: ArchiveState
    result: ArchiveState | None
    emitters: tuple[Any, ...]
    generation: jax.Array


class MAPElites:
    """MAP-Elites with any archive and any list of emitters.

    Args:
        archive: the search archive (e.g. :class:`~evotensor.qd.GridArchive`), or a
            :class:`~evotensor.qd.DensityArchive` (Density Descent Search) or
            :class:`~evotensor.qd.DiscountArchive` (Discount Model Search), which store no
            elites: then a ``result_archive`` is required (a DiscountArchive's own) and the
            emitters draw their elites from it (pyribs' sphere example passes its result archive
            to DDS's emitters). After both adds, an archive with a ``refit`` method (DMS's) learns
            from the batch and the result archive's new state; its ``search_metrics`` join the
            metrics.
        emitters: one or more emitters; the population is their batches concatenated in order.
        result_archive: optional second archive that also receives every batch and is the one
            reported (pyribs' Scheduler ``result_archive``: with CMA-MAE the search archive's
            thresholds anneal, so its elites are not the best found; this one keeps them).
        solution: optional solution template pytree (``archive.solution_dim`` elements); without it
            genotypes are flat ``[pop, solution_dim]`` vectors. Not with an archive of genotypes
            (``genotype=...``), whose genotypes are handed over as they are.
        decoder: optional genotype -> phenotype decoder (``decode``, ``apply``; e.g. a NEAT
            strategy's ``decoder``) that the run loop applies before a policy problem scores them.

    Attributes:
        elites: the archive the emitters read their elites from (``archive``, or ``result_archive``
            when ``archive`` stores none); :meth:`elite_state` picks its state.
        population_size: sum of the emitters' batch sizes, times ``num_samples``.
        num_samples: the archive's evaluations per solution (a
            :class:`~evotensor.qd.LowSpreadArchive`'s; 1 otherwise): the population asked holds
            each solution that many times in a row, and every emitter learns from each solution's
            aggregate (mean objective, measures of its modal cell).
        num_objectives: the archive's (``M`` of a :class:`~evotensor.qd.MOMEArchive`; None: one).
        accepts_nonfinite: True (the run loop passes NaN/inf fitness through; the archive drops it).
    """

    accepts_nonfinite = True

    def __init__(
        self,
        archive: Archive,
        emitters: Sequence[Any],
        *,
        result_archive: Archive | None = None,
        solution: Any = None,
        decoder: Any = None,
    ):
        if not isinstance(archive, (Archive, ShardedArchive, *_CELLLESS)):
            raise ArgumentError(f"archive must be an evotensor.qd Archive, got {type(archive).__name__}")
        emitters = tuple(emitters) if isinstance(emitters, (list, tuple)) else (emitters,)
        if not emitters:
            raise ArgumentError("emitters must hold at least one emitter")
        for i, emitter in enumerate(emitters):
            for method in ("init", "ask", "tell"):
                if not callable(getattr(emitter, method, None)):
                    raise ArgumentError(f"emitters[{i}] ({type(emitter).__name__}) has no {method}() method")
        if result_archive is not None and not isinstance(result_archive, (Archive, ShardedArchive)):
            raise ArgumentError(f"result_archive must be an Archive, got {type(result_archive).__name__}")
        if isinstance(archive, DiscountArchive) and result_archive is not archive.result_archive:
            raise ArgumentError(
                "a DiscountArchive trains on its own result_archive's empty cells: give MAPElites "
                "that same archive as result_archive"
            )
        if isinstance(archive, _CELLLESS):
            if result_archive is None:
                raise ArgumentError(
                    f"a {type(archive).__name__} stores no elites: give MAPElites a result_archive (a "
                    "grid or CVT archive) to keep them and to give the emitters their elites"
                )
            if result_archive.measure_dim != archive.measure_dim:
                raise ArgumentError("result_archive must have the archive's measure_dim")
        elif result_archive is not None:
            if (result_archive.solution_dim, result_archive.measure_dim, result_archive.genotype) != (
                archive.solution_dim,
                archive.measure_dim,
                archive.genotype,
            ):
                raise ArgumentError(
                    "result_archive must have the archive's solution_dim (or genotype) and measure_dim"
                )
        if decoder is not None and not callable(getattr(decoder, "decode", None)):
            raise ArgumentError(f"decoder must have a decode() method, got {type(decoder).__name__}")
        self.decoder = decoder
        self.archive = archive
        self.result_archive = result_archive
        # the archive the emitters read their elites from (and what a solution is)
        self.elites = archive if getattr(archive, "stores_elites", True) else result_archive
        self.emitters = emitters
        self.solution = solution
        elites = self.elites
        if elites.genotype is not None:
            if solution is not None:
                raise ArgumentError(
                    "solution is a template of flat solutions; an archive of genotypes hands its "
                    "genotypes over as they are (leave solution out)"
                )
            self.space = None
        else:
            self.space: SolutionSpace | None = (
                as_solution_space(solution=solution)
                if solution is not None
                else as_solution_space(num_dims=elites.solution_dim)
            )
        if self.space is not None and self.space.num_dims != elites.solution_dim:
            raise ArgumentError(
                f"solution has {self.space.num_dims} elements but the archive stores {elites.solution_dim}"
            )
        # a multi-objective archive (MOME) takes fitness [pop, M]; the others [pop]
        self.num_objectives = getattr(archive, "num_objectives", None)
        if (
            result_archive is not None
            and getattr(result_archive, "num_objectives", None) != self.num_objectives
        ):
            raise ArgumentError("result_archive must have the archive's num_objectives")
        # ME-LS (a LowSpreadArchive): every solution is asked num_samples times in a row
        self.num_samples = int(getattr(archive, "num_samples", 1))
        if result_archive is not None and int(getattr(result_archive, "num_samples", 1)) != self.num_samples:
            raise ArgumentError("result_archive must have the archive's num_samples")
        learning = [type(e).__name__ for e in emitters if getattr(e, "uses_evaluation", False)]
        if self.num_samples > 1 and learning:
            raise ArgumentError(
                f"emitters hold {learning[0]}, which learns from every evaluation (uses_evaluation): "
                "it cannot run with a sampled archive (num_samples > 1)"
            )
        self.batch_sizes = tuple(int(e.batch_size) for e in emitters)
        self.population_size = sum(self.batch_sizes) * self.num_samples
        masks = [insert_mask(e, i) for i, e in enumerate(emitters)]
        # None: every candidate goes to the archive (the program has no mask at all)
        self.insert_mask = None if all(m.all() for m in masks) else np.concatenate(masks)

    def default_params(self) -> None:
        """MAP-Elites has no dynamic hyperparameters (emitters hold theirs)."""
        return None

    def init(self, key: jax.Array, params: Any = None) -> MAPElitesState:
        """Empty archive(s) and each emitter's initial state (``params`` unused)."""
        keys = jax.random.split(key, len(self.emitters))
        # a density archive's reservoir, a discount archive's model draw their own key (a fold, so
        # the emitters' keys are unchanged)
        search = (
            self.archive.init(jax.random.fold_in(key, _SEARCH_KEY))
            if getattr(self.archive, "keyed_init", False)
            else self.archive.init()
        )
        return MAPElitesState(
            archive=search,
            result=None if self.result_archive is None else self.result_archive.init(),
            emitters=tuple(e.init(k, self.elites) for e, k in zip(self.emitters, keys, strict=True)),
            generation=jnp.zeros((), jnp.int32),
        )

    def ask(self, key: jax.Array, state: MAPElitesState, params: Any = None) -> tuple[Any, MAPElitesState]:
        """``-> (genotypes [pop, ...], state)``."""
        keys = jax.random.split(key, len(self.emitters))
        batches, emitter_states = [], []
        elites = self.elite_state(state)
        for emitter, k, s in zip(self.emitters, keys, state.emitters, strict=True):
            x, s = emitter.ask(k, s, self.elites, elites)
            batches.append(x)
            emitter_states.append(s)
        x = jax.tree_util.tree_map(lambda *parts: jnp.concatenate(parts, axis=0), *batches)
        return self._genotypes(x), state.replace(emitters=tuple(emitter_states))

    def elite_state(self, state: MAPElitesState) -> ArchiveState:
        """The state of :attr:`elites`, the archive the emitters read (the search archive's, or the
        result archive's when the search archive stores no elites)."""
        return state.archive if self.elites is self.archive else state.result

    def _genotypes(self, x: Any) -> Any:
        """The population the emitters proposed (``[pop, solution_dim]`` or genotypes) as the
        strategy's genotypes, every row repeated ``num_samples`` times in a row."""
        if self.num_samples > 1:
            x = jax.tree_util.tree_map(lambda a: jnp.repeat(a, self.num_samples, axis=0), x)
            # materialized: fused into the evaluation, the repeat would be redone at every use
            x = jax.lax.optimization_barrier(x)
        return x if self.space is None else self.space.unravel_population(x)

    def _solutions(self, genotypes: Any) -> Any:
        """The inverse of :meth:`_genotypes`: what the archive stores (one row per solution)."""
        x = genotypes if self.space is None else self.space.ravel_population(genotypes)
        if self.num_samples > 1:
            x = jax.tree_util.tree_map(lambda a: a[:: self.num_samples], x)
        return x

    def _fields(self, archive: Archive, evaluation: Evaluation) -> dict[str, jax.Array] | None:
        if not archive.extra_fields:
            return None
        info = evaluation.info
        missing = [n for n in archive.extra_fields if info is None or n not in info]
        if missing:
            raise ArgumentError(f"the archive's extra fields {missing} must be in evaluation.info")
        return {name: info[name] for name in archive.extra_fields}

    def tell(
        self,
        key: jax.Array,
        state: MAPElitesState,
        genotypes: Any,
        evaluation: Evaluation,
        params: Any = None,
    ) -> tuple[MAPElitesState, dict[str, jax.Array]]:
        """Add the population to the archive(s), then let each emitter learn from its slice.

        ``evaluation.fitness [pop]`` (``[pop, M]`` for a multi-objective archive, see
        :class:`~evotensor.qd.MOMEArchive`) is minimized (negated into the archive's objective);
        ``evaluation.descriptor [pop, measure_dim]`` is required.
        """
        x, objective, measures, archive_state, result, info, counted = self._add(state, genotypes, evaluation)
        keys = jax.random.split(key, len(self.emitters))
        elites = self.elite_state(state.replace(archive=archive_state, result=result))
        emitter_states, start = [], 0
        for emitter, k, s, size in zip(self.emitters, keys, state.emitters, self.batch_sizes, strict=True):
            part = slice(start, start + size)
            sliced = jax.tree_util.tree_map(
                lambda a, part=part: a[part], info
            )  # every field the archive reports
            mine = jax.tree_util.tree_map(lambda a, part=part: a[part], x)
            # a learning emitter (PGA-ME's, DCRL-ME's critic) sees every row, as QDax's use_all_data
            learns = getattr(emitter, "uses_evaluation", False)
            whole = {"evaluation": evaluation, "offset": start} if learns else {}
            emitter_states.append(
                emitter.tell(
                    k, s, self.elites, elites, mine, objective[part], measures[part], sliced, **whole
                )
            )
            start += size
        state = state.replace(
            archive=archive_state,
            result=result,
            emitters=tuple(emitter_states),
            generation=state.generation + 1,
        )
        return state, self._metrics(archive_state, result, counted)

    def _add(self, state: MAPElitesState, genotypes: Any, evaluation: Evaluation) -> tuple:
        """The population added to the archive(s): ``(x, objective, measures, archive state, result
        state, info, counted)``, with ``objective = -fitness`` and the shapes checked; ``info`` is the
        search archive's report (what emitters learn from), ``counted`` the one the ``added`` and
        ``new_cells`` metrics count (the result archive's when the search archive stores no elites)."""
        x = self._solutions(genotypes)
        if evaluation.descriptor is None:
            raise ArgumentError("MAP-Elites needs evaluation.descriptor [pop, measure_dim] from the problem")
        objective = -jnp.asarray(evaluation.fitness, jnp.float32)
        measures = jnp.asarray(evaluation.descriptor, jnp.float32)
        expected = (self.population_size, self.archive.measure_dim)
        fitness = expected[:1] if self.num_objectives is None else (expected[0], self.num_objectives)
        if measures.shape != expected or objective.shape != fitness:
            raise ArgumentError(
                f"evaluation.fitness must be {list(fitness)} and evaluation.descriptor {list(expected)} "
                f"(population, archive measures), got {list(objective.shape)} and {list(measures.shape)}"
            )
        if self.num_samples > 1:  # [pop * S] -> [pop, S]: each solution's samples, in order
            objective = objective.reshape(-1, self.num_samples)
            measures = measures.reshape(-1, self.num_samples, measures.shape[-1])
        # rows an emitter only evaluates (ES samples) enter no archive: a NaN objective is never added
        mask = (
            self.insert_mask if self.insert_mask is None or objective.ndim == 1 else self.insert_mask[:, None]
        )
        offered = objective if mask is None else jnp.where(mask, objective, jnp.nan)
        archive_state, info = self.archive.add(
            state.archive, x, offered, measures, self._fields(self.archive, evaluation)
        )
        result, counted = state.result, info
        if self.result_archive is not None:
            result, result_info = self.result_archive.add(
                result, x, offered, measures, self._fields(self.result_archive, evaluation)
            )
            if self.elites is not self.archive:  # the search archive's statuses count no elites
                counted = result_info
        if callable(getattr(self.archive, "refit", None)):  # DMS: the model learns from the batch
            archive_state = self.archive.refit(archive_state, x, offered, measures, info, result)
        if self.num_samples > 1:  # emitters learn from each solution's aggregate (unmasked)
            if mask is None:
                objective, measures = info.objective, info.measures
            else:
                whole = self.archive.aggregate(objective, measures)
                objective, measures = whole["objective"], whole["measures"]
        return x, objective, measures, archive_state, result, info, counted

    def _metrics(self, archive_state: ArchiveState, result: Any, info: AddInfo) -> dict[str, jax.Array]:
        reported = self.archive if self.result_archive is None else self.result_archive
        metrics = reported.stats(archive_state if result is None else result)
        metrics["added"] = jnp.sum(info.status > 0).astype(jnp.int32)
        metrics["new_cells"] = jnp.sum(info.status == 2).astype(jnp.int32)
        if callable(getattr(self.archive, "search_metrics", None)):
            metrics.update(self.archive.search_metrics(archive_state))
        return metrics

    def reported_archive(self, state: MAPElitesState) -> tuple[Archive, ArchiveState]:
        """The archive to report and its state (the result archive if there is one), as a plain
        archive: a state from a run on a mesh (:meth:`on_mesh`) is cut to the archive's cells."""
        archive, archive_state = (
            (self.archive, state.archive)
            if self.result_archive is None
            else (self.result_archive, state.result)
        )
        if isinstance(archive, ShardedArchive):
            archive = archive.archive
        return archive, trim_padding(archive_state, archive.num_cells)

    def on_mesh(self, mesh: Mesh, axis: str = POPULATION_AXIS) -> ShardedMAPElites:
        """This MAP-Elites with its archive(s) split along the cell axis over ``mesh[axis]``
        (:class:`~evotensor.qd.sharded_archive.ShardedArchive`): what ``evotensor.run(...,
        mesh=mesh)`` runs. Same results as on one device for the same key (bit for bit on a CPU;
        the ``qd_score``/``obj_mean`` metrics to within float32 summation order); each device holds
        ``ceil(cells / n)`` cells; emitter states are replicated."""
        return ShardedMAPElites(self, mesh, axis)


class ShardedMAPElites(MAPElites):
    """:meth:`MAPElites.on_mesh`'s strategy: the same ``init / ask / tell`` with both archives
    sharded along their cells (see :mod:`evotensor.qd.sharded_archive`); a
    :class:`~evotensor.qd.DensityArchive` search archive, which has no cells, whole on every device.

    Args:
        strategy: the MAP-Elites to lay out.
        mesh, axis: the device mesh and the axis that splits the cells (and the run loop's
            population).

    Attributes:
        unsharded: ``strategy``.
    """

    def __init__(self, strategy: MAPElites, mesh: Mesh, axis: str = POPULATION_AXIS):
        unsharded = strategy.unsharded if isinstance(strategy, ShardedMAPElites) else strategy
        search = _sharded(unsharded.archive, mesh, axis)
        result = unsharded.result_archive
        if isinstance(search, DiscountArchive):  # it trains on the result archive's layout
            result = search.result_archive
        elif result is not None:
            result = _sharded(result, mesh, axis)
        super().__init__(
            search,
            unsharded.emitters,
            result_archive=result,
            solution=unsharded.solution,
            decoder=unsharded.decoder,
        )
        self.unsharded = unsharded
        self.mesh = mesh
        self.mesh_axis = axis

    def ask(self, key: jax.Array, state: MAPElitesState, params: Any = None) -> tuple[Any, MAPElitesState]:
        """``-> (genotypes [pop, ...], state)``, computed whole on every device: the emitters' batch
        math (a CMA-ES sample's matrix product, say) then rounds as on one device, which a product
        split by rows does not; the run loop splits the population for its evaluation afterwards."""
        genotypes, state = super().ask(key, state, params)
        return self.elites.replicate(genotypes), state

    def state_shardings(self, state: MAPElitesState) -> MAPElitesState:
        """The layout the run loop keeps between chunks: archives split along their cells, emitter
        states and the generation counter replicated."""
        whole = replicated(self.mesh)
        return MAPElitesState(
            archive=self.archive.state_shardings(state.archive),
            result=None if state.result is None else self.result_archive.state_shardings(state.result),
            emitters=jax.tree_util.tree_map(lambda _: whole, state.emitters),
            generation=whole,
        )

    def on_mesh(self, mesh: Mesh, axis: str = POPULATION_AXIS) -> ShardedMAPElites:
        """The unsharded strategy laid out for ``mesh`` instead."""
        return ShardedMAPElites(self.unsharded, mesh, axis)

    def portable_state(self, state: MAPElitesState) -> MAPElitesState:
        """The state as the unsharded strategy holds it (archives of ``num_cells`` rows): what a
        checkpoint holds, so that it resumes on any number of devices. A padded archive's leaves
        come as :class:`~evotensor.core.mesh.Padded` (still split over the devices; see
        :meth:`ShardedArchive.portable <evotensor.qd.sharded_archive.ShardedArchive.portable>`)."""
        return state.replace(
            archive=self.archive.portable(state.archive),
            result=None if state.result is None else self.result_archive.portable(state.result),
        )

    def from_portable_state(self, state: MAPElitesState) -> MAPElitesState:
        """The inverse of :meth:`portable_state`: archives padded and split for this mesh (an
        archive restored already in this layout is kept as it is)."""
        return state.replace(
            archive=self.archive.pad(state.archive),
            result=None if state.result is None else self.result_archive.pad(state.result),
        )
