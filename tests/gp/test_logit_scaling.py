"""Per-output logit scaling of classification trees (gp/logit_scaling.py): the fitted map minimizes the
ridge-regularized cross-entropy of a NumPy reference, ignores the outputs' scale and shift, and
refuses bad arguments."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evotensor.core.checks import ArgumentError
from evotensor.gp.logit_scaling import fit_logit_scaling, scaled_logits


def _reference_loss(pred: np.ndarray, labels: np.ndarray, slope, intercept, ridge: float) -> float:
    """``L`` of the module docstring in float64 for one tree's outputs ``[n, k]``, given the map."""
    pred = pred.astype(np.float64)
    mean, std = pred.mean(0), pred.std(0)
    u = pred * slope + intercept
    a = slope * std  # the parameters on the standardized outputs
    b = intercept + slope * mean
    if pred.shape[1] == 1:
        z = u[:, 0]
        ce = np.maximum(z, 0) - z * labels + np.log1p(np.exp(-np.abs(z)))
    else:
        top = u.max(1, keepdims=True)
        logp = u - top - np.log(np.exp(u - top).sum(1, keepdims=True))
        ce = -logp[np.arange(len(labels)), labels]
    return float(ce.mean() + 0.5 * ridge * (np.sum(a * a) + np.sum(b * b)))


def _data(seed: int, k: int, n: int = 60):
    rng = np.random.default_rng(seed)
    classes = max(k, 2)
    labels = rng.integers(0, classes, n)
    labels[:classes] = np.arange(classes)  # every class present
    target = np.eye(classes)[labels][:, -k:] if k > 1 else labels[:, None].astype(float)
    separating = 3.0 * target + rng.normal(0, 0.6, (n, k))  # mostly separates the classes
    noise = rng.normal(0, 1, (n, k))
    return np.stack([separating, noise]).astype(np.float32), labels


@pytest.mark.parametrize(("k", "ridge"), [(1, 1e-2), (3, 0.1)])
def test_the_fitted_map_minimizes_the_reference_loss(k, ridge):
    pred, labels = _data(0, k)
    slope, intercept, loss = (np.asarray(v, np.float64) for v in fit_logit_scaling(pred, labels, ridge=ridge))
    rng = np.random.default_rng(1)
    for t in range(2):
        best = _reference_loss(pred[t], labels, slope[t], intercept[t], ridge)
        assert loss[t] == pytest.approx(best, rel=1e-4)
        # no nearby map does better (the optimum of a strictly convex loss)
        scale = np.abs(slope[t]) + 1e-3
        for _ in range(20):
            ds, di = rng.normal(0, 0.05, k) * scale, rng.normal(0, 0.05, k)
            assert _reference_loss(pred[t], labels, slope[t] + ds, intercept[t] + di, ridge) > best - 1e-7
    # the tree that separates the classes scores far better than noise
    assert loss[0] < 0.8 * loss[1]


@settings(max_examples=12)  # each example is two fits of a [2, 40, 3] forest
@given(scale=st.floats(1e-2, 1e2), shift=st.floats(-100.0, 100.0), seed=st.integers(0, 50))
def test_the_loss_and_the_logits_ignore_the_outputs_scale_and_shift(scale, shift, seed):
    pred, labels = _data(seed, 3, n=40)
    moved = pred * np.float32(scale) + np.float32(shift)
    s0, i0, l0 = fit_logit_scaling(pred, labels)
    s1, i1, l1 = fit_logit_scaling(moved, labels)
    np.testing.assert_allclose(np.asarray(l1), np.asarray(l0), rtol=2e-3, atol=1e-5)
    logits0 = np.asarray(scaled_logits(pred, s0, i0))
    logits1 = np.asarray(scaled_logits(moved, s1, i1))
    np.testing.assert_allclose(logits1, logits0, rtol=1e-2, atol=2e-2)


def test_constant_and_non_finite_outputs():
    pred, labels = _data(2, 3)
    pred[1, 5, 0] = np.inf
    pred = np.concatenate([pred, np.full((1, 60, 3), 7.0, np.float32)])
    slope, intercept, loss = (np.asarray(v) for v in fit_logit_scaling(pred, labels))
    assert np.isfinite(loss[0]) and np.all(np.isfinite(slope[0]))
    assert loss[1] == np.inf and np.all(np.isnan(slope[1])) and np.all(np.isnan(intercept[1]))
    # a constant tree carries no information: zero slope, and its loss is at most the prior's
    assert np.all(slope[2] == 0) and loss[2] <= np.log(3) + 1e-6


def test_bad_arguments_are_refused():
    pred = np.zeros((2, 5, 3), np.float32)
    labels = np.array([0, 1, 2, 0, 1])
    with pytest.raises(ArgumentError, match=r"pred must be \[pop, n_points >= 1, n_outputs >= 1\]"):
        fit_logit_scaling(pred[0], labels)
    with pytest.raises(ArgumentError, match="pred has 3 output.s. but 2 classes need 1"):
        fit_logit_scaling(pred, labels, n_classes=2)
    with pytest.raises(ArgumentError, match=r"labels must be \[n_points\] = \[5\]"):
        fit_logit_scaling(pred, labels[:4])
    with pytest.raises(ArgumentError, match="ridge"):
        fit_logit_scaling(pred, labels, ridge=0.0)
    with pytest.raises(ArgumentError, match="steps"):
        fit_logit_scaling(pred, labels, steps=0)
