"""Descriptor-conditioned RL emitter of DCRL-MAP-Elites (Faldor et al. 2023; QDax's ``DCRLEmitter``).

DCRL-ME learns one critic ``Q(s, a | d')`` and one actor ``pi(s | d')`` conditioned on a target
descriptor ``d'``, and uses them two ways each generation (QDax 0.5,
``qdax/core/emitters/dcrl_emitter.py``, ``dcrl_me_emitter.py``, ``losses/td3_loss.py``):

* **PG variation** (``dcrl_batch_size`` rows): elites drawn uniformly each take
  ``num_pg_training_steps`` Adam steps (``policy_learning_rate``, a fresh optimizer per elite) on
  ``-mean Q_1(s, pi_x(s) | d_parent)``, the critic asked to keep the parent's own descriptor, all
  elites sharing each step's mini-batch.
* **Actor injection** (``ai_batch_size`` rows): for descriptors of elites drawn uniformly, the
  conditioned actor turned into a plain policy: its first layer's descriptor columns folded into the
  bias, ``b + d' W_d`` (the policy it computes for that ``d'``, exactly).
* **Training** (``tell``): every transition of the population goes into the replay buffer with
  ``d`` (the descriptor its episode reached) and ``d'`` (the one its policy was aimed at: the
  parent's for PG rows, the target for injected rows, its own for every other row); then
  ``num_critic_training_steps / policy_delay`` TD3 iterations
  (:class:`~evotensor.qd.emitters.td3.TD3Learner`) in which each sampled reward is scaled by the
  similarity ``exp(-|d - d'| / lengthscale)`` (after ``max(r + reward_offset, 0)``: QDax's example
  offsets and clips the environment's reward) and the critic, the target actor and the actor take
  ``d'`` as an extra input (critic input ``[s, a, d']``, actor input ``[s, d']``).

Descriptors are normalised to ``[-1, 1]`` with ``descriptor_ranges`` before they enter a network.
Policies are evotensor MLPs (:func:`~evotensor.problems.networks.init_mlp` parameters, run by
:func:`~evotensor.problems.networks.mlp_apply` with ``activation``, the action ``tanh`` of the
output, as :class:`~evotensor.problems.qd_control.BraxQDProblem` acts); the conditioned actor has
the same layers with ``d`` more inputs, LeCun-uniform weights and zero biases (QDax's ``MLPDC``).

DCRL-ME with QDax's example sizes (an Iso+LineDD batch of 128 beside 64 + 64)::

    me = MAPElites(archive, dcrl_me_emitters(params, problem.descriptor_ranges))

The problem must return transitions (``BraxQDProblem(task, transitions=True)``). The similarity
scaling only favours the target for rewards >= 0: QDax's example offsets and clips the
environment's rewards (``BraxQDProblem(..., offset_rewards=True)``, fitness included, what the
``qd-brax`` task does); ``reward_offset=`` does it for the critic alone, leaving the fitness the
task's return (on hopper_uni the first selects better: ``benchmarks/results_qd.md`` section 13).
Differences from QDax: only the steps that happened are stored (no auto-reset steps), and the
first generation's ``tell`` already trains.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.flatten_util import ravel_pytree

from evotensor.core.checks import ArgumentError, check_int, check_ranges, check_real
from evotensor.core.pytree import pytree_dataclass
from evotensor.core.replay import Transitions
from evotensor.problems.networks import mlp_apply
from evotensor.qd.archive import AddInfo, Archive, ArchiveState
from evotensor.qd.emitters.base import VariationEmitter
from evotensor.qd.emitters.iso_line import IsoLineEmitter
from evotensor.qd.emitters.policy_gradient import transitions_of
from evotensor.qd.emitters.td3 import TD3Learner, TD3State, adam_policy_steps, critic_apply, lecun_uniform_mlp


@pytree_dataclass
class DCTransitions(Transitions):
    """:class:`~evotensor.core.replay.Transitions` with ``desc [..., d]`` (the normalised descriptor
    the episode reached) and ``desc_prime [..., d]`` (the one its policy was aimed at)."""

    desc: jax.Array
    desc_prime: jax.Array

    @classmethod
    def empty(cls, observation_size: int, action_size: int, descriptor_size: int) -> DCTransitions:
        """One all-zero (invalid) row: the replay buffer's template."""
        base = Transitions.zeros(observation_size, action_size)
        d = jnp.zeros((descriptor_size,), jnp.float32)
        return cls(**{f: getattr(base, f) for f in Transitions.__dataclass_fields__}, desc=d, desc_prime=d)


