"""TD3 (Fujimoto et al. 2018) for policy-gradient QD: twin critics, a greedy actor, target networks.

The learner of PGA-ME's policy-gradient emitter (:mod:`.policy_gradient`). Policies are flat
parameter vectors ``[D]`` and act with ``tanh(apply(unravel(x), obs))`` in ``[-1, 1]``, as
:class:`~evotensor.problems.qd_control.BraxQDProblem` runs them. Facts (losses, architecture,
schedule, defaults) follow QDax 0.5 (``qdax/core/neuroevolution/losses/td3_loss.py``,
``networks.QModule``, ``emitters/qpg_emitter.py``):

* critic: ``n_critics = 2`` MLPs on ``concat(obs, action)`` with ReLU hidden layers (256, 256),
  one output each; LeCun-uniform weights, zero biases.
* critic loss: ``a' = clip(actor_target(s') + clip(N(0, policy_noise), +-noise_clip), -1, 1)``,
  ``y = reward_scaling r + (1 - done) discount min_i Q_target_i(s', a')``; the loss is
  ``sum_i mean((Q_i(s, a) - y)^2 (1 - truncation))``.
* actor loss: ``-mean Q_1(s, actor(s))``.
* one training iteration: ``policy_delay`` critic steps (Adam; each followed by a soft target-critic
  update with ``tau``), then one greedy-actor step (Adam) and a soft target-actor update; every
  step on its own mini-batch of ``batch_size`` transitions.

An iteration that would leave any parameter or optimizer moment non-finite (a loss that overflowed)
is skipped as a whole, so a diverging critic never puts NaN into the state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import optax

from evotensor.core import rng
from evotensor.core.checks import ArgumentError, check_int, check_memory, check_real
from evotensor.core.pytree import pytree_dataclass
from evotensor.core.replay import ReplayBuffer, ReplayBufferState, Transitions


def lecun_uniform_mlp(key: jax.Array, sizes: Sequence[int], copies: tuple[int, ...] = ()) -> tuple:
    """MLP layers ``{"w": [*copies, in, out], "b": [*copies, out]}`` for widths ``sizes``:
    LeCun-uniform weights (``U(+-sqrt(3 / in))``, QDax's networks) and zero biases."""
    layers = []
    for k, fan_in, fan_out in zip(jax.random.split(key, len(sizes) - 1), sizes[:-1], sizes[1:], strict=True):
        limit = (3.0 / fan_in) ** 0.5
        w = jax.random.uniform(k, (*copies, fan_in, fan_out), jnp.float32, -limit, limit)
        layers.append({"w": w, "b": jnp.zeros((*copies, fan_out), jnp.float32)})
    return tuple(layers)


def init_critic(
    key: jax.Array, observation_size: int, action_size: int, hidden: Sequence[int], n_critics: int = 2
) -> tuple[dict[str, jax.Array], ...]:
    """Twin-critic parameters: layers ``{"w": [n_critics, in, out], "b": [n_critics, out]}``,
    LeCun-uniform weights and zero biases."""
    return lecun_uniform_mlp(key, (observation_size + action_size, *hidden, 1), (n_critics,))


def adam_policy_steps(
    optimizer: optax.GradientTransformation,
    grad: Callable[[jax.Array, Any], jax.Array],
    sample: Callable[[jax.Array], Any],
    key: jax.Array,
    steps: int,
    x: jax.Array,
) -> jax.Array:
    """``x [n, D]`` after ``steps`` optimizer steps (a fresh state per row), step ``i`` on the
    mini-batch ``sample(key_i)`` shared by all rows, ``grad(x, batch) -> [n, D]``; a row whose steps
    ended non-finite is returned unchanged (PGA-ME's and DCRL-ME's variation of elites)."""

    def step(carry, k):
        x, opt = carry
        updates, opt = jax.vmap(optimizer.update)(grad(x, sample(k)), opt, x)
        return (optax.apply_updates(x, updates), opt), None

    out = jax.lax.scan(step, (x, jax.vmap(optimizer.init)(x)), jax.random.split(key, steps))[0][0]
    return jnp.where(jnp.all(jnp.isfinite(out), axis=1, keepdims=True), out, x)


def critic_apply(params: Sequence[dict[str, jax.Array]], obs: jax.Array, action: jax.Array) -> jax.Array:
    """``Q [n, n_critics]`` of ``obs [n, observation_size]`` and ``action [n, action_size]``."""
    x = jnp.concatenate([obs, action], axis=-1)
    values = []
    # one plain matmul chain per critic: faster on a CPU than one batched einsum over the critics
    for c in range(params[0]["w"].shape[0]):
        h = x
        for i, layer in enumerate(params):
            h = h @ layer["w"][c] + layer["b"][c]
            if i < len(params) - 1:
                h = jax.nn.relu(h)
        values.append(h[:, 0])
    return jnp.stack(values, axis=1)


def all_finite(tree: Any) -> jax.Array:
    """``[]`` bool: every floating-point leaf of ``tree`` is finite."""
    leaves = [a for a in jax.tree_util.tree_leaves(tree) if jnp.issubdtype(jnp.result_type(a), jnp.floating)]
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(a)) for a in leaves])) if leaves else jnp.asarray(True)


