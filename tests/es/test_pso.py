"""Tests for :mod:`evotensor.es.pso` (PSO).

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

from evotensor.es.pso import PSO, pso_update

DIMS = 10
POP = 32
GENS = 300
SHIFT = 1.0  # the optimum sits at SHIFT * ones(DIMS)
# constriction PSO converges linearly on the sphere; 300 generations of 32 particles reach < 1e-8
TOL = 1e-08
HYPER_FIELD, HYPER_VALUE = "inertia", 0.6
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


def make_es(num_dims: int = DIMS) -> PSO:
    return PSO(POP, num_dims=num_dims, **KWARGS)


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


def _reference_pso_update(x, v, pbest, gbest, r1, r2, w, c1, c2):
    """Slow, obviously correct loop over particles and coordinates (float64)."""
    x, v, pbest, gbest, r1, r2 = (np.asarray(a, np.float64) for a in (x, v, pbest, gbest, r1, r2))
    new_x, new_v = np.empty_like(x), np.empty_like(v)
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            new_v[i, j] = (
                w * v[i, j] + c1 * r1[i, j] * (pbest[i, j] - x[i, j]) + c2 * r2[i, j] * (gbest[j] - x[i, j])
            )
            new_x[i, j] = x[i, j] + new_v[i, j]
    return new_x, new_v


def test_pso_update_matches_reference():
    rng = np.random.default_rng(0)
    n, d = 7, 5
    x, v, pbest = (rng.normal(size=(n, d)).astype(np.float32) for _ in range(3))
    gbest = rng.normal(size=d).astype(np.float32)
    r1, r2 = (rng.uniform(size=(n, d)).astype(np.float32) for _ in range(2))
    got_x, got_v = pso_update(x, v, pbest, gbest, r1, r2, 0.7298, 1.49618, 1.49618)
    ref_x, ref_v = _reference_pso_update(x, v, pbest, gbest, r1, r2, 0.7298, 1.49618, 1.49618)
    np.testing.assert_allclose(np.asarray(got_v), ref_v, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(got_x), ref_x, rtol=1e-5, atol=1e-6)


def test_tell_moves_swarm_like_reference():
    es = PSO(6, num_dims=3)
    params = es.default_params()
    init, ask, tell = fast_jit(es.init), fast_jit(es.ask), fast_jit(es.tell)
    state = init(jax.random.key(0), params)
    x, state = ask(jax.random.key(1), state, params)
    f1 = np.array([3.0, np.nan, 1.0, 2.0, np.inf, 5.0], np.float32)
    state, _ = tell(jax.random.key(2), state, x, f1, params)
    x2, state = ask(jax.random.key(3), state, params)
    f2 = np.array([0.5, 0.1, 9.0, np.nan, 4.0, 6.0], np.float32)
    tell_key = jax.random.key(4)
    new, _ = tell(tell_key, state, x2, f2, params)
    # personal bests by hand: strict improvement by a valid value only
    old_pf = np.array([3.0, np.inf, 1.0, 2.0, np.inf, 5.0])
    improved = np.isfinite(f2) & (f2 < old_pf)
    ref_pbest = np.where(improved[:, None], np.asarray(x2), np.asarray(x))
    ref_pf = np.where(improved, f2, old_pf)
    np.testing.assert_array_equal(np.asarray(new.pbest_solution), ref_pbest)
    np.testing.assert_array_equal(np.asarray(new.pbest_fitness), ref_pf.astype(np.float32))
    gbest = ref_pbest[np.argmin(ref_pf)]
    r1, r2 = np.asarray(
        fast_jit(lambda k: jax.random.uniform(k, (2, 6, 3), jnp.float32))(tell_key)
    )  # the draws tell uses
    ref_x, ref_v = _reference_pso_update(
        x2, state.velocities, ref_pbest, gbest, r1, r2, 0.7298, 1.49618, 1.49618
    )
    np.testing.assert_allclose(np.asarray(new.positions), ref_x, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(new.velocities), ref_v, rtol=1e-5, atol=1e-6)
    assert float(new.best_fitness) == pytest.approx(0.1)


def test_pytree_template_and_bad_arguments():
    es = PSO(4, solution={"w": jnp.zeros((2, 2)), "b": jnp.ones(3)})
    state = fast_jit(es.init)(jax.random.key(0))
    x, state = fast_jit(es.ask)(jax.random.key(1), state)
    assert x["w"].shape == (4, 2, 2) and x["b"].shape == (4, 3)
    state, _ = fast_jit(es.tell)(jax.random.key(2), state, x, jnp.arange(4.0))
    assert es.mean_solution(state)["w"].shape == (2, 2)
    with pytest.raises(ValueError, match="init_range"):
        PSO(4, num_dims=2, init_range=0.0)
    with pytest.raises(ValueError, match="inertia"):
        PSO(4, num_dims=2, inertia=-1.0)
    with pytest.raises(ValueError, match="fitness"):
        es.tell(jax.random.key(2), state, x, jnp.arange(3.0))
