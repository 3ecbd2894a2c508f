"""Crossover: the child's genes against a slow reference alignment, inheritance rates, the fitter
parent's choice, the paper's equal-fitness union, and the absence of [C, C] intermediates."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.neat.reference_neat import (
    array_sizes,
    random_pair,
    ref_crossover_genes,
    ref_has_cycle,
    ref_union_candidates,
)

from evotensor.core.checks import ArgumentError
from evotensor.neat import (
    ChoiceAttribute,
    ConnectionGene,
    FloatAttribute,
    GenomeSpec,
    NodeGene,
    check_genome,
    genome_from_dict,
    genome_to_dict,
)
from evotensor.neat.crossover import CrossoverConfig, _has_cycle, crossover, crossover_population

NODE = NodeGene(
    activation=ChoiceAttribute("activation", ("sigmoid", "tanh", "relu")),
    aggregation=ChoiceAttribute("aggregation", ("sum", "product")),
    ctrnn=True,
)
CONN = ConnectionGene(extra=(FloatAttribute("delay"),))
SPECS = {
    "ff": GenomeSpec(3, 2, max_nodes=12, max_conns=24, node_gene=NODE, conn_gene=CONN),
    "rec": GenomeSpec(2, 2, max_nodes=9, max_conns=30, feed_forward=False),
}
NEAT_PYTHON, PAPER = CrossoverConfig(), CrossoverConfig(mode="paper")
K = 256  # children per call


@functools.partial(jax.jit, static_argnums=(0, 1))
def children(spec, config, key, fitter, other, equal):
    """``K`` children of one pair, one per key."""
    keys = jax.random.split(key, K)
    return jax.vmap(lambda k: crossover(k, spec, fitter, other, config, equal))(keys)


def normalized(spec, d):
    """A hand-written genome dict with every attribute filled in (as genome_to_dict gives it)."""
    return genome_to_dict(spec, genome_from_dict(spec, d))


def child_dicts(spec, kids, count):
    return [genome_to_dict(spec, kids[i]) for i in range(count)]


def assert_crossed(spec, mode, child, f, o):
    """A matching gene's attributes come from the parents: each on its own (neat-python) or all from
    one parent (paper); the enabled rule; an unmatched gene is the fitter parent's."""
    if o is None:
        assert child == f
        return
    floats = [k for k in f if k not in ("enabled", "innovation")]
    if mode == "neat-python":
        for name in floats:
            assert child[name] in (f[name], o[name]), name
    else:
        assert [child[n] for n in floats] in ([f[n] for n in floats], [o[n] for n in floats])
    if "innovation" in f:
        assert child["innovation"] == f["innovation"]
        if f["enabled"] and o["enabled"]:
            assert child["enabled"]


def assert_child_of(spec, mode, child, fitter, other):
    genes = ref_crossover_genes(fitter, other)
    assert set(child["nodes"]) == set(genes["nodes"])
    assert set(child["connections"]) == set(genes["connections"])
    for k, (f, o) in genes["nodes"].items():
        assert_crossed(spec, mode, child["nodes"][k], f, o)
    for pair, (f, o) in genes["connections"].items():
        assert_crossed(spec, mode, child["connections"][pair], f, o)


def assert_union_child_of(spec, child, fitter, other):
    """The paper's equal-fitness child (or its fallback, the fitter parent's structure)."""
    cand = ref_union_candidates(fitter, other)
    genes = ref_crossover_genes(fitter, other)
    conns = child["connections"]
    assert cand["matching"] <= set(conns)
    assert set(conns) <= cand["matching"] | cand["fitter_only"] | cand["other_only"]
    for pair, gene in conns.items():
        if pair in cand["other_only"]:
            assert gene == other["connections"][pair]
        else:
            assert_crossed(spec, "paper", gene, *genes["connections"][pair])
    needed = {
        k for pair in conns if pair in cand["other_only"] for k in pair if k >= 0 and k not in fitter["nodes"]
    }
    assert set(child["nodes"]) == set(fitter["nodes"]) | needed
    for k in needed:
        assert child["nodes"][k] == other["nodes"][k]
    for k in fitter["nodes"]:
        assert_crossed(spec, "paper", child["nodes"][k], *genes["nodes"][k])


