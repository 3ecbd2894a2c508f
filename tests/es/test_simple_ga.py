"""SimpleGA (:mod:`evotensor.es.simple_ga`): the selection helpers, crossover (its contract is a
row of :data:`tests.es.test_contract.ARCHIVE`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tests.es.archive_contract import fast_jit

from evotensor.es.core.ga_base import plus_selection, truncation_parents
from evotensor.es.simple_ga import SimpleGA


def test_plus_selection_keeps_archive_on_ties_and_rejects_invalid():
    archive = jnp.array([1.0, jnp.inf, 3.0, jnp.inf])
    offspring = jnp.array([jnp.inf, 2.0, 3.0, 0.5])
    idx = np.asarray(plus_selection(archive, offspring))
    np.testing.assert_array_equal(idx, [7, 0, 5, 2])  # 0.5, 1, 2, 3 (archive's 3 wins the tie)


def test_parents_come_from_the_elite():
    fitness = jnp.array([5.0, 1.0, 4.0, 2.0, 3.0, jnp.inf])
    idx = np.asarray(fast_jit(truncation_parents, static_argnums=(3,))(jax.random.key(0), fitness, 0.5, 1000))
    assert set(idx.tolist()) == {1, 3, 4}


def test_crossover_and_pytree_template():
    es = SimpleGA(8, solution={"a": jnp.zeros(3), "b": jnp.zeros((2,))}, crossover_rate=1.0, std_init=1e-3)
    init, ask, tell = fast_jit(es.init), fast_jit(es.ask), fast_jit(es.tell)
    state = init(jax.random.key(0))
    x, state = ask(jax.random.key(1), state)
    state, _ = tell(jax.random.key(2), state, x, jnp.arange(8.0))
    kids, _ = ask(jax.random.key(3), state)
    flat = np.asarray(es.space.ravel_population(kids))
    parents = np.asarray(state.population[:4])
    # every gene of every child is (up to the tiny mutation) a gene of some elite parent
    dist = np.abs(flat[:, None, :] - parents[None, :, :]).min(axis=1)
    assert dist.max() < 1e-2
    with pytest.raises(ValueError, match="elite_ratio"):
        SimpleGA(8, num_dims=2, elite_ratio=0.0)
