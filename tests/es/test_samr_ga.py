"""Tests for :mod:`evotensor.es.samr_ga` (SAMRGA).

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

from evotensor.es.samr_ga import SAMRGA

DIMS = 10
POP = 32
GENS = 300
SHIFT = 1.0  # the optimum sits at SHIFT * ones(DIMS)
# self-adapted step sizes give linear convergence; 300 generations reach < 1e-8
TOL = 1e-08
HYPER_FIELD, HYPER_VALUE = "std_meta", 1.5
KWARGS = {"init_range": 2.0}

globals().update(
    strategy_contract(
        SAMRGA,
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


def test_step_sizes_are_inherited_and_bounded():
    es = SAMRGA(6, num_dims=2, std_max=1.5)
    params = es.default_params()
    init, ask, tell = fast_jit(es.init), fast_jit(es.ask), fast_jit(es.tell)
    state = init(jax.random.key(0), params)
    x, state = ask(jax.random.key(1), state, params)
    state, _ = tell(jax.random.key(2), state, x, jnp.arange(6.0), params)
    x, state = ask(jax.random.key(3), state, params)
    ratio = np.asarray(state.offspring_std) / 1.0
    assert np.all(ratio <= 1.5 + 1e-6) and np.all(ratio >= 0.5 - 1e-6)
    f = jnp.array([-1.0, 10.0, 10.0, 10.0, 10.0, jnp.nan])
    new, _ = tell(jax.random.key(4), state, x, f, params)
    assert float(new.std[0]) == float(state.offspring_std[0])  # the new best carries its own std
    with pytest.raises(ValueError, match="std_min"):
        SAMRGA(6, num_dims=2, std_min=2.0, std_max=1.0)
