"""The reproduction plan against a slow sequential reference written from neat-python 2.1's
``DefaultReproduction`` (``compute_spawn``, ``compute_spawn_proportional``, ``_adjust_spawn_exact``,
the per-species elite/parent-pool rules; float64, lists and loops) and TensorNEAT's rank rule.

The reference's one deliberate difference from neat-python 2.1: ``_adjust_spawn_exact`` keeps
taking round-robin after the first round instead of raising (see ``reproduction.py``).
"""

from __future__ import annotations

import functools
import math

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import event, given

from evotensor.core.checks import ArgumentError
from evotensor.neat.genome import GenomeSpec
from evotensor.neat.reproduction import (
    ReproductionConfig,
    adjust_spawn_exact,
    parent_pool_sizes,
    plan,
)
from evotensor.neat.species import (
    SpeciesConfig,
    init_species_state,
    sanitize_fitness,
    speciate,
    update_stagnation,
)

SPEC = GenomeSpec(num_inputs=1, num_outputs=1, max_nodes=2, max_conns=1)

# ---------------------------------------------------------------- reference (neat-python 2.1, sequential)


class Fragile(Exception):
    """A value sits within float32's reach of a rounding boundary: float64 and float32 may differ."""


def _near_half(x, what):
    if abs((x - math.floor(x)) - 0.5) < 1e-3 and x != math.floor(x) + 0.5:
        raise Fragile(what)


def _near_int(x, what):
    if 0 < abs(x - round(x)) < 1e-3:
        raise Fragile(what)


def ref_compute_spawn(adjusted, previous, pop_size, min_size):
    af_sum = sum(adjusted)
    out = []
    for af, ps in zip(adjusted, previous):
        s = max(min_size, af / af_sum * pop_size) if af_sum > 0 else min_size
        d = (s - ps) * 0.5
        _near_half(d, "d")
        c = int(round(d))
        spawn = ps
        if abs(c) > 0:
            spawn += c
        elif d > 0:
            spawn += 1
        elif d < 0:
            spawn -= 1
        out.append(spawn)
    norm = pop_size / sum(out)
    for n in out:
        _near_half(n * norm, "n * norm")
    return [max(min_size, int(round(n * norm))) for n in out]


def ref_compute_spawn_proportional(adjusted, pop_size, min_size):
    af_sum = sum(adjusted)
    out = []
    for af in adjusted:
        if af_sum > 0:
            _near_half(af / af_sum * pop_size, "share")
            out.append(max(min_size, int(round(af / af_sum * pop_size))))
        else:
            out.append(min_size)
    return out


def ref_rank_spawn(previous, pop_size, min_size, rate):
    """TensorNEAT: previous sizes given best species first."""
    n = len(previous)
    out = []
    for rank, ps in enumerate(previous):
        share = (n - rank) / (n * (n + 1) / 2)
        _near_int(share * pop_size, "target")
        target = math.floor(share * pop_size)
        out.append(int(max(min_size, ps + (target - ps) * rate)))
    return out


def ref_adjust_spawn_exact(spawn, pop_size, min_size):
    spawn = list(spawn)
    diff = pop_size - sum(spawn)
    assert len(spawn) * min_size <= pop_size
    if diff > 0:
        order = sorted(range(len(spawn)), key=lambda i: spawn[i])
        i = 0
        while diff > 0:
            spawn[order[i]] += 1
            diff -= 1
            i = (i + 1) % len(order)
    elif diff < 0:
        order = sorted(range(len(spawn)), key=lambda i: spawn[i], reverse=True)
        remaining, i = -diff, 0
        while remaining > 0:  # neat-python 2.1 stops (and raises) after one round
            if spawn[order[i]] > min_size:
                spawn[order[i]] -= 1
                remaining -= 1
            i = (i + 1) % len(order)
    assert sum(spawn) == pop_size
    return spawn


