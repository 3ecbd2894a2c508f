"""xNES: default rates, closed-form expected natural gradients, utilities, argument errors (its
contract is a row of :data:`tests.es.test_contract.GRADIENT`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tests.es.es_fdg_helpers import (
    mean_and_stderr,
)

from evotensor.core.fitness_shaping import nes_utilities, nes_weights
from evotensor.es import XNES
from evotensor.es.xnes import sym_expm

X0 = jnp.full(10, 3.0)


def test_defaults_follow_wierstra_2014():
    es = XNES(None, X0)
    assert es.population_size == 4 + int(np.floor(3 * np.log(10)))
    p = es.default_params()
    expected = 3 * (3 + np.log(10)) / (5 * 10 * np.sqrt(10))
    np.testing.assert_allclose(
        [float(p.eta_sigma), float(p.eta_B), float(p.eta_mean)], [expected, expected, 1.0], rtol=1e-6
    )
    u = np.asarray(nes_utilities(10))
    assert abs(u.sum()) < 1e-6 and np.all(np.diff(u) <= 0) and u[-1] == pytest.approx(-0.1)


def test_expected_update_equals_closed_form():
    """Raw utilities u_i = -f_i / lambda at mean 0, B = I:
    linear f = a.x:           E[mean' - mean] = -eta_mean sigma^2 a
    quadratic f = x^T A x / 2: E[log sigma' - log sigma] = -eta_sigma sigma^2 tr(A) / (2d)
                              E[logm B'] = -eta_B sigma^2 (A - tr(A)/d I) / 2
    (E[f(sigma z)(z z^T - I)] = sigma^2 A for the quadratic; each over 400 seeds).
    """
    d, lam, sigma = 3, 100, 0.5
    a = jnp.array([1.0, -2.0, 0.5])
    A = jnp.array([[2.0, 0.5, 0.0], [0.5, 1.0, 0.3], [0.0, 0.3, 0.5]])
    es = XNES(lam, num_dims=d, sigma_init=sigma, fitness_shaping=lambda f: f / f.shape[0])
    p = es.default_params()

    @jax.jit
    def one(key):
        state = es.init(key)
        x, st = es.ask(key, state)
        lin, _ = es.tell(key, st, x, x @ a)
        quad, _ = es.tell(key, st, x, 0.5 * jnp.einsum("pi,ij,pj->p", x, A, x))
        evals, evecs = jnp.linalg.eigh((quad.B + quad.B.T) / 2)
        logm_b = (evecs * jnp.log(evals)) @ evecs.T
        return lin.mean, jnp.log(quad.sigma / sigma), logm_b

    dm, dls, logb = jax.vmap(one)(jax.random.split(jax.random.key(0), 400))
    m, se = mean_and_stderr(np.asarray(dm))
    np.testing.assert_array_less(np.abs(m - (-(sigma**2) * np.asarray(a))), 5 * se + 1e-4)
    m, se = mean_and_stderr(np.asarray(dls))
    expected = -float(p.eta_sigma) * sigma**2 * float(jnp.trace(A)) / (2 * d)
    assert abs(m - expected) < 5 * se + 1e-6, (m, expected, se)
    m, se = mean_and_stderr(np.asarray(logb))
    An = np.asarray(A, np.float64)
    expected = -float(p.eta_B) * sigma**2 * (An - np.trace(An) / d * np.eye(d)) / 2
    np.testing.assert_array_less(np.abs(m - expected), 5 * se + 1e-6)
    assert np.max(np.abs(expected)) > 10 * np.max(se)  # the check has power


def test_sym_expm_matches_series():
    s = np.array([[0.1, 0.2], [0.2, -0.3]])
    series = np.eye(2)
    term = np.eye(2)
    for k in range(1, 20):
        term = term @ s / k
        series = series + term
    np.testing.assert_allclose(np.asarray(sym_expm(jnp.asarray(s, jnp.float32))), series, rtol=1e-5)


def test_nes_weights_rank_best_lowest():
    w = np.asarray(nes_weights(jnp.array([3.0, 1.0, 2.0, 4.0])))
    assert w[1] == w.min() and w[3] == w.max()


def test_validation_errors():
    with pytest.raises(ValueError, match="sigma_init"):
        XNES(None, num_dims=3, sigma_init=0.0)
    with pytest.raises(ValueError, match="population_size"):
        XNES(1, num_dims=3)
    with pytest.raises(TypeError, match="fitness_shaping"):
        XNES(None, num_dims=3, fitness_shaping=1)
