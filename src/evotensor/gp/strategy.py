"""``GP``: tree genetic programming under the ask/tell protocol (EvoGP's generation loop).

One generation, all inside one jitted step (no host callbacks)::

    ask:   (first call) the random initial forest;
           (later)      elites = the ceil(elite_rate * pop) best (on the RAW fitness), copied unchanged;
                        pop - n_elite children: select recipient and donor parents (on the
                        parsimony-penalized fitness; lexicase: the parents drawn by ``tell``),
                        crossover with probability crossover_rate (else a copy of the recipient);
                        then exactly round(mutation_rate * n_children) children are mutated, split
                        among the mutations in proportion to mutation_probs (children come in random
                        order, so a fixed slice of them is a random subset; fixed counts keep every
                        operator's shape static, so each mutation runs on its own children only);
                        results longer than max_len are rejected (the parent is kept) and counted.
    tell:  records the fitness (minimized), the best tree so far (raw fitness), the hall of fame
           (the best tree of every length, :class:`~evotensor.gp.front.HallOfFame`) and metrics;
           with ``selection="lexicase"`` it also draws the next parents from the per-case errors
           ``evaluation.info = CaseErrors(case_errors=[pop, n_cases])`` (so the state never holds
           them); with ``survival="nsga2"`` the next parents are NSGA-II's survivors among the told
           offspring and their parents (see below).

The operators are objects of an :class:`~evotensor.gp.variation.OperatorRegistry` (``operators=``;
default :func:`~evotensor.gp.variation.default_registry`): the mutation weights, the layout of the
generation's one random draw and the mutation passes all come from it, so a user's own operator,
registered there, takes part like a built-in one. The arguments are checked once, by
:class:`~evotensor.gp.config.GPConfig`; ``selection=`` is a name or a callable (see
:mod:`evotensor.gp.config`).

Parsimony pressure (gplearn's ``parsimony_coefficient``): parents are selected on
``fitness + c * length`` (minimized orientation; in natural orientation gplearn's
``raw - c * length * sign``), with ``c = params.parsimony_coefficient`` (default 0: no pressure) or,
with ``parsimony_coefficient="auto"``, Poli & McPhee's covariant coefficient recomputed on every
told population (:func:`evotensor.gp.selection.covariant_parsimony`). Everything reported — state
fitness, best tree, metrics — stays the raw fitness, and elites are chosen on the raw fitness (as
EvoGP; gplearn has no elitism): the most accurate tree always survives, so the best fitness of the
population never gets worse. ``"auto"`` equals gplearn's for maximized metrics; for minimized ones
gplearn's formula has the opposite sign (see :func:`~evotensor.gp.selection.covariant_parsimony`).

Model size is :meth:`GP.complexity`: the tree's length in nodes, where, with
``weighted_variables=True``, a weighted variable ``mul(CONST w, VAR i)`` counts as one node (as
Operon counts its weighted variables); parsimony, the hall of fame and NSGA-II all read it.

Parsimony as a second objective: ``state.hall_of_fame`` holds, for every complexity,
the most accurate tree told so far, updated in every ``tell`` from the raw fitness (a non-finite
fitness never enters); its Pareto front (``front_size`` in the metrics), PySR's score and model
selection and the front as a table are in :mod:`evotensor.gp.front`. With ``survival="nsga2"``
(Deb et al. 2002), ``tell`` ranks the told offspring together with the current parents (``2 * pop``
trees) by non-domination on (raw fitness, length), then crowding distance, and keeps the ``pop``
best, in that order, as the next parents; parents are drawn by the selection (default: a binary
tournament) on that order, elites on the raw fitness as always. The survival is an object resolved
by name (:class:`~evotensor.gp.config.Survival`), so a user's own survival plugs in the same way.

On many devices (``evotensor.run(..., mesh=)``, :meth:`GP.on_mesh`): the forest of the state is
split along the mesh's population axis; variation runs per device inside ``shard_map``
(:mod:`evotensor.gp.mesh_variation`: the parents gathered, every device drawing the generation's
numbers and selecting on the replicated ``[pop]`` fitness, each making its share of the children,
which are gathered back into one device's order); ``tell`` reads the told forest gathered once; the
results are those of one device for the same key. :mod:`evotensor.gp.sharding` splits the
evaluation (the custom-call evaluators run per device inside ``shard_map``).

Epsilon-lexicase (``selection="lexicase"``) costs one random case order per parent (a sort of
``n_parents x n_cases``) plus, per parent, the sum of its shrinking pool's sizes over the cases it
visits: far more than a tournament (~0.8 CPU-s per generation at pop 1000 x 676 cases on 2 cores,
see ``benchmarks/results_gp_select.md``); it needs a problem that returns per-case errors.

Example::

    fs = FunctionSet(("add", "sub", "mul", "div"))
    gp = GP(population_size=1000, function_set=fs, n_vars=2, max_len=64)
    state = gp.init(jax.random.key(0))
    forest, state = gp.ask(key, state)                # Forest [pop, max_len]
    state, metrics = gp.tell(key, state, forest, Evaluation(fitness=mse))

    # lexicase on per-row errors; or parsimony pressure, gplearn-style
    problem = SymbolicRegression(X, y, fs, case_errors=True)
    result = evotensor.run(GP(1000, fs, n_vars=2, selection="lexicase"), problem, 50, key)
    result = evotensor.run(GP(1000, fs, n_vars=2, parsimony_coefficient=0.001), problem, 50, key)

    # NSGA-II on (loss, size); the front of the hall of fame as a table
    result = evotensor.run(GP(1000, fs, n_vars=2, survival="nsga2"), problem, 50, key)
    rows = evotensor.gp.front_table(result.state.hall_of_fame, fs)
"""

