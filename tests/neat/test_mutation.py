"""NEAT mutation: every genome stays valid under any mutation sequence, innovation numbers are
deduplicated across the population as neat-python's tracker does, each step does what neat-python
2.1 (or TensorNEAT, in its mode) does, capacity overflow is skipped and counted, and the device
cycle check and pruning equal slow Python graph searches."""

import dataclasses
from collections import deque

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.neat.genome_strategies import (
    CASES,
    MUTATE,
    POP,
    ReferenceTracker,
    full_mask,
    genes,
    genomes,
    grow,
    grown_populations,
    initial,
    same_partition,
)

from evotensor.core.checks import ArgumentError
from evotensor.neat.genome import EMPTY, GenomeSpec, check_genome, genome_from_dict
from evotensor.neat.innovation import initial_counters
from evotensor.neat.mutation import (
    METRIC_NAMES,
    MutationConfig,
    add_connection,
    add_node,
    creates_cycle,
    delete_connection,
    delete_node,
    mutate,
    mutate_attributes,
    prune_dangling,
    required_nodes,
)

STATIC = (1, 2)  # spec, config
ADD_NODE = jax.jit(add_node, static_argnums=STATIC)
ADD_CONN = jax.jit(add_connection, static_argnums=STATIC)
DEL_NODE = jax.jit(delete_node, static_argnums=STATIC)
DEL_CONN = jax.jit(delete_connection, static_argnums=STATIC)


def _host(tree):
    return jax.tree_util.tree_map(np.asarray, tree)


def _new_genes(population, next_node_key, next_innov):
    """Per genome: (new node keys, {pair: innovation} of new connection genes)."""
    out = []
    for g in genomes(population):
        keys, conns = genes(g)
        out.append(
            (
                {k for k in keys if k >= next_node_key},
                {p: i for p, (i, _) in conns.items() if i >= next_innov},
            )
        )
    return out


# ------------------------------------------------------------------------------------------------
# configuration


def test_config_defaults_and_checks():
    c = MutationConfig()
    assert (c.conn_add_prob, c.conn_delete_prob, c.node_add_prob, c.node_delete_prob) == (0.5, 0.5, 0.2, 0.2)
    assert not c.single_structural_mutation and c.structural_mutation_surer == "default" and not c.surer
    assert MutationConfig(single_structural_mutation=True).surer
    assert MutationConfig(structural_mutation_surer="yes").structural_mutation_surer is True
    assert MutationConfig(structural_mutation_surer="Off", single_structural_mutation=True).surer is False
    assert hash(MutationConfig()) == hash(MutationConfig(structural_mutation_surer="DEFAULT"))
    t = MutationConfig.tensorneat()
    assert (t.conn_add_prob, t.conn_delete_prob, t.node_add_prob, t.node_delete_prob) == (0.2, 0.2, 0.1, 0.1)
    assert (t.split, t.new_node_attrs, t.new_conn_attrs, t.conn_from_outputs, t.prune_dangling) == (
        "delete",
        "identity",
        "zero",
        True,
        False,
    )
    assert MutationConfig.tensorneat(node_add_prob=0.3).node_add_prob == 0.3
    for kwargs, name in [
        ({"conn_add_prob": 1.5}, "conn_add_prob"),
        ({"node_delete_prob": -0.1}, "node_delete_prob"),
        ({"node_add_prob": "0.2"}, "node_add_prob"),
        ({"structural_mutation_surer": "maybe"}, "structural_mutation_surer"),
        ({"structural_mutation_surer": 1}, "structural_mutation_surer"),
        ({"single_structural_mutation": 1}, "single_structural_mutation"),
        ({"split": "remove"}, "split"),
        ({"split_identity": "key"}, "split_identity"),
        ({"new_node_attrs": "zero"}, "new_node_attrs"),
        ({"new_conn_attrs": "one"}, "new_conn_attrs"),
        ({"prune_dangling": None}, "prune_dangling"),
    ]:
        with pytest.raises(ArgumentError, match=name):
            MutationConfig(**kwargs)


# ------------------------------------------------------------------------------------------------
# invariants under random mutation sequences


