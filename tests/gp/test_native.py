"""The native CPU evaluator (``evotensor.gp._native`` via ``evotensor.gp.native``) against the
reference interpreter, the documented metrics and the plain-JAX path.

Every test runs on JAX's CPU device (the fixture below), where the evaluator's FFI handlers live, so
the tests mean the same on any host; on a GPU host ``backend="native"`` reaches the same handlers
through a host callback (``test_native_is_computed_on_the_cpu_from_a_program_for_the_default_device``).
"""

import functools
import itertools
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.gp.eval_helpers import ArrayForest, assert_matches_reference, random_data, random_forest
from tests.gp.test_evaluate import FULL, MIXED, PROTECTED, SETS, numpy_metric

from evotensor.gp import native
from evotensor.gp.evaluate import METRICS, choose_backend, evaluate, fitness
from evotensor.gp.functions import BUILTIN_NAMES, CONST, FunctionSet
from evotensor.gp.reference import reference_eval
from evotensor.gp.tree_eval import tree_jacobian

ROOT = Path(__file__).resolve().parents[2]
POP, MAX_LEN, N_VARS = 13, 24, 3
HOST_DEFAULT_DEVICE = jax.devices()[0]  # a GPU on a GPU host
CPU = jax.devices("cpu")[0]


@pytest.fixture(autouse=True)
def on_the_cpu_device():
    with jax.default_device(CPU):
        yield


def test_extension_is_built_and_chosen_by_auto():
    assert native.AVAILABLE, f"the native GP evaluator is unavailable: {native.UNAVAILABLE_REASON}"
    assert native.supported(FULL) and native.supported(PROTECTED)
    custom = FunctionSet(("add", "sq"), custom={"sq": (1, lambda a: a * a)})
    assert not native.supported(custom)
    forest = random_forest(0, FULL, POP, MAX_LEN, N_VARS)
    X = random_data(1, 40, N_VARS)
    # "auto" is the Pallas kernel where JAX's default backend is a GPU, the native path on a CPU
    assert choose_backend("auto", FULL) == ("pallas" if jax.default_backend() == "gpu" else "native")
    if jax.default_backend() == "cpu":  # there "auto" is bit-identical to asking for the native path
        np.testing.assert_array_equal(
            np.asarray(evaluate(forest, X, FULL)), np.asarray(evaluate(forest, X, FULL, backend="native"))
        )
    with pytest.raises(ValueError, match="sq"):
        evaluate(random_forest(0, custom, 3, 8, 1), X[:, :1], custom, backend="native")


def test_native_is_computed_on_the_cpu_from_a_program_for_the_default_device():
    """``backend="native"`` called outside ``jit`` and in a program compiled for the host's default
    device (on a GPU host: a direct CPU computation, and a host callback) equals the program compiled
    for the CPU device, under ``jit`` and ``vmap``."""
    fs = SETS["full"]
    forests = [random_forest(s, fs, 20, MAX_LEN, N_VARS) for s in (3, 4)]
    fields = ("opcode", "value", "size", "output")
    stacked = [np.stack([getattr(f, k) for f in forests]) for k in fields]
    X = random_data(5, 300, N_VARS)
    y = np.sin(X[:, 0])

    def both(o, v, s, out):
        forest = ArrayForest(o, v, s, out)
        return evaluate(forest, X, fs, backend="native"), fitness(forest, X, y, fs, backend="native")

    on_cpu = jax.jit(jax.vmap(both))(*stacked)
    with jax.default_device(HOST_DEFAULT_DEVICE):
        in_program = jax.jit(jax.vmap(both))(*stacked)
        outside = both(*(a[1] for a in stacked))
    for i, (pred, fit) in ((slice(None), in_program), (1, outside)):
        np.testing.assert_array_equal(np.asarray(pred), np.asarray(on_cpu[0])[i])  # all on the CPU
        # the metric's last division runs on the default device
        np.testing.assert_allclose(np.asarray(fit), np.asarray(on_cpu[1])[i], rtol=1e-6)


