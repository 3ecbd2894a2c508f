"""Genome -> network (phenotype) and the compiled forward passes: feedforward, recurrent (state
kept between calls) and CTRNN.

:func:`transform` runs once per genome per generation (``vmap`` it over a population, or pass a
population: leading axes are mapped for you). It turns the genome's tables into a :class:`Network`:

* the **enabled edges** as an edge list: source and destination *row* indices (keys resolved in
  one sorted node table, :class:`~evotensor.neat.distance.SortedTable`), weights from
  ``spec.conn_gene.weight``, sorted by destination (so every aggregation is a segment reduction
  over sorted ids, deterministic on every device);
* for feedforward specs, each node's **level**: the longest path from a node without enabled
  inputs (input pins, bias nodes, orphans all have level 0), computed by relaxing
  ``level[dst] = max(level[src] + 1)`` with one segment-max over the edges per round, so the cost
  is ``O(depth * max_conns)``, never ``max_nodes^2`` sequential steps; and the **max depth**;
* for the dense path (small networks on an accelerator, :func:`resolve_method`), an ``[N, N]``
  weight matrix and adjacency.

For a population on a CPU, :meth:`FeedForwardPolicy.decode` also builds :class:`CompactRows`: the
non-input nodes renumbered in topological order as dense rows over ``num_inputs + W`` columns, so
that a batch of networks that all have at most ``W`` non-input nodes (:data:`COMPACT_WIDTHS`) runs
one slot at a time with static, triangular sums instead of every edge slot per level
(:meth:`FeedForwardPolicy.batch_paths`; the chunked control rollout picks the width per chunk).

Nodes that cannot reach an output are **not pruned**: every valid node is computed. The outputs
are still exactly neat-python's, because a node that cannot reach an output never feeds one that
can (pruning would only shorten the level loop when a dangling chain is the deepest one).

Semantics (neat-python 2.1 by default):

* a node's value is ``spec.node_gene.node_output(attrs, act, agg(w_i * x_i))``, by default
  ``act(bias + response * agg(...))``, on output nodes too. ``OutputMode.tensorneat(transform)``
  skips the activation on output nodes and applies ``transform`` to the output vector instead
  (TensorNEAT's ``output_transform``).
* **feedforward** (:func:`forward`): nodes without enabled inputs (bias neurons, orphan outputs)
  get ``node_output(agg(empty))`` (empty ``sum`` is 0, ``product`` 1, ...), then one level at a
  time: one gather + segment reduction over the edge list + activation (``method="sparse"``) or
  one masked matrix-vector product (``method="dense"``); the loop runs to the network's real
  max depth.
* **recurrent** (:func:`step`, neat-python's ``RecurrentNetwork.activate``): one synchronous
  update: inputs are written, then every node *with at least one enabled input* takes
  ``node_output`` of the previous values; nodes without inputs keep their state (0 from
  :func:`init_state`: neat-python never evaluates them). State is kept between calls (TensorNEAT
  resets it; :func:`forward_recurrent` does that, from zeros: TensorNEAT starts from NaN and skips
  inputs that are still NaN, which we do not copy).
* **CTRNN** (:func:`ctrnn_step`, :func:`ctrnn_advance`, neat-python's ``CTRNN.advance``):
  exponential Euler, ``y <- d y + (1 - d) node_output(...)`` with ``d = exp(-dt / time_constant)``
  for the nodes with inputs.

Numerics: node values are kept in the finite float32 range (``+-inf`` becomes ``+-FLT_MAX``, NaN
stays NaN), so that the dense path's ``0 * value`` for a missing edge never turns into NaN; this
only matters where float32 overflows.

Example (a population)::

    nets = transform(spec, population)                   # Network with leading [pop]
    y = jax.vmap(lambda n: forward(spec, n, x))(nets)    # [pop, num_outputs]
    Y = jax.vmap(lambda n: forward_batch(spec, n, X))(nets)  # [pop, B, num_outputs]
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from evotensor.core.checks import ArgumentError, check_choice, check_int, check_positive
from evotensor.core.pytree import pytree_dataclass
from evotensor.neat.activations import (
    FunctionSet,
    aggregation_empty,
    apply_activation,
    apply_aggregation,
    function_set,
)
from evotensor.neat.distance import endpoint_lookup
from evotensor.neat.genome import EMPTY, Genome, GenomeSpec

__all__ = [
    "DENSE_MAX_NODES",
    "COMPACT_WIDTHS",
    "CTRNNPolicy",
    "CompactRows",
    "FeedForwardPolicy",
    "Network",
    "OutputMode",
    "RecurrentPolicy",
    "ctrnn_advance",
    "ctrnn_step",
    "compact_rows",
    "ctrnn_time_steps",
    "forward",
    "forward_batch",
    "forward_recurrent",
    "init_state",
    "neat_policy",
    "resolve_method",
    "step",
    "transform",
]

DENSE_MAX_NODES = 32
"""``method="auto"`` builds the dense ``[N, N]`` form on an accelerator when ``spec.max_nodes`` is
at most this (on a CPU only where the edge list is much longer, see :func:`resolve_method`)."""

# a gathered + scattered edge of the sparse forward costs roughly this many multiply-adds of the
# dense one on a CPU (results_neat.md, session 15; rounded down: near the break-even the dense
# form, the earlier default, stays)
_CPU_EDGE_COST = 8
_FMAX = float(np.finfo(np.float32).max)
_METHODS = ("auto", "sparse", "dense")


@pytree_dataclass
class Network:
    """A genome's phenotype (arrays ``[N]``/``[C]``, or with leading population axes).

    ``N = spec.max_nodes`` rows in the genome's row order (inputs ``0 .. num_inputs - 1``, outputs
    next); ``C = spec.max_conns`` edge slots, the enabled edges first, sorted by destination.

    Fields:
        node_attrs: ``float32 [N, A]`` the node gene's float attributes.
        node_act, node_agg: ``int32 [N]`` activation / aggregation option ids.
        node_valid: ``bool [N]`` the row holds a node (input pins included).
        in_degree: ``int32 [N]`` enabled incoming edges.
        level: ``int32 [N]`` feedforward level (0: inputs and nodes without enabled inputs; -1:
            unused rows); all 0 for recurrent specs.
        max_depth: ``int32 []`` the largest level.
        edge_src, edge_dst: ``int32 [C]`` source / destination rows; ``edge_dst == N`` marks an
            unused slot (its source is row 0, its weight 0).
        edge_weight: ``float32 [C]``.
        dense_weight: ``float32 [N, N]`` (destination, source) weights, or ``None`` (sparse path).
        dense_adj: ``bool [N, N]`` which entries of ``dense_weight`` are edges, or ``None``.
        compact: the :class:`CompactRows` of the network (``FeedForwardPolicy.decode`` adds them
            on a CPU for :meth:`FeedForwardPolicy.batched`), or ``None``.
    """

    node_attrs: jax.Array
    node_act: jax.Array
    node_agg: jax.Array
    node_valid: jax.Array
    in_degree: jax.Array
    level: jax.Array
    max_depth: jax.Array
    edge_src: jax.Array
    edge_dst: jax.Array
    edge_weight: jax.Array
    dense_weight: jax.Array | None = None
    dense_adj: jax.Array | None = None
    compact: CompactRows | None = None

    @property
    def num_edges(self) -> jax.Array:
        """``int32 [...]``: enabled edges."""
        return jnp.sum(self.edge_dst < self.node_valid.shape[-1], axis=-1, dtype=jnp.int32)

    def __getitem__(self, index: Any) -> Network:
        """Select networks along the leading (population) axes."""
        return jax.tree_util.tree_map(lambda x: x[index], self)


COMPACT_WIDTHS = (3, 6)
"""Compact widths (non-input nodes, :class:`CompactRows`), narrowest first: the paths of
:meth:`FeedForwardPolicy.batch_paths` before the per-network forward pass. A path's cost grows with
the square of its width (at width 10 it was still faster than the edge list, 64 edge slots, on the
CPU; at 16 no longer), and each path is compiled: two widths were both quicker to compile and, on
NEAT's CartPole, no slower per generation than four (``benchmarks/results_neat.md``, session 16)."""


