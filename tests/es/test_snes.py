"""SNES: default rates, closed-form expected natural gradients, argument errors (its contract is a
row of :data:`tests.es.test_contract.GRADIENT`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tests.es.es_fdg_helpers import (
    mean_and_stderr,
)

from evotensor.es import SNES

X0 = jnp.full(10, 3.0)


def test_defaults_follow_wierstra_2014():
    """The contract (:data:`tests.es.test_contract.GRADIENT`) runs these defaults on the 10-d sphere."""
    es = SNES(None, X0)
    p = es.default_params()
    assert es.population_size == 10
    np.testing.assert_allclose(float(p.eta_sigma), (3 + np.log(10)) / (5 * np.sqrt(10)), rtol=1e-6)


def test_expected_update_equals_closed_form():
    """Raw utilities u_i = -f_i / lambda at mean 0:
    linear f = a.x:                 E[mean' - mean] = -eta_mean sigma^2 a
    f = sum_i A_i x_i^2 / 2:        E[log sigma'_i - log sigma_i] = -eta_sigma A_i sigma_i^2 / 2
    (E[f(sigma z)(z_i^2 - 1)] = A_i sigma_i^2; over 400 seeds)."""
    d, lam = 3, 100
    sigma = jnp.array([0.5, 0.2, 1.0])
    a = jnp.array([1.0, -2.0, 0.5])
    A = jnp.array([2.0, 4.0, 0.5])
    es = SNES(lam, num_dims=d, fitness_shaping=lambda f: f / f.shape[0])
    p = es.default_params()

    @jax.jit
    def one(key):
        state = es.init(key).replace(sigma=sigma)
        x, st = es.ask(key, state)
        lin, _ = es.tell(key, st, x, x @ a)
        quad, _ = es.tell(key, st, x, 0.5 * (x**2) @ A)
        return lin.mean, jnp.log(quad.sigma / sigma)

    dm, dls = jax.vmap(one)(jax.random.split(jax.random.key(0), 400))
    m, se = mean_and_stderr(np.asarray(dm))
    np.testing.assert_array_less(np.abs(m + np.asarray(sigma**2 * a)), 5 * se + 1e-5)
    m, se = mean_and_stderr(np.asarray(dls))
    expected = -float(p.eta_sigma) * np.asarray(A * sigma**2) / 2
    np.testing.assert_array_less(np.abs(m - expected), 5 * se + 1e-6)
    assert np.all(np.abs(expected) > 10 * se)


def test_validation_errors():
    with pytest.raises(ValueError, match="sigma_init"):
        SNES(None, num_dims=3, sigma_init=-1.0)
    with pytest.raises(ValueError, match="exactly one"):
        SNES(None)
