import jax
import jax.numpy as jnp
import numpy as np
import pytest

from evotensor.problems import Ackley, ClassicFunction, Rastrigin, Rosenbrock, Sphere


def reference(name, x):
    x = np.asarray(x, np.float64)
    if name == "sphere":
        return float(np.sum(x**2))
    if name == "rastrigin":
        return float(10 * len(x) + np.sum(x**2 - 10 * np.cos(2 * np.pi * x)))
    if name == "rosenbrock":
        return float(sum(100 * (x[i + 1] - x[i] ** 2) ** 2 + (1 - x[i]) ** 2 for i in range(len(x) - 1)))
    d = len(x)
    return float(
        -20 * np.exp(-0.2 * np.sqrt(np.sum(x**2) / d)) - np.exp(np.sum(np.cos(2 * np.pi * x)) / d) + 20 + np.e
    )


@pytest.mark.parametrize("make", [Sphere, Rastrigin, Rosenbrock, Ackley])
def test_matches_reference_and_optimum(make):
    problem = make(5)
    x = jax.random.uniform(jax.random.key(0), (7, 5), minval=-2, maxval=2)
    fitness = problem.evaluate(jax.random.key(1), x).fitness
    np.testing.assert_allclose(
        fitness, [reference(problem.name, xi) for xi in np.asarray(x)], rtol=1e-5, atol=1e-5
    )
    optimum = jnp.full((1, 5), problem.optimum)
    assert abs(float(problem.evaluate(jax.random.key(1), optimum).fitness[0])) < 1e-5
    assert problem.maximize is False


def test_pytree_genotypes_are_flattened():
    x = {"a": jnp.ones((4, 2)), "b": jnp.ones((4, 1))}
    np.testing.assert_allclose(Sphere(3).evaluate(jax.random.key(0), x).fitness, 3.0)


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown function name"):
        ClassicFunction("nope", 3)
    with pytest.raises(ValueError, match="num_dims"):
        Sphere(0)
    with pytest.raises(ValueError, match=">= 2 for rosenbrock"):
        Rosenbrock(1)
    with pytest.raises(ValueError, match=r"\[pop, 3\]"):
        Sphere(3).evaluate(jax.random.key(0), jnp.zeros((2, 4)))
