"""IAMaLGaM (:mod:`evotensor.es.iamalgam`): adaptive variance scaling, the univariate model, the
population-size guideline (the full model's contract is a row of :data:`tests.es.test_contract.ARCHIVE`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tests.es.archive_contract import fast_jit, make_run

from evotensor.es.iamalgam import IAMaLGaMFull, IAMaLGaMParams, IAMaLGaMUnivariate, adaptive_variance_scaling


def _reference_avs(improved, sdr, c, nis, p):
    """Direct transcription of the AVS rules of Bosman et al. (2013)."""
    if improved:
        nis = 0
        c = max(c, 1.0)
        if sdr > p["theta_sdr"]:
            c *= p["eta_inc"]
    else:
        if c <= 1.0:
            nis += 1
        if c > 1.0 or nis >= p["nis_max"]:
            c *= p["eta_dec"]
        if c < 1.0 and nis < p["nis_max"]:
            c = 1.0
    return c, nis


def test_avs_matches_reference():
    raw = {"theta_sdr": 1.0, "eta_inc": 1 / 0.9, "eta_dec": 0.9, "nis_max": 3.0}
    params = IAMaLGaMParams(eta_sigma=0.1, eta_shift=0.1, delta_ams=2.0, std_init=1.0, **raw)
    rng = np.random.default_rng(0)
    avs = fast_jit(adaptive_variance_scaling)
    for _ in range(200):
        improved, sdr = bool(rng.integers(2)), float(rng.uniform(0, 2))
        c, nis = float(rng.choice([0.5, 0.95, 1.0, 1.3])), int(rng.integers(0, 5))
        got_c, got_nis = avs(jnp.asarray(improved), jnp.float32(sdr), jnp.float32(c), jnp.int32(nis), params)
        ref_c, ref_nis = _reference_avs(improved, sdr, c, nis, raw)
        assert float(got_c) == pytest.approx(ref_c, rel=1e-6) and int(got_nis) == ref_nis


def test_default_learning_rates():
    es = IAMaLGaMFull(40, num_dims=10)  # k = floor(0.35 * 40) = 14
    p = es.default_params()
    assert float(p.eta_sigma) == pytest.approx(1 - np.exp(-1.1 * 14**1.2 / 10**1.6), rel=1e-6)
    assert float(p.eta_shift) == pytest.approx(1 - np.exp(-1.2 * 14**0.31 / 10**0.5), rel=1e-6)
    assert float(p.nis_max) == 35 and es.num_ams == 7


def test_univariate_solves_sphere_and_survives_nan():
    """The full model's contract problem and tolerance: 200 generations of 32 reach < 1e-8."""
    es = IAMaLGaMUnivariate(32, num_dims=10)
    run = fast_jit(make_run(es, 200))
    state, (best, valid_min) = run(jax.random.key(0), es.default_params(), jnp.asarray(False))
    assert float(best[-1]) < 1e-8
    state, (best, valid_min) = run(jax.random.key(1), es.default_params(), jnp.asarray(True))
    for leaf in jax.tree.leaves(state):
        if jnp.issubdtype(leaf.dtype, jnp.floating):
            assert not np.isnan(np.asarray(leaf)).any()
    np.testing.assert_array_equal(np.asarray(best), np.minimum.accumulate(np.asarray(valid_min)))


@pytest.mark.slow
def test_univariate_long_float32_run_stays_finite():
    es = IAMaLGaMUnivariate(32, num_dims=30)
    state, (best, _) = fast_jit(make_run(es, 3000))(
        jax.random.key(7), es.default_params(), jnp.asarray(False)
    )
    for leaf in jax.tree.leaves(state):
        assert np.all(np.isfinite(np.asarray(leaf)))


def test_bad_arguments():
    with pytest.raises(ValueError, match="population_size"):
        IAMaLGaMFull(5, num_dims=3)  # floor(0.35 * 5) = 1 < 2
    with pytest.raises(ValueError, match="selection_ratio"):
        IAMaLGaMFull(20, num_dims=3, selection_ratio=1.5)


@pytest.mark.parametrize(
    "n, full, univariate",
    # Bosman, Grahl & Thierens (2013) iAMaLGaM guidelines, evaluated by hand:
    # full floor(10 sqrt(n)), univariate floor(4 sqrt(n)), both at least floor(2 / 0.35 + 1) = 6
    [(1, 10, 6), (2, 14, 6), (3, 17, 6), (10, 31, 12), (30, 54, 21), (100, 100, 40)],
)
def test_default_population_size_follows_the_iamalgam_guideline(n, full, univariate):
    assert IAMaLGaMFull(num_dims=n).population_size == full
    assert IAMaLGaMUnivariate(num_dims=n).population_size == univariate
    # the dimension comes from the template when one is given
    template = {"a": jnp.zeros((n,)), "b": jnp.zeros(())}
    assert IAMaLGaMFull(solution=template).population_size == IAMaLGaMFull(num_dims=n + 1).population_size
    # an explicit size still wins
    assert IAMaLGaMUnivariate(20, num_dims=n).population_size == 20


@pytest.mark.parametrize("tau", [0.1, 0.2, 0.35, 0.5, 0.9])
def test_default_population_size_always_selects_two(tau):
    for n in (1, 2, 5, 50):
        for cls in (IAMaLGaMFull, IAMaLGaMUnivariate):
            es = cls(num_dims=n, selection_ratio=tau)  # would raise if floor(tau N) < 2
            assert es.num_selected >= 2
            assert es.population_size >= int(np.floor(2 / tau + 1))
