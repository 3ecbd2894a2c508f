"""CPPN genomes and the HyperNEAT / ES-HyperNEAT strategies: NEAT evolving CPPNs that paint a
substrate's weights.

A CPPN is a NEAT genome whose node gene chooses among periodic, symmetric and monotone
activations (:func:`cppn_node_gene`: ``sin, gauss, sigmoid, tanh, abs, identity`` by default, the
activation mutating like any attribute) and whose inputs are a pair of substrate coordinates
(plus the distance and a bias, as the :class:`~evotensor.neat.substrate.Substrate` says). The
strategy is :class:`~evotensor.neat.strategy.NEAT` itself, with a substrate decoder in place of
the network decoder: ``decode`` transforms every CPPN genome into its network
(:func:`~evotensor.neat.network.transform`) and queries it on every substrate connection at once
(:func:`~evotensor.neat.network.forward_batch`), giving a population of substrate networks.

Example::

    substrate = Substrate(inputs=[(-1, -1), (1, -1)], outputs=[(0, 1)], hidden=[[(-1, 0), (1, 0)]],
                          bias_coordinate=(0, -1))
    strategy = hyperneat(substrate, population_size=150)
    result = evotensor.run(strategy, XOR(), 300, key)
"""

from __future__ import annotations

from typing import Any

import jax

from evotensor.core.checks import ArgumentError, check_choice
from evotensor.neat.config import NEATConfig, neat_mode
from evotensor.neat.genes import ChoiceAttribute, NodeGene
from evotensor.neat.genome import Genome, GenomeSpec
from evotensor.neat.network import Network, OutputMode, forward_batch, transform
from evotensor.neat.strategy import NEAT
from evotensor.neat.substrate import (
    ESHyperNEATConfig,
    ESHyperNEATDecoder,
    HyperNEATConfig,
    HyperNEATDecoder,
    Substrate,
)

__all__ = ["CPPN_ACTIVATIONS", "cppn_node_gene", "cppn_spec", "es_hyperneat", "hyperneat"]

CPPN_ACTIVATIONS = ("sin", "gauss", "sigmoid", "tanh", "abs", "identity")


def cppn_node_gene(
    activations: tuple[str, ...] = CPPN_ACTIVATIONS,
    activation_mutate_rate: float = 0.1,
    **node_gene_kwargs: Any,
) -> NodeGene:
    """A node gene whose activation is drawn at random from ``activations`` (neat-python's names)
    and mutates with ``activation_mutate_rate``."""
    act = ChoiceAttribute("activation", tuple(activations), "random", activation_mutate_rate)
    return NodeGene(activation=act, **node_gene_kwargs)


def cppn_spec(
    substrate: Substrate,
    mode: str = "neat-python",
    max_nodes: int = 32,
    max_conns: int = 64,
    activations: tuple[str, ...] = CPPN_ACTIVATIONS,
    activation_mutate_rate: float = 0.1,
) -> tuple[GenomeSpec, NEATConfig]:
    """``(GenomeSpec, NEATConfig)`` for CPPNs of ``substrate``: ``substrate.cppn_num_inputs``
    inputs, ``substrate.cppn_num_outputs`` outputs, :func:`cppn_node_gene`, feedforward; the rest
    of ``mode``'s settings. CPPN outputs are not squashed (identity on outputs: HyperNEAT
    thresholds and scales the raw output)."""
    if not isinstance(substrate, Substrate):
        raise ArgumentError(f"substrate must be a Substrate, got {type(substrate).__name__}")
    check_choice(mode, "mode", ("neat-python", "paper", "tensorneat"))
    base, config = neat_mode(
        mode, substrate.cppn_num_inputs, substrate.cppn_num_outputs, max_nodes, max_conns
    )
    node = cppn_node_gene(activations, activation_mutate_rate, bias=base.node_gene.floats[0])
    spec = GenomeSpec(
        substrate.cppn_num_inputs,
        substrate.cppn_num_outputs,
        max_nodes=max_nodes,
        max_conns=max_conns,
        feed_forward=True,
        node_gene=node,
        conn_gene=base.conn_gene,
    )
    config = config.replace(outputs=OutputMode(activate=False), functions="neat-python", policy="feedforward")
    return spec, config


def _cppn_functions(spec: GenomeSpec, config: NEATConfig):
    def cppn_apply(network: Network, coords: jax.Array) -> jax.Array:
        return forward_batch(spec, network, coords, functions=config.functions, outputs=config.outputs)

    def cppn_decode(genomes: Genome) -> Network:
        return transform(spec, genomes)

    return cppn_apply, cppn_decode


def _strategy(substrate, population_size, mode, max_nodes, max_conns, config, make_decoder) -> NEAT:
    spec, mode_config = cppn_spec(substrate, mode, max_nodes, max_conns)
    config = mode_config if config is None else config
    if config.species.max_species * config.reproduction.min_size > population_size:
        config = config.replace(
            species={"max_species": max(1, population_size // config.reproduction.min_size)}
        )
    cppn_apply, cppn_decode = _cppn_functions(spec, config)
    return NEAT(spec, population_size, config, decoder=make_decoder(cppn_apply, cppn_decode))


def hyperneat(
    substrate: Substrate,
    population_size: int = 150,
    mode: str = "neat-python",
    max_nodes: int = 32,
    max_conns: int = 64,
    config: NEATConfig | None = None,
    hyperneat_config: HyperNEATConfig | None = None,
    policy: str = "stateless",
) -> NEAT:
    """HyperNEAT: :class:`NEAT` over CPPN genomes with a
    :class:`~evotensor.neat.substrate.HyperNEATDecoder` (weights queried for every substrate
    connection, thresholded and scaled; ``policy="stateful"`` keeps a recurrent substrate's state
    across an episode)."""
    return _strategy(
        substrate,
        population_size,
        mode,
        max_nodes,
        max_conns,
        config,
        lambda apply, decode: HyperNEATDecoder(substrate, apply, decode, hyperneat_config, policy),
    )


def es_hyperneat(
    substrate: Substrate,
    population_size: int = 150,
    mode: str = "neat-python",
    max_nodes: int = 32,
    max_conns: int = 64,
    config: NEATConfig | None = None,
    es_config: ESHyperNEATConfig | None = None,
    policy: str = "stateless",
) -> NEAT:
    """ES-HyperNEAT: as :func:`hyperneat`, the hidden nodes discovered by quadtree information
    extraction (:class:`~evotensor.neat.substrate.ESHyperNEATDecoder`); the substrate's own hidden
    layers are not used."""
    return _strategy(
        substrate,
        population_size,
        mode,
        max_nodes,
        max_conns,
        config,
        lambda apply, decode: ESHyperNEATDecoder(substrate, apply, decode, es_config, policy),
    )
