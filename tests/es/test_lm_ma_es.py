"""LM-MA-ES (Loshchilov et al. 2019) update against the paper.

The contract shared with MA-ES, LM-MA-ES and Rm-ES is in test_ma_family_contract.py."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.es import LMMAES


def test_update_matches_paper_pseudocode():
    """Two LM-MA-ES generations against Algorithm 1 written with loops in float64."""
    n = 40
    es = LMMAES(num_dims=n, sigma_init=0.5, mean_init=np.linspace(-1, 1, n))
    lam, m = es.population_size, es.memory
    params = es.default_params()
    state = es.init(jax.random.key(0), params)
    ask, tell = jax.jit(es.ask), jax.jit(es.tell)
    mu = lam // 2
    w = [math.log(mu + 0.5) - math.log(i + 1) for i in range(mu)]
    w = [v / sum(w) for v in w]
    mueff = 1 / sum(v * v for v in w)
    cs = min(1.0, 2 * lam / n)
    cd = [1 / (1.5**j * n) for j in range(m)]
    cc = [min(1.0, lam / (4.0**j * n)) for j in range(m)]
    mean, sigma, ps, M = np.linspace(-1, 1, n), 0.5, np.zeros(n), np.zeros((m, n))
    for t in range(3):
        x, state = ask(jax.random.key(t), state, params)
        z = np.asarray(state.z, np.float64)
        d = z.copy()
        for i in range(lam):
            for j in range(min(t, m)):
                d[i] = (1 - cd[j]) * d[i] + cd[j] * M[j] * np.dot(M[j], d[i])
        np.testing.assert_allclose(np.asarray(x), mean + sigma * d, rtol=1e-4, atol=1e-5)
        f = np.sum(np.asarray(x, np.float64) ** 2 * np.logspace(0, 2, n), axis=1)
        state, _ = tell(jax.random.key(t), state, x, jnp.asarray(f, jnp.float32), params)
        idx = np.argsort(f)
        zw = sum(w[i] * z[idx[i]] for i in range(mu))
        dw = sum(w[i] * d[idx[i]] for i in range(mu))
        mean = mean + sigma * dw
        ps = (1 - cs) * ps + math.sqrt(mueff * cs * (2 - cs)) * zw
        for j in range(m):
            M[j] = (1 - cc[j]) * M[j] + math.sqrt(mueff * cc[j] * (2 - cc[j])) * zw
        sigma = sigma * math.exp(cs / 2 * (np.sum(ps**2) / n - 1))
        np.testing.assert_allclose(state.mean, mean, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(state.M, M, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(state.sigma, sigma, rtol=1e-4)


def test_memory_is_linear_in_n():
    es = LMMAES(num_dims=5000)  # no n x n array anywhere
    state = es.init(jax.random.key(0))
    assert (
        max(leaf.size for leaf in jax.tree_util.tree_leaves(state))
        <= es.memory * 5000 + es.population_size * 5000
    )
