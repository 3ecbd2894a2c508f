"""The scikit-learn estimators SymbolicRegressor and SymbolicClassifier (evotensor.gp.sklearn).

The default tier shares ONE regressor configuration (pop 200, max_len 32, data [200, 2]), so its
fits reuse one compiled program (the estimators' program cache): the planted problem, the
reproducibility, max_time and the reference test against ``evotensor.run``. The classification
data sets and scikit-learn's full estimator-check table are ``slow``.

scikit-learn's checks (``test_sklearn_estimator_checks``, slow) all pass at the budgets given
there; none is skipped or expected to fail except ``check_array_api_input`` (skipped by scikit-learn
itself unless ``SCIPY_ARRAY_API=1``: the estimators compute in JAX, not through the array API).
The classifier runs the table at pop 64 x 10 generations because ``check_classifiers_train``
asks for training accuracy > 0.83 on blobs; the regressor at pop 32 x 3.
"""

from __future__ import annotations

import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.utils import estimator_checks as sk_checks

import evotensor
from evotensor.core.checks import ArgumentError
from evotensor.gp import GP, FunctionSet, SymbolicClassifier, SymbolicRegression, SymbolicRegressor
from evotensor.gp.sklearn import CHUNK

FAST = dict(population_size=200, generations=30, max_len=32)


def planted(n: int = 200, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, size=(n, 2))
    return X, 2.5 * X[:, 0] ** 2 - X[:, 1] + 3.0


@pytest.fixture(scope="module")
def fitted() -> SymbolicRegressor:
    X, y = planted()
    return SymbolicRegressor(**FAST, random_state=0).fit(X, y)


# -- parameters (no compile) ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("population_size", 1),
        ("population_size", 2.5),
        ("generations", 0),
        ("function_set", ()),
        ("function_set", ("add", "nope")),
        ("function_set", "add"),
        ("max_len", 0),
        ("init_depth", (3, 1)),
        ("init_depth", 4),
        ("tournament_size", 0),
        ("elite_rate", 1.0),
        ("mutation_rate", 1.5),
        ("parsimony_coefficient", -0.1),
        ("parsimony_coefficient", "sometimes"),
        ("linear_scaling", "yes"),
        ("refine_top", -1),
        ("const_prob", 1.5),
        ("const_range", (1.0, -1.0)),
        ("const_range", (0.0, float("inf"))),
        ("function_weights", {"tan": 1.0}),
        ("function_weights", (1.0, -1.0, 1.0, 1.0)),
        ("fixed_constants", (0.1,)),  # not exact in float32
        ("fixed_constants", 1.0),
        ("fixed_constant_prob", 1.0),
        ("survival", "plus"),
        ("model_selection", "simplest"),
        ("max_time", 0.0),
        ("max_time", float("nan")),
        ("random_state", -1),
        ("random_state", "seed"),
        ("backend", "cuda"),
        ("verbose", -1),
    ],
)
def test_bad_parameter_is_named_in_fit(param, value):
    X, y = planted(20)
    model = SymbolicRegressor(**{param: value})  # stored, never checked here (scikit-learn's rule)
    assert model.get_params()[param] is value or model.get_params()[param] == value
    with pytest.raises(ValueError, match=param) as info:
        model.fit(X, y)
    assert isinstance(info.value, ArgumentError)


def test_const_prob_and_function_weights_reach_the_strategy():
    """The regressor's terminal-set and function-weight options are the GP's (no compile)."""
    model = SymbolicRegressor(
        function_set=("add", "mul", "sin"),
        const_prob=0.0,
        function_weights={"sin": 0.5},
        const_range=(1.0, 1.0),
    )
    c = model._checked()
    gp = GP(c["population_size"], c["function_set"], 2, c["max_len"], **model._strategy_options(c, 1))
    assert gp.const_prob == 0.0 and gp.const_range == (1.0, 1.0)
    assert gp.function_weights == pytest.approx((0.4, 0.4, 0.2))  # unnamed functions keep weight 1
    assert gp.initializer.function_weights == gp.mutation_generator.function_weights == gp.function_weights
    default = SymbolicRegressor()
    c = default._checked()
    gp = GP(c["population_size"], c["function_set"], 2, c["max_len"], **default._strategy_options(c, 1))
    assert gp.const_prob == 0.5 and gp.function_weights is None and gp.const_range == (-1.0, 1.0)


def test_const_range_sets_the_value_of_every_new_constant_leaf():
    """``const_range=(1, 1)``: the {x, 1} terminal set; every constant of the initial trees is a 1."""
    from evotensor.gp.functions import CONST

    model = SymbolicRegressor(population_size=64, const_prob=0.5, const_range=(1.0, 1.0))
    c = model._checked()
    gp = GP(c["population_size"], c["function_set"], 2, c["max_len"], **model._strategy_options(c, 1))
    state = gp.init(jax.random.key(0))
    is_const = np.asarray(state.forest.opcode) == CONST
    assert is_const.any() and np.all(np.asarray(state.forest.value)[is_const] == 1.0)


