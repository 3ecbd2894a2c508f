"""Hardening of GP's public boundary (issue 16): malformed forests, sizes, data, constructor arguments,
deep trees, and the native evaluator's allocation failures (in a subprocess: they used to kill it).

Malformed forests are compared across backends against the reference interpreter: a concrete
malformed forest is refused with an ArgumentError naming the tree; inside ``jit`` every backend gives
NaN predictions (and the worst fitness) for exactly the malformed trees and the same values for the
others.
"""

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.gp.eval_helpers import ArrayForest, random_forest

import evotensor
from evotensor.core.checks import ArgumentError
from evotensor.gp import GP, Forest, FunctionSet, evaluate, fitness, native, reference_eval
from evotensor.gp.generate import TreeGenerator
from evotensor.gp.metrics import tree_validity
from evotensor.gp.regression import Pagie1, SymbolicRegression

ROOT = Path(__file__).resolve().parents[2]
FS = FunctionSet(("add", "mul", "neg", "if_then_else"))
POP, MAX_LEN, N_VARS = 6, 10, 2
X = np.linspace(-1.5, 1.5, 14, dtype=np.float32).reshape(7, 2)
FIELDS = ("opcode", "value", "size", "output")
BACKENDS = ["jax"] + (["native"] if native.AVAILABLE else [])


def _arrays(forest):
    return {k: np.array(getattr(forest, k)) for k in FIELDS}


# ---- malformed forests: every backend agrees ----------------------------------------------------

# one corruption: (field, value); positions are drawn separately
CORRUPTIONS = st.sampled_from(
    [
        ("opcode", 0),  # PAD inside a tree, or padding stays PAD
        ("opcode", 1),  # a constant where a function was (the prefix sequence breaks)
        ("opcode", 2),
        ("opcode", 3),  # add
        ("opcode", 6),  # if_then_else (arity 3)
        ("opcode", 7),  # not in the function set
        ("opcode", -1),
        ("opcode", 2**31 - 1),
        ("size", 0),
        ("size", 1),
        ("size", 2),
        ("size", -1),
        ("size", MAX_LEN),
        ("size", MAX_LEN + 1),
        ("size", 2**31 - 1),
        ("value", 1.5),  # a fractional variable index (or a changed constant)
        ("value", 2.0),  # a variable X lacks
        ("value", -1.0),
        ("value", float("nan")),
        ("value", float("inf")),
        ("output", 5),  # ignored with one output: never malformed
    ]
)


@st.composite
def corrupted_forests(draw):
    forest = _arrays(random_forest(draw(st.integers(0, 10**6)), FS, POP, MAX_LEN, N_VARS, max_depth=3))
    for _ in range(draw(st.integers(0, 3))):
        field, value = draw(CORRUPTIONS)
        t, i = draw(st.integers(0, POP - 1)), draw(st.integers(0, MAX_LEN - 1))
        forest[field][t, i] = value
    return forest


def _reference_valid(forest):
    """Independent of tree_validity: the reference interpreter raises on exactly the malformed trees."""
    ok = []
    for t in range(POP):
        try:
            reference_eval(ArrayForest(*(forest[k][t] for k in FIELDS)), X, FS, 1)
            ok.append(True)
        except ValueError:
            ok.append(False)
    return np.array(ok)


def _jitted(backend):
    return (
        jax.jit(lambda a: evaluate(ArrayForest(**a), X, FS, backend=backend)),
        jax.jit(lambda a: fitness(ArrayForest(**a), X, X[:, 0] - X[:, 1], FS, backend=backend)),
    )


JITTED = {b: _jitted(b) for b in BACKENDS}  # built once: each compiles once for all examples


