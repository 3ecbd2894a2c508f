"""ClipUp and step-size plumbing: reference update, speed bound (property-based), errors."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given
from hypothesis import strategies as st

from evotensor.es.core.optimizers import clipup, resolve_sigma_init, safe_norm, safe_normalize


def clipup_reference(grads, lr, momentum, max_speed):
    """Plain-numpy ClipUp (Toklu et al., 2020), float64."""
    v = np.zeros_like(grads[0], dtype=np.float64)
    steps = []
    for g in grads:
        g = np.asarray(g, np.float64)
        v = momentum * v + lr * g / np.linalg.norm(g)
        speed = np.linalg.norm(v)
        if speed > max_speed:
            v = v * max_speed / speed
        steps.append(-v)
    return steps


def test_clipup_matches_reference():
    rng = np.random.default_rng(0)
    grads = [rng.normal(size=5) * 10 ** rng.uniform(-3, 3) for _ in range(12)]
    opt = clipup(0.1, momentum=0.9, max_speed=0.15)
    state = opt.init(jnp.zeros(5))
    ref = clipup_reference(grads, 0.1, 0.9, 0.15)
    for g, r in zip(grads, ref):
        upd, state = opt.update(jnp.asarray(g, jnp.float32), state)
        np.testing.assert_allclose(np.asarray(upd), r, rtol=1e-5, atol=1e-7)


_OPT = clipup(0.3, max_speed=0.4)
_UPDATE = jax.jit(_OPT.update)


@given(st.lists(st.floats(-1e30, 1e30, allow_nan=False), min_size=3, max_size=3), st.integers(1, 5))
def test_clipup_speed_never_exceeds_max_speed(g, steps):
    state = _OPT.init(jnp.zeros(3))
    for _ in range(steps):
        upd, state = _UPDATE(jnp.asarray(g, jnp.float32), state)
        assert np.all(np.isfinite(np.asarray(upd)))
        assert float(jnp.linalg.norm(upd)) <= 0.4 * (1 + 1e-5)


def test_clipup_works_on_pytrees_and_with_schedules():
    params = {"a": jnp.ones(2), "b": jnp.ones((2, 2))}
    opt = clipup(optax.linear_schedule(0.1, 0.0, 10))
    state = opt.init(params)
    upd, state = opt.update(jax.tree_util.tree_map(jnp.ones_like, params), state)
    total = jnp.sqrt(sum(jnp.sum(u**2) for u in jax.tree_util.tree_leaves(upd)))
    assert float(total) == pytest.approx(0.1, rel=1e-5)  # first step: lr * unit direction


def test_safe_norm_handles_tiny_huge_and_zero():
    assert float(safe_norm(jnp.full(4, 1e-30))) == pytest.approx(2e-30, rel=1e-5)
    assert float(safe_norm(jnp.full(4, 1e30))) == pytest.approx(2e30, rel=1e-5)
    assert float(safe_norm(jnp.zeros(3))) == 0.0
    np.testing.assert_array_equal(np.asarray(safe_normalize(jnp.zeros(3))), 0.0)


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="learning_rate"):
        clipup(0.0)
    with pytest.raises(ValueError, match="momentum"):
        clipup(0.1, momentum=1.0)
    with pytest.raises(ValueError, match="max_speed"):
        clipup(0.1, max_speed=-1.0)
    with pytest.raises(ValueError, match="not both"):
        resolve_sigma_init(0.1, lambda s: 0.1, 0.02)
