"""Network transform and forward passes against the slow dict-based references of neat-python's
FeedForwardNetwork, RecurrentNetwork and CTRNN (tests/neat/reference_network.py)."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.neat.reference_network import (
    CTRNN,
    NEAT_PYTHON_ACT,
    NEAT_PYTHON_AGG,
    Recurrent,
    feedforward,
    genome_dicts,
    longest_path_levels,
    scatter_rows,
)

from evotensor.core.checks import ArgumentError
from evotensor.neat import ChoiceAttribute, GenomeSpec, NodeGene, genome_from_dict, genome_to_dict
from evotensor.neat import network as nw

# well-conditioned activations for deep comparisons in float32 against float64
SMOOTH = ("sigmoid", "tanh", "relu", "identity", "gauss", "clamped", "abs", "hat", "softplus", "elu", "lelu")
AGGS = tuple(NEAT_PYTHON_AGG)


def make_spec(feed_forward=True, acts=SMOOTH, aggs=AGGS, ctrnn=False, max_nodes=14, max_conns=36):
    gene = NodeGene(
        activation=ChoiceAttribute("activation", acts, "random"),
        aggregation=ChoiceAttribute("aggregation", aggs, "random"),
        ctrnn=ctrnn,
    )
    return GenomeSpec(3, 2, max_nodes, max_conns, feed_forward=feed_forward, node_gene=gene)


FF = make_spec()
REC = make_spec(feed_forward=False)
CT = make_spec(feed_forward=False, ctrnn=True)
ALL_ACTS = make_spec(acts=tuple(NEAT_PYTHON_ACT))
XS = np.asarray([[0.5, -1.0, 0.25], [-0.3, 0.8, 1.5], [0.0, 0.0, 0.0], [2.0, 1.0, -2.0]], np.float32)


@st.composite
def scattered(draw, spec, **kw):
    """(genome with holes, its dict in row order) for a random genome dict."""
    gdict = draw(
        genome_dicts(
            spec,
            activations=spec.node_gene.activation.options,
            aggregations=spec.node_gene.aggregation.options,
            **kw,
        )
    )
    genome = genome_from_dict(spec, gdict)
    node_perm = draw(st.permutations(range(spec.max_nodes - spec.num_io)))
    conn_perm = draw(st.permutations(range(spec.max_conns)))
    genome = scatter_rows(spec, genome, node_perm, conn_perm)
    return genome, genome_to_dict(spec, genome)


@functools.cache
def ff_program(spec, method, functions=None, outputs=None):
    return jax.jit(
        lambda g, x: nw.forward_batch(
            spec, nw.transform(spec, g, method), x, functions=functions, outputs=outputs
        )
    )


@functools.cache
def rec_program(spec, method, steps):
    def run(g, xs):
        net = nw.transform(spec, g, method)
        return jax.lax.scan(lambda s, x: nw.step(spec, net, s, x), nw.init_state(spec, net), xs)[1]

    return jax.jit(run)


@functools.cache
def ctrnn_program(spec, method, advance_time, time_step):
    def run(g, xs):
        net = nw.transform(spec, g, method)
        body = lambda s, x: nw.ctrnn_advance(spec, net, s, x, advance_time, time_step)  # noqa: E731
        return jax.lax.scan(body, nw.init_state(spec, net), xs)[1]

    return jax.jit(run)


def norm(spec, d):
    """A hand-written dict with every field filled in (the references read them all)."""
    return genome_to_dict(spec, genome_from_dict(spec, d))


@functools.cache
def ff_one(spec, method, functions=None, outputs=None):
    """jit: (genome, x) -> (network, y)."""

    def run(g, x):
        net = nw.transform(spec, g, method)
        return net, nw.forward(spec, net, x, functions=functions, outputs=outputs)

    return jax.jit(run)


@functools.cache
def rec_one(spec, method, steps=1):
    """jit: (genome, x) -> (state, y) after ``steps`` recurrent steps from a zero state."""

    def run(g, x):
        net = nw.transform(spec, g, method)
        s, y = nw.init_state(spec, net), None
        for _ in range(steps):
            s, y = nw.step(spec, net, s, x)
        return s, y

    return jax.jit(run)


@functools.cache
def transform_program(spec, method):
    return jax.jit(lambda g: nw.transform(spec, g, method))


def close(got, want, rtol=2e-4, atol=2e-5):
    np.testing.assert_allclose(
        np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=rtol, atol=atol
    )


@pytest.mark.parametrize("method", ["sparse", "dense"])
@given(data=scattered(FF))
def test_feedforward_matches_neat_python_reference(method, data):
    genome, gdict = data
    got = ff_program(FF, method)(genome, XS)
    want = [feedforward(FF, gdict, x) for x in XS.tolist()]
    close(got, want)


@given(data=scattered(ALL_ACTS, weight=0.8))
def test_dense_equals_sparse_every_activation(data):
    genome, _ = data
    xs = XS * 0.5
    sparse = np.asarray(ff_program(ALL_ACTS, "sparse")(genome, xs))
    dense = np.asarray(ff_program(ALL_ACTS, "dense")(genome, xs))
    np.testing.assert_allclose(dense, sparse, rtol=1e-4, atol=1e-5, equal_nan=True)


@given(data=scattered(FF))
def test_levels_are_longest_paths(data):
    genome, gdict = data
    net = transform_program(FF, "sparse")(genome)
    levels = longest_path_levels(FF, gdict)
    keys = np.asarray(genome.node_key)
    got = np.asarray(net.level)
    for row, key in enumerate(keys.tolist()):
        assert got[row] == (levels[key] if key in levels else -1)
    assert int(net.max_depth) == max(levels.values())
    enabled = [k for k, c in gdict["connections"].items() if c["enabled"]]
    assert int(net.num_edges) == len(enabled)
    indeg = {k: sum(1 for _, b in enabled if b == k) for k in levels}
    assert [indeg.get(k, 0) for k in keys.tolist()] == np.asarray(net.in_degree).tolist()
    dst = np.asarray(net.edge_dst)
    assert np.all(np.diff(dst) >= 0)  # sorted by destination; unused slots (N) last


@jax.jit
def _population_program(pop, xs):
    nets = nw.transform(FF, pop)  # leading [pop] axis mapped inside
    single = jax.vmap(lambda n: nw.forward(FF, n, xs[0]))(nets)
    batch = jax.vmap(lambda n: nw.forward_batch(FF, n, xs))(nets)
    return nets, single, batch


@settings(max_examples=10)
@given(dicts=st.lists(genome_dicts(FF, activations=SMOOTH, aggregations=AGGS), min_size=5, max_size=5))
def test_population_of_topologies_jit_vmap(dicts):
    genomes = [genome_from_dict(FF, d) for d in dicts]
    pop = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *genomes)
    nets, single, batch = _population_program(pop, XS)
    assert nets.level.shape == (5, FF.max_nodes) and nets.max_depth.shape == (5,)
    if nw.resolve_method(FF) == "dense":
        assert nets.dense_weight.shape == (5, FF.max_nodes, FF.max_nodes)
    else:
        assert nets.dense_weight is None
    for i, d in enumerate(dicts):
        want = [feedforward(FF, norm(FF, d), x) for x in XS.tolist()]
        close(batch[i], want)
        close(single[i], want[0])


@pytest.mark.parametrize("method", ["sparse", "dense"])
@given(data=scattered(REC, recurrent=True))
def test_recurrent_matches_neat_python_reference(method, data):
    genome, gdict = data
    got = rec_program(REC, method, len(XS))(genome, XS)
    ref = Recurrent(REC, gdict)
    want = [ref.activate(x) for x in XS.tolist()]
    close(got, want)


@pytest.mark.parametrize("method", ["sparse", "dense"])
@given(data=scattered(CT, recurrent=True, time_constant=True))
def test_ctrnn_matches_neat_python_reference(method, data):
    genome, gdict = data
    got = ctrnn_program(CT, method, 0.05, 0.02)(genome, XS)
    ref = CTRNN(CT, gdict)
    want = [ref.advance(x, 0.05, 0.02) for x in XS.tolist()]
    close(got, want)


def test_ctrnn_time_steps_follow_neat_python_clock():
    assert nw.ctrnn_time_steps(0.05, 0.02) == pytest.approx((0.02, 0.02, 0.01))
    assert nw.ctrnn_time_steps(0.02, 0.05) == (0.02,)
    steps = nw.ctrnn_time_steps(0.1, 0.01)
    assert sum(steps) == pytest.approx(0.1) and all(s > 0 for s in steps)
    with pytest.raises(ArgumentError, match="time_step"):
        nw.ctrnn_time_steps(1.0, 0.0)


def test_ctrnn_single_node_decay_closed_form():
    """One output fed by one input, identity activation: y' = (-y + b + w x) / tau integrates
    exactly with exponential Euler for a constant input."""
    spec = make_spec(feed_forward=False, acts=("identity",), aggs=("sum",), ctrnn=True)
    d = {
        "nodes": {
            0: {"bias": 0.2, "response": 1.0, "time_constant": 0.5},
            1: {"bias": 0.0, "time_constant": 1.0},
        },
        "connections": {(-1, 0): {"innovation": 0, "weight": 2.0}},
    }

    @jax.jit
    def run(g, x):
        net = nw.transform(spec, g)
        state, y1 = nw.ctrnn_advance(spec, net, nw.init_state(spec, net), x, 0.3, 0.1)
        return y1, nw.ctrnn_step(spec, net, state, x, 0.2)[1]

    y1, y2 = run(genome_from_dict(spec, d), jnp.asarray([1.5, 0.0, 0.0]))
    target = 0.2 + 2.0 * 1.5
    assert float(y1[0]) == pytest.approx(target * (1 - math.exp(-0.3 / 0.5)), rel=1e-5)
    assert float(y1[1]) == 0.0  # no inputs: never evaluated, as neat-python
    assert float(y2[0]) == pytest.approx(target * (1 - math.exp(-0.5 / 0.5)), rel=1e-5)


@pytest.mark.parametrize("method", ["sparse", "dense"])
def test_degenerate_genomes(method):
    """No connections: feedforward outputs are act(bias + response * agg(empty)) (empty product is
    1); recurrent outputs stay 0 (neat-python never evaluates a node without inputs)."""
    spec = make_spec(acts=("sigmoid", "identity"), aggs=("sum", "product"))
    d = {
        "nodes": {
            0: {"bias": 0.3, "response": 2.0, "activation": "identity", "aggregation": "product"},
            1: {"bias": -0.4, "response": 1.0, "activation": "sigmoid", "aggregation": "sum"},
            7: {"bias": 1.0, "activation": "identity", "aggregation": "sum"},  # isolated hidden node
        },
        "connections": {(-1, 1): {"innovation": 0, "weight": 3.0, "enabled": False}},
    }
    g = genome_from_dict(spec, d)
    _, y = ff_one(spec, method)(g, jnp.asarray([1.0, 2.0, 3.0]))
    close(y, [0.3 + 2.0 * 1.0, NEAT_PYTHON_ACT["sigmoid"](-0.4)], rtol=1e-6)
    close(y, feedforward(spec, genome_to_dict(spec, g), [1.0, 2.0, 3.0]), rtol=1e-6)
    rspec = make_spec(feed_forward=False, acts=("sigmoid", "identity"), aggs=("sum", "product"))
    state, y = rec_one(rspec, method)(genome_from_dict(rspec, d), jnp.ones(3))
    assert np.asarray(y).tolist() == [0.0, 0.0]
    np.testing.assert_array_equal(np.asarray(state), [1.0, 1.0, 1.0] + [0.0] * (rspec.max_nodes - 3))
    # an all-padding genome (no outputs' attributes set) still runs
    empty, y = ff_one(spec, method)(spec.empty(), jnp.zeros(3))
    assert int(empty.max_depth) == 0 and int(empty.num_edges) == 0 and y.shape == (2,)


def test_chain_depth_and_loop_bound():
    """A chain input -> h1 -> ... -> h9 -> output: depth 10, identity nodes pass the sum along."""
    spec = make_spec(acts=("identity",), aggs=("sum",))
    hidden = list(range(2, 11))
    nodes = {k: {"bias": 0.0, "activation": "identity"} for k in [0, 1, *hidden]}
    chain = [-1, *hidden, 0]
    conns = {(a, b): {"innovation": i, "weight": 1.5} for i, (a, b) in enumerate(zip(chain, chain[1:]))}
    g = genome_from_dict(spec, {"nodes": nodes, "connections": conns})
    for method in ("sparse", "dense"):
        net, y = ff_one(spec, method)(g, jnp.asarray([1.0, 0.0, 0.0]))
        assert int(net.max_depth) == 10
        close(y, [1.5**10, 0.0], rtol=1e-6)


def test_tensorneat_output_mode():
    spec = make_spec(
        acts=("sigmoid", "tanh", "relu", "identity"), aggs=("sum", "product", "max", "min", "mean")
    )
    d = {
        "nodes": {
            0: {"bias": 0.1, "activation": "sigmoid", "aggregation": "sum"},
            1: {"bias": -0.2, "activation": "relu", "aggregation": "product"},
            5: {"bias": 0.3, "activation": "tanh", "aggregation": "max"},
        },
        "connections": {
            (-1, 5): {"innovation": 0, "weight": 0.7},
            (-2, 5): {"innovation": 1, "weight": -1.2},
            (5, 0): {"innovation": 2, "weight": 1.1},
            (0, 1): {"innovation": 3, "weight": 0.9},  # an output feeding an output
            (-3, 1): {"innovation": 4, "weight": -0.6},
        },
    }
    g = genome_from_dict(spec, d)
    x = [0.4, -0.9, 1.3]
    mode = nw.OutputMode.tensorneat(jnp.tanh)
    for method in ("sparse", "dense"):
        _, got = ff_one(spec, method, "tensorneat", mode)(g, jnp.asarray(x))
        want = np.tanh(feedforward(spec, norm(spec, d), x, scheme="tensorneat", activate_outputs=False))
        close(got, want, rtol=1e-5)
        close(ff_one(spec, method)(g, jnp.asarray(x))[1], feedforward(spec, norm(spec, d), x), rtol=1e-5)


@pytest.mark.parametrize("method", ["sparse", "dense"])
def test_nonfinite_dangling_node_leaves_outputs_alone(method):
    """A node that feeds no output may overflow or become NaN; the outputs do not see it."""
    spec = make_spec(acts=("sigmoid", "identity"), aggs=("sum",))
    base = {
        "nodes": {0: {"bias": 0.1}, 1: {"bias": 0.2}},
        "connections": {
            (-1, 0): {"innovation": 0, "weight": 0.5},
            (-2, 1): {"innovation": 1, "weight": -0.5},
        },
    }
    big = {
        6: {"bias": 3e38, "activation": "identity"},
        7: {"bias": -3e38, "activation": "identity"},
        8: {"bias": 0.0, "activation": "identity"},  # +inf + -inf = NaN
    }
    extra = {
        (6, 8): {"innovation": 5, "weight": 10.0},
        (7, 8): {"innovation": 6, "weight": 10.0},
        (-3, 6): {"innovation": 7, "weight": 1.0},
        (-3, 7): {"innovation": 8, "weight": 1.0},
    }
    wild = {"nodes": {**base["nodes"], **big}, "connections": {**base["connections"], **extra}}
    x = jnp.asarray([0.3, -0.7, 1.0])
    plain = ff_one(spec, method)(genome_from_dict(spec, base), x)[1]
    net, got = ff_one(spec, method)(genome_from_dict(spec, wild), x)
    assert int(net.max_depth) == 2
    np.testing.assert_array_equal(np.asarray(got), np.asarray(plain))
    # the same holds for the recurrent step (node 8 is NaN after two steps)
    rspec = make_spec(feed_forward=False, acts=("sigmoid", "identity"), aggs=("sum",))
    state, y = rec_one(rspec, method, 3)(genome_from_dict(rspec, wild), x)
    assert np.isnan(np.asarray(state)).any() and np.all(np.isfinite(np.asarray(y)))


ANY_EDGE_FROM = jax.jit(nw._any_edge_from)


@given(
    n=st.sampled_from([5, 32, 33, 70]),  # one compile per size: a word, a full word, two, three
    seed=st.integers(0, 2**31 - 1),
    density=st.sampled_from([0.0, 0.05, 0.3, 1.0]),
)
@settings(max_examples=12, deadline=None)
def test_any_edge_from_is_the_adjacency_product(n, seed, density):
    """The dense path's NaN test (bit words) says what ``adj @ mask > 0`` says, past 32 nodes too."""
    rng = np.random.default_rng(seed)
    adj = rng.random((n, n)) < density
    mask = rng.random(n) < 0.3
    want = (adj.astype(np.int64) @ mask.astype(np.int64)) > 0
    got = np.asarray(ANY_EDGE_FROM(jnp.asarray(adj), jnp.asarray(mask)))
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("method", ["sparse", "dense"])
def test_nan_crosses_a_zero_weight_edge(method):
    """neat-python computes ``0 * NaN = NaN``: a NaN node reaches an output through a 0-weight edge
    (and only through an edge), on both paths."""
    spec = make_spec(acts=("sigmoid", "identity"), aggs=("sum",), max_nodes=14)
    d = {
        "nodes": {
            0: {"bias": 0.1},
            1: {"bias": 0.2},
            6: {"bias": 3e38, "activation": "identity"},
            7: {"bias": -3e38, "activation": "identity"},
            8: {"bias": 0.0, "activation": "identity"},  # 10 * 3e38 + 10 * -3e38 = inf - inf = NaN
        },
        "connections": {
            (-1, 0): {"innovation": 0, "weight": 0.5},
            (-2, 1): {"innovation": 1, "weight": -0.5},
            (-3, 6): {"innovation": 2, "weight": 1.0},
            (-3, 7): {"innovation": 3, "weight": 1.0},
            (6, 8): {"innovation": 4, "weight": 10.0},
            (7, 8): {"innovation": 5, "weight": 10.0},
            (8, 0): {"innovation": 6, "weight": 0.0},
        },
    }
    _, y = ff_one(spec, method)(genome_from_dict(spec, d), jnp.asarray([0.3, -0.7, 1.0]))
    y = np.asarray(y)
    assert np.isnan(y[0]) and np.isfinite(y[1])