@given(grown_populations(), st.integers(0, 2**31 - 1))
def test_grown_populations_are_valid_and_numbered_consistently(grown, seed):
    spec = grown.spec
    for g in genomes(grown.population):
        assert check_genome(spec, g) == []
    # counters never decrease; nothing in use collides with them
    for (k0, i0), (k1, i1) in zip(grown.counters, grown.counters[1:]):
        assert k1 >= k0 and i1 >= i0
    pop = _host(grown.population)
    assert np.all(pop.node_key[pop.node_valid] < grown.next_node_key)
    assert np.all(pop.conn_innov[pop.conn_valid] < grown.next_innov)
    # one more generation: every new gene is numbered past the counters, and across the whole
    # population one innovation number per distinct new (in, out) pair and vice versa
    nk, ni = grown.next_node_key, grown.next_innov
    new_pop, nk1, ni1, metrics = MUTATE(
        jax.random.key(seed), spec, grown.config, grown.population, jnp.int32(nk), jnp.int32(ni)
    )
    by_pair, by_innov = {}, {}
    for keys, conns in _new_genes(new_pop, nk, ni):
        assert all(nk <= k < int(nk1) for k in keys)
        for pair, innov in conns.items():
            assert innov < int(ni1)
            assert by_pair.setdefault(pair, innov) == innov
            assert by_innov.setdefault(innov, pair) == pair
    assert int(nk1) - nk <= int(metrics["nodes_added"]) and (int(nk1) > nk) == (
        int(metrics["nodes_added"]) > 0
    )
    for g in genomes(new_pop):
        assert check_genome(spec, g) == []


def test_long_runs_stay_valid_and_overflow_is_counted():
    for case in CASES:
        grown = grow(case, 7, 40)
        for g in genomes(grown.population):
            assert check_genome(grown.spec, g) == []
        totals = {name: sum(m[name] for m in grown.metrics) for name in METRIC_NAMES}
        assert totals["nodes_added"] > 0 and totals["conns_added"] > 0
        assert totals["nodes_deleted"] > 0 and totals["conns_deleted"] > 0
        assert totals["capacity_skips"] > 0  # the populations fill up
        if grown.config.prune_dangling:
            assert totals["nodes_pruned"] > 0
        else:
            assert totals["nodes_pruned"] == 0
        assert np.max(np.asarray(grown.population.num_nodes)) == grown.spec.max_nodes or case != "ff_tight"


_STEPS = ("add_node", "add_connection", "delete_node", "delete_connection")


@pytest.mark.parametrize("case", ["ff_neat_python", pytest.param("rec_tensorneat", marks=pytest.mark.slow)])
@given(
    st.integers(0, 2**31 - 1),
    st.lists(st.tuples(st.sampled_from(_STEPS), st.integers(0, 2**POP - 1)), min_size=1, max_size=12),
)
def test_any_sequence_of_single_steps_keeps_genomes_valid(case, seed, steps):
    spec, config = CASES[case]
    key = jax.random.key(seed)
    pop = initial(spec, key)
    nk, ni = initial_counters(spec)
    for i, (step, bits) in enumerate(steps):
        mask = jnp.array([(bits >> j) & 1 for j in range(POP)], bool)
        k = jax.random.fold_in(key, i)
        counters = (int(nk), int(ni))
        before = [genes(g) for g in genomes(pop)]
        if step == "add_node":
            pop, nk, ni, m = ADD_NODE(k, spec, config, pop, nk, ni, mask)
        elif step == "add_connection":
            pop, ni, m = ADD_CONN(k, spec, config, pop, ni, mask)
        elif step == "delete_node":
            pop, m = DEL_NODE(k, spec, config, pop, mask)
        else:
            pop, m = DEL_CONN(k, spec, config, pop, mask)
        assert int(nk) >= counters[0] and int(ni) >= counters[1]
        after = [genes(g) for g in genomes(pop)]
        for j, (g0, g1) in enumerate(zip(before, after)):
            if not mask[j]:
                assert g0 == g1  # genomes not selected keep their structure
        for g in genomes(pop):
            assert check_genome(spec, g) == []
        assert set(m) == set(METRIC_NAMES) and all(v.dtype == jnp.int32 for v in m.values())


# ------------------------------------------------------------------------------------------------
# innovation deduplication against neat-python's tracker

DEDUP_SPEC = GenomeSpec(3, 2, max_nodes=16, max_conns=40)


