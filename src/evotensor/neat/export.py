"""Export one genome's network: neat-python's JSON format, a standalone NumPy function (and its
Python source), sympy expressions.

Host-side (NumPy/Python), one genome at a time (arrays ``[N]``/``[C]``, no population axis); nothing
here runs under ``jit``. Every export has the semantics of the library's own network passes
(:mod:`evotensor.neat.network`), which are neat-python 2.1's by default:

* :func:`to_neat_python_json` writes neat-python 2.1's network JSON format (``format_version``
  ``"1.0"``, ``docs/network-json-format.md`` of neat-python): the phenotype neat-python's
  ``FeedForwardNetwork.create`` / ``RecurrentNetwork.create`` / ``CTRNN.create`` would build from
  the same genome, in the same order (non-input nodes in evaluation order, then the input pins;
  each node's incoming connections after it). With ``prune=True`` (neat-python's behaviour) a
  feedforward export keeps only the nodes an output depends on (a required node without enabled
  inputs is a *bias neuron*: ``act(bias + response * agg([]))``), and a recurrent export only the
  nodes with an enabled incoming connection (the others keep the value 0, as in neat-python).
  Only enabled connections are exported unless ``include_disabled=True`` (then with
  ``"enabled": false``, which the format allows and a reader must skip).
* :func:`to_python_source` / :func:`to_numpy_function`: a feedforward network as plain NumPy code,
  one line per node in topological order: ``f(x [num_inputs] or [B, num_inputs]) -> y
  [num_outputs] or [B, num_outputs]``; paste the source anywhere NumPy is installed.
* :func:`to_sympy`: one sympy expression per output in the symbols ``x0, x1, ...``.
  ``exact=True`` (default) keeps every clip of neat-python's functions (``sigmoid(z) = 1 / (1 +
  exp(-Max(-60, Min(60, 5 z))))``, ``inv`` with its 0 at 0, ``log`` of ``Max(z, 1e-7)``, ...), so
  ``sympy.lambdify`` reproduces the forward pass; ``exact=False`` drops the clips that only guard
  against overflow or domain errors (``sigmoid(z) = 1 / (1 + exp(-5 z))``, ``inv = 1/z``,
  ``log(z)``, ``exp(z)``, ``gauss = exp(-5 z^2)``), which is shorter and equal wherever no clip is
  active (``|5 z| <= 60`` for sigmoid, ``|z| <= 3.4`` for gauss, ...). Functions whose clip is
  the function itself (``clamped``, ``relu``, ``hat``) keep it in both modes.

Numerics: the library's forward pass works in float32 and clamps node values to the finite
float32 range; these exports compute in float64 (NumPy) or exactly (sympy) without that clamp, so
they agree to float32 rounding wherever no value overflows float32.

Only the built-in functions have NumPy and sympy forms; a network using an activation or
aggregation registered by the user (or a built-in name replaced by one) raises an
:class:`~evotensor.core.checks.ArgumentError` naming it, as does a node gene whose
``node_output`` (or a connection gene whose ``weight``) is overridden, or an
``OutputMode.transform`` (a JAX function).
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np

from evotensor.core.checks import ArgumentError, check_choice
from evotensor.neat.activations import (
    FunctionSet,
    absolute,
    clamped,
    cube,
    elu,
    function_set,
    hat,
    identity,
    lelu,
    np_exp,
    np_gauss,
    np_inv,
    np_log,
    np_sigmoid,
    np_sin,
    np_softplus,
    np_tanh,
    relu,
    segment_max,
    segment_maxabs,
    segment_mean,
    segment_median,
    segment_min,
    segment_prod,
    segment_sum,
    selu,
    square,
    tn_exp,
    tn_inv,
    tn_log,
    tn_relu,
    tn_scaled_sigmoid,
    tn_scaled_tanh,
    tn_sigmoid,
    tn_sin,
    tn_tanh,
)
from evotensor.neat.genes import ConnectionGene, NodeGene
from evotensor.neat.genome import Genome, GenomeSpec, genome_to_dict
from evotensor.neat.network import OutputMode

__all__ = [
    "FORMAT_VERSION",
    "NetworkGraph",
    "network_graph",
    "to_neat_python_json",
    "to_numpy_function",
    "to_python_source",
    "to_sympy",
]

FORMAT_VERSION = "1.0"
"""The neat-python network JSON format version written."""

_SELU_L = 1.0507009873554804934193349852946
_SELU_A = 1.6732632423543772848170429916717

NEAT_PYTHON_ACTIVATIONS = (
    "sigmoid",
    "tanh",
    "sin",
    "gauss",
    "relu",
    "elu",
    "lelu",
    "selu",
    "softplus",
    "identity",
    "clamped",
    "inv",
    "log",
    "exp",
    "abs",
    "hat",
    "square",
    "cube",
)
NEAT_PYTHON_AGGREGATIONS = ("sum", "product", "max", "min", "maxabs", "median", "mean")

# ---------------------------------------------------------------------------------------------
# the built-in functions: (the registered JAX function, its NumPy body in ``z``)

_NUMPY_ACT: dict[str, dict[str, tuple[Callable, str]]] = {
    "neat-python": {
        "sigmoid": (np_sigmoid, "1.0 / (1.0 + np.exp(-np.clip(5.0 * z, -60.0, 60.0)))"),
        "tanh": (np_tanh, "np.tanh(np.clip(2.5 * z, -60.0, 60.0))"),
        "sin": (np_sin, "np.sin(np.clip(5.0 * z, -60.0, 60.0))"),
        "gauss": (np_gauss, "np.exp(-5.0 * np.clip(z, -3.4, 3.4) ** 2)"),
        "relu": (relu, "np.where(z > 0.0, z, 0.0)"),
        "elu": (elu, "np.where(z > 0.0, z, np.exp(np.minimum(z, 0.0)) - 1.0)"),
        "lelu": (lelu, "np.where(z > 0.0, z, 0.005 * z)"),
        "selu": (
            selu,
            f"np.where(z > 0.0, {_SELU_L!r} * z, {_SELU_L * _SELU_A!r} * (np.exp(np.minimum(z, 0.0)) - 1.0))",
        ),
        "softplus": (np_softplus, "0.2 * np.log1p(np.exp(np.clip(5.0 * z, -60.0, 60.0)))"),
        "identity": (identity, "z"),
        "clamped": (clamped, "np.clip(z, -1.0, 1.0)"),
        "inv": (np_inv, "np.where(z == 0.0, 0.0, 1.0 / np.where(z == 0.0, 1.0, z))"),
        "log": (np_log, "np.log(np.maximum(z, 1e-7))"),
        "exp": (np_exp, "np.exp(np.clip(z, -60.0, 60.0))"),
        "abs": (absolute, "np.abs(z)"),
        "hat": (hat, "np.maximum(0.0, 1.0 - np.abs(z))"),
        "square": (square, "z * z"),
        "cube": (cube, "z * z * z"),
    },
    "tensorneat": {
        "scaled_sigmoid": (tn_scaled_sigmoid, "3.0 / (1.0 + np.exp(-z))"),
        "sigmoid": (tn_sigmoid, "1.0 / (1.0 + np.exp(-z))"),
        "scaled_tanh": (tn_scaled_tanh, "3.0 * np.tanh(z)"),
        "tanh": (tn_tanh, "np.tanh(z)"),
        "sin": (tn_sin, "np.sin(z)"),
        "relu": (tn_relu, "np.maximum(z, 0.0)"),
        "lelu": (lelu, "np.where(z > 0.0, z, 0.005 * z)"),
        "identity": (identity, "z"),
        "inv": (tn_inv, "1.0 / np.where(z > 0.0, np.maximum(z, 1e-7), np.minimum(z, -1e-7))"),
        "log": (tn_log, "np.log(np.maximum(z, 1e-7))"),
        "exp": (tn_exp, "np.exp(z)"),
        "abs": (absolute, "np.abs(z)"),
    },
}

# aggregation name -> (segment function, NumPy body over ``s = np.stack(xs)``)
_NUMPY_AGG: dict[str, tuple[Callable, str]] = {
    "sum": (segment_sum, "np.sum(s, axis=0)"),
    "product": (segment_prod, "np.prod(s, axis=0)"),
    "max": (segment_max, "np.max(s, axis=0)"),
    "min": (segment_min, "np.min(s, axis=0)"),
    "mean": (segment_mean, "np.mean(s, axis=0)"),
    "maxabs": (segment_maxabs, "np.take_along_axis(s, np.argmax(np.abs(s), axis=0)[None], axis=0)[0]"),
    "median": (segment_median, "np.median(s, axis=0)"),
}
_EMPTY = {
    "neat-python": {"product": 1.0},
    "tensorneat": {"product": 0.0},
}
_FUNCTION_SCHEMES = ("neat-python", "tensorneat")


def _resolve(fs: FunctionSet, activations: tuple[str, ...], aggregations: tuple[str, ...], what: str) -> None:
    """Refuse any option that is not the scheme's built-in (a user function has no NumPy/sympy form)."""
    table = _NUMPY_ACT.get(fs.scheme, {})
    for name in activations:
        fn = fs.activation(name)
        if name not in table or table[name][0] is not fn:
            raise ArgumentError(
                f"activation {name!r} is not a built-in of scheme {fs.scheme!r}, so it has no {what} form"
            )
    for name in aggregations:
        agg = fs.aggregation(name)
        ok = name in _NUMPY_AGG and agg.segment is _NUMPY_AGG[name][0]
        if not ok or float(agg.empty) != _EMPTY.get(fs.scheme, {}).get(name, 0.0):
            raise ArgumentError(
                f"aggregation {name!r} is not a built-in of scheme {fs.scheme!r}, so it has no {what} form"
            )


