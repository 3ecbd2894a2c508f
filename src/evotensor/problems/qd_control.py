"""QD-RL problems: brax locomotion tasks with behaviour descriptors, as QDax defines them.

:class:`BraxQDProblem` is a policy problem like :class:`~evotensor.problems.control.BraxProblem`
(``kind = "policy"``, ``maximize = True``, actions ``tanh(apply(phenotype, obs))``) whose
``evaluate`` also returns a behaviour descriptor::

    problem = BraxQDProblem("walker2d_uni", episode_length=250)
    params = init_mlp(key, (problem.observation_size, 64, 64, problem.output_size))
    archive = GridArchive(solution_dim=n, dims=(32, 32), ranges=problem.descriptor_ranges,
                          qd_score_offset=problem.qd_score_offset)
    ev = problem.evaluate(key, population, ParamsDecoder(mlp_apply).apply)
    ev.fitness       # [pop]     mean episode return (the task's reward, below)
    ev.descriptor    # [pop, d]  mean over episodes of the task's descriptor

Tasks (``d`` descriptors; every fact re-implemented from QDax at commit ``46b8feec`` of
2025-10-30, file noted in brackets, paths under ``qdax/tasks/brax/``):

================ ============ ======================== ====================== =========== ======
task             brax env     descriptor               feet (links)           bounds      offset
================ ============ ======================== ====================== =========== ======
hopper_uni       hopper       feet contact, d = 1      foot                   [0, 1]      0.9
walker2d_uni     walker2d     feet contact, d = 2      foot, foot_left        [0, 1]^2    1.413
halfcheetah_uni  halfcheetah  feet contact, d = 2      bfoot, ffoot           [0, 1]^2    9.231
ant_uni          ant          feet contact, d = 4      the 4 lower legs (*)   [0, 1]^4    3.24
humanoid_uni     humanoid     feet contact, d = 2      left_shin, right_shin  [0, 1]^2    0.0
ant_omni         ant          final torso (x, y), d=2  --                     [-30, 30]^2 3.0
humanoid_omni    humanoid     final torso (x, y), d=2  --                     [-30, 30]^2 0.0
================ ============ ======================== ====================== =========== ======

* Task table (base env, wrappers, the ``[-30, 30]`` clip of the omni tasks, ``debug=True`` for
  the uni tasks so brax keeps its contacts), the per-step ``reward_offset`` (last column), the
  defaults ``episode_length = 1000`` and ``backend = "spring"`` of ``create``: [``__init__.py``].
* Feet names, the contact rule, the torso as centre of gravity, the clip, the removed forward
  reward: [``wrappers/locomotion_wrappers.py``: ``FEET_NAMES``, ``FeetContactWrapper``,
  ``COG_NAMES``, ``XYPositionWrapper``, ``FORWARD_REWARD_NAMES``, ``NoForwardRewardWrapper``].
* Aggregation over an episode: [``descriptor_extractors.py``: ``get_feet_contact_proportion``,
  ``get_final_xy_position``]; the done-mask, the fitness (masked sum of rewards) and the fact that
  a transition's descriptor is the one of the state *before* the step: [``env_creators.py``:
  ``get_mask_from_transitions``, ``scoring_function_brax_envs``,
  ``make_policy_network_play_step_fn_brax``].

Definitions, per step ``t`` of an episode ``s_0 (reset) -> s_1 -> ...`` lasting ``L`` steps (up
to and including the first ``done``, exactly the steps :class:`BraxProblem` counts):

* **reward** — uni: brax's reward unchanged; omni: brax's reward minus its forward term
  (``metrics["reward_forward"]`` for ant, ``metrics["reward_linvel"]`` for humanoid), i.e. survive
  bonus minus control cost. The fitness is ``sum_{t < L} r_{t+1}`` (mean over episodes).
* **feet contact** of a state: foot ``f`` touches when some brax contact has
  ``contact.link_idx[1] == f`` and ``contact.dist <= 0``; the descriptor is the fraction of the
  states ``s_0 .. s_{L-1}`` (the pre-step states of the valid steps, so the reset state counts and
  the state after the last step does not) in which each foot touches.
* **final (x, y)**: the torso position ``x.pos[torso, :2]`` clipped to ``[-30, 30]``, taken from
  ``s_{L-1}``, the pre-step state of the last valid step (QDax indexes the transitions' pre-step
  descriptors at the last unmasked step).

Steps after ``done`` contribute neither reward nor descriptor. Every episode starts from its own
``env.reset(key)`` (keys split as in :class:`BraxProblem`); QDax's default scoring instead reuses
one reset state for every policy (``create_brax_scoring_fn(deterministic=True)``).

Contacts come from brax's pipeline state (``debug=True``), so only the ``"spring"`` (QDax's
default), ``"generalized"`` and ``"positional"`` backends are supported; ``"mjx"`` keeps MuJoCo's
contact without ``link_idx``.

(*) Ant: QDax's ``FEET_NAMES["ant"]`` are brax v1 body names (``"$ Body 4"``, ``"$ Body 7"``,
``"$ Body 10"``, ``"$ Body 13"``: the lower-leg bodies of brax v1's ant config). In brax v2's
``ant.xml`` those bodies are unnamed (``link_names`` gives ``""``), so the names match nothing;
here the feet are the links that hold the foot geoms ``left_foot_geom``, ``right_foot_geom``,
``third_foot_geom`` and ``fourth_foot_geom`` -- the same four lower legs.

``reward_offset`` is QDax's per-step offset, used only for the QD score: QDax adds
``reward_offset * episode_length`` per elite, so ``qd_score_offset`` (its negation) is the value
for our archives' ``qd_score_offset``, which is subtracted.

brax is an optional dependency (``pip install "evotensor[control]"``), imported when a problem is
built.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core.checks import ArgumentError, check_int
from evotensor.core.evaluation import Evaluation
from evotensor.core.replay import Transitions
from evotensor.problems.control import Apply, population_size_of, vmap_episodes

FEET_CONTACT = "feet_contact"
FINAL_XY = "final_xy"

_OMNI_LIMIT = 30.0
_BACKENDS = ("spring", "generalized", "positional")


@dataclasses.dataclass(frozen=True)
class QDControlTask:
    """One row of the task table (see the module docstring for the sources).

    Attributes:
        env: brax environment name.
        descriptor: ``"feet_contact"`` or ``"final_xy"``.
        feet_links: link names of the feet (feet-contact tasks).
        feet_geoms: geom names whose links are the feet (used instead of ``feet_links``).
        forward_reward: brax metric subtracted from the reward (omni tasks), else None.
        reward_offset: QDax's per-step reward offset for the QD score.
    """

    env: str
    descriptor: str
    reward_offset: float
    feet_links: tuple[str, ...] = ()
    feet_geoms: tuple[str, ...] = ()
    forward_reward: str | None = None

    @property
    def num_descriptors(self) -> int:
        return 2 if self.descriptor == FINAL_XY else len(self.feet_links or self.feet_geoms)

    @property
    def descriptor_ranges(self) -> tuple[tuple[float, float], ...]:
        if self.descriptor == FINAL_XY:
            return ((-_OMNI_LIMIT, _OMNI_LIMIT),) * 2
        return ((0.0, 1.0),) * self.num_descriptors


_ANT_FOOT_GEOMS = ("left_foot_geom", "right_foot_geom", "third_foot_geom", "fourth_foot_geom")

TASKS: dict[str, QDControlTask] = {
    "hopper_uni": QDControlTask("hopper", FEET_CONTACT, 0.9, feet_links=("foot",)),
    "walker2d_uni": QDControlTask("walker2d", FEET_CONTACT, 1.413, feet_links=("foot", "foot_left")),
    "halfcheetah_uni": QDControlTask("halfcheetah", FEET_CONTACT, 9.231, feet_links=("bfoot", "ffoot")),
    "ant_uni": QDControlTask("ant", FEET_CONTACT, 3.24, feet_geoms=_ANT_FOOT_GEOMS),
    "humanoid_uni": QDControlTask("humanoid", FEET_CONTACT, 0.0, feet_links=("left_shin", "right_shin")),
    "ant_omni": QDControlTask("ant", FINAL_XY, 3.0, forward_reward="reward_forward"),
    "humanoid_omni": QDControlTask("humanoid", FINAL_XY, 0.0, forward_reward="reward_linvel"),
}


def _mj_names(sys: Any, addresses: Any) -> list[str]:
    """MuJoCo names at ``addresses`` in the system's null-separated ``names`` buffer."""
    buffer = bytes(sys.names)
    return [buffer[a : buffer.index(b"\x00", a)].decode() for a in np.asarray(addresses)]