def test_splits_and_additions_are_deduplicated_like_neat_python():
    spec, config = DEDUP_SPEC, MutationConfig()
    pop0 = initial(spec, jax.random.key(3), 48)
    nk0, ni0 = initial_counters(spec)
    ref = ReferenceTracker(int(nk0), int(ni0))

    # every genome splits one of its 6 connections: many genomes split the same one
    pop1, nk1, ni1, m = ADD_NODE(jax.random.key(4), spec, config, pop0, nk0, ni0, full_mask(pop0))
    assert int(m["nodes_added"]) == 48 and int(m["capacity_skips"]) == 0
    ours, theirs = [], []
    for g0, g1 in zip(genomes(pop0), genomes(pop1)):
        (keys0, c0), (keys1, c1) = genes(g0), genes(g1)
        (new,) = keys1 - keys0
        (a,) = [p[0] for p in c1 if p[1] == new]
        (b,) = [p[1] for p in c1 if p[0] == new]
        # neat-python: the split gene stays, disabled; in -> new (1.0) and new -> out (old weight), enabled
        assert c0[(a, b)] == (c1[(a, b)][0], True) and c1[(a, b)][1] is False
        assert c1[(a, new)][1] and c1[(new, b)][1]
        assert set(c1) == set(c0) | {(a, new), (new, b)}
        w = {(int(x), int(y)): float(wt) for x, y, wt in zip(g1.conn_in, g1.conn_out, g1.conn_attrs[:, 0])}
        w0 = {(int(x), int(y)): float(wt) for x, y, wt in zip(g0.conn_in, g0.conn_out, g0.conn_attrs[:, 0])}
        assert w[(a, new)] == 1.0 and w[(new, b)] == w0[(a, b)]
        row = int(np.flatnonzero(g1.node_key == new)[0])
        assert g1.node_attrs[row, spec.node_gene.column("bias")] == 0.0
        assert row == int(np.flatnonzero(g0.node_key == EMPTY)[0])  # the first free row
        ours.append((new, c1[(a, new)][0], c1[(new, b)][0]))
        theirs.append(ref.split(a, b))
    assert len(set(ours)) < len(ours)  # some splits were shared
    assert same_partition(ours, theirs)
    assert (int(nk1), int(ni1)) == (ref.next_node_key, ref.next_innov)

    # every genome tries one connection; identical new pairs across genomes share a number
    pop2, ni2, m = ADD_CONN(jax.random.key(5), spec, config, pop1, ni1, full_mask(pop1))
    ours, theirs = [], []
    for g1, g2 in zip(genomes(pop1), genomes(pop2)):
        (k1, c1), (k2, c2) = genes(g1), genes(g2)
        assert k1 == k2
        added = set(c2) - set(c1)
        assert len(added) <= 1 and all(c2[p] == c1[p] for p in c1)
        for pair in added:
            assert pair[1] >= 0 and pair[0] not in range(spec.num_outputs)  # in: an input or hidden
            assert c2[pair][1] is True
            ours.append(c2[pair][0])
            theirs.append(ref.connection(*pair))
    assert int(m["conns_added"]) == len(ours) > len(set(ours))
    assert same_partition(ours, theirs)
    assert int(ni2) == ref.next_innov


def test_tensorneat_split_deletes_and_adds_an_identity_node():
    spec, config = DEDUP_SPEC, MutationConfig.tensorneat()
    pop0 = initial(spec, jax.random.key(3), 24)
    nk0, ni0 = initial_counters(spec)
    pop1, nk1, ni1, _ = ADD_NODE(jax.random.key(4), spec, config, pop0, nk0, ni0, full_mask(pop0))
    for g0, g1 in zip(genomes(pop0), genomes(pop1)):
        (keys0, c0), (keys1, c1) = genes(g0), genes(g1)
        (new,) = keys1 - keys0
        (a,) = [p[0] for p in c1 if p[1] == new]
        (b,) = [p[1] for p in c1 if p[0] == new]
        assert (a, b) not in c1 and set(c1) == set(c0) - {(a, b)} | {(a, new), (new, b)}
        row = int(np.flatnonzero(g1.node_key == new)[0])
        ng = spec.node_gene
        assert (
            g1.node_attrs[row, ng.column("bias")] == 0.0 and g1.node_attrs[row, ng.column("response")] == 1.0
        )
        r_in = int(np.flatnonzero((g1.conn_in == a) & (g1.conn_out == new))[0])
        r_out = int(np.flatnonzero((g1.conn_in == new) & (g1.conn_out == b))[0])
        r_old = int(np.flatnonzero((g0.conn_in == a) & (g0.conn_out == b))[0])
        assert g1.conn_attrs[r_in, 0] == 1.0 and g1.conn_attrs[r_out, 0] == g0.conn_attrs[r_old, 0]
        assert r_old in (r_in, r_out)  # the freed row is reused first
        assert check_genome(spec, g1) == []


def test_split_identity_by_innovation_and_only_enabled():
    spec, config = CASES["ff_tight"]  # split_identity="innovation", split_only_enabled=True
    n = {"bias": 0.0, "response": 1.0}
    dicts = [
        {"nodes": {0: n}, "connections": {(-1, 0): {"innovation": 5}}},
        {"nodes": {0: n}, "connections": {(-1, 0): {"innovation": 9}}},  # same pair, other number
        {
            "nodes": {0: n},
            "connections": {(-1, 0): {"innovation": 5}, (-2, 0): {"innovation": 6, "enabled": False}},
        },
    ]
    pop = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *[genome_from_dict(spec, d) for d in dicts])
    out, nk, ni, m = ADD_NODE(
        jax.random.key(0), spec, config, pop, jnp.int32(1), jnp.int32(10), full_mask(pop)
    )
    new = [genes(g)[0] - {-1, -2, 0} for g in genomes(out)]
    assert int(m["nodes_added"]) == 3 and (int(nk), int(ni)) == (3, 14)
    assert new[0] == new[2] != new[1]  # the disabled (-2, 0) is never split
    assert all(c[(-2, 0)] == (6, False) for c in [genes(genomes(out)[2])[1]])


