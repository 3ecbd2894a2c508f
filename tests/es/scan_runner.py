"""A scanned runner for the CMA-ES-like strategy tests (MA-ES family, Sep-CMA-ES, CMA-ES, restarts),
and the vmap-exactness check they share; not a test module."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from tests.platforms import assert_equal_on_cpu_close_on_gpu

from evotensor.core.numerics import exact_sum


def sphere(x: jax.Array) -> jax.Array:
    """``[..., n] -> [...]`` with a batch-invariant sum (bit-identical under ``vmap``: XLA:CPU may sum a
    row in another order when the program is vmapped, ``exact_sum`` is never reordered)."""
    return exact_sum(x**2)


def best_of_generation(state, fitness: jax.Array, metrics) -> jax.Array:
    """The default per-generation record: the generation's best fitness ``[]``."""
    return jnp.min(fitness)


def make_step(es, f, params, record=best_of_generation):
    """The scan body ``step(state, key) -> (state, record(state, fitness, metrics))``: ask with one half
    of ``key``, evaluate ``f`` (asked genotypes -> ``[pop]`` fitness), tell with the other half."""

    def step(state, key):
        k1, k2 = jax.random.split(key)
        x, state = es.ask(k1, state, params)
        fx = f(x)
        state, metrics = es.tell(k2, state, x, fx, params)
        return state, record(state, fx, metrics)

    return step


def make_run(es, f, generations: int, record=best_of_generation):
    """Jitted ``run(key, params) -> (final state, [generations] records)``; by default the record is each
    generation's best fitness, ``record(state, fitness, metrics)`` picks another (see :func:`make_step`)."""

    def run(key, params):
        init_key, loop_key = jax.random.split(key)
        step = make_step(es, f, params, record)
        return jax.lax.scan(step, es.init(init_key, params), jax.random.split(loop_key, generations))

    return jax.jit(run)


def check_vmap_over_seeds_and_sigma_init(es, generations: int) -> None:
    """``vmap`` over three seeds, and over three ``sigma_init`` values with one seed, equals the separate
    runs on :func:`sphere` bit for bit on CPU (final states and per-generation best fitness), to
    :data:`tests.platforms.GPU_RTOL` on GPU."""
    run = make_run(es, sphere, generations)
    params = es.default_params()
    keys = jax.random.split(jax.random.key(3), 3)
    batched = jax.jit(jax.vmap(run, in_axes=(0, None)))(keys, params)
    sigmas = jnp.asarray([0.1, 1.0, 3.0])
    hyper = jax.jit(jax.vmap(run, in_axes=(None, 0)))(
        keys[0], jax.vmap(lambda s: params.replace(sigma_init=s))(sigmas)
    )
    for i in range(3):
        for a, b in zip(jax.tree_util.tree_leaves(batched), jax.tree_util.tree_leaves(run(keys[i], params))):
            assert_equal_on_cpu_close_on_gpu(np.asarray(a)[i], b)
        single = run(keys[0], params.replace(sigma_init=sigmas[i]))
        for a, b in zip(jax.tree_util.tree_leaves(hyper), jax.tree_util.tree_leaves(single)):
            assert_equal_on_cpu_close_on_gpu(np.asarray(a)[i], b)
