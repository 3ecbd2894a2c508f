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
    assert text.startswith("3 * (") and text.endswith(" - 2")
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


# -- refined scoring: exact trees outrank near-misses below the closed form's float32 floor --------------

NGUYEN_FS = FunctionSet(("add", "sub", "mul", "div", "sin", "cos", "exp", "log"), protected=False)


def _power_trees(exponents):
    """``exp(c * log(x0))``: ``c = 0.5`` is Nguyen-8's ``sqrt(x0)`` exactly, others are near-misses."""
    trees = [("exp", ("mul", ("const", c), ("log", ("var", 0)))) for c in exponents]
    return Forest.from_tuples(trees, 16, NGUYEN_FS)


def test_refined_sse_matches_float64_residuals_and_floors_exact_fits():
    from evotensor.gp.scaling import REFINED_RESOLUTION, refined_scaled_sse, scaled_sse

    rng = np.random.default_rng(0)
    y = rng.uniform(0.5, 2.0, (1, 64)).astype(np.float32)
    exact = 3.0 * y - 2.0  # an affine copy: scaled, an exact fit
    near = exact + 1e-3 * np.sin(np.arange(64, dtype=np.float32))
    pred = np.stack([exact, near, np.full_like(exact, 4.0), near])[..., None].transpose(0, 2, 1, 3)[..., 0]
    pred = pred.reshape(4, 64, 1).astype(np.float32)
    pred[3, 5, 0] = np.inf
    sse = np.asarray(refined_scaled_sse(jnp.asarray(pred), jnp.asarray(y)))
    _, _, want = lstsq_reference(pred[:2], y[0])
    floor = REFINED_RESOLUTION * float(np.sum(y.astype(np.float64) ** 2))
    assert sse[0] == pytest.approx(floor, rel=1e-5)  # exact up to rounding: on the floor
    assert sse[1] == pytest.approx(want[1], rel=1e-3) and sse[1] > 100 * floor
    syy = float(np.sum((y - y.mean()) ** 2))
    assert sse[2] == pytest.approx(syy, rel=1e-5) and np.isnan(sse[3])  # constant: Syy; inf: NaN
    # the closed form cannot tell the two apart at this level: both sit on its 4 eps Syy floor
    yc = y - y.mean()
    p = jnp.asarray(pred[:2, :, 0])
    mean = p.mean(-1)
    d = p - mean[:, None]
    moments = jnp.stack([mean, (d * d).sum(-1), (d * yc).sum(-1)], -1)[:, None, :]
    closed = np.asarray(scaled_sse(moments, jnp.asarray([syy], jnp.float32), 64))
    assert closed[1] < 2 * closed[0] and sse[1] > 10 * sse[0]


def test_refine_top_ranks_the_exact_tree_first_and_leaves_the_rest():
    from evotensor.gp import SymbolicRegression, sr_data

    X, y, _, _ = sr_data("nguyen-8", 0, 0.0)
    forest = _power_trees((0.499, 0.5, 0.4995, 0.3))
    plain = np.asarray(SymbolicRegression(X, y, NGUYEN_FS).evaluate(None, forest).fitness)
    assert plain[0] == plain[1] == plain[2]  # the closed form's floor: a tie the search cannot break
    refined = np.asarray(SymbolicRegression(X, y, NGUYEN_FS, refine_top=3).evaluate(None, forest).fitness)
    assert refined[1] < refined[2] / 10 and refined[2] < refined[0]  # exact << 0.4995 < 0.499
    assert refined[3] == plain[3]  # outside the top 3: the fused fitness, unchanged
    r2 = SymbolicRegression(X, y, NGUYEN_FS, metric="r2", refine_top=4).evaluate(None, forest).fitness
    assert np.argmax(np.asarray(r2)) == 1  # maximized metrics too
    with pytest.raises(ArgumentError, match="refine_top"):
        SymbolicRegression(X, y, NGUYEN_FS, refine_top=-1)


def test_planted_exact_tree_is_the_reported_front_member():
    # near-miss first (lowest index: it would win a tie), exact second, a bigger near-miss third
    from evotensor.gp import HallOfFame, SymbolicRegression, select_model, sr_data
    from evotensor.gp.front import update

    X, y, _, _ = sr_data("nguyen-8", 0, 0.0)
    bigger = ("add", ("exp", ("mul", ("const", 0.4993), ("log", ("var", 0)))), ("const", 0.001))
    trees = [
        ("exp", ("mul", ("const", 0.499), ("log", ("var", 0)))),
        ("exp", ("mul", ("const", 0.5), ("log", ("var", 0)))),
        bigger,
    ]
    forest = Forest.from_tuples(trees, 16, NGUYEN_FS)
    chosen = {}
    for k in (0, 3):
        loss = SymbolicRegression(X, y, NGUYEN_FS, refine_top=k).evaluate(None, forest).fitness
        hof = update(HallOfFame.empty(16), forest, loss)
        assert int(np.asarray(hof.front_mask()).sum()) == 1  # the bigger tree never gets on the front
        pick = int(select_model(hof.loss, hof.complexity, "best", hof.front_mask()))
        chosen[k] = float(np.asarray(hof.forest.value)[pick, 2])  # exp, mul, const, log, var
    assert chosen[0] == pytest.approx(0.499) and chosen[3] == 0.5


def test_trees_the_caller_vouches_for_skip_the_check_and_the_others_get_nan():
    """``valid=`` (a hall of fame's finite entries): the same coefficients for the trees marked valid,
    NaN for the others (here an empty, malformed slot that the check would refuse), and no tree check
    in the program (its prefix-count cumsum is the program's only reduce-window)."""
    import jax

    forest, X, y = planted()
    empty = Forest.empty(1, forest.max_len)
    both = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a, b]), forest, empty)
    valid = jnp.asarray([True, True, False])
    backend = "native" if native.AVAILABLE else "jax"
    with pytest.raises(ArgumentError):  # the check refuses the empty slot
        scaling_coefficients(both, X, y, FS, backend=backend)
    a, b = scaling_coefficients(both, X, y, FS, backend=backend, valid=valid)
    a0, b0 = scaling_coefficients(forest, X, y, FS, backend=backend)
    assert np.asarray(a[:2]).tobytes() == np.asarray(a0).tobytes()
    assert np.asarray(b[:2]).tobytes() == np.asarray(b0).tobytes()
    assert np.isnan(np.asarray(a[2])).all() and np.isnan(np.asarray(b[2])).all()
    with pytest.raises(ArgumentError, match="valid"):
        scaling_coefficients(both, X, y, FS, backend=backend, valid=valid[:2])

    def lowered(**kw):
        fn = jax.jit(lambda f: scaling_coefficients(f, X, y, FS, backend=backend, **kw))
        return fn.lower(both).as_text()

    assert "reduce_window" in lowered() and "reduce_window" not in lowered(valid=valid)
