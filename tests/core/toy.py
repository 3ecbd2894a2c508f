"""A toy strategy written directly against the protocol (no base class): a (1, lambda)-ES with a
fixed step size, keeping the best-ever point. Used to test that the run loop needs only the
protocol."""

import jax
import jax.numpy as jnp
import numpy as np

import evotensor
from evotensor.core import pytree_dataclass, to_minimization


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


def hand_loop(strategy, problem, generations, key, evaluate=None):
    """The run loop's documented key schedule written out by hand: jitted ask and tell, and
    ``evaluate(eval_key, x) -> Evaluation`` between them (default: the problem's, jitted).
    ``-> (final state, best fitness seen)``."""
    ask, tell = jax.jit(strategy.ask), jax.jit(strategy.tell)
    evaluate = jax.jit(problem.evaluate) if evaluate is None else evaluate
    init_key, loop_key = jax.random.split(key)
    params = strategy.default_params()
    state = strategy.init(init_key, params)
    best = np.inf
    for g in range(generations):
        ask_key, eval_key, tell_key = evotensor.generation_keys(loop_key, g)
        x, state = ask(ask_key, state, params)
        ev = evaluate(eval_key, x)
        best = min(best, float(np.nanmin(np.asarray(ev.fitness))))
        state, _ = tell(tell_key, state, x, to_minimization(ev, problem.maximize), params)
    return state, best
