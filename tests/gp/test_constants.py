"""Levenberg-Marquardt constant optimization: planted coefficients, never worse, nothing else touched,
on both linearization paths (the native C++ kernel and tree_jacobian)."""

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evotensor.core.checks import ArgumentError
from evotensor.gp import CONST, Forest, FunctionSet, evaluate, generate, reference_eval
from evotensor.gp.constants import ConstantOptimizer, choose_backend, optimize_constants

FS = FunctionSet(("add", "sub", "mul", "div", "sin", "exp", "log"))
C, V = (lambda c: ("const", c)), (lambda k: ("var", k))
MAX_LEN = 16
RNG = np.random.default_rng(0)
X = RNG.uniform(-3.0, 3.0, (40, 2)).astype(np.float32)

optimize = jax.jit(
    optimize_constants,
    static_argnames=(
        "function_set",
        "steps",
        "linear_scaling",
        "n_outputs",
        "damping",
        "max_constants",
        "batch_trees",
        "backend",
    ),
)
BACKENDS = pytest.mark.parametrize("backend", ["native", "jax"])


def _scaled_mse(pred, y, linear_scaling):
    """Independent float64 recomputation of the loss of predictions ``pred [n]``. With linear
    scaling a prediction counts as constant (slope 0) when its spread is within rounding of its
    mean, ``sum (p - mean)^2 <= n (4 eps32 |mean|)^2`` (gp/scaling.py's rule: scale-free, so a
    tree whose values are all tiny still gets its slope)."""
    pred, y = np.asarray(pred, np.float64), np.asarray(y, np.float64)
    if not np.all(np.isfinite(pred)):
        return math.inf
    if linear_scaling:
        d = pred - pred.mean()
        m2 = np.sum(d * d)
        noise = len(y) * (4 * float(np.finfo(np.float32).eps) * abs(pred.mean())) ** 2
        a = np.sum(d * (y - y.mean())) / m2 if m2 > noise and m2 > 0 else 0.0
        pred = a * pred + (y.mean() - a * pred.mean())
    return float(np.mean((y - pred) ** 2))


@BACKENDS
def test_planted_coefficients_are_recovered_without_scaling(backend):
    tree = ("add", ("mul", C(1.0), ("sin", V(0))), ("mul", C(1.0), ("mul", V(1), V(1))))
    forest = Forest.from_tuples([tree], MAX_LEN, FS)
    y = 2.5 * np.sin(X[:, 0]) - 0.75 * X[:, 1] ** 2
    value, loss = optimize(forest, X, y, FS, linear_scaling=False, backend=backend)
    consts = np.asarray(value[0])[np.asarray(forest.opcode[0]) == CONST]
    np.testing.assert_allclose(consts, [2.5, -0.75], atol=1e-4)
    assert value.dtype == jnp.float32 and float(loss[0]) < 1e-8


@BACKENDS
def test_planted_structure_is_recovered_with_linear_scaling(backend):
    # sin(x0) + c x0 fitted to 3 sin(x0) + 6 x0 + 1: c = 2, then a = 3, b = 1 in closed form
    forest = Forest.from_tuples([("add", ("sin", V(0)), ("mul", C(0.5), V(0)))], MAX_LEN, FS)
    y = 3.0 * np.sin(X[:, 0]) + 6.0 * X[:, 0] + 1.0
    value, loss = optimize(forest, X, y, FS, backend=backend)
    c = float(np.asarray(value[0])[np.asarray(forest.opcode[0]) == CONST][0])
    assert abs(c - 2.0) < 1e-4
    f = reference_eval(Forest(forest.opcode, value, forest.size, forest.output), X, FS)[0, :, 0]
    a = np.cov(f, y, bias=True)[0, 1] / np.var(f)
    assert abs(a - 3.0) < 1e-3 and abs((y.mean() - a * f.mean()) - 1.0) < 1e-3
    assert float(loss[0]) < 1e-8


@BACKENDS
def test_tree_without_constants_is_returned_unchanged(backend):
    forest = Forest.from_tuples([("mul", V(0), ("sin", V(1)))], MAX_LEN, FS)
    y = X[:, 0] * 2.0
    value, loss = optimize(forest, X, y, FS, backend=backend)
    np.testing.assert_array_equal(np.asarray(value), np.asarray(forest.value))
    pred = reference_eval(forest, X, FS)[0, :, 0]
    np.testing.assert_allclose(float(loss[0]), _scaled_mse(pred, y, True), rtol=1e-4)


@functools.cache
def _generator(pop):
    return jax.jit(
        lambda key: generate(key, pop, FS, 2, MAX_LEN, max_depth=4, const_prob=0.7, const_range=(-2.0, 2.0))
    )


