import contextlib
import functools
import itertools
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
_epsilon = jax.jit(sel.lexicase_epsilon)


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
    """Plain loop: non-finite errors are the worst; on a case where the pool has a finite error,
    only the finite errors within epsilon of the best survive. The survivors are listed in group
    order (by the first row bit-identical to theirs, then by index) before the pick."""
    errors = np.where(np.isfinite(errors), errors, np.inf).astype(np.float32)
    bits = errors.view(np.uint32)
    first = {}
    rep = [first.setdefault(bits[i].tobytes(), i) for i in range(errors.shape[0])]
    out = []
    for s in range(orders.shape[0]):
        pool = list(range(errors.shape[0]))
        for c in orders[s]:
            best = min(errors[i, c] for i in pool)
            if np.isfinite(best):
                bound = np.float32(best + np.float32(eps[c]))
                pool = [i for i in pool if np.isfinite(errors[i, c]) and errors[i, c] <= bound]
        pool.sort(key=lambda i: (rep[i], i))
        out.append(pool[min(int(np.floor(np.float32(u[s]) * len(pool))), len(pool) - 1)])
    return out


@functools.partial(jax.jit, static_argnums=(1, 2))
def _draws(key, n, n_cases):
    k_order, k_pick = jax.random.split(key)
    return jnp.argsort(jax.random.uniform(k_order, (n, n_cases)), axis=1), jax.random.uniform(k_pick, (n,))


def _documented_draws(key, n, n_cases):
    orders, u = _draws(key, n, n_cases)
    return np.asarray(orders), np.asarray(u)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 4), min_size=POP * 5, max_size=POP * 5), seeds)
def test_epsilon_lexicase_matches_python_loop(flat, seed):
    errors = np.asarray(flat, np.float32).reshape(POP, 5)
    errors[0, 0], errors[1, 1], errors[2, 2] = np.nan, -np.inf, np.inf
    key = jax.random.key(seed)
    got = np.asarray(_lexicase(key, jnp.asarray(errors)))
    eps = np.asarray(_epsilon(jnp.asarray(errors)))
    finite = np.where(np.isfinite(errors), errors, np.nan)
    mad = np.nanmedian(np.abs(finite - np.nanmedian(finite, 0)), 0)
    np.testing.assert_allclose(eps, mad)
    orders, u = _documented_draws(key, N, 5)
    assert got.tolist() == _lexicase_reference(errors, eps, orders, u)


def test_lexicase_prefers_specialists():
    lexicase = jax.jit(lambda k, e: sel.epsilon_lexicase(k, e, 400, epsilon=jnp.zeros(2)))
    # individual 3 is best on every case: with epsilon 0 it is always selected
    errors = jnp.asarray([[1.0, 2.0], [2.0, 1.0], [3.0, 3.0], [0.5, 0.5]])
    idx = lexicase(jax.random.key(0), errors)
    assert np.all(np.asarray(idx) == 3)
    errors = jnp.asarray([[0.0, 5.0], [5.0, 0.0], [3.0, 3.0], [3.0, 3.0]])  # 2, 3 are never best
    idx = np.asarray(lexicase(jax.random.key(0), errors))
    assert set(idx.tolist()) == {0, 1}


_groups = jax.jit(sel.duplicate_groups)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 2), min_size=POP * 3, max_size=POP * 3))
def test_duplicate_groups_separate_distinct_rows(flat):
    errors = np.asarray(flat, np.float32).reshape(POP, 3)  # few values: many duplicate rows
    errors[:2] = np.inf  # two identical rows of infinities
    gid = np.asarray(_groups(jnp.asarray(errors)))
    for i in range(POP):
        for j in range(POP):
            same = bool(np.array_equal(errors[i], errors[j]))
            assert (gid[i] == gid[j]) == same  # no hash collisions among these few rows