from __future__ import annotations

import copy
import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core import rng
from evotensor.core.checks import ArgumentError
from evotensor.core.evaluation import Evaluation, stand_ins_for_nonfinite
from evotensor.core.pytree import pytree_dataclass
from evotensor.gp import front
from evotensor.gp import selection as sel
from evotensor.gp.config import SELECTIONS as _SELECTION_FACTORIES
from evotensor.gp.config import GPConfig
from evotensor.gp.encoding import DecodedForest, Forest
from evotensor.gp.evaluate import evaluate
from evotensor.gp.generate import TreeGenerator
from evotensor.gp.mesh_variation import VariationPlan, offspring_on_mesh
from evotensor.gp.operators import default_insert_generator
from evotensor.gp.selection import CaseErrors
from evotensor.gp.sharding import ForestMesh
from evotensor.gp.variation import BUILTIN_OPERATORS, VariationContext, mutation_blocks
from evotensor.gp.weighted import weighted_length
from evotensor.tree import Tree

MUTATIONS = tuple(op.name for op in BUILTIN_OPERATORS if op.kind == "mutation")
"""The built-in mutations, in the order of ``mutation_probs`` (of the default registry)."""
SELECTIONS = tuple(_SELECTION_FACTORIES)
CROSSOVERS = tuple(op.name for op in BUILTIN_OPERATORS if op.kind == "crossover")

DEFAULT_MUTATION_PROBS = tuple(op.weight for op in BUILTIN_OPERATORS if op.kind == "mutation")
"""Default relative weights of the mutations, in :data:`MUTATIONS` order (the operators' weights)."""

# The key of a selection that draws its own numbers (a user's keyed selector) is folded from the
# generation's key: the one random draw stays as it is, so built-in selections are unaffected.
_SELECTION_KEY = 0x5E1EC7


class ForestDecoder:
    """GP needs no decoding: the tree is executed directly. ``decode`` hands the same arrays on as a
    :class:`~evotensor.gp.encoding.DecodedForest` that carries the GP's ``n_vars`` and ``n_outputs``
    (static), so that evaluating it on data with another number of columns or outputs raises an
    error naming them (:func:`evotensor.gp.evaluate`); ``apply(tree, X [n_points, n_vars]) ->
    [n_points, n_outputs]`` runs one tree."""

    def __init__(self, function_set: Any, n_outputs: int = 1, n_vars: int | None = None):
        self.function_set = function_set
        self.n_outputs = n_outputs
        self.n_vars = n_vars

    def decode(self, genotypes: Forest) -> Forest:
        # n_vars 0: constants only, the trees read no column
        return DecodedForest.of(genotypes, self.n_vars or None, self.n_outputs)

    def apply(self, phenotype: Forest, x: jax.Array) -> jax.Array:
        return evaluate(phenotype, x, self.function_set, self.n_outputs)


@pytree_dataclass
class GPParams:
    """Dynamic hyperparameters (may be traced / vmapped).

    Attributes:
        crossover_rate: probability that a child is made by crossover (else a copy of its
            recipient parent). Default 0.9 (EvoGP, gplearn).
        internal_bias: Koza's function-node probability for one-point crossover points. 0.9.
        leaf_bias: probability of leaf/leaf points in leaf-biased crossover. 0.3 (EvoGP).
        point_rate: per-node probability of multi-point mutation. 0.1.
        const_rate: per-constant probability of multi-constant mutation. 0.3.
        const_sigma: standard deviation of constant perturbations (``const_perturb=True``). 0.1.
        rank_pressure: linear ranking pressure in ``[1, 2]`` (``selection="rank"``). 2.0.
        parsimony_coefficient: penalty per node added to the minimized fitness that parents are
            selected on (see the module docstring). Default: the constructor's numeric
            ``parsimony_coefficient`` (0.0 unless given); unused when it is ``"auto"`` and by
            lexicase selection.
    """

    crossover_rate: jax.Array
    internal_bias: jax.Array
    leaf_bias: jax.Array
    point_rate: jax.Array
    const_rate: jax.Array
    const_sigma: jax.Array
    rank_pressure: jax.Array
    parsimony_coefficient: jax.Array


