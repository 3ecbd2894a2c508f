"""The gradient arborescence emitter (CMA-MEGA): its branches, its step on ``theta`` against a NumPy
transcription of pyribs' rule, restarts, and that it uses the gradients (it covers far more of the
linear-projection sphere than CMA-ME in the same generations)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import evotensor
from evotensor.core.checks import ArgumentError
from evotensor.core.evaluation import Evaluation
from evotensor.problems.qd import LinearProjection
from evotensor.qd import CMAESEmitter, GradientArborescenceEmitter, GridArchive, MAPElites, problem_jacobian

DIMS = 6
PROBLEM = LinearProjection(DIMS, "sphere")


def archive():
    return GridArchive(solution_dim=DIMS, dims=(20, 20), ranges=PROBLEM.descriptor_ranges)


def finite_difference_jacobian(x, h=1e-5):
    """``[3, n]`` central differences (float64) of (objective, measure 0, measure 1)."""

    def values(v):
        worst = DIMS * (-5.12 - 2.048) ** 2
        objective = (np.sum((v - 2.048) ** 2) - worst) / (0 - worst) * 100
        folded = np.where((v < -5.12) | (v > 5.12), 5.12 / v, v)
        return np.array([objective, folded[: DIMS // 2].sum(), folded[DIMS // 2 :].sum()])

    return np.stack([(values(x + h * e) - values(x - h * e)) / (2 * h) for e in np.eye(len(x))], axis=1)


def test_problem_jacobian_is_the_derivative_of_what_the_archive_stores():
    x = np.random.default_rng(0).uniform(-3, 3, DIMS)
    got = np.asarray(problem_jacobian(PROBLEM)(jnp.asarray(x, jnp.float32)))
    np.testing.assert_allclose(got, finite_difference_jacobian(x), rtol=1e-3, atol=1e-4)


_COMPILED: dict[int, tuple] = {}


def one_generation(emitter, me, state, key):
    if id(me) not in _COMPILED:  # jitted once per MAP-Elites object: eager dispatch is slow
        _COMPILED[id(me)] = (me, jax.jit(me.ask), jax.jit(me.tell))
    _, ask, tell = _COMPILED[id(me)]
    x, state = ask(key, state)
    evaluation = PROBLEM.evaluate(None, x)
    # the run loop hands a maximizing problem's fitness over negated
    told = Evaluation(fitness=-evaluation.fitness, descriptor=evaluation.descriptor)
    asked = state.emitters[0]
    state, _ = tell(jax.random.key(99), state, x, told)
    return state, asked, np.asarray(x), np.asarray(evaluation.fitness)


def test_branches_and_the_step_follow_pyribs_rule():
    emitter = GradientArborescenceEmitter(
        np.full(DIMS, 0.3), 2.0, problem_jacobian(PROBLEM), lr=0.5, batch_size=8
    )
    me = MAPElites(archive(), [emitter])
    state = me.init(jax.random.key(0))
    adam_m, adam_v, steps = np.zeros(DIMS), np.zeros(DIMS), 0
    for t in range(1, 4):
        before = state
        state, asked, x, objective = one_generation(emitter, me, state, jax.random.key(t))
        theta = np.asarray(asked.theta, np.float64)
        np.testing.assert_array_equal(x[0], asked.theta)
        # branches: theta + c @ normalised Jacobian
        J = finite_difference_jacobian(theta)
        J = J / (np.linalg.norm(J, axis=1, keepdims=True) + 1e-8)
        np.testing.assert_allclose(
            x[1:], theta + np.asarray(asked.drawn, np.float64) @ J, rtol=1e-4, atol=1e-4
        )
        # the ranking the CMA-ES used, re-derived: added branches first (2imp), by improvement
        _, info = me.archive.add(
            before.archive, x, objective, np.asarray(PROBLEM.evaluate(None, x).descriptor)
        )
        status, value = np.asarray(info.status)[1:], np.asarray(info.value)[1:]
        order = sorted(range(8), key=lambda i: (-status[i], -value[i], i))
        k = int(np.sum(status > 0))
        assert int(state.emitters[0].coefficients.restarts) == 0, "no restart expected in three steps"
        if k == 0:
            np.testing.assert_array_equal(state.emitters[0].theta, asked.theta)
            continue
        steps += 1
        w = np.log(k + 0.5) - np.log(np.arange(1, k + 1))
        mean = (w / w.sum()) @ x[1:][order[:k]].astype(np.float64)
        g = -(mean - theta)  # optax.adam descends on the negated step
        adam_m = 0.9 * adam_m + 0.1 * g
        adam_v = 0.999 * adam_v + 0.001 * g * g
        m_hat, v_hat = adam_m / (1 - 0.9**t), adam_v / (1 - 0.999**t)
        expected = theta - 0.5 * m_hat / (np.sqrt(v_hat) + 1e-8)
        np.testing.assert_allclose(state.emitters[0].theta, expected, rtol=1e-4, atol=1e-5)
    assert steps == 3  # every step had parents: the rule was checked, not skipped


def test_a_restart_takes_an_elite_and_resets_the_coefficient_search():
    emitter = GradientArborescenceEmitter(
        np.zeros(DIMS), 2.0, problem_jacobian(PROBLEM), lr=0.5, batch_size=8, restart_rule=1
    )
    me = MAPElites(archive(), [emitter])
    state, _, _, _ = one_generation(emitter, me, me.init(jax.random.key(0)), jax.random.key(1))
    s = state.emitters[0]
    assert int(s.coefficients.restarts) == 1 and int(s.coefficients.iterations) == 1
    np.testing.assert_array_equal(s.coefficients.cma.mean, np.zeros(3))
    assert float(s.coefficients.cma.sigma) == 2.0
    elites = np.asarray(state.archive.solutions)[np.asarray(state.archive.occupied)]
    assert any(np.array_equal(s.theta, e) for e in elites)
    assert all(np.all(np.asarray(leaf) == 0) for leaf in jax.tree_util.tree_leaves(s.optimizer)[1:])


def test_it_climbs_the_gradients_faster_than_cma_me():
    problem = LinearProjection(20, "sphere")
    coverage = {}
    for name in ("mega", "cma-me"):
        grid = GridArchive(solution_dim=20, dims=(50, 50), ranges=problem.descriptor_ranges)
        if name == "mega":
            emitter = GradientArborescenceEmitter(
                np.zeros(20), 10.0, problem_jacobian(problem), lr=1.0, batch_size=20
            )
        else:
            emitter = CMAESEmitter(np.zeros(20), 0.5, batch_size=21)
        result = evotensor.run(MAPElites(grid, [emitter]), problem, 60, jax.random.key(0), progress=False)
        coverage[name] = float(grid.stats(result.state.archive)["coverage"])
    assert coverage["mega"] > 1.5 * coverage["cma-me"] > 0


def test_bad_jacobians_and_archives_are_refused():
    # the Jacobian's shape is read at construction: D = rows - 1 measures, n columns
    for bad in (
        lambda x: jnp.zeros((3, DIMS + 1)),
        lambda x: jnp.zeros((1, DIMS)),
        lambda x: x,
        lambda x: x @ x.T,
    ):
        with pytest.raises(ArgumentError, match="jacobian"):
            GradientArborescenceEmitter(np.zeros(DIMS), 1.0, bad, batch_size=4)
    one_measure_jacobian = GradientArborescenceEmitter(np.zeros(DIMS), 1.0, lambda x: jnp.zeros((2, DIMS)))
    assert one_measure_jacobian.measure_dim == 1
    with pytest.raises(ArgumentError, match="measure"):
        MAPElites(archive(), [one_measure_jacobian]).init(jax.random.key(0))
    with pytest.raises(ArgumentError, match="evaluate"):
        problem_jacobian(object())
    one_measure = GridArchive(solution_dim=DIMS, dims=(4,), ranges=[(0, 1)])
    emitter = GradientArborescenceEmitter(np.zeros(DIMS), 1.0, problem_jacobian(PROBLEM), batch_size=4)
    with pytest.raises(ArgumentError, match="measure"):
        emitter.init(jax.random.key(0), one_measure)
    custom = GradientArborescenceEmitter(
        np.zeros(DIMS), 1.0, problem_jacobian(PROBLEM), optimizer=optax.sgd(0.1), batch_size=4
    )
    assert custom.batch_size == 5 and custom.num_branches == 4


def test_nonfinite_gradients_and_fitness_never_reach_the_state():
    class NaNBowl:
        """The sphere, NaN wherever the first coordinate is positive."""

        maximize = True

        def evaluate(self, key, x):
            e = PROBLEM.evaluate(key, x)
            return Evaluation(fitness=jnp.where(x[:, 0] > 0, jnp.nan, e.fitness), descriptor=e.descriptor)

    for jacobian in (problem_jacobian(NaNBowl()), lambda x: jnp.full((3, DIMS), jnp.nan)):
        emitter = GradientArborescenceEmitter(
            np.zeros(DIMS), 1.0, jacobian, batch_size=6, restart_rule="basic", selection_rule="mu"
        )
        me = MAPElites(archive(), [emitter])
        result = evotensor.run(me, NaNBowl(), 6, jax.random.key(0), progress=False)
        s = result.state.emitters[0]
        c = s.coefficients.cma  # (its best_fitness starts at +inf by design: not used here)
        for leaf in jax.tree_util.tree_leaves((s.theta, s.optimizer, c.mean, c.sigma, c.C, c.B, c.D)):
            assert np.all(np.isfinite(np.asarray(leaf)))
        stored = np.asarray(result.state.archive.objective)[np.asarray(result.state.archive.occupied)]
        assert np.all(np.isfinite(stored))
