"""Tests for :mod:`evotensor.es.gesmr_ga` (GESMRGA).

Shared protocol checks (one compiled batched run serves several of them):
solves a shifted 10-d sphere to a documented tolerance, vmap over seeds / a hyperparameter /
poisoned fitness equals separate runs bit for bit, NaN/inf fitness never enters state and the
best-so-far equals the running minimum of the valid evaluations, and a 3,000-generation float32
run on a 30-d sphere stays finite.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from tests.es.archive_contract import strategy_contract

from evotensor.es.gesmr_ga import GESMRGA, default_num_groups, group_deltas

DIMS = 10
POP = 36
GENS = 300
SHIFT = 1.0  # the optimum sits at SHIFT * ones(DIMS)
# group-elite-selected step sizes converge linearly; 300 generations reach < 1e-8
TOL = 1e-08
HYPER_FIELD, HYPER_VALUE = "std_ratio", 0.25
KWARGS = {"init_range": 2.0}

globals().update(
    strategy_contract(
        GESMRGA,
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


def test_group_deltas_reference():
    child = jnp.array([1.0, 5.0, jnp.inf, 2.0, 9.0, 0.0])
    parent = jnp.array([2.0, 2.0, 1.0, 1.0, 3.0, 4.0])
    np.testing.assert_array_equal(np.asarray(group_deltas(child, parent, 3)), [-1.0, 1.0, -4.0])


def test_default_groups_and_bad_arguments():
    assert default_num_groups(36) == 6 and default_num_groups(13) == 1 and default_num_groups(12) == 3
    with pytest.raises(ValueError, match="num_groups"):
        GESMRGA(10, num_dims=2, num_groups=3)