# ---------------------------------------------------------------------------------------------
# the phenotype as plain Python


class NetworkGraph:
    """One genome's phenotype as Python objects (host side), the common ground of every export.

    Attributes:
        spec: the genome spec.
        inputs: input keys ``[-1, -2, ...]``; outputs: output keys ``[0, 1, ...]``.
        nodes: ``{key: {"bias": ..., "response": ..., [time_constant, extra floats],
            "activation": name, "aggregation": name}}`` for every output and hidden node.
        connections: ``[(in, out, weight, enabled, innovation)]`` in innovation order.
    """

    def __init__(self, spec: GenomeSpec, genome: Genome):
        if not isinstance(spec, GenomeSpec):
            raise ArgumentError(f"spec must be a GenomeSpec, got {type(spec).__name__}")
        if not isinstance(genome, Genome):
            raise ArgumentError(f"genome must be a Genome, got {type(genome).__name__}")
        if np.ndim(genome.node_key) != 1:
            raise ArgumentError(
                f"genome must be one genome (node_key [N]), got node_key shape {np.shape(genome.node_key)}; "
                "select one with population[i]"
            )
        self.spec = spec
        d = genome_to_dict(spec, jax.tree_util.tree_map(np.asarray, genome))
        self.inputs = [-1 - i for i in range(spec.num_inputs)]
        self.outputs = list(range(spec.num_outputs))
        self.nodes: dict[int, dict[str, Any]] = dict(sorted(d["nodes"].items()))
        conns = sorted(d["connections"].items(), key=lambda kv: kv[1]["innovation"])
        wname = spec.conn_gene.float_names[0]
        self.connections = [
            (a, b, float(c[wname]), bool(c["enabled"]), int(c["innovation"])) for (a, b), c in conns
        ]

    @property
    def enabled(self) -> list[tuple[int, int, float]]:
        """``[(in, out, weight)]`` of the enabled connections."""
        return [(a, b, w) for a, b, w, e, _ in self.connections if e]

    def required(self, pairs: list[tuple[int, int]] | None = None) -> set[int]:
        """neat-python's ``required_for_output``: the non-input nodes with a path (over ``pairs``,
        default the enabled connections) to an output, outputs included."""
        if pairs is None:
            pairs = [(a, b) for a, b, _ in self.enabled]
        inputs = set(self.inputs)
        required = set(self.outputs)
        frontier = set(self.outputs)
        while frontier:
            preds = {a for a, b in pairs if b in frontier and a not in required and a not in inputs}
            required |= preds
            frontier = preds
        return required

    def layers(self, nodes: set[int] | None = None) -> list[list[int]]:
        """Feedforward evaluation layers over ``nodes`` (default: :meth:`required`), as
        neat-python's ``feed_forward_layers``: first the nodes without enabled inputs (bias
        neurons), then each layer the nodes whose inputs are all computed; keys sorted within a
        layer. Raises if the enabled connections among them have a cycle."""
        nodes = self.required() if nodes is None else set(nodes)
        edges = [(a, b) for a, b, _ in self.enabled if b in nodes and (a in nodes or a in self.inputs)]
        has_input = {b for _, b in edges}
        first = sorted(n for n in nodes if n not in has_input)
        layers = [first] if first else []
        done = set(self.inputs) | set(first)
        pending = nodes - done
        while pending:
            ready = sorted(n for n in pending if all(a in done for a, b in edges if b == n))
            if not ready:
                raise ArgumentError(f"the enabled connections among nodes {sorted(pending)} form a cycle")
            layers.append(ready)
            done |= set(ready)
            pending -= set(ready)
        return layers

    def order(self, prune: bool = True) -> list[int]:
        """Non-input nodes in feedforward evaluation order (required ones only with ``prune``)."""
        nodes = self.required() if prune else set(self.nodes)
        return [n for layer in self.layers(nodes) for n in layer]

    def incoming(self, node: int, sources: set[int] | None = None, disabled: bool = False):
        """``[(in, weight, enabled)]`` into ``node`` in innovation order (from ``sources`` only)."""
        return [
            (a, w, e)
            for a, b, w, e, _ in self.connections
            if b == node and (e or disabled) and (sources is None or a in sources)
        ]


