import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evotensor.gp import selection as sel

POP, N = 16, 12
fitnesses = st.lists(st.integers(-5, 5).map(float), min_size=POP, max_size=POP)  # many ties
seeds = st.integers(0, 2**31 - 1)

_tournament = jax.jit(lambda k, f: sel.tournament(k, f, N, 4))
_truncation = jax.jit(lambda k, f: sel.truncation(k, f, N, 0.3))
_rank_p = jax.jit(lambda f: sel.rank_probabilities(f, 1.6))
_sample = jax.jit(lambda k, p: sel.sample_from_probs(k, p, N))
_roulette_p = jax.jit(sel.roulette_probabilities)
_lexicase = jax.jit(lambda k, e: sel.epsilon_lexicase(k, e, N))


@settings(max_examples=30, deadline=None)
@given(fitnesses, seeds)
def test_tournament_matches_python_loop(fit, seed):
    key = jax.random.key(seed)
    got = np.asarray(_tournament(key, jnp.asarray(fit)))
    cands = np.asarray(jax.random.randint(key, (N, 4), 0, POP))  # the documented draw
    for i in range(N):
        best = cands[i, 0]
        for c in cands[i, 1:]:
            if fit[c] < fit[best]:
                best = c
        assert got[i] == best


@settings(max_examples=30, deadline=None)
@given(fitnesses, seeds)
def test_truncation_matches_python_loop(fit, seed):
    key = jax.random.key(seed)
    got = np.asarray(_truncation(key, jnp.asarray(fit)))
    k = math.ceil(0.3 * POP)
    order = sorted(range(POP), key=lambda i: (fit[i], i))  # stable: ties keep population order
    draws = np.asarray(jax.random.randint(key, (N,), 0, k))
    assert got.tolist() == [order[d] for d in draws]
    assert all(fit[g] <= sorted(fit)[k - 1] for g in got)


@settings(max_examples=30, deadline=None)
@given(fitnesses)
def test_rank_probabilities_match_formula(fit):
    p = np.asarray(_rank_p(jnp.asarray(fit)))
    order = sorted(range(POP), key=lambda i: (fit[i], i))
    for pos, i in enumerate(order):
        expected = (1.6 - (2 * 1.6 - 2) * pos / (POP - 1)) / POP
        assert p[i] == pytest.approx(expected, abs=1e-6)
    assert p.sum() == pytest.approx(1.0, abs=1e-5)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-1e3, 1e3, width=32), min_size=POP, max_size=POP))
def test_roulette_probabilities_valid_for_negative_losses(fit):
    p = np.asarray(_roulette_p(jnp.asarray(fit, jnp.float32)))
    f = np.asarray(fit, np.float32)
    w = f.max() - f
    expected = w / w.sum() if w.sum() > 0 else np.full(POP, 1 / POP)
    np.testing.assert_allclose(p, expected, rtol=1e-4, atol=1e-6)
    assert np.all(p >= 0) and p.sum() == pytest.approx(1.0, abs=1e-5)
    # lower loss never gets a lower probability
    for i in range(POP):
        for j in range(POP):
            if f[i] < f[j]:
                assert p[i] >= p[j]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=POP, max_size=POP), seeds)
def test_sample_from_probs_is_the_inverse_cdf(weights, seed):
    probs = np.asarray(weights, np.float32) + np.float32(1e-3)
    key = jax.random.key(seed)
    got = np.asarray(_sample(key, jnp.asarray(probs)))
    u = np.asarray(jax.random.uniform(key, (N,)))
    cdf = np.cumsum(probs.astype(np.float32))
    for i in range(N):
        target = u[i] * cdf[-1]
        first = next((j for j in range(POP) if cdf[j] > target), POP - 1)
        assert got[i] == first


def test_rank_and_roulette_sampling_frequencies():
    fit = jnp.asarray([3.0, -1.0, 2.0, 0.5])
    idx = np.asarray(sel.rank_selection(jax.random.key(0), fit, 20000, 2.0))
    freq = np.bincount(idx, minlength=4) / 20000
    # sort positions: 1 (best), 3, 2, 0 -> probabilities 2/4, 4/3/4 ... = (2 - 2r/3)/4
    np.testing.assert_allclose(freq[[1, 3, 2, 0]], [0.5, 1 / 3, 1 / 6, 0.0], atol=0.015)
    idx = np.asarray(sel.roulette(jax.random.key(1), fit, 20000))
    freq = np.bincount(idx, minlength=4) / 20000
    w = np.array([0.0, 4.0, 1.0, 2.5])
    np.testing.assert_allclose(freq, w / w.sum(), atol=0.015)


def _lexicase_reference(errors, eps, orders, u):
    errors = np.where(np.isnan(errors), np.inf, errors)
    out = []
    for s in range(orders.shape[0]):
        pool = list(range(errors.shape[0]))
        for c in orders[s]:
            best = min(errors[i, c] for i in pool)
            pool = [i for i in pool if errors[i, c] <= best + eps[c]]
        out.append(pool[min(int(np.floor(u[s] * len(pool))), len(pool) - 1)])
    return out


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=POP * 5, max_size=POP * 5), seeds)
def test_epsilon_lexicase_matches_python_loop(flat, seed):
    errors = np.asarray(flat, np.float32).reshape(POP, 5)
    errors[0, 0] = np.nan
    key = jax.random.key(seed)
    got = np.asarray(_lexicase(key, jnp.asarray(errors)))
    eps = np.asarray(sel.lexicase_epsilon(jnp.asarray(errors)))
    finite = np.where(np.isfinite(errors), errors, np.nan)
    mad = np.nanmedian(np.abs(finite - np.nanmedian(finite, 0)), 0)
    np.testing.assert_allclose(eps, mad)
    k_order, k_pick = jax.random.split(key)  # the documented draws
    orders = np.asarray(jnp.argsort(jax.random.uniform(k_order, (N, 5)), axis=1))
    u = np.asarray(jax.random.uniform(k_pick, (N,)))
    assert got.tolist() == _lexicase_reference(errors, eps, orders, u)


def test_lexicase_prefers_specialists():
    # individual 3 is best on every case: with epsilon 0 it is always selected
    errors = jnp.asarray([[1.0, 2.0], [2.0, 1.0], [3.0, 3.0], [0.5, 0.5]])
    idx = sel.epsilon_lexicase(jax.random.key(0), errors, 50, epsilon=jnp.zeros(2))
    assert np.all(np.asarray(idx) == 3)
    errors = jnp.asarray([[0.0, 5.0], [5.0, 0.0], [3.0, 3.0]])  # 2 is never best on any case
    idx = np.asarray(sel.epsilon_lexicase(jax.random.key(0), errors, 400, epsilon=jnp.zeros(2)))
    assert set(idx.tolist()) == {0, 1}


def test_elite_indices_and_errors():
    fit = jnp.asarray([2.0, 1.0, 1.0, 0.0, 5.0])
    assert sel.elite_indices(fit, 3).tolist() == [3, 1, 2]
    with pytest.raises(ValueError, match="n=6"):
        sel.elite_indices(fit, 6)
    with pytest.raises(ValueError, match="fitness must have shape"):
        sel.tournament(jax.random.key(0), jnp.ones((2, 2)), 3)
    with pytest.raises(ValueError, match="survival_rate"):
        sel.truncation(jax.random.key(0), fit, 3, 0.0)
    with pytest.raises(ValueError, match="tournament size"):
        sel.tournament(jax.random.key(0), fit, 3, 0)
    with pytest.raises(ValueError, match="errors must have shape"):
        sel.epsilon_lexicase(jax.random.key(0), fit, 3)
