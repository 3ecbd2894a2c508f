"""Guided ES: subspace covariance, surrogate buffer, argument errors (its contract is a row of
:data:`tests.es.test_contract.GRADIENT`)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from tests.es.es_fdg_helpers import mean_and_stderr

from evotensor.es import GuidedES
from evotensor.es.guided_es import guided_perturbations


def test_perturbation_covariance_matches_paper():
    """Cov(eps) = sigma^2 (alpha/d I + (1-alpha)/k U U^T)."""
    d, k, alpha, sigma = 4, 2, 0.3, 0.5
    surrogates = jnp.array([[1.0, 1.0, 0.0, 0.0], [0.0, 1.0, 0.0, 1.0]])
    eps = np.asarray(
        guided_perturbations(jax.random.key(0), 200_000, surrogates, jnp.float32(alpha), jnp.float32(sigma)),
        np.float64,
    )
    U, _ = np.linalg.qr(np.asarray(surrogates, np.float64).T)
    expected = sigma**2 * (alpha / d * np.eye(d) + (1 - alpha) / k * U @ U.T)
    np.testing.assert_allclose(eps.T @ eps / eps.shape[0], expected, atol=3e-3)


def test_add_surrogate_gradient_pushes_unit_vector_first():
    es = GuidedES(4, num_dims=3, subspace_dims=2)
    state = es.init(jax.random.key(0))
    state = es.add_surrogate_gradient(state, jnp.array([0.0, 3.0, 4.0]))
    np.testing.assert_allclose(np.asarray(state.surrogates[0]), [0.0, 0.6, 0.8], rtol=1e-6)
    with pytest.raises(ValueError, match="flatten"):
        es.add_surrogate_gradient(state, jnp.zeros(4))


@pytest.mark.slow
def test_expected_gradient_is_beta_sigma_a_on_linear_function():
    """E[g] = beta * Sigma * a (identity shaping, surrogate along a)."""
    a = jnp.array([1.0, -2.0, 0.5])
    es = GuidedES(
        64,
        jnp.zeros(3),
        optimizer=optax.sgd(1.0),
        sigma_init=0.2,
        fitness_shaping=lambda f: f,
        es_gradient_as_surrogate=False,
    )

    @jax.jit
    def estimate(key):
        state = es.add_surrogate_gradient(es.init(key), a)
        x, state = es.ask(key, state)
        new, _ = es.tell(key, state, x, x @ a)
        return state.mean - new.mean

    g = np.asarray(jax.vmap(estimate)(jax.random.split(jax.random.key(1), 500)))
    an = np.asarray(a, np.float64)
    cov = 0.5 / 3 * np.eye(3) + 0.5 * np.outer(an, an) / (an @ an)
    expected = 2.0 * cov @ an
    mean, se = mean_and_stderr(g)
    assert np.all(np.abs(mean - expected) < 5 * se + 1e-3), (mean, expected, se)


def test_validation_errors():
    with pytest.raises(ValueError, match="subspace_dims"):
        GuidedES(4, num_dims=3, subspace_dims=4)
    with pytest.raises(ValueError, match="alpha"):
        GuidedES(4, num_dims=3, alpha=1.5)
    with pytest.raises(ValueError, match="even population_size"):
        GuidedES(3, num_dims=3)