@pytree_dataclass
class GPState:
    """Attributes:
    forest: the current population, Forest ``[pop, max_len]``.
    fitness: ``[pop]`` its minimized fitness (float32 max before the first ``tell``).
    best: Forest ``[max_len]``, the best tree told so far.
    best_fitness: ``[]`` its fitness.
    generation: ``[]`` int32, number of ``tell`` calls.
    crossover_rejected, mutation_rejected: ``[]`` int32, children of the last ``ask`` whose
        crossover / structural mutation was rejected by the ``max_len`` cap.
    parents: int32 ``[2 * (pop - n_elite)]``, the recipient then donor parents drawn by the last
        ``tell`` (``selection="lexicase"`` only; zeros otherwise).
    hall_of_fame: :class:`~evotensor.gp.front.HallOfFame`, the best tree told so far for every
        complexity ``1..max_len`` (:meth:`GP.complexity`; on the raw fitness).

    With ``survival="nsga2"``, ``forest`` and ``fitness`` are the survivors, best first.
    """

    forest: Forest
    fitness: jax.Array
    best: Forest
    best_fitness: jax.Array
    generation: jax.Array
    crossover_rejected: jax.Array
    mutation_rejected: jax.Array
    parents: jax.Array
    hall_of_fame: front.HallOfFame


