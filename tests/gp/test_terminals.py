"""Fixed constants as data columns (evotensor.gp.terminals): the rewritten trees read the literal
constant, evaluate identically on the original data and print the number in every export."""

import jax
import numpy as np
import pytest
from tests.gp.eval_helpers import random_data

from evotensor.core.checks import ArgumentError
from evotensor.gp import FunctionSet, evaluate, reference_eval
from evotensor.gp.encoding import CONST, VAR
from evotensor.gp.export import to_jax, to_latex, to_numpy, to_string, to_sympy
from evotensor.gp.generate import generate
from evotensor.gp.terminals import (
    check_constants,
    columns_to_constants,
    constant_column_weights,
    with_constant_columns,
)

FS = FunctionSet(("add", "sub", "mul", "div", "sin", "exp", "log"), protected=False)
N_FEATURES = 2
VALUES = (1.0, 2.0, 0.5)


def forest_with_columns(seed: int, n: int = 64):
    """Random trees over the features and the constant columns (each column drawn often)."""
    weights = constant_column_weights(N_FEATURES, VALUES, prob=0.5)
    return generate(
        jax.random.key(seed), n, FS, N_FEATURES + len(VALUES), 24, const_prob=0.2, variable_weights=weights
    )


def test_columns_become_literals_and_the_features_stay():
    forest = jax.device_get(forest_with_columns(0))
    out = columns_to_constants(forest, N_FEATURES, VALUES)
    op, val = np.asarray(forest.opcode), np.asarray(forest.value)
    reads = (op == VAR) & (val >= N_FEATURES)
    assert reads.any() and ((op == VAR) & (val < N_FEATURES)).any()
    np.testing.assert_array_equal(out.opcode, np.where(reads, CONST, op))
    np.testing.assert_array_equal(
        out.value[reads], np.asarray(VALUES, np.float32)[val[reads].astype(int) - 2]
    )
    np.testing.assert_array_equal(out.value[~reads], val[~reads])  # ERC constants and features unchanged
    np.testing.assert_array_equal(out.size, forest.size)
    assert not ((out.opcode == VAR) & (out.value >= N_FEATURES)).any()
    # JAX arrays in, JAX arrays out, the same trees
    on_device = columns_to_constants(forest_with_columns(0), N_FEATURES, VALUES)
    assert isinstance(on_device.opcode, jax.Array)
    np.testing.assert_array_equal(np.asarray(on_device.value), out.value)
    assert columns_to_constants(forest, N_FEATURES, ()) is forest


@pytest.mark.parametrize("backend", ["auto"])
def test_rewritten_trees_evaluate_identically_on_the_original_data(backend):
    forest = forest_with_columns(1, 128)
    X = random_data(0, 50, N_FEATURES)
    before = evaluate(forest, with_constant_columns(X, VALUES), FS, backend=backend)
    after = evaluate(columns_to_constants(forest, N_FEATURES, VALUES), X, FS, backend=backend)
    np.testing.assert_array_equal(np.asarray(after), np.asarray(before))  # bit for bit, NaNs included


def test_every_export_shows_the_literal_and_computes_the_same():
    """The rewritten trees are ordinary trees with constants (whose exports test_export checks): here
    the NumPy callable is bit-identical to the reference on the data with the columns, the JAX one
    agrees, and no export names a constant column."""
    forest = jax.device_get(forest_with_columns(2, 6))
    X = random_data(3, 16, N_FEATURES)
    rewritten = columns_to_constants(forest, N_FEATURES, VALUES)
    ref = reference_eval(forest, with_constant_columns(X, VALUES), FS)[..., 0]  # [trees, points]
    f_jax = to_jax(rewritten, FS, 0)
    np.testing.assert_allclose(np.asarray(f_jax(X)), ref[0], rtol=1e-5, atol=1e-5)
    shown = 0
    for i in range(6):
        np.testing.assert_array_equal(to_numpy(rewritten, FS, i)(X), ref[i])
        expr = to_sympy(rewritten, FS, index=i, simplify=False)
        assert {s.name for s in expr.free_symbols} <= {"x0", "x1"}
        text, latex = to_string(rewritten, FS, i), to_latex(rewritten, FS, i, simplify=False)
        assert not any(f"x{j}" in text or f"x_{{{j}}}" in latex for j in range(2, 5)), text
        shown += any(f"{v:g}" in text for v in VALUES)
    assert shown > 0  # the literals are printed


def test_weights_and_columns():
    w = constant_column_weights(3, (1.0, 2.0), prob=0.2)
    assert w == pytest.approx((0.8 / 3,) * 3 + (0.1, 0.1)) and sum(w) == pytest.approx(1.0)
    assert constant_column_weights(2, (), prob=0.2) == (0.5, 0.5)
    X1 = with_constant_columns(np.zeros((4, 2)), (1.0, -3.5))
    assert X1.dtype == np.float32 and X1.shape == (4, 4)
    np.testing.assert_array_equal(X1[:, 2:], [[1.0, -3.5]] * 4)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: check_constants(1.0), "fixed_constants must be a sequence"),
        (lambda: check_constants(("one",)), "must hold numbers"),
        (lambda: check_constants((float("inf"),)), "finite"),
        (lambda: check_constants((0.1,)), "exact in float32"),  # 0.1 is not a float32
        (lambda: constant_column_weights(2, (1.0,), prob=1.0), "prob"),
        (lambda: constant_column_weights(2, (1.0,), prob=0.0), "prob"),
        (lambda: with_constant_columns(np.zeros(3), (1.0,)), "X must have shape"),
    ],
)
def test_bad_arguments_are_named(call, match):
    with pytest.raises(ArgumentError, match=match):
        call()
    assert check_constants([1, 0.5, np.float32(2)]) == (1.0, 0.5, 2.0)
