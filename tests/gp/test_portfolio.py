"""SymbolicPortfolio (evotensor.gp.portfolio): several SymbolicRegressor searches, one model from the
union of their fronts.

The fitted tests share ONE member configuration, test_sklearn's (pop 200, max_len 32, data
[200, 2]): members that differ only in ``generations`` / ``random_state`` run the same compiled
program, and in one process test_sklearn's fits reuse it too. scikit-learn's checks that never fit
run here; its whole table (every check fitting on its own data shapes, so compiling for each; about
90 s on the 2-core machine) is ``slow``: all pass but ``check_array_api_input``, which scikit-learn
skips itself unless ``SCIPY_ARRAY_API=1`` (the members compute in JAX, not through the array API).
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.utils import estimator_checks as sk_checks

from evotensor.core.checks import ArgumentError
from evotensor.gp import FunctionSet, SymbolicClassifier, SymbolicPortfolio, SymbolicRegressor
from evotensor.gp.portfolio import (
    EXACT_EXP_WEIGHT,
    EXACT_OPTIONS,
    EXACT_UNARY_WEIGHT,
    exact_options,
    union_front,
)

SHARED = dict(population_size=200, max_len=32)  # test_sklearn's FAST configuration


def planted(n: int = 200, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2.0, 2.0, size=(n, 2))
    return X, 2.5 * X[:, 0] ** 2 - X[:, 1] + 3.0


def members(long_gens: int = 30, short_gens: int = 10) -> list[tuple[str, SymbolicRegressor]]:
    return [
        ("long", SymbolicRegressor(**SHARED, generations=long_gens)),
        ("short", SymbolicRegressor(**SHARED, generations=short_gens)),
    ]


@pytest.fixture(scope="module", autouse=True)
def _no_cache_writes_unless_the_suite_asks():
    """As in test_sklearn: no persistent compile cache in ~/.cache from this module's fits."""
    import os

    with pytest.MonkeyPatch.context() as mp:
        if "EVOTENSOR_CACHE_DIR" not in os.environ:
            mp.setenv("EVOTENSOR_CACHE_DIR", "off")
        yield


@pytest.fixture(scope="module")
def fitted() -> SymbolicPortfolio:
    X, y = planted()
    return SymbolicPortfolio(members(), random_state=0).fit(X, y)


# -- the union front against a brute-force reference --------------------------------------------------


def brute_front(points: list[tuple[int, float]]) -> list[int]:
    """Indices of the non-dominated ``(size, loss)`` points (float32 losses), the first of equal
    points only, by size ascending."""
    keep = []
    for i, (s, v) in enumerate(points):
        v = np.float32(v)
        if not np.isfinite(v):
            continue
        dominated = any(
            (t <= s and np.float32(w) <= v and (t < s or np.float32(w) < v))
            or (t == s and np.float32(w) == v and j < i)
            for j, (t, w) in enumerate(points)
            if j != i and np.isfinite(np.float32(w))
        )
        if not dominated:
            keep.append(i)
    return sorted(keep, key=lambda i: points[i][0])


def reference_choice(loss: list[float], size: list[int]) -> tuple[np.ndarray, set[int]]:
    """PySR's score along a front (float64) and the positions its "best" rule may choose: the
    candidates (loss <= 1.5 x the lowest) whose score is the highest (up to float32 rounding)."""
    loss, size = np.asarray(loss, np.float64), np.asarray(size, np.float64)
    score = np.zeros(loss.size)
    for i in range(1, loss.size):
        with np.errstate(divide="ignore"):
            score[i] = -np.log(loss[i] / loss[i - 1]) / (size[i] - size[i - 1]) if loss[i] > 0 else np.inf
    candidates = np.flatnonzero(loss <= 1.5 * loss.min())
    top = score[candidates].max()
    slack = 0.0 if np.isinf(top) else 1e-5 * max(1.0, abs(top))
    return score, {int(i) for i in candidates if score[i] >= top - slack}


