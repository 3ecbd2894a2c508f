"""Expressions as GP trees (:func:`evotensor.gp.parse_expression`): the tree computes the expression
(the reference interpreter against sympy's float64 evaluation), is written with the set's functions
only, and what the set cannot express is refused by name; seeded runs start from the trees
(``GP(initial_trees=)``, ``SymbolicRegressor(guesses=)``)."""

from __future__ import annotations

import jax
import numpy as np
import pytest
import sympy

from evotensor.core.checks import ArgumentError
from evotensor.gp import GP, Forest, FunctionSet, parse_expression, reference_eval
from evotensor.gp.sklearn import SymbolicRegressor

FULL = FunctionSet(("add", "sub", "mul", "div", "sin", "cos", "exp", "log", "sqrt", "neg", "pow"))
LEAN = FunctionSet(("add", "mul", "div", "sin", "cos", "exp"))
X = np.random.default_rng(0).uniform(0.5, 2.0, (64, 2)).astype(np.float32)
EXPRESSIONS = [
    "x0*x1 + 2",
    "x0**3 + x0**2 + x0",
    "sin(x0) - cos(x1)/x0",
    "-x0 + 3.5*x1**-2",
    "sqrt(x0) + exp(-x1)",
    "pi*x0 - E",
    "x0/(x1 + 1) - 1/x0",
    "log(x0*x1) + x1**(-1/2)",
    "x0**2.5 + x1",
    "3*x0*x1**2/(2*x1 + x0)",
]


def functions_used(tree) -> set[str]:
    if tree[0] in ("var", "const"):
        return set()
    return {tree[0]}.union(*(functions_used(t) for t in tree[1:]))


def values(tree, fs) -> np.ndarray:
    return np.asarray(reference_eval(Forest.from_tuples([tree], 64, fs), X, fs))[0].ravel()


def truth(expression: str) -> np.ndarray:
    f = sympy.lambdify(sympy.symbols("x0 x1"), sympy.sympify(expression), "numpy")
    return np.broadcast_to(f(X[:, 0].astype(np.float64), X[:, 1].astype(np.float64)), (len(X),))


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_the_tree_computes_the_expression(expression):
    tree = parse_expression(expression, FULL, 2)
    np.testing.assert_allclose(values(tree, FULL), truth(expression), rtol=2e-5, atol=1e-5)
    assert functions_used(tree) <= set(FULL.names)


@pytest.mark.parametrize(
    "expression",
    [e for e in EXPRESSIONS if "log" not in e and "sqrt" not in e and "2.5" not in e and "-1/2" not in e],
)
def test_a_lean_set_rewrites_sub_neg_and_powers(expression):
    """Without sub, neg and pow: negation as a product with -1, integer powers as products."""
    tree = parse_expression(expression, LEAN, 2)
    assert functions_used(tree) <= set(LEAN.names)
    np.testing.assert_allclose(values(tree, LEAN), truth(expression), rtol=2e-5, atol=1e-5)


def test_names_and_sympy_input():
    a, b = sympy.symbols("speed mass")
    tree = parse_expression(a * b**2, FULL, 2, names=("speed", "mass"))
    assert tree == ("mul", ("var", 0), ("mul", ("var", 1), ("var", 1)))
    assert parse_expression("speed + 1", FULL, 2, names=("speed", "mass")) == (
        "add",
        ("var", 0),
        ("const", 1.0),
    )


@pytest.mark.parametrize(
    "expression, fs, match",
    [
        ("tan(x0)", FULL, "'tan'"),
        ("x0 + y", FULL, "unknown variable 'y'"),
        ("x0 +* 2", FULL, "does not parse"),
        ("x0**2.5", LEAN, r"the power x0\*\*2.5"),
        ("log(x0)", LEAN, "'log'"),
        ("x0 + zoo", FULL, "not a finite real number"),
        (3.0, FULL, "must be a string or a sympy expression"),
        ("Max(x0, x1)", FULL, "Max"),
    ],
)
def test_what_the_set_cannot_express_is_refused_by_name(expression, fs, match):
    with pytest.raises(ArgumentError, match=match):
        parse_expression(expression, fs, 2)


def test_gp_starts_from_its_initial_trees():
    trees = [parse_expression("x0*x1 + 2", FULL, 2), parse_expression("sin(x0)", FULL, 2)]
    gp = GP(20, FULL, 2, max_len=32, initial_trees=trees)
    state = gp.init(jax.random.key(0))
    seeds = Forest.from_tuples(trees, 32, FULL)
    for got, want in zip(jax.tree_util.tree_leaves(state.forest[:2]), jax.tree_util.tree_leaves(seeds)):
        np.testing.assert_array_equal(got, want)
    plain = GP(20, FULL, 2, max_len=32).init(jax.random.key(0))
    np.testing.assert_array_equal(state.forest.opcode[2:], plain.forest.opcode[2:])  # the rest unchanged


def test_with_weighted_variables_a_seed_leaf_becomes_a_weighted_variable_of_weight_one():
    gp = GP(
        20, FULL, 2, max_len=32, initial_trees=[("add", ("var", 0), ("const", 2.0))], weighted_variables=True
    )
    assert gp.initial_trees == (("add", ("mul", ("const", 1.0), ("var", 0)), ("const", 2.0)),)
    state = gp.init(jax.random.key(0))
    np.testing.assert_allclose(
        np.asarray(reference_eval(state.forest[:1], X, FULL))[0].ravel(), X[:, 0] + 2.0, rtol=1e-6
    )


@pytest.mark.parametrize(
    "trees, match",
    [
        ([("add", ("var", 5), ("const", 1.0))], r"initial_trees\[0\]"),
        ([("tan", ("var", 0))], r"initial_trees\[0\]"),
        ([("var", 0)] * 21, "more than population_size"),
        ("x0", "sequence of trees"),
    ],
)
def test_bad_initial_trees_are_refused(trees, match):
    with pytest.raises(ArgumentError, match=match):
        GP(20, FULL, 2, max_len=32, initial_trees=trees)


def test_a_regressor_seeded_with_the_truth_has_it_from_the_first_generation():
    rng = np.random.default_rng(1)
    X2 = rng.uniform(-2, 2, (100, 2))
    y = X2[:, 0] ** 2 * np.sin(X2[:, 1]) + 0.5
    kw = dict(population_size=50, generations=1, random_state=0, function_set=("add", "sub", "mul", "sin"))
    seeded = SymbolicRegressor(guesses=["x0**2*sin(x1) + 0.5"], **kw).fit(X2, y)
    assert seeded.score(X2, y) > 0.99999
    assert SymbolicRegressor(**kw).fit(X2, y).score(X2, y) < 0.999  # one generation alone does not find it
    with pytest.raises(ArgumentError, match=r"guesses\[1\].*'cos'"):
        SymbolicRegressor(guesses=["x0", "cos(x1)"], **kw).fit(X2, y)
    with pytest.raises(ArgumentError, match="guesses must be a sequence"):
        SymbolicRegressor(guesses="x0", **kw).fit(X2, y)
