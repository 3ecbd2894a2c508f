"""A toy strategy written directly against the protocol (no base class): a (1, lambda)-ES with a
fixed step size, keeping the best-ever point. Used to test that the run loop needs only the
protocol."""

import jax
import jax.numpy as jnp

from evotensor.core import pytree_dataclass


@pytree_dataclass
class ToyParams:
    step: jax.Array


@pytree_dataclass
class ToyState:
    center: jax.Array  # [dims]
    center_fitness: jax.Array  # []


class ToyStrategy:
    def __init__(self, population_size: int, num_dims: int):
        self.population_size = population_size
        self.num_dims = num_dims

    def default_params(self):
        return ToyParams(step=jnp.float32(0.5))

    def init(self, key, params=None):
        return ToyState(center=jnp.full((self.num_dims,), 3.0), center_fitness=jnp.float32(jnp.inf))

    def ask(self, key, state, params=None):
        params = params or self.default_params()
        noise = jax.random.normal(key, (self.population_size, self.num_dims))
        return state.center + params.step * noise, state

    def tell(self, key, state, genotypes, evaluation, params=None):
        i = jnp.argmin(evaluation.fitness)
        better = evaluation.fitness[i] < state.center_fitness
        return (
            ToyState(
                center=jnp.where(better, genotypes[i], state.center),
                center_fitness=jnp.where(better, evaluation.fitness[i], state.center_fitness),
            ),
            {"center_fitness": state.center_fitness},
        )