def test_custom_node_gene_output():
    """node_output of a user gene (a gate attribute multiplying the activation) is what runs."""
    from evotensor.neat import FloatAttribute

    class GatedNode(NodeGene):
        def __init__(self, **kw):
            super().__init__(extra=(FloatAttribute("gate", init_mean=1.0, init_std=0.0),), **kw)

        def node_output(self, attrs, activation, aggregated):
            return attrs[..., 2] * activation(attrs[..., 0] + attrs[..., 1] * aggregated)

    spec = GenomeSpec(1, 1, 4, 4, node_gene=GatedNode())
    d = {"nodes": {0: {"bias": 0.0, "gate": 3.0}}, "connections": {(-1, 0): {"innovation": 0, "weight": 1.0}}}
    run = jax.jit(lambda g, x: nw.forward(spec, nw.transform(spec, g), x))
    y = run(genome_from_dict(spec, d), jnp.asarray([0.2]))
    assert float(y[0]) == pytest.approx(3.0 * NEAT_PYTHON_ACT["sigmoid"](0.2), rel=1e-6)


def test_policies():
    ffp = nw.neat_policy(FF)
    assert type(ffp) is nw.FeedForwardPolicy and not hasattr(ffp, "init_state")
    rp = nw.neat_policy(REC)
    cp = nw.neat_policy(CT)
    assert type(rp) is nw.RecurrentPolicy and type(cp) is nw.CTRNNPolicy
    from evotensor.problems.control import StatefulPolicy, is_stateful

    assert is_stateful(rp) and is_stateful(cp) and not is_stateful(ffp)
    assert isinstance(rp, StatefulPolicy)
    d = {
        "nodes": {0: {"bias": 0.1}, 1: {"bias": 0.0}, 5: {"bias": 0.2}},
        "connections": {
            (-1, 5): {"innovation": 0, "weight": 1.0},
            (5, 5): {"innovation": 1, "weight": 0.5},
            (5, 0): {"innovation": 2, "weight": -1.0},
        },
    }

    @jax.jit
    def run(g, xs):
        net = rp.decode(g)
        return jax.lax.scan(lambda s, x: rp.step(net, s, x), rp.init_state(net), xs)[1]

    ys = run(genome_from_dict(REC, d), XS)
    ref = Recurrent(REC, norm(REC, d))
    close(ys, [ref.activate(x) for x in XS.tolist()], rtol=1e-5)
    empty = genome_from_dict(FF, {"nodes": {0: {}, 1: {}}, "connections": {}})
    y = jax.jit(lambda g, obs: ffp(ffp.decode(g), obs))(empty, jnp.zeros((3, 1)))
    assert np.asarray(y).shape == (2,)  # obs is flattened
    with pytest.raises(ArgumentError, match="feed_forward"):
        nw.neat_policy(REC, "feedforward")
    with pytest.raises(ArgumentError, match="time_constant"):
        nw.neat_policy(FF, "ctrnn")
    with pytest.raises(ArgumentError, match="kind"):
        nw.neat_policy(FF, "lstm")


