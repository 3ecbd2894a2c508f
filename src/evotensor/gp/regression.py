"""Symbolic-regression problems scored on GP forests.

:class:`SymbolicRegression` wraps a data set ``(X, y)`` and a metric. It is a *function problem*
(:mod:`evotensor.core.problem`): its :meth:`~SymbolicRegression.evaluate` takes the GP genotype
itself, a :class:`evotensor.gp.Forest` ``[pop, max_len]`` (GP has no decoding step: trees are run
on the data directly, by the fused evaluator), and returns the fitness of
:func:`evotensor.gp.fitness`, in natural orientation (``mse``/``rmse``/``cross_entropy`` minimized,
``r2``/``accuracy`` maximized). A tree with a non-finite prediction gets ``+inf`` (or ``-inf`` for
maximized metrics); the run loop maps that to the worst finite value.

With ``case_errors=True`` the evaluation also carries per-case (per-row) errors for lexicase
selection (``GP(selection="lexicase")``) as ``Evaluation.info``, a
:class:`~evotensor.gp.selection.CaseErrors` whose field ``case_errors`` is ``[pop, n_points]``, lower
is better (:func:`per_case_errors`): the squared error averaged over outputs for the regression
metrics, the 0/1 misclassification for ``accuracy``, the row's loss for ``cross_entropy``; ``+inf``
on a row with a non-finite prediction. This materializes ``[pop, n_points, n_outputs]`` predictions
(one forward pass; the fitness is then computed from them, equal to the fused fitness up to float32
summation order), so it is off by default.

:class:`Pagie1` is the Pagie-1 benchmark (Pagie & Hogeweg 1997; McDermott et al. 2012)::

    f(x, y) = 1 / (1 + x**-4) + 1 / (1 + y**-4)

on the 26 x 26 = 676-point grid ``x, y in {-5, -4.6, ..., 5}`` (step 0.4; 0 is not on the grid, so
the target is finite everywhere), training MSE as fitness.

On many devices, :meth:`SymbolicRegression.on_mesh` (called by ``evotensor.run(..., mesh=)``) runs the
evaluator on each device's slice of the forest, and optionally of the rows
(:mod:`evotensor.gp.sharding`).

These lived in ``evotensor.problems.regression`` before; that path still works for one release,
with a ``DeprecationWarning``.

Example::

    problem = Pagie1()
    forest = Forest.from_tuples([("add", ("var", 0), ("var", 1))], 16, problem.function_set)
    problem.evaluate(key, forest).fitness      # [1] training MSE
"""

from __future__ import annotations

import copy
import functools
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core.checks import ArgumentError, check_choice, check_int
from evotensor.core.evaluation import Evaluation
from evotensor.gp import scaling
from evotensor.gp.constants import ConstantOptimizer, optimize_constants
from evotensor.gp.constants import choose_backend as constants_backend
from evotensor.gp.encoding import Forest
from evotensor.gp.evaluate import BACKENDS, SCALED_METRICS, evaluate, fitness, scaling_coefficients
from evotensor.gp.functions import FunctionSet
from evotensor.gp.metrics import (
    MAXIMIZED_METRICS,
    METRICS,
    check_finite_data,
    check_function_set,
    check_X,
    check_y,
    finalize_metric,
    forest_fields,
    metric_from_predictions,
    row_terms,
    total_sum_of_squares,
)
from evotensor.gp.selection import CaseErrors
from evotensor.gp.sharding import (
    ForestMesh,
    evaluate_on_mesh,
    fitness_on_mesh,
    optimize_on_mesh,
    tune_on_mesh,
)

__all__ = ["EVOGP_SR_FUNCTIONS", "Pagie1", "SymbolicRegression", "pagie1_data", "per_case_errors"]

# EvoGP's function set for symbolic regression (paper Table V; its uci_sr.py example).
EVOGP_SR_FUNCTIONS = ("add", "sub", "mul", "div", "sin", "cos", "tan")


def _no_apply(apply: Any, method: str) -> None:
    # Until this release the problem declared itself a policy problem and took (and ignored) an
    # apply function; callers that still pass one keep working for one release.
    if apply is not None:
        warnings.warn(
            f"SymbolicRegression.{method}() ignores apply: it is a function problem over forests "
            "(trees run on the data directly); the apply argument will be removed",
            DeprecationWarning,
            stacklevel=3,
        )