class GP:
    """Tree GP over fixed-shape forests.

    Args:
        population_size: trees per generation (static).
        function_set: :class:`evotensor.gp.functions.FunctionSet`.
        n_vars: number of input variables.
        max_len: slots per tree; the hard length cap of every operator. Default 128.
        **options: the other fields of :class:`~evotensor.gp.config.GPConfig` (``n_outputs``,
            ``init_depth``, ``init_method``, ``leaf_prob``, ``const_prob``, ``const_range``,
            ``function_weights``, ``modi_prob``, ``mutation_depth``, ``selection``,
            ``tournament_size``, ``survival_rate``, ``elite_rate``, ``crossover``, ``const_perturb``,
            ``mutation_rate``, ``mutation_probs``, ``parsimony_coefficient``, ``operators``,
            ``survival``, ``weighted_variables``, ``initial_trees``), documented there; checked once, there.

    Every field of the configuration (``self.config``) reads as an attribute (``gp.max_len``,
    ``gp.tournament_size``, ``gp.mutation_probs``: the normalized weights, ...); ``gp.selection`` is
    the selection's name, ``gp.survival`` the survival's. Derived, static: ``n_elite``,
    ``mutation_counts`` (children per mutation, in registry order), the generators ``initializer`` /
    ``mutation_generator`` / ``insert_generator``, the operators'
    :class:`~evotensor.gp.variation.VariationContext` ``context`` and the generation's
    ``mutation_blocks``.
    """

    # the run loop hands NaN/inf fitness over as it is: tell replaces it for the state itself
    # (stand_ins_for_nonfinite, the same values the run loop would give) and keeps such trees out of the
    # hall of fame and out of NSGA-II's feasible fronts, which a finite stand-in value cannot do
    accepts_nonfinite = True
    _mesh_layout: ForestMesh | None = None  # set on the copy on_mesh returns
    _variation_plan: VariationPlan | None = None  # on a mesh of several devices: how they share the children

    def __init__(
        self, population_size: int, function_set: Any, n_vars: int, max_len: int = 128, **options: Any
    ):
        self._build(GPConfig(population_size, function_set, n_vars, max_len, **options))

    @classmethod
    def from_config(cls, config: GPConfig) -> GP:
        """The strategy of a checked :class:`~evotensor.gp.config.GPConfig`."""
        if not isinstance(config, GPConfig):
            raise TypeError(f"config must be a GPConfig, got {type(config).__name__}")
        gp = cls.__new__(cls)
        gp._build(config)
        return gp

    def _build(self, config: GPConfig) -> None:
        """Wire the static pieces of a checked configuration."""
        self.config = c = config
        # a real attribute: Python 3.12's isinstance(gp, Strategy) reads protocol members statically
        # (inspect.getattr_static), so __getattr__ below does not count there
        self.population_size = c.population_size
        self.n_elite = c.n_elite
        self.mutation_counts = _split_counts(
            round(c.mutation_rate * (c.population_size - self.n_elite)), c.mutation_probs
        )
        leaf = dict(
            const_prob=c.const_prob,
            const_range=c.const_range,
            n_outputs=c.n_outputs,
            modi_prob=c.modi_prob,
            function_weights=c.function_weights,
            variable_weights=c.variable_weights,
            weighted_variables=c.weighted_variables,
        )
        fs, lo, hi = c.function_set, c.init_depth[0], c.init_depth[1]
        self.initializer = TreeGenerator(fs, c.n_vars, c.max_len, lo, hi, c.init_method, c.leaf_prob, **leaf)
        d_min, d_max = c.mutation_depth
        a = int(fs.max_arity)
        full_size = d_max + 1 if a == 1 else (a ** (d_max + 1) - 1) // (a - 1)
        extra = 2 if c.weighted_variables else 0  # slots a weighted variable adds to its leaf
        full_size += extra * a**d_max  # a full tree's a ** d_max leaves
        self.mutation_generator = TreeGenerator(
            fs, c.n_vars, min(c.max_len, full_size), d_min, d_max, "half_and_half", c.leaf_prob, **leaf
        )
        insert_size = min(c.max_len, 1 + (1 + extra) * a)
        self.insert_generator = default_insert_generator(fs, c.n_vars, insert_size, **leaf)
        self.context = VariationContext(
            fs,
            c.n_vars,
            c.max_len,
            c.const_range,
            c.const_prob,
            c.const_perturb,
            self.mutation_generator,
            self.insert_generator,
            c.weighted_variables,
        )
        counts = dict(zip(c.operators.names("mutation"), self.mutation_counts))
        self.mutation_blocks = mutation_blocks(c.operators, counts, self.context)

    def __getattr__(self, name: str) -> Any:
        # only reached for names that are not instance attributes: the configuration's fields
        config = self.__dict__.get("config")
        if config is not None and name in _CONFIG_FIELDS:
            return getattr(config, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def selection(self) -> str:
        """The parent selection's name (``config.selector`` is the selection itself)."""
        return self.config.selector.name

    @property
    def survival(self) -> str:
        """The survival's name (``config.survivor`` is the survival itself)."""
        return self.config.survivor.name

    @property
    def crossover_operator(self) -> Any:
        """The :class:`~evotensor.gp.variation.GPOperator` of ``crossover``."""
        return self.config.operators[self.config.crossover]

    # -- many devices ---------------------------------------------------------------------------------
    def on_mesh(self, mesh: Any, axis: str = "pop") -> GP:
        """This GP laid out for ``mesh`` (:mod:`evotensor.core.mesh`'s protocol; ``evotensor.run(...,
        mesh=)`` calls it): a copy whose state keeps the forest ``[pop, max_len]`` split along the
        mesh axis ``axis`` (:meth:`state_shardings`), whose ``ask`` returns the offspring split the
        same way (each device makes its share of the children from the gathered parents:
        :mod:`evotensor.gp.mesh_variation`; a generation holds a few collectives: the gathers of
        the parents, the children, the told forest and the ``[pop]`` fitness, and a sum of the
        rejection counts), and whose ``tell`` selects on the replicated ``[pop]`` fitness; the best
        tree, the hall of fame and every other field are replicated. The same results as without a
        mesh for the same key (every child reads only its own tree and draws; tested bit for bit
        on 4 CPU devices).

        Raises:
            ArgumentError: ``axis`` not an axis of the mesh, or a population size it does not divide.
        """
        placed = copy.copy(self)
        placed._mesh_layout = ForestMesh.of(mesh, axis, population_size=self.population_size)
        n = placed._mesh_layout.tree_shards  # one device along the axis: nothing to split
        placed._variation_plan = VariationPlan.of(self, n) if n > 1 else None
        return placed

    def state_shardings(self, state: GPState) -> GPState:
        """Where a GP placed on a mesh (:meth:`on_mesh`) keeps ``state`` (a :class:`GPState`, or one of
        ``jax.ShapeDtypeStruct`` leaves): ``NamedSharding`` leaves, the forest split along the
        population axis, every other field replicated."""
        layout = self._mesh_layout
        if layout is None:
            raise ArgumentError(
                "state_shardings is the layout of a GP placed on a mesh: use gp.on_mesh(mesh)"
            )
        whole, split = layout.sharding(), layout.sharding(layout.axis)
        shardings = jax.tree_util.tree_map(lambda _: whole, state)
        return shardings.replace(forest=jax.tree_util.tree_map(lambda _: split, state.forest))

    def _laid_out(self, state: GPState) -> GPState:
        """``state`` in :meth:`state_shardings`' layout when placed on a mesh (else as it is)."""
        layout = self._mesh_layout
        if layout is None:
            return state
        return state.replace(  # type: ignore[attr-defined]
            forest=layout.constrain(state.forest, layout.axis), fitness=layout.constrain(state.fitness, None)
        )

    # -- protocol -------------------------------------------------------------------------------------
    def default_params(self) -> GPParams:
        """The documented defaults (see :class:`GPParams`)."""
        f = lambda x: jax.device_put(np.float32(x))  # (jnp.asarray compiles a program in a fresh process)
        return GPParams(
            crossover_rate=f(0.9),
            internal_bias=f(0.9),
            leaf_bias=f(0.3),
            point_rate=f(0.1),
            const_rate=f(0.3),
            const_sigma=f(0.1),
            rank_pressure=f(2.0),
            parsimony_coefficient=f(0.0 if self.parsimony_auto else self.parsimony_coefficient),
        )

    def init(self, key: jax.Array, params: GPParams | None = None) -> GPState:
        """A random initial forest (see ``init_depth``, ``init_method``), its first trees replaced by
        ``initial_trees``."""
        forest = self.initializer(key, self.population_size)
        if self.initial_trees:
            seeds = Forest.from_tuples(list(self.initial_trees), self.max_len, self.function_set)
            k = len(self.initial_trees)
            forest = jax.tree_util.tree_map(lambda f, s: f.at[:k].set(s), forest, seeds)
        big = jnp.finfo(jnp.float32).max
        state = GPState(
            forest=forest,
            fitness=jnp.full(self.population_size, big, jnp.float32),
            best=forest[0],
            best_fitness=jnp.asarray(big, jnp.float32),
            generation=jnp.int32(0),
            crossover_rejected=jnp.int32(0),
            mutation_rejected=jnp.int32(0),
            parents=jnp.zeros(2 * (self.population_size - self.n_elite), jnp.int32),
            hall_of_fame=front.HallOfFame.empty(self.max_len),
        )
        return self._laid_out(state)

    def ask(self, key: jax.Array, state: GPState, params: GPParams | None = None) -> tuple[Forest, GPState]:
        """The forest to evaluate, ``[pop, max_len]``: the initial one, then offspring."""
        params = self.default_params() if params is None else params

        def first(_):
            return state.forest, jnp.int32(0), jnp.int32(0)

        def later(_):
            return self._offspring(key, state, params)

        state = self._laid_out(state)
        forest, rej_c, rej_m = jax.lax.cond(state.generation == 0, first, later, None)
        if self._mesh_layout is not None:
            forest = self._mesh_layout.constrain(forest, self._mesh_layout.axis)
        return forest, state.replace(crossover_rejected=rej_c, mutation_rejected=rej_m)  # type: ignore[attr-defined]

    def tell(
        self,
        key: jax.Array,
        state: GPState,
        forest: Forest,
        evaluation: Evaluation | jax.Array,
        params: GPParams | None = None,
    ) -> tuple[GPState, dict[str, jax.Array]]:
        """Record the *minimized* fitness ``[pop]`` of ``forest`` (the one from ``ask``).

        ``evaluation`` is an :class:`Evaluation` (or the fitness array itself). With
        ``selection="lexicase"`` it must be an :class:`Evaluation` whose ``info`` is a
        :class:`~evotensor.gp.selection.CaseErrors` (``case_errors [pop, n_cases]``), and ``key`` draws
        the next generation's parents: ``state.parents = epsilon_lexicase(key, errors, 2 * (pop -
        n_elite))`` (recipients first), where a tree with any non-finite case error has ``+inf`` on
        every case. (An ``info`` dict or :class:`evotensor.tree.Tree` with the key ``"case_errors"``,
        the untyped form, is still read, with a ``DeprecationWarning``.)

        The hall of fame takes the told trees in (a NaN/inf fitness never enters). With
        ``survival="nsga2"`` the state's ``forest``/``fitness`` become NSGA-II's ``pop`` survivors
        among the told trees and the current ones (before the first ``tell``: the told trees only),
        best first (see :class:`~evotensor.gp.config.GPConfig`).

        Metrics (scalars): ``best_fitness``, ``generation_best``, ``mean_fitness`` (raw minimized
        fitness of the told trees), ``mean_length``, ``max_length``, ``best_length``,
        ``crossover_rejected``, ``mutation_rejected``, ``front_size`` (trees on the hall of fame's
        Pareto front), and with ``parsimony_coefficient="auto"`` the coefficient the next
        ``ask`` selects with, ``parsimony_coefficient``.
        """
        fitness = evaluation.fitness if isinstance(evaluation, Evaluation) else jnp.asarray(evaluation)
        if fitness.shape != (self.population_size,):
            raise ValueError(f"fitness must have shape ({self.population_size},), got {fitness.shape}")
        if forest.opcode.shape != (self.population_size, self.max_len):
            raise ValueError(
                f"forest must be [{self.population_size}, {self.max_len}], got {forest.opcode.shape}"
            )
        selector = self.config.selector
        case_errors = self._case_errors(evaluation) if selector.on_case_errors else None
        layout = self._mesh_layout
        if layout is not None:  # selection, elites, the best tree and the front read all of it:
            fitness = layout.constrain(fitness, None)  # one gather each, not one per use
            if layout.tree_shards > 1:
                forest = layout.gathered(forest)
                if self.config.survivor.keeps_parents:
                    state = state.replace(forest=layout.gathered(state.forest))  # type: ignore[attr-defined]
        raw = fitness.astype(jnp.float32)
        loss = jnp.where(jnp.isfinite(raw), raw, jnp.inf)  # non-finite: never in the front
        fitness = stand_ins_for_nonfinite(raw)  # what the run loop gives strategies that do not take NaN
        i = jnp.argmin(fitness)
        improved = fitness[i] < state.best_fitness
        best = jax.tree_util.tree_map(lambda new, old: jnp.where(improved, new, old), forest[i], state.best)
        best_fitness = jnp.where(improved, fitness[i], state.best_fitness)
        length = forest.length
        complexity = self.complexity(forest)
        hall_of_fame = front.update(state.hall_of_fame, forest, loss, complexity)
        kept, kept_fitness = self._survivors(state, forest, loss, fitness)
        new_state = state.replace(  # type: ignore[attr-defined]
            forest=kept,
            fitness=kept_fitness,
            best=best,
            best_fitness=best_fitness,
            generation=state.generation + 1,
            hall_of_fame=hall_of_fame,
        )
        if case_errors is not None:
            n_parents = 2 * (self.population_size - self.n_elite)
            new_state = new_state.replace(parents=selector.from_cases(key, case_errors, n_parents))
        metrics = {
            "best_fitness": best_fitness,
            "generation_best": fitness[i],
            "mean_fitness": jnp.mean(fitness),
            "mean_length": jnp.mean(length.astype(jnp.float32)),
            "max_length": jnp.max(length),
            "best_length": best.length,
            "crossover_rejected": state.crossover_rejected,
            "mutation_rejected": state.mutation_rejected,
            "front_size": hall_of_fame.front_size(),
        }
        if self.parsimony_auto:
            metrics["parsimony_coefficient"] = sel.covariant_parsimony(fitness, complexity)
        return self._laid_out(new_state), metrics

    def _survivors(
        self, state: GPState, forest: Forest, loss: jax.Array, fitness: jax.Array
    ) -> tuple[Forest, jax.Array]:
        """The next parents and their fitness: the told ``forest`` (generational), or the survival's
        choice among the told trees (``loss``: non-finite as ``+inf``) and the current parents (none
        before the first ``tell``), best first."""
        survive = self.config.survivor.survive
        if survive is None:
            return forest, fitness
        P = self.population_size
        previous = jnp.where(state.generation > 0, state.fitness, jnp.inf)
        both = jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a, b]), forest, state.forest)
        index = survive(jnp.concatenate([loss, previous]), self.complexity(both), P, self.max_len)
        if self._mesh_layout is not None:  # computed whole on every device (no partial sorts)
            index = self._mesh_layout.constrain(index, None)
        kept = jax.tree_util.tree_map(lambda a: a[index], both)
        return kept, jnp.concatenate([fitness, state.fitness])[index]

    def _case_errors(self, evaluation: Evaluation | jax.Array) -> jax.Array:
        """``evaluation.info.case_errors`` as float32 ``[pop, n_cases]``, rows with any non-finite
        error set to ``+inf`` (raises if missing: a selection on per-case errors cannot run without)."""
        info = evaluation.info if isinstance(evaluation, Evaluation) else None
        if isinstance(info, CaseErrors):
            errors, where = info.case_errors, "info.case_errors"
        elif isinstance(info, (Mapping, Tree)) and "case_errors" in info:
            warnings.warn(
                'per-case errors as info["case_errors"] are deprecated: return '
                "Evaluation(fitness, info=evotensor.gp.selection.CaseErrors(case_errors=errors))",
                DeprecationWarning,
                stacklevel=3,
            )
            errors, where = info["case_errors"], "info['case_errors']"
        else:
            got = "a bare fitness array" if not isinstance(evaluation, Evaluation) else f"info={info!r:.60}"
            raise ValueError(
                f"selection={self.selection!r} needs per-case errors: tell() must get an Evaluation whose "
                "info is CaseErrors(case_errors=[pop, n_cases]) (lower is better), e.g. from "
                f"SymbolicRegression(..., case_errors=True); got {got}"
            )
        errors = jnp.asarray(errors)
        if errors.ndim != 2 or errors.shape[0] != self.population_size or errors.shape[1] < 1:
            raise ValueError(
                f"{where} must have shape ({self.population_size}, n_cases >= 1), got {errors.shape}"
            )
        errors = errors.astype(jnp.float32)
        bad = jnp.any(~jnp.isfinite(errors), axis=1, keepdims=True)
        return jnp.where(bad, jnp.inf, errors)

    def complexity(self, forest: Forest) -> jax.Array:
        """The model size of each tree, int32 ``[...]``: its length in nodes, with a weighted
        variable counting as one node under ``weighted_variables=True``
        (:func:`evotensor.gp.weighted.weighted_length`). The hall of fame's index, the size objective
        of NSGA-II and the length that parsimony pressure penalizes."""
        if self.config.weighted_variables:
            return weighted_length(forest, self.function_set)
        return forest.length

    def selection_fitness(self, state: GPState, params: GPParams | None = None) -> jax.Array:
        """The minimized fitness ``[pop]`` that parents are selected on (all selections but lexicase):
        ``state.fitness + c * length`` with ``c = params.parsimony_coefficient``, or the covariant
        coefficient of the state's population with ``parsimony_coefficient="auto"``
        (:func:`evotensor.gp.selection.parsimony_fitness`). Equals ``state.fitness`` when ``c == 0``.
        With a survival that keeps parents (``"nsga2"``): the parents' position in the survival order
        (``0, 1, ..., pop - 1``; the state holds them in that order), before the first ``tell`` the
        fitness."""
        params = self.default_params() if params is None else params
        if self.config.survivor.keeps_parents:
            order = jnp.arange(self.population_size, dtype=jnp.float32)
            return jnp.where(state.generation > 0, order, state.fitness)
        length = self.complexity(state.forest)
        if self.parsimony_auto:
            c = sel.covariant_parsimony(state.fitness, length)
        else:
            c = params.parsimony_coefficient
        return sel.parsimony_fitness(state.fitness, length, c)

    # -- variation --------------------------------------------------------------------------------------
    # One generation's variation draws all its random numbers in ONE random call (every call site
    # compiles its own threefry loop, and on CPU XLA's compile time grows with the number of
    # kernels), and runs the mutations as a few fused passes (structural: one exchange for subtree,
    # hoist, insert and delete; in place: one rewrite for the point / constant mutations) instead of
    # one pipeline per operator. Children come in random order (parents are drawn i.i.d.), so the
    # consecutive blocks of children the mutations take are random subsets. Everything that depends
    # on the operators iterates the registry's plan, self.mutation_blocks.

    def _layout(self) -> list[tuple[str, tuple[int, ...], bool]]:
        """``(name, shape, as_bits)`` of every draw of one generation's variation (static): the
        selection's, the crossover's, the crossover coins, then every mutation block's."""
        C = self.population_size - self.n_elite
        out: list[tuple[str, tuple[int, ...], bool]] = []
        select = self.config.selector.draw(2 * C)
        if select is not None:
            out.append(("select", *select))
        shapes = self.crossover_operator.draw_shapes(C, self.context)
        out += [(f"crossover/{i}", tuple(shape), False) for i, shape in enumerate(shapes)]
        out.append(("do_cross", (C,), False))
        for block in self.mutation_blocks:
            out += [(block.draw_name(i), tuple(shape), False) for i, shape in enumerate(block.shapes)]
        return out

    def _draw(self, key: jax.Array) -> dict[str, jax.Array]:
        """Every random number of one ``_offspring`` from ``key``, in one ``jax.random.bits`` draw
        (computed by :func:`evotensor.core.rng.bits`: the same numbers): uniforms (exactly as
        ``jax.random.uniform`` makes them from bits) or, for the selections' integers, the raw
        uint32 bits (see :func:`evotensor.gp.selection.uniform_ints`)."""
        layout = self._layout()
        sizes = [int(np.prod(shape)) for _, shape, _ in layout]
        n = sum(sizes)
        # core.rng's unrolled hash is one vectorized pass where jax.random's rolled one is five
        # (a tenth of a small generation's time on a CPU), but XLA:CPU fuses it into every one of
        # the ~50 slices' consumers (a program half as large again) unless it is the result of a
        # conditional: a branch XLA cannot see is always taken ((x | 1) != 0) keeps it whole
        data = jax.random.key_data(key).reshape(-1)
        bits = jax.lax.cond(
            (data[0] | jnp.uint32(1)) != 0,
            lambda k: rng.bits(k, (n,), jnp.uint32),
            lambda k: jnp.zeros((n,), jnp.uint32),  # never taken
            key,
        )
        out, start = {}, 0
        for (name, shape, as_bits), size in zip(layout, sizes):
            chunk = bits[start : start + size].reshape(shape)
            out[name] = chunk if as_bits else bits_to_uniform(chunk)
            start += size
        return out

    def _parents(
        self, u: dict[str, jax.Array], state: GPState, params: GPParams, key: jax.Array | None = None
    ) -> jax.Array:
        """Recipients then donors, int32 ``[2 * (pop - n_elite)]``, on the selection fitness
        (``key``: the generation's, for a selection that draws its own numbers)."""
        selector = self.config.selector
        if selector.on_case_errors:
            return state.parents  # drawn by tell, where the per-case errors were
        fitness = self.selection_fitness(state, params)
        own_key = jax.random.fold_in(key, _SELECTION_KEY) if selector.uses_key else None
        return selector.select(
            u.get("select"), fitness, 2 * (self.population_size - self.n_elite), params, own_key
        )

    def _crossover(self, u: dict[str, jax.Array], pair: Forest, params: GPParams):
        """Children from ``pair`` (Forest ``[2C, L]``: recipients then donors): a crossover with
        probability ``crossover_rate``, else the recipient. ``(children [C, L], rejected crossovers
        [])`` (rejections are counted for a crossover that can grow a tree)."""
        op = self.crossover_operator
        draws = tuple(u[f"crossover/{i}"] for i in range(len(op.draw_shapes(1, self.context))))
        crossing = u["do_cross"] < params.crossover_rate
        children, ok = op.apply(draws, pair, crossing, self.context, params)
        rejected = jnp.sum(crossing & ~ok).astype(jnp.int32) if op.grows else jnp.int32(0)
        return children, rejected

    def _mutations(self, u: dict[str, jax.Array], children: Forest, params: GPParams):
        """``(pieces, rejected)``: the children after mutation as consecutive blocks (one per entry
        of ``mutation_blocks``, then the unmutated rest) and the mutations rejected by the length cap
        (counted for the operators that can grow a tree)."""
        block_of = lambda lo, hi: jax.tree_util.tree_map(lambda a: a[lo:hi], children)  # noqa: E731
        pieces, rejected, row = [], jnp.int32(0), 0
        for block in self.mutation_blocks:
            draws = tuple(u[block.draw_name(i)] for i in range(len(block.shapes)))
            out, ok = block.apply(draws, block_of(row, row + block.size), self.context, params)
            grows = block.grows
            if grows.any():
                rejected = rejected + jnp.sum(~ok & jnp.asarray(grows)).astype(jnp.int32)
            pieces.append(out)
            row += block.size
        C = self.population_size - self.n_elite
        if row < C:
            pieces.append(block_of(row, C))
        return pieces, rejected

    def _offspring(self, key: jax.Array, state: GPState, params: GPParams):
        if self._variation_plan is not None:  # on a mesh: each device makes its share of the children
            return offspring_on_mesh(self, self._mesh_layout, self._variation_plan, key, state, params)
        E = self.n_elite
        u = self._draw(key)
        forest = state.forest
        take = lambda f, idx: jax.tree_util.tree_map(lambda a: a[idx], f)  # noqa: E731
        pair = take(forest, self._parents(u, state, params, key))  # recipients, then donors
        pieces, rej_c, rej_m = self._vary(u, pair, params)
        if E:
            pieces.insert(0, take(forest, sel.elite_indices(state.fitness, E)))  # raw fitness (see top)
        # one concatenation, not an update of the children per mutation (each a copy of them)
        out = jax.tree_util.tree_map(lambda *a: jnp.concatenate(a, axis=0), *pieces)
        return out, rej_c, rej_m

    def _vary(self, u: dict[str, jax.Array], pair: Forest, params: GPParams):
        """``(pieces, rejected crossovers, rejected mutations)``: the children of ``pair`` (recipients
        then donors, ``[2C, L]``) after crossover and mutation, as :meth:`_mutations`' blocks."""
        children, rej_c = self._crossover(u, pair, params)
        pieces, rej_m = self._mutations(u, children, params)
        return pieces, rej_c, rej_m

    def vary(self, key: jax.Array, parents: Forest, params: GPParams | None = None) -> Forest:
        """The children of ``parents`` by this GP's crossover and mutations, as a generation makes
        them (the same operators, rates and length cap), without selection or elites: for an
        emitter that picks its own parents (MAP-Elites over trees, :class:`evotensor.gp.GPEmitter`).

        Args:
            key: PRNG key.
            parents: ``Forest [2C, max_len]``, recipients then donors, ``C = population_size -
                n_elite`` (child ``i`` crosses recipient ``i`` with donor ``C + i``).
            params: the dynamic hyperparameters (default :meth:`default_params`).

        Returns:
            ``Forest [C, max_len]``: valid trees of at most ``max_len`` nodes.
        """
        C = self.population_size - self.n_elite
        if not isinstance(parents, Forest) or parents.opcode.shape != (2 * C, self.max_len):
            shape = getattr(getattr(parents, "opcode", None), "shape", None)
            raise ArgumentError(
                f"parents must be a Forest [2 * (population_size - n_elite), max_len] = [{2 * C}, "
                f"{self.max_len}], got {type(parents).__name__} {shape}"
            )
        params = self.default_params() if params is None else params
        pieces, _, _ = self._vary(self._draw(key), parents, params)
        return jax.tree_util.tree_map(lambda *a: jnp.concatenate(a, axis=0), *pieces)

    def __repr__(self) -> str:
        c = self.parsimony_coefficient
        return (
            f"GP(population_size={self.population_size}, max_len={self.max_len}, "
            f"function_set={self.function_set!r}, n_vars={self.n_vars}, selection={self.selection!r}"
            + (f", survival={self.survival!r}" if self.config.survivor.keeps_parents else "")
            + (f", parsimony_coefficient={c!r})" if c else ")")
        )

    @property
    def decoder(self) -> ForestDecoder:
        """The family decoder: identity decode, ``apply`` runs a tree on data. :func:`evotensor.run`
        uses it when it is given no explicit decoder (its identity ``decode`` hands the forest to a
        function problem such as :class:`~evotensor.gp.regression.SymbolicRegression`; a policy
        problem gets ``apply`` as well)."""
        return ForestDecoder(self.function_set, self.n_outputs, self.n_vars)


