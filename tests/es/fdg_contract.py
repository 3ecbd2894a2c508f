"""Checks shared by the gradient-estimating ES tests (OpenAI-ES family, ESMC, Guided ES, ...); not a
test module. Each runs one jitted runner from :mod:`tests.es.es_fdg_helpers`: its own, or ``run``, a
``make_runner(es, nonfinite=True)`` the caller compiled once for several checks."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from tests.es.es_fdg_helpers import (
    assert_finite_tree,
    check_vmap_matches_separate,
    make_runner,
    sphere,
    stack_params,
)

X0 = jnp.full(10, 3.0)  # the start of the 10-d sphere checks


def decay(v: float) -> optax.Schedule:
    """``v`` decaying 1% per generation down to 1e-5."""
    return optax.exponential_decay(v, 1, 0.99, end_value=1e-5)


def decaying_adam() -> dict:
    """``optimizer`` and ``sigma_schedule`` of the sphere checks: Adam from 0.1 and sigma from 0.3, both
    decaying 1% per generation."""
    return dict(optimizer=optax.adam(decay(0.1)), sigma_schedule=decay(0.3))


def check_solves_sphere_despite_nonfinite(es, generations: int = 1000, tol: float = 1e-6, run=None):
    """``sphere(mean) < tol`` after ``generations`` with two NaN/inf members per generation, and the
    state stays finite. Returns ``(state, metrics of the last generation)`` for further checks."""
    run = make_runner(es, nonfinite=True) if run is None else run
    state, metrics = run(jax.random.key(0), es.default_params(), generations)
    assert_finite_tree(state)
    assert float(sphere(state.mean)) < tol
    return state, metrics


def check_float32_long_run_stays_finite(es, generations: int = 3000, tol: float = 1e-3):
    """A float32 run far past convergence keeps a finite state and metrics and ``sphere(mean) < tol``.
    Returns ``(state, metrics of the last generation)`` for further checks."""
    state, metrics = make_runner(es)(jax.random.key(0), es.default_params(), generations)
    assert state.mean.dtype == jnp.float32
    assert_finite_tree(state)
    assert_finite_tree(metrics)
    assert float(sphere(state.mean)) < tol
    return state, metrics


def check_vmap_over_seeds_and_params(es, generations: int = 25, run=None, **overrides) -> None:
    """``vmap`` over seeds and the params ``overrides`` (equal-length lists, NaN/inf fitness injected)
    equals separate runs bit for bit."""
    run = make_runner(es, nonfinite=True) if run is None else run
    params = stack_params(es.default_params(), **overrides)
    num = len(next(iter(overrides.values())))
    check_vmap_matches_separate(es, run, params, jax.random.split(jax.random.key(3), num), generations)
