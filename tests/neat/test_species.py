"""Speciation and stagnation against slow sequential references written from neat-python 2.1's
``DefaultSpeciesSet.speciate`` and ``DefaultStagnation.update`` (dicts, loops, float64).

The genome distance is a stand-in defined here (an L1 distance on two node attributes), so that
these tests do not depend on ``evotensor.neat.distance``; the reference sees exactly the same
float32 distances (``|a - b| + |c - d|`` rounds identically in NumPy and XLA).
"""

from __future__ import annotations

import functools
import math

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import assume, event, given

from evotensor.core.checks import ArgumentError
from evotensor.neat.genome import GenomeSpec
from evotensor.neat.species import (
    NO_FITNESS,
    SpeciesConfig,
    init_species_state,
    member_mask,
    order_from_rank,
    sanitize_fitness,
    speciate,
    species_fitness,
    species_order,
    species_rank,
    stable_rank,
    update_stagnation,
)

SPEC = GenomeSpec(num_inputs=1, num_outputs=1, max_nodes=2, max_conns=1)
P, S = 12, 4


def genomes(xy) -> object:
    """Genomes whose output node's (bias, response) are the rows of ``xy [n, 2]``."""
    xy = np.asarray(xy, np.float32).reshape(-1, 2)
    g = SPEC.empty((xy.shape[0],))
    return g.replace(node_attrs=g.node_attrs.at[:, 1, :2].set(xy))


def l1_distance(population, representatives):
    """Stand-in for ``distance_matrix``: ``[P, R]`` L1 distance on the output node's two floats."""
    a = population.node_attrs[:, 1, :2]
    b = representatives.node_attrs[:, 1, :2]
    return jnp.abs(a[:, None, 0] - b[None, :, 0]) + jnp.abs(a[:, None, 1] - b[None, :, 1])


def l1_numpy(a, b):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return np.abs(a[:, None, 0] - b[None, :, 0]) + np.abs(a[:, None, 1] - b[None, :, 1])


# ---------------------------------------------------------------- references (sequential, neat-python)


def ref_speciate(dist_old, dist_pop, old_species, threshold, max_species, next_key):
    """neat-python 2.1's speciate with the documented slot cap.

    dist_old[g][slot]: distance of genome g to the old representative in ``slot``;
    dist_pop[a][b]: distance between genomes; old_species: {key: slot}.
    Returns (assignment {gid: key}, representatives {key: gid}, founded keys, overflow count).
    """
    unspeciated = list(range(len(dist_pop)))
    new_reps, members = {}, {}
    for sid in sorted(old_species):
        if not unspeciated:  # more species than genomes: the species is dropped
            continue
        slot = old_species[sid]
        candidates = [(dist_old[g][slot], g) for g in unspeciated]
        _, rep = min(candidates, key=lambda c: c[0])
        new_reps[sid] = rep
        members[sid] = [rep]
        unspeciated.remove(rep)
    founded, overflow = [], 0
    while unspeciated:
        g = unspeciated.pop(0)
        candidates = [
            (dist_pop[rep][g], sid) for sid, rep in new_reps.items() if dist_pop[rep][g] < threshold
        ]
        if candidates:
            sid = min(candidates, key=lambda c: c[0])[1]
        elif len(new_reps) < max_species:
            sid = next_key
            next_key += 1
            new_reps[sid] = g
            members[sid] = []
            founded.append(sid)
        else:  # all slots used: join the nearest representative
            sid = min(((dist_pop[rep][g], sid) for sid, rep in new_reps.items()), key=lambda c: c[0])[1]
            overflow += 1
        members[sid].append(g)
    assignment = {g: sid for sid, gs in members.items() for g in gs}
    return assignment, new_reps, founded, overflow