def test_lexicase_duplicates_and_long_ties_match_the_reference():
    # many identical rows, so pools never shrink to one individual; the distinct rows differ on one
    # case each, so a pool keeps two kinds of rows until that case comes (a premature stop shows)
    rng = np.random.default_rng(3)
    base = np.vstack([np.zeros((1, 40)), np.eye(5, 40)]).astype(np.float32)
    errors = base[np.concatenate([np.arange(6), rng.integers(0, 6, POP - 6)])]
    key = jax.random.key(11)
    got = np.asarray(_lexicase(key, jnp.asarray(errors)))
    eps = np.asarray(_epsilon(jnp.asarray(errors)))
    orders, u = _documented_draws(key, N, 40)
    assert got.tolist() == _lexicase_reference(errors, eps, orders, u)
    # every selection on the same case order, the decisive cases last: all pools hold two kinds of
    # rows until the very end, so stopping one case early changes the result
    order = np.concatenate([np.arange(5, 40), [0, 1, 2, 3, 4]])
    same = np.tile(order, (N, 1))
    draws = jax.jit(sel.lexicase_from_draws)(jnp.asarray(errors), jnp.asarray(eps), jnp.asarray(same), u)
    expected = _lexicase_reference(errors, eps, same, u)
    assert np.asarray(draws).tolist() == expected and all(not errors[i].any() for i in expected)


@contextlib.contextmanager
def _small_kernel_stages():
    """Shrink the kernel's tuning so that a population of 64 goes through every stage: [64] masks in
    chunks of 8 selections, member lists of 32, 16, 8, then the tail of 4 (results must not change)."""
    saved = sel._TAIL, sel._SHRINK, sel._CHUNK_ELEMENTS, sel._BLOCK
    sel._TAIL, sel._SHRINK, sel._CHUNK_ELEMENTS, sel._BLOCK = 4, 2, 64 * 8, 2
    try:
        yield
    finally:
        sel._TAIL, sel._SHRINK, sel._CHUNK_ELEMENTS, sel._BLOCK = saved


STAGED_POP, STAGED_CASES, STAGED_N = 64, 7, 21  # 21 selections: the last chunk is padded
with _small_kernel_stages():
    _staged = (
        jax.jit(sel.lexicase_from_draws)
        .lower(
            jnp.zeros((STAGED_POP, STAGED_CASES)),
            jnp.zeros(STAGED_CASES),
            jnp.zeros((STAGED_N, STAGED_CASES), jnp.int32),
            jnp.zeros(STAGED_N),
        )
        .compile()
    )


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.integers(0, 3), min_size=STAGED_POP * STAGED_CASES, max_size=STAGED_POP * STAGED_CASES),
    st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.0]), min_size=STAGED_CASES, max_size=STAGED_CASES),
    st.integers(0, 8),
    seeds,
)
def test_staged_kernel_matches_python_loop(flat, eps, n_bad, seed):
    # few values and wide epsilons: pools of every size, chunks that run out of cases at every stage,
    # many duplicate rows, non-finite errors
    errors = np.asarray(flat, np.float32).reshape(STAGED_POP, STAGED_CASES)
    errors[:n_bad, seed % STAGED_CASES] = [np.nan, np.inf, -np.inf, np.inf, np.nan, np.inf, np.inf, np.nan][
        :n_bad
    ]
    orders, u = _documented_draws(jax.random.key(seed), STAGED_N, STAGED_CASES)
    eps = np.asarray(eps, np.float32)
    got = _staged(jnp.asarray(errors), jnp.asarray(eps), jnp.asarray(orders, jnp.int32), jnp.asarray(u))
    assert np.asarray(got).tolist() == _lexicase_reference(errors, eps, orders, u)


def test_staged_kernel_pools_that_never_fit_a_stage():
    orders, u = _documented_draws(jax.random.key(5), STAGED_N, STAGED_CASES)
    rng = np.random.default_rng(0)
    # nobody is ever eliminated: every pool keeps all 64 rows (the [pop] mask stage runs out of cases)
    close = (np.arange(STAGED_POP)[:, None] * 1e-3 + rng.random((1, STAGED_CASES))).astype(np.float32)
    # 10 rows near 0 that no case splits, the others far: pools of 10 never fit the stage of 8
    ten = np.where(np.arange(STAGED_POP)[:, None] < 10, close, 5.0 + rng.random((STAGED_POP, STAGED_CASES)))
    ten = rng.permutation(ten.astype(np.float32))
    for errors in (close, ten):
        eps = np.ones(STAGED_CASES, np.float32)
        got = _staged(jnp.asarray(errors), jnp.asarray(eps), jnp.asarray(orders, jnp.int32), jnp.asarray(u))
        expected = _lexicase_reference(errors, eps, orders, u)
        assert np.asarray(got).tolist() == expected
    assert len(set(expected)) > 3 and all(ten[i, 0] < 5 for i in expected)


