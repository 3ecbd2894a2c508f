"""Multi-task problems: the arm against a homogeneous-transform reference, the function wrapper."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from evotensor.core.checks import ArgumentError
from evotensor.problems.multi_task import MultiTaskArm, MultiTaskFunction, TaskBatch


def reference_arm_fitness(angles: np.ndarray, task: np.ndarray) -> float:
    """pymap_elites' multi-task arm as its kinematic chain states it, in float64: a 4x4 transform per
    joint (rotate by the command, then move along the link); distance of the tip to (0.5, 0.5)."""
    n = len(angles)
    command = (angles - 0.5) * (task[0] / n) * math.pi * 2
    frame = np.eye(3)
    for turn in command:
        c, s = math.cos(turn), math.sin(turn)
        frame = frame @ np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
        frame = frame @ np.array([[1.0, 0.0, task[1] / n], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    tip = frame @ np.array([0.0, 0.0, 1.0])
    return -math.hypot(tip[0] - 0.5, tip[1] - 0.5)


def _batch(x, params):
    x, params = jnp.asarray(x, jnp.float32), jnp.asarray(params, jnp.float32)
    return TaskBatch(solutions=x, task=jnp.arange(x.shape[0], dtype=jnp.int32), params=params)


@pytest.mark.parametrize("joints", [1, 3, 10])
def test_arm_equals_the_kinematic_chain(joints):
    rng = np.random.default_rng(joints)
    x = rng.uniform(0, 1, (64, joints))
    params = rng.uniform(0, 1, (64, 2))
    fitness = np.asarray(MultiTaskArm(joints).evaluate(jax.random.key(0), _batch(x, params)).fitness)
    want = [reference_arm_fitness(a, t) for a, t in zip(x, params, strict=True)]
    np.testing.assert_allclose(fitness, want, atol=2e-6)


def test_arm_straight_and_clipped():
    problem = MultiTaskArm(4)
    x = np.array([[0.5] * 4, [1.7, 0.5, 0.5, -3.0], [1.0, 0.5, 0.5, 0.0]])
    params = np.array([[0.3, 0.8], [1.0, 0.6], [1.0, 0.6]])
    fitness = np.asarray(problem.evaluate(jax.random.key(0), _batch(x, params)).fitness)
    # all angles 0.5: the arm lies along +x, its tip at (L, 0)
    assert fitness[0] == pytest.approx(-math.hypot(0.8 - 0.5, 0.5), abs=1e-6)
    # genes outside [0, 1] act as the nearest bound
    assert fitness[1] == fitness[2]


def test_function_wrapper_batched_equals_per_individual():
    def batched(x, p):
        return -jnp.sum((x - p[:, :1]) ** 2, axis=1)

    def single(x, p):
        return -jnp.sum((x - p[0]) ** 2)

    rng = np.random.default_rng(0)
    batch = _batch(rng.uniform(0, 1, (8, 3)), rng.uniform(0, 1, (8, 1)))
    a = MultiTaskFunction(batched).evaluate(jax.random.key(0), batch).fitness
    b = MultiTaskFunction(single, per_individual=True).evaluate(jax.random.key(0), batch).fitness
    np.testing.assert_allclose(a, b, rtol=1e-6)
    assert a.shape == (8,) and a.dtype == jnp.float32


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: MultiTaskFunction(3), "fn must be callable"),
        (lambda: MultiTaskFunction(lambda x, p: x, maximize="yes"), "maximize must be a bool"),
        (lambda: MultiTaskArm(0), "num_joints"),
        (lambda: MultiTaskArm(3).evaluate(jax.random.key(0), jnp.zeros((4, 3))), "TaskBatch"),
        (
            lambda: MultiTaskArm(3).evaluate(jax.random.key(0), _batch(np.zeros((4, 2)), np.zeros((4, 2)))),
            r"solutions must be \[B, 3\]",
        ),
        (
            lambda: MultiTaskArm(3).evaluate(jax.random.key(0), _batch(np.zeros((4, 3)), np.zeros((4, 3)))),
            r"params must be \[B, 2\]",
        ),
        (
            lambda: MultiTaskFunction(lambda x, p: x).evaluate(
                jax.random.key(0), _batch(np.zeros((4, 3)), np.zeros((4, 1)))
            ),
            r"one fitness per row, shape \[4\]",
        ),
    ],
)
def test_bad_input_names_the_argument(call, message):
    with pytest.raises(ArgumentError, match=message):
        call()