def ref_reproduce(species, fitness, config, pop_size):
    """species: {key: (species fitness, [member ids])} of the survivors; fitness: sanitized floats.

    Returns {key: (spawn, elites [ids], pool [ids])}.
    """
    remaining = sorted(species, key=lambda k: (species[k][0], k))  # stagnation's ascending order
    members = {k: species[k][1] for k in remaining}
    if config.fitness_sharing == "canonical":
        adjusted = [sum(fitness[g] for g in members[k]) / len(members[k]) for k in remaining]
        low = min(adjusted)
        if low < 0:
            adjusted = [a + abs(low) + 1e-6 for a in adjusted]
    elif config.fitness_sharing == "normalized":
        everyone = [fitness[g] for k in remaining for g in members[k]]
        lo, span = min(everyone), max(1.0, max(everyone) - min(everyone))
        adjusted = [(sum(fitness[g] for g in members[k]) / len(members[k]) - lo) / span for k in remaining]
    previous = [len(members[k]) for k in remaining]
    min_size = max(config.min_species_size, config.elitism)
    if config.fitness_sharing == "rank":
        spawn = ref_rank_spawn(previous[::-1], pop_size, min_size, config.spawn_number_change_rate)[::-1]
    elif config.spawn_method == "proportional":
        spawn = ref_compute_spawn_proportional(adjusted, pop_size, min_size)
    else:
        spawn = ref_compute_spawn(adjusted, previous, pop_size, min_size)
    spawn = ref_adjust_spawn_exact(spawn, pop_size, min_size)
    out = {}
    for k, n in zip(remaining, spawn):
        ranked = sorted(members[k], key=lambda g: (fitness[g], g), reverse=True)
        elites = ranked[: config.elitism]
        cutoff = max(2, int(math.ceil(config.survival_threshold * len(ranked))))
        out[k] = (n, elites, ranked[:cutoff])
    return out


# ---------------------------------------------------------------- helpers

S = 4


def species_state(keys, slots, species_fitness, sizes):
    state = init_species_state(SPEC, SpeciesConfig(max_species=S))
    valid = np.zeros(S, bool)
    key = np.full(S, -1, np.int32)
    fit = np.zeros(S, np.float32)
    size = np.zeros(S, np.int32)
    for k, s, f, n in zip(keys, slots, species_fitness, sizes):
        valid[s], key[s], fit[s], size[s] = True, k, f, n
    return state.replace(
        valid=jnp.asarray(valid),
        species_key=jnp.asarray(key),
        fitness=jnp.asarray(fit),
        size=jnp.asarray(size),
        next_species_key=jnp.int32(max(keys, default=0) + 1),
    )


adjust_exact = jax.jit(adjust_spawn_exact, static_argnums=3)  # population_size traced, min_size static


@functools.cache
def jitted_plan(config: ReproductionConfig, population_size: int | None = None):
    return jax.jit(
        lambda key, state, species_of, fitness: plan(key, config, state, species_of, fitness, population_size)
    )


CONFIGS = {
    "neat-python": ReproductionConfig(),
    "proportional": ReproductionConfig(spawn_method="proportional", elitism=1, min_species_size=1),
    "canonical": ReproductionConfig(fitness_sharing="canonical", elitism=0, min_species_size=3),
    "rank": ReproductionConfig(fitness_sharing="rank", survival_threshold=0.5, elitism=1),
}

fit_grid = st.one_of(
    st.integers(-40, 40).map(lambda i: i * 0.25), st.sampled_from([float("nan"), float("inf"), -float("inf")])
)