# ------------------------------------------------------------------------------------------------
# add-connection details, capacity

TINY = GenomeSpec(1, 1, max_nodes=3, max_conns=2)  # one input, one output: the only legal new pair is -1 -> 0


def test_add_connection_existing_pair_re_enables_only_with_surer():
    pop = initial(TINY, jax.random.key(0), 64)
    pop = pop.replace(conn_enabled=jnp.zeros_like(pop.conn_enabled))
    nk, ni = initial_counters(TINY)
    for surer in (False, True):
        config = MutationConfig(structural_mutation_surer=True) if surer else MutationConfig()
        out, ni1, m = ADD_CONN(jax.random.key(1), TINY, config, pop, ni, full_mask(pop))
        assert int(ni1) == int(ni) and int(m["conns_added"]) == 0
        assert np.all(np.asarray(out.conn_enabled[:, 0]) == surer)
        assert np.array_equal(np.asarray(out.conn_innov), np.asarray(pop.conn_innov))


def test_add_connection_new_weights_and_capacity():
    empty = initial(TINY, jax.random.key(0), 64).replace(
        conn_in=jnp.full((64, 2), EMPTY, jnp.int32),
        conn_out=jnp.full((64, 2), EMPTY, jnp.int32),
        conn_innov=jnp.full((64, 2), EMPTY, jnp.int32),
        conn_enabled=jnp.zeros((64, 2), bool),
        conn_attrs=jnp.zeros((64, 2, 1), jnp.float32),
    )
    nk, ni = initial_counters(TINY)
    # neat-python: weight from the init (N(0, 1)); one number for the one pair
    out, ni1, m = ADD_CONN(jax.random.key(1), TINY, MutationConfig(), empty, ni, full_mask(empty))
    assert int(m["conns_added"]) == 64 and int(ni1) == int(ni) + 1
    assert np.all(np.asarray(out.conn_innov[:, 0]) == int(ni)) and np.all(np.asarray(out.conn_in[:, 0]) == -1)
    w = np.asarray(out.conn_attrs[:, 0, 0])
    assert len(np.unique(w)) == 64 and 0.5 < np.std(w) < 1.5
    # TensorNEAT: weight 0; the output may be a source, but 0 -> 0 would be a cycle
    out, _, m = ADD_CONN(jax.random.key(1), TINY, MutationConfig.tensorneat(), empty, ni, full_mask(empty))
    added = np.asarray(out.conn_valid[:, 0])
    assert 0 < int(m["conns_added"]) == added.sum() < 64
    assert np.all(np.asarray(out.conn_attrs)[added] == 0.0) and np.all(
        np.asarray(out.conn_in)[added, 0] == -1
    )
    # a full connection table: nothing is written, the attempt is counted
    spec = GenomeSpec(2, 1, max_nodes=3, max_conns=1, initial_connection="none")
    full = initial(spec, jax.random.key(0), 64)
    full = full.replace(
        conn_in=full.conn_in.at[:, 0].set(-1),
        conn_out=full.conn_out.at[:, 0].set(0),
        conn_innov=full.conn_innov.at[:, 0].set(0),
        conn_enabled=full.conn_enabled.at[:, 0].set(True),
        conn_attrs=full.conn_attrs.at[:, 0, 0].set(0.5),
    )
    out, ni1, m = ADD_CONN(jax.random.key(1), spec, MutationConfig(), full, 2, full_mask(full))
    # -2 -> 0 is new but does not fit; -1 -> 0 exists
    assert 0 < int(m["capacity_skips"]) < 64 and int(m["conns_added"]) == 0 and int(ni1) == 2
    assert all(check_genome(spec, g) == [] for g in genomes(out))
    assert jax.tree_util.tree_all(jax.tree_util.tree_map(jnp.array_equal, out, full))


def test_capacity_overflow_is_skipped_and_counted():
    spec = GenomeSpec(2, 1, max_nodes=4, max_conns=3)  # 2 initial connections, one free row
    pop = initial(spec, jax.random.key(0), 32)
    nk, ni = initial_counters(spec)
    # neat-python's split keeps the old gene: it needs two free rows
    out, nk1, ni1, m = ADD_NODE(jax.random.key(1), spec, MutationConfig(), pop, nk, ni, full_mask(pop))
    assert int(m["capacity_skips"]) == 32 and int(m["nodes_added"]) == 0
    assert (int(nk1), int(ni1)) == (int(nk), int(ni))
    assert np.array_equal(np.asarray(out.conn_innov), np.asarray(pop.conn_innov))
    # TensorNEAT's split frees a row: it fits; afterwards no node row is left
    config = MutationConfig.tensorneat()
    out, nk1, ni1, m = ADD_NODE(jax.random.key(1), spec, config, pop, nk, ni, full_mask(pop))
    assert int(m["capacity_skips"]) == 0 and int(m["nodes_added"]) == 32
    assert np.all(np.asarray(out.num_conns) == 3) and (int(nk1), int(ni1)) == (int(nk) + 2, int(ni) + 4)
    out, nk2, ni2, m = ADD_NODE(jax.random.key(2), spec, config, out, nk1, ni1, full_mask(pop))
    assert int(m["capacity_skips"]) == 32 and (int(nk2), int(ni2)) == (int(nk1), int(ni1))
    for g in genomes(out):
        assert check_genome(spec, g) == []


