"""evotensor.core.rng: the same numbers as jax.random (the slow, obviously correct reference),
bit for bit, for every draw, shape, dtype, key kind and transformation; fallbacks for other keys."""

import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evotensor.core import rng

SHAPES = st.sampled_from([(), (0,), (1,), (7,), (3, 5), (256, 100), (2, 3, 4)])
SEEDS = st.integers(0, 2**32 - 1)


def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True)


DRAWS = {
    "bits": lambda r, k, s: r.bits(k, s),
    "bits8": lambda r, k, s: r.bits(k, s, jnp.uint8),
    "bits16": lambda r, k, s: r.bits(k, s, jnp.uint16),
    "uniform": lambda r, k, s: r.uniform(k, s),
    "uniform_range": lambda r, k, s: r.uniform(k, s, jnp.float32, -2.5, 7.0),
    "uniform_bf16": lambda r, k, s: r.uniform(k, s, jnp.bfloat16),
    "normal": lambda r, k, s: r.normal(k, s),
    "normal_f16": lambda r, k, s: r.normal(k, s, jnp.float16),
    "randint": lambda r, k, s: r.randint(k, s, -3, 1000),
    "randint_u8": lambda r, k, s: r.randint(k, s, 0, 200, jnp.uint8),
}


@settings(max_examples=40, deadline=None)
@given(seed=SEEDS, shape=SHAPES, draw=st.sampled_from(sorted(DRAWS)))
def test_every_draw_equals_jax_random_under_jit(seed, shape, draw):
    f = DRAWS[draw]
    key = jax.random.key(seed)
    assert same(jax.jit(lambda k: f(rng, k, shape))(key), f(jax.random, key, shape))


@pytest.mark.parametrize("draw", sorted(DRAWS))
def test_eager_and_legacy_raw_keys_equal_jax_random(draw):
    f = DRAWS[draw]
    for key in (jax.random.key(11), jax.random.PRNGKey(11)):
        assert same(f(rng, key, (4, 9)), f(jax.random, key, (4, 9)))


def test_vmap_over_keys_and_nested_vmap_equal_jax_random():
    keys = jax.random.split(jax.random.key(0), 6).reshape(2, 3)
    ours = jax.jit(jax.vmap(jax.vmap(lambda k: rng.normal(k, (5, 8)))))(keys)
    ref = jax.vmap(jax.vmap(lambda k: jax.random.normal(k, (5, 8))))(keys)
    assert same(ours, ref)
    # a batched minval as well as a batched key
    lo = jnp.arange(6.0).reshape(2, 3)
    ours = jax.vmap(jax.vmap(lambda k, a: rng.uniform(k, (4,), minval=a, maxval=a + 1)))(keys, lo)
    ref = jax.vmap(jax.vmap(lambda k, a: jax.random.uniform(k, (4,), minval=a, maxval=a + 1)))(keys, lo)
    assert same(ours, ref)


def test_permutation_and_choice_equal_jax_random():
    key = jax.random.key(5)
    x = jnp.arange(40.0).reshape(10, 4)
    assert same(rng.permutation(key, 37), jax.random.permutation(key, 37))
    assert same(rng.permutation(key, x, axis=1, independent=True), jax.random.permutation(key, x, 1, True))
    p = jnp.linspace(0.1, 1.0, 12)
    p = p / p.sum()
    assert same(rng.choice(key, 12, (5,), replace=False, p=p), jax.random.choice(key, 12, (5,), False, p))


@settings(max_examples=30, deadline=None)
@given(k1=SEEDS, k2=SEEDS, hi=SEEDS, lo=SEEDS)
def test_unrolled_hash_equals_jax_threefry_for_any_counter_words(k1, k2, hi, lo):
    # covers counters whose high word is not 0 (arrays of 2**32 elements or more are left to JAX)
    from jax.extend.random import threefry_2x32

    key = np.array([k1, k2], np.uint32)
    counters = np.array([hi, hi ^ 0x5A5A5A5A, lo, (lo + 1) % 2**32], np.uint32)
    ref = np.asarray(threefry_2x32(key, counters))
    words = jnp.asarray(counters[:2]), jnp.asarray(counters[2:])
    x1, x2 = rng.threefry2x32(jnp.uint32(k1), jnp.uint32(k2), *words)
    assert np.array_equal(np.concatenate([np.asarray(x1), np.asarray(x2)]), ref)


