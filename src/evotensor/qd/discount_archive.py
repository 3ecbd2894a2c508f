"""Discount Model Search's archive (Tjanaka et al. 2026, "Discount Model Search for
Quality-Diversity Optimization in High-Dimensional Measure Spaces"; pyribs' ``DiscountArchive``).

CMA-MAE ranks a candidate by its improvement over its cell's *threshold* (a discount value kept
per cell, a histogram over measure space). In a high-dimensional measure space every candidate
lands in a cell of its own and the histogram says nothing; DMS replaces it by a *discount model*,
a network ``measures -> discount`` that generalises between nearby measures. The archive stores no
elites: a grid or CVT ``result_archive`` keeps them, and the emitters draw their restart points
from it::

    grid = GridArchive(solution_dim=100, dims=(100, 100), ranges=problem.descriptor_ranges)
    search = DiscountArchive(result_archive=grid, learning_rate=0.1, threshold_min=0.0)
    emitter = CMAESEmitter(x0, 0.5, ranker="imp", selection_rule="mu", restart_rule="basic")
    dms = MAPElites(search, [EmitterGroup(emitter, 15)], result_archive=grid)

One generation (the paper's Section 5, pyribs 0.12's rules where not said otherwise):

* **add** reports, for every candidate, ``discount = model(m)`` and ``value = f - discount`` (the
  improvement the ``"imp"`` ranker sorts by), with ``status`` 2 where ``f > discount``, else 0.
* **refit** (what :class:`~evotensor.qd.MAPElites` calls after the result archive took the batch):
  the model is regressed onto training targets, every ``train_every`` generations:

  - each valid candidate of the batch: CMA-MAE's threshold update at its measures,
    ``(1 - lr) discount + lr f`` where ``f > discount``, ``discount`` otherwise;
  - the centres of ``empty_points`` cells drawn uniformly without replacement among the result
    archive's empty cells (all of them when fewer are empty): ``threshold_min``, which holds the
    model down where nothing has been found yet.

  The regression is :func:`~evotensor.qd.discount_model.fit_discount_model` (minibatches of
  ``train_batch_size``, at most ``train_epochs`` epochs, stopping after an epoch whose MSE is at
  most ``train_cutoff_loss``), the optimizer's state kept across generations. A training that
  leaves a parameter non-finite (a diverging optimizer) is discarded and counted in ``diverged``.
* **init** fits the fresh model to ``threshold_min`` at the centres of ``init_train_points`` cells
  of the (empty) result archive.

Measures enter the model scaled to ``[-1, 1]`` by the result archive's ``ranges`` (the paper's
``normalize: negative_one_one``; ``normalize_measures=False`` turns it off). With
``discount_range=(low, high)`` the targets are scaled to ``[-1, 1]`` too and the model's output
scaled back (pyribs' ``normalize_discount``).

Validity: a candidate with a non-finite objective, measures or solution (or a row MAP-Elites only
evaluates) gets status 0, value ``-inf`` and no training target; its discount is reported where its
measures are finite (NaN otherwise). pyribs raises on non-finite objectives and measures.

Differences from pyribs, all deliberate: the whole generation, training included, is one compiled
program (pyribs trains in Python between ``tell`` calls); ``inference`` in pyribs'
``DiscountModelManager`` keeps only the last chunk when given a ``batch_size`` (its ``append`` sits
after the loop), ours evaluates every row.

On a device mesh (:meth:`DiscountArchive.on_mesh`) the model, optimizer and key are replicated and
the batch is gathered whole for the model; the result archive is split along its cells as usual,
and the empty cells are drawn from its occupancy over the whole grid. A run on a mesh is then the
one-device run's computation on the same data, but XLA compiles the model's float32 arithmetic
inside another program and may fuse it otherwise: the model agrees with the one-device run's to
float32 rounding (4 CPU devices, 10 generations: 1e-8 apart; the result archive and the emitters
bit for bit), not bit for bit.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax

from evotensor.core import rng
from evotensor.core.checks import ArgumentError, check_int, check_real
from evotensor.core.mesh import POPULATION_AXIS, replicated
from evotensor.core.pytree import pytree_dataclass
from evotensor.qd.archive import (
    NEW,
    NOT_ADDED,
    AddInfo,
    ArchiveState,
    candidate_is_valid,
    check_objective_measures,
)
from evotensor.qd.discount_model import DiscountMLP, fit_discount_model
from evotensor.qd.replicated_state import ReplicatedState
from evotensor.qd.sharded_archive import ShardedArchive

_INIT_KEY, _TRAIN_KEY, _EMPTY_KEY = 0, 1, 2  # folds of the state's key


@pytree_dataclass
class DiscountState:
    """State of a :class:`DiscountArchive`.

    Attributes:
        params: the discount model's parameters.
        opt_state: the optimizer's state (kept across trainings, as pyribs' manager does).
        key: the archive's key; each training folds it with ``step`` (a typed PRNG key).
        step: ``[]`` int32, ``refit`` calls so far.
        losses: ``[train_epochs]`` float32, each epoch's loss in the last training (NaN: not run).
        epochs: ``[]`` int32, epochs run in the last training.
        empty: ``[]`` int32, empty-cell centres in the last training.
        diverged: ``[]`` int32, trainings discarded so far because they left a parameter or the
            optimizer's state non-finite (the model then keeps its previous parameters).
    """

    params: Any
    opt_state: Any
    key: jax.Array
    step: jax.Array
    losses: jax.Array
    epochs: jax.Array
    empty: jax.Array
    diverged: jax.Array


@pytree_dataclass
class DiscountAddInfo(AddInfo):
    """What :meth:`DiscountArchive.add` reports (all ``[B]``).

    Attributes:
        status: int32, 2 where ``objective > discount`` (a valid candidate), 0 otherwise.
        value: float32, ``objective - discount`` (``-inf`` for an invalid candidate).
        index: int32, -1 (the archive has no cells).
        discount: float32, the model's discount at the candidate's measures (NaN for non-finite
            measures).
    """

    discount: jax.Array


def sample_empty_cells(key: jax.Array, occupied: jax.Array, n: int) -> tuple[jax.Array, jax.Array]:
    """``n`` cells drawn uniformly without replacement among the empty ones of ``occupied [C]``:
    ``(cells [n] int32, drawn [n] bool)``, ``drawn`` false for the entries past the number of empty
    cells. Gumbel top-k on uniform keys, so one ``[C]`` draw whatever ``n``."""
    scores = jnp.where(occupied, -1.0, rng.uniform(key, occupied.shape))
    top, cells = lax.top_k(scores, min(n, occupied.shape[0]))
    drawn = top >= 0.0
    if n > occupied.shape[0]:  # more points asked than cells: the rest are never drawn
        extra = n - occupied.shape[0]
        cells = jnp.concatenate([cells, jnp.zeros((extra,), cells.dtype)])
        drawn = jnp.concatenate([drawn, jnp.zeros((extra,), bool)])
    return cells.astype(jnp.int32), drawn


class DiscountArchive(ReplicatedState):
    """A discount model over measure space (module docstring for the rules).

    Args (keyword-only):
        result_archive: the :class:`~evotensor.qd.GridArchive` or :class:`~evotensor.qd.CVTArchive`
            that keeps the elites (give MAPElites the same one): its empty cells' centres are the
            training's empty points, its ranges scale the measures.
        learning_rate: CMA-MAE's ``lr`` in ``[0, 1]`` of the training targets (the paper: 0.1 on the
            linear-projection domains, 0.001 on the arm).
        threshold_min: the discount of unexplored measures (finite; the paper: the objective's
            lower bound).
        model: ``init(key, measure_dim) -> params`` and ``apply(params, x [N, D]) -> [N]``; default
            :class:`~evotensor.qd.discount_model.DiscountMLP` (128 x 128 ReLU).
        optimizer: an optax transformation, default ``optax.adam(1e-3)`` (the paper's Adam, betas
            0.9, 0.999).
        train_epochs: at most this many epochs per training (the paper: 5).
        train_cutoff_loss: stop after an epoch whose MSE is at most this (the paper: 5% of the
            objective's range; 0 always runs ``train_epochs``).
        train_batch_size: rows per optimizer step (the paper: 32).
        init_train_points: cells whose centres fit the fresh model to ``threshold_min`` (1000).
        empty_points: empty cells' centres per training (100).
        train_every: train every this many generations (the paper's ``train_freq``, 1).
        normalize_measures: scale measures to ``[-1, 1]`` by the result archive's ranges (True).
        discount_range: ``(low, high)`` to scale the targets to ``[-1, 1]`` (None: unscaled).
        seed: the model's and the draws' key when :meth:`init` is given none.

    Attributes:
        stores_elites: False (MAP-Elites' emitters read the result archive).
        keyed_init: True (:class:`~evotensor.qd.MAPElites` hands ``init`` a key of the run).
        measure_dim, result_archive and the arguments above.
    """

    stores_elites = False
    keyed_init = True
    extra_fields: dict[str, Any] = {}

    def __init__(
        self,
        *,
        result_archive: Any,
        learning_rate: float,
        threshold_min: float,
        model: Any = None,
        optimizer: optax.GradientTransformation | None = None,
        train_epochs: int = 5,
        train_cutoff_loss: float = 0.0,
        train_batch_size: int = 32,
        init_train_points: int = 1000,
        empty_points: int = 100,
        train_every: int = 1,
        normalize_measures: bool = True,
        discount_range: tuple[float, float] | None = None,
        seed: int = 0,
    ):
        cells = result_archive.archive if isinstance(result_archive, ShardedArchive) else result_archive
        if not callable(getattr(cells, "cell_centers", None)):
            raise ArgumentError(
                "result_archive must be a GridArchive or CVTArchive (an archive whose cells have "
                f"centres), got {type(result_archive).__name__}"
            )
        self.result_archive = result_archive
        self.measure_dim = result_archive.measure_dim
        self.learning_rate = check_real(learning_rate, "learning_rate", low=0.0, high=1.0)
        self.threshold_min = check_real(threshold_min, "threshold_min")
        self.model = DiscountMLP() if model is None else model
        for method in ("init", "apply"):
            if not callable(getattr(self.model, method, None)):
                raise ArgumentError(
                    f"model must have init() and apply() methods, got {type(self.model).__name__}"
                )
        self.optimizer = optax.adam(1e-3) if optimizer is None else optimizer
        if not callable(getattr(self.optimizer, "update", None)):
            raise ArgumentError(
                f"optimizer must be an optax transformation, got {type(self.optimizer).__name__}"
            )
        self.train_epochs = check_int(train_epochs, "train_epochs")
        self.train_cutoff_loss = check_real(train_cutoff_loss, "train_cutoff_loss", low=0.0)
        self.train_batch_size = check_int(train_batch_size, "train_batch_size")
        self.init_train_points = check_int(init_train_points, "init_train_points")
        self.empty_points = check_int(empty_points, "empty_points", minimum=0)
        self.train_every = check_int(train_every, "train_every")
        if not isinstance(normalize_measures, (bool, np.bool_)):
            raise ArgumentError(f"normalize_measures must be a bool, got {normalize_measures!r}")
        self.normalize_measures = bool(normalize_measures)
        if discount_range is not None:
            try:
                low, high = (check_real(v, f"discount_range[{i}]") for i, v in enumerate(discount_range))
            except TypeError as err:
                raise ArgumentError(f"discount_range must be (low, high), got {discount_range!r}") from err
            if not low < high:
                raise ArgumentError(f"discount_range must have low < high, got {discount_range!r}")
            discount_range = (low, high)
        self.discount_range = discount_range
        self.seed = check_int(seed, "seed", minimum=0, maximum=2**32 - 1)
        ranges = np.asarray(cells.ranges, np.float64)
        self._low = jnp.asarray(ranges[:, 0], jnp.float32)
        self._span = jnp.asarray(ranges[:, 1] - ranges[:, 0], jnp.float32)

    def __repr__(self) -> str:
        return (
            f"DiscountArchive(measure_dim={self.measure_dim}, learning_rate={self.learning_rate:g}, "
            f"threshold_min={self.threshold_min:g}, model={self.model!r})"
        )

    # -- the model ---------------------------------------------------------------------------

    def _inputs(self, measures: jax.Array) -> jax.Array:
        if not self.normalize_measures:
            return measures
        return 2.0 * (measures - self._low) / self._span - 1.0

    def discount(self, state: DiscountState, measures: jax.Array) -> jax.Array:
        """``[B, D] -> [B]`` float32: the model's discount values (NaN for non-finite measures)."""
        measures = jnp.asarray(measures, jnp.float32)
        finite = jnp.all(jnp.isfinite(measures), axis=1)
        out = self.model.apply(state.params, self._inputs(jnp.where(finite[:, None], measures, 0.0)))
        if self.discount_range is not None:
            low, high = self.discount_range
            out = (out + 1.0) * 0.5 * (high - low) + low
        return jnp.where(finite, out, jnp.nan)

    def _fit(self, state: DiscountState, key: jax.Array, measures, targets, valid) -> DiscountState:
        if self.discount_range is not None:
            low, high = self.discount_range
            targets = 2.0 * (targets - low) / (high - low) - 1.0
        params, opt_state, losses, epochs = fit_discount_model(
            self.model.apply,
            self.optimizer,
            state.params,
            state.opt_state,
            key,
            self._inputs(jnp.where(valid[:, None], measures, 0.0)),
            jnp.where(valid, targets, 0.0).astype(jnp.float32),
            valid,
            epochs=self.train_epochs,
            batch_size=self.train_batch_size,
            cutoff_loss=self.train_cutoff_loss,
        )
        # a training that diverged (non-finite parameters or optimizer state) is discarded whole
        finite = jnp.all(
            jnp.asarray([jnp.all(jnp.isfinite(a)) for a in jax.tree_util.tree_leaves((params, opt_state))])
        )
        kept = jax.tree_util.tree_map(
            lambda new, old: jnp.where(finite, new, old), (params, opt_state), (state.params, state.opt_state)
        )
        return state.replace(
            params=kept[0],
            opt_state=kept[1],
            losses=losses,
            epochs=epochs,
            diverged=state.diverged + (~finite).astype(jnp.int32),
        )

    def _empty_centres(self, key: jax.Array, occupied: jax.Array, n: int) -> tuple[jax.Array, jax.Array]:
        """Centres ``[n, D]`` of ``n`` empty cells of the result archive (``occupied [C']``, a
        sharded state's padding past its ``C`` cells ignored), and which were drawn."""
        archive = self.result_archive
        cells, drawn = sample_empty_cells(key, occupied[: archive.num_cells], n)
        return archive.cell_centers(cells), drawn

    # -- the archive protocol ------------------------------------------------------------------

    def init(self, key: jax.Array | None = None) -> DiscountState:
        """A fresh model fitted to ``threshold_min`` at ``init_train_points`` cell centres."""
        key = jax.random.key(self.seed) if key is None else key
        params = self.model.init(jax.random.fold_in(key, _INIT_KEY), self.measure_dim)
        start = jax.random.fold_in(key, _INIT_KEY)
        empty = jnp.zeros((self.result_archive.num_cells,), bool)
        centres, drawn = self._empty_centres(
            jax.random.fold_in(start, _EMPTY_KEY), empty, self.init_train_points
        )
        state = DiscountState(
            params=params,
            opt_state=self.optimizer.init(params),
            key=key,
            step=jnp.zeros((), jnp.int32),
            losses=jnp.full((self.train_epochs,), jnp.nan, jnp.float32),
            epochs=jnp.zeros((), jnp.int32),
            empty=jnp.sum(drawn, dtype=jnp.int32),
            diverged=jnp.zeros((), jnp.int32),
        )
        targets = jnp.full((centres.shape[0],), self.threshold_min, jnp.float32)
        return self._fit(state, jax.random.fold_in(start, _TRAIN_KEY), centres, targets, drawn)

    def add(
        self,
        state: DiscountState,
        solutions: Any,
        objective: jax.Array,
        measures: jax.Array,
        fields: dict[str, jax.Array] | None = None,
    ) -> tuple[DiscountState, DiscountAddInfo]:
        """Each candidate's discount and improvement; the state is unchanged (training is
        :meth:`refit`).

        Args:
            solutions: ``[B, ...]`` (or a genotype pytree): only checked for finiteness.
            objective: ``[B]`` float32; measures: ``[B, D]`` float32; fields: ignored.
        """
        objective, measures = check_objective_measures(objective, measures, self.measure_dim)
        discount = self.discount(state, self._whole(measures))
        valid = candidate_is_valid(solutions, objective, measures)
        better = valid & (objective > discount)
        info = DiscountAddInfo(
            status=jnp.where(better, NEW, NOT_ADDED).astype(jnp.int32),
            value=jnp.where(valid, objective - discount, -jnp.inf),
            index=jnp.full(objective.shape, -1, jnp.int32),
            discount=discount,
        )
        return state, info

    def refit(
        self,
        state: DiscountState,
        solutions: Any,
        objective: jax.Array,
        measures: jax.Array,
        info: DiscountAddInfo,
        result_state: ArchiveState,
    ) -> DiscountState:
        """Train the model on this batch (``info`` is what :meth:`add` reported for it) and on empty
        cells of ``result_state`` (the result archive after the batch), every ``train_every``-th
        call; the other calls only count."""
        objective, measures = check_objective_measures(objective, measures, self.measure_dim)
        valid = candidate_is_valid(solutions, objective, measures)
        lr = jnp.float32(self.learning_rate)
        discount = jnp.where(valid, info.discount, 0.0)
        targets = jnp.where(objective > discount, (1.0 - lr) * discount + lr * objective, discount)
        key = jax.random.fold_in(state.key, state.step + 1)  # 0 is init's
        centres, drawn = self._empty_centres(
            jax.random.fold_in(key, _EMPTY_KEY), result_state.occupied, self.empty_points
        )
        x = jnp.concatenate([measures, centres])
        y = jnp.concatenate([targets, jnp.full((centres.shape[0],), self.threshold_min, jnp.float32)])
        ok = jnp.concatenate([valid, drawn])
        x, y, ok = self._whole(x), self._whole(y), self._whole(ok)

        def train(s):
            s = self._fit(s, jax.random.fold_in(key, _TRAIN_KEY), x, y, ok)
            return s.replace(empty=jnp.sum(drawn, dtype=jnp.int32))

        due = (state.step + 1) % self.train_every == 0
        state = lax.cond(due, train, lambda s: s, state)
        return state.replace(step=state.step + 1)

    def search_metrics(self, state: DiscountState) -> dict[str, jax.Array]:
        """``discount_loss`` (the last training's final epoch loss) and ``discount_epochs``."""
        last = jnp.maximum(state.epochs - 1, 0)
        return {"discount_loss": state.losses[last], "discount_epochs": state.epochs}

    def _whole(self, a: jax.Array) -> jax.Array:
        """``a`` whole on every device of the mesh (if any): the model's products over a batch split
        by the population axis round differently from one device's (other shapes, other kernels;
        a gradient summed in parts)."""
        return a if self.mesh is None else lax.with_sharding_constraint(a, replicated(self.mesh))

    # -- device meshes -------------------------------------------------------------------------

    def on_mesh(self, mesh: Any, axis: str = POPULATION_AXIS) -> DiscountArchive:
        """This archive for a run on ``mesh``: its state whole on every device, its result archive
        split along its cells (:class:`~evotensor.qd.sharded_archive.ShardedArchive`; MAP-Elites
        on a mesh keeps that one)."""
        twin = super().on_mesh(mesh, axis)
        result = (
            self.result_archive.archive
            if isinstance(self.result_archive, ShardedArchive)
            else self.result_archive
        )
        twin.result_archive = ShardedArchive(result, mesh, axis)
        return twin
