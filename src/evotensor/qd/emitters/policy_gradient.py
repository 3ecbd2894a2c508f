"""Policy-gradient emitter of PGA-ME (Nilsson & Cully 2021; QDax's ``QualityPGEmitter``).

PGA-MAP-Elites mixes two emitters over neural policies stored as flat vectors: Iso+LineDD variation
(:class:`~evotensor.qd.IsoLineEmitter`) and this one, which improves elites by following a learned
critic. Each generation (QDax 0.5, ``qdax/core/emitters/qpg_emitter.py``, ``pga_me_emitter.py``):

* ``ask``: ``batch_size - 1`` elites drawn uniformly each take ``num_pg_training_steps`` Adam steps
  (``policy_learning_rate``, a fresh optimizer per elite) on TD3's actor loss ``-mean Q_1(s,
  pi(s))``, every step on one mini-batch of ``transitions_batch_size`` transitions shared by all
  elites; the last row is the greedy actor TD3 trains ("actor injection").
* ``tell``: every transition of the whole population (all emitters' rows: QDax's ``use_all_data``)
  goes into the replay buffer, then ``num_critic_training_steps / policy_delay`` TD3 iterations
  train the critic and the greedy actor (:class:`~evotensor.qd.emitters.td3.TD3Learner`).

The problem must hand transitions over in ``evaluation.info["transitions"]``
(:class:`~evotensor.core.replay.Transitions`, any leading shape), e.g.
``BraxQDProblem(task, transitions=True)``. Unlike QDax's auto-resetting rollouts, only the steps
that happened are stored (``valid``): steps after an episode's end are never learned from.

Before the buffer holds a transition the elites are returned unchanged (and, while the archive is
empty, ``x0`` or ``initial_solutions``); the greedy actor starts at ``x0`` (QDax: the first
individual of its initial population). The first generation's ``tell`` already trains TD3 (QDax's
``init`` only fills the buffer; its training starts with the first update).

PGA-ME with QDax's defaults (an environment batch of 100, half of it Iso+LineDD)::

    me = MAPElites(archive, pga_me_emitters(params, mlp_apply, problem.observation_size))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from jax.flatten_util import ravel_pytree

from evotensor.core.checks import ArgumentError, check_fraction, check_int, check_real
from evotensor.core.pytree import pytree_dataclass
from evotensor.core.replay import Transitions
from evotensor.qd.archive import AddInfo, Archive, ArchiveState
from evotensor.qd.emitters.base import VariationEmitter
from evotensor.qd.emitters.iso_line import IsoLineEmitter
from evotensor.qd.emitters.td3 import TD3Learner, TD3State, adam_policy_steps


@pytree_dataclass
class PolicyGradientState:
    """The TD3 learner's state (critic, greedy actor, targets, replay buffer)."""

    td3: TD3State


