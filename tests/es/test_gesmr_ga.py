"""GESMRGA (:mod:`evotensor.es.gesmr_ga`): group deltas, group count, argument errors (its contract
is a row of :data:`tests.es.test_contract.ARCHIVE`)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from evotensor.es.gesmr_ga import GESMRGA, default_num_groups, group_deltas


def test_group_deltas_reference():
    child = jnp.array([1.0, 5.0, jnp.inf, 2.0, 9.0, 0.0])
    parent = jnp.array([2.0, 2.0, 1.0, 1.0, 3.0, 4.0])
    np.testing.assert_array_equal(np.asarray(group_deltas(child, parent, 3)), [-1.0, 1.0, -4.0])


def test_default_groups_and_bad_arguments():
    assert default_num_groups(36) == 6 and default_num_groups(13) == 1 and default_num_groups(12) == 3
    with pytest.raises(ValueError, match="num_groups"):
        GESMRGA(10, num_dims=2, num_groups=3)
