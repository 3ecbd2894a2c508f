"""Problems evaluated on the host (``evaluates_on_host = True``, evotensor.core.host_problem).

A run equals the hand-written loop of the documented key schedule; chunking, resume, the callback,
NaN/inf fitness, Lamarckian genotypes and decoders behave as for compiled problems; a host fitness
that raises (or returns something unusable) stops the run naming the generation.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.core.toy import ToyStrategy, hand_loop

import evotensor
from evotensor.core import Evaluation
from evotensor.core.checks import ArgumentError
from evotensor.core.host_problem import HostEvaluationError, evaluate_on_host, is_host_problem
from evotensor.es.simple_es import SimpleES
from evotensor.io.rundir import RunDirectory
from evotensor.problems import Rastrigin

QUIET = dict(progress=False)


class HostSphere:
    """Sum of squares in NumPy; records what it was called with."""

    evaluates_on_host = True

    def __init__(self, maximize=False):
        self.maximize = maximize
        self.calls = []

    def evaluate(self, key, genotypes):
        self.calls.append((key, genotypes))
        fitness = np.sum(np.asarray(genotypes, np.float32) ** 2, axis=1)
        return Evaluation(fitness=-fitness if self.maximize else fitness)


class Wrapped:
    """A compiled problem called from the host (the same numbers as inside the compiled run)."""

    evaluates_on_host = True

    def __init__(self, inner):
        self.inner, self.maximize = inner, inner.maximize
        self._evaluate = jax.jit(inner.evaluate)

    def evaluate(self, key, genotypes):
        return self._evaluate(key, genotypes)


def on_numpy(problem):
    """The problem called as the run loop calls a host problem: on the host, with NumPy genotypes."""
    return lambda key, x: Evaluation(jnp.asarray(np.asarray(problem.evaluate(key, np.asarray(x)).fitness)))


def leaves_equal(a, b) -> bool:
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return len(la) == len(lb) and all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(la, lb))


@pytest.mark.parametrize(
    "make", [lambda: ToyStrategy(8, 3), lambda: SimpleES(8, num_dims=3)], ids=["toy", "SimpleES"]
)
def test_run_equals_the_hand_written_loop(make):
    problem = HostSphere()
    result = evotensor.run(make(), problem, 5, jax.random.key(3), chunk_size=2, **QUIET)
    reference = HostSphere()
    state, best = hand_loop(make(), reference, 5, jax.random.key(3), on_numpy(reference))
    assert leaves_equal(result.state, state)
    assert result.best_fitness == best
    # called once per generation, on NumPy, with the generation's evaluation key
    assert len(problem.calls) == 5
    _, loop_key = jax.random.split(jax.random.key(3))
    for g, (key, genotypes) in enumerate(problem.calls):
        assert type(genotypes) is np.ndarray and genotypes.shape == (8, 3)
        assert jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
        np.testing.assert_array_equal(
            jax.random.key_data(key), jax.random.key_data(evotensor.generation_keys(loop_key, g)[1])
        )


def test_a_compiled_problem_called_from_the_host_gives_the_compiled_run():
    compiled = evotensor.run(ToyStrategy(8, 4), Rastrigin(4), 6, jax.random.key(5), chunk_size=3, **QUIET)
    host = evotensor.run(
        ToyStrategy(8, 4), Wrapped(Rastrigin(4)), 6, jax.random.key(5), chunk_size=3, **QUIET
    )
    assert leaves_equal(compiled.state, host.state) and compiled.best_fitness == host.best_fitness
    for name in ("best_fitness", "generation_best", "nonfinite", "center_fitness"):
        np.testing.assert_array_equal(compiled.history[name], host.history[name])
    for name in ("generation_mean", "generation_std"):
        np.testing.assert_allclose(compiled.history[name], host.history[name], rtol=1e-6)
    assert host.compile_seconds > 0 and host.evaluations == 48


def test_chunks_callback_and_interrupted_resume_are_bit_identical(tmp_path, capsys):
    whole = evotensor.run(ToyStrategy(4, 2), HostSphere(), 6, jax.random.key(1), chunk_size=6, **QUIET)
    seen = []

    def stop_after_first_chunk(info):
        seen.append(info)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        evotensor.run(
            ToyStrategy(4, 2), HostSphere(), 6, jax.random.key(1), chunk_size=2, run_dir=tmp_path,
            callback=stop_after_first_chunk, **QUIET,
        )  # fmt: skip
    assert seen[0]["generation"] == 2 and seen[0]["metrics"]["best_fitness"].shape == (2,)
    assert seen[0]["evals_per_second"] > 0
    assert RunDirectory.checkpoint_generation(tmp_path) == 2
    resumed = evotensor.run(
        ToyStrategy(4, 2), HostSphere(), 6, jax.random.key(1), chunk_size=2, run_dir=tmp_path, resume=True,
        progress=True,
    )  # fmt: skip
    assert leaves_equal(whole.state, resumed.state) and whole.best_fitness == resumed.best_fitness
    for name in whole.history:
        np.testing.assert_array_equal(whole.history[name], resumed.history[name], err_msg=name)
    assert (tmp_path / "best.json").exists()


class Unlucky(HostSphere):
    """NaN and inf for some individuals; every individual NaN in generation 1."""

    def evaluate(self, key, genotypes):
        fitness = np.asarray(super().evaluate(key, genotypes).fitness, np.float64)  # float64 from the host
        fitness[0], fitness[1] = np.nan, np.inf
        if len(self.calls) == 2:
            fitness[:] = np.nan
        return Evaluation(fitness=fitness, descriptor=np.asarray(genotypes, np.float64)[:, :1])


def test_nan_and_inf_from_the_host_never_corrupt_the_run():
    result = evotensor.run(ToyStrategy(6, 2), Unlucky(), 4, jax.random.key(2), chunk_size=2, **QUIET)
    np.testing.assert_array_equal(result.history["nonfinite"], [2, 6, 2, 2])
    assert np.isfinite(result.best_fitness) and np.all(np.isfinite(np.asarray(result.state.center)))
    assert result.history["generation_best"][1] == np.inf  # a generation without one finite fitness


class Polisher(HostSphere):
    """Lamarckian: returns every individual moved halfway to the origin (float64 NumPy), and its
    fitness."""

    def evaluate(self, key, genotypes):
        self.calls.append((key, genotypes))
        improved = np.asarray(genotypes, np.float64) / 2
        return Evaluation(fitness=np.sum(improved**2, axis=1), genotypes=improved)


def test_lamarckian_genotypes_from_the_host_are_told_and_tracked():
    problem = Polisher()
    result = evotensor.run(ToyStrategy(6, 2), problem, 3, jax.random.key(4), chunk_size=3, **QUIET)
    best = np.asarray(result.best_genotype)
    assert result.best_fitness == pytest.approx(float(np.sum(best**2)), rel=1e-6)
    np.testing.assert_array_equal(np.asarray(result.state.center), best)  # the toy keeps its best
    polished = [(np.asarray(x, np.float64) / 2).astype(np.float32) for _, x in problem.calls]
    assert any((rows == best).all(axis=1).any() for rows in polished)  # one of the returned genotypes


class Doubler:
    """Decodes on device into a pytree phenotype."""

    def decode(self, genotypes):
        return {"w": 2.0 * genotypes, "b": jnp.sum(genotypes, axis=1)}


class PhenotypeProblem(HostSphere):
    def evaluate(self, key, phenotypes):
        self.calls.append((key, phenotypes))
        return Evaluation(fitness=np.sum(phenotypes["w"] ** 2, axis=1) + phenotypes["b"])


def test_decoded_phenotypes_reach_the_host_as_numpy_pytrees():
    problem = PhenotypeProblem(maximize=True)
    result = evotensor.run(ToyStrategy(4, 3), problem, 2, jax.random.key(6), decoder=Doubler(), **QUIET)
    _, phenotypes = problem.calls[0]
    assert set(phenotypes) == {"w", "b"} and all(type(v) is np.ndarray for v in phenotypes.values())
    np.testing.assert_allclose(phenotypes["b"], phenotypes["w"].sum(axis=1) / 2, rtol=1e-6)
    best = np.asarray(result.best_genotype)
    assert result.best_fitness == pytest.approx(float(np.sum((2 * best) ** 2) + best.sum()), rel=1e-5)
    assert result.best_fitness == result.history["best_fitness"].max()  # maximized: natural orientation


class Failing(HostSphere):
    def evaluate(self, key, genotypes):
        if len(self.calls) == 3:
            raise ConnectionError("simulator went away")
        return super().evaluate(key, genotypes)


def test_a_host_fitness_that_raises_names_the_generation_and_keeps_the_cause(tmp_path):
    with pytest.raises(
        HostEvaluationError, match="Failing raised in generation 3 .*ConnectionError: simulator went away"
    ) as info:
        evotensor.run(
            ToyStrategy(4, 2), Failing(), 6, jax.random.key(0), chunk_size=2, run_dir=tmp_path, **QUIET
        )
    assert isinstance(info.value.__cause__, ConnectionError) and info.value.generation == 3
    assert RunDirectory.checkpoint_generation(tmp_path) == 2  # the last whole chunk is kept


class Returns(HostSphere):
    def __init__(self, value):
        super().__init__()
        self.value = value

    def evaluate(self, key, genotypes):
        return self.value


@pytest.mark.parametrize(
    "value, match",
    [
        (np.zeros(4), "returned a ndarray in generation 0.*must return an evotensor.core.Evaluation"),
        (Evaluation(fitness=np.zeros(3)), "fitness of shape \\(3,\\).*must be \\[4\\]"),
        (Evaluation(fitness=np.zeros((4, 2))), "fitness of shape \\(4, 2\\)"),
        (Evaluation(fitness=np.array(["a"] * 4)), "holds a <U1 array"),
    ],
)
def test_unusable_host_results_are_refused_naming_the_generation(value, match):
    with pytest.raises(HostEvaluationError, match=match):
        evotensor.run(ToyStrategy(4, 2), Returns(value), 2, jax.random.key(0), **QUIET)


class HostPolicy(HostSphere):
    kind = "policy"


def test_policy_problems_and_run_many_are_refused_on_the_host_path():
    with pytest.raises(ArgumentError, match="policy problem .* evaluated on the host: not supported"):
        evotensor.run(ToyStrategy(4, 2), HostPolicy(), 2, jax.random.key(0), decoder=Doubler(), **QUIET)
    with pytest.raises(ArgumentError, match="run_many cannot vmap"):
        evotensor.run_many(ToyStrategy(4, 2), HostSphere(), 2, jax.random.split(jax.random.key(0), 2))
    assert is_host_problem(HostSphere()) and not is_host_problem(Rastrigin(2))
    assert not is_host_problem(type("Truthy", (), {"evaluates_on_host": 1})())  # only True itself


@given(
    pop=st.integers(1, 6),
    shape=st.lists(st.integers(1, 6), min_size=0, max_size=2),
    dtype=st.sampled_from([np.float16, np.float32, np.float64, np.int64, np.int8, np.bool_]),
)
def test_host_fitness_is_accepted_exactly_when_it_is_one_number_per_individual(pop, shape, dtype):
    fitness = np.ones(shape, dtype)
    returned = Returns(Evaluation(fitness=fitness, descriptor=np.zeros((pop, 2))))
    if tuple(shape) != (pop,):
        with pytest.raises(HostEvaluationError, match="fitness of shape"):
            evaluate_on_host(returned, None, None, 7, pop)
        return
    evaluation = evaluate_on_host(returned, None, None, 7, pop)
    assert evaluation.fitness.dtype == jax.dtypes.canonicalize_dtype(dtype)  # float64 -> float32 without x64
    assert evaluation.descriptor.dtype == np.float32 and evaluation.genotypes is None
    np.testing.assert_array_equal(evaluation.fitness, fitness)


class HostGenotypes(HostSphere):
    """``kind = "genotype"`` on the host: the genotypes, not the decoded phenotypes."""

    kind = "genotype"


def test_a_genotype_kind_host_problem_gets_the_genotypes_not_the_phenotypes():
    problem = HostGenotypes()
    evotensor.run(ToyStrategy(4, 3), problem, 1, jax.random.key(6), decoder=Doubler(), **QUIET)
    _, seen = problem.calls[0]
    assert type(seen) is np.ndarray and seen.shape == (4, 3)
