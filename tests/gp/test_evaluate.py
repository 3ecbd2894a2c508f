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
    tree_to_arrays,
    well_conditioned,
)

from evotensor.gp.evaluate import evaluate, fitness, metric_from_predictions
from evotensor.gp.functions import BUILTIN_NAMES, FunctionSet
from evotensor.gp.reference import reference_eval

ARITH = FunctionSet(("add", "sub", "mul", "div", "neg", "max", "lt", "if_then_else"))
FULL = FunctionSet(BUILTIN_NAMES)
# A smaller mixed set (every arity, singular functions) keeps compilation short.
MIXED_NAMES = ("add", "sub", "mul", "div", "pow", "sin", "exp", "log", "sqrt", "inv", "if_then_else")
MIXED = FunctionSet(MIXED_NAMES)
PROTECTED = FunctionSet(MIXED_NAMES, protected=True)
SETS = {"arith": ARITH, "full": FULL, "protected": PROTECTED}
POP, MAX_LEN, N_POINTS, N_VARS = 11, 24, 37, 3  # fixed shapes: one compilation per configuration


def on_cpu():
    """Run the JAX path on the CPU device, also on a GPU machine: it is the CPU path (``auto`` never
    picks it on a GPU), and XLA:GPU's float32 arithmetic differs from the NumPy reference on a few
    singular elements (on an H200: 9 of 11,988 NaN where the reference is finite), which the
    reference comparisons here do not allow for. The GPU kernel has its own reference tests."""
    return jax.default_device(jax.devices("cpu")[0])


def numpy_metric(pred, y, metric):
    """Independent NumPy implementation of the documented metrics. pred [pop, n, k]."""
    pred = pred.astype(np.float64)
    pop, n, k = pred.shape
    bad = ~np.all(np.isfinite(pred), axis=(1, 2))
    with np.errstate(all="ignore"):
        if metric in ("mse", "rmse", "r2"):
            yy = y.reshape(n, -1)
            sse = np.sum((pred - yy[None]) ** 2, axis=(1, 2))
            if metric == "mse":
                val = sse / (n * k)
            elif metric == "rmse":
                val = np.sqrt(sse / (n * k))
            else:
                sst = np.sum((yy - yy.mean(0)) ** 2)
                val = 1 - sse / sst if sst > 0 else np.where(sse == 0, 1.0, 0.0)
        elif metric == "accuracy":
            cls = (pred[..., 0] > 0).astype(int) if k == 1 else np.argmax(pred, -1)
            val = np.mean(cls == y[None].astype(int), axis=1)
        else:
            if k == 1:
                p = 1 / (1 + np.exp(-pred[..., 0]))
                val = -np.mean(y * np.log(p) + (1 - y) * np.log(1 - p), axis=1)
            else:
                m = pred.max(-1, keepdims=True)
                logp = pred - m - np.log(np.exp(pred - m).sum(-1, keepdims=True))
                val = -np.mean(np.take_along_axis(logp, y.astype(int)[None, :, None], -1)[..., 0], axis=1)
    worst = -np.inf if metric in ("r2", "accuracy") else np.inf
    return np.where(bad | ~np.isfinite(val), worst, val)


@settings(max_examples=10)
@given(st.integers(0, 10**6), st.sampled_from(sorted(SETS)), st.sampled_from([1, 3]))
def test_evaluate_equals_reference(seed, set_name, n_outputs):
    fs = SETS[set_name]
    forest = random_forest(seed, fs, POP, MAX_LEN, N_VARS, n_outputs)
    X = random_data(seed + 1, N_POINTS, N_VARS)
    fast = evaluate(forest, X, fs, n_outputs, backend="jax", tree_block=4, row_block=16)
    assert fast.shape == (POP, N_POINTS, n_outputs) and fast.dtype == jnp.float32
    assert_matches_reference(fast, forest, X, fs, n_outputs)


@pytest.mark.parametrize("tree_block, row_block", [(1, 1), (3, 7), (64, 512)])
def test_block_sizes_do_not_change_results(tree_block, row_block):
    forest = random_forest(7, MIXED, POP, MAX_LEN, N_VARS, 2)
    X = random_data(8, N_POINTS, N_VARS)
    fast = evaluate(forest, X, MIXED, 2, backend="jax", tree_block=tree_block, row_block=row_block)
    assert_matches_reference(fast, forest, X, MIXED, 2)


