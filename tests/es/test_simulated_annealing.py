"""Tests for :mod:`evotensor.es.simulated_annealing` (SimulatedAnnealing).

Shared protocol checks (one compiled batched run serves several of them):
solves a shifted 10-d sphere to a documented tolerance, vmap over seeds / a hyperparameter /
poisoned fitness equals separate runs bit for bit, NaN/inf fitness never enters state and the
best-so-far equals the running minimum of the valid evaluations, and a 3,000-generation float32
run on a 30-d sphere stays finite.
"""

from __future__ import annotations

import jax.numpy as jnp
import pytest
from tests.es.archive_contract import strategy_contract

from evotensor.es.simulated_annealing import SimulatedAnnealing, metropolis_accept

DIMS = 10
POP = 16
GENS = 600
SHIFT = 1.0  # the optimum sits at SHIFT * ones(DIMS)
# geometric cooling (std x0.99 per generation) reaches < 1e-4 in 600 generations (~1e-8 after 1000)
TOL = 0.0001
HYPER_FIELD, HYPER_VALUE = "temp_decay", 0.95
KWARGS = {}

globals().update(
    strategy_contract(
        SimulatedAnnealing,
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


def test_metropolis_rule():
    inf, nan = jnp.inf, jnp.nan
    assert bool(metropolis_accept(0.99, 1.0, 2.0, 1.0))  # downhill always
    assert bool(metropolis_accept(0.1, 2.0, 1.0, 1.0))  # exp(-1) = 0.37 > 0.1
    assert not bool(metropolis_accept(0.5, 2.0, 1.0, 1.0))  # 0.37 < 0.5
    assert not bool(metropolis_accept(0.0, inf, 1.0, 1.0))  # invalid never
    assert bool(metropolis_accept(0.99, 5.0, inf, 1.0))  # valid replaces invalid current
    assert not bool(metropolis_accept(0.0, inf, inf, 1.0))
    assert not bool(metropolis_accept(0.5, 2.0, 1.0, 0.0))  # frozen: no uphill moves
    del nan


def test_bad_arguments():
    with pytest.raises(ValueError, match="temp_decay"):
        SimulatedAnnealing(4, num_dims=2, temp_decay=0.0)
