"""Generations without a single finite fitness, under :func:`evotensor.run`, for every strategy of
:mod:`evotensor.es` (discovered from the package, :mod:`tests.es.strategy_table`).

Such a generation carries no information, and the documented rule (``VectorStrategy.tell``,
:func:`evotensor.es.core.base.keep_state_if_all_invalid`) is that it leaves the search state as it
was, apart from schedule counters; archive strategies take none of its candidates in. The run loop
used to replace the NaNs by zeros before ``tell`` (``to_minimization``), so ``tell`` saw a valid
generation and CMA-ES, SNES, OpenES, ... drifted, and archives took the candidates in as scoring 0.
Here 200 all-NaN generations under ``run`` must give exactly the state of the hand-written loop that
hands ``tell`` the raw NaNs, and leave every field of the search state where it started.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tests.es.strategy_table import STRATEGY_NAMES, build

import evotensor
from evotensor.core import Evaluation, to_minimization

GENERATIONS = 200
DIMS = 3


@dataclasses.dataclass(frozen=True)
class AllNaN:
    """Every candidate scores NaN (and one +inf, one -inf: all non-finite kinds at once)."""

    maximize: bool = False

    def evaluate(self, key, x):
        f = jnp.full((x.shape[0],), jnp.nan, jnp.float32)
        return Evaluation(fitness=f.at[0].set(jnp.inf).at[-1].set(-jnp.inf))


def _host(leaf):
    if jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        leaf = jax.random.key_data(leaf)
    return np.asarray(leaf)


def _fields(state) -> dict[str, list[np.ndarray]]:
    """Top-level field -> host leaves of that field."""
    return {
        f.name: [_host(leaf) for leaf in jax.tree_util.tree_leaves(getattr(state, f.name))]
        for f in dataclasses.fields(state)
    }


def _equal(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(np.array_equal(x, y, equal_nan=True) for x, y in zip(a, b))


def hand_loop(strategy, problem, generations, key, maximize=False):
    """``run``'s key schedule by hand, ``tell`` seeing the raw (sign-flipped) fitness.

    Returns ``(initial state, final state, fields that some ask wrote)``."""
    ask, tell, evaluate = jax.jit(strategy.ask), jax.jit(strategy.tell), jax.jit(problem.evaluate)
    init_key, loop_key = jax.random.split(key)
    params = strategy.default_params()
    state = jax.jit(strategy.init)(init_key, params)  # as run does (an eager init may round otherwise)
    asked: set[str] = set()
    for g in range(generations):
        ask_key, eval_key, tell_key = evotensor.generation_keys(loop_key, g)
        before = _fields(state)
        x, state = ask(ask_key, state, params)
        after = _fields(state)
        asked |= {f for f in before if not _equal(before[f], after[f])}
        f = evaluate(eval_key, x).fitness
        state, _ = tell(tell_key, state, x, -f if maximize else f, params)
    return jax.jit(strategy.init)(init_key, params), state, asked


# one strategy of each kind in the default suite (~3 s each); the whole table with ``-m slow``
FAST_TIER = ("CMAES", "SNES", "OpenES", "SimpleGA", "PBT", "CEM")
TABLE = [n if n in FAST_TIER else pytest.param(n, marks=pytest.mark.slow) for n in STRATEGY_NAMES]


@pytest.mark.parametrize("name", TABLE)
def test_all_nan_generations_under_run_leave_the_state_as_by_hand(name):
    strategy, key = build(name, DIMS), jax.random.key(4)
    result = evotensor.run(strategy, AllNaN(), GENERATIONS, key, chunk_size=GENERATIONS)
    init, by_hand, asked = hand_loop(strategy, AllNaN(), GENERATIONS, key)

    run_fields, hand_fields = _fields(result.state), _fields(by_hand)
    for field in run_fields:
        assert _equal(run_fields[field], hand_fields[field]), f"{name}: run and hand loop differ in {field}"
    assert np.all(result.history["nonfinite"] == strategy.population_size)
    assert result.best_fitness == np.inf  # nothing valid was ever seen

    # what may move: counters (and the schedules that follow them, for strategies that do not freeze)
    # and what ``ask`` writes (the last draw); everything else is where it started
    init_fields = _fields(init)
    moving = asked | set(strategy.counter_fields)
    frozen = [f for f in init_fields if f not in moving]
    if not strategy.freeze_on_all_invalid:  # archives: nothing enters; step/temperature schedules run on
        frozen = [f for f in frozen if f in ("best_solution", "best_fitness", "population", "fitness")]
    assert frozen, f"{name}: nothing of the search state is checked"
    for field in frozen:
        assert _equal(run_fields[field], init_fields[field]), f"{name}: {field} moved"
    np.testing.assert_array_equal(
        np.asarray(strategy.mean_solution(result.state)), np.asarray(strategy.mean_solution(init))
    )


def test_maximized_all_nan_generations_freeze_too():
    """The sign flip of a maximized problem does not turn the NaNs into something valid."""
    strategy, key = build("CMAES", DIMS), jax.random.key(1)
    result = evotensor.run(strategy, AllNaN(maximize=True), 30, key, chunk_size=30)
    init, by_hand, _ = hand_loop(strategy, AllNaN(maximize=True), 30, key, maximize=True)
    np.testing.assert_array_equal(np.asarray(result.state.mean), np.asarray(init.mean))
    np.testing.assert_array_equal(np.asarray(result.state.sigma), np.asarray(by_hand.sigma))
    np.testing.assert_array_equal(np.asarray(result.state.C), np.asarray(init.C))
    assert result.best_fitness == -np.inf  # natural orientation: nothing valid, worst possible


def test_to_minimization_passes_an_all_invalid_generation_as_inf():
    out = to_minimization(Evaluation(fitness=jnp.array([jnp.nan, jnp.inf, -jnp.inf])), maximize=True)
    np.testing.assert_array_equal(out.fitness, [np.inf, np.inf, np.inf])
    mixed = to_minimization(Evaluation(fitness=jnp.array([[jnp.nan, 1.0], [jnp.nan, jnp.nan]])), False)
    assert np.all(np.asarray(mixed.fitness)[:, 0] == np.inf)  # a column without a finite entry
    assert mixed.fitness[0, 1] == 1.0 and 1.0 < mixed.fitness[1, 1] < np.inf  # the worst stand-in