@st.composite
def reproduction_case(draw, pop_size):
    n_species = draw(st.integers(1, S))
    keys = draw(st.lists(st.integers(1, 30), min_size=n_species, max_size=n_species, unique=True))
    slots = draw(st.permutations(range(S)))[:n_species]
    # every species gets a member; then the rest at random (some in a dead slot: -1)
    species_of = list(slots) + [draw(st.sampled_from([*slots, -1])) for _ in range(pop_size - n_species)]
    species_of = draw(st.permutations(species_of))
    fitness = [draw(fit_grid) for _ in range(pop_size)]
    species_fit = draw(st.lists(st.integers(-4, 4), min_size=n_species, max_size=n_species))
    return keys, slots, list(species_of), fitness, species_fit


def check_plan_against_reference(config, keys, slots, species_of, fitness, species_fit, pop_size, seed=0):
    P_in = len(species_of)
    sizes = [sum(1 for s in species_of if s == slot) for slot in slots]
    state = species_state(keys, slots, species_fit, sizes)
    p = jitted_plan(config, pop_size)(jax.random.key(seed), state, jnp.array(species_of), jnp.array(fitness))
    sanitized = np.asarray(sanitize_fitness(jnp.array(fitness, jnp.float32)), np.float64).tolist()
    P = pop_size or P_in

    # structural invariants, whatever the rounding
    spawn = np.asarray(p.spawn)
    parent1, parent2, elite = np.asarray(p.parent1), np.asarray(p.parent2), np.asarray(p.elite)
    produced = np.asarray(p.species)
    assert spawn.sum() == P and parent1.shape == (P,)
    assert np.all((parent1 >= 0) & (parent1 < P_in)) and np.all((parent2 >= 0) & (parent2 < P_in))
    assert np.all(np.bincount(produced, minlength=S) == spawn)
    assert np.all(spawn[list(slots)] >= config.min_size)
    f = np.asarray(sanitized)
    assert np.all(f[parent1] >= f[parent2])
    E = int(p.num_elites)
    assert elite.tolist() == [True] * E + [False] * (P - E)
    assert np.all(np.diff(parent1[:E]) > 0) and np.all(parent1[:E] == parent2[:E])
    order = sorted(range(len(keys)), key=lambda i: (species_fit[i], keys[i]))
    child_species = produced[E:]
    expected_blocks = [
        slots[i] for i in order for _ in range(int(spawn[slots[i]]) - int(np.sum(produced[:E] == slots[i])))
    ]
    assert child_species.tolist() == expected_blocks  # species by species, in processing order

    ref_species = {
        k: (sf, [g for g in range(P_in) if species_of[g] == s]) for k, s, sf in zip(keys, slots, species_fit)
    }
    try:
        ref = ref_reproduce(ref_species, sanitized, config, P)
    except Fragile as why:
        event(f"fragile ({why})")
        return p
    event("compared")
    for k, s in zip(keys, slots):
        n, elites, pool = ref[k]
        assert spawn[s] == n, (k, spawn, ref)
        assert sorted(parent1[:E][produced[:E] == s].tolist()) == sorted(elites)
        assert int(p.pool_size[s]) == len(pool)
        mine = ~elite & (produced == s)
        assert set(parent1[mine].tolist()) <= set(pool) and set(parent2[mine].tolist()) <= set(pool)
    return p


# ---------------------------------------------------------------- tests


@pytest.mark.parametrize("name", list(CONFIGS))
@given(data=st.data())
def test_plan_matches_sequential_reference(name, data):
    config = CONFIGS[name]
    case = data.draw(reproduction_case(16))
    check_plan_against_reference(config, *case, pop_size=None)


@given(reproduction_case(12), st.sampled_from([12, 20, 33]))
def test_total_is_exact_for_any_population_size(case, pop_size):
    check_plan_against_reference(CONFIGS["neat-python"], *case, pop_size=pop_size)


