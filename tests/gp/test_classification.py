"""GP classification: scikit-learn data sets split and standardized, SymbolicClassification scored
against a slow NumPy reference (gp/classification.py)."""

from __future__ import annotations

import jax
import numpy as np
import pytest
import sklearn.datasets

from evotensor.core.checks import ArgumentError
from evotensor.gp import Forest, FunctionSet, evaluate, generate, reference_eval
from evotensor.gp.classification import (
    CLASSIFICATION_DATASETS,
    SymbolicClassification,
    classification_data,
    classification_problem,
    n_outputs_for,
)
from evotensor.gp.data import train_test_split
from evotensor.gp.logit_scaling import fit_logit_scaling

SHAPES = {"iris": (150, 4, 3), "wine": (178, 13, 3), "breast_cancer": (569, 30, 2), "digits": (1797, 64, 10)}


@pytest.mark.parametrize("name", CLASSIFICATION_DATASETS)
def test_data_is_split_stratified_and_standardized_with_training_statistics_only(name):
    n, d, k = SHAPES[name]
    X_train, y_train, X_test, y_test, meta = classification_data(name, seed=3)
    n_test = int(np.ceil(0.25 * n))
    assert X_train.shape == (n - n_test, d) and X_test.shape == (n_test, d)
    assert X_train.dtype == np.float32 and y_train.dtype == np.int32
    assert meta.n_classes == k and len(meta.class_names) == k and len(meta.feature_names) == d
    # the same rows as the documented split of the raw data, scaled by the TRAINING rows' statistics
    bunch = getattr(sklearn.datasets, f"load_{name}")()
    raw_train, yr_train, raw_test, yr_test = train_test_split(
        bunch.data, bunch.target, 0.25, 3, stratify=True
    )
    np.testing.assert_array_equal(y_train, yr_train)
    np.testing.assert_array_equal(y_test, yr_test)
    mean, std = raw_train.mean(0), raw_train.std(0)
    np.testing.assert_allclose(meta.mean, mean, rtol=1e-6)
    np.testing.assert_allclose(meta.std, np.where(std > 0, std, 1.0), rtol=1e-6)
    np.testing.assert_allclose(X_test, (raw_test - mean) / np.where(std > 0, std, 1.0), rtol=1e-5, atol=1e-5)
    varying = std > 0
    np.testing.assert_allclose(X_train.mean(0), 0.0, atol=1e-5)
    np.testing.assert_allclose(X_train.std(0)[varying], 1.0, rtol=1e-4)
    assert np.all(X_train[:, ~varying] == 0)
    # the test rows were not used: their mean is not centred exactly (it would be with leaked statistics)
    assert np.abs(X_test.mean(0)[varying]).max() > 1e-3
    # stratified: each class's test share is its overall share, to one row
    overall = np.bincount(bunch.target, minlength=k) * n_test / n
    assert np.all(np.abs(np.bincount(y_test, minlength=k) - overall) < 1)


def test_split_depends_on_the_seed_only():
    a = classification_data("breast-cancer", seed=1)
    b = classification_data("Breast_Cancer", seed=1)
    c = classification_data("breast_cancer", seed=2)
    for u, v in zip(a[:4], b[:4]):
        np.testing.assert_array_equal(u, v)
    assert not np.array_equal(a[3], c[3])


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"name": "mnist"}, "name must be one of"),
        ({"name": 3}, "name must be one of"),
        ({"name": "iris", "seed": -1}, "seed"),
        ({"name": "iris", "test_fraction": 1.0}, "test_fraction"),
        ({"name": "iris", "test_fraction": 0.99}, "test_fraction"),
    ],
)
def test_bad_data_arguments_are_refused(kwargs, argument):
    with pytest.raises(ArgumentError, match=argument):
        classification_data(**kwargs)


