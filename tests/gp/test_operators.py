import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.gp.tree_helpers import (
    FS,
    N_VARS,
    children_of,
    count,
    forests,
    is_function,
    replace,
    subtree,
)

from evotensor.gp import operators as ops
from evotensor.gp.encoding import CONST, Forest
from evotensor.gp.generate import TreeGenerator

POP, L = 6, 24
SUB_GEN = TreeGenerator(FS, N_VARS, 7, 0, 2, n_outputs=2, modi_prob=0.3)
INS_GEN = ops.default_insert_generator(FS, N_VARS, 4, n_outputs=2, modi_prob=0.3)

# One jitted function per operator: shapes are fixed, so each compiles once for the whole module.
OPS = {
    "one_point_crossover": jax.jit(lambda k, a, b: ops.one_point_crossover(k, a, b, FS)),
    "koza_crossover": jax.jit(lambda k, a, b: ops.one_point_crossover(k, a, b, FS, 0.9)),
    "leaf_biased_crossover": jax.jit(lambda k, a, b: ops.leaf_biased_crossover(k, a, b, FS, 0.3)),
    "subtree_mutation": jax.jit(lambda k, a, b: ops.subtree_mutation(k, a, SUB_GEN)),
    "hoist_mutation": jax.jit(lambda k, a, b: ops.hoist_mutation(k, a, FS)),
    "single_point_mutation": jax.jit(lambda k, a, b: ops.single_point_mutation(k, a, FS, N_VARS)),
    "multi_point_mutation": jax.jit(lambda k, a, b: ops.multi_point_mutation(k, a, FS, N_VARS, 0.3)),
    "insert_mutation": jax.jit(lambda k, a, b: ops.insert_mutation(k, a, INS_GEN)),
    "delete_mutation": jax.jit(lambda k, a, b: ops.delete_mutation(k, a, FS)),
    "single_constant_mutation": jax.jit(lambda k, a, b: ops.single_constant_mutation(k, a, (-1, 1), 0.5)),
    "multi_constant_mutation": jax.jit(lambda k, a, b: ops.multi_constant_mutation(k, a, 0.5, (-1, 1))),
}


@pytest.mark.parametrize("name", sorted(OPS))
@settings(max_examples=5, deadline=None)
@given(forests(POP, L, n_outputs=2), forests(POP, L, n_outputs=2), st.integers(0, 2**31 - 1))
def test_every_operator_yields_valid_forests(name, rec, don, seed):
    (a, ta), (b, tb) = rec, don
    out, ok = OPS[name](jax.random.key(seed), a, b)
    out.check(FS, n_vars=N_VARS, n_outputs=2)
    assert out.opcode.shape == (POP, L) and ok.shape == (POP,)
    got = out.to_tuples(FS)
    for j in range(POP):
        if not bool(ok[j]):
            assert got[j] == ta[j]  # not applied: unchanged
    if name.endswith("crossover"):
        for j in range(POP):  # the child is the recipient with one of its subtrees swapped for a donor's
            if bool(ok[j]):
                cands = {
                    replace(ta[j], p, subtree(tb[j], q))
                    for p in range(count(ta[j]))
                    for q in range(count(tb[j]))
                }
                assert got[j] in cands
    if name == "hoist_mutation":
        for j in range(POP):
            assert bool(ok[j]) == is_function(ta[j])  # fails only on a single leaf
            if bool(ok[j]):
                n = count(ta[j])
                cands = {
                    replace(ta[j], p, subtree(ta[j], q))
                    for p in range(n)
                    for q in range(p + 1, p + count(subtree(ta[j], p)))
                }
                assert got[j] in cands and count(got[j]) < n
    if name == "delete_mutation":
        for j in range(POP):
            if bool(ok[j]):
                n = count(ta[j])
                cands = {replace(ta[j], p, kid) for p in range(n) for kid in children_of(subtree(ta[j], p))}
                assert got[j] in cands
    if name == "insert_mutation":
        for j in range(POP):
            if bool(ok[j]):
                assert count(got[j]) > count(ta[j])
    if name in (
        "single_point_mutation",
        "multi_point_mutation",
        "single_constant_mutation",
        "multi_constant_mutation",
    ):
        # in-place: the shape (sizes, arities, Modi outputs) never changes
        np.testing.assert_array_equal(np.asarray(out.size), np.asarray(a.size))
        np.testing.assert_array_equal(np.asarray(out.output), np.asarray(a.output))
        np.testing.assert_array_equal(FS.arity[np.asarray(out.opcode)], FS.arity[np.asarray(a.opcode)])
    if name == "single_point_mutation":
        changed = np.sum(
            (np.asarray(out.opcode) != np.asarray(a.opcode)) | (np.asarray(out.value) != np.asarray(a.value)),
            1,
        )
        assert np.all(changed <= 1)
    if name.endswith("constant_mutation"):
        np.testing.assert_array_equal(np.asarray(out.opcode), np.asarray(a.opcode))
        non_const = np.asarray(a.opcode) != CONST
        np.testing.assert_array_equal(np.asarray(out.value)[non_const], np.asarray(a.value)[non_const])


