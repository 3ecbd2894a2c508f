"""DiscoveredES (:mod:`evotensor.es.discovered_es`): the closed-form weights and update (its contract
is a row of :data:`tests.es.test_contract.ARCHIVE`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tests.es.archive_contract import fast_jit

from evotensor.es.discovered_es import DiscoveredES, des_weights


def test_weights_closed_form():
    n, t = 8, 12.5
    r = np.arange(n) / (n - 1) - 0.5
    logits = -20.0 / (1.0 + np.exp(-t * r))
    ref = np.exp(logits - logits.max())
    ref /= ref.sum()
    w = np.asarray(des_weights(n, jnp.float32(t)))
    np.testing.assert_allclose(w, ref, rtol=1e-5, atol=1e-7)
    assert np.all(np.diff(w) <= 0) and w.sum() == pytest.approx(1.0, rel=1e-6)


def test_update_matches_closed_form_and_bad_arguments():
    es = DiscoveredES(6, num_dims=3)
    params = es.default_params()
    state = fast_jit(es.init)(jax.random.key(0), params)
    x, state = fast_jit(es.ask)(jax.random.key(1), state, params)
    f = np.array([4.0, 1.0, np.nan, 0.0, 3.0, 2.0], np.float32)
    new, _ = fast_jit(es.tell)(jax.random.key(2), state, x, f, params)
    w = np.asarray(des_weights(6, jnp.float32(12.5)), np.float64)
    step = np.asarray(x, np.float64)[[3, 1, 5, 4, 0, 2]] - np.asarray(state.mean)
    np.testing.assert_allclose(np.asarray(new.mean), np.asarray(state.mean) + w @ step, rtol=1e-5, atol=1e-6)
    ref_std = 0.9 * np.asarray(state.std) + 0.1 * np.sqrt(w @ step**2)
    np.testing.assert_allclose(np.asarray(new.std), ref_std, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="lr_std"):
        DiscoveredES(6, num_dims=3, lr_std=0.0)