def ref_species_fitness(func, values):
    if func == "max":
        return max(values)
    if func == "min":
        return min(values)
    if func == "mean":
        return sum(values) / len(values)
    return sorted(values)[len(values) // 2]  # neat-python's median: the upper middle


def ref_stagnation(species, generation, func, max_stagnation, species_elitism):
    """neat-python 2.1's DefaultStagnation.update (fitness_criterion max).

    species: {key: dict(members=[fitness...], history_max=float|None, last_improved=int)}.
    Returns {key: (fitness, last_improved, is_stagnant)}.
    """
    data = []
    for sid in sorted(species):
        s = species[sid]
        prev = s["history_max"] if s["history_max"] is not None else -1.7976931348623157e308
        fitness = ref_species_fitness(func, s["members"])
        last = generation if fitness > prev else s["last_improved"]
        data.append((sid, fitness, last))
    data.sort(key=lambda d: d[1])
    out = {}
    num_non_stagnant = len(data)
    for i, (sid, fitness, last) in enumerate(data):
        stagnant = False
        if num_non_stagnant > species_elitism:
            stagnant = generation - last >= max_stagnation
        if len(data) - i <= species_elitism:
            stagnant = False
        if stagnant:
            num_non_stagnant -= 1
        out[sid] = (fitness, last, stagnant)
    return out


# ---------------------------------------------------------------- helpers


@functools.cache
def jitted_speciate(config: SpeciesConfig, distance=l1_distance):
    return jax.jit(lambda pop, state: speciate(SPEC, config, distance, pop, state))


@functools.cache
def jitted_stagnation(config: SpeciesConfig):
    return jax.jit(lambda state, species_of, fitness: update_stagnation(config, state, species_of, fitness))


def state_with_species(config, reps_xy, keys, slots, threshold, next_key, generation=0):
    """A species state whose ``slots`` hold species ``keys`` with representatives ``reps_xy``."""
    state = init_species_state(SPEC, config)
    valid = np.zeros(config.max_species, bool)
    species_key = np.full(config.max_species, -1, np.int32)
    rep_xy = np.zeros((config.max_species, 2), np.float32)
    for k, s, xy in zip(keys, slots, reps_xy):
        valid[s], species_key[s], rep_xy[s] = True, k, xy
    reps = genomes(rep_xy)
    return state.replace(
        representatives=reps,
        valid=jnp.asarray(valid),
        species_key=jnp.asarray(species_key),
        size=jnp.asarray(valid.astype(np.int32)),
        threshold=jnp.float32(threshold),
        next_species_key=jnp.int32(next_key),
        generation=jnp.int32(generation),
    )


grid = st.integers(0, 8).map(lambda i: i * 0.5)


@st.composite
def speciation_case(draw):
    n_old = draw(st.integers(0, S))
    keys = sorted(draw(st.lists(st.integers(1, 40), min_size=n_old, max_size=n_old, unique=True)))
    keys = draw(st.permutations(keys))
    slots = draw(st.permutations(range(S)))[:n_old]
    reps = [(draw(grid), draw(grid)) for _ in range(n_old)]
    pop = [(draw(grid), draw(grid)) for _ in range(P)]
    threshold = draw(st.sampled_from([0.5, 1.0, 1.5, 2.5, 4.0]))
    next_key = max(keys, default=0) + 1 + draw(st.integers(0, 3))
    return keys, slots, reps, pop, threshold, next_key


# ---------------------------------------------------------------- speciation


@given(speciation_case())
def test_speciate_matches_sequential_reference(case):
    keys, slots, reps, pop, threshold, next_key = case
    config = SpeciesConfig(max_species=S)
    state = state_with_species(config, reps, keys, slots, threshold, next_key, generation=7)
    new, species_of = jitted_speciate(config)(genomes(pop), state)
    species_of = np.asarray(species_of)
    new_keys = np.asarray(new.species_key)

    dist_old = l1_numpy(pop, np.asarray(state.representatives.node_attrs[:, 1, :2]))
    dist_pop = l1_numpy(pop, pop)
    assignment, ref_reps, founded, overflow = ref_speciate(
        dist_old.tolist(), dist_pop.tolist(), dict(zip(keys, slots)), np.float32(threshold), S, next_key
    )
    assert [int(new_keys[species_of[g]]) for g in range(P)] == [assignment[g] for g in range(P)]
    assert int(new.overflow) == overflow
    event(f"founded {len(founded)}, overflow {overflow > 0}, kept {len(ref_reps) - len(founded)}/{len(keys)}")
    assert int(new.next_species_key) == next_key + len(founded)
    valid = np.asarray(new.valid)
    assert sorted(new_keys[valid].tolist()) == sorted(ref_reps)
    rep_xy = np.asarray(new.representatives.node_attrs[:, 1, :2])
    for slot in np.flatnonzero(valid):
        k = int(new_keys[slot])
        np.testing.assert_array_equal(rep_xy[slot], np.asarray(pop, np.float32)[ref_reps[k]])
        assert int(new.size[slot]) == sum(1 for g in range(P) if assignment[g] == k)
        is_new = k in founded
        assert int(new.created[slot]) == (7 if is_new else 0)
        if is_new:
            assert float(new.best_fitness[slot]) == NO_FITNESS
    # free slots hold the fixed padding values, representatives included
    free = ~valid
    assert np.all(new_keys[free] == -1) and np.all(np.asarray(new.size)[free] == 0)
    np.testing.assert_array_equal(
        np.asarray(new.representatives.node_key)[free], np.asarray(SPEC.empty((S,)).node_key)[free]
    )
    np.testing.assert_array_equal(rep_xy[free], 0.0)


def test_later_founder_does_not_take_earlier_genomes():
    # g1 is closer to g2 (founded after it) than to g0's species, but neat-python fixes g1 first
    config = SpeciesConfig(max_species=4)
    state = init_species_state(SPEC, config).replace(threshold=jnp.float32(1.0))
    new, species_of = jitted_speciate(config)(genomes([[0.0, 0], [0.9, 0], [1.7, 0]]), state)
    assert np.asarray(new.species_key)[np.asarray(species_of)].tolist() == [1, 1, 2]
    assert int(new.overflow) == 0 and int(new.num_species) == 2


def test_overflow_joins_the_nearest_species_not_the_last_slot():
    config = SpeciesConfig(max_species=2)
    state = init_species_state(SPEC, config).replace(threshold=jnp.float32(1.0))
    pop = genomes([[0.0, 0], [10.0, 0], [1.5, 0], [8.0, 0], [30.0, 0]])
    new, species_of = jitted_speciate(config)(pop, state)
    assert np.asarray(species_of).tolist() == [0, 1, 0, 1, 1]
    assert int(new.overflow) == 3
    assert np.asarray(new.size).tolist() == [2, 3]


def test_more_species_than_genomes_drops_the_extra_species():
    config = SpeciesConfig(max_species=3)
    state = state_with_species(config, [[0, 0], [5, 0], [9, 0]], [3, 1, 2], [0, 1, 2], 1.0, 4)
    new, species_of = jitted_speciate(config)(genomes([[8.5, 0], [0.2, 0]]), state)
    # in key order: species 1 (rep 5) takes 8.5 (3.5 < 4.8), species 2 takes 0.2, species 3 is left empty
    assert np.asarray(new.valid).tolist() == [False, True, True]
    assert np.asarray(new.species_key)[np.asarray(species_of)].tolist() == [1, 2]
    assert int(new.species_key[0]) == -1


def test_nonfinite_distances_never_join_and_state_stays_finite():
    def bad_distance(population, reps):
        d = l1_distance(population, reps)
        return jnp.where(d > 2.0, jnp.nan, d)

    config = SpeciesConfig(max_species=4)
    state = init_species_state(SPEC, config).replace(threshold=jnp.float32(3.0))
    new, species_of = jitted_speciate(config, bad_distance)(
        genomes([[0, 0], [1, 0], [5, 0], [5.5, 0]]), state
    )
    assert np.asarray(species_of).tolist() == [0, 0, 1, 1]
    for leaf in jax.tree_util.tree_leaves(new):
        if jnp.issubdtype(leaf.dtype, jnp.floating):
            assert np.all(np.isfinite(np.asarray(leaf)))


@pytest.mark.parametrize(
    ("target", "start", "expected"),
    [(1, 3.0, 3.1), (5, 3.0, 2.9), (3, 3.0, 3.0), (5, 0.15, 0.1), (1, 99.95, 100.0), (None, 3.0, 3.0)],
)
def test_threshold_adapts_toward_target_and_is_clamped(target, start, expected):
    # three well separated genomes make three species
    config = SpeciesConfig(target_num_species=target, max_species=4)
    state = init_species_state(SPEC, config).replace(threshold=jnp.float32(start))
    pop = genomes([[0.0, 0], [200.0, 0], [400.0, 0]])
    new, _ = jitted_speciate(config)(pop, state)
    assert int(new.num_species) == 3
    assert float(new.threshold) == pytest.approx(expected, abs=1e-5)


def test_speciate_vmaps_and_is_deterministic():
    config = SpeciesConfig(max_species=S)
    xy = jax.random.uniform(jax.random.key(3), (3, P, 2)) * 6.0
    state = init_species_state(SPEC, config).replace(threshold=jnp.float32(1.5))
    f = jitted_speciate(config)
    pops = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *[genomes(x) for x in xy])
    batched_state, batched_of = jax.vmap(f, in_axes=(0, None))(pops, state)
    for i in range(3):
        one_state, one_of = f(genomes(xy[i]), state)
        np.testing.assert_array_equal(batched_of[i], one_of)
        for a, b in zip(jax.tree_util.tree_leaves(one_state), jax.tree_util.tree_leaves(batched_state)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b)[i])
        again_state, again_of = f(genomes(xy[i]), state)
        np.testing.assert_array_equal(again_of, one_of)