def test_fixed_constants_are_never_tuned_and_show_as_literals():
    """``fixed_constants`` with Levenberg-Marquardt on: the run's trees read the constants' columns
    (never a tuned CONST: const_prob is 0), the models show them as literals, read the features only
    and predict what the run's trees compute on the data with the columns."""
    from evotensor.gp import evaluate
    from evotensor.gp.functions import CONST, VAR
    from evotensor.gp.terminals import with_constant_columns

    X, y = planted(60)
    model = SymbolicRegressor(
        population_size=48,
        generations=CHUNK,
        max_len=16,
        random_state=0,
        constant_optimization="auto",
        const_prob=0.0,
        fixed_constants=(1.0, 2.0),
        fixed_constant_prob=0.5,
    ).fit(X, y)
    run = model.run_result_.state.forest
    op, val = np.asarray(run.opcode), np.asarray(run.value)
    assert not np.any(op == CONST) and np.any((op == VAR) & (val >= 2))  # the columns, untouched
    assert set(np.unique(val[op == VAR]).astype(int)) <= {0, 1, 2, 3}
    shown = 0
    X1 = with_constant_columns(X, (1.0, 2.0))
    for m in model.front_models_:
        mop, mval = np.asarray(m.tree.opcode), np.asarray(m.tree.value)
        assert set(mval[mop == CONST]) <= {1.0, 2.0} and not np.any((mop == VAR) & (mval >= 2))
        assert {s.name for s in m.sympy(simplify=False).free_symbols} <= {"x0", "x1"}
        shown += np.any(mop == CONST)
    assert shown > 0
    # the chosen model's prediction: the hall of fame's tree on the data with the columns, scaled
    hof = model.run_result_.state.hall_of_fame
    k = model.best_.complexity - 1
    raw = np.asarray(
        evaluate(jax.tree_util.tree_map(lambda a: np.asarray(a)[k], hof.forest), X1, model.best_.function_set)
    )
    want = raw[:, 0] * model.best_.slope[0] + model.best_.intercept[0]
    np.testing.assert_allclose(model.predict(X), want, rtol=1e-6, atol=1e-6)


def test_bad_combination_names_the_parameter():
    X, y = planted(20)
    with pytest.raises(ArgumentError, match="parsimony_coefficient"):
        SymbolicRegressor(survival="nsga2", parsimony_coefficient=0.01).fit(X, y)
    with pytest.raises(ArgumentError, match="metric"):
        SymbolicClassifier(metric="mse").fit(X, (y > 3).astype(int))
    with pytest.raises(ArgumentError, match="one class"):
        SymbolicClassifier().fit(X, np.zeros(20))
    with pytest.raises(ArgumentError, match="logit_scaling must be a bool"):
        SymbolicClassifier(logit_scaling="yes").fit(X, (y > 3).astype(int))