@pytree_dataclass
class CompactRows:
    """A feedforward network's non-input nodes renumbered in topological order, as dense rows over
    a few columns (arrays ``[H, ...]`` with ``H = max(COMPACT_WIDTHS)``, or with leading population
    axes), made once per generation by :func:`compact_rows`.

    Column ``j < I`` (``I = spec.num_inputs``) is input ``j``; column ``I + h`` is slot ``h``: the
    ``h``-th valid non-input node sorted by (level, row), so a slot only reads earlier columns.

    Fields:
        row: ``int32 [H]`` the node row of slot ``h`` (``N`` past the last node).
        weight: ``float32 [H, I + H]`` (slot, column) edge weights.
        adj: ``bool [H, I + H]`` which entries of ``weight`` are edges.
        out: ``int32 [O]`` the slot of each output node.
        size: ``int32 []`` valid non-input nodes: the network fits width ``W`` iff ``size <= W``.
    """

    row: jax.Array
    weight: jax.Array
    adj: jax.Array
    out: jax.Array
    size: jax.Array


@dataclasses.dataclass(frozen=True)
class OutputMode:
    """How output nodes are finished.

    ``activate=True`` (neat-python, the default): output nodes apply their own activation like
    every node. ``activate=False`` (TensorNEAT): output nodes skip the activation (their value,
    also as seen by nodes they feed, is ``node_output`` with the identity); then ``transform``
    (``[num_outputs] -> [...]``, e.g. ``jnp.tanh`` or a softmax), if given, maps the returned
    output vector.
    """

    activate: bool = True
    transform: Callable[[jax.Array], jax.Array] | None = None

    def __post_init__(self):
        if not isinstance(self.activate, bool):
            raise ArgumentError(f"OutputMode.activate must be a bool, got {self.activate!r}")
        if self.transform is not None and not callable(self.transform):
            raise ArgumentError(f"OutputMode.transform must be callable or None, got {self.transform!r}")

    @classmethod
    def neat_python(cls) -> OutputMode:
        """Activation on outputs, no transform."""
        return cls()

    @classmethod
    def tensorneat(cls, transform: Callable[[jax.Array], jax.Array] | None = None) -> OutputMode:
        """No activation on outputs, then ``transform`` on the output vector."""
        return cls(False, transform)


def _check_spec(spec: Any) -> GenomeSpec:
    if not isinstance(spec, GenomeSpec):
        raise ArgumentError(f"spec must be a GenomeSpec, got {type(spec).__name__}")
    return spec


def _output_mode(outputs: OutputMode | None) -> OutputMode:
    if outputs is None:
        return OutputMode()
    if not isinstance(outputs, OutputMode):
        raise ArgumentError(f"outputs must be an OutputMode or None, got {outputs!r}")
    return outputs


def resolve_method(spec: GenomeSpec, method: str = "auto", platform: str | None = None) -> str:
    """``"sparse"`` or ``"dense"``: ``method`` itself, or for ``"auto"`` dense on an accelerator when
    ``spec.max_nodes <= DENSE_MAX_NODES``, else sparse.

    ``platform``: the backend the networks run on (default ``jax.default_backend()``). On a CPU a
    level costs ``max_conns`` gathered and scattered edges on the edge list against ``max_nodes^2``
    multiply-adds in the dense form, and an edge costs several multiply-adds, so there ``"auto"`` is
    dense only where also ``max_nodes^2 <= 8 max_conns``: at NEAT's usual ``(32, 64)`` rows the edge
    list is the faster one (benchmarks/results_neat.md, sessions 6 and 15). Both give the same
    outputs to float32 rounding (the sums add in a different order)."""
    check_choice(method, "method", _METHODS)
    if method == "auto":
        platform = jax.default_backend() if platform is None else platform
        small = spec.max_nodes <= DENSE_MAX_NODES
        if platform == "cpu":
            small = small and spec.max_nodes**2 <= _CPU_EDGE_COST * spec.max_conns
        return "dense" if small else "sparse"
    return method


