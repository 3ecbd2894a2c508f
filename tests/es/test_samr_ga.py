"""SAMRGA (:mod:`evotensor.es.samr_ga`): inherited bounded step sizes (its contract is a row of
:data:`tests.es.test_contract.ARCHIVE`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tests.es.archive_contract import fast_jit

from evotensor.es.samr_ga import SAMRGA


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
