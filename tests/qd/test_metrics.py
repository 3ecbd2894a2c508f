"""The CQD score (evotensor.qd.metrics) against a float64 loop over its definition."""

import math

import jax
import numpy as np
import pytest
from tests.bad_input_table import refusal_test

from evotensor.qd import GridArchive, MOMEArchive, ProximityArchive
from evotensor.qd.metrics import cqd_score

KEY = jax.random.key(0)


def filled_grid(n=300, seed=0):
    archive = GridArchive(solution_dim=3, dims=(10, 10), ranges=[(0, 1), (0, 1)])
    g = np.random.default_rng(seed)
    x = g.uniform(0, 1, (n, 3)).astype(np.float32)
    state, _ = archive.add(archive.init(), x, -g.uniform(0, 2, n).astype(np.float32), x[:, :2])
    return archive, state


def reference(objective, measures, targets, penalties, obj_min, obj_max, dist_max, order):
    """Kent et al. 2022, one loop per term, in float64."""
    scores = []
    for points in targets:
        total = 0.0
        for theta in penalties:
            for target in points:
                total += max(
                    (f - obj_min) / (obj_max - obj_min)
                    - theta * np.linalg.norm(m - target, ord=order) / dist_max
                    for f, m in zip(objective, measures, strict=True)
                )
        scores.append(total)
    return np.array(scores)


@pytest.mark.parametrize("order", [1, 2, math.inf])
@pytest.mark.parametrize("penalties", [5, [0.0, 0.3, 1.7]])
def test_cqd_score_equals_its_definition(order, penalties):
    archive, state = filled_grid()
    targets = np.random.default_rng(1).uniform(-0.2, 1.2, (3, 40, 2)).astype(np.float32)
    got = jax.jit(
        lambda s: cqd_score(
            archive,
            s,
            target_points=targets,
            penalties=penalties,
            obj_min=-2.0,
            obj_max=0.5,
            dist_max=math.sqrt(2),
            dist_ord=order,
        )
    )(state)
    occupied = np.asarray(state.occupied)
    theta = np.linspace(0, 1, 5) if penalties == 5 else np.asarray(penalties)
    want = reference(
        np.asarray(state.objective, np.float64)[occupied],
        np.asarray(state.measures, np.float64)[occupied],
        targets.astype(np.float64),
        theta,
        -2.0,
        0.5,
        math.sqrt(2),
        order,
    )
    np.testing.assert_allclose(got.scores, want, rtol=1e-5)
    assert float(got.mean) == pytest.approx(want.mean(), rel=1e-5)
    np.testing.assert_allclose(got.penalties, theta, rtol=1e-6)


def test_more_elites_and_better_ones_score_higher_and_empty_is_minus_inf():
    targets = np.random.default_rng(2).uniform(0, 1, (2, 50, 2)).astype(np.float32)
    kw = dict(target_points=targets, penalties=4, obj_min=-2.0, obj_max=0.0, dist_max=math.sqrt(2))
    few = cqd_score(*filled_grid(20), **kw).mean
    many = cqd_score(*filled_grid(400), **kw).mean
    assert many > few
    archive, state = filled_grid(400)
    better = state.replace(objective=state.objective + 0.5)
    assert cqd_score(archive, better, **kw).mean > many
    assert float(cqd_score(archive, archive.init(), **kw).mean) == -math.inf


def test_unstructured_archives_are_scored_too():
    archive = ProximityArchive(
        solution_dim=2, measure_dim=2, capacity=64, k_neighbors=3, novelty_threshold=0.05
    )
    x = np.random.default_rng(3).uniform(0, 1, (64, 2)).astype(np.float32)
    state, _ = archive.add(archive.init(), x, np.zeros(64, np.float32), x)
    targets = np.random.default_rng(4).uniform(0, 1, (1, 30, 2)).astype(np.float32)
    got = cqd_score(
        archive, state, target_points=targets, penalties=[0.0], obj_min=-1.0, obj_max=1.0, dist_max=1.0
    )
    # with penalty 0 every target is worth the best normalised objective: (0 + 1) / 2
    assert int(state.occupied.sum()) > 10 and float(got.mean) == pytest.approx(30 * 0.5)


def grid_call(archive=None, **kw):
    """``cqd_score`` of a filled grid with ``kw`` changed; ``archive`` replaces the grid (and its
    state: the archive is checked first)."""
    state = None
    if archive is None:
        archive, state = filled_grid(50)
    options = {
        "target_points": np.zeros((1, 4, 2)),
        "penalties": 3,
        "obj_min": -1.0,
        "obj_max": 0.0,
        "dist_max": 1.0,
        **kw,
    }
    return cqd_score(archive, state, **options)


CASES = [
    ("cqd", grid_call, "target_points", {"target_points": np.zeros((4, 2))}),
    ("cqd", grid_call, "target_points", {"target_points": np.zeros((1, 4, 3))}),
    ("cqd", grid_call, "penalties", {"penalties": 0}),
    ("cqd", grid_call, "penalties", {"penalties": [0.0, math.nan]}),
    ("cqd", grid_call, "penalties", {"penalties": "many"}),
    ("cqd", grid_call, "obj_max", {"obj_max": -1.0}),
    ("cqd", grid_call, "obj_min", {"obj_min": math.nan}),
    ("cqd", grid_call, "dist_max", {"dist_max": 0.0}),
    ("cqd", grid_call, "dist_ord", {"dist_ord": 0.5}),
    ("cqd", grid_call, "dist_ord", {"dist_ord": math.nan}),
    ("cqd", grid_call, "dist_ord", {"dist_ord": "fro"}),
    (
        "cqd",
        grid_call,
        "single-objective",
        {
            "archive": MOMEArchive(
                GridArchive(solution_dim=2, dims=(2, 2), ranges=[(0, 1), (0, 1)]),
                num_objectives=2,
                front_size=2,
                reference_point=[0.0, 0.0],
            )
        },
    ),
    ("cqd", grid_call, "archive", {"archive": object()}),
]

test_bad_argument_is_refused_naming_it = refusal_test(CASES)
