"""Bad input to every problem constructor of :mod:`evotensor.problems`, as one table.

Each row builds one problem with one bad argument and must get an
:class:`~evotensor.core.checks.ArgumentError` whose message names that argument (an unknown
function, task or environment name must also list the valid ones). Construction only: every bad
argument is refused before anything compiles, so the table is cheap. A hypothesis fuzz feeds
``FunctionFit`` data with NaN, inf and float32 overflows.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from tests.bad_input_table import refusal_test

from evotensor.core.checks import ArgumentError
from evotensor.problems import ClassicFunction, Rosenbrock, Sphere
from evotensor.problems.bbob import BBOB, MAX_DIMS
from evotensor.problems.bbob_noisy import BBOBNoisy
from evotensor.problems.classification import DigitsClassification
from evotensor.problems.function_fit import XOR, FunctionFit
from evotensor.problems.networks import init_cnn, init_mlp, mlp_apply
from evotensor.problems.qd import Arm, LinearProjection, NoisyArm, QDRastrigin, QDSphere, RastriginProj

INF, NAN = math.inf, math.nan
X = np.zeros((4, 2))
Y = np.zeros(4)


def bbob(**kw):
    return BBOB(**{"function": 1, "num_dims": 2, **kw})


def bbob_noisy(**kw):
    return BBOBNoisy(**{"function": 101, "num_dims": 2, **kw})


def classic(**kw):
    return ClassicFunction(**{"name": "sphere", "num_dims": 2, **kw})


def fit(**kw):
    return FunctionFit(**{"x": X, "y": Y, **kw})


def digits(**kw):
    return DigitsClassification(**kw)


def gymnax(**kw):
    from evotensor.problems.control import GymnaxProblem

    return GymnaxProblem(**{"env_name": "CartPole-v1", **kw})


def brax(**kw):
    from evotensor.problems.control import BraxProblem

    return BraxProblem(**{"env_name": "ant", **kw})


def brax_qd(**kw):
    from evotensor.problems.qd_control import BraxQDProblem

    return BraxQDProblem(**{"task": "ant_omni", **kw})


def mlp(**kw):
    import jax

    return init_mlp(jax.random.key(0), **{"sizes": (2, 3), **kw})


def cnn(**kw):
    import jax

    return init_cnn(
        jax.random.key(0), **{"input_shape": (8, 8, 1), "channels": (2,), "dense_sizes": (3,), **kw}
    )


CASES: list[tuple[str, object, str, dict]] = []


def case(label, build, argument, **kw):
    CASES.append((label, build, argument, kw))


BAD_DIMS = [0, -1, 2.0, True, "3", None]
for value in [0, 25, -1, 1.0, True, None, "nope", "f25", [1]]:
    case("bbob", bbob, "function", function=value)
for value in [100, 131, 1, "nope", "f99", True]:
    case("bbob_noisy", bbob_noisy, "function", function=value)
for build, label in ((bbob, "bbob"), (bbob_noisy, "bbob_noisy")):
    for value in [*BAD_DIMS, 1, MAX_DIMS + 1, 10**9]:
        case(label, build, "num_dims", num_dims=value)
    for value in [-1, 1.5, "1", None, True]:
        case(label, build, "instance", instance=value)
for value in ["loud", 3, True, ""]:
    case("bbob", bbob, "noise", noise=value)
for value in ["nope", 3, None, "Sphere"]:
    case("classic", classic, "name", name=value)
for value in BAD_DIMS:
    case("classic", classic, "num_dims", num_dims=value)
    case("Sphere", Sphere, "num_dims", num_dims=value)
case("Rosenbrock", Rosenbrock, "num_dims", num_dims=1)
for value in [1, 0, 17, 2.0, True, "2"]:
    case("xor", XOR, "num_inputs", num_inputs=value)
for value in [
    np.full((4, 2), NAN),
    np.array([[0.0, INF]] * 4),
    np.array([[0.0, 1e39]] * 4),
    np.zeros(4),
    np.zeros((0, 2)),
    np.zeros((4, 0)),
    "abcd",
    None,
    np.ones((4, 2), bool),
    [[1 + 2j, 0]] * 4,
]:
    case("fit", fit, "x", x=value)
for value in [
    np.full(4, NAN),
    np.array([0, 0, 0, -INF]),
    np.zeros(3),
    np.zeros((4, 0)),
    np.zeros((4, 1, 1)),
    "abcd",
    None,
]:
    case("fit", fit, "y", y=value)
for value in ["l2", None, 1]:
    case("fit", fit, "loss", loss=value)
for value in ["f1", None, 0]:
    case("digits", digits, "metric", metric=value)
for value in [0.0, 1.0, -0.5, NAN, INF, "0.5", True, None]:
    case("digits", digits, "test_fraction", test_fraction=value)
for value in [-1, 1.5, "0", 2**40]:
    case("digits", digits, "seed", seed=value)
for value in [0, -1, 2.0, True, 10**9]:
    case("digits", digits, "batch_size", batch_size=value)
case("digits", digits, "flatten", flatten="yes")
# control problems: an unknown name must list the valid ones
case("gymnax", gymnax, "env_name.*CartPole-v1", env_name="CartPol-v1")
case("gymnax", gymnax, "env_name.*CartPole-v1", env_name=None)
for argument in ("num_episodes", "max_steps"):
    for value in [0, -1, 1.5, True, "1"]:
        case("gymnax", gymnax, argument, **{argument: value})
case("brax", brax, "env_name.*halfcheetah", env_name="antt")
case("brax", brax, "env_name.*halfcheetah", env_name=3)
# brax 0.14's fluid drag (swimmer) calls a jnp.clip keyword jax removed: refused up front, by name
case("brax", brax, "brax env 'swimmer' moves through a fluid", env_name="swimmer")
for argument in ("episode_length", "num_episodes"):
    for value in [0, -1, 1.5, True, "1"]:
        case("brax", brax, argument, **{argument: value})
case("brax_qd", brax_qd, "task.*ant_omni", task="ant")
case("brax_qd", brax_qd, "task.*ant_omni", task=None)
case("brax_qd", brax_qd, "backend", backend="warp9")
for value in ["yes", 1, None]:
    case("brax_qd", brax_qd, "transitions", transitions=value)
    case("brax_qd", brax_qd, "offset_rewards", offset_rewards=value)
for argument in ("episode_length", "num_episodes"):
    for value in [0, 1.5, True]:
        case("brax_qd", brax_qd, argument, **{argument: value})
# QD benchmark functions
for value in BAD_DIMS:
    case("arm", Arm, "num_joints", num_joints=value)
for argument in ("fitness_noise", "descriptor_noise", "params_noise"):
    for value in [NAN, INF, -0.1, 1e30, "0.1", True, None]:
        case("noisy_arm", NoisyArm, argument, **{argument: value})
for cls in (QDSphere, QDRastrigin, RastriginProj, LinearProjection):
    for value in [*BAD_DIMS, 1]:
        case(cls.__name__, cls, "num_dims", num_dims=value)
for value in ["cube", None, 3]:
    case("LinearProjection", LinearProjection, "function", function=value)
for value in [0.0, -1.0, NAN, INF, "1"]:
    case("LinearProjection", LinearProjection, "scale", scale=value)
for value in [1, 101, 2.0, True]:  # 2 <= k <= num_dims (100)
    case("LinearProjection", LinearProjection, "num_measures", num_measures=value)
# the networks problems' helpers
for value in [(2,), (2, 0), (2, -1), (2, 3.0), (2, True)]:
    case("init_mlp", mlp, "sizes", sizes=value)
for value in [(8, 8), (8, 8, 0), (1, 1, 1)]:
    case("init_cnn", cnn, "input_shape", input_shape=value)
for argument in ("channels", "dense_sizes"):
    case("init_cnn", cnn, argument, **{argument: ()})
case("init_cnn", cnn, "kernel_size", kernel_size=0)
case("mlp_apply", lambda **kw: mlp_apply(mlp(), np.zeros(2), **kw), "activation", activation="swish")


test_bad_argument_is_refused_naming_it = refusal_test(CASES)


def test_the_defaults_of_the_table_build():
    """Every row above changes one argument of a call that works (the cheap ones, built here)."""
    classic(), fit(), XOR(), mlp(), cnn(), Arm(), NoisyArm(), QDSphere(), LinearProjection()
    fit(x=[[0, 1], [1, 0]], y=np.array([[1, 2], [3, 4]], np.int64), loss="mae")


FLOATS = st.floats(allow_nan=True, allow_infinity=True, width=64)


@given(
    x=hnp.arrays(
        np.float64, hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=4), elements=FLOATS
    ),
    y=hnp.arrays(
        np.float64, hnp.array_shapes(min_dims=1, max_dims=2, min_side=0, max_side=4), elements=FLOATS
    ),
)
def test_fuzzed_function_fit_data_is_finite_or_refused(x, y):
    try:
        problem = FunctionFit(x, y)
    except ArgumentError as err:
        assert "x" in str(err) or "y" in str(err)
        return
    assert problem.x.ndim == 2 and problem.y.ndim == 2 and problem.x.shape[0] == problem.y.shape[0]
    assert np.isfinite(np.asarray(problem.x)).all() and np.isfinite(np.asarray(problem.y)).all()
