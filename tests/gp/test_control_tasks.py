"""The GP control tasks (gp-cartpole, gp-hopper, gp-control): build, run, report, option errors."""

import re

import jax
import numpy as np
import pytest

import evotensor
from evotensor.gp.control import TreePolicy
from evotensor.tasks import all_tasks, get_task

pytest.importorskip("gymnax")


def _run(name, **cfg):
    task = get_task(name).build(cfg)
    key = jax.random.key(cfg.get("seed", 0))
    assert task.strategy.decoder is task.decoder  # a PolicyGP: run() needs no decoder=
    result = evotensor.run(task.strategy, task.problem, task.generations, key, progress=False)
    return task, result


def test_gp_cartpole_runs_two_generations_and_reports_the_policy():
    task, result = _run("gp-cartpole", pop=16, generations=2, episodes=2, max_steps=60, test_episodes=3)
    assert isinstance(task.decoder, TreePolicy) and task.strategy.n_outputs == 2
    best = result.history["best_fitness"]
    assert best.shape == (2,) and 1 <= best[0] <= best[1] <= 60  # one reward per step, 60 steps
    report = task.report(result, None)
    assert re.search(r"^best return: [\d.]+ \(mean of 2 episode\(s\)\)$", report, re.M), report
    test = re.search(r"test return over 3 fresh episodes: mean ([\d.]+), min ([\d.]+), max ([\d.]+)", report)
    assert test and 1 <= float(test[2]) <= float(test[1]) <= float(test[3]) <= 60, report
    assert re.search(r"^  out\[0\] = \S", report, re.M) and re.search(r"^  out\[1\] = \S", report, re.M)
    nodes = int(re.search(r"^tree: (\d+) nodes \(max_len 64\)", report, re.M)[1])
    assert nodes == int(result.best_genotype.length)
    text = task.best_to_text(result.best_genotype)
    assert text.startswith("out[0] = ") and "\ntree: " in text


def test_tasks_are_registered_with_documented_defaults():
    tasks = all_tasks()
    for name in ("gp-cartpole", "gp-hopper", "gp-control"):
        assert name in tasks
    cart = get_task("gp-cartpole").build({})
    assert (cart.strategy.population_size, cart.generations, cart.problem.num_episodes) == (256, 20, 4)
    assert (cart.strategy.n_vars, cart.strategy.n_outputs) == (4, 2)
    assert cart.problem.env_name == "CartPole-v1" and cart.problem.max_steps == 500


def test_gp_control_builds_any_gymnax_env():
    task = get_task("gp-control").build({"env": "Pendulum-v1", "pop": 8})
    assert (task.strategy.n_vars, task.strategy.n_outputs, task.problem.discrete) == (3, 1, False)
    task = get_task("gp-control").build({"pop": 8})  # default: Acrobot-v1
    assert (task.strategy.n_vars, task.strategy.n_outputs, task.problem.discrete) == (6, 3, True)


def test_bad_options_name_the_option():
    cart = get_task("gp-cartpole")
    with pytest.raises(ValueError, match="option evaluator"):
        cart.build({"evaluator": "gpu"})
    with pytest.raises(ValueError, match="option episodes"):
        cart.build({"episodes": 0})
    with pytest.raises(ValueError, match="option test_episodes"):
        cart.build({"test_episodes": -1})
    with pytest.raises(ValueError, match="option elite_rate"):
        cart.build({"elite_rate": 1.5})
    with pytest.raises(ValueError, match="option max_len"):
        cart.build({"max_len": 0})
    with pytest.raises(ValueError, match="no option"):
        cart.build({"env": "Acrobot-v1"})


def test_gp_control_refuses_an_unknown_env():
    pytest.importorskip("brax")
    with pytest.raises(ValueError, match=r"option env='Nope-v0' is neither a gymnax nor a brax"):
        get_task("gp-control").build({"env": "Nope-v0"})


class _FakeHopper:
    """Brax's Hopper as the task sees it (building the real one takes seconds: see the slow test)."""

    kind, maximize, observation_size, output_size, discrete = "policy", True, 11, 3, False

    def __init__(self, env, cfg, episodes):
        self.env_name, self.num_episodes = env, episodes
        self.episode_length, self.backend = cfg["episode_length"], cfg["brax_backend"]


def test_gp_hopper_wires_a_brax_problem(monkeypatch):
    from evotensor.gp import control_tasks

    monkeypatch.setattr(control_tasks, "_brax_problem", _FakeHopper)
    task = get_task("gp-hopper").build({"brax_backend": "positional"})
    assert (task.problem.env_name, task.problem.backend) == ("hopper", "positional")
    assert (task.strategy.n_vars, task.strategy.n_outputs, task.decoder.n_outputs) == (11, 3, 3)
    assert (task.strategy.population_size, task.generations) == (64, 5)
    assert (task.problem.episode_length, task.problem.num_episodes) == (200, 1)
    task = get_task("gp-control").build({"env": "swimmer", "pop": 8, "episode_length": 50})
    problem = task.problem
    assert (problem.env_name, problem.episode_length, problem.num_episodes) == ("swimmer", 50, 1)


@pytest.mark.slow
def test_gp_hopper_runs_one_generation():
    pytest.importorskip("brax")
    task, result = _run("gp-hopper", pop=8, generations=1, episode_length=20)
    assert (task.strategy.n_vars, task.strategy.n_outputs) == (11, 3)
    assert np.isfinite(result.best_fitness)
    report = task.report(result, None)
    assert all(f"  out[{k}] = " in report for k in range(3)), report
    assert "test return" not in report  # test_episodes defaults to 0 for brax


@pytest.mark.slow
def test_gp_cartpole_reaches_500_at_the_default_budget():
    # the documented budget (pop 256 x 20 generations, 4 episodes per policy), seed 0
    task, result = _run("gp-cartpole", seed=0)
    assert result.best_fitness == 500.0
    report = task.report(result, None)
    mean = float(re.search(r"test return over 20 fresh episodes: mean ([\d.]+)", report)[1])
    assert mean >= 400, report