def _exact_lexicase_probabilities(errors, eps):
    """Selection probabilities by enumeration: every case order is equally likely, then the pick is
    uniform over the final pool."""
    pop, n_cases = errors.shape
    probs = np.zeros(pop)
    orders = list(itertools.permutations(range(n_cases)))
    for order in orders:
        pool = list(range(pop))
        for c in order:
            best = min(errors[i, c] for i in pool)
            if np.isfinite(best):
                pool = [i for i in pool if np.isfinite(errors[i, c]) and errors[i, c] <= best + eps[c]]
        for i in pool:
            probs[i] += 1 / (len(orders) * len(pool))
    return probs


def test_epsilon_lexicase_frequencies_match_enumeration():
    errors = np.asarray(
        [
            [0.0, 3.0, 2.0, 1.0],
            [1.0, 0.0, 2.5, 2.0],
            [2.0, 2.0, 0.0, 0.4],
            [0.3, 0.2, 2.2, 3.0],
            [0.3, 0.2, 2.2, 3.0],
            [np.inf, 0.0, 0.0, 0.0],
            [4.0, 4.0, 4.0, 0.5],
        ],
        np.float32,
    )  # a duplicate pair (3, 4) and a row with an infinite error
    eps = np.asarray([0.35, 0.1, 0.3, 0.5], np.float32)
    expected = _exact_lexicase_probabilities(errors, eps)
    draws = 40000
    idx = np.asarray(
        jax.jit(lambda k: sel.epsilon_lexicase(k, jnp.asarray(errors), draws, jnp.asarray(eps)))(
            jax.random.key(2)
        )
    )
    counts = np.bincount(idx, minlength=len(errors))
    assert counts[expected == 0].sum() == 0  # never selectable: never selected
    seen = expected > 0
    chi2 = np.sum((counts[seen] - draws * expected[seen]) ** 2 / (draws * expected[seen]))
    assert chi2 < 22.5  # chi-square, 5 degrees of freedom, p = 0.0004
    assert expected[5] > 0.05  # the row with an inf wins whenever case 0 comes last among splits


_lexicase_many = jax.jit(lambda k, e: sel.epsilon_lexicase(k, e, 64))


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.floats(-10, 10, width=32), min_size=POP * 4, max_size=POP * 4),
    st.lists(st.booleans(), min_size=POP, max_size=POP),
    seeds,
)
def test_lexicase_selections_survive_their_first_case_and_never_pick_failed_rows(flat, failed, seed):
    errors = np.asarray(flat, np.float32).reshape(POP, 4)
    errors[np.asarray(failed)] = np.inf  # the strategy's convention for a row with a non-finite error
    key = jax.random.key(seed)
    got = np.asarray(_lexicase_many(key, jnp.asarray(errors)))
    eps = np.asarray(_epsilon(jnp.asarray(errors)))
    orders, _ = _documented_draws(key, 64, 4)
    if all(failed):
        return  # everything failed: any pick is fine (the pool stays whole)
    assert not np.any(np.asarray(failed)[got])
    for s, i in enumerate(got):
        c = orders[s, 0]  # the first case sees the whole population
        assert errors[i, c] <= np.float32(errors[:, c].min() + eps[c])