def network_graph(spec: GenomeSpec, genome: Genome) -> NetworkGraph:
    """The :class:`NetworkGraph` of one genome."""
    return NetworkGraph(spec, genome)


def _check_semantics(spec: GenomeSpec, outputs: OutputMode | None) -> OutputMode:
    outputs = OutputMode() if outputs is None else outputs
    if not isinstance(outputs, OutputMode):
        raise ArgumentError(f"outputs must be an OutputMode or None, got {outputs!r}")
    if outputs.transform is not None:
        raise ArgumentError("outputs.transform (a JAX function) cannot be exported; export without it")
    if type(spec.node_gene).node_output is not NodeGene.node_output:
        raise ArgumentError(
            f"node gene {type(spec.node_gene).__name__} overrides node_output; only "
            "act(bias + response * agg) can be exported"
        )
    if type(spec.conn_gene).weight is not ConnectionGene.weight:
        raise ArgumentError(
            f"connection gene {type(spec.conn_gene).__name__} overrides weight; cannot export"
        )
    return outputs


# ---------------------------------------------------------------------------------------------
# neat-python JSON


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("evotensor")
    except Exception:  # pragma: no cover - not installed as a distribution
        return "unknown"


def to_neat_python_json(
    spec: GenomeSpec,
    genome: Genome,
    *,
    network_type: str | None = None,
    metadata: dict[str, Any] | None = None,
    prune: bool = True,
    include_disabled: bool = False,
    functions: str | FunctionSet | None = None,
    outputs: OutputMode | None = None,
    path: str | Path | None = None,
    timestamp: str | None = None,
) -> dict[str, Any]:
    """One genome's network in neat-python 2.1's network JSON format (a JSON-ready dict; also
    written to ``path`` as indented JSON if given).

    Args:
        spec: the genome spec; genome: one genome (arrays ``[N]``, ``[C]``).
        network_type: ``"feedforward"``, ``"recurrent"`` or ``"ctrnn"``; default: ``"ctrnn"`` for a
            recurrent spec whose node gene has a ``time_constant``, else per ``spec.feed_forward``.
        metadata: extra ``metadata`` fields (``fitness``, ``generation``, ``genome_id``, ...).
        prune: export only the nodes neat-python's network would hold (module docstring); else
            every node (feedforward: all in topological order; recurrent: all with an enabled input).
        include_disabled: also list the disabled connections, with ``"enabled": false``.
        functions: the naming scheme (default neat-python's). Names are marked ``"custom": true``
            unless they are neat-python built-ins in the neat-python scheme.
        outputs: :class:`OutputMode`; with ``activate=False`` output nodes are written with the
            ``identity`` activation (what they compute). A ``transform`` cannot be written.
        timestamp: ``metadata.created_timestamp`` (default: now, UTC, ISO 8601).

    Returns:
        ``{"format_version": "1.0", "network_type", "metadata", "topology", "nodes",
        "connections"}``.
    """
    g = NetworkGraph(spec, genome)
    outputs = _check_semantics(spec, outputs)
    fs = function_set(functions)
    has_tau = "time_constant" in spec.node_gene.float_names
    if network_type is None:
        network_type = "feedforward" if spec.feed_forward else ("ctrnn" if has_tau else "recurrent")
    check_choice(network_type, "network_type", ("feedforward", "recurrent", "ctrnn"))
    if network_type == "ctrnn" and not has_tau:
        raise ArgumentError("network_type='ctrnn' needs a node gene with a time_constant")
    if network_type == "feedforward" and not spec.feed_forward:
        raise ArgumentError("network_type='feedforward' needs spec.feed_forward=True")
    if not isinstance(prune, bool) or not isinstance(include_disabled, bool):
        raise ArgumentError("prune and include_disabled must be bools")

    if network_type == "feedforward":
        order = g.order(prune)
        members = set(order)
        sources = members | set(g.inputs)
    else:
        if prune:
            required = g.required([(a, b) for a, b, *_ in g.connections])
            keep = [(a, b) for a, b, _ in g.enabled if a in required or b in required]
        else:
            keep = [(a, b) for a, b, _ in g.enabled]
        order = sorted({b for _, b in keep})
        members = set(order)
        sources = None
        keep_set = set(keep)

    builtin_scheme = fs.scheme == "neat-python"
    extra_floats = [n for n in spec.node_gene.float_names if n not in ("bias", "response")]

    def fn_info(name: str, kind: str) -> dict[str, Any]:
        known = NEAT_PYTHON_ACTIVATIONS if kind == "activation" else NEAT_PYTHON_AGGREGATIONS
        return {"name": name, "custom": not (builtin_scheme and name in known)}

    nodes, connections = [], []
    for key in order:
        node = g.nodes[key]
        is_output = key in g.outputs
        act = node["activation"] if (outputs.activate or not is_output) else "identity"
        entry = {
            "id": key,
            "type": "output" if is_output else "hidden",
            "activation": fn_info(act, "activation"),
            "aggregation": fn_info(node["aggregation"], "aggregation"),
            "bias": float(node["bias"]),
            "response": float(node["response"]),
        }
        for name in extra_floats:
            entry[name] = float(node[name])
        nodes.append(entry)
        for a, w, e in g.incoming(key, sources, disabled=include_disabled):
            if network_type != "feedforward" and e and (a, key) not in keep_set:
                continue
            connections.append({"from": a, "to": key, "weight": float(w), "enabled": bool(e)})
    for key in g.inputs:
        entry = {
            "id": key,
            "type": "input",
            "activation": {"name": "identity", "custom": False},
            "aggregation": {"name": "none", "custom": False},
            "bias": 0.0,
            "response": 1.0,
        }
        if network_type == "ctrnn":
            entry["time_constant"] = 1.0
        nodes.append(entry)
    meta = {
        "created_timestamp": timestamp or datetime.datetime.now(datetime.UTC).isoformat(),
        "exporter": f"evotensor {_version()}",
        "function_scheme": fs.scheme,
    }
    if metadata:
        if not isinstance(metadata, dict):
            raise ArgumentError(f"metadata must be a dict, got {type(metadata).__name__}")
        meta.update(metadata)
    data = {
        "format_version": FORMAT_VERSION,
        "network_type": network_type,
        "metadata": meta,
        "topology": {
            "num_inputs": spec.num_inputs,
            "num_outputs": spec.num_outputs,
            "input_keys": list(g.inputs),
            "output_keys": list(g.outputs),
        },
        "nodes": nodes,
        "connections": connections,
    }
    if path is not None:
        Path(path).write_text(json.dumps(data, indent=2) + "\n")
    return data


