"""The shared argument checks: accepted values come back normalized, refused ones raise an
ArgumentError (a ValueError and a TypeError) whose message names the argument."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from evotensor.core.checks import (
    ArgumentError,
    check_choice,
    check_fraction,
    check_int,
    check_positive,
    check_ranges,
)


@given(st.integers(-(10**6), 10**6), st.integers(-5, 5))
def test_check_int_accepts_exactly_the_ints_at_or_above_the_minimum(value, minimum):
    if value >= minimum:
        assert check_int(value, "n", minimum) == value
        assert type(check_int(np.int64(value), "n", minimum)) is int
    else:
        with pytest.raises(ArgumentError, match="n must be an int >= "):
            check_int(value, "n", minimum)


@pytest.mark.parametrize("bad", [True, 1.0, "3", None, np.float32(2)])
def test_check_int_refuses_non_ints_as_both_value_and_type_errors(bad):
    for kind in (ValueError, TypeError):
        with pytest.raises(kind, match="population_size must be an int"):
            check_int(bad, "population_size")


def test_check_int_maximum():
    assert check_int(5, "k", 0, 5) == 5
    with pytest.raises(ArgumentError, match="k must be an int <= 5"):
        check_int(6, "k", 0, 5)


@given(st.floats(allow_nan=True, allow_infinity=True), st.booleans())
def test_check_positive_accepts_exactly_finite_positive_numbers(x, allow_zero):
    ok = math.isfinite(x) and (x >= 0 if allow_zero else x > 0)
    if ok:
        assert check_positive(x, "sigma_init", allow_zero) == x
    else:
        with pytest.raises(ArgumentError, match="sigma_init must be finite and"):
            check_positive(x, "sigma_init", allow_zero)


@given(st.floats(allow_nan=True, allow_infinity=True), st.booleans())
def test_check_fraction(x, allow_zero):
    ok = (0 <= x if allow_zero else 0 < x) and x <= 1
    if ok:
        assert check_fraction(x, "rate", allow_zero) == x
    else:
        with pytest.raises(ArgumentError, match="rate must be in"):
            check_fraction(x, "rate", allow_zero)


def test_check_choice_and_non_numbers():
    assert check_choice("csa", "step_size", ("csa", "tpa")) == "csa"
    with pytest.raises(ArgumentError, match=r"step_size must be one of \('csa', 'tpa'\), got 'x'"):
        check_choice("x", "step_size", ("csa", "tpa"))
    with pytest.raises(ArgumentError, match="lr must be a number"):
        check_positive("0.1", "lr")
    assert check_positive(np.array(2.0), "lr") == 2.0
    import jax.numpy as jnp

    assert check_positive(jnp.float32(0.5), "lr") == 0.5  # a 0-d JAX array is a number too
    for bad in (np.array([1.0]), np.array(True), 1j, jnp.zeros(2)):
        with pytest.raises(ArgumentError, match="lr must be a number"):
            check_positive(bad, "lr")


def test_check_ranges():
    assert check_ranges([(0, 1), (-2.5, 3)]) == ((0.0, 1.0), (-2.5, 3.0))
    for bad, match in [
        ([], "non-empty"),
        ("ab", "non-empty"),
        ([(0, 1, 2)], r"ranges\[0\] must be a \(low, high\) pair"),
        ([(0, 1), (1, 1)], r"ranges\[1\] must be finite with low < high"),
        ([(0, math.inf)], r"ranges\[0\] must be finite"),
        ([(0, "1")], r"ranges\[0\] must be a number"),
    ]:
        with pytest.raises(ArgumentError, match=match):
            check_ranges(bad)
    with pytest.raises(ArgumentError, match="bounds has 1 pairs but must have 3"):
        check_ranges([(0, 1)], "bounds", count=3)