def test_singular_points_give_the_reference_nan_inf_pattern():
    names = ("div", "log", "sqrt", "neg", "sub", "inv", "exp", "mul")
    raw, protected = FunctionSet(names), FunctionSet(names, protected=True)

    def V(k):
        return ("var", -1, k)

    trees = [
        ("div", -1, (V(0), V(1))),
        ("log", -1, (V(0),)),
        ("sqrt", -1, (("neg", -1, (V(0),)),)),
        ("sub", -1, (("inv", -1, (V(1),)), ("inv", -1, (V(1),)))),
        ("exp", -1, (("mul", -1, (V(0), ("const", -1, 100.0))),)),
    ]
    forest = ArrayForest(*(np.stack(c) for c in zip(*(tree_to_arrays(t, raw, 8) for t in trees))))
    X = np.array([[0.0, 0.0], [-1.0, 0.0], [2.0, 0.5], [1.0, -0.0]], np.float32)
    ref = reference_eval(forest, X, raw)
    assert np.isnan(ref).any() and np.isinf(ref).any()
    assert_same_values(evaluate(forest, X, raw, backend="jax"), ref)
    ref_protected = reference_eval(forest, X, protected)
    assert np.isfinite(ref_protected).all()
    assert_same_values(evaluate(forest, X, protected, backend="jax"), ref_protected)


def _targets(metric, seed, n_outputs):
    rng = np.random.default_rng(seed)
    if metric in ("accuracy", "cross_entropy"):
        return rng.integers(0, max(n_outputs, 2), N_POINTS).astype(np.float32)
    shape = (N_POINTS,) if n_outputs == 1 else (N_POINTS, n_outputs)
    return rng.normal(size=shape).astype(np.float32)


@pytest.mark.parametrize(
    "metric, n_outputs, protected",
    [
        ("mse", 3, False),
        ("rmse", 1, True),
        ("r2", 1, False),
        ("accuracy", 3, False),
        ("accuracy", 1, True),
        ("cross_entropy", 1, False),
        ("cross_entropy", 3, True),
    ],
)
def test_fused_fitness_equals_metric_of_evaluate(metric, n_outputs, protected):
    with on_cpu():
        _fused_fitness_equals_metric_of_evaluate(metric, n_outputs, protected)


def _fused_fitness_equals_metric_of_evaluate(metric, n_outputs, protected):
    fs = PROTECTED if protected else MIXED
    for seed in range(3):
        forest = random_forest(seed, fs, POP, MAX_LEN, N_VARS, n_outputs)
        X = random_data(seed + 1, N_POINTS, N_VARS)
        y = _targets(metric, seed, n_outputs)
        fused = np.asarray(
            fitness(forest, X, y, fs, metric, n_outputs=n_outputs, backend="jax", tree_block=4, row_block=8)
        )
        pred = evaluate(forest, X, fs, n_outputs, backend="jax")
        from_pred = np.asarray(metric_from_predictions(pred, y, metric))
        assert_same_values(fused, from_pred, rtol=1e-4, atol=1e-5)
        ref = reference_eval(forest, X, fs, n_outputs)
        ref_p = reference_eval(forest, X * np.float32(1 + 5e-7), fs, n_outputs)
        stable = well_conditioned(ref, ref_p).all(axis=(1, 2))  # trees whose predictions are not chaotic
        assert stable.mean() >= 0.6
        compared = stable & decision_is_stable(ref, metric)  # accuracy: no row on the boundary
        assert compared.any()
        expected = numpy_metric(ref, y, metric).astype(np.float32)
        assert_same_values(fused[compared], expected[compared], rtol=1e-3, atol=1e-4)


