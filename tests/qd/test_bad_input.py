"""Bad input to every constructor of :mod:`evotensor.qd` (archives, emitters, MAP-Elites), as one table.

Each row builds one object with one bad argument and must get an
:class:`~evotensor.core.checks.ArgumentError` whose message names that argument: NaN, +-inf,
``1e39`` (not a float32), wrong types, empty or inverted ranges, zero or too many cells, and
spreads above ``MAX_SPREAD``. Construction only (nothing compiles), so the table is cheap. A
hypothesis fuzz draws archive arguments from the same kinds of values, and ``CVTArchive.add`` is
checked to never insert a candidate with a non-finite objective, measure or solution (the rule
``GridArchive.add`` follows, tested in ``test_archive.py``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.bad_input_table import refusal_test

from evotensor.core.checks import ArgumentError
from evotensor.qd import (
    NOT_ADDED,
    CMAESEmitter,
    CVTArchive,
    DCRLEmitter,
    DNSArchive,
    GaussianEmitter,
    GradientArborescenceEmitter,
    GridArchive,
    IsoLineEmitter,
    MAPElites,
    MEESEmitter,
    PolicyGradientEmitter,
    dcrl_me_emitters,
    grid_centroids,
    kmeans_centroids,
    pga_me_emitters,
)

INF, NAN = math.inf, math.nan
RANGES = ((0.0, 1.0), (0.0, 1.0))
CENTROIDS = np.array(grid_centroids((2, 2), RANGES))


def grid(**kw):
    return GridArchive(**{"solution_dim": 3, "dims": (4, 4), "ranges": RANGES, **kw})


def cvt(**kw):
    return CVTArchive(**{"solution_dim": 3, "centroids": CENTROIDS, "ranges": RANGES, **kw})


def gaussian(**kw):
    return GaussianEmitter(**{"sigma": 0.1, "x0": np.zeros(3), "batch_size": 4, **kw})


def iso_line(**kw):
    return IsoLineEmitter(**{"x0": np.zeros(3), "batch_size": 4, **kw})


def cma(**kw):
    return CMAESEmitter(**{"x0": np.zeros(3), "sigma0": 0.5, "batch_size": 4, **kw})


def dns(**kw):
    return DNSArchive(**{"solution_dim": 3, "measure_dim": 2, "capacity": 8, "k_neighbors": 3, **kw})


def mega(**kw):
    return GradientArborescenceEmitter(
        **{"x0": np.zeros(3), "sigma0": 1.0, "jacobian": lambda x: np.zeros((3, 3)), "batch_size": 4, **kw}
    )


def mees(**kw):
    return MEESEmitter(**{"x0": np.zeros(3), "num_samples": 8, **kw})


POLICY = ({"w": np.zeros((3, 2), np.float32), "b": np.zeros(2, np.float32)},)


def linear_policy(params, obs):
    return obs @ params[0]["w"] + params[0]["b"]


def pg(**kw):
    return PolicyGradientEmitter(
        **{"policy": POLICY, "apply": linear_policy, "observation_size": 3, "batch_size": 4, **kw}
    )


def pga(**kw):
    return pga_me_emitters(**{"policy": POLICY, "apply": linear_policy, "observation_size": 3, **kw})


def dcrl(**kw):
    return DCRLEmitter(**{"policy": POLICY, "descriptor_ranges": RANGES, **kw})


def dcrl_me(**kw):
    return dcrl_me_emitters(**{"policy": POLICY, "descriptor_ranges": RANGES, **kw})


def map_elites(**kw):
    return MAPElites(**{"archive": grid(), "emitters": [gaussian()], **kw})


def kmeans(**kw):
    import jax

    return kmeans_centroids(jax.random.key(0), **{"num_centroids": 4, "ranges": RANGES, "samples": 50, **kw})


BAD_REALS = [NAN, INF, -INF, 1e39, "1.0", None, True]
BAD_RANGES = [
    [],
    "01",
    [(0.0, 1.0)],  # one pair for two dims
    [(1.0, 0.0), (0.0, 1.0)],
    [(0.0, 0.0), (0.0, 1.0)],
    [(NAN, 1.0), (0.0, 1.0)],
    [(0.0, INF), (0.0, 1.0)],
    [(-INF, 0.0), (0.0, 1.0)],
    [(0.0, 1.0, 2.0), (0.0, 1.0)],
    [("a", 1.0), (0.0, 1.0)],
]
BAD_SIZES = [0, -1, 2.0, True, "4", None]
BAD_VECTORS = [
    np.zeros(0),
    np.zeros((2, 3)),
    [0.0, NAN, 0.0],
    [0.0, INF, 0.0],
    [1e39, 0, 0],
    "abc",
    None,
    1.0,
]

CASES: list[tuple[str, object, str, dict]] = []


def case(label, build, argument, **kw):
    CASES.append((label, build, argument, kw))


for value in BAD_SIZES:
    for label, build in (("grid", grid), ("cvt", cvt)):
        case(label, build, "solution_dim", solution_dim=value)
for value in [0, -2, 2.5, True, "4"]:
    case("grid", grid, r"dims\[1\]", dims=(4, value))
for value in [(), 4, "44", None]:
    case("grid", grid, "dims", dims=value)
case("grid", grid, "dims", dims=(2**16, 2**16))  # 2**32 cells do not fit int32
case("grid", grid, "dims", dims=(2**31,), ranges=[(0.0, 1.0)])
for value in BAD_RANGES:
    case("grid", grid, "ranges", ranges=value)
    if len(value) != 1:  # CVTArchive takes the measure count from ranges
        case("cvt", cvt, "ranges", ranges=value)
for value in [*BAD_REALS, -1e-6]:
    case("grid", grid, "epsilon", epsilon=value)
for value in [*BAD_REALS, -0.1, 1.5]:
    for label, build in (("grid", grid), ("cvt", cvt)):
        case(label, build, "learning_rate", learning_rate=value, threshold_min=0.0)
for value in [NAN, INF, 1e39, "0", True]:
    for label, build in (("grid", grid), ("cvt", cvt)):
        case(label, build, "threshold_min", learning_rate=0.1, threshold_min=value)
case("grid", grid, "learning_rate", learning_rate=0.1)  # needs a finite threshold_min
case("grid", grid, "learning_rate", threshold_min=0.0)  # a finite threshold_min needs a learning_rate
for value in BAD_REALS:
    case("grid", grid, "qd_score_offset", qd_score_offset=value)
for value in [
    {"objective": ((), "float32")},
    {"1x": ((), "float32")},
    {"x": "float32"},
    {"x": ((-1,), "float32")},
    5,
]:
    case("grid", grid, "extra_fields", extra_fields=value)
# CVTArchive: cells as a count (0, negative, more than samples, wrong type) or as an array
for value in [0, -3, 2.5, True, "4", None, NAN]:
    case("cvt", cvt, "centroids", centroids=value)
case("cvt", cvt, "centroids", centroids=10**9, samples=1000)
case("cvt", cvt, "centroids", centroids=np.zeros((0, 2)))
case("cvt", cvt, "centroids", centroids=np.zeros((4, 3)))
case("cvt", cvt, "centroids", centroids=np.array([[0.0, NAN], [0.5, 0.5]]))
case("cvt", cvt, "centroids", centroids=np.array([[0.0, INF], [0.5, 0.5]]))
case("cvt", cvt, "centroids", centroids=[["a", "b"]])
for value in [0, -1, 2.0, True]:
    case("cvt", cvt, "chunk_size", chunk_size=value)
for value in [1.5, "0", True]:
    case("cvt", cvt, "seed", centroids=4, seed=value)
for value in [0, -5, 2.5, True]:
    case("cvt", cvt, "samples", centroids=4, samples=value)
# k-means and grid centroids
for value in [0, -1, 2.5, True]:
    case("kmeans", kmeans, "num_centroids", num_centroids=value)
case("kmeans", kmeans, "num_centroids", num_centroids=100, samples=50)
for value in [NAN, INF, -1.0, "0"]:
    case("kmeans", kmeans, "tol", tol=value)
case("kmeans", kmeans, "samples", samples=np.full((50, 2), NAN))
for value in [(), (0, 2), (2, -1), (2.0, 2), 3]:
    case(
        "grid_centroids",
        lambda **kw: grid_centroids(**{"dims": (2, 2), "ranges": RANGES, **kw}),
        "dims",
        dims=value,
    )
# emitters
for label, build in (("gaussian", gaussian), ("iso_line", iso_line), ("cma", cma)):
    for value in BAD_VECTORS:
        case(label, build, "x0", x0=value)
    for value in BAD_SIZES:
        if not (label == "cma" and value is None):  # CMAESEmitter: None is its default
            case(label, build, "batch_size", batch_size=value)
    for value in [
        (1.0, 0.0),
        (NAN, 1.0),
        (0.0, NAN),
        (np.zeros(2), 1.0),
        (0.0,),
        "ab",
        5.0,
        (0.0, "x"),
        (np.array([0.0, 2.0, 0.0]), 1.0),
    ]:
        case(label, build, "bounds", bounds=value)
    case(
        label,
        build,
        "initial_solutions" if label != "cma" else "batch_size",
        **({"initial_solutions": np.zeros((3, 3))} if label != "cma" else {"batch_size": 1}),
    )
case("gaussian", gaussian, "initial_solutions", initial_solutions=np.full((4, 3), NAN))
case("iso_line", iso_line, "initial_solutions", initial_solutions="abc")
for value in [*BAD_REALS, -0.1, 1e30, np.zeros(2), np.zeros((3, 3)), [0.1, NAN, 0.1], [0.1, -1.0, 0.1]]:
    case("gaussian", gaussian, "sigma", sigma=value)
for argument in ("iso_sigma", "line_sigma"):
    for value in [*BAD_REALS, 0.0, -0.1, 1e30]:
        case("iso_line", iso_line, argument, **{argument: value})
for value in [*BAD_REALS, 0.0, -0.1, 1e30]:
    case("cma", cma, "sigma0", sigma0=value)
for value in ["best", 3, None]:
    case("cma", cma, "ranker", ranker=value)
for value in ["sometimes", None, 0, -1, True]:
    case("cma", cma, "restart_rule", restart_rule=value)
case("cma", cma, "selection_rule", selection_rule="all")
for argument in ("solution_dim", "measure_dim", "capacity", "k_neighbors"):
    for value in BAD_SIZES:
        case("dns", dns, argument, **{argument: value})
for value in BAD_REALS:
    case("dns", dns, "qd_score_offset", qd_score_offset=value)
case("dns", dns, "capacity", capacity=2**40)  # more memory than the device has
for value in BAD_VECTORS:
    case("mega", mega, "x0", x0=value)
for value in [*BAD_REALS, 0.0, -0.1, 1e30]:
    case("mega", mega, "sigma0", sigma0=value)
for value in [*BAD_REALS, 0.0, -0.1]:
    case("mega", mega, "lr", lr=value)
for value in [None, "grad", 3]:
    case("mega", mega, "jacobian", jacobian=value)
for value in ["adam", 0.1]:
    case("mega", mega, "optimizer", optimizer=value)
for value in ["best", 3, None]:
    case("mega", mega, "ranker", ranker=value)
case("mega", mega, "selection_rule", selection_rule="all")
case("mega", mega, "restart_rule", restart_rule="sometimes")
for value in [lambda x: np.zeros((1, 3)), lambda x: np.zeros((3, 4)), lambda x: x, lambda x: x[99]]:
    case("mega", mega, "jacobian", jacobian=value)
case("mega", mega, "normalize_grad", normalize_grad="yes")
for value in [NAN, -1.0, "0"]:
    case("mega", mega, "epsilon", epsilon=value)
for value in BAD_VECTORS:
    case("mees", mees, "x0", x0=value)
for value in [*BAD_SIZES, 1, 7]:  # 7: odd with mirrored sampling
    case("mees", mees, "num_samples", num_samples=value)
for value in [*BAD_REALS, 0.0, -0.1, 1e30]:
    case("mees", mees, "sigma", sigma=value)
for argument in (
    "num_optimizer_steps",
    "novelty_neighbors",
    "novelty_capacity",
    "recent_size",
    "exploit_cells",
    "explore_cells",
    "batch_multiple",
):
    for value in BAD_SIZES:
        case("mees", mees, argument, **{argument: value})
for value in [*BAD_REALS, -0.1]:
    case("mees", mees, "l2_coefficient", l2_coefficient=value)
for value in ["both", None, 1]:
    case("mees", mees, "mode", mode=value)
for value in ["adam", 0.01]:
    case("mees", mees, "optimizer", optimizer=value)
case("mees", mees, "fitness_shaping", fitness_shaping="centered_ranks")
case("mees", mees, "mirrored", mirrored="yes")
case("mees", mees, "bounds", bounds=(1.0, 0.0))
for value in ["abc", None, np.zeros(3, np.int32)]:
    case("pg", pg, "policy", policy=value)
for value in [None, 3]:
    case("pg", pg, "apply", apply=value)
case("pg", pg, "apply", apply=lambda p, obs: obs.sum())  # not [n, action_size]
case("pg", pg, "observation_size", observation_size=5)  # apply fails on it
for argument in (
    "observation_size",
    "batch_size",
    "num_pg_training_steps",
    "num_critic_training_steps",
    "policy_delay",
    "transitions_batch_size",
    "replay_buffer_size",
):
    for value in BAD_SIZES:
        case("pg", pg, argument, **{argument: value})
case("pg", pg, "num_critic_training_steps", num_critic_training_steps=1, policy_delay=2)
for argument in ("policy_learning_rate", "critic_learning_rate", "greedy_learning_rate", "reward_scaling"):
    for value in [*BAD_REALS, 0.0, -1.0]:
        case("pg", pg, argument, **{argument: value})
for argument in ("noise_clip", "policy_noise"):
    for value in [*BAD_REALS, -0.1]:
        case("pg", pg, argument, **{argument: value})
for value in [*BAD_REALS, -0.1, 1.5]:
    case("pg", pg, "discount", discount=value)
for value in [*BAD_REALS, 0.0, 1.5]:
    case("pg", pg, "soft_tau_update", soft_tau_update=value)
for value in ["256", (0,), (2.5,), 256, None]:
    case("pg", pg, "critic_hidden_layer_size", critic_hidden_layer_size=value)
case("pg", pg, "bounds", bounds=(1.0, 0.0))
for value in [*BAD_REALS, 1.0, -0.5]:
    case("pga", pga, "proportion_mutation_ga", proportion_mutation_ga=value)
for value in [*BAD_SIZES, 1]:
    case("pga", pga, "env_batch_size", env_batch_size=value)
for value in [np.zeros((99, 8)), "abc", np.full((100, 8), NAN)]:
    case("pga", pga, "initial_solutions", initial_solutions=value)
for value in ["abc", None, POLICY[0], ({"w": np.zeros((3, 2))},), ({"w": np.zeros(3), "b": np.zeros(3)},)]:
    case("dcrl", dcrl, "policy", policy=value)
for value in BAD_RANGES:
    if len(value) != 1:  # one pair is a valid one-descriptor range (checked against the archive at init)
        case("dcrl", dcrl, "descriptor_ranges", descriptor_ranges=value)
for value in ["swishy", None, 3]:
    case("dcrl", dcrl, "activation", activation=value)
for argument in ("dcrl_batch_size", "ai_batch_size"):
    for value in [-1, 2.0, True, "4"]:
        case("dcrl", dcrl, argument, **{argument: value})
case("dcrl", dcrl, "dcrl_batch_size", dcrl_batch_size=0, ai_batch_size=0)
DCRL_SIZES = ("num_pg_training_steps", "num_critic_training_steps", "policy_delay", "transitions_batch_size")
for argument in DCRL_SIZES:
    for value in BAD_SIZES:
        case("dcrl", dcrl, argument, **{argument: value})
for argument in ("lengthscale", "policy_learning_rate", "critic_learning_rate"):
    for value in [*BAD_REALS, 0.0, -1.0]:
        case("dcrl", dcrl, argument, **{argument: value})
for value in BAD_REALS:
    case("dcrl", dcrl, "reward_offset", reward_offset=value)
for value in [-1, 2.0, "8"]:
    case("dcrl_me", dcrl_me, "ga_batch_size", ga_batch_size=value)
for value in [np.zeros((99, 8)), "abc"]:
    case("dcrl_me", dcrl_me, "initial_solutions", initial_solutions=value)
# MAP-Elites
for value in [None, "grid", 3]:
    case("map_elites", map_elites, "archive", archive=value)
for value in [[], (), [object()], None]:
    case("map_elites", map_elites, "emitters", emitters=value)
case("map_elites", map_elites, "result_archive", result_archive="grid")
case(
    "map_elites",
    map_elites,
    "result_archive",
    result_archive=GridArchive(solution_dim=2, dims=(4,), ranges=[(0, 1)]),
)
case("map_elites", map_elites, "solution", solution=np.zeros(5))


test_bad_argument_is_refused_naming_it = refusal_test(CASES)


def test_the_defaults_of_the_table_build():
    """Every row above changes one argument of an object that builds."""
    for build in (grid, cvt, gaussian, iso_line, cma, dns, mega, mees, map_elites, pg, pga, dcrl, dcrl_me):
        build()
    assert len(dcrl_me(ga_batch_size=0)) == 1 and dcrl(dcrl_batch_size=0).batch_size == 64
    assert len(pga(proportion_mutation_ga=0.0)) == 1 and pg(batch_size=1).batch_size == 1
    first, second = pga(initial_solutions=np.arange(800.0).reshape(100, 8))
    assert first.initial_solutions[0, 0] == 0 and second.initial_solutions[0, 0] == 400
    mees(num_samples=7, mirrored=False, batch_multiple=4, fitness_shaping=lambda f: f, bounds=(0, 1))
    grid(learning_rate=0.5, threshold_min=-10.0)
    cvt(centroids=[[0.25, 0.25], [0.75, 0.75]], chunk_size=1, seed=-3)
    gaussian(sigma=[0.1, 0.0, 1e15], bounds=(None, np.ones(3)), initial_solutions=np.zeros((4, 3)))
    cma(bounds=(-INF, INF), restart_rule=5)


WILD = st.one_of(
    st.sampled_from([NAN, INF, -INF, 1e39, -1e39, 0, -1, 0.0, 1e30, True, None, "1", (), [1, 2]]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**40), 2**40),
)


@given(solution_dim=WILD, dims=st.one_of(WILD, st.lists(WILD, max_size=3)), low=WILD, high=WILD, eps=WILD)
def test_fuzzed_grid_arguments_build_or_raise_argument_error(solution_dim, dims, low, high, eps):
    ranges = [(low, high)] * (len(dims) if isinstance(dims, list) else 1)
    try:
        archive = GridArchive(solution_dim=solution_dim, dims=dims, ranges=ranges, epsilon=eps)
    except ArgumentError:
        return
    # what builds is sane: finite ranges with low < high, positive int sizes, fits int32
    assert archive.solution_dim >= 1 and all(d >= 1 for d in archive.dims)
    assert all(math.isfinite(lo) and math.isfinite(hi) and lo < hi for lo, hi in archive.ranges)
    assert archive.num_cells < 2**31 - 1 and math.isfinite(archive.epsilon) and archive.epsilon >= 0


def test_cvt_add_never_inserts_a_nonfinite_candidate():
    archive = cvt(solution_dim=2)
    solutions = np.array([[0, 0], [0, 0], [0, 0], [NAN, 0], [0, INF], [1, 2]], np.float32)
    objective = np.array([NAN, INF, 1.0, 1.0, 1.0, 1.0], np.float32)
    measures = np.array([[0.1, 0.1], [0.1, 0.1], [NAN, 0.1], [0.1, 0.1], [0.1, 0.1], [0.1, 0.1]], np.float32)
    state, info = archive.add(archive.init(), solutions, objective, measures)
    np.testing.assert_array_equal(info.status[:5], [NOT_ADDED] * 5)
    np.testing.assert_array_equal(info.index[:5], [-1] * 5)
    assert int(info.status[5]) != NOT_ADDED
    assert int(np.asarray(state.occupied).sum()) == 1
    occupied = np.asarray(state.occupied)
    for name in ("solutions", "objective", "measures"):
        assert np.isfinite(np.asarray(getattr(state, name))[occupied]).all(), name


@pytest.mark.parametrize(
    ("build", "argument", "build_it"),
    [
        (lambda: GridArchive(solution_dim=1000, dims=(100, 100), ranges=RANGES), r"dims=\(100, 100\)", True),
        # refused before k-means runs; building it (k-means for 10,000 centroids) would take minutes
        (lambda: CVTArchive(solution_dim=1000, centroids=10_000, ranges=RANGES), "centroids=10000", False),
        (
            lambda: CVTArchive(solution_dim=1000, centroids=np.zeros((10_000, 2)), ranges=RANGES),
            "centroids",
            True,
        ),
    ],
)
def test_an_archive_larger_than_the_memory_limit_is_refused_naming_its_cells(
    build, argument, build_it, monkeypatch
):
    # 10,000 cells of 1,000 floats need ~40 MB: over a 16 MB limit, under the default one
    monkeypatch.setenv("EVOTENSOR_MAX_STATE_BYTES", str(16 * 2**20))
    with pytest.raises(ArgumentError, match=argument) as err:
        build()
    assert "solution_dim=1000" in str(err.value) and "EVOTENSOR_MAX_STATE_BYTES" in str(err.value)
    monkeypatch.delenv("EVOTENSOR_MAX_STATE_BYTES")
    if build_it:
        assert build().state_bytes() > 16 * 2**20
