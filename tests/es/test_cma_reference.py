"""CMA-ES against pycma (the reference implementation), in float64.

x64 is switched on only inside this module's tests (``jax.enable_x64`` context in an autouse
fixture), so no other test module sees it.
"""

from __future__ import annotations

import math
import warnings

import cma
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cma.utilities.math import Mh
from tests.es.scan_runner import make_step

from evotensor.es.cma_es import CMAES
from evotensor.es.core.cma import cma_update


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


def pycma_es(n, lam, seed=1, x0=None, sigma0=0.5, **extra):
    # CSA forced: pycma switches to two-point adaptation (TPA) for n >= 300 (tested further below)
    opts = {
        "popsize": lam,
        "CMA_mirrors": 0,
        "verbose": -9,
        "seed": seed,
        "AdaptSigma": cma.sigma_adaptation.CMAAdaptSigmaCSA,
    }
    opts.update(extra)
    x0 = np.ones(n) * 0.5 if x0 is None else x0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cma.CMAEvolutionStrategy(x0, sigma0, opts)


def default_lam(n):
    return 4 + int(3 * math.log(n))


CASES = [(n, lam) for n in (2, 3, 5, 10, 40, 100, 1000) for lam in sorted({default_lam(n), 6, 13, 64, 255})]


@pytest.mark.parametrize("n,lam", CASES)
def test_constants_equal_pycma(n, lam):
    es = pycma_es(n, lam)
    ours = CMAES(lam, num_dims=n)
    c = ours.constants
    p = es.sm.parameters(mueff=es.sp.weights.mueff, lam=es.sp.weights.lambda_)
    np.testing.assert_allclose(c["weights"], np.asarray(es.sp.weights), rtol=1e-12, atol=1e-15)
    expected = {
        "mu_eff": es.sp.weights.mueff,
        "c_sigma": es.adapt_sigma.cs,
        "d_sigma": es.adapt_sigma.damps,
        "c_c": es.sp.cc,
        "c_1": p["c1"],
        "c_mu": p["cmu"],
        "chi_n": Mh.chiN(n),
        "lazy_gap": es.sm.lazy_update_gap,
    }
    for name, value in expected.items():
        assert c[name] == pytest.approx(value, rel=1e-12, abs=0), name
    # the sp copies of c1/cmu agree too (pycma computes them twice)
    assert c["c_1"] == pytest.approx(es.sp.c1, rel=1e-12)
    assert c["c_mu"] == pytest.approx(es.sp.cmu, rel=1e-12)
    # the params pytree carries the same values in float64
    params = ours.default_params()
    assert params.weights.dtype == jnp.float64
    np.testing.assert_allclose(np.asarray(params.weights), c["weights"], rtol=0, atol=0)


@pytest.mark.parametrize("n,lam", [(2, 6), (5, 8), (10, 10), (40, 15), (100, 30)])
def test_tutorial_preset_equals_purecma(n, lam):
    from cma.more_algorithms import purecma

    ref = purecma.CMAESParameters(n, lam)
    c = CMAES(lam, num_dims=n, preset="tutorial").constants
    np.testing.assert_allclose(c["weights"], ref.weights, rtol=1e-12, atol=1e-15)
    for ours, theirs in [
        ("mu_eff", "mueff"),
        ("c_sigma", "cs"),
        ("c_c", "cc"),
        ("c_1", "c1"),
        ("c_mu", "cmu"),
        ("d_sigma", "damps"),
        ("chi_n", "chiN"),
    ]:
        assert c[ours] == pytest.approx(getattr(ref, theirs), rel=1e-12), ours
    assert c["lazy_gap"] == pytest.approx(ref.lazy_gap_evals / lam, rel=1e-12)


def rotated_ellipsoid(n, seed=3):
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((n, n)))
    scales = 1e6 ** (np.arange(n) / max(n - 1, 1))

    def f(x):
        y = np.asarray(x) @ q.T
        return np.sum(scales * y**2, axis=-1)

    return f


_jit_update = jax.jit(cma_update, static_argnames=("squared_csa", "two_point"))


def state_from_pycma(es, n, lam):
    """``(ours, params, state)``: our CMAES with ``es``'s start (mean linspace(-1, 1), sigma 0.5) and
    pycma's initial C, B, D (pycma breaks ties of eigenvalues, so its C is slightly non-isotropic)."""
    ours = CMAES(lam, num_dims=n, sigma_init=0.5, mean_init=np.linspace(-1, 1, n))
    params = ours.default_params()
    state = ours.init(jax.random.key(0), params)
    state = state.replace(C=jnp.asarray(es.sm.C), B=jnp.asarray(es.sm.B), D=jnp.asarray(es.sm.D))
    return ours, params, state