fronts = st.lists(
    st.lists(
        st.tuples(st.integers(1, 12), st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.0, 3.5, np.inf])),
        min_size=1,
        max_size=6,
    ),
    min_size=1,
    max_size=3,
)


@given(fronts)
def test_union_front_is_the_brute_force_nondominated_union(parts):
    points = [p for part in parts for p in part]
    expected = brute_front(points)
    if not expected:
        with pytest.raises(ArgumentError, match="no finite loss"):
            union_front([[v for _, v in p] for p in parts], [[s for s, _ in p] for p in parts])
        return
    member, position, score, chosen = union_front(
        [[v for _, v in p] for p in parts], [[s for s, _ in p] for p in parts]
    )
    offsets = np.cumsum([0] + [len(p) for p in parts])
    got = [int(offsets[k] + i) for k, i in zip(member, position)]
    assert got == expected
    expected_score, choices = reference_choice([points[i][1] for i in got], [points[i][0] for i in got])
    np.testing.assert_allclose(score, expected_score, rtol=1e-5, atol=1e-6)
    assert chosen in choices


def test_fitted_front_is_the_nondominated_union_of_the_members_fronts(fitted):
    union = [(name, m) for name, est in zip(["long", "short"], fitted.estimators_) for m in est.front_models_]
    expected = brute_front([(m.complexity, m.loss) for _, m in union])
    rows = fitted.pareto_front_
    assert [(r["member"], r["complexity"], r["loss"]) for r in rows] == [
        (union[i][0], union[i][1].complexity, union[i][1].loss) for i in expected
    ]
    assert [r["expression"] for r in rows] == [union[i][1].expression for i in expected]
    # the chosen model is on the union front, by the "best" rule on it
    assert sum(r["chosen"] for r in rows) == 1
    chosen = next(j for j, r in enumerate(rows) if r["chosen"])
    score, choices = reference_choice([r["loss"] for r in rows], [r["complexity"] for r in rows])
    assert chosen in choices
    np.testing.assert_allclose([r["score"] for r in rows], score, rtol=1e-5, atol=1e-6)
    assert fitted.best_ is fitted.front_models_[chosen] and fitted.best_member_ == rows[chosen]["member"]
    assert [m.score for m in fitted.front_models_] == [r["score"] for r in rows]
    assert fitted.front_members_ == [r["member"] for r in rows]


def test_fitted_portfolio_predicts_exports_and_pickles_its_chosen_model(fitted):
    X, y = planted(100, seed=1)
    np.testing.assert_array_equal(fitted.predict(X), fitted.best_.raw_predict(X)[:, 0])
    assert fitted.score(X, y) > 0.9 and fitted.n_features_in_ == 2
    assert fitted.sympy() == fitted.best_.sympy() and fitted.latex() == fitted.best_.latex()
    twin = pickle.loads(pickle.dumps(fitted))
    np.testing.assert_array_equal(twin.predict(X), fitted.predict(X))
    assert twin.pareto_front_ == fitted.pareto_front_
    long, short = fitted.estimators_
    assert (long.n_generations_, short.n_generations_) == (30, 10)
    assert fitted.evaluations_ == 200 * 30 + 200 * 10
    assert fitted.compile_seconds_ == long.compile_seconds_ + short.compile_seconds_
    assert fitted.run_seconds_ == long.run_seconds_ + short.run_seconds_
    assert fitted.named_estimators_["short"] is short
    with pytest.raises(ValueError, match="3 features"):
        fitted.predict(np.zeros((4, 3)))


