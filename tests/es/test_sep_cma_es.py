"""Sep-CMA-ES (Ros & Hansen 2008): reference update, a separable ellipsoid (its contract is a row of
:data:`tests.es.test_contract.MEAN_SIGMA`)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from tests.es.scan_runner import make_run

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


def test_solves_separable_ellipsoid():
    """Documented tolerance: f < 1e-8 on a 10-d ellipsoid (conditioning 1e4) from mean 3; the sphere
    (< 1e-12) is its contract's."""
    es = SepCMAES(num_dims=10, sigma_init=1.0, mean_init=np.full(10, 3.0))
    scales = jnp.logspace(0, 4, 10)
    _, best = make_run(es, lambda x: exact_sum(scales * x**2), 600)(jax.random.key(0), es.default_params())
    assert float(best[-1]) < 1e-8
