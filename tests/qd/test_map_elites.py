"""MAP-Elites (evotensor.qd.map_elites) through the run loop, and the variation emitters."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import evotensor
from evotensor.core.evaluation import Evaluation, to_minimization
from evotensor.core.run import Loop, generation_keys
from evotensor.qd import GaussianEmitter, GridArchive, IsoLineEmitter, MAPElites


@dataclasses.dataclass(frozen=True)
class Bowl:
    """A tiny QD problem: fitness -|x|^2 (maximized), descriptor = the first two coordinates.
    Rows whose first coordinate is above ``nan_above`` score NaN."""

    nan_above: float = np.inf
    maximize: bool = True

    def evaluate(self, key, x):
        fitness = -jnp.sum(x**2, axis=1)
        fitness = jnp.where(x[:, 0] > self.nan_above, jnp.nan, fitness)
        return Evaluation(fitness=fitness, descriptor=x[:, :2])


def make(dims=4, emitters=None, **kwargs):
    archive = GridArchive(solution_dim=dims, dims=(10, 10), ranges=[(-1, 1), (-1, 1)], qd_score_offset=-10.0)
    emitters = emitters or [IsoLineEmitter(x0=np.zeros(dims), iso_sigma=0.2, line_sigma=0.2, batch_size=32)]
    return MAPElites(archive, emitters, **kwargs)


def test_run_fills_the_archive_and_qd_score_never_drops():
    me = make()
    result = evotensor.run(me, Bowl(), 60, jax.random.key(0), progress=False)
    coverage, qd = result.history["coverage"], result.history["qd_score"]
    assert coverage[-1] > 0.8  # iso+line spreads over the 10x10 grid of [-1, 1]^2
    assert np.all(np.diff(qd) >= 0)  # elites only improve and new cells add objective + 10 > 0
    state = result.state.archive
    # every elite lies in its own cell and is the best seen there: fitness matches its solution
    np.testing.assert_allclose(
        state.objective[state.occupied],
        -np.sum(np.asarray(state.solutions)[np.asarray(state.occupied)] ** 2, 1),
        rtol=1e-6,
    )
    assert np.all(
        np.asarray(me.archive.index_of(state.measures))[np.asarray(state.occupied)]
        == np.flatnonzero(state.occupied)
    )
    assert result.best_fitness == pytest.approx(float(state.objective[state.occupied].max()))


def test_hand_loop_with_the_run_schedule_reproduces_run():
    me, problem, key = make(), Bowl(), jax.random.key(3)
    result = evotensor.run(me, problem, 7, key, chunk_size=3, progress=False)
    loop = Loop(me, problem)
    carry, loop_key = loop.init(key, None)
    state = carry.strategy_state

    @jax.jit
    def step(state, gen):
        ask_key, eval_key, tell_key = generation_keys(loop_key, gen)
        x, state = me.ask(ask_key, state)
        evaluation = to_minimization(problem.evaluate(eval_key, x), True, keep_nonfinite=True)
        return me.tell(tell_key, state, x, evaluation)[0]

    for gen in range(7):
        state = step(state, gen)
    np.testing.assert_array_equal(state.archive.occupied, result.state.archive.occupied)
    for a, b in zip(jax.tree_util.tree_leaves(state), jax.tree_util.tree_leaves(result.state), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)  # one jitted step vs the scanned chunk


def test_nan_fitness_never_enters_the_archive():
    # iso+line noise pushes some rows above 0.3: they score NaN and must be dropped, not stored
    result = evotensor.run(make(), Bowl(nan_above=0.3), 30, jax.random.key(1), progress=False)
    state = result.state.archive
    assert int(np.sum(result.history["nonfinite"])) > 0
    assert np.all(np.isfinite(state.objective))
    assert np.all(np.asarray(state.measures)[np.asarray(state.occupied)][:, 0] <= 0.3)


def test_result_archive_keeps_the_best_while_cma_mae_thresholds_anneal():
    dims = 3
    search = GridArchive(
        solution_dim=dims, dims=(5, 5), ranges=[(-1, 1), (-1, 1)], learning_rate=0.5, threshold_min=-5.0
    )
    result_archive = GridArchive(solution_dim=dims, dims=(5, 5), ranges=[(-1, 1), (-1, 1)])
    me = MAPElites(
        search, [GaussianEmitter(0.1, np.zeros(dims), batch_size=16)], result_archive=result_archive
    )
    result = evotensor.run(me, Bowl(), 20, jax.random.key(2), progress=False)
    best, soft = result.state.result, result.state.archive
    # the result archive holds at least the search archive's objective in every cell it shares
    shared = np.asarray(soft.occupied)
    assert np.all(np.asarray(best.occupied)[shared])
    assert np.all(np.asarray(best.objective)[shared] >= np.asarray(soft.objective)[shared])
    assert float(result.history["qd_score"][-1]) == pytest.approx(
        float(result_archive.stats(best)["qd_score"])
    )


def test_pytree_solution_template_and_checks():
    template = {"a": jnp.zeros(2), "b": jnp.zeros((1, 2))}
    me = make(solution=template)
    x, _ = me.ask(jax.random.key(0), me.init(jax.random.key(0)))
    assert x["a"].shape == (32, 2) and x["b"].shape == (32, 1, 2)
    with pytest.raises(ValueError, match="descriptor"):
        me.tell(jax.random.key(0), me.init(jax.random.key(0)), x, Evaluation(fitness=jnp.zeros(32)))
    wrong = Evaluation(fitness=jnp.zeros(32), descriptor=jnp.zeros((32, 3)))
    with pytest.raises(ValueError, match=r"evaluation.descriptor \[32, 2\].*got \[32\] and \[32, 3\]"):
        me.tell(jax.random.key(0), me.init(jax.random.key(0)), x, wrong)
    with pytest.raises(ValueError, match="solution has 3 elements"):
        make(solution=jnp.zeros(3))
    with pytest.raises(ValueError, match="emitters"):
        make().__class__(make().archive, [])
    with pytest.raises(ValueError, match="x0 has 5 elements"):
        make(emitters=[GaussianEmitter(0.1, np.zeros(5))]).init(jax.random.key(0))


def test_populations_concatenate_emitters_in_order():
    me = make(
        emitters=[
            GaussianEmitter(0.0, np.full(4, 0.5), batch_size=3),
            GaussianEmitter(0.0, np.full(4, -0.5), batch_size=5),
        ]
    )
    assert me.population_size == 8
    x, _ = me.ask(jax.random.key(0), me.init(jax.random.key(0)))
    np.testing.assert_array_equal(x[:3], 0.5)
    np.testing.assert_array_equal(x[3:], -0.5)


# ---- emitters ------------------------------------------------------------------------------------


def one_elite_archive(dims, elite):
    archive = GridArchive(solution_dim=dims, dims=(4,), ranges=[(0, 1)])
    state, _ = archive.add(archive.init(), np.asarray([elite], np.float32), np.ones(1), np.array([[0.5]]))
    return archive, state


def test_gaussian_emitter_draws_around_x0_then_around_elites():
    archive = GridArchive(solution_dim=3, dims=(4,), ranges=[(0, 1)])
    emitter = GaussianEmitter(np.array([0.1, 0.2, 0.3]), np.array([1.0, 2.0, 3.0]), batch_size=20000)
    x, _ = emitter.ask(jax.random.key(0), emitter.init(jax.random.key(0), archive), archive, archive.init())
    np.testing.assert_allclose(x.mean(0), [1, 2, 3], atol=0.01)
    np.testing.assert_allclose(x.std(0), [0.1, 0.2, 0.3], rtol=0.03)
    archive, state = one_elite_archive(3, [-5.0, 0.0, 5.0])
    x, _ = emitter.ask(jax.random.key(1), (), archive, state)
    np.testing.assert_allclose(x.mean(0), [-5, 0, 5], atol=0.01)
    clipped = GaussianEmitter(1.0, np.zeros(3), batch_size=500, bounds=(-0.5, [0.5, 0.5, 0.1]))
    x, _ = clipped.ask(jax.random.key(2), (), archive, archive.init())
    assert float(x.min()) == -0.5 and float(x[:, 2].max()) == pytest.approx(0.1)


def test_initial_solutions_are_the_first_batch_only():
    archive = GridArchive(solution_dim=2, dims=(4,), ranges=[(0, 1)])
    initial = np.arange(8, dtype=np.float32).reshape(4, 2)
    emitter = IsoLineEmitter(np.zeros(2), batch_size=4, initial_solutions=initial, bounds=(0.0, 6.0))
    x, _ = emitter.ask(jax.random.key(0), (), archive, archive.init())
    np.testing.assert_array_equal(x, np.minimum(initial, 6.0))
    archive, state = one_elite_archive(2, [3.0, 3.0])
    x, _ = emitter.ask(jax.random.key(0), (), archive, state)
    assert np.all(np.abs(np.asarray(x) - 3.0) < 0.1)
    with pytest.raises(ValueError, match="initial_solutions must have shape"):
        IsoLineEmitter(np.zeros(2), batch_size=3, initial_solutions=initial)


def test_iso_line_steps_along_the_line_between_two_elites():
    archive = GridArchive(solution_dim=2, dims=(2,), ranges=[(0, 1)])
    elites = np.array([[0.0, 0.0], [4.0, 2.0]], np.float32)
    state, _ = archive.add(archive.init(), elites, np.ones(2), np.array([[0.2], [0.8]]))
    emitter = IsoLineEmitter(np.zeros(2), iso_sigma=1e-6, line_sigma=0.5, batch_size=4000)
    x = np.asarray(emitter.ask(jax.random.key(0), (), archive, state)[0])
    # each child is x_i + t (x_j - x_i): on the line through the two elites (up to the iso noise)
    direction = np.array([2.0, -4.0]) / np.sqrt(20)  # normal to (4, 2)
    assert np.max(np.abs(x @ direction - 0.0)) < 1e-4
    # the line factor t ~ N(0, line_sigma) where the parents differ (about half of the pairs)
    moved = np.linalg.norm(x - elites[0], axis=1) > 1e-3
    moved &= np.linalg.norm(x - elites[1], axis=1) > 1e-3
    assert 0.35 < moved.mean() < 0.65
    # position along the line: t (x_i = first elite) or 1 - t (x_i = second), t ~ N(0, 0.5^2), so
    # an even mixture of N(0, 0.25) and N(1, 0.25): mean 0.5, variance 0.25 + 0.25
    s = x[moved] @ np.array([4.0, 2.0]) / 20.0
    assert np.mean(s) == pytest.approx(0.5, abs=0.05)
    assert np.std(s) == pytest.approx(np.sqrt(0.5), rel=0.05)


def test_emitter_argument_errors():
    with pytest.raises(ValueError, match="sigma must be a scalar or \\[3\\]"):
        GaussianEmitter(np.ones(2), np.zeros(3))
    with pytest.raises(ValueError, match="iso_sigma"):
        IsoLineEmitter(np.zeros(3), iso_sigma=0.0)
    with pytest.raises(ValueError, match="x0"):
        IsoLineEmitter(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="bounds"):
        IsoLineEmitter(np.zeros(2), bounds=(1.0, 0.0))
    with pytest.raises(TypeError, match="batch_size"):
        IsoLineEmitter(np.zeros(2), batch_size=2.5)


@dataclasses.dataclass(frozen=True)
class BowlWithInfo(Bowl):
    """Bowl plus a per-individual extra (the squared norm) in ``info``."""

    def evaluate(self, key, x):
        return Evaluation(
            fitness=-jnp.sum(x**2, axis=1), descriptor=x[:, :2], info={"norm2": jnp.sum(x**2, axis=1)}
        )


def test_extra_fields_come_from_evaluation_info():
    archive = GridArchive(
        solution_dim=4, dims=(6, 6), ranges=[(-1, 1), (-1, 1)], extra_fields={"norm2": ((), jnp.float32)}
    )
    me = MAPElites(archive, [GaussianEmitter(0.3, np.zeros(4), batch_size=32)])
    state = evotensor.run(me, BowlWithInfo(), 10, jax.random.key(0), progress=False).state.archive
    occupied = np.asarray(state.occupied)
    assert occupied.sum() > 3
    np.testing.assert_allclose(
        state.fields["norm2"][occupied], -np.asarray(state.objective)[occupied], rtol=1e-6
    )
    with pytest.raises(ValueError, match="norm2"):
        evotensor.run(me, Bowl(), 2, jax.random.key(0), progress=False)


def test_run_many_equals_separate_runs():
    me, keys = make(), jax.random.split(jax.random.key(5), 2)
    many = evotensor.run_many(me, Bowl(), 6, keys)
    for i in range(2):
        one = evotensor.run(me, Bowl(), 6, keys[i], progress=False)
        np.testing.assert_array_equal(many.state.archive.occupied[i], one.state.archive.occupied)
        np.testing.assert_allclose(many.state.archive.objective[i], one.state.archive.objective, rtol=1e-6)
        np.testing.assert_allclose(many.history["qd_score"][i], one.history["qd_score"], rtol=1e-6)