def test_recurrent_policy_in_a_gymnax_rollout():
    """A recurrent NEAT policy's state is carried through a compiled CartPole rollout: the compiled
    return equals a host loop that steps the reference RecurrentNetwork."""
    from evotensor.problems.control import GymnaxProblem, _split_step_output

    problem = GymnaxProblem("CartPole-v1", num_episodes=1, max_steps=40)
    spec = GenomeSpec(4, 2, 8, 16, feed_forward=False)
    d = {
        "nodes": {0: {"bias": 0.0}, 1: {"bias": 0.1}, 4: {"bias": -0.3}},
        "connections": {
            (-3, 4): {"innovation": 0, "weight": 2.0},
            (4, 4): {"innovation": 1, "weight": 1.5},
            (4, 0): {"innovation": 2, "weight": 3.0},
            (-4, 1): {"innovation": 3, "weight": 1.0},
        },
    }
    policy = nw.neat_policy(spec)
    nets = policy.decode(jax.tree_util.tree_map(lambda a: a[None], genome_from_dict(spec, d)))
    key = jax.random.key(1)
    ev = jax.jit(lambda k, n: problem.evaluate(k, n, policy))(key, nets)
    ref = Recurrent(spec, norm(spec, d))
    k_reset, k_steps = jax.random.split(jax.random.split(key, 1)[0])
    reset, env_step = jax.jit(problem.env.reset), jax.jit(problem.env.step)
    obs, state = reset(k_reset, problem.env_params)
    total = 0.0
    for k in jax.random.split(k_steps, problem.max_steps):
        y = ref.activate(np.asarray(obs, np.float64).tolist())
        obs, state, reward, done = _split_step_output(
            env_step(k, state, int(np.argmax(y)), problem.env_params)
        )
        total += float(reward)
        if bool(done):
            break
    assert float(ev.fitness[0]) == total


