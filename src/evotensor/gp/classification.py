"""GP classification: trees whose outputs are class scores, on scikit-learn's bundled data sets.

:class:`SymbolicClassification` is :class:`~evotensor.gp.SymbolicRegression` with class labels: the
metric is ``"cross_entropy"`` (smooth; the default, what evolution should climb) or ``"accuracy"``
(:mod:`evotensor.gp.metrics` defines both), and the number of tree outputs follows from the
number of classes:

* **two classes**: one output, read as a logit: class 1 when it is ``> 0``, the logistic loss for
  the cross-entropy (the sigmoid of the output is ``P(class 1)``);
* **k > 2 classes**: ``k`` outputs (multi-output Modi trees, as in the EvoGP paper), read as
  logits: the class is their argmax, the loss the softmax cross-entropy.

With ``logit_scaling=True`` (the default) every tree is scored through the per-output map ``slope_k *
f_k + intercept_k`` that minimizes its ridge-regularized training cross-entropy
(:mod:`evotensor.gp.logit_scaling`, the classification counterpart of linear scaling): a tree's score
then does not depend on the scale of its outputs, only on how well they separate the classes, and
:meth:`~SymbolicClassification.predict` (hence the accuracies, on any data) applies the map fitted on
the TRAINING rows.

:func:`classification_data` loads iris, wine, breast_cancer or digits with
``sklearn.datasets.load_*`` (they ship with scikit-learn; nothing is downloaded), splits them with a
seeded stratified split (:func:`evotensor.gp.data.train_test_split`) and standardizes every feature
with the *training* rows' mean and standard deviation. :func:`classification_problem` wraps that in
a problem with the test split attached.

The EvoGP paper (Wu et al. 2025, section VI) evaluates these four data sets with multi-output
trees, 40 generations (500 for digits) and populations of 200, 1000 and 5000, reporting test
accuracy (iris 0.979 / 0.990 / 0.993, breast cancer 0.955 / 0.968 / 0.982).

Example::

    problem = classification_problem("iris", seed=0)           # 3 classes: 3 outputs
    gp = GP(1000, problem.function_set, problem.n_vars, max_len=64, n_outputs=problem.n_outputs)
    ...
    problem.test_accuracy(best_forest)                          # [pop] test accuracy
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core.checks import ArgumentError, check_choice, check_int, check_real
from evotensor.core.evaluation import Evaluation
from evotensor.gp.data import train_test_split
from evotensor.gp.functions import FunctionSet
from evotensor.gp.logit_scaling import DEFAULT_RIDGE, fit_logit_scaling, scaled_logits
from evotensor.gp.metrics import metric_from_predictions
from evotensor.gp.regression import SymbolicRegression, per_case_errors
from evotensor.gp.selection import CaseErrors

__all__ = [
    "CLASSIFICATION_DATASETS",
    "CLASSIFICATION_FUNCTIONS",
    "ClassificationData",
    "SymbolicClassification",
    "classification_data",
    "classification_problem",
    "n_outputs_for",
]

CLASSIFICATION_DATASETS = ("iris", "wine", "breast_cancer", "digits")
"""The scikit-learn data sets :func:`classification_data` knows (``"breast-cancer"`` also works)."""

CLASSIFICATION_FUNCTIONS = ("add", "sub", "mul", "div")
"""The default function set of the classification problems, protected semantics (``div`` by a
near-zero number is 1, gplearn's rule): on standardized features, arithmetic over the features is
enough for linear and product decision boundaries, and no tree overflows into the worst loss."""


def n_outputs_for(n_classes: int) -> int:
    """Tree outputs for ``n_classes`` classes: 1 for two (a logit), ``n_classes`` otherwise."""
    n_classes = check_int(n_classes, "n_classes", minimum=2)
    return 1 if n_classes == 2 else n_classes


def _labels(y: Any, name: str) -> np.ndarray:
    labels = np.asarray(y)
    if labels.ndim != 1 or labels.shape[0] < 1:
        raise ArgumentError(f"{name} must be class labels [n_rows >= 1], got shape {labels.shape}")
    if labels.dtype.kind not in "biuf":
        raise ArgumentError(f"{name} must hold integer class labels 0..k-1, got dtype {labels.dtype}")
    ok = np.isfinite(labels) & (labels == np.round(labels)) & (labels >= 0)
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        raise ArgumentError(f"{name}[{i}] = {labels[i].item()!r} is not a class label (an integer >= 0)")
    return labels.astype(np.int64)


class SymbolicClassification(SymbolicRegression):
    """Classify with GP trees: :class:`~evotensor.gp.SymbolicRegression` on class labels.

    Args:
        X: ``[n_points, n_vars]`` training inputs.
        y: ``[n_points]`` integer class labels in ``0..n_classes-1``.
        function_set: default ``FunctionSet(CLASSIFICATION_FUNCTIONS, protected=True)``.
        metric: ``"cross_entropy"`` (default; minimized) or ``"accuracy"`` (maximized).
        n_classes: default ``max(label) + 1`` over ``y`` and ``y_test`` (at least 2). The trees have
            :func:`n_outputs_for` ``(n_classes)`` outputs (see the module docstring).
        X_test, y_test: optional held-out data (:meth:`test_evaluate`, :meth:`test_accuracy`).
        backend, case_errors: as in :class:`~evotensor.gp.SymbolicRegression` (per-case errors are
            each row's loss, or its 0/1 misclassification for ``"accuracy"``).
        logit_scaling: score and predict through each tree's fitted per-output map (see the module
            docstring); the fitness is then the minimized ridge-regularized cross-entropy (or the
            accuracy of the mapped logits). Default True.
        ridge: ``> 0``, the ridge weight of that fit (default
            :data:`evotensor.gp.logit_scaling.DEFAULT_RIDGE`).

    On many devices: :meth:`~evotensor.gp.SymbolicRegression.on_mesh` (inherited) splits the trees,
    and optionally the rows, over a mesh; accuracy and cross-entropy are sums over the rows, so a
    data axis adds the devices' partial sums.

    Attributes (besides :class:`~evotensor.gp.SymbolicRegression`'s):
        n_classes: the number of classes. logit_scaling, ridge: as given.
    """

    def __init__(
        self,
        X: Any,
        y: Any,
        function_set: FunctionSet | None = None,
        metric: str = "cross_entropy",
        n_classes: int | None = None,
        X_test: Any = None,
        y_test: Any = None,
        backend: str = "auto",
        case_errors: bool = False,
        logit_scaling: bool = True,
        ridge: float = DEFAULT_RIDGE,
    ):
        check_choice(metric, "metric", ("cross_entropy", "accuracy"))
        if not isinstance(logit_scaling, (bool, np.bool_)):
            raise ArgumentError(f"logit_scaling must be a bool, got {logit_scaling!r}")
        ridge = check_real(ridge, "ridge", 0.0, float("inf"), low_open=True, high_open=True)
        labels = _labels(y, "y")
        top = int(labels.max())
        if y_test is not None:
            top = max(top, int(_labels(y_test, "y_test").max()))
        if n_classes is None:
            n_classes = max(top + 1, 2)
        n_classes = check_int(n_classes, "n_classes", minimum=2)
        if top >= n_classes:
            raise ArgumentError(f"n_classes={n_classes} but the labels go up to {top}")
        fs = FunctionSet(CLASSIFICATION_FUNCTIONS, protected=True) if function_set is None else function_set
        super().__init__(
            X,
            labels.astype(np.float32),
            fs,
            metric=metric,
            n_outputs=n_outputs_for(n_classes),
            X_test=X_test,
            y_test=None if y_test is None else np.asarray(y_test, np.float32),
            backend=backend,
            case_errors=case_errors,
        )
        self.n_classes = n_classes
        self.logit_scaling = bool(logit_scaling)
        self.ridge = ridge

    def _raw(self, forest: Any, X: Any = None) -> jax.Array:
        """The trees' own outputs ``[pop, n, n_outputs]`` (``[n, n_outputs]`` for one tree)."""
        return SymbolicRegression.predict(self, forest, X)

    def _fit_scaling(self, train: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """:func:`fit_logit_scaling` of training outputs ``[pop, n, k]`` (or one tree's ``[n, k]``)."""
        single = train.ndim == 2
        slope, intercept, loss = fit_logit_scaling(
            train[None] if single else train, self.y, self.n_classes, ridge=self.ridge
        )
        return (slope[0], intercept[0], loss[0]) if single else (slope, intercept, loss)

    def scaling(self, forest: Any) -> tuple[jax.Array, jax.Array] | None:
        """With logit scaling: every tree's training ``(slope, intercept)``, float32 ``[pop,
        n_outputs]`` (``[n_outputs]`` for one tree; NaN for a tree with a non-finite output), the
        logits being ``slope * f + intercept`` (:mod:`evotensor.gp.logit_scaling`); ``None`` without."""
        if not self.logit_scaling:
            return None
        slope, intercept, _ = self._fit_scaling(self._raw(forest))
        return slope, intercept

    def expression(self, tree: Any, kind: str = "string", precision: int = 4, simplify: bool = True) -> Any:
        """One tree's model as a user reads it: its outputs and, with logit scaling, the training
        map ``slope_k * out[k] + intercept_k`` that turns them into the class scores.

        Args:
            tree: a Forest and index ``0`` (``forest[i]`` or a one-tree forest).
            kind: ``"string"``: the tree's infix (``precision`` significant digits; Modi nodes as
                ``out[k]=<expr>`` for several outputs) followed by ``"; scaled: a*out[0] + b, ..."``
                with logit scaling; ``"sympy"``: a tuple of ``n_outputs`` sympy expressions, the
                class scores (:func:`evotensor.gp.export.to_sympy` of each output, mapped),
                simplified unless ``simplify=False``.
        """
        from evotensor.gp import export

        check_choice(kind, "kind", ("string", "sympy"))
        ab = self.scaling(tree)
        maps = (
            None
            if ab is None
            else [(float(a), float(b)) for a, b in zip(np.ravel(ab[0]), np.ravel(ab[1]), strict=True)]
        )
        if kind == "string":
            text = export.to_string(tree, self.function_set, precision=precision)
            if maps is None:
                return text
            return (
                text
                + "; scaled: "
                + ", ".join(
                    f"{a:.{precision}g}*out[{k}] {'-' if b < 0 else '+'} {abs(b):.{precision}g}"
                    for k, (a, b) in enumerate(maps)
                )
            )
        import sympy as sp

        scores = []
        for k in range(self.n_outputs):
            f = export.to_sympy(
                tree, self.function_set, output=k, n_outputs=self.n_outputs, simplify=simplify
            )
            if maps is not None:
                f = sp.Float(maps[k][0], precision + 2) * f + sp.Float(maps[k][1], precision + 2)
            scores.append(f)
        return tuple(scores)

    def predict(self, forest: Any, X: Any = None) -> jax.Array:
        """The logits ``[pop, n_points, n_outputs]`` (``[n_points, n_outputs]`` for one tree) on ``X``
        (default: the training inputs): the trees' outputs, with logit scaling mapped by the
        ``slope, intercept`` fitted on the TRAINING rows."""
        X = self.X if X is None else X
        pred = self._raw(forest, X)
        if not self.logit_scaling:
            return pred
        train = pred if X is self.X else self._raw(forest)
        slope, intercept, _ = self._fit_scaling(train)
        return scaled_logits(pred, slope, intercept)

    def _score(self, forest: Any, X: jax.Array, y: jax.Array, with_cases: bool = False) -> Any:
        if not self.logit_scaling:
            return super()._score(forest, X, y, with_cases)
        train = self._raw(forest)
        slope, intercept, loss = self._fit_scaling(train)
        pred = scaled_logits(train if X is self.X else self._raw(forest, X), slope, intercept)
        if X is self.X and self.metric == "cross_entropy":
            fit = loss  # what the scaling minimized: the cross-entropy plus the ridge term
        else:
            fit = metric_from_predictions(pred, y, self.metric)
        if not with_cases:
            return Evaluation(fitness=fit)
        return Evaluation(fitness=fit, info=CaseErrors(case_errors=per_case_errors(pred, y, self.metric)))

    def predict_proba(self, forest: Any, X: Any = None) -> jax.Array:
        """Class probabilities ``[pop, n_points, n_classes]`` on ``X`` (default: the training
        inputs): the sigmoid of the one output for two classes, the softmax of the outputs otherwise."""
        logits = self.predict(forest, X)
        if self.n_outputs == 1:
            p1 = jax.nn.sigmoid(logits[..., 0])
            return jnp.stack([1.0 - p1, p1], axis=-1)
        return jax.nn.softmax(logits, axis=-1)

    def predict_class(self, forest: Any, X: Any = None) -> jax.Array:
        """Predicted labels, int32 ``[pop, n_points]`` (the metrics' rule: ``output > 0`` for two
        classes, the argmax otherwise)."""
        logits = self.predict(forest, X)
        if self.n_outputs == 1:
            return (logits[..., 0] > 0).astype(jnp.int32)
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)

    def accuracy(self, forest: Any, X: Any = None, y: Any = None) -> jax.Array:
        """Accuracy ``[pop]`` (a scalar for a single tree) on ``(X, y)`` (default: the training
        data); a tree with a non-finite output on any row gets ``-inf``, as in the fitness."""
        if (X is None) != (y is None):
            raise ArgumentError("give both X and y, or neither (the training data)")
        X, y = (self.X, self.y) if X is None else (X, y)
        pred = self.predict(forest, X)
        single = pred.ndim == 2  # one tree: [n_points, n_outputs]
        acc = metric_from_predictions(pred[None] if single else pred, y, "accuracy")
        return acc[0] if single else acc

    def test_accuracy(self, forest: Any) -> jax.Array:
        """Accuracy ``[pop]`` on the held-out data."""
        if self.X_test is None:
            raise ValueError("this problem has no test data (pass X_test and y_test)")
        return self.accuracy(forest, self.X_test, self.y_test)


@dataclasses.dataclass(frozen=True)
class ClassificationData:
    """What :func:`classification_data` knows about its split besides the arrays.

    Attributes:
        name: the data set (a name of :data:`CLASSIFICATION_DATASETS`).
        n_classes: number of classes; class_names: their names (scikit-learn's ``target_names``).
        feature_names: the columns' names (scikit-learn's; digits: ``pixel_r_c``).
        mean, std: float32 ``[n_features]``, the training rows' statistics the features were
            standardized with (a constant training column gets ``std = 1``).
        seed, test_fraction: the split.
    """

    name: str
    n_classes: int
    class_names: tuple[str, ...]
    feature_names: tuple[str, ...]
    mean: np.ndarray
    std: np.ndarray
    seed: int
    test_fraction: float


def _dataset_name(name: Any) -> str:
    key = name.lower().replace("-", "_") if isinstance(name, str) else name
    if key not in CLASSIFICATION_DATASETS:
        raise ArgumentError(f"name must be one of {CLASSIFICATION_DATASETS}, got {name!r}")
    return key


def classification_data(
    name: str, seed: int = 0, test_fraction: float = 0.25
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, ClassificationData]:
    """A scikit-learn data set, split and standardized.

    Args:
        name: ``"iris"`` (150 rows, 4 features, 3 classes), ``"wine"`` (178, 13, 3),
            ``"breast_cancer"`` (569, 30, 2) or ``"digits"`` (1797, 64, 10); ``"breast-cancer"``
            and any case work too.
        seed: int ``>= 0``, the stratified split's seed (:func:`evotensor.gp.data.train_test_split`).
        test_fraction: in ``(0, 1)``, default 0.25.

    Returns:
        ``X_train`` float32 ``[n_train, d]``, ``y_train`` int32 ``[n_train]``, ``X_test``, ``y_test``,
        and a :class:`ClassificationData`. Each feature is standardized with the training rows'
        mean and standard deviation, so no test statistic leaks into training.
    """
    key = _dataset_name(name)
    seed = check_int(seed, "seed", minimum=0)
    test_fraction = check_real(test_fraction, "test_fraction", 0.0, 1.0, low_open=True, high_open=True)
    import sklearn.datasets

    bunch = getattr(sklearn.datasets, f"load_{key}")()
    X = np.asarray(bunch.data, np.float64)
    y = np.asarray(bunch.target, np.int32)
    X_train, y_train, X_test, y_test = train_test_split(X, y, test_fraction, seed, stratify=True)
    mean = X_train.mean(axis=0)
    std = X_train.std(axis=0)
    std = np.where(std > 0, std, 1.0)  # a constant column (digits' border pixels) stays constant: 0
    if "feature_names" in bunch:
        features = tuple(str(f) for f in bunch.feature_names)
    else:
        features = tuple(f"x{j}" for j in range(X.shape[1]))
    meta = ClassificationData(
        name=key,
        n_classes=int(len(bunch.target_names)),
        class_names=tuple(str(c) for c in bunch.target_names),
        feature_names=features,
        mean=mean.astype(np.float32),
        std=std.astype(np.float32),
        seed=seed,
        test_fraction=test_fraction,
    )
    scale = lambda a: ((a - mean) / std).astype(np.float32)  # noqa: E731
    return scale(X_train), y_train, scale(X_test), y_test, meta


def classification_problem(
    name: str,
    seed: int = 0,
    test_fraction: float = 0.25,
    *,
    function_set: FunctionSet | None = None,
    metric: str = "cross_entropy",
    backend: str = "auto",
    case_errors: bool = False,
    logit_scaling: bool = True,
    ridge: float = DEFAULT_RIDGE,
) -> SymbolicClassification:
    """A :class:`SymbolicClassification` on :func:`classification_data` ``(name, seed,
    test_fraction)``'s training split, with its test split attached; the
    :class:`ClassificationData` is the problem's ``data`` attribute."""
    X_train, y_train, X_test, y_test, meta = classification_data(name, seed, test_fraction)
    problem = SymbolicClassification(
        X_train,
        y_train,
        function_set,
        metric=metric,
        n_classes=meta.n_classes,
        X_test=X_test,
        y_test=y_test,
        backend=backend,
        case_errors=case_errors,
        logit_scaling=logit_scaling,
        ridge=ridge,
    )
    problem.data = meta
    return problem
