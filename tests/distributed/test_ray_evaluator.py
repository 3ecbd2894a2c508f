"""The Ray evaluator (evotensor.distributed.ray_evaluator) on a local 2-CPU Ray cluster.

One cluster for the module (``ray.init`` costs ~4 s) and one 2-actor evaluator whose fitness
(:func:`scenario_fitness`) behaves by the genotype it gets: normal, raising, crashing its actor once
(a marker file that the first actor to see it removes) or always. The chunk machinery and the seeds
are also tested in-process, without Ray.
"""

from __future__ import annotations

import os
import pickle
import sys

import jax
import numpy as np
import pytest
import ray  # the test extra installs it
from hypothesis import given
from hypothesis import strategies as st

from evotensor.core.checks import ArgumentError
from evotensor.distributed.ray_evaluator import (
    ActorCrashError,
    Batched,
    FitnessError,
    PerIndividual,
    RayEvaluator,
    connect,
    individual_seeds,
)

RAISE, CRASH_ONCE, CRASH_ALWAYS = -1.0, -2.0, -3.0
HALF = {"num_cpus": 0.5}  # the module's evaluator and a second one fit the 2-CPU cluster together


def scenario_fitness(genotype, seed):
    """``sum(x^2) + seed mod 97``; ``x[0]`` selects a failure: raise, crash the actor once (if the
    marker file named by ``x[1]``'s digits exists) or crash it every time."""
    x = genotype["x"]
    if x[0] == RAISE:
        raise ValueError(f"bad individual x={x.tolist()}")
    if x[0] == CRASH_ONCE:
        try:
            os.remove(os.environ["EVOTENSOR_TEST_MARKER"])
            os._exit(3)  # a crash: the actor process dies mid-chunk
        except FileNotFoundError:
            pass  # another attempt already crashed: this one completes
    if x[0] == CRASH_ALWAYS:
        os._exit(4)
    return float(np.sum(x.astype(np.float64) ** 2) + seed % 97)


def batched_fitness(chunk, seeds):
    return np.asarray([scenario_fitness({"x": x}, int(s)) for x, s in zip(chunk["x"], seeds)], np.float32)


def batched_with_descriptors(chunk, seeds):
    return batched_fitness(chunk, seeds), chunk["x"][:, :2]


def local_loop(key, population):
    """The reference: the fitness in a plain loop over the population, with the same seeds."""
    pop = len(population["x"])
    seeds = individual_seeds(key, pop)
    return np.asarray(
        [scenario_fitness({"x": population["x"][i]}, int(seeds[i])) for i in range(pop)], np.float32
    )


def population(pop=21, dims=3, seed=0):
    return {"x": np.random.default_rng(seed).normal(size=(pop, dims)).astype(np.float32)}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    os.environ["EVOTENSOR_TEST_MARKER"] = str(tmp_path_factory.mktemp("ray") / "crash-once")
    # this module's functions travel by value: the actors need not import the test module
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    connect(init_kwargs=dict(num_cpus=2, log_to_driver=False))
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def evaluator(cluster):
    with RayEvaluator(scenario_fitness, num_actors=2, chunk_size=4, max_restarts=1, actor_options=HALF) as ev:
        yield ev


# ---- in-process: seeds, the chunk fitness, arguments --------------------------------------------


@given(st.integers(0, 2**31 - 1), st.integers(1, 40), st.integers(0, 40))
def test_an_individuals_seed_depends_on_the_key_and_its_index_only(seed, count, start):
    key = jax.random.key(seed)
    whole = individual_seeds(key, start + count)
    part = individual_seeds(key, count, start)
    assert np.array_equal(part, whole[start:])
    assert part.dtype == np.int64 and np.all((part >= 0) & (part < 2**32))


def test_seeds_differ_between_keys_and_individuals():
    a, b = individual_seeds(jax.random.key(0), 64), individual_seeds(jax.random.key(1), 64)
    assert len(set(a.tolist())) == 64 and not np.array_equal(a, b)


def test_per_individual_and_batched_give_the_local_loops_values():
    pop, key = population(), jax.random.key(5)
    seeds = individual_seeds(key, 21)
    ref = local_loop(key, pop)
    fitness, descriptors = PerIndividual(scenario_fitness)(pop, seeds, 0)
    assert np.array_equal(fitness, ref) and descriptors is None and fitness.dtype == np.float32
    assert np.array_equal(Batched(batched_fitness)(pop, seeds, 0)[0], ref)


