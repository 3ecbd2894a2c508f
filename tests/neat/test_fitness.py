"""NetworkFitness: a user's batched fitness over decoded networks drives NEAT."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import evotensor
from evotensor.core.checks import ArgumentError
from evotensor.neat import NEAT, forward_batch
from evotensor.neat.fitness import NetworkFitness
from evotensor.problems.function_fit import XOR, xor_cases


def test_user_fitness_equals_the_builtin_xor_problem():
    strategy = NEAT.from_mode("neat-python", 2, 1, population_size=20, max_nodes=16, max_conns=32)
    x, y = map(jnp.asarray, xor_cases(2))
    spec = strategy.spec

    def fitness(networks, key):
        pred = jax.vmap(lambda n: forward_batch(spec, n, x))(networks)
        return 4.0 - jnp.sum((pred - y[None]) ** 2, axis=(1, 2))

    state = jax.jit(strategy.init)(jax.random.key(0))
    nets = jax.jit(strategy.decoder.decode)(state.population)  # one compile, not op-by-op dispatch
    ours = NetworkFitness(fitness).evaluate(jax.random.key(1), nets).fitness
    builtin = XOR().evaluate(None, nets, strategy.decoder.apply).fitness
    np.testing.assert_allclose(np.asarray(ours), np.asarray(builtin), rtol=1e-6)
    result = evotensor.run(strategy, NetworkFitness(fitness), 5, jax.random.key(2), progress=False)
    assert np.isfinite(result.best_fitness)


def test_errors_name_the_argument():
    with pytest.raises(ArgumentError, match="fitness"):
        NetworkFitness("mse")
    with pytest.raises(ArgumentError, match="maximize"):
        NetworkFitness(lambda n, k: n, maximize="yes")
    problem = NetworkFitness(lambda n, k: jnp.zeros(3))
    with pytest.raises(ArgumentError, match=r"shape \[4\]"):
        problem.evaluate(None, jnp.zeros((4, 2)))
