"""Tensorized speciation and stagnation: neat-python 2.1's ``DefaultSpeciesSet`` and
``DefaultStagnation`` over fixed-shape arrays with at most ``max_species`` (``S``) species.

Fitness convention: **higher is better** (NEAT's). Every function that takes a fitness vector first
passes it through :func:`sanitize_fitness`: finite values are clipped to ``±1e30`` (so sums over a
population stay finite in float32) and NaN, ``-inf`` *and* ``+inf`` become a value strictly below
every finite fitness (the library's rule, ``core.worst_for_nonfinite``), before any statistic or
sharing arithmetic; nothing non-finite reaches a :class:`SpeciesState`.

A generation, as the ``NEAT`` strategy wires it (neat-python's ``Population.run`` order)::

    state = init_species_state(spec, config)
    state, species_of = speciate(spec, config, distance_fn, population, state)   # generation 0
    # each generation: evaluate, then
    state, stagnant = update_stagnation(config, state, species_of, fitness)
    plan = reproduction.plan(key, repro_config, state, species_of, fitness)      # next generation's parents
    offspring = ...crossover/mutation following plan...
    state, species_of = speciate(spec, config, distance_fn, offspring, plan.species_state)

Species live in ``S`` slots. A slot's ``species_key`` is the species' global id (neat-python's
``indexer``, from 1); slots are reused, so wherever neat-python iterates species "in id order" this
module orders by ``species_key``, never by slot.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core.checks import ArgumentError, check_choice, check_int, check_real
from evotensor.core.pytree import pytree_dataclass
from evotensor.neat.genome import Genome, GenomeSpec

__all__ = [
    "FITNESS_LIMIT",
    "NO_FITNESS",
    "SPECIES_FITNESS_FUNCS",
    "SpeciesConfig",
    "SpeciesState",
    "clear_invalid",
    "init_species_state",
    "member_mask",
    "order_from_rank",
    "sanitize_fitness",
    "species_fitness",
    "species_order",
    "species_rank",
    "speciate",
    "stable_rank",
    "update_stagnation",
]

SPECIES_FITNESS_FUNCS = ("max", "mean", "min", "median")

#: finite fitness values are clipped to ``[-FITNESS_LIMIT, FITNESS_LIMIT]``.
FITNESS_LIMIT = 1e30

#: ``best_fitness`` of a species without history (neat-python: ``-sys.float_info.max``); finite.
NO_FITNESS = float(-np.finfo(np.float32).max)

_INT_MAX = int(np.iinfo(np.int32).max)
_BIG = float(np.finfo(np.float32).max)

DistanceFn = Callable[[Genome, Genome], jax.Array]


@dataclasses.dataclass(frozen=True)
class SpeciesConfig:
    """Speciation and stagnation settings (neat-python 2.1's ``[DefaultSpeciesSet]`` and
    ``[DefaultStagnation]``, defaults from its XOR example). Hashable, static.

    Args:
        compatibility_threshold: a genome joins a species whose representative is *strictly*
            closer than this (``d < threshold``).
        target_num_species: ``None`` keeps the threshold fixed; else after each speciation the
            threshold moves by ``threshold_adjust_rate`` up (more species than the target) or down
            (fewer), then is clamped to ``[threshold_min, threshold_max]`` (neat-python 2.1).
        threshold_adjust_rate, threshold_min, threshold_max: see above.
        max_species: ``S``, the fixed number of species slots. When all are used, a genome that
            would found a new species joins the nearest one instead (counted in
            ``SpeciesState.overflow``).
        species_fitness_func: ``"max" | "mean" | "min" | "median"`` of the members' fitness
            (``median`` is neat-python's: the upper middle element).
        max_stagnation: a species is stagnant when ``generation - last_improved >= max_stagnation``.
        species_elitism: the top this-many species by fitness are never removed as stagnant.
    """

    compatibility_threshold: float = 3.0
    target_num_species: int | None = None
    threshold_adjust_rate: float = 0.1
    threshold_min: float = 0.1
    threshold_max: float = 100.0
    max_species: int = 32
    species_fitness_func: str = "max"
    max_stagnation: int = 20
    species_elitism: int = 2

    def __post_init__(self):
        check_real(self.compatibility_threshold, "compatibility_threshold", 0.0, low_open=True)
        if self.target_num_species is not None:
            check_int(self.target_num_species, "target_num_species", maximum=2**31 - 1)
        check_real(self.threshold_adjust_rate, "threshold_adjust_rate", 0.0)
        check_real(self.threshold_min, "threshold_min", 0.0, low_open=True)
        check_real(self.threshold_max, "threshold_max", 0.0, low_open=True)
        if self.threshold_min > self.threshold_max:
            raise ArgumentError(
                f"threshold_min ({self.threshold_min}) must be <= threshold_max ({self.threshold_max})"
            )
        check_int(self.max_species, "max_species", maximum=2**31 - 1)
        check_choice(self.species_fitness_func, "species_fitness_func", SPECIES_FITNESS_FUNCS)
        check_int(self.max_stagnation, "max_stagnation", maximum=2**31 - 1)
        check_int(self.species_elitism, "species_elitism", minimum=0, maximum=2**31 - 1)


@pytree_dataclass
class SpeciesState:
    """Species slots ``[S]`` and the speciation scalars. Fields of invalid slots hold fixed
    values (key ``-1``, counters ``0``, fitness :data:`NO_FITNESS`; after :func:`speciate` the
    representative is the padding genome), so states compare bit for bit.

    * ``representatives: Genome [S, ...]``: each species' representative (a member of the
      population it was last speciated with).
    * ``valid bool [S]``: the slot holds a species.
    * ``species_key int32 [S]``: global species id; ``next_species_key int32 []`` is the counter.
    * ``created int32 [S]``: the generation of the first population the species had members in.
    * ``last_improved int32 [S]``: last generation its fitness beat ``best_fitness``.
    * ``best_fitness float32 [S]``: max of its fitness history (:data:`NO_FITNESS` if none).
    * ``fitness float32 [S]``: its fitness (``species_fitness_func``) at the last stagnation update.
    * ``adjusted_fitness float32 [S]``: the share computed by the last reproduction plan.
    * ``size int32 [S]``: members in the current population; ``spawn int32 [S]``: offspring the
      last plan gave it.
    * ``threshold float32 []``: the (possibly adapted) compatibility threshold.
    * ``generation int32 []``: the generation of the current population (0 for the initial one).
    * ``overflow int32 []``: genomes of the last speciation that found all ``S`` slots used and
      joined the nearest species instead of founding one.
    """

    representatives: Genome
    valid: jax.Array
    species_key: jax.Array
    created: jax.Array
    last_improved: jax.Array
    best_fitness: jax.Array
    fitness: jax.Array
    adjusted_fitness: jax.Array
    size: jax.Array
    spawn: jax.Array
    threshold: jax.Array
    next_species_key: jax.Array
    generation: jax.Array
    overflow: jax.Array

    @property
    def num_species(self) -> jax.Array:
        """``int32 []``: valid species."""
        return jnp.sum(self.valid, dtype=jnp.int32)


def init_species_state(spec: GenomeSpec, config: SpeciesConfig) -> SpeciesState:
    """No species yet (all ``S`` slots free), threshold ``compatibility_threshold``, generation 0,
    first species key 1 (neat-python's indexer). Speciate the initial population next."""
    S = config.max_species
    zeros = jnp.zeros((S,), jnp.int32)
    return SpeciesState(
        representatives=spec.empty((S,)),
        valid=jnp.zeros((S,), bool),
        species_key=jnp.full((S,), -1, jnp.int32),
        created=zeros,
        last_improved=zeros,
        best_fitness=jnp.full((S,), NO_FITNESS, jnp.float32),
        fitness=jnp.full((S,), NO_FITNESS, jnp.float32),
        adjusted_fitness=jnp.zeros((S,), jnp.float32),
        size=zeros,
        spawn=zeros,
        threshold=jnp.asarray(config.compatibility_threshold, jnp.float32),
        next_species_key=jnp.asarray(1, jnp.int32),
        generation=jnp.asarray(0, jnp.int32),
        overflow=jnp.asarray(0, jnp.int32),
    )


def sanitize_fitness(fitness: jax.Array) -> jax.Array:
    """``float32 [P]``, higher is better: finite values clipped to ``±FITNESS_LIMIT``; NaN and
    ``±inf`` replaced by ``min_finite - max(range, ...)`` (strictly worse than every finite value,
    :func:`evotensor.core.worst_for_nonfinite` mirrored); all zeros if nothing is finite."""
    f = jnp.asarray(fitness, jnp.float32)
    if f.ndim != 1:
        raise ArgumentError(f"fitness must be a vector [pop], got shape {f.shape}")
    # worst_for_nonfinite(-f), negated, with its two extremes from one reduction (fewer kernels):
    # finite values lie within +-FITNESS_LIMIT after the clip, so "some finite" is "max > -big"
    finite = jnp.isfinite(f)
    g = -jnp.clip(f, -FITNESS_LIMIT, FITNESS_LIMIT)
    big = jnp.finfo(jnp.float32).max
    ext = jnp.max(jnp.stack([jnp.where(finite, g, -big), jnp.where(finite, -g, -big)]), axis=1)
    max_finite, min_finite = ext[0], -ext[1]
    tiny = jnp.finfo(jnp.float32).tiny
    gap = jnp.maximum(max_finite - min_finite, jnp.maximum(1e-6 * jnp.abs(max_finite), tiny))
    worst = jnp.where(max_finite > -big, jnp.minimum(max_finite + gap, big), 0.0)
    return -jnp.where(finite, g, worst)


def clear_invalid(state: SpeciesState) -> SpeciesState:
    """The slot fields (not the representatives) of invalid slots set to their fixed values."""
    v = state.valid
    return state.replace(
        species_key=jnp.where(v, state.species_key, -1),
        created=jnp.where(v, state.created, 0),
        last_improved=jnp.where(v, state.last_improved, 0),
        best_fitness=jnp.where(v, state.best_fitness, NO_FITNESS),
        fitness=jnp.where(v, state.fitness, NO_FITNESS),
        adjusted_fitness=jnp.where(v, state.adjusted_fitness, 0.0),
        size=jnp.where(v, state.size, 0),
        spawn=jnp.where(v, state.spawn, 0),
    )


def member_mask(valid: jax.Array, species_of: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Who belongs to a valid species: ``(member bool [P], segment int32 [P], size int32 [S])``;
    ``segment`` is the slot for members and ``S`` otherwise (a spare segment for segment ops)."""
    S = valid.shape[0]
    species_of = jnp.asarray(species_of, jnp.int32)
    in_range = (species_of >= 0) & (species_of < S)
    member = in_range & valid[jnp.clip(species_of, 0, S - 1)]
    seg = jnp.where(member, species_of, S)
    size = jax.ops.segment_sum(jnp.ones_like(seg), seg, num_segments=S + 1)[:S]
    return member, seg, size


def species_fitness(func: str, fitness: jax.Array, seg: jax.Array, size: jax.Array) -> jax.Array:
    """``float32 [S]``: ``func`` (``max | mean | min | median``) of each species' members'
    (sanitized) fitness; ``seg``/``size`` from :func:`member_mask`. Empty species get
    :data:`NO_FITNESS`. ``median`` is neat-python's upper middle: ``sorted(values)[n // 2]``."""
    check_choice(func, "species_fitness_func", SPECIES_FITNESS_FUNCS)
    S = size.shape[0]
    if func == "max":
        out = jax.ops.segment_max(fitness, seg, num_segments=S + 1)[:S]
    elif func == "min":
        out = jax.ops.segment_min(fitness, seg, num_segments=S + 1)[:S]
    elif func == "mean":
        out = jax.ops.segment_sum(fitness, seg, num_segments=S + 1)[:S] / jnp.maximum(size, 1)
    else:
        order = jnp.lexsort((fitness, seg))  # by species, then fitness ascending
        start = jnp.cumsum(size) - size
        out = fitness[order][jnp.clip(start + size // 2, 0, fitness.shape[0] - 1)]
    return jnp.where(size > 0, out, NO_FITNESS).astype(jnp.float32)


def species_order(valid: jax.Array, fitness: jax.Array, species_key: jax.Array) -> jax.Array:
    """``int32 [S]``: slots in neat-python's ascending order (valid first, by species fitness, ties
    by species key, as its stable sort of id-ordered species). Stagnation protects the last
    ``species_elitism`` valid entries; reproduction processes species in this order."""
    f = jnp.where(valid, fitness, 0.0)
    k = jnp.where(valid, species_key, 0)
    return jnp.lexsort((k, f, ~valid)).astype(jnp.int32)


def species_rank(valid: jax.Array, fitness: jax.Array, species_key: jax.Array) -> jax.Array:
    """``int32 [S]``: each slot's position in :func:`species_order` (its inverse permutation), from
    ``[S, S]`` comparisons (no sort). ``fitness`` must hold no NaN where ``valid`` (a species'
    fitness is sanitized); ``-0.0`` and ``0.0`` tie, as in the sort."""
    f = jnp.where(valid, fitness, 0.0)
    k = jnp.where(valid, species_key, 0)
    i = jnp.arange(valid.shape[0])
    col, row = (lambda x: x[None, :]), (lambda x: x[:, None])  # entry j (columns) before entry i?
    before = col(i) < row(i)
    before = (col(k) < row(k)) | ((col(k) == row(k)) & before)
    before = (col(f) < row(f)) | ((col(f) == row(f)) & before)
    before = (col(valid) & ~row(valid)) | ((col(valid) == row(valid)) & before)
    return jnp.sum(before, axis=1, dtype=jnp.int32)


def update_stagnation(
    config: SpeciesConfig, species_state: SpeciesState, species_of: jax.Array, fitness: jax.Array
) -> tuple[SpeciesState, jax.Array]:
    """neat-python 2.1's ``DefaultStagnation.update`` for generation ``species_state.generation``.

    For each valid species with members: its fitness (``species_fitness_func`` over members, after
    :func:`sanitize_fitness`) is compared with ``best_fitness`` (its history's max); if strictly
    greater, ``last_improved = generation``. It is stagnant when ``generation - last_improved >=
    max_stagnation``, unless it is among the top ``species_elitism`` species in
    :func:`species_order` (fitness, ties: the larger key counts as fitter). neat-python's extra
    guard (never mark one when only ``species_elitism`` unmarked remain) is implied by that.

    Args:
        species_of: ``int32 [P]`` slot of each genome (from :func:`speciate`).
        fitness: ``[P]``, higher is better (sanitized here).

    Returns:
        ``(state, stagnant bool [S])``: stagnant species and species without members are removed
        (``valid`` false); ``fitness``, ``best_fitness``, ``last_improved`` and ``size`` updated.
    """
    st = species_state
    f = sanitize_fitness(fitness)
    _, seg, size = member_mask(st.valid, species_of)
    alive = st.valid & (size > 0)
    sf = species_fitness(config.species_fitness_func, f, seg, size)
    improved = alive & (sf > st.best_fitness)
    last_improved = jnp.where(improved, st.generation, st.last_improved)
    best = jnp.where(alive, jnp.maximum(st.best_fitness, sf), st.best_fitness)
    pos = species_rank(alive, sf, st.species_key)
    n_alive = jnp.sum(alive, dtype=jnp.int32)
    protected = pos >= n_alive - config.species_elitism
    stagnant = alive & (st.generation - last_improved >= config.max_stagnation) & ~protected
    new = st.replace(
        valid=alive & ~stagnant, fitness=sf, best_fitness=best, last_improved=last_improved, size=size
    )
    return clear_invalid(new), stagnant


def stable_rank(key: jax.Array) -> jax.Array:
    """``int32 [S]``: each entry's position in a stable ascending sort of ``key [S]`` (ties: the lower
    index first), from ``[S, S]`` comparisons: no sort kernel, for the small species axis."""
    i = jnp.arange(key.shape[0])
    before = (key[None, :] < key[:, None]) | ((key[None, :] == key[:, None]) & (i[None, :] < i[:, None]))
    return jnp.sum(before, axis=1, dtype=jnp.int32)


def order_from_rank(rank: jax.Array) -> jax.Array:
    """``int32 [S]``: the permutation ``order`` with ``order[rank[i]] = i`` (``rank [S]`` a
    permutation of ``0..S-1``), as one ``[S, S]`` masked sum instead of a scatter."""
    i = jnp.arange(rank.shape[0], dtype=jnp.int32)
    return jnp.sum(jnp.where(rank[None, :] == i[:, None], i[None, :], 0), axis=1, dtype=jnp.int32)


def _clean_distance(d: jax.Array) -> jax.Array:
    """Distances as float32 with NaN/inf replaced by the largest float32 (never within a threshold,
    nearest only when nothing else is)."""
    d = jnp.asarray(d, jnp.float32)
    return jnp.where(jnp.isfinite(d), d, _BIG)


def _take(population: Genome, index: jax.Array) -> Genome:
    return jax.tree_util.tree_map(lambda x: jnp.take(x, index, axis=0), population)


def speciate(
    spec: GenomeSpec,
    config: SpeciesConfig,
    distance_fn: DistanceFn,
    population: Genome,
    species_state: SpeciesState,
) -> tuple[SpeciesState, jax.Array]:
    """Partition ``population`` into species: neat-python 2.1's ``DefaultSpeciesSet.speciate``,
    tensorized, with population index order standing for its genome-id order.

    Semantics (each step as neat-python's, which iterates sequentially):

    1. **New representatives.** Existing species in ascending key order each take, as new
       representative, the closest (to the old representative) genome not yet taken; ties go to
       the lowest index. A species that finds no genome left (more species than genomes) is
       removed.
    2. **Founding.** neat-python visits the other genomes in order; each joins the species whose
       representative is closest among those existing *at that moment* with ``d < threshold``,
       else founds a new species with itself as representative. Here the founders are found one
       at a time: the next founder is the first unfixed genome with no representative within the
       threshold; it takes the first free slot and the next species key. This yields exactly
       neat-python's founders (genomes before a founder were covered by earlier representatives,
       and later representatives only add cover). Founding stops when every genome is covered or
       all ``S`` slots are used.
    3. **Assignment.** Each remaining genome joins, among the representatives founded before it
       (existing species count as founded before everything) with ``d < threshold``, the closest;
       ties go to the smallest species key (neat-python's dict order). A genome with no such
       representative is an *overflow* (all slots were used): it joins the nearest representative
       of all (ties: smallest key), where neat-python would have founded a species.
    4. Threshold adaptation toward ``target_num_species`` (neat-python 2.1), clamped.

    Distances that are NaN or infinite are treated as the largest float32.

    Cost: steps 1 and 2 are one ``lax.while_loop`` that calls ``distance_fn(population, genome[None])``
    once per iteration (one ``[P]`` column; one call site, so ``distance_fn`` is compiled once):
    twice per existing species (its old representative, then its new one) and once per founder,
    so ``2 * live species + founders <= 2 S`` columns, never a column for a free slot.

    Args:
        spec: the genome spec (for the padding representatives of free slots).
        config: :class:`SpeciesConfig` (``max_species`` must equal the state's ``S``).
        distance_fn: ``(population Genome[P], representatives Genome[R]) -> float32 [P, R]``.
        population: ``Genome [P, ...]``.
        species_state: the state from :func:`init_species_state` or a reproduction plan.

    Returns:
        ``(state, species_of int32 [P])``: ``species_of`` is each genome's slot.
        New species get ``created = last_improved = generation`` and no fitness history; the
        state's ``size``, ``overflow`` and ``threshold`` are updated; ``generation`` is unchanged.
    """
    st = species_state
    S = st.valid.shape[0]
    if S != config.max_species:
        raise ArgumentError(f"species_state has {S} slots but config.max_species is {config.max_species}")
    P = population.node_key.shape[0]
    thr = st.threshold
    idx = jnp.arange(P, dtype=jnp.int32)

    # 1.+2. one loop, one distance column per iteration (one call site of ``distance_fn``), only for
    # live slots: for each existing species in ascending key order, (a) the column to its old
    # representative picks the closest untaken genome as the new one, then (b) the column to that
    # new representative is stored; afterwards (c) founders, one at a time in population order,
    # each storing its own column, while genomes are uncovered and slots remain.
    key_order = order_from_rank(stable_rank(jnp.where(st.valid, st.species_key, _INT_MAX)))
    n_old = jnp.sum(st.valid, dtype=jnp.int32)
    old_reps = st.representatives

    # d: the distance columns stored as rows, [S, P] (a column update is one contiguous row)
    def uncovered(d, v, fx):
        dmin = jnp.min(jnp.where(v[:, None], d, jnp.inf), axis=0)
        return ~fx & ~(dmin < thr)

    # the slots' fields live in one int32 [4, S] carry (valid, representative, found_at, key), so
    # one select per iteration writes a slot's four fields; the first uncovered genome ``g`` (and
    # whether there is one) is found at the end of each iteration, for the next one and the loop's
    # condition (at the start nothing is covered: g = 0)
    def cond(carry):
        j, _, _, slots, _, _, _, any_uncovered = carry
        return (j < n_old) | (any_uncovered & jnp.any(slots[0] == 0))

    def body(carry):
        j, second, d, slots, fx, nk, g, _ = carry
        v, rep, fa, k = slots[0] != 0, slots[1], slots[2], slots[3]
        recentring = j < n_old
        s = key_order[jnp.minimum(j, S - 1)]
        is_a = recentring & ~second
        is_b = recentring & second
        free = jnp.argmax(~v).astype(jnp.int32)
        member = jnp.where(is_b, rep[s], g)
        target = jax.tree_util.tree_map(
            lambda o, p: jnp.where(is_a, o[s], p[member])[None], old_reps, population
        )
        col = _clean_distance(distance_fn(population, target))[:, 0]
        # (a) the closest untaken genome (ties: lowest index) becomes the representative
        i = jnp.argmin(jnp.where(fx, jnp.inf, col)).astype(jnp.int32)
        ok = is_a & ~fx[i]
        # (c) a founder takes the first free slot and the next species key
        founding = ~recentring
        slot = jnp.where(recentring, s, free)
        write = is_b | founding
        d = jnp.where(((jnp.arange(S) == slot) & write)[:, None], col[None, :], d)
        fx = fx | ((idx == jnp.where(founding, g, i)) & (ok | founding))
        fields = jnp.stack(
            [
                (v[slot] | ok | founding).astype(jnp.int32),
                jnp.where(ok, i, jnp.where(founding, g, rep[slot])),
                jnp.where(ok, -1, jnp.where(founding, g, fa[slot])),
                jnp.where(ok, st.species_key[s], jnp.where(founding, nk, k[slot])),
            ]
        )
        slots = jnp.where(jnp.arange(S) == slot, fields[:, None], slots)
        nk = nk + founding.astype(jnp.int32)
        # after (a): (b) if a representative was found, else the next species; after (b): next
        j = jnp.where(is_a & ok, j, j + recentring.astype(jnp.int32))
        second = is_a & ok
        left = uncovered(d, slots[0] != 0, fx)
        g = jnp.argmax(left).astype(jnp.int32)
        return j, second, d, slots, fx, nk, g, left[g]

    minus = jnp.full((S,), -1, jnp.int32)
    carry = (
        jnp.int32(0),
        jnp.bool_(False),
        jnp.full((S, P), _BIG, jnp.float32),
        jnp.stack([jnp.zeros((S,), jnp.int32), minus, jnp.full((S,), P, jnp.int32), minus]),
        jnp.zeros((P,), bool),
        st.next_species_key,
        jnp.int32(0),
        jnp.bool_(P > 0),
    )
    _, _, d_new, slots, _, next_key, _, _ = jax.lax.while_loop(cond, body, carry)
    valid, rep_idx, found_at, keys = slots[0] != 0, slots[1], slots[2], slots[3]

    # 3. assignment: representatives keep their species; others join the closest earlier one
    own = (
        jnp.full((P,), -1, jnp.int32)
        .at[jnp.where(valid, rep_idx, P)]
        .set(jnp.arange(S, dtype=jnp.int32), mode="drop")
    )
    by_key = order_from_rank(stable_rank(jnp.where(valid, keys, _INT_MAX)))  # ties -> smallest key
    d_k = d_new[by_key].T
    valid_k = valid[by_key]
    allowed = valid_k[None, :] & (found_at[by_key][None, :] < idx[:, None]) & (d_k < thr)
    has = jnp.any(allowed, axis=1)
    best = by_key[jnp.argmin(jnp.where(allowed, d_k, jnp.inf), axis=1)]
    nearest = by_key[jnp.argmin(jnp.where(valid_k[None, :], d_k, jnp.inf), axis=1)]
    species_of = jnp.where(own >= 0, own, jnp.where(has, best, nearest)).astype(jnp.int32)
    overflow = jnp.sum((own < 0) & ~has, dtype=jnp.int32)

    size = jax.ops.segment_sum(jnp.ones((P,), jnp.int32), species_of, num_segments=S)
    valid = valid & (size > 0)
    is_new = valid & (found_at >= 0) & (found_at < P)

    reps = _take(population, jnp.maximum(rep_idx, 0))
    empty = spec.empty((S,))
    reps = jax.tree_util.tree_map(
        lambda r, e: jnp.where(valid.reshape((S,) + (1,) * (r.ndim - 1)), r, e), reps, empty
    )

    # 4. threshold adaptation (neat-python 2.1: +-rate toward the target, then clamp)
    if config.target_num_species is not None:
        n = jnp.sum(valid, dtype=jnp.int32)
        rate = jnp.float32(config.threshold_adjust_rate)
        thr = thr + jnp.where(n > config.target_num_species, rate, 0.0)
        thr = thr - jnp.where(n < config.target_num_species, rate, 0.0)
        thr = jnp.clip(thr, config.threshold_min, config.threshold_max)

    g = st.generation
    new = st.replace(
        representatives=reps,
        valid=valid,
        species_key=keys,
        created=jnp.where(is_new, g, st.created),
        last_improved=jnp.where(is_new, g, st.last_improved),
        best_fitness=jnp.where(is_new, NO_FITNESS, st.best_fitness),
        fitness=jnp.where(is_new, NO_FITNESS, st.fitness),
        adjusted_fitness=jnp.where(is_new, 0.0, st.adjusted_fitness),
        size=size,
        spawn=jnp.where(is_new, 0, st.spawn),
        threshold=jnp.asarray(thr, jnp.float32),
        next_species_key=next_key,
        overflow=overflow,
    )
    return clear_invalid(new), species_of