def _check_backends_agree(forest, backends):
    valid = _reference_valid(forest)
    validity = tree_validity(forest["opcode"], forest["value"], forest["size"], FS.arity, 2, np)
    np.testing.assert_array_equal(validity, valid)
    for b in backends:
        if valid.all():
            evaluate(ArrayForest(**forest), X, FS, backend=b)
        else:
            first = int(np.flatnonzero(~valid)[0])
            with pytest.raises(ArgumentError, match=f"forest tree {first} is malformed"):
                evaluate(ArrayForest(**forest), X, FS, backend=b)
            with pytest.raises(ArgumentError, match=f"forest tree {first} is malformed"):
                fitness(ArrayForest(**forest), X, X[:, 0], FS, backend=b)
    ref = np.full((POP, X.shape[0], 1), np.nan, np.float32)
    for t in np.flatnonzero(valid):
        ref[t] = reference_eval(ArrayForest(*(forest[k][t] for k in FIELDS)), X, FS, 1)
    for b in backends:
        pred, fit = (np.asarray(f(forest)) for f in JITTED[b])
        all_nan = np.isnan(pred).all(axis=(1, 2))
        np.testing.assert_array_equal(all_nan, ~valid | np.isnan(ref).all(axis=(1, 2)), err_msg=b)
        np.testing.assert_allclose(pred[valid], ref[valid], rtol=1e-5, atol=1e-6, err_msg=b)
        assert np.isposinf(fit[~valid]).all(), b


@settings(max_examples=40, deadline=None)
@given(corrupted_forests())
def test_malformed_forests_are_refused_concrete_and_nan_under_jit_on_every_backend(forest):
    _check_backends_agree(forest, BACKENDS)


@pytest.mark.slow
@settings(max_examples=15, deadline=None)
@given(corrupted_forests())
def test_the_pallas_kernel_agrees_on_malformed_forests(forest):
    """The Pallas kernel (its interpreter on a CPU) against the same rules; slow: ~10 s to compile."""
    if "pallas" not in JITTED:
        JITTED["pallas"] = _jitted("pallas")
    _check_backends_agree(forest, ["pallas"])


def test_float_opcodes_are_refused_not_rounded():
    forest = _arrays(Forest.from_tuples([("add", ("var", 0), ("var", 1))], 4, FS))
    for field in ("opcode", "size", "output"):
        bad = dict(forest, **{field: forest[field].astype(np.float32)})
        bad[field][0, 0] += 0.7 if field == "opcode" else 0.0  # 3.7 must not run as add (3)
        for b in BACKENDS:
            with pytest.raises(ArgumentError, match=f"forest.{field} must be an integer array"):
                evaluate(ArrayForest(**bad), X, FS, backend=b)


