"""Multi-task MAP-Elites (Mouret & Maguire 2020, "Quality Diversity for Multi-task Optimization").

Many related tasks (an arm of each length and angular range, a robot of each morphology), one
fitness ``f(x, task)``: MT-ME keeps the best solution found for every task, and lets a solution that
works for one task seed its neighbours. The archive has one cell per task (a
:class:`~evotensor.qd.CVTArchive` whose centroids are the task descriptors), so coverage, QD score,
plots and checkpoints are those of MAP-Elites::

    tasks = kmeans_centroids(jax.random.key(0), 5000, ((0, 1), (0, 1)))[0]   # [5000, 2]
    me = MultiTaskMAPElites(tasks, solution_dim=10, batch_size=100)
    result = evotensor.run(me, MultiTaskArm(num_joints=10), generations=10_000, key=jax.random.key(0))

One generation of ``B`` candidates (pymap_elites' ``map_elites/multitask.py``, tensorized):

* **Initialisation.** While at most ``random_init * N`` of the ``N`` tasks have an elite, the batch
  is ``B`` uniform random solutions in ``bounds``, each aimed at a uniformly random task.
* **Variation.** Otherwise two elites ``x1, x2`` are drawn uniformly, with replacement, among the
  tasks that have one; the child is ``clip(variation(key, x1, x2), bounds)`` (default SBX, eta 10).
* **Task selection.** The child is aimed at the winner of a tournament of size ``k``: ``k`` tasks
  drawn uniformly with replacement, the one whose descriptor is nearest (Euclidean) to the
  descriptor of ``x1``'s task wins (exact ties: the first drawn). ``k = 1`` is a random task
  (the paper's "no distance" variant: ``tournament_sizes=(1,)``); a large ``k`` aims near the
  parent's own task.
* **Bandit.** ``k`` is chosen per generation among ``tournament_sizes`` (default pymap_elites'
  ``1, 10, 50, 100, 500``) by UCB1 over the variation generations so far: an arm never pulled first
  (uniformly among such arms), then the highest ``mean reward + sqrt(2 ln n / n_k)`` (``n`` pulls in
  all, ``n_k`` of this arm; ties to the smaller size). The reward of a generation is the fraction of
  its batch that entered the archive (``bandit_reward="rate"``, rewards in ``[0, 1]`` as UCB1
  assumes) or their number (``"count"``, what pymap_elites credits: its exploration term is then
  negligible beside the means).
* **Insertion.** Every child is scored on its own task and offered to that task's cell with
  MAP-Elites' batch rules (:mod:`evotensor.qd.archive`: against the archive before the batch, the
  best of several children for one task wins; pymap_elites inserts one at a time, so a second
  improvement of one task in a batch counts as a success there and not here).

The problem receives a :class:`~evotensor.problems.multi_task.TaskBatch` (solutions, task index,
task parameters) and returns one fitness per row (:class:`~evotensor.problems.multi_task.MultiTaskArm`,
:class:`~evotensor.problems.multi_task.MultiTaskFunction`). Orientation as in
:class:`~evotensor.qd.MAPElites`: the archive holds the natural fitness of a ``maximize`` problem;
non-finite fitness never enters it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from evotensor.core import rng
from evotensor.core.checks import ArgumentError, check_choice, check_fraction, check_int, check_memory
from evotensor.core.evaluation import Evaluation
from evotensor.core.pytree import pytree_dataclass
from evotensor.core.strategy import SolutionSpace, as_solution_space
from evotensor.problems.multi_task import TaskBatch
from evotensor.qd.archive import ArchiveState, CVTArchive
from evotensor.qd.emitters.base import check_bounds
from evotensor.qd.emitters.mixing import SBXCrossover

BANDIT_REWARDS = ("rate", "count")
PYMAP_ELITES_TOURNAMENT_SIZES = (1, 10, 50, 100, 500)


@pytree_dataclass
class MultiTaskState:
    """Multi-task MAP-Elites' state (``A`` tournament sizes).

    Attributes:
        archive: one cell per task (:class:`~evotensor.qd.archive.ArchiveState`).
        arm: ``[]`` int32, the tournament size (index into ``tournament_sizes``) of the batch last
            asked; -1 for a random initial batch.
        pulls: ``[A]`` int32, variation generations run with each size.
        reward: ``[A]`` float32, each size's summed reward.
        generation: ``[]`` int32.
    """

    archive: ArchiveState
    arm: jax.Array
    pulls: jax.Array
    reward: jax.Array
    generation: jax.Array


def ucb1_arm(key: jax.Array, pulls: jax.Array, reward: jax.Array) -> jax.Array:
    """UCB1's choice: ``[A]`` pulls and summed rewards -> ``[]`` int32 arm.

    A uniformly random arm among those never pulled, if any; else the first arm with the highest
    ``reward / pulls + sqrt(2 ln(sum(pulls)) / pulls)``.
    """
    untried = pulls == 0
    draw = jnp.where(untried, rng.uniform(key, pulls.shape), -1.0)
    count = jnp.maximum(pulls, 1).astype(jnp.float32)
    total = jnp.maximum(jnp.sum(pulls), 1).astype(jnp.float32)
    score = reward / count + jnp.sqrt(2.0 * jnp.log(total) / count)
    return jnp.where(jnp.any(untried), jnp.argmax(draw), jnp.argmax(score)).astype(jnp.int32)


def tournament_tasks(
    key: jax.Array, parent_task: jax.Array, descriptors: jax.Array, size: jax.Array, max_size: int
) -> jax.Array:
    """Each child's task: of ``size`` tasks drawn uniformly with replacement, the one whose
    descriptor is nearest the parent's task's (exact ties: the first drawn).

    Args:
        key: randomness.
        parent_task: ``[B]`` int32, the task of each child's first parent.
        descriptors: ``[N, d]`` float32 task descriptors.
        size: ``[]`` int32 tournament size, ``1 <= size <= max_size``.
        max_size: static bound on ``size`` (``max_size`` tasks are drawn per child; the first
            ``size`` compete).

    Returns:
        ``[B]`` int32 tasks.
    """
    batch = parent_task.shape[0]
    drawn = rng.randint(key, (batch, max_size), 0, descriptors.shape[0])
    gap = descriptors[drawn] - descriptors[parent_task][:, None, :]
    distance = jnp.sum(gap * gap, axis=-1)
    distance = jnp.where(jnp.arange(max_size) < size, distance, jnp.inf)
    winner = jnp.argmin(distance, axis=1)
    return jnp.take_along_axis(drawn, winner[:, None], axis=1)[:, 0].astype(jnp.int32)


def _task_array(value: Any, name: str, rows: int | None = None) -> np.ndarray:
    try:
        array = np.asarray(value, np.float32)
    except (TypeError, ValueError) as err:
        raise ArgumentError(f"{name} must be a [N, k] array of numbers, got {value!r}") from err
    if array.ndim != 2 or array.shape[0] < 1 or array.shape[1] < 1:
        raise ArgumentError(f"{name} must be a [N, k] array with N, k >= 1, got shape {array.shape}")
    if rows is not None and array.shape[0] != rows:
        raise ArgumentError(f"{name} must have one row per task ({rows}), got {array.shape[0]}")
    if not np.all(np.isfinite(array)):
        raise ArgumentError(f"{name} must be finite (in float32)")
    return array


def _check_distinct(descriptors: np.ndarray, name: str) -> None:
    """Tasks share a cell if their descriptors are equal: refuse, naming two such rows."""
    _, first, counts = np.unique(descriptors, axis=0, return_index=True, return_counts=True)
    if np.any(counts > 1):
        row = int(first[np.argmax(counts > 1)])
        twin = int(np.flatnonzero(np.all(descriptors == descriptors[row], axis=1))[1])
        raise ArgumentError(
            f"{name} rows {row} and {twin} are equal: every task needs its own descriptor (its cell)"
        )


class MultiTaskMAPElites:
    """Multi-task MAP-Elites (the module docstring has the rules).

    Args:
        tasks: ``[N, k]`` task parameters, handed to the problem with each candidate.
        solution_dim: elements of a flat solution; or give ``solution``.
        solution: a solution template pytree (its leaves flattened to ``solution_dim`` elements);
            the problem then gets solutions of that structure with a leading batch axis.
        task_descriptors: ``[N, d]`` what task distances are measured on (and the archive's
            centroids); default ``tasks``. Rows must be distinct.
        batch_size: candidates per generation (pymap_elites' 100).
        variation: ``(key, x1 [B, dims], x2 [B, dims]) -> [B, dims]``; default
            :class:`~evotensor.qd.emitters.SBXCrossover` with ``eta`` 10 over ``bounds``
            (pymap_elites'); :class:`~evotensor.qd.emitters.IsoLineCrossover` is Iso+LineDD.
        bounds: ``(low, high)`` box of the random initial solutions, which every child is clipped
            to (pymap_elites' ``(0, 1)``).
        tournament_sizes: the bandit's choices of tournament size (distinct ints >= 1).
        random_init: random batches run while at most this fraction of the tasks has an elite
            (pymap_elites' 0.1).
        bandit_reward: ``"rate"`` or ``"count"``.
        qd_score_offset: the archive's QD score offset (pass the lowest fitness expected).

    Attributes:
        archive: the :class:`~evotensor.qd.CVTArchive` of one cell per task.
        population_size: ``batch_size``.
        num_tasks: ``N``.
        accepts_nonfinite: True (non-finite fitness never enters the archive).
    """

    accepts_nonfinite = True

    def __init__(
        self,
        tasks: Any,
        *,
        solution_dim: int | None = None,
        solution: Any = None,
        task_descriptors: Any = None,
        batch_size: int = 100,
        variation: Callable[..., jax.Array] | None = None,
        bounds: tuple[Any, Any] = (0.0, 1.0),
        tournament_sizes: Sequence[int] = PYMAP_ELITES_TOURNAMENT_SIZES,
        random_init: float = 0.1,
        bandit_reward: str = "rate",
        qd_score_offset: float = 0.0,
    ):
        if (solution_dim is None) == (solution is None):
            raise ArgumentError(
                f"give exactly one of solution_dim and solution, got solution_dim={solution_dim!r} "
                f"and solution={'None' if solution is None else 'a template'}"
            )
        self.space: SolutionSpace = (
            as_solution_space(num_dims=check_int(solution_dim, "solution_dim"))
            if solution is None
            else as_solution_space(solution=solution)
        )
        dims = self.space.num_dims
        params = _task_array(tasks, "tasks")
        descriptors = (
            params
            if task_descriptors is None
            else _task_array(task_descriptors, "task_descriptors", params.shape[0])
        )
        _check_distinct(descriptors, "tasks" if task_descriptors is None else "task_descriptors")
        self.task_params = jnp.asarray(params)
        self.task_descriptors = jnp.asarray(descriptors)
        self.num_tasks = params.shape[0]
        self.batch_size = self.population_size = check_int(batch_size, "batch_size")
        self.low, self.high = check_bounds(bounds, (dims,))
        if np.any(self.low >= self.high):
            raise ArgumentError(f"bounds must satisfy low < high everywhere, got {bounds!r}")
        if variation is None:
            variation = SBXCrossover(low=tuple(self.low.tolist()), high=tuple(self.high.tolist()), eta=10.0)
        if not callable(variation):
            raise ArgumentError(f"variation must be a callable (key, x1, x2) -> children, got {variation!r}")
        self.variation = variation
        sizes = (
            tuple(tournament_sizes) if isinstance(tournament_sizes, (list, tuple)) else (tournament_sizes,)
        )
        sizes = tuple(check_int(s, f"tournament_sizes[{i}]") for i, s in enumerate(sizes))
        if not sizes or len(set(sizes)) != len(sizes):
            raise ArgumentError(
                f"tournament_sizes must be distinct ints >= 1 (at least one), got {tournament_sizes!r}"
            )
        self.tournament_sizes = sizes
        # each child draws max(sizes) tasks: their indices and descriptor gaps live at once
        check_memory(
            self.batch_size * max(sizes) * (4 + 8 * descriptors.shape[1]),
            f"tournament_sizes (largest {max(sizes)}) x batch_size={self.batch_size}",
        )
        self.random_init = check_fraction(random_init, "random_init", allow_zero=True)
        self.bandit_reward = check_choice(bandit_reward, "bandit_reward", BANDIT_REWARDS)
        span_low, span_high = descriptors.min(axis=0), descriptors.max(axis=0)
        flat = span_low == span_high
        ranges = list(
            zip(
                np.where(flat, span_low - 0.5, span_low),
                np.where(flat, span_high + 0.5, span_high),
                strict=True,
            )
        )
        self.archive = CVTArchive(
            solution_dim=dims, centroids=descriptors, ranges=ranges, qd_score_offset=qd_score_offset
        )

    def default_params(self) -> None:
        """No dynamic hyperparameters."""
        return None

    def init(self, key: jax.Array, params: Any = None) -> MultiTaskState:
        """An empty archive and an untried bandit (``key`` and ``params`` unused)."""
        arms = len(self.tournament_sizes)
        return MultiTaskState(
            archive=self.archive.init(),
            arm=jnp.full((), -1, jnp.int32),
            pulls=jnp.zeros((arms,), jnp.int32),
            reward=jnp.zeros((arms,), jnp.float32),
            generation=jnp.zeros((), jnp.int32),
        )

    def _random_batch(self, key: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        x_key, task_key = jax.random.split(key)
        u = rng.uniform(x_key, (self.batch_size, self.space.num_dims), jnp.float32)
        x = self.low + u * (self.high - self.low)
        task = rng.randint(task_key, (self.batch_size,), 0, self.num_tasks).astype(jnp.int32)
        return x, task, jnp.full((), -1, jnp.int32)

    def _varied_batch(self, key: jax.Array, state: MultiTaskState) -> tuple[jax.Array, jax.Array, jax.Array]:
        first_key, second_key, variation_key, arm_key, task_key = jax.random.split(key, 5)
        first = self.archive.sample_elites(first_key, state.archive, self.batch_size)
        second = self.archive.sample_elites(second_key, state.archive, self.batch_size)
        x1 = self.archive.elite_solutions(state.archive, first)
        x2 = self.archive.elite_solutions(state.archive, second)
        children = jnp.asarray(self.variation(variation_key, x1, x2))
        if children.shape != x1.shape:
            raise ArgumentError(
                f"variation must return [{self.batch_size}, {x1.shape[1]}], got {list(children.shape)}"
            )
        x = jnp.clip(children.astype(jnp.float32), self.low, self.high)
        arm = ucb1_arm(arm_key, state.pulls, state.reward)
        size = jnp.asarray(self.tournament_sizes, jnp.int32)[arm]
        task = tournament_tasks(task_key, first, self.task_descriptors, size, max(self.tournament_sizes))
        return x, task, arm

    def ask(
        self, key: jax.Array, state: MultiTaskState, params: Any = None
    ) -> tuple[TaskBatch, MultiTaskState]:
        """``-> (TaskBatch of batch_size rows, state)``: random solutions while the archive is being
        seeded, children of elites aimed by the tournament afterwards."""
        filled = jnp.sum(state.archive.occupied)
        seeding = filled <= self.random_init * self.num_tasks
        x, task, arm = lax.cond(
            seeding, lambda: self._random_batch(key), lambda: self._varied_batch(key, state)
        )
        batch = TaskBatch(
            solutions=self.space.unravel_population(x), task=task, params=self.task_params[task]
        )
        return batch, state.replace(arm=arm)

    def tell(
        self,
        key: jax.Array,
        state: MultiTaskState,
        genotypes: TaskBatch,
        evaluation: Evaluation,
        params: Any = None,
    ) -> tuple[MultiTaskState, dict[str, jax.Array]]:
        """Offer every candidate to its task's cell and credit the tournament size that aimed them.

        ``evaluation.fitness [B]`` is minimized (negated into the archive's objective).
        """
        if not isinstance(genotypes, TaskBatch):
            raise ArgumentError(
                f"genotypes must be the TaskBatch ask returned, got {type(genotypes).__name__}"
            )
        x = self.space.ravel_population(genotypes.solutions)
        task = jnp.asarray(genotypes.task, jnp.int32)
        objective = -jnp.asarray(evaluation.fitness, jnp.float32)
        if objective.shape != (self.batch_size,) or task.shape != (self.batch_size,):
            raise ArgumentError(
                f"evaluation.fitness and genotypes.task must be [{self.batch_size}], got "
                f"{list(objective.shape)} and {list(task.shape)}"
            )
        archive_state, info = self.archive.add(
            state.archive, x, objective, self.task_descriptors[task], cells=task
        )
        added = jnp.sum(info.status > 0).astype(jnp.int32)
        reward = added.astype(jnp.float32)
        if self.bandit_reward == "rate":
            reward = reward / self.batch_size
        pulled = (jnp.arange(len(self.tournament_sizes)) == state.arm).astype(jnp.int32)  # none: -1
        state = MultiTaskState(
            archive=archive_state,
            arm=state.arm,
            pulls=state.pulls + pulled,
            reward=state.reward + pulled * reward,
            generation=state.generation + 1,
        )
        metrics = self.archive.stats(archive_state)
        metrics["added"] = added
        metrics["new_cells"] = jnp.sum(info.status == 2).astype(jnp.int32)
        sizes = jnp.asarray(self.tournament_sizes, jnp.int32)
        metrics["tournament_size"] = jnp.where(state.arm >= 0, sizes[jnp.maximum(state.arm, 0)], 0)
        return state, metrics

    def reported_archive(self, state: MultiTaskState) -> tuple[CVTArchive, ArchiveState]:
        """The archive of one cell per task and its state."""
        return self.archive, state.archive
