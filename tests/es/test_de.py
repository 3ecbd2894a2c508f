"""DE (:mod:`evotensor.es.de`): distinct donors, trial vectors against a reference, argument errors
(its contract is a row of :data:`tests.es.test_contract.ARCHIVE`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.es.archive_contract import fast_jit

from evotensor.es.de import DE, de_draws, de_trials

DRAWS = fast_jit(de_draws, static_argnums=(1, 2))


def _reference_trials(population, best, donors, u, j_rand, F, CR, variant):
    """Slow loop transcription of Storn & Price's mutation + binomial crossover (float64)."""
    population = np.asarray(population, np.float64)
    n, d = population.shape
    out = population.copy()
    for i in range(n):
        r = donors[i]
        for j in range(d):
            if u[i, j] < CR or j == j_rand[i]:
                if variant == "rand/1/bin":
                    out[i, j] = population[r[0], j] + F * (population[r[1], j] - population[r[2], j])
                else:
                    out[i, j] = best[j] + F * (population[r[0], j] - population[r[1], j])
    return out


@pytest.mark.parametrize("variant", ["rand/1/bin", "best/1/bin"])
def test_trials_match_reference(variant):
    pop = np.random.default_rng(1).normal(size=(9, 6)).astype(np.float32)
    best = pop[4]
    draws = DRAWS(jax.random.key(3), 9, 6)
    trials = fast_jit(de_trials, static_argnums=(5,))
    got = trials(jnp.asarray(pop), jnp.asarray(best), draws, 0.5, 0.9, variant)
    ref = _reference_trials(
        pop,
        best,
        np.asarray(draws.donors),
        np.asarray(draws.crossover_u),
        np.asarray(draws.j_rand),
        0.5,
        0.9,
        variant,
    )
    np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-6, atol=1e-6)


@settings(max_examples=20, deadline=None)
@given(n=st.sampled_from([4, 23]), seed=st.integers(0, 2**31 - 1))
def test_donors_distinct_and_exclude_target(n, seed):
    draws = DRAWS(jax.random.key(seed), n, 3)  # one compile per population size
    donors = np.asarray(draws.donors)
    assert donors.shape == (n, 3) and donors.min() >= 0 and donors.max() < n
    for i, row in enumerate(donors):
        assert len(set(row.tolist())) == 3 and i not in row
    j = np.asarray(draws.j_rand)
    assert j.min() >= 0 and j.max() < 3


def test_greedy_selection_and_first_generation():
    es = DE(5, num_dims=2)
    params = es.default_params()
    init, ask, tell = fast_jit(es.init), fast_jit(es.ask), fast_jit(es.tell)
    state = init(jax.random.key(0), params)
    x0, state = ask(jax.random.key(1), state, params)
    np.testing.assert_array_equal(
        np.asarray(x0), np.asarray(state.population)
    )  # gen 0 evaluates the init pop
    f0 = np.array([1.0, 2.0, np.nan, 4.0, 5.0], np.float32)
    state, _ = tell(jax.random.key(2), state, x0, f0, params)
    np.testing.assert_array_equal(np.asarray(state.fitness), [1.0, 2.0, np.inf, 4.0, 5.0])
    trials, state = ask(jax.random.key(3), state, params)
    f1 = np.array([1.0, 3.0, 7.0, np.nan, -np.inf], np.float32)
    new, _ = tell(jax.random.key(4), state, trials, f1, params)
    replace = np.array([True, False, True, False, False])  # ties replace; invalid never does
    ref = np.where(replace[:, None], np.asarray(trials), np.asarray(state.population))
    np.testing.assert_array_equal(np.asarray(new.population), ref)
    np.testing.assert_array_equal(np.asarray(new.fitness), [1.0, 2.0, 7.0, 4.0, 5.0])


def test_bad_arguments():
    with pytest.raises(ValueError, match="population_size"):
        DE(3, num_dims=2)
    with pytest.raises(ValueError, match="variant"):
        DE(8, num_dims=2, variant="rand/2/exp")
    with pytest.raises(ValueError, match="crossover_rate"):
        DE(8, num_dims=2, crossover_rate=1.5)


@pytest.mark.parametrize("n, expected", [(1, 10), (2, 20), (10, 100), (37, 370)])
def test_default_population_size_is_ten_times_the_dimension(n, expected):
    """Storn & Price (1997): NP = 10 D as the rule-of-thumb population size."""
    for variant in ("rand/1/bin", "best/1/bin"):
        assert DE(num_dims=n, variant=variant).population_size == expected
    assert DE(solution={"w": jnp.zeros((n, 1))}).population_size == expected
    assert DE(8, num_dims=n).population_size == 8  # an explicit size still wins
