"""ESMC: sphere, baseline clipping, unbiasedness on linear functions, stability, vmap."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from tests.es import fdg_contract as fdg
from tests.es.es_fdg_helpers import assert_unbiased

from evotensor.core.fitness_shaping import centered_ranks, z_score
from evotensor.es import ESMC
from evotensor.es.esmc import esmc_gradient


def test_solves_10d_sphere_despite_nonfinite_fitness():
    """Tolerance: f(mean) < 1e-6 after 1000 generations of 41, two NaN/inf members per generation.

    Configuration: Adam and sigma decaying 1%/generation, centered ranks, which include the baseline row.
    """
    es = ESMC(41, fdg.X0, fitness_shaping=centered_ranks, **fdg.decaying_adam())
    fdg.check_solves_sphere_despite_nonfinite(es, generations=1000, tol=1e-6)


@pytest.mark.slow
def test_float32_3000_generations_past_convergence_stay_finite():
    es = ESMC(
        33,
        jnp.full(30, 1.0),
        optimizer=optax.adam(optax.exponential_decay(0.05, 1, 0.98)),
        sigma_schedule=optax.exponential_decay(0.3, 1, 0.98),
        fitness_shaping=z_score,
    )
    fdg.check_float32_long_run_stays_finite(es, generations=3000, tol=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("shaping", [centered_ranks, z_score], ids=["centered_ranks", "z_score"])
def test_vmap_over_seeds_and_a_hyperparameter_equals_separate_runs(shaping):
    """Bit for bit, under the suite's XLA flags and XLA's defaults (``EVOTENSOR_TEST_DEFAULT_XLA=1``)."""
    es = ESMC(21, fdg.X0, optimizer=optax.adam(0.05), fitness_shaping=shaping)
    fdg.check_vmap_over_seeds_and_params(es, generations=25, sigma_init=[0.3, 0.1, 0.5])


def test_first_member_is_the_mean_and_pairs_are_antithetic():
    es = ESMC(7, jnp.array([1.0, 2.0]), sigma_init=0.5)
    state = es.init(jax.random.key(0))
    x, _ = es.ask(jax.random.key(1), state)
    np.testing.assert_array_equal(np.asarray(x[0]), [1.0, 2.0])
    np.testing.assert_allclose(np.asarray(x[1:4] + x[4:]), np.asarray(2 * x[0][None].repeat(3, 0)), rtol=1e-6)


def test_gradient_unbiased_on_linear_function():
    """For linear f exactly one side of each pair is clipped, and E[g] = a."""
    a = jnp.array([1.0, -2.0, 0.5])
    rng = np.random.default_rng(0)
    gs = []
    for _ in range(600):
        z = rng.normal(size=(32, 3))
        mean = np.array([0.5, -1.0, 2.0])
        x = np.concatenate([mean[None], mean + 0.1 * z, mean - 0.1 * z])
        gs.append(
            np.asarray(
                esmc_gradient(
                    jnp.asarray(x, jnp.float32), jnp.asarray(x @ np.asarray(a), jnp.float32), jnp.float32(0.1)
                )
            )
        )
    assert_unbiased(np.stack(gs), a)


def test_clipping_ignores_worse_than_baseline():
    """If both sides of a pair are worse than the mean, the pair contributes nothing."""
    x = jnp.array([[0.0], [1.0], [-1.0]])
    assert float(esmc_gradient(x, jnp.array([0.0, 5.0, 3.0]), jnp.float32(1.0))[0]) == 0.0


def test_validation_errors():
    with pytest.raises(ValueError, match="odd population_size"):
        ESMC(8, num_dims=2)
    with pytest.raises(ValueError, match=">= 3"):
        ESMC(1, num_dims=2)
