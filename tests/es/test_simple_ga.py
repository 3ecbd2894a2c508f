"""Tests for :mod:`evotensor.es.simple_ga` (SimpleGA).

Shared protocol checks (one compiled batched run serves several of them):
solves a shifted 10-d sphere to a documented tolerance, vmap over seeds / a hyperparameter /
poisoned fitness equals separate runs bit for bit, NaN/inf fitness never enters state and the
best-so-far equals the running minimum of the valid evaluations, and a 3,000-generation float32
run on a 30-d sphere stays finite.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tests.es.archive_contract import fast_jit, strategy_contract

from evotensor.es.simple_ga import SimpleGA, plus_selection, truncation_parents

DIMS = 10
POP = 32
GENS = 400
SHIFT = 1.0  # the optimum sits at SHIFT * ones(DIMS)
# with mutation std decaying x0.98 per generation, 400 generations reach < 1e-6 (a fixed std stalls
# near std^2)
TOL = 1e-06
HYPER_FIELD, HYPER_VALUE = "elite_ratio", 0.25
KWARGS = {"std_decay": 0.98, "init_range": 2.0}

globals().update(
    strategy_contract(
        SimpleGA,
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
