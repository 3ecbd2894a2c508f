"""A scanned runner for the CMA-ES-like strategy tests (MA-ES family, Sep-CMA-ES, CMA-ES, restarts);
not a test module."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from evotensor.core.numerics import exact_sum


def sphere(x: jax.Array) -> jax.Array:
    """``[..., n] -> [...]`` with a batch-invariant sum (bit-identical under ``vmap``)."""
    return exact_sum(x**2)


def make_run(es, f, generations: int):
    """Jitted ``run(key, params) -> (final state, [generations] best fitness of each generation)``;
    ``f`` maps the asked genotypes to ``[pop]`` fitness."""

    def run(key, params):
        def step(state, k):
            k1, k2 = jax.random.split(k)
            x, state = es.ask(k1, state, params)
            fx = f(x)
            state, _ = es.tell(k2, state, x, fx, params)
            return state, jnp.min(fx)

        init_key, loop_key = jax.random.split(key)
        return jax.lax.scan(step, es.init(init_key, params), jax.random.split(loop_key, generations))

    return jax.jit(run)
