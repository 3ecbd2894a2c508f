"""The ME-ES emitter (Colas et al. 2020, "Scaling MAP-Elites to Deep Neuroevolution").

An evolution strategy climbs from one archive elite at a time: every generation it samples
``num_samples`` perturbations ``theta + sigma eps`` of its parent, scores them by fitness (exploit)
or by novelty (explore), and takes one optimizer step along the estimated gradient; the result (the
*offspring*) is offered to the archive. Every ``num_optimizer_steps`` steps a new parent is drawn
from the archive. ::

    emitter = MEESEmitter(x0=jnp.zeros(dims))                    # explore-exploit, QDax's defaults
    me = MAPElites(GridArchive(...), [emitter])                  # population: 1 + num_samples
    result = evotensor.run(me, problem, generations=1000, key=jax.random.key(0))

The samples are part of MAP-Elites' population, so the problem scores them in the same batch as
everything else (on every device of a mesh, through any problem adapter), but they are marked
evaluate-only (``insert_mask``): only the offspring (row 0 of the batch) can enter the archive.

Rules, from QDax 0.5's ``MEESEmitter`` (``qdax/core/emitters/mees_emitter.py``), whose defaults these
are:

* Modes: ``"explore_exploit"`` alternates ``num_optimizer_steps`` novelty steps (first) and as many
  fitness steps; ``"exploit"`` only fitness, ``"explore"`` only novelty. The parent is redrawn at
  every step ``t`` with ``t % num_optimizer_steps == 0`` and the optimizer state is reset then.
* Exploit parent: with probability 1/2 uniformly among the ``exploit_cells`` best cells of the
  archive, otherwise among the ``exploit_cells`` best of the last ``recent_size`` offspring that
  entered the archive (with the objective they entered with).
* Explore parent: uniformly among the ``explore_cells`` cells whose measures are most novel, the
  novelty of a point being its mean Euclidean distance to its ``novelty_neighbors`` nearest entries
  of the *novelty archive*, which holds the measures of every past offspring.
* Gradient: mirrored samples ``eps_1, -eps_1, eps_2, -eps_2, ...`` (or ``num_samples`` independent
  ones), weights ``w = fitness_shaping(-score)`` (centred ranks: best -0.5, worst 0.5), ``g =
  sum_j (w_j^+ - w_j^-) eps_j / (num_samples sigma) + l2_coefficient theta`` (``sum_i w_i eps_i``
  unmirrored), then ``theta' = theta + optimizer.update(g)`` (Adam, step 0.01): a descent on ``g``,
  an ascent on the score.

Differences from QDax, and why:

* One generation evaluates the offspring and the samples of the next step together, so the
  parent drawn at a resampling step comes from the archive before that generation's offspring was
  added (QDax evaluates the offspring first, in a separate call). Everything else is in QDax's
  order: the novelty archive and the recent-offspring buffer take the offspring before the samples
  are scored.
* The novelty archive has a fixed ``novelty_capacity`` and overwrites its oldest entry when full
  (QDax sizes it to the run's total generations). Its novelty averages over the entries that exist:
  QDax's mask also counts one empty (all-zero) slot.
* An empty recent-offspring buffer falls back to the archive, an empty archive to ``x0`` (QDax
  would draw with NaN probabilities).
* A non-finite score (NaN/inf fitness, NaN measures) ranks worst; a step that would make the
  offspring non-finite is skipped (the offspring stays the parent; ``state.skipped`` counts them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax

from evotensor.core import rng
from evotensor.core.checks import ArgumentError, check_choice, check_int, check_real, check_spread
from evotensor.core.evaluation import worst_for_nonfinite
from evotensor.core.fitness_shaping import centered_ranks
from evotensor.core.pytree import pytree_dataclass
from evotensor.qd.archive import AddInfo, Archive, ArchiveState
from evotensor.qd.emitters.base import check_bounds, check_flat_archive, check_vector

MODES = ("explore_exploit", "exploit", "explore")
_QUERY_BLOCK = 256  # query rows per vectorised block of the nearest-neighbour search


@pytree_dataclass
class MEESEmitterState:
    """State of a :class:`MEESEmitter` (``dims`` solution elements, ``D`` measures).

    Attributes:
        offspring: ``[dims]`` the solution the next batch offers the archive (row 0).
        parent: ``[dims]`` the centre of the batch's samples.
        optimizer: the optimizer's state for the current parent.
        noise_key: the key of the batch's sample noise (``tell`` regenerates the noise from it).
        step: ``[]`` int32, gradient steps so far (``tell`` calls).
        skipped: ``[]`` int32, steps skipped because the offspring would have been non-finite.
        novelty_archive: ``[novelty_capacity, D]`` measures of past offspring (a ring buffer).
        novelty_count: ``[]`` int32, offspring measures ever appended (rows filled:
            ``min(novelty_count, novelty_capacity)``).
        recent_solutions: ``[recent_size, dims]`` the last offspring that entered the archive.
        recent_objective: ``[recent_size]`` their objectives (``-inf`` where empty).
        recent_position: ``[]`` int32, the slot the next one overwrites.
    """

    offspring: jax.Array
    parent: jax.Array
    optimizer: Any
    noise_key: jax.Array
    step: jax.Array
    skipped: jax.Array
    novelty_archive: jax.Array
    novelty_count: jax.Array
    recent_solutions: jax.Array
    recent_objective: jax.Array
    recent_position: jax.Array


def mean_nearest_distance(queries: jax.Array, points: jax.Array, filled: jax.Array, k: int) -> jax.Array:
    """Novelty: each query's mean Euclidean distance to its ``k`` nearest of the first ``filled``
    rows of ``points`` (all of them when fewer). ``[Q, D], [S, D], [] -> [Q]``; 0 when ``filled``
    is 0, NaN for a query with a non-finite entry. Distances are explicit differences, no GEMM."""
    queries, points = jnp.asarray(queries, jnp.float32), jnp.asarray(points, jnp.float32)
    if queries.ndim != 2 or points.ndim != 2 or queries.shape[1] != points.shape[1]:
        raise ArgumentError(
            f"queries and points must be [Q, D] and [S, D], got {list(queries.shape)} and "
            f"{list(points.shape)}"
        )
    k = check_int(k, "k")
    size = points.shape[0]
    k = min(k, size)
    valid = jnp.arange(size) < filled
    count = jnp.minimum(filled, k).astype(jnp.float32)

    def one(query):
        d = jnp.sqrt(jnp.sum(jnp.square(points - query), axis=1))
        nearest = -lax.top_k(-jnp.where(valid, d, jnp.inf), k)[0]
        mean = jnp.sum(jnp.where(jnp.isfinite(nearest), nearest, 0.0)) / jnp.maximum(count, 1.0)
        return jnp.where(jnp.all(jnp.isfinite(query)), mean, jnp.nan)

    return lax.map(one, queries, batch_size=_QUERY_BLOCK)


def _uniform_among(key: jax.Array, valid: jax.Array) -> jax.Array:
    """A position drawn uniformly among the true entries of ``valid [m]`` (0 when none is)."""
    counts = jnp.cumsum(valid.astype(jnp.int32))
    j = rng.randint(key, (), 0, jnp.maximum(counts[-1], 1))
    return jnp.minimum(jnp.searchsorted(counts, j, side="right"), valid.shape[0] - 1)


class MEESEmitter:
    """ME-ES: an ES climbing fitness or novelty from archive elites (module docstring for the rules).

    Args:
        x0: ``[dims]`` the first parent (and the parent while the archive is empty).
        num_samples: ES samples per step (QDax ``sample_number``, 1000); even when ``mirrored``.
        sigma: the samples' standard deviation (``sample_sigma``, 0.02).
        mirrored: antithetic pairs ``+eps, -eps`` (``sample_mirror``, True).
        fitness_shaping: ``fitness [num_samples] -> weights`` with lower fitness better, fed
            ``-score`` (non-finite as worst); default centred ranks (``sample_rank_norm``); pass
            ``lambda f: f`` for raw scores.
        optimizer: an optax transformation; default ``optax.adam(0.01)`` (``adam_optimizer``,
            ``learning_rate``).
        l2_coefficient: weight decay added to the gradient (``l2_coefficient``, 0.02).
        num_optimizer_steps: steps per parent (10).
        mode: ``"explore_exploit"`` (default), ``"exploit"`` or ``"explore"``.
        novelty_neighbors: ``k`` of the novelty (``novelty_nearest_neighbors``, 10).
        novelty_capacity: rows of the novelty archive (QDax: the run's generations), 1000.
        recent_size: offspring kept for exploit parents (``last_updated_size``, 5).
        exploit_cells: best cells (and best recent offspring) exploit parents come from (2).
        explore_cells: most novel cells explore parents come from (5).
        bounds: optional ``(low, high)`` (scalars or ``[dims]``); samples and offspring are clipped.
        batch_multiple: the batch is padded with copies of the offspring (evaluated, ignored) to a
            multiple of this, e.g. the number of devices a run's population is split over (1 + an
            even ``num_samples`` is odd).

    Attributes:
        batch_size: ``1 + num_samples`` rounded up to a multiple of ``batch_multiple`` (the
            offspring, the samples, the padding).
        insert_mask: ``[batch_size]`` bool, true for the offspring only: MAP-Elites adds row 0 to
            the archive and only evaluates the rest.
        solution_dim, x0, and every argument above.
    """

    def __init__(
        self,
        x0: Any,
        *,
        num_samples: int = 1000,
        sigma: float = 0.02,
        mirrored: bool = True,
        fitness_shaping: Callable[[jax.Array], jax.Array] = centered_ranks,
        optimizer: optax.GradientTransformation | None = None,
        l2_coefficient: float = 0.02,
        num_optimizer_steps: int = 10,
        mode: str = "explore_exploit",
        novelty_neighbors: int = 10,
        novelty_capacity: int = 1000,
        recent_size: int = 5,
        exploit_cells: int = 2,
        explore_cells: int = 5,
        bounds: tuple[Any, Any] | None = None,
        batch_multiple: int = 1,
    ):
        x0 = check_vector(x0, "x0")
        self.x0 = jnp.asarray(x0)
        self.solution_dim = x0.size
        if not isinstance(mirrored, (bool, np.bool_)):
            raise ArgumentError(f"mirrored must be True or False, got {mirrored!r}")
        self.mirrored = bool(mirrored)
        self.num_samples = check_int(num_samples, "num_samples", minimum=2)
        if self.mirrored and self.num_samples % 2:
            raise ArgumentError(f"num_samples must be even with mirrored sampling, got {num_samples}")
        self.sigma = check_spread(sigma, "sigma")
        if not callable(fitness_shaping):
            raise ArgumentError(
                f"fitness_shaping must be a callable fitness [num_samples] -> weights, "
                f"got {fitness_shaping!r}"
            )
        self.fitness_shaping = fitness_shaping
        if optimizer is None:
            optimizer = optax.adam(0.01)
        if not (callable(getattr(optimizer, "init", None)) and callable(getattr(optimizer, "update", None))):
            raise ArgumentError(f"optimizer must be an optax GradientTransformation, got {optimizer!r}")
        self.optimizer = optimizer
        self.l2_coefficient = check_real(l2_coefficient, "l2_coefficient", low=0.0)
        self.num_optimizer_steps = check_int(num_optimizer_steps, "num_optimizer_steps")
        self.mode = check_choice(mode, "mode", MODES)
        self.novelty_neighbors = check_int(novelty_neighbors, "novelty_neighbors")
        self.novelty_capacity = check_int(novelty_capacity, "novelty_capacity")
        self.recent_size = check_int(recent_size, "recent_size")
        self.exploit_cells = check_int(exploit_cells, "exploit_cells")
        self.explore_cells = check_int(explore_cells, "explore_cells")
        bounds = check_bounds(bounds, x0.shape, unbounded=True)
        self.bounds = None if bounds is None else (jnp.asarray(bounds[0]), jnp.asarray(bounds[1]))
        self.batch_multiple = check_int(batch_multiple, "batch_multiple")
        self.batch_size = -(-(1 + self.num_samples) // self.batch_multiple) * self.batch_multiple
        self.insert_mask = np.arange(self.batch_size) == 0

    def __repr__(self) -> str:
        return (
            f"MEESEmitter(dims={self.solution_dim}, num_samples={self.num_samples}, sigma={self.sigma}, "
            f"mode={self.mode!r}, num_optimizer_steps={self.num_optimizer_steps})"
        )

    def _clip(self, x: jax.Array) -> jax.Array:
        return x if self.bounds is None else jnp.clip(x, self.bounds[0], self.bounds[1])

    def explores(self, step: jax.Array) -> jax.Array:
        """``[]`` bool: whether step ``step`` climbs novelty (else fitness)."""
        if self.mode != "explore_exploit":
            return jnp.asarray(self.mode == "explore")
        return (step // self.num_optimizer_steps) % 2 == 0

    def init(self, key: jax.Array, archive: Archive) -> MEESEmitterState:
        """The first parent and offspring are ``x0``; empty novelty archive and recent buffer."""
        check_flat_archive(archive, "MEESEmitter")
        if archive.solution_dim != self.solution_dim:
            raise ArgumentError(
                f"MEESEmitter: x0 has {self.solution_dim} elements but the archive stores "
                f"solutions of {archive.solution_dim}"
            )

        def zero():  # one buffer per leaf: a run's state is donated
            return jnp.zeros((), jnp.int32)

        return MEESEmitterState(
            offspring=self.x0,
            parent=jnp.array(self.x0, copy=True),
            optimizer=self.optimizer.init(self.x0),
            noise_key=key,
            step=zero(),
            skipped=zero(),
            novelty_archive=jnp.zeros((self.novelty_capacity, archive.measure_dim), jnp.float32),
            novelty_count=zero(),
            recent_solutions=jnp.zeros((self.recent_size, self.solution_dim), jnp.float32),
            recent_objective=jnp.full((self.recent_size,), -jnp.inf, jnp.float32),
            recent_position=zero(),
        )

    # -- parents -----------------------------------------------------------------------------------
    def _novelty(self, state: MEESEmitterState, measures: jax.Array) -> jax.Array:
        filled = jnp.minimum(state.novelty_count, self.novelty_capacity)
        return mean_nearest_distance(measures, state.novelty_archive, filled, self.novelty_neighbors)

    def _explore_parent(self, key, state, archive, archive_state) -> jax.Array:
        cells, valid = archive.best_cells(
            archive_state, self.explore_cells, lambda _, measures: self._novelty(state, measures)
        )
        return archive.elite_solutions(archive_state, cells[_uniform_among(key, valid)][None])[0]

    def _exploit_parent(self, key, state, archive, archive_state) -> jax.Array:
        coin, key_archive, key_recent = rng.split(key, 3)
        cells, valid = archive.best_cells(archive_state, self.exploit_cells)
        from_archive = archive.elite_solutions(
            archive_state, cells[_uniform_among(key_archive, valid)][None]
        )[0]
        k = min(self.exploit_cells, self.recent_size)
        best, rows = lax.top_k(state.recent_objective, k)
        from_recent = state.recent_solutions[rows[_uniform_among(key_recent, best > -jnp.inf)]]
        use_recent = (rng.uniform(coin, ()) >= 0.5) & jnp.any(state.recent_objective > -jnp.inf)
        return jnp.where(use_recent, from_recent, from_archive)

    def _new_parent(self, key, state, archive, archive_state) -> jax.Array:
        def draw():
            return lax.cond(
                self.explores(state.step),
                lambda: self._explore_parent(key, state, archive, archive_state),
                lambda: self._exploit_parent(key, state, archive, archive_state),
            )

        return lax.cond(archive.has_elites(archive_state), draw, lambda: self.x0)

    # -- ask / tell --------------------------------------------------------------------------------
    def _noise(self, key: jax.Array) -> jax.Array:
        """The independent half of the sample noise: ``[num_samples / 2, dims]`` when mirrored
        (sample ``2j`` is ``+eps_j``, ``2j + 1`` is ``-eps_j``), else ``[num_samples, dims]``."""
        rows = self.num_samples // 2 if self.mirrored else self.num_samples
        return rng.normal(key, (rows, self.solution_dim), jnp.float32)

    def ask(
        self, key: jax.Array, state: MEESEmitterState, archive: Archive, archive_state: ArchiveState
    ) -> tuple[jax.Array, MEESEmitterState]:
        """``[batch_size, dims]``: the offspring, then ``parent + sigma eps`` for the parent of this
        step (a new one at every ``num_optimizer_steps``-th step, else the offspring), then copies of
        the offspring up to ``batch_size``."""
        parent_key, noise_key = rng.split(key)
        fresh = state.step % self.num_optimizer_steps == 0
        parent = lax.cond(
            fresh,
            lambda: self._new_parent(parent_key, state, archive, archive_state),
            lambda: state.offspring,
        )
        optimizer = jax.tree_util.tree_map(
            lambda new, old: jnp.where(fresh, new, old), self.optimizer.init(parent), state.optimizer
        )
        eps = self._noise(noise_key)
        if self.mirrored:
            eps = jnp.stack([eps, -eps], axis=1).reshape(self.num_samples, self.solution_dim)
        samples = self._clip(parent + self.sigma * eps)
        padding = jnp.broadcast_to(
            state.offspring, (self.batch_size - 1 - self.num_samples, self.solution_dim)
        )
        batch = jnp.concatenate([state.offspring[None], samples, padding], axis=0)
        return batch, state.replace(parent=parent, optimizer=optimizer, noise_key=noise_key)

    def gradient(self, state: MEESEmitterState, score: jax.Array) -> jax.Array:
        """``[dims]``: the ES gradient of the batch's samples, ``score [num_samples]`` (higher is
        better), as a direction to descend (module docstring)."""
        weights = jnp.asarray(self.fitness_shaping(worst_for_nonfinite(-score)), jnp.float32)
        if self.mirrored:
            weights = weights[0::2] - weights[1::2]
        g = jnp.matmul(weights, self._noise(state.noise_key), precision=lax.Precision.HIGHEST)
        return g / (self.num_samples * self.sigma) + self.l2_coefficient * state.parent

    def tell(
        self,
        key: jax.Array,
        state: MEESEmitterState,
        archive: Archive,
        archive_state: ArchiveState,
        solutions: jax.Array,
        objective: jax.Array,
        measures: jax.Array,
        info: AddInfo,
    ) -> MEESEmitterState:
        """Record the offspring (row 0) in the novelty archive and, if it entered the archive, the
        recent buffer; score the samples (rows ``1 .. num_samples``) and take one optimizer step from
        the parent."""
        samples = slice(1, 1 + self.num_samples)
        seen = jnp.all(jnp.isfinite(measures[0]))
        row = state.novelty_count % self.novelty_capacity
        novelty_archive = jnp.where(
            seen, state.novelty_archive.at[row].set(measures[0]), state.novelty_archive
        )
        entered = info.status[0] > 0
        at = state.recent_position
        state = state.replace(
            novelty_archive=novelty_archive,
            novelty_count=state.novelty_count + seen.astype(jnp.int32),
            recent_solutions=jnp.where(
                entered, state.recent_solutions.at[at].set(solutions[0]), state.recent_solutions
            ),
            recent_objective=jnp.where(
                entered, state.recent_objective.at[at].set(objective[0]), state.recent_objective
            ),
            recent_position=jnp.where(entered, (at + 1) % self.recent_size, at),
        )
        score = lax.cond(
            self.explores(state.step),
            lambda: self._novelty(state, measures[samples]),
            lambda: objective[samples].astype(jnp.float32),
        )
        updates, optimizer = self.optimizer.update(self.gradient(state, score), state.optimizer, state.parent)
        offspring = self._clip(optax.apply_updates(state.parent, updates))
        ok = jnp.all(jnp.isfinite(offspring))
        return state.replace(
            offspring=jnp.where(ok, offspring, state.parent),
            optimizer=jax.tree_util.tree_map(
                lambda new, old: jnp.where(ok, new, old), optimizer, state.optimizer
            ),
            step=state.step + 1,
            skipped=state.skipped + (~ok).astype(jnp.int32),
        )