def assert_state_equals_pycma(state, es, g, **more):
    """Mean, sigma, both paths and C of our state equal pycma's ``es`` (float64, rtol 1e-9); ``more``
    maps further state fields to pycma's values."""
    pairs = {"mean": es.mean, "sigma": es.sigma, "p_sigma": es.adapt_sigma.ps, "p_c": es.pc, "C": es.sm.C}
    pairs.update(more)
    for name, ref in pairs.items():
        got = getattr(state, name)
        message = f"{name} at generation {g + 1}"
        np.testing.assert_allclose(np.asarray(got), np.asarray(ref), rtol=1e-9, atol=1e-12, err_msg=message)


@pytest.mark.parametrize("n,lam", [(3, 7), (10, 10), (10, 24), (100, 17)])
def test_lock_step_with_pycma(n, lam):
    """Feed pycma's samples and fitness into our update; compare everything for 50 generations."""
    es = pycma_es(n, lam, seed=7, x0=np.linspace(-1, 1, n))
    f = rotated_ellipsoid(n)
    _, params, state = state_from_pycma(es, n, lam)
    n_eigen = 0
    for g in range(50):
        X = np.asarray(es.ask())
        F = f(X)
        state, metrics = _jit_update(state, jnp.asarray(X), jnp.asarray(F), params)
        es.tell(list(X), list(F))
        n_eigen += int(metrics["eigen_updated"])
        assert_state_equals_pycma(state, es, g)
    assert state.generation == 50
    if n == 100:  # lazy gap > 1 here: fewer decompositions than generations
        assert n_eigen < 50
    # the lazy schedule matches pycma's: same number of decompositions (pycma counts at ask)
    es.ask()
    assert n_eigen == es.sm.count_eigen


# -- two-point step-size adaptation (pycma's default from n = 300 on) -------------------------------
def pycma_tpa_es(n, lam, seed=1, x0=None, sigma0=0.5):
    """pycma with its default ``AdaptSigma=True``, which is TPA from n >= 300."""
    x0 = np.ones(n) * 0.5 if x0 is None else x0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        opts = {"popsize": lam, "CMA_mirrors": 0, "verbose": -9, "seed": seed}
        es = cma.CMAEvolutionStrategy(x0, sigma0, opts)
    assert isinstance(es.adapt_sigma, cma.sigma_adaptation.CMAAdaptSigmaTPA)
    return es


@pytest.mark.parametrize("n,lam", [(300, default_lam(300)), (300, 64), (300, 400), (1000, 255)])
def test_tpa_constants_equal_pycma(n, lam):
    es = pycma_tpa_es(n, lam)
    ours = CMAES(lam, num_dims=n)
    assert ours.step_size == "tpa" and ours.two_point  # "auto" follows pycma's TPA_dimension
    es.adapt_sigma.initialize_base(es)  # pycma sets the h_sigma path's rate lazily
    c = ours.constants
    assert c["tpa_damp"] == pytest.approx(es.adapt_sigma.sp.damp, rel=1e-12)
    assert c["tpa_c"] == es.adapt_sigma.sp.c
    assert c["c_sigma"] == pytest.approx(es.adapt_sigma.cs, rel=1e-12)
    assert cma.sigma_adaptation.tpa_abs_z_with_offset is cma.sigma_adaptation.tpa_abs_z_with_offset0
    assert es.adapt_sigma.sp.z_exponent == 0.5 and es.adapt_sigma.sp.dampdown_fac == 1


