"""The tensor encoding of NEAT genomes: fixed-shape node and connection tables with exact integer
keys and innovation numbers.

A :class:`Genome` is struct-of-arrays (like the GP :class:`~evotensor.gp.Forest`); a population
stacks genomes on a leading axis, ``[pop, max_nodes]`` / ``[pop, max_conns]``:

Node table, one row per node gene:

* ``node_key int32 [..., N]``: the node key, neat-python's convention: input pins ``-1 .. -num_inputs``,
  outputs ``0 .. num_outputs - 1``, hidden nodes ``>= num_outputs`` (drawn from the run's global
  node counter). ``EMPTY`` (``int32`` min) marks an unused row.
* ``node_attrs float32 [..., N, A]``: the node gene's float attributes in the order of
  :attr:`NodeGene.floats` (``bias, response[, time_constant], extra...``).
* ``node_act int32 [..., N]``, ``node_agg int32 [..., N]``: activation and aggregation ids (indices
  into the node gene's option names).

Connection table, one row per connection gene:

* ``conn_in int32 [..., C]``, ``conn_out int32 [..., C]``: the node *keys* it joins.
* ``conn_innov int32 [..., C]``: its global innovation number (``EMPTY`` marks an unused row).
* ``conn_enabled bool [..., C]``.
* ``conn_attrs float32 [..., C, B]``: the connection gene's floats (``weight, extra...``).

Invariants (:func:`check_genome` checks them on the host; every operation keeps them):

* Rows ``0 .. num_inputs - 1`` hold the inputs (keys ``-1, -2, ...`` in order) and the next
  ``num_outputs`` rows the outputs (keys ``0, 1, ...``); these rows are never deleted. Hidden nodes
  may sit in any later row, with unused rows between them (a delete leaves a hole; an add takes the
  first unused row).
* Valid node keys are unique within a genome; valid innovation numbers are unique within a genome.
* A valid connection joins two valid nodes and never ends in an input; a feedforward genome's
  enabled *and* disabled connections form no cycle (so that re-enabling never makes one).
* Unused rows hold the padding exactly: key/innovation/endpoints ``EMPTY``, attributes ``0``, ids
  ``0``, enabled ``False``, so genomes compare and hash bit for bit.

Input pins carry attributes like every row (ignored by the forward pass and by the distance);
keeping them as rows makes the topological sort uniform.

Sizing: ``max_nodes >= num_inputs + num_outputs + hidden nodes``; ``max_conns`` at least the
initial connections (``num_inputs * num_outputs`` for full initial connectivity). A structural
mutation that would overflow is skipped and counted (``metrics["capacity_skips"]``), never written
past the end. Memory is ``pop * (max_nodes * (A + 3) + max_conns * (B + 4)) * 4`` bytes.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core import rng
from evotensor.core.checks import ArgumentError, check_choice, check_fraction, check_int
from evotensor.core.pytree import pytree_dataclass
from evotensor.neat.genes import ConnectionGene, NodeGene

__all__ = ["EMPTY", "Genome", "GenomeSpec", "check_genome", "genome_from_dict", "genome_to_dict"]

EMPTY = int(np.iinfo(np.int32).min)


@pytree_dataclass
class Genome:
    """One genome (arrays ``[N]``, ``[C]``) or a population (a leading ``[pop]`` axis); see the module
    docstring for the columns and invariants."""

    node_key: jax.Array
    node_attrs: jax.Array
    node_act: jax.Array
    node_agg: jax.Array
    conn_in: jax.Array
    conn_out: jax.Array
    conn_innov: jax.Array
    conn_enabled: jax.Array
    conn_attrs: jax.Array

    @property
    def node_valid(self) -> jax.Array:
        """``bool [..., N]``: the row holds a node."""
        return self.node_key != EMPTY

    @property
    def conn_valid(self) -> jax.Array:
        """``bool [..., C]``: the row holds a connection."""
        return self.conn_innov != EMPTY

    @property
    def num_nodes(self) -> jax.Array:
        """``int32 [...]``: node genes in use, input pins included."""
        return jnp.sum(self.node_valid, axis=-1, dtype=jnp.int32)

    @property
    def num_conns(self) -> jax.Array:
        """``int32 [...]``: connection genes in use (enabled or not)."""
        return jnp.sum(self.conn_valid, axis=-1, dtype=jnp.int32)

    def __getitem__(self, index: Any) -> Genome:
        """Select genomes along the leading (population) axes."""
        return jax.tree_util.tree_map(lambda x: x[index], self)


@dataclasses.dataclass(frozen=True)
class GenomeSpec:
    """The static shape and gene types shared by every operation on a population (hashable).

    Args:
        num_inputs, num_outputs: network inputs and outputs (>= 1).
        max_nodes: node rows per genome, input pins included (>= num_inputs + num_outputs).
        max_conns: connection rows per genome.
        feed_forward: forbid cycles (neat-python's ``feed_forward``).
        node_gene, conn_gene: the gene types (:class:`NodeGene`, :class:`ConnectionGene`).
        initial_connection: ``"full"`` (every candidate link, below), ``"partial"`` (a uniformly
            random ``round(links * connection_fraction)`` of them per genome, as neat-python's
            ``partial_*``) or ``"none"``.
        connection_fraction: for ``"partial"``.
        hidden_layers: sizes of the hidden layers every initial genome has (neat-python's
            ``num_hidden`` is ``(num_hidden,)``; TensorNEAT's ``init_hidden_layers``). The candidate
            links join consecutive layers fully (inputs -> first layer -> ... -> outputs); without
            hidden layers, every input to every output.
        initial_direct: with hidden layers, also link every input to every output (neat-python's
            ``full_direct`` / ``partial_direct``; ``False`` is its ``full_nodirect`` and TensorNEAT's).
            Without hidden layers it changes nothing and reads back ``False``.

    Initial genomes have the keys and innovation numbers of neat-python: inputs ``-1 .. -num_inputs``,
    outputs ``0 .. num_outputs - 1``, hidden nodes from ``num_outputs`` on (rows after the outputs,
    layer by layer), and the candidate links numbered ``0 ..`` in the order above (source-major within
    each pair of layers, the direct links last), so every fresh genome agrees on them.
    """

    num_inputs: int
    num_outputs: int
    max_nodes: int = 50
    max_conns: int = 100
    feed_forward: bool = True
    node_gene: NodeGene = dataclasses.field(default_factory=NodeGene)
    conn_gene: ConnectionGene = dataclasses.field(default_factory=ConnectionGene)
    initial_connection: str = "full"
    connection_fraction: float = 1.0
    hidden_layers: tuple[int, ...] = ()
    initial_direct: bool = False

    def __post_init__(self):
        check_int(self.num_inputs, "num_inputs", maximum=2**31 - 1)
        check_int(self.num_outputs, "num_outputs", maximum=2**31 - 1)
        layers = self.hidden_layers
        if isinstance(layers, int) or not isinstance(layers, (tuple, list)):
            raise ArgumentError(f"hidden_layers must be a tuple of layer sizes, got {layers!r}")
        layers = tuple(check_int(n, f"hidden_layers[{i}]") for i, n in enumerate(layers))
        object.__setattr__(self, "hidden_layers", layers)
        if not isinstance(self.initial_direct, bool):
            raise ArgumentError(f"initial_direct must be a bool, got {self.initial_direct!r}")
        if not layers:  # the same links either way: one spec, not two equal ones that compare unequal
            object.__setattr__(self, "initial_direct", False)
        check_int(
            self.max_nodes,
            "max_nodes",
            minimum=self.num_inputs + self.num_outputs + sum(layers),
            maximum=2**31 - 1,
        )
        check_int(self.max_conns, "max_conns", maximum=2**31 - 1)
        if not isinstance(self.feed_forward, bool):
            raise ArgumentError(f"feed_forward must be a bool, got {self.feed_forward!r}")
        if not isinstance(self.node_gene, NodeGene):
            raise ArgumentError(f"node_gene must be a NodeGene, got {type(self.node_gene).__name__}")
        if not isinstance(self.conn_gene, ConnectionGene):
            raise ArgumentError(f"conn_gene must be a ConnectionGene, got {type(self.conn_gene).__name__}")
        check_choice(self.initial_connection, "initial_connection", ("full", "partial", "none"))
        check_fraction(self.connection_fraction, "connection_fraction", allow_zero=True)
        if self.max_conns < self.num_initial_rows:
            raise ArgumentError(
                f"max_conns must be >= {self.num_initial_rows}, the links of initial_connection="
                f"{self.initial_connection!r} (hidden_layers={layers}), got {self.max_conns}"
            )

    @property
    def num_io(self) -> int:
        """Rows reserved for input pins and outputs."""
        return self.num_inputs + self.num_outputs

    @property
    def num_hidden(self) -> int:
        """Hidden nodes of an initial genome (``sum(hidden_layers)``)."""
        return sum(self.hidden_layers)

    def initial_links(self) -> tuple[np.ndarray, np.ndarray]:
        """``(in_key, out_key)`` ``int32 [num_initial_conns]``: the candidate initial links in
        innovation order (see the class docstring)."""
        keys = [-1 - np.arange(self.num_inputs)]
        start = self.num_outputs
        for size in self.hidden_layers:
            keys.append(np.arange(start, start + size))
            start += size
        keys.append(np.arange(self.num_outputs))
        pairs = list(zip(keys[:-1], keys[1:]))
        if self.hidden_layers and self.initial_direct:
            pairs.append((keys[0], keys[-1]))
        src = [np.repeat(a, len(b)) for a, b in pairs]
        dst = [np.tile(b, len(a)) for a, b in pairs]
        return np.concatenate(src).astype(np.int32), np.concatenate(dst).astype(np.int32)

    @property
    def num_initial_conns(self) -> int:
        """Candidate initial links; innovation numbers ``0 ..`` this ``- 1`` are theirs (without
        hidden layers: input ``i``, output ``j`` -> ``i * num_outputs + j``), so the global counter
        starts here."""
        sizes = (self.num_inputs, *self.hidden_layers, self.num_outputs)
        links = sum(a * b for a, b in zip(sizes[:-1], sizes[1:]))
        if self.hidden_layers and self.initial_direct:
            links += self.num_inputs * self.num_outputs
        return links

    @property
    def num_initial_rows(self) -> int:
        """Connection rows an initial genome uses: every candidate link (``"full"``), the drawn
        share (``"partial"``) or none."""
        if self.initial_connection == "full":
            return self.num_initial_conns
        if self.initial_connection == "partial":
            return int(round(self.num_initial_conns * self.connection_fraction))
        return 0

    @property
    def first_hidden_key(self) -> int:
        """The global node counter's start (neat-python: hidden keys follow the output keys, then
        the initial hidden nodes')."""
        return self.num_outputs + self.num_hidden

    def check_rows(self, genome: Any, name: str = "genome") -> Genome:
        """``genome`` itself if it is a :class:`Genome` with this spec's ``max_nodes`` node rows and
        ``max_conns`` connection rows (any leading axes); else an :class:`ArgumentError` naming
        ``name``."""
        if not isinstance(genome, Genome):
            raise ArgumentError(f"{name} must be a Genome, got {type(genome).__name__}")
        nodes, conns = genome.node_key.shape[-1:], genome.conn_innov.shape[-1:]
        if nodes != (self.max_nodes,) or conns != (self.max_conns,):
            raise ArgumentError(
                f"{name} has {nodes} node rows / {conns} connection rows; the spec wants "
                f"({self.max_nodes},) / ({self.max_conns},)"
            )
        return genome

    def empty(self, shape: tuple[int, ...] = ()) -> Genome:
        """All-padding genomes ``[*shape, ...]``."""
        N, C = self.max_nodes, self.max_conns
        A, B = self.node_gene.num_floats, self.conn_gene.num_floats
        return Genome(
            node_key=jnp.full((*shape, N), EMPTY, jnp.int32),
            node_attrs=jnp.zeros((*shape, N, A), jnp.float32),
            node_act=jnp.zeros((*shape, N), jnp.int32),
            node_agg=jnp.zeros((*shape, N), jnp.int32),
            conn_in=jnp.full((*shape, C), EMPTY, jnp.int32),
            conn_out=jnp.full((*shape, C), EMPTY, jnp.int32),
            conn_innov=jnp.full((*shape, C), EMPTY, jnp.int32),
            conn_enabled=jnp.zeros((*shape, C), bool),
            conn_attrs=jnp.zeros((*shape, C, B), jnp.float32),
        )

    def initial(self, key: jax.Array, population_size: int) -> Genome:
        """``population_size`` fresh genomes: inputs, outputs and the ``hidden_layers`` nodes,
        connected per ``initial_connection``; attributes drawn from the genes' ``init``. Pure,
        jit-able."""
        n_in, n_out, H, P = self.num_inputs, self.num_outputs, self.num_hidden, population_size
        rows = self.num_io + H
        g = self.empty((P,))
        k_node, k_conn, k_keep = rng.split(key, 3)
        keys = np.concatenate([-1 - np.arange(n_in), np.arange(n_out), n_out + np.arange(H)]).astype(np.int32)
        attrs, act, agg = self.node_gene.init_attrs(k_node, (P, rows))
        pad_n = self.max_nodes - rows
        node_key = jnp.concatenate([jnp.broadcast_to(keys, (P, rows)), g.node_key[:, rows:]], 1)
        # input pins are not node genes: their attributes stay at the padding values
        is_input = (jnp.arange(rows) < n_in)[None, :]
        attrs = jnp.where(is_input[..., None], 0.0, attrs)
        act = jnp.where(is_input, 0, act)
        agg = jnp.where(is_input, 0, agg)
        node_attrs = jnp.pad(attrs, ((0, 0), (0, pad_n), (0, 0)))
        node_act = jnp.pad(act, ((0, 0), (0, pad_n)))
        node_agg = jnp.pad(agg, ((0, 0), (0, pad_n)))
        nodes = g.replace(node_key=node_key, node_attrs=node_attrs, node_act=node_act, node_agg=node_agg)
        L, K = self.num_initial_conns, self.num_initial_rows
        if K == 0:
            return nodes
        src, dst = self.initial_links()
        w = self.conn_gene.init_attrs(k_conn, (P, L))
        if K == L:
            take = lambda v: jnp.broadcast_to(v, (P, L))  # noqa: E731
        else:
            # neat-python's partial_*: exactly round(L * fraction) links, a uniformly random subset,
            # kept in innovation order
            order = jnp.sort(jnp.argsort(rng.uniform(k_keep, (P, L)), axis=1)[:, :K], axis=1)
            take = lambda v: jnp.take_along_axis(jnp.broadcast_to(v, (P, L)), order, 1)  # noqa: E731
            w = jnp.take_along_axis(w, order[..., None], 1)
        innov = np.arange(L, dtype=np.int32)
        return nodes.replace(
            conn_in=nodes.conn_in.at[:, :K].set(take(src)),
            conn_out=nodes.conn_out.at[:, :K].set(take(dst)),
            conn_innov=nodes.conn_innov.at[:, :K].set(take(innov)),
            conn_enabled=nodes.conn_enabled.at[:, :K].set(True),
            conn_attrs=nodes.conn_attrs.at[:, :K].set(w[:, :K]),
        )


def _has_cycle(edges: list[tuple[int, int]]) -> bool:
    graph: dict[int, list[int]] = {}
    for a, b in edges:
        graph.setdefault(a, []).append(b)
    state: dict[int, int] = {}
    for start in graph:
        if state.get(start):
            continue
        stack = [(start, iter(graph.get(start, ())))]
        state[start] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return True
            elif not state.get(nxt):
                state[nxt] = 1
                stack.append((nxt, iter(graph.get(nxt, ()))))
    return False


def check_genome(spec: GenomeSpec, genome: Genome) -> list[str]:
    """Every invariant violated by one genome (arrays ``[N]``, ``[C]``), as messages; ``[]`` if
    valid. Host-side (NumPy), for tests and for checking loaded genomes."""
    g = jax.tree_util.tree_map(np.asarray, genome)
    problems = []
    n_in, n_out = spec.num_inputs, spec.num_outputs
    io = np.concatenate([-1 - np.arange(n_in), np.arange(n_out)])
    if g.node_key.shape != (spec.max_nodes,) or g.conn_innov.shape != (spec.max_conns,):
        return [
            f"shapes {g.node_key.shape}/{g.conn_innov.shape} are not ({spec.max_nodes},)/({spec.max_conns},)"
        ]
    if not np.array_equal(g.node_key[: spec.num_io], io):
        problems.append(
            f"input/output rows hold keys {g.node_key[: spec.num_io].tolist()}, expected {io.tolist()}"
        )
    valid = g.node_key != EMPTY
    keys = g.node_key[valid]
    if len(np.unique(keys)) != len(keys):
        problems.append("duplicate node keys")
    hidden = g.node_key[spec.num_io :][valid[spec.num_io :]]
    if np.any(hidden < n_out):
        problems.append(f"hidden node keys below {n_out}: {hidden[hidden < n_out].tolist()}")
    pad_n = ~valid
    if np.any(g.node_attrs[pad_n] != 0) or np.any(g.node_act[pad_n] != 0) or np.any(g.node_agg[pad_n] != 0):
        problems.append("unused node rows are not padding")
    if np.any(g.node_attrs[:n_in] != 0) or np.any(g.node_act[:n_in] != 0) or np.any(g.node_agg[:n_in] != 0):
        problems.append("input pins carry attributes")
    if not np.all(np.isfinite(g.node_attrs)) or not np.all(np.isfinite(g.conn_attrs)):
        problems.append("non-finite attributes")
    cv = g.conn_innov != EMPTY
    innov = g.conn_innov[cv]
    if np.any(innov < 0):
        problems.append("negative innovation numbers")
    if len(np.unique(innov)) != len(innov):
        problems.append("duplicate innovation numbers")
    if np.any(g.conn_in[~cv] != EMPTY) or np.any(g.conn_out[~cv] != EMPTY) or np.any(g.conn_enabled[~cv]):
        problems.append("unused connection rows are not padding")
    if np.any(g.conn_attrs[~cv] != 0):
        problems.append("unused connection rows carry attributes")
    key_set = set(keys.tolist())
    edges = list(zip(g.conn_in[cv].tolist(), g.conn_out[cv].tolist()))
    for a, b in edges:
        if a not in key_set or b not in key_set:
            problems.append(f"connection {a}->{b} references a missing node")
        if b < 0:
            problems.append(f"connection {a}->{b} ends in an input")
    if len(set(edges)) != len(edges):
        problems.append("duplicate (in, out) connections")
    if spec.feed_forward and _has_cycle(edges):
        problems.append("cycle in a feedforward genome")
    return problems


def genome_to_dict(spec: GenomeSpec, genome: Genome) -> dict[str, Any]:
    """One genome as plain Python: ``{"nodes": {key: {attr: value, "activation": name,
    "aggregation": name}}, "connections": {(in, out): {"innovation": i, "enabled": b, attr: value}}}``;
    input pins are left out (they are not node genes)."""
    g = jax.tree_util.tree_map(np.asarray, genome)
    ng, cg = spec.node_gene, spec.conn_gene
    nodes = {}
    for row in range(spec.max_nodes):
        key = int(g.node_key[row])
        if key == EMPTY or key < 0:
            continue
        nodes[key] = {name: float(g.node_attrs[row, i]) for i, name in enumerate(ng.float_names)}
        nodes[key]["activation"] = ng.activation.options[int(g.node_act[row])]
        nodes[key]["aggregation"] = ng.aggregation.options[int(g.node_agg[row])]
    conns = {}
    for row in range(spec.max_conns):
        if int(g.conn_innov[row]) == EMPTY:
            continue
        gene = {"innovation": int(g.conn_innov[row]), "enabled": bool(g.conn_enabled[row])}
        gene.update({name: float(g.conn_attrs[row, i]) for i, name in enumerate(cg.float_names)})
        conns[(int(g.conn_in[row]), int(g.conn_out[row]))] = gene
    return {"nodes": nodes, "connections": conns}


def _dict_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ArgumentError(f"{where} must be an int, got {value!r}")
    if not -(2**31) <= value < 2**31 - 1:
        raise ArgumentError(f"{where} must fit int32, got {value!r}")
    return int(value)


def _dict_float(gene: dict[str, Any], name: str, default: float, where: str) -> float:
    value = gene.get(name, default)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ArgumentError(f"{where}[{name!r}] must be a number, got {value!r}")
    if not (math.isfinite(float(value)) and abs(float(value)) <= float(np.finfo(np.float32).max)):
        raise ArgumentError(f"{where}[{name!r}] must be a finite float32 number, got {value!r}")
    return float(value)


def _dict_choice(gene: dict[str, Any], attribute: Any, where: str) -> int:
    name = gene.get(attribute.name, attribute.options[0])
    if not isinstance(name, str) or name not in attribute.options:
        raise ArgumentError(f"{where}[{attribute.name!r}] must be one of {attribute.options}, got {name!r}")
    return attribute.options.index(name)


def genome_from_dict(spec: GenomeSpec, data: dict[str, Any]) -> Genome:
    """Inverse of :func:`genome_to_dict` (hidden nodes in ascending key order, connections in
    ascending innovation order); raises :class:`ArgumentError` naming what does not fit: a field
    of the wrong type, a non-finite attribute, an unknown activation, or a genome that breaks an
    invariant of :func:`check_genome` (e.g. a connection to a node that does not exist)."""
    if not isinstance(spec, GenomeSpec):
        raise ArgumentError(f"spec must be a GenomeSpec, got {type(spec).__name__}")
    if not isinstance(data, dict):
        raise ArgumentError(f"data must be a dict with 'nodes' and 'connections', got {type(data).__name__}")
    unknown = sorted(set(data) - {"nodes", "connections"}, key=str)
    if unknown:
        raise ArgumentError(f"data has unknown keys {unknown}; it holds 'nodes' and 'connections'")
    nodes, conns = data.get("nodes", {}), data.get("connections", {})
    for name, value in (("nodes", nodes), ("connections", conns)):
        if not isinstance(value, dict):
            raise ArgumentError(f"data[{name!r}] must be a dict, got {type(value).__name__}")
    ng, cg = spec.node_gene, spec.conn_gene
    g = jax.tree_util.tree_map(np.array, spec.empty())
    n_in = spec.num_inputs
    g.node_key[: spec.num_io] = np.concatenate([-1 - np.arange(n_in), np.arange(spec.num_outputs)])
    keys = [_dict_int(k, f"nodes key {k!r}") for k in nodes]
    hidden = sorted(k for k in keys if k >= spec.num_outputs)
    if spec.num_io + len(hidden) > spec.max_nodes:
        raise ArgumentError(f"genome has {spec.num_io + len(hidden)} nodes but max_nodes is {spec.max_nodes}")
    rows = {k: n_in + k for k in range(spec.num_outputs)}
    rows.update({k: spec.num_io + i for i, k in enumerate(hidden)})
    for key, gene in nodes.items():
        if key not in rows:
            raise ArgumentError(f"nodes[{key}]: not an output or hidden key")
        if not isinstance(gene, dict):
            raise ArgumentError(f"nodes[{key}] must be a dict of attributes, got {type(gene).__name__}")
        r = rows[key]
        g.node_key[r] = key
        for i, name in enumerate(ng.float_names):
            g.node_attrs[r, i] = _dict_float(gene, name, ng.floats[i].init_mean, f"nodes[{key}]")
        g.node_act[r] = _dict_choice(gene, ng.activation, f"nodes[{key}]")
        g.node_agg[r] = _dict_choice(gene, ng.aggregation, f"nodes[{key}]")
    for pair, gene in conns.items():
        if not (isinstance(pair, tuple) and len(pair) == 2):
            raise ArgumentError(f"connections key {pair!r} must be an (in, out) pair of node keys")
        if not isinstance(gene, dict):
            raise ArgumentError(
                f"connections[{pair}] must be a dict of attributes, got {type(gene).__name__}"
            )
        if "innovation" not in gene:
            raise ArgumentError(f"connections[{pair}] has no 'innovation'")
        _dict_int(gene["innovation"], f"connections[{pair}]['innovation']")
        if not isinstance(gene.get("enabled", True), (bool, np.bool_)):
            raise ArgumentError(f"connections[{pair}]['enabled'] must be a bool, got {gene['enabled']!r}")
    conns = sorted(conns.items(), key=lambda kv: kv[1]["innovation"])
    if len(conns) > spec.max_conns:
        raise ArgumentError(f"genome has {len(conns)} connections but max_conns is {spec.max_conns}")
    for r, ((a, b), gene) in enumerate(conns):
        where = f"connections[{(a, b)}]"
        g.conn_in[r], g.conn_out[r] = _dict_int(a, f"{where} in"), _dict_int(b, f"{where} out")
        g.conn_innov[r] = gene["innovation"]
        g.conn_enabled[r] = bool(gene.get("enabled", True))
        for i, name in enumerate(cg.float_names):
            g.conn_attrs[r, i] = _dict_float(gene, name, cg.floats[i].init_mean, where)
    problems = check_genome(spec, g)
    if problems:
        raise ArgumentError(f"data is not a valid genome: {'; '.join(problems[:3])}")
    return jax.tree_util.tree_map(jnp.asarray, g)