def test_bad_arguments():
    g = genome_from_dict(FF, {"nodes": {0: {}, 1: {}}, "connections": {}})
    with pytest.raises(ArgumentError, match="method"):
        nw.transform(FF, g, "matrix")
    with pytest.raises(ArgumentError, match="spec"):
        nw.transform("spec", g)
    with pytest.raises(ArgumentError, match="node rows"):
        nw.transform(make_spec(max_nodes=20), g)
    net = transform_program(FF, "auto")(g)
    with pytest.raises(ArgumentError, match="shape"):
        nw.forward(FF, net, jnp.zeros(4))
    with pytest.raises(ArgumentError, match="vmap"):
        nw.forward(FF, jax.tree_util.tree_map(lambda a: a[None], net), jnp.zeros(3))
    bad = make_spec(acts=("sigmoid", "swishy"))
    with pytest.raises(ArgumentError, match="swishy"):
        nw.forward(bad, net, jnp.zeros(3))
    with pytest.raises(ArgumentError, match="feed_forward"):
        nw.forward(REC, net, jnp.zeros(3))
    with pytest.raises(ArgumentError, match="time_constant"):
        nw.ctrnn_step(REC, net, nw.init_state(REC, net), jnp.zeros(3), 0.1)
    with pytest.raises(ArgumentError, match="OutputMode"):
        nw.OutputMode(activate=1)
    with pytest.raises(ArgumentError, match="num_steps"):
        nw.forward_recurrent(REC, net, jnp.zeros(3), 0)
    with pytest.raises(ArgumentError, match="method"):
        nw.resolve_method(FF, "fast")


