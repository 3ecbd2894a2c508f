"""Tests for :mod:`evotensor.es.discovered_es` (DiscoveredES).

Shared protocol checks (one compiled batched run serves several of them):
solves a shifted 10-d sphere to a documented tolerance, vmap over seeds / a hyperparameter /
poisoned fitness equals separate runs bit for bit, NaN/inf fitness never enters state and the
best-so-far equals the running minimum of the valid evaluations, and a 3,000-generation float32
run on a 30-d sphere stays finite.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from evotensor.es.discovered_es import DiscoveredES, des_weights

DIMS = 10
POP = 16
GENS = 400
SHIFT = 1.0  # the optimum sits at SHIFT * ones(DIMS)
# DES converges linearly; 400 generations of 16 samples reach < 1e-8
TOL = 1e-08
HYPER_FIELD, HYPER_VALUE = "lr_std", 0.2
KWARGS = {}


# The XLA CPU backend spends most of a test's time optimizing the inlined threefry PRNG code; these
# options cut compile time ~10x. Single and vmapped runs use the same options, so the bitwise
# comparisons stay meaningful (they also pass with default options).
# Set EVOTENSOR_TEST_DEFAULT_XLA=1 to run everything with XLA's default options instead.
FAST = (
    {}
    if os.environ.get("EVOTENSOR_TEST_DEFAULT_XLA")
    else {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}
)


def fast_jit(fun, **kwargs):
    return jax.jit(fun, compiler_options=FAST, **kwargs)


def make_es(num_dims: int = DIMS) -> DiscoveredES:
    return DiscoveredES(POP, num_dims=num_dims, **KWARGS)


def objective(x, generation, poison):
    """Shifted sphere; with ``poison`` some entries are NaN/+inf/-inf and every 4th generation is all NaN."""
    # an unrolled sum over coordinates: XLA may vectorize a reduction differently for different
    # batch shapes, which would make the *objective* (not the strategy) differ under vmap
    f = sum((x[:, j] - SHIFT) ** 2 for j in range(x.shape[1]))
    i = jnp.arange(x.shape[0])
    f = jnp.where(poison & (i % 3 == 0), jnp.nan, f)
    f = jnp.where(poison & (i % 5 == 1), jnp.inf, f)
    f = jnp.where(poison & (i % 7 == 2), -jnp.inf, f)
    return jnp.where(poison & (generation % 4 == 3), jnp.nan, f)


def make_run(es, gens):
    def run(key, params, poison):
        def step(state, inputs):
            k, g = inputs
            k_ask, k_tell = jax.random.split(k)
            x, state = es.ask(k_ask, state, params)
            f = objective(x, g, poison)
            state, metrics = es.tell(k_tell, state, x, f, params)
            valid_min = jnp.min(jnp.where(jnp.isfinite(f), f, jnp.inf))
            return state, (metrics["best_fitness"], valid_min)

        k_init, k_run = jax.random.split(key)
        state = es.init(k_init, params)
        return jax.lax.scan(step, state, (jax.random.split(k_run, gens), jnp.arange(gens)))

    return run


ES = make_es()
RUN = make_run(ES, GENS)
RUN_ONE = fast_jit(RUN)
# batch entries: 0-3 seeds 0-3 (defaults); 4: seed 0 with HYPER_FIELD = HYPER_VALUE; 5: seed 1 poisoned
SEEDS = [0, 1, 2, 3, 0, 1]
POISON = [False, False, False, False, False, True]


def entry_params(i):
    params = ES.default_params()
    if i == 4:
        params = params.replace(**{HYPER_FIELD: jnp.asarray(HYPER_VALUE, jnp.float32)})
    return params


def entry_inputs(i):
    return jax.random.key(SEEDS[i]), entry_params(i), jnp.asarray(POISON[i])


@pytest.fixture(scope="module")
def batch():
    inputs = [entry_inputs(i) for i in range(len(SEEDS))]
    stacked = jax.tree.map(lambda *leaves: jnp.stack(leaves), *inputs)
    return fast_jit(jax.vmap(RUN))(*stacked)


def test_solves_shifted_sphere(batch):
    state, (best, _) = batch
    final = np.asarray(best[:4, -1])
    assert np.all(final < TOL), final
    # the best-so-far trace is monotone
    assert np.all(np.diff(np.asarray(best[:4]), axis=1) <= 0)


@pytest.mark.parametrize("entry", [0, 4, 5])
def test_vmap_equals_separate_runs_bitwise(batch, entry):
    single = RUN_ONE(*entry_inputs(entry))
    batched = jax.tree.map(lambda leaf: leaf[entry], batch)
    for a, b in zip(jax.tree.leaves(single), jax.tree.leaves(batched)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_nan_fitness_never_enters_state(batch):
    state, (best, valid_min) = jax.tree.map(lambda leaf: leaf[5], batch)
    for leaf in jax.tree.leaves(state):
        if jnp.issubdtype(leaf.dtype, jnp.floating):
            assert not np.isnan(np.asarray(leaf)).any()
    valid_min = np.asarray(valid_min)
    assert np.isinf(valid_min).any()  # some generations were entirely invalid
    np.testing.assert_array_equal(np.asarray(best), np.minimum.accumulate(valid_min))
    assert np.isfinite(np.asarray(best)[-1])


def test_long_float32_run_stays_finite():
    es = make_es(num_dims=30)
    run = fast_jit(make_run(es, 3000))
    state, (best, _) = run(jax.random.key(7), es.default_params(), jnp.asarray(False))
    for leaf in jax.tree.leaves(state):
        assert np.all(np.isfinite(np.asarray(leaf)))
    assert float(best[-1]) < float(best[0])


def test_weights_closed_form():
    n, t = 8, 12.5
    r = np.arange(n) / (n - 1) - 0.5
    logits = -20.0 / (1.0 + np.exp(-t * r))
    ref = np.exp(logits - logits.max())
    ref /= ref.sum()
    w = np.asarray(des_weights(n, jnp.float32(t)))
    np.testing.assert_allclose(w, ref, rtol=1e-5, atol=1e-7)
    assert np.all(np.diff(w) <= 0) and w.sum() == pytest.approx(1.0, rel=1e-6)


def test_update_matches_closed_form_and_bad_arguments():
    es = DiscoveredES(6, num_dims=3)
    params = es.default_params()
    state = fast_jit(es.init)(jax.random.key(0), params)
    x, state = fast_jit(es.ask)(jax.random.key(1), state, params)
    f = np.array([4.0, 1.0, np.nan, 0.0, 3.0, 2.0], np.float32)
    new, _ = fast_jit(es.tell)(jax.random.key(2), state, x, f, params)
    w = np.asarray(des_weights(6, jnp.float32(12.5)), np.float64)
    step = np.asarray(x, np.float64)[[3, 1, 5, 4, 0, 2]] - np.asarray(state.mean)
    np.testing.assert_allclose(np.asarray(new.mean), np.asarray(state.mean) + w @ step, rtol=1e-5, atol=1e-6)
    ref_std = 0.9 * np.asarray(state.std) + 0.1 * np.sqrt(w @ step**2)
    np.testing.assert_allclose(np.asarray(new.std), ref_std, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="lr_std"):
        DiscoveredES(6, num_dims=3, lr_std=0.0)
