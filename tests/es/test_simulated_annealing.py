"""SimulatedAnnealing (:mod:`evotensor.es.simulated_annealing`): Metropolis acceptance, argument
errors (its contract is a row of :data:`tests.es.test_contract.ARCHIVE`)."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

from evotensor.es.simulated_annealing import SimulatedAnnealing, metropolis_accept


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