class ConditionedTD3(TD3Learner):
    """TD3 whose critic and actor take the target descriptor ``desc_prime`` as an extra input and
    whose rewards are scaled by ``exp(-|desc - desc_prime| / lengthscale)`` (module docstring)."""

    def __init__(self, actor: Any, observation_size: int, action_size: int, descriptor_size: int, **kw: Any):
        self.lengthscale = check_real(kw.pop("lengthscale"), "lengthscale", 0, low_open=True)
        self.reward_offset = check_real(kw.pop("reward_offset"), "reward_offset")
        super().__init__(actor, observation_size, action_size, condition_size=descriptor_size, **kw)

    def act(self, actor: Any, obs: jax.Array, batch: Any) -> jax.Array:
        return self.actor(actor, jnp.concatenate([obs, batch.desc_prime], axis=-1))

    def q_values(self, critic: Any, obs: jax.Array, action: jax.Array, batch: Any) -> jax.Array:
        return critic_apply(critic, obs, jnp.concatenate([action, batch.desc_prime], axis=-1))

    def weigh(self, batch: Any) -> Any:
        distance = jnp.sqrt(jnp.sum(jnp.square(batch.desc - batch.desc_prime), axis=-1))
        # scaling by a similarity in [0, 1] only favours the target for rewards >= 0
        reward = jnp.maximum(batch.reward + self.reward_offset, 0.0)
        return batch.replace(reward=reward * jnp.exp(-distance / self.lengthscale))

    def empty_row(self) -> DCTransitions:
        return DCTransitions.empty(self.observation_size, self.action_size, self.condition_size)


@pytree_dataclass
class DCRLState:
    """The conditioned TD3 state and what the last batch was aimed at: ``intended [batch, d]``
    (normalised target descriptors of this emitter's rows) and ``aimed []`` (False while the archive
    was empty: the rows then count as aimed at their own descriptors)."""

    td3: TD3State
    intended: jax.Array
    aimed: jax.Array


def check_mlp(policy: Any) -> tuple[int, int]:
    """``(observation_size, action_size)`` of MLP parameters ``({"w": [in, out], "b": [out]}, ...)``,
    or an :class:`ArgumentError` naming ``policy``."""
    layers = policy if isinstance(policy, (tuple, list)) else None
    ok = bool(layers) and all(
        isinstance(layer, dict)
        and set(layer) == {"w", "b"}
        and np.ndim(layer["w"]) == 2
        and np.shape(layer["b"]) == (np.shape(layer["w"])[1],)
        for layer in layers
    )
    ok = ok and all(np.shape(a["w"])[1] == np.shape(b["w"])[0] for a, b in zip(layers[:-1], layers[1:]))
    if not ok:
        raise ArgumentError(
            "policy must be MLP parameters, a tuple of layers {'w': [in, out], 'b': [out]} "
            "(evotensor.problems.networks.init_mlp)"
        )
    return int(np.shape(layers[0]["w"])[0]), int(np.shape(layers[-1]["w"])[1])


