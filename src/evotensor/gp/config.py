"""The checked configuration of a :class:`~evotensor.gp.GP` and the parent selections it names.

:class:`GPConfig` is a frozen dataclass validated once, at construction: every argument is checked
there (a failed check raises :class:`evotensor.core.checks.ArgumentError`, a ``ValueError`` and a
``TypeError``) and normalized (the selection resolved to a :class:`ParentSelection`, the operator
registry copied, the mutation weights normalized), so the strategy only wires it.

``selection=`` is a name or a callable, as pyribs resolves its rankers (``_get_ranker``): a name of
:data:`SELECTIONS` builds the built-in selection; a :class:`ParentSelection` is used as it is; any
other callable is a keyed selector ``fn(key, fitness [pop], n) -> int32 [n]`` on the minimized
selection fitness, e.g. ``functools.partial(evotensor.gp.selection.tournament, size=3)``.

``survival=`` likewise: a name of :data:`SURVIVALS` (``"generational"``: the offspring replace their
parents; ``"nsga2"``: NSGA-II's elitist survival on (loss, size)), a :class:`Survival`, or a callable
``fn(fitness [2 * pop], length [2 * pop], n, max_len) -> int32 [n]`` choosing ``n`` survivors, best
first, among the parents and their offspring.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from evotensor.core.checks import (
    ArgumentError,
    check_choice,
    check_fraction,
    check_int,
    check_positive,
)
from evotensor.gp import front
from evotensor.gp import selection as sel
from evotensor.gp.generate import METHODS
from evotensor.gp.metrics import check_function_set, memory_limit
from evotensor.gp.variation import OperatorRegistry, default_registry
from evotensor.gp.weighted import mul_opcode

__all__ = [
    "SELECTIONS",
    "SURVIVALS",
    "GPConfig",
    "ParentSelection",
    "Survival",
    "get_selection",
    "get_survival",
]


@dataclasses.dataclass(frozen=True, eq=False)
class ParentSelection:
    """How GP draws the ``n = 2 * (pop - n_elite)`` parents of a generation (recipients, then donors).

    Attributes:
        name: for ``repr`` and ``GP.selection``.
        draw: ``n -> (shape, as_bits)`` of its slice of the generation's one random draw (raw uint32
            bits, or float32 uniforms in ``[0, 1)``), or ``None`` (it draws nothing there).
        select: ``(draw, fitness [pop], n, params, key) -> int32 [n]`` on the minimized selection
            fitness (parsimony included); ``draw`` is its slice (``None`` if it has none), ``key`` a
            key of its own when ``uses_key``, else ``None``.
        uses_key: whether ``select`` needs a key (a selector that draws its own numbers).
        from_cases: for a selection on per-case errors (lexicase): ``(key, case_errors [pop, n_cases],
            n) -> int32 [n]``, called by ``tell``, which stores the parents in the state (``select``
            is then unused). ``None`` for a selection on the fitness.
    """

    name: str
    draw: Callable[[int], tuple[tuple[int, ...], bool] | None]
    select: Callable[..., jax.Array]
    uses_key: bool = False
    from_cases: Callable[[jax.Array, jax.Array, int], jax.Array] | None = None

    @property
    def on_case_errors(self) -> bool:
        """Whether the parents come from per-case errors (drawn by ``tell``)."""
        return self.from_cases is not None


def _tournament(config: GPConfig) -> ParentSelection:
    size = config.tournament_size
    return ParentSelection(
        "tournament", lambda n: ((n, size), True), lambda d, f, n, p, k: sel.tournament_from_bits(d, f)
    )


def _truncation(config: GPConfig) -> ParentSelection:
    rate = config.survival_rate
    return ParentSelection(
        "truncation", lambda n: ((n,), True), lambda d, f, n, p, k: sel.truncation_from_bits(d, f, rate)
    )


def _rank(config: GPConfig) -> ParentSelection:
    def select(d, f, n, p, k):
        return sel.inverse_cdf(d, sel.rank_probabilities(f, p.rank_pressure))

    return ParentSelection("rank", lambda n: ((n,), False), select)


def _roulette(config: GPConfig) -> ParentSelection:
    def select(d, f, n, p, k):
        return sel.inverse_cdf(d, sel.roulette_probabilities(f))

    return ParentSelection("roulette", lambda n: ((n,), False), select)


def _never(*_: Any) -> jax.Array:
    raise AssertionError("a selection on per-case errors draws its parents in tell")


def _lexicase(config: GPConfig) -> ParentSelection:
    return ParentSelection("lexicase", lambda n: None, _never, from_cases=sel.epsilon_lexicase)


SELECTIONS: dict[str, Callable[[GPConfig], ParentSelection]] = {
    "truncation": _truncation,
    "tournament": _tournament,
    "rank": _rank,
    "roulette": _roulette,
    "lexicase": _lexicase,
}
"""The named selections: ``name -> factory(config) -> ParentSelection``."""


def get_selection(selection: Any, config: GPConfig) -> ParentSelection:
    """Resolve ``selection`` (a name of :data:`SELECTIONS`, a :class:`ParentSelection`, or a keyed
    selector ``fn(key, fitness [pop], n) -> int32 [n]``) for ``config`` (see the module docstring)."""
    if isinstance(selection, str):
        if selection not in SELECTIONS:
            raise ArgumentError(
                f"selection must be one of {tuple(SELECTIONS)} or a callable, got {selection!r}"
            )
        return SELECTIONS[selection](config)
    if isinstance(selection, ParentSelection):
        return selection
    if callable(selection):
        name = getattr(selection, "__name__", None) or getattr(
            getattr(selection, "func", None), "__name__", "custom"
        )
        return ParentSelection(name, lambda n: None, lambda d, f, n, p, k: selection(k, f, n), uses_key=True)
    raise ArgumentError(f"selection must be one of {tuple(SELECTIONS)} or a callable, got {selection!r}")


@dataclasses.dataclass(frozen=True, eq=False)
class Survival:
    """Which trees a :class:`~evotensor.gp.GP` breeds from after a ``tell``.

    Attributes:
        name: for ``repr`` and ``GP.survival``.
        survive: ``None`` (generational: the told offspring replace their parents), or
            ``(fitness [2 * pop], length [2 * pop], n, max_len) -> int32 [n]``: the ``n = pop``
            survivors among the told offspring (first ``pop``) and their parents (last ``pop``), best
            first, on the minimized fitness (non-finite: infeasible). ``tell`` keeps them in that order
            and parents are then selected on their position (the best has position 0).
    """

    name: str
    survive: Callable[[jax.Array, jax.Array, int, int], jax.Array] | None = None

    @property
    def keeps_parents(self) -> bool:
        """Whether the parents compete with their offspring (else the offspring replace them)."""
        return self.survive is not None


def _nsga2_survivors(fitness: jax.Array, length: jax.Array, n: int, max_len: int) -> jax.Array:
    return front.nsga2_order(fitness, length, max_len)[:n]


SURVIVALS: dict[str, Survival] = {
    "generational": Survival("generational"),
    "nsga2": Survival("nsga2", _nsga2_survivors),
}
"""The named survivals (see the module docstring)."""


def get_survival(survival: Any) -> Survival:
    """Resolve ``survival``: a name of :data:`SURVIVALS`, a :class:`Survival`, or a callable
    ``fn(fitness [2 * pop], length [2 * pop], n, max_len) -> int32 [n]`` (the survivors, best first)."""
    if isinstance(survival, str):
        if survival not in SURVIVALS:
            raise ArgumentError(f"survival must be one of {tuple(SURVIVALS)} or a callable, got {survival!r}")
        return SURVIVALS[survival]
    if isinstance(survival, Survival):
        return survival
    if callable(survival):
        name = getattr(survival, "__name__", None) or getattr(
            getattr(survival, "func", None), "__name__", "custom"
        )
        return Survival(name, survival)
    raise ArgumentError(f"survival must be one of {tuple(SURVIVALS)} or a callable, got {survival!r}")


def _pair(value: Any, name: str) -> tuple[int, int]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != 2:
        raise ArgumentError(f"{name} must be a (min, max) pair of ints, got {value!r}")
    low = check_int(value[0], f"{name}[0]", minimum=0, maximum=_MAX_DEPTH)
    high = check_int(value[1], f"{name}[1]", minimum=0, maximum=_MAX_DEPTH)
    if low > high:
        raise ArgumentError(f"{name} must be (min, max) with min <= max, got {value!r}")
    return low, high


# Depth bounds above this are refused: a tree of max_len nodes is never deeper than max_len, and
# the generators' depth tables have max_len + 1 entries.
_MAX_DEPTH = 2**20


def _leaf_prob(value: Any) -> float | tuple[float, ...]:
    """A probability, or a non-empty sequence of them (one per depth), each in ``[0, 1]``."""
    if isinstance(value, (str, bytes)):
        raise ArgumentError(f"leaf_prob must be a probability or a sequence of them, got {value!r}")
    if not hasattr(value, "__len__") or getattr(value, "shape", None) == ():
        return check_fraction(value, "leaf_prob", allow_zero=True)
    if len(value) < 1:
        raise ArgumentError(f"leaf_prob must be a probability or a non-empty sequence of them, got {value!r}")
    # hashable: the generators are static
    return tuple(check_fraction(p, f"leaf_prob[{i}]", allow_zero=True) for i, p in enumerate(value))


def _const_range(value: Any) -> tuple[float, float]:
    """A finite ``(low, high)`` with ``low <= high``."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != 2:
        raise ArgumentError(f"const_range must be a (low, high) pair of numbers, got {value!r}")
    low, high = (_check_number(v, f"const_range[{i}]") for i, v in enumerate(value))
    if not low <= high:
        raise ArgumentError(f"const_range must have low <= high, got {value!r}")
    return low, high