def test_dataframe_columns_name_the_variables_of_every_member(fitted):
    pd = pytest.importorskip("pandas")
    X, y = planted()
    frame = pd.DataFrame(X, columns=["speed", "angle"])
    model = SymbolicPortfolio(members(), random_state=0).fit(frame, y)
    assert list(model.feature_names_in_) == ["speed", "angle"]
    assert all("x0" not in r["expression"] and "x1" not in r["expression"] for r in model.pareto_front_)
    np.testing.assert_array_equal(model.predict(frame), fitted.predict(X))
    with pytest.raises(ValueError, match="angle"):
        model.predict(frame.iloc[:, :1])


# -- seeds, nested parameters, max_time -------------------------------------------------------------


def test_same_random_state_same_model_and_members_get_distinct_seeds(fitted):
    X, y = planted()
    again = SymbolicPortfolio(members(), random_state=0).fit(X, y)
    assert again.pareto_front_ == fitted.pareto_front_
    seeds = [est.random_state for est in fitted.estimators_]
    assert seeds == [est.random_state for est in again.estimators_] and len(set(seeds)) == 2
    # None: every member keeps its own random_state (here 7 and 7, as the suite's recipe seeds them)
    own = SymbolicPortfolio(members(10, 10), random_state=None)
    own.set_params(long__random_state=7, short__random_state=7).fit(X, y)
    assert [est.random_state for est in own.estimators_] == [7, 7]
    alone = SymbolicRegressor(**SHARED, generations=10, random_state=7).fit(X, y)
    assert own.estimators_[0].best_.expression == alone.best_.expression
    np.testing.assert_array_equal(own.estimators_[1].history_["best_fitness"], alone.history_["best_fitness"])


def test_member_seeds_are_distinct_and_follow_random_state():
    seeds = SymbolicPortfolio(members(), random_state=0)._checked()["seeds"]
    assert seeds == SymbolicPortfolio(members(), random_state=0)._checked()["seeds"] and len(set(seeds)) == 2
    assert SymbolicPortfolio(members(), random_state=1)._checked()["seeds"] != seeds
    rs = np.random.RandomState(3)
    drawn = SymbolicPortfolio(members(), random_state=rs)._checked()["seeds"]
    assert drawn == SymbolicPortfolio(members(), random_state=np.random.RandomState(3))._checked()["seeds"]
    assert SymbolicPortfolio(members(), random_state=None)._checked()["seeds"] is None


def test_set_params_reaches_the_member_and_clone_keeps_it(fitted):
    portfolio = SymbolicPortfolio(members(), max_time=5.0)
    params = portfolio.get_params()
    assert params["long__generations"] == 30 and params["short"] is portfolio.estimators[1][1]
    assert set(portfolio.get_params(deep=False)) == {
        "estimators",
        "model_selection",
        "max_time",
        "random_state",
        "verbose",
    }
    portfolio.set_params(long__generations=12, random_state=3)
    assert portfolio.estimators[0][1].generations == 12 and portfolio.random_state == 3
    twin = clone(portfolio)
    assert twin.estimators[0][1] is not portfolio.estimators[0][1]
    assert twin.get_params()["long__generations"] == 12
    X, y = planted()
    twin.set_params(short="drop").fit(X, y)
    assert [est.n_generations_ for est in twin.estimators_] == [12]
    assert set(twin.front_members_) == {"long"} and list(twin.named_estimators_) == ["long"]
    replacement = SymbolicRegressor(**SHARED, generations=10)
    twin.set_params(short=replacement)
    assert twin.estimators[1] == ("short", replacement)
    with pytest.raises(ValueError, match="nope"):
        twin.set_params(long__nope=1)


def test_max_time_is_split_in_proportion_to_evaluations(fitted, capsys):
    X, y = planted()
    portfolio = SymbolicPortfolio(members(), max_time=100.0, random_state=0, verbose=1).fit(X, y)
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 2 and "'long' (1/2)" in printed[0] and "'short' (2/2)" in printed[1]
    long, short = portfolio.estimators_
    # 6000 of 8000 evaluations: three quarters of the time to the first member, what is left to the last
    assert 74.0 < long.max_time <= 75.0
    assert 100.0 - portfolio.fit_seconds_ <= short.max_time <= 100.0
    assert portfolio.pareto_front_ == fitted.pareto_front_  # a limit that never bites changes nothing
    assert portfolio.estimators[0][1].max_time is None  # the member given is left as it was


