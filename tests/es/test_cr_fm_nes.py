"""CR-FM-NES: constants, sample structure, argument errors (its contract is a row of
:data:`tests.es.test_contract.GRADIENT`)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from evotensor.es import CRFMNES
from evotensor.es.cr_fm_nes import h_inv

X0 = jnp.full(10, 3.0)


def test_constants_follow_the_paper():
    for d in (2, 10, 100, 1000):
        a = h_inv(d)
        assert abs((1 + a * a) * math.exp(a * a / 2) / 0.24 - 10 - d) < 1e-8
    es = CRFMNES(None, num_dims=30)
    assert es.population_size == 4 + int(3 * math.log(30)) + (4 + int(3 * math.log(30))) % 2
    p = es.default_params()
    d, lam, mu = 30, es.population_size, es.mu_eff
    w_hat = np.maximum(0, np.log(lam / 2 + 1) - np.log(np.arange(1, lam + 1)))
    w = w_hat / w_hat.sum() - 1 / lam
    assert mu == pytest.approx(1 / np.sum((w + 1 / lam) ** 2), rel=1e-5)
    np.testing.assert_allclose(
        [float(p.c_sigma), float(p.c_c), float(p.c_1)],
        [
            (mu + 2) / (d + mu + 5),
            (4 + mu / d) / (d + 4 + 2 * mu / d),
            2 / ((d + 1.3) ** 2 + mu) * (d - 5) / 6,
        ],
        rtol=1e-5,
    )


@pytest.mark.slow
def test_samples_have_the_model_covariance():
    """x = m + sigma D y with Cov(y) = I + v v^T (mirrored pairs)."""
    es = CRFMNES(20000, num_dims=3, sigma_init=0.5)
    state = es.init(jax.random.key(0))
    state = state.replace(v=jnp.array([1.0, 0.5, 0.0]), D=jnp.array([1.0, 2.0, 0.5]))
    x, _ = es.ask(jax.random.key(1), state)
    np.testing.assert_allclose(np.asarray(x[:10000] + x[10000:]), 0.0, atol=1e-5)  # mirrored around m = 0
    v, D = np.array([1.0, 0.5, 0.0]), np.array([1.0, 2.0, 0.5])
    expected = 0.25 * np.diag(D) @ (np.eye(3) + np.outer(v, v)) @ np.diag(D)
    xs = np.asarray(x, np.float64)
    np.testing.assert_allclose(xs.T @ xs / xs.shape[0], expected, atol=0.03)


def test_validation_errors():
    with pytest.raises(ValueError, match="even population_size"):
        CRFMNES(7, num_dims=3)
    with pytest.raises(ValueError, match="sigma_init"):
        CRFMNES(None, num_dims=3, sigma_init=0.0)