class DCRLEmitter(VariationEmitter):
    """DCRL-ME's descriptor-conditioned emitter (module docstring).

    Args:
        policy: MLP parameters (:func:`~evotensor.problems.networks.init_mlp`); their flat form
            is ``x0`` and the archive's solutions are flat vectors of its size.
        descriptor_ranges: ``[(low, high)] * d``, the archive's measure ranges (for normalising).
        activation: the MLP's hidden activation (``mlp_apply``'s; QDax's networks use ReLU).
        dcrl_batch_size: PG-varied elites per ask (64). ai_batch_size: injected actors (64).
        lengthscale: of the reward's descriptor similarity (0.1, on normalised descriptors).
        reward_offset: added to every reward the critic learns from, which is then clipped at 0
            (QDax's example wraps the environment in its ``OffsetRewardWrapper`` with the task's
            ``reward_offset`` and a ``ClipRewardWrapper`` at 0: the similarity scaling needs
            rewards >= 0). Here only the critic sees it; the archive keeps the task's return.
        num_critic_training_steps: 3000; num_pg_training_steps: 150; policy_learning_rate: 1e-3.
        transitions_batch_size: 100. replay_buffer_size, critic_hidden_layer_size,
            critic_learning_rate, actor_learning_rate, noise_clip, policy_noise, discount,
            reward_scaling, soft_tau_update, policy_delay: TD3's (QDax's defaults).
        bounds, initial_solutions: as :class:`~evotensor.qd.emitters.base.VariationEmitter`.

    Attributes:
        uses_evaluation: True (MAP-Elites passes the whole population's evaluation and this
            emitter's first row to ``tell``).
    """

    uses_evaluation = True

    def __init__(
        self,
        policy: Any,
        descriptor_ranges: Sequence[tuple[float, float]],
        *,
        activation: str = "tanh",
        dcrl_batch_size: int = 64,
        ai_batch_size: int = 64,
        lengthscale: float = 0.1,
        reward_offset: float = 0.0,
        num_critic_training_steps: int = 3000,
        num_pg_training_steps: int = 150,
        policy_learning_rate: float = 1e-3,
        transitions_batch_size: int = 100,
        replay_buffer_size: int = 1_000_000,
        critic_hidden_layer_size: tuple[int, ...] = (256, 256),
        critic_learning_rate: float = 3e-4,
        actor_learning_rate: float = 3e-4,
        noise_clip: float = 0.5,
        policy_noise: float = 0.2,
        discount: float = 0.99,
        reward_scaling: float = 1.0,
        soft_tau_update: float = 0.005,
        policy_delay: int = 2,
        bounds: tuple[Any, Any] | None = None,
        initial_solutions: Any = None,
    ):
        observation_size, action_size = check_mlp(policy)
        self.dcrl_batch_size = check_int(dcrl_batch_size, "dcrl_batch_size", minimum=0)
        self.ai_batch_size = check_int(ai_batch_size, "ai_batch_size", minimum=0)
        if self.dcrl_batch_size + self.ai_batch_size == 0:
            raise ArgumentError("dcrl_batch_size + ai_batch_size must be >= 1")
        x0, self.unravel = ravel_pytree(jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float32), policy))
        super().__init__(
            x0,
            batch_size=self.dcrl_batch_size + self.ai_batch_size,
            bounds=bounds,
            initial_solutions=initial_solutions,
        )
        ranges = np.asarray(check_ranges(descriptor_ranges, "descriptor_ranges"), np.float32)
        self.low, self.high = jnp.asarray(ranges[:, 0]), jnp.asarray(ranges[:, 1])
        self.descriptor_size = ranges.shape[0]
        if not isinstance(activation, str):
            raise ArgumentError(f"activation must be the name of mlp_apply's activation, got {activation!r}")
        try:
            mlp_apply(policy, jnp.zeros((1, observation_size)), activation=activation)
        except Exception as err:  # noqa: BLE001 - an unknown activation name
            raise ArgumentError(f"activation: {err}") from err
        self.activation = activation
        self.observation_size, self.action_size = observation_size, action_size
        self.num_pg_training_steps = check_int(num_pg_training_steps, "num_pg_training_steps")
        self.iterations = check_int(num_critic_training_steps, "num_critic_training_steps") // check_int(
            policy_delay, "policy_delay"
        )
        if self.iterations < 1:
            raise ArgumentError(
                f"num_critic_training_steps ({num_critic_training_steps}) must be >= "
                f"policy_delay ({policy_delay})"
            )
        self.policy_optimizer = optax.adam(
            check_real(policy_learning_rate, "policy_learning_rate", 0, low_open=True)
        )
        self.layer_sizes = tuple(int(np.shape(layer["w"])[1]) for layer in policy)
        self.learner = ConditionedTD3(
            self.conditioned_action,
            observation_size,
            action_size,
            self.descriptor_size,
            lengthscale=lengthscale,
            reward_offset=reward_offset,
            critic_hidden=critic_hidden_layer_size,
            critic_learning_rate=critic_learning_rate,
            actor_learning_rate=actor_learning_rate,
            noise_clip=noise_clip,
            policy_noise=policy_noise,
            discount=discount,
            reward_scaling=reward_scaling,
            soft_tau_update=soft_tau_update,
            policy_delay=policy_delay,
            batch_size=transitions_batch_size,
            replay_buffer_size=replay_buffer_size,
        )

    def __repr__(self) -> str:
        return (
            f"DCRLEmitter(solution_dim={self.solution_dim}, dcrl_batch_size={self.dcrl_batch_size}, "
            f"ai_batch_size={self.ai_batch_size}, iterations={self.iterations})"
        )

    # -- networks -------------------------------------------------------------------------------
    def normalize(self, descriptors: jax.Array) -> jax.Array:
        """``[..., d]`` descriptors to ``[-1, 1]`` over ``descriptor_ranges``."""
        return 2.0 * (descriptors - self.low) / (self.high - self.low) - 1.0

    def policy_action(self, x: jax.Array, obs: jax.Array) -> jax.Array:
        """The action of flat policy ``x [D]`` on ``obs [n, observation_size]``."""
        return jnp.tanh(mlp_apply(self.unravel(x), obs, activation=self.activation))

    def conditioned_action(self, actor: Any, inputs: jax.Array) -> jax.Array:
        """The conditioned actor's action on ``inputs = [obs, d'] [n, observation_size + d]``."""
        return jnp.tanh(mlp_apply(actor, inputs, activation=self.activation))

    def init_actor(self, key: jax.Array) -> tuple[dict[str, jax.Array], ...]:
        """The conditioned actor: the policy's layers with ``d`` more inputs, LeCun-uniform weights
        (``U(+-sqrt(3 / in))``), zero biases."""
        return lecun_uniform_mlp(key, (self.observation_size + self.descriptor_size, *self.layer_sizes))

    def injected_policy(self, actor: Any, target: jax.Array) -> jax.Array:
        """The flat policy ``[D]`` the conditioned actor computes for the normalised descriptor
        ``target [d]``: its descriptor weights folded into the first bias."""
        first = actor[0]
        n = self.observation_size
        folded = {"w": first["w"][:n], "b": first["b"] + target @ first["w"][n:]}
        return ravel_pytree((folded, *actor[1:]))[0]

    # -- emitter --------------------------------------------------------------------------------
    def init(self, key: jax.Array, archive: Archive) -> DCRLState:
        """A fresh critic and conditioned actor (both drawn from ``key``), an empty replay buffer."""
        self.check_archive(archive)
        if not callable(getattr(archive, "elite_measures", None)):
            raise ArgumentError(
                f"DCRLEmitter needs an archive with elite_measures(), got {type(archive).__name__}"
            )
        if archive.measure_dim != self.descriptor_size:
            raise ArgumentError(
                f"descriptor_ranges has {self.descriptor_size} descriptors but the archive has "
                f"{archive.measure_dim} measures"
            )
        critic_key, actor_key = jax.random.split(key)
        return DCRLState(
            td3=self.learner.init(critic_key, self.init_actor(actor_key)),
            intended=jnp.zeros((self.batch_size, self.descriptor_size), jnp.float32),
            aimed=jnp.zeros((), bool),
        )

    def improve(self, key: jax.Array, td3: TD3State, parents: jax.Array, targets: jax.Array) -> jax.Array:
        """``parents [n, D]`` after ``num_pg_training_steps`` Adam steps on ``-mean Q_1(s, pi(s) |
        target)``, ``targets [n, d]`` normalised (one shared mini-batch per step); unchanged while
        the buffer is empty, and each one whose steps ended non-finite unchanged."""
        learner = self.learner

        def loss(x, target, batch):
            first = jax.tree_util.tree_map(lambda a: a[:1], td3.critic)
            action = self.policy_action(x, batch.obs)
            conditioned = jnp.concatenate(
                [action, jnp.broadcast_to(target, (action.shape[0], target.size))], 1
            )
            return -jnp.mean(critic_apply(first, batch.obs, conditioned)[:, 0])

        grad = jax.vmap(jax.grad(loss), in_axes=(0, 0, None))

        def run(x):
            return adam_policy_steps(
                self.policy_optimizer,
                lambda x, batch: grad(x, targets, batch),
                lambda k: learner.buffer.sample(k, td3.buffer, learner.batch_size),
                key,
                self.num_pg_training_steps,
                x,
            )

        return jax.lax.cond(td3.buffer.size > 0, run, lambda x: x, parents)

    def ask(
        self, key: jax.Array, state: DCRLState, archive: Archive, archive_state: ArchiveState
    ) -> tuple[jax.Array, DCRLState]:
        """``-> ([batch_size, D], state)``: PG-varied elites, then injected actors."""
        parent_key, pg_key, ai_key = jax.random.split(key, 3)
        has = archive.has_elites(archive_state)
        cells = archive.sample_elites(parent_key, archive_state, self.dcrl_batch_size)
        parents = jnp.where(has, archive.elite_solutions(archive_state, cells), self.x0)
        pg_targets = self.normalize(archive.elite_measures(archive_state, cells))
        improved = self.improve(pg_key, state.td3, parents, pg_targets)
        ai_cells = archive.sample_elites(ai_key, archive_state, self.ai_batch_size)
        ai_targets = self.normalize(archive.elite_measures(archive_state, ai_cells))
        injected = jax.vmap(self.injected_policy, in_axes=(None, 0))(state.td3.actor, ai_targets)
        x = jnp.concatenate([improved, injected], axis=0)
        intended = jnp.concatenate([pg_targets, ai_targets], axis=0)
        return self.first_batch(archive, archive_state, x), state.replace(intended=intended, aimed=has)

    def tell(
        self,
        key: jax.Array,
        state: DCRLState,
        archive: Archive,
        archive_state: ArchiveState,
        solutions: jax.Array,
        objective: jax.Array,
        measures: jax.Array,
        info: AddInfo,
        evaluation: Any = None,
        offset: int = 0,
    ) -> DCRLState:
        """Store the population's transitions with ``desc`` and ``desc_prime`` (this emitter's rows
        from ``offset`` on aimed at their targets, every other row at its own descriptor), then train."""
        transitions = transitions_of(evaluation)
        reached = self.normalize(jnp.asarray(evaluation.descriptor, jnp.float32))  # [pop, d]
        mine = jnp.where(state.aimed, state.intended, reached[offset : offset + self.batch_size])
        aimed_at = reached.at[offset : offset + self.batch_size].set(mine)
        shape = transitions.valid.shape
        if reached.shape[0] != shape[0]:
            raise ArgumentError(
                f"evaluation.descriptor has {reached.shape[0]} rows but the transitions {shape[0]}"
            )

        def per_step(desc):  # [pop, d] -> [*shape, d]
            return jnp.broadcast_to(
                desc.reshape(shape[0], *(1,) * (len(shape) - 1), -1), (*shape, desc.shape[-1])
            )

        fields = {f: getattr(transitions, f) for f in Transitions.__dataclass_fields__}
        rows = DCTransitions(**fields, desc=per_step(reached), desc_prime=per_step(aimed_at))
        td3 = state.td3.replace(buffer=self.learner.buffer.insert(state.td3.buffer, rows))
        return state.replace(td3=self.learner.train(key, td3, self.iterations))