_nanmedian_mad = jax.jit(
    lambda finite: jnp.nanmedian(jnp.abs(finite - jnp.nanmedian(finite, axis=0)), axis=0)
)  # the sort-based median absolute deviation: the reference


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.sampled_from([0.0, -0.0, 1.0, -2.5, 1e-30, 7.0, 1e30, np.inf, -np.inf, np.nan]),
        min_size=96,
        max_size=96,
    ),
    st.lists(st.floats(-1e6, 1e6, width=32), min_size=96, max_size=96),
    st.integers(0, 23),
    st.booleans(),
)
def test_lexicase_epsilon_equals_the_sorting_median(special, normal, n_nan_rows, ties):
    values = np.asarray(special if ties else normal, np.float32).reshape(24, 4)
    values[:n_nan_rows, 0] = np.nan  # any count of finite errors, none included
    mad = np.asarray(_nanmedian_mad(jnp.asarray(np.where(np.isfinite(values), values, np.nan))))
    expected = np.where(np.isfinite(mad), mad, 0.0).astype(np.float32)
    got = np.asarray(_epsilon(jnp.asarray(values)))
    assert np.array_equal(got.view(np.uint32), expected.view(np.uint32))


def test_lexicase_nonfinite_errors_lose_even_when_epsilon_overflows():
    # on case 0 the best finite error plus epsilon overflows to inf; row 1's inf must still lose
    lexicase = jax.jit(lambda k, e, eps: sel.epsilon_lexicase(k, e, 200, eps))
    big = np.float32(3e38)
    errors = jnp.asarray([[big, big], [jnp.inf, 0.0], [jnp.nan, 0.0], [-jnp.inf, 0.0]])
    idx = np.asarray(lexicase(jax.random.key(0), errors, jnp.full(2, big)))
    assert set(idx.tolist()) == {0}
    # a case on which every error is non-finite keeps the whole pool
    errors = jnp.asarray([[jnp.nan, 1.0], [jnp.inf, 0.0], [jnp.nan, 2.0], [jnp.nan, jnp.nan]])
    idx = np.asarray(lexicase(jax.random.key(1), errors, jnp.zeros(2)))
    assert set(idx.tolist()) == {1}


_parsimony = jax.jit(sel.parsimony_fitness)
_covariant = jax.jit(sel.covariant_parsimony)


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.floats(-100, 100, width=32), min_size=POP, max_size=POP),
    st.lists(st.integers(1, 64), min_size=POP, max_size=POP),
    st.floats(0, 1, width=32),
)
def test_parsimony_fitness_and_covariant_coefficient_match_numpy(fit, length, c):
    f = np.asarray(fit, np.float32)
    n = np.asarray(length, np.int32)
    got = np.asarray(_parsimony(jnp.asarray(f), jnp.asarray(n), jnp.float32(c)))
    np.testing.assert_allclose(got, f + np.float32(c) * n.astype(np.float32), rtol=1e-6, atol=1e-6)
    # gplearn's "auto": np.cov(length, raw)[1, 0] / np.var(length), raw maximized (here -f)
    auto = float(_covariant(jnp.asarray(f), jnp.asarray(n)))
    if np.var(n) == 0:
        assert auto == 0.0
    else:
        ref = np.cov(n.astype(np.float64), -f.astype(np.float64))[1, 0] / np.var(n.astype(np.float64))
        assert auto == pytest.approx(ref, rel=1e-3, abs=1e-4)


def test_covariant_coefficient_removes_the_length_trend():
    # fitness = a - b * length exactly (longer is better): the coefficient is b * n / (n - 1) (gplearn's
    # ddof=1 covariance over ddof=0 variance), positive, so the penalty counters the trend
    length = jnp.arange(1, 11, dtype=jnp.int32)
    c = float(_covariant(3.0 - 0.2 * length, length))
    assert c == pytest.approx(0.2 * 10 / 9, rel=1e-5)
    assert float(_covariant(jnp.ones(10), jnp.full(10, 5))) == 0.0  # no length variance
    overflow = jnp.asarray([3e38, 3e38] + [1.0] * 8, jnp.float32)  # statistics overflow: no pressure
    assert float(_covariant(overflow, length)) == 0.0
    # the penalized fitness never holds inf/NaN
    pen = _parsimony(jnp.asarray([3e38, 1.0]), jnp.asarray([64, 3]), jnp.float32(1e37))
    assert np.all(np.isfinite(np.asarray(pen))) and float(pen[0]) > float(pen[1])


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
    with pytest.raises(ValueError, match="epsilon must be >= 0"):
        sel.epsilon_lexicase(jax.random.key(0), jnp.ones((4, 2)), 3, jnp.asarray([0.1, -0.1]))
    with pytest.raises(ValueError, match=r"epsilon must have shape \(2,\)"):
        sel.epsilon_lexicase(jax.random.key(0), jnp.ones((4, 2)), 3, jnp.zeros(3))


