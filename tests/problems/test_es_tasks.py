"""The ES tasks build consistent (strategy, problem, decoder) triples and run end to end."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from evotensor.core.run import run
from evotensor.core.strategy import SolutionSpace
from evotensor.problems.bbob import BBOB
from evotensor.problems.networks import ParamsDecoder, init_mlp
from evotensor.tasks import get_task


def build(name, **config):
    return get_task(name).build(config)


def test_tasks_registered():
    for name in ("es-bbob", "es-cartpole", "es-brax-ant", "es-digits"):
        spec = get_task(name)
        assert spec.description and {"pop", "generations", "seed"} <= set(spec.defaults)


def test_bbob_task_defaults():
    task = build("es-bbob")
    assert isinstance(task.problem, BBOB) and task.problem.fn_id == 15 and task.problem.num_dims == 10
    assert task.decoder is None and task.generations == 400
    assert task.strategy.population_size == 4 + int(np.floor(3 * np.log(10)))
    with pytest.raises(ValueError, match="no option"):
        build("es-bbob", dimz=3)
    with pytest.raises(ValueError, match="sigma"):
        build("es-bbob", sigma=0.0)


def test_bbob_task_solves_sphere():
    task = build("es-bbob", function="sphere", dims=4, instance=3, generations=150, seed=1)
    result = run(task.strategy, task.problem, task.generations, jax.random.key(0), progress=False)
    gap = result.best_fitness - float(task.problem.f_opt)
    assert 0.0 <= gap < 1e-6
    assert "f - f_opt" in task.report(result, None)
    noisy = build("es-bbob", function="2", dims=4, noise="gaussian-severe")
    assert noisy.problem.fn_id == 2 and noisy.problem.noise == "gaussian-severe"


def test_cartpole_task_structure():
    task = build("es-cartpole", pop=8, hidden=5, episodes=2, max_steps=30, seed=4)
    template = init_mlp(jax.random.key(4), (4, 5, 2))
    assert task.problem.num_episodes == 2 and task.problem.max_steps == 30
    assert isinstance(task.decoder, ParamsDecoder) and task.strategy.population_size == 8
    assert task.strategy.num_dims == SolutionSpace(template).num_dims == 4 * 5 + 5 + 5 * 2 + 2
    # The strategy's initial mean is the seeded network; asked genotypes are parameter pytrees.
    state = task.strategy.init(jax.random.key(0))
    np.testing.assert_allclose(
        np.asarray(task.strategy.mean_solution(state)[0]["w"]), np.asarray(template[0]["w"]), rtol=1e-6
    )
    genotypes, _ = task.strategy.ask(jax.random.key(1), state)
    phenotypes = task.decoder.decode(genotypes)
    assert phenotypes[0]["w"].shape == (8, 4, 5)
    one = jax.tree.map(lambda a: a[0], phenotypes)
    assert task.decoder.apply(one, jnp.zeros(4)).shape == (2,)


@pytest.mark.parametrize("strategy", ["simple_es", "cma_es", "snes"])
def test_other_neuro_strategies(strategy):
    task = build("es-cartpole", strategy=strategy, pop=None if strategy != "simple_es" else 12)
    assert task.strategy.num_dims == 4 * 16 + 16 + 16 * 2 + 2
    with pytest.raises(ValueError, match="strategy"):
        build("es-cartpole", strategy="nope")


def test_digits_task_runs():
    task = build("es-digits", pop=8, generations=3, batch_size=32, hidden=8, seed=2)
    assert task.problem.maximize and task.problem.metric == "neg_cross_entropy"
    result = run(task.strategy, task.problem, 3, jax.random.key(0), decoder=task.decoder, progress=False)
    assert result.history["best_fitness"].shape == (3,)
    assert np.all(result.history["best_fitness"] <= 0)  # minus a cross-entropy
    assert np.all(np.diff(result.history["best_fitness"]) >= 0)  # best-so-far, maximized
    assert "held-out accuracy" in task.report(result, None)


@pytest.mark.slow  # creating the brax Ant system alone takes ~100 s on a loaded 2-core CPU
def test_brax_ant_task_builds():
    task = build("es-brax-ant", pop=4, episode_length=5)
    assert (task.problem.observation_size, task.problem.output_size) == (27, 8)
    assert task.strategy.num_dims == 27 * 32 + 32 + 32 * 32 + 32 + 32 * 8 + 8
    assert task.problem.maximize and task.generations == 500


@pytest.mark.slow
def test_cartpole_task_learns():
    task = build("es-cartpole", pop=32, episodes=2, max_steps=200, seed=0)
    result = run(task.strategy, task.problem, 25, jax.random.key(0), decoder=task.decoder, progress=False)
    history = result.history["generation_mean"]
    assert result.best_fitness >= 150 and history[-5:].mean() > history[:5].mean()


@pytest.mark.slow
def test_brax_ant_task_runs():
    task = build("es-brax-ant", pop=4, episode_length=5, hidden="8")
    result = run(task.strategy, task.problem, 2, jax.random.key(0), decoder=task.decoder, progress=False)
    assert np.isfinite(result.best_fitness)