@pytest.mark.parametrize("n,lam", [(300, 20), (300, 400)])
def test_tpa_lock_step_with_pycma(n, lam):
    """pycma's TPA samples and fitness into our update: mean, sigma, both paths and C agree for 25
    generations; and our own line samples point along pycma's (mirrored pair along the mean shift)."""
    from evotensor.es.core.cma import sample

    es = pycma_tpa_es(n, lam, seed=5, x0=np.linspace(-1, 1, n))
    f = rotated_ellipsoid(n)
    ours, params, state = state_from_pycma(es, n, lam)
    assert ours.two_point
    sample_jit = jax.jit(sample, static_argnums=(2, 3))
    n_eigen = 0
    for g in range(25):
        ours_x = np.asarray(sample_jit(jax.random.key(g), state, lam, True))
        X = np.asarray(es.ask())
        if g > 0:  # rows 0 and 1 are the mirrored line samples along the last mean shift
            d0, d1 = X[0] - es.mean, X[1] - es.mean
            o0, o1 = ours_x[0] - np.asarray(state.mean), ours_x[1] - np.asarray(state.mean)
            assert np.dot(o0, d0) / (np.linalg.norm(o0) * np.linalg.norm(d0)) > 1 - 1e-9
            np.testing.assert_allclose(o1, -o0, rtol=1e-12, atol=1e-15)
            np.testing.assert_allclose(d1, -d0, rtol=1e-9, atol=1e-12)
        F = f(X)
        state, metrics = _jit_update(state, jnp.asarray(X), jnp.asarray(F), params, two_point=True)
        es.tell(list(X), list(F))
        n_eigen += int(metrics["eigen_updated"])
        assert_state_equals_pycma(state, es, g, tpa_s=es.adapt_sigma.s)
    assert float(es.adapt_sigma.s) != 0.0  # the step-size rule was exercised
    es.ask()
    assert n_eigen == es.sm.count_eigen


# -- pycma's own behavioural checks (cma/test.py doctests), over several seeds ----------------------
def elli(x, cond=1e6):
    n = x.shape[-1]
    return jnp.sum(cond ** (jnp.arange(n) / (n - 1)) * x**2, axis=-1)


def run_to_target(es, f, seeds, generations, target):
    """Evaluations until the best fitness of a generation is below ``target`` (inf if never)."""
    params = es.default_params()

    def one(key):
        return jax.lax.scan(
            make_step(es, f, params), es.init(key, params), jax.random.split(key, generations)
        )

    states, best = jax.jit(jax.vmap(one))(jax.vmap(jax.random.key)(jnp.asarray(seeds)))
    hit = np.asarray(best) < target
    gens = np.where(hit.any(axis=1), hit.argmax(axis=1) + 1, np.inf)
    return gens * es.population_size, states


def test_ellipsoid_3d_below_1e6_in_2000_evaluations():
    es = CMAES(num_dims=3, sigma_init=1.0, mean_init=np.ones(3))
    evals, _ = run_to_target(es, elli, range(10), 400, 1e-6)
    assert np.all(evals < 2000), evals


def test_rotation_invariance_within_2x():
    rot = np.linalg.qr(np.random.default_rng(0).standard_normal((3, 3)))[0]
    shift = jnp.asarray([0.3, -0.2, 0.5])

    def felli(x):
        return elli(x - shift)

    def frot(x):
        return elli((x - shift) @ jnp.asarray(rot).T)

    es = CMAES(num_dims=3, sigma_init=1.0, mean_init=np.ones(3))
    e_plain, _ = run_to_target(es, felli, range(12), 400, 1e-8)
    e_rot, _ = run_to_target(es, frot, range(12, 24), 400, 1e-8)
    assert np.all(np.isfinite(e_plain)) and np.all(np.isfinite(e_rot))
    assert np.median(e_rot) < 2 * np.median(e_plain)
    assert np.median(e_plain) < 2 * np.median(e_rot)


def test_learned_correlation_above_085_on_rotated_ellipsoid():
    rot = jnp.asarray(np.linalg.qr(np.random.default_rng(1).standard_normal((4, 4)))[0])

    def frot(x):
        return elli(x @ rot.T)

    es = CMAES(num_dims=4, sigma_init=0.5, mean_init=np.array([1.0, 0, 0, 0]))
    evals, states = run_to_target(es, frot, range(5), 400, 1e-10)
    assert np.all(np.isfinite(evals))
    for C in np.asarray(states.C):
        corr = C / np.sqrt(np.outer(np.diag(C), np.diag(C)))
        assert np.max(np.abs(corr - np.diag(np.diag(corr)))) > 0.85