def _levels(valid: jax.Array, src: jax.Array, dst: jax.Array, n: int) -> jax.Array:
    """Longest-path level of every node (0 without enabled inputs, -1 for unused rows): rounds of
    ``level[dst] = max(level[dst], level[src] + 1)`` until nothing changes (at most ``n`` rounds,
    which also stops a cycle in an invalid feedforward genome)."""
    lvl0 = jnp.where(valid, 0, -1).astype(jnp.int32)

    def cond(carry):
        _, changed, it = carry
        return changed & (it < n)

    def body(carry):
        lvl, _, it = carry
        cand = jax.ops.segment_max(lvl[src] + 1, dst, n + 1, indices_are_sorted=True)[:n]
        new = jnp.where(valid, jnp.maximum(lvl, cand), -1)
        return new, jnp.any(new != lvl), it + 1

    lvl, _, _ = jax.lax.while_loop(cond, body, (lvl0, jnp.ones((), bool), jnp.zeros((), jnp.int32)))
    return lvl


# edge columns per chunk of :func:`_levels_population`
_EDGE_CHUNK = 8


def _levels_population(valid: jax.Array, src: jax.Array, dst: jax.Array, n: int) -> jax.Array:
    """:func:`_levels` of a whole population at once (``valid [P, n]``, edges ``[P, C]`` sorted with
    the live ones first, ``dst = n`` for the others): the same rounds, each one max-scatter per chunk
    of ``_EDGE_CHUNK`` edge columns, only up to the last live edge of any genome (genomes use few of
    their rows). A round reads the levels of the previous one, as :func:`_levels` does; a genome
    that has converged stays unchanged in later rounds."""
    P, C = src.shape
    W = min(_EDGE_CHUNK, C)
    base = (jnp.arange(P, dtype=jnp.int32) * (n + 1))[:, None]
    flat_src, flat_dst = src + base, dst + base  # row n of each genome: the dead edges' sink
    used = jnp.max(jnp.where(dst < n, jnp.arange(C, dtype=jnp.int32), -1)) + 1
    lvl0 = jnp.where(valid, 0, -1).astype(jnp.int32)
    lowest = jnp.iinfo(jnp.int32).min  # segment_max's value for a node without edges

    def cond(carry):
        _, changed, it = carry
        return changed & (it < n)

    def body(carry):
        lvl, _, it = carry
        flat = jnp.concatenate([lvl, jnp.zeros((P, 1), jnp.int32)], axis=1).reshape(-1)

        def chunk(j, cand):
            start = jnp.minimum(j * W, C - W)
            s = lax.dynamic_slice_in_dim(flat_src, start, W, axis=1)
            d = lax.dynamic_slice_in_dim(flat_dst, start, W, axis=1)
            return cand.at[d].max(flat[s] + 1)

        cand = lax.fori_loop(0, (used + W - 1) // W, chunk, jnp.full((P * (n + 1),), lowest, jnp.int32))
        new = jnp.where(valid, jnp.maximum(lvl, cand.reshape(P, n + 1)[:, :n]), -1)
        return new, jnp.any(new != lvl), it + 1

    lvl, _, _ = lax.while_loop(cond, body, (lvl0, jnp.ones((), bool), jnp.zeros((), jnp.int32)))
    return lvl


def transform(spec: GenomeSpec, genome: Genome, method: str = "auto") -> Network:
    """The :class:`Network` of a genome (or of a population: leading axes are vmapped).

    Args:
        spec: the genome spec.
        genome: one genome (``node_key [N]``...) or a population (``[pop, N]``...).
        method: ``"sparse"`` (edge list only), ``"dense"`` (also the ``[N, N]`` matrices; the
            forward functions then use them) or ``"auto"`` (:func:`resolve_method`).

    Returns:
        A :class:`Network` with the genome's leading axes. Pure and jit-able; cost
        ``O((N + C) log(N + C) + depth * C)`` (plus ``N^2`` for the dense form).
    """
    spec = _check_spec(spec)
    dense = resolve_method(spec, method) == "dense"
    spec.check_rows(genome)
    if genome.node_key.ndim > 2:
        return jax.vmap(lambda g: transform(spec, g, "dense" if dense else "sparse"))(genome)
    # both endpoint columns looked up in one sorted node table per genome (for a population only
    # the connection rows some genome uses)
    ends = endpoint_lookup(genome)
    if genome.node_key.ndim == 1:
        return _transform_one(spec, genome, dense, ends, spec.feed_forward)
    net = jax.vmap(lambda g, e: _transform_one(spec, g, dense, e, False))(genome, ends)
    if not spec.feed_forward:
        return net
    level = _levels_population(net.node_valid, net.edge_src, net.edge_dst, spec.max_nodes)
    return net.replace(level=level, max_depth=jnp.maximum(jnp.max(level, axis=1), 0).astype(jnp.int32))


def _transform_one(spec: GenomeSpec, g: Genome, dense: bool, ends, levels: bool) -> Network:
    """One genome's network; ``levels=False`` leaves the levels at 0 (a population's are computed
    together, :func:`_levels_population`)."""
    n, C = spec.max_nodes, spec.max_conns
    valid = g.node_key != EMPTY
    src_row, dst_row, src_ok, dst_ok = ends
    active = (g.conn_innov != EMPTY) & g.conn_enabled & src_ok & dst_ok & (dst_row >= spec.num_inputs)
    key = jnp.where(active, dst_row, n).astype(jnp.int32)
    if (n + 1) * C <= np.iinfo(np.int32).max:
        # a stable argsort as a one-operand sort of (key, row) packed into one int32 (a CPU sorts
        # one operand several times faster than a key with an index riding along)
        packed = jax.lax.sort(key * C + jnp.arange(C, dtype=jnp.int32))
        perm, edge_dst = packed % C, packed // C
    else:
        perm = jnp.argsort(key, stable=True)
        edge_dst = key[perm]
    live = edge_dst < n
    edge_src = jnp.where(live, src_row[perm], 0).astype(jnp.int32)
    weight = spec.conn_gene.weight(g.conn_attrs).astype(jnp.float32)
    edge_weight = jnp.where(live, weight[perm], 0.0)
    in_degree = jax.ops.segment_sum(live.astype(jnp.int32), edge_dst, n + 1, indices_are_sorted=True)[:n]
    if levels:
        level = _levels(valid, edge_src, edge_dst, n)
    else:
        level = jnp.where(valid, 0, -1).astype(jnp.int32)
    net = Network(
        node_attrs=g.node_attrs.astype(jnp.float32),
        node_act=g.node_act.astype(jnp.int32),
        node_agg=g.node_agg.astype(jnp.int32),
        node_valid=valid,
        in_degree=in_degree.astype(jnp.int32),
        level=level,
        max_depth=jnp.maximum(jnp.max(level), 0).astype(jnp.int32),
        edge_src=edge_src,
        edge_dst=edge_dst,
        edge_weight=edge_weight,
    )
    if dense:
        w = jnp.zeros((n + 1, n), jnp.float32).at[edge_dst, edge_src].add(edge_weight)[:n]
        adj = jnp.zeros((n + 1, n), bool).at[edge_dst, edge_src].set(True)[:n]
        net = net.replace(dense_weight=w, dense_adj=adj)
    return net


def compact_rows(spec: GenomeSpec, network: Network) -> CompactRows:
    """The :class:`CompactRows` of a feedforward network (or of a population: leading axes are
    vmapped), from :func:`transform`'s edge list and levels.

    Returns ``CompactRows`` with ``H = max(COMPACT_WIDTHS)`` slots; a network with more valid
    non-input nodes keeps its first ``H`` (``size`` says it does not fit). Cost ``O(N log N + C)``.
    """
    spec = _check_spec(spec)
    if not spec.feed_forward:
        raise ArgumentError("compact_rows needs spec.feed_forward=True")
    if not isinstance(network, Network):
        raise ArgumentError(f"network must be a Network (from transform), got {type(network).__name__}")
    if network.node_valid.ndim > 1:
        return jax.vmap(lambda n: compact_rows(spec, n))(network)
    n, inputs, H = spec.max_nodes, spec.num_inputs, max(COMPACT_WIDTHS)
    rows = jnp.arange(n, dtype=jnp.int32)
    hidden = network.node_valid & (rows >= inputs)
    # (level, row) packed into one sort key; rows that get no slot sort last
    order = jnp.sort(jnp.where(hidden, network.level * n + rows, n * (n + 1))) % n
    size = jnp.sum(hidden, dtype=jnp.int32)
    slots = jnp.arange(H, dtype=jnp.int32)
    slot_row = jnp.where(slots < size, order[:H] if n >= H else jnp.pad(order, (0, H - n)), n)
    # column of every row (the dump column I + H for rows without a slot)
    col = jnp.where(rows < inputs, rows, inputs + H)
    col = jnp.concatenate([col, jnp.full((1,), inputs + H, jnp.int32)])
    col = col.at[slot_row].set(inputs + slots, mode="drop")
    live = network.edge_dst < n
    dst = jnp.where(live, col[network.edge_dst] - inputs, H)
    src = jnp.where(live, col[network.edge_src], inputs + H)
    weight = jnp.zeros((H + 1, inputs + H + 1), jnp.float32).at[dst, src].add(network.edge_weight)
    adj = jnp.zeros((H + 1, inputs + H + 1), bool).at[dst, src].set(live)
    out = col[inputs : spec.num_io] - inputs
    return CompactRows(
        row=slot_row, weight=weight[:H, : inputs + H], adj=adj[:H, : inputs + H], out=out, size=size
    )


def compact_supported(spec: GenomeSpec, functions: str | FunctionSet | None = None) -> bool:
    """Whether :class:`CompactRows` can run ``spec``'s networks: feedforward, and every aggregation
    option a function of the sum and the count (``sum``, ``mean``)."""
    spec, fs = _check_spec(spec), function_set(functions)
    return spec.feed_forward and all(
        fs.aggregation(name).from_sum is not None for name in spec.node_gene.aggregation.options
    )


def _compact_forward(
    spec: GenomeSpec, fs: FunctionSet, outputs: OutputMode, nets: Network, x: jax.Array, width: int
) -> jax.Array:
    """``y [B, K, num_outputs]`` of networks ``[K]`` (all of ``compact.size <= width``) on inputs
    ``x [B, K, num_inputs]``: one slot at a time in topological order, each a weighted sum over the
    earlier columns (static: ``I + h`` columns for slot ``h``) and the node update. Every value is
    a ``[B, K]`` array: the networks on the minor axis, so that a network's weight is broadcast
    along contiguous lanes (with ``[K, B]`` and a few episodes ``B`` per network, XLA:CPU's loops
    did not vectorize: ``benchmarks/results_neat.md``, session 21)."""
    c = nets.compact
    inputs, n = spec.num_inputs, spec.max_nodes
    ng = spec.node_gene
    aggs = [fs.aggregation(name) for name in ng.aggregation.options]
    rows = c.row[:, :width]
    safe = jnp.minimum(rows, n - 1)  # [K, W]
    attrs = jnp.take_along_axis(nets.node_attrs, safe[..., None], axis=1)  # [K, W, A]
    act_id = jnp.take_along_axis(nets.node_act, safe, axis=1)
    agg_id = jnp.take_along_axis(nets.node_agg, safe, axis=1)
    count = jnp.take_along_axis(nets.in_degree, safe, axis=1).astype(jnp.float32)
    is_out = (rows >= inputs) & (rows < spec.num_io)
    weight, adj = c.weight, c.adj
    cols = [_clamp(x[..., j]) for j in range(inputs)]
    for h in range(width):
        total = None
        for j in range(inputs + h):
            term = jnp.where(adj[:, h, j], weight[:, h, j] * cols[j], 0.0)
            total = term if total is None else total + term
        cnt, empty = count[:, h], count[:, h] == 0
        z = None
        for k, agg in enumerate(aggs):
            val = jnp.where(empty, jnp.asarray(agg.empty, jnp.float32), agg.from_sum(total, cnt))
            z = val if z is None else jnp.where(agg_id[:, h] == k, val, z)
        act = _activation(spec, fs, act_id[:, h], is_out[:, h], outputs)
        cols.append(_clamp(ng.node_output(attrs[:, h, :], act, z)))
    ys = []
    for o in range(spec.num_outputs):
        y = None
        for h in range(width):
            y = jnp.where(c.out[:, o] == h, cols[inputs + h], 0.0 if y is None else y)
        ys.append(y)
    y = jnp.stack(ys, axis=-1)
    return y if outputs.transform is None else jax.vmap(jax.vmap(outputs.transform))(y)


# ---------------------------------------------------------------------------------------------
# one aggregation + node update, shared by every forward pass


def _clamp(v: jax.Array) -> jax.Array:
    return jnp.clip(v, -_FMAX, _FMAX)


def _bit_words(mask: jax.Array) -> jax.Array:
    """``uint32 [..., ceil(n / 32)]``: the bool ``mask [..., n]`` packed 32 entries to a word."""
    n = mask.shape[-1]
    words = -(-n // 32)
    padded = jnp.pad(mask, [(0, 0)] * (mask.ndim - 1) + [(0, words * 32 - n)])
    bits = jnp.left_shift(jnp.uint32(1), jnp.arange(32, dtype=jnp.uint32))
    packed = jnp.where(padded.reshape(*mask.shape[:-1], words, 32), bits, jnp.uint32(0))
    return jnp.sum(packed, axis=-1, dtype=jnp.uint32)  # distinct bits: the sum is their OR


def _any_edge_from(adj: jax.Array, mask: jax.Array) -> jax.Array:
    """``bool [N]``: whether node ``i`` has an edge (``adj [N, N]``, destination x source) from a
    node where ``mask [N]``; bit words instead of an ``[N, N]`` product (a second matmul per level
    cost as much as the weighted sum itself)."""
    return jnp.any((_bit_words(adj) & _bit_words(mask)[None, :]) != 0, axis=-1)


def _aggregate(spec: GenomeSpec, fs: FunctionSet, net: Network, v: jax.Array) -> jax.Array:
    """``[N]``: every node's aggregated weighted input, from node values ``v [N]``."""
    options = spec.node_gene.aggregation.options
    if net.dense_weight is None:
        contrib = net.edge_weight * v[net.edge_src]
        return apply_aggregation(fs, options, net.node_agg, contrib, net.edge_dst, net.in_degree)
    aggs = [fs.aggregation(name) for name in options]
    w, adj = net.dense_weight, net.dense_adj
    count = net.in_degree.astype(jnp.float32)
    total = None
    if any(a.from_sum is not None for a in aggs):
        nan = jnp.isnan(v)
        total = jnp.matmul(w, jnp.where(nan, 0.0, v), precision=jax.lax.Precision.HIGHEST)
        total = jnp.where(_any_edge_from(adj, nan), jnp.nan, total)
    contrib = None
    empty = net.in_degree == 0
    out = None
    seen: dict[int, jax.Array] = {}
    for k, agg in enumerate(aggs):
        val = seen.get(id(agg))
        if val is None:
            if agg.from_sum is not None:
                raw = agg.from_sum(total, count)
            else:
                if contrib is None:
                    contrib = w * v[None, :]
                raw = agg.dense_reduce(contrib, adj)
            val = seen[id(agg)] = jnp.where(empty, jnp.asarray(agg.empty, jnp.float32), raw)
        out = val if out is None else jnp.where(net.node_agg == k, val, out)
    return out


def _node_values(
    spec: GenomeSpec, fs: FunctionSet, net: Network, agg: jax.Array, outputs: OutputMode
) -> jax.Array:
    """``[N]``: ``node_gene.node_output`` of every node from its aggregate ``agg [N]``."""
    rows = jnp.arange(spec.max_nodes)
    is_out = (rows >= spec.num_inputs) & (rows < spec.num_io)
    act = _activation(spec, fs, net.node_act, is_out, outputs)
    return spec.node_gene.node_output(net.node_attrs, act, agg)


def _activation(
    spec: GenomeSpec, fs: FunctionSet, ids: jax.Array, is_out: jax.Array, outputs: OutputMode
) -> Callable[[jax.Array], jax.Array]:
    """``act(z)``: each node's activation (by id ``ids``), output nodes (``is_out``) left
    unactivated where ``outputs`` says so (TensorNEAT's output mode)."""
    options = spec.node_gene.activation.options
    if outputs.activate:
        return lambda z: apply_activation(fs, options, ids, z)
    return lambda z: jnp.where(is_out, z, apply_activation(fs, options, ids, z))


def _finish(spec: GenomeSpec, v: jax.Array, outputs: OutputMode) -> jax.Array:
    y = v[spec.num_inputs : spec.num_io]
    return y if outputs.transform is None else outputs.transform(y)


def _real_input(x: Any) -> jax.Array:
    """``x`` as a float32 array; an :class:`ArgumentError` naming ``x`` if it is not real numbers."""
    if isinstance(x, (str, bytes)) or x is None:
        raise ArgumentError(f"x must be an array of numbers, got {x!r}")
    try:
        out = jnp.asarray(x)
    except (TypeError, ValueError) as err:
        raise ArgumentError(f"x must be an array of numbers, got {x!r}") from err
    if not (jnp.issubdtype(out.dtype, jnp.number) or out.dtype == jnp.bool_) or jnp.issubdtype(
        out.dtype, jnp.complexfloating
    ):
        raise ArgumentError(f"x must be an array of real numbers, got dtype {out.dtype}")
    return out.astype(jnp.float32)


def _with_inputs(spec: GenomeSpec, v: jax.Array, x: jax.Array) -> jax.Array:
    x = _real_input(x)
    if x.shape != (spec.num_inputs,):
        raise ArgumentError(f"x must have shape ({spec.num_inputs},), got {x.shape}; vmap for batches")
    return v.at[: spec.num_inputs].set(_clamp(x))


def _setup(spec, network, functions, outputs):
    spec = _check_spec(spec)
    if not isinstance(network, Network):
        raise ArgumentError(f"network must be a Network (from transform), got {type(network).__name__}")
    if network.node_valid.ndim != 1:
        raise ArgumentError(
            f"network has leading axes {network.node_valid.shape[:-1]}; vmap over the population"
        )
    fs = function_set(functions)
    fs.check_options(spec.node_gene.activation.options, spec.node_gene.aggregation.options)
    return spec, fs, _output_mode(outputs)


# ---------------------------------------------------------------------------------------------
# feedforward


def forward(
    spec: GenomeSpec,
    network: Network,
    x: jax.Array,
    *,
    functions: str | FunctionSet | None = None,
    outputs: OutputMode | None = None,
) -> jax.Array:
    """Feedforward evaluation of one network: ``x [num_inputs] -> y [num_outputs]``.

    Level by level (a loop to the network's ``max_depth``): each level one aggregation over the
    edge list (or one masked ``[N, N]`` product on the dense form) and the node update for the
    nodes of that level. ``vmap`` it over samples and/or a population of networks. Differentiable
    in reverse mode (``jax.grad``; with respect to the network's float leaves and ``x``, by a rule
    of its own, :mod:`evotensor.neat.gradient` builds on it), not in forward mode (``jax.jvp``).

    Args:
        spec: the genome spec (``feed_forward`` genomes; a cyclic genome gives unspecified values).
        network: from :func:`transform`, arrays ``[N]`` (one genome).
        x: ``float32 [num_inputs]``.
        functions: scheme name or :class:`~evotensor.neat.activations.FunctionSet` resolving the
            node gene's option names (default neat-python).
        outputs: :class:`OutputMode` (default neat-python's).

    Returns:
        ``float32 [num_outputs]`` (or the shape ``outputs.transform`` returns).
    """
    spec, fs, outputs = _setup(spec, network, functions, outputs)
    if not spec.feed_forward:
        raise ArgumentError("forward needs spec.feed_forward=True; use step (recurrent) or ctrnn_advance")
    x = _real_input(x)
    if x.shape != (spec.num_inputs,):
        raise ArgumentError(f"x must have shape ({spec.num_inputs},), got {x.shape}; vmap for batches")
    return _finish(spec, _feedforward_values(spec, fs, outputs, network, x), outputs)


def _update_all(spec: GenomeSpec, fs: FunctionSet, outputs: OutputMode, net: Network, v, x) -> jax.Array:
    """``[N]``: every valid non-input node's value computed from the node values ``v``, inputs set to
    ``x``, unused rows 0. A feedforward network's values are its fixed point (each node reads final
    values of lower levels), and a level of :func:`_feedforward_values` is this map on that level."""
    is_input = jnp.arange(spec.max_nodes) < spec.num_inputs
    new = _clamp(_node_values(spec, fs, net, _aggregate(spec, fs, net, v), outputs))
    return jnp.where(net.node_valid & ~is_input, new, 0.0).at[: spec.num_inputs].set(_clamp(x))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2))
