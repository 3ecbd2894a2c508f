"""NEAT mutation over a whole population in one compiled program, with global innovation numbers
deduplicated within the generation (:mod:`evotensor.neat.innovation`).

:func:`mutate` follows neat-python 2.1's ``DefaultGenome.mutate``:

1. Structural mutations, each genome independently: with ``single_structural_mutation=False``
   four independent draws, in this order: add node (``node_add_prob``), delete node
   (``node_delete_prob``), add connection (``conn_add_prob``), delete connection
   (``conn_delete_prob``). With ``single_structural_mutation=True`` one uniform ``r`` picks at
   most one of them, with the four probabilities divided by ``max(1, their sum)``.
2. Attribute mutation of every node gene (outputs and hidden nodes, not input pins) and every
   connection gene, new genes included (:meth:`NodeGene.mutate_attrs`,
   :meth:`ConnectionGene.mutate_attrs`).

The structural steps (each also public, for tests and custom pipelines):

* :func:`add_node`: pick a uniformly random connection (neat-python picks among *all* connection
  genes, enabled or not; ``split_only_enabled=True`` restricts it to enabled ones), disable it
  (``split="disable"``: neat-python and the paper) or delete it (``split="delete"``: TensorNEAT),
  and add a node with a new key and the two enabled connections ``in -> new`` (weight ``1.0``) and
  ``new -> out`` (the old weight). The node's attributes come from the node gene's ``init`` with
  the bias set to ``0`` (neat-python 2.1); ``new_node_attrs="identity"`` also sets the response to
  ``1`` (TensorNEAT). The new connections' other attributes come from the connection gene's
  ``init`` (``new_conn_attrs="zero"``: zeros). A genome without a candidate connection adds a
  connection instead when ``structural_mutation_surer`` holds, and does nothing otherwise.
* :func:`delete_node`: remove a uniformly random hidden node and every connection touching it.
* :func:`add_connection`: draw the ``out`` end uniformly among non-input nodes and the ``in`` end
  uniformly among inputs and hidden nodes (neat-python; ``conn_from_outputs=True`` lets outputs be
  sources too, as TensorNEAT). The draw is a single try: if the pair is already connected nothing
  is added (with ``structural_mutation_surer`` the existing gene is re-enabled); in a feedforward
  genome a pair that would close a cycle through any existing connection, enabled or disabled,
  is refused (so re-enabling never makes one); a recurrent genome may add cycles and self-loops.
  The new connection is enabled, its attributes from ``init`` (``new_conn_attrs="zero"``: zeros,
  TensorNEAT's weight 0).
* :func:`delete_connection`: remove a uniformly random connection.
* After a deletion, with ``prune_dangling=True`` (neat-python 2.1), hidden nodes that no longer
  feed an output through enabled connections are removed with all their connections
  (:func:`prune_dangling`).

Innovation numbering. All splits of the population are numbered first (one node key and two
innovation numbers per distinct split: by the split connection's ``(in, out)`` pair, as
neat-python's tracker, or by its innovation number with ``split_identity="innovation"``), so an
offspring's later steps already see its new node (the add-connection step may connect to it).
Connections added by the add-connection step (and by the ``structural_mutation_surer`` fallback
of add node) are written with a temporary negative marker and numbered together at the end of the
structural phase, one number per distinct ``(in, out)`` pair in the population. A split's two
pairs always contain the new node, which no genome can reach by an add-connection in the same
generation without holding those very pairs already, so numbering splits and added connections
separately never gives one pair two numbers. Events that a later step of the same genome undoes
(an added connection deleted again) still consume their number, as in neat-python.

Capacity: a split needs a free node row and two free connection rows (one with ``split="delete"``),
an add-connection a free connection row; a mutation that would overflow is skipped and counted in
``metrics["capacity_skips"]``, never written past the end. New genes take the first free rows.

Everything is pure and ``jit``-able with ``spec`` and ``config`` static; per-genome work is
``vmap``-ped, the numbering is one sort over the population's proposals; cycle checks and pruning
are bounded frontier propagations over the edge lists of the whole population at once (one
gather and one scatter per chunk of edge columns in a ``lax.while_loop``, only up to the last
column any genome uses: genomes fill their first free rows), never ``[N, N]`` matrices. The node
rows of the connections' endpoints are found once per call (one sorted node table per genome,
:func:`~evotensor.neat.distance.endpoint_rows`) and kept up to
date by the steps (node rows never move). The random numbers of the structural steps are one flat
uniform draw (columns: the four decisions, the split, the fallback's and the added connection's
endpoints, the deletions), plus one call of the gene types' ``init`` for all new nodes and one for
all new connections; the gene types mutate the attributes of the flattened population.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from evotensor.core import rng
from evotensor.core.checks import ArgumentError, check_choice, check_fraction
from evotensor.neat.distance import endpoint_rows
from evotensor.neat.genome import EMPTY, Genome, GenomeSpec
from evotensor.neat.innovation import number_connections, number_splits

__all__ = [
    "METRIC_NAMES",
    "MutationConfig",
    "add_connection",
    "add_node",
    "creates_cycle",
    "delete_connection",
    "delete_node",
    "mutate",
    "mutate_attributes",
    "prune_dangling",
    "required_nodes",
]

METRIC_NAMES = (
    "nodes_added",
    "conns_added",
    "nodes_deleted",
    "conns_deleted",
    "nodes_pruned",
    "capacity_skips",
)
"""Keys of the metrics dicts (``int32`` scalars): successful splits, successful add-connections
(not counting a split's two connections), explicit node and connection deletions, hidden nodes
removed by pruning, mutations skipped for lack of rows."""

# temporary innovation markers of connections added before the end-of-step numbering (negative,
# so never a real innovation number, and not EMPTY, so the rows count as valid meanwhile)
_FALLBACK_MARK = -2
_ADD_MARK = -3

_TRUE_WORDS = ("1", "yes", "true", "on")
_FALSE_WORDS = ("0", "no", "false", "off")


@dataclasses.dataclass(frozen=True)
class MutationConfig:
    """How :func:`mutate` changes genomes (hashable: pass it as a static argument).

    The defaults are neat-python 2.1's, with the probabilities of its XOR example;
    :meth:`tensorneat` gives TensorNEAT's choices.

    Args:
        conn_add_prob, conn_delete_prob, node_add_prob, node_delete_prob: probabilities in
            ``[0, 1]`` of the four structural mutations.
        single_structural_mutation: at most one structural mutation per genome, chosen with the
            probabilities divided by ``max(1, their sum)``.
        structural_mutation_surer: ``True``, ``False`` or ``"default"`` (= the value of
            ``single_structural_mutation``; neat-python's words ``"yes"``, ``"off"``, ... are
            accepted): an add-node without a connection to split adds a connection instead, and an
            add-connection that draws an existing pair re-enables that gene.
        split: ``"disable"`` (neat-python, the paper: the split connection stays, disabled) or
            ``"delete"`` (TensorNEAT: it is removed).
        split_only_enabled: split only enabled connections (neat-python picks among all).
        split_identity: which splits share a new node key: ``"pair"`` (the same ``(in, out)``;
            neat-python's tracker) or ``"innovation"`` (the same innovation number).
        new_node_attrs: ``"init"`` (attributes from the node gene's init, bias ``0``; neat-python
            2.1) or ``"identity"`` (also response ``1``; TensorNEAT).
        new_conn_attrs: attributes of a connection added by add-connection (and of a split's
            connections besides the weight): ``"init"`` (neat-python) or ``"zero"`` (TensorNEAT).
        conn_from_outputs: output nodes may be the source of a new connection (TensorNEAT; in
            neat-python the source is an input or a hidden node).
        prune_dangling: after a deletion remove hidden nodes that no longer feed an output
            through enabled connections (neat-python 2.1; TensorNEAT does not).
    """

    conn_add_prob: float = 0.5
    conn_delete_prob: float = 0.5
    node_add_prob: float = 0.2
    node_delete_prob: float = 0.2
    single_structural_mutation: bool = False
    structural_mutation_surer: Any = "default"
    split: str = "disable"
    split_only_enabled: bool = False
    split_identity: str = "pair"
    new_node_attrs: str = "init"
    new_conn_attrs: str = "init"
    conn_from_outputs: bool = False
    prune_dangling: bool = True

    def __post_init__(self):
        for name in ("conn_add_prob", "conn_delete_prob", "node_add_prob", "node_delete_prob"):
            object.__setattr__(self, name, check_fraction(getattr(self, name), name, allow_zero=True))
        flags = ("single_structural_mutation", "split_only_enabled", "conn_from_outputs", "prune_dangling")
        for name in flags:
            if not isinstance(getattr(self, name), bool):
                raise ArgumentError(f"{name} must be a bool, got {getattr(self, name)!r}")
        surer = self.structural_mutation_surer
        if isinstance(surer, str) and surer.lower() in _TRUE_WORDS:
            surer = True
        elif isinstance(surer, str) and surer.lower() in _FALSE_WORDS:
            surer = False
        elif isinstance(surer, str) and surer.lower() == "default":
            surer = "default"
        elif not isinstance(surer, bool):
            raise ArgumentError(
                "structural_mutation_surer must be True, False or 'default', "
                f"got {self.structural_mutation_surer!r}"
            )
        object.__setattr__(self, "structural_mutation_surer", surer)
        check_choice(self.split, "split", ("disable", "delete"))
        check_choice(self.split_identity, "split_identity", ("pair", "innovation"))
        check_choice(self.new_node_attrs, "new_node_attrs", ("init", "identity"))
        check_choice(self.new_conn_attrs, "new_conn_attrs", ("init", "zero"))

    @property
    def surer(self) -> bool:
        """``structural_mutation_surer`` resolved (``"default"`` follows
        ``single_structural_mutation``)."""
        if self.structural_mutation_surer == "default":
            return self.single_structural_mutation
        return bool(self.structural_mutation_surer)

    @classmethod
    def tensorneat(cls, **overrides: Any) -> MutationConfig:
        """TensorNEAT's ``DefaultMutation``: probabilities ``conn_add=0.2, conn_delete=0.2,
        node_add=0.1, node_delete=0.1``, split deletes, identity new node, new connection weight
        0, outputs may be sources, no pruning; ``overrides`` replace any of these. (Innovation
        numbers are still deduplicated: they do not change the networks TensorNEAT would make.)"""
        values = dict(
            conn_add_prob=0.2,
            conn_delete_prob=0.2,
            node_add_prob=0.1,
            node_delete_prob=0.1,
            structural_mutation_surer=False,
            split="delete",
            new_node_attrs="identity",
            new_conn_attrs="zero",
            conn_from_outputs=True,
            prune_dangling=False,
        )
        values.update(overrides)
        return cls(**values)


# ---------------------------------------------------------------------------------------------
# per-genome helpers (one genome: arrays [N], [C]; vmapped over the population)


def _tally(**counts: jax.Array) -> jax.Array:
    """Per-genome counts (``[P]`` each, bool or int) as ``int32 [len(METRIC_NAMES), P]``, zeros for
    the metrics not given: steps add their tallies elementwise and :func:`_metrics` sums them once
    (one reduction, not one per metric and step)."""
    P = next(iter(counts.values())).shape[0]
    zero = jnp.zeros((P,), jnp.int32)
    return jnp.stack(
        [jnp.asarray(counts[name], jnp.int32) if name in counts else zero for name in METRIC_NAMES]
    )


def _metrics(tally: jax.Array) -> dict[str, jax.Array]:
    """The population totals (``int32`` scalars) of a :func:`_tally`."""
    totals = jnp.sum(tally, axis=1, dtype=jnp.int32)
    return {name: totals[i] for i, name in enumerate(METRIC_NAMES)}


def _random_row(u: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """A uniformly random index where ``mask`` holds (``u``: a uniform draw in ``[0, 1)``), and
    whether there is one (index 0 if not)."""
    count = jnp.sum(mask, dtype=jnp.int32)
    target = jnp.minimum((u * count).astype(jnp.int32), count - 1)
    hit = mask & (jnp.cumsum(mask, dtype=jnp.int32) == target + 1)
    return jnp.argmax(hit).astype(jnp.int32), count > 0


def _first_free(valid: jax.Array, exclude: jax.Array | None = None) -> jax.Array:
    free = ~valid
    if exclude is not None:
        free = free & (jnp.arange(valid.shape[0]) != exclude)
    return jnp.argmax(free).astype(jnp.int32)


# ``per_genome(fn, *arrays)``: ``fn(*arrays)`` on arrays of leading axis [P] whose rows are independent
PerGenome = Callable[..., Any]
# ``across_genomes(fn, rows, *shared)``: ``fn(rows, *shared)``, reading every genome's rows at once
AcrossGenomes = Callable[..., Any]


def _whole(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``: the default ``per_genome`` and ``across_genomes`` (one device computes every
    row and sees the whole population)."""
    return fn(*args)


# edge columns per chunk of the reach sweep: genomes fill their first free rows, so a population
# usually uses a small prefix of its ``max_conns`` columns and the sweep stops at the last used one
_REACH_CHUNK = 8


def _reach(
    start: jax.Array, src: jax.Array, dst: jax.Array, edge: jax.Array, target: jax.Array | None = None
) -> jax.Array:
    """Nodes reachable from ``start`` (``bool [P, N]``) along each genome's edges ``src[p, e] ->
    dst[p, e]`` (node rows, ``int32 [P, C]``) with ``edge[p, e]``, for the whole population at once:
    ``bool [P, N]``.

    Frontier propagation over one flat node array (genome ``p``'s row ``n`` at ``p * N + n``):
    each step sweeps the edge columns in chunks of ``_REACH_CHUNK``, only up to the last column
    any genome uses, with one gather and one scatter per chunk (a node reached by an earlier chunk
    already propagates in a later one: the same fixed point, reached in no more steps). It stops when
    nothing new is reached (at most ``N`` steps) or, with ``target`` (``int32 [P]``), when every
    genome with a non-empty start has reached its target row (only ``reached[p, target[p]]`` is
    meaningful then)."""
    P, N = start.shape
    C = src.shape[1]
    W = min(_REACH_CHUNK, C)
    chunks = -(-C // W)
    sink = P * N  # inactive edges point here: a node never started, never read back
    base = (jnp.arange(P, dtype=jnp.int32) * N)[:, None]
    pad = ((0, 0), (0, chunks * W - C))
    flat_src = jnp.pad(jnp.where(edge, src + base, sink), pad, constant_values=sink)
    flat_dst = jnp.pad(jnp.where(edge, dst + base, sink), pad, constant_values=sink)
    used = jnp.max(jnp.where(edge, jnp.arange(C, dtype=jnp.int32), -1)) + 1
    n_chunks = (used + W - 1) // W
    live = jnp.any(start, axis=1)

    def sweep(j, reached):
        s = lax.dynamic_slice(flat_src, (0, j * W), (P, W))
        d = lax.dynamic_slice(flat_dst, (0, j * W), (P, W))
        return reached.at[jnp.where(reached[s], d, sink)].set(True, mode="drop")

    def body(carry):
        i, reached, _ = carry
        new = lax.fori_loop(0, n_chunks, sweep, reached)
        return i + 1, new, jnp.any(new != reached)

    def cond(carry):
        i, reached, changed = carry
        go = changed & (i < N)
        if target is not None:
            go = go & jnp.any(live & ~reached[base[:, 0] + target])
        return go

    flat = jnp.concatenate([start.reshape(P * N), jnp.zeros((1,), bool)])
    _, reached, _ = lax.while_loop(cond, body, (jnp.int32(0), flat, jnp.bool_(True)))
    return reached[:sink].reshape(P, N)


def _clear_nodes(g: Genome, rows: jax.Array) -> Genome:
    return g.replace(
        node_key=jnp.where(rows, EMPTY, g.node_key),
        node_attrs=jnp.where(rows[:, None], 0.0, g.node_attrs),
        node_act=jnp.where(rows, 0, g.node_act),
        node_agg=jnp.where(rows, 0, g.node_agg),
    )


def _clear_conns(g: Genome, rows: jax.Array) -> Genome:
    return g.replace(
        conn_in=jnp.where(rows, EMPTY, g.conn_in),
        conn_out=jnp.where(rows, EMPTY, g.conn_out),
        conn_innov=jnp.where(rows, EMPTY, g.conn_innov),
        conn_enabled=jnp.where(rows, False, g.conn_enabled),
        conn_attrs=jnp.where(rows[:, None], 0.0, g.conn_attrs),
    )


def _remove_nodes(g: Genome, rows: jax.Array, src: jax.Array, dst: jax.Array) -> Genome:
    """Remove the node rows ``rows`` (``bool [N]``) and every connection touching them (``src``,
    ``dst``: :func:`~evotensor.neat.distance.endpoint_rows`)."""
    return _clear_nodes(_clear_conns(g, g.conn_valid & (rows[src] | rows[dst])), rows)


def _put(arr: jax.Array, row: jax.Array, value: Any, when: jax.Array) -> jax.Array:
    """``arr`` with row ``row`` set to ``value`` if ``when`` (a select, no scatter)."""
    hit = (jnp.arange(arr.shape[0]) == row) & when
    return jnp.where(hit.reshape(hit.shape + (1,) * (arr.ndim - 1)), value, arr)


def _write_conn(g: Genome, row, in_key, out_key, innov, attrs, when) -> Genome:
    return g.replace(
        conn_in=_put(g.conn_in, row, in_key, when),
        conn_out=_put(g.conn_out, row, out_key, when),
        conn_innov=_put(g.conn_innov, row, innov, when),
        conn_enabled=_put(g.conn_enabled, row, True, when),
        conn_attrs=_put(g.conn_attrs, row, attrs, when),
    )


def _required(spec: GenomeSpec, population: Genome, src, dst, when: jax.Array | None = None) -> jax.Array:
    """``bool [P, N]``: the nodes (not input pins) that feed an output through enabled connections
    (``src``, ``dst``: endpoint rows ``[P, C]``); only genomes with ``when`` (``bool [P]``) are
    searched (the others start from an empty frontier and get nothing)."""
    idx = jnp.arange(spec.max_nodes)
    outputs = jnp.broadcast_to((idx >= spec.num_inputs) & (idx < spec.num_io), population.node_key.shape)
    edge = population.conn_valid & population.conn_enabled
    if when is not None:
        outputs = outputs & when[:, None]
    # backwards: a node is required if it feeds a required node through an enabled connection
    required = _reach(outputs, dst, src, edge)
    return required & population.node_valid & (idx >= spec.num_inputs)


def _prune(
    spec: GenomeSpec, population: Genome, src, dst, when: jax.Array, per_genome: PerGenome = _whole
) -> tuple[Genome, jax.Array]:
    """Remove, in the genomes with ``when`` (``bool [P]``), every hidden node that feeds no output
    and its connections: ``(population, removed int32 [P])``."""
    hidden = population.node_valid & (jnp.arange(spec.max_nodes) >= spec.num_io)
    required = per_genome(lambda g, s, d, w: _required(spec, g, s, d, w), population, src, dst, when)
    drop = hidden & ~required & when[:, None]
    return jax.vmap(_remove_nodes)(population, drop, src, dst), jnp.sum(drop, axis=1, dtype=jnp.int32)


def _creates_cycle(
    population: Genome, src, dst, in_row, out_row, same: jax.Array, when: jax.Array
) -> jax.Array:
    """``bool [P]``: would a connection from node row ``in_row`` to node row ``out_row`` (``int32
    [P]``; ``out_row`` ``-1``: no such node) close a cycle in the genomes with ``when``: the same
    node (``same``) or ``in`` reachable from ``out`` through any existing connection (enabled or
    not)."""
    node = jnp.arange(population.node_key.shape[1])
    start = (node == out_row[:, None]) & when[:, None]
    reached = _reach(start, src, dst, population.conn_valid, target=in_row)
    hit = jnp.take_along_axis(reached, in_row[:, None], axis=1)[:, 0]
    return when & (same | hit)


def _new_conn_attrs(spec: GenomeSpec, config: MutationConfig, key: jax.Array, shape) -> jax.Array:
    B = spec.conn_gene.num_floats
    if config.new_conn_attrs == "zero":
        return jnp.zeros((*shape, B), jnp.float32)
    # drawn flat: the same numbers as ``init_attrs(key, shape)`` from a cheaper kernel to compile
    return spec.conn_gene.init_attrs(key, (math.prod(shape),)).reshape(*shape, B)


def _one_split_propose(spec: GenomeSpec, config: MutationConfig, u: jax.Array, g: Genome, do: jax.Array):
    candidates = g.conn_valid & g.conn_enabled if config.split_only_enabled else g.conn_valid
    row, has = _random_row(u, candidates)
    attempt = do & has
    need = 2 if config.split == "disable" else 1
    room = (jnp.sum(~g.node_valid) >= 1) & (jnp.sum(~g.conn_valid) >= need)
    return row, attempt & room, attempt & ~room, do & ~has


def _one_split_apply(
    spec: GenomeSpec, config: MutationConfig, g: Genome, src, dst, row, ok, new_key, innov_in, innov_out, new
):
    node_attrs, node_act, node_agg, conn_attrs = new
    i_key, o_key = g.conn_in[row], g.conn_out[row]
    i_row, o_row = src[row], dst[row]
    old_weight = g.conn_attrs[row, 0]
    node_row = _first_free(g.node_valid)
    g = g.replace(
        node_key=_put(g.node_key, node_row, new_key, ok),
        node_attrs=_put(g.node_attrs, node_row, node_attrs, ok),
        node_act=_put(g.node_act, node_row, node_act, ok),
        node_agg=_put(g.node_agg, node_row, node_agg, ok),
    )
    if config.split == "disable":
        g = g.replace(conn_enabled=_put(g.conn_enabled, row, False, ok))
    else:
        g = _clear_conns(g, (jnp.arange(spec.max_conns) == row) & ok)
    r1 = _first_free(g.conn_valid)
    r2 = _first_free(g.conn_valid, exclude=r1)
    g = _write_conn(g, r1, i_key, new_key, innov_in, conn_attrs[0].at[0].set(1.0), ok)
    g = _write_conn(g, r2, new_key, o_key, innov_out, conn_attrs[1].at[0].set(old_weight), ok)
    src = _put(_put(src, r1, i_row, ok), r2, node_row, ok)
    dst = _put(_put(dst, r1, node_row, ok), r2, o_row, ok)
    return g, src, dst


def _new_node_genes(spec: GenomeSpec, config: MutationConfig, key: jax.Array, P: int):
    """Attributes of ``P`` new nodes: the gene's init, bias 0 (and response 1 for ``"identity"``)."""
    ng = spec.node_gene
    attrs, act, agg = ng.init_attrs(key, (P,))
    if "bias" in ng.float_names:
        attrs = attrs.at[:, ng.column("bias")].set(0.0)
    if config.new_node_attrs == "identity" and "response" in ng.float_names:
        attrs = attrs.at[:, ng.column("response")].set(1.0)
    return attrs, act, agg


def _draws(key: jax.Array, spec: GenomeSpec, config: MutationConfig, P: int, uniforms: int, conns: int):
    """Every random number of one structural pass from few random calls: ``uniforms`` uniform
    columns ``float32 [P, uniforms]`` (one flat draw), the new nodes' genes (the node gene's
    ``init``, one call) and ``conns`` new connections' attributes ``[P, conns, B]`` (one call)."""
    # the uniforms from jax.random, not the unrolled hash of evotensor.core.rng: these few numbers
    # feed many kernels of the structural steps, and XLA fuses (recomputes) an elementwise hash into
    # each of them; JAX's CPU lowering (a loop) materializes them once. The split (the same keys
    # either way) is core.rng's: one small kernel instead of a loop of several
    k_u, k_node, k_conn = rng.split(key, 3)
    u = jax.random.uniform(k_u, (P * uniforms,)).reshape(P, uniforms)
    return u, _new_node_genes(spec, config, k_node, P), _new_conn_attrs(spec, config, k_conn, (P, conns))


def _add_node(
    spec,
    config,
    population,
    rows,
    next_node_key,
    next_innov,
    mask,
    u,
    node_genes,
    conn_attrs,
    across_genomes: AcrossGenomes = _whole,
):
    """Splits, numbered (``u float32 [P]``: the split choice; ``node_genes``, ``conn_attrs [P, 2, B]``:
    the new genes); returns the genomes that need the add-connection fallback."""
    P = population.node_key.shape[0]
    row, ok, skip, no_candidate = jax.vmap(lambda u, g, d: _one_split_propose(spec, config, u, g, d))(
        u, population, mask
    )
    take = lambda a: jnp.take_along_axis(a, row[:, None], 1)[:, 0]  # noqa: E731
    if config.split_identity == "pair":
        identity = (take(population.conn_in), take(population.conn_out))
    else:
        identity = (take(population.conn_innov),)
    new_key, innov_in, innov_out, next_node_key, next_innov = across_genomes(
        lambda rows, *counters: number_splits(*rows, *counters), (identity, ok), next_node_key, next_innov
    )
    new = (*node_genes, conn_attrs)
    population, src, dst = jax.vmap(lambda g, s, d, *a: _one_split_apply(spec, config, g, s, d, *a))(
        population, *rows, row, ok, new_key, innov_in, innov_out, new
    )
    metrics = _tally(nodes_added=ok, capacity_skips=skip)
    fallback = no_candidate if config.surer else jnp.zeros(P, bool)
    return population, (src, dst), next_node_key, next_innov, metrics, fallback


# ---- add connection


def _one_conn_propose(spec: GenomeSpec, config: MutationConfig, u: jax.Array, g: Genome, do: jax.Array):
    idx = jnp.arange(spec.max_nodes)
    out_row, _ = _random_row(u[0], g.node_valid & (idx >= spec.num_inputs))
    if config.conn_from_outputs:
        sources = g.node_valid
    else:
        sources = g.node_valid & ((idx < spec.num_inputs) | (idx >= spec.num_io))
    in_row, _ = _random_row(u[1], sources)
    i_key, o_key = g.node_key[in_row], g.node_key[out_row]
    match = g.conn_valid & (g.conn_in == i_key) & (g.conn_out == o_key)
    exists = jnp.any(match)
    if config.surer:
        g = g.replace(conn_enabled=g.conn_enabled | (match & do))
    return g, in_row, out_row, i_key, o_key, do & ~exists


def _one_conn_apply(attrs, g: Genome, src, dst, in_row, out_row, i_key, o_key, want, mark: int):
    room = jnp.any(~g.conn_valid)
    ok = want & room
    free = _first_free(g.conn_valid)
    g = _write_conn(g, free, i_key, o_key, jnp.int32(mark), attrs, ok)
    return g, _put(src, free, in_row, ok), _put(dst, free, out_row, ok), ok, want & ~room


def _add_conn_marked(spec, config, population, rows, mask, mark, u, attrs, per_genome: PerGenome = _whole):
    """Add-connection (``u float32 [P, 2]``: the draws of ``out`` and ``in``; ``attrs [P, B]``)."""
    population, in_row, out_row, i_key, o_key, want = jax.vmap(
        lambda u, g, do: _one_conn_propose(spec, config, u, g, do)
    )(u, population, mask)
    if spec.feed_forward:
        cycle = per_genome(_creates_cycle, population, *rows, in_row, out_row, i_key == o_key, want)
        want = want & ~cycle
    population, src, dst, ok, skip = jax.vmap(lambda a, g, s, d, *x: _one_conn_apply(a, g, s, d, *x, mark))(
        attrs, population, *rows, in_row, out_row, i_key, o_key, want
    )
    metrics = _tally(conns_added=ok, capacity_skips=skip)
    return population, (src, dst), (ok, i_key, o_key, mark), metrics


def _number_marked(population: Genome, slots, next_innov, across_genomes: AcrossGenomes = _whole):
    """Number the connections added under temporary marks, one number per distinct pair across all
    slots, and write the numbers over the marks."""
    ok = jnp.stack([s[0] for s in slots], 1)
    i_key = jnp.stack([s[1] for s in slots], 1)
    o_key = jnp.stack([s[2] for s in slots], 1)
    innov, next_innov = across_genomes(
        lambda rows, counter: number_connections(*rows, counter), (i_key, o_key, ok), next_innov
    )
    conn_innov = population.conn_innov
    for j, (_, _, _, mark) in enumerate(slots):
        conn_innov = jnp.where(conn_innov == mark, innov[:, j : j + 1], conn_innov)
    return population.replace(conn_innov=conn_innov), next_innov


# ---- deletions


def _one_delete(spec, node, u, g, src, dst, do):
    """Delete a uniformly random hidden node and every connection touching it (``node`` true), or
    a uniformly random connection (``node`` false; a bool, possibly traced: one program for both).
    Both candidate masks are padded to ``max(N, C)`` rows, which leaves the draw unchanged."""
    N, C = spec.max_nodes, spec.max_conns
    L = max(N, C)
    node = jnp.asarray(node, bool)  # a Python bool too (``~`` of one would be an int)
    hidden = g.node_valid & (jnp.arange(N) >= spec.num_io)
    pad = lambda m: jnp.pad(m, (0, L - m.shape[0]))  # noqa: E731
    row, has = _random_row(u, jnp.where(node, pad(hidden), pad(g.conn_valid)))
    ok = do & has
    # one node: comparing the endpoint rows with it gives ``rows[src] | rows[dst]`` of
    # :func:`_remove_nodes` (endpoint rows of valid connections are in range) without two gathers
    touching = g.conn_valid & ((src == row) | (dst == row)) & ok & node
    conns = touching | ((jnp.arange(C) == row) & ok & ~node)
    return _clear_nodes(_clear_conns(g, conns), (jnp.arange(N) == row) & ok & node), ok


def _one_delete_node(spec, u, g, src, dst, do):
    return _one_delete(spec, True, u, g, src, dst, do)


def _one_delete_conn(spec, u, g, src, dst, do):
    return _one_delete(spec, False, u, g, src, dst, do)


def _delete(node, spec, config, population, rows, mask, u, per_genome: PerGenome = _whole):
    """A deletion step (``node``: of nodes, else of connections; ``u float32 [P]``: the choice),
    then pruning where a deletion happened (``config.prune_dangling``); the endpoint rows of the
    remaining connections do not change."""
    population, ok = jax.vmap(lambda u, g, s, d, do: _one_delete(spec, node, u, g, s, d, do))(
        u, population, *rows, mask
    )
    pruned = jnp.zeros(ok.shape, jnp.int32)
    if config.prune_dangling:
        population, pruned = _prune(spec, population, *rows, ok, per_genome)
    return population, ok, pruned


def _draw(u: jax.Array, prob: float, mask: jax.Array | None) -> jax.Array:
    if mask is not None:
        return jnp.broadcast_to(jnp.asarray(mask, bool), u.shape)
    return u < prob


def _rows(population: Genome) -> tuple[jax.Array, jax.Array]:
    return endpoint_rows(population)


# ---------------------------------------------------------------------------------------------
# public steps


def add_node(
    key: jax.Array,
    spec: GenomeSpec,
    config: MutationConfig,
    population: Genome,
    next_node_key: jax.Array,
    next_innov: jax.Array,
    mask: jax.Array | None = None,
) -> tuple[Genome, jax.Array, jax.Array, dict[str, jax.Array]]:
    """The add-node step alone, numbered across the population.

    Args:
        key: PRNG key.
        spec, config: static.
        population: ``Genome[pop]``.
        next_node_key, next_innov: ``int32`` counters.
        mask: ``bool [pop]``: which genomes attempt the mutation; ``None`` draws it with
            ``config.node_add_prob``.

    Returns:
        ``(population, next_node_key, next_innov, metrics)``; with ``structural_mutation_surer``
        a genome without a connection to split adds a connection instead (also numbered).
    """
    P = population.node_key.shape[0]
    u, nodes, conns = _draws(key, spec, config, P, 4, 3 if config.surer else 2)
    population, rows, next_node_key, next_innov, metrics, fallback = _add_node(
        spec,
        config,
        population,
        _rows(population),
        next_node_key,
        next_innov,
        _draw(u[:, 0], config.node_add_prob, mask),
        u[:, 1],
        nodes,
        conns[:, :2],
    )
    if config.surer:
        population, _, slot, m = _add_conn_marked(
            spec, config, population, rows, fallback, _FALLBACK_MARK, u[:, 2:4], conns[:, 2]
        )
        population, next_innov = _number_marked(population, [slot], next_innov)
        metrics = metrics + m
    return population, next_node_key, next_innov, _metrics(metrics)


def add_connection(
    key: jax.Array,
    spec: GenomeSpec,
    config: MutationConfig,
    population: Genome,
    next_innov: jax.Array,
    mask: jax.Array | None = None,
) -> tuple[Genome, jax.Array, dict[str, jax.Array]]:
    """The add-connection step alone: ``(population, next_innov, metrics)``; ``mask``
    (``bool [pop]``) as in :func:`add_node` (``None``: drawn with ``config.conn_add_prob``)."""
    P = population.node_key.shape[0]
    u, _, conns = _draws(key, spec, config, P, 3, 1)
    do = _draw(u[:, 0], config.conn_add_prob, mask)
    population, _, slot, metrics = _add_conn_marked(
        spec, config, population, _rows(population), do, _ADD_MARK, u[:, 1:3], conns[:, 0]
    )
    population, next_innov = _number_marked(population, [slot], next_innov)
    return population, next_innov, _metrics(metrics)


def delete_node(
    key: jax.Array,
    spec: GenomeSpec,
    config: MutationConfig,
    population: Genome,
    mask: jax.Array | None = None,
) -> tuple[Genome, dict[str, jax.Array]]:
    """The delete-node step alone (with pruning if ``config.prune_dangling``):
    ``(population, metrics)``; ``mask`` as in :func:`add_node` (``None``: ``node_delete_prob``)."""
    u = jax.random.uniform(key, (2 * population.node_key.shape[0],)).reshape(-1, 2)
    do = _draw(u[:, 0], config.node_delete_prob, mask)
    rows = _rows(population)
    population, ok, pruned = _delete(True, spec, config, population, rows, do, u[:, 1])
    return population, _metrics(_tally(nodes_deleted=ok, nodes_pruned=pruned))


def delete_connection(
    key: jax.Array,
    spec: GenomeSpec,
    config: MutationConfig,
    population: Genome,
    mask: jax.Array | None = None,
) -> tuple[Genome, dict[str, jax.Array]]:
    """The delete-connection step alone (with pruning if ``config.prune_dangling``):
    ``(population, metrics)``; ``mask`` as in :func:`add_node` (``None``: ``conn_delete_prob``)."""
    u = jax.random.uniform(key, (2 * population.node_key.shape[0],)).reshape(-1, 2)
    do = _draw(u[:, 0], config.conn_delete_prob, mask)
    rows = _rows(population)
    population, ok, pruned = _delete(False, spec, config, population, rows, do, u[:, 1])
    return population, _metrics(_tally(conns_deleted=ok, nodes_pruned=pruned))


def _branch_if_any(fn: Callable[..., tuple], valid: jax.Array, *operands: Any) -> tuple:
    """``fn(*operands)`` if any element of ``valid`` holds, else ``operands[1:]`` unchanged (the first
    operand, e.g. a key, is an input only; ``fn`` returns the others' structure and must give them
    unchanged when nothing is valid), as a conditional: its operands and results are buffers.

    Under ``vmap`` it stays a conditional, on any member of the batch (``fn`` vmapped inside it):
    ``lax.cond`` would become a select of both branches there, a differently fused program whose
    float rounding XLA:CPU need not keep equal to the unbatched one's."""

    @jax.custom_batching.custom_vmap
    def run(valid, *operands):
        return lax.cond(jnp.any(valid), fn, lambda *x: tuple(x[1:]), *operands)

    @run.def_vmap
    def _rule(axis_size, in_batched, valid, *operands):
        # the returned operands carry the batch axis in both branches: unbatched ones are broadcast
        first = jax.tree_util.tree_map(lambda b: 0 if b else None, in_batched[1])
        rest = tuple(
            jax.tree_util.tree_map(
                lambda x, b: x if b else jnp.broadcast_to(x, (axis_size, *jnp.shape(x))), r, rb
            )
            for r, rb in zip(operands[1:], in_batched[2:])
        )
        batched = jax.vmap(fn, in_axes=(first,) + (0,) * len(rest))
        out = _branch_if_any(lambda *x: batched(*x), valid, operands[0], *rest)  # outer vmaps: the same again
        return out, jax.tree_util.tree_map(lambda _: True, out)

    return run(valid, *operands)


def mutate_attributes(key: jax.Array, spec: GenomeSpec, population: Genome) -> Genome:
    """Every node gene (not the input pins) and every connection gene mutated by the gene types'
    ``mutate_attrs``; padding rows and input pins unchanged. ``population``: ``Genome`` with any
    leading axes."""
    k_node, k_conn = rng.split(key)
    # the genes mutate elementwise with draws shaped like their arguments: flat arguments give the
    # same numbers (the random counter is the flat index) from kernels that compile much faster
    A, B = spec.node_gene.num_floats, spec.conn_gene.num_floats
    gene = population.node_valid & (jnp.arange(spec.max_nodes) >= spec.num_inputs)

    def nodes(key, gene, node_attrs, node_act, node_agg):
        lead = gene.shape
        n = math.prod(lead)
        attrs, act, agg = spec.node_gene.mutate_attrs(
            key, node_attrs.reshape(n, A), node_act.reshape(n), node_agg.reshape(n)
        )
        attrs, act, agg = attrs.reshape(*lead, A), act.reshape(lead), agg.reshape(lead)
        return (
            gene,
            jnp.where(gene[..., None], attrs, node_attrs),
            jnp.where(gene, act, node_act),
            jnp.where(gene, agg, node_agg),
        )

    def conns(key, cv, conn_attrs, conn_enabled):
        lead = cv.shape
        c = math.prod(lead)
        cattrs, enabled = spec.conn_gene.mutate_attrs(key, conn_attrs.reshape(c, B), conn_enabled.reshape(c))
        cattrs, enabled = cattrs.reshape(*lead, B), enabled.reshape(lead)
        return cv, jnp.where(cv[..., None], cattrs, conn_attrs), jnp.where(cv, enabled, conn_enabled)

    # conditionals (the other branch: nothing to mutate, the values unchanged, which is what the
    # selects give then), not inline: a branch's operands and results are buffers, so XLA:CPU neither
    # fuses these draws into the long select chain of the structural steps (a kernel it does not
    # vectorize) nor copies them into every later reader of the population
    _, node_attrs, node_act, node_agg = _branch_if_any(
        nodes, gene, k_node, gene, population.node_attrs, population.node_act, population.node_agg
    )
    cv = population.conn_valid
    _, conn_attrs, conn_enabled = _branch_if_any(
        conns, cv, k_conn, cv, population.conn_attrs, population.conn_enabled
    )
    return population.replace(
        node_attrs=node_attrs,
        node_act=node_act,
        node_agg=node_agg,
        conn_attrs=conn_attrs,
        conn_enabled=conn_enabled,
    )


def required_nodes(spec: GenomeSpec, population: Genome) -> jax.Array:
    """``bool [pop, N]``: nodes (outputs and hidden, not input pins) whose value reaches an output
    through enabled connections (neat-python's ``required_for_output``; outputs always)."""
    return _required(spec, population, *_rows(population))


def prune_dangling(spec: GenomeSpec, population: Genome) -> tuple[Genome, jax.Array]:
    """Remove every hidden node not in :func:`required_nodes` and all connections touching it:
    ``(population, removed int32 [pop])``."""
    P = population.node_key.shape[0]
    return _prune(spec, population, *_rows(population), jnp.ones((P,), bool))


def creates_cycle(population: Genome, in_key: jax.Array, out_key: jax.Array) -> jax.Array:
    """``bool [pop]``: would adding ``in_key[i] -> out_key[i]`` (``int32 [pop]``, keys of existing
    nodes) to genome ``i`` close a cycle through its connections, enabled or disabled (neat-python's
    ``creates_cycle``; a self-loop counts). Frontier propagation from ``out`` with ``segment_max``
    over the edge list, stopping when ``in`` is reached or nothing new is."""

    def rows(g, in_key, out_key):
        in_row = jnp.argmax(g.node_key == in_key).astype(jnp.int32)
        is_out = g.node_key == out_key
        return in_row, jnp.where(jnp.any(is_out), jnp.argmax(is_out), -1).astype(jnp.int32)

    in_row, out_row = jax.vmap(rows)(population, in_key, out_key)
    P = population.node_key.shape[0]
    return _creates_cycle(
        population, *_rows(population), in_row, out_row, in_key == out_key, jnp.ones((P,), bool)
    )


def _structural_masks(u: jax.Array, config: MutationConfig):
    """The four structural decisions from ``u float32 [P, 4]`` (only column 0 with
    ``single_structural_mutation``)."""
    probs = (config.node_add_prob, config.node_delete_prob, config.conn_add_prob, config.conn_delete_prob)
    if config.single_structural_mutation:
        div = max(1.0, sum(probs))
        r = u[:, 0]
        edges = [sum(probs[: i + 1]) / div for i in range(4)]
        lower = [0.0] + edges[:3]
        return [(r >= lo) & (r < hi) for lo, hi in zip(lower, edges)]
    return [u[:, i] < p for i, p in enumerate(probs)]


def mutate(
    key: jax.Array,
    spec: GenomeSpec,
    config: MutationConfig,
    population: Genome,
    next_node_key: jax.Array,
    next_innov: jax.Array,
    active: jax.Array | None = None,
    per_genome: PerGenome = _whole,
    across_genomes: AcrossGenomes = _whole,
) -> tuple[Genome, jax.Array, jax.Array, dict[str, jax.Array]]:
    """Mutate every genome of ``population`` once (neat-python's ``DefaultGenome.mutate``; see
    the module docstring for the order and the numbering).

    Args:
        key: PRNG key.
        spec: the :class:`GenomeSpec` (static).
        config: the :class:`MutationConfig` (static).
        population: ``Genome[pop]``.
        next_node_key, next_innov: ``int32`` scalars, the global counters
            (:func:`evotensor.neat.innovation.initial_counters` for a fresh population).
        active: optional ``bool [pop]``: only these genomes are mutated; the others (NEAT's
            elites) come back unchanged, draw no structural mutation and use up no number.
        per_genome: how the per-genome searches (endpoint rows, the cycle checks, pruning's
            reachability) run: ``per_genome(fn, *arrays)`` with ``arrays`` of leading axis
            ``[pop]`` and rows independent; default ``fn(*arrays)``. On a mesh NEAT passes
            :meth:`evotensor.neat.sharding.MeshLayout.per_genome` (each device searches its own
            genomes, with its own loop trip counts); the result is the same.
        across_genomes: how the generation-wide numbering (the sorts of every genome's proposals)
            runs: ``across_genomes(fn, rows, *counters)`` with ``rows`` a tuple of ``[pop, ...]``
            arrays; default ``fn(rows, *counters)``. On a mesh:
            :meth:`evotensor.neat.sharding.MeshLayout.across_genomes` (the proposals gathered once,
            numbered whole on every device).

    Returns:
        ``(population, next_node_key, next_innov, metrics)``: the counters advanced by the
        distinct new node keys and innovation numbers handed out; ``metrics`` maps each of
        :data:`METRIC_NAMES` to an ``int32`` scalar (population totals).

    Example::

        spec = GenomeSpec(2, 1)
        pop = spec.initial(jax.random.key(0), 150)
        nk, ni = initial_counters(spec)
        step = jax.jit(mutate, static_argnums=(1, 2))
        pop, nk, ni, metrics = step(jax.random.key(1), spec, MutationConfig(), pop, nk, ni)
    """
    P = population.node_key.shape[0]
    next_node_key = jnp.asarray(next_node_key, jnp.int32)
    next_innov = jnp.asarray(next_innov, jnp.int32)
    k_struct, k_attr = rng.split(key)
    # u's columns: 0-3 the four structural decisions, 4 the split connection, 5-6 the fallback's
    # out/in, 7 the deleted node, 8-9 the added connection's out/in, 10 the deleted connection;
    # new connections: 2 per split, then the fallback's, then the added one
    fb = 1 if config.surer else 0
    u, nodes, conns = _draws(k_struct, spec, config, P, 11, 3 + fb)
    m_add_node, m_del_node, m_add_conn, m_del_conn = _structural_masks(u[:, :4], config)
    if active is not None:
        active = jnp.asarray(active, bool)
        if active.shape != (P,):
            raise ArgumentError(f"active must be bool [pop] = [{P}], got shape {active.shape}")
        m_add_node, m_del_node, m_add_conn, m_del_conn = (
            m & active for m in (m_add_node, m_del_node, m_add_conn, m_del_conn)
        )
    unchanged = population
    # the endpoint rows of every connection, found once and kept up to date by every step
    rows = per_genome(_rows, population)
    population, rows, next_node_key, next_innov, metrics, fallback = _add_node(
        spec,
        config,
        population,
        rows,
        next_node_key,
        next_innov,
        m_add_node,
        u[:, 4],
        nodes,
        conns[:, :2],
        across_genomes,
    )
    # then two rounds of an add-connection step and a deletion with its pruning: the fallback's
    # connections (none without structural_mutation_surer) and a node deletion, then the
    # add-connection step and a connection deletion; one loop, so each step is compiled once
    empty = (jnp.zeros((P,), bool), jnp.zeros((P,), jnp.int32), jnp.zeros((P,), jnp.int32))
    # whether a round adds anything, for both rounds before the loop (one reduction; on a mesh one
    # collective, outside the loop)
    wants = jnp.any(jnp.stack([fallback, m_add_conn]), axis=1)

    def add_conn(inputs, population, rows, slot, metrics):
        population, rows, slot, m = _add_conn_marked(spec, config, population, rows, *inputs, per_genome)
        return population, rows, slot[:3], metrics + m

    def round_(r, carry):
        population, rows, added, metrics, _ = carry
        first = r == 0
        pick = lambda a, b: jnp.where(first, a, b)  # noqa: E731  (selects fuse into their readers)
        mark = pick(_FALLBACK_MARK, _ADD_MARK)
        inputs = (
            pick(fallback, m_add_conn),
            mark,
            pick(u[:, 5:7], u[:, 8:10]),
            pick(conns[:, 2], conns[:, 2 + fb]),
        )
        # a conditional: a round in which no genome adds a connection (the fallback's, without
        # structural_mutation_surer) skips the step, which would change nothing (the numbering
        # ignores the endpoint keys of connections not added)
        population, rows, slot, metrics = _branch_if_any(
            add_conn, pick(wants[0], wants[1]), inputs, population, rows, empty, metrics
        )
        if config.surer:  # the fallback's slot, kept for the numbering at the end
            added = tuple(pick(x, a) for a, x in zip(added, slot))
        del_mask, u_del = pick(m_del_node, m_del_conn), pick(u[:, 7], u[:, 10])
        population, ok, pruned = _delete(first, spec, config, population, rows, del_mask, u_del, per_genome)
        deleted = _tally(nodes_deleted=ok & first, conns_deleted=ok & ~first, nodes_pruned=pruned)
        return population, rows, added, metrics + deleted, slot

    population, rows, added, metrics, slot = lax.fori_loop(
        0, 2, round_, (population, rows, empty, metrics, empty)
    )
    slots = ([(*added, _FALLBACK_MARK)] if config.surer else []) + [(*slot, _ADD_MARK)]
    population, next_innov = _number_marked(population, slots, next_innov, across_genomes)
    metrics = _metrics(metrics)
    mutated = mutate_attributes(k_attr, spec, population)
    if active is None:
        return mutated, next_node_key, next_innov, metrics
    # inactive genomes drew no structural mutation, so only their attributes need restoring
    population = jax.tree_util.tree_map(
        lambda new, old: jnp.where(active.reshape((P,) + (1,) * (new.ndim - 1)), new, old), mutated, unchanged
    )
    return population, next_node_key, next_innov, metrics