def test_time_shares_give_what_is_left_in_proportion_to_the_evaluations_still_to_run():
    from evotensor.gp.portfolio import _time_shares

    assert _time_shares(100.0, 0.0, [6000, 2000]) == 75.0
    assert _time_shares(100.0, 40.0, [2000]) == 60.0  # the last member gets all that is left
    assert _time_shares(100.0, 40.0, [1000, 1000, 1000]) == 20.0
    assert _time_shares(10.0, 12.0, [1000, 1000]) == 1e-6  # overrun: one chunk each, no more


def test_unfitted_portfolio_raises():
    with pytest.raises(NotFittedError):
        SymbolicPortfolio(members()).predict(np.zeros((3, 2)))
    with pytest.raises(NotFittedError):
        SymbolicPortfolio(members()).sympy()


# -- errors (all raised before anything compiles) ------------------------------------------------------

REG = SymbolicRegressor(**SHARED)


@pytest.mark.parametrize(
    ("estimators", "options", "match"),
    [
        ([], {}, "estimators must be a non-empty list"),
        ("abc", {}, "estimators must be a non-empty list"),
        ({"a": REG}, {}, "estimators must be a non-empty list"),
        ([("a", REG, 1)], {}, r"estimators\[0\] must be a \(name, SymbolicRegressor\) pair"),
        ([REG], {}, r"estimators\[0\] must be a \(name, SymbolicRegressor\) pair"),
        ([("a", REG), ("a", clone(REG))], {}, "unique, got 'a' twice"),
        ([("a", REG), ("b__c", clone(REG))], {}, r"estimators\[1\]: a member's name .* without '__'"),
        ([(3, REG)], {}, r"estimators\[0\]: a member's name"),
        ([("max_time", REG)], {}, r"'max_time' is a parameter of SymbolicPortfolio"),
        ([("a", SymbolicClassifier())], {}, r"estimators\[0\] \('a'\) must be a SymbolicRegressor"),
        ([("a", "nope")], {}, r"estimators\[0\] \('a'\) must be a SymbolicRegressor or 'drop'"),
        ([("a", "drop")], {}, "every member is 'drop'"),
        ([("a", REG)], {"model_selection": "simplest"}, "model_selection"),
        ([("a", REG)], {"max_time": 0.0}, "max_time"),
        ([("a", REG)], {"random_state": "seven"}, "random_state"),
        ([("a", REG)], {"verbose": -1}, "verbose"),
        ([("a", SymbolicRegressor(population_size=1))], {}, "a__population_size"),
        ([("a", SymbolicRegressor(generations=0))], {}, "a__generations"),
        ([("a", REG), ("b", SymbolicRegressor(max_len=0))], {}, r"estimators\[1\] \('b'\): max_len"),
    ],
)
def test_bad_arguments_are_named_in_fit(estimators, options, match):
    portfolio = SymbolicPortfolio(estimators, **options)  # scikit-learn: the constructor only stores
    with pytest.raises(ArgumentError, match=match):
        portfolio.fit(*planted(20))


@pytest.mark.parametrize(
    ("args", "options", "match"),
    [
        ((1, 20), {}, "population_size"),
        ((100, 0), {}, "generations"),
        ((100, 20, ("add", "nope")), {}, "function_set"),
        ((100, 20, "add"), {}, "function_set"),
        ((100, 20), {"max_lenght": 9}, "'max_lenght' is not a SymbolicRegressor argument"),
    ],
)
def test_exact_recovery_checks_its_arguments(args, options, match):
    with pytest.raises(ArgumentError, match=match):
        SymbolicPortfolio.exact_recovery(*args, **options)


