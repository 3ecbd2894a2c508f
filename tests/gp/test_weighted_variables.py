"""Weighted variables (``w * x`` as ``mul(CONST w, VAR i)``): generation and variation keep them
whole, the weighted length, constant optimization of the weights, and the option's checks."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evotensor.core.checks import ArgumentError
from evotensor.gp import GP, Forest, FunctionSet, evaluate
from evotensor.gp import operators as ops
from evotensor.gp.constants import optimize_constants
from evotensor.gp.generate import TreeGenerator
from evotensor.gp.sklearn import SymbolicRegressor
from evotensor.gp.weighted import all_weighted, weighted_length

FS = FunctionSet(("add", "sub", "mul", "div", "sin"), protected=True)
N_VARS, L, POP = 3, 24, 16
COUNTS = (4, 4, 4, 4)  # rows of each kind of the fused structural / in-place passes
# the default tier skips subtree and insert mutation: their generators' scans are half the compile time
FAST_COUNTS = (0, 8, 0, 8)


def _generator(max_len, min_depth, max_depth, method="half_and_half"):
    return TreeGenerator(FS, N_VARS, max_len, min_depth, max_depth, method, weighted_variables=True)


INIT = _generator(L, 1, 4)
SUBTREE = _generator(12, 0, 2)
INSERT = _generator(7, 1, 1, "full")  # a root over weighted leaves: 1 + 3 * 2 slots


@functools.partial(jax.jit, static_argnums=2)
def _varied(key, subtree_bias, structural_counts):
    """Every built-in operator, weighted, on a weighted population: the initial forest, then the
    structural pass (``structural_counts`` rows of subtree, hoist, insert, delete mutation), the
    in-place pass, one-point (Koza-biased) and leaf-biased crossover."""
    k = jax.random.split(key, 8)
    both = INIT(k[0], 2 * POP)  # the population and the crossover's donors, from one scan
    forest, donors = both[:POP], both[POP:]
    shapes = ops.structural_uniform_shapes(structural_counts, SUBTREE, INSERT)
    draws = [jax.random.uniform(kk, s) for kk, s in zip(jax.random.split(k[1], len(shapes)), shapes)]
    bias = subtree_bias if structural_counts[0] else None
    structural, ok_s = ops.structural_mutations(
        draws, forest, structural_counts, FS, SUBTREE, INSERT, subtree_bias=bias, weighted=True
    )
    u = jax.random.uniform(k[2], (POP, L))
    inplace, ok_i = ops.inplace_mutations(u, forest, COUNTS, FS, N_VARS, 0.3, 0.3, sigma=0.1, weighted=True)
    one_point, ok_1 = ops.one_point_crossover(k[4], forest, donors, FS, 0.9, weighted=True)
    leaf_biased, ok_2 = ops.leaf_biased_crossover(k[5], forest, donors, FS, 0.5, weighted=True)
    forests = (forest, structural, inplace, one_point, leaf_biased)
    weighted = jnp.stack([all_weighted(f.opcode, FS) for f in forests])  # [5, POP]
    return forests, weighted, (ok_s, ok_i, ok_1, ok_2)


def _check_weighted(seed, bias, counts):
    forests, weighted, oks = _varied(jax.random.key(seed), jnp.float32(bias), counts)
    for forest, ok in zip(forests, np.asarray(weighted), strict=True):
        forest.check(FS, n_vars=N_VARS)
        assert ok.all(), forest[int(np.argmin(ok))].to_infix(FS)
    # the operators did change trees (a test of the guarantee, not of operators doing nothing)
    assert all(bool(jnp.any(ok)) for ok in oks)


@settings(max_examples=6)
@given(seed=st.integers(0, 2**31 - 1))
def test_generation_and_variation_keep_every_variable_weighted(seed):
    _check_weighted(seed, 0.0, FAST_COUNTS)


@pytest.mark.slow
@settings(max_examples=10)
@given(seed=st.integers(0, 2**31 - 1), bias=st.sampled_from([0.0, 0.5, 0.9, 1.0]))
def test_subtree_mutation_keeps_every_variable_weighted(seed, bias):
    _check_weighted(seed, bias, COUNTS)


@jax.jit
def _single_point(u, forest):
    return ops.inplace_mutations(u, forest, (forest.opcode.shape[0], 0, 0, 0), FS, N_VARS, weighted=True)


def test_point_mutation_changes_a_variable_but_keeps_its_weight():
    forest = Forest.from_tuples([("mul", ("const", 1.5), ("var", 0))] * 2, 3, FS)
    u = jnp.tile(jnp.asarray([[0.99, 0.9, 0.0]]), (2, 1))  # node choice 0.99: the VAR, rewritten by 0.9
    out, ok = _single_point(u, forest)
    assert bool(jnp.all(ok))
    np.testing.assert_array_equal(np.asarray(out.opcode), np.asarray(forest.opcode))
    np.testing.assert_array_equal(np.asarray(out.value)[:, :2], np.asarray(forest.value)[:, :2])
    assert np.all(np.asarray(out.value)[:, 2] == 2.0)  # floor(0.9 * 3)


_weighted_length = jax.jit(functools.partial(weighted_length, function_set=FS))


def _reference_length(tree):
    """Nodes of a nested-tuple tree, ``mul(const, var)`` counted once (a slow, obvious count)."""
    if tree[0] in ("const", "var"):
        return 1
    if tree[0] == "mul" and tree[1][0] == "const" and tree[2][0] == "var":
        return 1
    return 1 + sum(_reference_length(child) for child in tree[1:])


@settings(max_examples=3)
@given(seed=st.integers(0, 2**31 - 1))
def test_weighted_length_matches_a_per_tree_count(seed):
    # the varied forests hold weighted variables and other muls; `plain` near-misses that are not
    # weighted variables: mul(var, const), a bare var, mul(const, sin(var))
    forests, _, _ = _varied(jax.random.key(seed), jnp.float32(0.0), FAST_COUNTS)
    plain = Forest.from_tuples(
        [("mul", ("var", 0), ("const", 2.0)), ("var", 1), ("mul", ("const", 1.0), ("sin", ("var", 0)))], L, FS
    )
    for forest in (*forests, plain):
        got = np.asarray(_weighted_length(forest))
        want = [_reference_length(t) for t in forest.to_tuples(FS)]
        np.testing.assert_array_equal(got, want)
        assert got.dtype == np.int32


_optimize = jax.jit(
    functools.partial(optimize_constants, linear_scaling=False), static_argnames=("function_set",)
)


def test_constant_optimization_recovers_planted_weights():
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (64, 2)).astype(np.float32)
    y = 2.5 * X[:, 0] - 0.75 * X[:, 1]
    starts = [(0.3, 0.2), (-1.0, 1.0), (1.0, -0.5)]
    trees = [("add", ("mul", ("const", a), ("var", 0)), ("mul", ("const", b), ("var", 1))) for a, b in starts]
    forest = Forest.from_tuples(trees, 8, FS)
    value, loss = _optimize(forest, X, y, function_set=FS)
    np.testing.assert_allclose(np.asarray(value)[:, [2, 5]], [[2.5, -0.75]] * 3, atol=1e-4)
    assert float(jnp.max(loss)) < 1e-8


def test_gp_reads_the_weighted_complexity():
    gp = GP(8, FS, N_VARS, max_len=L, weighted_variables=True)
    assert gp.initializer.weighted_variables and gp.context.weighted_variables
    assert gp.mutation_generator.weighted_variables and gp.insert_generator.weighted_variables
    forest = Forest.from_tuples(
        [("add", ("mul", ("const", 2.0), ("var", 0)), ("const", 1.0)), ("mul", ("const", 2.0), ("var", 1))],
        L,
        FS,
    )
    np.testing.assert_array_equal(np.asarray(gp.complexity(forest)), [3, 1])
    plain = GP(8, FS, N_VARS, max_len=L)
    np.testing.assert_array_equal(np.asarray(plain.complexity(forest)), [5, 3])


def test_weighted_variables_need_mul():
    fs = FunctionSet(("add", "sub", "sin"))
    with pytest.raises(ArgumentError, match="weighted_variables.*'mul'"):
        GP(8, fs, 2, weighted_variables=True)
    with pytest.raises(ArgumentError, match="weighted_variables"):
        TreeGenerator(fs, 2, 16, weighted_variables=True)
    with pytest.raises(ArgumentError, match="weighted_variables must be a bool"):
        GP(8, FS, 2, weighted_variables="yes")
    model = SymbolicRegressor(
        population_size=8, generations=1, function_set=("add", "sin"), weighted_variables=True
    )
    with pytest.raises(ArgumentError, match="weighted_variables"):
        model.fit(np.ones((10, 2), np.float32), np.arange(10.0))
    GP(8, fs, 2)  # without the option, no mul is fine


@pytest.mark.slow
@pytest.mark.parametrize("crossover", ["one_point", "leaf_biased"])
def test_gp_generations_keep_every_variable_weighted(crossover):
    # the strategy's wiring: its fused passes and crossover read the context's flag
    names = ("subtree", "hoist", "single_point", "multi_point", "insert", "delete")
    gp = GP(
        32,
        FS,
        N_VARS,
        max_len=L,
        weighted_variables=True,
        mutation_rate=1.0,
        mutation_probs={n: 1.0 for n in names},
        crossover=crossover,
        parsimony_coefficient="auto",
    )
    X = jax.random.normal(jax.random.key(1), (32, N_VARS))
    y = 2.0 * X[:, 0] - X[:, 1]
    key, params = jax.random.key(0), gp.default_params()
    state = gp.init(key, params)
    for _ in range(3):
        k1, k2, key = jax.random.split(key, 3)
        forest, state = gp.ask(k1, state, params)
        forest.check(FS, n_vars=N_VARS)
        assert bool(jnp.all(all_weighted(forest.opcode, FS)))
        loss = jnp.mean((evaluate(forest, X, FS, 1)[..., 0] - y) ** 2, axis=-1)
        state, _ = gp.tell(k2, state, forest, jnp.where(jnp.isfinite(loss), loss, jnp.inf), params)
    hof = state.hall_of_fame
    entered = np.flatnonzero(np.isfinite(np.asarray(hof.loss)))
    np.testing.assert_array_equal(np.asarray(weighted_length(hof.forest, FS))[entered], entered + 1)
