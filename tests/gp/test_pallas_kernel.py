"""The Pallas kernel: on a CPU its logic through Pallas's interpreter (tiny forests: it is slow) and
its GPU lowering (Triton) through ``jax.export`` for ``platforms=["cuda"]``; on a GPU the same tests
compile and run the kernel (``interpret=None``: interpreted only off a GPU)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.gp.eval_helpers import (
    ArrayForest,
    assert_matches_reference,
    assert_same_values,
    decision_is_stable,
    random_data,
    random_forest,
    random_tree,
    tree_to_arrays,
    well_conditioned,
)

from evotensor.gp.evaluate import METRICS, evaluate, fitness
from evotensor.gp.functions import BUILTIN_NAMES, CONST, VAR, FunctionSet
from evotensor.gp.pallas_kernel import (
    DATA_PARALLEL_MIN_POINTS,
    SMALL_STACK,
    _blocks,
    _pick_scheme,
    _prepare,
    default_max_stack,
    evaluate_pallas,
    fitness_pallas,
    stack_peak,
    variable_row,
)

FS = FunctionSet(("add", "mul", "div", "sin", "log", "if_then_else"))
POP, MAX_LEN, N_POINTS, N_VARS = 6, 16, 20, 2


@pytest.mark.parametrize("scheme, n_outputs", [("hybrid", 1), ("hybrid", 3), ("data_parallel", 2)])
def test_kernel_equals_reference(scheme, n_outputs):
    forest = random_forest(11 + n_outputs, FS, POP, MAX_LEN, N_VARS, n_outputs)
    X = random_data(5, N_POINTS, N_VARS)
    tree_block = 4 if scheme == "hybrid" else 1  # 6 trees -> a padded second block
    out = evaluate_pallas(
        forest, X, FS, n_outputs, scheme=scheme, tree_block=tree_block, row_block=8, interpret=None
    )
    assert out.shape == (POP, N_POINTS, n_outputs)
    assert_matches_reference(out, forest, X, FS, n_outputs)


@pytest.mark.parametrize(
    "scheme, metric, n_outputs", [("hybrid", "mse", 1), ("data_parallel", "accuracy", 2)]
)
def test_kernel_fitness_equals_jax_fitness_and_is_reproducible(scheme, metric, n_outputs):
    forest = random_forest(21, FS, POP, MAX_LEN, N_VARS, n_outputs)
    X = random_data(6, N_POINTS, N_VARS)
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, N_POINTS).astype(np.float32) if metric == "accuracy" else rng.normal(size=N_POINTS)
    kw = dict(scheme=scheme, tree_block=4 if scheme == "hybrid" else 1, row_block=8, interpret=None)
    fast = np.asarray(fitness_pallas(forest, X, y, FS, n_outputs, metric, **kw))
    expected = np.asarray(fitness(forest, X, y, FS, metric, n_outputs=n_outputs, backend="jax"))
    np.testing.assert_allclose(fast, expected, rtol=1e-4, atol=1e-6)
    assert np.isinf(expected).any() or metric == "accuracy"  # singular trees are covered
    again = np.asarray(fitness_pallas(forest, X, y, FS, n_outputs, metric, **kw))
    np.testing.assert_array_equal(fast, again)  # two-stage reduction without atomics: bitwise stable


def test_public_entry_dispatches_to_the_kernel():
    # same shapes and blocks as the tests above, so the interpreted kernels are reused from cache
    forest = random_forest(12, FS, POP, MAX_LEN, N_VARS)
    X = random_data(5, N_POINTS, N_VARS)
    y = np.asarray(X[:, 0], np.float64)
    via_kernel = evaluate(forest, X, FS, backend="pallas", tree_block=4, row_block=8)
    np.testing.assert_allclose(via_kernel, evaluate(forest, X, FS, backend="jax"), rtol=1e-5)
    fit = fitness(forest, X, y, FS, backend="pallas", tree_block=4, row_block=8)
    np.testing.assert_allclose(fit, fitness(forest, X, y, FS, backend="jax"), rtol=1e-5)


def test_small_stack_gives_nan_only_for_trees_that_need_more():
    def V(k):
        return ("var", -1, k)

    comb = ("add", -1, (("add", -1, (("add", -1, (V(0), V(1))), V(0))), V(1)))  # left comb: needs 4 slots
    flat = ("add", -1, (V(0), ("add", -1, (V(1), ("add", -1, (V(0), V(1)))))))  # right comb: needs 2
    forest = ArrayForest(*(np.stack(c) for c in zip(*(tree_to_arrays(t, FS, 8) for t in (comb, flat)))))
    np.testing.assert_array_equal(stack_peak(forest.opcode, forest.size, FS), [4, 2])
    X = random_data(8, 5, N_VARS)
    out = np.asarray(evaluate_pallas(forest, X, FS, max_stack=2, tree_block=2, row_block=8, interpret=None))
    assert np.isnan(out[0]).all()
    np.testing.assert_allclose(out[1, :, 0], 2 * (X[:, 0] + X[:, 1]), rtol=1e-6)


def _comb(depth, fs, left=True):
    """A comb of ``add`` nodes over alternating variables: a left comb needs ``depth + 1`` stack
    slots in reverse prefix order, a right comb 2."""
    tree = ("var", -1, 0)
    for k in range(depth):
        leaf = ("var", -1, (k + 1) % 2)
        tree = ("add", -1, (tree, leaf) if left else (leaf, tree))
    return tree


def test_trees_beyond_the_small_stack_run_in_the_second_launch():
    # max_len 40: the worst case (20) exceeds SMALL_STACK, so the default runs two stack tiers; the
    # deep left combs (peaks 12 and 19) must come out of the second launch, exactly
    fs = FunctionSet(("add", "mul", "sin"))
    trees = [_comb(11, fs), _comb(11, fs, left=False), _comb(18, fs), ("sin", -1, (("var", -1, 1),))]
    trees += [_comb(3, fs), _comb(5, fs, left=False)]
    forest = ArrayForest(*(np.stack(c) for c in zip(*(tree_to_arrays(t, fs, 40) for t in trees))))
    peaks = np.asarray(stack_peak(forest.opcode, forest.size, fs))
    assert peaks.max() > SMALL_STACK >= np.sort(peaks)[-3]  # both tiers are used
    X = random_data(9, 12, 2)
    out = evaluate_pallas(forest, X, fs, tree_block=4, row_block=8, interpret=None)
    assert_matches_reference(out, forest, X, fs)
    y = X[:, 0] * 3.0
    fit = fitness_pallas(forest, X, y, fs, tree_block=4, row_block=8, interpret=None)
    np.testing.assert_allclose(fit, fitness(forest, X, y, fs, backend="jax"), rtol=1e-5)


def test_division_is_correctly_rounded():
    # the kernel's float32 division must equal XLA's correctly rounded one bit for bit, also far
    # from 1 in magnitude (an approximate division, such as PTX's div.full.f32, would differ)
    fs = FunctionSet(("div", "inv"))
    trees = [("div", -1, (("var", -1, 0), ("var", -1, 1))), ("inv", -1, (("var", -1, 1),))]
    forest = ArrayForest(*(np.stack(c) for c in zip(*(tree_to_arrays(t, fs, 4) for t in trees))))
    rng = np.random.default_rng(5)
    X = (rng.standard_normal((256, 2)) * 10.0 ** rng.uniform(-30, 30, (256, 2))).astype(np.float32)
    out = np.asarray(evaluate_pallas(forest, X, fs, tree_block=2, row_block=64, interpret=None))
    Xj = jnp.asarray(X)
    np.testing.assert_array_equal(out[0, :, 0], np.asarray(Xj[:, 0] / Xj[:, 1]))
    np.testing.assert_array_equal(out[1, :, 0], np.asarray(1.0 / Xj[:, 1]))


@given(st.integers(0, 10**6), st.integers(1, 3))
def test_default_stack_bound_covers_every_tree(seed, max_arity):
    names = {1: ("sin", "neg"), 2: ("add", "sin"), 3: ("add", "if_then_else")}[max_arity]
    fs = FunctionSet(names)
    rng = np.random.default_rng(seed)
    rows = []
    while len(rows) < 20:
        try:
            rows.append(tree_to_arrays(random_tree(rng, fs, 2, 6, 1, p_leaf=0.2), fs, 20))
        except OverflowError:
            continue
    opcode, _, size, _ = (np.stack(c) for c in zip(*rows))
    peak = np.asarray(stack_peak(opcode, size, fs))
    # a direct simulation of the stack
    for t in range(20):
        h = best = 0
        for i in range(size[t, 0] - 1, -1, -1):
            h += 1 - fs.arity[opcode[t, i]]
            best = max(best, h)
        assert peak[t] == best
    assert (peak <= default_max_stack(20, fs.max_arity)).all()


def test_default_stack_bound_is_tight_for_a_left_comb():
    # add(add(add(x, x), x), x): 7 nodes, the bound (7 + 1) // 2 = 4 is reached
    assert default_max_stack(7, 2) == 4 and default_max_stack(7, 1) == 1 and default_max_stack(4, 3) == 3


def test_scheme_choice_and_errors():
    assert _pick_scheme("auto", 100) == "hybrid"
    assert _pick_scheme("auto", DATA_PARALLEL_MIN_POINTS) == "data_parallel"
    forest = random_forest(0, FS, 2, 8, 2)
    X = np.ones((4, 2), np.float32)
    with pytest.raises(ValueError, match="scheme"):
        evaluate_pallas(forest, X, FS, scheme="tree")
    with pytest.raises(ValueError, match="one tree per program"):
        evaluate_pallas(forest, X, FS, scheme="data_parallel", tree_block=2)
    with pytest.raises(ValueError, match="metric"):
        fitness_pallas(forest, X, X[:, 0], FS, metric="mae")
    with pytest.raises(ValueError, match="max_stack"):
        evaluate_pallas(forest, X, FS, max_stack=0)


# ---- GPU lowering, checked on CPU ------------------------------------------------------------------
# jax.export lowers a function for a platform without running it, so the Triton lowering of every
# entry point (the step where Pallas rejects unsupported primitives and non-power-of-two arrays) is
# checked here. It does NOT compile the Triton IR to PTX nor run it: that needs a GPU.


def _mad(a, b, c):  # a user-defined function (arity 3) for the "all functions" sets
    return a * b + c


ALL_NAMES = BUILTIN_NAMES + ("mad",)
ALL_RAW = FunctionSet(ALL_NAMES, custom={"mad": (3, _mad)})
ALL_PROTECTED = FunctionSet(ALL_NAMES, protected=True, custom={"mad": (3, _mad)})
TRITON_TARGET = "__gpu$xla.gpu.triton"
# small (lowering time grows with the shapes), and not powers of two, so the padding is lowered too
EX_POP, EX_LEN, EX_POINTS, EX_VARS = 6, 12, 10, 3


def _export_for_cuda(fn, *args):
    exported = jax.export.export(
        jax.jit(fn),
        platforms=["cuda"],
        # the Triton call has no serialization-compatibility guarantee; we only lower, never store
        disabled_checks=[jax.export.DisabledSafetyCheck.custom_call(TRITON_TARGET)],
    )(*args)
    return exported.mlir_module()


def _tree_shapes():
    i32, f32 = jnp.int32, jnp.float32
    return tuple(jax.ShapeDtypeStruct((EX_POP, EX_LEN), d) for d in (i32, f32, i32, i32))


def _block_kw(scheme):
    return dict(scheme=scheme, tree_block=4 if scheme == "hybrid" else 1, row_block=8, interpret=False)


@pytest.mark.parametrize("scheme", ["hybrid", "data_parallel"])
@pytest.mark.parametrize("n_outputs", [1, 3])  # 3: Modi on, and a non-power-of-two output axis
@pytest.mark.parametrize("entry", ("predict",) + METRICS)
def test_every_entry_point_lowers_to_triton_for_cuda(scheme, n_outputs, entry):
    X = jax.ShapeDtypeStruct((EX_POINTS, EX_VARS), jnp.float32)
    kw = _block_kw(scheme)
    if entry == "predict":
        mlir = _export_for_cuda(
            lambda f, X: evaluate_pallas(f, X, ALL_RAW, n_outputs, **kw), _tree_shapes(), X
        )
    else:
        regression = entry in ("mse", "rmse", "r2")
        y_shape = (EX_POINTS, n_outputs) if regression and n_outputs > 1 else (EX_POINTS,)
        y = jax.ShapeDtypeStruct(y_shape, jnp.float32)
        mlir = _export_for_cuda(
            lambda f, X, y: fitness_pallas(f, X, y, ALL_RAW, n_outputs, entry, **kw), _tree_shapes(), X, y
        )
    assert mlir.count(TRITON_TARGET) == 1  # one kernel launch, lowered by Triton (not Mosaic GPU)


@pytest.mark.parametrize("scheme", ["hybrid", "data_parallel"])
def test_protected_functions_lower_to_triton_for_cuda(scheme):
    X = jax.ShapeDtypeStruct((EX_POINTS, EX_VARS), jnp.float32)
    kw = _block_kw(scheme)
    mlir = _export_for_cuda(lambda f, X: evaluate_pallas(f, X, ALL_PROTECTED, 3, **kw), _tree_shapes(), X)
    assert mlir.count(TRITON_TARGET) == 1
    y = jax.ShapeDtypeStruct((EX_POINTS,), jnp.float32)
    mlir = _export_for_cuda(
        lambda f, X, y: fitness_pallas(f, X, y, ALL_PROTECTED, 1, "mse", **kw), _tree_shapes(), X, y
    )
    assert mlir.count(TRITON_TARGET) == 1


# ---- interpreter mode: random forests over every function, every metric ------------------------------
# One fixed shape per case, so each case compiles its interpreted kernel once for all examples. The
# default run covers every function (raw and protected), the user-defined one, Modi, both schemes and
# every metric; the slow run covers the full cross product.

H_POP, H_LEN, H_POINTS, H_VARS = 8, 16, 16, 2
FUNCTION_SETS = {"raw": ALL_RAW, "protected": ALL_PROTECTED}


def _hyp_kw(scheme):
    return dict(scheme=scheme, tree_block=4 if scheme == "hybrid" else 1, row_block=8, interpret=None)


def _slow(*args):
    return pytest.param(*args, marks=pytest.mark.slow)


@pytest.mark.parametrize(
    "fs_name, scheme, n_outputs",
    [
        ("raw", "hybrid", 3),
        ("raw", "hybrid", 1),
        ("protected", "data_parallel", 1),
        _slow("raw", "data_parallel", 3),
        _slow("protected", "hybrid", 3),
        _slow("protected", "hybrid", 1),
    ],
)
@settings(max_examples=4, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_kernel_equals_reference_over_every_function(fs_name, scheme, n_outputs, seed):
    fs = FUNCTION_SETS[fs_name]
    forest = random_forest(seed, fs, H_POP, H_LEN, H_VARS, n_outputs)
    X = random_data(seed + 1, H_POINTS, H_VARS)
    out = evaluate_pallas(forest, X, fs, n_outputs, **_hyp_kw(scheme))
    assert_matches_reference(out, forest, X, fs, n_outputs, min_fraction=0.8)


@pytest.mark.parametrize("fs_name, scheme", [("raw", "hybrid"), ("protected", "data_parallel")])
def test_kernel_equals_reference_for_each_function_on_singular_data(fs_name, scheme):
    # one tree per function, f(x0, x1, x0) (arity permitting), so every function is checked on the
    # singular points of random_data (0, +-0.0005, negatives) whatever the random forests above drew
    fs = FUNCTION_SETS[fs_name]
    V = [("var", -1, 0), ("var", -1, 1), ("var", -1, 0)]
    trees = [(name, -1, tuple(V[: int(fs.arity[fs.opcode(name)])])) for name in fs.names]
    trees += [V[0]] * (-len(trees) % H_POP)
    X = random_data(3, H_POINTS, H_VARS)
    for start in range(0, len(trees), H_POP):  # [H_POP, H_LEN] chunks: the shape compiled above
        rows = [tree_to_arrays(t, fs, H_LEN) for t in trees[start : start + H_POP]]
        forest = ArrayForest(*(np.stack(c) for c in zip(*rows)))
        out = evaluate_pallas(forest, X, fs, 1, **_hyp_kw(scheme))
        assert_matches_reference(out, forest, X, fs, 1, min_fraction=0.95)


def _reference_metric(pred: np.ndarray, y: np.ndarray, metric: str) -> np.ndarray:
    """Fitness from reference predictions ``[pop, n_points, n_out]``, written out in NumPy (float32,
    as the kernel sums): any non-finite prediction, or a non-finite result, gives the worst value."""
    pred = pred.astype(np.float32)
    n_out = pred.shape[-1]
    worst = -np.inf if metric in ("r2", "accuracy") else np.inf
    with np.errstate(all="ignore"):
        if metric in ("mse", "rmse", "r2"):
            target = y.reshape(1, y.shape[0], -1).astype(np.float32)
            sse = np.sum(np.square(pred - target), axis=(1, 2), dtype=np.float32)
            if metric == "mse":
                value = sse / np.float32(pred.shape[1] * n_out)
            elif metric == "rmse":
                value = np.sqrt(sse / np.float32(pred.shape[1] * n_out))
            else:
                sst = np.sum(np.square(target - target.mean(axis=1, keepdims=True)))
                value = 1.0 - sse / sst
        elif metric == "accuracy":
            if n_out == 1:
                correct = (pred[..., 0] > 0) == (y > 0.5)
            else:
                correct = np.argmax(pred, axis=-1) == y.astype(int)
            value = correct.mean(axis=1)
        else:  # cross-entropy of the logits
            if n_out == 1:
                z = pred[..., 0].astype(np.float64)
                loss = np.logaddexp(0.0, z) - z * y  # -log sigmoid(z) for 1, -log(1 - sigmoid(z)) for 0
            else:
                z = pred.astype(np.float64)
                picked = np.take_along_axis(z, y.astype(int)[None, :, None].repeat(len(z), 0), -1)[..., 0]
                loss = np.logaddexp.reduce(z, axis=-1) - picked
            value = loss.mean(axis=1)
        bad = ~np.all(np.isfinite(pred), axis=(1, 2)) | ~np.isfinite(value)
    return np.where(bad, worst, value)


@pytest.mark.parametrize(
    "fs_name, scheme, n_outputs, metrics",
    [
        ("raw", "hybrid", 2, ("mse", "rmse", "r2")),  # one kernel for the three
        ("protected", "hybrid", 3, ("accuracy",)),
        ("raw", "data_parallel", 1, ("cross_entropy",)),
        _slow("protected", "data_parallel", 1, ("mse", "rmse", "r2")),
        _slow("raw", "data_parallel", 1, ("accuracy",)),
        _slow("protected", "hybrid", 3, ("cross_entropy",)),
    ],
)
@settings(max_examples=3, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_kernel_fitness_equals_reference_for_every_metric(fs_name, scheme, n_outputs, metrics, seed):
    from evotensor.gp.reference import reference_eval

    fs = FUNCTION_SETS[fs_name]
    forest = random_forest(seed, fs, H_POP, H_LEN, H_VARS, n_outputs)
    X = random_data(seed + 1, H_POINTS, H_VARS)
    rng = np.random.default_rng(seed)
    if metrics[0] in ("accuracy", "cross_entropy"):
        y = rng.integers(0, max(n_outputs, 2), H_POINTS).astype(np.float32)
    else:
        y = rng.normal(size=(H_POINTS, n_outputs) if n_outputs > 1 else H_POINTS).astype(np.float32)
    ref = reference_eval(forest, X, fs, n_outputs)
    # only trees whose predictions are well-conditioned (see eval_helpers) can be compared exactly
    sign = np.where(np.arange(X.size).reshape(X.shape) % 2 == 0, 1.0, -1.0).astype(np.float32)
    ref_p = reference_eval(forest, X * (np.float32(1) + np.float32(5e-7) * sign), fs, n_outputs)
    for metric in metrics:
        stable = well_conditioned(ref, ref_p).all(axis=(1, 2)) & decision_is_stable(ref, metric)
        assert stable.any()
        fast = np.asarray(fitness_pallas(forest, X, y, fs, n_outputs, metric, **_hyp_kw(scheme)))
        assert fast.shape == (H_POP,)
        assert_same_values(fast[stable], _reference_metric(ref, y, metric)[stable], rtol=1e-3, atol=1e-5)


def test_out_of_range_variables_are_clamped_as_on_the_jax_path():
    # same shapes and blocks as the raw hybrid cases above (the interpreted kernel is cached)
    forest = random_forest(4, ALL_RAW, H_POP, H_LEN, H_VARS)
    is_var = forest.opcode == VAR
    assert is_var.any()
    clamped = ArrayForest(forest.opcode, forest.value.copy(), forest.size, forest.output)
    forest.value[is_var] = np.where(np.arange(is_var.sum()) % 2 == 0, 7.0, -3.0)  # outside 0..1
    clamped.value[is_var] = np.where(forest.value[is_var] > 0, H_VARS - 1, 0)  # what the JAX path reads
    X = random_data(4, H_POINTS, H_VARS)
    out = evaluate_pallas(forest, X, ALL_RAW, 1, **_hyp_kw("hybrid"))
    assert_matches_reference(out, clamped, X, ALL_RAW, 1)
    # the kernel's own value array holds in-range indices (a GPU load never leaves X)
    kernel_values = np.asarray(_prepare(forest, jnp.asarray(X), ALL_RAW, "hybrid", 4, 8, None)["trees"][1])
    np.testing.assert_array_equal(kernel_values[:H_POP, :H_LEN], clamped.value)


def test_constant_leaves_never_address_a_row_outside_X():
    # every leaf loads a row before the opcode chooses; on a GPU a constant's value used as the row
    # (5.0, a tuned 1e9, -1, NaN) read outside X: CUDA_ERROR_ILLEGAL_ADDRESS with constant leaves
    forest = random_forest(5, ALL_RAW, H_POP, H_LEN, H_VARS)
    is_const = forest.opcode == CONST
    assert is_const.any()
    wild = np.array([5.0, 1e9, -1.0, -1e9, np.nan, np.inf, -np.inf, 3.7], np.float32)
    forest.value[is_const] = wild[np.arange(is_const.sum()) % wild.size]
    opcode, value = _prepare(
        forest, jnp.asarray(random_data(5, H_POINTS, H_VARS)), ALL_RAW, "hybrid", 4, 8, None
    )["trees"][:2]
    rows = np.asarray(variable_row(opcode, value))
    assert rows.min() >= 0 and rows.max() < H_VARS
    np.testing.assert_array_equal(rows[np.asarray(opcode) != VAR], 0)
    is_var = np.asarray(opcode) == VAR
    np.testing.assert_array_equal(rows[is_var], np.asarray(value)[is_var].astype(np.int32))


def test_blocks_are_powers_of_two():
    assert _blocks("hybrid", 20, 100, 6, 100) == (4, 64)  # requested sizes rounded down
    assert _blocks("hybrid", 20, 5, None, None) == (4, 8)  # capped at the next power of two of n_points
    assert _blocks("hybrid", 3, 5000, None, None) == (4, 128)
    assert _blocks("data_parallel", 3, 5000, None, 3000) == (1, 2048)
