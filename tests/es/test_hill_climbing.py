"""Tests for :mod:`evotensor.es.hill_climbing` (HillClimbing).

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

from evotensor.es.hill_climbing import HillClimbing

DIMS = 10
POP = 16
GENS = 400
SHIFT = 1.0  # the optimum sits at SHIFT * ones(DIMS)
# with a geometric step-size decay of 0.98 per generation, 400 generations reach < 1e-6 (a fixed step
# cannot converge)
TOL = 1e-06
HYPER_FIELD, HYPER_VALUE = "std_decay", 0.97
KWARGS = {"std_decay": 0.98}

globals().update(
    strategy_contract(
        HillClimbing,
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


def test_incumbent_never_gets_worse_and_bad_arguments():
    es = HillClimbing(4, num_dims=2)
    init, ask, tell = fast_jit(es.init), fast_jit(es.ask), fast_jit(es.tell)
    state = init(jax.random.key(0))
    x, state = ask(jax.random.key(1), state)
    state, _ = tell(jax.random.key(2), state, x, jnp.array([3.0, 1.0, 2.0, 5.0]))
    np.testing.assert_array_equal(np.asarray(state.best_solution), np.asarray(x[1]))
    x2, state2 = ask(jax.random.key(3), state)
    new, _ = tell(jax.random.key(4), state2, x2, jnp.array([1.5, jnp.nan, -jnp.inf, 4.0]))
    assert float(new.best_fitness) == 1.0
    np.testing.assert_array_equal(np.asarray(new.best_solution), np.asarray(x[1]))
    with pytest.raises(ValueError, match="std_init"):
        HillClimbing(4, num_dims=2, std_init=0.0)