def _named_weights(value: Any, names: tuple[str, ...], arg: str, what: str) -> tuple[float, ...]:
    """``value`` (weights in ``names`` order, or a ``{name: weight}`` mapping whose missing names get
    0) normalized to sum 1; ``arg`` and ``what`` name the argument and its items in errors."""
    given = value
    if isinstance(value, Mapping):
        unknown = set(value) - set(names)
        if unknown:
            raise ArgumentError(f"{arg} names unknown {what}(s) {sorted(unknown)}; valid: {names}")
        given = [value.get(f, 0.0) for f in names]
    try:
        w = np.asarray(given, np.float64)
    except (TypeError, ValueError):
        w = np.full(0, np.nan)
    if w.shape != (len(names),) or not np.all(np.isfinite(w) & (w >= 0)) or not np.any(w > 0):
        raise ArgumentError(
            f"{arg} must be {len(names)} finite non-negative weights (order {names}) or a "
            f"{{name: weight}} mapping, not all zero; got {value!r}"
        )
    return tuple(float(x) for x in w / w.sum())


def _function_weights(value: Any, function_set: Any) -> tuple[float, ...] | None:
    """``None``, or the functions' weights normalized to sum 1, in ``function_set.names`` order."""
    if value is None:
        return None
    return _named_weights(value, tuple(function_set.names), "function_weights", "function")


