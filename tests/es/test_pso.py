"""PSO (:mod:`evotensor.es.pso`): the velocity update, the default swarm size, argument errors (its
contract is a row of :data:`tests.es.test_contract.ARCHIVE`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tests.es.archive_contract import fast_jit

from evotensor.es.pso import PSO, pso_update


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


@pytest.mark.parametrize("n, expected", [(1, 12), (2, 12), (4, 14), (10, 16), (30, 20), (100, 30)])
def test_default_population_size_is_spso2007(n, expected):
    """SPSO-2007 swarm size 10 + floor(2 sqrt(D)), evaluated by hand."""
    assert PSO(num_dims=n).population_size == expected
    assert PSO(solution=jnp.zeros((n,))).population_size == expected
    assert PSO(5, num_dims=n).population_size == 5  # an explicit size still wins
