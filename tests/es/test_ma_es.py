"""MA-ES (Beyer & Sendhoff 2017) update against the paper.

The contract shared with MA-ES, LM-MA-ES and Rm-ES is in test_ma_family_contract.py."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from tests.es.scan_runner import sphere

from evotensor.es import MAES


def test_update_matches_paper_pseudocode():
    """One MA-ES update against Algorithm 2 written with loops in float64."""
    n = 5
    es = MAES(num_dims=n, sigma_init=0.5, mean_init=np.linspace(-1, 1, n))
    lam = es.population_size
    params = es.default_params()
    state = es.init(jax.random.key(0), params)
    M0 = np.eye(n) + 0.2 * np.random.default_rng(0).standard_normal((n, n))
    state = state.replace(M=jnp.asarray(M0, jnp.float32), s=jnp.asarray(np.linspace(0, 1, n), jnp.float32))
    x, state = jax.jit(es.ask)(jax.random.key(1), state, params)
    f = np.asarray(sphere(x - 0.3))
    new, _ = jax.jit(es.tell)(jax.random.key(2), state, x, jnp.asarray(f), params)

    mu = lam // 2
    w = [math.log(mu + 0.5) - math.log(i + 1) for i in range(mu)]
    w = [v / sum(w) for v in w]
    mueff = 1 / sum(v * v for v in w)
    cs = (mueff + 2) / (mueff + n + 5)
    c1 = 2 / ((n + 1.3) ** 2 + mueff)
    cw = min(1 - c1, 2 * (mueff + 1 / mueff - 2) / ((n + 2) ** 2 + mueff))
    ds = 1 + cs + 2 * max(0, math.sqrt((mueff - 1) / (n + 1)) - 1)
    chin = math.sqrt(n) * (1 - 1 / (4 * n) + 1 / (21 * n * n))
    z = np.asarray(state.z, np.float64)
    M = np.asarray(state.M, np.float64)
    idx = np.argsort(f)
    zw = sum(w[i] * z[idx[i]] for i in range(mu))
    dw = M @ zw
    mean = np.asarray(state.mean, np.float64) + 0.5 * dw
    s = (1 - cs) * np.asarray(state.s, np.float64) + math.sqrt(mueff * cs * (2 - cs)) * zw
    zz = sum(w[i] * np.outer(z[idx[i]], z[idx[i]]) for i in range(mu))
    M_new = M @ (np.eye(n) + c1 / 2 * (np.outer(s, s) - np.eye(n)) + cw / 2 * (zz - np.eye(n)))
    sigma = 0.5 * math.exp(cs / ds * (np.linalg.norm(s) / chin - 1))
    np.testing.assert_allclose(new.mean, mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(new.s, s, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(new.M, M_new, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(new.sigma, sigma, rtol=1e-5)
