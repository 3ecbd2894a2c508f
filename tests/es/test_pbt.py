"""Tests for :mod:`evotensor.es.pbt` (PBT).

Shared protocol checks (one compiled batched run serves several of them):
solves a shifted 10-d sphere to a documented tolerance, vmap over seeds / a hyperparameter /
poisoned fitness equals separate runs bit for bit, NaN/inf fitness never enters state and the
best-so-far equals the running minimum of the valid evaluations, and a 3,000-generation float32
run on a 30-d sphere stays finite.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tests.es.archive_contract import fast_jit, strategy_contract

from evotensor.es.pbt import PBT

DIMS = 10
POP = 20
GENS = 300
SHIFT = 0.5  # the optimum sits at SHIFT * ones(DIMS)
# Documented tolerance: best f < 0.3 after 300 rounds of 20 members. Why a nonzero shift and
# resampling: explore multiplies by 0.8 / 1.2, so an optimum at 0 is reached by shrinking alone
# (the old SHIFT = 0 test reached 1e-6 trivially), and without resampling a hyperparameter never
# changes sign (see test_multiplicative_explore_never_changes_sign), so members whose coordinates
# start negative can never reach 0.5 (measured best over 16 seeds: 0.53-1.05). With 10 %
# resampling, 16 seeds reach 0.024-0.13 (median 0.05); random search with the same 6,000
# evaluations in this box gets ~0.5.
TOL = 0.3
HYPER_FIELD, HYPER_VALUE = "truncation", 0.3
KWARGS = {"init_range": 2.0, "resample_probability": 0.1}

globals().update(
    strategy_contract(
        PBT,
        pop=POP,
        gens=GENS,
        tol=TOL,
        hyper=(HYPER_FIELD, HYPER_VALUE),
        kwargs=KWARGS,
        dims=DIMS,
        shift=SHIFT,
        long_run_in_default_suite=False,
    )
)


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
