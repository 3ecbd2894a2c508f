"""The Pallas kernel's logic, on CPU through Pallas's interpreter (tiny forests: it is slow)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.gp.eval_helpers import (
    ArrayForest,
    assert_matches_reference,
    random_data,
    random_forest,
    random_tree,
    tree_to_arrays,
)

from evotensor.gp.evaluate import evaluate, fitness
from evotensor.gp.functions import FunctionSet
from evotensor.gp.pallas_kernel import (
    DATA_PARALLEL_MIN_POINTS,
    _pick_scheme,
    default_max_stack,
    evaluate_pallas,
    fitness_pallas,
    stack_peak,
)

FS = FunctionSet(("add", "mul", "div", "sin", "log", "if_then_else"))
POP, MAX_LEN, N_POINTS, N_VARS = 6, 16, 20, 2


@pytest.mark.parametrize("scheme, n_outputs", [("hybrid", 1), ("hybrid", 3), ("data_parallel", 2)])
def test_kernel_equals_reference(scheme, n_outputs):
    forest = random_forest(11 + n_outputs, FS, POP, MAX_LEN, N_VARS, n_outputs)
    X = random_data(5, N_POINTS, N_VARS)
    tree_block = 4 if scheme == "hybrid" else 1  # 6 trees -> a padded second block
    out = evaluate_pallas(
        forest, X, FS, n_outputs, scheme=scheme, tree_block=tree_block, row_block=8, interpret=True
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
    kw = dict(scheme=scheme, tree_block=4 if scheme == "hybrid" else 1, row_block=8, interpret=True)
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
    out = np.asarray(evaluate_pallas(forest, X, FS, max_stack=2, tree_block=2, row_block=8, interpret=True))
    assert np.isnan(out[0]).all()
    np.testing.assert_allclose(out[1, :, 0], 2 * (X[:, 0] + X[:, 1]), rtol=1e-6)


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