class SymbolicRegression:
    """Fit ``y`` from ``X`` with GP trees: a function problem over forests.

    Args:
        X: ``[n_points, n_vars]`` training inputs.
        y: ``[n_points]`` (or ``[n_points, n_outputs]``) targets; class labels ``[n_points]`` for
            ``metric="accuracy"`` / ``"cross_entropy"``.
        function_set: the :class:`FunctionSet` the trees are written in.
        metric: ``"mse" | "rmse" | "r2" | "accuracy" | "cross_entropy"``.
        n_outputs: outputs per tree (inferred from ``y`` for regression; default 1 otherwise).
        X_test, y_test: optional held-out data for :meth:`test_evaluate`.

    NaN or inf anywhere in ``X``, ``y``, ``X_test`` or ``y_test`` is refused here
    (:class:`~evotensor.core.checks.ArgumentError` naming the row and column): it would make every
    tree's fitness the worst value. A GP run on this problem must have ``GP(n_vars=...)`` equal to
    ``X``'s columns and ``GP(n_outputs=...)`` equal to the problem's outputs (checked when the run
    traces its evaluation).
        backend: evaluation path, one of :data:`evotensor.gp.evaluate.BACKENDS` (``"auto"``,
            ``"jax"``, ``"native"``, ``"pallas"``; see :func:`evotensor.gp.evaluate`).
        case_errors: also return per-row errors, ``info=CaseErrors(case_errors=[pop, n_points])``
            (for lexicase selection; see the module docstring). Default False.
        linear_scaling: score every tree as ``a * f + b`` with the least-squares ``a, b`` on the
            training data (:mod:`evotensor.gp.scaling`, in the same fused pass). Default: on for the
            regression metrics (``mse``, ``rmse``, ``r2``), off (and refused) for classification.
            :meth:`predict`, :meth:`test_evaluate` and :meth:`expression` apply the TRAINING ``a, b``.
        constant_optimization: a :class:`~evotensor.gp.constants.ConstantOptimizer` (or ``None``, the
            default): every :meth:`evaluate` tunes the constants of the trees it chooses (the best
            fraction, or at random) by Levenberg-Marquardt on the training data, scores the tuned
            forest with the evaluator and returns it as ``Evaluation.genotypes``, so
            :func:`evotensor.run` tells the GP the tuned trees (Lamarckian). Regression metrics and one
            output only.
        refine_top: with linear scaling, re-score the ``refine_top`` best trees of every
            :meth:`evaluate` from their materialized predictions
            (:func:`evotensor.gp.scaling.refined_scaled_sse`): the fused closed form cannot rank trees
            below R² ``1 - 4.8e-7`` (its float32 floor), so an exact tree ties there with the many
            near-misses; refined, it scores ~1000x lower than a tree off by ``1e-4``. Costs one
            evaluation of ``refine_top`` trees. Default 0 (off). Ignored without linear scaling (the
            fused error is then a direct residual sum, with no such floor); refused on a mesh.

    Attributes:
        X, y: the training data (float32 device arrays). ``maximize``: natural orientation.
        n_vars, n_outputs: what a tree reads and returns.

    On many devices: :meth:`on_mesh` (called by ``evotensor.run(..., mesh=)``) splits the population
    over a mesh axis and, optionally, the training rows over another (:mod:`evotensor.gp.sharding`).
    """

    kind = "function"
    _mesh_layout: ForestMesh | None = None  # set on the copy on_mesh returns

    def __init__(
        self,
        X: Any,
        y: Any,
        function_set: FunctionSet,
        metric: str = "mse",
        n_outputs: int | None = None,
        X_test: Any = None,
        y_test: Any = None,
        backend: str = "auto",
        case_errors: bool = False,
        linear_scaling: bool | None = None,
        constant_optimization: ConstantOptimizer | None = None,
        refine_top: int = 0,
    ):
        refine_top = check_int(refine_top, "refine_top", minimum=0)
        if not isinstance(case_errors, (bool, np.bool_)):
            raise ArgumentError(f"case_errors must be a bool, got {case_errors!r}")
        check_choice(metric, "metric", METRICS)
        if linear_scaling is None:
            linear_scaling = metric in SCALED_METRICS
        if not isinstance(linear_scaling, (bool, np.bool_)):
            raise ArgumentError(f"linear_scaling must be a bool or None, got {linear_scaling!r}")
        if linear_scaling and metric not in SCALED_METRICS:
            raise ArgumentError(
                f"linear_scaling applies to the regression metrics {SCALED_METRICS}, not metric={metric!r}"
            )
        check_choice(backend, "backend", BACKENDS)
        check_function_set(function_set)
        X = check_X(X)
        _, self.n_outputs = check_y(y, X.shape[0], metric, n_outputs)
        y = jnp.asarray(y, jnp.float32)
        check_finite_data(X, "X")
        check_finite_data(y, "y")
        if (X_test is None) != (y_test is None):
            raise ArgumentError("give both X_test and y_test, or neither")
        if X_test is not None:
            X_test = jnp.asarray(X_test, jnp.float32)
            y_test = jnp.asarray(y_test, jnp.float32)
            if (
                X_test.ndim != 2
                or X_test.shape[0] < 1
                or X_test.shape[1] != X.shape[1]
                or y_test.shape != (X_test.shape[0], *y.shape[1:])
            ):
                raise ArgumentError(
                    f"X_test/y_test shapes {X_test.shape}/{y_test.shape} do not match X/y {X.shape}/{y.shape}"
                )
            check_y(y_test, X_test.shape[0], metric, self.n_outputs)
            check_finite_data(X_test, "X_test")
            check_finite_data(y_test, "y_test")
        self.function_set = function_set
        self.metric = metric
        self.maximize = metric in MAXIMIZED_METRICS
        self.backend = backend
        self.case_errors = bool(case_errors)
        self.linear_scaling = bool(linear_scaling)
        if constant_optimization is not None:
            if not isinstance(constant_optimization, ConstantOptimizer):
                raise ArgumentError(
                    "constant_optimization must be an evotensor.gp.ConstantOptimizer or None, got "
                    f"{constant_optimization!r}"
                )
            if metric not in SCALED_METRICS or self.n_outputs != 1:
                raise ArgumentError(
                    "constant_optimization tunes single-output regression trees (metric in "
                    f"{SCALED_METRICS}, one output); got metric={metric!r} with {self.n_outputs} output(s)"
                )
        self.constant_optimization = constant_optimization
        self.refine_top = refine_top
        self.X, self.y = X, y
        self.X_test, self.y_test = X_test, y_test
        self.n_vars = X.shape[1]

    def on_mesh(self, mesh: Any, axis: str = "pop", data_axis: str | None = None) -> SymbolicRegression:
        """This problem with its training evaluation split over ``mesh`` (see
        :mod:`evotensor.gp.sharding`): a copy whose :meth:`evaluate` runs the backend on each device's
        slice of the forest (population axis ``axis``) inside ``shard_map`` and returns the ``[pop]``
        fitness replicated; constant optimization splits its chosen trees the same way and returns
        the tuned forest population-sharded. Bit-identical to one device without a data axis.

        Args:
            mesh: a ``jax.sharding.Mesh``.
            axis: the mesh axis the trees are split along (default ``"pop"``).
            data_axis: another mesh axis to split the training rows along (each device evaluates its
                trees on its rows; partial sums are added with ``psum``; equal to one device to
                float32 summation order). Default: none, except that a problem already placed with a
                data axis keeps it when placed again on a mesh that has that axis, so
                ``evotensor.run(gp, problem.on_mesh(mesh, data_axis="data"), ..., mesh=mesh)`` keeps
                the rows split. Constant optimization with a data axis needs the native
                linearization (a CPU).

        Raises:
            ArgumentError: an axis the mesh lacks, ``data_axis == axis``, fewer training rows than
                devices along ``data_axis``, constant optimization on a data axis without the native
                linearization, ``refine_top`` (not on a mesh yet).

        :meth:`predict` on the training inputs (per-case errors use it) runs on the mesh too; on
        other data, and :meth:`test_evaluate`, :meth:`scaling` and :meth:`expression`, it is the
        single-device evaluation (they report on any data).
        """
        previous = self._mesh_layout
        names = tuple(getattr(mesh, "axis_names", ()))
        if (
            data_axis is None
            and previous is not None
            and previous.data_axis in names
            and previous.data_axis != axis
        ):
            data_axis = previous.data_axis
        if self.refine_top:  # refusing beats silently scoring without it
            raise ArgumentError(
                f"refine_top={self.refine_top} is not supported on a mesh yet (the refined re-scoring "
                "runs on one device): use refine_top=0 with a mesh"
            )
        layout = ForestMesh.of(mesh, axis, data_axis)
        if layout.data_axis is not None:
            layout.rows(self.X.shape[0])
            if self.constant_optimization is not None:
                path = constants_backend(self.constant_optimization.backend, self.function_set)
                if path != "native":
                    raise ArgumentError(
                        f"data_axis={data_axis!r}: constant optimization with the rows split over devices "
                        f"needs the native linearization, but this problem's resolves to {path!r}; "
                        "place it without a data axis"
                    )
        placed = copy.copy(self)
        placed._mesh_layout = layout
        return placed

    def _layout_for(self, X: Any) -> ForestMesh | None:
        """The mesh layout when ``X`` is the training data of a problem placed on a mesh."""
        return self._mesh_layout if X is self.X else None

    def _score(self, forest: Any, X: jax.Array, y: jax.Array, with_cases: bool = False) -> Evaluation:
        if not with_cases and (not self.linear_scaling or X is self.X):
            # on a mesh (training data only) the same fused fitness, with the trees split over devices
            layout = self._layout_for(X)
            score = fitness if layout is None else functools.partial(fitness_on_mesh, layout)
            fit = score(
                forest,
                X,
                y,
                self.function_set,
                self.metric,
                self.n_outputs,
                backend=self.backend,
                linear_scaling=self.linear_scaling,
            )
            return Evaluation(fitness=fit)
        pred = self.predict(forest, X)
        fit = metric_from_predictions(pred, y, self.metric)
        if not with_cases:
            return Evaluation(fitness=fit)
        return Evaluation(fitness=fit, info=CaseErrors(case_errors=per_case_errors(pred, y, self.metric)))

    def scaling(self, forest: Any) -> tuple[jax.Array, jax.Array] | None:
        """The training-data slope and intercept of every tree, ``(a, b)`` float32 ``[pop,
        n_outputs]`` (``[n_outputs]`` for one tree; NaN for a tree with a non-finite prediction), or
        ``None`` without linear scaling."""
        if not self.linear_scaling:
            return None
        return scaling_coefficients(
            forest, self.X, self.y, self.function_set, self.n_outputs, backend=self.backend
        )

    def evaluate(self, key: jax.Array, genotypes: Any, apply: Any = None) -> Evaluation:
        """Training fitness of a forest ``[pop, max_len]`` -> ``Evaluation(fitness [pop])``, with
        ``info = CaseErrors(case_errors=[pop, n_points])`` when built with ``case_errors=True``.

        ``key`` is unused (the data are fixed). ``apply`` is deprecated and ignored (this is a
        function problem; passing one warns).
        """
        _no_apply(apply, "evaluate")
        if self.constant_optimization is None:
            return self._refined(genotypes, self._score(genotypes, self.X, self.y, self.case_errors))
        if key is None:
            raise ArgumentError("key must be a JAX key when the problem has constant_optimization")
        fit = self._score(genotypes, self.X, self.y).fitness
        tuned = self._tuned(key, genotypes, -fit if self.maximize else fit)
        scored = self._score(tuned, self.X, self.y, self.case_errors).replace(genotypes=tuned)
        return self._refined(tuned, scored)

    def _refined(self, forest: Any, evaluation: Evaluation) -> Evaluation:
        """``evaluation`` with the fitness of the ``refine_top`` best trees recomputed by
        :func:`~evotensor.gp.scaling.refined_scaled_sse` (see ``refine_top``)."""
        fit = evaluation.fitness
        if not self.refine_top or not self.linear_scaling or fit.ndim != 1:
            return evaluation
        k = min(self.refine_top, fit.shape[0])
        minimized = jnp.where(jnp.isfinite(fit), -fit if self.maximize else fit, jnp.inf)
        _, top = jax.lax.top_k(-minimized, k)
        sub = jax.tree_util.tree_map(lambda a: a[top], forest)
        pred = evaluate(sub, self.X, self.function_set, self.n_outputs, backend=self.backend)
        yt = self.y.reshape(self.y.shape[0], -1).T
        sse = scaling.refined_scaled_sse(pred, yt)
        bad = jnp.where(jnp.isfinite(sse), 0.0, 1.0)
        value = finalize_metric(
            jnp.nan_to_num(sse), bad, self.metric, self.X.shape[0], self.n_outputs, total_sum_of_squares(yt)
        )
        # a tree the fused pass found non-finite stays so (the two agree but for rounding at overflow)
        value = jnp.where(jnp.isfinite(fit[top]), value, fit[top])
        return evaluation.replace(fitness=fit.at[top].set(value))

    def _tuned(self, key: jax.Array, forest: Any, minimized: jax.Array) -> Forest:
        layout = self._mesh_layout
        if layout is not None and layout.tree_shards > 1 and layout.data_axis is None:
            # choose, tune and write back per device: a few collectives (see tune_on_mesh)
            return tune_on_mesh(
                layout,
                self.constant_optimization,
                key,
                Forest(*forest_fields(forest)[:4]),
                minimized,
                self.X,
                self.y,
                self.function_set,
                linear_scaling=self.linear_scaling,
            )
        opcode, _, size, output, _ = forest_fields(forest)
        value, _ = self.constant_optimization(
            key,
            forest,
            minimized,
            self.X,
            self.y,
            self.function_set,
            linear_scaling=self.linear_scaling,
            optimize=None if layout is None else optimize_on_mesh(layout),
        )
        return Forest(opcode, value, size, output)

    def tune_constants(self, forest: Any, steps: int = 50) -> Forest:
        """Every tree of ``forest`` ``[pop, max_len]`` with its constants tuned by Levenberg-Marquardt
        on the training data (``steps`` iterations; scaled if the problem scales): how a reported
        model or front is polished before it is shown, whatever ``constant_optimization`` is."""
        if self.metric not in SCALED_METRICS or self.n_outputs != 1:
            raise ArgumentError("tune_constants tunes single-output regression trees")
        opcode, _, size, output, single = forest_fields(forest)
        if single:
            raise ArgumentError("forest must be a population [pop, max_len]; index with forest[i:i+1]")
        value, _ = optimize_constants(
            forest, self.X, self.y, self.function_set, steps=steps, linear_scaling=self.linear_scaling
        )
        return Forest(opcode, value, size, output)

    def test_evaluate(self, genotypes: Any, apply: Any = None) -> Evaluation:
        """The same metric on the held-out data: ``Evaluation(fitness [pop])``."""
        _no_apply(apply, "test_evaluate")
        if self.X_test is None:
            raise ValueError("this problem has no test data (pass X_test and y_test)")
        return self._score(genotypes, self.X_test, self.y_test)

    def predict(self, forest: Any, X: Any = None) -> jax.Array:
        """Predictions ``[pop, n_points, n_outputs]`` (``[n_points, n_outputs]`` for one tree) on ``X
        [n_points, n_vars]`` (default: the training inputs); with linear scaling, the scaled model
        ``a * f + b`` with the training ``a, b``."""
        X = self.X if X is None else X
        layout = self._layout_for(X)
        if layout is None:
            pred = evaluate(forest, X, self.function_set, self.n_outputs, backend=self.backend)
        else:
            pred = evaluate_on_mesh(
                layout, forest, X, self.function_set, self.n_outputs, backend=self.backend
            )
        if not self.linear_scaling:
            return pred
        if X is self.X:  # the moments of the predictions already made
            _, yct, _ = scaling.centered_targets(self.y.reshape(self.y.shape[0], -1).T)
            batch = pred if pred.ndim == 3 else pred[None]
            moments, bad = scaling.moments_from_predictions(batch, yct)
            a, b = scaling.coefficients(moments, jnp.mean(self.y.reshape(self.y.shape[0], -1), 0), X.shape[0])
            a, b = (jnp.where((bad == 0)[:, None], v, jnp.nan) for v in (a, b))
            a, b = (a, b) if pred.ndim == 3 else (a[0], b[0])
        else:
            a, b = self.scaling(forest)
        return pred * a[..., None, :] + b[..., None, :]

    def expression(self, tree: Any, kind: str = "string", precision: int = 4, simplify: bool = True) -> Any:
        """One tree's model as a user reads it: ``a * f + b`` with the training ``a, b`` when the
        problem scales (``f`` alone otherwise).

        Args:
            tree: a Forest and index ``0`` (``forest[i]`` or a one-tree forest); single output.
            kind: ``"string"`` (infix, ``precision`` significant digits) or ``"sympy"`` (faithful to
                the evaluator, simplified unless ``simplify=False``; see
                :func:`evotensor.gp.export.to_sympy`).
        """
        from evotensor.gp import export

        check_choice(kind, "kind", ("string", "sympy"))
        if self.n_outputs != 1:
            raise ArgumentError(f"expression() shows single-output models; this problem has {self.n_outputs}")
        ab = self.scaling(tree)
        a, b = (None, None) if ab is None else (float(np.ravel(ab[0])[0]), float(np.ravel(ab[1])[0]))
        if kind == "sympy":
            f = export.to_sympy(tree, self.function_set, simplify=simplify)
            if a is None:
                return f
            import sympy as sp

            expr = sp.Float(a, precision + 2) * f + sp.Float(b, precision + 2)
            return sp.expand(expr) if simplify else expr
        f = export.to_string(tree, self.function_set, precision=precision)
        if a is None:
            return f
        return f"{a:.{precision}g} * ({f}) {'-' if b < 0 else '+'} {abs(b):.{precision}g}"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(n_points={self.X.shape[0]}, n_vars={self.n_vars}, "
            f"metric={self.metric!r}, function_set={self.function_set!r})"
        )


