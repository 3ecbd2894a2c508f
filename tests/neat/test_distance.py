"""Compatibility distance: every mode against a slow pure-Python reference, plus symmetry, the
distance matrix, custom genes and the absence of [C, C] intermediates."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.neat.reference_neat import array_sizes, default_node_distance, random_pair, ref_distance

from evotensor.core.checks import ArgumentError
from evotensor.neat import (
    ChoiceAttribute,
    ConnectionGene,
    FloatAttribute,
    GenomeSpec,
    NodeGene,
    genome_from_dict,
    genome_to_dict,
)
from evotensor.neat.distance import (
    DistanceConfig,
    SortedTable,
    distance,
    distance_matrix,
    endpoint_rows,
    homologous_rows,
)

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
CONFIGS = [
    DistanceConfig(),
    DistanceConfig(compatibility_excess_coefficient=2.5, compatibility_enable_penalty=0.3),
    DistanceConfig(compatibility_include_node_genes=False, compatibility_weight_coefficient=1.3),
    DistanceConfig(mode="paper"),
    DistanceConfig(mode="paper", normalize_small_genomes_threshold=0, compatibility_excess_coefficient=0.7),
    DistanceConfig(mode="paper", normalize_small_genomes_threshold=5, compatibility_disjoint_coefficient=2.0),
    DistanceConfig(mode="tensorneat"),
    DistanceConfig(
        mode="tensorneat", compatibility_include_node_genes=False, compatibility_disjoint_coefficient=0.5
    ),
]


def ref(spec, cfg, a, b, **kw):
    return ref_distance(
        spec,
        a,
        b,
        mode=cfg.mode,
        c_d=cfg.compatibility_disjoint_coefficient,
        c_w=cfg.compatibility_weight_coefficient,
        c_e=cfg.compatibility_excess_coefficient,
        include_nodes=cfg.compatibility_include_node_genes,
        enable_penalty=cfg.compatibility_enable_penalty,
        threshold=cfg.normalize_small_genomes_threshold,
        **kw,
    )


@functools.partial(jax.jit, static_argnums=(0, 1))
def all_pairs(spec, configs, a, b):
    """Every config's d(a, b), d(b, a), d(a, a)."""
    return jnp.stack(
        [
            jnp.stack([distance(spec, c, a, b), distance(spec, c, b, a), distance(spec, c, a, a)])
            for c in configs
        ]
    )


@pytest.mark.parametrize("spec_name", sorted(SPECS))
@given(seed=st.integers(0, 2**31 - 1))
def test_every_mode_matches_the_reference(spec_name, seed):
    spec = SPECS[spec_name]
    da, db = random_pair(spec, seed)
    a, b = genome_from_dict(spec, da), genome_from_dict(spec, db)
    got = np.asarray(all_pairs(spec, tuple(CONFIGS), a, b))
    for cfg, (ab, ba, aa) in zip(CONFIGS, got):
        want = ref(spec, cfg, da, db)
        np.testing.assert_allclose(ab, want, rtol=1e-5, atol=1e-5, err_msg=str(cfg))
        np.testing.assert_allclose(ba, want, rtol=1e-5, atol=1e-5, err_msg=str(cfg))  # symmetric
        assert aa == 0.0, cfg


