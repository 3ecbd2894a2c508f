"""Tests for :mod:`evotensor.es.pbt` (PBT).

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

from evotensor.es.pbt import PBT

DIMS = 10
POP = 20
GENS = 300
SHIFT = 0.0  # the optimum sits at SHIFT * ones(DIMS)
# multiplicative explore (x0.8 / x1.2) shrinks hyperparameters towards the optimum at 0; 300 rounds
# reach < 1e-6
TOL = 1e-06
HYPER_FIELD, HYPER_VALUE = "truncation", 0.3
KWARGS = {"init_range": 2.0}


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


def make_es(num_dims: int = DIMS) -> PBT:
    return PBT(POP, num_dims=num_dims, **KWARGS)


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


@pytest.mark.slow
def test_long_float32_run_stays_finite():
    es = make_es(num_dims=30)
    run = fast_jit(make_run(es, 3000))
    state, (best, _) = run(jax.random.key(7), es.default_params(), jnp.asarray(False))
    for leaf in jax.tree.leaves(state):
        assert np.all(np.isfinite(np.asarray(leaf)))
    assert float(best[-1]) < float(best[0])


def test_exploit_and_explore_protocol():
    es = PBT(10, num_dims=3)
    params = es.default_params()
    init, ask, tell = fast_jit(es.init), fast_jit(es.ask), fast_jit(es.tell)
    state = init(jax.random.key(0), params)
    h, state = ask(jax.random.key(1), state, params)
    np.testing.assert_array_equal(np.asarray(h), np.asarray(state.population))
    score = jnp.array([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, jnp.nan, 8.0])
    new, m = tell(jax.random.key(2), state, h, score, params)
    parents = np.asarray(m["parents"])
    replaced = np.arange(10) >= 8  # bottom 20 %: the NaN member (index 8) and score 8 (index 9)
    np.testing.assert_array_equal(parents[~replaced], np.arange(10)[~replaced])
    assert set(parents[replaced].tolist()) <= {0, 1}  # donors from the top 20 %
    h, new_h = np.asarray(h), np.asarray(new.population)
    np.testing.assert_array_equal(new_h[~replaced], h[~replaced])
    ratio = new_h[replaced] / h[parents[replaced]]
    assert np.all(np.isclose(ratio, 0.8) | np.isclose(ratio, 1.2))
    np.testing.assert_array_equal(np.asarray(new.fitness), np.asarray(score)[parents])


def test_resampling_and_bad_arguments():
    es = PBT(10, num_dims=3, resample_probability=1.0, init_range=0.5)
    state = fast_jit(es.init)(jax.random.key(0))
    h, state = fast_jit(es.ask)(jax.random.key(1), state)
    new, m = fast_jit(es.tell)(jax.random.key(2), state, h * 100.0, jnp.arange(10.0))
    assert np.all(np.abs(np.asarray(new.population[-2:])) <= 0.5)
    with pytest.raises(ValueError, match="truncation"):
        PBT(10, num_dims=3, truncation=0.7)
