"""ESMC: baseline clipping, unbiasedness on linear functions, vmap with z-scores (its contract is a
row of :data:`tests.es.test_contract.GRADIENT`)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from tests.es import fdg_contract as fdg
from tests.es.es_fdg_helpers import assert_unbiased

from evotensor.core.fitness_shaping import z_score
from evotensor.es import ESMC
from evotensor.es.esmc import esmc_gradient


@pytest.mark.slow
def test_vmap_with_z_score_shaping_equals_separate_runs():
    """Bit for bit, under the suite's XLA flags and XLA's defaults (``EVOTENSOR_TEST_DEFAULT_XLA=1``):
    z-scores need :mod:`evotensor.core.numerics`' exact sums (the contract checks centered ranks)."""
    es = ESMC(21, fdg.X0, optimizer=optax.adam(0.05), fitness_shaping=z_score)
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