def test_exact_recovery_is_the_documented_90_10_split():
    fs = FunctionSet(("add", "sub", "mul", "div", "sin", "cos", "exp", "log"), protected=False)
    portfolio = SymbolicPortfolio.exact_recovery(10000, 20, fs, random_state=4, max_len=48)
    (name_a, exact), (name_b, erc) = portfolio.estimators
    assert (name_a, name_b) == ("exact", "erc") and portfolio.random_state == 4
    assert (exact.population_size, exact.generations, erc.population_size, erc.generations) == (
        10000,
        18,
        2000,
        10,
    )
    assert 10000 * 18 + 2000 * 10 == 10000 * 20
    for est in (exact, erc):
        assert est.function_set is fs and est.max_len == 48
        assert {k: getattr(est, k) for k in EXACT_OPTIONS} == EXACT_OPTIONS
    assert exact.function_weights == {
        "sin": EXACT_UNARY_WEIGHT,
        "cos": EXACT_UNARY_WEIGHT,
        "exp": EXACT_EXP_WEIGHT,
        "log": EXACT_UNARY_WEIGHT,
    }
    assert exact.const_prob == 0.0 and erc.const_prob == 0.5 and erc.function_weights is None
    small = SymbolicPortfolio.exact_recovery(7, 1, ("add", "mul"), const_prob=0.3)
    (_, exact), (_, erc) = small.estimators
    assert (exact.population_size, exact.generations, erc.population_size, erc.generations) == (7, 1, 2, 1)
    assert exact.function_weights is None and exact.const_prob == 0.3
    unary = {
        "sin": EXACT_UNARY_WEIGHT,
        "cos": EXACT_UNARY_WEIGHT,
        "exp": EXACT_EXP_WEIGHT,
        "log": EXACT_UNARY_WEIGHT,
    }
    assert exact_options(fs) == {**EXACT_OPTIONS, "function_weights": unary}
    assert exact_options(FunctionSet(("add", "mul"))) == {**EXACT_OPTIONS, "function_weights": None}
    with pytest.raises(ArgumentError, match="function_set must be a FunctionSet"):
        exact_options(("add", "sin"))
    # other SymbolicRegressor arguments reach both members and override the recipe's
    (_, exact), (_, erc) = SymbolicPortfolio.exact_recovery(
        100, 20, fs, survival="generational", function_weights={"sin": 1.0}
    ).estimators
    assert exact.survival == erc.survival == "generational"
    assert exact.function_weights == erc.function_weights == {"sin": 1.0}


# -- scikit-learn's checks ---------------------------------------------------------------------------------

# scikit-learn's checks that never fit: in tests/gp/test_sklearn.py's table with the other estimators


TINY = dict(population_size=32, max_len=16)


@sk_checks.parametrize_with_checks(
    [
        SymbolicPortfolio(
            [
                ("a", SymbolicRegressor(**TINY, generations=3)),
                ("b", SymbolicRegressor(**TINY, generations=2)),
            ],
            random_state=0,
        )
    ]
)
@pytest.mark.slow
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


@pytest.mark.slow
def test_members_with_different_function_sets_each_keep_their_own():
    X, y = planted()
    trig = FunctionSet(("add", "mul", "sin"), protected=False)
    portfolio = SymbolicPortfolio(
        [
            ("arith", SymbolicRegressor(**SHARED, generations=10)),
            ("trig", SymbolicRegressor(**SHARED, generations=10, function_set=trig)),
        ],
        random_state=0,
    ).fit(X, y)
    arith, trig_member = portfolio.estimators_
    for model, member in zip(portfolio.front_models_, portfolio.front_members_):
        expected = trig if member == "trig" else arith.best_.function_set
        assert model.function_set == expected
    assert {m.function_set for m in trig_member.front_models_} == {trig}
    np.testing.assert_array_equal(portfolio.predict(X), portfolio.best_.raw_predict(X)[:, 0])