def test_auto_method_per_platform():
    """``auto``: dense up to DENSE_MAX_NODES rows on an accelerator; on a CPU only where the dense
    form is not much bigger than the edge list (max_nodes^2 <= 8 max_conns)."""
    small, wide = make_spec(max_nodes=32, max_conns=64), make_spec(max_nodes=8, max_conns=100)
    assert nw.resolve_method(small, platform="gpu") == "dense"
    assert nw.resolve_method(small, platform="cpu") == "sparse"
    assert nw.resolve_method(wide, platform="cpu") == "dense"
    assert nw.resolve_method(make_spec(max_nodes=40), platform="gpu") == "sparse"
    assert nw.resolve_method(small, "dense", platform="cpu") == "dense"


def test_forward_recurrent_resets_each_call():
    d = {
        "nodes": {0: {"bias": 0.0}, 1: {"bias": 0.0}, 5: {"bias": 0.0}},
        "connections": {(-1, 5): {"innovation": 0, "weight": 1.0}, (5, 0): {"innovation": 1, "weight": 1.0}},
    }

    @jax.jit
    def run(g, x):
        net = nw.transform(REC, g)
        return [nw.forward_recurrent(REC, net, x, k) for k in (1, 2, 2)]

    y1, y2, y2_again = run(genome_from_dict(REC, d), jnp.asarray([1.0, 0.0, 0.0]))
    ref = Recurrent(REC, norm(REC, d))
    close(y1, ref.activate([1.0, 0.0, 0.0]), rtol=1e-6)
    close(y2, ref.activate([1.0, 0.0, 0.0]), rtol=1e-6)
    close(y2_again, y2, rtol=0)  # a fresh zero state every call


