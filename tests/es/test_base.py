"""Tests for :mod:`evotensor.es.core.base` (the ``VectorStrategy.tell`` wrapper every strategy shares).

* A generation without one finite fitness leaves the search state unchanged (only the schedule
  counters advance), for distribution strategies (CMA-ES, CEM, Discovered ES), a gradient ES
  (OpenAI-ES) and an EDA (iAMaLGaM); one finite value is enough for the update to happen. Archive
  strategies that do not opt in (simulated annealing, PSO) still advance their schedules.
* Under x64 a float64 CMA-ES state receives float64 fitness: differences far below float32
  resolution still decide the ranking.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from evotensor.es import CEM, CMAES, PSO, DiscoveredES, IAMaLGaMUnivariate, OpenES, SimulatedAnnealing
from evotensor.es.core.base import keep_state_if_all_invalid, state_float_dtype

DIMS = 4
STRATEGIES = {
    "CMAES": lambda: CMAES(num_dims=DIMS, sigma_init=0.5),
    "OpenES": lambda: OpenES(8, num_dims=DIMS),
    "IAMaLGaMUnivariate": lambda: IAMaLGaMUnivariate(num_dims=DIMS),
    "CEM": lambda: CEM(8, num_dims=DIMS),
    "DiscoveredES": lambda: DiscoveredES(8, num_dims=DIMS),
}


def _leaves_with_names(state):
    return [
        (jax.tree_util.keystr(path), leaf) for path, leaf in jax.tree_util.tree_flatten_with_path(state)[0]
    ]


def _warm_state(es, params):
    """A state a few (valid) generations in, so momentum, paths and velocities are non-trivial."""
    state = es.init(jax.random.key(0), params)
    for g in range(3):
        x, state = es.ask(jax.random.key(10 + g), state, params)
        flat = es.space.ravel_population(x)
        state, _ = es.tell(jax.random.key(20 + g), state, x, jnp.sum((flat - 0.3) ** 2, axis=1), params)
    return state


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_all_invalid_generation_leaves_state_unchanged_except_counters(name):
    es = STRATEGIES[name]()
    params = es.default_params()
    tell = jax.jit(es.tell)
    state = _warm_state(es, params)
    x, state = es.ask(jax.random.key(99), state, params)
    pop = es.population_size
    bad = jnp.where(jnp.arange(pop) % 3 == 0, jnp.nan, jnp.where(jnp.arange(pop) % 3 == 1, jnp.inf, -jnp.inf))
    for fitness in (jnp.full((pop,), jnp.nan), bad):
        after, _ = tell(jax.random.key(5), state, x, fitness, params)
        for (path, a), b in zip(_leaves_with_names(state), jax.tree_util.tree_leaves(after)):
            if path == ".generation":
                assert int(b) == int(a) + 1  # the counter still counts tell calls
            else:
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=path)
    # one finite value carries ranking information: the search state moves
    one_valid = jnp.full((pop,), jnp.nan).at[pop - 1].set(1.0)
    after, _ = tell(jax.random.key(5), state, x, one_valid, params)
    moved = [
        path
        for (path, a), b in zip(_leaves_with_names(state), jax.tree_util.tree_leaves(after))
        if path != ".generation" and not np.array_equal(np.asarray(a), np.asarray(b))
    ]
    assert moved, "a generation with a finite fitness must update the state"


def test_archive_strategies_without_opt_in_keep_advancing_schedules():
    es = SimulatedAnnealing(4, num_dims=DIMS)
    assert not es.freeze_on_all_invalid
    params = es.default_params()
    state = es.init(jax.random.key(0), params)
    x, state = es.ask(jax.random.key(1), state, params)
    after, _ = es.tell(jax.random.key(2), state, x, jnp.full((4,), jnp.nan), params)
    assert float(after.temperature) < float(state.temperature)  # the cooling schedule goes on
    np.testing.assert_array_equal(np.asarray(after.mean), np.asarray(state.mean))  # nothing accepted
    assert float(after.best_fitness) == float(state.best_fitness)


def test_keep_state_if_all_invalid_is_a_select_under_vmap():
    old = {"a": jnp.zeros(3), "b": jnp.zeros(())}
    new = {"a": jnp.ones((2, 3)), "b": jnp.ones(2)}
    fitness = jnp.array([[jnp.nan, jnp.inf], [jnp.nan, 2.0]])
    out = jax.vmap(keep_state_if_all_invalid, in_axes=(None, 0, 0))(old, new, fitness)
    np.testing.assert_array_equal(np.asarray(out["a"]), [[0, 0, 0], [1, 1, 1]])
    np.testing.assert_array_equal(np.asarray(out["b"]), [0, 1])


def test_only_active_candidates_decide_whether_a_generation_is_valid():
    """``active`` (from :meth:`VectorStrategy.active_mask`) hides padding candidates from the check;
    by default every candidate is active."""
    old, new = (
        {"a": jnp.zeros(2), "generation": jnp.asarray(0)},
        {"a": jnp.ones(2), "generation": jnp.asarray(1)},
    )
    fitness = jnp.asarray([jnp.nan, 1.0, jnp.inf])
    kept = keep_state_if_all_invalid(old, new, fitness, ("generation",), jnp.asarray([True, False, True]))
    np.testing.assert_array_equal(np.asarray(kept["a"]), [0, 0])
    taken = keep_state_if_all_invalid(old, new, fitness, ("generation",), jnp.asarray([False, True, False]))
    np.testing.assert_array_equal(np.asarray(taken["a"]), [1, 1])
    np.testing.assert_array_equal(np.asarray(keep_state_if_all_invalid(old, new, fitness)["a"]), [1, 1])
    es = CMAES(num_dims=DIMS)
    mask = es.active_mask(es.init(jax.random.key(0)))
    assert mask.shape == (es.population_size,) and mask.dtype == jnp.bool_ and bool(mask.all())


def test_x64_cmaes_tell_keeps_float64_fitness_distinctions():
    """Fitness values ``1 + k * 1e-12`` are all ``1.0`` in float32 (spacing ~1.2e-7 near 1); a float32
    cast would rank them by index. In float64 they must rank like ``k`` itself."""
    with jax.enable_x64(True):
        es = CMAES(num_dims=DIMS, sigma_init=0.5)
        params = es.default_params()
        state = es.init(jax.random.key(0), params)
        assert state_float_dtype(state) == jnp.float64
        x, state = es.ask(jax.random.key(1), state, params)
        pop = es.population_size
        k = jnp.asarray(np.random.default_rng(0).permutation(pop)[::-1].copy(), jnp.float64)
        tiny = 1.0 + k * 1e-12
        assert np.all(np.asarray(tiny.astype(jnp.float32)) == 1.0)  # indistinguishable in float32
        by_tiny, _ = es.tell(jax.random.key(2), state, x, tiny, params)
        by_rank, _ = es.tell(jax.random.key(2), state, x, k, params)
        by_index, _ = es.tell(jax.random.key(2), state, x, jnp.arange(pop, dtype=jnp.float64), params)
        assert by_tiny.mean.dtype == jnp.float64
        for field in ("mean", "sigma", "p_sigma", "p_c", "C"):
            np.testing.assert_array_equal(
                np.asarray(getattr(by_tiny, field)), np.asarray(getattr(by_rank, field))
            )
        assert not np.array_equal(np.asarray(by_tiny.mean), np.asarray(by_index.mean))


def test_float32_state_still_gets_float32_fitness_under_x64():
    with jax.enable_x64(True):
        es = OpenES(8, num_dims=DIMS)
        params = es.default_params()
        state = es.init(jax.random.key(0), params)
        assert state_float_dtype(state) == jnp.float32
        x, state = es.ask(jax.random.key(1), state, params)
        after, metrics = es.tell(jax.random.key(2), state, x, jnp.arange(8, dtype=jnp.float64), params)
        for (path, a), b in zip(_leaves_with_names(state), jax.tree_util.tree_leaves(after)):
            assert a.dtype == b.dtype, path  # no silent promotion (a scan carry would break)


def test_float32_params_reads_each_field_from_the_strategy_and_names_a_missing_one():
    from evotensor.es import MR15GA
    from evotensor.es.core.base import float32_params
    from evotensor.es.pso import PSOParams

    pso = PSO(8, num_dims=3, inertia=0.5)
    params = float32_params(PSOParams, pso)
    assert float(params.inertia) == 0.5 and params.inertia.dtype == jnp.float32
    expected = (0.5, pso.cognitive, pso.social, pso.init_range)
    assert [float(v) for v in (params.inertia, params.cognitive, params.social, params.init_range)] == [
        np.float32(v) for v in expected
    ]

    class Partial:
        inertia = 0.5

    with pytest.raises(AttributeError, match="cognitive|social"):
        float32_params(PSOParams, Partial())
    with pytest.raises(ValueError, match=r"std_min \(2.0\) must be <= std_max \(1.0\)"):
        MR15GA(8, num_dims=3, std_min=2.0, std_max=1.0)


def test_check_std_bounds():
    from evotensor.es.core.base import check_std_bounds

    assert check_std_bounds(0, 1) == (0.0, 1.0)
    for lo, hi, arg in ((-1.0, 1.0, "std_min"), (0.0, 0.0, "std_max"), (0.5, 0.1, "std_min")):
        with pytest.raises(ValueError, match=arg):
            check_std_bounds(lo, hi)
