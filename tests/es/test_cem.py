"""CEM (:mod:`evotensor.es.cem`): the closed-form update, elite weights, argument errors (its
contract is a row of :data:`tests.es.test_contract.ARCHIVE`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tests.es.archive_contract import fast_jit

from evotensor.es.cem import CEM, elite_weights


def test_update_matches_closed_form():
    es = CEM(10, num_dims=2, elite_ratio=0.3, mean_smoothing=0.5, std_smoothing=0.25, extra_noise=0.1)
    params = es.default_params()
    state = fast_jit(es.init)(jax.random.key(0), params)
    x, state = fast_jit(es.ask)(jax.random.key(1), state, params)
    f = np.array([5, 3, 9, 1, 7, 2, 8, 0, 6, np.nan], np.float32)
    new, _ = fast_jit(es.tell)(jax.random.key(2), state, x, f, params)
    elite = np.asarray(x, np.float64)[[7, 3, 5]]
    ref_mean = 0.5 * np.asarray(state.mean) + 0.5 * elite.mean(0)
    ref_std = 0.75 * np.asarray(state.std) + 0.25 * np.sqrt(elite.var(0) + 0.01)
    np.testing.assert_allclose(np.asarray(new.mean), ref_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(new.std), ref_std, rtol=1e-5, atol=1e-6)


def test_elite_weights_and_bad_arguments():
    w = np.asarray(elite_weights(jnp.array([3.0, 1.0, 2.0, jnp.inf]), 0.1))  # at least two elites
    np.testing.assert_allclose(w, [0, 0.5, 0.5, 0])
    with pytest.raises(ValueError, match="mean_smoothing"):
        CEM(10, num_dims=2, mean_smoothing=0.0)
