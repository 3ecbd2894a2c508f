"""Rm-ES (Li & Zhang 2018) update against the paper.

The contract shared with MA-ES, LM-MA-ES and Rm-ES is in test_ma_family_contract.py."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core.numerics import exact_sum
from evotensor.es import RmES


def sphere(x):
    return exact_sum(x**2)


def test_sample_covariance_matches_the_low_rank_model():
    """Independent r per candidate: Cov(x) = sigma^2 ((1-c)^m I + c sum_j (1-c)^(m-j) p_j p_j^T)."""
    n, m = 6, 2
    es = RmES(20000, num_dims=n, sigma_init=1.0)
    params = es.default_params()
    state = es.init(jax.random.key(0), params)
    rng = np.random.default_rng(0)
    P = rng.standard_normal((m, n)) * 2
    state = state.replace(P=jnp.asarray(P, jnp.float32))
    x, _ = jax.jit(es.ask)(jax.random.key(1), state, params)
    c = float(params.c_cov)
    model = (1 - c) ** m * np.eye(n) + c * sum(
        (1 - c) ** (m - 1 - j) * np.outer(P[j], P[j]) for j in range(m)
    )
    np.testing.assert_allclose(np.cov(np.asarray(x, np.float64).T), model, atol=0.06)


def test_rank_based_success_rule_and_archive_against_reference():
    n = 10
    es = RmES(num_dims=n, sigma_init=0.5, mean_init=np.ones(n))
    mu, m = es.mu, es.num_paths
    params = es.default_params()
    ask, tell = jax.jit(es.ask), jax.jit(es.tell)
    state = es.init(jax.random.key(0), params)
    w = [math.log(mu + 0.5) - math.log(i + 1) for i in range(mu)]
    w = [v / sum(w) for v in w]
    mueff = 1 / sum(v * v for v in w)
    cc, cs, T = 2 / (n + 7), 0.3, n
    mean, sigma, p, s = np.ones(n), 0.5, np.zeros(n), 0.0
    P, t_hat, prev = np.zeros((m, n)), np.zeros(m), None
    for g in range(4 * n):
        x, state = ask(jax.random.key(g), state, params)
        xn = np.asarray(x, np.float64)
        f = np.sum(xn**2, axis=1)
        state, _ = tell(jax.random.key(g), state, x, jnp.asarray(f, jnp.float32), params)
        idx = np.argsort(f)
        new_mean = sum(w[i] * xn[idx[i]] for i in range(mu))
        p = (1 - cc) * p + math.sqrt(cc * (2 - cc) * mueff) * (new_mean - mean) / sigma
        cur = np.sort(f)[:mu]
        if prev is not None:
            order = np.argsort(np.concatenate([prev, cur]), kind="stable")
            pos = np.empty(2 * mu)
            pos[order] = np.arange(2 * mu)
            q = sum(w[i] * (pos[i] - pos[mu + i]) for i in range(mu)) / mu
            s = (1 - cs) * s + cs * (q - 0.3)
            sigma = sigma * math.exp(s)
        prev = cur
        gaps = np.diff(t_hat)
        i_drop = int(np.argmin(gaps)) + 1
        if gaps.min() > T or g < m:
            i_drop = 0
        for i in range(i_drop, m - 1):
            P[i], t_hat[i] = P[i + 1], t_hat[i + 1]
        P[-1], t_hat[-1] = p, g
        mean = new_mean
        np.testing.assert_allclose(state.sigma, sigma, rtol=1e-4)
        np.testing.assert_allclose(state.t_hat, t_hat)
        np.testing.assert_allclose(state.P, P, rtol=1e-3, atol=1e-4)
        # follow our float32 trajectory so rounding cannot flip a ranking later
        mean, p, sigma = (
            np.asarray(state.mean, np.float64),
            np.asarray(state.p, np.float64),
            float(state.sigma),
        )
        P = np.asarray(state.P, np.float64)