BIG = 67 * POP  # statistical tests: 402 trees, run in chunks of POP so no operator compiles twice
_T12 = (
    "div",
    ("add", ("mul", ("var", 0), ("const", 0.5)), ("sub", ("sin", ("var", 1)), ("const", 2.0))),
    ("add", ("const", 1.0), ("const", -3.0)),
)  # 12 nodes: 6 functions, 6 leaves (4 constants)


def _big_forest(tree=_T12):
    return Forest.from_tuples([tree] * BIG, L, FS)


def _chunked(fn, seed, forest):
    """``fn(key, chunk)`` on consecutive [POP, L] chunks (the shape every jitted op was built for)."""
    outs = [fn(jax.random.fold_in(jax.random.key(seed), i), forest[i : i + POP]) for i in range(0, BIG, POP)]
    return jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs, axis=0), *outs)


def _run(name, seed, forest):
    return _chunked(lambda k, f: OPS[name](k, f, f), seed, forest)


def test_multi_point_mutation_decides_per_node():
    f = _big_forest()
    out, ok = _run("multi_point_mutation", 0, f)  # rate 0.3
    changed = np.sum(
        (np.asarray(out.opcode) != np.asarray(f.opcode)) | (np.asarray(out.value) != np.asarray(f.value)), 1
    )
    # per-node decisions: most trees have some, but not all, of their 12 nodes rewritten
    assert np.mean((changed > 0) & (changed < 12)) > 0.9
    assert 2.0 < changed.mean() < 4.5  # about 0.3 * 12 (minus rare no-op rewrites)


def test_multi_constant_mutation_decides_per_node():
    f = _big_forest()
    out, ok = _run("multi_constant_mutation", 1, f)  # rate 0.5, 4 constants
    changed = np.sum(np.asarray(out.value) != np.asarray(f.value), 1)
    assert np.mean((changed > 0) & (changed < 4)) > 0.7
    assert np.all(np.asarray(ok) == (changed > 0))


def test_delete_keeps_any_child():
    f2 = _big_forest(("sub", ("var", 0), ("var", 1)))
    f3 = _big_forest(("if_then_else", ("var", 0), ("var", 1), ("var", 2)))
    for forest, n_kids in ((f2, 2), (f3, 3)):
        out, ok = _run("delete_mutation", 2, forest)
        assert np.all(ok) and np.all(np.asarray(out.length) == 1)
        kept = np.bincount(np.asarray(out.value[:, 0]).astype(int), minlength=n_kids)
        assert np.all(kept > BIG / n_kids * 0.6)  # every child is kept a fair share of the time


def test_hoist_picks_strictly_inside_and_never_grows():
    f = _big_forest()
    out, ok = _run("hoist_mutation", 3, f)
    assert np.all(ok) and np.all(np.asarray(out.length) < 12)
    out, ok = _run("hoist_mutation", 3, _big_forest(("var", 0)))
    assert not np.any(ok) and np.all(np.asarray(out.length) == 1)


_random_nodes = jax.jit(lambda k, f, bias: ops.random_nodes(k, f, FS, bias))
_random_nodes_uniform = jax.jit(lambda k, f: ops.random_nodes(k, f, FS, None))