@BACKENDS
@settings(max_examples=8)
@given(seed=st.integers(0, 2**31 - 1), linear_scaling=st.booleans())
def test_never_worse_and_only_constants_change(backend, seed, linear_scaling):
    forest = _generator(8)(jax.random.key(seed))
    rng = np.random.default_rng(seed)
    y = (np.sin(X[:, 0]) * rng.normal() + X[:, 1] * rng.normal()).astype(np.float32)
    value, loss = optimize(forest, X, y, FS, linear_scaling=linear_scaling, max_constants=3, backend=backend)
    value, loss = np.asarray(value), np.asarray(loss)
    old = np.asarray(forest.value)
    const = np.asarray(forest.opcode) == CONST
    tuned = const & (np.cumsum(const, axis=1) <= 3)  # the first max_constants constants only
    np.testing.assert_array_equal(value[~tuned], old[~tuned])  # bit for bit
    assert np.all(np.isfinite(value))
    tuned_forest = Forest(forest.opcode, value, forest.size, forest.output)
    # the optimizer's contract is about its own float32 evaluator: the loss it reports is that of
    # the constants it returns, and never above the tree's loss before
    before = np.asarray(evaluate(forest, X, FS, backend=backend))[..., 0]
    after = np.asarray(evaluate(tuned_forest, X, FS, backend=backend))[..., 0]
    # (the evaluators against the obviously correct interpreter: tests/gp/test_evaluate.py; tuned
    # constants can reach arguments such as sin(exp(exp(4))) whose float32 value differs between
    # libraries, so that comparison does not belong here)
    for t in range(8):
        initial = _scaled_mse(before[t], y, linear_scaling)
        final = _scaled_mse(after[t], y, linear_scaling)
        # where a float32 loss can hold it, as a sum over the rows (and, scaled, the predictions'
        # float32 moments)
        representable = initial * len(y) < float(np.finfo(np.float32).max)
        if linear_scaling:
            representable = representable and np.all(np.abs(before[t]) < 1e15)
        if representable:
            assert math.isfinite(loss[t]) and loss[t] <= initial * (1 + 1e-5) + 1e-7
        if np.all(np.abs(after[t]) < 1e6):  # its float32 moments are exact enough
            assert final == pytest.approx(float(loss[t]), rel=1e-3, abs=1e-5) or not math.isfinite(loss[t])
        if loss[t] == math.inf:
            np.testing.assert_array_equal(value[t], old[t])