# ---------------------------------------------------------------------------------------------
# NumPy source


def _feedforward_graph(spec, genome, functions, outputs, what):
    if not spec.feed_forward:
        raise ArgumentError(f"{what} needs a feedforward spec (spec.feed_forward=True)")
    g = NetworkGraph(spec, genome)
    outputs = _check_semantics(spec, outputs)
    fs = function_set(functions)
    if fs.scheme not in _FUNCTION_SCHEMES:
        raise ArgumentError(f"functions scheme {fs.scheme!r} has no {what} forms")
    order = g.order(prune=True)
    used_act = sorted({g.nodes[k]["activation"] for k in order})
    used_agg = sorted({g.nodes[k]["aggregation"] for k in order})
    _resolve(fs, tuple(used_act), tuple(used_agg), what)
    return g, outputs, fs, order


def _var(key: int) -> str:
    return f"x{-1 - key}" if key < 0 else f"n{key}"


def _ident(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)


def to_python_source(
    spec: GenomeSpec,
    genome: Genome,
    *,
    functions: str | FunctionSet | None = None,
    outputs: OutputMode | None = None,
    name: str = "network",
    dtype: str = "float64",
) -> str:
    """Python source (NumPy only) of one feedforward genome's network: ``def name(x)`` mapping
    ``x [num_inputs]`` or ``[B, num_inputs]`` to ``y [num_outputs]`` or ``[B, num_outputs]``.

    One assignment per node the outputs depend on, in topological order, weights and biases as
    exact decimal literals of their float32 values; helper functions for the activations and
    aggregations used. ``dtype``: the NumPy float type computed in (``"float64"`` or
    ``"float32"``).
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ArgumentError(f"name must be a Python identifier, got {name!r}")
    check_choice(dtype, "dtype", ("float64", "float32"))
    g, outputs, fs, order = _feedforward_graph(spec, genome, functions, outputs, "NumPy")
    acts = _NUMPY_ACT[fs.scheme]
    empty = _EMPTY[fs.scheme]
    used_act = sorted({g.nodes[k]["activation"] for k in order if outputs.activate or k not in g.outputs})
    used_agg = sorted(
        {g.nodes[k]["aggregation"] for k in order if len(g.incoming(k, set(order) | set(g.inputs))) > 1}
        - {"sum", "product"}
    )
    lines = [
        f'"""A NEAT network exported by evotensor ({spec.num_inputs} inputs, {spec.num_outputs} outputs,',
        f'{len(order) - spec.num_outputs} hidden nodes; activation scheme {fs.scheme!r})."""',
        "",
        "import numpy as np",
        "",
    ]
    for act in used_act:
        lines += ["", f"def _act_{_ident(act)}(z):", f"    return {acts[act][1]}", ""]
    for agg in used_agg:
        lines += [
            "",
            f"def _agg_{_ident(agg)}(xs):",
            "    s = np.stack(xs)",
            f"    return {_NUMPY_AGG[agg][1]}",
            "",
        ]
    lines += [
        "",
        f"def {name}(x):",
        f'    """x [{spec.num_inputs}] or [B, {spec.num_inputs}] -> y [{spec.num_outputs}] or '
        f'[B, {spec.num_outputs}]."""',
        f"    x = np.asarray(x, dtype=np.{dtype})",
        "    single = x.ndim == 1",
        "    x = x.reshape(1, -1) if single else x",
        f"    if x.ndim != 2 or x.shape[1] != {spec.num_inputs}:",
        f'        raise ValueError(f"x must have shape ({spec.num_inputs},) or (B, {spec.num_inputs}), '
        'got {x.shape}")',
        "    zero = np.zeros(x.shape[0], dtype=x.dtype)",
    ]
    for i, key in enumerate(g.inputs):
        lines.append(f"    {_var(key)} = x[:, {i}]")
    members = set(order) | set(g.inputs)
    for key in order:
        node = g.nodes[key]
        links = g.incoming(key, members)
        terms = [f"{w!r} * {_var(a)}" for a, w, _ in links]
        agg = node["aggregation"]
        if not terms:
            s = f"(zero + {empty.get(agg, 0.0)!r})"
        elif len(terms) == 1:
            s = f"({terms[0]})"
        elif agg == "sum":
            s = "(" + " + ".join(terms) + ")"
        elif agg == "product":
            s = "(" + " * ".join(f"({t})" for t in terms) + ")"
        else:
            s = f"_agg_{_ident(agg)}([{', '.join(terms)}])"
        z = f"{float(node['bias'])!r} + {float(node['response'])!r} * {s}"
        if outputs.activate or key not in g.outputs:
            z = f"_act_{_ident(node['activation'])}({z})"
        lines.append(f"    {_var(key)} = {z}")
    lines += [
        f"    y = np.stack([{', '.join(_var(k) for k in g.outputs)}], axis=-1).astype(np.{dtype})",
        "    return y[0] if single else y",
        "",
    ]
    return "\n".join(lines)


