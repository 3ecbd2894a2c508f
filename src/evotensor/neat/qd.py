"""Quality-diversity over NEAT genomes: MAP-Elites whose archive holds whole genomes (topologies
and weights) and whose variation is NEAT's own mutation, with global innovation numbers kept across
generations.

* :class:`NEATEmitter`: the emitter (:mod:`evotensor.qd.emitters`' protocol): parents drawn
  uniformly from the archive's elites, each mutated once as NEAT mutates an offspring
  (:func:`~evotensor.neat.mutation.mutate`: add/delete node and connection, attribute mutation;
  structural changes made by several children of one batch share their innovation numbers and node
  keys). The emitter's state is the two global counters, never below one past the parents' largest
  key and number (so several NEAT emitters may share an archive). While the archive is empty the batch is
  :meth:`GenomeSpec.initial <evotensor.neat.genome.GenomeSpec.initial>`'s fresh genomes.
* :class:`TopologyDescriptors`: a policy problem scored as it is, with each network's size
  (hidden nodes, enabled connections) as its descriptor: the archive then keeps the best network of
  every size.

MAP-Elites over genomes has no species, no crossover and no population: the archive is the
population (Mouret & Clune's variation by mutation only). Example (3-input parity)::

    spec, config = neat_mode("neat-python", 3, 1, max_nodes=24, max_conns=48)
    emitter = NEATEmitter(spec, config, batch_size=256)
    problem = TopologyDescriptors(XOR(3), spec)
    archive = GridArchive(genotype=emitter.genotype, dims=problem.grid, ranges=problem.descriptor_ranges)
    me = MAPElites(archive, [emitter], decoder=emitter.decoder)
    result = evotensor.run(me, problem, 200, jax.random.key(0))
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from evotensor.core.checks import ArgumentError, check_int
from evotensor.core.evaluation import Evaluation
from evotensor.core.pytree import pytree_dataclass
from evotensor.neat.config import NEATConfig
from evotensor.neat.genome import Genome, GenomeSpec
from evotensor.neat.innovation import counters_from_population, initial_counters
from evotensor.neat.mutation import mutate
from evotensor.neat.network import Network
from evotensor.neat.strategy import NEATDecoder

__all__ = ["NEATEmitter", "NEATEmitterState", "TopologyDescriptors"]


@pytree_dataclass
class NEATEmitterState:
    """The global counters (``int32 []``): the next new node key and innovation number."""

    next_node_key: jax.Array
    next_innov: jax.Array


class NEATEmitter:
    """MAP-Elites' emitter of NEAT genomes (module docstring).

    Args:
        spec: the genome shape and genes (:class:`GenomeSpec`).
        config: the :class:`NEATConfig` whose ``mutation`` varies the genomes and whose ``policy``,
            ``functions`` and ``outputs`` run them (default: neat-python 2.1's settings).
        batch_size: offspring per generation.

    Attributes:
        genotype: one empty genome, the archive's ``genotype`` template.
        decoder: the genomes' :class:`~evotensor.neat.NEATDecoder` (MAPElites' ``decoder``).
    """

    def __init__(self, spec: GenomeSpec, config: NEATConfig | None = None, batch_size: int = 64):
        if not isinstance(spec, GenomeSpec):
            raise ArgumentError(f"spec must be a GenomeSpec, got {type(spec).__name__}")
        config = NEATConfig() if config is None else config
        if not isinstance(config, NEATConfig):
            raise ArgumentError(f"config must be a NEATConfig or None, got {type(config).__name__}")
        self.spec, self.config = spec, config
        self.batch_size = check_int(batch_size, "batch_size")
        self.genotype = spec.empty(())
        self.decoder = NEATDecoder(spec, config)

    def init(self, key: jax.Array, archive: Any) -> NEATEmitterState:
        """The spec's initial counters (the archive's genotype template is checked here)."""
        del key
        archive.check_genotype(self.genotype, "NEATEmitter", "this spec's genomes")
        node_key, innov = initial_counters(self.spec)
        return NEATEmitterState(next_node_key=node_key, next_innov=innov)

    def ask(
        self, key: jax.Array, state: NEATEmitterState, archive: Any, archive_state: Any
    ) -> tuple[Genome, NEATEmitterState]:
        """``-> (Genome [batch_size], state)``: mutated elites (fresh genomes while the archive is
        empty), the counters advanced by the distinct new keys and numbers handed out."""
        parent_key, mutate_key, initial_key = jax.random.split(key, 3)
        n = self.batch_size
        def offspring():
            cells = archive.sample_elites(parent_key, archive_state, n)
            parents = archive.elite_solutions(archive_state, cells)
            # never below the parents' own keys and numbers: with several NEAT emitters on one
            # archive, a parent made by another emitter gets no key or number twice (one emitter
            # alone is always past them already)
            held_key, held_innov = counters_from_population(self.spec, parents)
            children, node_key, innov, _ = mutate(
                mutate_key,
                self.spec,
                self.config.mutation,
                parents,
                jnp.maximum(state.next_node_key, held_key),
                jnp.maximum(state.next_innov, held_innov),
            )
            return children, node_key, innov

        def first():
            return self.spec.initial(initial_key, n), state.next_node_key, state.next_innov

        genomes, node_key, innov = lax.cond(archive.has_elites(archive_state), offspring, first)
        return genomes, NEATEmitterState(next_node_key=node_key, next_innov=innov)

    def tell(
        self, key, state, archive, archive_state, solutions, objective, measures, info
    ) -> NEATEmitterState:
        """Nothing to learn (the counters moved in ``ask``)."""
        return state

    def __repr__(self) -> str:
        sizes = f"max_nodes={self.spec.max_nodes}, max_conns={self.spec.max_conns}"
        return f"NEATEmitter(batch_size={self.batch_size}, {sizes})"


class TopologyDescriptors:
    """``problem`` (a policy problem over NEAT networks, e.g. :class:`~evotensor.problems.function_fit.XOR`)
    with the descriptor ``[pop, 2]``: each network's hidden nodes (valid nodes that are neither
    input pins nor outputs) and enabled connections.

    Args:
        problem: the policy problem whose fitness is kept (``maximize`` as its own).
        spec: the genomes' :class:`GenomeSpec`.

    Attributes:
        descriptor_ranges: ``((0, max_nodes - inputs - outputs), (0, max_conns))``.
        grid: cells per descriptor for a grid of one cell per integer value:
            ``(max_nodes - inputs - outputs + 1, max_conns + 1)``.
    """

    kind = "policy"

    def __init__(self, problem: Any, spec: GenomeSpec):
        if not callable(getattr(problem, "evaluate", None)):
            raise ArgumentError(f"problem must have an evaluate() method, got {type(problem).__name__}")
        if not isinstance(spec, GenomeSpec):
            raise ArgumentError(f"spec must be a GenomeSpec, got {type(spec).__name__}")
        self.problem, self.spec = problem, spec
        self.maximize = bool(getattr(problem, "maximize", False))
        hidden = spec.max_nodes - spec.num_inputs - spec.num_outputs
        self.descriptor_ranges = ((0.0, float(hidden)), (0.0, float(spec.max_conns)))
        self.grid = (hidden + 1, spec.max_conns + 1)

    def descriptors(self, networks: Network) -> jax.Array:
        """``float32 [pop, 2]``: hidden nodes, enabled connections."""
        nodes = jnp.sum(networks.node_valid, axis=-1, dtype=jnp.int32)
        hidden = nodes - self.spec.num_inputs - self.spec.num_outputs
        return jnp.stack([hidden, networks.num_edges], axis=-1).astype(jnp.float32)

    def evaluate(self, key: jax.Array, phenotypes: Network, apply: Any) -> Evaluation:
        """The problem's evaluation with :meth:`descriptors` as its descriptor."""
        if not isinstance(phenotypes, Network):
            raise ArgumentError(
                "TopologyDescriptors reads NEAT networks (NEATEmitter.decoder's, NEAT.decoder's), got "
                f"{type(phenotypes).__name__} phenotypes (a HyperNEAT substrate has no genome topology)"
            )
        evaluation = self.problem.evaluate(key, phenotypes, apply)
        return evaluation.replace(descriptor=self.descriptors(phenotypes))

    def __repr__(self) -> str:
        return f"TopologyDescriptors({self.problem!r})"
