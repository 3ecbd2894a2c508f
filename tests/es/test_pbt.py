"""PBT (:mod:`evotensor.es.pbt`): exploit and explore, parents to load, argument errors (its contract
is a row of :data:`tests.es.test_contract.ARCHIVE`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tests.es.archive_contract import fast_jit

from evotensor.es.pbt import PBT


def test_exploit_and_explore_protocol():
    es = PBT(10, num_dims=3)
    params = es.default_params()
    init, ask, tell = fast_jit(es.init), fast_jit(es.ask), fast_jit(es.tell)
    state = init(jax.random.key(0), params)
    h, state = ask(jax.random.key(1), state, params)
    np.testing.assert_array_equal(np.asarray(h), np.asarray(state.population))
    score = jnp.array([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, jnp.nan, 8.0])
    new, m = tell(jax.random.key(2), state, h, score, params)
    parents = np.asarray(m["parents"])
    replaced = np.arange(10) >= 8  # bottom 20 %: the NaN member (index 8) and score 8 (index 9)
    np.testing.assert_array_equal(parents[~replaced], np.arange(10)[~replaced])
    assert set(parents[replaced].tolist()) <= {0, 1}  # donors from the top 20 %
    h, new_h = np.asarray(h), np.asarray(new.population)
    np.testing.assert_array_equal(new_h[~replaced], h[~replaced])
    ratio = new_h[replaced] / h[parents[replaced]]
    assert np.all(np.isclose(ratio, 0.8) | np.isclose(ratio, 1.2))
    np.testing.assert_array_equal(np.asarray(new.fitness), np.asarray(score)[parents])


def test_resampling_and_bad_arguments():
    es = PBT(10, num_dims=3, resample_probability=1.0, init_range=0.5)
    state = fast_jit(es.init)(jax.random.key(0))
    h, state = fast_jit(es.ask)(jax.random.key(1), state)
    new, m = fast_jit(es.tell)(jax.random.key(2), state, h * 100.0, jnp.arange(10.0))
    assert np.all(np.abs(np.asarray(new.population[-2:])) <= 0.5)
    with pytest.raises(ValueError, match="truncation"):
        PBT(10, num_dims=3, truncation=0.7)


def test_multiplicative_explore_never_changes_sign():
    """Without resampling, every hyperparameter keeps the sign it was initialized with (explore
    only multiplies by positive factors; exploit copies whole members), so a shifted optimum is
    out of reach for members on the wrong side of zero: why the contract run resamples."""
    es = PBT(12, num_dims=6, init_range=1.0)
    params = es.default_params()

    def run(key):
        def step(state, k):
            h, state = es.ask(k, state, params)
            state, _ = es.tell(k, state, h, jnp.sum((h - 0.5) ** 2, axis=1), params)
            return state, jnp.sign(state.population)

        state = es.init(key, params)
        return jnp.sign(state.population), jax.lax.scan(step, state, jax.random.split(key, 60))[1]

    sign0, signs = fast_jit(run)(jax.random.key(3))
    sign0, signs = np.asarray(sign0), np.asarray(signs)
    # every member's sign pattern is always one of the initial members' patterns (12 of 64)
    initial = {tuple(row) for row in sign0.tolist()}
    seen = {tuple(row) for row in signs.reshape(-1, 6).tolist()}
    assert seen <= initial
    assert len(initial) > 1 and np.any(sign0 < 0)  # not vacuous
