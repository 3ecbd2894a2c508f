import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.gp.tree_helpers import FS, N_VARS, count, forests, replace, subtree

from evotensor.gp.encoding import Forest
from evotensor.gp.exchange import exchange

POP, L, LD = 6, 24, 16
_exchange = jax.jit(exchange)


@settings(max_examples=30, deadline=None)
@given(
    forests(POP, L, n_outputs=2),
    forests(POP, LD, n_outputs=2),
    st.lists(st.floats(0, 0.999), min_size=POP, max_size=POP),
    st.lists(st.floats(0, 0.999), min_size=POP, max_size=POP),
)
def test_exchange_equals_pointer_tree_reference(rec, don, up, uq):
    recipients, r_trees = rec
    donors, d_trees = don
    p = [int(u * count(t)) for u, t in zip(up, r_trees)]
    q = [int(u * count(t)) for u, t in zip(uq, d_trees)]
    out, ok = _exchange(recipients, jnp.asarray(p), donors, jnp.asarray(q))
    out.check(FS, n_vars=N_VARS, n_outputs=2)
    got = out.to_tuples(FS)
    for j in range(POP):
        expected = replace(r_trees[j], p[j], subtree(d_trees[j], q[j]))
        if count(expected) <= L:
            assert bool(ok[j]) and got[j] == expected
        else:  # over the length cap: the recipient, unchanged, flagged
            assert not bool(ok[j]) and got[j] == r_trees[j]


@settings(max_examples=15, deadline=None)
@given(forests(POP, L), st.lists(st.integers(-3, L + 3), min_size=POP, max_size=POP))
def test_positions_outside_the_tree_leave_it_unchanged(rec, pos):
    forest, ts = rec
    out, ok = _exchange(forest, jnp.asarray(pos), forest, jnp.zeros(POP, jnp.int32))
    for j in range(POP):
        inside = 0 <= pos[j] < count(ts[j])
        if not inside:
            assert not bool(ok[j])
            assert out[j].to_tuples(FS) == ts[j]


def test_length_cap_by_hand():
    big = ("add", ("mul", ("var", 0), ("var", 1)), ("sub", ("var", 2), ("const", 1.0)))  # 7 nodes
    r = Forest.from_tuples([("neg", ("var", 0)), ("neg", ("var", 0))], 8, FS)
    d = Forest.from_tuples([big, big], 8, FS)
    out, ok = exchange(r, jnp.array([1, 0]), d, jnp.array([0, 0]))
    # slot 0: neg(big) has 8 nodes (fits); slot 1: big replaces the root (7 nodes)
    assert ok.tolist() == [True, True]
    assert out.to_tuples(FS) == [("neg", big), big]
    r2 = Forest.from_tuples([("add", ("var", 0), ("var", 1))], 8, FS)
    out, ok = exchange(r2, jnp.array([1]), d[:1], jnp.array([0]))  # 3 - 1 + 7 = 9 > 8
    assert ok.tolist() == [False] and out.to_tuples(FS) == [("add", ("var", 0), ("var", 1))]
    np.testing.assert_array_equal(np.asarray(out.size), np.asarray(r2.size))


def test_exchange_validates_shapes():
    f = Forest.from_tuples([("var", 0)] * 3, 4, FS)
    with pytest.raises(ValueError, match="donors has 2 trees"):
        exchange(f, jnp.zeros(3, int), f[:2], jnp.zeros(2, int))
    with pytest.raises(ValueError, match="positions must have shape"):
        exchange(f, jnp.zeros(2, int), f, jnp.zeros(3, int))
    with pytest.raises(ValueError, match=r"\[pop, max_len\]"):
        exchange(f[0], jnp.zeros(3, int), f, jnp.zeros(3, int))


