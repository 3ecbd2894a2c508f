"""Compatibility distance between NEAT genomes, in three named modes, and the row alignment
(sort + binary search) that crossover shares.

Modes (``DistanceConfig.mode``), with ``c_d``, ``c_e``, ``c_w`` the disjoint, excess and weight
coefficients:

* ``"neat-python"`` (neat-python 2.1 ``DefaultGenome.distance``): node term plus connection term.

  - Node term (``compatibility_include_node_genes``): ``(c_w * sum over homologous nodes of
    attribute_distance + c_d * #disjoint nodes) / max(#nodes a, #nodes b)``. Node genes are the
    outputs and hidden nodes (input pins are not node genes); homologous means the same key.
  - Connection term: ``(sum over matching genes of c_w * (attribute_distance + enable_penalty *
    [enabled differs]) + c_d * D + c_e * E) / max(#conns a, #conns b)``, ``0`` when both genomes
    have no connection. Genes match when their innovation numbers *and* their ``(in, out)`` pairs
    are equal; a shared innovation number on different pairs (a collision) counts as two disjoint
    genes, as in neat-python. A non-matching gene is excess when its innovation number is above the
    other genome's largest one (every gene is excess against a genome without connections), else
    disjoint. ``c_e`` defaults to ``c_d`` (neat-python's ``compatibility_excess_coefficient =
    auto``).

* ``"paper"`` (Stanley & Miikkulainen 2002): connections only, ``c_e * E / N + c_d * D / N + c_w *
  W_bar`` with ``W_bar`` the *mean* ``attribute_distance`` (``|d weight|``) over matching genes
  (``0`` when none match; the enabled flag does not count), ``N`` the larger genome's connection
  count, and ``N = 1`` when both genomes have fewer than ``normalize_small_genomes_threshold``
  (20) connection genes. Matching, excess and disjoint as in ``"neat-python"``.

* ``"tensorneat"`` (TensorNEAT's ``DefaultDistance``): node term plus connection term, each
  ``(c_d * #non-homologous + c_w * sum over homologous of attribute_distance) / max(count a, count
  b)`` (``0`` when both counts are ``0``). Node rows *include the input pins* (they match each
  other and only dilute the node term, as in TensorNEAT); connections are homologous when their
  ``(in, out)`` pairs are equal (innovation numbers are ignored); no excess/disjoint split, no
  enabled term.

Coefficients left ``None`` take the mode's defaults: ``c_d = 1.0`` everywhere, ``c_w = 0.5``
(neat-python's XOR example) for ``"neat-python"``, ``c_w = 0.4`` for ``"paper"`` (c3) and
``"tensorneat"``; ``c_e = c_d`` (the paper's ``c1 = c2 = 1``).

``attribute_distance`` is the gene type's (:meth:`NodeGene.attribute_distance`,
:meth:`ConnectionGene.attribute_distance`), so custom genes bring their own.

Cost: one sort of the second genome's rows and a ``log2``-step binary search per row of the first,
``O((N + C) log C)`` per pair, ``O(N + C)`` memory; never a ``[C, C]`` comparison.
:func:`distance_matrix` searches only the rows some genome of the population uses (genomes fill
their first free rows, so usually a small prefix) and gives the same values, bit for bit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from evotensor.core.checks import ArgumentError, check_choice, check_int, check_real
from evotensor.core.packing import from_int32, to_int32
from evotensor.neat.genome import EMPTY, Genome, GenomeSpec

__all__ = [
    "DISTANCE_MODES",
    "DistanceConfig",
    "SortedTable",
    "distance",
    "distance_matrix",
    "endpoint_lookup",
    "endpoint_rows",
    "homologous_rows",
]

DISTANCE_MODES = ("neat-python", "paper", "tensorneat")
_WEIGHT_DEFAULT = {"neat-python": 0.5, "paper": 0.4, "tensorneat": 0.4}


@dataclasses.dataclass(frozen=True)
class DistanceConfig:
    """Which compatibility distance to compute, with neat-python's option names (hashable, static).

    Args:
        mode: ``"neat-python"``, ``"paper"`` or ``"tensorneat"`` (see the module docstring).
        compatibility_disjoint_coefficient: ``c_d`` (``None``: ``1.0``).
        compatibility_weight_coefficient: ``c_w`` (``None``: ``0.5`` for neat-python, ``0.4`` for
            paper and tensorneat).
        compatibility_excess_coefficient: ``c_e``; ``None`` or ``"auto"``: equal to ``c_d``. Unused by
            ``"tensorneat"``.
        compatibility_include_node_genes: add the node term (``"neat-python"``, ``"tensorneat"``).
        compatibility_enable_penalty: added to a matching gene pair's attribute distance when one is
            enabled and the other not (``"neat-python"`` only).
        normalize_small_genomes_threshold: ``"paper"`` only: ``N = 1`` when both genomes have fewer
            connection genes than this (``0`` turns it off).

    Example::

        cfg = DistanceConfig(mode="paper")
        d = distance(spec, cfg, genome_a, genome_b)
    """

    mode: str = "neat-python"
    compatibility_disjoint_coefficient: float | None = None
    compatibility_weight_coefficient: float | None = None
    compatibility_excess_coefficient: float | str | None = None
    compatibility_include_node_genes: bool = True
    compatibility_enable_penalty: float = 1.0
    normalize_small_genomes_threshold: int = 20

    def __post_init__(self):
        check_choice(self.mode, "mode", DISTANCE_MODES)
        for name in ("compatibility_disjoint_coefficient", "compatibility_weight_coefficient"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, check_real(value, name, 0.0))
        excess = self.compatibility_excess_coefficient
        if isinstance(excess, str):
            if excess != "auto":
                raise ArgumentError(
                    f"compatibility_excess_coefficient must be a number >= 0, None or 'auto', got {excess!r}"
                )
        elif excess is not None:
            object.__setattr__(
                self,
                "compatibility_excess_coefficient",
                check_real(excess, "compatibility_excess_coefficient", 0.0),
            )
        if not isinstance(self.compatibility_include_node_genes, bool):
            raise ArgumentError(
                "compatibility_include_node_genes must be a bool, got "
                f"{self.compatibility_include_node_genes!r}"
            )
        object.__setattr__(
            self,
            "compatibility_enable_penalty",
            check_real(self.compatibility_enable_penalty, "compatibility_enable_penalty", 0.0),
        )
        check_int(
            self.normalize_small_genomes_threshold,
            "normalize_small_genomes_threshold",
            minimum=0,
            maximum=2**31 - 1,
        )

    @property
    def disjoint_coefficient(self) -> float:
        """``c_d`` with the mode's default filled in."""
        c = self.compatibility_disjoint_coefficient
        return 1.0 if c is None else c

    @property
    def weight_coefficient(self) -> float:
        """``c_w`` with the mode's default filled in."""
        c = self.compatibility_weight_coefficient
        return _WEIGHT_DEFAULT[self.mode] if c is None else c

    @property
    def excess_coefficient(self) -> float:
        """``c_e``; ``None``/``"auto"`` resolve to :attr:`disjoint_coefficient`."""
        c = self.compatibility_excess_coefficient
        return self.disjoint_coefficient if c is None or c == "auto" else c