@pytest.mark.parametrize("spec_name", sorted(SPECS))
@given(seed=st.integers(0, 2**31 - 1))
def test_child_has_the_fitter_parents_genes(spec_name, seed):
    spec = SPECS[spec_name]
    df, do = random_pair(spec, seed)
    f, o = genome_from_dict(spec, df), genome_from_dict(spec, do)
    for config in (NEAT_PYTHON, PAPER):
        # equal_fitness only matters for the paper mode: here the fitter parent is strictly better
        kids = children(spec, config, jax.random.key(seed), f, o, config is NEAT_PYTHON)
        # the fitter parent's row layout, exactly
        for field in ("node_key", "conn_innov", "conn_in", "conn_out"):
            assert np.array_equal(
                np.asarray(getattr(kids, field)),
                np.broadcast_to(getattr(f, field), (K, *getattr(f, field).shape)),
            )
        for child in child_dicts(spec, kids, 8):
            assert_child_of(spec, config.mode, child, df, do)
        for i in range(8):
            assert check_genome(spec, kids[i]) == []


def _rate_pair(spec):
    """Parents with the same structure (every gene matches), different attributes, and all four
    enabled patterns; plus genes only the fitter parent has, some disabled."""
    rng = np.random.default_rng(0)
    ng, cg = spec.node_gene, spec.conn_gene
    hidden = list(range(spec.num_outputs, spec.num_outputs + spec.max_nodes - spec.num_io))
    pairs = [
        (u, v)
        for u in [-1 - i for i in range(spec.num_inputs)] + hidden
        for v in list(range(spec.num_outputs)) + hidden
        if u != v
    ]
    pairs = [p for p in pairs if p[0] < p[1] or p[0] < 0][: spec.max_conns]

    def genome(shift, drop_last):
        nodes = {}
        for k in list(range(spec.num_outputs)) + hidden:
            nodes[k] = {n: float(i + shift + k) for i, n in enumerate(ng.float_names)}
            nodes[k]["activation"] = ng.activation.options[shift % len(ng.activation.options)]
            nodes[k]["aggregation"] = ng.aggregation.options[shift % len(ng.aggregation.options)]
        conns = {}
        for i, p in enumerate(pairs[: len(pairs) - drop_last]):
            gene = {n: float(j + shift + i) for j, n in enumerate(cg.float_names)}
            gene["innovation"] = i
            gene["enabled"] = bool(rng.random() < 0.5)
            conns[p] = gene
        return genome_to_dict(spec, genome_from_dict(spec, {"nodes": nodes, "connections": conns}))

    return genome(0, 0), genome(1, 6)