def _variable_weights(value: Any, n_vars: int) -> tuple[float, ...] | None:
    """``None``, or the ``n_vars`` variables' weights normalized to sum 1."""
    if value is None:
        return None
    return _named_weights(value, tuple(f"x{j}" for j in range(n_vars)), "variable_weights", "variable")


def _weighted_variables(value: Any, function_set: Any) -> bool:
    """``value`` as a bool; with True, ``function_set`` must have ``mul`` (a weighted variable is
    ``mul(w, x)``)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ArgumentError(f"weighted_variables must be a bool, got {value!r}")
    if value:
        mul_opcode(function_set, "weighted_variables")
    return bool(value)


def _check_number(value: Any, name: str) -> float:
    """A finite real number (not a bool)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        if not (
            getattr(value, "shape", None) == () and np.issubdtype(getattr(value, "dtype", object), np.number)
        ):
            raise ArgumentError(f"{name} must be a finite number, got {value!r}")
    x = float(value)
    if not math.isfinite(x):
        raise ArgumentError(f"{name} must be a finite number, got {value!r}")
    return x


# One forest [pop, max_len] is 16 bytes per slot; a generation holds a handful of them (the state's,
# the parents', the children, the operators' intermediates), counted here as 8.
_FOREST_COPIES = 8


def _check_forest_memory(population_size: int, max_len: int) -> None:
    need = _FOREST_COPIES * 16 * population_size * max_len
    limit = memory_limit()
    if need > limit:
        raise ArgumentError(
            f"max_len={max_len} with population_size={population_size} is too large: a generation's "
            f"forests need about {need / 2**30:.3g} GiB, over the limit of {limit / 2**30:.3g} GiB "
            "(evotensor.gp.metrics.memory_limit(): the physical memory, or EVOTENSOR_GP_MEMORY_LIMIT bytes)"
        )