def test_koza_bias_of_crossover_points():
    f = _big_forest()  # 12 nodes: 6 functions, 6 leaves
    is_func = FS.arity[np.asarray(f.opcode)] > 0
    rows = np.arange(BIG)
    for seed in range(2):
        for bias in (1.0, 0.0, 0.9):
            picks = _chunked(lambda k, c, b=bias: _random_nodes(k, c, b), seed, f)
            frac = is_func[rows, np.asarray(picks)].mean()
            assert abs(frac - bias) < 0.06, (bias, frac)
        picks = np.asarray(_chunked(_random_nodes_uniform, seed, f))
        assert abs(is_func[rows, picks].mean() - 0.5) < 0.08
        assert np.all(picks < 12) and np.bincount(picks, minlength=12).min() > BIG / 12 * 0.4


_koza_subtree = jax.jit(lambda k, f, bias: ops.subtree_mutation(k, f, SUB_GEN, bias))


def test_koza_bias_of_subtree_mutation_points():
    """Bias 0 replaces a leaf: every function node of the parent survives (the tree's function count
    never drops, and grows where the fresh tree has functions); bias 1 replaces a function node's
    subtree, so some trees lose functions."""
    f = _big_forest()  # 12 nodes: 6 functions, 6 leaves
    n_func = lambda x: (FS.arity[np.asarray(x.opcode)] > 0).sum(1)  # noqa: E731
    for bias, seed in ((0.0, 1), (1.0, 2)):
        out, ok = _chunked(lambda k, c, b=bias: _koza_subtree(k, c, b), seed, f)
        out.check(FS, n_vars=N_VARS, n_outputs=2)
        change = n_func(out) - n_func(f)
        if bias == 0.0:
            assert np.all(change >= 0) and np.any(change > 0)
        else:
            assert np.any(change < 0)


_leaf_biased_one = jax.jit(lambda k, a: ops.leaf_biased_crossover(k, a, a, FS, 1.0))


def test_leaf_biased_crossover_with_bias_one_swaps_leaves():
    f = _big_forest()
    out, ok = _chunked(_leaf_biased_one, 5, f)
    assert np.all(ok) and np.all(np.asarray(out.length) == 12)


def test_length_cap_rejections_are_flagged():
    f = _big_forest(("add", _T12, ("mul", _T12[1], ("var", 2))))  # 22 of 24 slots
    out, ok = _run("subtree_mutation", 6, f)  # new subtrees of up to 7 nodes
    rejected = ~np.asarray(ok)
    assert rejected.any() and not rejected.all()
    np.testing.assert_array_equal(np.asarray(out.opcode)[rejected], np.asarray(f.opcode)[rejected])
    out.check(FS)


def test_insert_mutation_wraps_the_subtree():
    out, ok = _run("insert_mutation", 7, _big_forest(("var", 1)))
    assert np.all(ok)
    for t in out[:50].to_tuples(FS):  # the old tree is now a child of a new function node
        node = t[2] if t[0] == "modi" else t
        assert is_function(node) and ("var", 1) in children_of(node)


def test_single_point_keeps_arity_and_changes_function():
    out, ok = _run("single_point_mutation", 8, _big_forest(("add", ("var", 0), ("var", 1))))
    roots = np.asarray(out.opcode[:, 0])
    hit_root = roots != FS.opcode("add")
    assert 0.2 < hit_root.mean() < 0.47  # the root is one of 3 nodes
    assert set(FS.name(o) for o in roots[hit_root]) == {"sub", "mul", "div"}


_const_redraw = jax.jit(lambda k, f: ops.multi_constant_mutation(k, f, 1.0, (5.0, 6.0), None))
_const_perturb = jax.jit(lambda k, f: ops.multi_constant_mutation(k, f, 1.0, (5.0, 6.0), 0.1))


def test_constant_values():
    f = _big_forest()
    is_c = np.asarray(f.opcode) == CONST
    old = np.asarray(f.value)[is_c]
    c = np.asarray(_chunked(_const_redraw, 9, f)[0].value)[is_c]
    assert c.min() >= 5.0 and c.max() <= 6.0 and np.unique(c).size > 1000
    c = np.asarray(_chunked(_const_perturb, 9, f)[0].value)[is_c]
    assert 0.09 < np.std(c - old) < 0.11 and abs(np.mean(c - old)) < 0.01


# ---- pre-drawn uniforms (what the strategy batches) ------------------------------------------------

