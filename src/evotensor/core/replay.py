"""Reinforcement-learning data in fixed shapes: one step of experience and a ring replay buffer.

A rollout of ``T`` steps by ``pop`` policies yields :class:`Transitions` with leaves ``[pop, T, ...]``
and a ``valid`` mask (the steps before and including each episode's end). :class:`ReplayBuffer`
keeps the most recent ``capacity`` valid rows and samples them uniformly, inside ``jit``::

    buffer = ReplayBuffer(capacity=1_000_000)
    state = buffer.init(Transitions.zeros(observation_size=17, action_size=6))
    state = buffer.insert(state, transitions)              # any leading shape; invalid rows skipped
    batch = buffer.sample(key, state, 256)                 # Transitions with leaves [256, ...]

Rows go into a ring in the order they come (row-major over the leading axes): once full, each new
row overwrites the oldest one. Only rows that are ``valid`` and entirely finite are stored, so a
diverging simulation never puts NaN into what a critic learns from.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core.checks import ArgumentError, check_int
from evotensor.core.pytree import pytree_dataclass


@pytree_dataclass
class Transitions:
    """Steps of experience; every leaf has the same leading shape ``[...]`` (e.g. ``[pop, T]``).

    Attributes:
        obs: ``[..., observation_size]`` observation before the step.
        action: ``[..., action_size]`` action taken (in the environment's range, e.g. ``[-1, 1]``).
        reward: ``[...]`` reward of the step.
        next_obs: ``[..., observation_size]`` observation after the step.
        done: ``[...]`` 1.0 where the step ended the episode in a terminal state (no bootstrap).
        truncation: ``[...]`` 1.0 where the episode was cut by its time limit at this step (the
            value of ``next_obs`` is unknown: TD learning leaves the step out).
        valid: ``[...]`` bool, the steps that happened (False after an episode ended).
    """

    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    next_obs: jax.Array
    done: jax.Array
    truncation: jax.Array
    valid: jax.Array

    @classmethod
    def zeros(cls, observation_size: int, action_size: int, shape: tuple[int, ...] = ()) -> Transitions:
        """All-zero (invalid) transitions of leading ``shape``: a template for :meth:`ReplayBuffer.init`."""
        observation_size = check_int(observation_size, "observation_size")
        action_size = check_int(action_size, "action_size")
        f = jnp.float32
        return cls(
            obs=jnp.zeros((*shape, observation_size), f),
            action=jnp.zeros((*shape, action_size), f),
            reward=jnp.zeros(shape, f),
            next_obs=jnp.zeros((*shape, observation_size), f),
            done=jnp.zeros(shape, f),
            truncation=jnp.zeros(shape, f),
            valid=jnp.zeros(shape, bool),
        )


@pytree_dataclass
class ReplayBufferState:
    """``data`` (the row template's leaves with a leading ``[capacity]`` axis), ``position []`` (the
    slot the next row goes to) and ``size []`` (rows stored, at most ``capacity``), both int32."""

    data: Any
    position: jax.Array
    size: jax.Array


class ReplayBuffer:
    """A fixed-capacity ring of rows (any pytree with a ``valid`` leaf, e.g. :class:`Transitions`).

    Args:
        capacity: rows kept (QDax's PGA-ME default is 1,000,000).
    """

    def __init__(self, capacity: int):
        # int32 positions; the slot arithmetic adds two positions below 2**31
        self.capacity = check_int(capacity, "capacity", maximum=2**30)

    def __repr__(self) -> str:
        return f"ReplayBuffer(capacity={self.capacity})"

    def init(self, row: Any) -> ReplayBufferState:
        """An empty buffer for rows shaped like ``row`` (one row, no leading axis)."""
        if getattr(row, "valid", None) is None:
            raise ArgumentError("row must have a 'valid' field (e.g. evotensor.core.replay.Transitions)")
        data = jax.tree_util.tree_map(
            lambda a: jnp.zeros((self.capacity, *jnp.shape(a)), jnp.asarray(a).dtype), row
        )
        # two arrays, not one twice: a state with shared buffers cannot be donated
        return ReplayBufferState(data=data, position=jnp.zeros((), jnp.int32), size=jnp.zeros((), jnp.int32))

    def insert(self, state: ReplayBufferState, rows: Any) -> ReplayBufferState:
        """Append the valid, finite rows of ``rows`` (leaves ``[..., *row shape]``, any leading shape
        shared by all leaves, flattened row-major) in order; of more than ``capacity`` such rows in
        one call, the last ``capacity`` are kept."""
        n = int(np.prod(jnp.shape(rows.valid), dtype=np.int64))
        if n == 0:
            return state
        flat = jax.tree_util.tree_map(
            lambda a, d: jnp.reshape(jnp.asarray(a, d.dtype), (n, *d.shape[1:])), rows, state.data
        )
        keep = flat.valid.astype(bool)
        for leaf in jax.tree_util.tree_leaves(flat):
            if jnp.issubdtype(leaf.dtype, jnp.floating):
                keep = keep & jnp.all(jnp.isfinite(leaf.reshape(leaf.shape[0], -1)), axis=1)
        rank = jnp.cumsum(keep.astype(jnp.int32)) - 1  # order among the kept rows
        count = rank[-1] + 1
        # rows that would be overwritten in this same call are dropped: slots stay distinct
        keep = keep & (rank >= count - self.capacity)
        slot = jnp.where(keep, (state.position + rank) % self.capacity, self.capacity)
        data = jax.tree_util.tree_map(lambda buf, new: buf.at[slot].set(new, mode="drop"), state.data, flat)
        stored = jnp.minimum(count, self.capacity)
        return ReplayBufferState(
            data=data,
            position=(state.position + count % self.capacity) % self.capacity,
            size=jnp.minimum(state.size + stored, self.capacity),
        )

    def sample(self, key: jax.Array, state: ReplayBufferState, n: int) -> Any:
        """``n`` rows drawn uniformly with replacement from the stored ones (leaves ``[n, ...]``).
        From an empty buffer the rows are slot 0's zeros (``valid`` False): check ``state.size``."""
        index = jax.random.randint(key, (n,), 0, jnp.maximum(state.size, 1))
        return jax.tree_util.tree_map(lambda a: a[index], state.data)