def test_generation_chain_keeps_keys_and_representatives_consistent():
    # speciate twice: surviving species keep their keys, new keys continue the counter
    config = SpeciesConfig(max_species=6)
    state = init_species_state(SPEC, config).replace(threshold=jnp.float32(1.0))
    s1, of1 = jitted_speciate(config)(genomes([[0, 0], [5, 0], [0.5, 0]]), state)
    assert np.asarray(s1.species_key)[np.asarray(of1)].tolist() == [1, 2, 1]
    s2, of2 = jitted_speciate(config)(genomes([[5.2, 0], [9, 0], [0.1, 0], [0.3, 0]]), s1)
    assert np.asarray(s2.species_key)[np.asarray(of2)].tolist() == [2, 3, 1, 1]
    assert int(s2.next_species_key) == 4


# ---------------------------------------------------------------- fitness and stagnation


def test_sanitize_fitness_makes_nonfinite_strictly_worst():
    f = np.asarray(sanitize_fitness(jnp.array([1.0, jnp.nan, -2.0, jnp.inf, -jnp.inf, 4.0])))
    assert np.all(np.isfinite(f))
    assert f[[0, 2, 5]].tolist() == [1.0, -2.0, 4.0]
    assert np.all(f[[1, 3, 4]] < -2.0)
    assert np.asarray(sanitize_fitness(jnp.array([jnp.nan, jnp.inf]))).tolist() == [0.0, 0.0]
    big = np.asarray(sanitize_fitness(jnp.array([3e38, -3e38, jnp.nan])))
    assert np.all(np.isfinite(big)) and big[0] == 1e30 and big[2] < big[1]


