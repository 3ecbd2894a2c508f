"""The NEAT tasks' wiring (the runs themselves: tests/neat/test_strategy.py, the CLI tests)."""

from __future__ import annotations

import jax

from evotensor.neat.tasks import CARTPOLE_CHUNK, cartpole_chunk
from evotensor.tasks import get_task


def test_neat_cartpole_uses_the_early_exit_rollout():
    """neat-cartpole steps its networks in chunks (a generation costs the steps they balance),
    never more than the population."""
    big = get_task("neat-cartpole").build({"pop": 1000})
    assert big.problem.chunk == cartpole_chunk(1000) and big.problem.num_episodes == 1
    # chunks run one after the other: small ones on a CPU, the whole population on an accelerator
    assert cartpole_chunk(1000) == (CARTPOLE_CHUNK if jax.default_backend() == "cpu" else 1000)
    small = get_task("neat-cartpole").build({"pop": 10})
    assert small.problem.chunk == 10 and small.strategy.population_size == 10


def test_neat_xor_with_grad_steps_scores_tuned_genomes():
    """``--set grad_steps=N`` makes neat-xor Lamarckian: a GradientFit on the same cases (SSE,
    minimized) with N Adam steps at grad_lr; 0 (the default) keeps the plain XOR problem."""
    import numpy as np
    import pytest

    from evotensor.neat import GradientFit
    from evotensor.problems.function_fit import XOR

    plain = get_task("neat-xor").build({"pop": 20})
    assert isinstance(plain.problem, XOR) and plain.problem.maximize
    tuned = get_task("neat-xor").build({"pop": 20, "grad_steps": 7, "grad_lr": 0.2, "grad_fraction": 0.5})
    assert isinstance(tuned.problem, GradientFit) and not tuned.problem.maximize
    assert (tuned.problem.tuner.steps, tuned.problem.tuner.learning_rate) == (7, 0.2)
    assert tuned.problem.fraction == 0.5
    np.testing.assert_array_equal(tuned.problem.x, plain.problem.x)
    np.testing.assert_array_equal(tuned.problem.data.y, plain.problem.y)
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="grad_steps"):
            get_task("neat-xor").build({"pop": 20, "grad_steps": bad})
    with pytest.raises(ValueError, match="grad_lr"):
        get_task("neat-xor").build({"pop": 20, "grad_steps": 3, "grad_lr": 0.0})
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match="grad_fraction"):
            get_task("neat-xor").build({"pop": 20, "grad_steps": 3, "grad_fraction": bad})


def test_neat_map_elites_illuminates_network_sizes_reports_and_resumes_bit_identically(tmp_path):
    """``neat-map-elites``: MAP-Elites over genomes (NEATEmitter) on XOR, one cell per (hidden nodes,
    connections); stopped and resumed, it equals an uninterrupted run bit for bit (the archive of
    genomes and the emitter's innovation counters included)."""
    import pytest
    from tests.qd.test_tasks_and_plots import run_and_resume

    from evotensor.neat import NEATEmitter, TopologyDescriptors

    task = get_task("neat-map-elites").build({"pop": 32, "max_nodes": 10, "max_conns": 20})
    emitter = task.strategy.emitters[0]
    assert isinstance(emitter, NEATEmitter) and isinstance(task.problem, TopologyDescriptors)
    assert task.strategy.archive.num_cells == (10 - 3 + 1) * (20 + 1) and task.decoder is emitter.decoder
    first, resumed = run_and_resume(task, tmp_path, 6, 12, 3)
    assert int(resumed.state.emitters[0].next_innov) > int(first.state.emitters[0].next_innov)
    text = task.report(resumed, tmp_path)
    assert "best fitness by hidden nodes: 0: " in text
    assert all((tmp_path / name).stat().st_size > 0 for name in ("archive.png", "qd.png", "best_network.png"))
    with pytest.raises(ValueError, match="num_inputs"):
        get_task("neat-map-elites").build({"num_inputs": 1})
    with pytest.raises(ValueError, match="option problem must be 'xor' or a QD-RL task"):
        get_task("neat-map-elites").build({"problem": "hopper"})
