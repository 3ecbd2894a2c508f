"""The exact hypervolume (:func:`evotensor.core.pareto.hypervolume`) against inclusion-exclusion
over every subset of the points, the obviously correct (exponential) definition."""

import itertools

import hypothesis.strategies as st
import jax
import numpy as np
import pytest
from hypothesis import given, settings

from evotensor.core.pareto import hypervolume

hypervolume_jit = jax.jit(hypervolume)


def inclusion_exclusion(points: np.ndarray, reference: np.ndarray) -> float:
    """Volume of the union of the boxes ``[p, reference]`` (minimized objectives), float64."""
    boxes = [np.minimum(p, reference).astype(np.float64) for p in points]
    total = 0.0
    for k in range(1, len(boxes) + 1):
        for subset in itertools.combinations(boxes, k):
            corner = np.max(np.array(subset), axis=0)
            total += (-1) ** (k + 1) * np.prod(np.maximum(reference - corner, 0.0))
    return total


@st.composite
def point_sets(draw):
    m = draw(st.integers(1, 4))
    n = draw(st.integers(0, 7))
    # a coarse grid: ties, duplicates, dominated points and points on or beyond the reference
    points = np.array(
        draw(st.lists(st.lists(st.integers(-3, 6), min_size=m, max_size=m), min_size=n, max_size=n))
    )
    points = points.reshape(n, m).astype(np.float32) * np.float32(0.5)
    valid = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool)
    reference = np.array(draw(st.lists(st.integers(0, 5), min_size=m, max_size=m)), np.float32) * np.float32(
        0.5
    )
    return points, valid, reference


@settings(max_examples=150, deadline=None)
@given(case=point_sets())
def test_hypervolume_equals_inclusion_exclusion(case):
    points, valid, reference = case
    want = inclusion_exclusion(points[valid], reference)
    got = float(hypervolume_jit(points, valid, reference))
    assert got == pytest.approx(want, abs=1e-5, rel=1e-5)


def test_hypervolume_of_random_fronts_with_real_values():
    rng = np.random.default_rng(3)
    for m, n in [(2, 40), (3, 9), (4, 6)]:
        points = rng.uniform(-1, 1, (n, m)).astype(np.float32)
        reference = np.full(m, 1.5, np.float32)
        want = inclusion_exclusion(points, reference) if n < 12 else None
        got = float(hypervolume_jit(points, np.ones(n, bool), reference))
        if want is None:  # two objectives: the staircase under the sorted front
            front = sorted(points.tolist())
            best_y, area = np.inf, 0.0
            xs = [p[0] for p in front] + [1.5]
            for i, (x, y) in enumerate(front):
                best_y = min(best_y, y)
                area += (xs[i + 1] - x) * (1.5 - best_y)
            want = area
        assert got == pytest.approx(want, rel=1e-5)


def test_hypervolume_needs_matching_shapes():
    with pytest.raises(ValueError, match="loss"):
        hypervolume(np.zeros((3, 2)), np.ones(3, bool), np.zeros(3))