def _reference_scores(pred, labels):
    """Slow, obviously correct accuracy and cross-entropy of one tree's outputs [n, k]."""
    pred = pred.astype(np.float64)
    if pred.shape[1] == 1:
        z = pred[:, 0]
        # -log(sigmoid(z)) for class 1, -log(1 - sigmoid(z)) = -log(sigmoid(-z)) for class 0
        ce = np.mean(np.where(labels == 1, np.logaddexp(0.0, -z), np.logaddexp(0.0, z)))
        acc = np.mean((z > 0) == (labels == 1))
    else:
        logp = pred - pred.max(1, keepdims=True)
        logp = logp - np.log(np.exp(logp).sum(1, keepdims=True))
        ce = -np.mean(logp[np.arange(len(labels)), labels])
        acc = np.mean(np.argmax(pred, 1) == labels)
    return acc, ce


@pytest.mark.parametrize("name", ["iris", "breast_cancer"])
def test_fitness_and_accuracy_equal_a_numpy_reference_on_random_trees(name):
    problem = classification_problem(name, seed=0, logit_scaling=False)
    k = SHAPES[name][2]
    assert problem.n_classes == k and problem.n_outputs == n_outputs_for(k) == (1 if k == 2 else k)
    fs = problem.function_set
    forest = _random_forest(problem, 24)
    X, y = np.asarray(problem.X), np.asarray(problem.y).astype(int)
    fit = np.asarray(problem.evaluate(jax.random.key(0), forest).fitness)
    acc = np.asarray(problem.accuracy(forest))
    test_acc = np.asarray(problem.test_accuracy(forest))
    classes = np.asarray(problem.predict_class(forest))
    proba = np.asarray(problem.predict_proba(forest))
    assert classes.shape == (24, len(y)) and proba.shape == (24, len(y), k)
    checked = 0
    for t in range(24):
        pred = np.asarray(reference_eval(forest[t], X, fs, problem.n_outputs))
        if not np.all(np.isfinite(pred)):
            assert fit[t] == np.inf and acc[t] == -np.inf
            continue
        want_acc, want_ce = _reference_scores(pred, y)
        assert acc[t] == pytest.approx(want_acc, abs=1e-6)
        assert fit[t] == pytest.approx(want_ce, rel=1e-4, abs=1e-5)
        test_pred = np.asarray(reference_eval(forest[t], np.asarray(problem.X_test), fs, problem.n_outputs))
        assert test_acc[t] == pytest.approx(
            _reference_scores(test_pred, np.asarray(problem.y_test).astype(int))[0]
        )
        assert np.mean(classes[t] == y) == pytest.approx(want_acc)
        np.testing.assert_allclose(proba[t].sum(1), 1.0, rtol=1e-5)
        np.testing.assert_array_equal(np.argmax(proba[t], 1), classes[t])
        checked += 1
    assert checked >= 12
    # one tree: a scalar, equal to its row in the population's result
    assert float(problem.accuracy(forest[0])) == pytest.approx(float(acc[0]))


def test_problem_arguments_are_checked():
    X = np.zeros((6, 2), np.float32)
    with pytest.raises(ArgumentError, match="metric must be one of"):
        SymbolicClassification(X, [0, 1, 0, 1, 0, 1], metric="mse")
    with pytest.raises(ArgumentError, match=r"y\[2\] = 0.5 is not a class label"):
        SymbolicClassification(X, [0, 1, 0.5, 1, 0, 1])
    with pytest.raises(ArgumentError, match=r"y\[0\] = -1"):
        SymbolicClassification(X, [-1, 1, 0, 1, 0, 1])
    with pytest.raises(ArgumentError, match="n_classes=2 but the labels go up to 2"):
        SymbolicClassification(X, [0, 1, 2, 1, 0, 1], n_classes=2)
    with pytest.raises(ArgumentError, match="n_classes must be an int >= 2"):
        SymbolicClassification(X, [0, 0, 0, 0, 0, 0], n_classes=1)
    with pytest.raises(ArgumentError, match="y_test"):
        SymbolicClassification(X, [0, 1, 0, 1, 0, 1], X_test=X[:2], y_test=["a", "b"])
    with pytest.raises(ArgumentError, match="give both X and y"):
        SymbolicClassification(X, [0, 1, 0, 1, 0, 1]).accuracy(None, X=X)
    with pytest.raises(ArgumentError, match="logit_scaling must be a bool, got 'yes'"):
        SymbolicClassification(X, [0, 1, 0, 1, 0, 1], logit_scaling="yes")
    with pytest.raises(ArgumentError, match="ridge"):
        SymbolicClassification(X, [0, 1, 0, 1, 0, 1], ridge=0.0)
    # one class seen in training still makes a two-class problem; labels from y_test count
    p = SymbolicClassification(X, [0, 0, 0, 0, 0, 0], X_test=X[:2], y_test=[2, 0])
    assert p.n_classes == 3 and p.n_outputs == 3
    assert SymbolicClassification(X, [0] * 6).n_outputs == 1
    assert isinstance(p.function_set, FunctionSet) and p.function_set.protected