def test_a_raising_fitness_is_named_by_index_and_seed_with_the_original_chained():
    pop = population()
    pop["x"][6, 0] = RAISE
    seeds = np.arange(100, 121)
    with pytest.raises(FitnessError, match=r"individual 16 \(seed 106\).*ValueError: bad individual") as info:
        PerIndividual(scenario_fitness)(pop, seeds, 10)  # the chunk starts at individual 10
    assert info.value.index == 16 and info.value.seed == 106
    assert isinstance(info.value.__cause__, ValueError) and isinstance(info.value.original, ValueError)
    assert "scenario_fitness" in info.value.remote_traceback
    with pytest.raises(FitnessError, match=r"the chunk of individuals 10\.\.30") as info:
        Batched(batched_fitness)(pop, seeds, 10)
    assert info.value.index is None


def test_bad_return_values_are_named():
    pop, seeds = population(4), np.arange(4)
    with pytest.raises(FitnessError, match=r"must return a number; on individual 2 \(seed 2\) it returned"):
        PerIndividual(lambda g, s: np.ones(2) if s == 2 else 0.0)(pop, seeds, 0)
    with pytest.raises(FitnessError, match=r"fitness of shape \(4,\)"):
        Batched(lambda c, s: np.zeros(3))(pop, seeds, 0)
    with pytest.raises(FitnessError, match="descriptor_size=2 needs shape"):
        PerIndividual(lambda g, s: (1.0, np.zeros(3)), descriptor_size=2)(pop, seeds, 0)
    fitness, descriptors = PerIndividual(lambda g, s: (float(s), g["x"][:2]), descriptor_size=2)(
        pop, seeds, 0
    )
    assert np.array_equal(fitness, np.arange(4)) and np.array_equal(descriptors, pop["x"][:, :2])


def test_fitness_errors_survive_pickling_with_their_fields():
    err = FitnessError("m", 3, 7, "tb")
    err.original = KeyError("k")
    back = pickle.loads(pickle.dumps(err))
    assert (str(back), back.index, back.seed, back.remote_traceback) == ("m", 3, 7, "tb")
    assert isinstance(back.original, KeyError)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(num_actors=0), "num_actors"),
        (dict(chunk_size=1.5), "chunk_size"),
        (dict(max_restarts=-1), "max_restarts"),
        (dict(maximize="yes"), "maximize"),
        (dict(timeout=0), "timeout"),
        (dict(address=3), "address"),
        (dict(init_kwargs=[1]), "init_kwargs"),
    ],
)
def test_bad_arguments_are_named_at_construction(kwargs, name):
    with pytest.raises(ArgumentError, match=name):
        RayEvaluator(scenario_fitness, **kwargs)


def test_not_a_fitness_is_refused():
    with pytest.raises(ArgumentError, match="fitness_fn"):
        RayEvaluator(3)
    with pytest.raises(ArgumentError, match="descriptor_size"):
        Batched(batched_fitness, descriptor_size=0)


def test_the_run_identity_holds_only_what_changes_results():
    a = RayEvaluator(scenario_fitness, num_actors=2, chunk_size=3, maximize=True)
    b = RayEvaluator(scenario_fitness, num_actors=7, chunk_size=5, maximize=True)
    public = lambda ev: {k: v for k, v in vars(ev).items() if not k.startswith("_") and k != "fitness"}
    assert public(a) == public(b) and repr(a) == repr(b)
    assert public(a)["fitness_name"].endswith("scenario_fitness") and a.evaluates_on_host
    assert pickle.loads(pickle.dumps(a))._pool is None  # a copy starts its own actors


