"""XOR and FunctionFit: fitness equals the formula computed by hand; bad input names the argument."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from evotensor.core.checks import ArgumentError
from evotensor.problems.function_fit import XOR, FunctionFit, xor_cases


def linear_apply(w, x):
    return jnp.atleast_1d(x @ w[:-1] + w[-1])


@pytest.mark.parametrize("n", [2, 3])
def test_xor_cases_are_parity(n):
    x, y = xor_cases(n)
    assert x.shape == (2**n, n) and y.shape == (2**n, 1)
    assert len({tuple(r) for r in x}) == 2**n
    np.testing.assert_array_equal(y[:, 0], x.sum(1) % 2)


def test_xor_fitness_is_cases_minus_sse():
    problem = XOR(3)
    w = jax.random.normal(jax.random.key(0), (5, 4))
    fit = np.asarray(problem.evaluate(jax.random.key(1), w, linear_apply).fitness)
    x, y = xor_cases(3)
    for i in range(5):
        pred = x @ np.asarray(w[i, :-1]) + float(w[i, -1])
        assert fit[i] == pytest.approx(8.0 - np.sum((pred - y[:, 0]) ** 2), rel=1e-5)
    # a perfect oracle reaches the maximum
    oracle = lambda p, x: jnp.atleast_1d(jnp.sum(x) % 2)  # noqa: E731
    assert float(problem.evaluate(None, jnp.zeros((1,)), oracle).fitness[0]) == 8.0


@pytest.mark.parametrize("loss", FunctionFit.LOSSES)
def test_function_fit_losses(loss):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(20, 3)).astype(np.float32), rng.normal(size=20).astype(np.float32)
    w = rng.normal(size=(4, 4)).astype(np.float32)
    fit = np.asarray(FunctionFit(x, y, loss).evaluate(None, jnp.asarray(w), linear_apply).fitness)
    problem = FunctionFit(x, y, loss)
    for i in range(4):
        err = x @ w[i, :-1] + w[i, -1] - y
        want = {
            "mse": np.mean(err**2),
            "rmse": np.sqrt(np.mean(err**2)),
            "mae": np.mean(np.abs(err)),
            "sse": np.sum(err**2),
        }[loss]
        assert fit[i] == pytest.approx(want, rel=1e-4)
        # one model's loss from its predictions [n, k] (a local search's objective), the same value
        pred = jnp.asarray(x @ w[i, :-1] + w[i, -1])[:, None]
        assert float(problem.loss_of(pred)) == pytest.approx(want, rel=1e-4)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: XOR(1), "num_inputs"),
        (lambda: FunctionFit(np.zeros(3), np.zeros(3)), "x must be"),
        (lambda: FunctionFit(np.zeros((3, 1)), np.zeros(4)), "y must be"),
        (lambda: FunctionFit(np.zeros((3, 1)), [0, np.nan, 1]), "finite"),
        (lambda: FunctionFit(np.zeros((3, 1)), np.zeros(3), "l2"), "loss"),
    ],
)
def test_bad_input_names_the_argument(make, match):
    with pytest.raises(ArgumentError, match=match):
        make()
