"""ARS: top-b selection against a loop reference, argument errors (its contract is a row of
:data:`tests.es.test_contract.GRADIENT`)."""

import jax.numpy as jnp
import numpy as np
import pytest

from evotensor.es import ARS
from evotensor.es.ars import ars_gradient


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
