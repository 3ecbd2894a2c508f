"""MLP / CNN policies against explicit NumPy loops, and the identity decoder."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evotensor.core.strategy import SolutionSpace
from evotensor.problems.networks import ParamsDecoder, cnn_apply, init_cnn, init_mlp, mlp_apply


def np_mlp(params, x, hidden=np.tanh, last=lambda v: v):
    h = np.asarray(x, np.float64)
    for i, layer in enumerate(params):
        w, b = np.asarray(layer["w"], np.float64), np.asarray(layer["b"], np.float64)
        out = np.zeros(w.shape[1])
        for j in range(w.shape[1]):
            out[j] = sum(h[k] * w[k, j] for k in range(w.shape[0])) + b[j]
        h = last(out) if i == len(params) - 1 else hidden(out)
    return h


def np_conv_same(img, w, b):
    """SAME cross-correlation (what lax.conv computes), one output pixel at a time."""
    height, width, c_in = img.shape
    k = w.shape[0]
    pad = (k - 1) // 2
    out = np.zeros((height, width, w.shape[3]))
    for i in range(height):
        for j in range(width):
            for o in range(w.shape[3]):
                total = b[o]
                for di in range(k):
                    for dj in range(k):
                        ii, jj = i + di - pad, j + dj - pad
                        if 0 <= ii < height and 0 <= jj < width:
                            total += sum(img[ii, jj, c] * w[di, dj, c, o] for c in range(c_in))
                out[i, j, o] = total
    return out


def np_maxpool(img):
    height, width, c = img.shape
    out = np.zeros((height // 2, width // 2, c))
    for i in range(height // 2):
        for j in range(width // 2):
            out[i, j] = img[2 * i : 2 * i + 2, 2 * j : 2 * j + 2].max(axis=(0, 1))
    return out


def np_cnn(params, img):
    h = np.asarray(img, np.float64)
    for layer in params["conv"]:
        h = np_conv_same(h, np.asarray(layer["w"], np.float64), np.asarray(layer["b"], np.float64))
        h = np_maxpool(np.maximum(h, 0.0))
    return np_mlp(params["dense"], h.reshape(-1), hidden=lambda v: np.maximum(v, 0.0))


def test_init_mlp_shapes():
    params = init_mlp(jax.random.key(0), (4, 16, 8, 2))
    assert [p["w"].shape for p in params] == [(4, 16), (16, 8), (8, 2)]
    assert [p["b"].shape for p in params] == [(16,), (8,), (2,)]
    assert all(p["w"].dtype == jnp.float32 for p in params)
    assert all(np.all(np.asarray(p["b"]) == 0) for p in params)
    # LeCun scaling: weight std ~ 1/sqrt(fan_in).
    big = init_mlp(jax.random.key(1), (400, 300))
    assert abs(float(jnp.std(big[0]["w"])) * np.sqrt(400) - 1.0) < 0.05


def test_mlp_matches_numpy():
    params = init_mlp(jax.random.key(0), (5, 7, 3))
    x = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    out = np.asarray(mlp_apply(params, x))
    ref = np.stack([np_mlp(params, row) for row in x])
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    relu = np.asarray(mlp_apply(params, x, activation="relu", output_activation="sigmoid"))
    ref = np.stack([np_mlp(params, r, lambda v: np.maximum(v, 0), lambda v: 1 / (1 + np.exp(-v))) for r in x])
    np.testing.assert_allclose(relu, ref, rtol=1e-5, atol=1e-5)


def test_mlp_batch_axes_consistent():
    params = init_mlp(jax.random.key(0), (3, 4, 2))
    x = jax.random.normal(jax.random.key(1), (2, 5, 3))
    batched = mlp_apply(params, x)
    single = jax.vmap(jax.vmap(lambda v: mlp_apply(params, v)))(x)
    assert batched.shape == (2, 5, 2)
    np.testing.assert_allclose(np.asarray(batched), np.asarray(single), rtol=1e-6, atol=1e-6)


def test_cnn_matches_numpy():
    params = init_cnn(jax.random.key(0), (6, 6, 2), channels=(3, 4), dense_sizes=(5, 3))
    assert params["conv"][0]["w"].shape == (3, 3, 2, 3) and params["conv"][1]["w"].shape == (3, 3, 3, 4)
    assert params["dense"][0]["w"].shape == (1 * 1 * 4, 5)
    # Non-zero biases so that the bias path is exercised too.
    params = jax.tree.map(lambda a: a + 0.1, params)
    imgs = np.random.default_rng(1).standard_normal((2, 6, 6, 2)).astype(np.float32)
    out = np.asarray(cnn_apply(params, imgs))
    ref = np.stack([np_cnn(params, img) for img in imgs])
    assert out.shape == (2, 3)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(cnn_apply(params, imgs[0])), ref[0], rtol=1e-4, atol=1e-4)


def test_bad_arguments():
    with pytest.raises(ValueError, match="sizes"):
        init_mlp(jax.random.key(0), (4,))
    with pytest.raises(ValueError, match="sizes"):
        init_mlp(jax.random.key(0), (4, 0))
    with pytest.raises(ValueError, match="activation"):
        mlp_apply(init_mlp(jax.random.key(0), (2, 2)), jnp.ones(2), activation="swishy")
    with pytest.raises(ValueError, match="input_shape"):
        init_cnn(jax.random.key(0), (8, 8))
    with pytest.raises(ValueError, match="too small"):
        init_cnn(jax.random.key(0), (2, 2, 1), channels=(4, 4))
    with pytest.raises(TypeError, match="apply_fn"):
        ParamsDecoder("mlp")


def test_params_decoder_identity_and_kwargs():
    params = init_mlp(jax.random.key(0), (3, 4, 2))
    pop = jax.tree.map(lambda a: jnp.stack([a, 2 * a]), params)
    dec = ParamsDecoder(mlp_apply, activation="relu")
    assert dec.decode(pop) is pop
    x = jnp.ones(3)
    np.testing.assert_allclose(
        np.asarray(dec.apply(params, x)), np.asarray(mlp_apply(params, x, activation="relu")), rtol=1e-6
    )
    assert hash(dec) == hash(ParamsDecoder(mlp_apply, activation="relu"))


@settings(max_examples=4, deadline=None)
@given(sizes=st.lists(st.integers(1, 5), min_size=2, max_size=4), seed=st.integers(0, 2**16))
def test_solution_space_roundtrip_preserves_policy(sizes, seed):
    """A strategy's flat vector <-> parameter pytree round trip leaves the network unchanged."""
    params = init_mlp(jax.random.key(seed), sizes)
    space = SolutionSpace(params)
    assert space.num_dims == sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))
    pop = space.unravel_population(jnp.stack([space.template, space.template + 1.0]))
    x = jnp.linspace(-1.0, 1.0, sizes[0])
    first = jax.tree.map(lambda a: a[0], pop)
    np.testing.assert_allclose(np.asarray(mlp_apply(first, x)), np.asarray(mlp_apply(params, x)), rtol=1e-6)
    flat = np.asarray(space.ravel_population(pop)[1])
    np.testing.assert_array_equal(flat, np.asarray(space.template + 1.0))
