import subprocess
import sys

import jax
import numpy as np
import pytest
from tests.gp.eval_helpers import ArrayForest, random_data, random_forest, tree_to_arrays

from evotensor.core.evaluation import Evaluation
from evotensor.core.problem import is_policy_problem
from evotensor.gp.evaluate import BACKENDS
from evotensor.gp.functions import FunctionSet
from evotensor.gp.reference import reference_eval
from evotensor.gp.regression import (
    EVOGP_SR_FUNCTIONS,
    Pagie1,
    SymbolicRegression,
    pagie1_data,
    per_case_errors,
)
from evotensor.gp.selection import CaseErrors

KEY = jax.random.key(0)


def _forest(trees, fs, max_len=24):
    return ArrayForest(*(np.stack(c) for c in zip(*(tree_to_arrays(t, fs, max_len) for t in trees))))


def V(k):
    return ("var", -1, k)


def C(c):
    return ("const", -1, c)


def F(name, *children):
    return (name, -1, children)


def test_pagie1_grid():
    X, y = pagie1_data()
    assert X.shape == (676, 2) and y.shape == (676,) and X.dtype == np.float32
    axis = np.unique(X[:, 0])
    assert len(axis) == 26 and axis[0] == -5.0 and axis[-1] == 5.0
    np.testing.assert_allclose(np.diff(axis), 0.4, atol=1e-6)
    assert not np.any(X == 0.0)
    # spot values by hand: at (5, 5) each term is 625/626; at (0.2, -0.2) each is 1/626
    corner = np.flatnonzero((X[:, 0] == 5.0) & (X[:, 1] == 5.0))[0]
    np.testing.assert_allclose(y[corner], 2 * 625 / 626, rtol=1e-6)
    near0 = np.flatnonzero(np.isclose(X[:, 0], 0.2) & np.isclose(X[:, 1], -0.2))[0]
    np.testing.assert_allclose(y[near0], 2 / 626, rtol=1e-4)


def test_pagie1_scores_the_true_expression_as_perfect_and_constants_by_variance():
    problem = Pagie1()
    fs = problem.function_set
    # a function problem over forests: it runs the trees itself (it used to claim "policy" and ignore apply)
    assert fs.names == EVOGP_SR_FUNCTIONS and not problem.maximize and problem.kind == "function"
    assert not is_policy_problem(problem)

    def term(k):  # x^4 / (x^4 + 1) == 1 / (1 + x^-4)
        x4 = F("mul", F("mul", V(k), V(k)), F("mul", V(k), V(k)))
        return F("div", x4, F("add", x4, C(1.0)))

    forest = _forest([F("add", term(0), term(1)), C(1.0), F("div", V(0), F("sub", V(1), V(1)))], fs, 40)
    ev = problem.evaluate(KEY, forest)
    assert isinstance(ev, Evaluation) and ev.fitness.shape == (3,)
    _, y = pagie1_data()
    assert float(ev.fitness[0]) < 1e-6
    # linear scaling is on by default: a constant tree is scaled to the target mean (MSE = var(y))
    assert problem.linear_scaling
    np.testing.assert_allclose(float(ev.fitness[1]), np.var(y), rtol=1e-5)
    assert np.isposinf(float(ev.fitness[2]))  # x / 0 everywhere: the worst fitness
    assert problem.predict(forest).shape == (3, 676, 1)
    raw = Pagie1(linear_scaling=False).evaluate(KEY, forest).fitness
    assert float(raw[0]) < 1e-10
    np.testing.assert_allclose(float(raw[1]), np.mean((y - 1.0) ** 2), rtol=1e-5)
    assert "x0**-4" in problem.true_expression


