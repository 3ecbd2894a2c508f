"""Linear scaling (``fitness(..., linear_scaling=True)``, ``scaling_coefficients``) on every backend,
against a float64 NumPy least-squares fit of the reference predictions."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evotensor.core.checks import ArgumentError
from evotensor.gp import Forest, FunctionSet, fitness, native, reference_eval, scaling_coefficients

from .eval_helpers import random_data, random_forest

BACKENDS = ["jax", "pallas"] + (["native"] if native.AVAILABLE else [])
FS = FunctionSet(("add", "sub", "mul", "div", "sin", "cos"))


def lstsq_reference(pred: np.ndarray, y: np.ndarray):
    """Per tree and output: the float64 least-squares (a, b) and the scaled SSE summed over outputs."""
    pop, n, k = pred.shape
    y2 = y.reshape(n, -1).astype(np.float64)
    a = np.zeros((pop, k))
    b = np.zeros((pop, k))
    sse = np.zeros(pop)
    for t in range(pop):
        for j in range(k):
            p = pred[t, :, j].astype(np.float64)
            if not np.all(np.isfinite(p)):
                a[t, j] = b[t, j] = sse[t] = np.nan
                continue
            d = p - p.mean()
            m2 = d @ d
            a[t, j] = (d @ (y2[:, j] - y2[:, j].mean())) / m2 if m2 > 0 else 0.0
            b[t, j] = y2[:, j].mean() - a[t, j] * p.mean()
            sse[t] += np.sum((y2[:, j] - a[t, j] * p - b[t, j]) ** 2)
    return a, b, sse


def planted():
    """x0 * sin(x1) and x0 + x1 on data 3 * sin(x1) * x0 - 2 + noise-free, one exact, one not."""
    X = np.random.default_rng(0).uniform(-2, 2, (200, 2)).astype(np.float32)
    y = (3.0 * X[:, 0] * np.sin(X[:, 1]) - 2.0).astype(np.float32)
    trees = [("mul", ("var", 0), ("sin", ("var", 1))), ("add", ("var", 0), ("var", 1))]
    return Forest.from_tuples(trees, 12, FS), X, y


@pytest.mark.parametrize("backend", BACKENDS)
def test_planted_slope_and_intercept_are_recovered(backend):
    forest, X, y = planted()
    a, b = scaling_coefficients(forest, X, y, FS, backend=backend)
    assert a.shape == b.shape == (2, 1)
    np.testing.assert_allclose(a[0, 0], 3.0, rtol=1e-5)
    np.testing.assert_allclose(b[0, 0], -2.0, atol=1e-5)
    mse = fitness(forest, X, y, FS, "mse", backend=backend, linear_scaling=True)
    # the closed form Syy - C**2 / M2 in float32 has an absolute floor of a few ulps of Syy
    assert float(mse[0]) < 1e-6 * float(np.var(y))
    r2 = fitness(forest, X, y, FS, "r2", backend=backend, linear_scaling=True)
    assert float(r2[0]) > 0.99999
    # the unscaled tree is far off; scaling never makes a fit worse than unscaled
    raw = fitness(forest, X, y, FS, "mse", backend=backend)
    assert np.all(np.asarray(mse) <= np.asarray(raw) * (1 + 1e-5))


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(BACKENDS), st.sampled_from([1, 2]))
def test_scaled_fitness_equals_least_squares_of_the_reference(seed, backend, n_outputs):
    forest = random_forest(seed, FS, 24, 24, 3, n_outputs)
    X = random_data(seed + 1, 70, 3)
    y = (
        np.random.default_rng(seed + 2)
        .normal(size=(70, n_outputs) if n_outputs > 1 else 70)
        .astype(np.float32)
    )
    ref = np.stack([reference_eval(forest[t], X, FS, n_outputs) for t in range(24)])
    a_ref, b_ref, sse_ref = lstsq_reference(ref, y)
    mse = np.asarray(fitness(forest, X, y, FS, "mse", n_outputs, backend=backend, linear_scaling=True))
    a, b = (np.asarray(v) for v in scaling_coefficients(forest, X, y, FS, n_outputs, backend=backend))
    y2 = y.reshape(70, -1)
    scale = np.sum((y2 - y2.mean(0)) ** 2)
    for t in range(24):
        if not np.isfinite(sse_ref[t]):
            assert mse[t] == np.inf and np.all(np.isnan(a[t]))
            continue
        # well-conditioned trees only: rounding in float32 predictions dominates otherwise
        spread = np.std(ref[t], axis=0)
        if np.any(spread < 1e-3 * (np.abs(ref[t]).mean(0) + 1e-3)):
            continue
        np.testing.assert_allclose(mse[t] * 70 * n_outputs, sse_ref[t], rtol=2e-3, atol=2e-4 * scale)
        np.testing.assert_allclose(a[t], a_ref[t], rtol=2e-3, atol=1e-4 * (1 + np.abs(a_ref[t]).max()))
        np.testing.assert_allclose(b[t], b_ref[t], rtol=2e-3, atol=2e-3 * (1 + np.abs(b_ref[t]).max()))


def test_constant_tree_gets_zero_slope_and_the_target_mean():
    X = np.linspace(-1, 1, 50, dtype=np.float32)[:, None]
    y = (2 * X[:, 0] + 1).astype(np.float32)
    forest = Forest.from_tuples([("const", 4.0), ("sub", ("var", 0), ("var", 0))], 4, FS)
    a, b = scaling_coefficients(forest, X, y, FS, backend="jax")
    np.testing.assert_array_equal(np.asarray(a), 0.0)
    np.testing.assert_allclose(np.asarray(b), np.mean(y), rtol=1e-6)
    r2 = fitness(forest, X, y, FS, "r2", backend="jax", linear_scaling=True)
    np.testing.assert_allclose(np.asarray(r2), 0.0, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_large_offset_with_small_spread_is_not_lost_to_cancellation(backend):
    # 1000 + 0.01 x: float32 sums of p and p**2 would cancel; the shifted moments keep the fit
    X = np.linspace(-3, 3, 600, dtype=np.float32)[:, None]
    y = (5 * X[:, 0] - 1).astype(np.float32)
    forest = Forest.from_tuples([("add", ("const", 1000.0), ("mul", ("const", 0.01), ("var", 0)))], 6, FS)
    r2 = fitness(forest, X, y, FS, "r2", backend=backend, linear_scaling=True)
    assert float(r2[0]) > 0.9999


def test_nonfinite_prediction_is_worst_and_coefficients_nan():
    X = np.linspace(-1, 1, 11, dtype=np.float32)[:, None]  # includes 0: 1/x is inf there
    y = X[:, 0].copy()
    forest = Forest.from_tuples([("div", ("const", 1.0), ("var", 0)), ("var", 0)], 4, FS)
    for backend in BACKENDS:
        mse = fitness(forest, X, y, FS, "mse", backend=backend, linear_scaling=True)
        assert float(mse[0]) == np.inf and float(mse[1]) < 1e-6 * float(np.var(y))
        r2 = fitness(forest, X, y, FS, "r2", backend=backend, linear_scaling=True)
        assert float(r2[0]) == -np.inf
        a, _ = scaling_coefficients(forest, X, y, FS, backend=backend)
        assert np.isnan(float(a[0, 0])) and float(a[1, 0]) == pytest.approx(1.0)


def test_scaling_refuses_classification_metrics_and_non_bools():
    forest, X, y = planted()
    with pytest.raises(ArgumentError, match="linear_scaling applies"):
        fitness(forest, X, (y > 0).astype(np.float32), FS, "accuracy", linear_scaling=True)
    with pytest.raises(ArgumentError, match="linear_scaling must be a bool"):
        fitness(forest, X, y, FS, "mse", linear_scaling=1)


def test_scaled_fitness_traces_under_jit():
    import jax

    forest, X, y = planted()
    f = jax.jit(lambda fo: fitness(fo, X, y, FS, "mse", backend="jax", linear_scaling=True))
    np.testing.assert_allclose(
        np.asarray(f(forest)),
        np.asarray(fitness(forest, X, y, FS, "mse", backend="jax", linear_scaling=True)),
    )
    assert jnp.asarray(f(forest)).shape == (2,)


def test_problem_scales_by_default_with_training_coefficients_everywhere():
    from evotensor.gp import SymbolicRegression

    forest, X, y = planted()
    Xt = X[:50] * 1.5  # test data off the training range: scored with the TRAINING a, b
    yt = (3.0 * Xt[:, 0] * np.sin(Xt[:, 1]) - 2.0).astype(np.float32)
    problem = SymbolicRegression(X, y, FS, X_test=Xt, y_test=yt, backend="jax")
    assert problem.linear_scaling
    fit = np.asarray(problem.evaluate(None, forest).fitness)
    assert fit[0] < 1e-6 * np.var(y)
    a, b = (np.asarray(v) for v in problem.scaling(forest))
    raw_test = np.stack([reference_eval(forest[t], Xt, FS) for t in range(2)])[..., 0]
    expected = np.mean((a[:, :1] * raw_test + b[:, :1] - yt) ** 2, axis=1)
    np.testing.assert_allclose(
        np.asarray(problem.test_evaluate(forest).fitness), expected, rtol=1e-4, atol=1e-6
    )
    # predictions are the scaled model; case errors are its per-row squared errors
    pred = np.asarray(problem.predict(forest))
    np.testing.assert_allclose(pred[0, :, 0], y, atol=1e-4)
    cases = SymbolicRegression(X, y, FS, backend="jax", case_errors=True).evaluate(None, forest)
    np.testing.assert_allclose(
        np.asarray(cases.info.case_errors), (pred[..., 0] - y) ** 2, rtol=1e-4, atol=1e-6
    )
    # equal up to the fused closed form's float32 floor (4 eps var(y), see evotensor.gp.scaling)
    np.testing.assert_allclose(np.asarray(cases.fitness), fit, rtol=1e-3, atol=5e-7 * float(np.var(y)))
    # the reported model includes the scaling
    text = problem.expression(forest[0])
    assert text.startswith("3 * (") and text.endswith("+ -2")
    expr = problem.expression(forest[0], kind="sympy")
    values = {sym: {"x0": 0.7, "x1": -0.3}[sym.name] for sym in expr.free_symbols}
    assert abs(float(expr.subs(values)) - (3 * 0.7 * np.sin(-0.3) - 2)) < 1e-4
    # classification metrics are never scaled; asking for it is an error naming the argument
    labels = (y > 0).astype(np.float32)
    assert not SymbolicRegression(X, labels, FS, metric="accuracy").linear_scaling
    with pytest.raises(ArgumentError, match="linear_scaling"):
        SymbolicRegression(X, labels, FS, metric="accuracy", linear_scaling=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_huge_offset_cannot_fake_a_perfect_fit(backend):
    # float32 centering leaves sum(y - mean y) != 0; a tree with a large offset times that residue
    # once made C**2 / M2 exceed Syy, so the scaled loss clipped to a "perfect" floor
    X = np.linspace(-5, 5, 676, dtype=np.float32)[:, None]
    y = (3 * np.sin(X[:, 0]) + 5.3).astype(np.float32)
    forest = Forest.from_tuples([("add", ("const", 8.9e5), ("var", 0)), ("var", 0)], 4, FS)
    r2 = np.asarray(fitness(forest, X, y, FS, "r2", backend=backend, linear_scaling=True))
    assert r2[1] < 0.5  # x0 alone explains little of 3 sin(x0)
    assert abs(r2[0] - r2[1]) < 1e-3  # an affine copy of x0 explains the same, not everything