def test_fitness_never_materializes_pop_by_points():
    pop, n_points = 128, 600
    forest = random_forest(1, ARITH, pop, MAX_LEN, N_VARS)
    X = random_data(2, n_points, N_VARS)
    y = np.zeros(n_points, np.float32)
    arrays = {k: jnp.asarray(getattr(forest, k)) for k in ("opcode", "value", "size", "output")}

    def f(arrays):
        return fitness(ArrayForest(**arrays), X, y, ARITH, backend="jax", tree_block=8, row_block=64)

    def sizes(jaxpr):
        for eqn in jaxpr.eqns:
            for v in eqn.outvars:
                yield int(np.prod(v.aval.shape)) if hasattr(v.aval, "shape") else 0
            for p in eqn.params.values():
                for sub in p if isinstance(p, (tuple, list)) else [p]:
                    if hasattr(sub, "jaxpr") and hasattr(sub.jaxpr, "eqns"):  # ClosedJaxpr
                        yield from sizes(sub.jaxpr)
                    elif hasattr(sub, "eqns"):  # Jaxpr
                        yield from sizes(sub)

    largest = max(sizes(jax.make_jaxpr(f)(arrays).jaxpr))
    assert largest < pop * n_points, largest  # the largest is the [max_len+1, 8, 64] value buffer
    # while the forward pass does materialize it
    g = lambda a: evaluate(ArrayForest(**a), X, ARITH, backend="jax")  # noqa: E731
    assert max(sizes(jax.make_jaxpr(g)(arrays).jaxpr)) >= pop * n_points


def test_nonfinite_predictions_get_the_worst_value():
    trees = [("div", -1, (("var", -1, 0), ("var", -1, 1))), ("var", -1, 0)]
    forest = ArrayForest(*(np.stack(c) for c in zip(*(tree_to_arrays(t, ARITH, 4) for t in trees))))
    X = np.array([[1.0, 0.0], [2.0, 1.0]], np.float32)
    y = np.array([1.0, 0.0], np.float32)
    for metric, worst in [
        ("mse", np.inf),
        ("r2", -np.inf),
        ("cross_entropy", np.inf),
        ("accuracy", -np.inf),
    ]:
        fit = np.asarray(fitness(forest, X, y, ARITH, metric, backend="jax"))
        assert fit[0] == worst and np.isfinite(fit[1]), metric


def test_single_tree_jit_and_permutation():
    forest = random_forest(5, ARITH, POP, MAX_LEN, N_VARS)
    X = random_data(6, N_POINTS, N_VARS)
    y = X[:, 0] * 2.0
    fit = np.asarray(fitness(forest, X, y, ARITH, backend="jax"))
    one = fitness(forest[3], X, y, ARITH, backend="jax")
    assert one.shape == () and (one == fit[3] or (np.isnan(one) and np.isnan(fit[3])))
    assert evaluate(forest[3], X, ARITH, backend="jax").shape == (N_POINTS, 1)
    perm = np.random.default_rng(0).permutation(POP)
    shuffled = ArrayForest(*(getattr(forest, k)[perm] for k in ("opcode", "value", "size", "output")))
    np.testing.assert_array_equal(np.asarray(fitness(shuffled, X, y, ARITH, backend="jax")), fit[perm])
    arrays = {k: jnp.asarray(getattr(forest, k)) for k in ("opcode", "value", "size", "output")}
    jitted = jax.jit(lambda a: fitness(ArrayForest(**a), X, y, ARITH, backend="jax"))(arrays)
    np.testing.assert_array_equal(np.asarray(jitted), fit)


def test_argument_errors():
    forest = random_forest(0, ARITH, 2, 8, 2)
    X = np.ones((5, 2), np.float32)
    y = np.ones(5, np.float32)
    with pytest.raises(ValueError, match="metric"):
        fitness(forest, X, y, ARITH, metric="mae")
    with pytest.raises(ValueError, match="y must be"):
        fitness(forest, X, y[:3], ARITH)
    with pytest.raises(ValueError, match="n_outputs=2"):
        fitness(forest, X, y, ARITH, n_outputs=2)
    with pytest.raises(ValueError, match="class labels"):
        fitness(forest, X, np.ones((5, 2)), ARITH, metric="accuracy")
    with pytest.raises(ValueError, match="X must be"):
        evaluate(forest, X[0], ARITH)
    with pytest.raises(ValueError, match="n_outputs"):
        evaluate(forest, X, ARITH, n_outputs=0)
    with pytest.raises(ValueError, match="function_set"):
        evaluate(forest, X, ("add",))
    with pytest.raises(ValueError, match="backend"):
        evaluate(forest, X, ARITH, backend="cuda")
    with pytest.raises(ValueError, match="field 'output'"):
        evaluate(type("F", (), {"opcode": 1, "value": 1, "size": 1})(), X, ARITH)