@jax.jit
def _transform_population(pop):
    return nw.transform(FF, pop, "sparse")


@settings(max_examples=10)
@given(data=st.lists(scattered(FF), min_size=4, max_size=4))
def test_population_transform_equals_each_genomes_own(data):
    """A population's networks (endpoint lookups and level rounds over the rows some genome uses,
    in chunks) are each genome's own network, bit for bit, with rows scattered anywhere."""
    pop = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *[g for g, _ in data])
    nets = _transform_population(pop)
    for i, (genome, _) in enumerate(data):
        one = transform_program(FF, "sparse")(genome)
        for got, want in zip(jax.tree_util.tree_leaves(nets[i]), jax.tree_util.tree_leaves(one)):
            np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


# ---------------------------------------------------------------------------------------------
# compact rows: a batch of small networks as dense rows over a few columns (FeedForwardPolicy)

SUMS = make_spec(aggs=("sum", "mean"), max_nodes=16, max_conns=40)  # up to 13 non-input nodes


@functools.cache
def _batch_program(spec, outputs=None, with_batched=False):
    """jit: (population [K], xs [K, B, I]) -> (compact sizes, path index, every path's y,
    vmap(vmap(forward)) y[, batched y]), each y ``[K, B, O]`` (the paths take and give ``[B, K,
    ...]``)."""
    pol = nw.FeedForwardPolicy(spec, outputs=outputs)

    def run(pop, xs):
        nets = pol.decode(pop)
        index, paths = pol.batch_paths(nets)
        per_net = jax.vmap(lambda n, x: jax.vmap(lambda o: pol(n, o))(x))(nets, xs)
        xt = jnp.swapaxes(xs, 0, 1)
        out = (nets.compact.size, index, [jnp.swapaxes(p(nets, xt), 0, 1) for p in paths], per_net)
        return (*out, jnp.swapaxes(pol.batched(nets, xt), 0, 1)) if with_batched else out

    return jax.jit(run)