def test_draws_return_plain_arrays_and_keys_stay_threefry():
    key = jax.random.key(1)
    z = rng.normal(key, (3,))
    assert isinstance(z, jax.Array) and z.dtype == jnp.float32
    assert str(jax.random.key_impl(key)) == "threefry2x32"
    assert str(jax.random.key_impl(rng.fast_key(key))) != "threefry2x32"  # the fast path is taken


def test_other_key_implementations_fall_back_to_jax_random():
    key = jax.random.key(3, impl="rbg")
    assert rng.fast_key(key) is key
    assert same(rng.normal(key, (6,)), jax.random.normal(key, (6,)))
    assert same(rng.uniform(key, (2, 3)), jax.random.uniform(key, (2, 3)))
    raw4 = jnp.zeros(4, jnp.uint32)  # not a Threefry raw key: passed on untouched
    assert rng.fast_key(raw4) is raw4


def run_python(code: str) -> None:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]


def test_float64_and_uint64_under_x64_equal_jax_random():
    run_python(
        """
        import jax, numpy as np
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp
        from evotensor.core import rng
        key = jax.random.key(9)
        pairs = [
            (rng.normal(key, (33, 3), jnp.float64), jax.random.normal(key, (33, 3), jnp.float64)),
            (rng.uniform(key, (50,), jnp.float64, -1, 2), jax.random.uniform(key, (50,), jnp.float64, -1, 2)),
            (rng.bits(key, (17,), jnp.uint64), jax.random.bits(key, (17,), jnp.uint64)),
            (rng.randint(key, (40,), 0, 10**12), jax.random.randint(key, (40,), 0, 10**12)),
        ]
        for a, b in pairs:
            assert a.dtype == b.dtype and np.array_equal(a, b), (a.dtype, b.dtype)
        """
    )


def test_legacy_non_partitionable_threefry_falls_back():
    run_python(
        """
        import jax, numpy as np
        jax.config.update("jax_threefry_partitionable", False)
        from evotensor.core import rng
        key = jax.random.key(4)
        assert rng.fast_key(key) is key
        assert np.array_equal(rng.normal(key, (5, 7)), jax.random.normal(key, (5, 7)))
        """
    )


_SPLIT = jax.jit(rng.split, static_argnums=1)


@settings(max_examples=8, deadline=None)
@given(seed=SEEDS, num=st.sampled_from([1, 3, (2, 3)]))
def test_split_equals_jax_random_split_and_keeps_the_key_kind(seed, num):
    for key in (jax.random.key(seed), jax.random.PRNGKey(seed)):
        ours, ref = _SPLIT(key, num), jax.random.split(key, num)
        assert ours.dtype == ref.dtype and ours.shape == ref.shape
        typed = jnp.issubdtype(ref.dtype, jax.dtypes.prng_key)
        data = (lambda k: jax.random.key_data(k)) if typed else (lambda k: k)  # noqa: E731
        assert same(data(ours), data(ref))


def test_split_under_vmap_and_of_other_keys_equals_jax_random_split():
    keys = jax.random.split(jax.random.key(2), 4)
    ours = jax.vmap(lambda k: rng.split(k, 3))(keys)
    ref = jax.vmap(lambda k: jax.random.split(k, 3))(keys)
    assert same(jax.random.key_data(ours), jax.random.key_data(ref))
    rbg = jax.random.key(2, impl="rbg")  # not Threefry: passed on to jax.random
    assert same(jax.random.key_data(rng.split(rbg)), jax.random.key_data(jax.random.split(rbg)))
