"""Tensorized tree genetic programming (EvoGP's engine).

A forest is struct-of-arrays ``[pop, max_len]`` in prefix order (:class:`Forest`); every structural
operator is built on one vectorized subtree exchange (:func:`exchange`); evaluation is parallel over
trees and data rows at once (:func:`evaluate`, fused :func:`fitness`), on CPU in plain JAX and on
GPU through a Pallas kernel; :func:`reference_eval` is the slow, obviously correct interpreter every
path is tested against.
"""

from evotensor.gp.encoding import Forest, subtree_sizes
from evotensor.gp.evaluate import MAXIMIZED_METRICS, METRICS, evaluate, fitness, metric_from_predictions
from evotensor.gp.exchange import exchange
from evotensor.gp.functions import BUILTIN_NAMES, CONST, PAD, VAR, FunctionSet
from evotensor.gp.generate import TreeGenerator, generate
from evotensor.gp.operators import (
    default_insert_generator,
    delete_mutation,
    hoist_mutation,
    insert_mutation,
    leaf_biased_crossover,
    multi_constant_mutation,
    multi_point_mutation,
    one_point_crossover,
    random_nodes,
    single_constant_mutation,
    single_point_mutation,
    subtree_mutation,
)
from evotensor.gp.reference import reference_eval
from evotensor.gp.selection import (
    covariant_parsimony,
    elite_indices,
    epsilon_lexicase,
    parsimony_fitness,
    rank_selection,
    roulette,
    tournament,
    truncation,
)
from evotensor.gp.strategy import GP, MUTATIONS, GPParams, GPState, mutation_probs

__all__ = [
    "BUILTIN_NAMES",
    "CONST",
    "GP",
    "GPParams",
    "GPState",
    "MAXIMIZED_METRICS",
    "METRICS",
    "MUTATIONS",
    "PAD",
    "VAR",
    "Forest",
    "FunctionSet",
    "TreeGenerator",
    "covariant_parsimony",
    "default_insert_generator",
    "delete_mutation",
    "elite_indices",
    "epsilon_lexicase",
    "evaluate",
    "exchange",
    "fitness",
    "generate",
    "hoist_mutation",
    "insert_mutation",
    "leaf_biased_crossover",
    "metric_from_predictions",
    "multi_constant_mutation",
    "multi_point_mutation",
    "mutation_probs",
    "one_point_crossover",
    "parsimony_fitness",
    "random_nodes",
    "rank_selection",
    "reference_eval",
    "roulette",
    "single_constant_mutation",
    "single_point_mutation",
    "subtree_mutation",
    "subtree_sizes",
    "tournament",
    "truncation",
]
