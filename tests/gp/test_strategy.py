import jax
import jax.numpy as jnp
import numpy as np
import pytest

from evotensor.core.evaluation import Evaluation
from evotensor.core.strategy import Strategy
from evotensor.gp.evaluate import fitness
from evotensor.gp.functions import FunctionSet
from evotensor.gp.strategy import GP, MUTATIONS, _split_counts, mutation_probs

FS = FunctionSet(("add", "sub", "mul", "div"))
POP, L = 64, 32
_x = np.linspace(-1, 1, 5, dtype=np.float32)
X = np.stack(np.meshgrid(_x, _x), -1).reshape(-1, 2)
Y = X[:, 0] * X[:, 1] + X[:, 0]


def _make(**kw):
    return GP(POP, FS, 2, L, **kw)


@pytest.fixture(scope="module")
def gp():
    return _make()


def _step(gp):
    def step(key, state):
        k1, k2 = jax.random.split(key)
        forest, state = gp.ask(k1, state)
        fit = fitness(forest, X, Y, FS, "mse", backend="jax")
        fit = jnp.where(jnp.isfinite(fit), fit, jnp.finfo(jnp.float32).max)
        state, metrics = gp.tell(k2, state, forest, Evaluation(fitness=fit))
        return state, (forest, fit, metrics)

    return step


@pytest.fixture(scope="module")
def history(gp):
    """12 jitted generations (one compile shared by the tests below)."""
    step = jax.jit(_step(gp))
    state = gp.init(jax.random.key(0))
    out = []
    for g in range(12):
        prev = state
        state, (forest, fit, metrics) = step(jax.random.key(100 + g), state)
        out.append((prev, state, forest, fit, {k: np.asarray(v) for k, v in metrics.items()}))
    return out


def test_is_a_strategy(gp):
    assert isinstance(gp, Strategy) and gp.population_size == POP
    assert gp.n_elite == 1  # ceil(0.01 * 64)


def test_every_generation_is_valid(history):
    for _, _, forest, _, _ in history:
        forest.check(FS, n_vars=2)
        assert forest.opcode.shape == (POP, L)


def test_first_ask_returns_the_initial_forest(gp, history):
    prev, _, forest, _, _ = history[0]
    np.testing.assert_array_equal(np.asarray(forest.opcode), np.asarray(prev.forest.opcode))


def test_elites_survive_unchanged(gp, history):
    for (_, told, _, _, _), (_, _, nxt, _, _) in zip(history[:-1], history[1:]):
        best = int(np.argmin(np.asarray(told.fitness)))
        for f in ("opcode", "value", "size", "output"):
            np.testing.assert_array_equal(
                np.asarray(getattr(nxt, f)[0]), np.asarray(getattr(told.forest, f)[best])
            )


def test_best_is_tracked_and_improves(history):
    best = [h[4]["best_fitness"] for h in history]
    assert all(b2 <= b1 for b1, b2 in zip(best, best[1:]))
    final = history[-1][1]
    assert float(final.best_fitness) == pytest.approx(min(float(np.min(h[3])) for h in history))
    assert float(fitness(final.best, X, Y, FS, backend="jax")) == pytest.approx(float(final.best_fitness))
    assert best[-1] < 0.5 * best[0]  # x0*x1 + x0 is easy: the error drops fast
    m = history[-1][4]
    assert set(m) >= {"best_fitness", "mean_length", "max_length", "crossover_rejected", "mutation_rejected"}
    assert m["max_length"] <= L


def test_offspring_differ_from_parents(history):
    _, told, _, _, _ = history[3]
    nxt = history[4][2]
    same = np.all(np.asarray(nxt.opcode) == np.asarray(told.forest.opcode), axis=1)
    assert same.mean() < 0.5


# Primitives that leave the device: pure_callback, io_callback, debug_callback, debug_print, ...
_HOST_WORDS = ("callback", "debug", "print", "outside", "host")


def _host_primitives(jaxpr) -> list[str]:
    """Names of host-callback primitives anywhere in ``jaxpr`` (walking cond/scan/while/pjit bodies)."""
    found = []
    for eqn in jaxpr.eqns:
        if any(w in eqn.primitive.name for w in _HOST_WORDS):
            found.append(eqn.primitive.name)
        for v in eqn.params.values():
            for j in v if isinstance(v, (list, tuple)) else [v]:
                inner = getattr(j, "jaxpr", j)  # ClosedJaxpr -> Jaxpr
                if hasattr(inner, "eqns"):
                    found += _host_primitives(inner)
    return found


def test_jitted_generation_has_no_host_callbacks(gp):
    state = gp.init(jax.random.key(0))
    closed = jax.make_jaxpr(_step(gp))(jax.random.key(1), state)
    assert _host_primitives(closed.jaxpr) == []

    # the checker does see callbacks (sanity check of the test itself)
    def noisy(x):
        jax.lax.cond(x > 0, lambda: jax.debug.print("{}", x), lambda: None)
        return jax.pure_callback(np.sin, jax.ShapeDtypeStruct((), jnp.float32), x)

    with_cb = jax.make_jaxpr(noisy)(1.0)
    assert _host_primitives(with_cb.jaxpr) != []


