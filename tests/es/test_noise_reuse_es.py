"""Noise-Reuse ES: sphere, noise reuse within windows, unbiasedness, stability, vmap."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from tests.es.es_fdg_helpers import (
    assert_finite_tree,
    assert_unbiased,
    check_vmap_matches_separate,
    make_runner,
    sphere,
    stack_params,
)

from evotensor.core.fitness_shaping import centered_ranks
from evotensor.es import NoiseReuseES
from evotensor.es.gradient_es import identity_shaping

X0 = jnp.full(10, 3.0)


def decay(v):
    return optax.exponential_decay(v, 1, 0.99, end_value=1e-5)


@pytest.fixture(scope="module")
def sphere_setup():
    es = NoiseReuseES(
        40, X0, optimizer=optax.adam(decay(0.1)), sigma_schedule=decay(0.3), fitness_shaping=centered_ranks
    )
    return es, make_runner(es, nonfinite=True)


def test_solves_10d_sphere_despite_nonfinite_fitness(sphere_setup):
    """Tolerance: f(mean) < 1e-6 after 1000 generations of 40, two NaN/inf members per generation.

    Configuration: T=100, K=10; Adam and sigma decaying 1%/generation, centered ranks.
    """
    es, run = sphere_setup
    state, _ = run(jax.random.key(0), es.default_params(), 1000)
    assert_finite_tree(state)
    assert float(sphere(state.mean)) < 1e-6


@pytest.mark.slow
def test_float32_3000_generations_past_convergence_stay_finite():
    es = NoiseReuseES(
        32,
        jnp.full(30, 1.0),
        optimizer=optax.adam(optax.exponential_decay(0.05, 1, 0.98)),
        sigma_schedule=optax.exponential_decay(0.3, 1, 0.98),
        fitness_shaping=centered_ranks,
    )
    state, metrics = make_runner(es)(jax.random.key(0), es.default_params(), 3000)
    assert state.mean.dtype == jnp.float32
    assert_finite_tree(state)
    assert_finite_tree(metrics)
    assert float(sphere(state.mean)) < 1e-3


@pytest.mark.slow
def test_vmap_over_seeds_and_a_hyperparameter_equals_separate_runs():
    es = NoiseReuseES(20, X0, optimizer=optax.adam(0.05), fitness_shaping=centered_ranks, T=20, K=5)
    run = make_runner(es, nonfinite=True)
    params = stack_params(es.default_params(), sigma_init=[0.3, 0.1, 0.5])
    check_vmap_matches_separate(es, run, params, jax.random.split(jax.random.key(3), 3), 25)


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