# ------------------------------------------------------------------------------------------------
# deletions, pruning, cycle check against Python graph searches


def test_deletions_without_pruning_remove_exactly_one_gene():
    grown = grow("ff_neat_python", 11, 10)
    spec, pop = grown.spec, grown.population
    config = MutationConfig(prune_dangling=False)
    out, m = DEL_CONN(jax.random.key(0), spec, config, pop, full_mask(pop))
    assert (
        int(m["conns_deleted"]) == int(np.sum(np.asarray(pop.num_conns) > 0)) and int(m["nodes_pruned"]) == 0
    )
    for g0, g1 in zip(genomes(pop), genomes(out)):
        (k0, c0), (k1, c1) = genes(g0), genes(g1)
        assert k0 == k1 and set(c1) <= set(c0) and len(c0) - len(c1) == (1 if c0 else 0)
        assert check_genome(spec, g1) == []
    out, m = DEL_NODE(jax.random.key(0), spec, config, pop, full_mask(pop))
    hidden = [len([k for k in genes(g)[0] if k >= spec.num_outputs]) for g in genomes(pop)]
    assert int(m["nodes_deleted"]) == sum(h > 0 for h in hidden)
    for g0, g1, h in zip(genomes(pop), genomes(out), hidden):
        (k0, c0), (k1, c1) = genes(g0), genes(g1)
        gone = k0 - k1
        assert len(gone) == (1 if h else 0) and all(k >= spec.num_outputs for k in gone)
        assert set(c1) == {p for p in c0 if not set(p) & gone}
        assert check_genome(spec, g1) == []


def _py_reaches(edges, start, target):
    seen, todo = {start}, deque([start])
    while todo:
        a = todo.popleft()
        for x, y in edges:
            if x == a and y not in seen:
                seen.add(y)
                todo.append(y)
    return target in seen


def _py_required(inputs, outputs, enabled_edges):
    """neat-python's ``required_for_output``, written out."""
    required, frontier = set(outputs), set(outputs)
    while True:
        t = {a for a, b in enabled_edges if b in frontier and a not in frontier}
        layer = t - set(inputs)
        if not layer:
            return required
        required |= layer
        frontier |= t


GRAPH_SPEC = GenomeSpec(2, 2, max_nodes=9, max_conns=18, feed_forward=False)


def _random_graphs(seed, pop=24):
    """Recurrent genomes with random hidden keys in random rows and random distinct edges (cycles,
    self-loops, disabled genes)."""
    rng = np.random.default_rng(seed)
    g = _host(GRAPH_SPEC.empty((pop,)))
    g = jax.tree_util.tree_map(np.array, g)
    n_io = GRAPH_SPEC.num_io
    for p in range(pop):
        g.node_key[p, :n_io] = [-1, -2, 0, 1]
        h = rng.integers(0, 6)
        rows = rng.choice(np.arange(n_io, GRAPH_SPEC.max_nodes), h, replace=False)
        g.node_key[p, rows] = rng.choice(np.arange(2, 40), h, replace=False)
        keys = g.node_key[p][g.node_key[p] != EMPTY]
        pairs = {(int(a), int(b)) for a, b in zip(rng.choice(keys, 30), rng.choice(keys[keys >= 0], 30))}
        pairs = list(pairs)[: rng.integers(0, GRAPH_SPEC.max_conns + 1)]
        slots = rng.choice(GRAPH_SPEC.max_conns, len(pairs), replace=False)
        for r, (a, b) in zip(slots, pairs):
            g.conn_in[p, r], g.conn_out[p, r], g.conn_innov[p, r] = a, b, 100 + r
            g.conn_enabled[p, r] = rng.random() < 0.7
            g.conn_attrs[p, r, 0] = 0.5
    return jax.tree_util.tree_map(jnp.asarray, g)


_CYCLE = jax.jit(creates_cycle)
_REQUIRED = jax.jit(required_nodes, static_argnums=0)
_PRUNE = jax.jit(prune_dangling, static_argnums=0)


@given(st.integers(0, 2**31 - 1))
def test_cycle_check_equals_python_search(seed):
    pop = _random_graphs(seed)
    rng = np.random.default_rng(seed + 1)
    ins, outs = [], []
    for g in genomes(pop):
        keys = g.node_key[g.node_key != EMPTY]
        ins.append(rng.choice(keys))
        outs.append(rng.choice(keys[keys >= 0]))
    got = np.asarray(_CYCLE(pop, jnp.array(ins, jnp.int32), jnp.array(outs, jnp.int32)))
    for g, i, o, c in zip(genomes(pop), ins, outs, got):
        edges = list(genes(g)[1])  # enabled or not
        assert c == (i == o or _py_reaches(edges, int(o), int(i)))


