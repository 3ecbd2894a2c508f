import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from evotensor.core import centered_ranks, normalize, ranks, weight_decay, z_score

# XLA flushes float32 subnormals to zero (so 1e-43 and 0.0 tie inside a jitted sort while NumPy
# orders them); the ranking contract is stated for normal floats.
vectors = st.lists(st.floats(-1e6, 1e6, width=32, allow_subnormal=False), min_size=2, max_size=30)


@given(vectors)
def test_ranks_match_a_python_sort(values):
    expected = np.empty(len(values), int)
    order = sorted(range(len(values)), key=lambda i: (np.float32(values[i]), i))
    for rank, i in enumerate(order):
        expected[i] = rank
    np.testing.assert_array_equal(ranks(jnp.array(values, jnp.float32)), expected)


@given(vectors)
def test_centered_ranks_span_half_interval(values):
    out = np.asarray(centered_ranks(jnp.array(values, jnp.float32)))
    assert out.min() == pytest.approx(-0.5) and out.max() == pytest.approx(0.5)
    assert out[int(np.argmin(np.array(values, np.float32)))] == pytest.approx(-0.5)


def test_nan_ranks_last():
    out = centered_ranks(jnp.array([0.0, jnp.nan, -1.0]))
    assert float(out[1]) == pytest.approx(0.5)


def test_z_score_and_normalize():
    f = jnp.array([1.0, 2.0, 3.0, 4.0])
    z = np.asarray(z_score(f))
    assert abs(z.mean()) < 1e-6 and abs(z.std() - 1) < 1e-5
    n = np.asarray(normalize(f))
    np.testing.assert_allclose(n, [0, 1 / 3, 2 / 3, 1], atol=1e-6)


def test_weight_decay_penalizes_large_solutions():
    f = jnp.zeros(2)
    x = jnp.array([[0.0, 0.0], [2.0, 2.0]])
    np.testing.assert_allclose(weight_decay(f, x, 0.1), [0.0, 0.4], rtol=1e-6)
    with pytest.raises(ValueError, match="solutions"):
        weight_decay(f, jnp.zeros((3, 2)), 0.1)


def test_shaping_rejects_matrices():
    with pytest.raises(ValueError, match="vector"):
        centered_ranks(jnp.zeros((2, 2)))


def test_z_score_is_batching_invariant():
    import jax

    f = jax.random.normal(jax.random.key(0), (5, 37)) * 1e3
    batched = jax.jit(jax.vmap(z_score))(f)
    for i in range(5):
        np.testing.assert_array_equal(jax.jit(z_score)(f[i]), batched[i])
