"""Multi-task problems: one fitness ``f(x, task)`` over a set of tasks, each candidate scored on the
task it is aimed at (Mouret & Maguire 2020, "Quality Diversity for Multi-task Optimization").

A multi-task strategy (:class:`evotensor.qd.MultiTaskMAPElites`) asks for a :class:`TaskBatch`: the
candidates, the index of the task each one is aimed at and that task's parameters. A multi-task
problem scores every row on its own task::

    problem = MultiTaskArm(num_joints=10)                   # tasks: (angular range, arm length)
    batch = TaskBatch(solutions=x, task=t, params=tasks[t])  # [B, 10], [B], [B, 2]
    problem.evaluate(key, batch).fitness                    # [B]

:class:`MultiTaskFunction` wraps any batched (or per-individual) ``f(x, task_params)``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core.checks import ArgumentError, check_int
from evotensor.core.evaluation import Evaluation
from evotensor.core.pytree import pytree_dataclass


@pytree_dataclass
class TaskBatch:
    """A batch of candidates, each aimed at one task.

    Attributes:
        solutions: ``[B, dims]`` candidates (or a pytree with a leading ``B`` axis).
        task: ``[B]`` int32, the index of each candidate's task.
        params: ``[B, k]`` float32, the parameters of each candidate's task (what the fitness reads).
    """

    solutions: Any
    task: jax.Array
    params: jax.Array


def _check_batch(batch: Any, who: str) -> TaskBatch:
    if not isinstance(batch, TaskBatch):
        raise ArgumentError(
            f"{who}: genotypes must be a TaskBatch (solutions, task, params) from a multi-task "
            f"strategy such as evotensor.qd.MultiTaskMAPElites, got {type(batch).__name__}"
        )
    return batch


@dataclasses.dataclass(frozen=True)
class MultiTaskFunction:
    """A multi-task problem from a fitness function.

    Args:
        fn: ``fn(solutions [B, dims], params [B, k]) -> [B]`` (``per_individual=False``), or
            ``fn(solution [dims], params [k]) -> []`` (``per_individual=True``, vmapped here).
            Must be jit-able.
        maximize: whether ``fn`` is to be maximized (default True, as in MT-ME's papers).
        per_individual: see ``fn``.
    """

    fn: Callable[..., Any]
    maximize: bool = True
    per_individual: bool = False
    kind: str = dataclasses.field(default="function", init=False)

    def __post_init__(self):
        if not callable(self.fn):
            raise ArgumentError(f"fn must be callable, got {self.fn!r}")
        for name in ("maximize", "per_individual"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ArgumentError(f"{name} must be a bool, got {getattr(self, name)!r}")

    def evaluate(self, key: jax.Array, genotypes: Any) -> Evaluation:
        """``genotypes``: a :class:`TaskBatch` of ``B`` rows; ``key`` unused. Fitness ``[B]``."""
        batch = _check_batch(genotypes, type(self).__name__)
        fn = jax.vmap(self.fn) if self.per_individual else self.fn
        fitness = jnp.asarray(fn(batch.solutions, batch.params))
        rows = batch.task.shape[0]
        if fitness.shape != (rows,):
            raise ArgumentError(
                f"fn must return one fitness per row, shape [{rows}], got {list(fitness.shape)}"
            )
        return Evaluation(fitness=fitness.astype(jnp.float32))


def arm_end_effector(angles: jax.Array, task: jax.Array) -> jax.Array:
    """End effector of pymap_elites' multi-task arm: ``[B, n]`` normalised angles, ``[B, 2]`` tasks
    ``(a, L)`` -> ``[B, 2]``.

    ``n`` links of length ``L / n`` from the origin; joint ``i`` turns by
    ``(angles_i - 0.5) * 2 pi * a / n`` relative to the previous link (``a`` is the total angular
    range, so ``a = 1`` lets each joint turn by at most ``pi / n`` either way).
    """
    n = angles.shape[-1]
    turn = (angles - 0.5) * (2.0 * jnp.pi) * (task[:, :1] / n)
    heading = jnp.cumsum(turn, axis=-1)
    link = task[:, 1:2] / n
    return jnp.stack([jnp.sum(jnp.cos(heading), -1), jnp.sum(jnp.sin(heading), -1)], -1) * link


@dataclasses.dataclass(frozen=True)
class MultiTaskArm:
    """The multi-task planar arm of Mouret & Maguire (2020), as in pymap_elites'
    ``examples/multitask_arm.py``: reach the point ``(0.5, 0.5)`` with an arm whose angular range
    and length are the task.

    A task is ``(a, L)`` in ``[0, 1]^2``: an arm of ``num_joints`` links of length ``L / n`` whose
    joints turn within ``a`` times a full turn in total (:func:`arm_end_effector`). A candidate holds
    one normalised angle per joint, clipped to ``[0, 1]``. Fitness (maximized): minus the distance
    from the end effector to ``(0.5, 0.5)``; tasks with ``L < sqrt(0.5)`` cannot reach it, so their
    best fitness is ``L - sqrt(0.5) < 0``.

    Args:
        num_joints: joints ``n`` (>= 1; the paper's 10 by default).

    Attributes:
        bounds: ``(0, 1)``.
        task_ranges: ``((0, 1), (0, 1))``, the box tasks are drawn from.
    """

    num_joints: int = 10
    maximize: bool = dataclasses.field(default=True, init=False)
    kind: str = dataclasses.field(default="function", init=False)

    def __post_init__(self):
        object.__setattr__(self, "num_joints", check_int(self.num_joints, "num_joints", 1))

    @property
    def num_dims(self) -> int:
        return self.num_joints

    @property
    def bounds(self) -> tuple[float, float]:
        return (0.0, 1.0)

    @property
    def task_ranges(self) -> tuple[tuple[float, float], ...]:
        return ((0.0, 1.0), (0.0, 1.0))

    def evaluate(self, key: jax.Array, genotypes: Any) -> Evaluation:
        """``genotypes``: a :class:`TaskBatch` with ``solutions [B, num_joints]`` and ``params
        [B, 2]``; ``key`` unused. Fitness ``[B]``."""
        batch = _check_batch(genotypes, type(self).__name__)
        x = jnp.asarray(batch.solutions, jnp.float32)
        params = jnp.asarray(batch.params, jnp.float32)
        if x.ndim != 2 or x.shape[1] != self.num_joints:
            raise ArgumentError(
                f"MultiTaskArm: solutions must be [B, {self.num_joints}], got {tuple(x.shape)}"
            )
        if params.shape != (x.shape[0], 2):
            raise ArgumentError(f"MultiTaskArm: params must be [B, 2] (a, L), got {tuple(params.shape)}")
        end = arm_end_effector(jnp.clip(x, 0.0, 1.0), params)
        return Evaluation(fitness=-jnp.linalg.norm(end - 0.5, axis=-1))