def _random_forest(problem, n: int, key: int = 1):
    modi = 0.5 if problem.n_outputs > 1 else 0.0
    return generate(
        jax.random.key(key),
        n,
        problem.function_set,
        problem.n_vars,
        32,
        min_depth=1,
        max_depth=4,
        n_outputs=problem.n_outputs,
        modi_prob=modi,
    )


def _planted(problem, factor: float):
    """Setosa's score falls and virginica's rises with petal length (standardized x2), each times
    ``factor``: a tree that separates iris' classes well (versicolor's score is 0)."""
    petal = ("mul", ("const", factor), ("var", 2))
    expr = ("add", ("modi", 0, ("sub", ("const", 0.0), petal)), ("modi", 2, ("add", petal, ("const", 0.0))))
    return Forest.from_tuples([expr], 32, problem.function_set)


def test_logit_scaling_scores_and_predicts_with_the_map_fitted_on_the_training_rows():
    problem = classification_problem("iris", seed=0)  # logit scaling: the default
    assert problem.logit_scaling
    parts = [_random_forest(problem, 14), _planted(problem, 1.0), _planted(problem, 0.25)]
    forest = jax.tree_util.tree_map(lambda *a: np.concatenate(a), *parts)
    y, yt = np.asarray(problem.y).astype(int), np.asarray(problem.y_test).astype(int)
    fs, k = problem.function_set, problem.n_outputs
    # the trees' own outputs from the evaluator (checked against reference_eval above)
    raw = np.asarray(evaluate(forest, problem.X, fs, k))
    raw_t = np.asarray(evaluate(forest, problem.X_test, fs, k))
    finite = np.all(np.isfinite(raw), axis=(1, 2)) & np.all(np.isfinite(raw_t), axis=(1, 2))
    assert finite.sum() >= 8 and finite[-2:].all()
    slope, intercept, loss = (np.asarray(v) for v in fit_logit_scaling(raw, y, problem.n_classes))
    fit = np.asarray(problem.evaluate(jax.random.key(0), forest).fitness)
    s_got, i_got = (np.asarray(v) for v in problem.scaling(forest))
    logits_t = np.asarray(problem.predict(forest, problem.X_test))
    classes_t = np.asarray(problem.predict_class(forest, problem.X_test))
    test_acc = np.asarray(problem.test_accuracy(forest))
    for t in np.flatnonzero(finite):
        assert fit[t] == pytest.approx(loss[t], rel=1e-3, abs=1e-5)
        np.testing.assert_allclose(s_got[t], slope[t], rtol=1e-3, atol=1e-5)
        np.testing.assert_allclose(i_got[t], intercept[t], rtol=1e-3, atol=1e-4)
        want = raw_t[t] * slope[t] + intercept[t]  # the TRAINING map applied to the test rows
        np.testing.assert_allclose(logits_t[t], want, rtol=1e-3, atol=1e-3)
        assert np.mean(classes_t[t] == np.argmax(want, 1)) >= 0.97  # ties within rounding may flip
        assert test_acc[t] == pytest.approx(np.mean(classes_t[t] == yt), abs=1e-6)
    # the planted tree beats most random ones; multiplying its outputs up does not change its score
    random_fit = fit[:14][finite[:14]]
    assert fit[-2] < np.quantile(random_fit, 0.25) and float(problem.accuracy(forest[14])) >= 0.9
    assert fit[-1] == pytest.approx(fit[-2], rel=1e-4)


