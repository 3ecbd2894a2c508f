import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evotensor.gp.functions import BUILTIN_NAMES, CONST, FIRST_FUNCTION, PAD, VAR, FunctionSet

SPECIAL = np.array(
    [0.0, -0.0, 0.0005, -0.0005, 0.001, 1.0, -1.0, 2.5, -2.5, 90.0, -90.0, np.inf, -np.inf, np.nan],
    np.float32,
)


def _grid(arity):
    """All combinations of the special values for ``arity`` arguments."""
    mesh = np.meshgrid(*([SPECIAL] * arity), indexing="ij")
    return [m.reshape(-1) for m in mesh]


def _same(a, b, rtol=1e-5):
    a, b = np.asarray(a), np.asarray(b)
    np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
    np.testing.assert_array_equal(np.isposinf(a), np.isposinf(b))
    np.testing.assert_array_equal(np.isneginf(a), np.isneginf(b))
    fin = np.isfinite(b)
    np.testing.assert_allclose(a[fin], b[fin], rtol=rtol, atol=1e-6)


def test_opcode_layout():
    fs = FunctionSet(("mul", "sin", "if_then_else"))
    assert (PAD, CONST, VAR, FIRST_FUNCTION) == (0, 1, 2, 3)
    assert fs.names == ("mul", "sin", "if_then_else")
    assert fs.n_opcodes == 6
    assert [fs.opcode(n) for n in fs.names] == [3, 4, 5]
    assert fs.arity.dtype == np.int32
    np.testing.assert_array_equal(fs.arity, [0, 0, 0, 2, 1, 3])
    assert fs.max_arity == 3
    assert [fs.name(i) for i in range(6)] == ["pad", "const", "var", "mul", "sin", "if_then_else"]
    assert fs.symbols[3] == "*" and fs.symbols[4] == "sin"
    assert fs.is_infix(3) and not fs.is_infix(4) and not fs.is_infix(CONST)
    assert fs.opcode("const") == CONST
    np.testing.assert_array_equal(fs.function_opcodes, [3, 4, 5])


def test_builtin_arities():
    fs = FunctionSet(BUILTIN_NAMES)
    binary = {"add", "sub", "mul", "div", "pow", "max", "min", "lt", "gt"}
    for name in BUILTIN_NAMES:
        expected = 3 if name == "if_then_else" else 2 if name in binary else 1
        assert fs.arity[fs.opcode(name)] == expected, name


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"names": ("add", "frobnicate")}, "frobnicate"),
        ({"names": ("add", "add")}, "twice"),
        ({"names": ()}, "at least one"),
        ({"names": "add"}, "string"),
        ({"names": ("add", "var")}, "reserved"),
        ({"names": ("add", "sq"), "custom": {"sq": (4, lambda x: x)}}, "arity"),
        ({"names": ("add", "sq"), "custom": {"sq": (0, lambda x: x)}}, "arity"),
        ({"names": ("add", "sin"), "custom": {"sin": (1, jnp.sin)}}, "clashes"),
        ({"names": ("add",), "custom": {"sq": (1, lambda x: x * x)}}, "not listed"),
        ({"names": ("add", "sq"), "custom": {"sq": (1, "notcallable")}}, "callable"),
        ({"names": ("add", "sq"), "custom": {"sq": 1}}, "arity, fn"),
    ],
)
def test_validation_names_the_problem(kwargs, match):
    with pytest.raises(ValueError, match=match):
        FunctionSet(**kwargs)


def test_lookup_errors():
    fs = FunctionSet(("add",))
    with pytest.raises(ValueError, match="sin"):
        fs.opcode("sin")
    with pytest.raises(ValueError, match="opcode 9"):
        fs.name(9)
    with pytest.raises(ValueError, match="takes 2 arguments"):
        fs.apply_numpy("add", 1.0)
    with pytest.raises(ValueError, match="size 3"):
        fs.apply(3, jnp.ones(2))


@pytest.mark.parametrize("protected", [False, True])
def test_apply_matches_numpy_on_special_values(protected):
    fs = FunctionSet(BUILTIN_NAMES, protected=protected)
    apply = jax.jit(fs.apply)  # one compilation: every grid is padded to the ternary one's size
    n = len(SPECIAL) ** 3
    for f in fs.functions:
        args = _grid(f.arity)
        m = len(args[0])
        padded = [np.resize(a, n) for a in args] + [np.zeros(n, np.float32)] * (3 - f.arity)
        fast = apply(jnp.full(n, f.opcode, jnp.int32), jnp.stack(padded, -1))[:m]
        _same(fast, fs.apply_numpy(f.name, *args))


