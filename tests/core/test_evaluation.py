import jax.numpy as jnp
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from evotensor.core import Evaluation, to_minimization, to_natural, worst_for_nonfinite


def test_nonfinite_becomes_worse_than_every_finite_value():
    f = jnp.array([1.0, jnp.nan, -3.0, jnp.inf, 2.0, -jnp.inf])
    out = np.asarray(worst_for_nonfinite(f))
    assert np.all(np.isfinite(out))
    finite = np.array([1.0, -3.0, 2.0])
    assert np.all(out[[1, 3, 5]] > finite.max())
    np.testing.assert_array_equal(out[[0, 2, 4]], finite)


def test_all_nonfinite_column_becomes_zero():
    out = worst_for_nonfinite(jnp.array([jnp.nan, jnp.inf]))
    np.testing.assert_array_equal(out, [0.0, 0.0])


def test_multi_objective_columns_are_independent():
    f = jnp.array([[1.0, 10.0], [jnp.nan, 20.0], [2.0, jnp.nan]])
    out = np.asarray(worst_for_nonfinite(f))
    assert out[1, 0] > 2.0 and out[2, 1] > 20.0
    assert out[0, 0] == 1.0 and out[1, 1] == 20.0


def test_huge_finite_values_do_not_overflow():
    big = np.finfo(np.float32).max
    out = np.asarray(worst_for_nonfinite(jnp.array([big, jnp.nan], jnp.float32)))
    assert np.all(np.isfinite(out)) and out[1] >= out[0]


@given(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=32), min_size=1, max_size=20))
def test_ranking_of_finite_entries_is_preserved(values):
    f = jnp.array(values, jnp.float32)
    out = np.asarray(worst_for_nonfinite(f))
    assert np.all(np.isfinite(out))
    finite = np.isfinite(np.array(values, np.float32))
    if finite.any() and (~finite).any():
        assert out[~finite].min() >= out[finite].max()


def test_orientation_round_trip():
    ev = Evaluation(fitness=jnp.array([1.0, 5.0, jnp.nan]))
    minimized = to_minimization(ev, maximize=True)
    assert np.argmin(minimized.fitness) == 1  # 5.0 is the best when maximizing
    assert minimized.fitness[2] > minimized.fitness[0]  # NaN is worst
    np.testing.assert_array_equal(to_natural(minimized.fitness[:2], True), [1.0, 5.0])


def test_stand_in_scales_with_the_spread_near_an_optimum():
    f = jnp.array([1e-6, 2e-6, jnp.nan, 3e-6], jnp.float32)
    out = np.asarray(worst_for_nonfinite(f))
    assert 3e-6 < out[2] < 5.01e-6  # max + spread, not max + 1


def test_all_equal_finite_values_still_rank_the_stand_in_last():
    for value in (0.0, 1e-8, -5.0, 3e7):
        out = np.asarray(worst_for_nonfinite(jnp.array([value, value, jnp.inf], jnp.float32)))
        assert out[2] > out[0]