def _feedforward_values(spec: GenomeSpec, fs: FunctionSet, outputs: OutputMode, net: Network, x) -> jax.Array:
    """``float32 [N]``: every node's value, level by level (a loop to ``net.max_depth``)."""
    n = spec.max_nodes
    is_input = jnp.arange(n) < spec.num_inputs
    # nodes without enabled inputs (level 0, not inputs): node_output of the empty aggregation
    empty = aggregation_empty(fs, spec.node_gene.aggregation.options, net.node_agg)
    base = _clamp(_node_values(spec, fs, net, empty, outputs))
    v = jnp.where(net.node_valid & ~is_input, base, 0.0)
    v = v.at[: spec.num_inputs].set(_clamp(x))

    def body(level, v):
        new = _clamp(_node_values(spec, fs, net, _aggregate(spec, fs, net, v), outputs))
        return jnp.where(net.level == level, new, v)

    return jax.lax.fori_loop(1, net.max_depth + 1, body, v)


def _feedforward_fwd(spec, fs, outputs, net, x):
    v = _feedforward_values(spec, fs, outputs, net, x)
    return v, (net, x, v)


def _feedforward_bwd(spec, fs, outputs, residuals, v_bar):
    """Reverse mode through the level loop (whose trip count is data: ``lax.fori_loop`` over it has
    no transpose) by the fixed point ``v = F(v)`` of :func:`_update_all`: the Jacobian ``J`` of
    ``F`` in ``v`` is nilpotent on a DAG (``J^(d + 1) = 0`` at max depth ``d``), so ``w = v_bar +
    J^T w`` is exact after ``d`` rounds, each one VJP of ``F`` (the cost of one level); then one VJP
    of ``F`` in the float leaves of the network and in ``x`` gives their cotangents."""
    net, x, v = residuals
    _, in_values = jax.vjp(lambda u: _update_all(spec, fs, outputs, net, u, x), v)
    w = jax.lax.fori_loop(0, net.max_depth, lambda _, w: v_bar + in_values(w)[0], v_bar)
    names = ("node_attrs", "edge_weight", "dense_weight")
    floats = {k: getattr(net, k) for k in names if getattr(net, k) is not None}
    _, in_params = jax.vjp(lambda p, x: _update_all(spec, fs, outputs, net.replace(**p), v, x), floats, x)
    floats_bar, x_bar = in_params(w)
    # no cotangent for the integer and boolean leaves, nor for the compact rows (not read here)
    zero = jax.tree_util.tree_map(
        lambda a: jnp.zeros_like(a) if jnp.issubdtype(a.dtype, jnp.floating) else None, net
    )
    return zero.replace(**floats_bar), x_bar


