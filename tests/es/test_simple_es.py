import jax
import jax.numpy as jnp
import numpy as np
import pytest

import evotensor
from evotensor.es.simple_es import SimpleES
from evotensor.problems import Sphere


def test_solves_10d_sphere():
    es = SimpleES(40, num_dims=10, sigma_init=1.0, mean_init=jnp.full(10, 3.0))
    result = evotensor.run(es, Sphere(10), 400, jax.random.key(0))
    assert result.best_fitness < 1e-6


def test_tell_matches_a_numpy_reference():
    es = SimpleES(6, num_dims=3, elite_ratio=0.5, sigma_init=0.7)
    params = es.default_params()
    state = es.init(jax.random.key(0), params)
    x, state = es.ask(jax.random.key(1), state, params)
    fitness = jnp.array([3.0, 1.0, 2.0, 6.0, 0.5, 4.0])
    new, _ = es.tell(jax.random.key(2), state, x, fitness, params)

    x, mean, sigma = (
        np.asarray(x, np.float64),
        np.asarray(state.mean, np.float64),
        np.asarray(state.sigma, np.float64),
    )
    elite = x[[4, 1, 2]]  # the three best, best first
    w = np.log(3.5) - np.log([1, 2, 3])
    w /= w.sum()
    expected_mean = mean + 1.0 * (w @ (elite - mean))
    expected_sigma = np.sqrt(0.9 * sigma**2 + 0.1 * (w @ (elite - mean) ** 2))
    np.testing.assert_allclose(new.mean, expected_mean, rtol=1e-5)
    np.testing.assert_allclose(new.sigma, expected_sigma, rtol=1e-5)


def test_stays_finite_far_past_convergence():
    es = SimpleES(16, num_dims=30, sigma_init=1.0)
    result = evotensor.run(es, Sphere(30), 3000, jax.random.key(1), chunk_size=1000)
    assert all(np.all(np.isfinite(np.asarray(leaf))) for leaf in jax.tree_util.tree_leaves(result.state))
    assert np.all(np.asarray(result.state.sigma) > 0)


def test_construction_errors_name_the_argument():
    with pytest.raises(ValueError, match="elite_ratio"):
        SimpleES(10, num_dims=2, elite_ratio=0.0)
    with pytest.raises(ValueError, match="sigma_init"):
        SimpleES(10, num_dims=2, sigma_init=-1.0)
    with pytest.raises(ValueError, match="population_size"):
        SimpleES(1, num_dims=2)
    with pytest.raises(TypeError, match="population_size"):
        SimpleES(2.5, num_dims=2)
    with pytest.raises(ValueError, match="exactly one"):
        SimpleES(10)
    with pytest.raises(ValueError, match="mean_init"):
        SimpleES(10, num_dims=2, mean_init=jnp.zeros(3))
    es = SimpleES(4, num_dims=2)
    state = es.init(jax.random.key(0))
    with pytest.raises(ValueError, match="fitness must have shape"):
        es.tell(jax.random.key(0), state, jnp.zeros((4, 2)), jnp.zeros(5))