def per_case_errors(pred: Any, y: Any, metric: str = "mse") -> jax.Array:
    """Per-row errors of predictions, lower is better (the cases of lexicase selection).

    Args:
        pred: ``[pop, n_points, n_outputs]`` predictions (e.g. from :func:`evotensor.gp.evaluate`).
        y: ``[n_points]`` / ``[n_points, n_outputs]`` targets, or ``[n_points]`` class labels.
        metric: ``"mse" | "rmse" | "r2"``: squared error averaged over outputs; ``"accuracy"``: 1 for a
            misclassified row, else 0; ``"cross_entropy"``: the row's loss (as
            :mod:`evotensor.gp.metrics` defines them).

    Returns:
        float32 ``[pop, n_points]``; ``+inf`` where a prediction of the row is non-finite.
    """
    check_choice(metric, "metric", METRICS)
    pred = jnp.asarray(pred, jnp.float32)
    if pred.ndim != 3:
        raise ArgumentError(f"pred must be [pop, n_points, n_outputs], got shape {pred.shape}")
    y = jnp.asarray(y, jnp.float32)
    if y.shape[0] != pred.shape[1]:
        raise ArgumentError(f"y must have {pred.shape[1]} rows (pred's n_points), got shape {y.shape}")
    yt = y.reshape(y.shape[0], -1).T  # [n_y, n_points]
    term, bad = row_terms(jnp.moveaxis(pred, 2, 0), yt, metric)  # each [pop, n_points]
    if metric == "accuracy":
        err = 1.0 - term
    elif metric == "cross_entropy":
        err = term
    else:
        err = term / pred.shape[2]
    return jnp.where((bad > 0) | ~jnp.isfinite(err), jnp.inf, err).astype(jnp.float32)


