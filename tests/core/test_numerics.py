"""Batching-invariant arithmetic: exact sums and products against float64 references, rounded()
as an identity that blocks FMA contraction, and vmapped == separate bit for bit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from evotensor.core.numerics import (
    deterministic_segment_sum,
    exact_matmul,
    exact_matvec,
    exact_sum,
    exact_vecmat,
    rounded,
    sorted_segment_sum,
)

finite32 = st.floats(-1e3, 1e3, width=32)


# a few shapes (odd, even, length 1) so the compiled sums are reused across examples
SHAPES = st.sampled_from([(1, 1), (3, 5), (4, 8), (5, 2)])
_sum_axis = jax.jit(exact_sum, static_argnums=1)


@given(SHAPES.flatmap(lambda shape: hnp.arrays(np.float32, shape, elements=finite32)))
def test_exact_sum_matches_float64_sum_on_both_axes(x):
    for axis in (0, 1, -1):
        ref = x.astype(np.float64).sum(axis=axis)
        bound = 1e-6 * np.abs(x).astype(np.float64).sum(axis=axis) + 1e-30
        assert np.all(np.abs(np.asarray(_sum_axis(jnp.asarray(x), axis)) - ref) <= bound)


def pairwise_tree_sum(v: np.ndarray) -> np.float32:
    """The documented tree in float32, one level at a time: pad odd levels with 0, add halves."""
    v = v.astype(np.float32)
    while v.size > 1:
        if v.size % 2:
            v = np.append(v, np.float32(0))
        v = v[: v.size // 2] + v[v.size // 2 :]
    return v[0] if v.size else np.float32(0)


SHAPES_3D = st.sampled_from([(3, 5, 7), (1, 4, 2), (6, 1, 9), (2, 0, 3)])


# no partial sum may be subnormal: XLA:CPU flushes subnormals to 0, NumPy does not
normal32 = st.floats(-1e3, 1e3, width=32).filter(lambda v: v == 0 or abs(v) > 1e-20)


@given(SHAPES_3D.flatmap(lambda s: hnp.arrays(np.float32, s, elements=normal32)))
def test_exact_sum_is_the_fixed_pairwise_tree_on_every_axis_bitwise(x):
    for axis in (0, 1, 2, -1, -2):
        ours = np.asarray(_sum_axis(jnp.asarray(x), axis))
        moved = np.moveaxis(x, axis, -1)
        rows = moved.reshape(int(np.prod(moved.shape[:-1])), moved.shape[-1])
        ref = np.array([pairwise_tree_sum(v) for v in rows], np.float32)
        assert ours.dtype == np.float32 and ours.shape == moved.shape[:-1]
        assert np.array_equal(ours.reshape(-1), ref), axis


def test_exact_products_match_float64_references():
    r = np.random.default_rng(0)
    a, b = r.standard_normal((5, 7)).astype(np.float32), r.standard_normal((7, 3)).astype(np.float32)
    w, v = r.standard_normal(5).astype(np.float32), r.standard_normal(7).astype(np.float32)
    f64 = lambda t: t.astype(np.float64)
    np.testing.assert_allclose(exact_matmul(a, b), f64(a) @ f64(b), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(exact_vecmat(w, a), f64(w) @ f64(a), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(exact_matvec(a, v), f64(a) @ f64(v), rtol=1e-5, atol=1e-5)


def test_rounded_is_the_identity_including_nonfinite_and_integers():
    x = jnp.array([1.5, -0.0, jnp.inf, -jnp.inf, jnp.nan, 3e-45], jnp.float32)
    y = np.asarray(jax.jit(rounded)(x))
    np.testing.assert_array_equal(y[:4], np.asarray(x)[:4])
    assert np.isnan(y[4]) and y[5] == np.asarray(x)[5] and np.signbit(y[1])
    i = jnp.arange(4)
    assert rounded(i).dtype == i.dtype and np.array_equal(rounded(i), i)


def test_rounded_stops_fma_contraction():
    """XLA:CPU contracts ``a * b + c * d`` into FMAs (visible against numpy's two roundings under
    XLA's default options); with rounded() each product is rounded once, exactly as numpy does."""
    a, b, c, d = np.random.default_rng(1).standard_normal((4, 4096)).astype(np.float32)
    f = jax.jit(lambda a, b, c, d: rounded(a * b) + rounded(c * d))
    np.testing.assert_array_equal(np.asarray(f(a, b, c, d)), a * b + c * d)


PRODUCTS = {
    "matmul": (exact_matmul, (6, 5), (5, 4)),
    "matvec": (exact_matvec, (6, 5), (5,)),
    "vecmat": (exact_vecmat, (6,), (6, 4)),
}


@pytest.mark.parametrize("name", sorted(PRODUCTS))
def test_vmapped_products_equal_separate_ones_bitwise(name):
    fn, sa, sb = PRODUCTS[name]
    r = np.random.default_rng(2)
    a, b = r.standard_normal((3, *sa)).astype(np.float32), r.standard_normal((3, *sb)).astype(np.float32)

    # the products feed adds around them, as in a strategy's update
    def g(a, b):
        p = fn(a, b)
        return p * 0.3 + rounded(exact_sum(a.reshape(-1)) * p) + exact_sum(p**2, axis=0)

    batched = jax.jit(jax.vmap(g))(a, b)
    for i in range(3):
        np.testing.assert_array_equal(np.asarray(jax.jit(g)(a[i], b[i])), np.asarray(batched[i]))


_sorted_segment_sum = jax.jit(sorted_segment_sum, static_argnums=2)


@given(
    st.integers(0, 40).flatmap(
        lambda n: st.tuples(
            hnp.arrays(np.float32, (n, 2), elements=finite32),
            hnp.arrays(np.int32, (n,), elements=st.integers(-1, 6)),  # -1 and 6: outside 0..5, dropped
        )
    )
)
def test_sorted_segment_sum_equals_float64_segment_sums(args):
    values, segments = args
    got = np.asarray(_sorted_segment_sum(jnp.asarray(values), jnp.asarray(segments), 6))
    assert got.shape == (6, 2)
    for k in range(6):
        rows = values[segments == k].astype(np.float64)
        bound = 1e-6 * np.abs(rows).sum(axis=0) + 1e-30
        assert np.all(np.abs(got[k] - rows.sum(axis=0)) <= bound)  # 0 for an empty segment


def test_deterministic_segment_sum_is_scatter_add_on_cpu_and_repeatable():
    rng = np.random.default_rng(0)
    values = rng.normal(size=(5000, 3)).astype(np.float32)
    segments = rng.integers(0, 70, 5000).astype(np.int32)
    f = jax.jit(deterministic_segment_sum, static_argnums=2)
    first = np.asarray(f(values, segments, 70))
    np.testing.assert_array_equal(first, np.asarray(f(values, segments, 70)))  # also on a GPU
    if jax.default_backend() == "cpu":  # CPU results keep segment_sum's bits
        np.testing.assert_array_equal(
            first, np.asarray(jax.ops.segment_sum(values, segments, num_segments=70))
        )
    else:
        np.testing.assert_array_equal(first, np.asarray(_sorted_segment_sum(values, segments, 70)))