@pytest.mark.parametrize("config", [NEAT_PYTHON, PAPER], ids=lambda c: c.mode)
def test_inheritance_rates(config):
    spec = SPECS["ff"]
    df, do = _rate_pair(spec)
    f, o = genome_from_dict(spec, df), genome_from_dict(spec, do)
    kids = children(spec, config, jax.random.key(1), f, o, False)
    rows_f = np.asarray(f.conn_valid)
    matched = rows_f & (np.arange(spec.max_conns) < int(o.num_conns))
    en_f, en_o = np.asarray(f.conn_enabled), np.asarray(o.conn_enabled)[: spec.max_conns]
    en = np.asarray(kids.conn_enabled)  # [K, C]
    either_disabled = matched & ~(en_f & en_o)
    assert either_disabled.sum() >= 6 and (matched & en_f & en_o).sum() >= 3
    assert np.all(en[:, matched & en_f & en_o])  # enabled in both: always enabled
    assert np.array_equal(
        en[:, rows_f & ~matched], np.broadcast_to(en_f[rows_f & ~matched], (K, (rows_f & ~matched).sum()))
    )
    assert (rows_f & ~matched & ~en_f).any()  # a disabled gene only the fitter parent has stays disabled
    disabled_rate = 1 - en[:, either_disabled].mean()
    assert abs(disabled_rate - 0.75) < 0.03, disabled_rate  # sd ~ 0.008
    # each attribute from either parent with probability 1/2; together or independently per mode
    from_f = np.asarray(kids.conn_attrs)[:, matched] == np.asarray(f.conn_attrs)[matched]  # [K, m, B]
    assert abs(from_f.mean() - 0.5) < 0.03
    node_rows = np.asarray(f.node_key) >= 0
    node_from_f = np.concatenate(
        [
            np.asarray(kids.node_attrs)[:, node_rows] == np.asarray(f.node_attrs)[node_rows],
            (np.asarray(kids.node_act)[:, node_rows] == np.asarray(f.node_act)[node_rows])[..., None],
            (np.asarray(kids.node_agg)[:, node_rows] == np.asarray(f.node_agg)[node_rows])[..., None],
        ],
        axis=-1,
    )  # [K, nodes, A + 2]
    assert abs(node_from_f.mean() - 0.5) < 0.03
    split_conn = (from_f[..., 0] != from_f[..., 1]).mean()
    split_node = (node_from_f[..., 0] != node_from_f[..., -1]).mean()
    if config.mode == "neat-python":
        assert abs(split_conn - 0.5) < 0.05 and abs(split_node - 0.5) < 0.05
    else:
        assert split_conn == 0 and split_node == 0


def test_disable_inherit_prob_is_configurable():
    spec = SPECS["ff"]
    df, do = _rate_pair(spec)
    f, o = genome_from_dict(spec, df), genome_from_dict(spec, do)
    never = children(spec, CrossoverConfig(disable_inherit_prob=0.0), jax.random.key(2), f, o, False)
    assert np.all(np.asarray(never.conn_enabled)[:, : int(o.num_conns)])
    always = children(spec, CrossoverConfig(disable_inherit_prob=1.0), jax.random.key(2), f, o, False)
    either = ~(np.asarray(f.conn_enabled) & np.asarray(o.conn_enabled))[: int(o.num_conns)]
    assert not np.any(np.asarray(always.conn_enabled)[:, : int(o.num_conns)][:, either])


@pytest.mark.parametrize("config", [NEAT_PYTHON, PAPER], ids=lambda c: c.mode)
def test_crossover_with_itself_returns_it(config):
    spec = SPECS["ff"]
    d, _ = random_pair(spec, 7)
    g = genome_from_dict(spec, d)
    kids = children(spec, config, jax.random.key(3), g, g, True)
    disabled = ~np.asarray(g.conn_enabled) & np.asarray(g.conn_valid)
    assert disabled.any()
    for name, x in zip(g.__dataclass_fields__, jax.tree_util.tree_leaves(g)):
        got = np.asarray(getattr(kids, name))
        if name == "conn_enabled":
            assert np.all(got[:, ~disabled] == np.asarray(x)[~disabled])
            assert abs(got[:, disabled].mean() - 0.25) < 0.05  # the 75% rule re-enables a quarter
        else:
            assert np.array_equal(got, np.broadcast_to(x, got.shape)), name


@functools.partial(jax.jit, static_argnums=(1, 6, 7))
def _population(key, spec, pop, p1, p2, fitness, maximize, config):
    return crossover_population(key, spec, pop, p1, p2, fitness, maximize=maximize, config=config)


@functools.partial(jax.jit, static_argnums=(1,))
def _pairwise(keys, spec, pop, fitter, other):
    return jax.vmap(lambda k, a, b: crossover(k, spec, pop[a], pop[b]))(keys, fitter, other)