class PolicyGradientEmitter(VariationEmitter):
    """PGA-ME's policy-gradient emitter (module docstring).

    Args:
        policy: the policy's parameter pytree (e.g. :func:`~evotensor.problems.networks.init_mlp`'s);
            its flat form is ``x0``, the archive's solutions are flat vectors of its size.
        apply: ``apply(params, obs [n, observation_size]) -> [n, action_size]``; the action is its
            ``tanh``, as :class:`~evotensor.problems.qd_control.BraxQDProblem` acts.
        observation_size: the environment's observation size.
        batch_size: solutions per ask (the last is the greedy actor); QDax: half of 100.
        num_critic_training_steps: critic steps per generation (300); ``/ policy_delay`` iterations.
        num_pg_training_steps: Adam steps per varied elite (100).
        policy_learning_rate: their Adam rate (1e-3).
        replay_buffer_size, critic_hidden_layer_size, critic_learning_rate, greedy_learning_rate,
            noise_clip, policy_noise, discount, reward_scaling, transitions_batch_size,
            soft_tau_update, policy_delay: TD3's (:class:`~evotensor.qd.emitters.td3.TD3Learner`;
            QDax's defaults 1e6, (256, 256), 3e-4, 3e-4, 0.5, 0.2, 0.99, 1.0, 256, 0.005, 2).
        bounds, initial_solutions: as :class:`~evotensor.qd.emitters.base.VariationEmitter`.

    Attributes:
        uses_evaluation: True: MAP-Elites passes ``evaluation=`` (the whole population's) to ``tell``.
        learner: the :class:`TD3Learner`.
    """

    uses_evaluation = True

    def __init__(
        self,
        policy: Any,
        apply: Callable[[Any, jax.Array], jax.Array],
        observation_size: int,
        *,
        batch_size: int = 50,
        num_critic_training_steps: int = 300,
        num_pg_training_steps: int = 100,
        policy_learning_rate: float = 1e-3,
        replay_buffer_size: int = 1_000_000,
        critic_hidden_layer_size: tuple[int, ...] = (256, 256),
        critic_learning_rate: float = 3e-4,
        greedy_learning_rate: float = 3e-4,
        noise_clip: float = 0.5,
        policy_noise: float = 0.2,
        discount: float = 0.99,
        reward_scaling: float = 1.0,
        transitions_batch_size: int = 256,
        soft_tau_update: float = 0.005,
        policy_delay: int = 2,
        bounds: tuple[Any, Any] | None = None,
        initial_solutions: Any = None,
    ):
        if not callable(apply):
            raise ArgumentError(f"apply must be callable, got {type(apply).__name__}")
        try:
            x0, unravel = ravel_pytree(policy)
        except Exception as err:  # noqa: BLE001 - anything that is not a pytree of arrays
            raise ArgumentError(f"policy must be a pytree of arrays, got {type(policy).__name__}") from err
        if x0.size == 0 or not jnp.issubdtype(x0.dtype, jnp.floating):
            raise ArgumentError("policy must hold floating-point parameters")
        super().__init__(
            jnp.asarray(x0, jnp.float32),
            batch_size=batch_size,
            bounds=bounds,
            initial_solutions=initial_solutions,
        )
        self.apply = apply
        self.unravel = unravel
        observation_size = check_int(observation_size, "observation_size")
        try:
            out = jax.eval_shape(apply, policy, jax.ShapeDtypeStruct((1, observation_size), jnp.float32))
        except Exception as err:  # noqa: BLE001 - report which argument does not fit
            raise ArgumentError(
                f"apply(policy, obs [n, observation_size={observation_size}]) failed: {err}"
            ) from err
        if len(out.shape) != 2 or out.shape[0] != 1:
            raise ArgumentError(
                f"apply(policy, obs [n, {observation_size}]) must return [n, action_size], "
                f"got {list(out.shape)}"
            )
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
        self.learner = TD3Learner(
            self.actor,
            observation_size,
            int(out.shape[1]),
            critic_hidden=critic_hidden_layer_size,
            critic_learning_rate=critic_learning_rate,
            actor_learning_rate=greedy_learning_rate,
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
            f"PolicyGradientEmitter(solution_dim={self.solution_dim}, batch_size={self.batch_size}, "
            f"num_pg_training_steps={self.num_pg_training_steps}, iterations={self.iterations}, "
            f"buffer={self.learner.buffer.capacity})"
        )

    def actor(self, x: jax.Array, obs: jax.Array) -> jax.Array:
        """The action ``[n, action_size]`` of flat policy ``x [D]`` on ``obs [n, observation_size]``."""
        return jnp.tanh(self.apply(self.unravel(x), obs))

    def init(self, key: jax.Array, archive: Archive) -> PolicyGradientState:
        """A fresh critic, the greedy actor at ``x0`` and an empty replay buffer."""
        self.check_archive(archive)
        return PolicyGradientState(td3=self.learner.init(key, self.x0))

    def improve(self, key: jax.Array, state: PolicyGradientState, parents: jax.Array) -> jax.Array:
        """``parents [n, D]`` after ``num_pg_training_steps`` Adam steps on the actor loss against
        the current critic (one shared mini-batch per step); unchanged while the buffer is empty,
        and each one whose steps ended non-finite unchanged."""
        td3 = state.td3
        learner = self.learner
        grad = jax.vmap(jax.grad(learner.actor_loss), in_axes=(0, None, None))

        def run(x):
            return adam_policy_steps(
                self.policy_optimizer,
                lambda x, batch: grad(x, td3.critic, batch),
                lambda k: learner.buffer.sample(k, td3.buffer, learner.batch_size),
                key,
                self.num_pg_training_steps,
                x,
            )

        return jax.lax.cond(td3.buffer.size > 0, run, lambda x: x, parents)

    def ask(
        self, key: jax.Array, state: PolicyGradientState, archive: Archive, archive_state: ArchiveState
    ) -> tuple[jax.Array, PolicyGradientState]:
        """``-> ([batch_size, D], state)``: improved elites, then the greedy actor."""
        parent_key, pg_key = jax.random.split(key)
        parents = self.parents(parent_key, archive, archive_state, self.batch_size - 1)
        x = jnp.concatenate([self.improve(pg_key, state, parents), state.td3.actor[None]], axis=0)
        return self.first_batch(archive, archive_state, x), state

    def tell(
        self,
        key: jax.Array,
        state: PolicyGradientState,
        archive: Archive,
        archive_state: ArchiveState,
        solutions: jax.Array,
        objective: jax.Array,
        measures: jax.Array,
        info: AddInfo,
        evaluation: Any = None,
        offset: int = 0,
    ) -> PolicyGradientState:
        """Store the population's transitions (``evaluation.info["transitions"]``), then train TD3."""
        transitions = transitions_of(evaluation)
        td3 = state.td3
        td3 = td3.replace(buffer=self.learner.buffer.insert(td3.buffer, transitions))
        return state.replace(td3=self.learner.train(key, td3, self.iterations))