def test_apply_with_opcode_array_selects_per_element():
    fs = FunctionSet(("add", "sub", "neg"))
    args = jnp.array([[5.0, 2.0, 0.0], [5.0, 2.0, 0.0], [5.0, 2.0, 0.0], [5.0, 2.0, 0.0]])
    out = fs.apply(jnp.array([3, 4, 5, CONST]), args)
    np.testing.assert_array_equal(out, [7.0, 3.0, -5.0, 0.0])


def test_raw_semantics_by_hand():
    fs = FunctionSet(BUILTIN_NAMES)
    with np.errstate(all="ignore"):
        assert np.isposinf(fs.apply_numpy("div", 1.0, 0.0))
        assert np.isnan(fs.apply_numpy("log", -1.0))
        assert np.isnan(fs.apply_numpy("sqrt", -1.0))
        assert np.isnan(fs.apply_numpy("pow", -2.0, 0.5))
        assert fs.apply_numpy("pow", -2.0, 3.0) == -8.0
        assert np.isposinf(fs.apply_numpy("exp", 100.0))
        assert np.isposinf(fs.apply_numpy("inv", 0.0))
    assert fs.apply_numpy("if_then_else", 0.5, 1.0, 2.0) == 1.0
    assert fs.apply_numpy("if_then_else", 0.0, 1.0, 2.0) == 2.0
    assert fs.apply_numpy("if_then_else", np.nan, 1.0, 2.0) == 2.0
    assert fs.apply_numpy("lt", 1.0, 2.0) == 1.0 and fs.apply_numpy("lt", 2.0, 2.0) == 0.0
    assert fs.apply_numpy("gt", 3.0, 2.0) == 1.0 and fs.apply_numpy("gt", 2.0, 3.0) == 0.0
    assert np.isnan(fs.apply_numpy("max", np.nan, 1.0)) and np.isnan(fs.apply_numpy("min", 1.0, np.nan))
    assert fs.apply_numpy("neg", 2.0) == -2.0 and fs.apply_numpy("abs", -2.0) == 2.0


def test_protected_semantics_by_hand():
    fs = FunctionSet(BUILTIN_NAMES, protected=True)
    assert fs.apply_numpy("div", 3.0, 0.0005) == 1.0
    assert fs.apply_numpy("div", 3.0, 0.5) == 6.0
    assert fs.apply_numpy("inv", 0.0) == 0.0
    assert fs.apply_numpy("inv", -4.0) == -0.25
    assert fs.apply_numpy("log", 0.0) == 0.0
    np.testing.assert_allclose(fs.apply_numpy("log", -np.e), 1.0, rtol=1e-6)
    assert fs.apply_numpy("sqrt", -4.0) == 2.0
    assert fs.apply_numpy("pow", -2.0, 2.0) == 4.0
    assert fs.apply_numpy("pow", 0.0, -1.0) == 1.0
    assert fs.apply_numpy("pow", 0.0, 2.0) == 0.0
    assert np.isfinite(fs.apply_numpy("exp", 1000.0))
    # unprotected functions keep their raw meaning
    assert fs.apply_numpy("sub", 1.0, 3.0) == -2.0


_APPLY = {
    p: (FunctionSet(BUILTIN_NAMES, protected=p), jax.jit(FunctionSet(BUILTIN_NAMES, protected=p).apply))
    for p in (False, True)
}


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    st.lists(st.floats(-1e3, 1e3, width=32), min_size=3, max_size=3),
    st.sampled_from(BUILTIN_NAMES),
    st.booleans(),
)
def test_apply_matches_numpy_on_random_values(vals, name, protected):
    fs, apply = _APPLY[protected]
    op = fs.opcode(name)
    args = np.asarray(vals, np.float32)
    fast = apply(jnp.int32(op), jnp.asarray(args))
    _same(fast, fs.apply_numpy(name, *args[: fs.arity[op]]), rtol=1e-4)


def test_custom_function_and_numpy_twin():
    fs = FunctionSet(
        ("add", "sq", "clip3"),
        custom={
            "sq": (1, lambda x: x * x),
            "clip3": (3, lambda x, lo, hi: jnp.clip(x, lo, hi), lambda x, lo, hi: np.clip(x, lo, hi)),
        },
    )
    assert fs.arity[fs.opcode("sq")] == 1 and fs.arity[fs.opcode("clip3")] == 3
    assert fs.max_arity == 3
    assert fs.apply_numpy("sq", np.float32(3.0)) == 9.0
    assert fs.apply_numpy("clip3", 5.0, 0.0, 2.0) == 2.0
    out = fs.apply(
        jnp.array([fs.opcode("sq"), fs.opcode("clip3")]), jnp.array([[3.0, 0, 0], [5.0, 0.0, 2.0]])
    )
    np.testing.assert_array_equal(out, [9.0, 2.0])