def test_nonfinite_fitness_never_reaches_state(gp):
    state = gp.init(jax.random.key(0))
    forest = state.forest  # what the first ask returns (not called here: eager ask compiles a lot)
    fit = jnp.full(POP, jnp.nan).at[3].set(2.0).at[5].set(jnp.inf)
    state, metrics = gp.tell(jax.random.key(2), state, forest, Evaluation(fitness=fit))
    assert np.all(np.isfinite(np.asarray(state.fitness)))
    assert float(state.best_fitness) == 2.0
    np.testing.assert_array_equal(np.asarray(state.best.opcode), np.asarray(forest.opcode[3]))


@pytest.mark.parametrize("selection", ["truncation", "rank", "roulette"])
def test_other_selections_trace(selection):
    gp = _make(selection=selection, crossover="leaf_biased", const_perturb=False)
    state = gp.init(jax.random.key(0))
    state = state.replace(generation=jnp.int32(1), fitness=jnp.arange(POP, dtype=jnp.float32))
    forest, _ = jax.eval_shape(lambda k, s: gp.ask(k, s), jax.random.key(1), state)
    assert forest.opcode.shape == (POP, L)


def test_mutation_probs_helper_and_bad_arguments():
    p = mutation_probs(subtree=1.0, hoist=0.5)
    assert p.shape == (len(MUTATIONS),) and p[0] == 1.0 and p[1] == 0.5 and p[2:].sum() == 0
    with pytest.raises(ValueError, match="unknown mutation"):
        mutation_probs(shrink=1.0)
    with pytest.raises(ValueError, match="selection"):
        _make(selection="best")
    with pytest.raises(ValueError, match="crossover"):
        _make(crossover="two_point")
    with pytest.raises(ValueError, match="elite_rate"):
        _make(elite_rate=1.0)
    with pytest.raises(ValueError, match="mutation_probs"):
        _make(mutation_probs=(1.0, 2.0))
    with pytest.raises(ValueError, match="mutation_rate"):
        _make(mutation_rate=1.5)
    with pytest.raises(ValueError, match="population_size"):
        GP(1, FS, 2, L)
    gp = _make()
    state = gp.init(jax.random.key(0))
    with pytest.raises(ValueError, match="fitness must have shape"):
        gp.tell(jax.random.key(2), state, state.forest, jnp.zeros(3))
    with pytest.raises(ValueError, match="forest must be"):
        gp.tell(jax.random.key(2), state, state.forest[:3], jnp.zeros(POP))


def test_mutation_counts_follow_rate_and_probs():
    assert _split_counts(10, (0.5, 0.25, 0.25)) == (5, 3, 2)  # ties of remainders: first wins
    assert sum(_split_counts(37, (0.35, 0.1, 0.1, 0.05, 0.1, 0.1, 0.1, 0.1))) == 37
    gp = GP(1000, FS, 2, L, mutation_rate=0.2, mutation_probs=mutation_probs(subtree=3.0, hoist=1.0))
    # 990 children (10 elites): 198 mutated, 3:1 between subtree and hoist
    assert gp.mutation_counts[:2] == (149, 49)
    assert sum(gp.mutation_counts) == 198 and sum(gp.mutation_counts[2:]) == 0


def test_mutated_share_matches_mutation_rate(history):
    # with crossover_rate 0 every child is a copy of its parent unless mutated (or an elite)
    gp = _make(mutation_rate=0.5, mutation_probs=mutation_probs(single_point=1.0))
    gp_params = gp.default_params().replace(crossover_rate=jnp.float32(0.0))
    _, told, _, _, _ = history[2]
    forest, _ = jax.jit(gp.ask)(jax.random.key(5), told, gp_params)
    # a single-point rewrite keeps the shape; a changed tree differs from every parent in the population
    parents = {
        tuple(np.asarray(told.forest.opcode[i])) + tuple(np.asarray(told.forest.value[i])) for i in range(POP)
    }
    kids = [tuple(np.asarray(forest.opcode[i])) + tuple(np.asarray(forest.value[i])) for i in range(1, POP)]
    changed = sum(k not in parents for k in kids)
    assert 0.3 * 63 <= changed <= 0.5 * 63 + 1  # 32 rewritten; a few rewrites hit a same-valued node


@pytest.mark.slow
def test_pagie1_acceptance_beats_the_evogp_table():
    """Pagie-1, pop 5000, 100 generations (the sr-pagie task): the EvoGP paper reports training MSE
    0.009-0.034 for pop 5000; we ask for better than 0.02 on each of two seeds (measured: ~0.002).

    Run it with ``EVOTENSOR_TEST_DEFAULT_XLA=1``: the suite's unoptimized XLA (tests/conftest.py)
    makes this long run about 10x slower (~2 min with optimizations on the 2-core box)."""
    from evotensor.core.run import run
    from evotensor.tasks import get_task

    for seed in range(2):
        task = get_task("sr-pagie").build({"seed": seed})
        res = run(task.strategy, task.problem, task.generations, jax.random.key(seed), decoder=task.decoder)
        assert res.best_fitness < 0.02
        res.best_genotype.check(task.problem.function_set, n_vars=2)
