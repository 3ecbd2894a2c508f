"""Core protocols and utilities shared by every family."""

from evotensor.core.evaluation import Evaluation, to_minimization, to_natural, worst_for_nonfinite
from evotensor.core.fitness_shaping import (
    centered_ranks,
    nes_utilities,
    nes_weights,
    normalize,
    ranks,
    weight_decay,
    z_score,
)
from evotensor.core.host_problem import HostEvaluationError, is_host_problem
from evotensor.core.problem import Decoder, FunctionProblem, PolicyProblem, is_policy_problem
from evotensor.core.pytree import pytree_dataclass, static_field
from evotensor.core.strategy import SolutionSpace, Strategy, as_solution_space, check_population_size

__all__ = [
    "Decoder",
    "Evaluation",
    "FunctionProblem",
    "HostEvaluationError",
    "PolicyProblem",
    "SolutionSpace",
    "Strategy",
    "as_solution_space",
    "centered_ranks",
    "check_population_size",
    "is_host_problem",
    "is_policy_problem",
    "nes_utilities",
    "nes_weights",
    "normalize",
    "pytree_dataclass",
    "ranks",
    "static_field",
    "to_minimization",
    "to_natural",
    "weight_decay",
    "worst_for_nonfinite",
    "z_score",
]