def test_spawn_known_values_from_neat_python():
    # species of 3 members each, one much fitter: compute_spawn gives [2, 2, 2, 15]-like totals that
    # neat-python 2.1 cannot repair in one round (it raises); the round-robin continues here
    spawn = adjust_exact(jnp.array([15, 2, 2, 2, 2, 2, 2, 2, 2, 2]), jnp.ones(10, bool), 30, 2)
    assert np.asarray(spawn).tolist() == [12, 2, 2, 2, 2, 2, 2, 2, 2, 2]
    assert ref_adjust_spawn_exact([15] + [2] * 9, 30, 2) == [12] + [2] * 9
    # shortfall: smaller species first, ties in the given order
    spawn = adjust_exact(jnp.array([5, 3, 3, 9]), jnp.ones(4, bool), 25, 2)
    assert np.asarray(spawn).tolist() == [6, 5, 4, 10]
    # excess with a cap: [9, 9, 3, 2] -> 18 (min 2): rounds take from 9, 9, 3 then 9, 9 ...
    spawn = adjust_exact(jnp.array([9, 9, 3, 2, 0]), jnp.array([1, 1, 1, 1, 0], bool), 18, 2)
    assert np.asarray(spawn).tolist() == ref_adjust_spawn_exact([9, 9, 3, 2], 18, 2) + [0]


@given(st.lists(st.integers(1, 12), min_size=1, max_size=6), st.integers(1, 3), st.integers(0, 40))
def test_adjust_spawn_exact_matches_reference(values, min_size, extra):
    values = [max(v, min_size) for v in values]
    pop_size = len(values) * min_size + extra
    mask = np.zeros(6, bool)
    mask[: len(values)] = True
    padded = values + [0] * (6 - len(values))
    out = np.asarray(adjust_exact(jnp.array(padded), jnp.asarray(mask), pop_size, min_size))
    assert out.tolist() == ref_adjust_spawn_exact(values, pop_size, min_size) + [0] * (6 - len(values))


def test_parent_pool_sizes_use_float64_ceil():
    table = parent_pool_sizes(0.2, 30)
    assert table.tolist() == [min(n, max(2, int(math.ceil(0.2 * n)))) for n in range(31)]
    assert table[5] == 2 and table[1] == 1 and table[0] == 0 and table[11] == 3


def test_nonfinite_fitness_never_reaches_state_or_parents():
    config = ReproductionConfig(elitism=2, min_species_size=2)
    fitness = jnp.array([jnp.nan, 1.0, 2.0, jnp.inf, -jnp.inf, 0.5, 3.0, jnp.nan])
    species_of = jnp.array([0, 0, 0, 1, 1, 1, 1, 0])
    sconfig = SpeciesConfig(max_species=S)
    state = species_state([1, 2], [0, 1], [0.0, 0.0], [4, 4])
    state, _ = jax.jit(functools.partial(update_stagnation, sconfig))(state, species_of, fitness)
    p = jitted_plan(config)(jax.random.key(0), state, species_of, fitness)
    for leaf in jax.tree_util.tree_leaves((state, p)):
        if jnp.issubdtype(leaf.dtype, jnp.floating):
            assert np.all(np.isfinite(np.asarray(leaf)))
    elites = set(np.asarray(p.parent1)[np.asarray(p.elite)].tolist())
    assert elites == {1, 2, 5, 6}  # the two best finite members of each species
    # the pools (2 each) hold only finite members, so no child has a non-finite parent
    bad = {0, 3, 4, 7}
    assert not bad & set(np.asarray(p.parent1).tolist()) and not bad & set(np.asarray(p.parent2).tolist())
    assert int(p.spawn.sum()) == 8


