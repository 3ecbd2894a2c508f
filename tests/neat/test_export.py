"""Exports of one genome's network (evotensor.neat.export): neat-python's JSON format, NumPy source,
sympy expressions. Each is checked against the library's own forward passes on random genomes
(tests/neat/reference_network.py) and, for the JSON, against a hand-checked example and a small
interpreter of the format written here from neat-python 2.1's documented network semantics."""

from __future__ import annotations

import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sympy
from hypothesis import given, settings
from tests.neat.reference_network import NEAT_PYTHON_ACT, NEAT_PYTHON_AGG, TENSORNEAT_ACT, genome_dicts

from evotensor.core.checks import ArgumentError
from evotensor.neat import (
    ChoiceAttribute,
    GenomeSpec,
    NodeGene,
    OutputMode,
    ctrnn_advance,
    forward_batch,
    genome_from_dict,
    init_state,
    step,
    transform,
)
from evotensor.neat.activations import function_set
from evotensor.neat.export import (
    FORMAT_VERSION,
    network_graph,
    to_neat_python_json,
    to_numpy_function,
    to_python_source,
    to_sympy,
)

ALL_ACTS = tuple(NEAT_PYTHON_ACT)
ALL_AGGS = tuple(NEAT_PYTHON_AGG)
TN_AGGS = ("sum", "product", "max", "min", "maxabs", "mean")


def make_spec(acts=ALL_ACTS, aggs=ALL_AGGS, feed_forward=True, ctrnn=False):
    gene = NodeGene(
        activation=ChoiceAttribute("activation", acts, "random"),
        aggregation=ChoiceAttribute("aggregation", aggs, "random"),
        ctrnn=ctrnn,
    )
    return GenomeSpec(3, 2, 14, 36, feed_forward=feed_forward, node_gene=gene)


FF = make_spec()
TN = make_spec(tuple(TENSORNEAT_ACT), TN_AGGS)
REC = make_spec(("sigmoid", "tanh", "relu", "identity"), ("sum", "max", "product"), feed_forward=False)
CT = make_spec(("sigmoid", "tanh"), ("sum", "mean"), feed_forward=False, ctrnn=True)
XS = np.random.default_rng(7).uniform(-1.0, 1.0, (12, 3)).astype(np.float32)


def random_genomes(spec, **kw):
    opts = dict(
        activations=spec.node_gene.activation.options, aggregations=spec.node_gene.aggregation.options
    )
    return genome_dicts(spec, **opts, **kw).map(lambda d: genome_from_dict(spec, d))


@functools.cache
def ff_program(spec, functions=None, outputs=None):
    return jax.jit(
        lambda g, x: forward_batch(spec, transform(spec, g), x, functions=functions, outputs=outputs)
    )


@functools.cache
def rec_program(spec):
    def run(g, xs):
        net = transform(spec, g)
        return jax.lax.scan(lambda s, x: step(spec, net, s, x), init_state(spec, net), xs)[1]

    return jax.jit(run)


@functools.cache
def ctrnn_program(spec, advance_time, time_step):
    def run(g, xs):
        net = transform(spec, g)
        body = lambda s, x: ctrnn_advance(spec, net, s, x, advance_time, time_step)  # noqa: E731
        return jax.lax.scan(body, init_state(spec, net), xs)[1]

    return jax.jit(run)


def close(got, want, rtol=2e-4, atol=2e-5):
    np.testing.assert_allclose(
        np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=rtol, atol=atol
    )


# ---------------------------------------------------------------------------------------------
# an interpreter of the JSON format (neat-python 2.1's network semantics, from its docs)


def _scalar(scheme):
    from tests.neat.reference_network import SCALAR

    return SCALAR[scheme]


