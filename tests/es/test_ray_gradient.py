"""Distributed-gradient ES on Ray actors (evotensor.es.core.ray_gradient).

The update must be the unsharded ``tell`` of the gathered population (strategy row order) up to
float32 summation order, with a NumPy fitness that JAX never sees, and only ``O(pop + dims)`` bytes
may cross to and from each actor. One local 2-CPU cluster for the module; the shard worker's
logic (sampling, the resample after a lost actor) is also checked in-process.
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import ray  # the test extra installs it

from evotensor.core.checks import ArgumentError
from evotensor.core.evaluation import stand_ins_for_nonfinite
from evotensor.core.run import generation_keys
from evotensor.distributed.ray_evaluator import PerIndividual, connect, individual_seeds
from evotensor.es import ARS, CMAES, ESMC, OpenES, PersistentES
from evotensor.es.core.ray_gradient import RayGradientES, ShardWorker, payload_bytes, to_host
from evotensor.es.core.sharding import population_layout, population_order

HALF = {"num_cpus": 0.5}


def sphere(x, seed):
    """A NumPy fitness; a seed divisible by 5 gives NaN (a failed simulation)."""
    return np.nan if seed % 5 == 0 else float(np.sum(x.astype(np.float64) ** 2))


@pytest.fixture(scope="module")
def cluster():
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    connect(init_kwargs=dict(num_cpus=2, log_to_driver=False))
    yield
    ray.shutdown()


def reward(x, seed):
    """The same, to be maximized."""
    return -sphere(x, seed)


def reference_step(strategy, fitness_fn, maximize, state, keys, shards):
    """The same generation in-process: each shard's rows from the same compiled sampler, the fitness
    in a loop, and the strategy's own unsharded tell on the population in its row order."""
    size = len(population_layout(strategy, shards))
    worker = ShardWorker(strategy, PerIndividual(fitness_fn), size // shards)
    params = strategy.default_params()
    broadcast = {"token": 0, "ask_key": keys[0], "state": state, "params": params, "context": ()}
    x = jnp.concatenate([worker.rows_of(s, broadcast) for s in range(shards)])
    seeds = individual_seeds(keys[1], size)
    fitness = np.asarray([fitness_fn(np.asarray(r), int(s)) for r, s in zip(x, seeds)], np.float32)
    order = population_order(strategy, shards)
    minimized = stand_ins_for_nonfinite(jnp.asarray(-fitness if maximize else fitness))[order]
    new, _ = jax.jit(strategy.tell)(keys[2], state, x[order], minimized)
    return new, fitness


def check_one_generation(dist, fitness_fn):
    """``dist.step`` equals :func:`reference_step`, and sends ``O(pop + dims)`` bytes per actor."""
    es = dist.strategy
    state, loop_key = dist.init(jax.random.key(3))
    keys = generation_keys(loop_key, 0)
    new, info = dist.step(state, keys)
    ref, fitness = reference_step(es, fitness_fn, dist.maximize, state, keys, dist.num_shards)
    assert np.array_equal(info["fitness"], fitness, equal_nan=True)  # same rows, same seeds
    assert np.isnan(fitness).any()  # the NaN path is part of the comparison
    assert_close_states(new, ref)
    # traffic per actor and generation: the O(dims) state and O(rows) numbers, never the rows
    rows, dims, n = dist.rows, es.num_dims, dist.num_shards
    state_bytes = payload_bytes(to_host(state)) + payload_bytes(to_host(es.default_params()))
    assert info["bytes_to_actors"] <= n * (state_bytes + 16 * rows + 4096)
    assert info["bytes_from_actors"] <= n * (4 * rows + 2 * 4 * dims + 2048)
    return info


def assert_close_states(a, b, rtol=2e-6, atol=1e-7):
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        np.testing.assert_allclose(np.asarray(x, np.float64), np.asarray(y, np.float64), rtol=rtol, atol=atol)


# ---- in-process ----------------------------------------------------------------------------------


def test_a_replaced_actor_resamples_the_same_rows_before_reducing_them():
    es = OpenES(8, num_dims=5, sigma_init=0.3)
    state, params = es.init(jax.random.key(0)), es.default_params()
    broadcast = {
        "token": 1,
        "ask_key": jax.random.key(7),
        "state": to_host(state),
        "params": params,
        "context": (),
    }
    seeds = np.arange(4)
    warm = ShardWorker(es, PerIndividual(sphere), 4)
    fitness, _ = warm.evaluate(1, broadcast, seeds)
    weights = np.linspace(-0.5, 0.5, 4).astype(np.float32)
    stats, row = warm.statistics(1, broadcast, weights, None, 2)
    cold = ShardWorker(es, PerIndividual(sphere), 4)  # never sampled shard 1 (a new actor)
    stats_cold, row_cold = cold.statistics(1, broadcast, weights, None, 2)
    assert np.array_equal(stats, stats_cold) and np.array_equal(row, row_cold)
    x = jax.jit(lambda k: es._sample(k, state, params, 4)[0])(jax.random.fold_in(broadcast["ask_key"], 1))
    assert np.array_equal(row, np.asarray(x[2]))
    expected = np.asarray([sphere(np.asarray(r), s) for r, s in zip(x, seeds)], np.float32)
    assert np.array_equal(fitness, expected, equal_nan=True)
    # a new generation (token) is sampled afresh
    stats_next, _ = warm.statistics(
        1, {**broadcast, "token": 2, "ask_key": jax.random.key(8)}, weights, None, None
    )
    assert not np.array_equal(stats_next, stats)


def test_strategies_it_cannot_run_are_refused_by_name():
    with pytest.raises(TypeError, match="CMAES cannot be sharded"):
        RayGradientES(CMAES(8, num_dims=3), sphere)
    with pytest.raises(TypeError, match="PersistentES keeps per-member state"):
        RayGradientES(PersistentES(8, num_dims=3), sphere)
    with pytest.raises(ArgumentError, match="num_shards=3"):
        RayGradientES(OpenES(8, num_dims=3), sphere, num_shards=3)  # pairs cannot split 3 ways
    with pytest.raises(ArgumentError, match="num_actors"):
        RayGradientES(OpenES(8, num_dims=3), sphere, num_actors=0)


# ---- on the cluster ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ars(cluster):
    """ARS: its weights come with an aux (the elite's sigma_R) computed on the driver."""
    with RayGradientES(ARS(16, num_dims=4, sigma_init=0.5), reward, num_actors=2, maximize=True,
                       actor_options=HALF) as dist:  # fmt: skip
        yield dist


def test_open_es_generation_equals_the_unsharded_tell_and_never_sends_the_population(cluster):
    es = OpenES(64, num_dims=2000, sigma_init=0.3, optimizer=optax.adam(0.05))  # mirrored pairs
    with RayGradientES(es, sphere, num_actors=2, num_shards=2, actor_options=HALF) as dist:
        info = check_one_generation(dist, sphere)
    population_bytes = 64 * 2000 * 4
    assert info["bytes_to_actors"] + info["bytes_from_actors"] < population_bytes / 4


def test_ars_generation_equals_the_unsharded_tell(ars):
    check_one_generation(ars, reward)


def test_run_follows_the_key_schedule_and_tracks_the_best_in_natural_orientation(ars):
    result = ars.run(3, jax.random.key(9))
    state, loop_key = ars.init(jax.random.key(9))
    for g in range(3):
        state, info = ars.step(state, generation_keys(loop_key, g))
    assert_close_states(result.state, state, rtol=0, atol=0)  # the same calls: bit for bit
    history = result.history
    assert history["best_fitness"].shape == (3,) and np.all(np.diff(history["best_fitness"]) >= 0)
    assert result.best_fitness == history["generation_best"].max() <= 0
    best = np.asarray(jax.flatten_util.ravel_pytree(result.best_genotype)[0])
    assert np.isclose(-float(np.sum(best.astype(np.float64) ** 2)), result.best_fitness, rtol=1e-6)
    assert result.evaluations == 3 * 16 and np.all(history["bytes_from_actors"] > 0)
    assert history["nonfinite"].sum() > 0  # NaN fitness never became the best


@pytest.mark.slow
def test_esmc_generation_equals_the_unsharded_tell(cluster):
    es = ESMC(17, num_dims=6, sigma_init=0.3)  # a mean row repeated on every shard
    with RayGradientES(es, sphere, num_actors=2, num_shards=2, actor_options=HALF) as dist:
        check_one_generation(dist, sphere)


@pytest.mark.slow
def test_cartpole_through_ray_actors_reaches_the_500_cap(cluster):
    from evotensor.distributed.ray_evaluator import Batched
    from evotensor.problems.gymnasium_control import GymnasiumPolicy

    cartpole = GymnasiumPolicy("CartPole-v1", (16,), episodes=2)
    es = OpenES(
        64, solution=cartpole.init_params(jax.random.key(0)), optimizer=optax.adam(0.05), sigma_init=0.1
    )
    with RayGradientES(es, Batched(cartpole.batch), num_actors=2, maximize=True, actor_options=HALF) as dist:
        result = dist.run(30, jax.random.key(0))
    assert result.best_fitness == 500.0
    assert result.history["generation_mean"][-5:].mean() > 450
