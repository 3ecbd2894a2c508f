"""Slow, obviously-correct references for the NEAT network tests (a test helper, not a test module).

* Scalar activation and aggregation formulas of neat-python 2.1 and TensorNEAT, in plain Python.
* neat-python's three networks, written out from its documented behaviour on the genome *dicts*
  of :func:`evotensor.neat.genome_to_dict`: ``FeedForwardNetwork`` (only the nodes required for
  the outputs, evaluated in dependency order; required nodes without enabled inputs are bias
  neurons), ``RecurrentNetwork`` (two value buffers, one synchronous pass per ``activate``, only
  nodes with enabled inputs are evaluated) and ``CTRNN`` (exponential Euler, a clock that persists
  between ``advance`` calls). Float64 throughout.
* hypothesis strategies for random valid genome dicts: feedforward (a random DAG over inputs,
  outputs and hidden nodes, outputs may feed hidden nodes) and recurrent (any edges, cycles and
  self-loops), with disabled edges; and :func:`scatter_rows`, which moves the hidden node rows and
  the connection rows to random slots so that genomes have holes.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import strategies as st

from evotensor.neat import EMPTY, Genome

# ---------------------------------------------------------------------------------------------
# scalar functions


def _np_inv(z):
    try:
        return 1.0 / z
    except ZeroDivisionError:
        return 0.0


NEAT_PYTHON_ACT = {
    "sigmoid": lambda z: 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, 5.0 * z)))),
    "tanh": lambda z: math.tanh(max(-60.0, min(60.0, 2.5 * z))),
    "sin": lambda z: math.sin(max(-60.0, min(60.0, 5.0 * z))),
    "gauss": lambda z: math.exp(-5.0 * max(-3.4, min(3.4, z)) ** 2),
    "relu": lambda z: z if z > 0.0 else 0.0,
    "elu": lambda z: z if z > 0.0 else math.exp(z) - 1.0,
    "lelu": lambda z: z if z > 0.0 else 0.005 * z,
    "selu": lambda z: (
        1.0507009873554804934193349852946 * z
        if z > 0.0
        else 1.0507009873554804934193349852946 * 1.6732632423543772848170429916717 * (math.exp(z) - 1.0)
    ),
    "softplus": lambda z: 0.2 * math.log(1.0 + math.exp(max(-60.0, min(60.0, 5.0 * z)))),
    "identity": lambda z: z,
    "clamped": lambda z: max(-1.0, min(1.0, z)),
    "inv": _np_inv,
    "log": lambda z: math.log(max(1e-7, z)),
    "exp": lambda z: math.exp(max(-60.0, min(60.0, z))),
    "abs": abs,
    "hat": lambda z: max(0.0, 1.0 - abs(z)),
    "square": lambda z: z**2,
    "cube": lambda z: z**3,
}


def _sigmoid(z):
    return 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0


TENSORNEAT_ACT = {
    "scaled_sigmoid": lambda z: 3.0 * _sigmoid(z),
    "sigmoid": _sigmoid,
    "scaled_tanh": lambda z: 3.0 * math.tanh(z),
    "tanh": math.tanh,
    "sin": math.sin,
    "relu": lambda z: max(z, 0.0),
    "lelu": lambda z: z if z > 0 else 0.005 * z,
    "identity": lambda z: z,
    "inv": lambda z: 1.0 / (max(z, 1e-7) if z > 0 else min(z, -1e-7)),
    "log": lambda z: math.log(max(z, 1e-7)),
    "exp": math.exp,
    "abs": abs,
}


def _median2(xs):
    if not xs:
        return 0.0
    s = sorted(xs)
    n = len(s)
    if n <= 2:
        return sum(s) / n
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2.0


def _product(xs, empty):
    if not xs:
        return empty
    out = 1.0
    for x in xs:
        out *= x
    return out


NEAT_PYTHON_AGG = {
    "product": lambda xs: _product(xs, 1.0),
    "sum": lambda xs: float(sum(xs)),
    "max": lambda xs: max(xs) if xs else 0.0,
    "min": lambda xs: min(xs) if xs else 0.0,
    "maxabs": lambda xs: max(xs, key=abs) if xs else 0.0,
    "median": _median2,
    "mean": lambda xs: sum(xs) / len(xs) if xs else 0.0,
}

TENSORNEAT_AGG = {
    "sum": lambda xs: float(sum(xs)),
    "product": lambda xs: _product(xs, 0.0),
    "max": NEAT_PYTHON_AGG["max"],
    "min": NEAT_PYTHON_AGG["min"],
    "maxabs": NEAT_PYTHON_AGG["maxabs"],
    "mean": NEAT_PYTHON_AGG["mean"],
}

SCALAR = {"neat-python": (NEAT_PYTHON_ACT, NEAT_PYTHON_AGG), "tensorneat": (TENSORNEAT_ACT, TENSORNEAT_AGG)}


# ---------------------------------------------------------------------------------------------
# neat-python's networks on genome dicts


def _ids(spec):
    return [-1 - i for i in range(spec.num_inputs)], list(range(spec.num_outputs))


def required_nodes(inputs, outputs, conns):
    """Non-input nodes with a path to an output (outputs included)."""
    required = set(outputs)
    frontier = set(outputs)
    while frontier:
        preds = {a for (a, b) in conns if b in frontier and a not in required and a not in inputs}
        required |= preds
        frontier = preds
    return required


def _node_eval(node, xs, scheme, is_output, activate_outputs):
    acts, aggs = SCALAR[scheme]
    s = aggs[node["aggregation"]](xs)
    z = node["bias"] + node["response"] * s
    if is_output and not activate_outputs:
        return z
    return acts[node["activation"]](z)


def feedforward(spec, gdict, x, scheme="neat-python", activate_outputs=True):
    """neat-python's ``FeedForwardNetwork.create(genome).activate(x)``."""
    inputs, outputs = _ids(spec)
    nodes = gdict["nodes"]
    enabled = [(k, c) for k, c in gdict["connections"].items() if c["enabled"]]
    keys = [k for k, _ in enabled]
    required = required_nodes(set(inputs), outputs, keys)
    values = dict(zip(inputs, map(float, x)))
    done = set(inputs)
    pending = set(required)
    while pending:
        ready = [
            n for n in pending if all(a in done for (a, b) in keys if b == n and a in required | set(inputs))
        ]
        assert ready, "cycle in a feedforward genome"
        for n in ready:
            xs = [
                values[a] * c["weight"] for (a, b), c in enabled if b == n and (a in required or a in inputs)
            ]
            values[n] = _node_eval(nodes[n], xs, scheme, n in outputs, activate_outputs)
        done |= set(ready)
        pending -= set(ready)
    return [values[o] for o in outputs]


