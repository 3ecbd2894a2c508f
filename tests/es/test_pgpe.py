"""PGPE + ClipUp: mean-gradient unbiasedness, sigma-gradient closed form, argument errors (its
contract is a row of :data:`tests.es.test_contract.GRADIENT`)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from tests.es.es_fdg_helpers import assert_unbiased, mean_and_stderr, sphere

from evotensor.es import PGPE
from evotensor.es.core.gradient_es import identity_shaping
from evotensor.es.pgpe import pgpe_gradients


def test_mean_gradient_unbiased_on_linear_function():
    """E[g_mean] = sigma^2 * a for f(x) = a.x, identity shaping (PGPE's parameterization)."""
    a = jnp.array([1.0, -2.0, 0.5, 3.0])
    sigma = jnp.array([0.1, 0.2, 0.3, 0.05])
    es = PGPE(
        64,
        jnp.array([0.5, -1.0, 2.0, 0.0]),
        optimizer=optax.sgd(1.0),
        sigma_init=1.0,
        fitness_shaping=identity_shaping,
    )

    @jax.jit
    def estimate(key):
        state = es.init(key)
        state = state.replace(sigma=sigma)
        x, state = es.ask(key, state)
        new, _ = es.tell(key, state, x, x @ a)
        return state.mean - new.mean

    g = np.asarray(jax.vmap(estimate)(jax.random.split(jax.random.key(1), 1000)))
    assert_unbiased(g, np.asarray(sigma**2 * a))


def test_sigma_gradient_closed_form_on_quadratic():
    """E[g_sigma] = A_ii sigma_i^3 for f(x) = 1/2 sum A_ii x_i^2 at mean 0 (identity shaping)."""
    rng = np.random.default_rng(0)
    A = np.array([1.0, 4.0, 0.5])
    sigma = np.array([0.5, 0.2, 1.0])
    n, reps = 200, 400
    gs = []
    for _ in range(reps):
        eps = rng.normal(size=(n // 2, 3)) * sigma
        x = np.concatenate([eps, -eps])
        f = 0.5 * (x**2) @ A
        _, g_sigma = pgpe_gradients(
            jnp.asarray(x, jnp.float32),
            jnp.asarray(f, jnp.float32),
            jnp.zeros(3),
            jnp.asarray(sigma, jnp.float32),
        )
        gs.append(np.asarray(g_sigma))
    mean, se = mean_and_stderr(np.stack(gs))
    expected = A * sigma**3
    assert np.all(np.abs(mean - expected) < 5 * se + 1e-3 * expected), (mean, expected, se)


def test_sigma_change_is_clipped_and_floored():
    es = PGPE(8, num_dims=3, sigma_init=1.0, sigma_learning_rate=100.0, sigma_max_change=0.2)
    state = es.init(jax.random.key(0))
    x, state = es.ask(jax.random.key(1), state)
    new, _ = es.tell(jax.random.key(2), state, x, sphere(x))
    ratio = np.asarray(new.sigma / state.sigma)
    assert np.all(ratio >= 0.8 - 1e-6) and np.all(ratio <= 1.2 + 1e-6)


def test_validation_errors():
    with pytest.raises(ValueError, match="even population_size"):
        PGPE(5, num_dims=2)
    with pytest.raises(ValueError, match="sigma_init"):
        PGPE(4, num_dims=2, sigma_init=0.0)
    with pytest.raises(ValueError, match="sigma_max_change"):
        PGPE(4, num_dims=2, sigma_max_change=1.5)
    with pytest.raises(TypeError, match="optimizer"):
        PGPE(4, num_dims=2, optimizer=object())