@given(st.integers(0, 2**31 - 1))
def test_pruning_equals_required_for_output(seed):
    spec = GRAPH_SPEC
    pop = _random_graphs(seed)
    req = np.asarray(_REQUIRED(spec, pop))
    out, removed = _PRUNE(spec, pop)
    for g, r, g1, n_removed in zip(genomes(pop), req, genomes(out), np.asarray(removed)):
        keys, conns = genes(g)
        expected = _py_required([-1, -2], [0, 1], [p for p, (_, e) in conns.items() if e])
        assert {int(k) for k in g.node_key[r]} == expected
        keep = {k for k in keys if k < spec.num_outputs or k in expected}
        keys1, conns1 = genes(g1)
        assert keys1 == keep and n_removed == len(keys - keep)
        assert conns1 == {p: v for p, v in conns.items() if set(p) <= keep}
        assert check_genome(spec, g1) == []


def test_deletions_prune_dangling_nodes():
    grown = grow("ff_neat_python", 5, 12)
    spec, pop = grown.spec, grown.population
    out, m = DEL_CONN(jax.random.key(1), spec, grown.config, pop, full_mask(pop))
    req = np.asarray(_REQUIRED(spec, out))
    o = _host(out)
    hidden = o.node_valid & (np.arange(spec.max_nodes) >= spec.num_io)
    assert not np.any(hidden & ~req)  # every remaining hidden node feeds an output
    assert int(m["nodes_pruned"]) == int(np.sum(pop.num_nodes) - np.sum(out.num_nodes))


# ------------------------------------------------------------------------------------------------
# attributes, probabilities, jit/vmap


def test_attribute_mutation_leaves_pins_and_padding_alone():
    grown = grow("ff_neat_python", 2, 6)
    spec, pop = grown.spec, grown.population
    out = _host(jax.jit(mutate_attributes, static_argnums=1)(jax.random.key(0), spec, pop))
    p = _host(pop)
    assert np.array_equal(out.node_key, p.node_key) and np.array_equal(out.conn_innov, p.conn_innov)
    pins = np.zeros_like(p.node_valid)
    pins[:, : spec.num_inputs] = True
    untouched = ~p.node_valid | pins
    assert np.array_equal(out.node_attrs[untouched], p.node_attrs[untouched])
    assert np.all(out.node_attrs[:, : spec.num_inputs] == 0)
    genes_ = p.node_valid & ~pins
    bias = spec.node_gene.column("bias")
    changed = np.mean(out.node_attrs[genes_][:, bias] != p.node_attrs[genes_][:, bias])
    assert 0.6 < changed < 0.95  # bias: mutate 0.7 + replace 0.1
    cv = p.conn_valid
    assert np.array_equal(out.conn_attrs[~cv], p.conn_attrs[~cv]) and not np.any(out.conn_enabled[~cv])
    assert 0.75 < np.mean(out.conn_attrs[cv][:, 0] != p.conn_attrs[cv][:, 0]) < 0.99  # weight: 0.8 + 0.1


def test_attribute_mutation_equals_the_select_formula():
    """mutate_attributes mutates nodes and connections in branches (a branch for "nothing valid"):
    bit for bit the select of the gene types' mutations over the valid rows, also for a population
    without connections and for one without any valid row."""
    grown = grow("ff_neat_python", 2, 6)
    spec, pop = grown.spec, grown.population
    no_conns = pop.replace(
        conn_innov=jnp.full_like(pop.conn_innov, EMPTY),
        conn_in=jnp.full_like(pop.conn_in, EMPTY),
        conn_out=jnp.full_like(pop.conn_out, EMPTY),
    )
    empty = spec.empty(pop.node_key.shape[:1])

    def formula(key, population):
        k_node, k_conn = jax.random.split(key)
        n, c = population.node_key.size, population.conn_innov.size
        attrs, act, agg = spec.node_gene.mutate_attrs(
            k_node,
            population.node_attrs.reshape(n, -1),
            population.node_act.reshape(n),
            population.node_agg.reshape(n),
        )
        gene = population.node_valid & (jnp.arange(spec.max_nodes) >= spec.num_inputs)
        cattrs, enabled = spec.conn_gene.mutate_attrs(
            k_conn, population.conn_attrs.reshape(c, -1), population.conn_enabled.reshape(c)
        )
        cv = population.conn_valid
        attrs = attrs.reshape(population.node_attrs.shape)
        cattrs = cattrs.reshape(population.conn_attrs.shape)
        return population.replace(
            node_attrs=jnp.where(gene[..., None], attrs, population.node_attrs),
            node_act=jnp.where(gene, act.reshape(gene.shape), population.node_act),
            node_agg=jnp.where(gene, agg.reshape(gene.shape), population.node_agg),
            conn_attrs=jnp.where(cv[..., None], cattrs, population.conn_attrs),
            conn_enabled=jnp.where(cv, enabled.reshape(cv.shape), population.conn_enabled),
        )

    fast = jax.jit(mutate_attributes, static_argnums=1)
    assert not np.any(np.asarray(no_conns.conn_valid)) and np.any(np.asarray(no_conns.node_valid))
    for population in (pop, no_conns, empty):
        for seed in (0, 1):
            got = _host(fast(jax.random.key(seed), spec, population))
            want = _host(jax.jit(formula)(jax.random.key(seed), population))
            for i, (a, b) in enumerate(zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want))):
                assert a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8)), i
    # vmapped (the branch on any member of the batch), with a member that has nothing to mutate
    keys = jax.random.split(jax.random.key(5), 3)
    batch = jax.tree_util.tree_map(lambda *x: jnp.stack(x), pop, empty, no_conns)
    batched = _host(jax.jit(jax.vmap(lambda k, p: mutate_attributes(k, spec, p)))(keys, batch))
    for i, population in enumerate((pop, empty, no_conns)):
        single = _host(fast(keys[i], spec, population))
        for a, b in zip(jax.tree_util.tree_leaves(single), jax.tree_util.tree_leaves(batched)):
            assert np.array_equal(a.view(np.uint8), b[i].view(np.uint8))


