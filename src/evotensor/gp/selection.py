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

Parsimony pressure (gplearn's ``parsimony_coefficient``) is a change of the fitness the selectors
see, not a selector: :func:`parsimony_fitness` adds ``coefficient * length`` to the minimized fitness,
and :func:`covariant_parsimony` is gplearn's ``"auto"`` coefficient (Poli & McPhee 2008).

Sampling from a probability vector (:func:`sample_from_probs`) uses the inverse CDF of one uniform
per draw.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from evotensor.core.evaluation import worst_for_nonfinite


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


def _fmix32(x: jax.Array) -> jax.Array:
    """MurmurHash3's 32-bit finalizer (an invertible mix of all bits), uint32 -> uint32."""
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x85EBCA6B)
    x = x ^ (x >> 13)
    x = x * jnp.uint32(0xC2B2AE35)
    return x ^ (x >> 16)


def duplicate_groups(errors: jax.Array) -> jax.Array:
    """Group ids of identical error rows, int32 ``[pop]``: rows that differ always get different ids
    (equal rows usually share one; a hash collision can only split a group, never merge two).

    Rows are sorted by a 32-bit hash of their bits; a new group starts wherever the hash or the row
    changes between neighbours in that order, so distinct rows never share an id (equal rows share one
    unless a colliding row sorts between them, which makes lexicase stop later, never wrongly).

    Args:
        errors: ``[pop, n_cases]`` float32 (NaN-free; ``-0.0`` and ``0.0`` may land in two groups).
    """
    pop = errors.shape[0]
    bits = jax.lax.bitcast_convert_type(errors.astype(jnp.float32), jnp.uint32)
    # float bit patterns vary mostly in their high bits: mix every word (murmur3's finalizer) before
    # the position-weighted sum, so the hash depends on all bits
    powers = jnp.cumprod(jnp.full(errors.shape[1], jnp.uint32(0x9E3779B1)), dtype=jnp.uint32)
    h = _fmix32(jnp.sum(_fmix32(bits) * powers, axis=1, dtype=jnp.uint32))  # wraps mod 2**32
    order = jnp.argsort(h, stable=True)
    rows, hs = errors[order], h[order]
    new = jnp.any(rows[1:] != rows[:-1], axis=1) | (hs[1:] != hs[:-1])
    gid = jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.cumsum(new, dtype=jnp.int32)])
    return jnp.zeros(pop, jnp.int32).at[order].set(gid)


def lexicase_from_draws(errors: jax.Array, epsilon: jax.Array, orders: jax.Array, u: jax.Array) -> jax.Array:
    """The deterministic part of epsilon-lexicase.

    Args:
        errors: ``[pop, n_cases]`` per-case errors (lower is better; NaN and +-inf count as +inf,
            the worst: a non-finite error survives a case only when no error of the pool is finite,
            even if ``best + epsilon`` overflows).
        epsilon: ``[n_cases]`` tolerance per case.
        orders: int ``[n, n_cases]``: the case order of each selection.
        u: ``[n]`` uniforms picking among the survivors of each selection (the ``floor(u * count)``-th
            survivor in population order).

    Returns:
        int32 ``[n]``.

    The cases are filtered in a ``while_loop`` that stops as soon as every pool holds only copies of
    one error row (:func:`duplicate_groups`): no later case can split such a pool, so the result is
    that of filtering on all cases, and the loop usually ends after a few dozen cases instead of
    ``n_cases`` (cost ``O(n * pop)`` per case).
    """
    errors = jnp.where(jnp.isfinite(errors), errors, jnp.inf).astype(jnp.float32)
    pop, n_cases = errors.shape
    by_case = errors.T  # [n_cases, pop]: one case's errors are a contiguous row
    group = duplicate_groups(errors)
    n = orders.shape[0]

    def settled(pool):  # [n] bool: the pool holds one distinct error row (or fewer)
        hi = jnp.max(jnp.where(pool, group, -1), axis=1)
        lo = jnp.min(jnp.where(pool, group, pop), axis=1)
        return hi <= lo

    def cond(carry):
        t, pool = carry
        return (t < n_cases) & ~jnp.all(settled(pool))

    def body(carry):
        t, pool = carry
        cases = orders[:, t]
        e = by_case[cases]  # [n, pop]
        best = jnp.min(jnp.where(pool, e, jnp.inf), axis=1, keepdims=True)
        within = (e <= best + epsilon[cases][:, None]) & jnp.isfinite(e)
        # a pool whose errors on this case are all non-finite is kept whole (nothing to prefer)
        return t + 1, pool & (within | jnp.isinf(best))

    _, pool = jax.lax.while_loop(cond, body, (jnp.int32(0), jnp.ones((n, pop), bool)))
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
        errors: ``[pop, n_cases]``, lower is better; non-finite errors rank worst (see
            :func:`lexicase_from_draws`).
        epsilon: ``[n_cases]``; default :func:`lexicase_epsilon` (static MAD per case).

    The draws are ``k_order, k_pick = split(key)``, ``orders = argsort(uniform(k_order, (n,
    n_cases)), axis=1)``, ``u = uniform(k_pick, (n,))``.

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