_INT_MAX = int(np.iinfo(np.int32).max)


def _lex_less(a: Sequence[jax.Array], b: Sequence[jax.Array]) -> jax.Array:
    """``a < b`` in lexicographic column order (elementwise over rows)."""
    less = a[-1] < b[-1]
    for x, y in zip(a[-2::-1], b[-2::-1]):
        less = (x < y) | ((x == y) & less)
    return less


@jax.tree_util.register_pytree_node_class
class SortedTable:
    """One table's key columns sorted once, for repeated lookups (:meth:`lookup`) that also fetch
    the matching rows' payload columns in a single packed gather.

    Args:
        keys: key columns ``int32 [T]`` (one genome's rows); the valid keys must be unique.
        valid: ``bool [T]``: which rows are in the table.
        payload: columns ``[T, ...]`` (``int32``, ``float32`` or ``bool``, bit-exact) to fetch with
            each lookup.
        method: ``"rank"`` or ``"sort"`` (below).

    Sorted order: ascending lexicographically, valid rows first among equal keys, then by row;
    invalid rows hold ``int32`` max in every key column. The sorted table is padded to ``L``, the
    smallest power of two ``>= T + 1``, with such rows, so a lookup never runs off the end.
    ``perm int32 [L]`` is the table row of each sorted row (``0`` for the padding).

    ``method`` (a single key column only; several columns always sort lexicographically with the
    row index as one ``lax.sort``): ``"rank"`` sorts the key column alone (a one-operand sort,
    several times faster on a CPU than one carrying the row index) and places each valid row at
    its rank, found by the same binary search as a lookup (valid keys are unique), with one
    scatter of the row index into ``perm``; the invalid rows are left out (the padding stands in
    for them), and the packed columns stay in table order (a lookup reads row ``perm[pos]``,
    found where ``pos < n_valid``). ``"sort"`` carries
    the row index and the payload columns through the sort: fewer operations to compile, for
    tables built once (not per genome of a population).
    """

    def __init__(self, keys, valid: jax.Array, payload=(), method: str = "rank"):
        check_choice(method, "method", ("rank", "sort"))
        keys = [jnp.asarray(c, jnp.int32) for c in keys]
        T = keys[0].shape[-1]
        L = 1 << T.bit_length()
        pad = L - T
        valid = jnp.asarray(valid, bool)
        cols = [jnp.where(valid, c, _INT_MAX) for c in keys]
        payload = [jnp.asarray(c) for c in payload]
        self._layout = [(c.shape[1:], c.dtype) for c in payload]
        self.n_valid = jnp.sum(valid, dtype=jnp.int32)
        rows = [c.reshape(T, -1) for c in (valid.astype(jnp.int32), *cols)]
        rows += [to_int32(c).reshape(T, -1) for c in payload]
        rows = jnp.concatenate(rows, axis=1)
        if len(cols) == 1 and method == "rank":
            self.keys = (jnp.concatenate([lax.sort(cols[0]), jnp.full((pad,), _INT_MAX, jnp.int32)]),)
            # valid keys are unique, so a valid row's lower bound is its position; an invalid row
            # is sent past the end (distinct indices, dropped), leaving zero padding there
            iota = jnp.arange(T, dtype=jnp.int32)
            rank = jnp.where(valid, _lower_bound(self.keys, cols, self.n_valid), L + iota)
            self.perm = jnp.zeros((L,), jnp.int32).at[rank].set(iota, mode="drop", unique_indices=True)
            # the packed rows stay in table order and a lookup reads row ``perm[pos]`` (a gather XLA
            # fuses into the lookup's own): a sorted copy would scatter every packed column of every
            # table, and a population's tables are built for one or two lookups each
            self._packed, self._by_perm = rows, True
            return
        # the keys and the row index are sorted (the row index as the last key: a total order), and
        # the packed rows gathered by the permutation once, behind a barrier: XLA would otherwise
        # fuse the permuting gather into every lookup's gather (a table per looked-up row), and
        # carrying every packed column through the sort costs a kernel per column
        width = rows.shape[1]
        out = lax.sort(
            (*cols, (~valid).astype(jnp.int32), jnp.arange(T, dtype=jnp.int32)), num_keys=len(cols) + 2
        )
        n = len(cols)
        self.keys = tuple(jnp.concatenate([c, jnp.full((pad,), _INT_MAX, jnp.int32)]) for c in out[:n])
        self.perm = jnp.concatenate([out[n + 1], jnp.zeros((pad,), jnp.int32)])
        self._packed = jnp.concatenate(
            [lax.optimization_barrier(rows[out[n + 1]]), jnp.zeros((pad, width), jnp.int32)]
        )
        self._by_perm = False

    def tree_flatten(self):
        """A pytree (so a population's tables can be built and used under ``vmap``)."""
        return (self.keys, self.perm, self._packed, self.n_valid), (tuple(self._layout), self._by_perm)

    @classmethod
    def tree_unflatten(cls, aux, children):
        table = object.__new__(cls)
        table.keys, table.perm, table._packed, table.n_valid = children
        layout, table._by_perm = aux
        table._layout = list(layout)
        return table

    def lookup(self, query) -> tuple[jax.Array, jax.Array, tuple]:
        """For each query row (key columns ``int32 [R]``): ``(pos int32 [R], found bool [R],
        payload)``: its position in the sorted table, whether a valid row with equal keys is
        there, and that row's payload columns ``[R, ...]`` (meaningless where not found).

        A branchless lower bound (``log2 L`` steps, each one gather per key column and a select
        of a single running position), then one gather of the packed row. No ``[R, T]``
        comparison. A query never matches an invalid row: among equal keys the valid row sorts
        first, and the found check reads the row's valid flag.
        """
        q = [jnp.asarray(c, jnp.int32) for c in query]
        base = _lower_bound(self.keys, q, self.n_valid)
        if self._by_perm:  # rows in table order; the first n_valid sorted positions hold valid rows
            row = self._packed[self.perm[base]]
            found = base < self.n_valid
        else:
            row = self._packed[base]
            found = row[:, 0] != 0
        for j, x in enumerate(q):
            found = found & (row[:, 1 + j] == x)
        out, col = [], 1 + len(q)
        for shape, dtype in self._layout:
            width = int(np.prod(shape, dtype=np.int64))
            out.append(from_int32(row[:, col : col + width].reshape(row.shape[:1] + shape), dtype))
            col += width
        return base, found, tuple(out)


