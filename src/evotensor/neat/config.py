"""NEAT's configuration: one object composed of the parts' configs, and three named modes.

:class:`NEATConfig` holds a :class:`MutationConfig`, :class:`CrossoverConfig`,
:class:`DistanceConfig`, :class:`SpeciesConfig`, :class:`ReproductionConfig`, the output mode and
the activation naming scheme. The shape of the genomes and the gene types live in
:class:`~evotensor.neat.genome.GenomeSpec`. Each mode is a pair ``(spec defaults, config)``:

* ``"neat-python"`` (the default): neat-python 2.1 with its XOR example's settings. Distance with
  node genes, excess = disjoint coefficient, weight coefficient 0.5, threshold 3.0; mutation
  probabilities 0.5/0.5/0.2/0.2; stagnation 20 with species elitism 2; elitism 2, survival 0.2,
  min species size 2, "normalized" sharing with smoothed spawn; sigmoid(5z) with the activation on
  the outputs; weights and biases N(0, 1), mutate power 0.5, rate 0.8 (weights) / 0.7 (biases),
  replace 0.1, bounds +-30. This is the default because it is the NEAT most users know, the one the
  issue's statistical parity test runs against, and it keeps NEAT's semantics (global innovation
  numbers, the enabled flag) that TensorNEAT's users asked for.
* ``"paper"``: Stanley & Miikkulainen (2002): distance ``c1 E/N + c2 D/N + c3 W`` (1, 1, 0.4,
  threshold 3.0, N = 1 below 20 genes), add-node 0.03, add-link 0.05, no deletions, weight mutation
  80% (90% perturbed, 10% replaced: rates 0.72 and 0.08), 25% of offspring mutation-only,
  interspecies mating 0.001, stagnation 15, the champion of each species kept ("elitism 1"),
  fitness sharing "canonical" (offspring proportional to summed adjusted fitness), a steep sigmoid
  (neat-python's ``sigmoid``, 5z; the paper's 4.9z differs by 2%).
* ``"tensorneat"``: TensorNEAT's defaults, for like-for-like speed comparisons: its distance
  (inputs among the nodes, c_disjoint 1, c_weight 0.4, threshold 2.0), its mutation (0.2/0.2/0.1/0.1,
  split deletes, new weights 0), 10 species slots, stagnation 15, species elitism 2, genome elitism 2,
  survival 0.1, min species size 1, rank spawning with change rate 0.5, attribute mutation power 0.15,
  rate 0.2, replace 0.015, bounds +-5, plain sigmoid, no activation on outputs.

Example::

    spec, config = neat_mode("neat-python", num_inputs=2, num_outputs=1)
    strategy = NEAT(spec, population_size=150, config=config)
"""

from __future__ import annotations

import dataclasses
from typing import Any

from evotensor.core.checks import ArgumentError, check_choice
from evotensor.neat.activations import SCHEMES
from evotensor.neat.crossover import CrossoverConfig
from evotensor.neat.distance import DistanceConfig
from evotensor.neat.genes import ChoiceAttribute, ConnectionGene, FloatAttribute, NodeGene
from evotensor.neat.genome import GenomeSpec
from evotensor.neat.mutation import MutationConfig
from evotensor.neat.network import OutputMode
from evotensor.neat.reproduction import ReproductionConfig
from evotensor.neat.species import SpeciesConfig

__all__ = ["MODES", "NEATConfig", "mode_genes", "neat_mode"]

MODES = ("neat-python", "paper", "tensorneat")


@dataclasses.dataclass(frozen=True)
class NEATConfig:
    """Everything NEAT's generation does besides the genome shape (hashable, static).

    Args:
        mutation, crossover, distance, species, reproduction: the parts' configs.
        outputs: :class:`~evotensor.neat.network.OutputMode` (neat-python: activate outputs).
        functions: the activation/aggregation naming scheme (``"neat-python"`` or ``"tensorneat"``).
        policy: ``"auto"``, ``"feedforward"``, ``"recurrent"`` or ``"ctrnn"`` (how a network is run).
        mode: the mode these settings came from (a label in logs and checkpoints).
    """

    mutation: MutationConfig = dataclasses.field(default_factory=MutationConfig)
    crossover: CrossoverConfig = dataclasses.field(default_factory=CrossoverConfig)
    distance: DistanceConfig = dataclasses.field(default_factory=DistanceConfig)
    species: SpeciesConfig = dataclasses.field(default_factory=SpeciesConfig)
    reproduction: ReproductionConfig = dataclasses.field(default_factory=ReproductionConfig)
    outputs: OutputMode = dataclasses.field(default_factory=OutputMode)
    functions: str = "neat-python"
    policy: str = "auto"
    mode: str = "neat-python"

    def __post_init__(self):
        for name, cls in (
            ("mutation", MutationConfig),
            ("crossover", CrossoverConfig),
            ("distance", DistanceConfig),
            ("species", SpeciesConfig),
            ("reproduction", ReproductionConfig),
            ("outputs", OutputMode),
        ):
            if not isinstance(getattr(self, name), cls):
                raise ArgumentError(f"{name} must be a {cls.__name__}, got {getattr(self, name)!r}")
        check_choice(self.functions, "functions", SCHEMES)
        check_choice(self.policy, "policy", ("auto", "feedforward", "recurrent", "ctrnn"))
        check_choice(self.mode, "mode", (*MODES, "custom"))

    def replace(self, **changes: Any) -> NEATConfig:
        """A copy with ``changes``; a part may be given as a dict of its own fields, e.g.
        ``config.replace(species={"compatibility_threshold": 2.5})``."""
        out = {}
        for name, value in changes.items():
            current = getattr(self, name, None)
            if isinstance(value, dict) and dataclasses.is_dataclass(current):
                value = dataclasses.replace(current, **value)
            out[name] = value
        return dataclasses.replace(self, **out)


