"""OpenAI-ES: sphere, unbiased gradient on a linear function, NaN safety, float32 stability, vmap."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from tests.es.es_fdg_helpers import (
    assert_finite_tree,
    check_vmap_matches_separate,
    make_runner,
    mean_and_stderr,
    sphere,
    stack_params,
)

from evotensor.core.fitness_shaping import centered_ranks
from evotensor.es import OpenES
from evotensor.es.gradient_es import identity_shaping
from evotensor.es.open_es import open_es_gradient

X0 = jnp.full(10, 3.0)


def decay(v):
    return optax.exponential_decay(v, 1, 0.99, end_value=1e-5)


@pytest.fixture(scope="module")
def sphere_setup():
    es = OpenES(40, X0, optimizer=optax.adam(decay(0.1)), sigma_init=0.3)
    return es, make_runner(es, nonfinite=True)


def test_solves_10d_sphere_despite_nonfinite_fitness(sphere_setup):
    """Tolerance: f(mean) < 1e-6 after 1000 generations of 40 (constant sigma 0.3, Adam with a
    decaying step; two NaN/inf members per generation)."""
    es, run = sphere_setup
    state, metrics = run(jax.random.key(0), es.default_params(), 1000)
    assert_finite_tree(state)
    assert float(sphere(state.mean)) < 1e-6
    assert float(metrics["best_fitness"]) < 0.3**2 * 10  # samples sit at distance ~sigma*sqrt(d)


def test_vmap_over_seeds_and_sigma_equals_separate_runs(sphere_setup):
    es, run = sphere_setup
    params = stack_params(es.default_params(), sigma_init=[0.1, 0.3, 0.05])
    check_vmap_matches_separate(es, run, params, jax.random.split(jax.random.key(3), 3), 25)


def test_gradient_unbiased_on_linear_function():
    """E[g] = a for f(x) = a.x with identity shaping (antithetic and plain), over 1000 seeds."""
    a = jnp.array([1.0, -2.0, 0.5, 3.0, -1.0])
    mean0 = jnp.array([0.5, 1.0, -1.0, 2.0, 0.0])
    ests = {
        anti: OpenES(
            64,
            mean0,
            optimizer=optax.sgd(1.0),
            sigma_init=0.1,
            fitness_shaping=identity_shaping,
            antithetic=anti,
        )
        for anti in (True, False)
    }

    @jax.jit
    def estimates(key):
        out = []
        for es in ests.values():
            state = es.init(key)
            x, state = es.ask(key, state)
            new, _ = es.tell(key, state, x, x @ a)
            out.append(state.mean - new.mean)  # sgd(1): mean <- mean - g
        return jnp.stack(out)

    g = np.asarray(jax.vmap(estimates)(jax.random.split(jax.random.key(1), 1000)))  # [seeds, 2, d]
    mean, se = mean_and_stderr(g)
    assert np.all(np.abs(mean - np.asarray(a)) < 5 * se + 1e-3), (mean, se)
    # overall scale along a: unbiased, and precise enough that a 5% scale error would fail
    an = np.asarray(a, np.float64)
    scale_mean, scale_se = mean_and_stderr(g[:, 0] @ an / (an @ an))
    assert abs(scale_mean - 1.0) < 5 * scale_se and 5 * scale_se < 0.05


def test_nonfinite_fitness_acts_as_worst_value():
    """tell with NaN/inf at some members == tell with those members given a finite worst value."""
    es = OpenES(8, num_dims=3, sigma_init=0.5)
    tell = jax.jit(es.tell)
    state = es.init(jax.random.key(0))
    x, state = es.ask(jax.random.key(1), state)
    f = sphere(x)
    bad = f.at[2].set(jnp.nan).at[5].set(-jnp.inf * 0 + jnp.inf)
    worst = f.at[2].set(f.max() + 1e3).at[5].set(f.max() + 2e3)  # any value worse than all finite ones
    s_bad, m_bad = tell(jax.random.key(2), state, x, bad)
    s_ref, _ = tell(jax.random.key(2), state, x, worst)
    assert_finite_tree(s_bad)
    np.testing.assert_array_equal(np.asarray(s_bad.mean), np.asarray(s_ref.mean))
    assert np.isfinite(float(m_bad["best_fitness"]))


def test_float32_3000_generations_past_convergence_stay_finite():
    """sigma decays by 2%/generation to ~1e-27 (sigma^2 underflows in float32) with Adam's step
    decaying alike: the state must stay finite and converged."""
    shrink = lambda v: optax.exponential_decay(v, 1, 0.98)
    es = OpenES(32, jnp.full(30, 1.0), optimizer=optax.adam(shrink(0.05)), sigma_schedule=shrink(0.3))
    state, metrics = make_runner(es)(jax.random.key(0), es.default_params(), 3000)
    assert state.mean.dtype == jnp.float32
    assert float(es.sigma(state, es.default_params())) < 1e-25
    assert_finite_tree(state)
    assert_finite_tree(metrics)
    assert float(sphere(state.mean)) < 1e-3


def test_solution_template_pytree_roundtrip():
    es = OpenES(4, {"w": jnp.ones((2, 2)), "b": jnp.zeros(3)})
    state = es.init(jax.random.key(0))
    x, state = es.ask(jax.random.key(1), state)
    assert x["w"].shape == (4, 2, 2) and x["b"].shape == (4, 3)
    state, _ = es.tell(jax.random.key(2), state, x, jnp.arange(4.0))
    assert es.mean_solution(state)["w"].shape == (2, 2)


def test_open_es_gradient_matches_loop_reference():
    """Vectorized estimate vs. an explicit per-sample loop in float64 numpy."""
    rng = np.random.default_rng(0)
    pop, d, sigma = 6, 4, 0.3
    mean = rng.normal(size=d)
    eps = rng.normal(size=(pop // 2, d))
    x = np.concatenate([mean + sigma * eps, mean - sigma * eps])
    w = rng.normal(size=pop)
    ref = np.zeros(d)
    for i in range(pop):
        ref += w[i] * (x[i] - mean) / sigma
    ref /= pop * sigma
    for anti in (True, False):
        got = open_es_gradient(
            jnp.asarray(x, jnp.float32),
            jnp.asarray(w, jnp.float32),
            jnp.asarray(mean, jnp.float32),
            jnp.float32(sigma),
            anti,
        )
        np.testing.assert_allclose(np.asarray(got), ref, rtol=1e-4, atol=1e-5)


def test_validation_errors():
    with pytest.raises(ValueError, match="even population_size"):
        OpenES(7, num_dims=3)
    OpenES(7, num_dims=3, antithetic=False)
    with pytest.raises(ValueError, match="not both"):
        OpenES(8, num_dims=3, sigma_init=0.1, sigma_schedule=optax.constant_schedule(0.1))
    with pytest.raises(ValueError, match="sigma_init"):
        OpenES(8, num_dims=3, sigma_init=-1.0)
    with pytest.raises(TypeError, match="optimizer"):
        OpenES(8, num_dims=3, optimizer="adam")
    with pytest.raises(TypeError, match="sigma_schedule"):
        OpenES(8, num_dims=3, sigma_schedule=0.1)
    with pytest.raises(TypeError, match="fitness_shaping"):
        OpenES(8, num_dims=3, fitness_shaping=None)
    with pytest.raises(ValueError, match="fitness must have shape"):
        es = OpenES(8, num_dims=3)
        s = es.init(jax.random.key(0))
        x, s = es.ask(jax.random.key(0), s)
        es.tell(jax.random.key(0), s, x, jnp.zeros(7))


def test_sigma_schedule_is_followed():
    es = OpenES(4, num_dims=2, sigma_schedule=lambda step: 0.5 / (1.0 + step), fitness_shaping=centered_ranks)
    state = es.init(jax.random.key(0))
    for g in range(3):
        assert np.isclose(float(es.sigma(state, es.default_params())), 0.5 / (1 + g))
        x, state = es.ask(jax.random.key(g), state)
        state, m = es.tell(jax.random.key(g), state, x, sphere(x))