def test_batched_equals_one_tree_at_a_time():
    # vmap over the trees (the GPU path) against each tree alone (lax.map, the CPU path)
    forest = _generator(5)(jax.random.key(11))
    y = (np.cos(X[:, 0]) + 0.3 * X[:, 1]).astype(np.float32)
    value, loss = optimize(forest, X, y, FS, batch_trees=True, backend="jax")
    for t in range(5):
        v1, l1 = optimize(forest[t], X, y, FS, backend="jax")
        np.testing.assert_allclose(np.asarray(v1), np.asarray(value[t]), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(float(l1), float(loss[t]), rtol=1e-4, atol=1e-7)


@BACKENDS
@pytest.mark.fusion_emitters
def test_optimizer_tunes_only_the_best_fraction(backend):
    forest = _generator(10)(jax.random.key(3))
    y = (np.sin(X[:, 0]) * 1.7 - X[:, 1]).astype(np.float32)
    pred = reference_eval(forest, X, FS)[..., 0]
    fitness = np.array([_scaled_mse(p, y, True) for p in pred], np.float32)
    fitness[1] = np.nan  # NaN counts as the worst
    tune = ConstantOptimizer(steps=5, fraction=0.3, backend=backend)
    call = jax.jit(lambda key, f, fit: tune(key, f, fit, X, y, FS))
    value, new_fit = map(np.asarray, call(jax.random.key(0), forest, jnp.asarray(fitness)))
    chosen = np.argsort(np.where(np.isnan(fitness), np.inf, fitness), kind="stable")[:3]
    others = np.setdiff1d(np.arange(10), chosen)
    np.testing.assert_array_equal(value[others], np.asarray(forest.value)[others])
    np.testing.assert_array_equal(new_fit[others], fitness[others])
    _, expected = optimize(forest[chosen], X, y, FS, steps=5, backend=backend)
    np.testing.assert_allclose(new_fit[chosen], np.asarray(expected), rtol=1e-5)
    assert np.all(new_fit[chosen] <= fitness[chosen] * (1 + 1e-5) + 1e-7)


@BACKENDS
def test_optimizer_with_probability_keeps_unpicked_trees(backend):
    forest = _generator(10)(jax.random.key(4))
    y = X[:, 0].astype(np.float32)
    fitness = jnp.full(10, 5.0, jnp.float32)
    tune = ConstantOptimizer(steps=2, probability=0.2, backend=backend)
    index, picked = tune.chosen(jax.random.key(5), fitness)
    assert index.shape == (tune.batch_size(10),) and len(set(np.asarray(index).tolist())) == len(index)
    value, new_fit = tune(jax.random.key(5), forest, fitness, X, y, FS)
    # loss_to_fitness converts the MSE into the caller's metric
    _, rmse = tune(jax.random.key(5), forest, fitness, X, y, FS, loss_to_fitness=jnp.sqrt)
    tuned = np.asarray(index)[np.asarray(picked)]
    np.testing.assert_allclose(np.asarray(rmse)[tuned], np.sqrt(np.asarray(new_fit)[tuned]), rtol=1e-6)
    untouched = np.setdiff1d(np.arange(10), np.asarray(index)[np.asarray(picked)])
    np.testing.assert_array_equal(np.asarray(value)[untouched], np.asarray(forest.value)[untouched])
    assert np.all(np.asarray(new_fit)[untouched] == 5.0)


def test_bad_arguments_name_the_argument():
    forest = _generator(4)(jax.random.key(0))
    y = X[:, 0]
    for kwargs, name in [
        ({"fraction": 0.0}, "fraction"),
        ({"fraction": 1.5}, "fraction"),
        ({"probability": 0.0}, "probability"),
        ({"steps": 0}, "steps"),
        ({"max_constants": 0}, "max_constants"),
        ({"damping": -1.0}, "damping"),
    ]:
        with pytest.raises(ArgumentError, match=name):
            ConstantOptimizer(**kwargs)
    with pytest.raises(ArgumentError, match="n_outputs must be 1"):
        optimize_constants(forest, X, y, FS, n_outputs=2)
    with pytest.raises(ArgumentError, match="y must have shape"):
        optimize_constants(forest, X, np.zeros((40, 2), np.float32), FS)
    with pytest.raises(ArgumentError, match="y must be finite"):
        optimize_constants(forest, X, np.full(40, np.nan, np.float32), FS)
    with pytest.raises(ArgumentError, match="function_set"):
        optimize_constants(forest, X, y, ("add",))
    with pytest.raises(ArgumentError, match="fitness must have shape"):
        ConstantOptimizer()(jax.random.key(0), forest, jnp.zeros(3), X, y, FS)


@pytest.mark.parametrize("backend", ["native", pytest.param("jax", marks=pytest.mark.slow)])
def test_problem_with_constant_optimization_returns_the_tuned_forest_and_its_fitness(backend):
    import evotensor
    from evotensor.gp import GP, Pagie1

    problem = Pagie1(constant_optimization=ConstantOptimizer(steps=5, fraction=0.25, backend=backend))
    gp = GP(population_size=16, function_set=problem.function_set, n_vars=2, max_len=24)
    forest, _ = gp.ask(jax.random.key(1), gp.init(jax.random.key(0)))
    # jitted, as evotensor.run calls it: one compile instead of the optimizer's steps op by op
    ev = jax.jit(problem.evaluate)(jax.random.key(2), forest)
    tuned = ev.genotypes
    plain = Pagie1()
    before = np.asarray(plain.evaluate(None, forest).fitness)
    after = np.asarray(plain.evaluate(None, tuned).fitness)
    np.testing.assert_allclose(np.asarray(ev.fitness), after, rtol=1e-6)  # the tuned trees' own fitness
    # only constants change; tuned trees never get worse (beyond float32 evaluator differences)
    np.testing.assert_array_equal(np.asarray(tuned.opcode), np.asarray(forest.opcode))
    changed = np.asarray(tuned.value) != np.asarray(forest.value)
    assert np.all(np.asarray(forest.opcode)[changed] == CONST)
    assert np.all(after <= before * (1 + 1e-5) + 1e-7)
    assert np.any(changed)
    # under run: the GP is told the tuned trees, and the best genotype scores as reported
    result = evotensor.run(gp, problem, 3, jax.random.key(3), progress=False)
    best = jax.tree.map(lambda a: a[None], result.best_genotype)
    assert float(plain.evaluate(None, best).fitness[0]) == pytest.approx(result.best_fitness, rel=1e-5)


def test_problem_refuses_constant_optimization_where_it_cannot_apply():
    from evotensor.gp import SymbolicRegression

    X = np.random.default_rng(0).normal(size=(20, 2)).astype(np.float32)
    fs = FunctionSet(("add", "mul"))
    with pytest.raises(ArgumentError, match="constant_optimization must be"):
        SymbolicRegression(X, X[:, 0], fs, constant_optimization="lm")
    with pytest.raises(ArgumentError, match="single-output regression"):
        SymbolicRegression(
            X,
            (X[:, 0] > 0).astype(np.float32),
            fs,
            metric="accuracy",
            constant_optimization=ConstantOptimizer(),
        )
    with pytest.raises(ArgumentError, match="key"):
        SymbolicRegression(X, X[:, 0], fs, constant_optimization=ConstantOptimizer()).evaluate(None, None)


PLANTED = [
    # (tree, target, linear_scaling, planted constants)
    (
        ("add", ("mul", C(1.0), ("exp", ("mul", C(-0.2), V(0)))), C(0.0)),
        lambda X: 1.5 * np.exp(-0.7 * X[:, 0]) + 0.3,
        False,
        [1.5, -0.7, 0.3],
    ),
    (
        ("sin", ("add", ("mul", C(1.0), V(0)), C(0.1))),
        lambda X: 2.0 * np.sin(1.3 * X[:, 0] + 0.4) + 1.0,
        True,
        [1.3, 0.4],
    ),
    (
        ("div", V(0), ("add", C(2.0), ("mul", C(0.5), ("mul", V(1), V(1))))),
        lambda X: X[:, 0] / (1.0 + 2.0 * X[:, 1] ** 2),
        False,
        [1.0, 2.0],
    ),
]


@pytest.mark.parametrize("case", range(len(PLANTED)))
def test_native_and_jax_paths_find_the_same_planted_constants(case):
    tree, target, scaled, planted = PLANTED[case]
    forest = Forest.from_tuples([tree], MAX_LEN, FS)
    y = target(X).astype(np.float32)
    const = np.asarray(forest.opcode[0]) == CONST
    results = {}
    for backend in ("native", "jax"):
        value, loss = optimize(forest, X, y, FS, steps=30, linear_scaling=scaled, backend=backend)
        results[backend] = np.asarray(value[0])[const], float(loss[0])
        np.testing.assert_allclose(results[backend][0], planted, rtol=1e-3, atol=1e-4)
        assert results[backend][1] < 1e-8 * np.var(y)
    np.testing.assert_allclose(results["native"][0], results["jax"][0], rtol=1e-3, atol=1e-4)


def test_native_and_jax_paths_reach_the_same_losses_on_random_forests():
    forest = _generator(16)(jax.random.key(21))
    y = (np.sin(X[:, 0]) * 1.3 + 0.5 * X[:, 1] * X[:, 0]).astype(np.float32)
    before = reference_eval(forest, X, FS)[..., 0]
    initial = np.array([_scaled_mse(p, y, True) for p in before])
    losses = {b: np.asarray(optimize(forest, X, y, FS, steps=8, backend=b)[1]) for b in ("native", "jax")}
    finite = np.isfinite(initial)
    np.testing.assert_array_equal(np.isfinite(losses["native"]), np.isfinite(losses["jax"]))
    # the paths take the same steps up to float32 rounding: the losses agree
    np.testing.assert_allclose(losses["native"][finite], losses["jax"][finite], rtol=1e-3, atol=1e-6)
    assert np.any(losses["native"][finite] < 0.97 * initial[finite])


def test_backend_is_chosen_and_checked():
    custom = FunctionSet(("add", "sq"), custom={"sq": (1, lambda a: a * a)})
    expected = "native" if jax.default_backend() == "cpu" else "jax"
    assert choose_backend("auto", FS) == expected and choose_backend("auto", custom) == "jax"
    assert choose_backend("jax", FS) == "jax"
    forest = Forest.from_tuples([("sq", C(1.0))], 4, custom)
    with pytest.raises(ArgumentError, match="backend='native' is not available"):
        optimize_constants(forest, X, X[:, 0], custom, backend="native")
    with pytest.raises(ArgumentError, match="backend must be one of"):
        optimize_constants(forest, X, X[:, 0], custom, backend="gpu")
    with pytest.raises(ArgumentError, match="backend must be one of"):
        ConstantOptimizer(backend="c++")
    assert ConstantOptimizer(backend="jax") != ConstantOptimizer()
    assert "backend='jax'" in repr(ConstantOptimizer(backend="jax"))
    # a custom function set runs the JAX path under "auto"
    value, loss = optimize(forest, X, 3.0 * np.ones(40, np.float32), custom, linear_scaling=False)
    assert abs(float(np.asarray(value[0])[1]) ** 2 - 3.0) < 1e-4


def test_native_memory_is_checked_up_front(monkeypatch):
    forest = _generator(4)(jax.random.key(0))
    monkeypatch.setenv("EVOTENSOR_GP_MEMORY_LIMIT", str(2**30))
    with pytest.raises(ArgumentError, match="max_constants=100000 too large"):
        optimize_constants(forest, X, X[:, 0], FS, max_constants=100_000, backend="native")
