"""The NEAT strategy: ``init / ask / tell`` over a padded genome population, one compiled generation.

One generation, all inside ``jit`` (neat-python 2.1's ``Population.run`` loop, tensorized):

1. ``ask`` returns the current population (``Genome [P]``); the run loop decodes it into
   networks (:attr:`NEAT.decoder`: :func:`~evotensor.neat.network.transform`) and evaluates them.
2. ``tell``: fitness (the run loop hands it minimized; NEAT works with "higher is better", so it is
   negated back, then NaN/inf are sanitized to the worst value before any arithmetic) →
   best genome kept → stagnation (:func:`~evotensor.neat.species.update_stagnation`) →
   the reproduction plan (:func:`~evotensor.neat.reproduction.plan`: spawn per species with an
   exact total, elites, parent pools) → crossover of every child
   (:func:`~evotensor.neat.crossover.crossover_population`) → mutation of every non-elite child
   with global innovation numbers deduplicated across the generation
   (:func:`~evotensor.neat.mutation.mutate`) → speciation of the new population
   (:func:`~evotensor.neat.species.speciate`, distances by
   :func:`~evotensor.neat.distance.distance_matrix`).
3. Extinction (every species stagnant): with ``reset_on_extinction`` (default) slots ``1..P-1``
   are re-drawn as fresh genomes and slot 0 keeps the best genome ever seen; without it the
   population freezes as copies of the best genome and ``metrics["extinct"]`` is 1 for the host to
   stop on (a compiled program cannot raise).

Everything is fixed-shape: ``P`` genomes of ``max_nodes`` x ``max_conns`` rows, ``max_species``
species slots. Metrics per generation: species count and threshold, mean genome size, structural
mutations made, capacity skips (mutations refused because ``max_nodes``/``max_conns`` were full),
species overflow, extinction.

Example::

    strategy = NEAT.from_mode("neat-python", num_inputs=2, num_outputs=1, population_size=150)
    result = evotensor.run(strategy, XOR(), generations=300, key=jax.random.key(0))
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from evotensor.core import rng
from evotensor.core.checks import ArgumentError, check_int
from evotensor.core.compiler_options import CLASSIC_CPU_EMITTERS
from evotensor.core.evaluation import Evaluation
from evotensor.core.pytree import pytree_dataclass
from evotensor.neat.config import NEATConfig, neat_mode
from evotensor.neat.crossover import crossover_population
from evotensor.neat.distance import distance_matrix
from evotensor.neat.genome import Genome, GenomeSpec
from evotensor.neat.innovation import initial_counters
from evotensor.neat.mutation import mutate
from evotensor.neat.network import Network, neat_policy
from evotensor.neat.reproduction import plan as reproduction_plan
from evotensor.neat.sharding import MeshLayout, OneDevice
from evotensor.neat.species import (
    SpeciesState,
    init_species_state,
    sanitize_fitness,
    speciate,
    update_stagnation,
)

__all__ = ["CPU_COMPILER_OPTIONS", "NEAT", "NEATDecoder", "NEATState"]

CPU_COMPILER_OPTIONS: dict[str, Any] = {**CLASSIC_CPU_EMITTERS, "xla_backend_optimization_level": 1}
"""XLA options NEAT's programs compile with on a CPU unless ``NEAT(compiler_options=...)`` says
otherwise: XLA:CPU's classic emitters (:data:`evotensor.core.compiler_options.CLASSIC_CPU_EMITTERS`;
the newer fusion emitters make more kernels of NEAT's many small steps, and each compiles on its
own) and backend optimization level 1 instead of XLA's default. With both a generation compiles
faster and runs somewhat slower, with the same states bit for bit, so runs of up to several hundred
generations finish sooner (the figures: ``benchmarks/results_neat.md``, sessions 18 and 22)."""


@pytree_dataclass
class NEATState:
    """NEAT's state (a pytree).

    * ``population: Genome [P]``: the genomes ``ask`` returns.
    * ``species_of int32 [P]``: each genome's species slot; ``species``: :class:`SpeciesState`.
    * ``next_node_key``, ``next_innov``: ``int32 []`` global counters.
    * ``best: Genome`` (one genome) and ``best_fitness float32 []`` (higher is better; the worst
      float before any evaluation): the best genome ever evaluated.
    * ``generation int32 []``; ``extinct bool []``: the population died out without a reset.
    """

    population: Genome
    species_of: jax.Array
    species: SpeciesState
    next_node_key: jax.Array
    next_innov: jax.Array
    best: Genome
    best_fitness: jax.Array
    generation: jax.Array
    extinct: jax.Array


class NEATDecoder:
    """Genomes -> networks (``decode``) and how a network runs on an observation (``apply``: the
    policy object; stateful for recurrent and CTRNN genomes, see
    :func:`~evotensor.neat.network.neat_policy`)."""

    def __init__(self, spec: GenomeSpec, config: NEATConfig):
        self.spec = spec
        self.apply = neat_policy(spec, config.policy, functions=config.functions, outputs=config.outputs)

    def decode(self, genotypes: Genome) -> Network:
        """``Genome [P]`` -> ``Network [P]``."""
        return self.apply.decode(genotypes)

    def __repr__(self) -> str:
        return f"NEATDecoder({type(self.apply).__name__})"


class NEAT:
    """NeuroEvolution of Augmenting Topologies (Stanley & Miikkulainen 2002) as a strategy.

    Args:
        spec: the genome shape and gene types (:class:`GenomeSpec`).
        population_size: ``P`` (neat-python's ``pop_size``; >= 2).
        config: :class:`NEATConfig` (default: neat-python 2.1's settings).
        decoder: how genomes become phenotypes for policy problems (default :class:`NEATDecoder`:
            the genome's own network); :mod:`evotensor.neat.hyperneat` passes a substrate decoder
            whose networks are queried from the genomes as CPPNs.
        compiler_options: XLA compiler options for the run's programs (:meth:`compiler_options`);
            default ``None``: :data:`CPU_COMPILER_OPTIONS` on a CPU, XLA's defaults elsewhere;
            ``{}``: XLA's defaults everywhere.

    Use :meth:`from_mode` for a mode's matched spec and config. ``population_size`` must be at
    least ``max_species * max(min_species_size, elitism)``.

    On many devices: :meth:`on_mesh` (what ``evotensor.run(..., mesh=mesh)`` calls) splits the
    genomes along the population axis (:mod:`evotensor.neat.sharding`).
    """

    vector_metrics = ("species_sizes", "species_keys")
    """Per-species metrics ``[max_species]`` the run loop keeps in the history (not metrics.csv)."""

    layout: OneDevice | MeshLayout = OneDevice()
    """Where the population lives (:mod:`evotensor.neat.sharding`); set by :meth:`on_mesh`."""

    def __init__(
        self,
        spec: GenomeSpec,
        population_size: int = 150,
        config: NEATConfig | None = None,
        decoder: Any = None,
        compiler_options: Mapping[str, Any] | None = None,
    ):
        if not isinstance(spec, GenomeSpec):
            raise ArgumentError(f"spec must be a GenomeSpec, got {type(spec).__name__}")
        self.spec = spec
        self.population_size = check_int(population_size, "population_size", minimum=2, maximum=2**31 - 1)
        config = NEATConfig() if config is None else config
        if not isinstance(config, NEATConfig):
            raise ArgumentError(f"config must be a NEATConfig, got {type(config).__name__}")
        self.config = config
        need = config.species.max_species * config.reproduction.min_size
        if need > self.population_size:
            raise ArgumentError(
                f"population_size ({self.population_size}) must be >= max_species "
                f"({config.species.max_species}) * max(min_species_size, elitism) "
                f"({config.reproduction.min_size}) = {need}; lower config.species.max_species or "
                "raise population_size"
            )
        usable = callable(getattr(decoder, "decode", None)) and hasattr(decoder, "apply")
        if decoder is not None and not usable:
            raise ArgumentError(f"decoder must have decode() and apply, got {type(decoder).__name__}")
        self.decoder = NEATDecoder(spec, config) if decoder is None else decoder
        if compiler_options is not None and (
            not isinstance(compiler_options, Mapping) or not all(isinstance(k, str) for k in compiler_options)
        ):
            raise ArgumentError(
                "compiler_options must be a mapping of XLA option names to values, or None, got "
                f"{compiler_options!r}"
            )
        self._compiler_options = None if compiler_options is None else dict(compiler_options)

    @classmethod
    def from_mode(
        cls,
        mode: str = "neat-python",
        num_inputs: int = 2,
        num_outputs: int = 1,
        population_size: int = 150,
        max_nodes: int = 50,
        max_conns: int = 100,
        *,
        compiler_options: Mapping[str, Any] | None = None,
        **spec_overrides: Any,
    ) -> NEAT:
        """NEAT with ``mode``'s spec and config (:func:`~evotensor.neat.config.neat_mode`);
        ``compiler_options`` as in :class:`NEAT`."""
        spec, config = neat_mode(mode, num_inputs, num_outputs, max_nodes, max_conns, **spec_overrides)
        if config.species.max_species * config.reproduction.min_size > population_size:
            slots = max(1, population_size // config.reproduction.min_size)
            config = config.replace(species={"max_species": slots})
        return cls(spec, population_size, config, compiler_options=compiler_options)

    def compiler_options(self, platform: str) -> dict[str, Any] | None:
        """The XLA compiler options of this NEAT's programs on ``platform`` (``"cpu"``, ``"gpu"``…),
        which the run loop compiles with (:mod:`evotensor.core.compiler_options`)."""
        if self._compiler_options is not None:
            return dict(self._compiler_options)
        return dict(CPU_COMPILER_OPTIONS) if platform == "cpu" else None

    def default_params(self) -> None:
        """NEAT has no dynamic hyperparameters (its settings are static: :attr:`config`)."""
        return None

    def on_mesh(self, mesh: jax.sharding.Mesh, axis: str = "pop") -> NEAT:
        """This NEAT with its genomes split along ``mesh[axis]`` (:mod:`evotensor.neat.sharding`):
        the same ``init/ask/tell`` and the same results as on one device for the same key, with the
        evaluation, reproduction and distance computations of each genome on the device that owns it.

        Raises :class:`~evotensor.core.checks.ArgumentError` unless ``population_size`` splits evenly
        over the axis.
        """
        placed = copy.copy(self)
        placed.layout = MeshLayout(mesh, axis, self.population_size)
        placed.decoder = placed.layout.decoder(self.decoder)  # each device decodes its own genomes
        return placed

    def state_shardings(self, state: NEATState) -> Any:
        """Where the run loop keeps ``state`` between compiled chunks on :meth:`on_mesh`'s mesh: the
        population split along the axis, everything else replicated."""
        if not isinstance(self.layout, MeshLayout):
            raise ValueError("state_shardings needs a NEAT laid out on a mesh: call neat.on_mesh(mesh) first")
        return self.layout.state_shardings(state)

    def _distances(self, population: Genome, representatives: Genome) -> jax.Array:
        # speciation's loop asks for one [P] column per iteration: every device measures the whole
        # (replicated) population itself, as splitting it would cost a gather per iteration
        measure = lambda pop, reps: distance_matrix(self.spec, self.config.distance, pop, reps)  # noqa: E731
        return self.layout.everywhere(measure, population, representatives)

    def init(self, key: jax.Array, params: Any = None) -> NEATState:
        """A fresh population (:meth:`GenomeSpec.initial`), speciated."""
        del params
        population = self.spec.initial(key, self.population_size)
        species, species_of = speciate(
            self.spec,
            self.config.species,
            self._distances,
            self.layout.replicated(population),  # as in tell: representatives are picked anywhere
            init_species_state(self.spec, self.config.species),
        )
        node_key, innov = initial_counters(self.spec)
        state = NEATState(
            population=population,
            species_of=species_of,
            species=species,
            next_node_key=node_key,
            next_innov=innov,
            best=population[0],
            best_fitness=jnp.asarray(jnp.finfo(jnp.float32).min, jnp.float32),
            generation=jnp.zeros((), jnp.int32),
            extinct=jnp.zeros((), bool),
        )
        return self.layout.state(state)

    def ask(self, key: jax.Array, state: NEATState, params: Any = None) -> tuple[Genome, NEATState]:
        """The current population, ``Genome [P]``."""
        del key, params
        return state.population, state

    def tell(
        self, key: jax.Array, state: NEATState, genotypes: Genome, evaluation: Evaluation, params: Any = None
    ) -> tuple[NEATState, dict[str, jax.Array]]:
        """One NEAT generation from the evaluated population (module docstring). ``evaluation.fitness
        [P]`` is minimized (the run loop's convention)."""
        del params
        spec, cfg, P, layout = self.spec, self.config, self.population_size, self.layout
        k_plan, k_cross, k_mut, k_reset = rng.split(key, 4)
        # the [P] fitness is small and every step below needs all of it: replicated; so are the
        # parents (any genome may parent any child: one gather of the population per generation)
        fitness = layout.replicated(sanitize_fitness(-jnp.asarray(evaluation.fitness, jnp.float32)))
        population = layout.gathered(genotypes)

        i = jnp.argmax(fitness)
        improved = fitness[i] > state.best_fitness
        best = jax.tree_util.tree_map(
            lambda old, pop: jnp.where(improved, pop[i], old), state.best, population
        )
        best_fitness = jnp.where(improved, fitness[i], state.best_fitness)

        species, _ = update_stagnation(cfg.species, state.species, state.species_of, fitness)
        plan = reproduction_plan(k_plan, cfg.reproduction, species, state.species_of, fitness, P)
        children = crossover_population(
            k_cross,
            spec,
            population,
            plan.parent1,
            plan.parent2,
            fitness,
            maximize=True,
            config=cfg.crossover,
            per_genome=layout.per_genome,  # each device builds its own children
        )
        # each device builds and mutates its own rows of the offspring
        children = layout.population(children)
        children, next_node_key, next_innov, mutation_metrics = mutate(
            k_mut,
            spec,
            cfg.mutation,
            children,
            state.next_node_key,
            state.next_innov,
            active=~plan.elite,
            per_genome=layout.per_genome,  # each device searches its own genomes (own trip counts)
            across_genomes=layout.across_genomes,  # the numbering: proposals gathered once
        )
        elites = population[plan.parent1]
        new = jax.tree_util.tree_map(
            lambda e, c: jnp.where(plan.elite.reshape((P,) + (1,) * (c.ndim - 1)), e, c), elites, children
        )

        def reset(new):  # fresh genomes in slots 1.., the best so far in slot 0 (the offspring's dtypes)
            first = jnp.arange(P) == 0

            def pick(f, b, n):
                return jnp.where(first.reshape((P,) + (1,) * (f.ndim - 1)), b[None], f).astype(n.dtype)

            return jax.tree_util.tree_map(pick, spec.initial(k_reset, P), best, new)

        frozen = jax.tree_util.tree_map(lambda b: jnp.broadcast_to(b, (P, *b.shape)), best)
        extinct = state.extinct | (plan.extinct & ~plan.reset)
        # a branch, not a select: the fresh population is drawn only on a reset, and the branch's
        # output is a buffer, so XLA does not copy the offspring's draws into every later reader
        new = lax.cond(plan.reset, reset, lambda n: n, new)
        new = layout.population(_where_tree(extinct, frozen, new))
        # speciation picks representatives anywhere in the population: it reads a gathered copy
        # (one gather, not one per representative) and splits each distance column (_distances)
        gathered = layout.gathered(new)
        plan_species = plan.species_state
        species_start = jax.tree_util.tree_map(
            lambda fresh_s, s: jnp.where(plan.reset, fresh_s, s),
            init_species_state(spec, cfg.species).replace(
                generation=plan_species.generation, next_species_key=plan_species.next_species_key
            ),
            plan_species,
        )
        species, species_of = speciate(spec, cfg.species, self._distances, gathered, species_start)

        metrics = {
            "num_species": species.num_species,
            "compatibility_threshold": species.threshold,
            "species_overflow": species.overflow,
            "mean_nodes": jnp.mean(new.num_nodes.astype(jnp.float32)) - spec.num_inputs,
            "mean_conns": jnp.mean(jnp.sum(new.conn_valid & new.conn_enabled, axis=-1).astype(jnp.float32)),
            "extinct": extinct.astype(jnp.int32),
            "resets": plan.reset.astype(jnp.int32),
            "species_sizes": jnp.where(species.valid, species.size, 0),
            "species_keys": species.species_key,
            **mutation_metrics,
        }
        new_state = NEATState(
            population=new,
            species_of=species_of,
            species=species,
            next_node_key=next_node_key,
            next_innov=next_innov,
            best=best,
            best_fitness=best_fitness,
            generation=state.generation + 1,
            extinct=extinct,
        )
        return layout.state(new_state), metrics

    def __repr__(self) -> str:
        s = self.spec
        return (
            f"NEAT(mode={self.config.mode!r}, inputs={s.num_inputs}, outputs={s.num_outputs}, "
            f"population_size={self.population_size}, max_nodes={s.max_nodes}, max_conns={s.max_conns})"
        )


def _where_tree(cond: jax.Array, a: Any, b: Any) -> Any:
    return jax.tree_util.tree_map(lambda x, y: jnp.where(cond, x, y), a, b)