def _float(name, mean, std, power, rate, replace, low, high) -> FloatAttribute:
    return FloatAttribute(name, mean, std, "gaussian", power, rate, replace, low, high)


def mode_genes(mode: str = "neat-python") -> tuple[NodeGene, ConnectionGene]:
    """The node and connection gene types of ``mode`` (attribute defaults as in the module docstring)."""
    check_choice(mode, "mode", MODES)
    if mode == "tensorneat":
        node = NodeGene(
            bias=_float("bias", 0.0, 1.0, 0.15, 0.2, 0.015, -5.0, 5.0),
            response=_float("response", 1.0, 0.0, 0.15, 0.2, 0.015, -5.0, 5.0),
            activation=ChoiceAttribute("activation", ("sigmoid",), "sigmoid", 0.1),
            aggregation=ChoiceAttribute("aggregation", ("sum",), "sum", 0.1),
        )
        conn = ConnectionGene(
            weight=_float("weight", 0.0, 1.0, 0.15, 0.2, 0.015, -5.0, 5.0), enabled_mutate_rate=0.0
        )
        return node, conn
    if mode == "paper":
        node = NodeGene(
            bias=_float("bias", 0.0, 1.0, 0.5, 0.72, 0.08, -30.0, 30.0),
            response=_float("response", 1.0, 0.0, 0.0, 0.0, 0.0, -30.0, 30.0),
        )
        conn = ConnectionGene(
            weight=_float("weight", 0.0, 1.0, 0.5, 0.72, 0.08, -30.0, 30.0), enabled_mutate_rate=0.0
        )
        return node, conn
    return NodeGene(), ConnectionGene()


def _mode_config(mode: str) -> NEATConfig:
    if mode == "tensorneat":
        return NEATConfig(
            mutation=MutationConfig.tensorneat(),
            distance=DistanceConfig(
                mode="tensorneat",
                compatibility_disjoint_coefficient=1.0,
                compatibility_weight_coefficient=0.4,
            ),
            species=SpeciesConfig(
                compatibility_threshold=2.0,
                max_species=10,
                species_fitness_func="max",
                max_stagnation=15,
                species_elitism=2,
            ),
            reproduction=ReproductionConfig(
                elitism=2,
                survival_threshold=0.1,
                min_species_size=1,
                fitness_sharing="rank",
                spawn_number_change_rate=0.5,
            ),
            outputs=OutputMode.tensorneat(),
            functions="tensorneat",
            mode="tensorneat",
        )
    if mode == "paper":
        return NEATConfig(
            mutation=MutationConfig(
                conn_add_prob=0.05, conn_delete_prob=0.0, node_add_prob=0.03, node_delete_prob=0.0
            ),
            crossover=CrossoverConfig(mode="paper"),
            distance=DistanceConfig(
                mode="paper",
                compatibility_disjoint_coefficient=1.0,
                compatibility_excess_coefficient=1.0,
                compatibility_weight_coefficient=0.4,
            ),
            species=SpeciesConfig(compatibility_threshold=3.0, max_stagnation=15, species_elitism=0),
            reproduction=ReproductionConfig(
                elitism=1,
                survival_threshold=0.2,
                min_species_size=1,
                fitness_sharing="canonical",
                spawn_method="proportional",
                interspecies_crossover_prob=0.001,
                mutate_only_prob=0.25,
            ),
            mode="paper",
        )
    return NEATConfig()


def neat_mode(
    mode: str = "neat-python",
    num_inputs: int = 2,
    num_outputs: int = 1,
    max_nodes: int = 50,
    max_conns: int = 100,
    **spec_overrides: Any,
) -> tuple[GenomeSpec, NEATConfig]:
    """``(GenomeSpec, NEATConfig)`` of ``mode`` for ``num_inputs`` -> ``num_outputs`` networks;
    ``spec_overrides`` are further :class:`GenomeSpec` fields (``feed_forward``, ``node_gene``,
    ``initial_connection``, ...)."""
    check_choice(mode, "mode", MODES)
    node, conn = mode_genes(mode)
    fields = dict(node_gene=node, conn_gene=conn)
    fields.update(spec_overrides)
    spec = GenomeSpec(num_inputs, num_outputs, max_nodes=max_nodes, max_conns=max_conns, **fields)
    return spec, _mode_config(mode)