@pytree_dataclass
class TD3State:
    """Critic, greedy actor (a flat policy ``[D]``), their targets and Adam states, and the replay
    buffer of every transition seen."""

    critic: Any
    critic_opt: Any
    target_critic: Any
    actor: Any
    actor_opt: Any
    target_actor: Any
    buffer: ReplayBufferState


class TD3Learner:
    """TD3's critic and greedy actor over flat policies (module docstring for the rules).

    Args:
        actor: ``actor(x [D], obs [n, observation_size]) -> action [n, action_size]`` in ``[-1, 1]``.
        observation_size, action_size: the environment's sizes.
        critic_hidden: critic hidden layer widths (QDax: (256, 256)).
        critic_learning_rate, actor_learning_rate: Adam rates (3e-4, 3e-4).
        noise_clip, policy_noise: target policy smoothing (0.5, 0.2).
        discount: 0.99. reward_scaling: 1.0. soft_tau_update: target update rate (0.005).
        policy_delay: critic steps per actor step (2). batch_size: transitions per step (256).
        replay_buffer_size: transitions kept (1,000,000).
        condition_size: extra critic inputs per transition (0; DCRL-ME: the descriptor size),
            given by a subclass's :meth:`q_values`.
    """

    def __init__(
        self,
        actor: Callable[[jax.Array, jax.Array], jax.Array],
        observation_size: int,
        action_size: int,
        *,
        critic_hidden: Sequence[int] = (256, 256),
        critic_learning_rate: float = 3e-4,
        actor_learning_rate: float = 3e-4,
        noise_clip: float = 0.5,
        policy_noise: float = 0.2,
        discount: float = 0.99,
        reward_scaling: float = 1.0,
        soft_tau_update: float = 0.005,
        policy_delay: int = 2,
        batch_size: int = 256,
        replay_buffer_size: int = 1_000_000,
        condition_size: int = 0,
    ):
        if not callable(actor):
            raise ArgumentError(f"actor must be callable, got {type(actor).__name__}")
        self.actor = actor
        self.observation_size = check_int(observation_size, "observation_size")
        self.action_size = check_int(action_size, "action_size")
        if isinstance(critic_hidden, (str, bytes)) or not isinstance(critic_hidden, Sequence):
            raise ArgumentError(f"critic_hidden_layer_size must be a sequence of ints, got {critic_hidden!r}")
        self.critic_hidden = tuple(check_int(h, "critic_hidden_layer_size") for h in critic_hidden)
        self.critic_optimizer = optax.adam(
            check_real(critic_learning_rate, "critic_learning_rate", 0, low_open=True)
        )
        self.actor_optimizer = optax.adam(
            check_real(actor_learning_rate, "greedy_learning_rate", 0, low_open=True)
        )
        self.noise_clip = check_real(noise_clip, "noise_clip", 0)
        self.policy_noise = check_real(policy_noise, "policy_noise", 0)
        self.discount = check_real(discount, "discount", 0, 1)
        self.reward_scaling = check_real(reward_scaling, "reward_scaling", 0, low_open=True)
        self.tau = check_real(soft_tau_update, "soft_tau_update", 0, 1, low_open=True)
        self.policy_delay = check_int(policy_delay, "policy_delay")
        self.batch_size = check_int(batch_size, "transitions_batch_size")
        self.condition_size = check_int(condition_size, "condition_size", minimum=0)
        capacity = check_int(replay_buffer_size, "replay_buffer_size", maximum=2**30)
        row_bytes = 4 * (2 * self.observation_size + self.action_size + 2 * self.condition_size + 4) + 1
        check_memory(capacity * row_bytes, f"replay_buffer_size={capacity}")
        self.buffer = ReplayBuffer(capacity)

    # -- what a conditioned learner (DCRL-ME's) overrides ----------------------------------------
    def act(self, actor: Any, obs: jax.Array, batch: Transitions) -> jax.Array:
        """The greedy (or target) actor's action ``[n, action_size]`` on ``obs`` of ``batch``."""
        return self.actor(actor, obs)

    def q_values(self, critic: Any, obs: jax.Array, action: jax.Array, batch: Transitions) -> jax.Array:
        """``Q [n, n_critics]`` of ``obs`` and ``action`` (rows of ``batch``)."""
        return critic_apply(critic, obs, action)

    def weigh(self, batch: Transitions) -> Transitions:
        """The sampled mini-batch as the losses see it (unchanged here)."""
        return batch

    def empty_row(self) -> Transitions:
        """One row of zeros: the replay buffer's template."""
        return Transitions.zeros(self.observation_size, self.action_size)

    # -- losses ---------------------------------------------------------------------------------
    def actor_loss(self, x: Any, critic: Any, batch: Transitions) -> jax.Array:
        """``-mean Q_1(s, actor_x(s))`` over the batch: the loss of the greedy actor ``x``."""
        first = jax.tree_util.tree_map(lambda a: a[:1], critic)  # Q_2 plays no part: not computed
        return -jnp.mean(self.q_values(first, batch.obs, self.act(x, batch.obs, batch), batch)[:, 0])

    def critic_loss(
        self, critic: Any, target_critic: Any, target_actor: jax.Array, batch: Transitions, key: jax.Array
    ) -> jax.Array:
        """TD3's clipped double-Q loss (module docstring)."""
        noise = jnp.clip(
            self.policy_noise * rng.normal(key, batch.action.shape, jnp.float32),
            -self.noise_clip,
            self.noise_clip,
        )
        next_action = jnp.clip(self.act(target_actor, batch.next_obs, batch) + noise, -1.0, 1.0)
        next_value = jnp.min(self.q_values(target_critic, batch.next_obs, next_action, batch), axis=-1)
        target = jax.lax.stop_gradient(
            batch.reward * self.reward_scaling + (1.0 - batch.done) * self.discount * next_value
        )
        kept = (1.0 - batch.truncation)[:, None]  # a time-limit step has no known next value
        error = (self.q_values(critic, batch.obs, batch.action, batch) - target[:, None]) * kept
        return jnp.sum(jnp.mean(jnp.square(error), axis=0))

    # -- state ----------------------------------------------------------------------------------
    def init(self, key: jax.Array, actor: Any) -> TD3State:
        """Fresh critic (its target a copy), greedy actor ``actor`` (and target), empty buffer."""
        inputs = self.observation_size + self.condition_size
        critic = init_critic(key, inputs, self.action_size, self.critic_hidden)

        # copies: a state whose leaves share buffers (with each other or with the emitter's x0)
        # cannot be donated
        def copy(tree):
            return jax.tree_util.tree_map(lambda a: jnp.array(a, jnp.float32, copy=True), tree)

        actor = copy(actor)
        return TD3State(
            critic=critic,
            critic_opt=self.critic_optimizer.init(critic),
            target_critic=copy(critic),
            actor=actor,
            actor_opt=self.actor_optimizer.init(actor),
            target_actor=copy(actor),
            buffer=self.buffer.init(self.empty_row()),
        )

    def soft_update(self, target: Any, online: Any) -> Any:
        """``(1 - tau) target + tau online``, leaf by leaf."""
        return jax.tree_util.tree_map(lambda t, o: (1.0 - self.tau) * t + self.tau * o, target, online)

    def iteration(self, key: jax.Array, state: TD3State) -> TD3State:
        """``policy_delay`` critic steps then one actor step, each on a fresh mini-batch."""
        sample_key, *noise_keys = jax.random.split(key, self.policy_delay + 1)
        batch = self.buffer.sample(sample_key, state.buffer, self.batch_size * (self.policy_delay + 1))
        batch = jax.tree_util.tree_map(
            lambda a: a.reshape(self.policy_delay + 1, self.batch_size, *a.shape[1:]), self.weigh(batch)
        )

        def critic_step(carry, inputs):
            critic, opt, target = carry
            part, k = inputs
            grad = jax.grad(self.critic_loss)(critic, target, state.target_actor, part, k)
            updates, opt = self.critic_optimizer.update(grad, opt, critic)
            critic = optax.apply_updates(critic, updates)
            return (critic, opt, self.soft_update(target, critic)), None

        critic_part = jax.tree_util.tree_map(lambda a: a[:-1], batch)
        (critic, critic_opt, target_critic), _ = jax.lax.scan(
            critic_step,
            (state.critic, state.critic_opt, state.target_critic),
            (critic_part, jnp.stack(noise_keys)),
        )
        actor_part = jax.tree_util.tree_map(lambda a: a[-1], batch)
        grad = jax.grad(self.actor_loss)(state.actor, critic, actor_part)
        updates, actor_opt = self.actor_optimizer.update(grad, state.actor_opt, state.actor)
        actor = optax.apply_updates(state.actor, updates)
        new = state.replace(
            critic=critic,
            critic_opt=critic_opt,
            target_critic=target_critic,
            actor=actor,
            actor_opt=actor_opt,
            target_actor=self.soft_update(state.target_actor, actor),
        )
        # a diverging step (a loss that overflowed) is skipped: the state never turns non-finite.
        # Only the networks are checked and selected: the buffer is unchanged here, finite by construction.
        new_nets, old_nets = new.replace(buffer=None), state.replace(buffer=None)
        ok = all_finite(new_nets)
        kept = jax.tree_util.tree_map(lambda a, b: jnp.where(ok, a, b), new_nets, old_nets)
        return kept.replace(buffer=state.buffer)

    def train(self, key: jax.Array, state: TD3State, iterations: int) -> TD3State:
        """``iterations`` training iterations (none while the buffer is empty)."""

        def run(state):
            def body(state, k):
                return self.iteration(k, state), None

            return jax.lax.scan(body, state, jax.random.split(key, iterations))[0]

        return jax.lax.cond(state.buffer.size > 0, run, lambda s: s, state)