def to_numpy_function(
    spec: GenomeSpec,
    genome: Genome,
    *,
    functions: str | FunctionSet | None = None,
    outputs: OutputMode | None = None,
    dtype: str = "float64",
) -> Callable[[np.ndarray], np.ndarray]:
    """A standalone NumPy callable for one feedforward genome: ``f(x [num_inputs] or [B,
    num_inputs]) -> y [num_outputs] or [B, num_outputs]`` (no JAX involved). Its source is
    ``f.source`` (:func:`to_python_source`)."""
    source = to_python_source(spec, genome, functions=functions, outputs=outputs, name="network", dtype=dtype)
    namespace: dict[str, Any] = {}
    exec(compile(source, "<evotensor.neat.export>", "exec"), namespace)  # noqa: S102 - our own source
    fn = namespace["network"]
    fn.source = source
    return fn


# ---------------------------------------------------------------------------------------------
# sympy


def _sympy_activation(sp, scheme: str, name: str, z, exact: bool):
    def clip(v, lo, hi):
        return sp.Max(sp.Float(lo), sp.Min(sp.Float(hi), v)) if exact else v

    if scheme == "neat-python":
        table = {
            "sigmoid": lambda: 1 / (1 + sp.exp(-clip(5 * z, -60.0, 60.0))),
            "tanh": lambda: sp.tanh(clip(sp.Float(2.5) * z, -60.0, 60.0)),
            "sin": lambda: sp.sin(clip(5 * z, -60.0, 60.0)),
            "gauss": lambda: sp.exp(-5 * clip(z, -3.4, 3.4) ** 2),
            "relu": lambda: sp.Max(z, sp.Float(0.0)),
            "elu": lambda: sp.Piecewise((z, z > 0), (sp.exp(z) - 1, True)),
            "lelu": lambda: sp.Piecewise((z, z > 0), (sp.Float(0.005) * z, True)),
            "selu": lambda: sp.Piecewise(
                (sp.Float(_SELU_L) * z, z > 0), (sp.Float(_SELU_L * _SELU_A) * (sp.exp(z) - 1), True)
            ),
            "softplus": lambda: sp.Float(0.2) * sp.log(1 + sp.exp(clip(5 * z, -60.0, 60.0))),
            "identity": lambda: z,
            "clamped": lambda: sp.Max(sp.Float(-1.0), sp.Min(sp.Float(1.0), z)),
            "inv": lambda: sp.Piecewise((sp.Float(0.0), sp.Eq(z, 0)), (1 / z, True)) if exact else 1 / z,
            "log": lambda: sp.log(sp.Max(z, sp.Float(1e-7))) if exact else sp.log(z),
            "exp": lambda: sp.exp(clip(z, -60.0, 60.0)),
            "abs": lambda: sp.Abs(z),
            "hat": lambda: sp.Max(sp.Float(0.0), 1 - sp.Abs(z)),
            "square": lambda: z**2,
            "cube": lambda: z**3,
        }
    else:
        table = {
            "scaled_sigmoid": lambda: 3 / (1 + sp.exp(-z)),
            "sigmoid": lambda: 1 / (1 + sp.exp(-z)),
            "scaled_tanh": lambda: 3 * sp.tanh(z),
            "tanh": lambda: sp.tanh(z),
            "sin": lambda: sp.sin(z),
            "relu": lambda: sp.Max(z, sp.Float(0.0)),
            "lelu": lambda: sp.Piecewise((z, z > 0), (sp.Float(0.005) * z, True)),
            "identity": lambda: z,
            "inv": lambda: (
                sp.Piecewise((1 / sp.Max(z, sp.Float(1e-7)), z > 0), (1 / sp.Min(z, sp.Float(-1e-7)), True))
                if exact
                else 1 / z
            ),
            "log": lambda: sp.log(sp.Max(z, sp.Float(1e-7))) if exact else sp.log(z),
            "exp": lambda: sp.exp(z),
            "abs": lambda: sp.Abs(z),
        }
    return table[name]()