def test_hashable_static_and_vmappable():
    a = FunctionSet(("add", "sin"))
    b = FunctionSet(("add", "sin"))
    assert a == b and hash(a) == hash(b)
    assert a != FunctionSet(("add", "sin"), protected=True)
    assert a != FunctionSet(("sin", "add"))

    @jax.jit
    def f(op, args):
        return jax.vmap(a.apply)(op, args)

    out = f(jnp.array([3, 4]), jnp.array([[1.0, 2.0, 0.0], [0.0, 0.0, 0.0]]))
    np.testing.assert_allclose(out, [3.0, 0.0])


def test_fast_trig_forms_match_numpy_and_flag_their_domain():
    fs = FunctionSet(("sin", "cos", "tan", "add"))
    rng = np.random.default_rng(0)
    x = np.concatenate(
        [rng.uniform(-10, 10, 4000), rng.uniform(-3e6, 3e6, 4000), [0.0, -0.0, np.inf, np.nan]]
    )
    x = x.astype(np.float32)
    for name in ("sin", "cos", "tan"):
        f = fs.functions[fs.opcode(name) - 3]
        assert f.fast_fn is not None
        fast = np.asarray(jax.jit(f.fast_fn)(x))
        with np.errstate(invalid="ignore"):
            exact = (
                np.sin(x.astype(np.float64))
                if name == "sin"
                else (np.cos(x.astype(np.float64)) if name == "cos" else np.tan(x.astype(np.float64)))
            )
        finite = np.isfinite(x)
        assert np.isnan(fast[~finite]).all()
        err = np.abs(fast[finite] - exact[finite]) / np.maximum(1.0, np.abs(exact[finite]))
        assert err.max() < 5e-6, (name, err.max())
        assert np.all(np.signbit(fast[:-4][x[:-4] == 0]) == np.signbit(exact[:-4][x[:-4] == 0]))
    add = fs.functions[fs.opcode("add") - 3]
    assert add.fast_fn is None and add.fast_ok is None


def test_apply_fast_requests_the_exact_path_only_for_its_own_large_arguments():
    fs = FunctionSet(("sin", "add"))
    sin, add = fs.opcode("sin"), fs.opcode("add")
    a = jnp.array([1.0, 1e5, 2.0])
    value, needs_exact = fs.apply_fast(jnp.array([sin, add, sin]), a, jnp.ones(3))
    assert not bool(jnp.any(needs_exact))  # the large argument belongs to an `add` node
    np.testing.assert_allclose(value, [np.sin(1.0), 1e5 + 1, np.sin(2.0)], rtol=1e-6)
    _, needs_exact = fs.apply_fast(jnp.array([sin, sin, sin]), jnp.array([1.0, 1e7, 2.0]), jnp.ones(3))
    np.testing.assert_array_equal(needs_exact, [False, True, False])
    _, needs_exact = fs.apply_fast(jnp.array([sin, sin]), jnp.array([np.nan, np.inf]), None)
    assert not bool(jnp.any(needs_exact))  # nan/inf are handled by the fast form (-> nan)


def _triple(a):  # module level, so a set holding it pickles
    return 3.0 * a


def test_function_sets_pickle_by_their_arguments():
    """Built-in sets and sets with module-level custom functions round-trip through pickle (equal, the
    same values); a lambda is refused by pickle itself, naming it."""
    import pickle

    x = jnp.linspace(-2.0, 2.0, 7)
    for fs in (
        FunctionSet(("add", "div", "sin"), protected=True),
        FunctionSet(("add", "triple"), custom={"triple": (1, _triple)}),
    ):
        twin = pickle.loads(pickle.dumps(fs))
        assert twin == fs and twin.names == fs.names and twin.protected == fs.protected
        for name in fs.names:
            op = fs.opcode(name)
            got, want = twin.apply_unpacked(op, x, x), fs.apply_unpacked(op, x, x)
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    with pytest.raises((pickle.PicklingError, AttributeError), match="lambda"):
        pickle.dumps(FunctionSet(("add", "twice"), custom={"twice": (1, lambda a: 2 * a)}))


@pytest.mark.parametrize(
    "table",
    [[0, 0, 0, 2, 2, 2, 2, 1, 1], [5], [1, 2, 1, 2, 3, 0], np.arange(9, dtype=np.float32), [True, False]],
)
def test_table_lookup_equals_indexing(table):
    # comparisons on runs instead of a gather, with JAX's indexing results for every index:
    # negative ones from the end, the rest clamped
    from evotensor.gp.functions import table_lookup

    t = np.asarray(table)
    index = jnp.arange(-3 * t.size - 2, 3 * t.size + 2).reshape(2, -1)
    got = jax.jit(lambda i: table_lookup(t, i))(index)
    want = jax.jit(lambda i: jnp.asarray(t)[i])(index)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