def test_sanitize_fitness_is_the_library_rule_bit_for_bit():
    """sanitize_fitness takes both extremes from one reduction; its values are those of the library's
    rule (core.worst_for_nonfinite of the negated, clipped fitness), bit for bit."""
    from evotensor.core.evaluation import worst_for_nonfinite

    def rule(f):
        f = jnp.where(jnp.isfinite(f), jnp.clip(f, -1e30, 1e30), jnp.nan)
        return -worst_for_nonfinite(-f)

    rng = np.random.default_rng(0)
    cases = [
        rng.normal(size=50) * 10.0 ** rng.integers(-3, 40),
        [np.nan, np.inf],
        [-np.inf],
        [0.0, -0.0],
        [5.0, np.nan, 5.0],
        [-3e20, np.inf],
    ]
    for n in range(20):
        f = rng.normal(size=64) * 10.0 ** rng.integers(-40, 39)
        f[rng.random(64) < 0.2 * (n % 3)] = rng.choice([np.nan, np.inf, -np.inf])
        cases.append(f)
    for f in cases:
        f = jnp.asarray(np.asarray(f, np.float32))
        got, want = np.asarray(jax.jit(sanitize_fitness)(f)), np.asarray(jax.jit(rule)(f))
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (f, got, want)


def test_species_rank_inverts_species_order():
    """species_rank ([S, S] comparisons) is the inverse permutation of species_order (a sort), ties
    (equal fitness, -0.0 and 0.0, equal keys, invalid slots) included; speciation's stable order of a
    short key vector likewise equals argsort."""
    rng = np.random.default_rng(1)
    for _ in range(30):
        n = int(rng.integers(1, 12))
        valid = jnp.asarray(rng.random(n) < 0.7)
        fitness = jnp.asarray(rng.choice([0.0, -0.0, 1.0, -2.5, 3.0, NO_FITNESS], n).astype(np.float32))
        key = jnp.asarray(rng.integers(-1, 4, n).astype(np.int32))
        order = np.asarray(species_order(valid, fitness, key))
        rank = np.asarray(jax.jit(species_rank)(valid, fitness, key))
        assert np.array_equal(rank[order], np.arange(n))
        by_key = jax.jit(lambda k: order_from_rank(stable_rank(k)))(key)
        assert np.array_equal(np.asarray(by_key), np.argsort(np.asarray(key), kind="stable"))


