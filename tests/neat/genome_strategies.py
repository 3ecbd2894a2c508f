"""Test helpers: random valid NEAT populations grown by random mutation sequences, hypothesis
strategies over them, and a slow pure-Python innovation tracker with neat-python 2.1's semantics.

Other test files reuse these::

    from tests.neat.genome_strategies import CASES, grow, grown_populations, genomes

    @given(grown_populations())
    def test_something(grown):
        spec, population = grown.spec, grown.population
        ...

Every case pairs one :class:`GenomeSpec` with one :class:`MutationConfig`, and every population has
``POP`` genomes, so the one jitted ``mutate`` program per case is compiled once per test process
and reused by every example.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import strategies as st

from evotensor.neat.genome import EMPTY, Genome, GenomeSpec
from evotensor.neat.innovation import initial_counters
from evotensor.neat.mutation import METRIC_NAMES, MutationConfig, mutate

POP = 16

# structure-heavy rates, so a few generations give hidden nodes, disabled genes, holes and overflow
_BUSY = dict(conn_add_prob=0.8, conn_delete_prob=0.25, node_add_prob=0.5, node_delete_prob=0.15)

CASES: dict[str, tuple[GenomeSpec, MutationConfig]] = {
    # feedforward, neat-python semantics (disable on split, pruning, in-ends among inputs/hidden)
    "ff_neat_python": (
        GenomeSpec(3, 2, max_nodes=14, max_conns=28, feed_forward=True),
        MutationConfig(**_BUSY),
    ),
    # recurrent, TensorNEAT semantics (split deletes, outputs may be sources), one structural
    # mutation at a time with the "surer" fallbacks
    "rec_tensorneat": (
        GenomeSpec(
            2,
            2,
            max_nodes=12,
            max_conns=24,
            feed_forward=False,
            initial_connection="partial",
            connection_fraction=0.5,
        ),
        MutationConfig.tensorneat(**_BUSY, single_structural_mutation=True, structural_mutation_surer=True),
    ),
    # feedforward from no connections, tight capacity, splits identified by innovation number,
    # only enabled connections split, surer fallbacks
    "ff_tight": (
        GenomeSpec(2, 1, max_nodes=6, max_conns=7, feed_forward=True, initial_connection="none"),
        MutationConfig(
            **_BUSY, structural_mutation_surer=True, split_identity="innovation", split_only_enabled=True
        ),
    ),
}

MUTATE = jax.jit(mutate, static_argnums=(1, 2))
"""``mutate`` jitted with ``spec`` and ``config`` static (one compile per case)."""


@functools.partial(jax.jit, static_argnums=(0, 2))
def initial(spec: GenomeSpec, key: jax.Array, pop_size: int = POP) -> Genome:
    """``spec.initial(key, pop_size)``, jitted."""
    return spec.initial(key, pop_size)


@dataclasses.dataclass(frozen=True)
class Grown:
    """A grown population with its counters and per-generation history (host NumPy)."""

    case: str
    spec: GenomeSpec
    config: MutationConfig
    population: Genome
    next_node_key: int
    next_innov: int
    counters: list[tuple[int, int]]  # (next_node_key, next_innov) before each generation and at the end
    metrics: list[dict[str, int]]  # one per generation


@functools.lru_cache(maxsize=64)
def grow(case: str, seed: int, generations: int) -> Grown:
    """``POP`` fresh genomes of ``CASES[case]`` mutated for ``generations`` generations (one jitted
    ``mutate`` per generation, the key derived from ``seed``)."""
    spec, config = CASES[case]
    key = jax.random.key(seed)
    key, k_init = jax.random.split(key)
    population = initial(spec, k_init, POP)
    nk, ni = initial_counters(spec)
    counters = [(int(nk), int(ni))]
    metrics = []
    for _ in range(generations):
        key, k = jax.random.split(key)
        population, nk, ni, m = MUTATE(k, spec, config, population, nk, ni)
        counters.append((int(nk), int(ni)))
        metrics.append({name: int(m[name]) for name in METRIC_NAMES})
    return Grown(case, spec, config, population, int(nk), int(ni), counters, metrics)


def grown_populations(cases=tuple(CASES), max_generations: int = 12) -> st.SearchStrategy[Grown]:
    """Hypothesis strategy: :func:`grow` of a drawn case, seed and number of generations."""
    return st.builds(
        grow,
        st.sampled_from(tuple(cases)),
        st.integers(0, 2**31 - 1),
        st.integers(0, max_generations),
    )


def genomes(population: Genome) -> list[Genome]:
    """The genomes of a population, one by one (host NumPy arrays)."""
    pop = jax.tree_util.tree_map(np.asarray, population)
    return [pop[i] for i in range(pop.node_key.shape[0])]


def genes(genome: Genome) -> tuple[set[int], dict[tuple[int, int], tuple[int, bool]]]:
    """``(node keys, {(in, out): (innovation, enabled)})`` of one genome."""
    g = jax.tree_util.tree_map(np.asarray, genome)
    keys = {int(k) for k in g.node_key if k != EMPTY}
    conns = {
        (int(a), int(b)): (int(i), bool(e))
        for a, b, i, e in zip(g.conn_in, g.conn_out, g.conn_innov, g.conn_enabled)
        if i != EMPTY
    }
    return keys, conns


def full_mask(population: Genome) -> jax.Array:
    """``bool [pop]`` all True (every genome attempts the step)."""
    return jnp.ones(population.node_key.shape[0], bool)


class ReferenceTracker:
    """neat-python 2.1's ``InnovationTracker`` semantics, written out: a global counter and, per
    generation, one number per ``(in, out, kind)`` and one ``(node, in_innov, out_innov)`` per split
    pair. Unlike neat-python (whose counter holds the last number handed out) ``next_innov`` and
    ``next_node_key`` are the next numbers to hand out, as in evotensor's state."""

    def __init__(self, next_node_key: int, next_innov: int):
        self.next_node_key = next_node_key
        self.next_innov = next_innov
        self.seen: dict[tuple, object] = {}

    def connection(self, a: int, b: int) -> int:
        key = (a, b, "add_connection")
        if key not in self.seen:
            self.seen[key] = self.next_innov
            self.next_innov += 1
        return self.seen[key]

    def split(self, a: int, b: int) -> tuple[int, int, int]:
        key = (a, b, "split_node")
        if key not in self.seen:
            self.seen[key] = (self.next_node_key, self.next_innov, self.next_innov + 1)
            self.next_node_key += 1
            self.next_innov += 2
        return self.seen[key]

    def reset_generation(self):
        self.seen.clear()


def same_partition(ours: list, reference: list) -> bool:
    """Do two labelings of the same items group them identically (a bijection between labels)?"""
    forward, backward = {}, {}
    for x, y in zip(ours, reference, strict=True):
        if forward.setdefault(x, y) != y or backward.setdefault(y, x) != x:
            return False
    return True
