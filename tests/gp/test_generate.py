import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.gp.tree_helpers import FS

from evotensor.gp.encoding import CONST, VAR
from evotensor.gp.functions import FunctionSet
from evotensor.gp.generate import TreeGenerator, generate

POP = 64


def _gen(**kw):
    base = dict(function_set=FS, n_vars=3, max_len=32, min_depth=1, max_depth=4)
    base.update(kw)
    g = TreeGenerator(**base)
    return g, jax.jit(lambda k: g(k, POP))


FS2 = FunctionSet(("add", "mul"))
FS3 = FunctionSet(("add", "sin"))
# Every test uses these (jitted once, [POP, max_len] each); statistics pool several keys.
GENERATORS = {
    "half_and_half": _gen(),
    "full": _gen(method="full", min_depth=3, max_depth=3),
    "grow_modi": _gen(method="grow", n_outputs=3, modi_prob=0.5, leaf_prob=(0.0, 0.5, 0.9)),
    "tight": _gen(max_len=7, min_depth=4, max_depth=6, method="full"),
    "grow_depths": _gen(
        function_set=FS2, max_len=16, min_depth=0, max_depth=5, method="grow", leaf_prob=(0.0, 0.0, 1.0)
    ),
    "stats": _gen(max_len=64, min_depth=2, max_depth=5, const_prob=0.25, const_range=(2.0, 3.0)),
    "weights_no_vars": _gen(function_set=FS3, n_vars=0, function_weights=(1.0, 0.0), max_depth=3),
    "variable_weights": _gen(max_len=64, min_depth=2, max_depth=5, variable_weights=(0.7, 0.0, 0.3)),
}


def _pooled(name, n_keys):
    _, fn = GENERATORS[name]
    parts = [fn(jax.random.key(1000 + i)) for i in range(n_keys)]
    return jax.tree_util.tree_map(lambda *xs: np.concatenate(xs, 0), *parts)


@settings(max_examples=12, deadline=None)
@given(st.sampled_from(sorted(GENERATORS)), st.integers(0, 2**31 - 1))
def test_generated_trees_are_valid_and_within_bounds(name, seed):
    g, fn = GENERATORS[name]
    forest = fn(jax.random.key(seed))
    forest.check(g.function_set, n_vars=g.n_vars, n_outputs=g.n_outputs)
    depth = np.asarray(forest.depth())
    length = np.asarray(forest.length)
    assert np.all(length <= g.max_len)
    for t in range(POP):
        assert depth[t, : length[t]].max() <= g.max_depth
    if g.n_outputs == 1:
        assert np.all(np.asarray(forest.output) == -1)


def test_full_trees_are_complete():
    g, fn = GENERATORS["full"]
    forest = fn(jax.random.key(1))
    depth = np.asarray(forest.depth())
    is_leaf = FS.arity[np.asarray(forest.opcode)] == 0
    for t in range(POP):
        n = int(forest.length[t])
        # every leaf sits at exactly depth 3 (32 slots fit any depth-3 tree with arity <= 3? no:
        # 1 + 3 + 9 + 27 = 40 > 32, so leaves may be shallower only where the budget ran out)
        leaf_depths = depth[t, :n][is_leaf[t, :n]]
        assert leaf_depths.max() == 3
        if n < 32 - 3:  # the budget never bound: a complete full tree
            assert np.all(leaf_depths == 3)


def test_grow_per_depth_leaf_probabilities():
    # leaf_prob 0 at depths 0 and 1, 1.0 at depth 2: a tree is complete binary down to
    # min(2, its ramped depth bound in 0..5), i.e. 1, 3 or 7 nodes; bound >= 2 (7 nodes) is 4/6 likely
    forest = _pooled("grow_depths", 5)
    length = np.asarray(forest.length)
    assert set(np.unique(length)) == {1, 3, 7}
    assert 0.55 < np.mean(length == 7) < 0.78


def test_leaf_statistics_and_constant_range():
    forest = _pooled("stats", 6)
    op, val = np.asarray(forest.opcode), np.asarray(forest.value)
    consts = val[op == CONST]
    vars_ = val[op == VAR]
    frac = consts.size / (consts.size + vars_.size)
    assert 0.2 < frac < 0.3
    assert consts.min() >= 2.0 and consts.max() <= 3.0 and np.unique(consts).size > 100  # continuous
    assert set(np.unique(vars_).astype(int)) == {0, 1, 2}
    # every function is used, roughly uniformly
    funcs = op[FS.arity[op] > 0]
    counts = np.bincount(funcs, minlength=FS.n_opcodes)[3:]
    assert counts.min() > 0.5 * counts.mean()


def test_function_weights_and_no_variables():
    forest = _pooled("weights_no_vars", 2)
    op = np.asarray(forest.opcode)
    assert np.any(op == FS3.opcode("add")) and not np.any(op == FS3.opcode("sin"))
    assert not np.any(op == VAR)  # n_vars == 0: every leaf is a constant


def test_variable_weights_set_how_often_each_variable_is_drawn():
    """Weights (0.7, 0, 0.3): x1 never appears, x0 in 70% of the variable leaves; constants keep their
    share (the weights only choose among the variables)."""
    forest = _pooled("variable_weights", 4)
    op, val = np.asarray(forest.opcode), np.asarray(forest.value)
    drawn = val[op == VAR].astype(int)
    assert drawn.size > 1000 and not np.any(drawn == 1)
    assert abs(np.mean(drawn == 0) - 0.7) < 0.04
    assert 0.4 < np.sum(op == CONST) / (np.sum(op == CONST) + drawn.size) < 0.6  # const_prob 0.5