@given(st.integers(1, 500), st.integers(1, 16), st.one_of(st.none(), st.integers(1, 64)))
def test_chunks_cut_the_population_in_order(pop, actors, chunk_size):
    ranges = RayEvaluator(scenario_fitness, num_actors=actors, chunk_size=chunk_size).chunks(pop)
    assert ranges[0][0] == 0 and ranges[-1][1] == pop
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))  # contiguous, in order
    size = chunk_size or -(-pop // (4 * actors))
    assert all(0 < stop - start <= size for start, stop in ranges)


# ---- on the cluster ------------------------------------------------------------------------------


def test_reassembled_in_order_and_independent_of_actors_and_chunks(evaluator):
    key, pop = jax.random.key(11), population()
    ref = local_loop(key, pop)
    assert np.array_equal(evaluator.evaluate(key, pop).fitness, ref)
    # one actor, other chunks, the batched form with descriptors (QD): the same values
    batched = Batched(batched_with_descriptors, descriptor_size=2)
    with RayEvaluator(batched, num_actors=1, chunk_size=7, actor_options=HALF) as one:
        evaluation = one.evaluate(key, pop)
        assert np.array_equal(evaluation.fitness, ref)
        assert np.array_equal(evaluation.descriptor, pop["x"][:, :2])
        evaluation = one.evaluate(key, {"x": pop["x"][:5]})
    assert np.array_equal(evaluation.fitness, ref[:5]) and evaluation.fitness.dtype == np.float32


def test_a_raising_fitness_stops_with_the_individual_named(evaluator):
    pop = population()
    pop["x"][13, 0] = RAISE
    with pytest.raises(FitnessError, match=r"individual 13 \(seed \d+\): ValueError: bad individual") as info:
        evaluator.evaluate(jax.random.key(0), pop)
    assert info.value.index == 13 and isinstance(info.value.__cause__, ValueError)
    assert any("traceback on the Ray actor" in note for note in info.value.__notes__)
    # the pool is still usable
    assert np.array_equal(evaluator.evaluate(jax.random.key(1), population()).fitness,
                          local_loop(jax.random.key(1), population()))  # fmt: skip


def test_an_actor_killed_mid_generation_is_replaced_and_nothing_is_lost_or_doubled(evaluator):
    key, pop = jax.random.key(2), population()
    pop["x"][9, 0] = CRASH_ONCE  # chunk 8..11: its first attempt kills the actor
    open(os.environ["EVOTENSOR_TEST_MARKER"], "w").close()
    pids, restarts = set(evaluator.pool.pids()), evaluator.pool.restarts
    fitness = evaluator.evaluate(key, pop).fitness
    assert not os.path.exists(os.environ["EVOTENSOR_TEST_MARKER"])  # it did crash
    assert evaluator.pool.restarts == restarts + 1
    assert np.array_equal(fitness, local_loop(key, pop))  # every individual exactly once, in order
    assert len(set(evaluator.pool.pids()) - pids) == 1  # one new actor process


def test_a_chunk_that_always_kills_its_actor_is_named_after_max_restarts(evaluator):
    pop = population()
    pop["x"][2, 0] = CRASH_ALWAYS
    with pytest.raises(
        ActorCrashError, match=r"individuals 0\.\.3 killed its Ray actor 2 times \(max_restarts=1\)"
    ):
        evaluator.evaluate(jax.random.key(3), pop)
    assert np.array_equal(evaluator.evaluate(jax.random.key(1), population()).fitness,
                          local_loop(jax.random.key(1), population()))  # fmt: skip


def test_inside_evotensor_run_equals_a_local_host_loop(evaluator):
    import evotensor
    from evotensor.es import OpenES

    class LocalLoop:  # the same fitness in a NumPy loop on the driver
        evaluates_on_host, maximize = True, False

        def evaluate(self, key, genotypes):
            return evotensor.Evaluation(fitness=local_loop(key, genotypes))

    def strategy():
        return OpenES(8, solution={"x": np.zeros(3, np.float32)}, sigma_init=0.5)

    remote = evotensor.run(strategy(), evaluator, 3, jax.random.key(4), chunk_size=2)
    local = evotensor.run(strategy(), LocalLoop(), 3, jax.random.key(4), chunk_size=2)
    for name in ("best_fitness", "generation_mean"):
        assert np.array_equal(remote.history[name], local.history[name])
    assert np.array_equal(np.asarray(remote.state.mean), np.asarray(local.state.mean))
    assert remote.best_fitness == local.best_fitness


@pytest.mark.slow
def test_a_chunk_past_its_timeout_is_rerun_on_a_new_actor(cluster, tmp_path):
    marker = tmp_path / "slow-once"

    def slow_once(genotype, seed):
        if genotype["x"][0] == CRASH_ONCE and not marker.exists():
            marker.touch()
            import time

            time.sleep(600)
        return scenario_fitness({"x": np.abs(genotype["x"])}, seed)

    pop = population()
    pop["x"][5, 0] = CRASH_ONCE
    with RayEvaluator(slow_once, num_actors=2, chunk_size=4, timeout=3.0, actor_options=HALF) as ev:
        fitness = ev.evaluate(jax.random.key(6), pop).fitness
        assert ev.pool.restarts == 1 and marker.exists()
    assert np.array_equal(fitness, local_loop(jax.random.key(6), {"x": np.abs(pop["x"])}))


@pytest.mark.slow
def test_close_frees_the_actors_and_a_later_evaluate_starts_again(cluster):
    ev = RayEvaluator(scenario_fitness, num_actors=2, actor_options=HALF)
    ev.evaluate(jax.random.key(0), population(4))
    actors = list(ev.pool.actors)
    ev.close()
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(actors[0].ready.remote(), timeout=60)
    assert np.array_equal(ev.evaluate(jax.random.key(0), population(4)).fitness,
                          local_loop(jax.random.key(0), population(4)))  # fmt: skip
    ev.close()
