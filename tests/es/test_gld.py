"""Tests for :mod:`evotensor.es.gld` (GLD).

Shared protocol checks (one compiled batched run serves several of them):
solves a shifted 10-d sphere to a documented tolerance, vmap over seeds / a hyperparameter /
poisoned fitness equals separate runs bit for bit, NaN/inf fitness never enters state and the
best-so-far equals the running minimum of the valid evaluations, and a 3,000-generation float32
run on a 30-d sphere stays finite.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from tests.es.archive_contract import fast_jit, strategy_contract

from evotensor.es.gld import GLD, sample_ball

DIMS = 10
POP = 16
GENS = 300
SHIFT = 1.0  # the optimum sits at SHIFT * ones(DIMS)
# radius search over R = 1 ... 1e-6 reaches < 1e-8 in 300 generations
TOL = 1e-08
HYPER_FIELD, HYPER_VALUE = "radius_max", 2.0
KWARGS = {}

globals().update(
    strategy_contract(
        GLD,
        pop=POP,
        gens=GENS,
        tol=TOL,
        hyper=(HYPER_FIELD, HYPER_VALUE),
        kwargs=KWARGS,
        dims=DIMS,
        shift=SHIFT,
        long_run_in_default_suite=False,
    )
)


def test_ball_samples_are_uniform_in_the_ball():
    d = 5
    v = np.asarray(fast_jit(sample_ball, static_argnums=(1,))(jax.random.key(0), (20000, d)))
    r = np.linalg.norm(v, axis=1)
    assert r.max() <= 1.0 + 1e-6
    assert abs(r.mean() - d / (d + 1)) < 0.01  # E|v| = d / (d + 1) for the uniform ball
    assert np.abs(v.mean(axis=0)).max() < 0.02


def test_radii_are_geometric_and_bad_arguments():
    es = GLD(5, num_dims=3, radius_max=1.0, radius_min=1e-4)
    np.testing.assert_allclose(
        np.asarray(es.radii(es.default_params())), [1, 1e-1, 1e-2, 1e-3, 1e-4], rtol=1e-5
    )
    with pytest.raises(ValueError, match="radius_min"):
        GLD(5, num_dims=3, radius_max=1.0, radius_min=2.0)
