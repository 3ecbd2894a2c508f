import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tests.core.toy import ToyStrategy, hand_loop

import evotensor
from evotensor.core import Evaluation, Strategy
from evotensor.es.simple_es import SimpleES
from evotensor.problems import Rastrigin, Sphere


def tree_equal(a, b):
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return len(la) == len(lb) and all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(la, lb))


def test_toy_strategy_follows_the_protocol_and_runs():
    toy = ToyStrategy(population_size=8, num_dims=3)
    assert isinstance(toy, Strategy)
    result = evotensor.run(toy, Sphere(3), 40, jax.random.key(0))
    assert result.best_fitness < 27.0  # the start point (3,3,3) scores 27
    assert result.history["best_fitness"].shape == (40,)
    assert np.all(np.diff(result.history["best_fitness"]) <= 0)  # best-so-far never worsens
    assert result.evaluations == 320


@pytest.mark.parametrize(
    "make", [lambda: ToyStrategy(8, 4), lambda: SimpleES(12, num_dims=4, sigma_init=2.0)]
)
@pytest.mark.fusion_emitters
def test_run_equals_hand_written_loop(make):
    strategy, problem = make(), Rastrigin(4)
    result = evotensor.run(strategy, problem, 25, jax.random.key(7), chunk_size=6)
    state, best = hand_loop(strategy, problem, 25, jax.random.key(7))
    assert tree_equal(result.state, state)
    assert result.best_fitness == pytest.approx(best, rel=0, abs=0)


def test_chunk_size_does_not_change_results():
    es, problem = SimpleES(10, num_dims=3), Sphere(3)
    a = evotensor.run(es, problem, 20, jax.random.key(1), chunk_size=20)
    b = evotensor.run(es, problem, 20, jax.random.key(1), chunk_size=3)
    assert tree_equal(a.state, b.state)
    for name in a.history:
        np.testing.assert_array_equal(a.history[name], b.history[name])


def test_run_many_equals_separate_runs():
    # bit for bit on a CPU; on a GPU to tests/platforms.py's tolerance (XLA picks other kernels
    # for the batched program there: 6e-7 relative differences were seen on an H200)
    from tests.platforms import assert_equal_on_cpu_close_on_gpu, assert_trees_equal_on_cpu_close_on_gpu

    es, problem = SimpleES(10, num_dims=3, sigma_init=2.0), Rastrigin(3)
    keys = jax.random.split(jax.random.key(5), 8)
    many = evotensor.run_many(es, problem, 15, keys)
    assert many.best_fitness.shape == (8,)
    for i in range(8):
        single = evotensor.run(es, problem, 15, keys[i])
        assert_trees_equal_on_cpu_close_on_gpu(
            single.state, jax.tree_util.tree_map(lambda a, i=i: a[i], many.state)
        )
        assert_equal_on_cpu_close_on_gpu(single.history["best_fitness"], many.history["best_fitness"][i])
        assert_equal_on_cpu_close_on_gpu(single.best_fitness, many.best_fitness[i])


def test_run_many_over_hyperparameters():
    es, problem = SimpleES(10, num_dims=3), Sphere(3)
    sigmas = jnp.array([0.1, 1.0, 3.0])
    params = jax.vmap(lambda s: es.default_params().replace(sigma_init=s))(sigmas)
    keys = jax.random.split(jax.random.key(2), 3)
    many = evotensor.run_many(es, problem, 10, keys, params=params, params_batched=True)
    for i in range(3):
        p = es.default_params().replace(sigma_init=sigmas[i])
        single = evotensor.run(es, problem, 10, keys[i], params=p)
        assert tree_equal(single.state, jax.tree_util.tree_map(lambda a, i=i: a[i], many.state))
    with pytest.raises(ValueError, match="leading axis of 3"):
        evotensor.run_many(es, problem, 10, keys, params=es.default_params(), params_batched=True)


@dataclasses.dataclass(frozen=True)
class SometimesNaN:
    """Sphere, but every third individual scores NaN and every fifth +inf."""

    maximize: bool = False

    def evaluate(self, key, x):
        f = jnp.sum(x**2, axis=1)
        idx = jnp.arange(x.shape[0])
        f = jnp.where(idx % 3 == 0, jnp.nan, f)
        return Evaluation(fitness=jnp.where(idx % 5 == 0, jnp.inf, f))