_feedforward_values.defvjp(_feedforward_fwd, _feedforward_bwd)


def forward_batch(
    spec: GenomeSpec,
    network: Network,
    x: jax.Array,
    *,
    functions: str | FunctionSet | None = None,
    outputs: OutputMode | None = None,
) -> jax.Array:
    """:func:`forward` over a batch: ``x [B, num_inputs] -> y [B, num_outputs]`` (one network)."""
    spec = _check_spec(spec)
    x = _real_input(x)
    if x.ndim != 2 or x.shape[1] != spec.num_inputs:
        raise ArgumentError(f"x must have shape (B, {spec.num_inputs}), got {x.shape}")
    return jax.vmap(lambda xi: forward(spec, network, xi, functions=functions, outputs=outputs))(x)


# ---------------------------------------------------------------------------------------------
# recurrent (neat-python RecurrentNetwork) and CTRNN


def init_state(spec: GenomeSpec, network: Network) -> jax.Array:
    """``float32 [N]`` zeros (``[..., N]`` for a population of networks): the state of a fresh
    recurrent network / CTRNN (neat-python's ``reset()``)."""
    _check_spec(spec)
    return jnp.zeros(network.node_valid.shape, jnp.float32)


def _updated(spec: GenomeSpec, net: Network) -> jax.Array:
    rows = jnp.arange(spec.max_nodes)
    return net.node_valid & (rows >= spec.num_inputs) & (net.in_degree > 0)