def _sympy_aggregation(sp, name: str, xs: list, empty: float):
    if not xs:
        return sp.Float(empty)
    if len(xs) == 1:
        return xs[0]
    if name == "sum":
        return sp.Add(*xs)
    if name == "product":
        return sp.Mul(*xs)
    if name == "max":
        return sp.Max(*xs)
    if name == "min":
        return sp.Min(*xs)
    if name == "mean":
        return sp.Add(*xs) / len(xs)
    if name == "maxabs":
        # the first input of largest magnitude (Python's max(xs, key=abs)); Piecewise picks the
        # first branch whose condition holds
        branches = [
            (x, sp.And(*[sp.Abs(x) >= sp.Abs(y) for j, y in enumerate(xs) if j != i]))
            for i, x in enumerate(xs[:-1])
        ]
        return sp.Piecewise(*branches, (xs[-1], True))
    # median (neat-python's median2): an odd-even transposition sorting network of Min/Max
    n = len(xs)
    if n <= 2:
        return sp.Add(*xs) / n
    v = list(xs)
    for r in range(n):
        for i in range(r % 2, n - 1, 2):
            v[i], v[i + 1] = sp.Min(v[i], v[i + 1]), sp.Max(v[i], v[i + 1])
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def to_sympy(
    spec: GenomeSpec,
    genome: Genome,
    *,
    functions: str | FunctionSet | None = None,
    outputs: OutputMode | None = None,
    exact: bool = True,
    symbols: Any = None,
) -> list[Any]:
    """One sympy expression per output of one feedforward genome's network.

    Args:
        spec, genome: a feedforward spec and one genome.
        functions, outputs: as the forward pass (:func:`~evotensor.neat.network.forward`).
        exact: keep neat-python's overflow/domain clips (module docstring); ``False`` gives the
            shorter textbook forms.
        symbols: the input symbols (``num_inputs`` sympy symbols); default ``x0, x1, ...``.

    Returns:
        ``[num_outputs]`` sympy expressions; ``sympy.lambdify(symbols, exprs, "numpy")`` evaluates
        them. Weights and biases are ``sympy.Float`` s of their float32 values.

    Raises:
        ArgumentError: a recurrent spec, or an activation/aggregation without a sympy form (named).
    """
    import sympy as sp

    if not isinstance(exact, bool):
        raise ArgumentError(f"exact must be a bool, got {exact!r}")
    g, outputs, fs, order = _feedforward_graph(spec, genome, functions, outputs, "sympy")
    if symbols is None:
        symbols = sp.symbols(f"x0:{spec.num_inputs}")
    symbols = tuple(symbols) if not isinstance(symbols, sp.Symbol) else (symbols,)
    if len(symbols) != spec.num_inputs:
        raise ArgumentError(f"symbols must be {spec.num_inputs} sympy symbols, got {len(symbols)}")
    empty = _EMPTY[fs.scheme]
    value: dict[int, Any] = dict(zip(g.inputs, symbols))
    members = set(order) | set(g.inputs)
    for key in order:
        node = g.nodes[key]
        xs = [sp.Float(w) * value[a] for a, w, _ in g.incoming(key, members)]
        agg = node["aggregation"]
        s = _sympy_aggregation(sp, agg, xs, empty.get(agg, 0.0))
        z = sp.Float(float(node["bias"])) + sp.Float(float(node["response"])) * s
        if outputs.activate or key not in g.outputs:
            z = _sympy_activation(sp, fs.scheme, node["activation"], z, exact)
        value[key] = z
    return [value[k] for k in g.outputs]
