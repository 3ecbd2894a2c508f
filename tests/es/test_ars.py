"""ARS: sphere, top-b selection, NaN safety, float32 stability, vmap."""

import jax.numpy as jnp
import numpy as np
import optax
import pytest
from tests.es import fdg_contract as fdg

from evotensor.es import ARS
from evotensor.es.ars import ars_gradient


def test_solves_10d_sphere_despite_nonfinite_fitness():
    """Tolerance: f(mean) < 1e-6 after 1000 generations of 40, two NaN/inf members per generation.

    Configuration: Adam and sigma decaying 1%/generation, b/N = 0.5.
    """
    es = ARS(40, fdg.X0, elite_ratio=0.5, **fdg.decaying_adam())
    fdg.check_solves_sphere_despite_nonfinite(es, generations=1000, tol=1e-6)


@pytest.mark.slow
def test_float32_3000_generations_past_convergence_stay_finite():
    es = ARS(
        32,
        jnp.full(30, 1.0),
        optimizer=optax.adam(optax.exponential_decay(0.05, 1, 0.98)),
        sigma_schedule=optax.exponential_decay(0.3, 1, 0.98),
        elite_ratio=0.5,
    )
    fdg.check_float32_long_run_stays_finite(es, generations=3000, tol=1e-3)


@pytest.mark.slow
def test_vmap_over_seeds_and_a_hyperparameter_equals_separate_runs():
    es = ARS(20, fdg.X0, optimizer=optax.adam(0.05), elite_ratio=0.5)
    fdg.check_vmap_over_seeds_and_params(es, generations=25, sigma_init=[0.3, 0.1, 0.5])


def test_ars_gradient_matches_loop_reference():
    """Top-b directions and sigma_R normalization vs. an explicit float64 loop."""
    rng = np.random.default_rng(1)
    n, d, nu, b = 6, 4, 0.2, 2
    mean = rng.normal(size=d)
    delta = rng.normal(size=(n, d))
    x = np.concatenate([mean + nu * delta, mean - nu * delta])
    f = rng.normal(size=2 * n)
    fp, fm = f[:n], f[n:]
    top = np.argsort(np.minimum(fp, fm))[:b]
    sigma_r = np.std(np.concatenate([fp[top], fm[top]]))
    ref = sum((fp[i] - fm[i]) * delta[i] for i in top) / (b * sigma_r)
    got = ars_gradient(jnp.asarray(x, jnp.float32), jnp.asarray(f, jnp.float32), jnp.float32(nu), b)
    np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-4, atol=1e-4)


def test_equal_fitness_gives_zero_step():
    x = jnp.ones((4, 3))
    assert np.all(np.asarray(ars_gradient(x, jnp.zeros(4), jnp.float32(0.1), 1)) == 0)


def test_validation_errors():
    with pytest.raises(ValueError, match="even population_size"):
        ARS(5, num_dims=2)
    with pytest.raises(ValueError, match="elite_ratio"):
        ARS(4, num_dims=2, elite_ratio=0.0)
    assert ARS(64, num_dims=2).num_elite == 4  # b/N = 0.125 of N = 32