def test_generic_problem_matches_reference_mse_and_r2_orientation():
    fs = FunctionSet(("add", "mul", "sub", "sin"))
    X = random_data(1, 40, 3)
    y = np.sin(X[:, 0]) * X[:, 1]
    forest = random_forest(2, fs, 9, 20, 3)
    problem = SymbolicRegression(X, y, fs, X_test=X[:10], y_test=y[:10], backend="jax", linear_scaling=False)
    pred = reference_eval(forest, X, fs)[..., 0]
    np.testing.assert_allclose(
        problem.evaluate(KEY, forest).fitness, np.mean((pred - y) ** 2, axis=1), rtol=1e-4
    )
    np.testing.assert_allclose(
        problem.test_evaluate(forest).fitness, np.mean((pred[:, :10] - y[:10]) ** 2, axis=1), rtol=1e-4
    )
    r2 = SymbolicRegression(X, y, fs, metric="r2", backend="jax", linear_scaling=False)
    assert r2.maximize
    expected = 1 - np.sum((pred - y) ** 2, axis=1) / np.sum((y - y.mean()) ** 2)
    np.testing.assert_allclose(r2.evaluate(KEY, forest).fitness, expected, rtol=1e-3, atol=1e-4)


def test_multi_output_regression():
    fs = FunctionSet(("add", "mul"))
    X = random_data(3, 15, 2)
    problem = SymbolicRegression(X, np.stack([X[:, 0], X[:, 1]], 1), fs, backend="jax", linear_scaling=False)
    assert problem.n_outputs == 2
    forest = random_forest(4, fs, 5, 16, 2, n_outputs=2)
    pred = reference_eval(forest, X, fs, n_outputs=2)
    expected = np.mean((pred - np.stack([X[:, 0], X[:, 1]], 1)[None]) ** 2, axis=(1, 2))
    np.testing.assert_allclose(problem.evaluate(KEY, forest).fitness, expected, rtol=1e-4)


def test_case_errors_are_per_row_squared_errors_and_only_when_asked():
    fs = FunctionSet(("add", "mul", "sub", "div"))
    X = random_data(5, 30, 2)
    y = X[:, 0] * X[:, 1] - X[:, 1]
    trees = [F("mul", V(0), V(1)), F("div", V(0), F("sub", V(1), V(1))), F("add", V(0), C(0.5))]
    forest = _forest(trees, fs)
    plain = SymbolicRegression(X, y, fs, backend="jax", linear_scaling=False)
    assert plain.evaluate(KEY, forest).info is None  # off by default: no [pop, n_points] array
    problem = SymbolicRegression(X, y, fs, backend="jax", case_errors=True, linear_scaling=False)
    ev = problem.evaluate(KEY, forest)
    assert isinstance(ev.info, CaseErrors)  # the typed contract lexicase reads
    errors = np.asarray(ev.info.case_errors)
    pred = reference_eval(forest, X, fs)[..., 0]
    assert errors.shape == (3, 30) and errors.dtype == np.float32
    np.testing.assert_allclose(errors[[0, 2]], ((pred - y) ** 2)[[0, 2]], rtol=1e-5, atol=1e-6)
    assert np.all(np.isposinf(errors[1]))  # x / 0: non-finite on every row -> +inf, never NaN
    # the fitness is the one of the fused path, and the mean of the case errors
    fit = np.asarray(ev.fitness)
    np.testing.assert_allclose(fit, np.asarray(plain.evaluate(KEY, forest).fitness), rtol=1e-5)
    np.testing.assert_allclose(fit[[0, 2]], errors[[0, 2]].mean(1), rtol=1e-5)
    assert Pagie1(case_errors=True).case_errors and not Pagie1().case_errors


def test_per_case_errors_for_every_metric():
    rng = np.random.default_rng(0)
    pred = rng.normal(size=(4, 12, 2)).astype(np.float32)
    pred[1, 3, 0] = np.nan
    y2 = rng.normal(size=(12, 2)).astype(np.float32)
    got = np.asarray(per_case_errors(pred, y2, "mse"))
    expected = np.mean((pred - y2[None]) ** 2, axis=2)
    expected[1, 3] = np.inf
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(per_case_errors(pred, y2, "r2")), got)
    labels = rng.integers(0, 2, 12).astype(np.float32)
    miss = np.asarray(per_case_errors(pred, labels, "accuracy"))  # 2 outputs: argmax is the class
    expected = (np.argmax(pred, axis=2) != labels[None]).astype(np.float32)
    expected[1, 3] = np.inf
    np.testing.assert_array_equal(miss, expected)
    ce = np.asarray(per_case_errors(pred, labels, "cross_entropy"))
    logp = pred - np.log(np.exp(pred).sum(axis=2, keepdims=True))
    expected = -np.take_along_axis(logp, labels.astype(int)[None, :, None].repeat(4, 0), axis=2)[..., 0]
    expected[1, 3] = np.inf
    np.testing.assert_allclose(ce, expected, rtol=1e-5)
    binary = np.asarray(per_case_errors(pred[..., :1], labels, "accuracy"))  # 1 output: pred > 0
    np.testing.assert_array_equal(binary[0], ((pred[0, :, 0] > 0) != (labels > 0.5)).astype(np.float32))
    with pytest.raises(ValueError, match="metric"):
        per_case_errors(pred, y2, "mae")
    with pytest.raises(ValueError, match="pred must be"):
        per_case_errors(pred[0], y2, "mse")
    with pytest.raises(ValueError, match="y must have 12 rows"):
        per_case_errors(pred, y2[:5], "mse")


