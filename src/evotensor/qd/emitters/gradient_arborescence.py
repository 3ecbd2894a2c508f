"""The gradient arborescence emitter of CMA-MEGA and CMA-MAEGA (Fontaine & Nikolaidis 2021, 2023):
differentiable quality diversity.

The emitter keeps a *solution point* ``theta``. Every generation it offers ``theta`` itself to the
archive and branches around it along the (normalised) gradients of the objective and the measures,
``theta + c_0 grad f + sum_j c_j grad m_j``, with coefficients ``c`` drawn by a CMA-ES in the
``1 + D``-dimensional coefficient space. The branches are ranked by how they fared in the archive;
CMA-ES learns from the ranking which gradient mix pays, and ``theta`` takes an optimizer step toward
the weighted mean of the best branches::

    jacobian = problem_jacobian(LinearProjection(100))          # x [n] -> [1 + D, n], by jax.jacrev
    emitter = GradientArborescenceEmitter(np.zeros(100), sigma0=10.0, jacobian=jacobian)
    me = MAPElites(GridArchive(...), [emitter])                 # population: 1 + batch_size

The rules are pyribs 0.12's ``GradientArborescenceEmitter`` with its ``cma_es`` optimizer and
``adam`` gradient optimizer (``ribs/emitters/_gradient_arborescence_emitter.py``):

* Gradients: the Jacobian's rows (objective first, then each measure) are divided by their norm plus
  ``epsilon`` (``normalize_grad=True``).
* Coefficients: the CMA-ES of :class:`~evotensor.qd.emitters.CMAESEmitter` (its rankers, selection
  rules, restart rules and stopping criteria) over ``1 + D`` coefficients, mean 0, ``sigma0``.
* Step: with ``k`` parents (``filter``: the branches added to the archive; ``mu``: half the batch),
  ``w_i = ln(k + 1/2) - ln i`` normalised, ``theta <- theta + adam(sum_i w_i branch_i - theta)``
  (an ascent: the optimizer is given the negated step to descend), step size ``lr``.
* Restart (a stopping criterion or the restart rule): ``theta`` becomes an elite drawn uniformly
  from the archive after the batch, the optimizer and CMA-ES (mean 0, ``sigma0``) start afresh.

Differences from pyribs, and why:

* pyribs evaluates ``theta`` with its Jacobian (``ask_dqd`` / ``tell_dqd``) before it asks for the
  branches: two evaluations per iteration. Here the emitter computes the Jacobian itself (the
  ``jacobian`` function, traced into the compiled generation) and ``theta`` is row 0 of the same
  batch as its branches, so one archive ``add`` takes both (pyribs adds ``theta`` first).
* With no parents (``filter`` and nothing added) ``theta`` does not move; pyribs' weighted mean of no
  parents is 0, which steps ``theta`` toward the origin.
* The default optimizer is ``optax.adam(lr)``, whose ``eps`` is added to ``sqrt`` of the
  bias-corrected second moment; pyribs adds it before the bias correction.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax

from evotensor.core.checks import ArgumentError, check_real
from evotensor.core.pytree import pytree_dataclass
from evotensor.qd.archive import AddInfo, Archive, ArchiveState
from evotensor.qd.emitters.base import check_flat_archive, check_vector
from evotensor.qd.emitters.cma_es import CMAESEmitter, CMAESEmitterState
from evotensor.qd.emitters.rankers import Ranker


@pytree_dataclass
class GradientArborescenceState:
    """State of a :class:`GradientArborescenceEmitter` (``n`` solution elements, ``D`` measures).

    Attributes:
        theta: ``[n]`` the solution point.
        optimizer: the gradient optimizer's state.
        coefficients: the CMA-ES emitter's state over the ``1 + D`` gradient coefficients
            (:class:`~evotensor.qd.emitters.CMAESEmitterState`; its ``restarts`` count this
            emitter's restarts).
        drawn: ``[batch_size, 1 + D]`` the coefficients of the batch in flight.
    """

    theta: jax.Array
    optimizer: Any
    coefficients: CMAESEmitterState
    drawn: jax.Array


def problem_jacobian(problem: Any, key: jax.Array | None = None) -> Callable[[jax.Array], jax.Array]:
    """``x [n] -> [1 + D, n]``: the gradients of a differentiable evotensor problem's objective (its
    fitness, negated when the problem minimizes, as MAP-Elites archives it) and of each of its
    descriptors, by ``jax.jacrev`` of ``problem.evaluate(key, x[None])`` (``key`` default
    ``jax.random.key(0)``: meant for deterministic problems)."""
    if not callable(getattr(problem, "evaluate", None)):
        raise ArgumentError(f"problem must have evaluate(key, x), got {type(problem).__name__}")
    key = jax.random.key(0) if key is None else key
    sign = 1.0 if getattr(problem, "maximize", False) else -1.0

    def values(x):
        evaluation = problem.evaluate(key, x[None])
        if evaluation.descriptor is None:
            raise ArgumentError(
                f"{type(problem).__name__} gives no descriptor: it has no measures to differentiate"
            )
        return jnp.concatenate([sign * evaluation.fitness[:1], evaluation.descriptor[0]])

    return jax.jacrev(values)


def jacobian_measure_dim(jacobian: Any, solution_dim: int) -> int:
    """``D``, the measures of a Jacobian function ``x [n] -> [1 + D, n]``, read from its shape traced
    abstractly on an ``[n]`` vector (nothing is computed); an :class:`ArgumentError` naming
    ``jacobian`` if it is not callable, fails to trace, or has another shape."""
    if not callable(jacobian):
        raise ArgumentError(f"jacobian must be a function x [n] -> [1 + D, n], got {jacobian!r}")
    try:
        shape = jax.eval_shape(jacobian, jax.ShapeDtypeStruct((solution_dim,), jnp.float32)).shape
    except Exception as err:  # a function that fails on an [n] vector: say so, with its error
        raise ArgumentError(
            f"jacobian must map x [{solution_dim}] to [1 + D, {solution_dim}]: {err}"
        ) from err
    if len(shape) != 2 or shape[0] < 2 or shape[1] != solution_dim:
        raise ArgumentError(
            f"jacobian(x) must have shape [1 + D, n] = [1 + D, {solution_dim}] with D >= 1 "
            f"measures, got {list(shape)}"
        )
    return shape[0] - 1


class GradientArborescenceEmitter:
    """CMA-MEGA's emitter (module docstring for every rule).

    Args:
        x0: ``[n]`` the first solution point (and the restart point while the archive is empty).
        sigma0: initial (and restart) step size of the coefficient CMA-ES, > 0.
        jacobian: ``x [n] -> [1 + D, n]``, the gradients of the objective (maximized) and of each
            measure at ``x``, a pure JAX function (e.g. :func:`problem_jacobian`).
        lr: the default optimizer's step size (pyribs' ``lr``), > 0.
        optimizer: an optax transformation for ``theta`` (given the negated step); default
            ``optax.adam(lr)``.
        ranker, selection_rule, restart_rule, batch_size: the coefficient CMA-ES's, as in
            :class:`~evotensor.qd.emitters.CMAESEmitter` (``batch_size`` counts the branches;
            default ``4 + floor(3 ln(1 + D))``).
        normalize_grad: divide each gradient by its norm (+ ``epsilon``).
        epsilon: the normalisation's guard, 1e-8.

    Attributes:
        batch_size: ``1 + `` the branches (``theta`` is row 0).
        measure_dim: ``D``, read from the Jacobian's shape at construction (the archive must match).
        num_branches, solution_dim, x0, sigma0, lr, and the arguments above.
    """

    def __init__(
        self,
        x0: Any,
        sigma0: float,
        jacobian: Callable[[jax.Array], jax.Array],
        *,
        lr: float = 0.001,
        optimizer: optax.GradientTransformation | None = None,
        ranker: str | Ranker = "2imp",
        selection_rule: str = "filter",
        restart_rule: str | int = "no_improvement",
        batch_size: int | None = None,
        normalize_grad: bool = True,
        epsilon: float = 1e-8,
    ):
        x0 = check_vector(x0, "x0")
        self.x0 = jnp.asarray(x0)
        self.solution_dim = x0.size
        self.measure_dim = jacobian_measure_dim(jacobian, self.solution_dim)
        self.jacobian = jacobian
        self.lr = check_real(lr, "lr", low=0.0, low_open=True)
        if optimizer is None:
            optimizer = optax.adam(self.lr)
        if not (callable(getattr(optimizer, "init", None)) and callable(getattr(optimizer, "update", None))):
            raise ArgumentError(f"optimizer must be an optax GradientTransformation, got {optimizer!r}")
        self.optimizer = optimizer
        if not isinstance(normalize_grad, (bool, np.bool_)):
            raise ArgumentError(f"normalize_grad must be True or False, got {normalize_grad!r}")
        self.normalize_grad = bool(normalize_grad)
        self.epsilon = check_real(epsilon, "epsilon", low=0.0)
        # the coefficient CMA-ES: its sampling, ranking, update and stopping rules
        self.cma = CMAESEmitter(
            np.zeros(1 + self.measure_dim),
            sigma0,
            ranker=ranker,
            selection_rule=selection_rule,
            restart_rule=restart_rule,
            batch_size=batch_size,
        )
        self.sigma0 = self.cma.sigma0
        self.num_branches = self.cma.batch_size
        self.batch_size = 1 + self.num_branches

    def __repr__(self) -> str:
        return (
            f"GradientArborescenceEmitter(solution_dim={self.solution_dim}, sigma0={self.sigma0}, "
            f"lr={self.lr}, ranker={self.cma.ranker.name!r}, branches={self.num_branches})"
        )

    def init(self, key: jax.Array, archive: Archive) -> GradientArborescenceState:
        """``theta = x0``; CMA-ES over the coefficients at 0 with ``sigma0``."""
        check_flat_archive(archive, "GradientArborescenceEmitter")
        if archive.solution_dim != self.solution_dim or archive.measure_dim != self.measure_dim:
            raise ArgumentError(
                f"GradientArborescenceEmitter: x0 has {self.solution_dim} elements and measure_dim is "
                f"{self.measure_dim}, but the archive stores solutions of {archive.solution_dim} with "
                f"{archive.measure_dim} measures"
            )
        return GradientArborescenceState(
            theta=jnp.array(self.x0, copy=True),
            optimizer=self.optimizer.init(self.x0),
            coefficients=self._coefficients(key, archive),
            drawn=jnp.zeros((self.num_branches, 1 + self.measure_dim), jnp.float32),
        )

    def _coefficients(self, key: jax.Array, archive: Archive) -> CMAESEmitterState:
        """A fresh coefficient CMA-ES (mean 0, ``sigma0``) with its counters at 0."""
        cma_state, direction = self.cma.fresh(key, archive, self.cma.x0)
        return CMAESEmitterState(
            cma=cma_state,
            direction=direction,
            iterations=jnp.zeros((), jnp.int32),
            restarts=jnp.zeros((), jnp.int32),  # its own buffer: a run's state may be donated
        )

    def gradients(self, theta: jax.Array) -> jax.Array:
        """``[1 + D, n]``: the Jacobian at ``theta``, each row normalised (``normalize_grad``)."""
        grads = jnp.asarray(self.jacobian(theta), jnp.float32)
        if self.normalize_grad:
            grads = grads / (jnp.linalg.norm(grads, axis=1, keepdims=True) + self.epsilon)
        return grads

    def ask(
        self, key: jax.Array, state: GradientArborescenceState, archive: Archive, archive_state: ArchiveState
    ) -> tuple[jax.Array, GradientArborescenceState]:
        """``[1 + branches, n]``: ``theta``, then ``theta + c @ grads`` for the drawn coefficients."""
        drawn, _ = self.cma.ask(key, state.coefficients, archive, archive_state)
        branches = state.theta + jnp.matmul(
            drawn, self.gradients(state.theta), precision=lax.Precision.HIGHEST
        )
        batch = jnp.concatenate([state.theta[None], branches], axis=0)
        return batch, state.replace(drawn=drawn)

    def tell(
        self,
        key: jax.Array,
        state: GradientArborescenceState,
        archive: Archive,
        archive_state: ArchiveState,
        solutions: jax.Array,
        objective: jax.Array,
        measures: jax.Array,
        info: AddInfo,
    ) -> GradientArborescenceState:
        """Rank the branches (rows ``1:``), update the coefficient CMA-ES, step ``theta`` toward the
        weighted mean of the best branches, restart if a rule fires."""
        branches = jax.tree_util.tree_map(lambda a: a[1:], info)
        solutions, objective, measures = solutions[1:], objective[1:], measures[1:]
        coefficients, stop, order = self.cma.update(
            state.coefficients, state.drawn, objective, measures, branches
        )
        b = self.num_branches
        if self.cma.selection_rule == "filter":
            parents = jnp.sum(branches.status > 0, dtype=jnp.int32)
        else:
            parents = jnp.asarray(b // 2, jnp.int32)
        i = jnp.arange(1, b + 1, dtype=jnp.float32)
        w = jnp.where(i <= parents, jnp.log(parents.astype(jnp.float32) + 0.5) - jnp.log(i), 0.0)
        w = w / jnp.maximum(jnp.sum(w), jnp.finfo(jnp.float32).tiny)
        ranked = jnp.where((i <= parents)[:, None], solutions[order], 0.0)  # no 0 * NaN from the rest
        mean = jnp.matmul(w, ranked, precision=lax.Precision.HIGHEST)
        updates, optimizer = self.optimizer.update(-(mean - state.theta), state.optimizer, state.theta)
        moved = optax.apply_updates(state.theta, updates)
        step = (parents > 0) & jnp.all(jnp.isfinite(moved))
        theta = jnp.where(step, moved, state.theta)
        optimizer = jax.tree_util.tree_map(lambda n, o: jnp.where(step, n, o), optimizer, state.optimizer)

        # restart: theta from an elite of the archive after the batch, fresh optimizer and CMA-ES
        elite_key, direction_key = jax.random.split(key)
        cell = archive.sample_elites(elite_key, archive_state, 1)[0]
        elite = archive.elite_solutions(archive_state, cell[None])[0]
        elite = jnp.where(archive.has_elites(archive_state), elite, self.x0)
        fresh_cma, fresh_direction = self.cma.fresh(
            direction_key, archive, self.cma.x0, coefficients.mean.dtype
        )
        coefficients = state.coefficients.replace(
            cma=jax.tree_util.tree_map(lambda r, c: jnp.where(stop, r, c), fresh_cma, coefficients),
            direction=jnp.where(stop, fresh_direction, state.coefficients.direction),
            iterations=state.coefficients.iterations + 1,
            restarts=state.coefficients.restarts + stop.astype(jnp.int32),
        )
        return state.replace(
            theta=jnp.where(stop, elite, theta),
            optimizer=jax.tree_util.tree_map(
                lambda r, c: jnp.where(stop, r, c), self.optimizer.init(elite), optimizer
            ),
            coefficients=coefficients,
        )