def test_hand_computed_values():
    """One small pair worked out by hand for every config (checks the reference too)."""
    spec = SPECS["rec"]
    n = {"bias": 0.0, "response": 1.0, "activation": "sigmoid", "aggregation": "sum"}
    a = {
        "nodes": {0: dict(n), 1: dict(n), 2: dict(n, bias=0.5)},
        "connections": {
            (-1, 0): {"innovation": 0, "enabled": True, "weight": 1.0},
            (-2, 0): {"innovation": 1, "enabled": True, "weight": 0.0},
            (-1, 2): {"innovation": 4, "enabled": True, "weight": 2.0},
            (2, 0): {"innovation": 5, "enabled": True, "weight": 1.0},
        },
    }
    b = {
        "nodes": {0: dict(n, bias=1.0), 1: dict(n)},
        "connections": {
            (-1, 0): {"innovation": 0, "enabled": False, "weight": 0.5},
            (-2, 0): {"innovation": 1, "enabled": True, "weight": 0.25},
            (0, 0): {"innovation": 3, "enabled": True, "weight": 1.0},
        },
    }
    # nodes: 0 homologous (|dbias| 1), 1 homologous (0), 2 disjoint
    # conns: innov 0 matches (|dw| .5, enabled differs), 1 matches (|dw| .25); 3 (b) disjoint; 4, 5 (a) excess
    node = (0.5 * 1.0 + 1.0) / 3
    want = [
        node + (0.5 * (0.5 + 1.0 + 0.25) + 1.0 * 1 + 1.0 * 2) / 4,
        node + (0.5 * (0.5 + 0.3 + 0.25) + 1.0 * 1 + 2.5 * 2) / 4,
        (1.3 * (0.5 + 1.0 + 0.25) + 1 + 2) / 4,
        2 / 1 + 1 / 1 + 0.4 * 0.375,  # paper: N = 1 below 20 genes, W_bar = mean(.5, .25)
        0.7 * 2 / 4 + 1 / 4 + 0.4 * 0.375,
        2.0 * 2 / 1 + 2.0 * 1 / 1 + 0.4 * 0.375,  # 4 genes < 5; c_e = c_d ('auto')
        # tensorneat: nodes incl. 2 input pins (5 vs 4 rows, 4 homologous, distance 1, 1 extra);
        # conns by pair: (-1, 0), (-2, 0) homologous (.5 + .25), 3 non-homologous
        (1 + 0.4 * 1) / 5 + (3 + 0.4 * 0.75) / 4,
        (0.5 * 3 + 0.4 * 0.75) / 4,
    ]
    got = np.asarray(all_pairs(spec, tuple(CONFIGS), genome_from_dict(spec, a), genome_from_dict(spec, b)))
    for cfg, w, (ab, ba, _) in zip(CONFIGS, want, got):
        assert np.isclose(ab, w, rtol=1e-6) and np.isclose(ba, w, rtol=1e-6), (cfg, ab, w)
        assert np.isclose(ref(spec, cfg, a, b), w, rtol=1e-12), cfg


def test_innovation_collision_counts_as_two_disjoint_genes():
    spec = SPECS["rec"]
    n = {"bias": 0.0, "response": 1.0}
    a = {
        "nodes": {0: n},
        "connections": {(-1, 0): {"innovation": 3, "weight": 1.0}, (-2, 0): {"innovation": 7}},
    }
    b = {
        "nodes": {0: n},
        "connections": {(-2, 0): {"innovation": 3, "weight": 1.0}, (0, 0): {"innovation": 9}},
    }
    ga, gb = genome_from_dict(spec, a), genome_from_dict(spec, b)
    got = np.asarray(all_pairs(spec, tuple(CONFIGS), ga, gb))
    for cfg, (ab, ba, _) in zip(CONFIGS, got):
        want = ref(spec, cfg, genome_to_dict(spec, ga), genome_to_dict(spec, gb))
        assert np.isclose(ab, want, rtol=1e-6) and np.isclose(ba, want, rtol=1e-6), cfg
    # innovation 3 collides: 2 disjoint; 7 (a) is below b's max 9: disjoint; 9 (b) above 7: excess
    assert np.isclose(got[1, 0], (3 * 1.0 + 2.5 * 1) / 2)  # nodes identical: node term 0
    assert np.isclose(got[3, 0], 3 + 1)  # paper: D = 3, E = 1, no matching gene
    # tensorneat matches (-2, 0) by its pair whatever its innovation number: 2 non-homologous of 2
    assert np.isclose(got[7, 0], (0.5 * 2 + 0.4 * 1.0) / 2)  # weights 0 (default) and 1


def test_genomes_without_connections():
    spec = SPECS["rec"]
    empty = {"nodes": {}, "connections": {}}
    _, full = random_pair(spec, 3)
    assert full["connections"]
    got = np.asarray(
        all_pairs(spec, tuple(CONFIGS), genome_from_dict(spec, empty), genome_from_dict(spec, full))
    )
    for cfg, (ab, ba, aa) in zip(CONFIGS, got):
        want = ref(spec, cfg, genome_to_dict(spec, genome_from_dict(spec, empty)), full)
        assert np.isclose(ab, want, rtol=1e-6) and np.isclose(ba, want, rtol=1e-6), cfg
        assert aa == 0 and ab > 0
    # every gene of the connected genome is excess against one without connections
    assert np.isclose(got[4, 0], 0.7 * len(full["connections"]) / len(full["connections"]))


