"""One NEAT topology, its float attributes as a flat vector: any evolution strategy (CMA-ES, OpenAI-ES,
...) or flat QD emitter tunes the weights of a network NEAT found, through the same run loop.

:class:`WeightDecoder` holds one genome (a NEAT run's best, or one read from neat-python's JSON) and
the attributes to tune (default: every float attribute of the genes: connection weights, node
biases and responses). A vector ``x [num_dims]`` lists the tuned values of the valid rows in row
order, connections first (their attributes in the gene's order), then the non-input nodes; disabled
connections are left out (they do not compute). ``decode(x [pop, num_dims])`` gives the networks
(:func:`~evotensor.neat.network.transform` of the genome with those values) and ``apply`` runs one,
so the decoder is what a policy problem needs::

    best = neat_result.best_genotype                                # a NEAT run's best genome
    decoder = WeightDecoder(strategy.spec, best, strategy.config)
    cmaes = CMAES(16, num_dims=decoder.num_dims, mean_init=decoder.initial(), sigma_init=3.0)
    result = evotensor.run(cmaes, XOR(), 100, key, decoder=decoder)
    tuned = decoder.genome_of(result.best_genotype)                # the genome with the tuned values

Values outside an attribute's ``[min_value, max_value]`` are clipped when decoded, as NEAT's own
mutation keeps them, so every decoded genome is a valid one of the spec.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core.checks import ArgumentError
from evotensor.neat.config import NEATConfig
from evotensor.neat.genome import Genome, GenomeSpec, check_genome
from evotensor.neat.network import Network
from evotensor.neat.strategy import NEATDecoder

__all__ = ["WeightDecoder"]


class WeightDecoder:
    """Flat vectors -> networks of one fixed NEAT genome (module docstring).

    Args:
        spec: the genome's :class:`GenomeSpec`.
        genome: one valid genome (arrays ``[max_nodes]``, ``[max_conns]``).
        config: the :class:`NEATConfig` whose ``policy``, ``functions`` and ``outputs`` run the
            networks (default: neat-python 2.1's settings).
        attributes: names of the float attributes to tune (of the node or the connection gene);
            ``None``: all of them.

    Attributes:
        num_dims: entries of a vector.
        apply: the policy that runs one network (stateful for recurrent and CTRNN genomes).
        spec, genome, attributes: as given (``attributes`` resolved to a tuple).
    """

    def __init__(
        self,
        spec: GenomeSpec,
        genome: Genome,
        config: NEATConfig | None = None,
        attributes: tuple[str, ...] | None = None,
    ):
        if not isinstance(spec, GenomeSpec):
            raise ArgumentError(f"spec must be a GenomeSpec, got {type(spec).__name__}")
        if not isinstance(genome, Genome):
            raise ArgumentError(f"genome must be a Genome, got {type(genome).__name__}")
        spec.check_rows(genome, "genome")
        if genome.node_key.ndim != 1:
            raise ArgumentError(f"genome must be one genome, got leading axes {genome.node_key.shape[:-1]}")
        problems = check_genome(spec, genome)
        if problems:
            raise ArgumentError(f"genome is not a valid genome of the spec: {'; '.join(problems[:3])}")
        config = NEATConfig() if config is None else config
        if not isinstance(config, NEATConfig):
            raise ArgumentError(f"config must be a NEATConfig or None, got {type(config).__name__}")
        node_names, conn_names = spec.node_gene.float_names, spec.conn_gene.float_names
        known = node_names + conn_names
        if attributes is None:
            attributes = known
        elif isinstance(attributes, str):
            attributes = (attributes,)
        attributes = tuple(attributes)
        unknown = [a for a in attributes if a not in known]
        if not attributes or unknown:
            raise ArgumentError(f"attributes must be float attributes of the genes {known}, got {attributes}")
        g = jax.tree_util.tree_map(np.asarray, genome)
        conn_rows = np.flatnonzero(g.conn_valid & g.conn_enabled)
        node_rows = np.flatnonzero(g.node_valid & (np.arange(spec.max_nodes) >= spec.num_inputs))
        conn_cols = np.asarray([i for i, n in enumerate(conn_names) if n in attributes], np.int32)
        node_cols = np.asarray([i for i, n in enumerate(node_names) if n in attributes], np.int32)
        # (row, column) of every tuned entry, connections first, each row's columns together
        self._conn = tuple(a.ravel() for a in np.meshgrid(conn_rows, conn_cols, indexing="ij"))
        self._node = tuple(a.ravel() for a in np.meshgrid(node_rows, node_cols, indexing="ij"))
        self.num_dims = int(self._conn[0].size + self._node[0].size)
        if self.num_dims == 0:
            raise ArgumentError(f"genome has no entry of the attributes {attributes} to tune")
        self._conn_bounds = tuple(b[self._conn[1]] for b in spec.conn_gene.float_bounds)
        self._node_bounds = tuple(b[self._node[1]] for b in spec.node_gene.float_bounds)
        self.spec, self.genome, self.attributes = spec, genome, attributes
        self._networks = NEATDecoder(spec, config)
        self.apply = self._networks.apply

    def initial(self) -> jax.Array:
        """``float32 [num_dims]``: the genome's own values (a strategy's start point)."""
        conns = self.genome.conn_attrs[self._conn]
        nodes = self.genome.node_attrs[self._node]
        return jnp.concatenate([conns, nodes]).astype(jnp.float32)

    def genome_of(self, x: Any) -> Genome:
        """The genome with the values of ``x [num_dims]`` (clipped to the attributes' bounds)."""
        x = jnp.asarray(x, jnp.float32)
        if x.shape != (self.num_dims,):
            raise ArgumentError(f"x must have shape ({self.num_dims},), got {x.shape}")
        n = self._conn[0].size
        conns = jnp.clip(x[:n], *self._conn_bounds)
        nodes = jnp.clip(x[n:], *self._node_bounds)
        g = self.genome
        return g.replace(
            conn_attrs=g.conn_attrs.at[self._conn].set(conns.astype(g.conn_attrs.dtype)),
            node_attrs=g.node_attrs.at[self._node].set(nodes.astype(g.node_attrs.dtype)),
        )

    def decode(self, x: Any) -> Network:
        """``x [pop, num_dims]`` -> the networks ``[pop]`` of the genome with each row's values."""
        x = jnp.asarray(x)
        if x.ndim != 2 or x.shape[1] != self.num_dims:
            raise ArgumentError(f"genotypes must have shape (pop, {self.num_dims}), got {x.shape}")
        return self._networks.decode(jax.vmap(self.genome_of)(x))

    def __repr__(self) -> str:
        return f"WeightDecoder(num_dims={self.num_dims}, attributes={self.attributes})"