_WITH_U_ARGS = {
    "one_point_crossover": (FS, 0.9),
    "leaf_biased_crossover": (FS, 0.3),
    "subtree_mutation": (SUB_GEN,),
    "hoist_mutation": (FS,),
    "single_point_mutation": (FS, N_VARS),
    "multi_point_mutation": (FS, N_VARS, 0.3),
    "insert_mutation": (INS_GEN,),
    "delete_mutation": (FS,),
    "single_constant_mutation": ((-1, 1), 0.5),
    "multi_constant_mutation": (0.5, (-1, 1), 0.5),  # one sigma for both kinds: the fused pass shares it
}


@jax.jit
def _keyed_and_predrawn(key, a, b):
    """Every operator called with ``key`` and on the uniforms drawn from it, as ``{name: (want, got)}``."""
    out, all_draws = {}, {}
    for name, extra in _WITH_U_ARGS.items():
        gen = extra[0] if name in ("subtree_mutation", "insert_mutation") else None
        shapes = ops.uniform_shapes(name, POP, L, gen)
        draws = [jax.random.uniform(k, s) for k, s in zip(ops.uniform_keys(key, len(shapes)), shapes)]
        args = (a, b) if name.endswith("crossover") else (a,)
        want = getattr(ops, name)(key, *args, *extra)
        out[name] = (want, ops.apply_with_uniforms(name, draws, *args, *extra))
        all_draws[name] = draws
    return out, _fused(all_draws, a)


@settings(max_examples=3, deadline=None)
@given(forests(POP, L, n_outputs=2), forests(POP, L, n_outputs=2), st.integers(0, 2**31 - 1))
def test_operators_on_predrawn_uniforms_equal_the_keyed_calls(rec, don, seed):
    """apply_with_uniforms(name, draws of key) is operator(key) bit for bit, for every operator."""
    (a, _), (b, _) = rec, don
    for name, ((want, ok_want), (got, ok)) in _keyed_and_predrawn(jax.random.key(seed), a, b)[0].items():
        for field in ("opcode", "value", "size", "output"):
            msg = f"{name}.{field}"
            np.testing.assert_array_equal(getattr(got, field), getattr(want, field), err_msg=msg)
        np.testing.assert_array_equal(ok, ok_want, err_msg=name)


def test_uniform_shapes_and_apply_reject_unknown_operators():
    with pytest.raises(ValueError, match="unknown operator"):
        ops.uniform_shapes("swap_mutation", 3)
    with pytest.raises(ValueError, match="unknown operator"):
        ops.apply_with_uniforms("swap_mutation", ())
    with pytest.raises(ValueError, match="generator"):
        ops.uniform_shapes("subtree_mutation", 3)
    with pytest.raises(ValueError, match="max_len"):
        ops.uniform_shapes("multi_point_mutation", 3)


_UNIFORM_CHOICE = jax.jit(ops._uniform_choice)


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.lists(st.booleans(), min_size=9, max_size=9), min_size=6, max_size=6),
    st.lists(st.floats(0.0, 1.0, exclude_max=True, width=32), min_size=6, max_size=6),
)
def test_uniform_choice_is_the_kth_true_entry(rows, us):
    """Reference: the floor(u * count)-th True entry of each row (0 for a row without one)."""
    mask = np.asarray(rows, bool)
    u = np.asarray(us, np.float32)
    idx, has = _UNIFORM_CHOICE(jnp.asarray(u), jnp.asarray(mask))
    for r in range(len(rows)):
        trues = np.flatnonzero(mask[r])
        assert bool(has[r]) == (trues.size > 0)
        if trues.size:
            k = min(int(np.floor(np.float32(u[r]) * np.float32(trues.size))), trues.size - 1)
            assert int(idx[r]) == trues[k]
        else:
            assert int(idx[r]) == 0


# ---- the fused passes the strategy runs: mixed kinds equal each kind's operator on its rows ---------

_ST_COUNTS, _IP_COUNTS = (2, 1, 2, 1), (1, 2, 2, 1)  # POP = 6 rows each


