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
    tell:  records the fitness (minimized), the best tree so far (raw fitness), and metrics;
           with ``selection="lexicase"`` it also draws the next parents from the per-case errors
           ``evaluation.info["case_errors"] [pop, n_cases]`` (so the state never holds them).

Parsimony pressure (gplearn's ``parsimony_coefficient``): parents are selected on
``fitness + c * length`` (minimized orientation; in natural orientation gplearn's
``raw - c * length * sign``), with ``c = params.parsimony_coefficient`` (default 0: no pressure) or,
with ``parsimony_coefficient="auto"``, Poli & McPhee's covariant coefficient recomputed on every
told population (:func:`evotensor.gp.selection.covariant_parsimony`). Everything reported — state
fitness, best tree, metrics — stays the raw fitness, and elites are chosen on the raw fitness (as
EvoGP; gplearn has no elitism): the most accurate tree always survives, so the best fitness of the
population never gets worse. ``"auto"`` equals gplearn's for maximized metrics; for minimized ones
gplearn's formula has the opposite sign (see :func:`~evotensor.gp.selection.covariant_parsimony`).

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
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core import rng
from evotensor.core.evaluation import Evaluation, worst_for_nonfinite
from evotensor.core.pytree import pytree_dataclass
from evotensor.core.strategy import check_population_size
from evotensor.gp import operators as ops
from evotensor.gp import selection as sel
from evotensor.gp.encoding import Forest
from evotensor.gp.evaluate import evaluate
from evotensor.gp.exchange import exchange
from evotensor.gp.generate import TreeGenerator
from evotensor.tree import Tree

MUTATIONS = (
    "subtree",
    "hoist",
    "single_point",
    "multi_point",
    "insert",
    "delete",
    "single_constant",
    "multi_constant",
)
SELECTIONS = ("truncation", "tournament", "rank", "roulette", "lexicase")
CROSSOVERS = ("one_point", "leaf_biased")

# Default relative weights of the mutations, in MUTATIONS order.
DEFAULT_MUTATION_PROBS = (0.35, 0.1, 0.1, 0.05, 0.1, 0.1, 0.1, 0.1)


class ForestDecoder:
    """GP needs no decoding: the tree is executed directly. ``decode`` is the identity and
    ``apply(tree, X [n_points, n_vars]) -> [n_points, n_outputs]`` runs one tree."""

    def __init__(self, function_set: Any, n_outputs: int = 1):
        self.function_set = function_set
        self.n_outputs = n_outputs

    def decode(self, genotypes: Forest) -> Forest:
        return genotypes

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
    """

    forest: Forest
    fitness: jax.Array
    best: Forest
    best_fitness: jax.Array
    generation: jax.Array
    crossover_rejected: jax.Array
    mutation_rejected: jax.Array
    parents: jax.Array


class GP:
    """Tree GP over fixed-shape forests.

    Args:
        population_size: trees per generation (static).
        function_set: :class:`evotensor.gp.functions.FunctionSet`.
        n_vars: number of input variables.
        max_len: slots per tree; the hard length cap of every operator. Default 128.
        n_outputs: outputs of a tree (Modi nodes when ``> 1``). Default 1.
        init_depth: ``(min, max)`` depth of the initial trees (root depth 0). Default (2, 6), gplearn.
        init_method: ``"half_and_half"`` (default), ``"full"`` or ``"grow"``.
        leaf_prob: grow's per-depth leaf probability (float or sequence). Default 0.3.
        const_prob: probability that a new leaf is a constant. Default 0.5.
        const_range: continuous range of new constants. Default (-1, 1), gplearn.
        modi_prob: probability that a new function node is a Modi node (``n_outputs > 1``). 0.5 if
            ``n_outputs > 1`` (EvoGP), else 0.
        mutation_depth: ``(min, max)`` depth of the subtrees of subtree mutation. Default (0, 3).
        selection: ``"truncation"`` (EvoGP's default: parents uniform among the ``survival_rate``
            best), ``"tournament"``, ``"rank"``, ``"roulette"`` or ``"lexicase"``. Default
            ``"tournament"``. ``"lexicase"`` is epsilon-lexicase
            (:func:`evotensor.gp.selection.epsilon_lexicase`, static MAD epsilon) on per-case errors
            that the problem must return as ``Evaluation.info["case_errors"]`` ``[pop, n_cases]``
            (lower is better; e.g. ``SymbolicRegression(..., case_errors=True)``); ``tell`` raises
            if they are missing. A tree with any non-finite case error gets ``+inf`` on every case,
            so it is never selected over a tree whose errors are all finite.
        tournament_size: Default 7.
        survival_rate: truncation's survivor fraction. Default 0.3 (EvoGP).
        elite_rate: fraction of best trees copied unchanged. Default 0.01 (EvoGP).
        crossover: ``"one_point"`` (with Koza's bias ``internal_bias``) or ``"leaf_biased"``.
        const_perturb: constant mutations perturb by ``const_sigma * N(0,1)`` (True, default) or
            redraw uniformly in ``const_range`` (False).
        mutation_rate: fraction of the children that are mutated. Default 0.1 (EvoGP).
        mutation_probs: relative weights of the mutations in :data:`MUTATIONS` order (see
            :func:`mutation_probs`). Default :data:`DEFAULT_MUTATION_PROBS`.
        parsimony_coefficient: a number ``>= 0`` (the default of the dynamic
            ``GPParams.parsimony_coefficient``; 0.0 here, gplearn's default is 0.001) or ``"auto"``
            (gplearn's covariant coefficient, see :func:`evotensor.gp.selection.covariant_parsimony`).
            Parents are selected on ``fitness + c * length``; see the module docstring. Must be 0
            with ``selection="lexicase"``, which selects on per-case errors only.
    """

    def __init__(
        self,
        population_size: int,
        function_set: Any,
        n_vars: int,
        max_len: int = 128,
        *,
        n_outputs: int = 1,
        init_depth: tuple[int, int] = (2, 6),
        init_method: str = "half_and_half",
        leaf_prob: float | Sequence[float] = 0.3,
        const_prob: float = 0.5,
        const_range: tuple[float, float] = (-1.0, 1.0),
        modi_prob: float | None = None,
        mutation_depth: tuple[int, int] = (0, 3),
        selection: str = "tournament",
        tournament_size: int = 7,
        survival_rate: float = 0.3,
        elite_rate: float = 0.01,
        crossover: str = "one_point",
        const_perturb: bool = True,
        mutation_rate: float = 0.1,
        mutation_probs: Sequence[float] = DEFAULT_MUTATION_PROBS,
        parsimony_coefficient: float | str = 0.0,
    ):
        self.population_size = check_population_size(population_size, 2)
        if selection not in SELECTIONS:
            raise ValueError(f"selection must be one of {SELECTIONS}, got {selection!r}")
        if crossover not in CROSSOVERS:
            raise ValueError(f"crossover must be one of {CROSSOVERS}, got {crossover!r}")
        if isinstance(tournament_size, bool) or not isinstance(tournament_size, int) or tournament_size < 1:
            raise ValueError(f"tournament_size must be a positive int, got {tournament_size!r}")
        if not 0.0 < survival_rate <= 1.0:
            raise ValueError(f"survival_rate must be in (0, 1], got {survival_rate!r}")
        if not 0.0 <= elite_rate < 1.0:
            raise ValueError(f"elite_rate must be in [0, 1), got {elite_rate!r}")
        if not 0.0 <= mutation_rate <= 1.0:
            raise ValueError(f"mutation_rate must be in [0, 1], got {mutation_rate!r}")
        if isinstance(parsimony_coefficient, str):
            if parsimony_coefficient != "auto":
                raise ValueError(
                    f"parsimony_coefficient must be a number >= 0 or 'auto', got {parsimony_coefficient!r}"
                )
        elif (
            isinstance(parsimony_coefficient, bool)
            or not isinstance(parsimony_coefficient, (int, float, np.floating, np.integer))
            or not math.isfinite(parsimony_coefficient)
            or parsimony_coefficient < 0
        ):
            raise ValueError(
                f"parsimony_coefficient must be a finite number >= 0 or 'auto', got {parsimony_coefficient!r}"
            )
        if selection == "lexicase" and parsimony_coefficient != 0:
            raise ValueError(
                "parsimony_coefficient must be 0 with selection='lexicase' (lexicase selects on the "
                f"per-case errors only), got {parsimony_coefficient!r}"
            )
        probs = np.asarray(mutation_probs, np.float64)
        if probs.shape != (len(MUTATIONS),) or np.any(probs < 0) or not np.any(probs > 0):
            raise ValueError(
                f"mutation_probs must be {len(MUTATIONS)} non-negative weights (order {MUTATIONS}), "
                f"not all zero; got {mutation_probs!r}"
            )
        self.function_set = function_set
        self.n_vars = n_vars
        self.max_len = max_len
        self.n_outputs = n_outputs
        self.selection = selection
        self.parsimony_auto = parsimony_coefficient == "auto"
        self.parsimony_coefficient = (
            "auto" if self.parsimony_auto else float(parsimony_coefficient)  # type: ignore[arg-type]
        )
        self.tournament_size = tournament_size
        self.survival_rate = float(survival_rate)
        self.elite_rate = float(elite_rate)
        self.n_elite = math.ceil(elite_rate * self.population_size) if elite_rate > 0 else 0
        self.n_elite = min(self.n_elite, self.population_size - 1)
        self.mutation_rate = float(mutation_rate)
        self.mutation_probs = tuple(float(x) for x in probs / probs.sum())
        self.mutation_counts = _split_counts(
            round(self.mutation_rate * (self.population_size - self.n_elite)), self.mutation_probs
        )
        self.crossover = crossover
        self.const_perturb = bool(const_perturb)
        self.const_range = tuple(float(c) for c in const_range)
        self.const_prob = float(const_prob)
        if modi_prob is None:
            modi_prob = 0.5 if n_outputs > 1 else 0.0
        leaf = dict(
            const_prob=const_prob, const_range=self.const_range, n_outputs=n_outputs, modi_prob=modi_prob
        )
        self.initializer = TreeGenerator(
            function_set, n_vars, max_len, init_depth[0], init_depth[1], init_method, leaf_prob, **leaf
        )
        d_min, d_max = mutation_depth
        a = int(function_set.max_arity)
        full_size = d_max + 1 if a == 1 else (a ** (d_max + 1) - 1) // (a - 1)
        self.mutation_generator = TreeGenerator(
            function_set, n_vars, min(max_len, full_size), d_min, d_max, "half_and_half", leaf_prob, **leaf
        )
        self.insert_generator = ops.default_insert_generator(
            function_set, n_vars, min(max_len, 1 + a), **leaf
        )

    # -- protocol -------------------------------------------------------------------------------------
    def default_params(self) -> GPParams:
        """The documented defaults (see :class:`GPParams`)."""
        f = lambda x: jnp.asarray(x, jnp.float32)
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
        """A random initial forest (see ``init_depth``, ``init_method``)."""
        forest = self.initializer(key, self.population_size)
        big = jnp.finfo(jnp.float32).max
        return GPState(
            forest=forest,
            fitness=jnp.full(self.population_size, big, jnp.float32),
            best=forest[0],
            best_fitness=jnp.asarray(big, jnp.float32),
            generation=jnp.int32(0),
            crossover_rejected=jnp.int32(0),
            mutation_rejected=jnp.int32(0),
            parents=jnp.zeros(2 * (self.population_size - self.n_elite), jnp.int32),
        )

    def ask(self, key: jax.Array, state: GPState, params: GPParams | None = None) -> tuple[Forest, GPState]:
        """The forest to evaluate, ``[pop, max_len]``: the initial one, then offspring."""
        params = self.default_params() if params is None else params

        def first(_):
            return state.forest, jnp.int32(0), jnp.int32(0)

        def later(_):
            return self._offspring(key, state, params)

        forest, rej_c, rej_m = jax.lax.cond(state.generation == 0, first, later, None)
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
        ``selection="lexicase"`` it must be an :class:`Evaluation` whose ``info`` (a dict or
        :class:`evotensor.tree.Tree`) holds ``"case_errors"`` ``[pop, n_cases]``, and ``key`` draws the
        next generation's parents: ``state.parents = epsilon_lexicase(key, errors, 2 * (pop - n_elite))``
        (recipients first), where a tree with any non-finite case error has ``+inf`` on every case.

        Metrics (scalars): ``best_fitness``, ``generation_best``, ``mean_fitness`` (raw minimized
        fitness), ``mean_length``, ``max_length``, ``best_length``, ``crossover_rejected``,
        ``mutation_rejected``, and with ``parsimony_coefficient="auto"`` the coefficient the next
        ``ask`` selects with, ``parsimony_coefficient``.
        """
        fitness = evaluation.fitness if isinstance(evaluation, Evaluation) else jnp.asarray(evaluation)
        if fitness.shape != (self.population_size,):
            raise ValueError(f"fitness must have shape ({self.population_size},), got {fitness.shape}")
        if forest.opcode.shape != (self.population_size, self.max_len):
            raise ValueError(
                f"forest must be [{self.population_size}, {self.max_len}], got {forest.opcode.shape}"
            )
        case_errors = self._case_errors(evaluation) if self.selection == "lexicase" else None
        fitness = worst_for_nonfinite(fitness.astype(jnp.float32))
        i = jnp.argmin(fitness)
        improved = fitness[i] < state.best_fitness
        best = jax.tree_util.tree_map(lambda new, old: jnp.where(improved, new, old), forest[i], state.best)
        best_fitness = jnp.where(improved, fitness[i], state.best_fitness)
        length = forest.length
        new_state = state.replace(  # type: ignore[attr-defined]
            forest=forest,
            fitness=fitness,
            best=best,
            best_fitness=best_fitness,
            generation=state.generation + 1,
        )
        if case_errors is not None:
            n_parents = 2 * (self.population_size - self.n_elite)
            new_state = new_state.replace(parents=sel.epsilon_lexicase(key, case_errors, n_parents))
        metrics = {
            "best_fitness": best_fitness,
            "generation_best": fitness[i],
            "mean_fitness": jnp.mean(fitness),
            "mean_length": jnp.mean(length.astype(jnp.float32)),
            "max_length": jnp.max(length),
            "best_length": best.length,
            "crossover_rejected": state.crossover_rejected,
            "mutation_rejected": state.mutation_rejected,
        }
        if self.parsimony_auto:
            metrics["parsimony_coefficient"] = sel.covariant_parsimony(fitness, length)
        return new_state, metrics

    def _case_errors(self, evaluation: Evaluation | jax.Array) -> jax.Array:
        """``evaluation.info["case_errors"]`` as float32 ``[pop, n_cases]``, rows with any non-finite
        error set to ``+inf`` (raises if missing: lexicase cannot run without them)."""
        info = evaluation.info if isinstance(evaluation, Evaluation) else None
        errors = info["case_errors"] if isinstance(info, (Mapping, Tree)) and "case_errors" in info else None
        if errors is None:
            got = "a bare fitness array" if not isinstance(evaluation, Evaluation) else f"info={info!r:.60}"
            raise ValueError(
                "selection='lexicase' needs per-case errors: tell() must get an Evaluation whose info "
                "holds 'case_errors' [pop, n_cases] (lower is better), e.g. from "
                f"SymbolicRegression(..., case_errors=True); got {got}"
            )
        errors = jnp.asarray(errors)
        if errors.ndim != 2 or errors.shape[0] != self.population_size or errors.shape[1] < 1:
            raise ValueError(
                f"info['case_errors'] must have shape ({self.population_size}, n_cases >= 1), "
                f"got {errors.shape}"
            )
        errors = errors.astype(jnp.float32)
        bad = jnp.any(~jnp.isfinite(errors), axis=1, keepdims=True)
        return jnp.where(bad, jnp.inf, errors)

    def selection_fitness(self, state: GPState, params: GPParams | None = None) -> jax.Array:
        """The minimized fitness ``[pop]`` that parents are selected on (all selections but lexicase):
        ``state.fitness + c * length`` with ``c = params.parsimony_coefficient``, or the covariant
        coefficient of the state's population with ``parsimony_coefficient="auto"``
        (:func:`evotensor.gp.selection.parsimony_fitness`). Equals ``state.fitness`` when ``c == 0``."""
        params = self.default_params() if params is None else params
        length = state.forest.length
        if self.parsimony_auto:
            c = sel.covariant_parsimony(state.fitness, length)
        else:
            c = params.parsimony_coefficient
        return sel.parsimony_fitness(state.fitness, length, c)

    # -- variation --------------------------------------------------------------------------------------
    # One generation's variation draws all its random numbers in ONE random call (every call site
    # compiles its own threefry loop, and on CPU XLA's compile time grows with the number of
    # kernels), and runs the mutations as two fused passes (structural: one exchange for subtree,
    # hoist, insert and delete; in place: one rewrite for the point / constant mutations) instead of
    # one pipeline per operator. Children come in random order (parents are drawn i.i.d.), so the
    # consecutive blocks of children the mutations take are random subsets.

    def _mutation_blocks(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Children per kind of the structural pass (:data:`~evotensor.gp.operators.STRUCTURAL`
        order) and of the in-place pass (:data:`~evotensor.gp.operators.INPLACE` order)."""
        count = dict(zip(MUTATIONS, self.mutation_counts))
        return tuple(count[k] for k in ops.STRUCTURAL), tuple(count[k] for k in ops.INPLACE)

    def _layout(self) -> list[tuple[str, tuple[int, ...], bool]]:
        """``(name, shape, as_bits)`` of every draw of one generation's variation (static)."""
        C = self.population_size - self.n_elite
        out: list[tuple[str, tuple[int, ...], bool]] = []
        if self.selection == "tournament":
            out.append(("select", (2 * C, self.tournament_size), True))
        elif self.selection == "truncation":
            out.append(("select", (2 * C,), True))
        elif self.selection in ("rank", "roulette"):
            out.append(("select", (2 * C,), False))
        out.append(("cross", ops.uniform_shapes(self.crossover + "_crossover", C)[0], False))
        out.append(("do_cross", (C,), False))
        st, ip = self._mutation_blocks()
        if sum(st):
            shapes = ops.structural_uniform_shapes(st, self.mutation_generator, self.insert_generator)
            out += [(f"structural{i}", shape, False) for i, shape in enumerate(shapes)]
        if sum(ip):
            out.append(("inplace", (sum(ip), max(self.max_len, 2)), False))
        return out

    def _draw(self, key: jax.Array) -> dict[str, jax.Array]:
        """Every random number of one ``_offspring`` from ``key``, in one ``jax.random.bits`` call:
        uniforms (exactly as ``jax.random.uniform`` makes them from bits) or, for the selections'
        integers, the raw uint32 bits (see :func:`evotensor.gp.selection.uniform_ints`)."""
        layout = self._layout()
        sizes = [int(np.prod(shape)) for _, shape, _ in layout]
        bits = rng.bits(key, (sum(sizes),), jnp.uint32)
        out, start = {}, 0
        for (name, shape, as_bits), size in zip(layout, sizes):
            chunk = bits[start : start + size].reshape(shape)
            out[name] = chunk if as_bits else bits_to_uniform(chunk)
            start += size
        return out

    def _parents(self, u: dict[str, jax.Array], state: GPState, params: GPParams) -> jax.Array:
        """Recipients then donors, int32 ``[2 * (pop - n_elite)]``, on the selection fitness."""
        if self.selection == "lexicase":
            return state.parents  # drawn by tell, where the per-case errors were
        fitness = self.selection_fitness(state, params)
        if self.selection == "tournament":
            return sel.tournament_from_bits(u["select"], fitness)
        if self.selection == "truncation":
            return sel.truncation_from_bits(u["select"], fitness, self.survival_rate)
        if self.selection == "rank":
            return sel.inverse_cdf(u["select"], sel.rank_probabilities(fitness, params.rank_pressure))
        return sel.inverse_cdf(u["select"], sel.roulette_probabilities(fitness))

    def _crossover(self, u: dict[str, jax.Array], pair: Forest, params: GPParams):
        """Children from ``pair`` (Forest ``[2C, L]``: recipients then donors): a crossover with
        probability ``crossover_rate``, else the recipient (an invalid position makes the exchange
        return it). ``(children [C, L], rejected crossovers [])``."""
        C = self.population_size - self.n_elite
        fs = self.function_set
        if self.crossover == "one_point":
            pq = ops.crossover_points(u["cross"], pair.opcode, pair.length, fs, params.internal_bias)
        else:
            pq = ops.leaf_biased_points(u["cross"], pair.opcode, pair.length, fs, params.leaf_bias)
        do_cross = u["do_cross"] < params.crossover_rate
        rec = jax.tree_util.tree_map(lambda a: a[:C], pair)
        don = jax.tree_util.tree_map(lambda a: a[C:], pair)
        children, ok = exchange(rec, jnp.where(do_cross, pq[:C], -1), don, pq[C:])
        return children, jnp.sum(do_cross & ~ok).astype(jnp.int32)

    def _mutations(self, u: dict[str, jax.Array], children: Forest, params: GPParams):
        """``(pieces, rejected)``: the children after mutation as consecutive blocks (structural
        pass, in-place pass, the unmutated rest) and the structural mutations rejected by the
        length cap (subtree and insert mutation, the ones that can grow)."""
        st, ip = self._mutation_blocks()
        n_st, n_ip = sum(st), sum(ip)
        block = lambda lo, hi: jax.tree_util.tree_map(lambda a: a[lo:hi], children)  # noqa: E731
        pieces, rejected = [], jnp.int32(0)
        if n_st:
            draws = [u[f"structural{i}"] for i in range(1 + (st[0] > 0) + (st[2] > 0))]
            out, ok = ops.structural_mutations(
                draws, block(0, n_st), st, self.function_set, self.mutation_generator, self.insert_generator
            )
            grows = np.isin(np.repeat(np.arange(len(st)), st), (0, 2))  # subtree, insert rows
            rejected = jnp.sum(~ok & jnp.asarray(grows)).astype(jnp.int32)
            pieces.append(out)
        if n_ip:
            sigma = params.const_sigma if self.const_perturb else None
            out, _ = ops.inplace_mutations(
                u["inplace"],
                block(n_st, n_st + n_ip),
                ip,
                self.function_set,
                self.n_vars,
                params.point_rate,
                params.const_rate,
                self.const_range,
                self.const_prob,
                sigma,
            )
            pieces.append(out)
        C = self.population_size - self.n_elite
        if n_st + n_ip < C:
            pieces.append(block(n_st + n_ip, C))
        return pieces, rejected

    def _offspring(self, key: jax.Array, state: GPState, params: GPParams):
        E = self.n_elite
        u = self._draw(key)
        forest = state.forest
        take = lambda f, idx: jax.tree_util.tree_map(lambda a: a[idx], f)  # noqa: E731
        pair = take(forest, self._parents(u, state, params))  # recipients, then donors
        children, rej_c = self._crossover(u, pair, params)
        pieces, rej_m = self._mutations(u, children, params)
        if E:
            pieces.insert(0, take(forest, sel.elite_indices(state.fitness, E)))  # raw fitness (see top)
        # one concatenation, not an update of the children per mutation (each a copy of them)
        out = jax.tree_util.tree_map(lambda *a: jnp.concatenate(a, axis=0), *pieces)
        return out, rej_c, rej_m

    def __repr__(self) -> str:
        c = self.parsimony_coefficient
        return (
            f"GP(population_size={self.population_size}, max_len={self.max_len}, "
            f"function_set={self.function_set!r}, n_vars={self.n_vars}, selection={self.selection!r}"
            + (f", parsimony_coefficient={c!r})" if c else ")")
        )

    @property
    def decoder(self) -> ForestDecoder:
        """The family decoder: identity decode, ``apply`` runs a tree on data. :func:`evotensor.run`
        uses it when a policy problem (symbolic regression) is given no explicit decoder."""
        return ForestDecoder(self.function_set, self.n_outputs)


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
    """Build a ``mutation_probs`` vector by name, e.g. ``mutation_probs(subtree=0.5, hoist=0.5)``
    (unnamed mutations get 0)."""
    unknown = set(weights) - set(MUTATIONS)
    if unknown:
        raise ValueError(f"unknown mutation(s) {sorted(unknown)}; valid: {MUTATIONS}")
    return np.asarray([float(weights.get(m, 0.0)) for m in MUTATIONS], np.float32)