def test_crossover_population_uses_the_fitter_parent():
    spec = SPECS["rec"]
    dicts = [d for s in range(3) for d in random_pair(spec, 40 + s)]
    pop = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *[genome_from_dict(spec, d) for d in dicts])
    fitness = jnp.array([1.0, 3.0, 3.0, jnp.nan, -2.0, 0.5])
    p1 = jnp.array([0, 1, 2, 3, 0, 4, 5, 1, 2])
    p2 = jnp.array([1, 0, 1, 0, 3, 4, 0, 2, 5])
    # maximize: larger is better, a tie makes parent2 the fitter, NaN is the worst
    want_max = [1, 1, 1, 0, 0, 4, 0, 2, 2]
    want_min = [0, 0, 1, 0, 0, 4, 5, 2, 5]
    key = jax.random.key(5)
    for maximize, want in ((True, want_max), (False, want_min)):
        kids = _population(key, spec, pop, p1, p2, fitness, maximize, NEAT_PYTHON)
        assert np.array_equal(np.asarray(kids.conn_innov), np.asarray(pop.conn_innov)[want])
        assert np.array_equal(np.asarray(kids.node_key), np.asarray(pop.node_key)[want])
        other = [b if a == w else a for a, b, w in zip(p1.tolist(), p2.tolist(), want)]
        same = _pairwise(jax.random.split(key, len(want)), spec, pop, jnp.array(want), jnp.array(other))
        for x, y in zip(jax.tree_util.tree_leaves(kids), jax.tree_util.tree_leaves(same)):
            assert np.array_equal(np.asarray(x), np.asarray(y))
        for i, (w, oth) in enumerate(zip(want, other)):
            assert check_genome(spec, kids[i]) == []
            assert_child_of(spec, "neat-python", genome_to_dict(spec, kids[i]), dicts[w], dicts[oth])


@pytest.mark.parametrize("spec_name", sorted(SPECS))
@given(seed=st.integers(0, 2**31 - 1))
def test_paper_equal_fitness_child_inherits_from_both(spec_name, seed):
    spec = SPECS[spec_name]
    df, do = random_pair(spec, seed)
    f, o = genome_from_dict(spec, df), genome_from_dict(spec, do)
    kids = children(spec, PAPER, jax.random.key(seed), f, o, True)
    for i, child in enumerate(child_dicts(spec, kids, 12)):
        assert check_genome(spec, kids[i]) == [], child
        assert_union_child_of(spec, child, df, do)
        edges = list(child["connections"])
        assert not (spec.feed_forward and ref_has_cycle(edges))


def test_paper_union_rates_and_neat_python_ignores_equal_fitness():
    spec = SPECS["rec"]
    n = {"bias": 0.0, "response": 1.0}
    fitter = {
        "nodes": {0: n, 1: n, 2: n},
        "connections": {(-1, 0): {"innovation": 0}, (-2, 1): {"innovation": 3}, (2, 0): {"innovation": 5}},
    }
    other = {
        "nodes": {0: n, 1: n, 4: n},
        "connections": {(-1, 0): {"innovation": 0}, (-1, 4): {"innovation": 6}, (4, 1): {"innovation": 7}},
    }
    f, o = genome_from_dict(spec, fitter), genome_from_dict(spec, other)
    kids = children(spec, PAPER, jax.random.key(6), f, o, True)
    sets = [set(c["connections"]) for c in child_dicts(spec, kids, K)]
    rate = lambda pair: np.mean([pair in s for s in sets])  # noqa: E731
    assert rate((-1, 0)) == 1.0  # matching
    for pair in [(-2, 1), (2, 0), (-1, 4), (4, 1)]:
        assert abs(rate(pair) - 0.5) < 0.1, pair
    # node 4 comes along exactly when a connection needs it
    keys = [set(c["nodes"]) for c in child_dicts(spec, kids, K)]
    assert all((4 in k) == bool({(-1, 4), (4, 1)} & s) for k, s in zip(keys, sets))
    assert all({0, 1, 2} <= k for k in keys)
    plain = children(spec, NEAT_PYTHON, jax.random.key(6), f, o, True)
    assert np.array_equal(np.asarray(plain.conn_innov), np.broadcast_to(f.conn_innov, (K, spec.max_conns)))