def test_the_host_callback_route_computes_the_ffi_call_on_the_cpu():
    """What a program for another platform (a GPU) runs: a callback (not the FFI call) around
    ``_compute_on_the_cpu``, which equals the FFI call. (A CPU program never takes this route, and is
    not made to here: JAX called from a callback of a CPU program can deadlock.)"""
    fs = SETS["full"]
    forest = random_forest(6, fs, 20, MAX_LEN, N_VARS)
    X = random_data(7, 300, N_VARS)
    args = (forest.opcode, forest.value, forest.size, forest.output, X.T, np.asarray(native._table(fs)))
    ffi = functools.partial(native._forward_ffi, n_outputs=1, protected=False)
    direct = native._compute_on_the_cpu(ffi, *args)
    assert isinstance(direct, np.ndarray) and direct.shape == (20, 300, 1)
    np.testing.assert_array_equal(direct, np.asarray(evaluate(forest, X, fs, backend="native")))
    # both routes are staged: the FFI call for the CPU, the callback for every other platform
    traced = jax.make_jaxpr(lambda *a: native._platform_dependent(ffi, *a))(*args)
    (switch,) = [e for e in traced.jaxpr.eqns if e.primitive.name == "cond"]
    routes = sorted(
        ("callback" in str(b.jaxpr), "ffi_call" in str(b.jaxpr)) for b in switch.params["branches"]
    )
    assert routes == [(False, True), (True, False)]


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(sorted(SETS)), st.sampled_from([1, 3]), st.integers(1, 700))
def test_forward_equals_reference(seed, set_name, n_outputs, n_points):
    """Every function, raw and protected, Modi outputs, row counts around the 256-row chunks."""
    fs = SETS[set_name]
    forest = random_forest(seed, fs, POP, MAX_LEN, N_VARS, n_outputs)
    X = random_data(seed + 1, n_points, N_VARS)
    out = evaluate(forest, X, fs, n_outputs, backend="native")
    assert out.shape == (POP, n_points, n_outputs) and out.dtype == jnp.float32
    assert_matches_reference(out, forest, X, fs, n_outputs)


def _targets(rng, metric, n_points, n_outputs):
    if metric in ("accuracy", "cross_entropy"):
        return rng.integers(0, max(n_outputs, 2), n_points).astype(np.float32)
    y = rng.normal(size=(n_points, n_outputs)).astype(np.float32)
    return y[:, 0] if n_outputs == 1 else y


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 10**6), st.sampled_from(METRICS), st.sampled_from([1, 3]))
def test_fitness_equals_metric_of_reference_predictions(seed, metric, n_outputs):
    fs = SETS["full"]
    forest = random_forest(seed, fs, POP, MAX_LEN, N_VARS, n_outputs)
    X = random_data(seed + 1, 300, N_VARS)
    y = _targets(np.random.default_rng(seed), metric, 300, n_outputs)
    n_out = n_outputs if metric in ("accuracy", "cross_entropy") else None
    fit = np.asarray(fitness(forest, X, y, fs, metric, n_outputs=n_out, backend="native"))
    pred = reference_eval(forest, X, fs, n_outputs)
    # the reference predictions perturbed by a few ulps of the data: trees whose metric moves with
    # them are chaotic (tan near a pole, ...) and cannot be compared across float32 paths
    X_p = X * np.float32(1 + 5e-7)
    expected = numpy_metric(pred, y, metric)
    expected_p = numpy_metric(reference_eval(forest, X_p, fs, n_outputs), y, metric)
    stable = np.isclose(expected, expected_p, rtol=1e-3, atol=1e-4) | (
        ~np.isfinite(expected) & (expected == expected_p)
    )
    assert stable.mean() >= 0.7
    np.testing.assert_array_equal(np.isfinite(fit[stable]), np.isfinite(expected[stable]))
    np.testing.assert_array_equal(np.isposinf(fit[stable]), np.isposinf(expected[stable]))
    finite = stable & np.isfinite(expected)
    np.testing.assert_allclose(fit[finite], expected[finite], rtol=2e-3, atol=2e-4)


def _one_function_forest(fs, name, n):
    """``n`` one-node-function trees ``name(x0)``."""
    opcode = np.zeros((n, 4), np.int32)
    value = np.zeros((n, 4), np.float32)
    size = np.zeros((n, 4), np.int32)
    opcode[:, 0], opcode[:, 1] = fs.opcode(name), 2
    size[:, 0], size[:, 1] = 2, 1
    return ArrayForest(opcode, value, size, np.full((n, 4), -1, np.int32))


