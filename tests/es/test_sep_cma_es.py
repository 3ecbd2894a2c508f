"""Sep-CMA-ES (Ros & Hansen 2008): reference update, convergence, robustness, vmap exactness."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tests.es.scan_runner import check_vmap_over_seeds_and_sigma_init, make_run, sphere

from evotensor.core.numerics import exact_sum
from evotensor.es import SepCMAES


def reference_step(n, lam, state, x, f):
    """The paper's equations, written out with Python loops in float64."""
    mu = lam // 2
    w = [math.log((lam + 1) / 2) - math.log(i + 1) for i in range(mu)]
    w = [v / sum(w) for v in w]
    mueff = 1 / sum(v * v for v in w)
    ccov = (1 / mueff) * 2 / (n + 2**0.5) ** 2 + (1 - 1 / mueff) * min(
        1, (2 * mueff - 1) / ((n + 2) ** 2 + mueff)
    )
    ccov *= (n + 2) / 3
    cs = (mueff + 2) / (n + mueff + 3)
    ds = 1 + 2 * max(0, math.sqrt((mueff - 1) / (n + 1)) - 1) + cs
    cc = 4 / (n + 4)
    chin = n**0.5 * (1 - 1 / (4 * n) + 1 / (21 * n * n))
    m, sigma, ps, pc, c, g = (np.array(state[k], np.float64) for k in ("mean", "sigma", "ps", "pc", "c", "g"))
    idx = np.argsort(f)
    y = [(x[idx[i]] - m) / sigma for i in range(mu)]
    yw = sum(w[i] * y[i] for i in range(mu))
    ps = (1 - cs) * ps + math.sqrt(cs * (2 - cs) * mueff) * yw / np.sqrt(c)
    g = g + 1
    h = np.linalg.norm(ps) / math.sqrt(1 - (1 - cs) ** (2 * g)) < (1.4 + 2 / (n + 1)) * chin
    pc = (1 - cc) * pc + h * math.sqrt(cc * (2 - cc) * mueff) * yw
    c1, cmu = ccov / mueff, ccov * (1 - 1 / mueff)
    c = (
        (1 - c1 - cmu) * c
        + c1 * (pc**2 + (1 - h) * cc * (2 - cc) * c)
        + cmu * sum(w[i] * y[i] ** 2 for i in range(mu))
    )
    sigma = sigma * math.exp(cs / ds * (np.linalg.norm(ps) / chin - 1))
    return dict(mean=sum(w[i] * x[idx[i]] for i in range(mu)), sigma=sigma, ps=ps, pc=pc, c=c, g=g)


def test_update_matches_paper_reference():
    n = 7
    es = SepCMAES(num_dims=n, sigma_init=0.7, mean_init=np.linspace(-1, 1, n))
    lam = es.population_size
    params = es.default_params()
    ask, tell = jax.jit(es.ask), jax.jit(es.tell)
    state = es.init(jax.random.key(0), params)
    rot = np.random.default_rng(0).standard_normal((n, n))
    ref = dict(mean=np.linspace(-1, 1, n), sigma=0.7, ps=np.zeros(n), pc=np.zeros(n), c=np.ones(n), g=0)
    for g in range(25):
        x, state = ask(jax.random.key(g), state, params)
        xn = np.asarray(x, np.float64)
        f = np.sum((xn @ rot) ** 2 * np.logspace(0, 3, n), axis=1)
        state, _ = tell(jax.random.key(g), state, x, jnp.asarray(f, jnp.float32), params)
        ref = reference_step(n, lam, ref, xn, f)
        np.testing.assert_allclose(state.mean, ref["mean"], rtol=2e-4, atol=1e-5)
        np.testing.assert_allclose(state.sigma, ref["sigma"], rtol=2e-4)
        np.testing.assert_allclose(state.c, ref["c"], rtol=2e-4)
        np.testing.assert_allclose(state.p_sigma, ref["ps"], rtol=2e-4, atol=1e-5)
        # keep the reference on the same trajectory (float32 vs float64 rounding)
        ref = dict(
            mean=np.asarray(state.mean, np.float64),
            sigma=float(state.sigma),
            ps=np.asarray(state.p_sigma, np.float64),
            pc=np.asarray(state.p_c, np.float64),
            c=np.asarray(state.c, np.float64),
            g=g + 1,
        )


def test_solves_10d_sphere_and_separable_ellipsoid():
    """Documented tolerance: f < 1e-12 on the 10-d sphere and < 1e-8 on a 10-d ellipsoid (1e4)."""
    es = SepCMAES(num_dims=10, sigma_init=1.0, mean_init=np.full(10, 3.0))
    _, best = make_run(es, sphere, 400)(jax.random.key(0), es.default_params())
    assert float(best[-1]) < 1e-12
    scales = jnp.logspace(0, 4, 10)
    _, best = make_run(es, lambda x: exact_sum(scales * x**2), 600)(jax.random.key(0), es.default_params())
    assert float(best[-1]) < 1e-8


@pytest.mark.slow  # ~3 s each; CMAES keeps its 3000-generation check in the default tier
def test_3000_generations_stay_finite_float32():
    es = SepCMAES(num_dims=30, mean_init=np.full(30, 3.0))
    state, best = make_run(es, sphere, 3000)(jax.random.key(1), es.default_params())
    assert all(bool(jnp.all(jnp.isfinite(leaf))) for leaf in jax.tree_util.tree_leaves(state))
    assert float(best[-1]) < 1e-20


def test_nonfinite_fitness_is_ranked_last():
    es = SepCMAES(num_dims=4)
    params = es.default_params()
    state = es.init(jax.random.key(0), params)
    x, state = es.ask(jax.random.key(1), state, params)
    f = sphere(x)
    s1, _ = jax.jit(es.tell)(jax.random.key(2), state, x, f.at[2].set(jnp.nan), params)
    s2, _ = jax.jit(es.tell)(jax.random.key(2), state, x, f.at[2].set(1e30), params)
    for a, b in zip(jax.tree_util.tree_leaves(s1), jax.tree_util.tree_leaves(s2)):
        np.testing.assert_array_equal(a, b)


def test_bad_arguments():
    with pytest.raises(ValueError, match="sigma_init"):
        SepCMAES(num_dims=3, sigma_init=-1.0)
    with pytest.raises(ValueError, match="mean_init"):
        SepCMAES(num_dims=3, mean_init=np.zeros(2))


def test_vmap_over_seeds_and_sigma_init_is_bit_identical():
    check_vmap_over_seeds_and_sigma_init(SepCMAES(num_dims=8, mean_init=np.full(8, 2.0)), generations=15)