def _lower_bound(sorted_keys, query, n_valid: jax.Array | None = None) -> jax.Array:
    """Branchless lexicographic lower bound of ``query`` (columns ``[R]``) in ``sorted_keys``
    (columns ``[L]``, ``L`` a power of two whose last row no query row is above): ``int32 [R]``,
    the number of sorted rows below each query row.

    With ``n_valid`` (``int32 []``: rows ``n_valid ..`` hold ``int32`` max) only ``bit_length(
    n_valid)`` steps run (a loop; NEAT genomes usually use a small part of their rows), else all
    ``log2 L`` steps, unrolled."""
    L = sorted_keys[0].shape[0]
    base = jnp.zeros(query[0].shape, jnp.int32)

    def step(base, half):
        less = _lex_less([c[base + (half - 1)] for c in sorted_keys], query)
        return jnp.where(less, base + half, base)

    if n_valid is None:
        half = L // 2
        while half >= 1:
            base = step(base, half)
            half //= 2
        return base
    # the first 2**k rows, k = bit_length(n_valid), end in a row no query is above
    k = 32 - lax.clz(jnp.asarray(n_valid, jnp.int32))
    return lax.fori_loop(0, k, lambda i, base: step(base, jnp.left_shift(1, k - 1 - i)), base)


def homologous_rows(
    query: Sequence[jax.Array], table: Sequence[jax.Array], table_valid: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """For each query row, the valid table row with equal values in every key column.

    ``query``: key columns ``int32 [R]`` (one genome's rows; ``vmap`` for a population);
    ``table``: key columns ``int32 [T]``; ``table_valid bool [T]``. Returns ``(row int32 [R],
    found bool [R])``: ``row`` indexes ``table`` (any in-range row where ``found`` is false). The
    valid table keys must be unique (node keys, innovation numbers, ``(in, out)`` pairs are).

    The table is sorted once (:class:`SortedTable`: ``lax.sort`` on the key columns, invalid rows
    last) and each query row is placed by a branchless lexicographic binary search of
    ``bit_length(T)`` steps: ``O((R + T) log T)`` work and ``O(R + T)`` memory, never an ``[R, T]``
    comparison.
    """
    if len(query) != len(table) or not query:
        raise ArgumentError("query and table must have the same, non-zero number of key columns")
    sorted_table = SortedTable(table, table_valid)
    pos, found, _ = sorted_table.lookup(query)
    return sorted_table.perm[pos], found


def endpoint_lookup(genome: Genome) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """The node rows of every connection's endpoints, and whether a node holds the key: ``(src
    int32 [..., C], dst int32 [..., C], src_found bool [..., C], dst_found bool [..., C])`` for one
    genome (arrays ``[N]``, ``[C]``) or a population (``[P, ...]``); meaningless for unused
    connection rows (and rows for a key no node holds). One sorted node table per genome
    (:class:`SortedTable`) and one lookup of both endpoint columns; for a population only the
    connection rows some genome uses are looked up (the others get row ``0``, not found)."""
    if genome.node_key.ndim == 1:
        C = genome.conn_in.shape[0]
        table = SortedTable((genome.node_key,), genome.node_valid)
        pos, found, _ = table.lookup((jnp.concatenate([genome.conn_in, genome.conn_out]),))
        rows = table.perm[pos]
        return rows[:C], rows[C:], found[:C], found[C:]
    if genome.node_key.ndim != 2:
        return jax.vmap(endpoint_lookup)(genome)
    tables = jax.vmap(lambda g: SortedTable((g.node_key,), g.node_valid))(genome)

    def chunk(c_in, c_out):  # [P, W] each
        W = c_in.shape[1]

        def one(table, c_in, c_out):
            pos, found, _ = table.lookup((jnp.concatenate([c_in, c_out]),))
            rows = table.perm[pos]
            return rows[:W], rows[W:], found[:W], found[W:]

        return jax.vmap(one)(tables, c_in, c_out)

    return _used_rows(chunk, (genome.conn_in, genome.conn_out), genome.conn_valid, (0, 0, False, False))


def endpoint_rows(genome: Genome) -> tuple[jax.Array, jax.Array]:
    """The node rows of every connection's endpoints: ``(src int32 [..., C], dst int32 [..., C])``
    for one genome (arrays ``[N]``, ``[C]``) or a population; meaningless for unused connection
    rows (and for a key no node holds). See :func:`endpoint_lookup`."""
    src, dst, _, _ = endpoint_lookup(genome)
    return src, dst


def _safe_ratio(value: jax.Array, count: jax.Array) -> jax.Array:
    return jnp.where(count > 0, value / jnp.maximum(count, 1).astype(jnp.float32), 0.0)


# The distance of a genome ``a`` to a genome ``b`` in two parts: per-row terms of ``a``'s rows, each
# row looked up in ``b``'s sorted tables (:func:`_tables`, :func:`_node_rows`, :func:`_conn_rows`),
# then sums and counts over the rows (:func:`_row_sums`, :func:`_combine`). :func:`distance` runs
# both on one pair; :func:`distance_matrix` computes the row terms of a whole population against one
# genome only for the rows some genome uses (:func:`_used_rows`, counting the matches as it goes),
# which gives the same row arrays and counts and so the same sums.


def _node_genes(g: Genome, with_inputs: bool) -> jax.Array:
    return g.node_valid if with_inputs else g.node_valid & (g.node_key >= 0)


def _tables(spec: GenomeSpec, config: DistanceConfig, b: Genome) -> dict[str, SortedTable]:
    """``b``'s sorted tables for the mode (``b``: one genome)."""
    tables = {}
    if config.compatibility_include_node_genes and config.mode != "paper":
        gene_b = _node_genes(b, config.mode == "tensorneat")
        tables["node"] = SortedTable(
            (b.node_key,), gene_b, (b.node_attrs, b.node_act, b.node_agg), method="sort"
        )
    if config.mode == "tensorneat":
        tables["conn"] = SortedTable((b.conn_in, b.conn_out), b.conn_valid, (b.conn_attrs,))
    else:
        tables["conn"] = SortedTable(
            (b.conn_innov,),
            b.conn_valid,
            (b.conn_in, b.conn_out, b.conn_enabled, b.conn_attrs),
            method="sort",
        )
    return tables


def _node_rows(spec: GenomeSpec, config: DistanceConfig, table: SortedTable, key, attrs, act, agg):
    """Per node row of ``a`` (columns ``[R]``, ``attrs [R, A]``): ``(matched bool [R], d float32
    [R])``, a homologous node gene of ``b`` and the attribute distance to it."""
    _, found, (attrs_b, act_b, agg_b) = table.lookup((key,))
    gene = key >= 0 if config.mode != "tensorneat" else key != EMPTY
    d = spec.node_gene.attribute_distance(attrs, act, agg, attrs_b, act_b, agg_b)
    return gene & found, d


def _conn_rows(
    spec: GenomeSpec, config: DistanceConfig, table: SortedTable, c_in, c_out, innov, enabled, attrs
):
    """Per connection row of ``a`` (columns ``[R]``, ``attrs [R, B]``): ``(matched bool [R], d
    float32 [R], enabled_differs bool [R])``."""
    valid = innov != EMPTY
    if config.mode == "tensorneat":
        _, found, (attrs_b,) = table.lookup((c_in, c_out))
        return valid & found, spec.conn_gene.attribute_distance(attrs, attrs_b), jnp.zeros_like(valid)
    _, found, (in_b, out_b, enabled_b, attrs_b) = table.lookup((innov,))
    matched = valid & found & (c_in == in_b) & (c_out == out_b)
    return matched, spec.conn_gene.attribute_distance(attrs, attrs_b), enabled != enabled_b


def _row_terms(spec: GenomeSpec, config: DistanceConfig, tables, a: Genome) -> dict[str, tuple]:
    """All per-row terms of one genome ``a`` (arrays ``[N]``, ``[C]``)."""
    out = {"conn": _conn_rows(spec, config, tables["conn"], *_conn_columns(a))}
    if "node" in tables:
        out["node"] = _node_rows(spec, config, tables["node"], *_node_columns(a))
    return out


def _node_columns(g: Genome) -> tuple:
    return g.node_key, g.node_attrs, g.node_act, g.node_agg


def _conn_columns(g: Genome) -> tuple:
    return g.conn_in, g.conn_out, g.conn_innov, g.conn_enabled, g.conn_attrs


def _row_sums(rows: dict[str, tuple]) -> dict[str, tuple]:
    """The sums :func:`_combine` needs from :func:`_row_terms`' rows (one genome ``a``): node
    ``(attribute distance over matches, matches)``, connection ``(attribute distance over matches,
    matches, matches whose enabled flags differ)``."""
    out = {}
    if "node" in rows:
        matched, d = rows["node"]
        out["node"] = (jnp.sum(jnp.where(matched, d, 0.0)), jnp.sum(matched, dtype=jnp.int32))
    matched, d, differs = rows["conn"]
    out["conn"] = (
        jnp.sum(jnp.where(matched, d, 0.0)),
        jnp.sum(matched, dtype=jnp.int32),
        jnp.sum(matched & differs, dtype=jnp.int32),
    )
    return out


def _combine(
    spec: GenomeSpec, config: DistanceConfig, a: Genome, b: Genome, sums: dict[str, tuple]
) -> jax.Array:
    """The distance from the sums over ``a``'s per-row terms (:func:`_row_sums`) and both genomes'
    counts (one pair: arrays ``[N]``, ``[C]``)."""
    c_d, c_w, c_e = config.disjoint_coefficient, config.weight_coefficient, config.excess_coefficient
    total = jnp.zeros((), jnp.float32)
    if "node" in sums:
        with_inputs = config.mode == "tensorneat"
        homologous, n_match = sums["node"]
        n_a = jnp.sum(_node_genes(a, with_inputs), dtype=jnp.int32)
        n_b = jnp.sum(_node_genes(b, with_inputs), dtype=jnp.int32)
        non_homologous = (n_a + n_b - 2 * n_match).astype(jnp.float32)
        value = c_w * homologous + c_d * non_homologous
        total = total + _safe_ratio(value, jnp.maximum(n_a, n_b))
    attr, n_match, enabled_differs = sums["conn"]
    va, vb = a.conn_valid, b.conn_valid
    n_a = jnp.sum(va, dtype=jnp.int32)
    n_b = jnp.sum(vb, dtype=jnp.int32)
    if config.mode == "tensorneat":  # connections homologous by (in, out): no excess/disjoint split
        non_homologous = (n_a + n_b - 2 * n_match).astype(jnp.float32)
        return total + _safe_ratio(c_w * attr + c_d * non_homologous, jnp.maximum(n_a, n_b))
    # an empty genome's maximum is below every innovation number (all >= 0): all excess
    max_a = jnp.max(jnp.where(va, a.conn_innov, -1))
    max_b = jnp.max(jnp.where(vb, b.conn_innov, -1))
    excess = jnp.sum(va & (a.conn_innov > max_b), dtype=jnp.int32) + jnp.sum(
        vb & (b.conn_innov > max_a), dtype=jnp.int32
    )
    disjoint = n_a + n_b - 2 * n_match - excess
    if config.mode == "paper":
        n = jnp.maximum(n_a, n_b)
        n = jnp.where(n < config.normalize_small_genomes_threshold, 1, jnp.maximum(n, 1)).astype(jnp.float32)
        w_bar = _safe_ratio(attr, n_match)
        return (c_e * excess.astype(jnp.float32) + c_d * disjoint.astype(jnp.float32)) / n + c_w * w_bar
    homologous = attr + config.compatibility_enable_penalty * enabled_differs.astype(jnp.float32)
    value = c_w * homologous + c_d * disjoint.astype(jnp.float32) + c_e * excess.astype(jnp.float32)
    return total + _safe_ratio(value, jnp.maximum(n_a, n_b))


def distance(spec: GenomeSpec, config: DistanceConfig, a: Genome, b: Genome) -> jax.Array:
    """The compatibility distance between two genomes (arrays ``[N]``, ``[C]``): ``float32 []``.

    Symmetric, ``0`` for a genome and itself; ``vmap`` it over pairs, or use
    :func:`distance_matrix`. Pure and jit-able; ``spec`` and ``config`` are static.
    """
    if not isinstance(spec, GenomeSpec):
        raise ArgumentError(f"spec must be a GenomeSpec, got {type(spec).__name__}")
    if not isinstance(config, DistanceConfig):
        raise ArgumentError(f"config must be a DistanceConfig, got {type(config).__name__}")
    for name, g in (("a", a), ("b", b)):
        if g.node_key.shape != (spec.max_nodes,) or g.conn_innov.shape != (spec.max_conns,):
            raise ArgumentError(
                f"{name} must be a single genome [{spec.max_nodes}], [{spec.max_conns}]; got "
                f"{g.node_key.shape}, {g.conn_innov.shape} (vmap or distance_matrix for populations)"
            )
    return _combine(spec, config, a, b, _row_sums(_row_terms(spec, config, _tables(spec, config, b), a)))


# rows per chunk of :func:`_used_rows`
_ROW_CHUNK = 8


def _used_rows(fn, columns: tuple, valid: jax.Array, empty: tuple, counted: int = 0) -> tuple:
    """``fn`` (columns ``[P, W, ...]`` -> outputs ``[P, W, ...]``, row by row) of a population's rows
    (``columns`` ``[P, T, ...]``), only up to the last row any genome uses (``valid bool [P, T]``),
    in chunks of ``W = _ROW_CHUNK`` rows (a ``fori_loop`` of as many steps as needed; the last chunk
    ends at row ``T``, overlapping its predecessor). Rows no genome uses get ``empty`` (one value per
    output: what ``fn`` gives for an unused row, where it matters). Outputs ``[P, T, ...]``; the last
    ``counted`` outputs of ``fn`` (``bool [P, W]``, false for unused rows) are instead counted per
    genome, each row once: ``int32 [P]`` (an exact sum, with no ``[P, T]`` array to write and reduce)."""
    P, T = valid.shape
    W = min(_ROW_CHUNK, T)
    used = jnp.max(jnp.where(valid, jnp.arange(T, dtype=jnp.int32), -1)) + 1
    shapes = jax.eval_shape(fn, *(jax.ShapeDtypeStruct((P, W, *c.shape[2:]), c.dtype) for c in columns))
    kept = len(shapes) - counted
    init = tuple(jnp.full((P, T, *s.shape[2:]), e, s.dtype) for s, e in zip(shapes[:kept], empty))
    # counts per genome and chunk column, summed over the columns after the loop (an elementwise
    # add per chunk rather than a small reduction)
    init += tuple(jnp.zeros((P, W), jnp.int32) for _ in range(counted))

    def chunk(j, outs):
        start = jnp.minimum(j * W, T - W)
        res = fn(*(lax.dynamic_slice_in_dim(c, start, W, axis=1) for c in columns))
        rows = tuple(lax.dynamic_update_slice_in_dim(o, r, start, axis=1) for o, r in zip(outs, res[:kept]))
        fresh = start + jnp.arange(W, dtype=jnp.int32) >= j * W  # not counted by the previous chunk
        counts = tuple(o + (r & fresh).astype(jnp.int32) for o, r in zip(outs[kept:], res[kept:]))
        return rows + counts

    out = lax.fori_loop(0, (used + W - 1) // W, chunk, init)
    return out[:kept] + tuple(jnp.sum(c, axis=1, dtype=jnp.int32) for c in out[kept:])


def _distances_to(spec: GenomeSpec, config: DistanceConfig, population: Genome, b: Genome) -> jax.Array:
    """``float32 [P]``: every genome of ``population`` to the one genome ``b``; the row terms only
    for rows in use (:func:`_used_rows`), the same values as ``vmap(distance)``."""
    tables = _tables(spec, config, b)

    def flat(fn):  # the rows of a chunk as one flat batch of lookups in b's tables
        def run(*cols):
            P, W = cols[0].shape[:2]
            out = fn(*(c.reshape(P * W, *c.shape[2:]) for c in cols))
            return tuple(o.reshape(P, W, *o.shape[1:]) for o in out)

        return run

    def conn_terms(*c):  # the masked distances, then the counted rows: matches, enabled differs
        matched, d, differs = _conn_rows(spec, config, tables["conn"], *c)
        return jnp.where(matched, d, 0.0), matched, matched & differs

    def node_terms(*c):
        matched, d = _node_rows(spec, config, tables["node"], *c)
        return jnp.where(matched, d, 0.0), matched

    # the float sums reduce [P, T] rows exactly as :func:`_row_sums` does; the counts are exact
    # integer sums taken inside the loop (no [P, T] boolean rows to write back and reduce)
    d, n_match, differs = _used_rows(
        flat(conn_terms), _conn_columns(population), population.conn_valid, (0.0,), counted=2
    )
    sums = {"conn": (jnp.sum(d, axis=1), n_match, differs)}
    if "node" in tables:
        d, n_match = _used_rows(
            flat(node_terms), _node_columns(population), population.node_valid, (0.0,), counted=1
        )
        sums["node"] = (jnp.sum(d, axis=1), n_match)
    return jax.vmap(lambda a, s: _combine(spec, config, a, b, s))(population, sums)


def distance_matrix(
    spec: GenomeSpec,
    config: DistanceConfig,
    population: Genome,
    representatives: Genome,
    batch_size: int | None = None,
) -> jax.Array:
    """Distances of every genome to every representative: ``float32 [P, S]``, the same values as
    :func:`distance` of each pair.

    ``population``: genomes ``[P, ...]``; ``representatives``: ``[S, ...]`` (e.g. species centres).
    ``lax.map`` walks over the representatives, ``batch_size`` at a time (``None``: one); each step
    sorts the representative's rows once and looks up the population's rows in use (up to the last
    row any genome uses: genomes fill their first free rows, so usually a small prefix): memory
    ``O(batch_size * P * (N + C))``, never ``[P, S, C]`` or ``[C, C]``.
    """
    if batch_size is not None:
        batch_size = check_int(batch_size, "batch_size")
    if population.node_key.ndim != 2:
        raise ArgumentError(f"population must be genomes [P, ...], got node_key {population.node_key.shape}")
    if representatives.node_key.ndim != 2:
        raise ArgumentError(
            f"representatives must be genomes [S, ...], got node_key {representatives.node_key.shape}"
        )
    if representatives.node_key.shape[0] == 1:  # speciation's one column: no loop around it
        one = jax.tree_util.tree_map(lambda x: x[0], representatives)
        return _distances_to(spec, config, population, one)[:, None]
    return lax.map(
        lambda rep: _distances_to(spec, config, population, rep), representatives, batch_size=batch_size
    ).T