def test_rejections_are_flagged_and_counted_exactly_at_the_length_cap():
    # recipient add(x0, x1) (3 nodes, cap 8); its leaf x0 (node 1) is replaced by a donor of size s:
    # the result has 2 + s nodes, so donors of up to 6 nodes fit and 7 (and 8) do not
    def comb(n_add):  # left comb of n_add additions: 2 * n_add + 1 nodes
        t = ("var", 0)
        for _ in range(n_add):
            t = ("add", t, ("var", 2))
        return t

    donors_t = [("var", 1), comb(1), ("neg", comb(2)), comb(3), ("neg", comb(3)), comb(2), ("neg", comb(2))]
    sizes = [count(t) for t in donors_t]
    assert sizes == [1, 3, 6, 7, 8, 5, 6]
    n = len(donors_t)
    recipient = ("add", ("var", 0), ("var", 1))
    r = Forest.from_tuples([recipient] * n, 8, FS)
    d = Forest.from_tuples(donors_t, 8, FS)
    out, ok = _exchange(r, jnp.ones(n, jnp.int32), d, jnp.zeros(n, jnp.int32))
    fits = np.array([2 + s <= 8 for s in sizes])
    np.testing.assert_array_equal(np.asarray(ok), fits)
    assert int(jnp.sum(~ok)) == 2  # the count a strategy reports: the two over-long results only
    out.check(FS, n_vars=N_VARS)
    got = out.to_tuples(FS)
    for j in range(n):
        expected = ("add", donors_t[j], ("var", 1)) if fits[j] else recipient
        assert got[j] == expected
    np.testing.assert_array_equal(np.asarray(out.length), np.where(fits, [2 + s for s in sizes], 3))


def test_values_move_bit_for_bit():
    # the donor's constants arrive, and a rejected row keeps its own, with their exact bits (-0.0,
    # inf, a NaN with a payload): the exchange only moves slots, it never computes with values
    nan = np.frombuffer(np.uint32(0x7FC01234).tobytes(), np.float32)[0]
    r = Forest.from_tuples([("add", ("const", -0.0), ("var", 0))] * 2, 8, FS)
    d = Forest.from_tuples([("mul", ("const", 1.0), ("const", 2.0))] * 2, 8, FS)
    d = d.replace(value=d.value.at[:, 1].set(nan).at[:, 2].set(-np.inf))
    out, ok = exchange(r, jnp.array([2, 9]), d, jnp.array([0, 0]))  # row 1: position outside
    assert ok.tolist() == [True, False]
    bits = lambda a: np.asarray(a).view(np.uint32)  # noqa: E731
    expected = jnp.concatenate([r.value[0, :2], d.value[0, :3]])  # add(-0.0, mul(NaN, -inf))
    np.testing.assert_array_equal(bits(out.value[0, :5]), bits(expected))
    np.testing.assert_array_equal(bits(out.value[1]), bits(r.value[1]))
    assert bits(out.value[0, 1]) == bits(np.float32(-0.0))


def test_fields_of_other_widths_take_the_per_field_gathers():
    # the 4-wide gather needs 32-bit fields; a forest with float16 constants is exchanged field by
    # field, with the same result as its float32 twin
    r = Forest.from_tuples([("add", ("const", 0.5), ("var", 0))] * 3, 8, FS)
    d = Forest.from_tuples([("mul", ("const", 1.5), ("const", -2.0))] * 3, 8, FS)
    p, q = jnp.array([1, 2, 9]), jnp.array([0, 1, 0])
    want, ok32 = exchange(r, p, d, q)
    half = lambda f: f.replace(value=f.value.astype(jnp.float16))  # noqa: E731
    got, ok16 = exchange(half(r), p, half(d), q)
    assert got.value.dtype == jnp.float16 and ok16.tolist() == ok32.tolist() == [True, True, False]
    np.testing.assert_array_equal(np.asarray(got.value, np.float32), np.asarray(want.value))
    for name in ("opcode", "size", "output"):
        np.testing.assert_array_equal(np.asarray(getattr(got, name)), np.asarray(getattr(want, name)))


def test_one_gather_for_all_fields():
    # program size and run time: the four fields are read side by side by one gather of 4-wide rows
    # from a shared source index, plus the two subtree-size lookups; a gather per field and side
    # (10) made this the variation's largest compiled piece, and a gather per field (6) made the
    # crossover's exchange twice as slow on a CPU (XLA's gathers cost per index)
    f = Forest.empty(5, 16)
    text = jax.jit(exchange).lower(f, jnp.zeros(5, jnp.int32), f, jnp.zeros(5, jnp.int32)).as_text()
    assert text.count('"stablehlo.gather"') == 3