# -- (iii) statistics: evaluations-to-target distributions against pycma (slow) ---------------------
def _functions(n):
    rot = np.linalg.qr(np.random.default_rng(42).standard_normal((n, n)))[0]
    scales = 1e6 ** (np.arange(n) / (n - 1))
    return {
        "sphere": (lambda x: np.sum(x**2, -1), lambda x: jnp.sum(x**2, -1)),
        "ellipsoid": (lambda x: np.sum(scales * x**2, -1), lambda x: jnp.sum(jnp.asarray(scales) * x**2, -1)),
        "rotated_ellipsoid": (
            lambda x: np.sum(scales * (x @ rot.T) ** 2, -1),
            lambda x: jnp.sum(jnp.asarray(scales) * (x @ jnp.asarray(rot).T) ** 2, -1),
        ),
        "rosenbrock": (
            lambda x: np.sum(100 * (x[..., 1:] - x[..., :-1] ** 2) ** 2 + (1 - x[..., :-1]) ** 2, -1),
            lambda x: jnp.sum(100 * (x[..., 1:] - x[..., :-1] ** 2) ** 2 + (1 - x[..., :-1]) ** 2, -1),
        ),
        "rastrigin": (
            lambda x: 10 * n + np.sum(x**2 - 10 * np.cos(2 * np.pi * x), -1),
            lambda x: 10 * n + jnp.sum(x**2 - 10 * jnp.cos(2 * jnp.pi * x), -1),
        ),
    }


def pycma_evals_to_target(f, n, x0, sigma0, target, seed, max_evals, restarts=0, bipop=False):
    count = {"evals": 0, "hit": None}

    def wrapped(x):
        count["evals"] += 1
        v = float(f(np.asarray(x)))
        if v <= target and count["hit"] is None:
            count["hit"] = count["evals"]
        return v

    opts = {"ftarget": target, "maxfevals": max_evals, "verbose": -9, "seed": seed, "CMA_mirrors": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cma.fmin2(wrapped, x0, sigma0, opts, restarts=restarts, bipop=bipop, incpopsize=2)
    return np.inf if count["hit"] is None else count["hit"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sphere", "ellipsoid", "rotated_ellipsoid", "rosenbrock"])
def test_evaluations_to_target_match_pycma(name):
    from scipy.stats import mannwhitneyu

    n, seeds, target = 5, 24, 1e-8
    f_np, f_jax = _functions(n)[name]
    x0 = np.full(n, 0.5) if name != "rosenbrock" else np.zeros(n)
    es = CMAES(num_dims=n, sigma_init=0.5, mean_init=x0)
    ours, _ = run_to_target(es, f_jax, range(100, 100 + seeds), 3000, target)
    theirs = np.array(
        [
            pycma_evals_to_target(f_np, n, x0, 0.5, target, s + 1, 3000 * es.population_size)
            for s in range(seeds)
        ]
    )
    # Rosenbrock: both sometimes end in the local optimum; compare success counts and the successes
    assert abs(np.isfinite(ours).sum() - np.isfinite(theirs).sum()) <= seeds // 4
    big = 1e12
    p = mannwhitneyu(
        np.where(np.isfinite(ours), ours, big), np.where(np.isfinite(theirs), theirs, big)
    ).pvalue
    assert p > 0.01, (name, np.median(ours), np.median(theirs), p)


@pytest.mark.slow
@pytest.mark.parametrize("bipop", [False, True])
def test_restarts_on_rastrigin_match_pycma(bipop):
    from scipy.stats import mannwhitneyu

    from evotensor.es import BIPOPCMAES, IPOPCMAES

    n, seeds, target = 5, 16, 1e-8
    f_np, f_jax = _functions(n)["rastrigin"]
    x0 = np.full(n, 2.0)
    cls = BIPOPCMAES if bipop else IPOPCMAES
    es = cls(num_dims=n, max_population_size=256, sigma_init=2.0, mean_init=x0)
    params = es.default_params()

    def one(key):
        def step(state, k):
            k1, k2 = jax.random.split(k)
            x, state = es.ask(k1, state, params)
            state, _ = es.tell(k2, state, x, f_jax(x), params)
            return state, (state.best_fitness, state.evaluations)

        return jax.lax.scan(step, es.init(key, params), jax.random.split(key, 2500))[1]

    best, evals = jax.jit(jax.vmap(one))(jax.vmap(jax.random.key)(jnp.arange(seeds) + 7))
    hit = np.asarray(best) <= target
    ours = np.where(hit.any(1), np.asarray(evals)[np.arange(seeds), hit.argmax(1)], np.inf)
    theirs = np.array(
        [
            pycma_evals_to_target(f_np, n, x0, 2.0, target, s + 1, 2e5, restarts=9, bipop=bipop)
            for s in range(seeds)
        ]
    )
    assert np.isfinite(ours).sum() >= seeds - 3 and np.isfinite(theirs).sum() >= seeds - 3
    big = 1e12
    p = mannwhitneyu(
        np.where(np.isfinite(ours), ours, big), np.where(np.isfinite(theirs), theirs, big)
    ).pvalue
    assert p > 0.01, (bipop, np.median(ours), np.median(theirs), p)