def test_large_trig_arguments_take_the_exact_path():
    # sin(x0 * 1e7) has arguments beyond the fast form's domain; the result must still be exact
    fs = FunctionSet(("sin", "mul", "cos"))
    tree = ("sin", -1, (("mul", -1, (("var", -1, 0), ("const", -1, 1e7))),))
    small = ("cos", -1, (("var", -1, 0),))
    forest = ArrayForest(*(np.stack(c) for c in zip(*(tree_to_arrays(t, fs, 6) for t in (tree, small)))))
    X = np.linspace(-3, 3, 50, dtype=np.float32)[:, None]
    out = np.asarray(evaluate(forest, X, fs, backend="jax"))
    np.testing.assert_allclose(out[0, :, 0], np.sin(X[:, 0] * np.float32(1e7)), atol=1e-5)
    np.testing.assert_allclose(out[1, :, 0], np.cos(X[:, 0]), atol=1e-6)


# ---- the compacted evaluation of costly functions ----------------------------------------------------

SR = FunctionSet(("add", "sub", "mul", "div", "sin", "cos", "tan"))


def _stack(trees, fs, max_len):
    return ArrayForest(*(np.stack(c) for c in zip(*(tree_to_arrays(t, fs, max_len) for t in trees))))


def test_costly_and_cheap_functions_are_flagged():
    cheap = {f.name for f in FULL.functions if f.cheap}
    assert {"add", "sub", "mul", "div", "neg", "abs", "max", "min", "if_then_else"} <= cheap
    assert not cheap & {"sin", "cos", "tan", "exp", "log", "pow", "sinh", "cosh", "tanh"}
    custom = FunctionSet(("add", "twice"), custom={"twice": (1, lambda a: 2.0 * a)})
    assert not custom.functions[1].cheap  # unknown cost: computed only where needed


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 9), st.integers(1, 12), st.integers(0, 10**6))
def test_compaction_maps_every_costly_tree_to_its_own_row(T, L, seed):
    from evotensor.gp.jax_evaluator import _compaction, _costly_tiers

    rng = np.random.default_rng(seed)
    opcode = rng.integers(0, SR.n_opcodes, (T, L)).astype(np.int32)
    tiers = _costly_tiers(T)
    assert tiers[-1] == T and list(tiers) == sorted(set(tiers))
    # compiled (one program per shape): op by op, the 25 examples took ~10 s
    compaction = jax.jit(_compaction, static_argnums=(0, 2))
    tier, slot, tree = (np.asarray(a) for a in compaction(SR, jnp.asarray(opcode), tiers))
    costly = {f.opcode for f in SR.functions if not f.cheap}
    for i in range(L):
        need = [t for t in range(T) if opcode[t, i] in costly]
        if not need:
            assert tier[i] == 0
            assert (slot[:, i] == -1).all()
            continue
        rows = tiers[tier[i] - 1]
        assert rows >= len(need) and (tier[i] == 1 or tiers[tier[i] - 2] < len(need))  # smallest tier
        for t in range(T):
            if t in need:
                assert 0 <= slot[t, i] < len(need) and tree[slot[t, i], i] == t
            else:
                assert slot[t, i] == -1
        assert sorted(tree[: len(need), i]) == need