def pagie1_data() -> tuple[np.ndarray, np.ndarray]:
    """The Pagie-1 grid: ``X [676, 2]`` (x, y in -5..5 step 0.4) and ``y [676]`` (float32)."""
    axis = np.round(np.arange(26) * 0.4 - 5.0, 6)  # exact grid values, no float drift
    gx, gy = np.meshgrid(axis, axis, indexing="ij")
    X = np.stack([gx.ravel(), gy.ravel()], axis=1)
    y = 1.0 / (1.0 + X[:, 0] ** -4) + 1.0 / (1.0 + X[:, 1] ** -4)
    return X.astype(np.float32), y.astype(np.float32)


class Pagie1(SymbolicRegression):
    """Pagie-1 on its 676-point grid (see the module docstring).

    Args:
        function_set: default :data:`EVOGP_SR_FUNCTIONS` (``+ - * / sin cos tan``, raw semantics).
        metric: default ``"mse"`` (the EvoGP paper's measure).
        backend, case_errors, linear_scaling, constant_optimization: as in :class:`SymbolicRegression`.

    Attributes:
        true_expression: the target in infix, for printing beside a discovered expression.
    """

    true_expression = "1/(1 + x0**-4) + 1/(1 + x1**-4)"

    def __init__(
        self,
        function_set: FunctionSet | None = None,
        metric: str = "mse",
        backend: str = "auto",
        case_errors: bool = False,
        linear_scaling: bool | None = None,
        constant_optimization: ConstantOptimizer | None = None,
    ):
        X, y = pagie1_data()
        fs = FunctionSet(EVOGP_SR_FUNCTIONS) if function_set is None else function_set
        super().__init__(
            X,
            y,
            fs,
            metric=metric,
            backend=backend,
            case_errors=case_errors,
            linear_scaling=linear_scaling,
            constant_optimization=constant_optimization,
        )