def test_extinction_keeps_the_best_genome_and_flags_reset():
    sconfig = SpeciesConfig(max_species=S, max_stagnation=1, species_elitism=0)
    state = species_state([1, 2], [0, 1], [0.0, 0.0], [3, 3])
    state = state.replace(best_fitness=jnp.full((S,), 50.0), generation=jnp.int32(9))
    species_of = jnp.array([0, 0, 0, 1, 1, 1])
    fitness = jnp.array([1.0, 5.0, 2.0, 3.0, jnp.nan, 4.0])
    state, stagnant = jax.jit(functools.partial(update_stagnation, sconfig))(state, species_of, fitness)
    assert np.asarray(stagnant).tolist() == [True, True, False, False]
    for reset in (True, False):
        config = ReproductionConfig(elitism=1, min_species_size=1, reset_on_extinction=reset)
        p = jitted_plan(config)(jax.random.key(0), state, species_of, fitness)
        assert bool(p.extinct) and bool(p.reset) == reset
        assert np.all(np.asarray(p.parent1) == 1) and np.all(np.asarray(p.parent2) == 1)
        assert np.asarray(p.elite).tolist() == [True] + [False] * 5
        assert np.all(np.asarray(p.species) == -1) and int(p.spawn.sum()) == 0
        assert not np.any(np.asarray(p.species_state.valid)) and int(p.species_state.generation) == 10


def test_interspecies_and_mutate_only_options():
    species_of = jnp.array([0] * 10 + [1] * 10)
    fitness = jnp.arange(20.0)
    state = species_state([1, 2], [0, 1], [0.0, 1.0], [10, 10])
    config = ReproductionConfig(interspecies_crossover_prob=1.0, elitism=0)
    p = jitted_plan(config)(jax.random.key(1), state, species_of, fitness)
    produced, p1, p2 = np.asarray(p.species), np.asarray(p.parent1), np.asarray(p.parent2)
    own = np.where(produced[:, None] == 0, np.arange(10), np.arange(10, 20))
    # exactly one parent from the child's species (its pool), the other from the other species
    in_own = [(a in row) + (b in row) for a, b, row in zip(p1, p2, own)]
    assert in_own == [1] * 20
    p = jitted_plan(ReproductionConfig(mutate_only_prob=1.0))(jax.random.key(1), state, species_of, fitness)
    assert np.all(np.asarray(p.parent1) == np.asarray(p.parent2))
    p = jitted_plan(ReproductionConfig())(jax.random.key(1), state, species_of, fitness)
    assert np.any(np.asarray(p.parent1) != np.asarray(p.parent2))


def test_plan_is_deterministic_and_vmaps():
    config = CONFIGS["neat-python"]
    species_of = jnp.array([0, 1, 2] * 6)
    fitness = jax.random.normal(jax.random.key(5), (3, 18))
    state = species_state([1, 2, 3], [0, 1, 2], [0.0, 1.0, 2.0], [6, 6, 6])
    f = jitted_plan(config)
    keys = jax.random.split(jax.random.key(2), 3)
    batched = jax.vmap(f, in_axes=(0, None, None, 0))(keys, state, species_of, fitness)
    for i in range(3):
        one = f(keys[i], state, species_of, fitness[i])
        for a, b in zip(jax.tree_util.tree_leaves(one), jax.tree_util.tree_leaves(batched)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b)[i])
    other = f(jax.random.key(99), state, species_of, fitness[0])
    assert np.any(np.asarray(other.parent1) != np.asarray(f(keys[0], state, species_of, fitness[0]).parent1))


def test_plan_state_feeds_the_next_speciation():
    species_of = jnp.array([0, 0, 1, 1, 1, 1])
    state = species_state([4, 7], [0, 1], [1.0, 2.0], [2, 4]).replace(generation=jnp.int32(3))
    config = ReproductionConfig(elitism=1, min_species_size=1)
    p = jitted_plan(config)(jax.random.key(0), state, species_of, jnp.arange(6.0))
    ns = p.species_state
    assert int(ns.generation) == 4
    assert np.asarray(ns.spawn).tolist() == np.asarray(p.spawn).tolist()
    assert np.asarray(ns.size).tolist() == [2, 4, 0, 0]
    assert np.all(np.asarray(ns.adjusted_fitness)[:2] > 0) and np.asarray(ns.species_key).tolist() == [
        4,
        7,
        -1,
        -1,
    ]


