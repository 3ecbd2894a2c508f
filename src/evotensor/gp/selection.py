"""Parent selection over *minimized* fitness (losses), vectorized and jit-able.

Every selector returns int32 indices into the population. The random draws are explicit, so each
selector is a random draw followed by a deterministic kernel that the tests compare with a plain
Python loop:

* :func:`tournament`: ``candidates = randint(key, (n, size), 0, pop)``; the winner of a row is its
  candidate of lowest fitness (the first one on ties);
* :func:`truncation`: uniform over the ``ceil(survival_rate * pop)`` best (EvoGP's default selection);
* :func:`rank_selection`: Baker's linear ranking on sort positions;
* :func:`roulette`: fitness-proportionate on ``max(f) - f`` (valid for losses of any sign);
* :func:`epsilon_lexicase`: per-case errors, epsilon = the population's median absolute deviation per
  case, threshold relative to the pool's best (semi-dynamic); fast kernel :func:`lexicase_from_draws`;
* :func:`elite_indices`: the ``n`` best (stable: ties keep population order).

:class:`CaseErrors` is the typed contract between a problem and lexicase selection: a problem that
supports ``GP(selection="lexicase")`` returns ``Evaluation(fitness, info=CaseErrors(errors))``.

Parsimony pressure (gplearn's ``parsimony_coefficient``) is a change of the fitness the selectors
see, not a selector: :func:`parsimony_fitness` adds ``coefficient * length`` to the minimized fitness,
and :func:`covariant_parsimony` is gplearn's ``"auto"`` coefficient (Poli & McPhee 2008).

Sampling from a probability vector (:func:`sample_from_probs`) uses the inverse CDF of one uniform
per draw.
"""

from __future__ import annotations

import math
import warnings

import jax
import jax.numpy as jnp

from evotensor.core import rng
from evotensor.core.evaluation import worst_for_nonfinite
from evotensor.core.pytree import pytree_dataclass