def test_the_gene_types_attribute_distance_is_used():
    class SquaredNode(NodeGene):
        def attribute_distance(self, attrs_a, act_a, agg_a, attrs_b, act_b, agg_b):
            return jnp.sum((attrs_a - attrs_b) ** 2, axis=-1) + 3.0 * (act_a != act_b)

    class HalfConn(ConnectionGene):
        def attribute_distance(self, attrs_a, attrs_b):
            return 0.5 * jnp.abs(attrs_a[..., 0] - attrs_b[..., 0])

    node = SquaredNode(activation=ChoiceAttribute("activation", ("sigmoid", "tanh")))
    spec = GenomeSpec(2, 2, max_nodes=8, max_conns=12, node_gene=node, conn_gene=HalfConn())

    def node_d(spec, n1, n2):
        return sum((n1[k] - n2[k]) ** 2 for k in spec.node_gene.float_names) + 3.0 * (
            n1["activation"] != n2["activation"]
        )

    def conn_d(spec, c1, c2):
        return 0.5 * abs(c1["weight"] - c2["weight"])

    configs = (CONFIGS[0], CONFIGS[3], CONFIGS[6])
    changed = False
    for seed in range(5):
        da, db = random_pair(spec, seed)
        got = np.asarray(all_pairs(spec, configs, genome_from_dict(spec, da), genome_from_dict(spec, db)))
        for cfg, (ab, _, _) in zip(configs, got):
            want = ref(spec, cfg, da, db, node_distance=node_d, conn_distance=conn_d)
            np.testing.assert_allclose(ab, want, rtol=1e-5, atol=1e-6)
            changed |= not np.isclose(ab, ref(spec, cfg, da, db, node_distance=default_node_distance))
    assert changed, "the custom genes never changed the distance"


@jax.jit
def _matrices(pop, reps):
    spec = SPECS["ff"]
    full = [distance_matrix(spec, CONFIGS[i], pop, reps) for i in (0, 3, 6)]
    return jnp.stack([*full, distance_matrix(spec, CONFIGS[0], pop, reps, batch_size=2)])


def test_distance_matrix_equals_pairwise():
    spec = SPECS["ff"]
    dicts = [d for s in range(4) for d in random_pair(spec, 100 + s)]
    pop = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *[genome_from_dict(spec, d) for d in dicts])
    chosen = [5, 0, 2]
    got = np.asarray(_matrices(pop, pop[jnp.array(chosen)]))
    assert got.shape == (4, 8, 3)
    for i, m in zip((0, 3, 6), got):
        want = np.array([[ref(spec, CONFIGS[i], d, dicts[s]) for s in chosen] for d in dicts])
        np.testing.assert_allclose(m, want, rtol=1e-5, atol=1e-5)
        assert np.all(m[chosen, [0, 1, 2]] == 0)
    np.testing.assert_allclose(got[3], got[0], rtol=1e-6, atol=1e-6)  # batch_size=2


@jax.jit
def _search(query, table, valid):
    return homologous_rows(tuple(query), tuple(table), valid)