def test_nan_and_inf_fitness_never_corrupt_state():
    es = SimpleES(15, num_dims=4, sigma_init=1.0, mean_init=jnp.full(4, 2.0))
    result = evotensor.run(es, SometimesNaN(), 60, jax.random.key(0))
    leaves = jax.tree_util.tree_leaves(result.state)
    assert all(np.all(np.isfinite(np.asarray(leaf))) for leaf in leaves)
    assert np.isfinite(result.best_fitness) and result.best_fitness < 1.0  # it still optimizes
    np.testing.assert_array_equal(result.history["nonfinite"], 7)  # idx 0,3,5,6,9,10,12


@dataclasses.dataclass(frozen=True)
class NegSphere:
    """Natural objective maximized: -sum(x^2)."""

    maximize: bool = True

    def evaluate(self, key, x):
        return Evaluation(fitness=-jnp.sum(x**2, axis=1))


def test_maximized_problem_reported_in_natural_orientation():
    es = SimpleES(16, num_dims=3, mean_init=jnp.full(3, 2.0))
    result = evotensor.run(es, NegSphere(), 60, jax.random.key(0))
    assert -1e-2 < result.best_fitness <= 0.0  # maximized towards 0 from below
    assert np.all(np.diff(result.history["best_fitness"]) >= 0)
    best_x = np.asarray(result.best_genotype)
    assert float(-(best_x**2).sum()) == pytest.approx(result.best_fitness, rel=1e-5)


def test_pytree_genotypes_flow_through_run():
    template = {"w": jnp.zeros((2, 2)), "b": jnp.zeros(3)}
    es = SimpleES(12, solution=template, sigma_init=1.0)
    result = evotensor.run(es, Sphere(7), 30, jax.random.key(0))
    assert result.best_genotype["w"].shape == (2, 2) and result.best_genotype["b"].shape == (3,)


def test_bad_arguments_are_named():
    es, problem = SimpleES(8, num_dims=2), Sphere(2)
    with pytest.raises(ValueError, match="generations"):
        evotensor.run(es, problem, 0, jax.random.key(0))
    with pytest.raises(TypeError, match="new-style PRNG key"):
        evotensor.run(es, problem, 5, jax.random.PRNGKey(0))
    with pytest.raises(TypeError, match="evaluate"):
        evotensor.run(es, object(), 5, jax.random.key(0))
    with pytest.raises(ValueError, match="resume=True needs run_dir"):
        evotensor.run(es, problem, 5, jax.random.key(0), resume=True)
    with pytest.raises(ValueError, match=r"genotypes must be \[pop, 3\]"):
        evotensor.run(es, Sphere(3), 5, jax.random.key(0))


def test_policy_problem_needs_a_decoder():
    @dataclasses.dataclass(frozen=True)
    class Policy:
        maximize: bool = True
        kind: str = "policy"

        def evaluate(self, key, phenotypes, apply):
            return Evaluation(fitness=jax.vmap(lambda p: apply(p, jnp.ones(2)).sum())(phenotypes))

    with pytest.raises(ValueError, match="decoder"):
        evotensor.run(SimpleES(8, num_dims=2), Policy(), 3, jax.random.key(0))

    class Linear:
        def decode(self, genotypes):
            return genotypes

        def apply(self, phenotype, x):
            return -((phenotype - x) ** 2)

    result = evotensor.run(SimpleES(8, num_dims=2), Policy(), 40, jax.random.key(0), decoder=Linear())
    assert result.best_fitness > -0.5  # learns phenotype ~ (1, 1)


def test_default_chunk_divides_the_generations_when_it_can():
    from evotensor.core.run import _default_chunk

    assert _default_chunk(100) == 5 and _default_chunk(50) == 5 and _default_chunk(3000) == 150
    assert _default_chunk(1) == 1 and _default_chunk(7) == 1 and _default_chunk(10**6) == 500
    for g in [*range(1, 400), 9999, 10001, 12345, 10**6 + 1]:
        c = _default_chunk(g)
        assert 1 <= c <= 500 and (g % c == 0 or c == min(500, -(-g // 20)))
        assert g // c <= max(40, g // 500)  # at most ~2x the intended number of progress updates


def test_a_run_on_a_mesh_decodes_with_the_placed_strategys_decoder():
    # the CLI tasks pass strategy.decoder explicitly; on a mesh the placed copy's decoder (NEAT's
    # decodes per device) must be used, while a user's own decoder is kept
    from types import SimpleNamespace

    from evotensor.core.run import placed_decoder

    own, placed_own, users = object(), object(), object()
    strategy, placed = SimpleNamespace(decoder=own), SimpleNamespace(decoder=placed_own)
    assert placed_decoder(strategy, placed, own) is placed_own
    assert placed_decoder(strategy, placed, users) is users
    assert placed_decoder(strategy, placed, None) is None  # Loop then takes the placed strategy's
    assert placed_decoder(SimpleNamespace(), SimpleNamespace(), users) is users
