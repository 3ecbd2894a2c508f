"""The behavioural contract shared by the population-based and elitist strategies (GA family, PSO,
DE, GLD, hill climbing, simulated annealing, PBT, CEM, DES, iAMaLGaM, random search).

One compiled batched run serves several checks: the strategy solves a shifted 10-d sphere to a
documented tolerance; vmap over seeds, over a hyperparameter and over poisoned fitness equals
separate runs bit for bit (on CPU; to :data:`tests.platforms.GPU_RTOL` on GPU); NaN/inf fitness
never enters state and best-so-far equals the running minimum of the valid evaluations; a
3,000-generation float32 run on a 30-d sphere stays finite.

A test module calls :func:`strategy_contract` and puts the returned tests (and their fixture) in its
namespace::

    globals().update(strategy_contract(CEM, pop=100, gens=200, tol=1e-6, hyper=("mean_smoothing", 0.9)))
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tests.platforms import assert_equal_on_cpu_close_on_gpu

# tests/conftest.py already selects XLA's cheap compile options for the whole suite.
fast_jit = jax.jit


def objective(x, generation, poison, shift=1.0):
    """Shifted sphere; with ``poison`` some entries are NaN/+inf/-inf and every 4th generation is all NaN."""
    # an unrolled sum over coordinates: XLA may vectorize a reduction differently for different
    # batch shapes, which would make the *objective* (not the strategy) differ under vmap
    f = sum((x[:, j] - shift) ** 2 for j in range(x.shape[1]))
    i = jnp.arange(x.shape[0])
    f = jnp.where(poison & (i % 3 == 0), jnp.nan, f)
    f = jnp.where(poison & (i % 5 == 1), jnp.inf, f)
    f = jnp.where(poison & (i % 7 == 2), -jnp.inf, f)
    return jnp.where(poison & (generation % 4 == 3), jnp.nan, f)


def make_run(es, gens, shift=1.0):
    """``run(key, params, poison) -> (state, (best_fitness [gens], valid_min [gens]))``."""

    def run(key, params, poison):
        def step(state, inputs):
            k, g = inputs
            k_ask, k_tell = jax.random.split(k)
            x, state = es.ask(k_ask, state, params)
            f = objective(x, g, poison, shift)
            state, metrics = es.tell(k_tell, state, x, f, params)
            valid_min = jnp.min(jnp.where(jnp.isfinite(f), f, jnp.inf))
            return state, (metrics["best_fitness"], valid_min)

        k_init, k_run = jax.random.split(key)
        state = es.init(k_init, params)
        return jax.lax.scan(step, state, (jax.random.split(k_run, gens), jnp.arange(gens)))

    return run


# batch entries: 0-3 seeds 0-3 (defaults); 4: seed 0 with the hyperparameter changed; 5: seed 1 poisoned
SEEDS = [0, 1, 2, 3, 0, 1]
POISON = [False, False, False, False, False, True]


def strategy_contract(
    cls: type,
    *,
    pop: int,
    gens: int,
    tol: float,
    hyper: tuple[str, float],
    kwargs: dict[str, Any] | None = None,
    dims: int = 10,
    shift: float = 1.0,
    long_run_in_default_suite: bool = False,
) -> dict[str, Any]:
    """The contract's tests for ``cls`` (constructed as ``cls(pop, num_dims=dims, **kwargs)``)."""
    kwargs = dict(kwargs or {})
    hyper_field, hyper_value = hyper

    def make_es(num_dims: int = dims):
        return cls(pop, num_dims=num_dims, **kwargs)

    es = make_es()
    run = make_run(es, gens, shift)
    run_one = fast_jit(run)

    def entry_inputs(i):
        params = es.default_params()
        if i == 4:
            params = params.replace(**{hyper_field: jnp.asarray(hyper_value, jnp.float32)})
        return jax.random.key(SEEDS[i]), params, jnp.asarray(POISON[i])

    @pytest.fixture(scope="module")
    def batch():
        inputs = [entry_inputs(i) for i in range(len(SEEDS))]
        stacked = jax.tree.map(lambda *leaves: jnp.stack(leaves), *inputs)
        return fast_jit(jax.vmap(run))(*stacked)

    def test_solves_shifted_sphere(batch):
        state, (best, _) = batch
        final = np.asarray(best[:4, -1])
        assert np.all(final < tol), final
        assert np.all(np.diff(np.asarray(best[:4]), axis=1) <= 0)  # best-so-far is monotone

    @pytest.mark.parametrize("entry", [0, 4, 5])
    def test_vmap_equals_separate_runs_bitwise(batch, entry):
        single = run_one(*entry_inputs(entry))
        batched = jax.tree.map(lambda leaf: leaf[entry], batch)
        for a, b in zip(jax.tree.leaves(single), jax.tree.leaves(batched)):
            assert_equal_on_cpu_close_on_gpu(b, a)  # bitwise on CPU

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
        es30 = make_es(num_dims=30)
        state, (best, _) = fast_jit(make_run(es30, 3000, shift))(
            jax.random.key(7), es30.default_params(), jnp.asarray(False)
        )
        for leaf in jax.tree.leaves(state):
            assert np.all(np.isfinite(np.asarray(leaf)))
        assert float(best[-1]) < float(best[0])

    if not long_run_in_default_suite:
        test_long_float32_run_stays_finite = pytest.mark.slow(test_long_float32_run_stays_finite)

    return {
        "batch": batch,
        "test_solves_shifted_sphere": test_solves_shifted_sphere,
        "test_vmap_equals_separate_runs_bitwise": test_vmap_equals_separate_runs_bitwise,
        "test_nan_fitness_never_enters_state": test_nan_fitness_never_enters_state,
        "test_long_float32_run_stays_finite": test_long_float32_run_stays_finite,
    }