def json_feedforward(data, x, scheme="neat-python"):
    """neat-python's FeedForwardNetwork.activate over the exported node order."""
    acts, aggs = _scalar(scheme)
    values = dict(zip(data["topology"]["input_keys"], map(float, x)))
    for node in data["nodes"]:
        if node["type"] == "input":
            continue
        xs = [
            values[c["from"]] * c["weight"]
            for c in data["connections"]
            if c["to"] == node["id"] and c["enabled"]
        ]
        s = aggs[node["aggregation"]["name"]](xs)
        values[node["id"]] = acts[node["activation"]["name"]](node["bias"] + node["response"] * s)
    return [values.get(k, 0.0) for k in data["topology"]["output_keys"]]


class JsonRecurrent:
    """neat-python's RecurrentNetwork (and CTRNN's exponential Euler) over the exported nodes."""

    def __init__(self, data):
        self.data = data
        self.inputs = data["topology"]["input_keys"]
        self.nodes = [n for n in data["nodes"] if n["type"] != "input"]
        self.values = {k: 0.0 for k in self.inputs + data["topology"]["output_keys"]}
        for c in data["connections"]:
            self.values.setdefault(c["from"], 0.0)
            self.values.setdefault(c["to"], 0.0)

    def _targets(self, old):
        acts, aggs = _scalar("neat-python")
        out = {}
        for node in self.nodes:
            xs = [
                old[c["from"]] * c["weight"]
                for c in self.data["connections"]
                if c["to"] == node["id"] and c["enabled"]
            ]
            s = aggs[node["aggregation"]["name"]](xs)
            out[node["id"]] = acts[node["activation"]["name"]](node["bias"] + node["response"] * s)
        return out

    def activate(self, x):
        self.values.update(zip(self.inputs, map(float, x)))
        self.values.update(self._targets(dict(self.values)))
        return [self.values[k] for k in self.data["topology"]["output_keys"]]

    def advance(self, x, dts):
        for dt in dts:
            self.values.update(zip(self.inputs, map(float, x)))
            old = dict(self.values)
            for node in self.nodes:
                z = self._targets(old)[node["id"]]
                d = np.exp(-dt / node["time_constant"])
                self.values[node["id"]] = d * old[node["id"]] + (1 - d) * z
        return [self.values[k] for k in self.data["topology"]["output_keys"]]


def validate_json(data):
    """neat-python 2.1's validate_json rules, plus the documented field types."""
    for field in ("format_version", "network_type", "metadata", "topology", "nodes", "connections"):
        assert field in data, field
    assert data["format_version"] == "1.0"
    assert data["network_type"] in ("feedforward", "recurrent", "ctrnn", "iznn")
    assert isinstance(data["metadata"]["created_timestamp"], str)
    topo = data["topology"]
    assert set(topo) >= {"num_inputs", "num_outputs", "input_keys", "output_keys"}
    assert topo["num_inputs"] == len(topo["input_keys"]) and topo["num_outputs"] == len(topo["output_keys"])
    ids = [n["id"] for n in data["nodes"]]
    assert len(set(ids)) == len(ids)
    for node in data["nodes"]:
        assert node["type"] in ("input", "hidden", "output")
        assert isinstance(node["id"], int)
        for kind in ("activation", "aggregation"):
            assert set(node[kind]) == {"name", "custom"} and isinstance(node[kind]["custom"], bool)
        assert isinstance(node["bias"], float) and isinstance(node["response"], float)
        if data["network_type"] == "ctrnn":
            assert isinstance(node["time_constant"], float)
    for conn in data["connections"]:
        assert set(conn) == {"from", "to", "weight", "enabled"}
        assert isinstance(conn["weight"], float) and isinstance(conn["enabled"], bool)
    assert json.loads(json.dumps(data)) == data  # plain JSON types only


# ---------------------------------------------------------------------------------------------
# JSON: a hand-checked example