@pytest.mark.parametrize("name", ["sin", "cos", "tan"])
def test_trigonometry_over_every_argument_range(name):
    """The vectorized sin/cos/tan (float path below 8192, double path below 2**20, library above,
    inf and nan) against float64 NumPy rounded to float32, in chunks mixing the ranges."""
    fs = FunctionSet(("sin", "cos", "tan"))
    rng = np.random.default_rng(7)
    parts = [
        rng.uniform(-10, 10, 3000),
        rng.uniform(-8192, 8192, 3000),
        rng.uniform(-(2.0**20), 2.0**20, 3000),
        rng.uniform(-1e30, 1e30, 500),
        np.arange(-200, 200) * (np.pi / 2),  # near the quadrant boundaries and the poles of tan
        [0.0, -0.0, 1e-30, -1e-30, np.inf, -np.inf, np.nan, 8191.999, 8192.0, 2.0**20, -(2.0**20)],
    ]
    x = np.concatenate([np.asarray(p, np.float64) for p in parts]).astype(np.float32)
    small = np.arange(x.size) < 3000
    for data in (x, x[small]):  # mixed chunks, and chunks of the float path only
        tree = _one_function_forest(fs, name, 1)
        got = np.asarray(evaluate(tree, data[:, None], fs, backend="native"))[0, :, 0]
        with np.errstate(all="ignore"):
            want = getattr(np, name)(data.astype(np.float64))
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want.astype(np.float32)))
        finite = np.isfinite(want)
        err = np.abs(got[finite] - want[finite])
        # a few float32 ulps of the result, and of the argument times the derivative (tan near its
        # poles, where one ulp of x moves the value a lot)
        deriv = 1.0 / np.cos(data[finite].astype(np.float64)) ** 2 if name == "tan" else 1.0
        tol = 4 * np.spacing(np.abs(want[finite]).astype(np.float32)) + 1e-7 * np.abs(deriv) * (
            1 + np.abs(data[finite])
        ) * np.spacing(np.float32(1))
        assert np.all(err <= np.maximum(tol, 2e-7)), (data[finite][err > tol][:5], err.max())


def test_malformed_trees_get_the_worst_fitness_and_nan_predictions():
    fs = FunctionSet(("add", "mul"))
    good = np.zeros((3, 6), np.int32), np.zeros((3, 6), np.float32), np.zeros((3, 6), np.int32)
    opcode, value, size = good
    # tree 0: x0 + x0 (valid); tree 1: add with one child (truncated); tree 2: length 0
    opcode[0, :3], size[0, :3] = (fs.opcode("add"), 2, 2), (3, 1, 1)
    opcode[1, :2], size[1, :2] = (fs.opcode("add"), 2), (2, 1)
    forest = ArrayForest(opcode, value, size, np.full((3, 6), -1, np.int32))
    X = np.linspace(-1, 1, 10, dtype=np.float32)[:, None]
    # a concrete malformed forest is refused at the boundary, naming the first bad tree
    with pytest.raises(ValueError, match="tree 1 is malformed.*2 malformed trees"):
        evaluate(forest, X, fs, backend="native")
    # inside jit: NaN predictions and the worst fitness for the malformed trees
    arrays = {k: getattr(forest, k) for k in ("opcode", "value", "size", "output")}
    pred = np.asarray(jax.jit(lambda a: evaluate(ArrayForest(**a), X, fs, backend="native"))(arrays))
    np.testing.assert_allclose(pred[0, :, 0], 2 * X[:, 0])
    assert np.isnan(pred[1:]).all()
    fit_of = lambda metric: jax.jit(  # noqa: E731
        lambda a: fitness(ArrayForest(**a), X, 2 * X[:, 0], fs, metric, backend="native")
    )(arrays)
    fit = np.asarray(fit_of("mse"))
    assert fit[0] == 0.0 and np.isposinf(fit[1:]).all()
    assert np.isneginf(np.asarray(fit_of("r2"))[1:]).all()


