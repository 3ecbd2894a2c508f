"""Parent selection over *minimized* fitness (losses), vectorized and jit-able.

Every selector returns int32 indices into the population. The random draws are explicit, so each
selector is a random draw followed by a deterministic kernel that the tests compare with a plain
Python loop:

* :func:`tournament`: ``candidates = randint(key, (n, size), 0, pop)``; the winner of a row is its
  candidate of lowest fitness (the first one on ties);
* :func:`truncation`: uniform over the ``ceil(survival_rate * pop)`` best (EvoGP's default selection);
* :func:`rank_selection`: Baker's linear ranking on sort positions;
* :func:`roulette`: fitness-proportionate on ``max(f) - f`` (valid for losses of any sign);
* :func:`epsilon_lexicase`: per-case errors, static epsilon = median absolute deviation per case;
* :func:`elite_indices`: the ``n`` best (stable: ties keep population order).

Sampling from a probability vector (:func:`sample_from_probs`) uses the inverse CDF of one uniform
per draw.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp


def _check_fitness(fitness: jax.Array) -> jax.Array:
    fitness = jnp.asarray(fitness)
    if fitness.ndim != 1 or fitness.shape[0] < 1:
        raise ValueError(f"fitness must have shape [pop], got {fitness.shape}")
    return fitness


def _check_n(n: int) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    return n


def elite_indices(fitness: jax.Array, n: int) -> jax.Array:
    """Indices of the ``n`` lowest fitness values, best first (stable on ties), int32 ``[n]``."""
    fitness = _check_fitness(fitness)
    n = _check_n(n)
    if n > fitness.shape[0]:
        raise ValueError(f"n={n} exceeds the population size {fitness.shape[0]}")
    return jnp.argsort(fitness, stable=True)[:n].astype(jnp.int32)


def tournament_winners(fitness: jax.Array, candidates: jax.Array) -> jax.Array:
    """Winner of each row of ``candidates [n, size]`` (lowest fitness, first on ties), ``[n]``."""
    best = jnp.argmin(fitness[candidates], axis=1)
    return jnp.take_along_axis(candidates, best[:, None], axis=1)[:, 0].astype(jnp.int32)


def tournament(key: jax.Array, fitness: jax.Array, n: int, size: int = 7) -> jax.Array:
    """``n`` tournaments of ``size`` candidates drawn uniformly with replacement, int32 ``[n]``."""
    fitness = _check_fitness(fitness)
    n = _check_n(n)
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"size (tournament size) must be a positive int, got {size!r}")
    candidates = jax.random.randint(key, (n, size), 0, fitness.shape[0])
    return tournament_winners(fitness, candidates)


def truncation(key: jax.Array, fitness: jax.Array, n: int, survival_rate: float = 0.3) -> jax.Array:
    """``n`` parents drawn uniformly among the ``ceil(survival_rate * pop)`` best, int32 ``[n]``."""
    fitness = _check_fitness(fitness)
    n = _check_n(n)
    if not 0.0 < survival_rate <= 1.0:
        raise ValueError(f"survival_rate must be in (0, 1], got {survival_rate!r}")
    k = max(1, math.ceil(survival_rate * fitness.shape[0]))
    order = jnp.argsort(fitness, stable=True)
    return order[jax.random.randint(key, (n,), 0, k)].astype(jnp.int32)


def sample_from_probs(key: jax.Array, probs: jax.Array, n: int) -> jax.Array:
    """``n`` indices drawn from ``probs [pop]`` (non-negative, any positive sum) by inverse CDF:
    draw ``i`` is the first index whose cumulative probability exceeds ``u_i * total``."""
    u = jax.random.uniform(key, (n,))
    cdf = jnp.cumsum(probs)
    idx = jnp.searchsorted(cdf, u * cdf[-1], side="right")
    return jnp.minimum(idx, probs.shape[0] - 1).astype(jnp.int32)


def rank_probabilities(fitness: jax.Array, pressure: float | jax.Array = 2.0) -> jax.Array:
    """Baker's linear ranking: the individual at sort position ``r`` (0 best, stable) gets
    ``(pressure - (2 * pressure - 2) * r / (pop - 1)) / pop``; ``pressure`` in ``[1, 2]``."""
    fitness = _check_fitness(fitness)
    pop = fitness.shape[0]
    order = jnp.argsort(fitness, stable=True)
    position = jnp.zeros(pop, jnp.float32).at[order].set(jnp.arange(pop, dtype=jnp.float32))
    frac = position / max(pop - 1, 1)
    return (pressure - (2.0 * pressure - 2.0) * frac) / pop


def rank_selection(
    key: jax.Array, fitness: jax.Array, n: int, pressure: float | jax.Array = 2.0
) -> jax.Array:
    """``n`` parents by linear ranking (:func:`rank_probabilities`), int32 ``[n]``."""
    return sample_from_probs(key, rank_probabilities(fitness, pressure), _check_n(n))


def roulette_probabilities(fitness: jax.Array) -> jax.Array:
    """Fitness-proportionate probabilities for a loss: ``w = max(f) - f`` normalized (the worst gets
    0; valid for negative losses); uniform when all values are equal."""
    fitness = _check_fitness(fitness)
    w = jnp.max(fitness) - fitness
    total = jnp.sum(w)
    pop = fitness.shape[0]
    return jnp.where(total > 0, w / jnp.where(total > 0, total, 1.0), 1.0 / pop)


def roulette(key: jax.Array, fitness: jax.Array, n: int) -> jax.Array:
    """``n`` parents by roulette wheel on :func:`roulette_probabilities`, int32 ``[n]``."""
    return sample_from_probs(key, roulette_probabilities(fitness), _check_n(n))


def lexicase_epsilon(errors: jax.Array) -> jax.Array:
    """Per-case epsilon: the median absolute deviation of the finite errors of each case ``[n_cases]``
    (0 where a case has no finite error)."""
    e = jnp.where(jnp.isfinite(errors), errors, jnp.nan)
    med = jnp.nanmedian(e, axis=0)
    mad = jnp.nanmedian(jnp.abs(e - med), axis=0)
    return jnp.where(jnp.isfinite(mad), mad, 0.0)


def lexicase_from_draws(errors: jax.Array, epsilon: jax.Array, orders: jax.Array, u: jax.Array) -> jax.Array:
    """The deterministic part of epsilon-lexicase.

    Args:
        errors: ``[pop, n_cases]`` per-case errors (lower is better; NaN counts as +inf).
        epsilon: ``[n_cases]`` tolerance per case.
        orders: int ``[n, n_cases]``: the case order of each selection.
        u: ``[n]`` uniforms picking among the survivors of each selection (the ``floor(u * count)``-th
            survivor in population order).

    Returns:
        int32 ``[n]``.
    """
    errors = jnp.where(jnp.isnan(errors), jnp.inf, errors)
    pop = errors.shape[0]

    def step(pool, cases):  # pool [n, pop]; cases [n]
        e = errors[:, cases].T  # [n, pop]
        best = jnp.min(jnp.where(pool, e, jnp.inf), axis=1, keepdims=True)
        keep = pool & (e <= best + epsilon[cases][:, None])
        return keep, None

    pool0 = jnp.ones((orders.shape[0], pop), bool)
    pool, _ = jax.lax.scan(step, pool0, orders.T)
    count = jnp.sum(pool, axis=1)
    k = jnp.minimum(jnp.floor(u * count), count - 1)
    return jnp.argmax(jnp.cumsum(pool, axis=1) > k[:, None], axis=1).astype(jnp.int32)


def epsilon_lexicase(
    key: jax.Array, errors: jax.Array, n: int, epsilon: jax.Array | None = None
) -> jax.Array:
    """``n`` parents by epsilon-lexicase selection (La Cava et al. 2016), int32 ``[n]``.

    Each selection shuffles the cases, keeps the individuals within ``epsilon`` of the best of the
    pool on each case in turn, and draws uniformly among the last pool.

    Args:
        errors: ``[pop, n_cases]``, lower is better.
        epsilon: ``[n_cases]``; default :func:`lexicase_epsilon` (static MAD per case).

    Cost ``O(n * pop * n_cases)``.
    """
    errors = jnp.asarray(errors)
    if errors.ndim != 2:
        raise ValueError(f"errors must have shape [pop, n_cases], got {errors.shape}")
    n = _check_n(n)
    eps = lexicase_epsilon(errors) if epsilon is None else jnp.asarray(epsilon)
    k_order, k_pick = jax.random.split(key)
    orders = jnp.argsort(jax.random.uniform(k_order, (n, errors.shape[1])), axis=1)
    u = jax.random.uniform(k_pick, (n,))
    return lexicase_from_draws(errors, eps, orders, u)