@pytest.mark.parametrize("func", ["max", "min", "mean", "median"])
def test_species_fitness_funcs(func):
    values = [[3.0, 1.0, 2.0, 5.0], [4.0], [2.0, 8.0]]
    fitness = jnp.array(sum(values, []))
    species_of = jnp.array([0, 0, 0, 0, 2, 3, 3])
    _, seg, size = member_mask(jnp.array([True, True, True, True]), species_of)
    out = np.asarray(species_fitness(func, fitness, seg, size))
    expected = [ref_species_fitness(func, v) for v in values]
    assert out[[0, 2, 3]].tolist() == pytest.approx(expected)
    assert out[1] == NO_FITNESS
    if func == "median":
        assert out[0] == 3.0 and out[3] == 8.0  # upper middle


fit_grid = st.one_of(
    st.integers(-12, 12).map(lambda i: i * 0.25), st.sampled_from([float("nan"), float("inf"), -float("inf")])
)


@st.composite
def stagnation_case(draw):
    n_species = draw(st.integers(1, 5))
    keys = draw(st.lists(st.integers(1, 30), min_size=n_species, max_size=n_species, unique=True))
    slots = draw(st.permutations(range(5)))[:n_species]
    species_of = [draw(st.sampled_from(slots)) for _ in range(10)]
    fitness = [draw(fit_grid) for _ in range(10)]
    no_history = st.just(None)
    history = [draw(st.one_of(no_history, st.integers(-12, 24).map(lambda i: i * 0.25))) for _ in slots]
    last_improved = [draw(st.integers(0, 40)) for _ in slots]
    func, max_stagnation, elitism = draw(
        st.sampled_from([("max", 1, 0), ("mean", 5, 2), ("min", 15, 3), ("median", 20, 1), ("max", 30, 2)])
    )
    return keys, slots, species_of, fitness, history, last_improved, func, max_stagnation, elitism