def test_errors():
    fs = FunctionSet()
    X = np.ones((5, 2), np.float32)
    with pytest.raises(ValueError, match="metric"):
        SymbolicRegression(X, X[:, 0], fs, metric="mae")
    with pytest.raises(ValueError, match="y must be"):
        SymbolicRegression(X, X[:3, 0], fs)
    with pytest.raises(ValueError, match="X must be"):
        SymbolicRegression(X[0], X[0], fs)
    with pytest.raises(ValueError, match="function_set"):
        SymbolicRegression(X, X[:, 0], ("add",))
    with pytest.raises(ValueError, match="both X_test"):
        SymbolicRegression(X, X[:, 0], fs, X_test=X)
    with pytest.raises(ValueError, match="backend"):
        SymbolicRegression(X, X[:, 0], fs, backend="cuda")
    with pytest.raises(ValueError, match="case_errors"):
        SymbolicRegression(X, X[:, 0], fs, case_errors="yes")
    with pytest.raises(ValueError, match="no test data"):
        SymbolicRegression(X, X[:, 0], fs).test_evaluate(None)


def test_backends_are_the_evaluators_one_list():
    X = np.ones((5, 2), np.float32)
    for backend in BACKENDS:
        assert SymbolicRegression(X, X[:, 0], FunctionSet(), backend=backend).backend == backend


def test_deprecated_forms_still_work_and_warn():
    fs = FunctionSet(("add", "mul"))
    X = random_data(7, 12, 2)
    forest = random_forest(8, fs, 3, 16, 2)
    problem = SymbolicRegression(X, X[:, 0], fs, backend="jax", case_errors=True)
    ev = problem.evaluate(KEY, forest)
    with pytest.warns(DeprecationWarning, match="info.case_errors"):
        old = ev.info["case_errors"]  # the untyped form problems returned before
    np.testing.assert_array_equal(np.asarray(old), np.asarray(ev.info.case_errors))
    assert "case_errors" in ev.info
    with pytest.warns(DeprecationWarning, match="ignores apply"):
        again = problem.evaluate(KEY, forest, lambda tree, x: x)
    np.testing.assert_array_equal(np.asarray(again.fitness), np.asarray(ev.fitness))


def test_old_import_path_warns_and_gives_the_moved_names():
    import evotensor.gp.regression as new
    import evotensor.problems
    import evotensor.problems.regression as old

    for name in ("EVOGP_SR_FUNCTIONS", "Pagie1", "SymbolicRegression", "pagie1_data", "per_case_errors"):
        with pytest.warns(DeprecationWarning, match=f"moved to evotensor.gp.regression.{name}"):
            assert getattr(old, name) is getattr(new, name)
    with pytest.warns(DeprecationWarning):
        from evotensor.problems.regression import Pagie1 as OldPagie1
    assert OldPagie1 is Pagie1
    with pytest.warns(DeprecationWarning):
        assert evotensor.problems.regression.SymbolicRegression is SymbolicRegression
    with pytest.raises(AttributeError):
        old.NotAName  # noqa: B018


def test_problems_do_not_import_gp():
    code = (
        "import importlib, pkgutil, sys, evotensor.problems\n"
        "for m in pkgutil.iter_modules(evotensor.problems.__path__):\n"
        "    importlib.import_module('evotensor.problems.' + m.name)\n"
        "bad = [m for m in sys.modules if m.startswith('evotensor.gp')]\n"
        "assert not bad, bad\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
