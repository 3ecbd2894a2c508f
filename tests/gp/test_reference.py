import numpy as np
import pytest
from tests.gp.eval_helpers import ArrayForest, random_data, random_forest, tree_to_arrays

from evotensor.gp.functions import BUILTIN_NAMES, FunctionSet
from evotensor.gp.reference import reference_eval

FS = FunctionSet(("add", "sub", "mul", "div", "sin", "log", "if_then_else"))
X = np.array([[1.0, 2.0], [-3.0, 0.5], [0.0, 0.0]], np.float32)


def _forest(*trees, max_len=12, fs=FS):
    return ArrayForest(*(np.stack(c) for c in zip(*(tree_to_arrays(t, fs, max_len) for t in trees))))


def V(k, out=-1):
    return ("var", out, k)


def C(c, out=-1):
    return ("const", out, c)


def F(name, *children, out=-1):
    return (name, out, children)


def test_hand_computed_values():
    forest = _forest(
        F("add", V(0), C(1.5)),
        F("div", V(1), V(0)),
        F("if_then_else", V(0), F("mul", V(0), V(1)), F("sin", V(1))),
        F("sub", F("log", V(0)), C(2.0)),
    )
    out = reference_eval(forest, X, FS)
    assert out.shape == (4, 3, 1) and out.dtype == np.float32
    x0, x1 = X[:, 0], X[:, 1]
    np.testing.assert_allclose(out[0, :, 0], x0 + 1.5)
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(out[1, :, 0], x1 / x0)  # 0/0 -> nan at the last row
        np.testing.assert_allclose(out[3, :, 0], np.log(x0) - 2.0)  # log(-3) nan, log(0) -inf
    np.testing.assert_allclose(out[2, :, 0], np.where(x0 > 0, x0 * x1, np.sin(x1)), rtol=1e-6)
    assert np.isnan(out[1, 2, 0]) and np.isnan(out[3, 1, 0]) and np.isneginf(out[3, 2, 0])


def test_modi_semantics_by_hand():
    # add[out 0](x0, mul[out 1](x1, 2)):
    #   mul adds 2*x1 to output 1 and passes its rightmost child (2) up;
    #   add adds x0 + 2 to output 0; the root's passed value is discarded.
    tree = F("add", V(0), F("mul", V(1), C(2.0), out=1), out=0)
    out = reference_eval(_forest(tree), X, FS, n_outputs=2)
    np.testing.assert_allclose(out[0, :, 0], X[:, 0] + 2.0)
    np.testing.assert_allclose(out[0, :, 1], 2.0 * X[:, 1])
    # single output: Modi markers are ignored, the output is the root value x0 + 2*x1
    single = reference_eval(_forest(tree), X, FS, n_outputs=1)
    np.testing.assert_allclose(single[0, :, 0], X[:, 0] + 2.0 * X[:, 1])


def test_modi_sums_contributions_and_ignores_out_of_range():
    # two nodes add to output 0, a leaf Modi passes its own value, index 5 is out of range
    tree = F("add", F("sub", V(0, out=0), C(1.0), out=0), F("sin", V(1), out=5))
    out = reference_eval(_forest(tree), X, FS, n_outputs=3)
    # sub contributes x0 - 1 and passes 1; the leaf x0 contributes x0; sin passes x1
    np.testing.assert_allclose(out[0, :, 0], (X[:, 0] - 1.0) + X[:, 0])
    np.testing.assert_allclose(out[0, :, 1:], 0.0)


def test_single_tree_and_batch_shapes():
    forest = _forest(F("add", V(0), V(1)), C(3.0))
    single = reference_eval(forest[1], X, FS)
    assert single.shape == (3, 1)
    np.testing.assert_array_equal(single[:, 0], 3.0)
    nested = ArrayForest(
        *(np.stack([a, a]) for a in (forest.opcode, forest.value, forest.size, forest.output))
    )
    assert reference_eval(nested, X, FS, n_outputs=2).shape == (2, 2, 3, 2)


def test_malformed_trees_are_rejected():
    good = tree_to_arrays(F("add", V(0), V(1)), FS, 6)

    def variant(i, **changes):
        arrays = dict(zip(("opcode", "value", "size", "output"), (a.copy() for a in good)))
        for name, (pos, val) in changes.items():
            arrays[name][pos] = val
        return ArrayForest(**arrays)

    with pytest.raises(ValueError, match="size"):
        reference_eval(variant(0, size=(0, 2)), X, FS)
    with pytest.raises(ValueError, match="PAD"):
        reference_eval(variant(0, opcode=(2, 0)), X, FS)
    with pytest.raises(ValueError, match="index 7"):
        reference_eval(variant(0, value=(1, 7.0)), X, FS)
    with pytest.raises(ValueError, match="after the tree"):
        reference_eval(variant(0, opcode=(4, 1)), X, FS)
    with pytest.raises(ValueError, match="not in the function set"):
        reference_eval(variant(0, opcode=(0, 40)), X, FS)
    with pytest.raises(ValueError, match="X must be"):
        reference_eval(variant(0), X[0], FS)
    with pytest.raises(ValueError, match="n_outputs"):
        reference_eval(variant(0), X, FS, n_outputs=0)


def test_random_forests_parse_and_match_single_tree_evaluation():
    fs = FunctionSet(BUILTIN_NAMES)
    forest = random_forest(3, fs, 6, 20, 2, n_outputs=2)
    data = random_data(4, 9, 2)
    batch = reference_eval(forest, data, fs, n_outputs=2)
    for t in range(6):
        np.testing.assert_array_equal(batch[t], reference_eval(forest[t], data, fs, n_outputs=2))