def _stack(genomes):
    return jax.tree_util.tree_map(lambda *a: jnp.stack(a), *genomes)


def _batch_inputs(k):
    return np.stack([XS * (0.5 + 0.25 * i) for i in range(k)])  # [K, 4, 3]: each network its own


def _check_paths(dicts, pop, xs, size, index, ys):
    """Every path gives the reference outputs for each network that fits its width (the last, the
    per-network forward pass, for all), and ``index`` is each network's first fitting path."""
    size = np.asarray(size)
    widths = (*nw.COMPACT_WIDTHS, SUMS.max_nodes)
    assert np.asarray(index).tolist() == [sum(int(s > w) for w in nw.COMPACT_WIDTHS) for s in size]
    for i, gdict in enumerate(dicts):
        assert size[i] == len(gdict["nodes"])  # every non-input node has a slot
        want = [feedforward(SUMS, gdict, x) for x in xs[i].tolist()]
        for width, got in zip(widths, ys):
            if size[i] <= width:
                close(got[i], want)


@settings(max_examples=10)
@given(data=st.lists(scattered(SUMS, max_hidden=11), min_size=2, max_size=2))
def test_compact_paths_match_neat_python_reference(data):
    """Random genomes (up to 11 hidden nodes, rows scattered) against the neat-python reference on
    every path they fit."""
    pop = _stack([g for g, _ in data])
    xs = _batch_inputs(len(data))
    size, index, ys, _ = _batch_program(SUMS)(pop, xs)
    _check_paths([d for _, d in data], pop, xs, size, index, ys)