HAND = GenomeSpec(2, 1, max_nodes=8, max_conns=10)
HAND_GENOME = {
    "nodes": {
        0: {"bias": -0.125, "response": 1.0, "activation": "sigmoid", "aggregation": "sum"},
        5: {"bias": 0.5, "response": 1.0, "activation": "sigmoid", "aggregation": "sum"},
        7: {"bias": 0.25, "response": 1.0, "activation": "sigmoid", "aggregation": "sum"},
    },
    "connections": {
        (-1, 0): {"innovation": 0, "enabled": True, "weight": 0.375},
        (-2, 0): {"innovation": 1, "enabled": False, "weight": 0.25},
        (-1, 5): {"innovation": 3, "enabled": True, "weight": 0.75},
        (-2, 5): {"innovation": 4, "enabled": True, "weight": -0.5},
        (5, 0): {"innovation": 5, "enabled": True, "weight": 1.25},
        (-1, 7): {"innovation": 6, "enabled": True, "weight": 2.0},
    },
}


def _node(key, kind, bias):
    return {
        "id": key,
        "type": kind,
        "activation": {"name": "sigmoid", "custom": False},
        "aggregation": {"name": "sum", "custom": False},
        "bias": bias,
        "response": 1.0,
    }


def _input(key):
    return {
        "id": key,
        "type": "input",
        "activation": {"name": "identity", "custom": False},
        "aggregation": {"name": "none", "custom": False},
        "bias": 0.0,
        "response": 1.0,
    }


def test_json_hand_checked_example(tmp_path):
    genome = genome_from_dict(HAND, HAND_GENOME)
    data = to_neat_python_json(HAND, genome, metadata={"fitness": 3.95, "generation": 150}, timestamp="T")
    assert data == {
        "format_version": "1.0",
        "network_type": "feedforward",
        "metadata": {
            "created_timestamp": "T",
            "exporter": data["metadata"]["exporter"],
            "function_scheme": "neat-python",
            "fitness": 3.95,
            "generation": 150,
        },
        "topology": {"num_inputs": 2, "num_outputs": 1, "input_keys": [-1, -2], "output_keys": [0]},
        # node 7 feeds no output: neat-python's network leaves it out; node 5 before node 0
        "nodes": [_node(5, "hidden", 0.5), _node(0, "output", -0.125), _input(-1), _input(-2)],
        "connections": [
            {"from": -1, "to": 5, "weight": 0.75, "enabled": True},
            {"from": -2, "to": 5, "weight": -0.5, "enabled": True},
            {"from": -1, "to": 0, "weight": 0.375, "enabled": True},
            {"from": 5, "to": 0, "weight": 1.25, "enabled": True},
        ],
    }
    assert data["metadata"]["exporter"].startswith("evotensor ")
    assert FORMAT_VERSION == "1.0"
    validate_json(data)

    full = to_neat_python_json(HAND, genome, prune=False, include_disabled=True, path=tmp_path / "net.json")
    validate_json(full)
    assert [n["id"] for n in full["nodes"]] == [5, 7, 0, -1, -2]  # layer 1: 5 and 7; then 0
    assert {"from": -2, "to": 0, "weight": 0.25, "enabled": False} in full["connections"]
    assert {"from": -1, "to": 7, "weight": 2.0, "enabled": True} in full["connections"]
    assert json.loads((tmp_path / "net.json").read_text()) == full
    # the interpreter skips the disabled connection: same outputs either way
    for x in ([0.0, 0.0], [1.0, -1.0], [0.3, 0.9]):
        assert json_feedforward(full, x) == pytest.approx(json_feedforward(data, x), abs=1e-15)
    y = ff_program(HAND)(genome, np.asarray([[1.0, -1.0]], np.float32))
    h = 1 / (1 + np.exp(-5 * (0.5 + 0.75 - (-0.5))))
    close(y[0, 0], 1 / (1 + np.exp(-5 * (-0.125 + 0.375 + 1.25 * h))), rtol=1e-6)
    close(json_feedforward(data, [1.0, -1.0])[0], y[0, 0], rtol=1e-6)


