"""Persistent ES: window bookkeeping and an unbiased estimate within a window.

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

from evotensor.es import PersistentES
from evotensor.es.core.gradient_es import identity_shaping


def test_accumulates_perturbations_and_resets_every_window():
    es = PersistentES(4, num_dims=2, sigma_init=0.1, T=6, K=2)  # windows of 3 generations
    state = es.init(jax.random.key(0))
    total = jnp.zeros((2, 2))
    for g in range(7):
        x, state = es.ask(jax.random.key(g), state)
        eps = (x[:2] - x[2:]) / 2
        total = eps if g % 3 == 0 else total + eps
        np.testing.assert_allclose(np.asarray(state.perturbation), np.asarray(total), rtol=1e-5, atol=1e-7)
        state, _ = es.tell(jax.random.key(g), state, x, sphere(x))
        assert int(state.inner_step) == 2 * ((g + 1) % 3)


@pytest.mark.slow
def test_unbiased_on_linear_function_within_a_window():
    """Second partial unroll of a window: E[g] = a for a static linear loss (identity shaping)."""
    a = jnp.array([1.0, -2.0, 0.5])
    es = PersistentES(
        64,
        jnp.array([0.5, -1.0, 2.0]),
        optimizer=optax.sgd(1.0),
        sigma_init=0.1,
        fitness_shaping=identity_shaping,
        T=4,
        K=2,
    )

    @jax.jit
    def estimate(key):
        k1, k2 = jax.random.split(key)
        state = es.init(key)
        x, state = es.ask(k1, state)
        state, _ = es.tell(k1, state, x, x @ a)
        x, state = es.ask(k2, state)
        new, _ = es.tell(k2, state, x, x @ a)
        return state.mean - new.mean

    g = np.asarray(jax.vmap(estimate)(jax.random.split(jax.random.key(1), 1000)))
    assert_unbiased(g, a, power=0.2)


def test_validation_errors():
    with pytest.raises(ValueError, match="multiple of K"):
        PersistentES(4, num_dims=2, T=10, K=3)
    with pytest.raises(ValueError, match="even population_size"):
        PersistentES(5, num_dims=2)
    with pytest.raises(ValueError, match="K must be an int"):
        PersistentES(4, num_dims=2, K=0)
