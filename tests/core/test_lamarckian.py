"""Evaluation.genotypes: a problem that improves the individuals it scores (Lamarckian local search)
has the improved ones told to the strategy and tracked as the best."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import evotensor
from evotensor.core.checks import ArgumentError
from evotensor.core.evaluation import Evaluation


class RecordingStrategy:
    """Asks a fresh random population every generation; its state is the last told population."""

    population_size = 6

    def default_params(self):
        return {}

    def init(self, key, params=None):
        return {"told": jnp.zeros((6, 2)), "told_fitness": jnp.zeros(6)}

    def ask(self, key, state, params=None):
        return jax.random.normal(key, (6, 2)) * 3.0, state

    def tell(self, key, state, genotypes, evaluation, params=None):
        return {"told": genotypes, "told_fitness": evaluation.fitness}, {}


class HalvingProblem:
    """Scores x after one step of local search x -> x / 2 (sphere), and returns the improved x."""

    maximize = False

    def __init__(self, returned=lambda x: x / 2):
        self.returned = returned

    def evaluate(self, key, x):
        improved = x / 2
        return Evaluation(fitness=jnp.sum(improved**2, axis=1), genotypes=self.returned(x))


def test_improved_genotypes_are_told_and_tracked():
    result = evotensor.run(RecordingStrategy(), HalvingProblem(), 3, jax.random.key(0), progress=False)
    told = np.asarray(result.state["told"])
    np.testing.assert_allclose(np.sum(told**2, axis=1), np.asarray(result.state["told_fitness"]), rtol=1e-6)
    # the best genotype is an improved one: its fitness is its own sphere value
    np.testing.assert_allclose(
        float(np.sum(np.asarray(result.best_genotype) ** 2)), result.best_fitness, rtol=1e-6
    )


@pytest.mark.parametrize(
    "returned, match",
    [
        (lambda x: {"x": x}, "structure"),
        (lambda x: x[:3], r"float32\[6, 2\]"),
        (lambda x: x.astype(jnp.int32), "int32"),
    ],
)
def test_genotypes_of_another_shape_or_structure_are_refused(returned, match):
    with pytest.raises(ArgumentError, match=match):
        evotensor.run(RecordingStrategy(), HalvingProblem(returned), 2, jax.random.key(0), progress=False)


class Tripler:
    """A decoder the genotype-kind problem must be kept away from."""

    def decode(self, genotypes):
        return 3.0 * genotypes


class Sphere:
    """The sum of squares of what it receives (a function problem)."""

    maximize = False

    def evaluate(self, key, x):
        return Evaluation(fitness=jnp.sum(x**2, axis=1))


class GenotypeSphere(Sphere):
    """``kind = "genotype"``: receives the genotypes although the run has a decoder."""

    kind = "genotype"


@pytest.mark.parametrize(
    "problem, scale", [(GenotypeSphere(), 1.0), (Sphere(), 3.0)], ids=["genotype", "function"]
)
def test_a_genotype_kind_problem_gets_genotypes_where_a_function_problem_gets_phenotypes(problem, scale):
    result = evotensor.run(
        RecordingStrategy(), problem, 2, jax.random.key(0), decoder=Tripler(), progress=False
    )
    told = np.asarray(result.state["told"])
    np.testing.assert_allclose(
        np.sum((scale * told) ** 2, axis=1), np.asarray(result.state["told_fitness"]), rtol=1e-5
    )