def bits_to_uniform(bits: jax.Array) -> jax.Array:
    """float32 uniforms in ``[0, 1)`` from uint32 ``bits``, as ``jax.random.uniform`` makes them
    (the top 23 bits as the mantissa of a float in ``[1, 2)``, minus 1): ``bits_to_uniform(
    jax.random.bits(key, shape))`` equals ``jax.random.uniform(key, shape)``."""
    one = jnp.asarray(np.float32(1.0).view(np.uint32))
    floats = jax.lax.bitcast_convert_type((bits >> jnp.uint32(9)) | one, jnp.float32)
    return jnp.maximum(floats - jnp.float32(1.0), jnp.float32(0.0))


def _split_counts(total: int, weights: Sequence[float]) -> tuple[int, ...]:
    """Integer counts summing to ``total`` in proportion to ``weights`` (largest remainders)."""
    raw = np.asarray(weights) * total
    counts = np.floor(raw).astype(int)
    for i in np.argsort(-(raw - counts), kind="stable")[: total - int(counts.sum())]:
        counts[i] += 1
    return tuple(int(c) for c in counts)


def mutation_probs(**weights: float) -> np.ndarray:
    """Build a ``mutation_probs`` vector over :data:`MUTATIONS` (the default registry) by name, e.g.
    ``mutation_probs(subtree=0.5, hoist=0.5)`` -> float32 ``[8]`` (unnamed mutations get 0). With a
    registry of one's own, give ``mutation_probs`` as a ``{name: weight}`` mapping instead."""
    unknown = set(weights) - set(MUTATIONS)
    if unknown:
        raise ValueError(f"unknown mutation(s) {sorted(unknown)}; valid: {MUTATIONS}")
    return np.asarray([float(weights.get(m, 0.0)) for m in MUTATIONS], np.float32)


# GPConfig's fields, read through GP.__getattr__
_CONFIG_FIELDS = frozenset(f.name for f in dataclasses.fields(GPConfig))