def _chain(hidden, weight=0.7):
    """A genome dict for SUMS: input 0 -> hidden 2 -> ... -> output 0 (``hidden`` nodes), input 1 ->
    output 1, input 2 -> every hidden node (fan-in for the later slots)."""
    keys = list(range(2, 2 + hidden))
    nodes = {k: {"bias": 0.1 * k, "aggregation": "mean" if k % 3 == 0 else "sum"} for k in [0, 1, *keys]}
    path = [-1, *keys, 0]
    conns = {(a, b): {"weight": weight * (-1) ** i} for i, (a, b) in enumerate(zip(path, path[1:]))}
    conns[(-2, 1)] = {"weight": -1.1}
    for k in keys:
        conns[(-3, k)] = {"weight": 0.3}
    for i, c in enumerate(conns.values()):
        c["innovation"] = i
    return norm(SUMS, {"nodes": nodes, "connections": conns})


@pytest.mark.parametrize("hiddens", [(0, 0), (0, 1), (2, 3), (4, 1), (1, 7), (8, 2), (3, 11)])
def test_compact_tiers_match_reference(hiddens):
    """Pairs whose larger network fits each width, or none (13 non-input nodes: the per-network
    forward pass): every network on every path whose width it fits gives the reference outputs."""
    dicts = [_chain(h) for h in hiddens]
    pop = _stack([genome_from_dict(SUMS, d) for d in dicts])
    xs = _batch_inputs(len(dicts))
    size, index, ys, _ = _batch_program(SUMS)(pop, xs)
    assert np.asarray(size).tolist() == [2 + h for h in hiddens]
    _check_paths(dicts, pop, xs, size, index, ys)


def test_compact_nonfinite_inputs():
    """NaN, inf and huge inputs, and a zero-weight edge (a NaN input still reaches the output
    through it, as in forward): each network's first path equals the per-network forward pass."""
    pop = _stack([genome_from_dict(SUMS, _chain(1)), genome_from_dict(SUMS, _chain(3, weight=0.0))])
    row = [[np.nan, 1.0, 0.5], [np.inf, -np.inf, 1.0], [0.5, np.nan, 2.0], [1e38, 1e38, -1e38]]
    xs = np.asarray([row, row[::-1]], np.float32)
    _, index, ys, per_net = _batch_program(SUMS)(pop, xs)
    assert np.asarray(index).tolist() == [sum(int(s > w) for w in nw.COMPACT_WIDTHS) for s in (3, 5)]
    for i in range(2):
        got = np.asarray(ys[int(index[i])][i])
        np.testing.assert_allclose(got, np.asarray(per_net[i]), rtol=1e-5, atol=1e-6, equal_nan=True)
    assert np.isnan(np.asarray(per_net)).any()


@pytest.mark.slow
def test_compact_batched_and_tensorneat_outputs():
    """batched (the switch on the batch's largest index) and TensorNEAT's output mode (outputs
    unactivated, then a transform) equal the per-network forward pass."""
    pop = _stack([genome_from_dict(SUMS, _chain(h)) for h in (1, 3)])
    xs = _batch_inputs(2)
    for outputs in (None, nw.OutputMode.tensorneat(jnp.tanh)):
        _, _, _, per_net, y = _batch_program(SUMS, outputs, True)(pop, xs)
        np.testing.assert_allclose(np.asarray(y), np.asarray(per_net), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_compact_rows_and_batched_arguments():
    pol = nw.FeedForwardPolicy(SUMS)
    pop = _stack([genome_from_dict(SUMS, _chain(1))] * 2)
    nets = jax.jit(pol.decode)(pop)
    width = max(nw.COMPACT_WIDTHS)
    assert nets.compact is not None and nets.compact.weight.shape == (2, width, 3 + width)
    assert nw.compact_supported(SUMS) and not nw.compact_supported(FF)  # FF has max / product
    empty = genome_from_dict(FF, norm(FF, {"nodes": {0: {}, 1: {}}, "connections": {}}))
    assert nw.FeedForwardPolicy(FF).decode(_stack([empty] * 2)).compact is None
    with pytest.raises(ArgumentError, match="obs"):
        pol.batched(nets, jnp.zeros((3,)))
    with pytest.raises(ArgumentError, match="obs"):
        pol.batched(nets, jnp.zeros((2, 1, 4)))
    with pytest.raises(ArgumentError, match="feed_forward"):
        nw.compact_rows(REC, nets)
    with pytest.raises(ArgumentError, match="network"):
        nw.compact_rows(SUMS, pop)
    with pytest.raises(ArgumentError, match="networks"):
        pol.batch_paths(pop)
    with pytest.raises(ArgumentError, match="spec"):
        nw.compact_supported("not a spec")
