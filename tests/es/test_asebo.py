"""ASEBO: active-subspace PCA, alpha adaptation, argument errors (its contract is a row of
:data:`tests.es.test_contract.GRADIENT`)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tests.es.es_fdg_helpers import sphere

from evotensor.es import ASEBO
from evotensor.es.asebo import active_subspace


def test_active_subspace_keeps_components_up_to_threshold():
    rng = np.random.default_rng(0)
    basis = np.linalg.qr(rng.normal(size=(9, 2)))[0].T  # two orthonormal directions in R^9
    coeffs = rng.normal(size=(8, 2)) * np.array([10.0, 3.0])
    grads = jnp.asarray(coeffs @ basis + 1e-4 * rng.normal(size=(8, 9)), jnp.float32)
    sub = np.asarray(active_subspace(grads, jnp.float32(0.99), 1))
    kept = sub[np.any(sub != 0, axis=1)]
    assert kept.shape[0] == 2
    # the kept rows span the same plane as the true basis
    proj = kept @ basis.T
    np.testing.assert_allclose(np.abs(np.linalg.det(proj)), 1.0, atol=1e-3)
    sub_min = np.asarray(active_subspace(grads, jnp.float32(0.99), 4))
    assert np.sum(np.any(sub_min != 0, axis=1)) == 4


@pytest.mark.slow
def test_directions_are_unit_norm_and_warmup_is_isotropic():
    es = ASEBO(8, num_dims=5, subspace_dims=2, min_subspace_dims=1, sigma_init=0.5)
    state = es.init(jax.random.key(0))
    x, state = es.ask(jax.random.key(1), state)
    e = (x[:4] - x[4:]) / (2 * 0.5)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(e), axis=1), 1.0, rtol=1e-5)
    assert float(jnp.abs(state.basis).sum()) == 0.0  # warm-up: no subspace yet
    for g in range(3):
        x, state = es.ask(jax.random.key(g), state)
        state, m = es.tell(jax.random.key(g), state, x, sphere(x))
    x, state = es.ask(jax.random.key(9), state)
    assert float(jnp.abs(state.basis).sum()) > 0.0
    assert 0.0 <= float(m["alpha"]) <= 1.0


def test_validation_errors():
    with pytest.raises(ValueError, match="subspace_dims"):
        ASEBO(4, num_dims=3, subspace_dims=5)
    with pytest.raises(ValueError, match="min_subspace_dims"):
        ASEBO(4, num_dims=6, subspace_dims=3, min_subspace_dims=4)
    with pytest.raises(ValueError, match="decay"):
        ASEBO(4, num_dims=3, decay=0.0)