def step(
    spec: GenomeSpec,
    network: Network,
    state: jax.Array,
    x: jax.Array,
    *,
    functions: str | FunctionSet | None = None,
    outputs: OutputMode | None = None,
) -> tuple[jax.Array, jax.Array]:
    """One recurrent activation (neat-python's ``RecurrentNetwork.activate``):
    ``(state [N], x [num_inputs]) -> (state [N], y [num_outputs])``.

    The inputs are written into the state, then every node with an enabled input is updated
    synchronously from the previous values: ``node_output(agg(w_i * state_i))``. Works for any
    genome (feedforward ones too: a signal then advances one edge per call).
    """
    spec, fs, outputs = _setup(spec, network, functions, outputs)
    v = _with_inputs(spec, jnp.asarray(state, jnp.float32), x)
    new = _clamp(_node_values(spec, fs, network, _aggregate(spec, fs, network, v), outputs))
    v = jnp.where(_updated(spec, network), new, v)
    return v, _finish(spec, v, outputs)


def forward_recurrent(
    spec: GenomeSpec,
    network: Network,
    x: jax.Array,
    num_steps: int,
    *,
    functions: str | FunctionSet | None = None,
    outputs: OutputMode | None = None,
) -> jax.Array:
    """TensorNEAT-style recurrent evaluation: from a zero state, ``num_steps`` :func:`step` calls
    with the same ``x``; returns ``y [num_outputs]`` (the state is dropped)."""
    num_steps = check_int(num_steps, "num_steps")
    state = init_state(spec, network)

    def body(_, carry):
        s, _y = carry
        return step(spec, network, s, x, functions=functions, outputs=outputs)

    y0 = jnp.zeros_like(_finish(spec, state, _output_mode(outputs)))
    _, y = jax.lax.fori_loop(0, num_steps, body, (state, y0))
    return y


