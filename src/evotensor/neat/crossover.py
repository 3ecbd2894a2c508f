"""NEAT crossover: genes aligned by innovation number (connections) and key (nodes), compiled for a
whole population.

Semantics (``mode="neat-python"``, neat-python 2.1 ``DefaultGenome.configure_crossover`` and
``BaseGene.crossover``):

* The child's structure is exactly the fitter parent's: its node rows and connection rows, in the
  fitter parent's row layout (so input/output rows stay in place, padding stays exact, keys and
  innovation numbers stay unique, every connection's endpoints exist and a feedforward child has no
  cycle). Disjoint and excess genes come from the fitter parent only.
* Matching connection genes (equal innovation number *and* equal ``(in, out)``; a shared innovation
  number on different pairs is a collision and is treated as disjoint, as neat-python does) take
  each float attribute from a parent drawn per attribute with probability 1/2. The enabled flag:
  enabled when both parents have the gene enabled; when either has it disabled the child's gene is
  disabled with probability ``disable_inherit_prob`` (0.75, neat-python 2.1's exact 75% rule).
  Genes only in the fitter parent keep their enabled flag unchanged (neat-python copies them).
* Matching node genes (equal key; outputs and hidden nodes, never the input pins) take each float
  attribute, the activation and the aggregation from a parent drawn per attribute.

``mode="paper"`` (Stanley & Miikkulainen 2002) differs in two ways:

* A matching gene is taken whole from one parent (one draw per gene), then the enabled rule above.
* With equal fitness (``equal_fitness=True``) the disjoint and excess genes of *both* parents are
  inherited, each with probability 1/2 (matching genes always). Genes of the other parent whose
  innovation number or ``(in, out)`` pair the fitter parent also holds are never added (no
  duplicates). The fitter parent's kept genes stay in their rows (a dropped one leaves padding);
  the other parent's added connections, and the nodes they need that the fitter parent lacks
  (with the other parent's attributes), take the free rows in order. If the result would not fit
  ``max_nodes``/``max_conns``, or (``feed_forward``) would contain a cycle (two acyclic parents can
  form one: neat-python skips such genes one by one in set order, which has no tensor equivalent),
  the pair falls back to the ordinary fitter-parent child: a feedforward genome must stay
  acyclic, and any partial union would be an arbitrary choice.

Which parent is fitter (:func:`crossover_population`): the first parent of a pair when its fitness
is strictly better, otherwise the second, exactly neat-python's comparison (so on a tie the
*second* parent counts as the fitter one; parents are drawn independently, so this is no bias).
NaN fitness counts as the worst.

Randomness: a child's coins and redraws are one uniform vector drawn from its key (child ``i`` of
:func:`crossover_population` is :func:`crossover` with ``jax.random.split(key, n)[i]``).

Cost per pair: two sorts and binary searches, ``O((N + C) log C)``; with ``mode="paper"`` and
``feed_forward`` add a cycle check of at most ``N`` sweeps over the edges (``O(N + C)`` memory).
No ``[C, C]`` array is ever built.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from evotensor.core import rng
from evotensor.core.checks import ArgumentError, check_choice, check_fraction
from evotensor.neat.distance import SortedTable, endpoint_rows, homologous_rows
from evotensor.neat.genome import EMPTY, Genome, GenomeSpec

__all__ = ["CROSSOVER_MODES", "CrossoverConfig", "crossover", "crossover_population"]

CROSSOVER_MODES = ("neat-python", "paper")


@dataclasses.dataclass(frozen=True)
class CrossoverConfig:
    """Crossover options (hashable, static).

    Args:
        mode: ``"neat-python"`` (default) or ``"paper"``; see the module docstring.
        disable_inherit_prob: probability that a matching gene disabled in either parent is
            inherited disabled (0.75).
    """

    mode: str = "neat-python"
    disable_inherit_prob: float = 0.75

    def __post_init__(self):
        check_choice(self.mode, "mode", CROSSOVER_MODES)
        object.__setattr__(
            self,
            "disable_inherit_prob",
            check_fraction(self.disable_inherit_prob, "disable_inherit_prob", allow_zero=True),
        )


def _layout(spec: GenomeSpec, config: CrossoverConfig) -> dict[str, tuple[int, int]]:
    """Where each use of randomness sits in a child's uniform vector: ``{name: (start, size)}``
    (node coins, connection coins, enabled redraws, and the paper union's two keep draws)."""
    N, C = spec.max_nodes, spec.max_conns
    per_attribute = config.mode == "neat-python"
    sizes = {
        "node": N * (spec.node_gene.num_floats + 2) if per_attribute else N,
        "conn": C * spec.conn_gene.num_floats if per_attribute else C,
        "enabled": C,
    }
    if config.mode == "paper":
        sizes.update(keep_fitter=C, keep_other=C)
    out, start = {}, 0
    for name, size in sizes.items():
        out[name] = (start, size)
        start += size
    return out


def _num_uniforms(spec: GenomeSpec, config: CrossoverConfig) -> int:
    return sum(size for _, size in _layout(spec, config).values())


def _part(u: jax.Array, layout, name: str) -> jax.Array:
    start, size = layout[name]
    return u[start : start + size]


def _coins(u: jax.Array, rows: int, columns: int, per_attribute: bool) -> jax.Array:
    """``bool [rows, columns]``: take the fitter parent's value (a fair coin per attribute, or one
    per row broadcast), from uniforms ``u`` (``[rows * columns]`` or ``[rows]``)."""
    if per_attribute:
        return (u < 0.5).reshape(rows, columns)
    return jnp.broadcast_to((u < 0.5)[:, None], (rows, columns))


def _aligned_child(
    u: jax.Array, spec: GenomeSpec, config: CrossoverConfig, fitter: Genome, other: Genome
) -> tuple[Genome, jax.Array]:
    """The fitter parent's structure with matching genes crossed; also the connection match mask."""
    N, C = spec.max_nodes, spec.max_conns
    A, B = spec.node_gene.num_floats, spec.conn_gene.num_floats
    per_attribute = config.mode == "neat-python"
    layout = _layout(spec, config)

    genes_f = fitter.node_valid & (fitter.node_key >= 0)
    genes_o = other.node_valid & (other.node_key >= 0)
    nodes_o = SortedTable((other.node_key,), genes_o, (other.node_attrs, other.node_act, other.node_agg))
    _, found, (attrs_o, act_o, agg_o) = nodes_o.lookup((fitter.node_key,))
    take = _coins(_part(u, layout, "node"), N, A + 2, per_attribute) | ~(genes_f & found)[:, None]
    node_attrs = jnp.where(take[:, :A], fitter.node_attrs, attrs_o)
    node_act = jnp.where(take[:, A], fitter.node_act, act_o)
    node_agg = jnp.where(take[:, A + 1], fitter.node_agg, agg_o)

    conns_o = SortedTable(
        (other.conn_innov,),
        other.conn_valid,
        (other.conn_in, other.conn_out, other.conn_enabled, other.conn_attrs),
    )
    _, cfound, (in_o, out_o, enabled_o, cattrs_o) = conns_o.lookup((fitter.conn_innov,))
    matched = fitter.conn_valid & cfound & (fitter.conn_in == in_o) & (fitter.conn_out == out_o)
    take = _coins(_part(u, layout, "conn"), C, B, per_attribute) | ~matched[:, None]
    conn_attrs = jnp.where(take, fitter.conn_attrs, cattrs_o)
    either_disabled = matched & ~(fitter.conn_enabled & enabled_o)
    redrawn = _part(u, layout, "enabled") >= config.disable_inherit_prob
    conn_enabled = jnp.where(either_disabled, redrawn, fitter.conn_enabled)
    child = fitter.replace(
        node_attrs=node_attrs,
        node_act=node_act,
        node_agg=node_agg,
        conn_attrs=conn_attrs,
        conn_enabled=conn_enabled,
    )
    return child, matched


def _has_cycle(
    node_valid: jax.Array, src: jax.Array, dst: jax.Array, edge_valid: jax.Array, active: jax.Array
) -> jax.Array:
    """``bool []``: the valid edges (node rows ``src -> dst``) contain a cycle. Kahn's algorithm:
    repeatedly drop every live node without a live incoming edge; nodes left over lie on or behind a
    cycle. At most ``N + 1`` sweeps of ``O(N + C)``; none when ``active`` is false (then the answer
    is meaningless), so a batch without equal-fitness pairs skips the loop."""
    N = node_valid.shape[-1]

    def body(state):
        _, alive = state
        live = edge_valid & alive[src] & alive[dst]
        indegree = jnp.zeros(N, jnp.int32).at[dst].add(live.astype(jnp.int32))
        drop = alive & (indegree == 0)
        return jnp.any(drop), alive & ~drop

    _, alive = lax.while_loop(lambda s: s[0], body, (jnp.asarray(active, bool), node_valid))
    return jnp.any(alive)


def _free_rows(wanted: jax.Array, free: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Destinations for the ``wanted`` rows (``bool [R]``) in the ``free`` rows (``bool [T]``), in
    order: ``int32 [R]`` (``T``, out of range, for rows not wanted), and whether all fit."""
    T = free.shape[-1]
    free_rows = jnp.argsort(~free, stable=True)
    rank = jnp.cumsum(wanted) - 1
    target = jnp.where(wanted, free_rows[jnp.clip(rank, 0, T - 1)], T)
    return target, jnp.sum(wanted) <= jnp.sum(free)


def _union_child(
    u: jax.Array,
    spec: GenomeSpec,
    config: CrossoverConfig,
    aligned: Genome,
    matched: jax.Array,
    fitter: Genome,
    other: Genome,
    equal_fitness: jax.Array,
) -> tuple[Genome, jax.Array]:
    """Paper equal-fitness child: unmatched genes of both parents, each with probability 1/2.
    Returns the child and whether to use it (equal fitness, fits, acyclic for feedforward specs)."""
    N = spec.max_nodes
    layout = _layout(spec, config)
    keep_f = fitter.conn_valid & (matched | (_part(u, layout, "keep_fitter") < 0.5))
    _, in_f_innov = homologous_rows((other.conn_innov,), (fitter.conn_innov,), fitter.conn_valid)
    _, in_f_pair = homologous_rows(
        (other.conn_in, other.conn_out), (fitter.conn_in, fitter.conn_out), fitter.conn_valid
    )
    keep_o = other.conn_valid & ~in_f_innov & ~in_f_pair & (_part(u, layout, "keep_other") < 0.5)

    # the other parent's nodes that its kept connections need and the fitter parent lacks
    _, node_in_f = homologous_rows((other.node_key,), (fitter.node_key,), fitter.node_valid)
    src_row, dst_row = endpoint_rows(other)
    used = jnp.zeros(N, jnp.int32).at[src_row].add(keep_o.astype(jnp.int32))
    used = used.at[dst_row].add(keep_o.astype(jnp.int32))
    needed = other.node_valid & ~node_in_f & (used > 0)
    node_target, nodes_fit = _free_rows(needed, ~fitter.node_valid & (jnp.arange(N) >= spec.num_io))

    def put(dst: jax.Array, src: jax.Array, target: jax.Array) -> jax.Array:
        return dst.at[target].set(src, mode="drop")

    # connections: the fitter parent's kept rows stay in place, dropped ones become padding, and the
    # other parent's genes take the free rows in order
    conn_target, conns_fit = _free_rows(keep_o, ~keep_f)
    drop = ~keep_f
    cleared = aligned.replace(
        conn_in=jnp.where(drop, EMPTY, aligned.conn_in),
        conn_out=jnp.where(drop, EMPTY, aligned.conn_out),
        conn_innov=jnp.where(drop, EMPTY, aligned.conn_innov),
        conn_enabled=jnp.where(drop, False, aligned.conn_enabled),
        conn_attrs=jnp.where(drop[:, None], 0.0, aligned.conn_attrs),
    )
    child = Genome(
        node_key=put(cleared.node_key, other.node_key, node_target),
        node_attrs=put(cleared.node_attrs, other.node_attrs, node_target),
        node_act=put(cleared.node_act, other.node_act, node_target),
        node_agg=put(cleared.node_agg, other.node_agg, node_target),
        conn_in=put(cleared.conn_in, other.conn_in, conn_target),
        conn_out=put(cleared.conn_out, other.conn_out, conn_target),
        conn_innov=put(cleared.conn_innov, other.conn_innov, conn_target),
        conn_enabled=put(cleared.conn_enabled, other.conn_enabled, conn_target),
        conn_attrs=put(cleared.conn_attrs, other.conn_attrs, conn_target),
    )
    ok = equal_fitness & nodes_fit & conns_fit
    if spec.feed_forward:
        src, dst = endpoint_rows(child)
        ok = ok & ~_has_cycle(child.node_valid, src, dst, child.conn_valid, ok)
    return child, ok


def crossover(
    key: jax.Array,
    spec: GenomeSpec,
    fitter: Genome,
    other: Genome,
    config: CrossoverConfig = CrossoverConfig(),
    equal_fitness: jax.Array | bool = False,
) -> Genome:
    """One child of two parents (arrays ``[N]``, ``[C]``); ``vmap`` it, or use
    :func:`crossover_population`.

    ``fitter`` is the parent whose structure the child gets (see the module docstring);
    ``equal_fitness`` (``bool []``, may be traced) only matters with ``config.mode == "paper"``.
    Returns a genome of the same shapes that keeps every :func:`check_genome` invariant. Pure and
    jit-able; ``spec`` and ``config`` are static.
    """
    if not isinstance(spec, GenomeSpec):
        raise ArgumentError(f"spec must be a GenomeSpec, got {type(spec).__name__}")
    if not isinstance(config, CrossoverConfig):
        raise ArgumentError(f"config must be a CrossoverConfig, got {type(config).__name__}")
    if fitter.node_key.shape != (spec.max_nodes,) or other.conn_innov.shape != (spec.max_conns,):
        raise ArgumentError(
            f"fitter and other must be single genomes [{spec.max_nodes}], [{spec.max_conns}]; "
            f"got {fitter.node_key.shape}, {other.conn_innov.shape} (vmap for a population)"
        )
    return _crossover(
        rng.uniform(key, (_num_uniforms(spec, config),)), spec, config, fitter, other, equal_fitness
    )


def _crossover(u, spec, config, fitter, other, equal_fitness):
    """:func:`crossover` from the child's uniforms ``u`` (:func:`_layout`)."""
    child, matched = _aligned_child(u, spec, config, fitter, other)
    if config.mode != "paper":
        return child
    use_union = jnp.asarray(equal_fitness, bool)
    union, use_union = _union_child(u, spec, config, child, matched, fitter, other, use_union)
    return jax.tree_util.tree_map(lambda u, c: jnp.where(use_union, u, c), union, child)


def crossover_population(
    key: jax.Array,
    spec: GenomeSpec,
    population: Genome,
    parent1_idx: jax.Array,
    parent2_idx: jax.Array,
    fitness: jax.Array,
    *,
    maximize: bool,
    config: CrossoverConfig = CrossoverConfig(),
    per_genome: Callable[..., Any] | None = None,
) -> Genome:
    """``n`` children, child ``i`` from parents ``parent1_idx[i]`` and ``parent2_idx[i]``.

    ``population``: genomes ``[pop, ...]``; ``parent1_idx``, ``parent2_idx``: ``int [n]``;
    ``fitness``: ``float [pop]``, better when larger (``maximize=True``, neat-python's default
    ``fitness_criterion = max``) or smaller (``maximize=False``, evotensor strategies' internal
    orientation); there is deliberately no default. The fitter parent is ``parent1`` when its
    fitness is strictly better, else ``parent2`` (neat-python's rule: a tie makes ``parent2`` the
    fitter); NaN fitness is the worst. Returns children ``[n, ...]``. Pure and jit-able.

    ``per_genome``: how the per-child work runs, ``per_genome(fn, *arrays)`` with ``arrays`` of
    leading axis ``[n]`` (default ``fn(*arrays)``); on a mesh NEAT passes
    :meth:`evotensor.neat.sharding.MeshLayout.per_genome` (each device builds its own children,
    with its own loop trip counts); the children are the same.
    """
    if not isinstance(maximize, bool):
        raise ArgumentError(f"maximize must be a bool, got {maximize!r}")
    p1 = jnp.asarray(parent1_idx)
    p2 = jnp.asarray(parent2_idx)
    if p1.ndim != 1 or p1.shape != p2.shape:
        raise ArgumentError(
            "parent1_idx and parent2_idx must be int arrays [n] of equal length, got "
            f"{p1.shape} and {p2.shape}"
        )
    pop = population.node_key.shape[0] if population.node_key.ndim == 2 else None
    fitness = jnp.asarray(fitness)
    if pop is None or fitness.shape != (pop,):
        raise ArgumentError(
            f"fitness must be [pop] for a population [pop, ...]; got fitness {fitness.shape}, "
            f"population node_key {population.node_key.shape}"
        )
    worst = -jnp.inf if maximize else jnp.inf
    f = jnp.where(jnp.isnan(fitness), worst, fitness.astype(jnp.float32))
    f1, f2 = f[p1], f[p2]
    first_better = f1 > f2 if maximize else f1 < f2
    fitter = population[jnp.where(first_better, p1, p2)]
    other = population[jnp.where(first_better, p2, p1)]
    # child i is crossover(split(key, n)[i], ...): one uniform vector per child
    n, K = p1.shape[0], _num_uniforms(spec, config)
    u = jax.vmap(lambda k: rng.uniform(k, (K,)))(rng.split(key, n))
    children = jax.vmap(lambda u, a, b, e: _crossover(u, spec, config, a, b, e))
    if per_genome is None:
        return children(u, fitter, other, f1 == f2)
    return per_genome(children, u, fitter, other, f1 == f2)
