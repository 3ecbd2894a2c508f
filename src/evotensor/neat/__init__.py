"""Tensorized NEAT: padded genome tensors, NEAT's operators compiled over the whole population,
speciation, stateful networks, CPPN and HyperNEAT (issue 14; being built)."""

from evotensor.neat.genes import ChoiceAttribute, ConnectionGene, FloatAttribute, NodeGene
from evotensor.neat.genome import EMPTY, Genome, GenomeSpec, check_genome, genome_from_dict, genome_to_dict

__all__ = [
    "EMPTY",
    "ChoiceAttribute",
    "ConnectionGene",
    "FloatAttribute",
    "Genome",
    "GenomeSpec",
    "NodeGene",
    "check_genome",
    "genome_from_dict",
    "genome_to_dict",
]