def ctrnn_step(
    spec: GenomeSpec,
    network: Network,
    state: jax.Array,
    x: jax.Array,
    dt: float | jax.Array,
    *,
    functions: str | FunctionSet | None = None,
    outputs: OutputMode | None = None,
) -> tuple[jax.Array, jax.Array]:
    """One exponential-Euler CTRNN step of length ``dt`` (neat-python 2.1's ``CTRNN.advance``
    inner loop): for each node with an enabled input,
    ``y <- d y + (1 - d) node_output(agg(w_i y_i))`` with ``d = exp(-dt / time_constant)``.

    Needs a node gene with a ``time_constant`` attribute (``NodeGene(ctrnn=True)``).
    Returns ``(state [N], y [num_outputs])``.
    """
    spec, fs, outputs = _setup(spec, network, functions, outputs)
    if "time_constant" not in spec.node_gene.float_names:
        raise ArgumentError("ctrnn_step needs a node gene with a time_constant (NodeGene(ctrnn=True))")
    tau = network.node_attrs[:, spec.node_gene.column("time_constant")]
    v = _with_inputs(spec, jnp.asarray(state, jnp.float32), x)
    z = _clamp(_node_values(spec, fs, network, _aggregate(spec, fs, network, v), outputs))
    decay = jnp.exp(-jnp.asarray(dt, jnp.float32) / jnp.where(_updated(spec, network), tau, 1.0))
    new = decay * v + (1.0 - decay) * z
    v = jnp.where(_updated(spec, network), _clamp(new), v)
    return v, _finish(spec, v, outputs)


def ctrnn_time_steps(advance_time: float, time_step: float) -> tuple[float, ...]:
    """The step lengths neat-python's ``CTRNN.advance(inputs, advance_time, time_step)`` takes from
    time 0: ``min(time_step, remaining)`` while the (float64) clock is below ``advance_time``."""
    advance_time = check_positive(advance_time, "advance_time")
    time_step = check_positive(time_step, "time_step")
    if advance_time / time_step > 1e6:
        raise ArgumentError(f"advance_time / time_step = {advance_time / time_step:.3g} steps is too many")
    t, out = 0.0, []
    while t < advance_time:
        dt = min(time_step, advance_time - t)
        out.append(dt)
        t += dt
    return tuple(out)


def ctrnn_advance(
    spec: GenomeSpec,
    network: Network,
    state: jax.Array,
    x: jax.Array,
    advance_time: float,
    time_step: float,
    *,
    functions: str | FunctionSet | None = None,
    outputs: OutputMode | None = None,
) -> tuple[jax.Array, jax.Array]:
    """neat-python's ``CTRNN.advance``: hold ``x`` for ``advance_time`` (a static float), in
    :func:`ctrnn_step` s of ``time_step`` (the last one shorter, see :func:`ctrnn_time_steps`).
    Returns ``(state [N], y [num_outputs])``: the outputs after the last step."""
    dts = jnp.asarray(ctrnn_time_steps(advance_time, time_step), jnp.float32)

    def body(s, dt):
        s, y = ctrnn_step(spec, network, s, x, dt, functions=functions, outputs=outputs)
        return s, y

    state, ys = jax.lax.scan(body, jnp.asarray(state, jnp.float32), dts)
    return state, ys[-1]


# ---------------------------------------------------------------------------------------------
# policies for the control problems


