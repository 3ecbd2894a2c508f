"""The NEAT strategy end to end: valid genomes every generation, XOR solved, non-finite fitness never
reaches the state, bit-identical resume, extinction, configuration errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import evotensor
import evotensor.core.run
from evotensor.core.checks import ArgumentError
from evotensor.core.evaluation import Evaluation
from evotensor.core.strategy import Strategy
from evotensor.neat.config import MODES, NEATConfig, neat_mode
from evotensor.neat.genome import check_genome
from evotensor.neat.network import OutputMode
from evotensor.neat.strategy import CPU_COMPILER_OPTIONS, NEAT
from evotensor.problems.function_fit import XOR


def small(mode="neat-python", pop=40, **kw):
    return NEAT.from_mode(mode, 2, 1, population_size=pop, max_nodes=16, max_conns=32, **kw)


@pytest.fixture(scope="module")
def xor_run():
    strategy = small()
    return strategy, evotensor.run(strategy, XOR(), 25, jax.random.key(3), chunk_size=5, progress=False)


def test_is_a_strategy_and_every_genome_stays_valid(xor_run):
    strategy, result = xor_run
    assert isinstance(strategy, Strategy)
    pop = result.state.population
    assert pop.node_key.shape == (40, 16)
    for i in range(40):
        assert check_genome(strategy.spec, pop[i]) == [], i
    assert check_genome(strategy.spec, result.best_genotype) == []
    h = result.history
    assert np.all(np.diff(h["best_fitness"]) >= 0)
    assert np.all(h["num_species"] >= 1) and np.all(h["num_species"] <= strategy.config.species.max_species)
    assert h["nodes_added"].sum() > 0 and h["conns_added"].sum() > 0
    # per-species sizes (a vector metric the run keeps): every genome in exactly one species
    assert h["species_sizes"].shape == (25, strategy.config.species.max_species)
    np.testing.assert_array_equal(h["species_sizes"].sum(axis=1), 40)
    np.testing.assert_array_equal((h["species_sizes"] > 0).sum(axis=1), h["num_species"])
    # counters only grow and are past every key and innovation in use
    st = result.state
    assert int(st.next_innov) > int(jnp.max(jnp.where(pop.conn_valid, pop.conn_innov, -1)))
    assert int(st.next_node_key) > int(jnp.max(jnp.where(pop.node_valid, pop.node_key, -1)))


def test_best_genome_reproduces_its_fitness(xor_run):
    strategy, result = xor_run
    # one compile, not op-by-op dispatch
    net = jax.jit(strategy.decoder.decode)(jax.tree_util.tree_map(lambda x: x[None], result.best_genotype))
    fit = XOR().evaluate(None, net, strategy.decoder.apply).fitness[0]
    assert float(fit) == pytest.approx(result.best_fitness, rel=1e-5)


@pytest.mark.parametrize("seed", [0])
def test_xor_is_solved_at_pop_150(seed):
    strategy = NEAT.from_mode("neat-python", 2, 1, population_size=150, max_nodes=32, max_conns=64)
    result = evotensor.run(strategy, XOR(), 300, jax.random.key(seed), chunk_size=50, progress=False)
    assert result.best_fitness > 3.9


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_xor_is_solved_at_least_as_often_as_neat_python(mode):
    # neat-python 2.1 itself fails XOR in 8 of 100 seeds (its example config, pop 150, 300
    # generations; most of them stay on the fitness-3.0 plateau of networks without a hidden
    # node), so "10 of 10 seeds" holds for a given 10 only with probability ~0.43 even for the
    # reference. This asks for its rate instead, over 30 seeds: >= 26 of 30 (92% of 30 is 27.6).
    # Measured 2026-11-26 side by side on seeds 0-99 (benchmarks/results_neat.md, session 9):
    # evotensor 94/100, neat-python 2.1 92/100 (Fisher p = 0.78, Mann-Whitney p = 0.43).
    strategy = NEAT.from_mode(mode, 2, 1, population_size=150, max_nodes=32, max_conns=64)
    if mode == "tensorneat":  # TensorNEAT's XOR example squashes the raw output with a sigmoid
        config = strategy.config.replace(outputs=OutputMode.tensorneat(jax.nn.sigmoid))
        strategy = NEAT(strategy.spec, 150, config)
    keys = jax.random.split(jax.random.key(11), 30)
    results = evotensor.run_many(strategy, XOR(), 300, keys)
    solved = int(np.sum(np.asarray(results.best_fitness) > 3.9))
    # the tensorneat mode keeps TensorNEAT's defaults (not its XOR example's 20 species slots and
    # 7 nodes), which settle on a constant output (fitness 3.0) more often
    assert solved >= (24 if mode == "tensorneat" else 26), results.best_fitness


def test_nonfinite_fitness_never_reaches_the_state():
    strategy = small(pop=20)
    state = jax.jit(strategy.init)(jax.random.key(0))
    tell = jax.jit(strategy.tell)
    bad = jnp.array([jnp.nan, jnp.inf, -jnp.inf] * 6 + [1.0, 2.0])
    for g in range(4):
        pop, state = strategy.ask(None, state)
        state, metrics = tell(jax.random.key(g), state, pop, Evaluation(fitness=jnp.roll(bad, g)))
        for leaf in jax.tree_util.tree_leaves(state):
            if jnp.issubdtype(leaf.dtype, jnp.floating):
                assert bool(jnp.all(jnp.isfinite(leaf))), leaf
    for i in range(20):
        assert check_genome(strategy.spec, state.population[i]) == []
    # all non-finite: still a valid, finite state
    # float32 spelled out: jnp.full(20, nan) is weakly typed, a new input type that recompiles tell
    nan = jnp.full(20, jnp.nan, jnp.float32)
    state, _ = tell(jax.random.key(9), state, state.population, Evaluation(fitness=nan))
    assert all(
        bool(jnp.all(jnp.isfinite(x))) for x in jax.tree_util.tree_leaves(state) if x.dtype == jnp.float32
    )


def _lamarckian_xor(strategy):
    from evotensor.neat.gradient import GradientFit, GradientTuner

    xor = XOR()
    return GradientFit(strategy.decoder, xor.x, xor.y, "sse", GradientTuner(steps=3, learning_rate=0.1), 0.5)


# three compilations of a NEAT chunk (~30 s each problem); the run loop's resume is bit-identical for
# every state pytree (tests/core, tests/test_cli.py, the QD and GP task tests); this checks NEAT's,
# plain and Lamarckian (tuned genomes told back), in the slow tier
@pytest.mark.slow
@pytest.mark.parametrize("problem", [lambda s: XOR(), _lamarckian_xor], ids=["xor", "lamarckian"])
def test_resume_is_bit_identical(tmp_path, problem):
    strategy, key = small(pop=24), jax.random.key(5)
    full = evotensor.run(strategy, problem(strategy), 12, key, chunk_size=4, progress=False)

    class Stop(Exception):
        pass

    def stop_after_8(info):
        if info["generation"] >= 8:
            raise Stop

    with pytest.raises(Stop):
        evotensor.run(
            strategy,
            problem(strategy),
            12,
            key,
            run_dir=tmp_path,
            chunk_size=4,
            callback=stop_after_8,
            progress=False,
        )
    resumed = evotensor.run(
        strategy, problem(strategy), 12, key, run_dir=tmp_path, chunk_size=4, resume=True, progress=False
    )
    for a, b in zip(jax.tree_util.tree_leaves(resumed.state), jax.tree_util.tree_leaves(full.state)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert resumed.best_fitness == full.best_fitness
    np.testing.assert_array_equal(resumed.history["best_fitness"], full.history["best_fitness"])


def test_extinction_resets_keeping_the_best_genome():
    spec, config = neat_mode("neat-python", 2, 1, max_nodes=16, max_conns=32)
    config = config.replace(
        species={"max_stagnation": 1, "species_elitism": 0, "max_species": 5}, reproduction={"elitism": 0}
    )
    strategy = NEAT(spec, 20, config)
    state = jax.jit(strategy.init)(jax.random.key(1))
    tell = jax.jit(strategy.tell)
    resets = 0
    for g in range(4):
        pop, state = strategy.ask(None, state)
        fitness = -jnp.arange(20, dtype=jnp.float32) * (g == 0)  # never improves after generation 0
        state, metrics = tell(jax.random.key(g), state, pop, Evaluation(fitness=fitness))
        resets += int(metrics["resets"])
        assert not bool(state.extinct)
    assert resets >= 1
    for i in range(20):
        assert check_genome(spec, state.population[i]) == []


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: NEAT("spec", 10), "spec"),
        (lambda: NEAT(neat_mode()[0], 1), "population_size"),
        (lambda: NEAT(neat_mode()[0], 10, config="fast"), "config"),
        (lambda: NEAT(neat_mode()[0], 10, NEATConfig()), "max_species"),
        (lambda: NEAT.from_mode("fast"), "mode"),
        (lambda: NEATConfig(functions="mine"), "functions"),
        (lambda: NEAT(neat_mode()[0], 150, compiler_options=["fast"]), "compiler_options"),
        (lambda: NEAT(neat_mode()[0], 150, compiler_options={1: True}), "compiler_options"),
    ],
)
def test_bad_configuration_names_the_argument(make, match):
    with pytest.raises(ArgumentError, match=match):
        make()


def test_compiler_options_default_to_the_cpu_set_and_a_user_mapping_wins():
    spec, config = neat_mode()
    assert NEAT(spec, 150, config).compiler_options("cpu") == CPU_COMPILER_OPTIONS != {}
    assert NEAT(spec, 150, config).compiler_options("gpu") is None
    for platform in ("cpu", "gpu"):
        assert NEAT(spec, 150, config, compiler_options={}).compiler_options(platform) == {}
    assert evotensor.core.run.Loop(NEAT(spec, 150, config), XOR()).compiler_options == (
        CPU_COMPILER_OPTIONS if jax.default_backend() == "cpu" else {}
    )


@pytest.mark.slow
def test_the_cpu_compiler_options_leave_a_run_bit_identical():
    # the options change how XLA:CPU compiles NEAT's programs, never what they compute: the same
    # states and history, except the run loop's population mean and std, whose sums over the
    # population XLA:CPU vectorizes differently at another optimization level (the last bit)
    key = jax.random.key(5)
    runs = [
        evotensor.run(small(pop=60, compiler_options=options), XOR(), 12, key, progress=False)
        for options in (None, {})
    ]
    leaves = [jax.tree_util.tree_leaves(r.state) for r in runs]
    for a, b in zip(*leaves):
        a = jax.random.key_data(a) if jnp.issubdtype(a.dtype, jax.dtypes.prng_key) else a
        b = jax.random.key_data(b) if jnp.issubdtype(b.dtype, jax.dtypes.prng_key) else b
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert runs[0].history.keys() == runs[1].history.keys()
    for name, got in runs[0].history.items():
        if name in ("generation_mean", "generation_std"):
            np.testing.assert_allclose(got, runs[1].history[name], rtol=1e-6, err_msg=name)
        else:
            np.testing.assert_array_equal(got, runs[1].history[name], err_msg=name)


@pytest.mark.slow
def test_cartpole_reaches_500_within_50_generations_at_pop_1000():
    from evotensor.problems.control import GymnaxProblem

    strategy = NEAT.from_mode("neat-python", 4, 2, population_size=1000, max_nodes=32, max_conns=64)
    result = evotensor.run(strategy, GymnaxProblem("CartPole-v1"), 50, jax.random.key(0), progress=False)
    assert result.best_fitness == 500.0


@pytest.mark.slow
def test_pop_10000_with_1000_connections_runs_a_generation():
    strategy = NEAT.from_mode("neat-python", 2, 1, population_size=10_000, max_nodes=200, max_conns=1000)
    result = evotensor.run(strategy, XOR(), 2, jax.random.key(0), chunk_size=1, progress=False)
    assert np.isfinite(result.best_fitness)
    assert check_genome(strategy.spec, result.state.population[0]) == []
