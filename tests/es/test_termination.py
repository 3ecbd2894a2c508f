"""Termination criteria: each flag fires on a situation built for it, and not otherwise."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from evotensor.es.core.termination import (
    FLAGS,
    Termination,
    any_flag,
    default_termination_params,
    history_length,
    stagnation_length,
)

N, LAM = 5, 8


def feed(term, generations):
    """generations: list of fitness arrays; returns the final state and the last fitness."""
    state = term.init()
    update = jax.jit(term.update)
    for f in generations:
        state = update(state, jnp.asarray(f, jnp.float32))
    return state, jnp.asarray(generations[-1], jnp.float32)


def check(term, state, f, stds=None, path=None, condition=1.0, sigma0=1.0, **kw):
    stds = jnp.full(N, 1e-3) if stds is None else jnp.asarray(stds)
    path = jnp.zeros(N) if path is None else jnp.asarray(path)
    flags = term.check(state, f, stds, path, jnp.asarray(condition), jnp.asarray(sigma0), **kw)
    return {k: bool(v) for k, v in flags.items()}


def test_defaults_and_lengths_follow_pycma():
    p = default_termination_params()
    assert float(p.tolfun) == pytest.approx(1e-11) and float(p.tolx) == pytest.approx(1e-11)
    assert float(p.tolconditioncov) == pytest.approx(1e14) and int(p.tolflatfitness) == 1
    assert float(p.tolfacupx) == pytest.approx(1e3)
    assert int(history_length(N, LAM)) == 10 + int(np.ceil(30 * N / LAM))
    assert int(stagnation_length(N, LAM)) == int(100 + 100 * N**1.5 / LAM)


def test_nothing_fires_during_normal_progress():
    term = Termination(N, LAM)
    rng = np.random.default_rng(0)
    gens = [rng.uniform(0, 1, LAM) * 0.9**g for g in range(40)]
    state, f = feed(term, gens)
    flags = check(term, state, f)
    assert set(flags) == set(FLAGS) and not any(flags.values())
    assert not bool(any_flag(flags))


def test_tolfun_needs_flat_current_and_history():
    term = Termination(N, LAM)
    h = int(history_length(N, LAM))
    gens = [np.full(LAM, 1.0) + 1e-13 * np.arange(LAM)] * (h + 2)
    state, f = feed(term, gens)
    assert check(term, state, f)["tolfun"]
    # one generation inside the window with a different best value blocks it
    gens2 = gens[:-3] + [np.full(LAM, 0.5)] + gens[-2:]
    state2, f2 = feed(term, gens2)
    assert not check(term, state2, f2)["tolfun"]


def test_tolx_tolfacupx_tolconditioncov():
    term = Termination(N, LAM)
    state, f = feed(term, [np.arange(LAM, dtype=float)])
    assert check(term, state, f, stds=np.full(N, 1e-12), path=np.full(N, 1e-13))["tolx"]
    assert not check(term, state, f, stds=np.full(N, 1e-12), path=np.full(N, 1e-3))["tolx"]
    assert check(term, state, f, stds=np.r_[np.ones(N - 1), 2e3], sigma0=1.0)["tolfacupx"]
    assert not check(term, state, f, stds=np.full(N, 9e2), sigma0=1.0)["tolfacupx"]
    assert check(term, state, f, condition=2e14)["tolconditioncov"]
    assert not check(term, state, f, condition=1e13)["tolconditioncov"]


def test_tolflatfitness_counts_consecutive_flat_generations():
    term = Termination(N, LAM)
    flat = np.r_[np.zeros(7), 1.0]  # best == 75% quantile
    state, f = feed(term, [np.arange(LAM, dtype=float), flat])
    assert not check(term, state, f)["tolflatfitness"]  # one flat generation is tolerated
    state, f = feed(term, [np.arange(LAM, dtype=float), flat, flat])
    assert check(term, state, f)["tolflatfitness"]
    state, f = feed(term, [flat, flat, np.arange(LAM, dtype=float)])
    assert not check(term, state, f)["tolflatfitness"]


def test_tolstagnation_fires_on_stagnation_only():
    term = Termination(N, LAM)
    stag = int(stagnation_length(N, LAM))
    rng = np.random.default_rng(1)
    # no progress: the values drift slightly upwards (worse) with noise
    stagnating = [1.0 + 1e-3 * g + rng.uniform(0, 1e-4, LAM) for g in range(stag + 5)]
    state, f = feed(term, stagnating)
    assert check(term, state, f)["tolstagnation"]
    improving = [(1.0 + rng.uniform(0, 1, LAM)) * 0.99**g for g in range(stag + 5)]
    state, f = feed(term, improving)
    assert not check(term, state, f)["tolstagnation"]


def test_masked_candidates_are_ignored_and_vmapped_runs_stop_independently():
    term = Termination(N, 16, min_population_size=8)
    f = jnp.concatenate([jnp.arange(8.0), jnp.full(8, -1e9)])  # padding would be the best if used
    state = term.update(term.init(), f, population_size=8)
    assert float(state.best[0]) == 0.0
    fits = jnp.stack([jnp.zeros(16), jnp.arange(16.0)])  # run 0 flat, run 1 not

    def two(fit):
        s = term.init()
        for _ in range(3):
            s = term.update(s, fit)
        return term.check(s, fit, jnp.full(N, 1.0), jnp.zeros(N), jnp.asarray(1.0), jnp.asarray(1.0))

    flags = jax.vmap(two)(fits)
    np.testing.assert_array_equal(np.asarray(flags["tolflatfitness"]), [True, False])
    with pytest.raises(ValueError, match="min_population_size"):
        Termination(N, 8, min_population_size=16)
