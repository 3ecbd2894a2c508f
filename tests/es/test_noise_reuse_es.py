"""Noise-Reuse ES: noise reuse within windows, unbiasedness, argument errors.

Its contract (sphere, stability, vmap) is a row of :data:`tests.es.test_contract.GRADIENT`."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from tests.es.es_fdg_helpers import (
    assert_unbiased,
    sphere,
)

from evotensor.es import NoiseReuseES
from evotensor.es.core.gradient_es import identity_shaping


def test_noise_is_reused_within_a_window_and_redrawn_after():
    es = NoiseReuseES(4, num_dims=2, sigma_init=0.1, T=6, K=2)
    state = es.init(jax.random.key(0))
    seen = []
    for g in range(6):
        x, state = es.ask(jax.random.key(g), state)
        seen.append(np.asarray((x[:2] - x[2:]) / 2))
        state, _ = es.tell(jax.random.key(g), state, x, sphere(x))
    np.testing.assert_allclose(seen[0], seen[1], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(seen[0], seen[2], rtol=1e-5, atol=1e-7)
    assert not np.allclose(seen[2], seen[3])
    np.testing.assert_allclose(seen[3], seen[5], rtol=1e-5, atol=1e-7)


@pytest.mark.slow
def test_unbiased_on_linear_function():
    a = jnp.array([1.0, -2.0, 0.5])
    es = NoiseReuseES(
        64,
        jnp.array([0.5, -1.0, 2.0]),
        optimizer=optax.sgd(1.0),
        sigma_init=0.1,
        fitness_shaping=identity_shaping,
        T=2,
        K=2,
    )

    @jax.jit
    def estimate(key):
        state = es.init(key)
        x, state = es.ask(key, state)
        new, _ = es.tell(key, state, x, x @ a)
        return state.mean - new.mean

    g = np.asarray(jax.vmap(estimate)(jax.random.split(jax.random.key(1), 1000)))
    assert_unbiased(g, a)


def test_validation_errors():
    with pytest.raises(ValueError, match="multiple of K"):
        NoiseReuseES(4, num_dims=2, T=7, K=2)
