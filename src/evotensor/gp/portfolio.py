"""A portfolio of symbolic-regression searches as one scikit-learn estimator: :class:`SymbolicPortfolio`.

An *algorithm portfolio* (Huberman et al. 1997; Gomes & Selman 2001) runs several differently set
searches on one problem within one budget and keeps the best of what they found. Here the searches
are :class:`~evotensor.gp.SymbolicRegressor` s fitted one after the other on the same data, and
"the best" is PySR's model selection on the union of their (loss, size) Pareto fronts: every member
reports its own front of training MSE against tree length, the union is reduced to its
non-dominated points (:func:`evotensor.gp.pareto_front_indices`) and the model is chosen there
(:func:`evotensor.gp.select_model`), as one search's front would be. It is not an ensemble: the
prediction is the one chosen model's, never an average.

The members follow scikit-learn's ``estimators=[(name, estimator), ...]`` convention of
``VotingRegressor`` / ``StackingRegressor``: ``get_params(deep=True)`` lists ``name`` and
``name__param`` for every member, ``set_params(exact__generations=30)`` reaches a member,
``set_params(erc="drop")`` leaves one out, ``clone`` clones every member. As scikit-learn asks, the
constructor only stores its arguments; they are checked in :meth:`SymbolicPortfolio.fit` (an
:class:`~evotensor.core.checks.ArgumentError` naming the argument, ``estimators[i]`` or
``name__param`` for a member's).

Why a portfolio: the search that finds polynomials exactly (NSGA-II survival, tuned constants,
rare transcendental functions, variables only) loses powers such as ``sqrt(x) = exp(0.5*log(x))``,
which a small search with random constants and uniform function weights finds; a tenth of the
evaluations for the second search took the suite's exact recoveries of Nguyen-1..8 and Koza-1..3
from 98/110 to 105/110 at the same 200,000 evaluations (``benchmarks/results_sr_suite.md``,
2026-11-26). :meth:`SymbolicPortfolio.exact_recovery` builds that documented recipe.

Example::

    from evotensor.gp import SymbolicPortfolio, SymbolicRegressor

    model = SymbolicPortfolio(
        [("small", SymbolicRegressor(population_size=500, generations=40)),
         ("wide", SymbolicRegressor(population_size=5000, generations=8, const_prob=0.0))],
        random_state=0,
    ).fit(X, y)
    model.best_.expression, model.best_member_, model.pareto_front_[0]["member"]

    recipe = SymbolicPortfolio.exact_recovery(10000, 20, ("add", "sub", "mul", "div", "sin", "exp", "log"))
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.utils import Bunch, check_random_state

from evotensor.core.checks import ArgumentError, check_choice, check_int, check_positive
from evotensor.gp import front
from evotensor.gp.functions import FunctionSet
from evotensor.gp.sklearn import REGRESSION_FUNCTIONS, ChosenModelMixin, SymbolicRegressor, validate_data

__all__ = [
    "EXACT_EXP_WEIGHT",
    "EXACT_OPTIONS",
    "EXACT_UNARY_WEIGHT",
    "SymbolicPortfolio",
    "exact_options",
    "union_front",
]

DROP = "drop"
"""A member given as ``"drop"`` (scikit-learn's convention) is left out of the fit."""

EXACT_OPTIONS = {"survival": "nsga2", "constant_optimization": "auto", "refine_top": 64}
""":meth:`SymbolicPortfolio.exact_recovery`: the settings both its members share (NSGA-II survival on
(loss, size), Levenberg-Marquardt constants, the 64 best trees re-scored without the closed-form
scaled error's float32 floor)."""
EXACT_UNARY_WEIGHT = 0.1
""":meth:`SymbolicPortfolio.exact_recovery`'s main member: the weight of each one-argument function but
``exp`` in new subtrees, against 1 for the others (transcendental near-misses otherwise crowd the
polynomials out)."""
EXACT_EXP_WEIGHT = 0.02
""":meth:`SymbolicPortfolio.exact_recovery`'s main member: the weight of ``exp`` (``exp`` and
``exp(exp(x))`` are the near-misses the polynomials' runs stall on)."""


def exact_options(function_set: FunctionSet) -> dict[str, Any]:
    """The :class:`~evotensor.gp.SymbolicRegressor` options of :meth:`SymbolicPortfolio.exact_recovery`'s
    main member for ``function_set``: :data:`EXACT_OPTIONS` and ``function_weights``
    (:data:`EXACT_UNARY_WEIGHT` for each one-argument function but ``exp``, :data:`EXACT_EXP_WEIGHT`
    for ``exp``, 1 for the others; ``None`` when the set has no one-argument function). The same for
    every problem: nothing here looks at the data."""
    if not isinstance(function_set, FunctionSet):
        raise ArgumentError(f"function_set must be a FunctionSet, got {function_set!r:.200}")
    weights = {
        name: EXACT_EXP_WEIGHT if name == "exp" else EXACT_UNARY_WEIGHT
        for name in function_set.names
        if function_set.arity[function_set.opcode(name)] == 1
    }
    return {**EXACT_OPTIONS, "function_weights": weights or None}


def _member_seeds(random_state: Any, n: int) -> list[int]:
    """``n`` distinct JAX seeds drawn from scikit-learn's ``random_state`` (an int seeds a NumPy
    generator, so the same int gives the same seeds; a ``RandomState`` is drawn from)."""
    try:
        rng = check_random_state(random_state)
    except ValueError:
        raise ArgumentError(
            f"random_state must be an int >= 0, None or a numpy.random.RandomState, got {random_state!r}"
        ) from None
    seeds: list[int] = []
    while len(seeds) < n:  # distinct: two identical members must not run the same search
        seed = int(rng.randint(np.iinfo(np.int32).max))
        if seed not in seeds:
            seeds.append(seed)
    return seeds


def _time_shares(max_time: float, elapsed: float, evaluations: Sequence[int]) -> float:
    """The next member's ``max_time``: what is left of ``max_time`` after ``elapsed`` seconds, in
    proportion to its ``evaluations[0]`` among the members still to run (``evaluations``); a member
    gets at least a microsecond (then it runs its one compiled chunk)."""
    left = max(max_time - elapsed, 0.0)
    return max(left * evaluations[0] / sum(evaluations), 1e-6)


def union_front(
    losses: Sequence[Sequence[float]], sizes: Sequence[Sequence[int]], rule: Any = "best"
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The Pareto front of several fronts' union and the model chosen on it.

    Args:
        losses: one sequence ``[n_k]`` of losses (``>= 0``; non-finite ones are never on the front)
            per member front.
        sizes: the matching complexities ``[n_k]``.
        rule: the model selection (see :func:`evotensor.gp.select_model`).

    Returns:
        ``(member int [m], position int [m], score float64 [m], chosen int)``: the union front's
        entries by size ascending (loss strictly decreasing), each as the member it came from and its
        position in that member's front; PySR's score along the union front; the chosen entry's
        index into these. Of equal points (same size and loss, compared in float32 as the fronts
        are) only the first, in member order, is kept.
    """
    if len(losses) != len(sizes) or len(losses) == 0:
        raise ArgumentError(
            f"losses and sizes must be as many fronts (>= 1), got {len(losses)} and {len(sizes)}"
        )
    member = np.concatenate([np.full(len(loss), k, np.int64) for k, loss in enumerate(losses)])
    position = np.concatenate([np.arange(len(loss), dtype=np.int64) for loss in losses])
    loss = np.concatenate([np.asarray(loss, np.float64).reshape(-1) for loss in losses])
    size = np.concatenate([np.asarray(s, np.int64).reshape(-1) for s in sizes])
    if loss.shape != size.shape:
        raise ArgumentError(
            f"every front's losses and sizes must match, got {loss.shape} and {size.shape} in all"
        )
    finite = loss[np.isfinite(loss)]
    if finite.size and finite.min() < 0:
        raise ArgumentError(f"losses must be >= 0 (PySR's score is a log-loss slope), got {finite.min()}")
    # padded with empty entries (+inf loss: never on a front, never chosen) to a power of two, at
    # least 64 (a default max_len's front), so one small program serves most unions
    n = max(64, 1 << (loss.size - 1).bit_length())
    index, valid, score, chosen = _union_choice(_padded(loss, n, np.inf), _padded(size, n, 0), rule)
    k = int(np.sum(valid))  # the front's entries come first, size ascending, loss strictly decreasing
    if k == 0:
        raise ArgumentError("the fronts hold no finite loss: there is no model to choose")
    on_front = np.asarray(index)[:k]
    return member[on_front], position[on_front], np.asarray(score, np.float64)[:k], int(chosen)


def _padded(a: np.ndarray, n: int, fill: Any) -> np.ndarray:
    return np.concatenate([a, np.full(n - a.size, fill, a.dtype)])


@functools.partial(jax.jit, static_argnums=2)
def _union_choice(loss: jax.Array, size: jax.Array, rule: Any) -> tuple[jax.Array, ...]:
    """:func:`~evotensor.gp.front.pareto_front` of ``[n]`` points, then PySR's score and ``rule``'s
    choice along that front (its entries first, the rest masked), in one compiled program."""
    index, valid = front.pareto_front(loss, size)
    at = jnp.maximum(index, 0)
    loss_f = jnp.where(valid, loss[at].astype(jnp.float32), jnp.inf)
    size_f = jnp.where(valid, size[at], 0)
    score = front.front_scores(loss_f, size_f, valid)
    return index, valid, score, front.select_model(loss_f, size_f, rule, valid)


class SymbolicPortfolio(RegressorMixin, ChosenModelMixin, BaseEstimator):
    """Several :class:`~evotensor.gp.SymbolicRegressor` searches, one model from their joint front.

    ``fit(X, y)`` fits a clone of every member on the same data, one after the other, and chooses
    ``best_`` from the non-dominated union of their (loss, complexity) fronts by ``model_selection``
    (a tie between members, the same loss at the same complexity, goes to the member listed first).
    Regression only: a classifier's losses (cross-entropy, 1 - accuracy) are not comparable across
    members with different metrics, and its decision rule lives in the classifier.

    Args:
        estimators: a non-empty list of ``(name, SymbolicRegressor)`` pairs; names are unique
            strings without ``"__"`` that are not a parameter of the portfolio. A member may be
            ``"drop"`` (left out). The members may differ in anything, the function set included:
            every model carries its own function set, and every member's loss is the training mean
            squared error on the same rows.
        model_selection: how ``best_`` is picked from the union front, PySR's rules as in
            :class:`~evotensor.gp.SymbolicRegressor`: ``"best"`` (default), ``"accuracy"``,
            ``"score"`` or a callable (see :func:`evotensor.gp.select_model`).
        max_time: seconds of wall clock for the whole fit, or ``None`` (default: each member keeps
            its own ``max_time``). Split over the members in proportion to their evaluations
            (``population_size * generations``): a member gets that share of the time still left
            when it starts, so time a member did not use goes to those after it. Every member runs
            at least one compiled chunk of generations, so a tight limit can be overrun.
        random_state: ``None`` (default: every member keeps its own ``random_state``), an int or a
            ``numpy.random.RandomState``: then each member gets a distinct seed drawn from it
            (the same int, the same seeds; ``estimators_[k].random_state`` shows the one used).
        verbose: print one line per fitted member when ``> 0``.

    Attributes (after ``fit``):
        best_: the chosen :class:`~evotensor.gp.SymbolicModel`; ``best_member_``: the name of the
            member that found it.
        pareto_front_: the union front, simplest first, as rows ``{complexity, loss, score, chosen,
            expression, member}`` (the estimators' rows and a ``member`` column; ``score`` is PySR's
            score along the union front).
        front_models_: the union front's models in the same order (their ``score`` that of the
            rows); ``front_members_``: the member name of each.
        estimators_: the fitted member clones (``"drop"`` ones left out), ``named_estimators_``: the
            same by name.
        compile_seconds_, run_seconds_: the members' sums; ``fit_seconds_``: the whole ``fit``;
        evaluations_: trees evaluated by all members (``population_size`` x generations run).
        n_features_in_, feature_names_in_: scikit-learn's.

    Example::

        portfolio = SymbolicPortfolio.exact_recovery(10000, 20, function_set, random_state=0)
        portfolio.set_params(erc__population_size=1000).fit(X, y).predict(X_test)
    """

    def __init__(
        self,
        estimators: Any,
        *,
        model_selection: Any = "best",
        max_time: float | None = None,
        random_state: Any = None,
        verbose: int = 0,
    ):
        self.estimators = estimators
        self.model_selection = model_selection
        self.max_time = max_time
        self.random_state = random_state
        self.verbose = verbose

    # -- the documented recipe ----
    @classmethod
    def exact_recovery(
        cls,
        population_size: int = 10000,
        generations: int = 20,
        function_set: Any = REGRESSION_FUNCTIONS,
        *,
        const_prob: float = 0.0,
        fixed_constants: tuple[float, ...] = (),
        fixed_constant_prob: float = 0.2,
        model_selection: Any = "best",
        max_time: float | None = None,
        random_state: Any = None,
        verbose: int = 0,
        **options: Any,
    ) -> SymbolicPortfolio:
        """The portfolio for exact symbolic recovery measured on the SRBench-style suite (105/110 on
        Nguyen-1..8 and Koza-1..3 at pop 10000 x 20, ``benchmarks/results_sr_suite.md``).

        Two members sharing ``population_size * generations`` evaluations:

        * ``"exact"`` (about 90%): :data:`EXACT_OPTIONS`, function weights :data:`EXACT_UNARY_WEIGHT`
          for every one-argument function but ``exp`` (:data:`EXACT_EXP_WEIGHT`), and the terminal
          set given here (``const_prob``, default 0: the variables only, the linear scaling fits
          scale and offset; ``fixed_constants``, ``fixed_constant_prob``), at the full population
          for ``generations - ceil(erc evaluations / population_size)`` generations (at least 1);
        * ``"erc"`` (about 10%): :data:`EXACT_OPTIONS` with random constants (``const_prob`` 0.5,
          tuned by Levenberg-Marquardt) and uniform function weights, at ``population_size // 5``
          (at least 2) for ``generations // 2`` (at least 1) generations: the search that finds
          powers such as ``exp(0.5*log(x))``.

        Args:
            population_size, generations: the budget (``--pop``, ``--generations`` of the suite).
            function_set: the members' function set (names or a :class:`~evotensor.gp.FunctionSet`).
            const_prob, fixed_constants, fixed_constant_prob: the ``"exact"`` member's terminal set
                (see :class:`~evotensor.gp.SymbolicRegressor`).
            model_selection, max_time, random_state, verbose: the portfolio's (see the class).
            **options: any other :class:`~evotensor.gp.SymbolicRegressor` argument, given to both
                members (e.g. ``max_len``, ``backend``); it overrides the recipe's value.

        Returns:
            an unfitted :class:`SymbolicPortfolio`; change a member with ``set_params(exact__...)``.
        """
        pop = check_int(population_size, "population_size", minimum=2)
        gens = check_int(generations, "generations", minimum=1)
        fs = function_set
        if not isinstance(fs, FunctionSet):
            if isinstance(fs, (str, bytes)) or not isinstance(fs, Sequence) or len(fs) < 1:
                raise ArgumentError(
                    f"function_set must be a FunctionSet or a non-empty tuple of names, got {fs!r}"
                )
            try:
                fs = FunctionSet(tuple(fs))
            except (ValueError, TypeError) as err:
                msg = f"function_set={function_set!r} is not a valid function set: {err}"
                raise ArgumentError(msg) from None
        known = set(SymbolicRegressor().get_params())
        unknown = sorted(set(options) - known)
        if unknown:
            raise ArgumentError(
                f"{unknown[0]!r} is not a SymbolicRegressor argument (options={options!r:.200})"
            )
        erc_pop, erc_gens = max(pop // 5, 2), max(gens // 2, 1)
        main_gens = max(gens - math.ceil(erc_pop * erc_gens / pop), 1)
        exact = SymbolicRegressor(
            **{
                **exact_options(fs),
                "const_prob": const_prob,
                "fixed_constants": fixed_constants,
                "fixed_constant_prob": fixed_constant_prob,
                **options,
                "population_size": pop,
                "generations": main_gens,
                "function_set": function_set,
            }
        )
        erc = SymbolicRegressor(
            **{
                **EXACT_OPTIONS,
                **options,
                "population_size": erc_pop,
                "generations": erc_gens,
                "function_set": function_set,
            }
        )
        return cls(
            [("exact", exact), ("erc", erc)],
            model_selection=model_selection,
            max_time=max_time,
            random_state=random_state,
            verbose=verbose,
        )

    # -- scikit-learn's nested parameters ----
    def _pairs(self) -> list[tuple[Any, Any]] | None:
        """``estimators`` as a list of ``(name, estimator)`` pairs, or ``None`` when it is not one (then
        only the portfolio's own parameters are listed: ``set_params`` accepts anything, ``fit``
        checks)."""
        if not isinstance(self.estimators, (list, tuple)):
            return None
        if not all(isinstance(p, (list, tuple)) and len(p) == 2 for p in self.estimators):
            return None
        return [(name, est) for name, est in self.estimators]

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The portfolio's parameters; with ``deep``, also every member as ``name`` and its parameters
        as ``name__param``."""
        out = super().get_params(deep=False)
        pairs = self._pairs() if deep else None
        for name, est in pairs or ():
            if not isinstance(name, str) or name in out:  # a bad name: fit says so
                continue
            out[name] = est
            if hasattr(est, "get_params") and not isinstance(est, type):
                for key, value in est.get_params(deep=True).items():
                    out[f"{name}__{key}"] = value
        return out

    def set_params(self, **params: Any) -> SymbolicPortfolio:
        """Set the portfolio's parameters, replace a member (``name=estimator`` or ``name="drop"``) or
        set a member's (``name__param=value``); ``estimators`` is set first."""
        if "estimators" in params:
            self.estimators = params.pop("estimators")
        pairs = self._pairs()
        if pairs:
            names = [name for name, _ in pairs]
            for key in [k for k in params if "__" not in k and k in names]:
                value = params.pop(key)
                self.estimators = [(n, value if n == key else e) for n, e in self._pairs()]
        super().set_params(**params)
        return self

    # -- checks ----
    def _members(self) -> list[tuple[int, str, SymbolicRegressor]]:
        """``(index in estimators, name, estimator)`` of the members to fit (``"drop"`` left out), the
        ``estimators`` argument checked."""
        if not isinstance(self.estimators, (list, tuple)) or not self.estimators:
            raise ArgumentError(
                "estimators must be a non-empty list of (name, SymbolicRegressor) pairs, "
                f"got {self.estimators!r:.200}"
            )
        for i, pair in enumerate(self.estimators):
            if not (isinstance(pair, (list, tuple)) and len(pair) == 2):
                msg = f"estimators[{i}] must be a (name, SymbolicRegressor) pair, got {pair!r:.200}"
                raise ArgumentError(msg)
        own = set(super().get_params(deep=False))
        seen: set[str] = set()
        members = []
        for i, (name, est) in enumerate(self.estimators):
            if not isinstance(name, str) or not name or "__" in name:
                raise ArgumentError(
                    f"estimators[{i}]: a member's name must be a non-empty str without '__', got {name!r}"
                )
            if name in own:
                raise ArgumentError(
                    f"estimators[{i}]: the name {name!r} is a parameter of {type(self).__name__}; "
                    "rename the member"
                )
            if name in seen:
                raise ArgumentError(f"estimators: the names must be unique, got {name!r} twice")
            seen.add(name)
            if isinstance(est, str) and est == DROP:
                continue
            if not isinstance(est, SymbolicRegressor):
                raise ArgumentError(
                    f"estimators[{i}] ({name!r}) must be a SymbolicRegressor or 'drop', got {est!r:.200}"
                )
            members.append((i, name, est))
        if not members:
            raise ArgumentError("estimators: every member is 'drop'; at least one must be fitted")
        return members

    def _checked(self) -> dict[str, Any]:
        c: dict[str, Any] = {"members": self._members()}
        if isinstance(self.model_selection, str) or not callable(self.model_selection):
            check_choice(self.model_selection, "model_selection", tuple(front.MODEL_SELECTIONS))
        c["max_time"] = None if self.max_time is None else check_positive(self.max_time, "max_time")
        if self.random_state is None:
            c["seeds"] = None
        else:
            c["seeds"] = _member_seeds(self.random_state, len(c["members"]))
        if isinstance(self.verbose, (bool, np.bool_)):
            c["verbose"] = int(self.verbose)
        else:
            c["verbose"] = check_int(self.verbose, "verbose", minimum=0)
        c["evaluations"] = []
        for i, name, est in c["members"]:
            pop = check_int(est.population_size, f"{name}__population_size", minimum=2)
            c["evaluations"].append(pop * check_int(est.generations, f"{name}__generations", minimum=1))
            # every member's common parameters, before any member runs, on a probe: the check draws
            # a seed from a RandomState (cloned here) or, for None, from NumPy's global generator
            probe = clone(est)
            if probe.random_state is None or c["seeds"] is not None:
                probe.set_params(random_state=0)
            try:
                probe._checked()
            except ArgumentError as err:
                raise ArgumentError(f"estimators[{i}] ({name!r}): {err}") from None
        return c

    # -- fit ----
    def fit(self, X: Any, y: Any) -> SymbolicPortfolio:
        """Fit every member on ``X [n_samples, n_features]``, ``y [n_samples]`` and choose the model
        from the union of their fronts. Returns ``self``."""
        t_start = time.perf_counter()
        c = self._checked()
        _, y = validate_data(self, X, y, fit=True, y_numeric=True, dtype=np.float64)
        fitted: list[tuple[str, SymbolicRegressor]] = []
        for k, (i, name, template) in enumerate(c["members"]):
            est = clone(template)
            if c["seeds"] is not None:
                est.set_params(random_state=c["seeds"][k])
            if c["max_time"] is not None:
                elapsed = time.perf_counter() - t_start
                est.set_params(max_time=_time_shares(c["max_time"], elapsed, c["evaluations"][k:]))
            try:
                # X as given (a DataFrame's column names name the member's variables), y checked
                est.fit(X, y)
            except ArgumentError as err:
                raise ArgumentError(f"estimators[{i}] ({name!r}): {err}") from err
            fitted.append((name, est))
            if c["verbose"]:
                print(
                    f"{type(self).__name__}: member {name!r} ({k + 1}/{len(c['members'])}) fitted in "
                    f"{est.fit_seconds_:.1f} s, {len(est.front_models_)} models on its front, best "
                    f"loss {min(m.loss for m in est.front_models_):.6g}"
                )
        self.estimators_ = [est for _, est in fitted]
        self.named_estimators_ = Bunch(**dict(fitted))
        self._union_front(fitted, self.model_selection)
        self.compile_seconds_ = float(sum(est.compile_seconds_ for est in self.estimators_))
        self.run_seconds_ = float(sum(est.run_seconds_ for est in self.estimators_))
        self.evaluations_ = int(sum(est.run_result_.evaluations for est in self.estimators_))
        self.fit_seconds_ = time.perf_counter() - t_start
        return self

    def _union_front(self, fitted: list[tuple[str, SymbolicRegressor]], rule: Any) -> None:
        """Set ``pareto_front_``, ``front_models_``, ``front_members_``, ``best_`` and
        ``best_member_`` from the members' fronts."""
        fronts = [est.front_models_ for _, est in fitted]
        member, position, score, chosen = union_front(
            [[m.loss for m in f] for f in fronts], [[m.complexity for m in f] for f in fronts], rule
        )
        self.front_models_ = [
            dataclasses.replace(fronts[k][i], score=float(s))
            for k, i, s in zip(member, position, score, strict=True)
        ]
        self.front_members_ = [fitted[k][0] for k in member]
        self.pareto_front_ = [
            {
                "complexity": int(m.complexity),
                "loss": float(m.loss),
                "score": float(m.score),
                "chosen": j == chosen,
                "expression": m.expression,
                "member": name,
            }
            for j, (m, name) in enumerate(zip(self.front_models_, self.front_members_, strict=True))
        ]
        self.best_ = self.front_models_[chosen]
        self.best_member_ = self.front_members_[chosen]
        self._backend = fitted[member[chosen]][1].backend

    # -- after fitting (sympy, latex and the tags: ChosenModelMixin) ----
    def predict(self, X: Any) -> np.ndarray:
        """Predictions ``[n_samples]`` of the chosen model (``best_``) on ``X [n_samples, n_features]``."""
        return self._outputs(X)[:, 0]
