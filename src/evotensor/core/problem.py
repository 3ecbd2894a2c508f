"""The problem protocol, in its two kinds (and a variant of the first).

* A **function problem** scores genotypes directly: ``evaluate(key, genotypes) -> Evaluation``
  (BBOB, classic test functions, QD arm, symbolic regression over GP forests, whose trees the
  problem runs on its data itself). Where the strategy carries a decoder (NEAT) it receives the
  decoded phenotypes, unless it declares ``kind = "genotype"``: then it always receives the
  genotypes, as a Lamarckian local search on the genes needs (NEAT's gradient fit; what it
  improves goes back through ``Evaluation.genotypes``).
* A **policy problem** scores phenotypes through an ``apply`` function:
  ``evaluate(key, phenotypes, apply) -> Evaluation`` where ``apply(phenotype, x) -> y`` and
  ``phenotypes`` has a leading population axis (classification, control).

Both declare ``maximize``: whether the natural objective is maximized. Problems know nothing of
strategies; they must be pure and jit-able.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import jax

from evotensor.core.evaluation import Evaluation


@runtime_checkable
class FunctionProblem(Protocol):
    """Scores a population of genotypes ``[pop, ...]`` directly."""

    maximize: bool

    def evaluate(self, key: jax.Array, genotypes: Any) -> Evaluation: ...


@runtime_checkable
class PolicyProblem(Protocol):
    """Scores phenotypes with a leading population axis through ``apply(phenotype, x) -> y``."""

    maximize: bool

    def evaluate(self, key: jax.Array, phenotypes: Any, apply: Callable[[Any, Any], Any]) -> Evaluation: ...


@runtime_checkable
class Decoder(Protocol):
    """A family's genotype -> phenotype map, plus how a phenotype is applied to inputs."""

    def decode(self, genotypes: Any) -> Any: ...

    def apply(self, phenotype: Any, x: Any) -> Any: ...


def is_policy_problem(problem: Any) -> bool:
    """True for policy problems (they declare ``kind = "policy"``)."""
    return getattr(problem, "kind", "function") == "policy"


def takes_genotypes(problem: Any) -> bool:
    """True for function problems that receive the genotypes even where the strategy has a decoder
    (they declare ``kind = "genotype"``)."""
    return getattr(problem, "kind", "function") == "genotype"


def evaluate_genotypes(problem: Any, key: jax.Array, genotypes: Any, decoder: Any = None) -> Evaluation:
    """Score ``genotypes`` (leading population axis) as the run loop does, in the problem's natural
    orientation: a policy problem gets the decoded phenotypes and ``decoder.apply``; a function
    problem the decoded phenotypes where there is a decoder (unless it takes genotypes), else the
    genotypes."""
    if is_policy_problem(problem):
        if decoder is None:
            raise ValueError("a policy problem needs a decoder (with decode() and apply())")
        return problem.evaluate(key, decoder.decode(genotypes), decoder.apply)
    if decoder is not None and not takes_genotypes(problem):
        return problem.evaluate(key, decoder.decode(genotypes))
    return problem.evaluate(key, genotypes)
