"""The reproduction plan: neat-python 2.1's ``DefaultReproduction.reproduce`` as index arithmetic.

:func:`plan` decides, for every slot of the next population, which genomes of the current one are
its parents and whether it is an elite (copied unchanged); crossover and mutation then follow the
plan. Fitness: **higher is better**, sanitized first (:func:`evotensor.neat.species.sanitize_fitness`:
NaN/inf become worse than every finite value before any sharing arithmetic).

Steps (neat-python's, over the species that survived :func:`~evotensor.neat.species.update_stagnation`):

1. **Adjusted fitness** per species (``fitness_sharing``):

   * ``"normalized"`` (neat-python's default): ``(mean member fitness - min) / max(1, max - min)``,
     min and max over the members of all surviving species;
   * ``"canonical"``: the mean member fitness, shifted by ``|min| + 1e-6`` when the smallest is
     negative;
   * ``"rank"`` (TensorNEAT's default): linear rank shares ``(N, N-1, ..., 1) / (N (N+1) / 2)``,
     best species first.

2. **Spawn** per species, with ``min_size = max(min_species_size, elitism)``:

   * ``spawn_method="smoothed"`` (neat-python's ``compute_spawn``): ``s = max(min_size, af / sum(af)
     * P)`` (``min_size`` when ``sum(af) <= 0``); move halfway from the previous size ``ps``:
     ``d = (s - ps) / 2``, ``ps + round(d)`` if that moves, else ``ps ± 1`` toward ``s``; normalize to
     ``P`` and round, at least ``min_size``;
   * ``spawn_method="proportional"`` (neat-python's ``compute_spawn_proportional``):
     ``max(min_size, round(af / sum(af) * P))``;
   * ``"rank"`` sharing uses TensorNEAT's rule instead: ``target = floor(share * P)``, ``ps + (target
     - ps) * spawn_number_change_rate``, at least ``min_size``, truncated.

   Then neat-python's ``_adjust_spawn_exact`` makes the total exactly ``P``: a shortfall is added
   one by one round-robin from the smallest species up, an excess removed round-robin from the
   largest down, never below ``min_size`` (ties in the order: :func:`species_order`). neat-python
   2.1 gives up (``RuntimeError``) when removing needs more than one round; here the round-robin
   simply continues, which always succeeds because ``max_species * min_size <= P`` is checked.
   ``round`` is round-half-to-even, as Python's. TensorNEAT puts its rounding error on the best
   species instead (which can push it below the minimum); the ``"rank"`` mode uses the exact
   adjustment too.

3. **Offspring.** Species are processed in :func:`~evotensor.neat.species.species_order` (neat-python
   processes its surviving species in stagnation's ascending-fitness order). Each species copies its
   top ``min(elitism, n)`` members unchanged (elites); its parent pool is its top
   ``min(n, max(2, ceil(survival_threshold * n)))`` members (``ceil`` of the float64 product, as
   neat-python); both parents of each child are drawn uniformly from the pool (the same one twice
   gives a mutated clone). ``parent1`` is the fitter: ``parent2``'s draw is ``parent1`` unless the
   first draw is strictly fitter (neat-python's ``configure_crossover``). Members are ranked by
   fitness, ties by the *larger* population index first (neat-python sorts by ``(fitness, id)``
   descending).

   Optional paper-mode bits: ``interspecies_crossover_prob`` (the second parent from another
   surviving species, uniformly, then uniformly among all its members; the Stanley &
   Miikkulainen paper uses 0.001) and ``mutate_only_prob`` (a child's second parent is its first:
   mutation without crossover; the paper uses 0.25).

   All of the plan's random numbers come from one draw of 32-bit words: a uniform choice among
   ``n`` is ``word % n`` (uniform up to a relative bias below ``n / 2**32``).

Slot layout: all elites first, in ascending population index (they keep their old genome ids in
neat-python, which are smaller than every new id), then the children species by species in
processing order. So population order keeps standing for neat-python's genome-id order, which
:func:`~evotensor.neat.species.speciate` follows.

**Extinction** (no species survived stagnation): ``plan.extinct`` is set and slot 0 is an elite
copy of the best genome; every other slot names it as both parents, with ``species = -1``, and
``spawn`` is all zero. neat-python then creates a new random population (``reset_on_extinction``)
or raises ``CompleteExtinctionException``. A compiled program cannot raise: with
``reset_on_extinction`` (``plan.reset``) the strategy replaces slots ``1..P-1`` by fresh genomes,
keeping the best genome in slot 0; without it the strategy must report the extinction so that the
host stops the run.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core.checks import ArgumentError, check_choice, check_fraction, check_int
from evotensor.core.pytree import pytree_dataclass
from evotensor.neat.species import (
    SpeciesState,
    clear_invalid,
    member_mask,
    order_from_rank,
    sanitize_fitness,
    species_rank,
    stable_rank,
)

__all__ = [
    "FITNESS_SHARING",
    "SPAWN_METHODS",
    "Plan",
    "ReproductionConfig",
    "adjust_spawn_exact",
    "parent_pool_sizes",
    "plan",
    "proportional_spawn",
    "rank_shares",
    "rank_spawn",
    "smoothed_spawn",
]

FITNESS_SHARING = ("normalized", "canonical", "rank")
SPAWN_METHODS = ("smoothed", "proportional")

_INT_MAX = int(np.iinfo(np.int32).max)


@dataclasses.dataclass(frozen=True)
class ReproductionConfig:
    """neat-python 2.1's ``[DefaultReproduction]`` (defaults from its XOR example) plus TensorNEAT's
    rank sharing and the paper's options. Hashable, static.

    Args:
        elitism: members copied unchanged per species.
        survival_threshold: fraction of each species (best first) eligible as parents; the pool
            has at least 2 members (or all, if fewer).
        min_species_size: least offspring per surviving species (the effective minimum is
            ``max(min_species_size, elitism)``).
        fitness_sharing: ``"normalized" | "canonical" | "rank"`` (module docstring).
        spawn_method: ``"smoothed" | "proportional"`` for normalized/canonical sharing.
        spawn_number_change_rate: rank sharing's step toward the target size (TensorNEAT: 0.5).
        interspecies_crossover_prob: chance that a child's second parent comes from another species.
        mutate_only_prob: chance that a (non-elite) child has no crossover partner.
        reset_on_extinction: set ``plan.reset`` on extinction (neat-python: new random population;
            else it raises ``CompleteExtinctionException``).
    """

    elitism: int = 2
    survival_threshold: float = 0.2
    min_species_size: int = 2
    fitness_sharing: str = "normalized"
    spawn_method: str = "smoothed"
    spawn_number_change_rate: float = 0.5
    interspecies_crossover_prob: float = 0.0
    mutate_only_prob: float = 0.0
    reset_on_extinction: bool = True

    def __post_init__(self):
        check_int(self.elitism, "elitism", minimum=0, maximum=2**31 - 1)
        check_fraction(self.survival_threshold, "survival_threshold", allow_zero=True)
        check_int(self.min_species_size, "min_species_size", maximum=2**31 - 1)
        check_choice(self.fitness_sharing, "fitness_sharing", FITNESS_SHARING)
        check_choice(self.spawn_method, "spawn_method", SPAWN_METHODS)
        check_fraction(self.spawn_number_change_rate, "spawn_number_change_rate", allow_zero=True)
        check_fraction(self.interspecies_crossover_prob, "interspecies_crossover_prob", allow_zero=True)
        check_fraction(self.mutate_only_prob, "mutate_only_prob", allow_zero=True)
        if not isinstance(self.reset_on_extinction, bool):
            raise ArgumentError(f"reset_on_extinction must be a bool, got {self.reset_on_extinction!r}")

    @property
    def min_size(self) -> int:
        """The effective per-species minimum, ``max(min_species_size, elitism)`` (neat-python)."""
        return max(self.min_species_size, self.elitism)


@pytree_dataclass
class Plan:
    """Who makes each slot of the next population (``P`` = ``population_size``, ``S`` species slots).

    * ``parent1 int32 [P]``, ``parent2 int32 [P]``: indices into the current population;
      ``parent1`` is at least as fit as ``parent2``; equal for elites and mutated clones.
    * ``elite bool [P]``: copy ``parent1`` unchanged (no crossover, no mutation).
    * ``species int32 [P]``: the slot of the species that produced it (``-1`` on extinction).
    * ``spawn int32 [S]``: offspring per species slot, elites included; sums to ``P`` exactly
      unless ``extinct`` (then all zero).
    * ``pool_size int32 [S]``: each species' parent pool ``min(n, max(2, ceil(r n)))`` (0 if gone).
    * ``num_elites int32 []``: slots ``0 .. num_elites - 1`` are the elites.
    * ``extinct bool []``: no species survived; ``reset bool []``: ``extinct`` and
      ``reset_on_extinction`` (re-initialize slots ``1..``, module docstring).
    * ``species_state``: the survivors with ``adjusted_fitness``, ``spawn`` and ``size`` set and
      ``generation + 1``; speciate the offspring with it.
    """

    parent1: jax.Array
    parent2: jax.Array
    elite: jax.Array
    species: jax.Array
    spawn: jax.Array
    pool_size: jax.Array
    num_elites: jax.Array
    extinct: jax.Array
    reset: jax.Array
    species_state: SpeciesState


def smoothed_spawn(
    adjusted: jax.Array, previous: jax.Array, mask: jax.Array, population_size: int, min_size: int
) -> jax.Array:
    """neat-python 2.1's ``compute_spawn`` (before the exact adjustment): ``int32 [S]``, 0 where
    ``mask`` is false.

    Args:
        adjusted: ``float32 [S]`` adjusted fitness; previous: ``int32 [S]`` current sizes (>= 1);
        mask: ``bool [S]`` surviving species; population_size: ``P``; min_size: the minimum.
    """
    af = jnp.where(mask, adjusted, 0.0).astype(jnp.float32)
    ps = previous.astype(jnp.float32)
    af_sum = jnp.sum(af)
    share = af / jnp.where(af_sum > 0, af_sum, 1.0) * population_size
    s = jnp.where(af_sum > 0, jnp.maximum(float(min_size), share), float(min_size))
    d = (s - ps) * 0.5
    c = jnp.round(d)  # half to even, as Python's round
    spawn = ps + jnp.where(c != 0, c, jnp.sign(d))
    spawn = jnp.where(mask, spawn, 0.0)
    total = jnp.sum(spawn)
    norm = population_size / jnp.where(total > 0, total, 1.0)
    out = jnp.maximum(float(min_size), jnp.round(spawn * norm))
    return jnp.where(mask, out, 0.0).astype(jnp.int32)


def proportional_spawn(
    adjusted: jax.Array, mask: jax.Array, population_size: int, min_size: int
) -> jax.Array:
    """neat-python 2.1's ``compute_spawn_proportional``: ``max(min_size, round(af / sum(af) * P))``
    (``min_size`` when ``sum(af) <= 0``); ``int32 [S]``, 0 where ``mask`` is false."""
    af = jnp.where(mask, adjusted, 0.0).astype(jnp.float32)
    af_sum = jnp.sum(af)
    share = jnp.round(af / jnp.where(af_sum > 0, af_sum, 1.0) * population_size)
    s = jnp.where(af_sum > 0, jnp.maximum(float(min_size), share), float(min_size))
    return jnp.where(mask, s, 0.0).astype(jnp.int32)


def rank_shares(mask: jax.Array) -> jax.Array:
    """``float32 [S]``: TensorNEAT's linear rank shares for species given in ascending order (the
    ``mask``-true entries first): the i-th of ``N`` gets ``(i + 1) / (N (N + 1) / 2)``."""
    m = jnp.sum(mask).astype(jnp.float32)
    pos = _prefix_sum(mask.astype(jnp.int32)) - 1
    return jnp.where(mask, (pos + 1.0) / jnp.maximum(m * (m + 1.0) / 2.0, 1.0), 0.0).astype(jnp.float32)


def rank_spawn(
    shares: jax.Array,
    previous: jax.Array,
    mask: jax.Array,
    population_size: int,
    min_size: int,
    change_rate: float,
) -> jax.Array:
    """TensorNEAT's spawn rule (before the exact adjustment): ``trunc(max(min_size, ps + (floor(share
    * P) - ps) * change_rate))``; ``int32 [S]``, 0 where ``mask`` is false."""
    target = jnp.floor(shares * population_size)
    ps = previous.astype(jnp.float32)
    s = ps + (target - ps) * jnp.float32(change_rate)
    s = jnp.maximum(float(min_size), s)
    return jnp.where(mask, jnp.trunc(s), 0.0).astype(jnp.int32)


def adjust_spawn_exact(spawn: jax.Array, mask: jax.Array, population_size: int, min_size: int) -> jax.Array:
    """neat-python 2.1's ``_adjust_spawn_exact``, in closed form: ``int32 [S]`` summing to
    ``population_size`` (given ``sum(mask) * min_size <= population_size`` and ``spawn >= min_size``
    on the mask).

    A shortfall ``D`` is handed out one by one, round-robin over the species sorted by ascending
    spawn (stable in the given order): each gets ``D // m`` plus one for the first ``D % m``. An
    excess ``E`` is taken round-robin over the species sorted by descending spawn (stable), skipping
    those at ``min_size``: after ``k`` full rounds species ``j`` lost ``min(k, cap_j)`` (``cap_j =
    spawn_j - min_size``); ``k`` is the largest with ``sum_j min(k, cap_j) <= E`` (exact integer
    arithmetic over the breakpoints ``cap_j``) and the remainder is taken from the first eligible
    species of the next round. Orders are stable ranks from ``[S, S]`` comparisons (no sort).
    """
    spawn = jnp.where(mask, spawn, 0).astype(jnp.int32)
    m = jnp.sum(mask, dtype=jnp.int32)
    diff = population_size - jnp.sum(spawn)

    pos_asc = stable_rank(jnp.where(mask, spawn, _INT_MAX))
    mm = jnp.maximum(m, 1)
    short = jnp.maximum(diff, 0)
    add = jnp.where(mask, short // mm + (pos_asc < short % mm).astype(jnp.int32), 0)

    excess = jnp.maximum(-diff, 0)
    cap = jnp.where(mask, jnp.maximum(spawn - min_size, 0), 0)
    # removed(k) = sum_j min(k, cap_j) is piecewise linear with breakpoints at the caps: the
    # largest breakpoint within the excess, then whole rounds over the species still above it
    removed_at_cap = jnp.sum(jnp.minimum(cap[:, None], cap[None, :]), axis=1)
    base = jnp.max(jnp.where(removed_at_cap <= excess, cap, 0))
    above = jnp.sum(cap > base, dtype=jnp.int32)
    removed_base = jnp.sum(jnp.minimum(base, cap))
    k = jnp.where(above > 0, base + (excess - removed_base) // jnp.maximum(above, 1), base)
    rest = excess - jnp.sum(jnp.minimum(k, cap))
    pos_desc = stable_rank(jnp.where(mask, -spawn, _INT_MAX))
    eligible = cap > k
    before = jnp.sum(eligible[None, :] & (pos_desc[None, :] <= pos_desc[:, None]), axis=1)
    extra = eligible & (before <= rest)
    remove = jnp.minimum(k, cap) + extra.astype(jnp.int32)
    return jnp.where(mask, spawn + add - remove, 0).astype(jnp.int32)


def _prefix_sum(x: jax.Array) -> jax.Array:
    """Inclusive prefix sums of a short integer vector (the species axis) as one ``[S, S]`` masked
    sum: exact, and it fuses into its consumers (a ``cumsum`` is several kernels on a CPU)."""
    i = jnp.arange(x.shape[0])
    return jnp.sum(jnp.where(i[None, :] <= i[:, None], x[None, :], 0), axis=1).astype(x.dtype)


def parent_pool_sizes(survival_threshold: float, max_members: int) -> np.ndarray:
    """``int32 [max_members + 1]``: the parent pool of a species of ``n`` members,
    ``min(n, max(2, ceil(survival_threshold * n)))``, with the product in float64 as neat-python
    (``0.2 * 5`` rounds to exactly 1.0 there). A host-side table, gathered by :func:`plan`."""
    n = np.arange(max_members + 1)
    return np.minimum(n, np.maximum(2, np.ceil(survival_threshold * n.astype(np.float64)))).astype(np.int32)


def plan(
    key: jax.Array,
    config: ReproductionConfig,
    species_state: SpeciesState,
    species_of: jax.Array,
    fitness: jax.Array,
    population_size: int | None = None,
) -> Plan:
    """The next generation's parents (module docstring for the exact rules).

    Args:
        key: a JAX random key.
        config: :class:`ReproductionConfig`.
        species_state: the state returned by :func:`~evotensor.neat.species.update_stagnation`
            (its valid species are the survivors; its ``fitness`` orders them).
        species_of: ``int32 [P_in]`` each genome's species slot.
        fitness: ``[P_in]``, higher is better (sanitized here).
        population_size: ``P``, slots of the next population (default ``P_in``); static.

    Returns:
        :class:`Plan`. Pure, jit-able and vmappable (``config`` and ``population_size`` static).
    """
    f = sanitize_fitness(fitness)
    P_in = f.shape[0]
    P = P_in if population_size is None else check_int(population_size, "population_size")
    st = species_state
    S = st.valid.shape[0]
    min_size = config.min_size
    if S * min_size > P:
        raise ArgumentError(
            f"population_size ({P}) must be >= max_species ({S}) * max(min_species_size, elitism) "
            f"({min_size}), so that every species can get its minimum"
        )
    member, seg, n = member_mask(st.valid, species_of)
    alive = st.valid & (n > 0)
    m = jnp.sum(alive, dtype=jnp.int32)
    extinct = m == 0

    # 1. adjusted fitness, over the surviving species' members
    n_safe = jnp.maximum(n, 1)
    mean = jax.ops.segment_sum(f, seg, num_segments=S + 1)[:S] / n_safe
    # processing order (species_order) from ranks: ``order[rank[s]] = s`` as one [S, S] sum, and
    # values put back in slot order by gathering at the rank (no sort, no scatter)
    rank = species_rank(alive, st.fitness, st.species_key)
    order = order_from_rank(rank)
    alive_o = alive[order]
    if config.fitness_sharing == "normalized":
        fmin = jnp.min(jnp.where(member, f, jnp.inf))
        fmax = jnp.max(jnp.where(member, f, -jnp.inf))
        span = jnp.maximum(1.0, fmax - fmin)
        af = (mean - fmin) / span
    elif config.fitness_sharing == "canonical":
        min_af = jnp.min(jnp.where(alive, mean, jnp.inf))
        af = jnp.where(min_af < 0, mean + (-min_af + 1e-6), mean)
    else:
        af = rank_shares(alive_o)[rank]
    af = jnp.where(alive, af, 0.0).astype(jnp.float32)

    # 2. spawn, computed in processing order
    af_o, n_o = af[order], n[order]
    if config.fitness_sharing == "rank":
        spawn_o = rank_spawn(af_o, n_o, alive_o, P, min_size, config.spawn_number_change_rate)
    elif config.spawn_method == "proportional":
        spawn_o = proportional_spawn(af_o, alive_o, P, min_size)
    else:
        spawn_o = smoothed_spawn(af_o, n_o, alive_o, P, min_size)
    spawn_o = adjust_spawn_exact(spawn_o, alive_o, P, min_size)
    spawn = spawn_o[rank]

    # 3. members ranked within species: fitness descending, ties by larger index first
    idx = jnp.arange(P_in, dtype=jnp.int32)
    ranked = jnp.lexsort((-idx, -f, seg)).astype(jnp.int32)
    start = _prefix_sum(n) - n
    start_ext = jnp.concatenate([start, jnp.sum(n, keepdims=True)])
    rank_in = jnp.zeros((P_in,), jnp.int32).at[ranked].set(idx - start_ext[seg[ranked]])
    elites_s = jnp.where(alive, jnp.minimum(config.elitism, n), 0)
    elite_pop = member & (rank_in < jnp.concatenate([elites_s, jnp.zeros((1,), jnp.int32)])[seg])
    num_elites = jnp.sum(elite_pop, dtype=jnp.int32)
    elite_list = jnp.argsort(~elite_pop, stable=True).astype(jnp.int32)
    pool = jnp.where(alive, jnp.asarray(parent_pool_sizes(config.survival_threshold, P_in))[n], 0)

    slot = jnp.arange(P, dtype=jnp.int32)
    is_elite = slot < num_elites
    children_o = jnp.where(alive_o, spawn_o - elites_s[order], 0)
    t = slot - num_elites
    # the species of child t: searchsorted(cumsum(children_o), t, side="right"), as a count
    bounds = _prefix_sum(children_o)
    pos = jnp.clip(jnp.sum(bounds[None, :] <= t[:, None], axis=1, dtype=jnp.int32), 0, S - 1)
    s_child = order[pos]

    # every random number of the plan from one flat draw of 32-bit words (one random-number kernel
    # to compile): an integer below n is ``word % n`` (uniform up to a relative bias below
    # n / 2**32), a uniform in [0, 1) the word's top 24 bits
    uses = ["a", "b"]
    if config.interspecies_crossover_prob > 0:
        uses += ["inter", "other", "other_member"]
    if config.mutate_only_prob > 0:
        uses += ["mutate_only"]
    words = jax.random.bits(key, (len(uses) * P,), jnp.uint32).reshape(len(uses), P)

    def below(use, n):
        return (words[uses.index(use)] % jnp.maximum(n, 1).astype(jnp.uint32)).astype(jnp.int32)

    def uniform(use):
        return (words[uses.index(use)] >> 8).astype(jnp.float32) * jnp.float32(2.0**-24)

    def member_at(s, u):
        return ranked[jnp.clip(start[s] + u, 0, P_in - 1)]

    a = member_at(s_child, below("a", pool[s_child]))
    b = member_at(s_child, below("b", pool[s_child]))
    if config.interspecies_crossover_prob > 0:
        inter = (uniform("inter") < config.interspecies_crossover_prob) & (m > 1)
        v = below("other", m - 1)
        other = order[jnp.clip(v + (v >= pos), 0, S - 1)]
        b_other = member_at(other, below("other_member", n[other]))
        b = jnp.where(inter, b_other, b)
    if config.mutate_only_prob > 0:
        b = jnp.where(uniform("mutate_only") < config.mutate_only_prob, a, b)
    a_fitter = f[a] > f[b]
    p1 = jnp.where(a_fitter, a, b)
    p2 = jnp.where(a_fitter, b, a)

    el = elite_list[jnp.clip(slot, 0, P_in - 1)]
    parent1 = jnp.where(is_elite, el, p1)
    parent2 = jnp.where(is_elite, el, p2)
    species = jnp.where(is_elite, seg[el], s_child)

    # extinction: slot 0 keeps the best genome, the rest are placeholders
    best = jnp.argmax(f).astype(jnp.int32)
    parent1 = jnp.where(extinct, best, parent1).astype(jnp.int32)
    parent2 = jnp.where(extinct, best, parent2).astype(jnp.int32)
    elite = jnp.where(extinct, slot == 0, is_elite)
    species = jnp.where(extinct, -1, species).astype(jnp.int32)

    new_state = st.replace(
        valid=alive, adjusted_fitness=af, spawn=spawn, size=n, generation=st.generation + 1
    )
    return Plan(
        parent1=parent1,
        parent2=parent2,
        elite=elite,
        species=species,
        spawn=spawn,
        pool_size=pool.astype(jnp.int32),
        num_elites=jnp.where(extinct, 1, num_elites).astype(jnp.int32),
        extinct=extinct,
        reset=extinct & config.reset_on_extinction,
        species_state=clear_invalid(new_state),
    )