@pytest.mark.parametrize("n_costly", [0, 1, 2, 3, 5, 8])
def test_every_tier_of_costly_trees_equals_reference(n_costly):
    # 8 trees of one shape in one block: at each step exactly n_costly of them have a costly node,
    # so the step runs the tier holding n_costly rows (0: the costly functions are skipped)
    rng = np.random.default_rng(n_costly)
    costly_at = set(rng.choice(8, n_costly, replace=False).tolist())
    x0, x1 = ("var", -1, 0), ("var", -1, 1)
    trees = []
    for t in range(8):
        unary = ("sin", "cos", "tan")[t % 3] if t in costly_at else None
        inner = (unary, -1, (x1,)) if unary else ("sub", -1, (x1, ("const", -1, 0.5)))
        outer = ("cos", -1, (inner,)) if t in costly_at else ("add", -1, (inner, x0))
        trees.append(("mul", -1, (outer, ("tan", -1, (x0,)) if t in costly_at else x1)))
    forest = _stack(trees, SR, 8)
    X = random_data(n_costly, 300, 2)
    out = evaluate(forest, X, SR, backend="jax", tree_block=8, row_block=256)
    assert_matches_reference(out, forest, X, SR)


def test_leaf_only_block_with_a_costly_set():
    # single-leaf trees: every step of the block is leaves only, the costly functions never run
    trees = [("var", -1, 0), ("const", -1, 2.5), ("var", -1, 1), ("const", -1, -1.0)]
    forest = _stack(trees, SR, 3)
    X = random_data(3, 50, 2)
    out = np.asarray(evaluate(forest, X, SR, backend="jax", tree_block=4))
    np.testing.assert_array_equal(out[:, :, 0], np.stack([X[:, 0], np.full(50, 2.5), X[:, 1], -np.ones(50)]))


@pytest.mark.parametrize("row_block", [256, 300])
def test_costly_values_in_row_chunks_equal_reference(row_block):
    # rows per block > 1024 / tree_block: the costly values come back in chunks of fewer rows
    # than the block has trees (here 8 trees; 1024 // 152 = 6-row chunks, the last one padded)
    forest = random_forest(11, MIXED, 40, MAX_LEN, N_VARS)
    X = random_data(12, 300, N_VARS)
    with on_cpu():
        out = evaluate(forest, X, MIXED, backend="jax", tree_block=8, row_block=row_block)
        assert_matches_reference(out, forest, X, MIXED)
        y = X[:, 0] - X[:, 1]
        fused = fitness(forest, X, y, MIXED, backend="jax", tree_block=8, row_block=row_block)
        assert_same_values(fused, metric_from_predictions(out, y), rtol=1e-4, atol=1e-5)


def test_custom_costly_function_in_a_mixed_block_equals_reference():
    fs = FunctionSet(
        ("add", "mul", "sq", "sin"),
        custom={"sq": (1, lambda a: a * a, lambda a: np.float32(a) * np.float32(a))},
    )
    forest = random_forest(4, fs, 24, 16, 2, max_depth=4)
    assert np.isin(fs.opcode("sq"), forest.opcode)
    X = random_data(5, 60, 2)
    assert_matches_reference(evaluate(forest, X, fs, backend="jax", tree_block=8), forest, X, fs)


def test_blocks_reuse_the_value_buffer_without_leaking_values():
    # each tree alone (a fresh buffer) gives what it gives inside a population of many blocks
    forest = random_forest(21, SR, 30, MAX_LEN, 2)
    X = random_data(22, 70, 2)
    together = np.asarray(evaluate(forest, X, SR, backend="jax", tree_block=4, row_block=32))
    for t in range(0, 30, 7):
        alone = np.asarray(evaluate(forest[t], X, SR, backend="jax", tree_block=4, row_block=32))
        assert_same_values(together[t], alone, rtol=1e-6, atol=1e-6)


def test_auto_backend_is_the_kernel_on_a_gpu_and_native_or_jax_on_a_cpu():
    from evotensor.gp import native
    from evotensor.gp.evaluate import choose_backend

    custom = FunctionSet(("add", "sq"), custom={"sq": (1, lambda a: a * a)})
    if jax.default_backend() == "gpu":  # the JAX path is written for CPU caches: never picked here
        assert choose_backend("auto", custom) == choose_backend("auto", SR) == "pallas"
    else:
        assert choose_backend("auto", custom) == "jax"  # custom functions: the native path lacks them
        assert choose_backend("auto", SR) == ("native" if native.AVAILABLE else "jax")
    for b in ("jax", "native", "pallas"):
        assert choose_backend(b, SR) == b
    with pytest.raises(ValueError, match="backend"):
        choose_backend("cuda", SR)
