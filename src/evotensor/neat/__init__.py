"""Tensorized NEAT: padded genome tensors, NEAT's operators compiled over the whole population,
speciation, stateful networks, CPPN, HyperNEAT and ES-HyperNEAT.

A population is a :class:`Genome` of fixed-shape node and connection tables (exact int32 keys and
innovation numbers); :class:`NEAT` is the ``init / ask / tell`` strategy whose ``tell`` runs one
whole generation (stagnation, reproduction plan, crossover, mutation with global innovation numbers
deduplicated inside the compiled generation, speciation). Networks: :func:`transform` once per
genome, then :func:`forward` (feedforward, level by level), :func:`step` (recurrent, state kept) or
:func:`ctrnn_advance`. Modes (:func:`neat_mode`): ``"neat-python"`` (default), ``"paper"``,
``"tensorneat"``. :func:`hyperneat` and :func:`es_hyperneat` evolve CPPNs that paint a substrate
(:mod:`evotensor.neat.substrate`). Interfaces: neat-python INI files (:func:`read_ini`), exports
to neat-python's JSON, NumPy, Python source and sympy, :func:`draw` to PNG. Gradient descent
through every genome's topology (:mod:`evotensor.neat.gradient`): :func:`loss_and_grad`,
:class:`GradientTuner`, and :class:`GradientFit` for Lamarckian NEAT. Quality-diversity over genomes
(:mod:`evotensor.neat.qd`): :class:`NEATEmitter` (MAP-Elites with NEAT's mutation over an archive of
genomes) and :class:`TopologyDescriptors` (network size as the descriptor). :class:`WeightDecoder`:
one topology's float attributes as a flat vector, for any evolution strategy or flat QD emitter.
"""

from evotensor.neat.activations import FunctionSet, register_activation, register_aggregation
from evotensor.neat.config import MODES, NEATConfig, neat_mode
from evotensor.neat.crossover import CrossoverConfig, crossover, crossover_population
from evotensor.neat.distance import DistanceConfig, distance, distance_matrix
from evotensor.neat.draw import draw, plot_fitness, plot_species
from evotensor.neat.export import to_neat_python_json, to_numpy_function, to_python_source, to_sympy
from evotensor.neat.fitness import NetworkFitness
from evotensor.neat.genes import ChoiceAttribute, ConnectionGene, FloatAttribute, NodeGene
from evotensor.neat.genome import EMPTY, Genome, GenomeSpec, check_genome, genome_from_dict, genome_to_dict
from evotensor.neat.gradient import GradientFit, GradientTuner, TuneResult, loss_and_grad
from evotensor.neat.hyperneat import cppn_node_gene, cppn_spec, es_hyperneat, hyperneat
from evotensor.neat.ini import neat_from_ini, parse_ini, read_ini, to_ini
from evotensor.neat.mutation import MutationConfig, mutate
from evotensor.neat.network import (
    Network,
    OutputMode,
    ctrnn_advance,
    forward,
    forward_batch,
    init_state,
    neat_policy,
    step,
    transform,
)
from evotensor.neat.qd import NEATEmitter, NEATEmitterState, TopologyDescriptors
from evotensor.neat.reproduction import ReproductionConfig
from evotensor.neat.species import SpeciesConfig
from evotensor.neat.strategy import CPU_COMPILER_OPTIONS, NEAT, NEATDecoder, NEATState
from evotensor.neat.weights import WeightDecoder

__all__ = [
    "CPU_COMPILER_OPTIONS",
    "EMPTY",
    "MODES",
    "NEAT",
    "ChoiceAttribute",
    "ConnectionGene",
    "CrossoverConfig",
    "DistanceConfig",
    "FloatAttribute",
    "FunctionSet",
    "Genome",
    "GenomeSpec",
    "GradientFit",
    "GradientTuner",
    "MutationConfig",
    "NEATEmitter",
    "NEATEmitterState",
    "NEATConfig",
    "NEATDecoder",
    "NEATState",
    "NetworkFitness",
    "Network",
    "NodeGene",
    "OutputMode",
    "ReproductionConfig",
    "SpeciesConfig",
    "TopologyDescriptors",
    "WeightDecoder",
    "TuneResult",
    "check_genome",
    "cppn_node_gene",
    "cppn_spec",
    "draw",
    "es_hyperneat",
    "hyperneat",
    "neat_from_ini",
    "parse_ini",
    "plot_fitness",
    "plot_species",
    "read_ini",
    "to_ini",
    "to_neat_python_json",
    "to_numpy_function",
    "to_python_source",
    "to_sympy",
    "crossover",
    "crossover_population",
    "ctrnn_advance",
    "distance",
    "distance_matrix",
    "forward",
    "forward_batch",
    "genome_from_dict",
    "genome_to_dict",
    "init_state",
    "loss_and_grad",
    "mutate",
    "neat_mode",
    "neat_policy",
    "register_activation",
    "register_aggregation",
    "step",
    "transform",
]
