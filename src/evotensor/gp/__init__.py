"""Tensorized tree genetic programming (EvoGP's engine).

A forest is struct-of-arrays ``[pop, max_len]`` in prefix order (:class:`Forest`); every structural
operator is built on one vectorized subtree exchange (:func:`exchange`); evaluation is parallel over
trees and data rows at once (:func:`evaluate`, fused :func:`fitness`), on CPU in plain JAX and on
GPU through a Pallas kernel; :func:`reference_eval` is the slow, obviously correct interpreter every
path is tested against. :class:`GP` is the ask/tell strategy, configured by a checked
:class:`GPConfig` and built from an :class:`OperatorRegistry` of variation operators (a user's own
:class:`GPOperator` registers there); :class:`SymbolicRegression` and :class:`Pagie1` are the problems
over forests. :class:`GPEmitter` and :class:`ShapeDescriptors` (:mod:`evotensor.gp.qd`) run
MAP-Elites over trees: an archive of the best expression of every length and depth.
"""

from evotensor.gp.config import GPConfig
from evotensor.gp.encoding import Forest, subtree_sizes
from evotensor.gp.evaluate import evaluate, fitness, scaling_coefficients
from evotensor.gp.exchange import exchange
from evotensor.gp.export import SYMPY_EPS, to_jax, to_latex, to_numpy, to_string, to_sympy
from evotensor.gp.functions import BUILTIN_NAMES, CONST, PAD, VAR, FunctionSet
from evotensor.gp.generate import TreeGenerator, generate
from evotensor.gp.metrics import MAXIMIZED_METRICS, METRICS, metric_from_predictions
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
from evotensor.gp.parse import parse_expression
from evotensor.gp.qd import GPEmitter, ShapeDescriptors
from evotensor.gp.reference import reference_eval
from evotensor.gp.regression import Pagie1, SymbolicRegression
from evotensor.gp.selection import (
    CaseErrors,
    covariant_parsimony,
    elite_indices,
    epsilon_lexicase,
    parsimony_fitness,
    rank_selection,
    roulette,
    tournament,
    truncation,
)
from evotensor.gp.sr_problems import (
    SR_PROBLEMS,
    SRProblemSpec,
    is_accuracy_solution,
    is_symbolic_solution,
    sr_data,
    sr_problem,
)
from evotensor.gp.strategy import GP, MUTATIONS, GPParams, GPState, mutation_probs
from evotensor.gp.variation import GPOperator, OperatorRegistry, default_registry

__all__ = [
    "BUILTIN_NAMES",
    "CONST",
    "GP",
    "GPEmitter",
    "CaseErrors",
    "GPConfig",
    "GPOperator",
    "GPParams",
    "GPState",
    "MAXIMIZED_METRICS",
    "METRICS",
    "MUTATIONS",
    "PAD",
    "VAR",
    "Forest",
    "FunctionSet",
    "OperatorRegistry",
    "Pagie1",
    "ShapeDescriptors",
    "SymbolicRegression",
    "TreeGenerator",
    "covariant_parsimony",
    "default_insert_generator",
    "default_registry",
    "delete_mutation",
    "elite_indices",
    "epsilon_lexicase",
    "evaluate",
    "exchange",
    "fitness",
    "scaling_coefficients",
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

# the classic SR benchmarks and SRBench ground-truth checks (issue 15)
__all__ += [
    "SRProblemSpec",
    "SR_PROBLEMS",
    "is_accuracy_solution",
    "is_symbolic_solution",
    "sr_data",
    "sr_problem",
]

# export of a tree: sympy (faithful, simplified), string, LaTeX, JAX and NumPy callables (issue 15)
__all__ += ["SYMPY_EPS", "to_jax", "to_latex", "to_numpy", "to_string", "to_sympy", "parse_expression"]

# parsimony as a second objective: hall of fame, Pareto front, PySR's score and model selection,
# NSGA-II's ranking, and the front as a table/CSV/plot (issue 15)
from evotensor.gp.front import (  # noqa: E402
    HallOfFame,
    crowding_distance,
    front_scores,
    front_table,
    nondominated_rank,
    nsga2_order,
    pareto_front,
    pareto_front_indices,
    read_front_csv,
    select_model,
    write_front_csv,
)

__all__ += [
    "HallOfFame",
    "crowding_distance",
    "front_scores",
    "front_table",
    "nondominated_rank",
    "nsga2_order",
    "pareto_front",
    "pareto_front_indices",
    "read_front_csv",
    "select_model",
    "write_front_csv",
]

# one tree, pure jnp: differentiable, per-tree data (issue 15)
from evotensor.gp.tree_eval import evaluate_tree, tree_jacobian  # noqa: E402

__all__ += ["evaluate_tree", "tree_jacobian"]

# batched Levenberg-Marquardt on the constants of many trees (issue 15)
from evotensor.gp.constants import ConstantOptimizer, optimize_constants  # noqa: E402

__all__ += ["ConstantOptimizer", "optimize_constants"]

# GP trees as control policies on gymnax / brax: the decoder and a three-line setup (issue 15)
from evotensor.gp.control import (  # noqa: E402
    PolicyGP,
    TreePolicy,
    control_function_set,
    gp_for_control,
    policy_expressions,
)

__all__ += ["PolicyGP", "TreePolicy", "control_function_set", "gp_for_control", "policy_expressions"]

# user data (CSV or arrays, checked; a seeded stratified split) and GP classification (issue 15)
from evotensor.gp.classification import (  # noqa: E402
    CLASSIFICATION_DATASETS,
    SymbolicClassification,
    classification_data,
    classification_problem,
)
from evotensor.gp.data import check_data, load_csv, train_test_split  # noqa: E402

__all__ += [
    "CLASSIFICATION_DATASETS",
    "SymbolicClassification",
    "check_data",
    "classification_data",
    "classification_problem",
    "load_csv",
    "train_test_split",
]

# the population (and optionally the data rows) split over a device mesh (issue 17)
from evotensor.gp.sharding import ForestMesh, evaluate_on_mesh, fitness_on_mesh, optimize_on_mesh  # noqa: E402

__all__ += ["ForestMesh", "evaluate_on_mesh", "fitness_on_mesh", "optimize_on_mesh"]

# weighted variables w * x as mul(CONST w, VAR i), Operon's; their one-node complexity (issue 15)
from evotensor.gp.weighted import weighted_length  # noqa: E402

__all__ += ["weighted_length"]

# scikit-learn estimators (issue 15); imported on first use: scikit-learn takes ~1-2 s to import
_SKLEARN_NAMES = ("SymbolicClassifier", "SymbolicModel", "SymbolicRegressor")
__all__ += list(_SKLEARN_NAMES)
# several SymbolicRegressor searches, one model from their joint front (issue 15); imported on first use
_LAZY_MODULES = {"SymbolicPortfolio": "evotensor.gp.portfolio"}
__all__ += list(_LAZY_MODULES)


def __getattr__(name: str):
    if name in _SKLEARN_NAMES or name in _LAZY_MODULES:
        import importlib

        return getattr(importlib.import_module(_LAZY_MODULES.get(name, "evotensor.gp.sklearn")), name)
    raise AttributeError(f"module 'evotensor.gp' has no attribute {name!r}")