def test_paper_union_falls_back_on_a_cycle_or_overflow():
    n = {"bias": 0.0, "response": 1.0}
    # feedforward parents whose union has the cycle 3 -> 4 -> 3
    spec = GenomeSpec(1, 1, max_nodes=5, max_conns=6)
    fitter = {
        "nodes": {0: n, 3: n, 4: n},
        "connections": {(-1, 3): {"innovation": 1}, (3, 4): {"innovation": 2}, (4, 0): {"innovation": 3}},
    }
    other = {
        "nodes": {0: n, 3: n, 4: n},
        "connections": {(-1, 4): {"innovation": 4}, (4, 3): {"innovation": 5}, (3, 0): {"innovation": 6}},
    }
    fitter, other = normalized(spec, fitter), normalized(spec, other)
    f, o = genome_from_dict(spec, fitter), genome_from_dict(spec, other)
    kids = children(spec, PAPER, jax.random.key(8), f, o, True)
    dicts = child_dicts(spec, kids, K)
    for i, child in enumerate(dicts[:32]):
        assert check_genome(spec, kids[i]) == []
        assert_union_child_of(spec, child, fitter, other)
    sets = [set(c["connections"]) for c in dicts]
    assert not any({(3, 4), (4, 3)} <= s for s in sets)
    assert any((4, 3) in s for s in sets) and any((3, 4) not in s for s in sets)
    # the fallback is the fitter parent's structure
    # no gene matches: each of the 3 + 3 genes is kept with probability 1/2; the union has the cycle
    # when (3, 4) and (4, 3) are both kept (1/4), and is the fitter's set itself in 1/64 of draws
    fallback = sum(s == set(fitter["connections"]) for s in sets) / K
    assert abs(fallback - (1 / 4 + 1 / 64)) < 0.1, fallback  # sd ~0.028 at K = 256

    # no free node row for the other parent's hidden node 5; no free connection row either
    spec = GenomeSpec(1, 1, max_nodes=3, max_conns=3, feed_forward=False)
    fitter = {
        "nodes": {0: n, 3: n},
        "connections": {(-1, 3): {"innovation": 1}, (3, 0): {"innovation": 2}, (-1, 0): {"innovation": 0}},
    }
    other = {
        "nodes": {0: n, 5: n},
        "connections": {(-1, 5): {"innovation": 7}, (5, 0): {"innovation": 8}, (0, 0): {"innovation": 9}},
    }
    fitter, other = normalized(spec, fitter), normalized(spec, other)
    f, o = genome_from_dict(spec, fitter), genome_from_dict(spec, other)
    kids = children(spec, PAPER, jax.random.key(9), f, o, True)
    dicts = child_dicts(spec, kids, K)
    sets = [set(c["connections"]) for c in dicts]
    for i, child in enumerate(dicts[:32]):
        assert check_genome(spec, kids[i]) == []
        assert_union_child_of(spec, child, fitter, other)
    assert not any({(-1, 5), (5, 0)} & s for s in sets)  # node 5 never fits
    assert any((0, 0) in s for s in sets)  # fits where a fitter-only gene was dropped
    assert all(len(s) <= 3 for s in sets)


@jax.jit
def _cycle(node_valid, src, dst, edge_valid):
    return _has_cycle(node_valid, src, dst, edge_valid, jnp.asarray(True))