def test_classifier_models_carry_the_logit_map_fitted_on_the_training_rows():
    from evotensor.gp import evaluate
    from evotensor.gp.classification import SymbolicClassification, classification_data

    X, y, X_test, _, _ = classification_data("iris", seed=0)
    model = SymbolicClassifier(
        population_size=64, generations=3, max_len=16, random_state=0, logit_scaling=True
    )
    best = model.fit(X, y).best_
    assert best.slope.shape == best.intercept.shape == (3,) and np.all(np.isfinite(best.slope))
    problem = SymbolicClassification(
        jnp.asarray(X, jnp.float32), jnp.asarray(y, jnp.int32), model._function_set, n_classes=3
    )
    slope, intercept = problem.scaling(best.tree)
    np.testing.assert_allclose(best.slope, slope, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(best.intercept, intercept, rtol=1e-5, atol=1e-6)
    raw = np.asarray(
        evaluate(best.tree, jnp.asarray(X_test, jnp.float32), model._function_set, 3), np.float64
    )
    np.testing.assert_allclose(model.decision_function(X_test), raw * best.slope + best.intercept, rtol=1e-5)
    assert all("scaled:" in row["expression"] for row in model.pareto_front_)
    unscaled = SymbolicClassifier(population_size=64, generations=3, max_len=16, random_state=0)
    assert unscaled.fit(X, y).best_.slope is None  # the estimator's default: the trees' own outputs


def test_get_params_set_params_clone_round_trip():
    fs = FunctionSet(("add", "mul", "sin"))
    model = SymbolicRegressor(population_size=77, function_set=fs, model_selection="accuracy", random_state=5)
    params = model.get_params()
    assert params["population_size"] == 77 and params["function_set"] is fs
    twin = clone(model)
    assert twin is not model and twin.get_params() == params
    twin.set_params(generations=3, max_time=2.5)
    assert (twin.generations, twin.max_time) == (3, 2.5) and model.generations == 20
    assert set(SymbolicClassifier().get_params()) >= {"metric", "population_size", "random_state"}
    with pytest.raises(ValueError, match="nope"):
        model.set_params(nope=1)


def test_unfitted_estimator_raises():
    with pytest.raises(NotFittedError):
        SymbolicRegressor().predict(np.zeros((3, 2)))
    with pytest.raises(NotFittedError):
        SymbolicClassifier().sympy()


# scikit-learn's checks that never fit (the ones this scikit-learn version has)
NO_FIT_CHECKS = [
    getattr(sk_checks, name)
    for name in (
        "check_no_attributes_set_in_init",
        "check_parameters_default_constructible",
        "check_do_not_raise_errors_in_init_or_set_params",
        "check_set_params",
        "check_get_params_invariance",
        "check_estimators_unfitted",
        "check_estimator_repr",
        "check_estimator_cloneable",
        "check_mixin_order",
        "check_valid_tag_types",
    )
    if hasattr(sk_checks, name)
]


def _portfolio():
    from evotensor.gp import SymbolicPortfolio

    return SymbolicPortfolio(
        [("a", SymbolicRegressor(generations=3)), ("b", SymbolicRegressor(generations=2))]
    )


# one table for the family's estimators (the portfolio's fitted checks: tests/gp/test_portfolio.py)
@pytest.mark.parametrize("check", NO_FIT_CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize(
    "make",
    [SymbolicRegressor, SymbolicClassifier, _portfolio],
    ids=["SymbolicRegressor", "SymbolicClassifier", "SymbolicPortfolio"],
)
def test_sklearn_checks_without_fit(make, check):
    estimator = make()
    check(type(estimator).__name__, estimator)


def test_constant_optimization_tunes_constants_lamarckian():
    # y = 2.5 * sin(1.3 x0) + x1: the inner constant 1.3 is out of linear scaling's reach
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (150, 2)).astype(np.float32)
    y = 2.5 * np.sin(1.3 * X[:, 0]) + X[:, 1]
    tuned = SymbolicRegressor(
        population_size=100, generations=6, max_len=16, random_state=0, constant_optimization="auto"
    ).fit(X, y)
    state = tuned.run_result_.state
    # the state holds the tuned trees (Lamarckian): re-scoring them gives the told fitness
    from evotensor.gp import SymbolicRegression

    plain = SymbolicRegression(X, y, tuned.best_.function_set, backend="jax")
    rescored = np.asarray(plain.evaluate(None, state.forest).fitness)
    np.testing.assert_allclose(rescored, np.asarray(state.fitness), rtol=1e-4, atol=1e-6)
    assert np.isfinite(tuned.best_.loss) and tuned.score(X, y) > 0.5
    with pytest.raises(ArgumentError, match="constant_optimization"):
        SymbolicRegressor(constant_optimization="lm", **FAST).fit(X, y)


# -- the shared regressor configuration ----------------------------------------------------------------


def test_planted_problem_solved(fitted):
    X_test, y_test = planted(500, seed=1)
    assert fitted.score(X_test, y_test) > 0.999
    assert fitted.n_generations_ == 30 and len(fitted.history_["best_fitness"]) == 30
    assert fitted.n_features_in_ == 2 and fitted.best_.complexity <= 32
    # the reported expression is the model: a sympy of it predicts what predict() predicts
    import sympy as sp

    expr = fitted.sympy()
    f = sp.lambdify(sorted(expr.free_symbols, key=lambda s: s.name), expr, "numpy")
    np.testing.assert_allclose(f(X_test[:, 0], X_test[:, 1]), fitted.predict(X_test), rtol=1e-3, atol=1e-3)
    assert "x_{0}" in fitted.latex()


def test_front_rows_are_a_pareto_front(fitted):
    rows = fitted.pareto_front_
    assert len(rows) >= 2 and sum(r["chosen"] for r in rows) == 1
    size = [r["complexity"] for r in rows]
    loss = [r["loss"] for r in rows]
    assert size == sorted(size) and all(a > b for a, b in zip(loss, loss[1:]))
    chosen = next(r for r in rows if r["chosen"])
    assert chosen["expression"] == fitted.best_.expression and chosen["loss"] == fitted.best_.loss
    # every row's expression carries its linear scaling: 'a*(f) + b'
    assert all("*(" in r["expression"] for r in rows if r["complexity"] > 1)


def test_front_models_are_the_front_rows_and_best_is_the_chosen_one(fitted):
    rows, models = fitted.pareto_front_, fitted.front_models_
    assert [m.expression for m in models] == [r["expression"] for r in rows]
    assert [m.complexity for m in models] == [r["complexity"] for r in rows]
    chosen = next(i for i, r in enumerate(rows) if r["chosen"])
    assert fitted.best_ is models[chosen]
    X, _ = planted(30, seed=2)
    simplest = models[0].raw_predict(X)[:, 0]  # any member predicts, with its own scaling
    assert simplest.shape == (30,) and np.all(np.isfinite(simplest))


def test_same_random_state_same_model_and_different_seed_differs(fitted):
    X, y = planted()
    again = SymbolicRegressor(**FAST, random_state=0).fit(X, y)
    assert again.best_.expression == fitted.best_.expression
    np.testing.assert_array_equal(again.history_["best_fitness"], fitted.history_["best_fitness"])
    assert again.compile_seconds_ == 0.0  # the program compiled by the first fit was reused
    other = SymbolicRegressor(**FAST, random_state=1).fit(X, y)
    assert not np.array_equal(other.history_["generation_mean"], fitted.history_["generation_mean"])
    rs = SymbolicRegressor(**FAST, random_state=np.random.RandomState(3)).fit(X, y)
    rs2 = SymbolicRegressor(**FAST, random_state=np.random.RandomState(3)).fit(X, y)
    assert rs.best_.expression == rs2.best_.expression


def test_max_time_stops_between_chunks(fitted):
    X, y = planted()
    model = SymbolicRegressor(**{**FAST, "generations": 10_000}, max_time=1e-6, random_state=0).fit(X, y)
    assert model.n_generations_ == CHUNK < model.generations  # one chunk always runs
    assert len(model.history_["best_fitness"]) == CHUNK == model.run_result_.generations
    assert np.isfinite(model.predict(X)).all()


def test_fit_follows_evotensor_run_and_masking_changes_nothing(fitted):
    """Reference 1: the estimator's driver follows evotensor.run's key schedule, so it starts from the
    same population (its first generation's tree lengths are bit-identical, its fitness equal up to
    float32 rounding: evotensor.run bakes the data into its program as constants, which XLA folds
    differently). Reference 2: a run of 12 generations (the second chunk masked after 2) is exactly
    the first 12 generations of a run of 30."""
    X, y = planted()
    model = SymbolicRegressor(**{**FAST, "generations": 12}, random_state=0).fit(X, y)
    fs = FunctionSet(("add", "sub", "mul", "div"), protected=True)
    problem = SymbolicRegression(X.astype(np.float32), y.astype(np.float32), fs)
    result = evotensor.run(GP(200, fs, 2, 32), problem, 1, jax.random.key(0))
    for name in ("mean_length", "max_length"):
        assert model.history_[name][0] == result.history[name][0]
    np.testing.assert_allclose(
        model.history_["generation_mean"][0], result.history["generation_mean"][0], rtol=1e-4
    )
    np.testing.assert_allclose(
        model.history_["best_fitness"][0], result.history["best_fitness"][0], rtol=1e-4
    )
    for name, values in model.history_.items():
        np.testing.assert_array_equal(values, fitted.history_[name][:12], err_msg=name)
    assert model.run_result_.best_fitness == float(fitted.history_["best_fitness"][11])


def test_pickle_round_trip_predicts_the_same(fitted):
    X, _ = planted(50, seed=2)
    twin = pickle.loads(pickle.dumps(fitted))
    np.testing.assert_array_equal(twin.predict(X), fitted.predict(X))
    assert twin.best_.function_set == fitted.best_.function_set


def _halve(a):  # module level: a function set holding it pickles
    return 0.5 * a


def test_an_estimator_with_a_users_own_module_level_function_pickles():
    """Its FunctionSet is no built-in set (packing it must not raise) and pickles by its arguments."""
    fs = FunctionSet(("add", "halve"), protected=True, custom={"halve": (1, _halve)})
    twin = pickle.loads(pickle.dumps(SymbolicRegressor(function_set=fs, random_state=3)))
    assert twin.get_params()["function_set"] == fs and twin.get_params()["random_state"] == 3


def test_dataframe_feature_names_name_the_variables(fitted):
    pd = pytest.importorskip("pandas")
    X, y = planted()
    frame = pd.DataFrame(X, columns=["speed", "angle"])
    model = SymbolicRegressor(**FAST, random_state=0).fit(frame, y)
    assert list(model.feature_names_in_) == ["speed", "angle"]
    assert "x0" not in model.best_.expression and "speed" in model.best_.expression
    assert {s.name for s in model.sympy().free_symbols} <= {"speed", "angle"}
    np.testing.assert_array_equal(model.predict(frame), fitted.predict(X))
    with pytest.raises(ValueError, match="angle"):
        model.predict(frame.iloc[:, :1])


# -- classification (slow: each data set compiles its own program) ------------------------------------


@pytest.mark.slow
def test_iris_test_accuracy():
    from evotensor.gp.classification import classification_data

    X, y, X_test, y_test, _ = classification_data("iris", seed=0)
    names = np.array(["setosa", "versicolor", "virginica"])
    model = SymbolicClassifier(
        population_size=500, generations=40, parsimony_coefficient="auto", random_state=0
    ).fit(X, names[y])
    assert list(model.classes_) == sorted(names)
    assert model.score(X_test, names[y_test]) >= 0.9
    proba = model.predict_proba(X_test)
    assert proba.shape == (len(X_test), 3)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(model.classes_[proba.argmax(axis=1)], model.predict(X_test))
    assert isinstance(model.sympy(), list) and len(model.sympy()) == 3


@pytest.mark.slow
def test_breast_cancer_binary():
    from evotensor.gp.classification import classification_data

    X, y, X_test, y_test, _ = classification_data("breast_cancer", seed=0)
    model = SymbolicClassifier(population_size=500, generations=30, random_state=0).fit(X, y)
    assert model.score(X_test, y_test) >= 0.9
    logit = model.decision_function(X_test)
    assert logit.shape == (len(X_test),)
    np.testing.assert_array_equal(model.predict(X_test), (logit > 0).astype(int))
    p = model.predict_proba(X_test)[:, 1]
    np.testing.assert_allclose(p, 1.0 / (1.0 + np.exp(-logit)), rtol=1e-6, atol=1e-12)


@sk_checks.parametrize_with_checks(
    [
        SymbolicRegressor(population_size=32, generations=3, max_len=16, random_state=0),
        SymbolicClassifier(population_size=64, generations=10, max_len=16, random_state=0),
    ]
)
@pytest.mark.slow
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


# -- the persistent compile cache -------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def _no_cache_writes_unless_the_suite_asks():
    """The estimators turn JAX's persistent compile cache on by default (in ~/.cache); this module's
    in-process fits run without it, unless the suite's environment names a directory."""
    import os

    with pytest.MonkeyPatch.context() as mp:
        if "EVOTENSOR_CACHE_DIR" not in os.environ:
            mp.setenv("EVOTENSOR_CACHE_DIR", "off")
        yield


def test_fit_finds_its_cache_directory_before_compiling(fitted, monkeypatch):
    """The store's directory first (warning about an unusable one); JAX's own cache is turned on
    only for a configuration the store cannot key (a user's own function), before it compiles."""
    import evotensor.gp.sklearn as sk

    calls = []
    real = sk._Program._compile

    def directory(warn=False):
        calls.append(("directory", warn))
        return "/nowhere"

    def compile_(self, *args):
        calls.append("compile")
        return real(self, *args)

    monkeypatch.setattr(sk, "default_cache_dir", directory)
    monkeypatch.setattr(sk, "enable_default_cache", lambda warn=False: calls.append("jax cache"))
    monkeypatch.setattr(sk._Program, "_compile", compile_)
    SymbolicRegressor(**FAST, random_state=0).fit(*planted())  # the module's program: nothing new compiles
    assert calls[0] == ("directory", True) and "compile" in calls[1:] and "jax cache" not in calls
    calls.clear()
    # a callable model_selection: the store cannot key the front's program
    SymbolicRegressor(**FAST, random_state=0, model_selection=lambda loss, score, size: 0).fit(*planted())
    assert calls[:2] == [("directory", True), "jax cache"]


FIRST_FIT = """
import json, numpy as np
from evotensor.gp import SymbolicRegressor
rng = np.random.default_rng(0)
X = rng.uniform(-2, 2, (50, 2)); y = X[:, 0] * X[:, 1] + 1
m = SymbolicRegressor(population_size=16, generations=2, max_len=8, random_state=0).fit(X, y)
print(json.dumps({"best": m.best_.expression, "compile": m.compile_seconds_}))
"""


@pytest.mark.slow
def test_a_fresh_process_reads_the_first_fits_programs_from_the_default_cache(tmp_path):
    """With nothing set, a first fit writes its programs to ~/.cache/evotensor/jax and a second fresh
    process reads them (nothing new written, the same model); EVOTENSOR_CACHE_DIR=off writes nothing."""
    import json
    import os
    import subprocess
    import sys

    def fresh(home, **extra):
        env = {k: v for k, v in os.environ.items() if k != "EVOTENSOR_CACHE_DIR"}
        env.update(extra, HOME=str(home), JAX_PLATFORMS="cpu")
        out = subprocess.run([sys.executable, "-c", FIRST_FIT], env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    cache = tmp_path / "home" / ".cache" / "evotensor" / "jax"
    cold = fresh(tmp_path / "home")
    written = sorted(p.name for p in cache.iterdir())
    assert written  # at least the generation chunk's program
    warm = fresh(tmp_path / "home")
    assert sorted(p.name for p in cache.iterdir()) == written and warm["best"] == cold["best"]
    assert warm["compile"] < cold["compile"]
    off = fresh(tmp_path / "off", EVOTENSOR_CACHE_DIR="off")
    assert off["best"] == cold["best"] and not (tmp_path / "off").exists()


# -- stored executables ------------------------------------------------------------------------------


TINY = dict(population_size=16, generations=12, max_len=8)  # two chunks, the second masked


def _digest(m: SymbolicRegressor) -> list[str]:
    leaves = jax.tree_util.tree_leaves((m.run_result_.state, m.history_))
    return [np.asarray(a).tobytes().hex() for a in leaves] + [repr(r) for r in m.pareto_front_]


def _fit_counting(monkeypatch, X, y, **options):
    """A fit as in a fresh process (the in-process programs dropped): ``(model, programs compiled,
    programs loaded from the store)``."""
    import evotensor.gp.sklearn as sk

    compiled, loaded = [], []
    real_compile, real_load = sk._fresh_compile, sk.load_executable

    def compile_(*args):
        compiled.append(1)
        return real_compile(*args)

    def load(directory, label, key):
        out = real_load(directory, label, key)
        if out is not None:
            loaded.append(label)
        return out

    monkeypatch.setattr(sk, "_fresh_compile", compile_)
    monkeypatch.setattr(sk, "load_executable", load)
    sk._PROGRAMS.clear()
    m = SymbolicRegressor(**TINY, random_state=3, **options).fit(X, y)
    return m, len(compiled), sorted(loaded)


def test_a_fit_in_a_fresh_process_loads_the_stored_programs_and_compiles_nothing(tmp_path, monkeypatch):
    """The estimators' executables: stored by the first fit, loaded whole by the next (no trace, no
    compile), the same fit bit for bit; a corrupt entry is compiled again with a warning and
    replaced."""
    import evotensor.gp.sklearn as sk

    monkeypatch.setattr(sk, "default_cache_dir", lambda warn=False: str(tmp_path))
    X, y = planted(50)
    cold, n_compiled, n_loaded = _fit_counting(monkeypatch, X, y)
    store = tmp_path / "executables"
    assert n_compiled == 4 and not n_loaded
    assert sorted(p.name.split("-")[0] for p in store.iterdir()) == ["chunk", "front", "init", "scaling"]
    warm, n_compiled, n_loaded = _fit_counting(monkeypatch, X, y)
    assert n_compiled == 0 and n_loaded == ["chunk", "front", "init", "scaling"]
    assert _digest(warm) == _digest(cold) and warm.best_.expression == cold.best_.expression
    (entry,) = store.glob("front-*.exe")
    entry.write_bytes(entry.read_bytes()[:1000])
    with pytest.warns(RuntimeWarning, match="front.*cannot be loaded"):
        again, n_compiled, n_loaded = _fit_counting(monkeypatch, X, y)
    assert n_compiled == 1 and n_loaded == ["chunk", "init", "scaling"] and _digest(again) == _digest(cold)
    _, n_compiled, n_loaded = _fit_counting(monkeypatch, X, y)  # the entry was replaced
    assert n_compiled == 0 and len(n_loaded) == 4
    sk._PROGRAMS.clear()


def test_a_configuration_with_a_users_own_function_is_not_stored():
    """Its FunctionSet's repr names the function, not what it computes: no key could tell two apart."""
    import evotensor.gp.sklearn as sk

    X, y = planted(50)
    builtin = FunctionSet(("add", "mul"), protected=True)
    own = FunctionSet(("add", "twice"), protected=True, custom={"twice": (1, lambda a: 2 * a)})
    assert sk._stored_config(("k",), SymbolicRegression(X, y, builtin)) is not None
    assert sk._stored_config(("k",), SymbolicRegression(X, y, own)) is None


@pytest.mark.slow
def test_a_stored_program_given_other_arguments_is_compiled_again(tmp_path, monkeypatch):
    """Defence in depth against a key that does not describe its program: jax's check of the
    arguments refuses them before anything runs (here: more data rows), that program is compiled
    again with a warning, and the fit equals one without a store."""
    import evotensor.gp.sklearn as sk

    monkeypatch.setattr(sk, "default_cache_dir", lambda warn=False: str(tmp_path))
    # a key that leaves the data's shapes out
    monkeypatch.setattr(sk._Program, "_key", lambda self, name: "k" + self._label(name))
    _fit_counting(monkeypatch, *planted(50))
    with pytest.warns(RuntimeWarning, match="does not take this fit's arguments"):
        other, n_compiled, n_loaded = _fit_counting(monkeypatch, *planted(60))
    assert n_loaded == ["chunk", "front", "init", "scaling"] and n_compiled == 2  # the chunk, the scaling
    monkeypatch.setattr(sk, "default_cache_dir", lambda warn=False: None)
    plain, n_compiled, n_loaded = _fit_counting(monkeypatch, *planted(60))
    assert n_compiled == 4 and not n_loaded and _digest(other) == _digest(plain)
    sk._PROGRAMS.clear()


def test_the_fit_key_is_jax_random_key():
    import evotensor.gp.sklearn as sk

    for seed in (0, 1, 12345, 2**31 - 1, 2**31, 2**32 - 1):
        got, want = sk._random_key(seed), jax.random.key(seed)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(np.asarray(jax.random.key_data(got)), jax.random.key_data(want))


STORED_FIT = """
import json, logging, re, sys, numpy as np, jax
compiled, hits = [], []
class Log(logging.Handler):
    def emit(self, record):
        m = re.search(r"Finished XLA compilation of (\\S+)", record.getMessage())
        if m:
            compiled.append(m.group(1))
        m = re.search(r"Persistent compilation cache hit for '(\\S+)'", record.getMessage())
        if m:
            hits.append(m.group(1))
logging.getLogger("jax").addHandler(Log())
jax.config.update("jax_log_compiles", True)
options = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
if options.pop("jax_dir", None):  # the user's own JAX cache directory
    jax.config.update("jax_compilation_cache_dir", options.pop("dir"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
from evotensor.gp import SymbolicRegressor
rng = np.random.default_rng(0)
X = rng.uniform(-2, 2, (50, 2)); y = X[:, 0] * X[:, 1] + 1
m = SymbolicRegressor(population_size=16, generations=12, max_len=8, random_state=0, **options).fit(X, y)
fit_compiled = list(compiled)
m.predict(X[:7])
predict_compiled = compiled[len(fit_compiled):]
print(json.dumps({"best": m.best_.expression, "compiled": fit_compiled, "jax_cache_hits": hits,
                  "predict_compiled": predict_compiled}))
"""


@pytest.mark.slow
def test_a_fresh_process_loads_the_stored_executables_and_compiles_none_of_them(tmp_path):
    """Fresh processes on one cache directory: the first compiles and stores the fit's four programs
    (natively evaluated: their FFI handlers must be registered before a stored one loads); the next
    compiles nothing at all (none of them, no eager conversion of the data or the parameters) and
    finds the same model; so does a configuration sharing some programs with it. With a JAX cache
    directory of the user's own, the programs JAX reads back are not stored again (XLA:CPU would
    serialize them without some kernels) and later processes still run."""
    import json
    import os
    import subprocess
    import sys

    from evotensor.gp import native

    assert native.AVAILABLE, native.UNAVAILABLE_REASON
    programs = {"jit(init)", "jit(run_chunk)", "jit(coefficients)", "jit(<lambda>)"}
    env = {k: v for k, v in os.environ.items() if k != "EVOTENSOR_CACHE_DIR"}
    env.update(HOME=str(tmp_path), JAX_PLATFORMS="cpu")

    def fresh(**options):
        script = [sys.executable, "-c", STORED_FIT, json.dumps(options)]
        out = subprocess.run(script, env=env, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    store = tmp_path / ".cache" / "evotensor" / "jax" / "executables"
    cold = fresh()
    assert programs <= set(cold["compiled"]) and len(list(store.glob("*.exe"))) == 4
    warm = fresh()
    # nothing at all: neither the fit's programs nor an eager conversion of the data or parameters
    assert warm["compiled"] == [] and warm["best"] == cold["best"]
    # predict compiles its evaluation, not one program per conversion of the data and the tree
    eager = {"jit(stage)", "jit(broadcast_in_dim)", "jit(transpose)", "jit(convert_element_type)"}
    assert not eager & set(warm["predict_compiled"]), warm["predict_compiled"]
    # constant optimization: its chunk calls LAPACK (a crash if loaded uninitialized) and the native
    # linearization
    tuned_cold = fresh(constant_optimization="auto")
    tuned_warm = fresh(constant_optimization="auto")
    assert tuned_warm["compiled"] == [] and tuned_warm["best"] == tuned_cold["best"]
    assert not cold["jax_cache_hits"] + warm["jax_cache_hits"] + tuned_warm["jax_cache_hits"]
    assert len(list(store.glob("*.exe"))) == 8  # the tuned fit's initial population's program too

    users = {"jax_dir": True, "dir": str(tmp_path / "users")}
    first = fresh(**users)
    store = tmp_path / "users" / "executables"
    assert first["best"] == cold["best"] and len(list(store.glob("*.exe"))) == 4
    for entry in store.glob("*.exe"):
        entry.unlink()
    refill = fresh(**users)
    labels = {"jit_init": "init", "jit_run_chunk": "chunk", "jit_coefficients": "scaling"}
    labels["jit__lambda"] = "front"
    from_jax = {labels[name] for name in refill["jax_cache_hits"]}
    assert refill["best"] == cold["best"] and "chunk" in from_jax  # (it compiles for more than 0.2 s)
    assert {p.name.split("-")[0] for p in store.glob("*.exe")} == set(labels.values()) - from_jax
    assert fresh(**users)["best"] == cold["best"]


# -- compile options ----------------------------------------------------------------------------------


def test_native_programs_get_the_cpu_compiler_options_and_xla_evaluated_ones_do_not():
    """The classic emitters' programs equal the fusion emitters' bit for bit only where no tree is
    evaluated or scaled by XLA itself: the native evaluator and native constant linearization, no
    logit map."""
    import evotensor.gp.sklearn as sk
    from evotensor.gp import ConstantOptimizer, SymbolicClassification, native

    X, y = planted(50)
    fs = FunctionSet(("add", "sub", "mul", "div", "sin"))
    native_problem = SymbolicRegression(X, y, fs)
    jax_problem = SymbolicRegression(X, y, fs, backend="jax")
    jax_tuning = SymbolicRegression(X, y, fs, constant_optimization=ConstantOptimizer(backend="jax"))
    labels = (y > np.median(y)).astype(np.int32)
    plain_classes = SymbolicClassification(X, labels, fs, logit_scaling=False)
    logit_classes = SymbolicClassification(X, labels, fs, logit_scaling=True)
    # the native evaluator is the CPU default (built by `make test`); on an accelerator none apply
    assert native.AVAILABLE, native.UNAVAILABLE_REASON
    want = sk.CPU_COMPILER_OPTIONS if jax.default_backend() == "cpu" else None
    assert sk._compiler_options(native_problem) == want
    assert sk._compiler_options(plain_classes) == want
    for problem in (jax_problem, jax_tuning, logit_classes):
        assert sk._compiler_options(problem) is None


WITH_AND_WITHOUT_OPTIONS = """
import json, numpy as np
import evotensor.gp.sklearn as sk
from evotensor.gp import SymbolicRegressor
rng = np.random.default_rng(0)
X = rng.uniform(-2, 2, (200, 2)); y = 2.5 * X[:, 0] ** 2 - X[:, 1] + 3.0
def fit(**kw):
    sk._PROGRAMS.clear()
    m = SymbolicRegressor(population_size=200, generations=30, max_len=32, random_state=0, **kw).fit(X, y)
    leaves = sk.jax.tree_util.tree_leaves((m.run_result_.state, m.history_))
    state = [np.asarray(a).tobytes().hex() for a in leaves]
    return state, [r["loss"] for r in m.pareto_front_], sk._PROGRAMS[next(iter(sk._PROGRAMS))].options
results = []
for kw in ({}, dict(survival="nsga2", constant_optimization="auto", refine_top=16)):
    with_options = fit(**kw)
    sk.CPU_COMPILER_OPTIONS, saved = {}, sk.CPU_COMPILER_OPTIONS
    without = fit(**kw)
    sk.CPU_COMPILER_OPTIONS = saved
    results.append([with_options[2], without[2], with_options[:2] == without[:2]])
print(json.dumps(results))
"""


@pytest.mark.slow
def test_fits_compiled_with_and_without_the_cpu_compiler_options_are_bit_identical():
    """A fit compiled with CPU_COMPILER_OPTIONS (native evaluator) and the same fit compiled with XLA's
    defaults: every leaf of the final state and of the history and the front's losses, bit for bit
    (defaults and NSGA-II with constant optimization). In a fresh process with XLA's default flags
    (this suite's faster-compiling ones, ``tests/conftest.py``, round some constants differently)."""
    import json
    import os
    import subprocess
    import sys

    from evotensor.gp import native

    assert native.AVAILABLE, native.UNAVAILABLE_REASON  # the options apply to native programs only
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(EVOTENSOR_CACHE_DIR="off", JAX_PLATFORMS="cpu")
    out = subprocess.run(
        [sys.executable, "-c", WITH_AND_WITHOUT_OPTIONS], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr[-2000:]
    for with_options, without, same in json.loads(out.stdout.strip().splitlines()[-1]):
        assert with_options == {"xla_cpu_use_fusion_emitters": False} and not without
        assert same
