"""OMG-MEGA's gradient operator emitter: the branch against its formula, normalisation, the
intermediate solutions, and that the gradients pay (it covers more of the linear-projection sphere
than MAP-Elites with Gaussian variation at the same budget)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tests.bad_input_table import refusal_test

import evotensor
from evotensor.core import rng
from evotensor.core.evaluation import Evaluation
from evotensor.problems.qd import LinearProjection, RastriginProj
from evotensor.qd import GaussianEmitter, GradientOperatorEmitter, GridArchive, MAPElites, problem_jacobian
from evotensor.qd.emitters import omg_branch

DIMS = 6
PROBLEM = LinearProjection(DIMS, "sphere")
KEY = jax.random.key(0)


def archive(dims=(20, 20)):
    return GridArchive(solution_dim=DIMS, dims=dims, ranges=PROBLEM.descriptor_ranges)


def emitter(**kw):
    options = {"sigma_g": 0.5, "jacobian": problem_jacobian(PROBLEM), "batch_size": 8, **kw}
    return GradientOperatorEmitter(np.zeros(DIMS), **options)


def test_branch_is_the_coefficient_mix_of_the_gradients():
    g = np.random.default_rng(0)
    y = g.normal(size=(16, DIMS)).astype(np.float32)
    jac = g.normal(size=(16, 3, DIMS)).astype(np.float32)
    got = np.asarray(omg_branch(KEY, jnp.asarray(y), jnp.asarray(jac), 2.0))
    c = 2.0 * np.asarray(rng.normal(KEY, (16, 3), jnp.float32), np.float64)
    c[:, 0] = np.abs(c[:, 0])  # the objective is only ever climbed
    want = y + np.einsum("nk,nkd->nd", c, jac.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    only_objective = np.asarray(
        omg_branch(KEY, jnp.asarray(y), jnp.asarray(jac), 2.0, measure_gradients=False)
    )
    np.testing.assert_allclose(only_objective, y + 2.0 * jac[:, 0], rtol=1e-6)


def test_gradients_are_normalised_and_nonfinite_entries_dropped():
    def jacobian(x):
        return jnp.stack([3.0 * x, jnp.zeros_like(x), jnp.full_like(x, jnp.nan).at[0].set(2.0)])

    e = emitter(jacobian=jacobian)
    y = jnp.asarray(np.random.default_rng(1).normal(size=(5, DIMS)), jnp.float32)
    jac = np.asarray(e.gradients(y))
    norms = np.linalg.norm(jac, axis=-1)
    np.testing.assert_allclose(norms[:, 0], 1.0, rtol=1e-5)
    assert np.all(norms[:, 1] == 0)  # a zero gradient stays zero (epsilon)
    np.testing.assert_allclose(jac[:, 2], np.eye(DIMS)[0][None].repeat(5, 0), rtol=1e-6)
    raw = np.asarray(emitter(jacobian=jacobian, normalize_grad=False).gradients(y))
    np.testing.assert_allclose(raw[:, 0], 3.0 * np.asarray(y), rtol=1e-6)


def test_children_step_from_elites_along_their_gradients_with_a_climbing_objective():
    e = emitter(sigma_g=1.0, batch_size=64)
    me = MAPElites(archive(), [e])
    # fill the archive with a few random points
    state = me.init(KEY)
    x = jnp.asarray(np.random.default_rng(2).uniform(-3, 3, (64, DIMS)), jnp.float32)
    ev = PROBLEM.evaluate(KEY, x)
    state, _ = me.tell(KEY, state, x, Evaluation(fitness=-ev.fitness, descriptor=ev.descriptor))
    children, _ = jax.jit(me.ask)(jax.random.key(5), state)
    elites = np.asarray(state.archive.solutions)[np.asarray(state.archive.occupied)]
    jacobian = jax.vmap(problem_jacobian(PROBLEM))
    for child in np.asarray(children):
        # some elite y and coefficients c with child = y + J(y)^T c, c_0 >= 0
        found = False
        for y in elites:
            jac = np.asarray(jacobian(jnp.asarray(y[None])))[0].astype(np.float64)
            jac /= np.linalg.norm(jac, axis=-1, keepdims=True) + 1e-8
            c, *_ = np.linalg.lstsq(jac.T, child - y, rcond=None)
            if np.allclose(jac.T @ c, child - y, atol=1e-4):
                assert c[0] >= -1e-4
                found = True
                break
        assert found


def test_intermediate_solutions_use_sigma_and_the_line():
    e = emitter(sigma=0.3, line_sigma=0.5, batch_size=4)
    assert e.sigma == 0.3 and e.line_sigma == 0.5
    me = MAPElites(archive(), [e])
    state = me.init(KEY)
    # empty archive: the parents are x0, and the children differ from x0's plain branches
    plain = MAPElites(archive(), [emitter(batch_size=4)])
    a, _ = me.ask(KEY, state)
    b, _ = plain.ask(KEY, plain.init(KEY))
    assert not np.allclose(a, b)
    first = np.random.default_rng(3).uniform(-1, 1, (4, DIMS)).astype(np.float32)
    seeded = MAPElites(archive(), [emitter(batch_size=4, initial_solutions=first)])
    c, _ = seeded.ask(KEY, seeded.init(KEY))
    np.testing.assert_array_equal(c, first)


def test_it_covers_more_than_gaussian_variation_and_repeats():
    problem = LinearProjection(20, "sphere")
    coverage = {}
    for name in ("omg", "gaussian"):
        grid = GridArchive(solution_dim=20, dims=(50, 50), ranges=problem.descriptor_ranges)
        if name == "omg":
            e = GradientOperatorEmitter(
                np.zeros(20), sigma_g=1.0, jacobian=problem_jacobian(problem), batch_size=32
            )
        else:
            e = GaussianEmitter(0.5, np.zeros(20), batch_size=32)
        runs = [
            evotensor.run(MAPElites(grid, [e]), problem, 60, KEY, progress=False)
            for _ in range(2 if name == "omg" else 1)
        ]
        coverage[name] = float(grid.stats(runs[0].state.archive)["coverage"])
        if name == "omg":
            assert np.array_equal(runs[0].state.archive.objective, runs[1].state.archive.objective)
    assert coverage["omg"] > 1.5 * coverage["gaussian"] > 0


def test_rastrigin_proj_children_stay_in_bounds():
    problem = RastriginProj(10)
    e = GradientOperatorEmitter(
        np.zeros(10),
        sigma_g=math.sqrt(10),
        jacobian=problem_jacobian(problem),
        batch_size=16,
        bounds=problem.bounds,
    )
    grid = GridArchive(solution_dim=10, dims=(20, 20), ranges=problem.descriptor_ranges)
    result = evotensor.run(MAPElites(grid, [e]), problem, 20, KEY, progress=False)
    solutions = np.asarray(result.state.archive.solutions)[np.asarray(result.state.archive.occupied)]
    assert len(solutions) > 10 and np.all(np.abs(solutions) <= 5.12 + 1e-6)


def test_an_archive_of_other_measures_is_refused():
    one_measure = GridArchive(solution_dim=DIMS, dims=(4,), ranges=[(0, 1)])
    with pytest.raises(Exception, match="measure"):
        emitter().init(KEY, one_measure)


CASES = []
for value in [0.0, -1.0, math.nan, math.inf, "1", None]:
    CASES.append(("omg", emitter, "sigma_g", {"sigma_g": value}))
for value in [-0.1, math.nan, "0"]:
    CASES.append(("omg", emitter, "sigma", {"sigma": value}))
    CASES.append(("omg", emitter, "line_sigma", {"line_sigma": value}))
for value in [0.0, -1e-8, math.nan]:
    CASES.append(("omg", emitter, "epsilon", {"epsilon": value}))
for name in ("measure_gradients", "normalize_grad"):
    CASES.append(("omg", emitter, name, {name: "yes"}))
for bad in (
    3,
    lambda x: jnp.zeros((3, DIMS + 1)),
    lambda x: jnp.zeros((1, DIMS)),
    lambda x: x,
    lambda x: x[7],
):
    CASES.append(("omg", emitter, "jacobian", {"jacobian": bad}))
CASES += [
    ("omg", emitter, "batch_size", {"batch_size": 0}),
    ("omg", emitter, "bounds", {"bounds": (1.0, 0.0)}),
    ("omg", emitter, "initial_solutions", {"initial_solutions": np.zeros((3, DIMS))}),
]

test_bad_argument_is_refused_naming_it = refusal_test(CASES)