def test_generate_function_is_the_generator():
    g, _ = GENERATORS["half_and_half"]
    shape = jax.eval_shape(lambda k: generate(k, 5, FS, 3, 32, min_depth=1, max_depth=4), jax.random.key(0))
    assert shape.opcode.shape == (5, 32) and shape.value.dtype == np.float32
    with pytest.raises(ValueError, match="n must be"):
        g(jax.random.key(0), 0)


def test_deterministic_given_key():
    _, fn = GENERATORS["half_and_half"]
    a, b = fn(jax.random.key(7)), fn(jax.random.key(7))
    np.testing.assert_array_equal(np.asarray(a.opcode), np.asarray(b.opcode))
    c = fn(jax.random.key(8))
    assert not np.array_equal(np.asarray(a.opcode), np.asarray(c.opcode))


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(max_len=0), "max_len"),
        (dict(min_depth=3, max_depth=2), "min_depth"),
        (dict(method="ramped"), "method"),
        (dict(leaf_prob=1.5), "leaf_prob"),
        (dict(const_range=(1.0, 0.0)), "const_range"),
        (dict(modi_prob=2.0), "modi_prob"),
        (dict(function_weights=(1.0,)), "function_weights"),
        (dict(variable_weights=(1.0, 1.0)), "variable_weights"),
        (dict(variable_weights=(0.0, 0.0, 0.0)), "variable_weights"),
        (dict(variable_weights=(1.0, float("nan"), 1.0)), "variable_weights"),
        (dict(n_vars=-1), "n_vars"),
    ],
)
def test_bad_arguments(kw, match):
    base = dict(function_set=FS, n_vars=3, max_len=32)
    base.update(kw)
    with pytest.raises(ValueError, match=match):
        TreeGenerator(**base)


# modi_prob 0.15 over four outputs (a rate unlike the 0.5 of "grow_modi", so a generator that ignored
# the requested rate would fail one of the two cases)
MODI_RATE_GEN = _gen(method="grow", n_outputs=4, modi_prob=0.15, leaf_prob=0.3, max_depth=5)


@pytest.mark.parametrize("case", ["grow_modi", "modi_rate"])
def test_modi_nodes_appear_at_the_requested_rate(case):
    # Given the tree shapes, every function node is a Modi node independently with probability
    # modi_prob, its output uniform in [0, n_outputs): binomial counts, checked at 5 sigma (fixed keys)
    g, fn = GENERATORS[case] if case in GENERATORS else MODI_RATE_GEN
    parts = [fn(jax.random.key(2000 + i)) for i in range(8)]
    op = np.concatenate([np.asarray(f.opcode) for f in parts])
    out = np.concatenate([np.asarray(f.output) for f in parts])
    is_func = FS.arity[op] > 0
    assert np.all(out[~is_func] == -1)  # leaves and padding are never Modi nodes
    n, k = int(is_func.sum()), int((out[is_func] >= 0).sum())
    p = g.modi_prob
    assert n > 500
    assert abs(k - n * p) <= 5 * np.sqrt(n * p * (1 - p)), (k, n, p)
    counts = np.bincount(out[is_func & (out >= 0)], minlength=g.n_outputs)
    assert counts.size == g.n_outputs  # every index is a valid output
    q = 1 / g.n_outputs
    assert np.all(np.abs(counts - k * q) <= 5 * np.sqrt(k * q * (1 - q))), counts


_DEPTH_ONE = [
    TreeGenerator(FS, 3, 4, 1, 1, "full", n_outputs=2, modi_prob=0.5),  # insert mutation's
    # depth bound 0 or 1, leaf or function roots, no variables; the 3-ary if_then_else won't fit
    TreeGenerator(FS, 0, 3, 0, 1, "grow", leaf_prob=0.4),
]


@jax.jit
def _closed_form_and_scan(key):
    """Per generator of _DEPTH_ONE: its trees (closed form) and the scan's from the same uniforms."""
    shapes = [g.uniform_shape(200) for g in _DEPTH_ONE]
    flat = jax.random.uniform(key, (sum(int(np.prod(s)) for s in shapes),))  # one random call: compiles fast
    out, start = [], 0
    for g, shape in zip(_DEPTH_ONE, shapes):
        u = flat[start : start + int(np.prod(shape))].reshape(shape)
        start += int(np.prod(shape))
        n_b = g.max_depth - g.min_depth + 1
        bound = g.min_depth + jnp.minimum(jnp.floor(u[-1, 0] * n_b), n_b - 1).astype(jnp.int32)
        full = {"full": jnp.ones(200, bool), "grow": jnp.zeros(200, bool)}.get(g.method, u[-1, 1] < 0.5)
        opcode, value, output, _ = g._batch(u[:-1], bound, full)
        out.append((g.from_uniforms(u), (opcode, value, output)))
    return out


def test_depth_one_closed_form_equals_the_scan():
    """Trees of depth <= 1 are built without the scan; from the same uniforms they are the scan's
    (and their closed-form sizes are right: ``check`` recomputes them)."""
    for g, (got, want) in zip(_DEPTH_ONE, _closed_form_and_scan(jax.random.key(0))):
        got.check(FS, n_vars=g.n_vars, n_outputs=g.n_outputs)
        for name, w in zip(("opcode", "value", "output"), want):
            np.testing.assert_array_equal(getattr(got, name), w, err_msg=name)
        assert np.all(FS.arity[np.asarray(got.opcode)[:, 1:]] == 0)  # depth <= 1: leaves below the root
        assert np.any(np.asarray(got.length) > 1) == (g.max_depth == 1)