def test_lexicase_from_draws_names_the_argument_with_a_wrong_shape():
    errors = jnp.zeros((6, 4))
    eps, orders, u = jnp.zeros(4), jnp.zeros((3, 4), jnp.int32), jnp.zeros(3)
    assert sel.lexicase_from_draws(errors, eps, orders, u).shape == (3,)
    for args, name in [
        ((jnp.zeros(6), eps, orders, u), "errors"),
        ((errors, jnp.zeros(5), orders, u), "epsilon"),
        ((errors, eps, jnp.zeros((3, 5), jnp.int32), u), "orders"),
        ((errors, eps, orders, jnp.zeros(2)), "u"),
    ]:
        with pytest.raises(ValueError, match=name):
            sel.lexicase_from_draws(*args)


# ---- the strategy's selections from pre-drawn bits; elites by top_k ---------------------------------

_from_bits = jax.jit(
    lambda b, f: (
        sel.tournament_from_bits(b.reshape(N, 4), f),
        sel.truncation_from_bits(b[:N], f, 0.3),
        sel.uniform_ints(b, 1000),
    )
)
_elites = jax.jit(lambda f: sel.elite_indices(f, POP))


@settings(max_examples=30, deadline=None)
@given(fitnesses, seeds)
def test_selections_from_bits_match_python_loops(fit, seed):
    bits = np.asarray(jax.random.bits(jax.random.key(seed), (N * 4,), jnp.uint32))
    tour, trunc, ints = (np.asarray(x) for x in _from_bits(jnp.asarray(bits), jnp.asarray(fit)))
    np.testing.assert_array_equal(ints, bits % 1000)
    cands = (bits % POP).reshape(N, 4)  # the documented candidates
    for i in range(N):
        best = cands[i, 0]
        for c in cands[i, 1:]:
            best = c if fit[c] < fit[best] else best
        assert tour[i] == best
    k = math.ceil(0.3 * POP)
    order = sorted(range(POP), key=lambda i: (fit[i], i))
    assert trunc.tolist() == [order[d] for d in bits[:N] % k]


def test_uniform_ints_are_uniform():
    bits = jax.random.bits(jax.random.key(0), (70_000,), jnp.uint32)
    counts = np.bincount(np.asarray(sel.uniform_ints(bits, 7)), minlength=7)
    assert counts.shape == (7,) and np.all(np.abs(counts - 10_000) < 5 * 95)  # 5 sigma


# n = POP: top_k; n = 8 <= pop // 100 + 8: the argmax passes for a few elites
_few_elites = jax.jit(lambda f: sel.elite_indices(f, 8))


@pytest.mark.parametrize("n", [POP, 8])
@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.sampled_from([0.0, -0.0, 1.0, -2.0, 3e38, -3e38, np.inf, np.nan]), min_size=POP, max_size=POP)
)
def test_elite_indices_equal_a_stable_argsort(n, fit):
    """Both ways of finding elites give jnp.argsort(stable)'s first n, ties (and -0.0 vs 0.0, NaNs)
    included."""
    fit = np.asarray(fit, np.float32)
    got = np.asarray((_elites if n == POP else _few_elites)(jnp.asarray(fit)))
    np.testing.assert_array_equal(got, np.asarray(jnp.argsort(jnp.asarray(fit), stable=True))[:n])
    key = np.where(np.isnan(fit), np.inf, fit)  # the same order by hand: NaNs last, -0.0 == 0.0
    want = sorted(range(POP), key=lambda i: (np.isnan(fit[i]), key[i], i))[:n]
    assert got.tolist() == want


def test_inverse_cdf_is_sample_from_probs_on_its_uniforms():
    probs = jnp.asarray([0.1, 0.0, 0.5, 0.4])
    key = jax.random.key(3)
    np.testing.assert_array_equal(
        sel.inverse_cdf(jax.random.uniform(key, (50,)), probs), sel.sample_from_probs(key, probs, 50)
    )
