"""HillClimbing (:mod:`evotensor.es.hill_climbing`): the incumbent never gets worse (its contract is
a row of :data:`tests.es.test_contract.ARCHIVE`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tests.es.archive_contract import fast_jit

from evotensor.es.hill_climbing import HillClimbing


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