def parsimony_fitness(fitness: jax.Array, length: jax.Array, coefficient: float | jax.Array) -> jax.Array:
    """Parsimony-penalized *minimized* fitness ``fitness + coefficient * length``, float32 ``[pop]``.

    In a problem's natural orientation this is gplearn's ``raw - coefficient * length * sign``
    (``sign = +1`` for a maximized metric, ``-1`` for a minimized one): a positive coefficient
    always penalizes length. Non-finite results (overflow) become the worst value
    (:func:`evotensor.core.evaluation.worst_for_nonfinite`).

    Args:
        fitness: ``[pop]`` minimized fitness.
        length: ``[pop]`` tree lengths (nodes).
        coefficient: ``[]`` penalty per node (may be traced).
    """
    fitness = _check_fitness(fitness).astype(jnp.float32)
    penalized = fitness + jnp.asarray(coefficient, jnp.float32) * jnp.asarray(length, jnp.float32)
    return worst_for_nonfinite(penalized)


def covariant_parsimony(fitness: jax.Array, length: jax.Array) -> jax.Array:
    """gplearn's ``parsimony_coefficient="auto"``: Poli & McPhee's covariant coefficient, ``[]``.

    ``c = cov(length, -fitness) / var(length)`` over the population, with gplearn's estimators
    (``np.cov``: ``ddof=1``; ``np.var``: ``ddof=0``), for use in :func:`parsimony_fitness`
    (``fitness + c * length``). Subtracting the length's linear regression from the fitness this way
    makes the selection fitness uncorrelated with length, so selection alone does not change the
    mean length (Price's theorem). ``-fitness`` is the maximized orientation: for a problem whose
    natural metric is maximized (R^2, accuracy) this is exactly gplearn's coefficient
    ``np.cov(length, raw)[1, 0] / np.var(length)``. For a *minimized* metric (MSE) gplearn computes
    the same formula on the raw error and then *adds* ``c * length``, which has the opposite sign
    (it rewards length when the error falls with length); here the coefficient does not depend on the
    orientation, as in Poli & McPhee.

    Poli & McPhee derive it for fitness-proportionate selection; under tournament selection it does
    not hold the mean length fixed, and with a heavy-tailed fitness (the MSE of trees that blow up
    under raw semantics) a few outliers set the coefficient, which can then be large and of either
    sign. A fixed coefficient or a bounded metric (R^2) behaves more predictably there.

    Args:
        fitness: ``[pop]`` minimized fitness (finite; the strategy maps non-finite values first).
        length: ``[pop]`` tree lengths.

    Returns:
        float32 ``[]``; 0 when all lengths are equal or the statistics overflow.
    """
    f = _check_fitness(fitness).astype(jnp.float32)
    n = f.shape[0]
    if n < 2:
        return jnp.float32(0.0)
    ln = jnp.asarray(length, jnp.float32)
    dl = ln - jnp.mean(ln)
    cov = -jnp.sum(dl * (f - jnp.mean(f))) / (n - 1)
    var = jnp.mean(dl * dl)
    c = jnp.where(var > 0, cov / jnp.where(var > 0, var, 1.0), 0.0)
    return jnp.where(jnp.isfinite(c), c, 0.0).astype(jnp.float32)