def test_delete_node_removes_the_connections_the_gather_finds():
    """delete_node finds the connections touching the deleted node by comparing endpoint rows
    (no gathers): the same as ``rows[src] | rows[dst]`` of the node mask, over grown populations.
    mutate's loop runs both deletions as one program with a traced node/connection flag: with the
    flag traced, node deletion gives the same, and connection deletion removes the connection a
    draw over the valid rows picks."""
    from evotensor.neat.mutation import _clear_conns, _clear_nodes, _one_delete, _one_delete_node, _rows

    for name, seed, generations in (("ff_neat_python", 2, 6), ("rec_tensorneat", 1, 4)):
        grown = grow(name, seed, generations)  # populations other tests grow too (cached)
        spec, pop = grown.spec, grown.population
        P = pop.node_key.shape[0]
        u = jax.random.uniform(jax.random.key(3), (P,))
        do = jax.random.uniform(jax.random.key(4), (P,)) < 0.7

        def reference(u, g, s, d, do, spec=spec):
            hidden = g.node_valid & (jnp.arange(spec.max_nodes) >= spec.num_io)
            count = jnp.sum(hidden, dtype=jnp.int32)
            target = jnp.minimum((u * count).astype(jnp.int32), count - 1)
            row = jnp.argmax(hidden & (jnp.cumsum(hidden, dtype=jnp.int32) == target + 1))
            ok = do & (count > 0)
            rows = (jnp.arange(spec.max_nodes) == row) & ok
            return _clear_nodes(_clear_conns(g, g.conn_valid & (rows[s] | rows[d])), rows), ok

        def reference_conn(u, g, s, d, do, spec=spec):
            count = jnp.sum(g.conn_valid, dtype=jnp.int32)
            target = jnp.minimum((u * count).astype(jnp.int32), count - 1)
            row = jnp.argmax(g.conn_valid & (jnp.cumsum(g.conn_valid, dtype=jnp.int32) == target + 1))
            ok = do & (count > 0)
            return _clear_conns(g, (jnp.arange(spec.max_conns) == row) & ok), ok

        def both(u, pop, do, node, spec=spec, reference=reference, reference_conn=reference_conn):
            src, dst = _rows(pop)
            fast = jax.vmap(lambda *x: _one_delete_node(spec, *x))(u, pop, src, dst, do)
            traced = [jax.vmap(lambda *x, n=n: _one_delete(spec, n, *x))(u, pop, src, dst, do) for n in node]
            want = jax.vmap(reference)(u, pop, src, dst, do), jax.vmap(reference_conn)(u, pop, src, dst, do)
            return (fast, *traced), (want[0], *want)

        got, want = jax.jit(both)(u, pop, do, jnp.array([True, False]))
        assert int(np.sum(np.asarray(got[0][1]))) > 0
        for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
            assert np.array_equal(np.asarray(a), np.asarray(b))


STAT_SPEC = GenomeSpec(2, 1, max_nodes=5, max_conns=6)


