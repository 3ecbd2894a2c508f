"""Exports of a GP tree (sympy, string, LaTeX, JAX, NumPy) against the reference interpreter."""

import threading
import time

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.gp.eval_helpers import assert_matches_reference, random_data

from evotensor.core.checks import ArgumentError
from evotensor.gp import BUILTIN_NAMES, Forest, FunctionSet, reference_eval
from evotensor.gp.encoding import DecodedForest
from evotensor.gp.export import SYMPY_EPS, to_jax, to_latex, to_numpy, to_string, to_sympy

RAW = FunctionSet(BUILTIN_NAMES)
PROTECTED = FunctionSet(BUILTIN_NAMES, protected=True)
SETS = {"raw": RAW, "protected": PROTECTED}
N_VARS = 3
MAX_LEN = 40
EPS32 = np.float32(0.001)
SYMBOLS = [sp.Symbol(f"x{i}", real=True) for i in range(N_VARS)]
SPECIAL = (0.0, 1.0, -1.0, 0.0005, -2.0, 0.5, 100.0)


@st.composite
def trees(draw, fs, budget, n_outputs=1, depth=0):
    """A random nested-tuple tree over every function of ``fs`` (at most ``budget`` nodes)."""
    if budget < 4 or depth > 5 or (depth > 0 and draw(st.integers(0, 3)) == 0):
        if draw(st.booleans()):
            c = draw(st.one_of(st.sampled_from(SPECIAL), st.floats(-3, 3, width=32)))
            node = ("const", float(np.float32(c)))
        else:
            node = ("var", draw(st.integers(0, N_VARS - 1)))
        size = 1
    else:
        name = draw(st.sampled_from(fs.names))
        arity = int(fs.arity[fs.opcode(name)])
        kids, left = [], budget - 1
        for j in range(arity):
            kid, n = draw(trees(fs, max(1, left // (arity - j)), n_outputs, depth + 1))
            kids.append(kid)
            left -= n
        node, size = (name, *kids), budget - left
    if n_outputs > 1 and draw(st.integers(0, 3)) == 0:
        node = ("modi", draw(st.integers(0, n_outputs)), node)  # index n_outputs: out of range, ignored
    return node, size


def one_tree(tree, fs):
    return Forest.from_tuples([tree], MAX_LEN, fs)


def data(seed, n=64):
    return random_data(seed, n, N_VARS)


def lambdified(expr, X):
    # sympy's NumPy printer runs simplify_logic on a Piecewise condition holding an ITE, which can
    # take hours on a 16-node protected tree; ITE(c, a, b) == (c & a) | (~c & b) prints directly
    expr = expr.replace(sp.ITE, lambda c, a, b: sp.Or(sp.And(c, a), sp.And(sp.Not(c), b)))
    f = sp.lambdify(SYMBOLS, expr, "numpy")
    with np.errstate(all="ignore"):
        out = np.asarray(f(*np.asarray(X).T), dtype=complex)
    out = np.where(out.imag != 0, np.nan, out.real)
    return np.broadcast_to(out, (len(X),))


def stable(forest, X, fs, n_outputs=1, rtol=1e-6):
    """Reference values that are finite and stable under a few-ulp move of the inputs (away from
    thresholds, comparisons and poles), and the reference itself."""
    ref = reference_eval(forest, X, fs, n_outputs)
    sign = np.where(np.arange(X.size).reshape(X.shape) % 2 == 0, 1, -1).astype(np.float32)
    moved = [
        reference_eval(forest, X * (np.float32(1) + np.float32(k) * sign), fs, n_outputs)
        for k in (3e-7, -3e-7)
    ]
    with np.errstate(all="ignore"):
        ok = np.isfinite(ref) & (np.abs(ref) < 1e30)
        for m in moved:
            ok &= np.isfinite(m) & (np.abs(m - ref) <= rtol * np.maximum(np.abs(ref), 1.0))
    return ok, ref


# ---- NumPy and JAX callables ----------------------------------------------------------------------------


@given(st.data(), st.sampled_from(sorted(SETS)), st.sampled_from([1, 3]))
def test_numpy_export_is_bit_identical_to_the_reference(draw, kind, n_outputs):
    fs = SETS[kind]
    tree, _ = draw.draw(trees(fs, MAX_LEN, n_outputs))
    forest = one_tree(tree, fs)
    X = data(draw.draw(st.integers(0, 99)))
    out = to_numpy(forest, fs, 0, n_outputs=n_outputs)(X)
    ref = reference_eval(forest[0], X, fs, n_outputs)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, ref[:, 0] if n_outputs == 1 else ref)


@settings(max_examples=15)
@given(st.data(), st.sampled_from(sorted(SETS)), st.sampled_from([1, 3]))
def test_jax_export_matches_the_reference(draw, kind, n_outputs):
    fs = SETS[kind]
    tree, _ = draw.draw(trees(fs, 24, n_outputs))
    forest = one_tree(tree, fs)
    X = data(draw.draw(st.integers(0, 99)))
    out = np.asarray(to_jax(forest, fs, 0, n_outputs=n_outputs)(X))
    assert out.dtype == np.float32
    assert out.shape == ((len(X),) if n_outputs == 1 else (len(X), n_outputs))
    assert_matches_reference(out.reshape(len(X), n_outputs), forest[0], X, fs, n_outputs, min_fraction=0.0)


def test_callables_take_a_population_index_and_check_X():
    fs = PROTECTED
    forest = Forest.from_tuples([("var", 0), ("mul", ("var", 2), ("const", 2.0))], 8, fs)
    X = data(1)
    np.testing.assert_array_equal(to_numpy(forest, fs, 1)(X), 2 * X[:, 2])
    np.testing.assert_array_equal(np.asarray(to_jax(forest, fs, -1)(X)), 2 * X[:, 2])
    assert to_numpy(forest, fs, 1, dtype=np.float64)(X).dtype == np.float64
    for f in (to_numpy(forest, fs, 1), to_jax(forest, fs, 1)):
        with pytest.raises(ArgumentError, match="X has 2 columns"):
            f(X[:, :2])
        with pytest.raises(ArgumentError, match="X must be"):
            f(X[0])


def test_a_deep_tree_exports_without_recursion():
    fs = FunctionSet(("neg", "add"))
    tree = ("var", 0)
    for _ in range(600):
        tree = ("neg", tree)
    forest = Forest.from_tuples([tree], 601, fs)
    X = data(2)
    np.testing.assert_array_equal(to_numpy(forest, fs)(X), X[:, 0])
    np.testing.assert_array_equal(np.asarray(to_jax(forest, fs)(X)), X[:, 0])


def test_custom_functions_use_the_users_callables():
    def cube(a):
        return a * a * a

    fs = FunctionSet(("add", "cube"), custom={"cube": (1, cube)})
    forest = Forest.from_tuples([("add", ("cube", ("var", 0)), ("const", 1.0))], 8, fs)
    X = data(3)
    ref = reference_eval(forest[0], X, fs)[:, 0]
    np.testing.assert_array_equal(to_numpy(forest, fs)(X), ref)
    np.testing.assert_allclose(np.asarray(to_jax(forest, fs)(X)), ref, rtol=1e-6)
    with pytest.raises(ArgumentError, match=r"'cube'.*sympy_functions"):
        to_sympy(forest, fs)
    expr = to_sympy(forest, fs, sympy_functions={"cube": lambda a: a**3})
    assert expr == SYMBOLS[0] ** 3 + sp.Float(1.0)
    with pytest.raises(ArgumentError, match=r"sympy_functions\['sin'\]"):
        to_sympy(forest, fs, sympy_functions={"sin": sp.sin})
    with pytest.raises(ArgumentError, match=r"sympy_functions\['cube'\] must be callable"):
        to_sympy(forest, fs, sympy_functions={"cube": 3})


# ---- sympy ------------------------------------------------------------------------------------------------


@settings(max_examples=40)
@given(st.data(), st.sampled_from(sorted(SETS)), st.sampled_from([1, 3]))
def test_sympy_export_computes_what_the_evaluator_computes(draw, kind, n_outputs):
    fs = SETS[kind]
    tree, _ = draw.draw(trees(fs, 16, n_outputs))
    forest = one_tree(tree, fs)
    X = data(draw.draw(st.integers(0, 99)))
    ok, ref = stable(forest[0], X, fs, n_outputs)
    for k in range(n_outputs):
        expr = to_sympy(forest, fs, output=k, simplify=False, n_outputs=n_outputs)
        got = lambdified(expr, X.astype(np.float64))
        # away from thresholds and ties: the expression decides alike in float32 and float64 there
        ok_k = ok[:, k] & np.isclose(lambdified(expr, X), got, rtol=1e-4, atol=1e-4)
        assert ok_k.sum() >= 0.5 * ok[:, k].sum(), (expr, ok_k.sum(), ok[:, k].sum())
        close = np.isclose(got, ref[:, k], rtol=1e-5, atol=1e-5)
        bad = ~close & ok_k
        assert not bad.any(), (expr, X[bad], got[bad], ref[bad, k])


def boundary_cases():
    """(tree, X row, kind): points in (or at the edge of) the protected branches and at ties."""
    eps, above = float(EPS32), float(np.nextafter(EPS32, np.float32(1)))
    v0, v1 = ("var", 0), ("var", 1)
    cases = []
    for b in (0.0, eps, -eps, above, -above, 0.0005):
        cases += [(("div", v0, v1), (3.0, b)), (("inv", v1), (3.0, b)), (("log", v1), (3.0, b))]
        cases += [(("pow", v1, v0), (-2.0, b)), (("pow", v1, v0), (2.0, b))]
    cases += [(("sqrt", v0), (-4.0, 0.0)), (("exp", v0), (100.0, 0.0)), (("exp", v0), (3.0, 0.0))]
    cases += [(("lt", v0, v1), (1.5, 1.5)), (("gt", v0, v1), (1.5, 1.5)), (("max", v0, v1), (-1.0, 2.0))]
    cases += [
        (("if_then_else", v0, v1, ("neg", v1)), (0.0, 2.0)),
        (("if_then_else", v0, v1, v0), (1e-30, 2.0)),
    ]
    cases += [
        (("min", ("const", 0.3), v0), (0.3, 0.0)),
        (("lt", ("const", 0.3), v0), (float(np.float32(0.3)), 0.0)),
    ]
    return cases


@pytest.mark.parametrize("kind", sorted(SETS))
def test_sympy_export_is_exact_in_the_protected_branches_and_at_the_thresholds(kind):
    fs = SETS[kind]
    for tree, row in boundary_cases():
        forest = one_tree(tree, fs)
        X = np.array([[*row, 0.0]], np.float32)
        ref = reference_eval(forest[0], X, fs)[0, 0]
        expr = to_sympy(forest, fs, simplify=False)
        for dtype in (np.float64, np.float32):
            got = lambdified(expr, X.astype(dtype))[0]
            if not np.isfinite(ref):
                continue  # NaN/inf are not modelled
            in_branch = tree[0] not in ("exp", "pow", "log") or row[1] in (0.0, float(EPS32), 0.0005)
            if in_branch or tree[0] in ("div", "inv", "lt", "gt", "max", "min", "if_then_else", "sqrt"):
                assert got == ref or np.isclose(got, ref, rtol=1e-6, atol=0), (
                    kind,
                    tree,
                    row,
                    expr,
                    got,
                    ref,
                )
            else:
                assert np.isclose(got, ref, rtol=1e-5), (kind, tree, row, expr, got, ref)
    # the protected branches themselves, exactly
    p = PROTECTED
    x = SYMBOLS
    div = to_sympy(one_tree(("div", ("var", 0), ("var", 1)), p), p)
    assert div == sp.Piecewise((x[0] / x[1], sp.Abs(x[1]) > sp.Float(SYMPY_EPS)), (1, True))
    for b, want in ((0.0, 1.0), (float(EPS32), 1.0), (float(np.nextafter(EPS32, np.float32(1))), None)):
        got = lambdified(div, np.array([[3.0, b, 0.0]]))[0]
        assert got == (want if want is not None else 3.0 / b)


def test_sympy_threshold_is_the_evaluators_on_every_float32_near_it():
    fs = PROTECTED
    forest = one_tree(("inv", ("var", 0)), fs)
    b = np.float32(0.001)
    near = [b]
    for _ in range(50):
        near = [np.nextafter(near[0], np.float32(0)), *near, np.nextafter(near[-1], np.float32(1))]
    X = np.zeros((len(near), N_VARS), np.float32)
    X[:, 0] = near
    ref = reference_eval(forest[0], X, fs)[:, 0]
    expr = to_sympy(forest, fs)
    for dtype in (np.float64, np.float32):
        got = lambdified(expr, X.astype(dtype))
        assert np.array_equal(got == 0, ref == 0)  # the same points are protected
    assert SYMPY_EPS == "0.0010000001"


@settings(max_examples=15)
@given(st.data(), st.sampled_from(sorted(SETS)))
def test_simplified_export_equals_the_unsimplified_one(draw, kind):
    fs = SETS[kind]
    tree, _ = draw.draw(trees(fs, 12))
    forest = one_tree(tree, fs)
    raw = to_sympy(forest, fs, simplify=False)
    simple = to_sympy(forest, fs, timeout=3.0)
    X = data(draw.draw(st.integers(0, 99))).astype(np.float64)
    a, b = lambdified(raw, X), lambdified(simple, X)
    finite = np.isfinite(a)
    np.testing.assert_allclose(b[finite], a[finite], rtol=1e-6, atol=1e-9)


def test_simplify_keeps_the_piecewise_and_refuses_what_numpy_cannot_compute():
    x = SYMBOLS
    p = PROTECTED
    tree = ("div", ("mul", ("var", 0), ("add", ("var", 1), ("var", 1))), ("var", 1))
    assert to_sympy(one_tree(tree, p), p) == sp.Piecewise(
        (2 * x[0], sp.Abs(x[1]) > sp.Float(SYMPY_EPS)), (1, True)
    )
    assert to_sympy(one_tree(("add", ("var", 0), ("var", 0)), RAW), RAW) == 2 * x[0]
    # sympy rewrites Abs(x)**-1.5 as Abs(x**-1.5), which NumPy computes as NaN for x < 0
    expr = to_sympy(one_tree(("pow", ("var", 1), ("const", -1.5)), p), p)
    X = np.array([[0.0, -2.0, 0.0], [0.0, 2.0, 0.0]])
    np.testing.assert_allclose(lambdified(expr, X), [2.0**-1.5, 2.0**-1.5])


def test_simplification_is_time_boxed(monkeypatch):
    forest = one_tree(("add", ("var", 0), ("var", 0)), RAW)
    unsimplified = to_sympy(forest, RAW, simplify=False)

    def slow(e, *args, **kwargs):
        time.sleep(3)
        return e

    monkeypatch.setattr(sp, "simplify", slow)
    start = time.perf_counter()
    assert to_sympy(forest, RAW, timeout=0.2) == unsimplified
    assert time.perf_counter() - start < 2


def test_simplification_without_a_timer_only_on_small_expressions():
    small = one_tree(("add", ("var", 0), ("var", 0)), RAW)
    big = ("var", 0)
    for i in range(24):  # more than 40 operations
        big = ("mul", ("sin", big), ("var", 1 + i % 2))
    big = Forest.from_tuples([("add", big, ("var", 1))], 80, RAW)
    results = {}
    thread = threading.Thread(target=lambda: results.update(s=to_sympy(small, RAW), b=to_sympy(big, RAW)))
    thread.start()
    thread.join(60)
    assert results["s"] == 2 * SYMBOLS[0]
    assert results["b"] == to_sympy(big, RAW, simplify=False)


def test_constant_subtrees_fold_to_the_float32_values_the_evaluator_computes():
    fs = RAW
    tree = ("add", ("var", 0), ("sin", ("const", 0.5)))
    expr = to_sympy(one_tree(tree, fs), fs, simplify=False)
    assert expr == SYMBOLS[0] + sp.Float(float(np.sin(np.float32(0.5))))
    # log(-1) is NaN in the evaluator, and a NaN condition selects the else branch
    tree = ("if_then_else", ("log", ("const", -1.0)), ("var", 0), ("var", 1))
    assert to_sympy(one_tree(tree, fs), fs) == SYMBOLS[1]
    assert to_sympy(one_tree(("div", ("const", 1.0), ("const", 0.0)), fs), fs) == sp.oo
    # a division by an exact zero: the evaluator's signed infinity, not sympy's unsigned zoo
    for divisor, sign in (
        (("const", 0.0), 1),
        (("neg", ("const", 0.0)), -1),
        (("sub", ("var", 1), ("var", 1)), 1),
    ):
        forest = one_tree(("lt", ("div", ("var", 0), divisor), ("const", 1.0)), fs)
        X = np.array([[2.0, 1.0, 0.0], [-2.0, 1.0, 0.0], [0.0, 1.0, 0.0]], np.float32)
        got = lambdified(to_sympy(forest, fs), X)
        np.testing.assert_array_equal(got, reference_eval(forest[0], X, fs)[:, 0])
        np.testing.assert_array_equal(got, [0.0, 1.0, 0.0] if sign > 0 else [1.0, 0.0, 0.0])
    assert to_sympy(one_tree(("log", ("sub", ("var", 0), ("var", 0))), fs), fs) == -sp.oo
    assert to_sympy(one_tree(("inv", ("mul", ("var", 0), ("const", 0.0))), fs), fs) == sp.oo


def test_multi_output_trees():
    fs = RAW
    tree = (
        "add",
        ("modi", 0, ("sin", ("var", 0))),
        ("modi", 2, ("mul", ("var", 1), ("modi", 0, ("var", 2)))),
    )
    forest = one_tree(tree, fs)
    x = SYMBOLS
    assert to_sympy(forest, fs, output=0, n_outputs=3) == sp.sin(x[0]) + x[2]
    assert to_sympy(forest, fs, output=1, n_outputs=3) == 0
    assert to_sympy(forest, fs, output=2, n_outputs=3) == x[1] * x[2]
    assert to_sympy(forest, fs, n_outputs=1) == sp.sin(x[0]) + x[1] * x[2]
    decoded = DecodedForest(
        *(getattr(forest, f) for f in ("opcode", "value", "size", "output")), n_vars=3, n_outputs=3
    )
    X = data(4)
    ref = reference_eval(forest[0], X, fs, 3)
    np.testing.assert_array_equal(to_numpy(decoded, fs)(X), ref)
    assert np.asarray(to_jax(decoded, fs)(X)).shape == (len(X), 3)
    assert to_string(forest, fs) == "out[0]=sin(x0) + out[2]=(x1 * out[0]=x2)"
    latex = to_latex(forest, fs, output=2, n_outputs=3)
    assert latex == "x_{1} x_{2}"


# ---- string and LaTeX --------------------------------------------------------------------------------------


def test_string_and_latex():
    p = PROTECTED
    forest = Forest.from_tuples(
        [("div", ("sin", ("var", 0)), ("add", ("var", 1), ("const", 0.3))), ("var", 2)], 16, p
    )
    assert to_string(forest, p) == "sin(x0) / (x1 + 0.3)"
    assert to_string(forest, p, 1) == "x2"
    latex = to_latex(forest, p)
    assert latex and "x_{0}" in latex and "x_{1}" in latex and r"\begin{cases}" in latex
    assert "0.0010000001" in latex and "0.300000011920929" in latex
    short = to_latex(forest, p, precision=3)
    assert "0.3 " in short or "0.3}" in short or "0.3\\" in short or "0.300" in short
    assert "0.300000011920929" not in short and "0.0010000001" in short
    assert to_latex(forest, RAW) == r"\frac{\sin{\left(x_{0} \right)}}{x_{1} + 0.300000011920929}"


# ---- errors ------------------------------------------------------------------------------------------------


def test_errors_name_the_argument():
    fs = RAW
    forest = Forest.from_tuples([("var", 0), ("modi", 1, ("neg", ("var", 0)))], 8, fs)
    for export in (to_sympy, to_jax, to_numpy, to_string, to_latex):
        with pytest.raises(ArgumentError, match="index"):
            export(forest, fs, 2)
        with pytest.raises(ArgumentError, match="index"):
            export(forest, fs, True)
        with pytest.raises(ArgumentError, match="index"):
            export(forest[0], fs, 1)
        with pytest.raises(ArgumentError, match="function_set"):
            export(forest, ("add",), 0)
        with pytest.raises(ArgumentError, match="forest"):
            export(object(), fs, 0)
    for export in (to_sympy, to_jax, to_numpy, to_latex):
        with pytest.raises(ArgumentError, match=r"n_outputs is needed.*\[1\]"):
            export(forest, fs, 1)
        with pytest.raises(ArgumentError, match="n_outputs"):
            export(forest, fs, 1, n_outputs=0)
    with pytest.raises(ArgumentError, match="output"):
        to_sympy(forest, fs, 1, output=2, n_outputs=2)
    with pytest.raises(ArgumentError, match="output"):
        to_sympy(forest, fs, 0, output=1)
    with pytest.raises(ArgumentError, match="timeout"):
        to_sympy(forest, fs, timeout=0)
    with pytest.raises(ArgumentError, match="simplify"):
        to_sympy(forest, fs, simplify="yes")
    with pytest.raises(ArgumentError, match="dtype"):
        to_numpy(forest, fs, dtype=np.int32)
    with pytest.raises(ArgumentError, match="dtype"):
        to_numpy(forest, fs, dtype=None)
    with pytest.raises(ArgumentError, match="precision"):
        to_latex(forest, fs, precision=0)
    bad = Forest(forest.opcode, forest.value, forest.size.at[0, 0].set(3), forest.output)
    with pytest.raises(ArgumentError, match="forest: tree 0 is malformed"):
        to_numpy(bad, fs)


def test_sympy_export_feeds_the_srbench_symbolic_check():
    from evotensor.gp import is_symbolic_solution

    fs = FunctionSet(("add", "mul", "div"), protected=True)
    x = ("var", 0)
    cubic = ("add", ("mul", x, ("mul", x, x)), ("add", ("mul", x, x), x))  # nguyen-1
    forest = Forest.from_tuples([cubic, ("mul", ("div", cubic, x), x)], 24, fs)
    assert is_symbolic_solution(to_sympy(forest, fs), "nguyen-1")
    # protected div: 1 where |x0| <= 0.001, so not the cubic everywhere
    assert not is_symbolic_solution(to_sympy(forest, fs, 1), "nguyen-1")


def test_jax_export_is_jitted_and_composable():
    import jax

    forest = one_tree(("mul", ("sin", ("var", 0)), ("var", 1)), RAW)
    f = to_jax(forest, RAW)
    assert hasattr(f, "lower")  # a jax.jit function
    X = data(5)
    batched = np.asarray(jax.vmap(f)(np.stack([X, 2 * X])))
    np.testing.assert_array_equal(batched[0], np.asarray(f(X)))
    grad = np.asarray(jax.grad(lambda X: f(X).sum())(X))
    np.testing.assert_allclose(grad[:, 1], np.sin(X[:, 0]), rtol=1e-5, atol=1e-6)
