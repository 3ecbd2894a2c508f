"""A real simulator that JAX cannot compile: a gymnasium environment (CartPole on NumPy, MuJoCo's Hopper,
...) run on the host, scored by the return of an MLP policy.

:class:`GymnasiumPolicy` is a *fitness*, not a compiled problem: hand it to a host evaluator
(:class:`evotensor.distributed.ray_evaluator.RayEvaluator`, or the distributed-gradient ES
:class:`evotensor.es.core.ray_gradient.RayGradientES`), which runs it on Ray actors. The genotype is
the parameter pytree of :func:`evotensor.problems.networks.init_mlp` (``({"w": [in, out], "b":
[out]}, ...)``), the same layout as the gymnax/brax policy problems, so a strategy built for one
runs the other. The network is evaluated in NumPy (tanh hidden layers, linear output) and its
output becomes an action as in :mod:`evotensor.problems.control`: ``argmax`` for a discrete action
space, ``low + (tanh(y) + 1) / 2 (high - low)`` for a ``Box``.

Fitness = the mean undiscounted return over ``episodes`` episodes; episode ``e`` of an individual
with seed ``s`` starts from ``env.reset(seed=SeedSequence([s, e]))``, so a score depends on the
parameters and the seed only. Two entry points compute the same returns:

* ``policy(params, seed) -> float`` — one individual (for ``RayEvaluator(policy)``);
* ``policy.batch(chunk, seeds [c]) -> [c]`` — a chunk of individuals whose ``c * episodes``
  environments step in lockstep, the networks evaluated in one batched product per step (for
  ``RayEvaluator(Batched(policy.batch))``; about twice as fast on CartPole).

Environments are made lazily in the process that evaluates (an actor) and kept for its lifetime;
they are not pickled with the object.

Example::

    cartpole = GymnasiumPolicy("CartPole-v1", hidden=(16,), episodes=2)
    params = cartpole.init_params(jax.random.key(0))       # the strategy's solution template
    cartpole(params, seed=0)                                # -> e.g. 9.5 (an untrained policy)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from evotensor.core.checks import ArgumentError, check_int
from evotensor.problems.networks import init_mlp

__all__ = ["GymnasiumPolicy", "episode_seed"]


def episode_seed(seed: int, episode: int) -> int:
    """The ``env.reset`` seed of episode ``episode`` of an individual with seed ``seed``."""
    return int(np.random.SeedSequence([int(seed), int(episode)]).generate_state(1)[0])


def _gymnasium():
    try:
        import gymnasium
    except ModuleNotFoundError as err:  # pragma: no cover - part of the distributed extra
        raise ModuleNotFoundError(
            "GymnasiumPolicy needs gymnasium: pip install 'evotensor[distributed]'"
        ) from err
    return gymnasium


class GymnasiumPolicy:
    """The return of an MLP policy in a gymnasium environment (module docstring).

    Args:
        env_id: a registered gymnasium id with a flat ``Box`` observation space and a ``Discrete``
            or ``Box`` action space (``"CartPole-v1"``, ``"Acrobot-v1"``, ``"Hopper-v5"`` ...).
        hidden: hidden layer widths of the policy.
        episodes: episodes averaged per fitness.
        max_steps: episode length limit (default: the environment's own, 500 for CartPole-v1).
        env_kwargs: keyword arguments of ``gymnasium.make``.

    Attributes:
        observation_size, output_size: the network's input and output widths.
        sizes: ``(observation_size, *hidden, output_size)``.
        discrete: whether actions are ``argmax`` indices.
    """

    def __init__(
        self,
        env_id: str = "CartPole-v1",
        hidden: Sequence[int] = (16,),
        *,
        episodes: int = 1,
        max_steps: int | None = None,
        env_kwargs: dict[str, Any] | None = None,
    ):
        if not isinstance(env_id, str) or not env_id:
            raise ArgumentError(f"env_id must be a gymnasium environment id, got {env_id!r}")
        self.env_id = env_id
        self.hidden = tuple(check_int(h, "hidden") for h in hidden)
        self.episodes = check_int(episodes, "episodes")
        self.max_steps = None if max_steps is None else check_int(max_steps, "max_steps")
        if env_kwargs is not None and not isinstance(env_kwargs, dict):
            raise ArgumentError(f"env_kwargs must be a dict or None, got {env_kwargs!r}")
        self._env_kwargs = dict(env_kwargs or {})
        self._envs: list[Any] = []
        env = self._make()  # read the spaces now: a bad id or space fails here, not on an actor
        gym = _gymnasium()
        obs_space, act_space = env.observation_space, env.action_space
        if not isinstance(obs_space, gym.spaces.Box):
            raise ArgumentError(f"{env_id}: the observation space must be a Box, got {obs_space}")
        self.observation_size = int(math.prod(obs_space.shape))
        if isinstance(act_space, gym.spaces.Discrete):
            self.discrete, self.output_size = True, int(act_space.n)
            self._low = self._high = None
        elif isinstance(act_space, gym.spaces.Box):
            self.discrete, self.output_size = False, int(math.prod(act_space.shape))
            self._action_shape = act_space.shape
            self._low = np.asarray(act_space.low, np.float32).reshape(-1)
            self._high = np.asarray(act_space.high, np.float32).reshape(-1)
        else:
            raise ArgumentError(f"{env_id}: the action space must be Discrete or Box, got {act_space}")
        self.sizes = (self.observation_size, *self.hidden, self.output_size)
        self._envs.append(env)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_envs": []}  # environments are made again where it runs

    def __repr__(self) -> str:
        return f"GymnasiumPolicy({self.env_id!r}, hidden={self.hidden}, episodes={self.episodes})"

    def _make(self) -> Any:
        kwargs = dict(self._env_kwargs)
        if self.max_steps is not None:
            kwargs["max_episode_steps"] = self.max_steps
        try:
            return _gymnasium().make(self.env_id, disable_env_checker=True, **kwargs)
        except ModuleNotFoundError as err:  # e.g. MuJoCo environments without gymnasium[mujoco]
            raise ModuleNotFoundError(
                f"{self.env_id} needs the package {err.name!r} (for MuJoCo: pip install 'gymnasium[mujoco]')"
            ) from err

    def _environments(self, count: int) -> list[Any]:
        while len(self._envs) < count:
            self._envs.append(self._make())
        return self._envs[:count]

    def init_params(self, key: jax.Array) -> tuple[dict[str, jax.Array], ...]:
        """Initial parameters, :func:`~evotensor.problems.networks.init_mlp` of :attr:`sizes`."""
        return init_mlp(key, self.sizes)

    def actions(self, layers: Sequence[tuple[np.ndarray, np.ndarray]], obs: np.ndarray) -> list[Any]:
        """Actions of ``n`` networks for ``obs [n, observation_size]``; ``layers``: per layer
        ``(w [n, in, out], b [n, out])``."""
        h = obs.astype(np.float32)
        for i, (w, b) in enumerate(layers):
            h = np.einsum("ni,nio->no", h, w) + b  # each network on its own observation
            if i < len(layers) - 1:
                h = np.tanh(h)
        if self.discrete:
            return [int(a) for a in np.argmax(h, axis=1)]
        action = self._low + (np.tanh(h) + 1.0) * 0.5 * (self._high - self._low)
        return [a.reshape(self._action_shape) for a in action]

    def batch(self, chunk: Any, seeds: np.ndarray) -> np.ndarray:
        """Mean returns ``float32 [c]`` of a chunk of parameter pytrees (leading axis ``c``)."""
        seeds = np.asarray(seeds).reshape(-1)
        c, k = len(seeds), self.episodes
        layers = [
            (np.repeat(np.asarray(layer["w"], np.float32), k, axis=0),
             np.repeat(np.asarray(layer["b"], np.float32), k, axis=0))
            for layer in chunk
        ]  # fmt: skip
        if layers[0][0].shape[0] != c * k:
            raise ArgumentError(f"chunk has {layers[0][0].shape[0] // k} individuals but {c} seeds")
        envs = self._environments(c * k)
        obs = np.zeros((c * k, self.observation_size), np.float32)
        for j, env in enumerate(envs):  # run j is episode j % k of individual j // k
            o, _ = env.reset(seed=episode_seed(seeds[j // k], j % k))
            obs[j] = np.asarray(o, np.float32).reshape(-1)
        returns = np.zeros(c * k, np.float64)
        running = np.ones(c * k, bool)
        while running.any():
            acts = self.actions(layers, obs)
            for j in np.flatnonzero(running):
                o, reward, terminated, truncated, _ = envs[j].step(acts[j])
                returns[j] += float(reward)
                obs[j] = np.asarray(o, np.float32).reshape(-1)
                running[j] = not (terminated or truncated)
        return returns.reshape(c, k).mean(axis=1).astype(np.float32)

    def __call__(self, params: Any, seed: int) -> float:
        """Mean return of one parameter pytree (no population axis)."""
        chunk = jax.tree_util.tree_map(lambda a: np.asarray(a)[None], params)
        return float(self.batch(chunk, np.asarray([seed]))[0])
