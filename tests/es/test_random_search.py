"""RandomSearch (:mod:`evotensor.es.random_search`): the order-statistics tolerance of its contract (a
row of :data:`tests.es.test_contract.ARCHIVE`), order statistics in 1-d, the sampling box."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tests.es.archive_contract import RANDOM_SEARCH, fast_jit, random_search_tolerance

from evotensor.es.random_search import RandomSearch

TOL = random_search_tolerance()
DIMS, POP, SHIFT = RANDOM_SEARCH["dims"], RANDOM_SEARCH["pop"], RANDOM_SEARCH["shift"]


def test_tolerance_is_finite_and_below_what_one_generation_reaches():
    assert 1.0 < TOL < 2.5  # finite, better than the box center, reachable by m = 1600 draws
    # the best of a single generation (16 draws) misses TOL most of the time: the contract's
    # tolerance needs the best-so-far over all generations
    rng = np.random.default_rng(1)
    one_gen = np.sum((rng.uniform(-1.0, 1.0, size=(2000, POP, DIMS)) - SHIFT) ** 2, axis=2).min(axis=1)
    assert np.mean(one_gen < TOL) < 0.5


def test_matches_order_statistics_in_one_dimension():
    """In 1-d with radius 1, ``min |x|`` over m uniform samples has mean ``1 / (m + 1)``."""
    es = RandomSearch(8, num_dims=1, radius=1.0)
    gens, seeds = 25, 400
    m = 8 * gens

    def run(key):
        def step(state, k):
            k_ask, k_tell = jax.random.split(k)
            x, state = es.ask(k_ask, state)
            state, _ = es.tell(k_tell, state, x, jnp.abs(x[:, 0]))
            return state, None

        state, _ = jax.lax.scan(step, es.init(key), jax.random.split(key, gens))
        return state.best_fitness

    best = np.asarray(fast_jit(jax.vmap(run))(jax.random.split(jax.random.key(0), seeds)))
    expected, sd = 1.0 / (m + 1), 1.0 / (m + 1)  # the minimum of m uniforms on [0, 1] is ~ Beta(1, m)
    assert abs(best.mean() - expected) < 4 * sd / np.sqrt(seeds)
    assert np.all((best >= 0) & (best <= 1))


def test_samples_stay_in_the_box_and_bad_arguments():
    es = RandomSearch(64, solution=jnp.array([3.0, -2.0]), radius=0.5)
    x, _ = fast_jit(es.ask)(jax.random.key(0), fast_jit(es.init)(jax.random.key(1)))
    assert np.all(np.abs(np.asarray(x) - np.array([3.0, -2.0])) <= 0.5)
    with pytest.raises(ValueError, match="radius"):
        RandomSearch(4, num_dims=2, radius=0.0)
