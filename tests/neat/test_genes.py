"""Gene attribute types (evotensor.neat.genes): zero rates draw nothing, with the same numbers."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from evotensor.core import rng
from evotensor.neat.genes import ChoiceAttribute, ConnectionGene, FloatAttribute


def _bits(x):
    """Exact comparison, the sign of zero included."""
    a = np.asarray(x)
    return a.view(np.uint32) if a.dtype == np.float32 else a


def _float_init_drawn(a: FloatAttribute, key, shape):
    x = a.init_mean + a.init_std * rng.normal(key, shape, jnp.float32)
    return jnp.clip(x, a.min_value, a.max_value)


def _float_mutate_drawn(a: FloatAttribute, key, values):
    """FloatAttribute.mutate with every draw made, whatever the rates."""
    k_r, k_n, k_i = rng.split(key, 3)
    r = rng.uniform(k_r, values.shape)
    perturbed = values + a.mutate_power * rng.normal(k_n, values.shape, jnp.float32)
    out = jnp.where(r < a.mutate_rate, perturbed, values)
    replace = (r >= a.mutate_rate) & (r < a.mutate_rate + a.replace_rate)
    out = jnp.where(replace, _float_init_drawn(a, k_i, values.shape), out)
    return jnp.clip(out, a.min_value, a.max_value).astype(jnp.float32)


def _choice_mutate_drawn(c: ChoiceAttribute, key, ids):
    k_r, k_c = rng.split(key)
    replace = rng.uniform(k_r, ids.shape) < c.mutate_rate
    fresh = rng.randint(k_c, ids.shape, 0, len(c.options), jnp.int32)
    return jnp.where(replace, fresh, ids).astype(jnp.int32)


def _values():
    v = jax.random.normal(jax.random.key(7), (64, 33), jnp.float32) * 20
    return v.at[0, :4].set(jnp.asarray([0.0, -0.0, 40.0, -40.0]))  # signed zeros, clipped values


FLOATS = [
    FloatAttribute("a", 1.0, 0.0, "gaussian", 0.0, 0.0, 0.0, -30.0, 30.0),  # neat-python's response
    FloatAttribute("b", 0.0, 1.0, "gaussian", 0.5, 0.0, 0.1, -30.0, 30.0),  # replace only
    FloatAttribute("c", 0.0, 1.0, "gaussian", 0.5, 0.7, 0.0, -5.0, 5.0),  # perturb only
    FloatAttribute("d", 0.0, 0.0, "gaussian", 0.5, 0.2, 0.3, -30.0, 30.0),  # init std 0, mean +0.0
    FloatAttribute("e", -0.0, 0.0, "gaussian", 0.5, 0.2, 0.3, -30.0, 30.0),  # mean -0.0: still drawn
    FloatAttribute("f", 2.0, 0.0, "gaussian", 0.0, 0.0, 0.6, -1.0, 1.0),  # std 0, clipped mean
    FloatAttribute("g", 0.0, 1.0, "gaussian", 0.5, 0.7, 0.1, -30.0, 30.0),  # nothing skipped
]


@pytest.mark.parametrize("attr", FLOATS, ids=lambda a: a.name)
@pytest.mark.fusion_emitters
def test_float_attribute_skips_change_no_number(attr):
    values = _values()
    for seed in range(3):
        key = jax.random.key(seed)
        got = jax.jit(attr.mutate)(key, values)
        np.testing.assert_array_equal(_bits(got), _bits(_float_mutate_drawn(attr, key, values)))
        init = jax.jit(attr.init, static_argnums=1)(key, (50, 7))
        np.testing.assert_array_equal(_bits(init), _bits(_float_init_drawn(attr, key, (50, 7))))


@pytest.mark.parametrize(
    "choice",
    [
        ChoiceAttribute("act", ("sigmoid",), "sigmoid", 0.0),
        ChoiceAttribute("act", ("sigmoid",), "sigmoid", 0.3),
        ChoiceAttribute("act", ("sigmoid",), "random", 0.3),
        ChoiceAttribute("act", ("sigmoid", "tanh", "relu"), "random", 0.0),
        ChoiceAttribute("act", ("sigmoid", "tanh", "relu"), "random", 0.3),
    ],
)
def test_choice_attribute_skips_change_no_number(choice):
    ids = jax.random.randint(jax.random.key(3), (40, 9), 0, len(choice.options), jnp.int32)
    for seed in range(3):
        key = jax.random.key(seed)
        got = jax.jit(choice.mutate)(key, ids)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(_choice_mutate_drawn(choice, key, ids)))
        init = jax.jit(choice.init, static_argnums=1)(key, (40, 9))
        if choice.default in choice.options:
            want = jnp.full((40, 9), choice.options.index(choice.default), jnp.int32)
        else:
            want = rng.randint(key, (40, 9), 0, len(choice.options), jnp.int32)
        np.testing.assert_array_equal(np.asarray(init), np.asarray(want))


@pytest.mark.parametrize("rate", [0.0, 0.3])
def test_connection_enabled_flag_with_zero_rate_is_kept(rate):
    gene = ConnectionGene(enabled_mutate_rate=rate)
    attrs = _values()[:, :1]
    enabled = jax.random.bernoulli(jax.random.key(5), 0.7, (64,))
    key = jax.random.key(11)
    got_attrs, got_enabled = jax.jit(gene.mutate_attrs)(key, attrs, enabled)
    keys = rng.split(key, 3)
    np.testing.assert_array_equal(
        _bits(got_attrs[:, 0]), _bits(_float_mutate_drawn(gene.floats[0], keys[0], attrs[:, 0]))
    )
    redraw = rng.uniform(keys[-2], enabled.shape) < rate
    coin = jax.random.bernoulli(rng.fast_key(keys[-1]), 0.5, enabled.shape)
    np.testing.assert_array_equal(np.asarray(got_enabled), np.asarray(jnp.where(redraw, coin, enabled)))
    if rate > 0:
        assert not np.array_equal(np.asarray(got_enabled), np.asarray(enabled))


def _count(jaxpr, name):
    n = 0
    for eqn in jaxpr.eqns:
        n += eqn.primitive.name == name
        for param in eqn.params.values():
            for sub in param if isinstance(param, (tuple, list)) else (param,):
                sub = getattr(sub, "jaxpr", sub)  # a closed jaxpr's open one
                if hasattr(sub, "eqns"):
                    n += _count(sub, name)
    return n


def _draws_in(fn, *args):
    """Random-bits draws in the traced program (nested jaxprs included)."""
    return _count(jax.make_jaxpr(fn)(*args).jaxpr, "random_bits")


def test_zero_rates_compile_no_draws():
    """A zero rate leaves its draws out of the program (they only cost compile and run time)."""
    key, values = jax.random.key(0), _values()
    assert _draws_in(FLOATS[0].mutate, key, values) == 0  # every rate 0
    assert _draws_in(FLOATS[-1].mutate, key, values) == 3  # uniform, perturbation, replacement
    assert _draws_in(FLOATS[1].mutate, key, values) == 2  # no perturbation
    assert _draws_in(FLOATS[2].mutate, key, values) == 2  # no replacement
    assert _draws_in(lambda k: FLOATS[3].init(k, (5,)), key) == 0
    assert _draws_in(lambda k: FLOATS[4].init(k, (5,)), key) == 1  # -0.0 + 0 * x needs x's sign
    ids = jnp.zeros((4, 3), jnp.int32)
    assert _draws_in(ChoiceAttribute("act", ("sigmoid",), "sigmoid", 0.0).mutate, key, ids) == 0
    assert _draws_in(ChoiceAttribute("act", ("sigmoid",), "sigmoid", 0.3).mutate, key, ids) == 1
    assert _draws_in(ChoiceAttribute("act", ("a", "b"), "a", 0.3).mutate, key, ids) >= 2
    enabled = jnp.ones((4,), bool)
    no_flag = ConnectionGene(enabled_mutate_rate=0.0).mutate_attrs
    flag = ConnectionGene(enabled_mutate_rate=0.01).mutate_attrs
    assert _draws_in(no_flag, key, values[:4, :1], enabled) == 3
    assert _draws_in(flag, key, values[:4, :1], enabled) == 5
