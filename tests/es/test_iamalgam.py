"""Tests for :mod:`evotensor.es.iamalgam` (IAMaLGaMFull).

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

from evotensor.es.iamalgam import IAMaLGaMFull, IAMaLGaMParams, IAMaLGaMUnivariate, adaptive_variance_scaling

DIMS = 10
POP = 32
GENS = 200
SHIFT = 1.0  # the optimum sits at SHIFT * ones(DIMS)
# iAMaLGaM converges linearly on the sphere; 200 generations of 32 reach < 1e-8
TOL = 1e-08
HYPER_FIELD, HYPER_VALUE = "eta_shift", 0.5
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


def make_es(num_dims: int = DIMS) -> IAMaLGaMFull:
    return IAMaLGaMFull(POP, num_dims=num_dims, **KWARGS)


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


def _reference_avs(improved, sdr, c, nis, p):
    """Direct transcription of the AVS rules of Bosman et al. (2013)."""
    if improved:
        nis = 0
        c = max(c, 1.0)
        if sdr > p["theta_sdr"]:
            c *= p["eta_inc"]
    else:
        if c <= 1.0:
            nis += 1
        if c > 1.0 or nis >= p["nis_max"]:
            c *= p["eta_dec"]
        if c < 1.0 and nis < p["nis_max"]:
            c = 1.0
    return c, nis


def test_avs_matches_reference():
    raw = {"theta_sdr": 1.0, "eta_inc": 1 / 0.9, "eta_dec": 0.9, "nis_max": 3.0}
    params = IAMaLGaMParams(eta_sigma=0.1, eta_shift=0.1, delta_ams=2.0, std_init=1.0, **raw)
    rng = np.random.default_rng(0)
    avs = fast_jit(adaptive_variance_scaling)
    for _ in range(200):
        improved, sdr = bool(rng.integers(2)), float(rng.uniform(0, 2))
        c, nis = float(rng.choice([0.5, 0.95, 1.0, 1.3])), int(rng.integers(0, 5))
        got_c, got_nis = avs(jnp.asarray(improved), jnp.float32(sdr), jnp.float32(c), jnp.int32(nis), params)
        ref_c, ref_nis = _reference_avs(improved, sdr, c, nis, raw)
        assert float(got_c) == pytest.approx(ref_c, rel=1e-6) and int(got_nis) == ref_nis


def test_default_learning_rates():
    es = IAMaLGaMFull(40, num_dims=10)  # k = floor(0.35 * 40) = 14
    p = es.default_params()
    assert float(p.eta_sigma) == pytest.approx(1 - np.exp(-1.1 * 14**1.2 / 10**1.6), rel=1e-6)
    assert float(p.eta_shift) == pytest.approx(1 - np.exp(-1.2 * 14**0.31 / 10**0.5), rel=1e-6)
    assert float(p.nis_max) == 35 and es.num_ams == 7


def test_univariate_solves_sphere_and_survives_nan():
    es = IAMaLGaMUnivariate(POP, num_dims=DIMS)
    run = fast_jit(make_run(es, GENS))
    state, (best, valid_min) = run(jax.random.key(0), es.default_params(), jnp.asarray(False))
    assert float(best[-1]) < TOL
    state, (best, valid_min) = run(jax.random.key(1), es.default_params(), jnp.asarray(True))
    for leaf in jax.tree.leaves(state):
        if jnp.issubdtype(leaf.dtype, jnp.floating):
            assert not np.isnan(np.asarray(leaf)).any()
    np.testing.assert_array_equal(np.asarray(best), np.minimum.accumulate(np.asarray(valid_min)))


@pytest.mark.slow
def test_univariate_long_float32_run_stays_finite():
    es = IAMaLGaMUnivariate(POP, num_dims=30)
    state, (best, _) = fast_jit(make_run(es, 3000))(
        jax.random.key(7), es.default_params(), jnp.asarray(False)
    )
    for leaf in jax.tree.leaves(state):
        assert np.all(np.isfinite(np.asarray(leaf)))


def test_bad_arguments():
    with pytest.raises(ValueError, match="population_size"):
        IAMaLGaMFull(5, num_dims=3)  # floor(0.35 * 5) = 1 < 2
    with pytest.raises(ValueError, match="selection_ratio"):
        IAMaLGaMFull(20, num_dims=3, selection_ratio=1.5)
