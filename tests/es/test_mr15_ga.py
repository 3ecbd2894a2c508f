"""MR15GA (:mod:`evotensor.es.mr15_ga`): the 1/5th success rule, argument errors (its contract is a
row of :data:`tests.es.test_contract.ARCHIVE`)."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

from evotensor.es.mr15_ga import MR15GA, one_fifth_rule


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