@pytree_dataclass
class CaseErrors:
    """Per-case errors of a population: the ``Evaluation.info`` that lexicase selection reads.

    A problem that supports ``GP(selection="lexicase")`` returns
    ``Evaluation(fitness=..., info=CaseErrors(case_errors=errors))`` (e.g.
    ``SymbolicRegression(..., case_errors=True)``); ``GP.tell`` draws the next parents from them.

    Attributes:
        case_errors: ``[pop, n_cases]``, lower is better (e.g. a row's squared error); a tree with
            any non-finite error is never selected over one whose errors are all finite.

    ``info["case_errors"]`` (the untyped form problems returned before) still reads the field, with
    a ``DeprecationWarning``.
    """

    case_errors: jax.Array

    def __getitem__(self, name: str) -> jax.Array:
        # read access of the untyped form, for code written against ``info["case_errors"]``
        if name != "case_errors":
            raise KeyError(name)
        warnings.warn(
            'info["case_errors"] is deprecated: the per-case errors are the typed field '
            "info.case_errors of evotensor.gp.selection.CaseErrors",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.case_errors

    def __contains__(self, name: object) -> bool:
        return name == "case_errors"


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
    """Indices of the ``n`` lowest fitness values, best first (stable on ties), int32 ``[n]``.

    Ordered as ``jnp.argsort(fitness, stable=True)`` (``-0.0`` ties ``0.0``, NaNs last), found on
    order-reversed integer keys (ties: the lower index first) by ``lax.top_k``, or, for the few
    elites of the usual ``elite_rate`` (``n <= pop // 100 + 8``), by ``n`` passes that each take the
    largest key left: on a CPU XLA's ``top_k`` of integers is a full sort of the population, which
    costs more than those passes there."""
    fitness = _check_fitness(fitness)
    n = _check_n(n)
    pop = fitness.shape[0]
    if n > pop:
        raise ValueError(f"n={n} exceeds the population size {pop}")
    # _order_key is increasing in the value; flipping its bits makes the n smallest the n largest.
    # top_k compares signed ints, so shift the uint32 range onto int32 order-preservingly.
    x = jnp.where(fitness == 0, jnp.zeros_like(fitness), fitness)
    order = jnp.where(jnp.isnan(x), jnp.uint32(0xFFFFFFFF), _order_key(x))
    key = jax.lax.bitcast_convert_type(~order ^ jnp.uint32(0x80000000), jnp.int32)
    if n > pop // 100 + 8:
        return jax.lax.top_k(key, n)[1].astype(jnp.int32)
    index = jnp.arange(pop, dtype=jnp.int32)

    def take_largest(j, carry):  # the largest key not taken yet, the lowest index among equal ones
        taken, out = carry
        top = jnp.max(jnp.where(taken, jnp.iinfo(jnp.int32).min, key))
        i = jnp.min(jnp.where(~taken & (key == top), index, pop))
        return taken | (index == i), out.at[j].set(i)

    init = (jnp.zeros(pop, bool), jnp.zeros(n, jnp.int32))
    return jax.lax.fori_loop(0, n, take_largest, init)[1]


def uniform_ints(bits: jax.Array, n: int | jax.Array) -> jax.Array:
    """Integers in ``[0, n)`` from uniform random uint32 ``bits`` (``bits % n``), int32 of the same
    shape: uniform up to a relative bias below ``n / 2**32``. Lets the strategy take its selections'
    integers from the one random draw of a generation instead of a ``randint`` call of their own."""
    return (bits % jnp.asarray(n, jnp.uint32)).astype(jnp.int32)


def tournament_from_bits(bits: jax.Array, fitness: jax.Array) -> jax.Array:
    """:func:`tournament` with candidates ``uniform_ints(bits [n, size], pop)`` instead of a
    ``randint`` draw, int32 ``[n]``."""
    fitness = _check_fitness(fitness)
    return tournament_winners(fitness, uniform_ints(bits, fitness.shape[0]))


def truncation_from_bits(bits: jax.Array, fitness: jax.Array, survival_rate: float = 0.3) -> jax.Array:
    """:func:`truncation` with the draws ``uniform_ints(bits [n], k)`` instead of ``randint``."""
    fitness = _check_fitness(fitness)
    if not 0.0 < survival_rate <= 1.0:
        raise ValueError(f"survival_rate must be in (0, 1], got {survival_rate!r}")
    k = max(1, math.ceil(survival_rate * fitness.shape[0]))
    return jnp.argsort(fitness, stable=True)[uniform_ints(bits, k)].astype(jnp.int32)


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
    candidates = rng.randint(key, (n, size), 0, fitness.shape[0])
    return tournament_winners(fitness, candidates)


def truncation(key: jax.Array, fitness: jax.Array, n: int, survival_rate: float = 0.3) -> jax.Array:
    """``n`` parents drawn uniformly among the ``ceil(survival_rate * pop)`` best, int32 ``[n]``."""
    fitness = _check_fitness(fitness)
    n = _check_n(n)
    if not 0.0 < survival_rate <= 1.0:
        raise ValueError(f"survival_rate must be in (0, 1], got {survival_rate!r}")
    k = max(1, math.ceil(survival_rate * fitness.shape[0]))
    order = jnp.argsort(fitness, stable=True)
    return order[rng.randint(key, (n,), 0, k)].astype(jnp.int32)


def sample_from_probs(key: jax.Array, probs: jax.Array, n: int) -> jax.Array:
    """``n`` indices drawn from ``probs [pop]`` (non-negative, any positive sum) by inverse CDF:
    draw ``i`` is the first index whose cumulative probability exceeds ``u_i * total``."""
    return inverse_cdf(rng.uniform(key, (n,)), probs)


def inverse_cdf(u: jax.Array, probs: jax.Array) -> jax.Array:
    """:func:`sample_from_probs` given its uniforms ``u [n]``, int32 ``[n]``."""
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


def _order_key(x: jax.Array) -> jax.Array:
    """uint32 keys in the order of float32 ``x`` (``-0.0`` before ``0.0``, as ``lax.sort``)."""
    bits = jax.lax.bitcast_convert_type(x.astype(jnp.float32), jnp.uint32)
    return jnp.where(bits >> 31 == 1, ~bits, bits | jnp.uint32(0x80000000))


def _from_order_key(key: jax.Array) -> jax.Array:
    bits = jnp.where(key >> 31 == 1, key & jnp.uint32(0x7FFFFFFF), ~key)
    return jax.lax.bitcast_convert_type(bits, jnp.float32)


def _order_statistics(x: jax.Array, valid: jax.Array, low: jax.Array, high: jax.Array):
    """The ``low``-th and ``high``-th (0-based, ``high`` is ``low`` or ``low + 1``) smallest valid
    values of each column of ``x [pop, cols]``, without a sort: a bisection on the order keys (32
    passes of counting) finds the ``low``-th; the ``high``-th is it again or the next larger value."""
    key = jnp.where(valid, _order_key(x), jnp.uint32(0xFFFFFFFF))

    def halve(_, bounds):  # invariant: the answer's key lies in [lo, hi]
        lo, hi = bounds
        mid = lo + (hi - lo) // 2
        enough = jnp.sum(valid & (key <= mid), axis=0) >= low + 1
        return jnp.where(enough, lo, mid + 1), jnp.where(enough, mid, hi)

    lo = jnp.zeros(x.shape[1], jnp.uint32)
    lo, _ = jax.lax.fori_loop(0, 32, halve, (lo, jnp.full(x.shape[1], 0xFFFFFFFF, jnp.uint32)))
    repeated = jnp.sum(valid & (key <= lo), axis=0) >= high + 1
    above = jnp.min(jnp.where(valid & (key > lo), key, jnp.uint32(0xFFFFFFFF)), axis=0)
    return _from_order_key(lo), _from_order_key(jnp.where(repeated, lo, above))


def _nanmedian_columns(x: jax.Array, valid: jax.Array) -> jax.Array:
    """``jnp.nanmedian(where(valid, x, nan), axis=0)`` bit for bit (its linear interpolation between
    the two middle values, in its float32 arithmetic), ``[cols]``, without sorting."""
    count = jnp.sum(valid, axis=0).astype(jnp.float32)
    q = jnp.float32(0.5) * (count - 1)
    low, high = jnp.floor(q), jnp.ceil(q)
    high_weight = q - low
    low_weight = 1 - high_weight
    top = jnp.maximum(count - 1, 0)
    low_i = jnp.clip(low, 0, top).astype(jnp.int32)
    high_i = jnp.clip(high, 0, top).astype(jnp.int32)
    a, b = _order_statistics(x, valid, low_i, high_i)
    return jnp.where(count > 0, a * low_weight + b * high_weight, jnp.nan)


def lexicase_epsilon(errors: jax.Array) -> jax.Array:
    """Per-case epsilon: the median absolute deviation of the finite errors of each case ``[n_cases]``
    (0 where a case has no finite error), as ``jnp.nanmedian`` computes medians (bit for bit) but by
    bisection instead of a sort (``O(pop * n_cases)`` per pass, 66 passes)."""
    errors = jnp.asarray(errors, jnp.float32)
    finite = jnp.isfinite(errors)
    med = _nanmedian_columns(errors, finite)
    mad = _nanmedian_columns(jnp.abs(errors - med), finite)
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


# Tuning of the lexicase kernel (speed only, never the result): selections are filtered in chunks of
# about _CHUNK_ELEMENTS / pop pools (a chunk's working set stays in cache, and its loop stops when its
# own pools settle), _BLOCK cases per loop iteration; a pool is a [pop] mask, then member indices whose
# capacity shrinks by _SHRINK whenever every pool of the chunk fits, down to _TAIL, where all selections
# go on together (their pools are small, so many per step keep the loop overhead low).
_BLOCK = 8
_SHRINK = 4
_TAIL = 32
_CHUNK_ELEMENTS = 1 << 18


def _groups_in_order(errors: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Copies of an error row share every lexicase decision: only one representative per distinct row
    (:func:`duplicate_groups`; the first in population order) is filtered.

    Returns ``is_rep [pop]`` bool, ``size [pop + 1]`` (copies of representative ``r``; 0 for others and
    for the empty slot ``pop``), ``start [pop]`` (where ``r``'s group begins in ``members``) and
    ``members [pop]``: the population sorted by representative, each group in population order."""
    pop = errors.shape[0]
    group = duplicate_groups(errors)
    index = jnp.arange(pop, dtype=jnp.int32)
    rep = jnp.full(pop, pop, jnp.int32).at[group].min(index)[group]
    members = jnp.argsort(rep, stable=True).astype(jnp.int32)
    size = jnp.zeros(pop + 1, jnp.int32).at[rep].add(1)
    # rep[members] is sorted, so r's group begins at the first position holding r (a search, not a
    # scatter with duplicate indices, whose winner XLA leaves undefined on GPUs)
    start = jnp.searchsorted(rep[members], index, side="left").astype(jnp.int32)
    return rep == index, size, start, members


def _pick(
    weights: jax.Array, reps: jax.Array, u: jax.Array, start: jax.Array, members: jax.Array
) -> jax.Array:
    """The ``floor(u * count)``-th survivor in group order (representatives in population order, each
    followed by its copies) of pools given as representatives ``reps [rows, k]`` with their group sizes
    ``weights [rows, k]`` (0 = empty slot), int32 ``[rows]``."""
    cum = jnp.cumsum(weights, axis=1)
    count = cum[:, -1]
    k = jnp.minimum(jnp.floor(u * count).astype(jnp.int32), count - 1)
    j = jnp.argmax(cum > k[:, None], axis=1)
    before = jnp.take_along_axis(cum - weights, j[:, None], axis=1)[:, 0]
    first = start[jnp.minimum(jnp.take_along_axis(reps, j[:, None], axis=1)[:, 0], start.shape[0] - 1)]
    return members[first + k - before]


def _compact(keep: jax.Array, values: jax.Array, capacity: int, empty: int) -> jax.Array:
    """The ``values [rows, k]`` where ``keep [rows, k]`` holds, moved to the front in their order and
    cut to ``[rows, capacity]``, the rest filled with ``empty`` (no row may keep more than
    ``capacity``)."""
    rows = keep.shape[0]
    slot = jnp.where(keep, jnp.cumsum(keep, axis=1, dtype=jnp.int32) - 1, capacity)
    out = jnp.full((rows, capacity), empty, jnp.int32)
    return out.at[jnp.arange(rows)[:, None], slot].set(values, mode="drop")


def lexicase_from_draws(errors: jax.Array, epsilon: jax.Array, orders: jax.Array, u: jax.Array) -> jax.Array:
    """The deterministic part of epsilon-lexicase.

    Args:
        errors: ``[pop, n_cases]`` per-case errors (lower is better; NaN and +-inf count as +inf,
            the worst: a non-finite error survives a case only when no error of the pool is finite,
            even if ``best + epsilon`` overflows).
        epsilon: ``[n_cases]`` tolerance per case, ``>= 0``.
        orders: int ``[n, n_cases]``: the case order of each selection.
        u: ``[n]`` uniforms picking among the survivors of each selection: the ``floor(u * count)``-th
            survivor in group order (survivors sorted by the first index of their error row in the
            population (:func:`duplicate_groups`), then by index; without duplicate rows this is
            population order).

    Returns:
        int32 ``[n]``.

    Why it is fast: copies of an error row are filtered once (they share every decision); a pool
    holding one distinct row is final, so a chunk of selections stops as soon as all its pools are;
    while pools are large they are ``[pop]`` masks filtered ``chunk`` at a time (cache-sized), then
    member lists whose capacity shrinks by ``_SHRINK`` while every pool of the chunk fits; at ``_TAIL``
    members all selections go on together. Cost ``O(n * sum_t |pool after t cases|)``, against
    ``O(n * pop * n_cases)`` for a mask over the whole run.
    """
    if jnp.ndim(errors) != 2:
        raise ValueError(f"errors must be [pop, n_cases], got shape {jnp.shape(errors)}")
    pop, n_cases = jnp.shape(errors)
    if jnp.shape(epsilon) != (n_cases,):
        raise ValueError(f"epsilon must have shape ({n_cases},), got {jnp.shape(epsilon)}")
    if jnp.ndim(orders) != 2 or jnp.shape(orders)[1] != n_cases:
        raise ValueError(f"orders must be [n, {n_cases}], got shape {jnp.shape(orders)}")
    n = jnp.shape(orders)[0]
    if jnp.shape(u) != (n,):
        raise ValueError(f"u must have shape ({n},) (one uniform per selection), got {jnp.shape(u)}")
    errors = jnp.where(jnp.isfinite(errors), errors, jnp.inf).astype(jnp.float32)
    # by_case[c] is case c's errors (row n_cases: a no-op case for padding; column pop: the empty slot)
    by_case = jnp.concatenate([errors.T, jnp.zeros((1, pop), jnp.float32)])
    by_case = jnp.concatenate([by_case, jnp.full((n_cases + 1, 1), jnp.inf, jnp.float32)], axis=1)
    flat = by_case.reshape(-1)
    eps = jnp.concatenate([jnp.asarray(epsilon, jnp.float32), jnp.zeros(1, jnp.float32)])
    is_rep, size, start, by_group = _groups_in_order(errors)
    n_blocks = -(-n_cases // _BLOCK)
    padded = jnp.pad(
        orders.astype(jnp.int32), ((0, 0), (0, (n_blocks + 1) * _BLOCK - n_cases)), constant_values=n_cases
    )  # past the last case: no-op cases

    def survives(q, best, case):  # q [rows, k], best [rows]
        best = best[:, None]
        # a pool whose errors on this case are all non-finite is kept whole (nothing to prefer)
        return ((q <= best + eps[case][:, None]) & (q < jnp.inf)) | (best == jnp.inf)

    def step_mask(pool, case):  # pool [rows, pop] bool, case [rows]
        q = by_case[case, :pop]
        return pool & survives(q, jnp.min(jnp.where(pool, q, jnp.inf), axis=1), case)

    def step_members(members, case):  # members [rows, k] (pop = empty slot)
        q = flat[case[:, None] * (pop + 1) + members]
        return jnp.where(survives(q, jnp.min(q, axis=1), case), members, pop)

    tail = min(_TAIL, pop)
    capacities = [pop]
    while capacities[-1] // _SHRINK > tail:
        capacities.append(capacities[-1] // _SHRINK)
    capacities.append(tail)
    chunk = max(1, min(n, _CHUNK_ELEMENTS // pop))
    n_chunks = -(-n // chunk)

    def shrink_chunk(args):  # one chunk: filter until every pool fits the tail capacity
        order, u_chunk = args
        block, state = jnp.int32(0), jnp.broadcast_to(is_rep, (chunk, pop))
        done, picked = jnp.bool_(False), jnp.zeros(chunk, jnp.int32)
        for level in range(len(capacities) - 1):
            dense = level == 0

            def cond(carry, fit=capacities[level + 1], dense=dense):
                block, state = carry
                count = jnp.sum(state, axis=1) if dense else jnp.sum(state < pop, axis=1)
                return (block < n_blocks) & (jnp.max(count) > fit)

            def body(carry, dense=dense):
                block, state = carry
                cases = jax.lax.dynamic_slice_in_dim(order, block * _BLOCK, _BLOCK, axis=1)
                for j in range(_BLOCK):
                    state = step_mask(state, cases[:, j]) if dense else step_members(state, cases[:, j])
                return block + 1, state

            block, state = jax.lax.while_loop(cond, body, (block, state))
            # a chunk that ran out of cases before its pools fit the next capacity: they are final
            now_done = (block >= n_blocks) & ~done
            if dense:
                everyone = jnp.broadcast_to(jnp.arange(pop, dtype=jnp.int32), state.shape)
                picked = jax.lax.cond(  # the [chunk, pop] pick only when needed
                    now_done,
                    lambda pool, ids, old: _pick(
                        jnp.where(pool, size[:pop], 0), ids, u_chunk, start, by_group
                    ),
                    lambda pool, ids, old: old,
                    state,
                    everyone,
                    picked,
                )
                state = _compact(state, everyone, capacities[1], pop)
            else:
                picked = jnp.where(now_done, _pick(size[state], state, u_chunk, start, by_group), picked)
                state = _compact(state < pop, state, capacities[level + 1], pop)
            done = done | now_done
        state = jnp.where(done, pop, state)  # finished pools must not keep the tail loop running
        return state, jnp.full(chunk, block, jnp.int32), jnp.full(chunk, done), picked

    # capacities always holds pop and the tail size, so every selection starts in a chunk
    n_pad = n_chunks * chunk
    rows = jnp.arange(n_pad) % n  # padding rows repeat real ones: no-op orders would never settle
    out = jax.lax.map(
        shrink_chunk, (padded[rows].reshape(n_chunks, chunk, -1), u[rows].reshape(n_chunks, chunk))
    )
    members, blocks, done, picked = (x.reshape((n_pad,) + x.shape[2:])[:n] for x in out)

    def tail_cond(carry):
        step, members = carry
        return (step < n_blocks - jnp.min(blocks)) & ~jnp.all(jnp.sum(members < pop, axis=1) <= 1)

    def tail_body(carry):  # every selection from its own block on
        step, members = carry
        first = jnp.minimum(blocks + step, n_blocks) * _BLOCK
        cases = jnp.take_along_axis(padded, first[:, None] + jnp.arange(_BLOCK), axis=1)
        for j in range(_BLOCK):
            members = step_members(members, cases[:, j])
        return step + 1, members

    _, members = jax.lax.while_loop(tail_cond, tail_body, (jnp.int32(0), members))
    tail_picked = _pick(size[members], members, u, start, by_group)
    return jnp.where(done, picked, tail_picked).astype(jnp.int32)


def epsilon_lexicase(
    key: jax.Array, errors: jax.Array, n: int, epsilon: jax.Array | None = None
) -> jax.Array:
    """``n`` parents by epsilon-lexicase selection (La Cava et al. 2016), int32 ``[n]``.

    Each selection shuffles the cases, keeps the individuals within ``epsilon`` of the best *of the
    pool* on each case in turn, and draws uniformly among the last pool. With the default epsilon
    (the population's median absolute deviation per case, fixed for the whole draw) this is the
    "semi-dynamic" variant of La Cava et al. 2019 (the threshold moves with the pool's best).

    Args:
        errors: ``[pop, n_cases]``, lower is better; non-finite errors rank worst (see
            :func:`lexicase_from_draws`).
        epsilon: ``[n_cases]``, ``>= 0``; default :func:`lexicase_epsilon` (static MAD per case).

    The draws are ``k_order, k_pick = split(key)``, ``orders = argsort(uniform(k_order, (n,
    n_cases)), axis=1)``, ``u = uniform(k_pick, (n,))``; the pick among survivors is in group order
    (see :func:`lexicase_from_draws`).

    Cost: the order draw (a sort of ``[n, n_cases]``) plus ``O(n * sum_t |pool after t cases|)``
    (see :func:`lexicase_from_draws`); at most ``O(n * pop * n_cases)``.
    """
    errors = jnp.asarray(errors)
    if errors.ndim != 2:
        raise ValueError(f"errors must have shape [pop, n_cases], got {errors.shape}")
    n = _check_n(n)
    if epsilon is None:
        eps = lexicase_epsilon(errors)
    else:
        eps = jnp.asarray(epsilon, jnp.float32)
        if eps.shape != (errors.shape[1],):
            raise ValueError(f"epsilon must have shape ({errors.shape[1]},), got {eps.shape}")
        if not isinstance(eps, jax.core.Tracer) and not bool(jnp.all(eps >= 0)):
            raise ValueError("epsilon must be >= 0 (and not NaN) on every case")
    k_order, k_pick = jax.random.split(key)
    orders = jnp.argsort(rng.uniform(k_order, (n, errors.shape[1])), axis=1)
    u = rng.uniform(k_pick, (n,))
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