class Recurrent:
    """neat-python's ``RecurrentNetwork``."""

    def __init__(self, spec, gdict, scheme="neat-python"):
        self.inputs, self.outputs = _ids(spec)
        self.scheme = scheme
        all_keys = list(gdict["connections"])
        required = required_nodes(set(self.inputs), self.outputs, all_keys)
        self.links = {}
        for (a, b), c in gdict["connections"].items():
            if not c["enabled"] or (a not in required and b not in required):
                continue
            self.links.setdefault(b, []).append((a, c["weight"]))
        self.nodes = gdict["nodes"]
        self.values = [{}, {}]
        for v in self.values:
            for k in self.inputs + self.outputs:
                v[k] = 0.0
            for node, links in self.links.items():
                v[node] = 0.0
                for a, _ in links:
                    v[a] = 0.0
        self.active = 0

    def activate(self, x):
        old, new = self.values[self.active], self.values[1 - self.active]
        self.active = 1 - self.active
        for i, xi in zip(self.inputs, x):
            old[i] = float(xi)
            new[i] = float(xi)
        for node, links in self.links.items():
            xs = [old[a] * w for a, w in links]
            new[node] = _node_eval(self.nodes[node], xs, self.scheme, False, True)
        return [new[o] for o in self.outputs]


class CTRNN(Recurrent):
    """neat-python 2.1's ``CTRNN`` (exponential Euler; the clock persists between calls)."""

    def __init__(self, spec, gdict, scheme="neat-python"):
        super().__init__(spec, gdict, scheme)
        self.time = 0.0

    def advance(self, x, advance_time, time_step):
        final = self.time + advance_time
        while self.time < final:
            dt = min(time_step, final - self.time)
            old, new = self.values[self.active], self.values[1 - self.active]
            self.active = 1 - self.active
            for i, xi in zip(self.inputs, x):
                old[i] = float(xi)
                new[i] = float(xi)
            for node, links in self.links.items():
                xs = [old[a] * w for a, w in links]
                z = _node_eval(self.nodes[node], xs, self.scheme, False, True)
                decay = math.exp(-dt / self.nodes[node]["time_constant"])
                new[node] = decay * old[node] + (1.0 - decay) * z
            self.time += dt
        cur = self.values[self.active]
        return [cur[o] for o in self.outputs]


