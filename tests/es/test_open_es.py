"""OpenAI-ES: unbiased gradient on a linear function, NaN safety, the noise kernels, regenerated noise
(its sphere, long-run and vmap checks are rows of :data:`tests.es.test_contract.GRADIENT`)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from tests.es.es_fdg_helpers import assert_finite_tree, mean_and_stderr, sphere

from evotensor.core.fitness_shaping import centered_ranks
from evotensor.es import OpenES
from evotensor.es.core.gradient_es import identity_shaping
from evotensor.es.open_es import open_es_gradient


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


# -- peak memory of the jitted generation: sampling in place, no half-population copies -------------


@pytest.mark.parametrize("mirrored", [True, False], ids=["mirrored", "plain"])
@pytest.mark.parametrize("rows", [12, 14, 4])  # several blocks and a partial last block; one block
def test_sampled_population_is_the_written_out_draw(mirrored, rows):
    """Block-by-block in-place writing gives ``mean +/- scale * chunked_normal(...)``: the same draw, the
    values within float32 rounding (XLA may fuse ``mean + scale * z`` into a multiply-add in one program only;
    the OpenES runs recorded before the change came out bit-identical)."""
    from evotensor.es.core.sampling import chunked_normal, sampled_population

    d, chunk = 5, 3 * 4 * 5  # 3 rows per noise block
    key, mean, scale = jax.random.key(3), jnp.linspace(-1.0, 1.0, d), jnp.float32(0.3)

    @jax.jit
    def both(key, mean, scale):
        z = chunked_normal(key, rows // 2 if mirrored else rows, d, chunk)
        want = jnp.concatenate([mean + scale * z, mean - scale * z]) if mirrored else mean + scale * z
        return sampled_population(key, mean, scale, rows, mirrored, chunk), want

    got, want = both(key, mean, scale)
    assert got.shape == (rows, d)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-6)
    # the GPU's form (every block at once) draws the same numbers as the CPU's loop
    for vec in (False, True):
        np.testing.assert_array_equal(
            np.asarray(chunked_normal(key, rows, d, chunk, vectorized=vec)),
            np.asarray(chunked_normal(key, rows, d, chunk)),
        )
    at_once = sampled_population(key, mean, scale, rows, mirrored, chunk, vectorized=True)
    looped = sampled_population(key, mean, scale, rows, mirrored, chunk, vectorized=False)
    np.testing.assert_allclose(np.asarray(at_once), np.asarray(looped), rtol=1e-6, atol=1e-6)
    if mirrored:
        h = rows // 2  # antithetic: pairs average to the mean
        np.testing.assert_allclose(
            np.asarray(got[:h] + got[h:]), np.tile(2 * np.asarray(mean), (h, 1)), atol=1e-6
        )


def test_mirrored_pair_sum_is_bitwise_pair_sum_and_matches_float64():
    from evotensor.es.core.gradient_es import pair_sum
    from evotensor.es.core.sampling import mirrored_pair_sum

    rng = np.random.default_rng(0)
    w = jnp.asarray(rng.normal(size=64), jnp.float32)
    x = jnp.asarray(rng.normal(size=(64, 300)), jnp.float32)
    got = np.asarray(jax.jit(mirrored_pair_sum)(w, x))
    np.testing.assert_array_equal(got, np.asarray(jax.jit(pair_sum)(w, x)))
    w64, x64 = np.asarray(w, np.float64), np.asarray(x, np.float64)
    want = sum((w64[i] - w64[i + 32]) * (x64[i] - x64[i + 32]) for i in range(32))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("regenerate_noise", [False, True], ids=["rows", "regenerated"])
def test_jitted_generation_holds_about_one_population(regenerate_noise):
    """XLA's buffer assignment for ask -> sphere -> tell: the population plus a few noise blocks of
    ``NOISE_CHUNK_BYTES`` (before, it also held the noise and two half-population copies: ~2.5
    populations plus the blocks; at d=100,000, pop=1024 1027 MB, now 458 MB). The same with the
    noise drawn again in the tell. (On a GPU, XLA fuses the draw into the evaluation and the tell and
    keeps only half the noise: 0.6 populations on an H200, 2026-11-26; so no lower bound.)"""
    from evotensor.es.core.sampling import NOISE_CHUNK_BYTES

    pop, d = 1024, 20_000  # noise drawn in 4 blocks of 104 rows and a partial one
    es = OpenES(
        pop, num_dims=d, optimizer=optax.adam(1e-3), sigma_init=0.02, regenerate_noise=regenerate_noise
    )

    def generation(state, key):
        x, state = es.ask(key, state)
        state, metrics = es.tell(key, state, x, jnp.sum((x - 1.0) ** 2, axis=1))
        return state, metrics["best_fitness"]

    state = es.init(jax.random.key(0))
    compiled = jax.jit(generation, donate_argnums=0).lower(state, jax.random.key(1)).compile()
    population_bytes = pop * d * 4
    temp = compiled.memory_analysis().temp_size_in_bytes
    assert temp < population_bytes + 8 * NOISE_CHUNK_BYTES, temp / population_bytes


def test_grad_through_mirrored_pair_sum_matches_its_bilinear_derivative():
    """mirrored_pair_sum (a custom_vmap) differentiates like pair_sum, also under vmap."""
    from evotensor.es.core.gradient_es import pair_sum
    from evotensor.es.core.sampling import mirrored_pair_sum

    w = jax.random.normal(jax.random.key(0), (8,))
    x = jax.random.normal(jax.random.key(1), (8, 5))
    loss = lambda f: lambda w, x: jnp.sum(f(w, x) ** 2)
    got = jax.grad(loss(mirrored_pair_sum), argnums=(0, 1))(w, x)
    want = jax.grad(loss(pair_sum), argnums=(0, 1))(w, x)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    batched = jax.vmap(jax.grad(loss(mirrored_pair_sum)))(jnp.stack([w, -w]), jnp.stack([x, x]))
    np.testing.assert_allclose(batched[0], want[0], rtol=1e-5, atol=1e-6)


# -- regenerate_noise=True: tell draws the noise again from the key that ask used -------------------


@pytest.mark.parametrize("transform", [False, True], ids=["noise", "rows"])
@pytest.mark.parametrize("rows", [12, 14, 4])  # several blocks and a partial last block; one block
def test_noise_weighted_sum_is_the_weighted_sum_of_the_drawn_noise(rows, transform):
    """Block by block, from the keys of ``chunked_normal``: ``coeffs @ rows_of(chunked_normal(...))``."""
    from evotensor.es.core.sampling import chunked_normal, noise_weighted_sum

    d, chunk = 5, 3 * 4 * 5  # 3 rows per noise block
    key = jax.random.key(3)
    coeffs = jax.random.normal(jax.random.key(4), (rows,))
    mean = jnp.linspace(-1.0, 1.0, d)
    rows_of = (lambda z: (mean + 0.3 * z) - (mean - 0.3 * z)) if transform else None

    @jax.jit
    def both(key, coeffs):
        z = chunked_normal(key, rows, d, chunk)
        want = coeffs @ (z if rows_of is None else rows_of(z))
        return noise_weighted_sum(key, coeffs, d, rows_of, chunk), want

    got, want = both(key, coeffs)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("antithetic", [True, False], ids=["mirrored", "plain"])
@pytest.mark.parametrize("d", [7, 100_000])  # one draw; noise blocks of 20 rows with a partial one
def test_regenerated_noise_gives_the_population_tell_update(antithetic, d):
    """Same sample, ``noise_key`` = ask's key, and the update of the default tell (from the rows) within
    float32 summation order, over 3 generations (SGD: Adam would magnify the rounding differences of
    its near-zero gradient entries)."""
    pop = 64 if d > 100 else 16
    make = lambda regen: OpenES(
        pop, num_dims=d, sigma_init=0.3, antithetic=antithetic, regenerate_noise=regen,
        optimizer=optax.sgd(0.05),
    )  # fmt: skip
    rows, noise = make(False), make(True)

    @jax.jit
    def run(key):
        s_rows, s_noise = rows.init(key), noise.init(key)
        for g in range(3):
            k_ask, k_tell = jax.random.split(jax.random.fold_in(key, g))
            x, s_rows = rows.ask(k_ask, s_rows)
            x_noise, s_noise = noise.ask(k_ask, s_noise)
            f = jnp.sum((x - 1.0) ** 2, axis=1).at[g].set(jnp.nan)
            s_rows, m_rows = rows.tell(k_tell, s_rows, x, f)
            s_noise, m_noise = noise.tell(k_tell, s_noise, x_noise, f)
        return x, x_noise, k_ask, s_rows, s_noise, m_rows, m_noise

    x, x_noise, k_ask, s_rows, s_noise, m_rows, m_noise = run(jax.random.key(0))
    np.testing.assert_allclose(np.asarray(x_noise), np.asarray(x), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(jax.random.key_data(s_noise.noise_key), jax.random.key_data(k_ask))
    np.testing.assert_allclose(np.asarray(s_noise.mean), np.asarray(s_rows.mean), rtol=1e-5, atol=1e-6)
    assert not np.allclose(np.asarray(s_rows.mean), 0.0)
    np.testing.assert_allclose(float(m_noise["grad_norm"]), float(m_rows["grad_norm"]), rtol=1e-5)
    np.testing.assert_allclose(float(m_noise["best_fitness"]), float(m_rows["best_fitness"]), rtol=1e-6)


def test_regenerated_noise_sharded_tell_uses_the_rows():
    """``sharded`` draws and reduces rows per device whatever the mode: on a 1-device mesh both modes
    give the same update (the same computation in two programs: bitwise on CPU)."""
    from evotensor.es.core.sharding import sharded

    mesh = jax.make_mesh((1,), ("pop",))
    out = []
    for regen in (False, True):
        es = OpenES(8, num_dims=3, optimizer=optax.sgd(0.1), sigma_init=0.3, regenerate_noise=regen)
        ask, tell = sharded(es, mesh)
        state = es.init(jax.random.key(0))
        x, state = ask(jax.random.key(1), state)
        state, _ = tell(jax.random.key(2), state, x, jnp.sum(x**2, axis=1))
        out.append(np.asarray(state.mean))
    np.testing.assert_allclose(out[0], out[1], rtol=1e-6, atol=1e-7)
    assert not np.allclose(out[0], 0.0)