def dcrl_me_emitters(
    policy: Any,
    descriptor_ranges: Sequence[tuple[float, float]],
    *,
    ga_batch_size: int = 128,
    iso_sigma: float = 0.005,
    line_sigma: float = 0.05,
    bounds: tuple[Any, Any] | None = None,
    initial_solutions: Any = None,
    **dcrl_options: Any,
) -> list[Any]:
    """DCRL-ME's two emitters (QDax's ``DCRLMEEmitter`` and example values): the
    :class:`DCRLEmitter` (``dcrl_batch_size`` + ``ai_batch_size`` rows, 64 + 64), then Iso+LineDD
    for ``ga_batch_size`` rows (128; 0 leaves it out).

    ``initial_solutions``: optional first batch of all the rows, split between the two in order.
    ``dcrl_options`` go to :class:`DCRLEmitter`.
    """
    ga = check_int(ga_batch_size, "ga_batch_size", minimum=0)
    dc_rows = sum(
        check_int(dcrl_options.get(n, 64), n, minimum=0) for n in ("dcrl_batch_size", "ai_batch_size")
    )
    first: list[Any] = [None, None]
    if initial_solutions is not None:
        shape = getattr(initial_solutions, "shape", None)
        if shape is None or len(shape) != 2 or shape[0] != dc_rows + ga:
            raise ArgumentError(
                f"initial_solutions must be [dcrl + ai + ga rows = {dc_rows + ga}, solution_dim], got "
                f"{'shape ' + str(tuple(shape)) if shape is not None else type(initial_solutions).__name__}"
            )
        first = [initial_solutions[:dc_rows], initial_solutions[dc_rows:]]
    dc = DCRLEmitter(policy, descriptor_ranges, bounds=bounds, initial_solutions=first[0], **dcrl_options)
    if ga == 0:
        return [dc]
    return [
        dc,
        IsoLineEmitter(
            dc.x0,
            iso_sigma=iso_sigma,
            line_sigma=line_sigma,
            batch_size=ga,
            bounds=bounds,
            initial_solutions=first[1],
        ),
    ]