def test_json_bias_neurons_and_options():
    # an output without enabled inputs is a bias neuron (listed first, act(bias)); a hidden node
    # without inputs that feeds an output is one too
    spec = GenomeSpec(2, 2, max_nodes=8, max_conns=10)
    d = {
        "nodes": {
            0: {"bias": 0.5, "response": 1.0, "activation": "sigmoid", "aggregation": "sum"},
            1: {"bias": -1.0, "response": 1.0, "activation": "sigmoid", "aggregation": "sum"},
            4: {"bias": 0.75, "response": 1.0, "activation": "sigmoid", "aggregation": "sum"},
        },
        "connections": {(4, 0): {"innovation": 9, "enabled": True, "weight": 1.5}},
    }
    data = to_neat_python_json(spec, genome_from_dict(spec, d))
    assert [n["id"] for n in data["nodes"][:3]] == [1, 4, 0]
    x = np.zeros((1, 2), np.float32)
    close(json_feedforward(data, [0.0, 0.0]), ff_program(spec)(genome_from_dict(spec, d), x)[0], rtol=1e-6)
    with pytest.raises(ArgumentError, match="network_type"):
        to_neat_python_json(spec, genome_from_dict(spec, d), network_type="iznn")
    with pytest.raises(ArgumentError, match="ctrnn"):
        to_neat_python_json(spec, genome_from_dict(spec, d), network_type="ctrnn")
    with pytest.raises(ArgumentError, match="one genome"):
        to_neat_python_json(spec, jax.tree_util.tree_map(lambda a: a[None], genome_from_dict(spec, d)))
    with pytest.raises(ArgumentError, match="transform"):
        to_neat_python_json(spec, genome_from_dict(spec, d), outputs=OutputMode(False, jnp.tanh))


@given(random_genomes(FF))
def test_json_feedforward_semantics_equal_forward(genome):
    data = to_neat_python_json(FF, genome)
    validate_json(data)
    got = [json_feedforward(data, x) for x in XS.tolist()]
    close(got, ff_program(FF)(genome, XS), rtol=2e-3, atol=2e-4)
    # every listed node is computed after the nodes it reads
    seen = set(data["topology"]["input_keys"])
    for node in (n for n in data["nodes"] if n["type"] != "input"):
        assert all(c["from"] in seen for c in data["connections"] if c["to"] == node["id"])
        seen.add(node["id"])
    # unpruned: every node, every enabled connection; same outputs
    full = to_neat_python_json(FF, genome, prune=False)
    g = network_graph(FF, genome)
    assert len(full["nodes"]) == FF.num_inputs + len(g.nodes)
    assert len(full["connections"]) == len(g.enabled)
    close([json_feedforward(full, x) for x in XS.tolist()], got, rtol=1e-12, atol=1e-12)


@settings(max_examples=15)
@given(random_genomes(TN))
def test_json_tensorneat_outputs_without_activation(genome):
    outputs = OutputMode.tensorneat()
    data = to_neat_python_json(TN, genome, functions="tensorneat", outputs=outputs)
    for node in data["nodes"]:
        assert (
            node["activation"]["custom"] or node["type"] == "input"
        )  # tensorneat names are not neat-python's
        if node["type"] == "output":
            assert node["activation"]["name"] == "identity"
    got = [json_feedforward(data, x, scheme="tensorneat") for x in XS.tolist()]
    close(got, ff_program(TN, "tensorneat", outputs)(genome, XS), rtol=2e-3, atol=2e-4)


@given(random_genomes(REC, recurrent=True))
def test_json_recurrent_semantics_equal_step(genome):
    data = to_neat_python_json(REC, genome)
    validate_json(data)
    assert data["network_type"] == "recurrent"
    net = JsonRecurrent(data)
    got = [net.activate(x) for x in XS.tolist()]
    close(got, rec_program(REC)(genome, XS), rtol=2e-3, atol=2e-4)
    # only nodes with an enabled incoming connection are listed (the others stay 0)
    targets = {c["to"] for c in data["connections"]}
    assert {n["id"] for n in data["nodes"] if n["type"] != "input"} == targets