def transitions_of(evaluation: Any) -> Transitions:
    """``evaluation.info["transitions"]``, or an :class:`ArgumentError` saying how to get them."""
    info = getattr(evaluation, "info", None)
    transitions = info.get("transitions") if isinstance(info, dict) else getattr(info, "transitions", None)
    if not isinstance(transitions, Transitions):
        raise ArgumentError(
            "the policy-gradient emitter learns from evaluation.info['transitions'] (Transitions): "
            "build the problem with transitions=True, e.g. BraxQDProblem(task, transitions=True)"
        )
    return transitions


def pga_me_emitters(
    policy: Any,
    apply: Callable[[Any, jax.Array], jax.Array],
    observation_size: int,
    *,
    env_batch_size: int = 100,
    proportion_mutation_ga: float = 0.5,
    iso_sigma: float = 0.005,
    line_sigma: float = 0.05,
    bounds: tuple[Any, Any] | None = None,
    initial_solutions: Any = None,
    **pg_options: Any,
) -> list[Any]:
    """PGA-ME's two emitters (QDax's ``PGAMEEmitter`` and example defaults): Iso+LineDD for
    ``int(proportion_mutation_ga * env_batch_size)`` rows, the policy-gradient emitter for the rest.

    ``initial_solutions``: optional ``[env_batch_size, D]`` first batch (QDax's initial population
    of independently initialised policies), split between the two emitters in order.

    Returns ``[PolicyGradientEmitter, IsoLineEmitter]`` (QDax's order: the PG batch first);
    ``pg_options`` go to :class:`PolicyGradientEmitter`.
    """
    env_batch_size = check_int(env_batch_size, "env_batch_size", minimum=2)
    ga = int(
        check_fraction(proportion_mutation_ga, "proportion_mutation_ga", allow_zero=True) * env_batch_size
    )
    if ga >= env_batch_size:
        raise ArgumentError(
            f"proportion_mutation_ga ({proportion_mutation_ga}) leaves no policy-gradient rows of "
            f"env_batch_size {env_batch_size}: use IsoLineEmitter alone"
        )
    first: list[Any] = [None, None]
    if initial_solutions is not None:
        shape = getattr(initial_solutions, "shape", None)
        if shape is None or len(shape) != 2 or shape[0] != env_batch_size:
            raise ArgumentError(
                f"initial_solutions must be [env_batch_size={env_batch_size}, solution_dim], got "
                f"{'shape ' + str(tuple(shape)) if shape is not None else type(initial_solutions).__name__}"
            )
        first = [initial_solutions[: env_batch_size - ga], initial_solutions[env_batch_size - ga :]]
    pg = PolicyGradientEmitter(
        policy,
        apply,
        observation_size,
        batch_size=env_batch_size - ga,
        bounds=bounds,
        initial_solutions=first[0],
        **pg_options,
    )
    if ga == 0:
        return [pg]
    ga_emitter = IsoLineEmitter(
        pg.x0,
        iso_sigma=iso_sigma,
        line_sigma=line_sigma,
        batch_size=ga,
        bounds=bounds,
        initial_solutions=first[1],
    )
    return [pg, ga_emitter]
