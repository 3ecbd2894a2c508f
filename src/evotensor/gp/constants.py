"""Batched Levenberg-Marquardt on the numeric constants of many trees at once (as Operon does).

Evolution finds the shape of an expression; its constants are best fitted by local optimization.
:func:`optimize_constants` tunes the ``CONST`` slots of every tree of a forest by damped
Gauss-Newton steps on the squared error, all trees in one fixed-shape program (``vmap`` over trees
on a GPU, ``lax.map`` on a CPU; ``lax.scan`` over steps), and :class:`ConstantOptimizer` applies
it to the chosen members of a population and writes the tuned constants back (Lamarckian).

Per tree, one step from parameters ``p`` (the values of its first ``max_constants`` constants, plus
with linear scaling the slope ``a`` and intercept ``b`` of ``a * f(x) + b``)::

    r = y - model(p)                   residuals [n]
    J = d model / d p                  [n, K] (K = max_constants, + 2 with linear scaling)
    (J^T J + lambda diag(J^T J)) delta = J^T r          (Marquardt's scaled damping)
    accept p + delta if its loss is finite and lower: lambda /= 10; else keep p: lambda *= 10

With linear scaling, ``a, b`` start at (and after each accepted step return to) their closed-form
least-squares values (:func:`evotensor.gp.scaling.coefficients`, the rule every scorer uses), so the
loss is always the scaled error the tree will be scored with (variable projection with Kaufman's
step). The Jacobian of ``f`` comes from :func:`evotensor.gp.tree_eval.tree_jacobian`: a forward
pass that also records every node's partial derivatives, then a pass in prefix order, give ``df(x_r)
/ d value`` for every row and every slot at once, whatever the number of constants (forward mode
would push ``max_constants`` tangents through the evaluation). Each iteration costs one such
linearization at the candidate constants (reused as the next step's when it is accepted).

On a CPU the linearization is native by default (``backend="auto"``): one call of the C++ kernel
:func:`evotensor.gp.native.normal_equations` per iteration for the whole batch of trees gives each
tree's least-squares sums over the rows (forward-mode tangents of its tracked constants, sums in
double, centered), from which ``J^T J``, ``J^T r`` and the loss are formed exactly (no float32
cancellation of large uncentered sums) and the ``[trees, K + 2, K + 2]`` damped systems solved in
JAX; about 12x faster than ``tree_jacobian`` per tree on a CPU.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from evotensor.core.checks import ArgumentError, check_choice, check_fraction, check_int, check_positive
from evotensor.gp import native, scaling
from evotensor.gp.encoding import Forest
from evotensor.gp.functions import CONST, FunctionSet
from evotensor.gp.metrics import (
    ROWS_PER_CHUNK,
    check_evaluation_size,
    check_finite_data,
    forest_fields,
    memory_limit,
)
from evotensor.gp.tree_eval import tree_jacobian

__all__ = ["BACKENDS", "ConstantOptimizer", "choose_backend", "optimize_constants"]

BACKENDS = ("auto", "native", "jax")
"""The linearization paths ``backend=`` accepts (see :func:`optimize_constants`)."""

_LAMBDA_MIN, _LAMBDA_MAX = 1e-12, 1e12
_HIGHEST = lax.Precision.HIGHEST


def _check_data(X: Any, y: Any) -> tuple[jax.Array, jax.Array]:
    """``X`` float32 ``[n, n_vars]`` and ``y`` float32 ``[n]`` (from ``[n]`` or ``[n, 1]``), finite."""
    X = jnp.asarray(X, jnp.float32)
    y = jnp.asarray(y, jnp.float32)
    if X.ndim != 2 or X.shape[0] < 1:
        raise ArgumentError(f"X must have shape [n_points >= 1, n_vars], got {X.shape}")
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1 or y.shape[0] != X.shape[0]:
        raise ArgumentError(
            f"y must have shape [n_points] or [n_points, 1] with n_points = X.shape[0] = {X.shape[0]} "
            f"(one output: constant optimization is for single-output regression), got {y.shape}"
        )
    check_finite_data(X, "X")
    check_finite_data(y, "y")
    return X, y


def _check_n_outputs(n_outputs: Any) -> None:
    if check_int(n_outputs, "n_outputs", minimum=1) != 1:
        raise ArgumentError(
            "n_outputs must be 1: constant optimization tunes single-output regression trees, "
            f"got {n_outputs!r}"
        )


def _constant_slots(opcode: jax.Array, max_constants: int) -> jax.Array:
    """Positions ``int32 [max_constants]`` of a tree's first ``max_constants`` CONST slots, in
    order; ``max_len`` (out of range) where the tree has fewer."""
    L = opcode.shape[-1]
    (pos,) = jnp.nonzero(opcode == CONST, size=max_constants, fill_value=L)
    return pos.astype(jnp.int32)


def _scaled(f: jax.Array, y: jax.Array, linear_scaling: bool):
    """``(a, b, loss)``: closed-form scaling of ``f`` (``1, 0`` without) and the mean squared error
    of ``a * f + b`` (inf when ``f`` has a non-finite value)."""
    finite = jnp.all(jnp.isfinite(f))
    if linear_scaling:
        moments, _ = scaling.moments_from_predictions(f[None, :, None], (y - jnp.mean(y))[None])
        a, b = scaling.coefficients(moments, jnp.mean(y)[None], y.shape[0])
        a, b = a[0, 0], b[0, 0]
    else:
        a, b = jnp.float32(1.0), jnp.float32(0.0)
    loss = jnp.mean(jnp.square(y - (a * f + b)))
    return a, b, jnp.where(finite & jnp.isfinite(loss), loss, jnp.inf)


def _optimize_tree(
    opcode, value, size, output, X, y, fs, steps, linear_scaling, max_constants, damping, skip_padding
):
    """Levenberg-Marquardt on one tree; ``(value [L], loss)`` (see :func:`optimize_constants`)."""
    L = opcode.shape[0]
    slots = _constant_slots(opcode, max_constants)
    used = slots < L
    safe = jnp.minimum(slots, L - 1)

    def with_constants(theta):
        # unused entries point past the end and are dropped: no other slot ever changes
        return value.at[slots].set(theta, mode="drop")

    def linearize(theta):
        f, grad = tree_jacobian(opcode, with_constants(theta), size, X, fs, skip_padding)
        J = jnp.where(used[None], grad[:, safe], 0.0)  # [n, K]
        a, b, loss = _scaled(f, y, linear_scaling)
        return f, J, a, b, loss

    def step(carry, first):
        theta, f, J, a, b, loss, lam = carry
        model = a * f + b
        r = y - model
        if linear_scaling:
            Jm = jnp.concatenate([a * J, f[:, None], jnp.ones_like(f)[:, None]], axis=1)
        else:
            Jm = J
        ok = jnp.isfinite(r)[:, None] & jnp.isfinite(Jm)
        # rows or entries that are not finite say nothing about the step; drop them
        Jm = jnp.where(ok, Jm, 0.0)
        r = jnp.where(jnp.all(ok, axis=1), r, 0.0)
        JtJ = jnp.einsum("nk,nj->kj", Jm, Jm, precision=_HIGHEST)
        Jtr = jnp.einsum("nk,n->k", Jm, r, precision=_HIGHEST)
        diag = jnp.diagonal(JtJ)
        # an unused or inert parameter has a zero column: a unit diagonal keeps its step at 0
        dead = diag <= 0
        A = JtJ + jnp.diag(jnp.where(dead, 1.0, lam * diag))
        delta = jnp.linalg.solve(A, Jtr)
        delta = jnp.where(jnp.all(jnp.isfinite(delta)), delta, 0.0)
        candidate = jnp.where(used & ~first, theta + delta[:max_constants], theta)
        f_c, J_c, a_c, b_c, loss_c = linearize(candidate)
        # the first iteration only linearizes at the initial constants (one copy of the
        # linearization in the program: half the compile time)
        accept = first | ((loss_c < loss) & jnp.isfinite(loss_c))
        pick = lambda new, old: jnp.where(accept, new, old)  # noqa: E731
        lam = jnp.where(first, lam, jnp.where(accept, lam * 0.1, lam * 10.0))
        lam = jnp.clip(lam, _LAMBDA_MIN, _LAMBDA_MAX)
        carry = (pick(candidate, theta), pick(f_c, f), pick(J_c, J), pick(a_c, a), pick(b_c, b))
        return (*carry, pick(loss_c, loss), lam), None

    theta0 = jnp.where(used, value[safe], 0.0)
    n, dtype = X.shape[0], jnp.float32
    zero = jnp.zeros((), dtype)
    init = (
        theta0,
        jnp.zeros(n, dtype),
        jnp.zeros((n, max_constants), dtype),
        zero,
        zero,
        jnp.inf * (1 + zero),
    )
    init = (*init, jnp.asarray(damping, dtype))
    first = jnp.arange(steps + 1) == 0
    (theta, *_, loss, _), _ = lax.scan(step, init, first)
    return with_constants(theta), loss


# ---- the native path: one C++ linearization of the whole batch per iteration -----------------------


def choose_backend(backend: str, function_set: FunctionSet) -> str:
    """The linearization path ``backend`` (one of :data:`BACKENDS`) resolves to: ``"native"`` (the
    C++ kernel, :func:`evotensor.gp.native.normal_equations`) or ``"jax"`` (:func:`tree_jacobian`).
    ``"auto"``: native where JAX's default backend is the CPU and the kernel implements every function
    of the set, else jax (a GPU, custom functions)."""
    check_choice(backend, "backend", BACKENDS)
    if backend == "auto":
        return "native" if jax.default_backend() == "cpu" and native.supported(function_set) else "jax"
    if backend == "native" and not native.supported(function_set):
        reason = native.UNAVAILABLE_REASON or "function_set has functions it lacks (built-ins only)"
        raise ArgumentError(f"backend='native' is not available: {reason}; use backend='jax' or 'auto'")
    return backend


def _check_native_memory(pop: int, max_len: int, n_points: int, max_constants: int) -> None:
    """Refuse up front a native call whose working memory exceeds the limit (naming the argument)."""
    check_evaluation_size(pop, max_len, n_points, 1, materialize=False)
    in_flight = max(os.cpu_count() or 1, 8)
    # per thread: K tangent rows and a partial row (float32), K + 2 centered columns and the
    # (K + 2)^2 running cross products (float64)
    q = max_constants + 2
    need = in_flight * ((max_constants + 1) * ROWS_PER_CHUNK * 4 + q * ROWS_PER_CHUNK * 8 + q * q * 8)
    if need > memory_limit():
        raise ArgumentError(
            f"max_constants={max_constants} too large for the native constant optimizer: its working "
            f"memory needs {need / 2**30:.3g} GiB, over the limit of {memory_limit() / 2**30:.3g} GiB "
            "(evotensor.gp.metrics.memory_limit())"
        )


def _native_system(stats, y_mean, n: int, linear_scaling: bool, max_constants: int):
    """``(a, b, loss, JtJ [B, Q, Q], Jtr [B, Q])`` from the kernel's statistics at one point:
    ``Q = K + 2`` parameters (``K`` constants, then with linear scaling ``a, b``; without, the last
    two columns are zero), ``a, b`` the closed-form scaling (1, 0 without), ``loss`` the mean squared
    error of ``a f + b`` (inf where a prediction is not finite)."""
    mean, cov, sse, bad = stats
    K = max_constants
    m_f = mean[:, K]
    finite = (bad == 0) & jnp.all(jnp.isfinite(mean), -1) & jnp.all(jnp.isfinite(sse), -1)
    if linear_scaling:
        moments = jnp.stack([m_f, cov[:, K, K], cov[:, K, K + 1]], -1)[:, None, :]
        a, b = scaling.coefficients(moments, y_mean[None], n)
        a, b = a[:, 0], b[:, 0]
        # the kernel's Syy - C^2 / M2 (double) is the error at the least-squares a, b; where the
        # scaling rule gives a = 0 (a constant tree) the error is Syy
        sse_model = jnp.where(a == 0, cov[:, K + 1, K + 1], sse[:, 1])
        ones = jnp.ones((a.shape[0], 2))
        column_scale = jnp.concatenate([jnp.broadcast_to(a[:, None], (a.shape[0], K)), ones], 1)
    else:
        a, b = jnp.ones_like(m_f), jnp.zeros_like(m_f)
        sse_model = sse[:, 0]
        column_scale = jnp.concatenate([jnp.ones((K,)), jnp.zeros((2,))])[None]
    loss = jnp.where(finite & jnp.isfinite(sse_model), sse_model / n, jnp.inf)
    # uncentered sums over the columns (D_1 .. D_K, f, 1) from the centered ones: G = C + n mu mu^T
    n_ok = n - bad
    mu = jnp.concatenate([mean[:, : K + 1], jnp.ones_like(m_f)[:, None]], 1)
    C = jnp.pad(cov[:, : K + 1, : K + 1], ((0, 0), (0, 1), (0, 1)))
    G = C + n_ok[:, None, None] * mu[:, :, None] * mu[:, None, :]
    # sum_rows column * r with r = y - a f - b, from the centered cross products (no cancellation
    # of large uncentered sums): cov(X, r) = cov(X, y) - a cov(X, f), plus mean(X) * sum r
    sum_r = n_ok * (mean[:, K + 1] - a * m_f - b)
    cov_r = cov[:, : K + 1, K + 1] - a[:, None] * cov[:, : K + 1, K]
    g = jnp.pad(cov_r, ((0, 0), (0, 1))) + mu * sum_r[:, None]
    JtJ = column_scale[:, :, None] * G * column_scale[:, None, :]
    Jtr = column_scale * g
    return a, b, loss, JtJ, Jtr


def _optimize_native(
    opcode, value, size, output, X, y, fs, steps, linear_scaling, max_constants, damping, statistics
):
    """Levenberg-Marquardt on every tree at once with the native linearization: ``(value, loss)``
    (``statistics``: :func:`evotensor.gp.native.normal_equations` or a stand-in with its signature)."""
    B, L = opcode.shape
    n = X.shape[0]
    K = max_constants
    _check_native_memory(B, L, n, K)
    slots = jax.vmap(lambda op: _constant_slots(op, K))(opcode)  # [B, K], L where unused
    used = slots < L
    rows = jnp.arange(B)[:, None]
    y_mean = jnp.mean(y)[None]

    def with_constants(theta):
        return value.at[rows, slots].set(theta, mode="drop")

    def linearize(theta):
        stats = statistics((opcode, with_constants(theta), size, output), X, y, slots, fs)
        return stats, _native_system(stats, y_mean, n, linear_scaling, K)

    def step(carry, first):
        theta, stats, lam = carry
        _, _, loss, JtJ, Jtr = _native_system(stats, y_mean, n, linear_scaling, K)
        diag = jnp.diagonal(JtJ, axis1=1, axis2=2)
        # an unused or inert parameter has a zero column: a unit diagonal keeps its step at 0
        dead = diag <= 0
        A = JtJ + jax.vmap(jnp.diag)(jnp.where(dead, 1.0, lam[:, None] * diag))
        delta = jnp.linalg.solve(A, Jtr[..., None])[..., 0]
        delta = jnp.where(jnp.all(jnp.isfinite(delta), -1, keepdims=True), delta, 0.0)
        candidate = jnp.where(used & ~first, theta + delta[:, :K], theta)
        stats_c, (_, _, loss_c, _, _) = linearize(candidate)
        # the first iteration only linearizes at the initial constants (one kernel call in the program)
        accept = first | ((loss_c < loss) & jnp.isfinite(loss_c))
        lam = jnp.where(first, lam, jnp.where(accept, lam * 0.1, lam * 10.0))
        lam = jnp.clip(lam, _LAMBDA_MIN, _LAMBDA_MAX)
        pick = lambda new, old: jnp.where(accept.reshape((-1,) + (1,) * (new.ndim - 1)), new, old)  # noqa: E731
        return (pick(candidate, theta), jax.tree.map(pick, stats_c, stats), lam), None

    theta0 = jnp.where(used, jnp.take_along_axis(value, jnp.minimum(slots, L - 1), axis=1), 0.0)
    Q = K + 2
    zeros = (jnp.zeros((B, Q)), jnp.zeros((B, Q, Q)), jnp.zeros((B, 2)), jnp.ones((B,)))
    init = (theta0, zeros, jnp.full((B,), damping, jnp.float32))
    first = jnp.arange(steps + 1) == 0
    (theta, stats, _), _ = lax.scan(step, init, first)
    loss = _native_system(stats, y_mean, n, linear_scaling, K)[2]
    return with_constants(theta), loss


def optimize_constants(
    forest: Any,
    X: Any,
    y: Any,
    function_set: FunctionSet,
    *,
    steps: int = 10,
    linear_scaling: bool = True,
    n_outputs: int = 1,
    damping: float = 1e-3,
    max_constants: int = 16,
    batch_trees: bool | None = None,
    backend: str = "auto",
    normal_equations: Callable | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Tune the constants of every tree by Levenberg-Marquardt (see the module docstring).

    Args:
        forest: a :class:`~evotensor.gp.Forest` ``[pop, max_len]`` (or one tree ``[max_len]``), well
            formed (:meth:`~evotensor.gp.Forest.check`); single-output regression trees.
        X: ``[n_points, n_vars]`` inputs (finite).
        y: ``[n_points]`` or ``[n_points, 1]`` targets (finite).
        function_set: the forest's :class:`~evotensor.gp.FunctionSet` (static).
        steps: Levenberg-Marquardt iterations (each costs one forward and one backward pass of
            every tree over the data).
        linear_scaling: fit ``a * f + b`` (``a, b`` also optimized, re-derived in closed form after
            each accepted step) instead of ``f``.
        n_outputs: must be 1 (multi-output trees are refused with an :class:`ArgumentError`).
        damping: the initial Marquardt damping ``lambda`` (adapted per tree: / 10 after an accepted
            step, * 10 after a rejected one).
        max_constants: the parameters per tree: its first ``max_constants`` ``CONST`` slots in
            prefix order; later constants keep their values.
        batch_trees: run the trees together under ``vmap`` (True) or one at a time under
            ``lax.map`` (False), where each tree runs only its own nodes and each node computes
            only its own function. ``None`` (default): ``vmap`` on a GPU, one at a time on a CPU
            (faster there: a batch's ``[trees, max_len, rows]`` arrays leave the caches). The
            results agree to float32 rounding. JAX path only.
        backend: how each iteration linearizes the trees (one of :data:`BACKENDS`). ``"native"``:
            one call of the C++ kernel :func:`evotensor.gp.native.normal_equations` for the whole
            batch (forward-mode tangents of the tracked constants, the least-squares sums
            accumulated in double), then the batched damped solves ``[trees, K + 2, K + 2]`` in
            JAX; on the CPU (from any host; see :mod:`evotensor.gp.native`), built-in functions
            only. ``"jax"``: :func:`tree_jacobian` per tree, any function set, any device.
            ``"auto"`` (default): native where JAX's default backend is the CPU and the function
            set is native (:func:`choose_backend`), else jax. The two paths take the same steps up
            to float32 rounding (the native one forms ``J^T J`` and ``J^T r`` from sums over the
            rows instead of the Jacobian; its loss, from double sums, has no float32 floor).
        normal_equations: the native path's linearization, a function with the signature of
            :func:`evotensor.gp.native.normal_equations` returning its statistics over all the rows
            of ``X`` (default: that function). :mod:`evotensor.gp.sharding` passes one that runs the
            kernel on each device's rows and merges the statistics, for a data split over devices.
            Refused on the jax path.

    Returns:
        ``(value, loss)``: ``value`` float32 ``[pop, max_len]``, the forest's values with the tuned
        constants written in (only ``CONST`` slots change; a tree whose every step was rejected,
        e.g. one without constants, keeps its values bit for bit); ``loss`` float32 ``[pop]``, the
        mean squared error over the rows of the returned tree's predictions ``f`` -- after optimal
        linear scaling (``a * f + b`` with the closed-form ``a, b`` of
        :func:`evotensor.gp.scaling.coefficients`) with ``linear_scaling``, of ``f`` itself without;
        ``inf`` when a prediction is not finite. The loss never exceeds the initial one. The
        returned values do not include ``a, b``: whoever scores the tree re-derives them in closed
        form (they are the ones the loss was computed with).

    Jittable (``function_set`` and the keyword arguments static) and vmappable; every tree runs
    the same ``steps`` iterations (fixed shapes).

    Example::

        value, loss = optimize_constants(forest, X, y, fs, steps=10)
        forest = dataclasses.replace(forest, value=value)
    """
    if not isinstance(function_set, FunctionSet):
        raise ArgumentError(f"function_set must be a FunctionSet, got {type(function_set).__name__}")
    steps = check_int(steps, "steps", minimum=1)
    max_constants = check_int(max_constants, "max_constants", minimum=1)
    damping = check_positive(damping, "damping")
    if not isinstance(linear_scaling, (bool, np.bool_)):
        raise ArgumentError(f"linear_scaling must be a bool, got {linear_scaling!r}")
    _check_n_outputs(n_outputs)
    X, y = _check_data(X, y)
    path = choose_backend(backend, function_set)
    if normal_equations is not None and (path != "native" or not callable(normal_equations)):
        raise ArgumentError(
            "normal_equations replaces the native linearization: it must be callable and the path native "
            f"(backend={backend!r} resolves to {path!r} here), got {normal_equations!r}"
        )
    opcode, value, size, output, single = forest_fields(forest)
    if path == "native":
        new_value, loss = _optimize_native(
            opcode,
            value,
            size,
            output,
            X,
            y,
            function_set,
            steps,
            bool(linear_scaling),
            max_constants,
            damping,
            native.normal_equations if normal_equations is None else normal_equations,
        )
        return (new_value[0], loss[0]) if single else (new_value, loss)

    def one(op, val, sz, out, skip_padding):
        return _optimize_tree(
            op,
            val,
            sz,
            out,
            X,
            y,
            function_set,
            steps,
            bool(linear_scaling),
            max_constants,
            damping,
            skip_padding,
        )

    trees = (opcode, value, size, output)
    if batch_trees is None:
        batch_trees = jax.default_backend() != "cpu"
    if not batch_trees:
        new_value, loss = lax.map(lambda t: one(*t, skip_padding=True), trees)
    else:
        new_value, loss = jax.vmap(lambda *t: one(*t, skip_padding=False))(*trees)
    if single:
        return new_value[0], loss[0]
    return new_value, loss