def test_a_huge_stored_length_costs_nothing_under_jit():
    """The JAX interpreter ran size[0] node steps (minutes for 2**31 - 1); now the tree never runs.
    In a subprocess with a timeout, so that a regression fails instead of hanging the suite."""
    code = textwrap.dedent(
        """
        import jax, numpy as np
        from evotensor.gp import Forest, FunctionSet, evaluate
        from evotensor.gp.jax_evaluator import evaluate_jax
        fs = FunctionSet(("add",))
        f = Forest.from_tuples([("add", ("var", 0), ("var", 0))] * 3, 8, fs)
        f = f.replace(size=f.size.at[1, 0].set(2**31 - 1))
        X = np.ones((5, 1), np.float32)
        out = jax.jit(lambda f: evaluate(f, X, fs, backend="jax"))(f)
        assert np.isnan(out[1]).all() and (np.asarray(out[0]) == 2).all(), out
        # the interpreter itself is bounded by max_len too (its loop is clipped)
        raw = evaluate_jax((f.opcode, f.value, f.size, f.output), X, fs, 1, 1, 8)
        print("ok", np.asarray(raw).shape)
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "ok (3, 5, 1)" in proc.stdout, proc.stderr[-3000:]


def test_forest_index_out_of_range_raises():
    forest = Forest.from_tuples([("var", 0)] * 4, 4, FS)
    with pytest.raises(IndexError, match="tree index 10 is out of range for a forest of 4 trees"):
        forest[10]
    with pytest.raises(IndexError, match="-5"):
        forest[-5]
    assert forest[-4].opcode.shape == (4,)


# ---- sizes -----------------------------------------------------------------------------------------


def _one_node_forest(pop, max_len):
    """``pop`` one-node trees x0 in ``max_len`` slots; np.zeros pages are not touched until written."""
    opcode, size = np.zeros((pop, max_len), np.int32), np.zeros((pop, max_len), np.int32)
    opcode[:, 0], size[:, 0] = 2, 1
    return ArrayForest(opcode, np.zeros((pop, max_len), np.float32), size, np.zeros_like(opcode))


def test_oversized_evaluations_are_refused_up_front_naming_the_argument(monkeypatch):
    """Checked before any backend is chosen or any array converted (the forests here are lazily
    allocated zeros of up to 4.5 GiB), so one backend stands for all."""
    backend = BACKENDS[-1]
    monkeypatch.delenv("EVOTENSOR_GP_MEMORY_LIMIT", raising=False)
    small = _one_node_forest(9, 4)
    y = np.zeros(7, np.float32)
    with pytest.raises(ArgumentError, match=r"n_outputs too large .*n_outputs=134217728 needs .* GiB.*limit"):
        fitness(small, X, y, FS, "accuracy", n_outputs=2**27, backend=backend)
    with pytest.raises(ArgumentError, match=r"n_outputs too large"):
        evaluate(small, X, FS, n_outputs=2**27, backend=backend)
    with pytest.raises(ArgumentError, match=r"max_len too large .*max_len=33554432 needs"):
        fitness(_one_node_forest(9, 2**25), X, X[:, 0], FS, backend=backend)
    with pytest.raises(
        ArgumentError, match=r"X \(n_points\) too large .*predictions \[pop, n_points, n_outputs\]"
    ):
        evaluate(_one_node_forest(2**22, 1), np.zeros((2**14, 2), np.float32), FS, backend=backend)
    # the limit is the documented one: lowered, a modest evaluation is refused; raised, it runs
    monkeypatch.setenv("EVOTENSOR_GP_MEMORY_LIMIT", str(2**20))
    with pytest.raises(ArgumentError, match=r"limit of 0\.000977 GiB"):
        evaluate(small, X, FS, n_outputs=200, backend=backend)
    monkeypatch.setenv("EVOTENSOR_GP_MEMORY_LIMIT", str(2**40))
    assert evaluate(small, X, FS, n_outputs=3, backend=backend).shape == (9, 7, 3)


_OOM_SCRIPT = textwrap.dedent(
    """
    import resource, sys, numpy as np, jax
    from evotensor.gp import Forest, FunctionSet, fitness, evaluate
    fs = FunctionSet(("add",))
    X = np.ones((4, 1), np.float32)
    labels = np.zeros(4, np.float32)
    def forest(pop, max_len):
        op, size = np.zeros((pop, max_len), np.int32), np.zeros((pop, max_len), np.int32)
        op[:, 0], size[:, 0] = 2, 1
        return Forest(op, np.zeros((pop, max_len), np.float32), size, np.full_like(op, -1))
    print(fitness(forest(9, 4), X, X[:, 0], fs, backend="native"))  # warm: threads and code loaded
    vm = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmSize"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + 3 * 2**29,) * 2)  # 1.5 GiB more
    def classes(pop):
        return fitness(forest(pop, 4), X, labels, fs, "accuracy", n_outputs=2**27, backend="native")
    cases = {
        "outputs-9-trees": lambda: classes(9),
        "outputs-1-tree": lambda: classes(1),
        "predictions": lambda: evaluate(forest(9, 4), X, fs, n_outputs=2**25, backend="native"),
        "max_len": lambda: fitness(forest(9, 2**21), X, X[:, 0], fs, backend="native"),
    }
    for name in sys.argv[1:]:
        try:
            jax.block_until_ready(cases[name]())
            print("case", name, "no error")
        except Exception as e:
            print("case", name, type(e).__name__, str(e).splitlines()[0][:160])
    print("after", np.asarray(evaluate(forest(9, 4), X, fs, backend="native"))[:, 0, 0].tolist())
    """
)


def _oom_subprocess(cases):
    env = dict(os.environ, EVOTENSOR_GP_MEMORY_LIMIT=str(2**50), JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, "-c", _OOM_SCRIPT, *cases],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-3000:])  # never a signal
    assert "after [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]" in proc.stdout, proc.stdout  # still healthy
    return {line.split()[1]: line for line in proc.stdout.splitlines() if line.startswith("case ")}


NATIVE_OOM = pytest.mark.skipif(
    not native.AVAILABLE or not sys.platform.startswith("linux"),
    reason="needs the native evaluator and RLIMIT_AS",
)


@NATIVE_OOM
def test_native_allocation_failure_in_a_worker_thread_raises_instead_of_aborting():
    """Nine trees make two tasks, so a pool thread runs one: its std::bad_alloc used to abort the
    process. The up-front check is lifted (EVOTENSOR_GP_MEMORY_LIMIT) and the address space capped
    (RLIMIT_AS), so that the allocation really fails on any machine; the process lives on."""
    out = _oom_subprocess(["outputs-9-trees"])
    assert (
        "JaxRuntimeError RESOURCE_EXHAUSTED: evotensor GP native evaluator: out of memory"
        in out["outputs-9-trees"]
    )


@pytest.mark.slow
@NATIVE_OOM
def test_native_allocation_failures_of_every_kind_raise():
    out = _oom_subprocess(["outputs-1-tree", "predictions", "max_len", "outputs-9-trees"])
    for name in ("outputs-1-tree", "max_len", "outputs-9-trees"):
        assert "RESOURCE_EXHAUSTED" in out[name], out
    assert "no error" not in out["predictions"], out  # XLA's own buffer or the evaluator's


# ---- data and the GP/problem match ---------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(
    which=st.sampled_from(["X", "y", "X_test", "y_test"]),
    bad=st.sampled_from([np.nan, np.inf, -np.inf, 1e300]),
    row=st.integers(0, 5),
    col=st.integers(0, 1),
)
def test_nonfinite_data_is_refused_naming_row_and_column(which, bad, row, col):
    data = {"X": X[:6].copy(), "y": X[:6, 0] * 2, "X_test": X[:6].copy(), "y_test": X[:6, 1].copy()}
    with np.errstate(over="ignore"):
        if which.startswith("X"):
            data[which][row, col] = bad
        else:
            data[which][row] = bad
    where = f"{which}\\[{row}, {col}\\]" if which.startswith("X") else f"{which}\\[{row}\\]"
    with pytest.raises(ArgumentError, match=f"{where} = -?inf|{where} = nan"):
        SymbolicRegression(data["X"], data["y"], FS, X_test=data["X_test"], y_test=data["y_test"])
    if which in ("X", "y"):
        forest = Forest.from_tuples([("var", 0)], 4, FS)
        with pytest.raises(ArgumentError, match=f"{which} must be finite"):
            fitness(forest, data["X"], data["y"], FS)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"n_vars": 5}, "n_vars mismatch: the GP was built with n_vars=5 but the data X has 2 column"),
        ({"n_vars": 1}, "n_vars mismatch"),
        (
            {"n_vars": 2, "n_outputs": 3},
            "n_outputs mismatch: the GP was built with n_outputs=3 but the problem evaluates 1",
        ),
    ],
)
def test_a_gp_that_does_not_match_its_problem_fails_naming_the_argument(options, message):
    problem = Pagie1()
    gp = GP(population_size=8, function_set=problem.function_set, max_len=8, **options)
    with pytest.raises(ArgumentError, match=message):
        evotensor.run(gp, problem, 1, jax.random.key(0))


def test_a_matching_gp_is_evaluated_and_its_decoder_carries_the_shape():
    problem = Pagie1()
    gp = GP(population_size=8, function_set=problem.function_set, n_vars=2, max_len=8)
    decoded = gp.decoder.decode(gp.init(jax.random.key(0)).forest)
    assert (decoded.n_vars, decoded.n_outputs) == (2, 1) and isinstance(decoded, Forest)
    fit = np.asarray(problem.evaluate(jax.random.key(0), decoded).fitness)
    assert fit.shape == (8,) and not np.isnan(fit).any()
    wrong = GP(population_size=8, function_set=problem.function_set, n_vars=3, max_len=8)
    with pytest.raises(ArgumentError, match="n_vars mismatch"):
        problem.evaluate(jax.random.key(0), wrong.decoder.decode(wrong.init(jax.random.key(0)).forest))


# ---- constructor arguments ---------------------------------------------------------------------------

BAD_OPTIONS = [
    ("leaf_prob", math.nan),
    ("leaf_prob", -0.1),
    ("leaf_prob", 1.5),
    ("leaf_prob", (0.2, math.nan)),
    ("leaf_prob", ()),
    ("leaf_prob", "0.3"),
    ("const_prob", math.nan),
    ("const_prob", 2.0),
    ("const_range", (1.0, -1.0)),
    ("const_range", (0.0, math.inf)),
    ("const_range", (math.nan, 1.0)),
    ("const_range", 3.0),
    ("modi_prob", math.nan),
    ("modi_prob", -1.0),
    ("init_depth", (6, 2)),
    ("init_depth", (-1, 2)),
    ("init_depth", (1.5, 2)),
    ("mutation_depth", (3, 0)),
    ("init_method", "random"),
    ("n_outputs", 0),
    ("n_outputs", 1.5),
    ("max_len", 0),
    ("max_len", 2**40),
    ("n_vars", -1),
    ("n_vars", True),
    ("function_set", None),
    ("function_set", ("add", "mul")),
    ("population_size", 1),
    ("tournament_size", 0),
    ("survival_rate", math.nan),
    ("elite_rate", 1.0),
    ("mutation_rate", math.inf),
]


@settings(max_examples=40, deadline=None)
@given(bad=st.sampled_from(BAD_OPTIONS), pop=st.integers(2, 50), n_vars=st.integers(1, 4))
def test_bad_gp_arguments_are_refused_naming_the_argument(bad, pop, n_vars):
    name, value = bad
    args = {"population_size": pop, "function_set": FS, "n_vars": n_vars, "max_len": 16, name: value}
    with pytest.raises(ArgumentError, match=name):
        GP(**args)


@settings(max_examples=40, deadline=None)
@given(
    leaf_prob=st.floats(allow_nan=True, allow_infinity=True),
    const_prob=st.floats(allow_nan=True, allow_infinity=True),
)
def test_probabilities_are_accepted_exactly_in_the_unit_interval(leaf_prob, const_prob):
    ok = all(0.0 <= p <= 1.0 for p in (leaf_prob, const_prob))
    if ok:
        GP(4, FS, 2, max_len=8, leaf_prob=leaf_prob, const_prob=const_prob)
    else:
        with pytest.raises(ArgumentError, match="leaf_prob|const_prob"):
            GP(4, FS, 2, max_len=8, leaf_prob=leaf_prob, const_prob=const_prob)
    with pytest.raises(ValueError, match="leaf_prob"):
        TreeGenerator(FS, 2, 8, leaf_prob=math.nan)


def test_function_set_none_is_refused_by_name_everywhere():
    forest = Forest.from_tuples([("var", 0)], 4, FS)
    calls = [
        lambda: Forest.from_tuples([("var", 0)], 4, None),
        lambda: forest.check(None),
        lambda: forest.to_tuples(None),
        lambda: forest.to_infix(None),
        lambda: evaluate(forest, X, None),
        lambda: fitness(forest, X, X[:, 0], None),
        lambda: TreeGenerator(None, 2, 8),
        lambda: SymbolicRegression(X, X[:, 0], None),
        lambda: GP(4, None, 2),
    ]
    for call in calls:
        with pytest.raises(ArgumentError, match="function_set must be a FunctionSet, got NoneType"):
            call()


# ---- deep trees ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [3000])
def test_deep_trees_convert_without_recursion(depth):
    """A chain of ``depth`` unary nodes and a right comb of binary nodes: far past Python's recursion
    limit, they round-trip through from_tuples / to_tuples and print with to_infix."""
    fs = FunctionSet(("neg", "add"))
    chain, comb = ("var", 0), ("const", 1.0)
    for _ in range(depth):
        chain = ("neg", chain)
    for _ in range(depth // 2):
        comb = ("add", ("var", 1), comb)
    forest = Forest.from_tuples([chain, comb], depth + 1, fs)
    forest.check(fs, n_vars=2)
    back = forest.to_tuples(fs)
    node, n = back[0], 0
    while node[0] == "neg":
        node, n = node[1], n + 1
    assert n == depth and node == ("var", 0)
    node, n = back[1], 0
    while node[0] == "add":
        assert node[1] == ("var", 1)
        node, n = node[2], n + 1
    assert n == depth // 2 and node == ("const", 1.0)
    chain_text, comb_text = forest.to_infix(fs)
    assert chain_text == "neg(" * depth + "x0" + ")" * depth
    assert comb_text == "x1 + " + "(x1 + " * (depth // 2 - 1) + "1" + ")" * (depth // 2 - 1)
    pred = evaluate(forest, np.array([[2.0, 0.5]], np.float32), fs)
    np.testing.assert_allclose(np.asarray(pred)[:, 0, 0], [2.0, 1 + 0.5 * (depth // 2)])


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6))
def test_random_trees_round_trip_through_tuples_and_print(seed):
    fs = FunctionSet(("add", "sub", "mul", "neg", "if_then_else"))
    forest = Forest(
        **{k: jnp.asarray(v) for k, v in _arrays(random_forest(seed, fs, 3, 24, 3, n_outputs=2)).items()}
    )
    again = Forest.from_tuples(forest.to_tuples(fs), 24, fs)
    for k in FIELDS:
        np.testing.assert_array_equal(np.asarray(getattr(again, k)), np.asarray(getattr(forest, k)))
    assert all(isinstance(text, str) and text for text in forest.to_infix(fs))


@pytest.mark.parametrize("names", [("sin", "neg"), ("add", "mul"), ("add", "mul", "neg", "if_then_else")])
def test_tree_validity_matches_the_per_tree_reasons_for_every_largest_arity(names):
    # the check gathers the later children's sizes only up to the function set's largest arity
    # (a shifted slice gives the first child's): each case is compared with the per-tree reasons
    from evotensor.gp.metrics import describe_invalid_tree

    fs = FunctionSet(names)
    gen = TreeGenerator(fs, N_VARS, 12, 1, 3)
    forest = gen(jax.random.key(len(names)), 60)
    rng = np.random.default_rng(len(names))
    arrays = {k: np.array(getattr(forest, k)) for k in ("opcode", "value", "size")}
    for field, lo, hi in (("opcode", -1, fs.n_opcodes + 1), ("size", -2, 15), ("value", -1, 3)):
        hit = rng.random(arrays[field].shape) < 0.02
        arrays[field][hit] = rng.integers(lo, hi, int(hit.sum()))
    fields = [arrays[k] for k in ("opcode", "value", "size")]
    want = [describe_invalid_tree(*(a[t] for a in fields), fs.arity, N_VARS) == "" for t in range(60)]
    got = np.asarray(jax.jit(lambda o, v, s: tree_validity(o, v, s, fs.arity, N_VARS))(*fields))
    assert 0 < sum(want) < 60  # both kinds present
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(tree_validity(*fields, fs.arity, N_VARS, np), want)