@given(seed=st.integers(0, 2**31 - 1), n_edges=st.integers(0, 16), n_nodes=st.integers(1, 8))
def test_cycle_check_matches_a_depth_first_search(seed, n_edges, n_nodes):
    rng = np.random.default_rng(seed)
    N, C = 8, 16
    node_valid = np.arange(N) < n_nodes
    src = rng.integers(0, n_nodes, C)
    dst = rng.integers(0, n_nodes, C)
    if rng.random() < 0.5:  # mostly acyclic: edges go up a random order
        order = rng.permutation(n_nodes)
        src, dst = np.minimum(order[src], order[dst]), np.maximum(order[src], order[dst])
        keep = src != dst
        src, dst = np.where(keep, src, 0), np.where(keep, dst, 0)
        edge_valid = (np.arange(C) < n_edges) & keep
    else:
        edge_valid = np.arange(C) < n_edges
    want = ref_has_cycle([(int(a), int(b)) for a, b, v in zip(src, dst, edge_valid) if v])
    assert (
        bool(_cycle(jnp.asarray(node_valid), jnp.asarray(src), jnp.asarray(dst), jnp.asarray(edge_valid)))
        == want
    )


def test_no_c_by_c_arrays_at_large_sizes():
    C, P = 1000, 64
    spec = GenomeSpec(4, 3, max_nodes=60, max_conns=C)
    pop = spec.initial(jax.random.key(0), P)
    fitness = jnp.arange(P, dtype=jnp.float32) % 5
    p1, p2 = jnp.arange(P), jnp.roll(jnp.arange(P), 1)
    fn = jax.jit(
        lambda k, pop, a, b, fit: [
            crossover_population(k, spec, pop, a, b, fit, maximize=True, config=c)
            for c in (NEAT_PYTHON, PAPER)
        ]
    )
    sizes, compiled = array_sizes(fn, jax.random.key(1), pop, p1, p2, fitness)
    assert len(sizes) > 20 and P * C <= max(sizes) < C * C, max(sizes)
    for kids in compiled(jax.random.key(1), pop, p1, p2, fitness):
        assert kids.conn_innov.shape == (P, C)
        for i in (0, 17, 63):
            assert check_genome(spec, kids[i]) == []


def test_argument_checks():
    with pytest.raises(ArgumentError, match="mode"):
        CrossoverConfig(mode="tensorneat")
    with pytest.raises(ArgumentError, match="disable_inherit_prob"):
        CrossoverConfig(disable_inherit_prob=1.5)
    spec = SPECS["rec"]
    pop = spec.initial(jax.random.key(0), 4)
    key = jax.random.key(0)
    idx = jnp.arange(4)
    with pytest.raises(ArgumentError, match="maximize"):
        crossover_population(key, spec, pop, idx, idx, jnp.zeros(4), maximize=1)
    with pytest.raises(ArgumentError, match="parent1_idx"):
        crossover_population(key, spec, pop, idx, idx[:3], jnp.zeros(4), maximize=True)
    with pytest.raises(ArgumentError, match="fitness"):
        crossover_population(key, spec, pop, idx, idx, jnp.zeros(3), maximize=True)
    with pytest.raises(ArgumentError, match="single genomes"):
        crossover(key, spec, pop, pop)
    with pytest.raises(ArgumentError, match="config"):
        crossover(key, spec, pop[0], pop[1], config="paper")


def test_children_draw_from_the_unrolled_hash():
    # the children's coins come from evotensor.core.rng (JAX's numbers; on the CPU JAX lowers its own
    # Threefry as a rolled loop, a ``threefry2x32`` function: one slow kernel per draw and split)
    spec = GenomeSpec(2, 1, max_nodes=5, max_conns=6)
    pop = spec.initial(jax.random.key(0), 6)
    fn = jax.jit(
        lambda k, pop, a, b, f: crossover_population(k, spec, pop, a, b, f, maximize=True, config=NEAT_PYTHON)
    )
    text = fn.lower(jax.random.key(1), pop, jnp.arange(6), jnp.arange(6)[::-1], jnp.arange(6.0)).as_text()
    if jax.default_backend() == "cpu":
        assert "@threefry2x32" not in text
