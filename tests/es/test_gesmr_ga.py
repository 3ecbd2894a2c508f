"""GESMRGA (:mod:`evotensor.es.gesmr_ga`): the contract of :mod:`tests.es.archive_contract`
(shifted 10-d sphere, bitwise vmap, NaN safety, long float32 run), group deltas, group count."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from tests.es.archive_contract import strategy_contract

from evotensor.es.gesmr_ga import GESMRGA, default_num_groups, group_deltas

# group-elite-selected step sizes converge linearly; 300 generations reach < 1e-8
globals().update(
    strategy_contract(
        GESMRGA, pop=36, gens=300, tol=1e-08, hyper=("std_ratio", 0.25), kwargs={"init_range": 2.0}
    )
)


def test_group_deltas_reference():
    child = jnp.array([1.0, 5.0, jnp.inf, 2.0, 9.0, 0.0])
    parent = jnp.array([2.0, 2.0, 1.0, 1.0, 3.0, 4.0])
    np.testing.assert_array_equal(np.asarray(group_deltas(child, parent, 3)), [-1.0, 1.0, -4.0])


def test_default_groups_and_bad_arguments():
    assert default_num_groups(36) == 6 and default_num_groups(13) == 1 and default_num_groups(12) == 3
    with pytest.raises(ValueError, match="num_groups"):
        GESMRGA(10, num_dims=2, num_groups=3)