@dataclasses.dataclass(frozen=True)
class FeedForwardPolicy:
    """A stateless NEAT policy: ``policy(network, obs) -> y`` (:func:`forward`); ``decode`` is
    :func:`transform`. Pass it as ``apply`` to a policy problem with networks as phenotypes."""

    spec: GenomeSpec
    functions: str | FunctionSet | None = None
    outputs: OutputMode | None = None
    method: str = "auto"

    def __post_init__(self):
        _check_spec(self.spec)
        if type(self) is FeedForwardPolicy and not self.spec.feed_forward:
            raise ArgumentError("FeedForwardPolicy needs spec.feed_forward=True; use RecurrentPolicy")
        resolve_method(self.spec, self.method)
        function_set(self.functions).check_options(
            self.spec.node_gene.activation.options, self.spec.node_gene.aggregation.options
        )
        _output_mode(self.outputs)

    def _compact(self) -> bool:
        # the compact rows pay on a CPU, where a level of the edge list costs every edge slot;
        # an accelerator keeps the dense / edge-list forms
        return (
            type(self) is FeedForwardPolicy
            and jax.default_backend() == "cpu"
            and compact_supported(self.spec, self.functions)
        )

    def decode(self, genomes: Genome) -> Network:
        """:func:`transform` of one genome or a population (for a population on a CPU also its
        :func:`compact_rows`, which :meth:`batched` uses)."""
        net = transform(self.spec, genomes, self.method)
        if genomes.node_key.ndim > 1 and self._compact():
            net = net.replace(compact=compact_rows(self.spec, net))
        return net

    def __call__(self, network: Network, obs: jax.Array) -> jax.Array:
        return forward(self.spec, network, jnp.ravel(obs), functions=self.functions, outputs=self.outputs)

    def batch_paths(self, networks: Network) -> tuple[jax.Array, tuple[Callable, ...]]:
        """The ways to run a batch of networks ``[K]``: ``(index [K], paths)``, each path
        ``path(networks, obs [B, K, ...]) -> y [B, K, ...]`` (``B`` observations per network, the
        networks on the second axis) with the outputs of ``vmap(vmap(self, (None, 0)))`` to float32
        rounding; ``index[i]`` is the first path that network ``i`` fits, and every later path runs
        it too, so a batch takes path ``max(index)`` (``lax.switch``).

        With :class:`CompactRows` (``decode`` on a CPU) the paths are the compact forms of
        :data:`COMPACT_WIDTHS` and then the per-network forward pass: the choice is the batch's,
        which a vmapped forward cannot make. A network's outputs are the same on every compact
        path it fits (a slot's sum covers only the columns before it). A rollout should switch
        once around a run of steps (the networks do not change), not in every step: a switch
        inside the step loop kept XLA from hoisting the set-up out of the loop and cost many times
        the forward itself."""

        def full(nets: Network, obs: jax.Array) -> jax.Array:
            one = jax.vmap(lambda n, xs: jax.vmap(lambda o: self(n, o))(xs), in_axes=(0, 1), out_axes=1)
            return one(nets, obs)

        if not isinstance(networks, Network):
            raise ArgumentError(f"networks must be a Network (from decode), got {type(networks).__name__}")
        if networks.compact is None or type(self) is not FeedForwardPolicy:
            return jnp.zeros(networks.node_valid.shape[:1], jnp.int32), (full,)
        spec, fs, outputs = self.spec, function_set(self.functions), _output_mode(self.outputs)

        def compact(width: int, nets: Network, obs: jax.Array) -> jax.Array:
            obs = jnp.asarray(obs)
            x = _real_input(obs).reshape(obs.shape[:2] + (-1,))
            if x.shape[-1] != spec.num_inputs:
                raise ArgumentError(
                    f"obs must hold {spec.num_inputs} values per observation, got {x.shape[-1]}"
                )
            return _compact_forward(spec, fs, outputs, nets, x, width)

        size = networks.compact.size[:, None]
        index = jnp.sum(size > jnp.asarray(COMPACT_WIDTHS, jnp.int32), axis=1, dtype=jnp.int32)
        return index, (*(functools.partial(compact, w) for w in COMPACT_WIDTHS), full)

    def batched(self, networks: Network, obs: jax.Array) -> jax.Array:
        """``y [B, K, ...]`` of networks ``[K]`` on observations ``obs [B, K, ...]``: the path of
        :meth:`batch_paths` for these networks (one ``lax.switch``). For one-off calls: inside a
        step loop, take the paths from :meth:`batch_paths` and switch outside the loop (as the
        chunked control rollout does)."""
        obs = jnp.asarray(obs)
        if obs.ndim < 2:
            raise ArgumentError(f"obs must have shape (B, K, ...), got {obs.shape}")
        index, paths = self.batch_paths(networks)
        if len(paths) == 1:
            return paths[0](networks, obs)
        return lax.switch(jnp.max(index), [functools.partial(p, networks, obs) for p in paths])


@dataclasses.dataclass(frozen=True)
class RecurrentPolicy(FeedForwardPolicy):
    """A stateful NEAT policy (neat-python's ``RecurrentNetwork``), following the control problems'
    ``StatefulPolicy`` protocol: ``init_state(network) -> state [N]``, ``step(network, state, obs)
    -> (state, y)``; calling it directly runs one step from a zero state."""

    def init_state(self, network: Network) -> jax.Array:
        return init_state(self.spec, network)

    def step(self, network: Network, state: jax.Array, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        return step(self.spec, network, state, jnp.ravel(obs), functions=self.functions, outputs=self.outputs)

    def __call__(self, network: Network, obs: jax.Array) -> jax.Array:
        return self.step(network, self.init_state(network), obs)[1]


@dataclasses.dataclass(frozen=True)
class CTRNNPolicy(RecurrentPolicy):
    """A stateful CTRNN policy: each ``step`` is :func:`ctrnn_advance` by ``advance_time`` in steps
    of ``time_step`` (neat-python's examples use ``advance(obs, 0.02, 0.02)``-like settings)."""

    advance_time: float = 0.02
    time_step: float = 0.01

    def __post_init__(self):
        super().__post_init__()
        ctrnn_time_steps(self.advance_time, self.time_step)
        if "time_constant" not in self.spec.node_gene.float_names:
            raise ArgumentError("CTRNNPolicy needs a node gene with a time_constant (NodeGene(ctrnn=True))")

    def step(self, network: Network, state: jax.Array, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        return ctrnn_advance(
            self.spec,
            network,
            state,
            jnp.ravel(obs),
            self.advance_time,
            self.time_step,
            functions=self.functions,
            outputs=self.outputs,
        )


def neat_policy(
    spec: GenomeSpec,
    kind: str = "auto",
    *,
    functions: str | FunctionSet | None = None,
    outputs: OutputMode | None = None,
    method: str = "auto",
    advance_time: float = 0.02,
    time_step: float = 0.01,
) -> FeedForwardPolicy:
    """The policy object for ``spec``: ``kind`` ``"feedforward"``, ``"recurrent"``, ``"ctrnn"`` or
    ``"auto"`` (ctrnn if the node gene has a ``time_constant``, else feedforward or recurrent per
    ``spec.feed_forward``)."""
    _check_spec(spec)
    check_choice(kind, "kind", ("auto", "feedforward", "recurrent", "ctrnn"))
    if kind == "auto":
        if "time_constant" in spec.node_gene.float_names:
            kind = "ctrnn"
        else:
            kind = "feedforward" if spec.feed_forward else "recurrent"
    if kind == "feedforward":
        return FeedForwardPolicy(spec, functions, outputs, method)
    if kind == "recurrent":
        return RecurrentPolicy(spec, functions, outputs, method)
    return CTRNNPolicy(spec, functions, outputs, method, advance_time, time_step)
