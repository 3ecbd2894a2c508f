"""evaluate_tree: one tree, pure jnp; checked against reference_eval, finite differences and itself."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax

from evotensor.core.checks import ArgumentError
from evotensor.gp import CONST, Forest, FunctionSet, generate, reference_eval
from evotensor.gp.tree_eval import evaluate_tree, tree_jacobian

NAMES = ("add", "sub", "mul", "div", "pow", "max", "lt", "sin", "cos", "exp", "log", "sqrt", "inv")
FUNCTION_SETS = {
    "raw": FunctionSet((*NAMES, "if_then_else")),
    "protected": FunctionSet((*NAMES, "if_then_else"), protected=True),
}
POP, MAX_LEN, N_VARS = 6, 24, 3


@functools.partial(jax.jit, static_argnums=(5, 6))
def _batched(opcode, value, size, output, X, fs, n_outputs):
    """Every tree on shared data (vmap over trees only)."""
    return jax.vmap(evaluate_tree, in_axes=(0, 0, 0, 0, None, None, None))(
        opcode, value, size, output, X, fs, n_outputs
    )


@functools.cache
def _generator(fs, n_outputs, pop):
    return jax.jit(lambda key: _generate(key, fs, n_outputs, pop))


def _forest(seed, fs, n_outputs, pop=POP):
    return _generator(fs, n_outputs, pop)(jax.random.key(seed))


def _generate(key, fs, n_outputs, pop):
    return generate(
        key,
        pop,
        fs,
        N_VARS,
        MAX_LEN,
        max_depth=5,
        const_range=(-2.0, 2.0),
        n_outputs=n_outputs,
        modi_prob=0.4 if n_outputs > 1 else 0.0,
    )


def _data(seed, n=16):
    X = np.random.default_rng(seed).normal(0.0, 1.5, (n, N_VARS)).astype(np.float32)
    X[0] = 0.0  # singular points of div, log, inv, pow
    return X


@pytest.mark.parametrize("n_outputs", [1, 3])
@pytest.mark.parametrize("semantics", ["raw", "protected"])
@settings(max_examples=12)
@given(seed=st.integers(0, 2**31 - 1))
def test_matches_reference_on_random_forests(semantics, n_outputs, seed):
    fs = FUNCTION_SETS[semantics]
    forest, X = _forest(seed, fs, n_outputs), _data(seed)
    got = np.asarray(_batched(forest.opcode, forest.value, forest.size, forest.output, X, fs, n_outputs))
    expected = reference_eval(forest, X, fs, n_outputs)
    assert got.shape == expected.shape == (POP, 16, n_outputs) and got.dtype == np.float32
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-5)


def test_single_tree_and_per_tree_data_match_reference():
    fs = FUNCTION_SETS["raw"]
    forest = _forest(3, fs, 3)
    Xs = np.stack([_data(s, n=5) for s in range(POP)])  # [pop, n, n_vars]: each tree its own rows
    per_tree = jax.jit(jax.vmap(evaluate_tree, in_axes=(0, 0, 0, 0, 0, None, None)), static_argnums=(5, 6))
    got = np.asarray(per_tree(forest.opcode, forest.value, forest.size, forest.output, Xs, fs, 3))
    for t in range(POP):
        expected = reference_eval(forest[t], Xs[t], fs, 3)
        np.testing.assert_allclose(got[t], expected, rtol=2e-5, atol=2e-5)
        alone = evaluate_tree(
            forest.opcode[t], forest.value[t], forest.size[t], forest.output[t], Xs[t], fs, 3
        )
        np.testing.assert_allclose(np.asarray(alone), expected, rtol=2e-5, atol=2e-5)


def test_one_observation_per_tree_shape():
    fs = FUNCTION_SETS["protected"]
    forest = _forest(4, fs, 2)
    obs = jnp.asarray(np.random.default_rng(0).normal(size=(POP, 1, N_VARS)), jnp.float32)
    f = jax.vmap(evaluate_tree, in_axes=(0, 0, 0, 0, 0, None, None))
    out = f(forest.opcode, forest.value, forest.size, forest.output, obs, fs, 2)
    assert out.shape == (POP, 1, 2)
    assert np.isfinite(np.asarray(out)).all()


FS_DIFF = FunctionSet(("add", "sub", "mul", "div", "sin", "exp", "log", "sqrt", "pow", "tanh"))
C, V = (lambda c: ("const", c)), (lambda k: ("var", k))
DIFF_TREES = [
    # 2.5 sin(x0) + log(x1) / x0 ** 1.5
    ("add", ("mul", C(2.5), ("sin", V(0))), ("div", ("log", V(1)), ("pow", V(0), C(1.5)))),
    # exp(-0.7 x0) * tanh(0.3 + x1) - sqrt(x0 * 1.2)
    (
        "sub",
        ("mul", ("exp", ("mul", C(-0.7), V(0))), ("tanh", ("add", C(0.3), V(1)))),
        ("sqrt", ("mul", V(0), C(1.2))),
    ),
    C(-4.0),
]


@jax.jit
def _jacobians(opcode, value, size, output, X):
    """Forward-mode, reverse-mode and central-difference Jacobians ``[n, L]`` of one tree."""

    def f(v):
        return evaluate_tree(opcode, v, size, output, X, FS_DIFF)[:, 0]

    eps = 1e-6
    steps = eps * jnp.eye(value.shape[0], dtype=value.dtype)
    central = jax.vmap(lambda d: (f(value + d) - f(value - d)) / (2 * eps), out_axes=1)(steps)
    return jax.jacfwd(f)(value), jax.jacrev(f)(value), central, f(value)


def test_derivatives_match_central_differences_in_float64():
    forest = Forest.from_tuples(DIFF_TREES, 16, FS_DIFF)
    with jax.enable_x64(True):
        X = np.random.default_rng(0).uniform(0.2, 2.0, (9, 2))  # inside every function's domain
        for t in range(len(DIFF_TREES)):
            tree = forest[t]
            value = jnp.asarray(tree.value, jnp.float64)
            forward, reverse, central, primal = map(
                np.asarray, _jacobians(tree.opcode, value, tree.size, tree.output, X)
            )
            assert primal.dtype == np.float64
            const = np.asarray(tree.opcode) == CONST
            np.testing.assert_allclose(forward[:, const], central[:, const], rtol=1e-7, atol=1e-8)
            np.testing.assert_allclose(reverse[:, const], forward[:, const], rtol=1e-12, atol=1e-12)
            assert np.all(forward[:, ~const] == 0) and np.all(reverse[:, ~const] == 0)
            assert np.all(forward[:, const] != 0)


def test_reverse_mode_under_vmap_is_finite_beside_singular_trees():
    # Under vmap every function runs for every tree; a tree's gradient must not pick up the NaN or
    # inf that an unselected function (log(-3), exp(500), 1/0) computes on its slots.
    fs = FunctionSet(("add", "mul", "div", "log", "exp"))
    trees = [
        ("add", ("mul", ("const", 2.0), ("var", 0)), ("const", -3.0)),  # 2 x0 - 3
        ("log", ("mul", ("const", -1.0), ("var", 0))),  # log(-x0): NaN for x0 > 0
        ("exp", ("mul", ("const", 100.0), ("var", 0))),  # overflows
        ("div", ("const", 1.0), ("mul", ("const", 0.0), ("var", 0))),  # 1/0
    ]
    forest = Forest.from_tuples(trees, 8, fs)
    X = jnp.asarray([[5.0], [7.0]], jnp.float32)

    def total(v, op, size, out):
        return jnp.sum(evaluate_tree(op, v, size, out, X, fs))

    grads = jax.vmap(jax.grad(total))(forest.value, forest.opcode, forest.size, forest.output)
    # 2 x0 - 3: d/dc0 = sum(x0) = 12, d/dc1 = n = 2
    np.testing.assert_allclose(np.asarray(grads[0, :5]), [0.0, 0.0, 12.0, 0.0, 2.0])
    assert np.all(np.asarray(grads[0, 5:]) == 0)


def test_jit_gives_the_same_values():
    fs = FUNCTION_SETS["raw"]
    forest, X = _forest(7, fs, 1), _data(7)
    t = 2
    args = (forest.opcode[t], forest.value[t], forest.size[t], forest.output[t], X)
    eager = np.asarray(evaluate_tree(*args, fs))
    jitted = np.asarray(jax.jit(evaluate_tree, static_argnums=(5, 6))(*args, fs, 1))
    np.testing.assert_array_equal(eager, jitted)


def test_bad_arguments_name_the_argument():
    fs = FUNCTION_SETS["raw"]
    forest, X = _forest(0, fs, 1), _data(0)
    one = (forest.opcode[0], forest.value[0], forest.size[0], forest.output[0])
    with pytest.raises(ArgumentError, match="function_set"):
        evaluate_tree(*one, X, ("add",))
    with pytest.raises(ArgumentError, match="n_outputs"):
        evaluate_tree(*one, X, fs, 0)
    with pytest.raises(ArgumentError, match=r"opcode must have shape \[max_len\]"):
        evaluate_tree(forest.opcode, forest.value, forest.size, forest.output, X, fs)
    with pytest.raises(ArgumentError, match="size must have opcode's shape"):
        evaluate_tree(one[0], one[1], one[2][:5], one[3], X, fs)
    with pytest.raises(ArgumentError, match=r"X must have shape \[n, n_vars\]"):
        evaluate_tree(*one, X[0], fs)


@functools.partial(jax.jit, static_argnums=(4,))
def _jacobians_of_forest(opcode, value, size, X, skip_padding):
    """``tree_jacobian`` over a forest (``lax.map`` when skipping padding, as on a CPU; ``vmap``
    else) beside ``jax.jacfwd`` of ``evaluate_tree``."""

    def hand(o, v, s):
        return tree_jacobian(o, v, s, X, FS_JAC, skip_padding)

    def forward(o, v, s):
        return jax.jacfwd(lambda v: evaluate_tree(o, v, s, jnp.full_like(o, -1), X, FS_JAC)[:, 0])(v)

    f, J = (
        lax.map(lambda t: hand(*t), (opcode, value, size))
        if skip_padding
        else jax.vmap(hand)(opcode, value, size)
    )
    return f, J, jax.vmap(forward)(opcode, value, size)


FS_JAC = FunctionSet(("add", "sub", "mul", "div", "sin", "cos", "exp", "max", "if_then_else", "tanh", "pow"))


@pytest.mark.parametrize("skip_padding", [False, True])
def test_tree_jacobian_matches_forward_mode(skip_padding):
    forest = generate(jax.random.key(5), 12, FS_JAC, 2, 32, max_depth=6, const_prob=0.6)
    X = np.random.default_rng(1).uniform(-2.0, 2.0, (11, 2)).astype(np.float32)
    f, J, forward = map(
        np.asarray, _jacobians_of_forest(forest.opcode, forest.value, forest.size, X, skip_padding)
    )
    np.testing.assert_allclose(f, reference_eval(forest, X, FS_JAC)[..., 0], rtol=2e-5, atol=2e-5)
    assert J.shape == (12, 11, 32)
    const = np.asarray(forest.opcode)[:, None, :] == CONST
    assert np.all(J[~np.broadcast_to(const, J.shape)] == 0)
    finite = np.isfinite(f).all(axis=1)  # trees with non-finite predictions have no derivative to check
    assert finite.sum() >= 6
    # compare where forward mode is finite: its pow rule gives 0 * log(negative) = NaN for a tangent
    # that is zero, where tree_jacobian gives the true 0
    compared = finite[:, None, None] & np.broadcast_to(const, J.shape) & np.isfinite(forward)
    assert compared.sum() > 100
    np.testing.assert_allclose(J[compared], forward[compared], rtol=1e-5, atol=1e-5)