@pytest.mark.parametrize("single", [False, True])
def test_structural_probabilities_are_honoured(single):
    P = 2000
    pop = initial(STAT_SPEC, jax.random.key(0), P)  # 2 connections, no hidden node, room for a split
    nk, ni = initial_counters(STAT_SPEC)
    config = MutationConfig(single_structural_mutation=single, prune_dangling=False)
    out, nk1, ni1, m = MUTATE(jax.random.key(1), STAT_SPEC, config, pop, nk, ni)
    added = np.asarray(out.num_nodes) == STAT_SPEC.num_io + 1
    div = 1.4 if single else 1.0  # max(1, sum of the four probabilities)
    # a drawn split always succeeds (two connections, room) and a drawn connection deletion too
    assert abs(int(m["nodes_added"]) / P - 0.2 / div) < 0.04
    assert abs(int(m["conns_deleted"]) / P - 0.5 / div) < 0.04
    assert int(nk1) - int(nk) == 2  # two possible splits, deduplicated
    if single:
        # at most one structural mutation: no hidden node to delete, both legal new pairs exist,
        # and a genome with a split lost no connection
        assert int(m["nodes_deleted"]) == 0 and int(m["conns_added"]) == 0
        assert np.all(np.asarray(out.num_conns)[added] == 4)
        assert int(ni1) - int(ni) == 4
    else:
        # independent draws: the new node is deleted again with probability 0.2 * 0.2
        assert abs(int(m["nodes_deleted"]) / P - 0.2 * 0.2) < 0.03
        assert int(ni1) - int(ni) <= 6  # the splits' 4, and -1 -> new(-2, 0), -2 -> new(-1, 0)


def test_jit_vmap_and_determinism():
    spec, config = CASES["rec_tensorneat"]
    grown = [grow("rec_tensorneat", s, 4) for s in (1, 2)]
    pops = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *[g.population for g in grown])
    nks = jnp.array([g.next_node_key for g in grown], jnp.int32)
    nis = jnp.array([g.next_innov for g in grown], jnp.int32)
    keys = jax.random.split(jax.random.key(9), 2)
    batched = jax.jit(jax.vmap(lambda k, p, a, b: mutate(k, spec, config, p, a, b)))(keys, pops, nks, nis)
    for i, g in enumerate(grown):
        counters = jnp.int32(g.next_node_key), jnp.int32(g.next_innov)
        single = MUTATE(keys[i], spec, config, g.population, *counters)
        again = MUTATE(keys[i], spec, config, g.population, *counters)
        for a, b, c in zip(
            jax.tree_util.tree_leaves(single),
            jax.tree_util.tree_leaves(again),
            jax.tree_util.tree_leaves(batched),
        ):
            assert np.array_equal(np.asarray(a), np.asarray(b))
            assert np.array_equal(np.asarray(a), np.asarray(c[i]))
    counters = jnp.int32(grown[0].next_node_key), jnp.int32(grown[0].next_innov)
    other = MUTATE(jax.random.key(10), spec, config, grown[0].population, *counters)
    assert not np.array_equal(np.asarray(other[0].conn_attrs), np.asarray(batched[0].conn_attrs[0]))


def test_inactive_genomes_are_untouched_and_use_no_numbers():
    spec, config = CASES["ff_neat_python"]
    config = dataclasses.replace(config, node_add_prob=1.0, conn_add_prob=1.0)
    grown = grow("ff_neat_python", 3, 3)
    pop, nk, ni = grown.population, jnp.int32(grown.next_node_key), jnp.int32(grown.next_innov)
    P = pop.node_key.shape[0]
    active = jnp.arange(P) % 2 == 0
    out, nk2, ni2, metrics = jax.jit(mutate, static_argnums=(1, 2))(
        jax.random.key(4), spec, config, pop, nk, ni, active
    )
    for new, old in zip(jax.tree_util.tree_leaves(out), jax.tree_util.tree_leaves(pop)):
        np.testing.assert_array_equal(np.asarray(new)[1::2], np.asarray(old)[1::2])
    assert not np.array_equal(np.asarray(out.conn_attrs)[::2], np.asarray(pop.conn_attrs)[::2])
    # new numbers went to active genomes only (a gene deleted later in the same call keeps its
    # number used up, as in neat-python, so the counter may run ahead of the genes present)
    new_innov = {int(i) for g in range(0, P, 2) for i in np.asarray(out.conn_innov[g]) if i >= int(ni)}
    assert new_innov and max(new_innov) < int(ni2)
    assert int(metrics["conns_added"]) > 0
    assert all(check_genome(spec, out[g]) == [] for g in range(P))
    with pytest.raises(ArgumentError, match="active"):
        mutate(jax.random.key(4), spec, config, pop, nk, ni, active[:-1])


def test_attribute_mutation_draws_from_the_unrolled_hash():
    # every gene attribute's draws come from evotensor.core.rng (JAX's numbers; on the CPU JAX lowers
    # its own Threefry as a rolled loop, a ``threefry2x32`` function: one slow kernel per draw)
    spec = CASES["ff_neat_python"][0]
    pop = initial(spec, jax.random.key(0), 4)
    text = jax.jit(mutate_attributes, static_argnums=1).lower(jax.random.key(1), spec, pop).as_text()
    if jax.default_backend() == "cpu":
        assert "@threefry2x32" not in text