@settings(max_examples=10)
@given(random_genomes(CT, recurrent=True, time_constant=True))
def test_json_ctrnn_semantics_equal_advance(genome):
    data = to_neat_python_json(CT, genome)
    validate_json(data)
    assert data["network_type"] == "ctrnn"
    net = JsonRecurrent(data)
    got = [net.advance(x, [0.05, 0.05]) for x in XS.tolist()]
    close(got, ctrnn_program(CT, 0.1, 0.05)(genome, XS), rtol=2e-3, atol=2e-4)


# ---------------------------------------------------------------------------------------------
# NumPy


@given(random_genomes(FF))
def test_numpy_function_equals_forward(genome):
    fn = to_numpy_function(FF, genome)
    want = np.asarray(ff_program(FF)(genome, XS))
    got = fn(XS)
    assert got.shape == (len(XS), FF.num_outputs) and got.dtype == np.float64
    close(got, want, rtol=2e-3, atol=2e-4)
    close(fn(XS[3]), want[3], rtol=2e-3, atol=2e-4)  # one sample
    assert fn(XS[3]).shape == (FF.num_outputs,)
    f32 = to_numpy_function(FF, genome, dtype="float32")
    assert f32(XS).dtype == np.float32
    close(f32(XS), want, rtol=2e-3, atol=2e-4)


@settings(max_examples=15)
@given(random_genomes(TN))
def test_numpy_function_tensorneat_scheme(genome):
    outputs = OutputMode.tensorneat()
    fn = to_numpy_function(TN, genome, functions="tensorneat", outputs=outputs)
    close(fn(XS), ff_program(TN, "tensorneat", outputs)(genome, XS), rtol=2e-3, atol=2e-4)


def test_python_source_stands_alone():
    genome = genome_from_dict(HAND, HAND_GENOME)
    source = to_python_source(HAND, genome, name="xor_net")
    assert "jax" not in source and "evotensor" not in source.split('"""', 2)[2]
    namespace = {}
    exec(compile(source, "pasted.py", "exec"), namespace)  # noqa: S102
    x = np.asarray([[0.0, 0.0], [1.0, -1.0]], np.float32)
    close(namespace["xor_net"](x), ff_program(HAND)(genome, x), rtol=1e-6, atol=1e-7)
    assert "n7" not in source  # node 7 feeds no output
    assert to_numpy_function(HAND, genome).source == to_python_source(HAND, genome)
    with pytest.raises(ValueError, match="x must have shape"):
        namespace["xor_net"](np.zeros((2, 3)))
    with pytest.raises(ArgumentError, match="name"):
        to_python_source(HAND, genome, name="not a name")


# ---------------------------------------------------------------------------------------------
# sympy


def _lambdify(exprs, n_in, xs):
    symbols = sympy.symbols(f"x0:{n_in}")
    fn = sympy.lambdify(symbols, exprs, "numpy")
    cols = fn(*np.asarray(xs, np.float64).T)
    return np.stack([np.broadcast_to(np.asarray(c, np.float64), (len(xs),)) for c in cols], axis=-1)


@settings(max_examples=5)  # each example simplifies nothing but lambdifies a deep exact expression (~2 s)
@given(random_genomes(FF))
def test_sympy_exact_equals_forward(genome):
    exprs = to_sympy(FF, genome)
    assert len(exprs) == FF.num_outputs
    assert all(s.name.startswith("x") for e in exprs for s in e.free_symbols)
    close(_lambdify(exprs, FF.num_inputs, XS), ff_program(FF)(genome, XS), rtol=2e-3, atol=2e-4)


SMOOTH = make_spec(("sigmoid", "tanh", "sin", "softplus", "exp", "identity", "relu", "elu"), ("sum", "mean"))


@settings(max_examples=15)
@given(random_genomes(SMOOTH, weight=1.0))
def test_sympy_simplified_equals_forward_where_no_clip_is_active(genome):
    exprs = to_sympy(SMOOTH, genome, exact=False)
    assert not any(e.has(sympy.Min) for e in exprs)  # the overflow clips are gone
    close(_lambdify(exprs, 3, XS), ff_program(SMOOTH)(genome, XS), rtol=2e-3, atol=2e-4)