@dataclasses.dataclass(frozen=True, eq=False)
class GPConfig:
    """Everything static about a :class:`~evotensor.gp.GP`, checked once.

    Args:
        population_size: trees per generation (``>= 2``).
        function_set: :class:`evotensor.gp.functions.FunctionSet`.
        n_vars: number of input variables.
        max_len: slots per tree; the hard length cap of every operator. Default 128. Refused when
            the generation's forests (about ``8 * 16 * population_size * max_len`` bytes) would
            exceed :func:`evotensor.gp.metrics.memory_limit`.
        n_outputs: outputs of a tree (Modi nodes when ``> 1``). Default 1. Must equal the problem's
            outputs (checked when a run evaluates the GP's forest, see
            :class:`~evotensor.gp.encoding.DecodedForest`); ``n_vars`` likewise must equal the data's
            columns.
        init_depth: ``(min, max)`` depth of the initial trees (root depth 0; ``min <= max``).
            Default (2, 6), gplearn.
        init_method: ``"half_and_half"`` (default), ``"full"`` or ``"grow"``.
        leaf_prob: grow's per-depth leaf probability (float or non-empty sequence, each in
            ``[0, 1]``; NaN is refused). Default 0.3.
        const_prob: probability that a new leaf is a constant, in ``[0, 1]``. Default 0.5.
        const_range: continuous range of new constants, finite with ``low <= high``. Default (-1, 1),
            gplearn.
        modi_prob: probability that a new function node is a Modi node (``n_outputs > 1``), in
            ``[0, 1]``. 0.5 if ``n_outputs > 1`` (EvoGP), else 0.
        mutation_depth: ``(min, max)`` depth of the subtrees of subtree mutation. Default (0, 3).
        selection: a name of :data:`SELECTIONS`, a :class:`ParentSelection` or a keyed selector (see
            the module docstring). ``"truncation"`` (EvoGP's default: parents uniform among the
            ``survival_rate`` best), ``"tournament"`` (default), ``"rank"``, ``"roulette"`` or
            ``"lexicase"``: epsilon-lexicase (:func:`evotensor.gp.selection.epsilon_lexicase`, static
            MAD epsilon) on per-case errors that the problem must return as
            ``Evaluation.info = CaseErrors(case_errors=[pop, n_cases])``
            (:class:`evotensor.gp.selection.CaseErrors`; lower is better; e.g.
            ``SymbolicRegression(..., case_errors=True)``); ``tell`` raises if they are missing. A
            tree with any non-finite case error gets ``+inf`` on every case, so it is never selected
            over a tree whose errors are all finite.
        tournament_size: Default 7, or 2 with ``survival="nsga2"`` (NSGA-II's binary tournament on the
            crowded comparison).
        survival_rate: truncation's survivor fraction, in ``(0, 1]``. Default 0.3 (EvoGP).
        elite_rate: fraction of best trees copied unchanged, in ``[0, 1)``. Default 0.01 (EvoGP).
        crossover: name of a crossover of ``operators``: ``"one_point"`` (default; with Koza's bias
            ``internal_bias``) or ``"leaf_biased"``.
        const_perturb: constant mutations perturb by ``const_sigma * N(0,1)`` (True, default) or
            redraw uniformly in ``const_range`` (False).
        mutation_rate: fraction of the children that are mutated, in ``[0, 1]``. Default 0.1 (EvoGP).
        mutation_probs: relative weights of the mutations: a sequence in the registry's mutation order
            (:data:`evotensor.gp.MUTATIONS` for the default registry; see
            :func:`evotensor.gp.mutation_probs`) or a mapping ``{name: weight}`` (missing names: 0).
            Default: each operator's ``weight`` (:data:`evotensor.gp.strategy.DEFAULT_MUTATION_PROBS`).
        parsimony_coefficient: a number ``>= 0`` (the default of the dynamic
            ``GPParams.parsimony_coefficient``; 0.0 here, gplearn's default is 0.001) or ``"auto"``
            (gplearn's covariant coefficient, see :func:`evotensor.gp.selection.covariant_parsimony`).
            Parents are selected on ``fitness + c * length``. Must be 0 with a selection on per-case
            errors (lexicase), which ignores the fitness.
        operators: the :class:`~evotensor.gp.variation.OperatorRegistry` of mutations and crossovers
            (default :func:`~evotensor.gp.variation.default_registry`); copied, so registering on it
            later changes nothing here.
        survival: a name of :data:`SURVIVALS`, a :class:`Survival` or a callable (see the module
            docstring). ``"generational"`` (default): the offspring replace their parents.
            ``"nsga2"``: NSGA-II (Deb et al. 2002) on the two objectives (raw minimized fitness,
            length): ``tell`` ranks the told offspring together with their parents (``2 * pop``
            trees) by non-domination rank, then crowding distance, keeps the ``pop`` best in that
            order, and parents are selected on the crowded comparison (their position in it): with
            the default ``selection="tournament"`` and ``tournament_size=2`` that is NSGA-II's binary
            tournament. Copies of an identical (fitness, length) point after the first compete only
            after every distinct point (duplicate elimination, see
            :func:`evotensor.gp.front.nsga2_order`: without it GP's many copies of small trees take
            the population over). A non-finite fitness is infeasible (dominated by every finite one). Size is
            an objective, so ``parsimony_coefficient`` must be 0; lexicase (which selects on
            per-case errors) is refused.
        function_weights: relative weights with which new function nodes are drawn (initial trees,
            subtree and insert mutation): a sequence in ``function_set.names`` order or a mapping
            ``{name: weight}`` (missing names: 0), non-negative, not all zero. ``None`` (default):
            uniform. Normalized to a tuple. Point mutation still swaps a function for a uniform one
            of the same arity.
        variable_weights: relative weights with which a new variable leaf picks each of the ``n_vars``
            variables (initial trees, subtree and insert mutation): a sequence of ``n_vars`` or a
            mapping ``{"x0": weight, ...}`` (missing names: 0), non-negative, not all zero. ``None``
            (default): uniform. Normalized to a tuple. Point mutation still draws a variable
            uniformly. Used for columns of fixed constants appended to the data
            (:mod:`evotensor.gp.terminals`), which should be rarer than the features.
        weighted_variables: every variable leaf is a weighted variable ``w * x`` (Operon's), encoded
            as the three-slot subtree ``mul(CONST w, VAR i)`` with ``w ~ N(0, 1)`` at creation; the
            operators keep it whole, constant mutations perturb ``w`` and constant optimization
            (``ConstantOptimizer``) tunes it like any constant (see :mod:`evotensor.gp.weighted`).
            It counts as one node in the complexity (hall of fame, front, parsimony, NSGA-II), but
            takes three slots of ``max_len``: a tree of complexity ``k`` with ``v`` variables needs
            ``k + 2 v`` slots, so give about twice the ``max_len`` of an unweighted run for the same
            model sizes. Needs ``mul`` in ``function_set``. Default False.
        initial_trees: trees every run starts from (PySR's ``guesses``): nested tuples as
            :meth:`~evotensor.gp.Forest.from_tuples` takes them (:func:`evotensor.gp.parse_expression`
            turns an expression into one), at most ``population_size``; they replace the first
            trees of the random initial forest (with ``weighted_variables``, each variable leaf
            becomes a weighted variable of weight 1). Default ``()``.

    After construction, ``selection`` is still what was given; the resolved selection is
    ``selector``, the resolved survival ``survivor``, ``parsimony_auto`` says whether the coefficient
    is ``"auto"``, and ``mutation_probs`` holds the normalized weights (a tuple in registry order).
    """

    population_size: int
    function_set: Any
    n_vars: int
    max_len: int = 128
    n_outputs: int = 1
    init_depth: tuple[int, int] = (2, 6)
    init_method: str = "half_and_half"
    leaf_prob: float | Sequence[float] = 0.3
    const_prob: float = 0.5
    const_range: tuple[float, float] = (-1.0, 1.0)
    modi_prob: float | None = None
    mutation_depth: tuple[int, int] = (0, 3)
    selection: str | Callable[..., Any] = "tournament"
    tournament_size: int | None = None
    survival_rate: float = 0.3
    elite_rate: float = 0.01
    crossover: str = "one_point"
    const_perturb: bool = True
    mutation_rate: float = 0.1
    mutation_probs: Sequence[float] | Mapping[str, float] | None = None
    parsimony_coefficient: float | str = 0.0
    operators: OperatorRegistry | None = None
    survival: str | Callable[..., Any] = "generational"
    function_weights: Sequence[float] | Mapping[str, float] | None = None
    variable_weights: Sequence[float] | Mapping[str, float] | None = None
    weighted_variables: bool = False
    initial_trees: tuple = ()
    selector: ParentSelection = dataclasses.field(init=False, repr=False)
    survivor: Survival = dataclasses.field(init=False, repr=False)
    parsimony_auto: bool = dataclasses.field(init=False, repr=False)

    def __post_init__(self):
        put = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731  (frozen)
        put("population_size", check_int(self.population_size, "population_size", minimum=2))
        put("function_set", check_function_set(self.function_set))
        put("n_vars", check_int(self.n_vars, "n_vars", minimum=0))
        put("max_len", check_int(self.max_len, "max_len"))
        put("n_outputs", check_int(self.n_outputs, "n_outputs"))
        _check_forest_memory(self.population_size, self.max_len)
        put("init_depth", _pair(self.init_depth, "init_depth"))
        put("mutation_depth", _pair(self.mutation_depth, "mutation_depth"))
        check_choice(self.init_method, "init_method", METHODS)
        put("leaf_prob", _leaf_prob(self.leaf_prob))
        put("const_prob", check_fraction(self.const_prob, "const_prob", allow_zero=True))
        put("const_range", _const_range(self.const_range))
        put("function_weights", _function_weights(self.function_weights, self.function_set))
        put("variable_weights", _variable_weights(self.variable_weights, self.n_vars))
        put("weighted_variables", _weighted_variables(self.weighted_variables, self.function_set))
        put("initial_trees", self._initial_trees())
        if self.modi_prob is None:
            put("modi_prob", 0.5 if self.n_outputs > 1 else 0.0)
        put("modi_prob", check_fraction(self.modi_prob, "modi_prob", allow_zero=True))
        put("survivor", get_survival(self.survival))
        if self.tournament_size is None:
            put("tournament_size", 2 if self.survivor.name == "nsga2" else 7)
        put("tournament_size", check_int(self.tournament_size, "tournament_size"))
        put("survival_rate", check_fraction(self.survival_rate, "survival_rate"))
        if check_positive(self.elite_rate, "elite_rate", allow_zero=True) >= 1.0:
            raise ArgumentError(f"elite_rate must be in [0, 1), got {self.elite_rate!r}")
        put("elite_rate", float(self.elite_rate))
        put("mutation_rate", check_fraction(self.mutation_rate, "mutation_rate", allow_zero=True))
        put("const_perturb", bool(self.const_perturb))
        registry = default_registry() if self.operators is None else self.operators
        if not isinstance(registry, OperatorRegistry):
            raise ArgumentError(f"operators must be an OperatorRegistry, got {type(registry).__name__}")
        put("operators", registry.copy())
        check_choice(self.crossover, "crossover", self.operators.names("crossover"))
        put("mutation_probs", self._mutation_weights())
        put("parsimony_coefficient", self._parsimony())
        put("parsimony_auto", self.parsimony_coefficient == "auto")
        put("selector", get_selection(self.selection, self))
        name = self.selector.name
        if self.selector.on_case_errors and self.parsimony_coefficient != 0:
            raise ArgumentError(
                f"parsimony_coefficient must be 0 with selection={name!r} ({name} selects on the "
                f"per-case errors only), got {self.parsimony_coefficient!r}"
            )
        if self.survivor.keeps_parents:
            kind = self.survivor.name
            if self.selector.on_case_errors:
                raise ArgumentError(
                    f"survival={kind!r} cannot be combined with selection={name!r}: parents are selected "
                    "on their survival order, not on per-case errors"
                )
            if self.parsimony_coefficient != 0:
                raise ArgumentError(
                    f"parsimony_coefficient must be 0 with survival={kind!r} (tree size is already an "
                    f"objective of the survival), got {self.parsimony_coefficient!r}"
                )

    def _initial_trees(self) -> tuple:
        """``initial_trees`` as hashable nested tuples, each checked against the set, ``n_vars``,
        ``n_outputs`` and ``max_len`` (an error naming ``initial_trees[i]``)."""
        from evotensor.gp.encoding import Forest

        trees = self.initial_trees
        if not isinstance(trees, (tuple, list)):
            raise ArgumentError(f"initial_trees must be a sequence of trees, got {type(trees).__name__}")
        if len(trees) > self.population_size:
            raise ArgumentError(
                f"initial_trees holds {len(trees)} trees, more than population_size={self.population_size}"
            )

        def frozen(node: Any) -> Any:
            if not isinstance(node, (tuple, list)):
                return node
            node = tuple(frozen(n) for n in node)
            if self.weighted_variables and node and node[0] == "var":
                # a weighted variable is the subtree mul(CONST w, VAR i) (evotensor.gp.weighted): w = 1
                return ("mul", ("const", 1.0), node)
            return node

        out = []
        for i, tree in enumerate(trees):
            try:
                tree = frozen(tree)
                forest = Forest.from_tuples([tree], self.max_len, self.function_set)
                forest.check(self.function_set, self.n_vars, self.n_outputs)
            except (ValueError, TypeError, ArgumentError) as err:
                raise ArgumentError(f"initial_trees[{i}]: {err}") from None
            out.append(tree)
        return tuple(out)

    def _parsimony(self) -> float | str:
        c = self.parsimony_coefficient
        if isinstance(c, str) and c == "auto":
            return c
        try:
            return check_positive(c, "parsimony_coefficient", allow_zero=True)
        except ArgumentError:
            raise ArgumentError(
                f"parsimony_coefficient must be a finite number >= 0 or 'auto', got {c!r}"
            ) from None

    def _mutation_weights(self) -> tuple[float, ...]:
        names = self.operators.names("mutation")
        given = self.mutation_probs
        if given is None:
            given = [op.weight for op in self.operators.mutations]
        return _named_weights(given, tuple(names), "mutation_probs", "mutation")

    @property
    def n_elite(self) -> int:
        """Trees copied unchanged: ``ceil(elite_rate * pop)``, at most ``pop - 1``."""
        n = math.ceil(self.elite_rate * self.population_size) if self.elite_rate > 0 else 0
        return min(n, self.population_size - 1)