@pytest.mark.parametrize("name", ["iris", "breast_cancer"])
def test_expression_shows_the_class_scores_with_the_training_logit_map(name):
    import sympy as sp

    problem = classification_problem(name, seed=0)
    raw_problem = classification_problem(name, seed=0, logit_scaling=False)
    if name == "iris":
        tree = _planted(problem, 1.0)
    else:  # one logit output
        expr = ("sub", ("var", 0), ("mul", ("const", 0.5), ("var", 3)))
        tree = Forest.from_tuples([expr], 32, problem.function_set)
    k = problem.n_outputs
    slope, intercept = (np.ravel(np.asarray(v)) for v in problem.scaling(tree))
    text = problem.expression(tree, precision=6)
    infix = raw_problem.expression(tree, precision=6)  # no map without logit scaling
    assert "scaled" not in infix and text.startswith(infix + "; scaled: ")
    maps = text.split("; scaled: ")[1].split(", ")
    assert len(maps) == k
    for j, m in enumerate(maps):
        a, b = m.split(f"*out[{j}] ")
        assert float(a) == pytest.approx(slope[j], rel=1e-5)
        assert float(b.replace(" ", "")) == pytest.approx(intercept[j], rel=1e-5, abs=1e-6)
    # the sympy scores are the logits the problem predicts
    scores = problem.expression(tree, "sympy", simplify=False)
    assert len(scores) == k
    X = np.asarray(problem.X, np.float64)[:40]
    xs = sp.symbols(f"x0:{X.shape[1]}", real=True)
    logits = np.asarray(problem.predict(tree, problem.X))[0, :40]
    for j, e in enumerate(scores):
        f = sp.lambdify(xs, e, "numpy")
        np.testing.assert_allclose(np.broadcast_to(f(*X.T), (40,)), logits[:, j], rtol=1e-3, atol=1e-3)
    with pytest.raises(ArgumentError, match="kind"):
        problem.expression(tree, "latex")


@pytest.mark.slow  # compiles a run: ~20 s at load 13 on the shared 2-core machine
def test_evolution_separates_a_planted_separable_problem():
    """Two classes split by the line ``x0 = x1`` with a margin (``x2`` is noise): a short run finds a
    tree with training and test accuracy 1.0, the test rows read through the map fitted on the
    training rows only."""
    import evotensor
    from evotensor.gp import GP

    rng = np.random.default_rng(0)
    X = rng.normal(size=(240, 3)).astype(np.float32)
    margin = X[:, 0] - X[:, 1]
    keep = np.abs(margin) > 0.3
    X, y = X[keep], (margin[keep] > 0).astype(np.int32)
    problem = SymbolicClassification(X[:100], y[:100], X_test=X[100:], y_test=y[100:])
    assert problem.logit_scaling and problem.n_outputs == 1
    gp = GP(64, problem.function_set, 3, max_len=16, n_outputs=1, init_depth=(1, 3))
    result = evotensor.run(gp, problem, 5, jax.random.key(0), progress=False)
    best = result.best_genotype
    assert float(problem.accuracy(best)) == 1.0
    assert float(problem.test_accuracy(best)) == 1.0
    # by hand: the tree's own test outputs through the map fitted on the training rows
    slope, intercept, _ = fit_logit_scaling(evaluate(best, X[:100], problem.function_set, 1)[None], y[:100])
    raw = np.asarray(evaluate(best, X[100:], problem.function_set, 1))[:, 0]
    np.testing.assert_array_equal(raw * float(slope[0, 0]) + float(intercept[0, 0]) > 0, y[100:] == 1)
