"""The ring replay buffer against a Python list that keeps the last ``capacity`` stored rows."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evotensor.core.checks import ArgumentError
from evotensor.core.replay import ReplayBuffer, Transitions

OBS, ACT = 2, 1


def rows(values, valid, nan_at=()):
    """Transitions [n] whose reward (and first obs entry) is ``values``; NaN in ``next_obs`` at ``nan_at``."""
    n = len(values)
    v = jnp.asarray(values, jnp.float32)
    next_obs = jnp.zeros((n, OBS), jnp.float32)
    if nan_at:
        next_obs = next_obs.at[jnp.asarray(nan_at), 0].set(jnp.nan)
    return Transitions(
        obs=jnp.stack([v, -v], axis=1),
        action=jnp.zeros((n, ACT), jnp.float32),
        reward=v,
        next_obs=next_obs,
        done=jnp.zeros(n, jnp.float32),
        truncation=jnp.zeros(n, jnp.float32),
        valid=jnp.asarray(valid, bool),
    )


batches = st.lists(
    st.lists(st.tuples(st.booleans(), st.booleans()), min_size=0, max_size=9), min_size=1, max_size=6
)


@settings(max_examples=40, deadline=None)
@given(capacity=st.integers(1, 7), plan=batches)
def test_buffer_keeps_the_last_capacity_valid_finite_rows_in_order(capacity, plan):
    buffer = ReplayBuffer(capacity)
    insert = jax.jit(buffer.insert)
    state = buffer.init(Transitions.zeros(OBS, ACT))
    kept, counter = [], 0
    for batch in plan:
        values = [float(counter + i) for i in range(len(batch))]
        counter += len(batch)
        valid = [v for v, _ in batch]
        nan_at = [i for i, (_, bad) in enumerate(batch) if bad]
        state = insert(state, rows(values, valid, nan_at))
        kept += [x for x, (v, bad) in zip(values, batch, strict=True) if v and not bad]
        kept = kept[-capacity:]
        assert int(state.size) == len(kept)
        # the ring, read from the oldest slot, is the reference list
        size, pos = int(state.size), int(state.position)
        order = [(pos - size + i) % capacity for i in range(size)]
        stored = np.asarray(state.data.reward)[order]
        np.testing.assert_array_equal(stored, kept)
        assert np.all(np.asarray(state.data.valid)[order])
        np.testing.assert_array_equal(np.asarray(state.data.obs)[order, 1], -np.asarray(kept))
        assert np.all(np.isfinite(np.asarray(state.data.next_obs)))


def test_sample_draws_only_stored_rows_uniformly():
    buffer = ReplayBuffer(16)
    state = buffer.insert(buffer.init(Transitions.zeros(OBS, ACT)), rows(np.arange(5.0) + 1, [True] * 5))
    batch = jax.jit(buffer.sample, static_argnums=2)(jax.random.key(0), state, 5000)
    assert batch.reward.shape == (5000,) and batch.obs.shape == (5000, OBS)
    values, counts = np.unique(np.asarray(batch.reward), return_counts=True)
    np.testing.assert_array_equal(values, [1, 2, 3, 4, 5])  # never an empty slot's zero
    assert counts.min() > 850 and counts.max() < 1150  # 1000 each expected
    # leading axes of any shape are flattened row-major
    two_d = jax.tree_util.tree_map(lambda a: a.reshape(2, 3, *a.shape[1:]), rows(np.arange(6.0), [True] * 6))
    state = buffer.insert(buffer.init(Transitions.zeros(OBS, ACT)), two_d)
    np.testing.assert_array_equal(np.asarray(state.data.reward)[:6], np.arange(6.0))


def test_bad_buffer_arguments_are_named():
    with pytest.raises(ArgumentError, match="capacity"):
        ReplayBuffer(0)
    with pytest.raises(ArgumentError, match="valid"):
        ReplayBuffer(4).init({"obs": jnp.zeros(3)})
    with pytest.raises(ArgumentError, match="observation_size"):
        Transitions.zeros(0, 1)