class ConstantOptimizer:
    """Tune the constants of chosen members of a population (Lamarckian: values are written back).

    Args:
        steps: Levenberg-Marquardt iterations per call (:func:`optimize_constants`).
        fraction: tune the best ``ceil(fraction * pop)`` trees by fitness (``(0, 1]``).
        probability: if given, tune each tree independently with this probability (``(0, 1]``)
            instead of the best fraction. The tuned batch has a static size, ``pop * probability``
            plus four standard deviations (at most ``pop``); in the rare draw that picks more trees,
            a random subset of that size is tuned.
        max_constants: constants tuned per tree (its first ones in prefix order).
        damping: initial Marquardt damping.
        backend: the linearization path, one of :data:`BACKENDS` (see :func:`optimize_constants`;
            ``"auto"``: the native C++ kernel on a CPU, JAX elsewhere).

    Call it as ``optimizer(key, forest, fitness, X, y, function_set, linear_scaling=True,
    loss_to_fitness=None) -> (value [pop, max_len], fitness [pop])``: ``fitness`` is minimized (NaN
    counts as the worst); the chosen trees are tuned and get ``loss_to_fitness(loss)`` as their new
    fitness (``loss``: :func:`optimize_constants`' mean squared error, scaled with
    ``linear_scaling``; ``None``: the MSE itself), every other tree keeps its value and fitness bit
    for bit. The keyword ``optimize`` (default :func:`optimize_constants`) is the function that tunes
    the chosen batch, called with its signature; a problem on a mesh passes
    :func:`evotensor.gp.sharding.optimize_on_mesh`'s, which splits the batch over the devices.
    Jittable with the optimizer, the function set and the keyword arguments static (the optimizer is
    hashable by its settings).

    Example::

        tune = ConstantOptimizer(steps=10, fraction=0.1)
        value, fit = tune(key, forest, fit, X, y, fs, loss_to_fitness=jnp.sqrt)  # rmse fitness
        forest = dataclasses.replace(forest, value=value)
    """

    def __init__(
        self,
        steps: int = 10,
        fraction: float = 0.1,
        probability: float | None = None,
        max_constants: int = 16,
        damping: float = 1e-3,
        backend: str = "auto",
    ):
        self.steps = check_int(steps, "steps", minimum=1)
        self.fraction = check_fraction(fraction, "fraction")
        self.probability = None if probability is None else check_fraction(probability, "probability")
        self.max_constants = check_int(max_constants, "max_constants", minimum=1)
        self.damping = check_positive(damping, "damping")
        self.backend = check_choice(backend, "backend", BACKENDS)

    def _key(self) -> tuple:
        return (self.steps, self.fraction, self.probability, self.max_constants, self.damping, self.backend)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, ConstantOptimizer) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        chosen = (
            f"probability={self.probability}" if self.probability is not None else f"fraction={self.fraction}"
        )
        return (
            f"ConstantOptimizer(steps={self.steps}, {chosen}, max_constants={self.max_constants}, "
            f"damping={self.damping}{'' if self.backend == 'auto' else f', backend={self.backend!r}'})"
        )

    def batch_size(self, pop: int) -> int:
        """How many trees of a population of ``pop`` one call tunes (a static number)."""
        pop = check_int(pop, "pop", minimum=1)
        if self.probability is None:
            return min(pop, max(1, math.ceil(self.fraction * pop - 1e-9)))
        p = self.probability
        return min(pop, max(1, math.ceil(p * pop + 4.0 * math.sqrt(p * (1.0 - p) * pop))))

    def chosen(self, key: jax.Array, fitness: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``(index int32 [batch], tune bool [batch])``: the trees one call tunes (``tune`` False
        marks a padding entry of the probability mode, which is left unchanged)."""
        fitness = jnp.asarray(fitness)
        pop = fitness.shape[0]
        m = self.batch_size(pop)
        if self.probability is None:
            worst_last = jnp.where(jnp.isnan(fitness), jnp.inf, fitness)
            index = jnp.argsort(worst_last, stable=True)[:m]
            return index.astype(jnp.int32), jnp.ones(m, bool)
        k_pick, k_order = jax.random.split(key)
        picked = jax.random.uniform(k_pick, (pop,)) < self.probability
        # picked trees first, in random order: the batch takes a random subset if too many
        order = jnp.argsort(jnp.where(picked, 0.0, 1.0) + 0.5 * jax.random.uniform(k_order, (pop,)))
        index = order[:m].astype(jnp.int32)
        return index, picked[index]

    def __call__(
        self,
        key: jax.Array,
        forest: Any,
        fitness: Any,
        X: Any,
        y: Any,
        function_set: FunctionSet,
        linear_scaling: bool = True,
        loss_to_fitness: Callable[[jax.Array], jax.Array] | None = None,
        *,
        optimize: Callable | None = None,
    ) -> tuple[jax.Array, jax.Array]:
        opcode, value, size, output, single = forest_fields(forest)
        if single:
            raise ArgumentError("forest must be a population [pop, max_len], got one tree")
        fitness = jnp.asarray(fitness)
        if fitness.shape != opcode.shape[:1]:
            raise ArgumentError(f"fitness must have shape [pop] = {opcode.shape[:1]}, got {fitness.shape}")
        index, tune = self.chosen(key, fitness)
        batch = tuple(a[index] for a in (opcode, value, size, output))
        tuned, loss = (optimize_constants if optimize is None else optimize)(
            Forest(*batch),
            X,
            y,
            function_set,
            steps=self.steps,
            linear_scaling=linear_scaling,
            damping=self.damping,
            max_constants=self.max_constants,
            backend=self.backend,
        )
        new_fit = loss if loss_to_fitness is None else loss_to_fitness(loss)
        new_fit = jnp.asarray(new_fit).astype(fitness.dtype)
        # padding entries (tune False) write back what they read
        tuned = jnp.where(tune[:, None], tuned, batch[1])
        new_fit = jnp.where(tune, new_fit, fitness[index])
        return value.at[index].set(tuned), fitness.at[index].set(new_fit)