@given(
    seed=st.integers(0, 2**31 - 1),
    rows=st.integers(1, 40),
    columns=st.integers(1, 2),
    key_range=st.integers(1, 60),
)
def test_homologous_rows_matches_a_dict_lookup(seed, rows, columns, key_range):
    rng = np.random.default_rng(seed)
    R = 40  # fixed shapes: one compile per column count; rows beyond `rows` are invalid
    # valid rows hold distinct keys; invalid rows anything (also copies of valid keys)
    table = rng.integers(-key_range, key_range, size=(R, columns))
    distinct = np.unique(table, axis=0)
    distinct = distinct[rng.permutation(len(distinct))]
    valid = (rng.random(R) < 0.7) & (np.arange(R) < rows)
    valid[np.flatnonzero(valid)[len(distinct) :]] = False
    table[valid] = distinct[: valid.sum()]
    query = rng.integers(-key_range, key_range, size=(R + 3, columns))
    query[: R // 2] = table[rng.integers(0, R, R // 2)]
    row, found = _search(query.T, table.T, valid)
    row, found = np.asarray(row), np.asarray(found)
    lookup = {tuple(t): i for i, t in enumerate(table.tolist()) if valid[i]}
    for q, r, f in zip(query.tolist(), row, found):
        assert bool(f) == (tuple(q) in lookup)
        assert 0 <= r < R
        if f:
            assert r == lookup[tuple(q)]


def test_homologous_rows_handles_extreme_keys():
    big = np.iinfo(np.int32)
    table = (jnp.array([big.max, big.min + 1, 0, 5], jnp.int32),)
    query = (jnp.array([0, big.max, big.min, big.min + 1, 7], jnp.int32),)
    row, found = homologous_rows(query, table, jnp.array([True, True, True, False]))
    assert np.asarray(found).tolist() == [True, True, False, True, False]
    assert np.asarray(row)[[0, 1, 3]].tolist() == [2, 0, 1]


@functools.partial(jax.jit, static_argnums=3)
def _table_lookup(keys, valid, query, method):
    payload = (
        keys ^ 12345,
        jax.lax.bitcast_convert_type(keys, jnp.float32),
        keys % 2 == 0,
        jnp.stack([keys, -keys], 1),
    )
    table = SortedTable((keys,), valid, payload, method=method)
    _, found, got = table.lookup((query,))
    return found, got, table.perm, table.keys[0]


@pytest.mark.parametrize("method", ["rank", "sort"])
@given(seed=st.integers(0, 2**31 - 1), key_range=st.integers(1, 80))
def test_sorted_table_lookup_and_payload_match_a_dict(method, seed, key_range):
    rng = np.random.default_rng(seed)
    T = 37  # fixed shapes: one compile per method
    keys = rng.integers(-key_range, key_range, T)
    valid = rng.random(T) < 0.6
    keys[valid] = rng.permutation(np.arange(-key_range, key_range + T))[: valid.sum()]  # valid keys unique
    if rng.random() < 0.3:
        keys[np.flatnonzero(valid)[:1]] = np.iinfo(np.int32).max  # the padding's key, but valid
    query = np.concatenate([keys[rng.integers(0, T, 20)], rng.integers(-key_range, key_range, 20)])
    query[-1] = np.iinfo(np.int32).max
    found, got, perm, sorted_keys = _table_lookup(
        jnp.asarray(keys, jnp.int32), jnp.asarray(valid), jnp.asarray(query, jnp.int32), method
    )
    lookup = {int(k): i for i, k in enumerate(keys) if valid[i]}
    for j, q in enumerate(query.tolist()):
        assert bool(found[j]) == (q in lookup)
        if q in lookup:
            k = keys[lookup[q]]
            assert int(got[0][j]) == k ^ 12345 and int(got[3][j, 1]) == -k
            assert np.asarray(got[1])[j].view(np.int32) == k and bool(got[2][j]) == (k % 2 == 0)
    # the sorted keys: the valid keys ascending, then the int32 max padding
    n = int(valid.sum())
    assert np.asarray(sorted_keys)[:n].tolist() == sorted(keys[valid].tolist())
    assert np.all(np.asarray(sorted_keys)[n:] == np.iinfo(np.int32).max)
    assert sorted(np.asarray(perm)[:n].tolist()) == sorted(np.flatnonzero(valid).tolist())


def test_endpoint_rows_find_each_connections_node_rows():
    spec = SPECS["rec"]
    for seed in range(3):
        d, _ = random_pair(spec, 200 + seed)
        g = genome_from_dict(spec, d)
        src, dst = (np.asarray(x) for x in jax.jit(endpoint_rows)(g))
        keys, cv = np.asarray(g.node_key), np.asarray(g.conn_valid)
        assert cv.any()
        assert np.array_equal(keys[src[cv]], np.asarray(g.conn_in)[cv])
        assert np.array_equal(keys[dst[cv]], np.asarray(g.conn_out)[cv])


def test_array_sizes_sees_a_c_by_c_comparison():
    sizes, _ = array_sizes(jax.jit(lambda x: jnp.sum(x[:, None] == x[None, :])), jnp.zeros(1000, jnp.int32))
    assert max(sizes) == 1000 * 1000


def test_no_c_by_c_arrays_at_large_sizes():
    C, P = 1000, 64
    spec = GenomeSpec(4, 3, max_nodes=60, max_conns=C)
    pop = spec.initial(jax.random.key(0), P)
    modes = [DistanceConfig(mode=m) for m in ("neat-python", "paper", "tensorneat")]
    fn = jax.jit(lambda p, r: jnp.stack([distance_matrix(spec, cfg, p, r) for cfg in modes]))
    sizes, compiled = array_sizes(fn, pop, pop[:16])
    assert len(sizes) > 20 and P * C <= max(sizes) < C * C, max(sizes)
    out = compiled(pop, pop[:16])
    assert out.shape == (3, P, 16) and bool(jnp.all(jnp.isfinite(out)))
    idx = jnp.arange(16)
    assert bool(jnp.all(out[:, idx, idx] == 0)) and bool(jnp.all(out[:, 16:] > 0))


def test_config_checks():
    with pytest.raises(ArgumentError, match="mode"):
        DistanceConfig(mode="sharpneat")
    with pytest.raises(ArgumentError, match="compatibility_weight_coefficient"):
        DistanceConfig(compatibility_weight_coefficient=-1.0)
    with pytest.raises(ArgumentError, match="compatibility_excess_coefficient"):
        DistanceConfig(compatibility_excess_coefficient="big")
    with pytest.raises(ArgumentError, match="normalize_small_genomes_threshold"):
        DistanceConfig(normalize_small_genomes_threshold=-1)
    with pytest.raises(ArgumentError, match="compatibility_include_node_genes"):
        DistanceConfig(compatibility_include_node_genes=1)
    cfg = DistanceConfig(compatibility_excess_coefficient="auto", compatibility_disjoint_coefficient=2.0)
    assert cfg.excess_coefficient == 2.0 and cfg.weight_coefficient == 0.5
    assert DistanceConfig(mode="paper").weight_coefficient == 0.4
    assert DistanceConfig(mode="tensorneat").weight_coefficient == 0.4
    hash(cfg)
    spec = SPECS["rec"]
    with pytest.raises(ArgumentError, match="config"):
        distance(spec, "neat-python", spec.empty(), spec.empty())
    with pytest.raises(ArgumentError, match="single genome"):
        distance(spec, DistanceConfig(), spec.empty((3,)), spec.empty())


@jax.jit
def _matrix_and_pairs(pop, reps):
    spec = SPECS["ff"]
    out = []
    for cfg in (CONFIGS[i] for i in (0, 3, 6, 7)):
        pairwise = jax.vmap(lambda a, cfg=cfg: jax.vmap(lambda b: distance(spec, cfg, a, b))(reps))(pop)
        out.append((distance_matrix(spec, cfg, pop, reps), pairwise))
    return out


def _scattered_population(spec, pair_seeds, seed: int, first_to_last: bool = False):
    """Genomes of :func:`random_pair` for each of ``pair_seeds``, their hidden-node and connection rows
    moved to random rows (``first_to_last``: the first genome's rows shift by one, so the last rows are
    in use), stacked into a population."""
    from tests.neat.reference_network import scatter_rows

    hidden_rows = spec.max_nodes - spec.num_io
    rng = np.random.default_rng(seed)
    genomes = []
    for s in pair_seeds:
        for d in random_pair(spec, s):
            node_perm, conn_perm = rng.permutation(hidden_rows), rng.permutation(spec.max_conns)
            if first_to_last and not genomes:
                node_perm = (np.arange(hidden_rows) + 1) % hidden_rows
                conn_perm = (np.arange(spec.max_conns) + 1) % spec.max_conns
            genomes.append(scatter_rows(spec, genome_from_dict(spec, d), node_perm, conn_perm))
    return jax.tree_util.tree_map(lambda *x: jnp.stack(x), *genomes)


def test_distance_matrix_is_bitwise_pairwise_with_rows_anywhere():
    """distance_matrix looks up only the rows some genome uses, in chunks (the last one overlapping
    its predecessor): with hidden nodes and connections moved to random rows, the last rows
    included, it still gives every pair's :func:`distance` bit for bit."""
    spec = SPECS["ff"]
    pop = _scattered_population(spec, range(300, 305), seed=7, first_to_last=True)
    assert bool(pop.conn_valid[0, -1]) and bool(pop.node_valid[0, -1])
    for matrix, pairwise in _matrix_and_pairs(pop, pop[jnp.array([4, 0, 9])]):
        np.testing.assert_array_equal(np.asarray(matrix), np.asarray(pairwise))
        assert np.all(np.asarray(matrix)[[4, 0, 9], [0, 1, 2]] == 0)


def test_one_representative_column_is_bitwise_pairwise():
    """One representative (speciation's column) takes a path without the map, and the matches are
    counted inside the chunk loop: the modes still give each pair's :func:`distance` bit for bit,
    also where the last chunk overlaps its predecessor (30 connection rows in chunks of 8) and with
    rows in use up to the last one."""
    spec = SPECS["rec"]
    pop = _scattered_population(spec, range(500, 504), seed=11)
    n = pop.node_key.shape[0]
    assert bool(jnp.any(pop.conn_valid[:, -3:]))  # the overlapped rows are in use
    configs = [CONFIGS[i] for i in (0, 3, 6, 7)]

    @jax.jit
    def columns_and_pairs(pop, rep):
        out = []
        for cfg in configs:
            pairs = jax.vmap(lambda a, cfg=cfg: distance(spec, cfg, a, rep[0]))(pop)
            out.append((distance_matrix(spec, cfg, pop, rep), pairs))
        return out

    for r in (0, 5):
        for column, pairs in columns_and_pairs(pop, pop[jnp.array([r])]):
            assert column.shape == (n, 1)
            np.testing.assert_array_equal(np.asarray(column[:, 0]), np.asarray(pairs))
            assert float(column[r, 0]) == 0.0