def _fused(draws, a):
    """Both fused passes on ``a``, row block ``k`` given the uniforms operator ``k`` drew for those
    rows (``draws``: each operator's draws for all POP rows, as in ``_keyed_and_predrawn``)."""
    cols = lambda x, lo, n: x[..., lo : lo + n]  # noqa: E731
    lo = np.cumsum((0,) + _ST_COUNTS)
    names = [k + "_mutation" for k in ops.STRUCTURAL]
    u = jnp.concatenate([cols(draws[m][0], lo[i], n) for i, (m, n) in enumerate(zip(names, _ST_COUNTS))], 1)
    sub_u = cols(draws["subtree_mutation"][1], lo[0], _ST_COUNTS[0])
    ins_u = cols(draws["insert_mutation"][1], lo[2], _ST_COUNTS[2])
    st = ops.structural_mutations([u, sub_u, ins_u], a, _ST_COUNTS, FS, SUB_GEN, INS_GEN)
    lo = np.cumsum((0,) + _IP_COUNTS)
    names = [k + "_mutation" for k in ops.INPLACE]
    u = jnp.concatenate([draws[m][0][lo[i] : lo[i] + n] for i, (m, n) in enumerate(zip(names, _IP_COUNTS))])
    ip = ops.inplace_mutations(u, a, _IP_COUNTS, FS, N_VARS, 0.3, 0.5, (-1, 1), 0.5, 0.5)
    return st, ip


@settings(max_examples=2, deadline=None)
@given(forests(POP, L, n_outputs=2), st.integers(0, 2**31 - 1))
def test_fused_passes_equal_each_operator_on_its_rows(rec, seed):
    """A pass over mixed row kinds is, row block by row block, the operator of that kind (which the
    tests above check against the pointer-tree references) on the same uniforms."""
    (a, _), key = rec, jax.random.key(seed)
    ops_out, fused = _keyed_and_predrawn(key, a, a)
    for (out, ok), kinds, counts in zip(fused, (ops.STRUCTURAL, ops.INPLACE), (_ST_COUNTS, _IP_COUNTS)):
        out.check(FS, n_vars=N_VARS, n_outputs=2)
        lo = 0
        for kind, n in zip(kinds, counts):
            name = kind + "_mutation"
            _, (want, ok_want) = ops_out[name]
            for field in ("opcode", "value", "size", "output"):
                got = np.asarray(getattr(out, field))[lo : lo + n]
                np.testing.assert_array_equal(
                    got, getattr(want, field)[lo : lo + n], err_msg=f"{name}.{field}"
                )
            np.testing.assert_array_equal(np.asarray(ok)[lo : lo + n], ok_want[lo : lo + n], err_msg=name)
            lo += n


def test_fused_pass_arguments():
    a = Forest.from_tuples([("var", 0)] * 3, L, FS)
    with pytest.raises(ValueError, match="counts"):
        ops.structural_uniform_shapes((1, 2, 0))
    with pytest.raises(ValueError, match="generator"):
        ops.structural_uniform_shapes((1, 0, 0, 0))
    with pytest.raises(ValueError, match="sum to 2"):
        ops.structural_mutations([jnp.zeros((2, 2))], a, (0, 1, 0, 1), FS)
    # a (2, 1) draw would broadcast one position to every row: rejected, as is a wrong count
    for bad in ([jnp.zeros((2, 1))], [jnp.zeros((5, 6))], [jnp.zeros((2, 3)), jnp.zeros((2, 3))]):
        with pytest.raises(ValueError, match="uniforms must have shapes"):
            ops.structural_mutations(bad, a, (0, 2, 0, 1), FS)
    with pytest.raises(ValueError, match="summing to 3"):
        ops.inplace_mutations(jnp.zeros((3, L)), a, (1, 1, 0, 0), FS, N_VARS)
    with pytest.raises(ValueError, match="u must have shape"):
        ops.inplace_mutations(jnp.zeros((3, 2)), a, (1, 1, 1, 0), FS, N_VARS)


@pytest.mark.parametrize("L", [1, 31, 32, 33, 64, 100])
def test_uniform_choice_from_packed_words_equals_running_counts(L):
    # the choice of the (k+1)-th True slot from population counts of packed words picks the slot
    # the running-count product picks (kept for rows longer than 256), empty rows included
    rng = np.random.default_rng(L)
    for p in (0.0, 0.05, 0.5, 1.0):
        mask = rng.random((40, L)) < p
        u = rng.random(40).astype(np.float32)
        u[:2] = [0.0, np.nextafter(np.float32(1), np.float32(0))]
        got = jax.jit(ops._uniform_choice)(u, mask)
        want = jax.jit(ops._uniform_choice_dot)(u, mask)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