def longest_path_levels(spec, gdict):
    """``{key: level}`` for every node (inputs 0; nodes without enabled inputs 0)."""
    inputs, _ = _ids(spec)
    keys = [k for k, c in gdict["connections"].items() if c["enabled"]]
    level = {k: 0 for k in inputs}
    level.update({k: 0 for k in gdict["nodes"]})
    for _ in range(len(level) + 1):
        for a, b in keys:
            level[b] = max(level[b], level[a] + 1)
    return level


# ---------------------------------------------------------------------------------------------
# random genomes


def _flush_subnormal(x: float) -> float:
    """``x``, or 0 where it is a float32 subnormal: XLA flushes those to zero on a CPU (the README's
    numerical guarantees) and the float64 references do not (inv(1.6e-43) found that). Nothing
    else changes, so hypothesis draws the same genomes as without it."""
    return 0.0 if abs(x) < float(np.finfo(np.float32).tiny) else x


@st.composite
def genome_dicts(
    draw,
    spec,
    recurrent=False,
    activations=("sigmoid",),
    aggregations=("sum",),
    max_hidden=6,
    weight=1.5,
    time_constant=False,
):
    """A random valid genome dict for ``spec`` (as :func:`evotensor.neat.genome_to_dict` gives)."""
    n_in, n_out = spec.num_inputs, spec.num_outputs
    max_hidden = min(max_hidden, spec.max_nodes - spec.num_io)
    hidden = draw(st.lists(st.integers(n_out, n_out + 40), max_size=max_hidden, unique=True))
    non_inputs = list(range(n_out)) + hidden
    floats = st.floats(-1.0, 1.0, allow_nan=False).map(_flush_subnormal)
    nodes = {}
    for k in non_inputs:
        node = {
            "bias": draw(floats),
            "response": draw(st.sampled_from([1.0, 1.0, 0.5, -1.0])),
            "activation": draw(st.sampled_from(activations)),
            "aggregation": draw(st.sampled_from(aggregations)),
        }
        if time_constant:
            node["time_constant"] = draw(st.floats(0.05, 2.0))
        nodes[k] = node
    inputs = [-1 - i for i in range(n_in)]
    if recurrent:
        pairs = [(a, b) for a in inputs + non_inputs for b in non_inputs]
    else:
        order = draw(st.permutations(non_inputs))
        pos = {k: i for i, k in enumerate(order)}
        pairs = [(a, b) for a in inputs + non_inputs for b in non_inputs if a in inputs or pos[a] < pos[b]]
    pairs = draw(st.lists(st.sampled_from(pairs), unique=True, max_size=spec.max_conns)) if pairs else []
    innovs = draw(st.lists(st.integers(0, 10_000), min_size=len(pairs), max_size=len(pairs), unique=True))
    conns = {}
    for (a, b), innov in zip(pairs, innovs):
        conns[(a, b)] = {
            "innovation": innov,
            "enabled": draw(st.booleans()) or draw(st.booleans()),  # 3/4 enabled
            "weight": draw(st.floats(-weight, weight, allow_nan=False).map(_flush_subnormal)),
        }
    conns = dict(sorted(conns.items(), key=lambda kv: kv[1]["innovation"]))
    return {"nodes": nodes, "connections": conns}


def scatter_rows(spec, genome: Genome, node_perm, conn_perm) -> Genome:
    """Move the hidden rows (``spec.num_io ..``) by ``node_perm`` and the connection rows by
    ``conn_perm`` (permutations of those row ranges): the same genome, with holes."""
    g = jax.tree_util.tree_map(np.asarray, genome)
    io = spec.num_io
    rows = np.concatenate([np.arange(io), io + np.asarray(node_perm, int)])
    crow = np.asarray(conn_perm, int)
    out = Genome(
        node_key=g.node_key[rows],
        node_attrs=g.node_attrs[rows],
        node_act=g.node_act[rows],
        node_agg=g.node_agg[rows],
        conn_in=g.conn_in[crow],
        conn_out=g.conn_out[crow],
        conn_innov=g.conn_innov[crow],
        conn_enabled=g.conn_enabled[crow],
        conn_attrs=g.conn_attrs[crow],
    )
    assert int((out.node_key != EMPTY).sum()) == int((g.node_key != EMPTY).sum())
    return jax.tree_util.tree_map(jnp.asarray, out)