@given(stagnation_case())
def test_stagnation_matches_sequential_reference(case):
    keys, slots, species_of, fitness, history, last_improved, func, max_stagnation, elitism = case
    sanitized = np.asarray(sanitize_fitness(jnp.array(fitness, jnp.float32)), np.float64)
    assume(np.all(sanitized * 4 == np.round(sanitized * 4)))  # exact sums: no float32/64 rounding gap
    generation = 40
    config = SpeciesConfig(
        max_species=5, species_fitness_func=func, max_stagnation=max_stagnation, species_elitism=elitism
    )
    state = state_with_species(config, [[0, 0]] * len(keys), keys, slots, 3.0, 31, generation=generation)
    best = np.full(5, NO_FITNESS, np.float32)
    last = np.zeros(5, np.int32)
    for s, h, li in zip(slots, history, last_improved):
        best[s] = NO_FITNESS if h is None else h
        last[s] = li
    state = state.replace(best_fitness=jnp.asarray(best), last_improved=jnp.asarray(last))
    new, stagnant = jitted_stagnation(config)(state, jnp.array(species_of), jnp.array(fitness, jnp.float32))

    species = {}
    for k, s, h, li in zip(keys, slots, history, last_improved):
        members = [sanitized[g] for g in range(10) if species_of[g] == s]
        if members:  # a species without members is dropped before neat-python's update
            species[k] = dict(members=members, history_max=h, last_improved=li)
    ref = ref_stagnation(species, generation, func, max_stagnation, elitism)
    slot_of = dict(zip(keys, slots))
    stagnant = np.asarray(stagnant)
    event(f"stagnant {sum(v[2] for v in ref.values())} of {len(ref)}")
    for k, (fit, li, is_stagnant) in ref.items():
        s = slot_of[k]
        assert bool(stagnant[s]) == is_stagnant
        assert bool(new.valid[s]) == (not is_stagnant)
        if not is_stagnant:
            assert float(new.fitness[s]) == pytest.approx(fit, rel=1e-6)
            assert int(new.last_improved[s]) == li
            h = history[slots.index(s)]
            assert float(new.best_fitness[s]) == pytest.approx(fit if h is None else max(fit, h), rel=1e-6)
    assert int(new.num_species) == sum(1 for v in ref.values() if not v[2])
    for leaf in jax.tree_util.tree_leaves(new):
        if jnp.issubdtype(leaf.dtype, jnp.floating):
            assert np.all(np.isfinite(np.asarray(leaf)))


def test_stagnation_protects_the_top_species_even_when_all_are_stagnant():
    config = SpeciesConfig(max_species=4, species_fitness_func="max", max_stagnation=2, species_elitism=2)
    state = state_with_species(config, [[0, 0]] * 4, [1, 2, 3, 4], [0, 1, 2, 3], 3.0, 5, generation=10)
    state = state.replace(best_fitness=jnp.full((4,), 100.0), last_improved=jnp.zeros((4,), jnp.int32))
    fitness = jnp.array([1.0, 4.0, 3.0, 3.0, jnp.nan])
    new, stagnant = jitted_stagnation(config)(state, jnp.array([0, 1, 2, 3, 0]), fitness)
    # ascending (fitness, key): key1 (1), key3 (3), key4 (3), key2 (4): the last two are protected
    assert np.asarray(stagnant).tolist() == [True, False, True, False]
    assert np.asarray(new.valid).tolist() == [False, True, False, True]
    assert int(new.species_key[0]) == -1


def test_new_species_always_improves_first():
    config = SpeciesConfig(max_species=2, max_stagnation=1, species_elitism=0)
    state = init_species_state(SPEC, config).replace(threshold=jnp.float32(1.0), generation=jnp.int32(5))
    state, species_of = jitted_speciate(config)(genomes([[0, 0], [9, 0]]), state)
    state = state.replace(generation=jnp.int32(6))
    new, stagnant = jitted_stagnation(config)(state, species_of, jnp.array([-1e30, jnp.nan]))
    assert not np.any(np.asarray(stagnant))
    assert np.asarray(new.last_improved).tolist() == [6, 6]


def test_species_config_checks():
    with pytest.raises(ArgumentError, match="compatibility_threshold"):
        SpeciesConfig(compatibility_threshold=0.0)
    with pytest.raises(ArgumentError, match="species_fitness_func"):
        SpeciesConfig(species_fitness_func="sum")
    with pytest.raises(ArgumentError, match="max_species"):
        SpeciesConfig(max_species=0)
    with pytest.raises(ArgumentError, match="threshold_min"):
        SpeciesConfig(threshold_min=5.0, threshold_max=1.0)
    with pytest.raises(ArgumentError, match="target_num_species"):
        SpeciesConfig(target_num_species=0)
    with pytest.raises(ArgumentError, match="species_elitism"):
        SpeciesConfig(species_elitism=-1)
    with pytest.raises(ArgumentError, match="max_species"):
        config = SpeciesConfig(max_species=3)
        speciate(SPEC, config, l1_distance, genomes([[0, 0]]), init_species_state(SPEC, SpeciesConfig()))
    assert math.isclose(SpeciesConfig().compatibility_threshold, 3.0)
