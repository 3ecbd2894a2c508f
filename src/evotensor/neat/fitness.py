"""A user's own batched fitness over networks, as a policy problem.

neat-python users write ``eval_genomes(genomes, config)``; TensorNEAT's users asked for the same
direct access (its issue #15). Here the function sees the whole decoded population at once and
must be a pure JAX function, so it compiles into the generation::

    def fitness(networks, key):                       # networks: Network [pop]
        y = jax.vmap(lambda n: forward_batch(spec, n, X))(networks)   # [pop, B, outputs]
        return -jnp.mean((y - Y) ** 2, axis=(1, 2))   # [pop], maximized here

    result = evotensor.run(strategy, NetworkFitness(fitness), 100, key)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from evotensor.core.checks import ArgumentError
from evotensor.core.evaluation import Evaluation

__all__ = ["NetworkFitness"]


class NetworkFitness:
    """``fitness(networks, key) -> float [pop]`` as a policy problem (``maximize`` says which way is
    better; non-finite values are the worst, as everywhere). The strategy's decoder turns genomes
    into ``networks`` (a :class:`~evotensor.neat.network.Network` population for NEAT, substrate
    networks for HyperNEAT); ``apply`` is ignored, since the function runs the networks itself."""

    kind = "policy"

    def __init__(self, fitness: Callable[[Any, jax.Array], jax.Array], maximize: bool = True):
        if not callable(fitness):
            raise ArgumentError(f"fitness must be callable as fitness(networks, key), got {fitness!r}")
        if not isinstance(maximize, bool):
            raise ArgumentError(f"maximize must be a bool, got {maximize!r}")
        self.fitness, self.maximize = fitness, maximize

    def evaluate(self, key: jax.Array, phenotypes: Any, apply: Any = None) -> Evaluation:
        """``Evaluation(fitness [pop])``; the function's output must have shape ``[pop]``."""
        del apply
        pop = jax.tree_util.tree_leaves(phenotypes)[0].shape[0]
        f = jnp.asarray(self.fitness(phenotypes, key), jnp.float32)
        if f.shape != (pop,):
            raise ArgumentError(
                f"fitness(networks, key) must return shape [{pop}] (one per network), got {f.shape}"
            )
        return Evaluation(fitness=f)

    def __repr__(self) -> str:
        return (
            f"NetworkFitness({getattr(self.fitness, '__name__', self.fitness)!r}, maximize={self.maximize})"
        )