def test_jit_vmap_and_determinism():
    fs = SETS["full"]
    forests = [random_forest(s, fs, 40, MAX_LEN, N_VARS) for s in (3, 4)]
    X = jnp.asarray(random_data(5, 600, N_VARS))
    y = jnp.sin(X[:, 0])
    fields = ("opcode", "value", "size", "output")
    stacked = ArrayForest(*(np.stack([getattr(f, k) for f in forests]) for k in fields))

    def fit(o, v, s, out):
        return fitness(ArrayForest(o, v, s, out), X, y, fs, backend="native")

    args = lambda f: (f.opcode, f.value, f.size, f.output)  # noqa: E731
    batched = jax.jit(jax.vmap(fit))(*args(stacked))
    for i, f in enumerate(forests):
        single = jax.jit(fit)(*args(f))
        np.testing.assert_array_equal(np.asarray(batched[i]), np.asarray(single))
        # many trees run on XLA's thread pool; the result must not depend on the schedule
        for _ in range(3):
            np.testing.assert_array_equal(np.asarray(jax.jit(fit)(*args(f))), np.asarray(single))
    text = jax.jit(fit).lower(*args(forests[0])).as_text()
    assert "evotensor_gp_fitness" in text and "callback" not in text


def test_native_and_jax_paths_agree_on_gp_populations():
    """The two CPU paths give the same fitness on evolved-looking populations (Pagie-1 set)."""
    fs = FunctionSet(("add", "sub", "mul", "div", "sin", "cos", "tan"))
    forest = random_forest(11, fs, 200, 48, 2, max_depth=6)
    g = np.linspace(-5, 5, 26, dtype=np.float32)
    X = np.stack(np.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    y = 1 / (1 + X[:, 0] ** -4) + 1 / (1 + X[:, 1] ** -4)
    a = np.asarray(fitness(forest, X, y, fs, backend="native"))
    b = np.asarray(fitness(forest, X, y, fs, backend="jax"))
    both = np.isfinite(a) & np.isfinite(b)
    assert (np.isfinite(a) == np.isfinite(b)).mean() >= 0.97
    close = np.isclose(a[both], b[both], rtol=1e-3, atol=1e-5)
    assert close.mean() >= 0.97, np.c_[a[both][~close], b[both][~close]]


def test_without_the_extension_everything_falls_back_to_jax():
    code = (
        "import numpy as np\n"
        "from evotensor.gp import native\n"
        "from evotensor.gp.evaluate import choose_backend, fitness\n"
        "from evotensor.gp.functions import FunctionSet\n"
        "assert not native.AVAILABLE and 'EVOTENSOR_NO_NATIVE' in native.UNAVAILABLE_REASON\n"
        "fs = FunctionSet(('add', 'mul'))\n"
        "import jax\n"
        "assert choose_backend('auto', fs) == ('pallas' if jax.default_backend() == 'gpu' else 'jax')\n"
        "try:\n"
        "    choose_backend('native', fs); native.fitness_sums(None, None, None, fs, 1, 0)\n"
        "except ValueError as e:\n"
        "    assert 'EVOTENSOR_NO_NATIVE' in str(e)\n"
        "else:\n"
        "    raise AssertionError('no error')\n"
        "print('ok')\n"
    )
    env = dict(os.environ, EVOTENSOR_NO_NATIVE="1", JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


@pytest.mark.parametrize("name", ["sin", "cos", "tan"])
def test_trigonometry_keeps_relative_accuracy_near_zeros_and_poles(name):
    """float32 arguments nearest to k*pi and (k - 1/2)*pi below 8192: sin/cos are tiny there (or tan
    huge), so an inexact range reduction shows up as a large relative error."""
    fs = FunctionSet(("sin", "cos", "tan"))
    k = np.arange(-2600, 2601, dtype=np.float64)
    x = np.concatenate([k * np.pi, (k - 0.5) * np.pi]).astype(np.float32)
    x = np.concatenate([x, np.nextafter(x, np.float32(np.inf)), np.nextafter(x, np.float32(-np.inf))])
    got = np.asarray(evaluate(_one_function_forest(fs, name, 1), x[:, None], fs, backend="native"))[0, :, 0]
    want = getattr(np, name)(x.astype(np.float64))
    ulps = np.abs(got - want) / np.spacing(np.abs(want).astype(np.float32))
    assert ulps.max() <= 4, (x[np.argmax(ulps)], ulps.max())


def test_nonfinite_data_and_protected_exp_keep_nan():
    """Protected exp is exp(min(a, 80)): a nan argument stays nan, so the tree is the worst."""
    fs = FunctionSet(("exp", "add"), protected=True)
    opcode = np.array([[fs.opcode("exp"), 2, 0]], np.int32)
    forest = ArrayForest(
        opcode, np.zeros((1, 3), np.float32), np.array([[2, 1, 0]], np.int32), -np.ones((1, 3), np.int32)
    )
    X = np.array([[np.nan], [np.inf], [-np.inf], [100.0], [1.0]], np.float32)
    out = np.asarray(evaluate(forest, X, fs, backend="native"))[0, :, 0]
    ref = reference_eval(forest, X, fs, 1)[0, :, 0]
    np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
    np.testing.assert_allclose(out[~np.isnan(ref)], ref[~np.isnan(ref)], rtol=1e-6)
    labels = np.array([0, 1, 0, 1, 1], np.float32)
    with pytest.raises(ValueError, match=r"X must be finite, but X\[0, 0\] = nan \(row 0, column 0"):
        fitness(forest, X, labels, fs, "accuracy", backend="native")  # concrete data is checked
    for metric, worst in (("accuracy", -np.inf), ("cross_entropy", np.inf), ("mse", np.inf)):
        y = labels if metric != "mse" else np.zeros(5, np.float32)
        fit = jax.jit(lambda X, y, m=metric: fitness(forest, X, y, fs, m, backend="native"))(X, y)
        assert np.asarray(fit)[0] == worst, metric


def test_bad_forest_shapes_and_labels_are_rejected_by_name():
    fs = FunctionSet(("add",))
    X = np.zeros((4, 1), np.float32)
    empty = ArrayForest(*(np.zeros((3, 0), t) for t in (np.int32, np.float32, np.int32, np.int32)))
    for backend in ("native", "jax"):
        with pytest.raises(ValueError, match="max_len >= 1"):
            evaluate(empty, X, fs, backend=backend)
    forest = random_forest(0, fs, 2, 4, 1)
    with pytest.raises(ValueError, match="class labels in 0..1"):
        fitness(forest, X, np.array([0, 1, 2, 1], np.float32), fs, "cross_entropy")
    with pytest.raises(ValueError, match="class labels in 0..2"):
        fitness(forest, X, np.array([0, 1, 0.5, 1], np.float32), fs, "accuracy", n_outputs=3)


# ---- normal equations (the linearization of constant optimization) ----------------------------------

# ordinary points, the protected thresholds (+-0.001), zero, ties, and past the exp clip (80)
GRID = np.array([-3.0, -1.0, -0.5, -1e-3, -5e-4, 0.0, 5e-4, 1e-3, 0.7, 1.0, 2.5, 81.0], np.float32)


def _fields(forest):
    return tuple(jnp.asarray(getattr(forest, k)) for k in ("opcode", "value", "size", "output"))


@pytest.mark.parametrize("protected", [False, True])
def test_normal_equations_derivative_rules_are_those_of_jax_jvp(protected):
    """Each built-in's partial derivatives, at ordinary and singular points (one node whose children
    are constants, one row): ``jax.jvp`` of its definition in functions.py (a non-finite one counts
    as 0; a non-finite output leaves the row out)."""
    fs = FunctionSet(BUILTIN_NAMES, protected=protected)
    L, K = 4, 3
    opcode, value, size, expected, out_value = [], [], [], [], []
    for f in fs.functions:
        args = np.array(list(itertools.product(GRID, repeat=f.arity)), np.float32)  # [m, arity]
        m = len(args)
        op = np.zeros((m, L), np.int32)
        op[:, 0], op[:, 1 : 1 + f.arity] = f.opcode, CONST
        val = np.zeros((m, L), np.float32)
        val[:, 1 : 1 + f.arity] = args
        sz = np.zeros((m, L), np.int32)
        sz[:, 0], sz[:, 1 : 1 + f.arity] = 1 + f.arity, 1
        cols = tuple(jnp.asarray(args[:, j]) for j in range(f.arity))
        d = np.zeros((m, K), np.float32)
        for k in range(f.arity):
            unit = tuple(jnp.ones(m) if j == k else jnp.zeros(m) for j in range(f.arity))
            d[:, k] = np.asarray(jax.jvp(f.fn, cols, unit)[1])
        opcode.append(op), value.append(val), size.append(sz), expected.append(d)
        out_value.append(np.asarray(f.fn(*cols)))
    opcode, value, size, expected = (np.concatenate(a) for a in (opcode, value, size, expected))
    out_value = np.concatenate(out_value)
    pop = len(opcode)
    slots = np.tile(np.arange(1, K + 1, dtype=np.int32), (pop, 1))  # past the tree's end: unused
    forest = ArrayForest(opcode, value, size, np.full_like(opcode, -1))
    mean, cov, sse, bad = map(
        np.asarray, native.normal_equations(_fields(forest), jnp.zeros((1, 1)), jnp.zeros(1), slots, fs)
    )
    finite = np.isfinite(out_value)
    np.testing.assert_array_equal(bad, (~finite).astype(np.float32))
    want = np.where(np.isfinite(expected), expected, 0.0)[finite]
    # atol: the native sin / cos are within a few float32 ulps of 1 (see the module docstring)
    np.testing.assert_allclose(mean[finite, :K], want, rtol=2e-6, atol=3e-7)
    np.testing.assert_allclose(mean[finite, K], out_value[finite], rtol=2e-6)
    np.testing.assert_array_equal(mean[~finite], 0.0)  # no row left: zero statistics
    assert np.all(cov[finite] == 0.0)  # one row: nothing varies


@functools.cache
def _jacobian_of(fs):
    return jax.jit(jax.vmap(lambda o, v, s, X: tree_jacobian(o, v, s, X, fs), in_axes=(0, 0, 0, None)))


def _tame_forest(seed, fs, pop, max_len, K):
    """A random forest with its constants well away from singular points, and the slots of its first
    ``K`` constants (``max_len`` where there are fewer)."""
    forest = random_forest(seed, fs, pop, max_len, 3)
    rng = np.random.default_rng(seed)
    const = forest.opcode == CONST
    magnitude = rng.uniform(0.5, 2.0, const.shape) * rng.choice([-1.0, 1.0], const.shape)
    forest.value[:] = np.where(const, magnitude, forest.value).astype(np.float32)
    slots = np.full((pop, K), max_len, np.int32)
    for t in range(pop):
        pos = np.nonzero(const[t])[0][:K]
        slots[t, : len(pos)] = pos
    return forest, slots


def _reference_statistics(forest, X, y, slots, fs):
    """The kernel's statistics in float64 from tree_jacobian's ``f`` and ``J``."""
    f, J = map(np.asarray, _jacobian_of(fs)(forest.opcode, forest.value, forest.size, X))
    f, J, y = f.astype(np.float64), J.astype(np.float64), y.astype(np.float64)
    pop, K = slots.shape
    mean, cov, sse = np.zeros((pop, K + 2)), np.zeros((pop, K + 2, K + 2)), np.zeros((pop, 2))
    bad = np.zeros(pop)
    for t in range(pop):
        D = np.zeros((len(y), K))
        for k, s in enumerate(slots[t]):
            if s < forest.size[t, 0]:
                D[:, k] = J[t, :, s]
        ok = np.isfinite(f[t])
        w = np.concatenate([np.where(np.isfinite(D), D, 0.0), f[t][:, None], y[:, None]], 1)[ok]
        bad[t] = np.sum(~ok)
        if not ok.any():
            continue
        mean[t] = w.mean(0)
        cov[t] = (w - mean[t]).T @ (w - mean[t])
        m2, c, syy = cov[t, K, K], cov[t, K, K + 1], cov[t, K + 1, K + 1]
        sse[t] = np.sum((w[:, K + 1] - w[:, K]) ** 2), (syy - c * c / m2 if m2 > 0 else syy)
    return mean, cov, sse, bad


def _check_normal_equations(seed, fs):
    pop, max_len, K = 12, 24, 4
    forest, slots = _tame_forest(seed, fs, pop, max_len, K)
    rng = np.random.default_rng(seed + 1)
    X = (rng.uniform(0.3, 2.0, (300, 3)) * rng.choice([-1.0, 1.0], (300, 3))).astype(np.float32)
    y = (np.sin(X[:, 0]) + X[:, 1] * X[:, 2]).astype(np.float32)
    got = native.normal_equations(_fields(forest), jnp.asarray(X), jnp.asarray(y), slots, fs)
    got = [np.asarray(a) for a in got]
    want = _reference_statistics(forest, X, y, slots, fs)
    np.testing.assert_array_equal(got[3], want[3])
    for t in range(pop):
        if want[3][t] == len(y):
            continue
        for a, b in zip(got[:3], want[:3]):
            b = b[t].astype(np.float32)  # the statistics are float32: beyond its range, inf
            scale = np.abs(b[np.isfinite(b)]).max()
            np.testing.assert_allclose(a[t], b, rtol=1e-4, atol=1e-5 * scale + 1e-6)


@settings(max_examples=6)
@given(seed=st.integers(0, 2**31 - 1))
def test_normal_equations_equal_the_jacobian_statistics(seed):
    _check_normal_equations(seed, MIXED)


@pytest.mark.slow
@pytest.mark.parametrize("protected", [False, True])
@settings(max_examples=10)
@given(seed=st.integers(0, 2**31 - 1))
def test_normal_equations_equal_the_jacobian_statistics_for_every_function(protected, seed):
    _check_normal_equations(seed, FunctionSet(BUILTIN_NAMES, protected=protected))


def test_normal_equations_special_cases():
    fs = FunctionSet(("add", "mul", "div", "sqrt"))
    C, V = (lambda c: ("const", 0, c)), (lambda k: ("var", 0, k))
    # a tree without constants; a row where f is inf (left out); a row where the derivative is inf
    # (counted as 0); a slot on a variable and one past the tree (unused); a malformed tree
    trees = [
        ("mul", 0, (V(0), V(1))),
        ("div", 0, (C(2.0), V(0))),
        ("sqrt", 0, (("add", 0, (C(1.0), V(1))),)),
        ("add", 0, (V(0), C(3.0))),
    ]
    from tests.gp.eval_helpers import tree_to_arrays

    arrays = [tree_to_arrays(t, fs, 8) for t in trees] + [tree_to_arrays(trees[0], fs, 8)]
    opcode, value, size, output = (np.stack(a) for a in zip(*arrays))
    size[4, 0] = 9  # longer than max_len: malformed
    X = np.array([[0.0, -1.0], [1.0, 2.0], [2.0, 0.5], [-1.0, 3.0]], np.float32)
    y = np.array([1.0, 2.0, 0.0, -1.0], np.float32)
    slots = np.array([[0, 1], [1, 8], [2, 8], [1, 2], [1, 2]], np.int32)
    forest = ArrayForest(opcode, value, size, output)
    mean, cov, sse, bad = map(np.asarray, native.normal_equations(_fields(forest), X, y, slots, fs))
    np.testing.assert_array_equal(bad, [0, 1, 0, 0, 1])
    f0 = X[:, 0] * X[:, 1]
    np.testing.assert_allclose(mean[0], [0, 0, f0.mean(), y.mean()], rtol=1e-6)
    np.testing.assert_allclose(sse[0, 0], np.sum((y - f0) ** 2), rtol=1e-6)
    keep = X[:, 0] != 0  # 2 / x0: inf at x0 = 0
    np.testing.assert_allclose(mean[1, 0], np.mean(1.0 / X[keep, 0]), rtol=1e-6)
    np.testing.assert_allclose(mean[1, 2], np.mean(2.0 / X[keep, 0]), rtol=1e-6)
    # d sqrt(1 + x1) / d c = 0.5 / sqrt(1 + x1): inf at x1 = -1, counted as 0
    d = np.where(X[:, 1] == -1.0, 0.0, 0.5 / np.sqrt(np.maximum(1.0 + X[:, 1], 1e-30)))
    np.testing.assert_allclose(mean[2, 0], d.mean(), rtol=1e-6)
    assert mean[3, 0] == 0.0 and mean[3, 1] == 1.0 and cov[3, 1, 1] == 0.0  # slot 1 is x0; c = slot 2
    # x0 + 3 is affine in x0: the scaled error is y's error on x0 alone
    x0 = X[:, 0].astype(np.float64)
    slope = np.cov(x0, y, bias=True)[0, 1] / np.var(x0)
    fit = np.sum((y - y.mean() - slope * (x0 - x0.mean())) ** 2)
    np.testing.assert_allclose(sse[3, 1], fit, rtol=1e-5)
    assert np.all(np.isnan(mean[4])) and np.all(np.isnan(cov[4])) and np.all(np.isnan(sse[4]))
