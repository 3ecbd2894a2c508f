"""GLD (:mod:`evotensor.es.gld`): uniform ball samples, geometric radii (its contract is a row of
:data:`tests.es.test_contract.ARCHIVE`)."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from tests.es.archive_contract import fast_jit

from evotensor.es.gld import GLD, sample_ball


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
