"""The gymnasium policy fitness (evotensor.problems.gymnasium_control) and its task es-ray-cartpole.

In-process only (no Ray): the network and action rules against the JAX policy problems', the
batched form against one individual at a time, episode seeding, and that building the task starts
nothing. The task's end-to-end CLI run is in the slow tier.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import gymnasium as gym  # the test extra installs it
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from evotensor.core.checks import ArgumentError
from evotensor.problems.gymnasium_control import GymnasiumPolicy, episode_seed
from evotensor.problems.networks import mlp_apply


@pytest.fixture(scope="module")
def cartpole():
    return GymnasiumPolicy("CartPole-v1", (8,), episodes=2)


def population(policy, size, seed=0):
    """``size`` parameter pytrees around the initial network (stacked, leading axis)."""
    params = policy.init_params(jax.random.key(seed))
    rng = np.random.default_rng(seed)
    return jax.tree_util.tree_map(
        lambda a: np.asarray(a)[None] + 0.5 * rng.normal(size=(size, *a.shape)).astype(np.float32), params
    )


def row(tree, i):
    return jax.tree_util.tree_map(lambda a: a[i], tree)


def test_spaces_set_the_network_sizes(cartpole):
    assert cartpole.sizes == (4, 8, 2) and cartpole.discrete
    pendulum = GymnasiumPolicy("Pendulum-v1", (4, 4))
    assert pendulum.sizes == (3, 4, 4, 1) and not pendulum.discrete


def test_actions_follow_the_jax_policy_problems_rules(cartpole):
    """argmax of mlp_apply for discrete spaces; low + (tanh(y) + 1) / 2 (high - low) for Box."""
    obs = np.random.default_rng(1).normal(size=(5, 4)).astype(np.float32)
    pop = population(cartpole, 5)
    layers = [(layer["w"], layer["b"]) for layer in pop]
    expected = [int(jnp.argmax(mlp_apply(row(pop, i), obs[i]))) for i in range(5)]
    assert cartpole.actions(layers, obs) == expected
    pendulum = GymnasiumPolicy("Pendulum-v1", (4,))
    pop = population(pendulum, 3)
    obs = np.random.default_rng(2).normal(size=(3, 3)).astype(np.float32)
    acts = pendulum.actions([(layer["w"], layer["b"]) for layer in pop], obs)
    for i, action in enumerate(acts):
        y = np.asarray(mlp_apply(row(pop, i), obs[i]))
        np.testing.assert_allclose(action, -2.0 + (np.tanh(y) + 1.0) * 2.0, rtol=1e-5)
        assert action.shape == (1,) and -2.0 <= action[0] <= 2.0


def test_batched_returns_equal_one_individual_at_a_time_and_depend_on_the_seed_only(cartpole):
    pop, seeds = population(cartpole, 6), np.asarray([5, 6, 7, 5, 6, 7]) * 1000
    batched = cartpole.batch(pop, seeds)
    single = np.asarray([cartpole(row(pop, i), int(seeds[i])) for i in range(6)], np.float32)
    assert np.array_equal(batched, single) and batched.dtype == np.float32
    assert np.array_equal(cartpole.batch(row_slice(pop, 2, 5), seeds[2:5]), batched[2:5])  # other chunking
    assert len(set(batched.tolist())) > 1  # the individuals differ


def row_slice(tree, start, stop):
    return jax.tree_util.tree_map(lambda a: a[start:stop], tree)


def test_a_return_is_the_mean_over_episodes_seeded_from_the_individuals_seed(cartpole):
    params = row(population(cartpole, 1), 0)
    returns = []
    for episode in range(2):  # a plain gymnasium loop, independent of the class
        env = gym.make("CartPole-v1")
        obs, _ = env.reset(seed=episode_seed(42, episode))
        total, done = 0.0, False
        while not done:
            action = int(jnp.argmax(mlp_apply(params, np.asarray(obs, np.float32))))
            obs, reward, terminated, truncated, _ = env.step(action)
            total, done = total + reward, terminated or truncated
        returns.append(total)
    assert cartpole(params, 42) == pytest.approx(np.mean(returns))
    assert episode_seed(42, 0) != episode_seed(42, 1) != episode_seed(43, 1)


def test_environments_are_not_pickled_and_are_made_again(cartpole):
    params = row(population(cartpole, 1), 0)
    before = cartpole(params, 3)
    copy = pickle.loads(pickle.dumps(cartpole))
    assert copy._envs == [] and copy(params, 3) == before and "CartPole-v1" in repr(copy)


def test_bad_arguments_are_named():
    with pytest.raises(ArgumentError, match="env_id"):
        GymnasiumPolicy("")
    with pytest.raises(ArgumentError, match="episodes"):
        GymnasiumPolicy("CartPole-v1", episodes=0)
    with pytest.raises(ArgumentError, match="hidden"):
        GymnasiumPolicy("CartPole-v1", hidden=(0,))
    with pytest.raises(ArgumentError, match="observation space must be a Box"):
        GymnasiumPolicy("FrozenLake-v1")
    with pytest.raises(gym.error.Error):
        GymnasiumPolicy("NoSuchEnv-v0")


def test_the_cartpole_task_builds_without_starting_ray():
    from evotensor.tasks import get_task

    spec = get_task("es-ray-cartpole")
    task = spec.build({"pop": 32, "actors": 2})
    assert task.problem.evaluates_on_host and task.problem.maximize and task.problem.batched
    assert task.strategy.population_size == 32 and task.generations == 40
    ray = sys.modules.get("ray")
    assert ray is None or not ray.is_initialized()
    with pytest.raises(ValueError, match="option actors"):
        spec.build({"actors": 0})


def test_the_hopper_task_builds():
    from evotensor.tasks import get_task

    task = get_task("es-ray-hopper").build({})
    assert task.strategy.num_dims == 11 * 32 + 32 + 32 * 32 + 32 + 32 * 3 + 3 and task.generations == 200


@pytest.mark.slow
def test_the_cartpole_task_runs_from_the_command_line(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "evotensor.cli", "run", "es-ray-cartpole", "--generations", "3", "--quiet",
           "--out", str(out), "--set", "actors=2"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "best policy on 10 new episodes of CartPole-v1" in done.stdout
    assert len((out / "metrics.csv").read_text().splitlines()) == 4
