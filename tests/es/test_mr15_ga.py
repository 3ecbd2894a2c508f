"""Tests for :mod:`evotensor.es.mr15_ga` (MR15GA).

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

from evotensor.es.mr15_ga import MR15GA, one_fifth_rule

DIMS = 10
POP = 32
GENS = 300
SHIFT = 1.0  # the optimum sits at SHIFT * ones(DIMS)
# the 1/5th rule gives linear convergence; 300 generations reach < 1e-8
TOL = 1e-08
HYPER_FIELD, HYPER_VALUE = "adapt_factor", 0.9
KWARGS = {"init_range": 2.0}

globals().update(
    strategy_contract(
        MR15GA,
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


def test_one_fifth_rule():
    parent = jnp.array([1.0, 1.0, 1.0, 1.0, 1.0])
    c = 0.817
    std, rate = one_fifth_rule(1.0, jnp.array([0.0, 0.0, 2.0, 2.0, 2.0]), parent, 0.2, c)  # 2/5 > 1/5
    assert float(rate) == pytest.approx(0.4) and float(std) == pytest.approx(1 / c)
    std, rate = one_fifth_rule(1.0, jnp.array([2.0, 2.0, 2.0, 2.0, jnp.inf]), parent, 0.2, c)  # 0 < 1/5
    assert float(rate) == 0.0 and float(std) == pytest.approx(c)
    std, _ = one_fifth_rule(1.0, jnp.zeros(5), jnp.full(5, jnp.inf), 0.2, c)  # no evaluated parents
    assert float(std) == 1.0


def test_bad_arguments():
    with pytest.raises(ValueError, match="adapt_factor"):
        MR15GA(8, num_dims=2, adapt_factor=1.5)