def _feet_link_indices(sys: Any, spec: QDControlTask, task: str) -> tuple[int, ...]:
    """Link index of each foot, in the order of the task's feet."""
    if spec.feet_geoms:
        geoms = _mj_names(sys, sys.name_geomadr)
        body_of_geom = np.asarray(sys.geom_bodyid)
        missing = [g for g in spec.feet_geoms if g not in geoms]
        # brax links are MuJoCo bodies without the world body: link = body - 1
        found = tuple(int(body_of_geom[geoms.index(g)]) - 1 for g in spec.feet_geoms if g in geoms)
    else:
        links = list(sys.link_names)
        missing = [n for n in spec.feet_links if n not in links]
        found = tuple(links.index(n) for n in spec.feet_links if n in links)
    if missing:
        raise RuntimeError(f"{task}: this brax version's {spec.env} has no feet named {missing}")
    return found


class BraxQDProblem:
    """A QDax QD-RL task as a policy problem: fitness (maximized) and behaviour descriptor.

    Args:
        task: one of ``TASKS`` (``"hopper_uni"``, ``"walker2d_uni"``, ``"halfcheetah_uni"``,
            ``"ant_uni"``, ``"humanoid_uni"``, ``"ant_omni"``, ``"humanoid_omni"``).
        episode_length: steps per episode (brax sets ``done`` at this length; QDax's default 1000).
        num_episodes: episodes per individual, each with its own reset key; fitness and
            descriptor are their means.
        backend: ``"spring"`` (None, QDax's default), ``"generalized"`` or ``"positional"``.
        offset_rewards: every step's reward becomes ``max(reward + reward_offset, 0)`` (QDax's
            DCRL-ME example wraps its environment in ``OffsetRewardWrapper`` and
            ``ClipRewardWrapper(clip_min=0)``): fitness and transitions both see it.
        transitions: also return every step's :class:`~evotensor.core.replay.Transitions` in
            ``evaluation.info["transitions"]`` (for
            :class:`~evotensor.qd.emitters.policy_gradient.PolicyGradientEmitter`).

    Attributes:
        observation_size, output_size: policy input and output sizes.
        num_descriptors, descriptor_ranges: ``d`` and ``((low, high),) * d`` (QDax's bounds).
        reward_offset: QDax's per-step reward offset; ``qd_score_offset`` the matching archive
            ``qd_score_offset`` (``-reward_offset * episode_length``).
        feet: link indices of the feet (feet-contact tasks), else ``()``.
        env: the brax environment (with brax's ``EpisodeWrapper``, no auto-reset).
    """

    kind = "policy"
    maximize = True

    def __init__(
        self,
        task: str,
        episode_length: int = 1000,
        num_episodes: int = 1,
        backend: str | None = None,
        transitions: bool = False,
        offset_rewards: bool = False,
    ):
        if not isinstance(transitions, bool):
            raise ArgumentError(f"transitions must be True or False, got {transitions!r}")
        if not isinstance(offset_rewards, bool):
            raise ArgumentError(f"offset_rewards must be True or False, got {offset_rewards!r}")
        self.transitions = transitions
        self.offset_rewards = offset_rewards
        if not isinstance(task, str) or task not in TASKS:
            raise ArgumentError(f"unknown task {task!r}; known: {', '.join(TASKS)}")
        self.episode_length = check_int(episode_length, "episode_length")
        self.num_episodes = check_int(num_episodes, "num_episodes")
        if backend is None:
            backend = "spring"
        if backend not in _BACKENDS:
            raise ArgumentError(
                f"backend must be None or one of {', '.join(_BACKENDS)} (their pipeline state carries "
                f"the contacts the descriptors need), got {backend!r}"
            )
        from brax import envs  # optional dependency

        self.task = task
        self.spec = TASKS[task]
        self.backend = backend
        # debug=True makes the pipeline keep its contacts in the state (uni tasks only, as QDax);
        # auto_reset=False: the done-mask ends an episode.
        self.env = envs.create(
            self.spec.env,
            episode_length=self.episode_length,
            auto_reset=False,
            backend=backend,
            debug=self.spec.descriptor == FEET_CONTACT,
        )
        # brax's observation_size runs an eager reset (seconds with contacts); tracing one is enough
        reset_shape = jax.eval_shape(self.env.reset, jax.random.PRNGKey(0))
        self.observation_size = int(reset_shape.obs.shape[-1])
        self.output_size = int(self.env.action_size)
        self.num_descriptors = self.spec.num_descriptors
        self.descriptor_ranges = self.spec.descriptor_ranges
        self.reward_offset = self.spec.reward_offset
        self.qd_score_offset = -self.reward_offset * self.episode_length
        sys = self.env.sys
        if self.spec.descriptor == FEET_CONTACT:
            self.feet = _feet_link_indices(sys, self.spec, task)
            self._torso = None
        else:
            self.feet = ()
            self._torso = list(sys.link_names).index("torso")

    # -- per-state quantities -----------------------------------------------------------------
    def state_descriptor(self, state: Any) -> jax.Array:
        """QDax's per-state descriptor ``[d]`` float32 of a brax ``State``.

        Feet contact: 1.0 for each foot with a contact whose second link is the foot and whose
        distance is ``<= 0``. Final (x, y): the torso's ``(x, y)`` clipped to the bounds.
        """
        pipeline_state = state.pipeline_state
        if self.spec.descriptor == FEET_CONTACT:
            contact = pipeline_state.contact
            feet = jnp.asarray(self.feet, jnp.int32)
            touching = (contact.link_idx[1][None, :] == feet[:, None]) & (contact.dist[None, :] <= 0)
            return jnp.any(touching, axis=-1).astype(jnp.float32)
        xy = pipeline_state.x.pos[self._torso, :2]
        return jnp.clip(xy, -_OMNI_LIMIT, _OMNI_LIMIT).astype(jnp.float32)

    def reward(self, state: Any) -> jax.Array:
        """The task's reward of the state a step produced (omni: minus the forward term); with
        ``offset_rewards``, ``max(reward + reward_offset, 0)``."""
        reward = jnp.asarray(state.reward, jnp.float32)
        if self.spec.forward_reward is not None:
            reward = reward - state.metrics[self.spec.forward_reward]
        if self.offset_rewards:
            reward = jnp.maximum(reward + self.reward_offset, 0.0)
        return reward

    # -- rollouts -----------------------------------------------------------------------------
    def episode(self, phenotype: Any, apply: Apply, key: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """One masked episode: ``(return [], length [], descriptor [d])``."""
        return self.rollout(phenotype, apply, key)[:3]

    def rollout(self, phenotype: Any, apply: Apply, key: jax.Array) -> tuple:
        """One masked episode: ``(return [], length [], descriptor [d], transitions)``, the last
        :class:`~evotensor.core.replay.Transitions` ``[episode_length, ...]`` with ``valid`` the
        steps up to and including the first ``done`` (``done`` and ``truncation`` as brax's
        ``EpisodeWrapper`` sets them), or None unless the problem records ``transitions``."""
        env = self.env
        feet_contact = self.spec.descriptor == FEET_CONTACT

        def body(carry, _):
            state, ret, length, desc, alive = carry
            # the pre-step state's descriptor, as in QDax's transitions
            current = self.state_descriptor(state)
            action = jnp.tanh(jnp.ravel(apply(phenotype, state.obs)))
            before = state.obs
            state = env.step(state, action)
            reward = self.reward(state)
            # where(), not multiplication: a finished episode's state may hold NaN/inf.
            ret = ret + jnp.where(alive, reward, 0.0)
            length = length + alive.astype(jnp.int32)
            if feet_contact:
                desc = desc + jnp.where(alive, current, 0.0)
            else:
                desc = jnp.where(alive, current, desc)  # the last valid step's
            step = None
            if self.transitions:
                step = Transitions(
                    obs=before,
                    action=action,
                    reward=reward,
                    next_obs=state.obs,
                    done=jnp.asarray(state.done, jnp.float32),
                    truncation=jnp.asarray(state.info["truncation"], jnp.float32),
                    valid=alive,
                )
            alive = alive & ~(state.done > 0)
            return (state, ret, length, desc, alive), step

        init = (
            env.reset(key),
            jnp.zeros((), jnp.float32),
            jnp.zeros((), jnp.int32),
            jnp.zeros((self.num_descriptors,), jnp.float32),
            jnp.ones((), bool),
        )
        (_, ret, length, desc, _), steps = jax.lax.scan(body, init, None, length=self.episode_length)
        if feet_contact:
            desc = desc / length.astype(jnp.float32)  # length >= 1: the first step always counts
        return ret, length, desc, steps

    def evaluate(self, key: jax.Array, phenotypes: Any, apply: Apply) -> Evaluation:
        """``fitness [pop]`` (mean return) and ``descriptor [pop, d]`` (mean over episodes).

        ``info``: ``return_std [pop]`` (across episodes) and ``episode_length [pop]`` (mean steps);
        with ``transitions``, also ``transitions``: :class:`~evotensor.core.replay.Transitions`
        ``[pop, num_episodes, episode_length, ...]`` (what PGA-ME's critic learns from).
        The reset keys are :class:`BraxProblem`'s: ``split(key, pop * num_episodes)``.
        """
        pop = population_size_of(phenotypes)
        keys = jax.random.split(key, pop * self.num_episodes).reshape((pop, self.num_episodes))
        rollout = lambda p, k: self.rollout(p, apply, k)  # noqa: E731
        returns, lengths, descriptors, steps = vmap_episodes(rollout, phenotypes, keys)
        info = {
            "return_std": jnp.std(returns, axis=1),
            "episode_length": jnp.mean(lengths.astype(jnp.float32), axis=1),
        }
        if self.transitions:
            info["transitions"] = steps
        return Evaluation(
            fitness=jnp.mean(returns, axis=1), descriptor=jnp.mean(descriptors, axis=1), info=info
        )

    def __repr__(self) -> str:
        return (
            f"BraxQDProblem({self.task!r}, episode_length={self.episode_length}, "
            f"num_episodes={self.num_episodes}, backend={self.backend!r}"
            + (", transitions=True" if self.transitions else "")
            + (", offset_rewards=True)" if self.offset_rewards else ")")
        )
