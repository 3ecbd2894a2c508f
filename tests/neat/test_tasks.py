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