def test_reproduction_config_checks():
    with pytest.raises(ArgumentError, match="elitism"):
        ReproductionConfig(elitism=-1)
    with pytest.raises(ArgumentError, match="survival_threshold"):
        ReproductionConfig(survival_threshold=1.5)
    with pytest.raises(ArgumentError, match="fitness_sharing"):
        ReproductionConfig(fitness_sharing="shared")
    with pytest.raises(ArgumentError, match="spawn_method"):
        ReproductionConfig(spawn_method="exact")
    with pytest.raises(ArgumentError, match="min_species_size"):
        ReproductionConfig(min_species_size=0)
    with pytest.raises(ArgumentError, match="reset_on_extinction"):
        ReproductionConfig(reset_on_extinction=1)
    state = species_state([1], [0], [0.0], [5])
    with pytest.raises(ArgumentError, match="population_size"):  # 4 species slots * min 2 > 5
        plan(jax.random.key(0), ReproductionConfig(), state, jnp.zeros(5, jnp.int32), jnp.zeros(5))


def test_generations_chain_speciate_stagnation_plan():
    """A few generations of the documented pipeline with a stand-in variation (parent1's two node
    attributes plus noise) and a stand-in distance: the invariants hold every generation."""
    P = 24

    def distance(population, reps):
        a, b = population.node_attrs[:, 1, :2], reps.node_attrs[:, 1, :2]
        return jnp.abs(a[:, None, 0] - b[None, :, 0]) + jnp.abs(a[:, None, 1] - b[None, :, 1])

    sconfig = SpeciesConfig(
        max_species=S, target_num_species=3, max_stagnation=3, compatibility_threshold=1.0
    )
    rconfig = ReproductionConfig(elitism=1, min_species_size=2)

    @jax.jit
    def generation(key, population, state, species_of):
        k_fit, k_plan, k_mut = jax.random.split(key, 3)
        xy = population.node_attrs[:, 1, :2]
        fitness = -jnp.sum(xy**2, axis=1)
        fitness = jnp.where(jax.random.uniform(k_fit, (P,)) < 0.1, jnp.nan, fitness)
        state, _ = update_stagnation(sconfig, state, species_of, fitness)
        p = plan(k_plan, rconfig, state, species_of, fitness)
        child = xy[p.parent1] + jnp.where(p.elite[:, None], 0.0, 0.3 * jax.random.normal(k_mut, (P, 2)))
        population = population.replace(node_attrs=population.node_attrs.at[:, 1, :2].set(child))
        state, species_of = speciate(SPEC, sconfig, distance, population, p.species_state)
        return population, state, species_of, p

    population = SPEC.empty((P,))
    xy = 3.0 * jax.random.normal(jax.random.key(0), (P, 2))
    population = population.replace(node_attrs=population.node_attrs.at[:, 1, :2].set(xy))
    state = init_species_state(SPEC, sconfig)
    state, species_of = jax.jit(lambda p, s: speciate(SPEC, sconfig, distance, p, s))(population, state)
    seen_keys = set()
    for g in range(6):
        population, state, species_of, p = generation(jax.random.key(g + 1), population, state, species_of)
        assert int(p.spawn.sum()) == P or bool(p.extinct)
        assert int(state.generation) == g + 1
        valid = np.asarray(state.valid)
        keys = np.asarray(state.species_key)[valid]
        assert len(set(keys.tolist())) == len(keys) and np.all(keys < int(state.next_species_key))
        assert int(np.asarray(state.size).sum()) == P and np.all(valid[np.asarray(species_of)])
        assert 0.1 <= float(state.threshold) <= 100.0
        seen_keys |= set(keys.tolist())
        for leaf in jax.tree_util.tree_leaves(state):
            if jnp.issubdtype(leaf.dtype, jnp.floating):
                assert np.all(np.isfinite(np.asarray(leaf)))
    assert len(seen_keys) >= 2
