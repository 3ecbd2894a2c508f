"""Quality-diversity over GP trees: MAP-Elites whose archive holds whole trees (a
:class:`~evotensor.gp.Forest` row per cell) and whose variation is GP's own crossover and mutations.

* :class:`GPEmitter`: the emitter (:mod:`evotensor.qd.emitters`' protocol): ``2 * batch_size`` elites
  drawn uniformly from the archive, recipients and donors, their children made by
  :meth:`GP.vary <evotensor.gp.GP.vary>` (the GP's crossover, mutation mix, rates and length cap).
  While the archive is empty the batch is the GP's initial trees.
* :class:`ShapeDescriptors`: a problem over forests (e.g.
  :class:`~evotensor.gp.SymbolicRegression`) scored as it is, with each tree's length and depth as its
  descriptor: the archive keeps the best expression of every shape, a finer-grained accuracy /
  complexity trade-off than a Pareto front.

Example (Pagie-1, scaled R², one cell per length and depth)::

    gp = GP(256, Pagie1().function_set, n_vars=2, max_len=32, elite_rate=0.0)
    emitter = GPEmitter(gp)
    problem = ShapeDescriptors(Pagie1(metric="r2"), max_len=32)
    archive = GridArchive(genotype=emitter.genotype, dims=problem.grid, ranges=problem.descriptor_ranges)
    result = evotensor.run(MAPElites(archive, [emitter]), problem, 200, jax.random.key(0))
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from evotensor.core.checks import ArgumentError, check_int
from evotensor.core.evaluation import Evaluation
from evotensor.gp.encoding import Forest
from evotensor.gp.strategy import GP

__all__ = ["GPEmitter", "ShapeDescriptors"]


class GPEmitter:
    """MAP-Elites' emitter of GP trees (module docstring).

    Args:
        strategy: the :class:`~evotensor.gp.GP` whose operators vary the trees; its batch is
            ``population_size - n_elite`` children per generation (give it ``elite_rate=0.0`` for a
            batch of ``population_size``).

    Attributes:
        batch_size: children per generation.
        genotype: one empty tree ``[max_len]``, the archive's ``genotype`` template.
    """

    def __init__(self, strategy: GP):
        if not isinstance(strategy, GP):
            raise ArgumentError(f"strategy must be a GP, got {type(strategy).__name__}")
        self.strategy = strategy
        self.batch_size = check_int(strategy.population_size - strategy.n_elite, "population_size - n_elite")
        self.genotype = Forest.empty((), strategy.max_len)

    def init(self, key: jax.Array, archive: Any) -> tuple[()]:
        """No state (the archive's genotype template is checked here)."""
        del key
        archive.check_genotype(self.genotype, "GPEmitter", "trees of the GP's max_len")
        return ()

    def ask(
        self, key: jax.Array, state: tuple[()], archive: Any, archive_state: Any
    ) -> tuple[Forest, tuple[()]]:
        """``-> (Forest [batch_size, max_len], state)``: children of elites (the GP's initial trees
        while the archive is empty)."""
        parent_key, vary_key, initial_key = jax.random.split(key, 3)
        n = self.batch_size

        def offspring():
            cells = archive.sample_elites(parent_key, archive_state, 2 * n)
            return self.strategy.vary(vary_key, archive.elite_solutions(archive_state, cells))

        def first():
            return self.strategy.initializer(initial_key, n)

        return lax.cond(archive.has_elites(archive_state), offspring, first), state

    def tell(self, key, state, archive, archive_state, solutions, objective, measures, info) -> tuple[()]:
        """Nothing to learn."""
        return state

    def __repr__(self) -> str:
        return f"GPEmitter(batch_size={self.batch_size}, strategy={self.strategy!r})"


class ShapeDescriptors:
    """``problem`` (a function problem over forests) with the descriptor ``[pop, 2]``: each tree's
    length (nodes) and depth (the root's is 0).

    Args:
        problem: the problem whose fitness is kept (``maximize`` as its own).
        max_len: the trees' ``max_len``.

    Attributes:
        descriptor_ranges: ``((1, max_len), (0, max_len - 1))``.
        grid: one cell per integer value: ``(max_len, max_len)``.
    """

    kind = "function"

    def __init__(self, problem: Any, max_len: int):
        if not callable(getattr(problem, "evaluate", None)):
            raise ArgumentError(f"problem must have an evaluate() method, got {type(problem).__name__}")
        self.problem = problem
        self.max_len = check_int(max_len, "max_len", minimum=2)
        self.maximize = bool(getattr(problem, "maximize", False))
        self.descriptor_ranges = ((1.0, float(self.max_len)), (0.0, float(self.max_len - 1)))
        self.grid = (self.max_len, self.max_len)

    def descriptors(self, forest: Forest) -> jax.Array:
        """``float32 [pop, 2]``: length, depth."""
        depth = jnp.max(forest.depth(), axis=-1)
        return jnp.stack([forest.length, depth], axis=-1).astype(jnp.float32)

    def evaluate(self, key: jax.Array, genotypes: Forest, apply: Any = None) -> Evaluation:
        """The problem's evaluation with :meth:`descriptors` as its descriptor (of the trees it
        returns as ``genotypes`` where it tunes them, else of those given)."""
        evaluation = self.problem.evaluate(key, genotypes)
        trees = genotypes if evaluation.genotypes is None else evaluation.genotypes
        return evaluation.replace(descriptor=self.descriptors(trees))

    def __repr__(self) -> str:
        return f"ShapeDescriptors({self.problem!r})"
