"""NEAT on brax (slow tier: brax's physics compiles in ~15 s a run): networks as policies of the
control problems, and MAP-Elites over genomes on QDax's QD-RL task (hopper feet contact)."""

import jax
import numpy as np
import pytest

import evotensor
from evotensor.neat import NEAT, NEATEmitter, neat_mode
from evotensor.neat.genome import check_genome
from evotensor.neat.network import OutputMode

pytestmark = pytest.mark.slow


def test_neat_networks_drive_a_brax_hopper():
    """Genomes with the hopper's 11 inputs and 3 outputs (unactivated outputs: the problem's tanh
    maps them to brax's [-1, 1] actions) run as policies; the best return never falls."""
    from evotensor.problems.control import BraxProblem

    problem = BraxProblem("hopper", episode_length=30, backend="spring")
    spec, config = neat_mode("neat-python", problem.observation_size, problem.output_size, 24, 64)
    strategy = NEAT(spec, 64, config.replace(outputs=OutputMode.tensorneat()))
    result = evotensor.run(strategy, problem, 3, jax.random.key(0), progress=False)
    best = np.asarray(result.history["best_fitness"])
    assert np.all(np.isfinite(best)) and np.all(np.diff(best) >= 0) and best[-1] > 0
    assert check_genome(spec, result.best_genotype) == []


def test_map_elites_over_genomes_on_a_qd_rl_task():
    """NEATEmitter on QDax's hopper_uni (feet-contact descriptor): the archive fills with valid
    genomes whose descriptors are in range."""
    from evotensor.problems.qd_control import BraxQDProblem
    from evotensor.qd import GridArchive, MAPElites

    problem = BraxQDProblem("hopper_uni", episode_length=20)
    spec, config = neat_mode("neat-python", problem.observation_size, problem.output_size, 24, 64)
    emitter = NEATEmitter(spec, config.replace(outputs=OutputMode.tensorneat()), batch_size=16)
    archive = GridArchive(
        genotype=emitter.genotype,
        dims=(8,),
        ranges=problem.descriptor_ranges,
        qd_score_offset=problem.qd_score_offset,
    )
    me = MAPElites(archive, [emitter], decoder=emitter.decoder)
    result = evotensor.run(me, problem, 3, jax.random.key(0), progress=False)
    data = archive.data(result.state.archive)
    assert len(data["index"]) >= 2
    ((low, high),) = problem.descriptor_ranges
    assert np.all((data["measures"] >= low) & (data["measures"] <= high))
    for i in range(len(data["index"])):
        genome = jax.tree_util.tree_map(lambda a, i=i: a[i], data["solutions"])
        assert check_genome(spec, genome) == [], i


def test_the_neat_map_elites_task_runs_qd_rl_on_a_brax_task(tmp_path):
    from evotensor.tasks import get_task

    task = get_task("neat-map-elites").build(
        {"problem": "hopper_uni", "pop": 16, "episode_length": 20, "cells": 8, "max_conns": 64}
    )
    assert task.strategy.archive.num_cells == 8 and task.problem.num_descriptors == 1
    result = evotensor.run(task.strategy, task.problem, 2, jax.random.key(1), progress=False)
    text = task.report(result, tmp_path)
    assert "of 8 cells" in text and "by hidden nodes" not in text
    assert (tmp_path / "best_network.png").stat().st_size > 0 and not (tmp_path / "archive.png").exists()
