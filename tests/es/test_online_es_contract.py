"""The contract shared by the online (truncated-unroll) strategies, Persistent ES and Noise-Reuse ES:
they solve a 10-d sphere with two NaN/inf members per generation, stay finite for 3,000 float32
generations past convergence, and vmap over seeds and ``sigma_init`` equals separate runs. Each
strategy's window bookkeeping and unbiasedness tests live in its own module."""

import jax
import jax.numpy as jnp
import optax
import pytest
from tests.es.es_fdg_helpers import (
    assert_finite_tree,
    check_vmap_matches_separate,
    make_runner,
    sphere,
    stack_params,
)

from evotensor.core.fitness_shaping import centered_ranks
from evotensor.es import NoiseReuseES, PersistentES

X0 = jnp.full(10, 3.0)
# (strategy, per-generation decay of the learning rate and sigma in the 3,000-generation run)
ONLINE = pytest.mark.parametrize(
    "strategy, long_decay", [(PersistentES, 0.99), (NoiseReuseES, 0.98)], ids=["PES", "NRES"]
)


def decay(v):
    return optax.exponential_decay(v, 1, 0.99, end_value=1e-5)


@ONLINE
def test_solves_10d_sphere_despite_nonfinite_fitness(strategy, long_decay):
    """Tolerance: f(mean) < 1e-6 after 1000 generations of 40, two NaN/inf members per generation.

    Configuration: T=100, K=10; Adam and sigma decaying 1%/generation, centered ranks.
    """
    es = strategy(
        40, X0, optimizer=optax.adam(decay(0.1)), sigma_schedule=decay(0.3), fitness_shaping=centered_ranks
    )
    state, _ = make_runner(es, nonfinite=True)(jax.random.key(0), es.default_params(), 1000)
    assert_finite_tree(state)
    assert float(sphere(state.mean)) < 1e-6


@pytest.mark.slow
@ONLINE
def test_float32_3000_generations_past_convergence_stay_finite(strategy, long_decay):
    es = strategy(
        32,
        jnp.full(30, 1.0),
        optimizer=optax.adam(optax.exponential_decay(0.05, 1, long_decay)),
        sigma_schedule=optax.exponential_decay(0.3, 1, long_decay),
        fitness_shaping=centered_ranks,
    )
    state, metrics = make_runner(es)(jax.random.key(0), es.default_params(), 3000)
    assert state.mean.dtype == jnp.float32
    assert_finite_tree(state)
    assert_finite_tree(metrics)
    assert float(sphere(state.mean)) < 1e-3


@pytest.mark.slow
@ONLINE
def test_vmap_over_seeds_and_a_hyperparameter_equals_separate_runs(strategy, long_decay):
    es = strategy(20, X0, optimizer=optax.adam(0.05), fitness_shaping=centered_ranks, T=20, K=5)
    run = make_runner(es, nonfinite=True)
    params = stack_params(es.default_params(), sigma_init=[0.3, 0.1, 0.5])
    check_vmap_matches_separate(es, run, params, jax.random.split(jax.random.key(3), 3), 25)