def test_sympy_hand_example_and_symbols():
    genome = genome_from_dict(HAND, HAND_GENOME)
    a, b = sympy.symbols("a b")
    (expr,) = to_sympy(HAND, genome, exact=False, symbols=(a, b))
    sig = lambda z: 1 / (1 + sympy.exp(-5 * z))  # noqa: E731
    want = sig(-0.125 + 0.375 * a + 1.25 * sig(0.5 + 0.75 * a - 0.5 * b))
    for va, vb in ((0.0, 0.0), (1.0, -1.0), (0.2, 0.7)):
        assert float(expr.subs({a: va, b: vb})) == pytest.approx(float(want.subs({a: va, b: vb})), rel=1e-12)
    (exact,) = to_sympy(HAND, genome)
    assert exact.has(sympy.Min) and exact.has(sympy.Max)
    with pytest.raises(ArgumentError, match="symbols"):
        to_sympy(HAND, genome, symbols=sympy.symbols("a b c"))


def test_unsupported_functions_are_named():
    genome = genome_from_dict(
        make_spec(("sigmoid", "swish")),
        {
            "nodes": {
                0: {"bias": 0.0, "response": 1.0, "activation": "swish", "aggregation": "sum"},
                1: {"bias": 0.0, "response": 1.0, "activation": "sigmoid", "aggregation": "sum"},
            },
            "connections": {(-1, 0): {"innovation": 0, "enabled": True, "weight": 1.0}},
        },
    )
    spec = make_spec(("sigmoid", "swish"))
    swish = function_set().with_activation("swish", lambda z: z * jax.nn.sigmoid(z))
    close(ff_program(spec, swish)(genome, XS)[:, 0], XS[:, 0] / (1 + np.exp(-XS[:, 0])), rtol=1e-5)
    for export in (to_numpy_function, to_python_source, to_sympy):
        with pytest.raises(ArgumentError, match="activation 'swish'"):
            export(spec, genome, functions=swish)
    # a built-in name bound to another function is refused too
    replaced = function_set().with_activation("sigmoid", jnp.tanh)
    with pytest.raises(ArgumentError, match="activation 'sigmoid'"):
        to_sympy(
            make_spec(("sigmoid",)),
            genome_from_dict(make_spec(("sigmoid",)), {"nodes": {}, "connections": {}}),
            functions=replaced,
        )
    rms = function_set().with_aggregation("rms", lambda v, s, n: jax.ops.segment_sum(v * v, s, n))
    agg_spec = make_spec(("sigmoid",), ("sum", "rms"))
    g = genome_from_dict(
        agg_spec,
        {
            "nodes": {0: {"bias": 0.0, "response": 1.0, "activation": "sigmoid", "aggregation": "rms"}},
            "connections": {},
        },
    )
    with pytest.raises(ArgumentError, match="aggregation 'rms'"):
        to_numpy_function(agg_spec, g, functions=rms)
    # an aggregation option that no computed node uses is no obstacle
    assert to_numpy_function(
        agg_spec, genome_from_dict(agg_spec, {"nodes": {}, "connections": {}}), functions=rms
    )


def test_recurrent_specs_are_refused_by_feedforward_exports():
    genome = genome_from_dict(REC, {"nodes": {}, "connections": {}})
    for export in (to_numpy_function, to_python_source, to_sympy):
        with pytest.raises(ArgumentError, match="feedforward"):
            export(REC, genome)


def test_custom_node_output_is_refused():
    class Gated(NodeGene):
        def node_output(self, attrs, activation, aggregated):
            return 2.0 * activation(attrs[..., 0] + attrs[..., 1] * aggregated)

    spec = GenomeSpec(2, 1, 8, 10, node_gene=Gated())
    genome = genome_from_dict(spec, {"nodes": {}, "connections": {}})
    for export in (to_numpy_function, to_sympy, to_neat_python_json):
        with pytest.raises(ArgumentError, match="node_output"):
            export(spec, genome)
