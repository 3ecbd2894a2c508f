"""Indexing every leaf (``t[idx]``, ``evotensor.tree.index``): the one-call JAX path against the
obvious reference, eager ``leaf[idx]`` on each leaf."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import evotensor.tree as tt
from evotensor.tree import Tree
from evotensor.tree import _core as ix


def _tree():
    # JAX leaves of different ranks and dtypes, plus a NumPy leaf (indexed directly)
    return Tree(
        a=jnp.arange(24.0).reshape(4, 6),
        x={"c": jnp.arange(4 * 3 * 2, dtype=jnp.int32).reshape(4, 3, 2), "n": np.arange(8.0).reshape(4, 2)},
    )


def _leaves_with_paths(t, path=()):
    for k, v in t.items():
        if isinstance(v, Tree):
            yield from _leaves_with_paths(v, (*path, k))
        else:
            yield (*path, k), v


def _assert_matches_eager(t, idx):
    out = t[idx]
    got = dict(_leaves_with_paths(out))
    for path, leaf in _leaves_with_paths(t):
        ref = leaf[idx]  # the reference: eager indexing of this one leaf
        assert type(got[path]) is type(ref), path
        assert got[path].shape == ref.shape and got[path].dtype == ref.dtype, path
        np.testing.assert_array_equal(np.asarray(got[path]), np.asarray(ref))


INDEXES = [
    0,
    3,
    -1,
    -4,
    7,  # out of bounds: JAX would clamp, the tree raises as NumPy does (naming the leaf)
    -9,
    np.int64(2),
    slice(None, 2),
    slice(1, None, 2),
    slice(None, None, -1),
    (1, slice(None)),
    (slice(None), 0),
    (Ellipsis, 0),
    (None, 2),
    (0, None, Ellipsis),
    np.array([0, 3, 1]),
    jnp.array([[0, 1], [2, 3]]),
    np.array([True, False, True, False]),  # boolean mask: leaf by leaf
    (np.array([0, 2]), 1),
]


@pytest.mark.parametrize("idx", INDEXES, ids=repr)
def test_index_equals_eager_per_leaf(idx):
    t = _tree()
    jax_only = Tree(a=t.a, x={"c": t.x.c})
    try:
        t.x.n[idx]
    except IndexError:  # out of range for NumPy: the JAX leaves raise too, naming a leaf path
        with pytest.raises(
            IndexError, match=r"out of bounds for axis \d with size \d+ of the leaf at (a|x\.c)"
        ):
            jax_only[idx]
    else:
        _assert_matches_eager(jax_only, idx)
    try:
        t.x.n[idx]
    except IndexError:  # NumPy raises out of bounds (JAX clamps): so must the tree, naming the leaf
        with pytest.raises(IndexError) as info:
            t[idx]
        assert any("x.n" in n for n in info.value.__notes__)
    else:
        _assert_matches_eager(t, idx)


def test_all_jax_leaves_in_one_call_and_ints_do_not_recompile(monkeypatch):
    calls = []
    real = ix._jit_index

    def counting(leaves, operands, spec):
        calls.append(len(leaves))
        return real(leaves, operands, spec)

    monkeypatch.setattr(ix, "_jit_index", counting)
    t = _tree()
    t[1]
    assert calls == [2]  # the two JAX leaves together; the NumPy leaf indexed directly
    monkeypatch.setattr(ix, "_jit_index", real)
    t[0]
    size = real._cache_size()
    for i in range(-4, 4):  # integers are operands, not part of the compiled program
        t[i]
    long = Tree(a=jnp.arange(3000.0), x={"c": jnp.arange(3000)})
    long[0]
    size = real._cache_size()
    long[2000]  # beyond the cached device scalars: a plain operand, the same program
    assert real._cache_size() == size


def test_index_function_axes_match_eager():
    t = _tree()
    for axis, idx in ((0, 2), (1, 1), (-1, 0), (1, np.array([0, 1]))):
        out = tt.index(t, idx, axis=axis)
        for path, leaf in _leaves_with_paths(t):
            ax = axis if axis >= 0 else leaf.ndim + axis
            ref = leaf[(slice(None),) * ax + (idx,)]
            np.testing.assert_array_equal(np.asarray(out[path[0]] if len(path) == 1 else out.x[path[1]]), ref)


def test_error_names_the_leaf_path():
    t = Tree(a=jnp.ones((3, 2)), x={"v": jnp.ones(3)})
    with pytest.raises(IndexError) as info:
        t[0, 1]
    assert any("x.v" in n for n in info.value.__notes__), info.value.__notes__
    with pytest.raises(TypeError) as info:
        t[1.5]
    assert any("leaf at" in n for n in info.value.__notes__)


def test_inside_jit_and_closed_over_constants():
    t = _tree()
    f = jax.jit(lambda t, i: t[i])  # traced leaves: indexed leaf by leaf, inside the trace
    assert tt.equal(f(t, 2), t[2])
    g = jax.jit(lambda y: t[-3].a + y)  # concrete leaves inside a trace: no tracer may be cached
    np.testing.assert_array_equal(g(1.0), t.a[-3] + 1.0)
    assert not any(isinstance(v, jax.core.Tracer) for v in ix._INT_OPERANDS.values())
    _assert_matches_eager(t, -3)


def test_constraints_are_derived_on_the_one_call_path():
    t = Tree(a=jnp.ones((4, 3), jnp.float32), b=jnp.zeros((4, 3, 2), jnp.float32)).with_constraints(
        tt.shape_prefix(4, 3), tt.dtype("float32")
    )
    assert t[0].constraints == (tt.shape_prefix(3), tt.dtype("float32"))
    assert t[1:3].constraints == (tt.shape_prefix(2, 3), tt.dtype("float32"))


@settings(max_examples=25, deadline=None)
@given(
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    items=st.lists(
        st.one_of(
            st.integers(-6, 6),
            st.builds(slice, st.none() | st.integers(-5, 5), st.none() | st.integers(-5, 5)),
        ),
        min_size=1,
        max_size=3,
    ),
)
def test_random_int_and_slice_indexes_match_eager(shape, items):
    """Against NumPy's indexing (the reference for concrete leaves): equal results, and an
    IndexError wherever NumPy raises one (out of range or too many indices), never JAX's clamp."""
    idx = tuple(items)
    leaf = jnp.arange(int(np.prod(shape)), dtype=jnp.float32).reshape(shape)
    t = Tree(p=leaf, q={"r": leaf * 2})
    try:
        ref = np.asarray(leaf)[idx]
    except IndexError:
        with pytest.raises(IndexError):
            t[idx]
        return
    out = t[idx]
    np.testing.assert_array_equal(out.p, ref)
    np.testing.assert_array_equal(out.q.r, ref * 2)
