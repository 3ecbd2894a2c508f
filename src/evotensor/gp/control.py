"""GP trees as control policies: a decoder that runs a multi-output tree on one observation.

A policy problem (:class:`evotensor.problems.control.GymnaxProblem`,
:class:`~evotensor.problems.control.BraxProblem`) runs a whole population's rollouts as one program,
``vmap(population) ∘ vmap(episodes) ∘ lax.scan(steps)``, and calls ``apply(phenotype, obs) -> y``
once per step. :class:`TreePolicy` is that ``apply`` for GP: the phenotype is one tree ``[max_len]``
of the forest, ``obs`` the flat observation ``[n_vars]``, ``y`` the tree's ``[n_outputs]`` outputs
(Modi multi-output semantics, :mod:`evotensor.gp.reference`). The problem turns ``y`` into an
action: ``argmax(y)`` for a discrete action space (one output per action), ``tanh``-squashed into
the action box for a continuous one (one output per action dimension).

How one tree runs on one observation (``evaluator=``, a name of :data:`EVALUATORS` or a callable
``(tree, X [1, n_vars]) -> [1, n_outputs]``):

* ``"tree"``: :func:`evotensor.gp.tree_eval.evaluate_tree`, a pure-``jnp`` interpreter of one
  tree; under the rollout's ``vmap`` it becomes one batched loop over the population's trees, on a
  CPU as on a GPU (no backend dispatch, no per-tree call).
* ``"forest"``: :func:`evotensor.gp.evaluate` on the one-row batch, with its ``backend`` (on a CPU
  the native evaluator, which ``vmap`` runs as one call per tree and step; on a GPU the Pallas
  kernel).
* ``"auto"`` (default, :func:`choose_evaluator`): ``"forest"`` on a CPU where the native evaluator
  supports the function set (per step it interprets each tree's own nodes only, where ``"tree"``
  runs all ``max_len`` slots), else ``"tree"``.

Function set: :data:`CONTROL_FUNCTIONS` (``+ - * /``, EvoGP's brax setup) with protected division
(gplearn's: ``a / b`` if ``|b| > 0.001`` else 1), so no observation makes a policy divide by zero:
a non-finite output would otherwise pick ``argmax``'s NaN index or send NaN actions to the
simulator. Observations are used as the environment gives them, as in EvoGP (no normalization:
CartPole's are O(1); brax's are unscaled joint positions and velocities); constants are drawn in
``(-1, 1)``.

Example (three lines)::

    problem = GymnaxProblem("CartPole-v1")
    gp, policy = gp_for_control(problem, population_size=256)   # gp.decoder is policy
    result = evotensor.run(gp, problem, 20, jax.random.key(0))
    policy_expressions(result.best_genotype, policy)     # one expression per output
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from evotensor.core.checks import ArgumentError, check_choice, check_int
from evotensor.gp import native
from evotensor.gp.encoding import DecodedForest, Forest
from evotensor.gp.evaluate import BACKENDS, evaluate
from evotensor.gp.functions import FunctionSet
from evotensor.gp.metrics import first_invalid_tree, is_concrete, tree_validity
from evotensor.gp.strategy import GP
from evotensor.gp.tree_eval import evaluate_tree

__all__ = [
    "CONTROL_FUNCTIONS",
    "EVALUATORS",
    "PolicyGP",
    "TreePolicy",
    "check_control_problem",
    "choose_evaluator",
    "control_function_set",
    "gp_for_control",
    "policy_expressions",
]

CONTROL_FUNCTIONS = ("add", "sub", "mul", "div")
"""The default function set of control policies: EvoGP's brax setup (``+ - * /``)."""

EVALUATORS = ("auto", "tree", "forest")
"""How :class:`TreePolicy` runs one tree on one observation (see the module docstring)."""

TreeEvaluator = Callable[[Any, jax.Array], jax.Array]


def control_function_set(names: tuple[str, ...] = CONTROL_FUNCTIONS, protected: bool = True) -> FunctionSet:
    """The function set of a control policy: ``names`` (default :data:`CONTROL_FUNCTIONS`) with the
    protected semantics (default) that keep a policy's outputs finite on any observation."""
    return FunctionSet(tuple(names), protected=protected)


def choose_evaluator(function_set: FunctionSet) -> str:
    """What ``evaluator="auto"`` resolves to on this machine: ``"forest"`` (the native evaluator) on
    a CPU where it supports ``function_set``, else ``"tree"``. On a CPU the native evaluator's
    rollouts cost 0.4x (max_len 128) to 0.9x (max_len 64) of the one-tree interpreter's, which
    runs all ``max_len`` slots of every tree; on a GPU the native evaluator would be a host round
    trip per call."""
    if jax.default_backend() == "cpu" and native.supported(function_set):
        return "forest"
    return "tree"


def _tree_evaluator(function_set: FunctionSet, n_outputs: int) -> TreeEvaluator:
    """:func:`~evotensor.gp.tree_eval.evaluate_tree` with :func:`evotensor.gp.evaluate`'s boundary:
    a concrete malformed tree is refused, a traced one gives NaN outputs (``evaluate_tree`` assumes
    a well-formed tree). The check is ``O(max_len)`` per call, small beside the evaluation."""

    def run(tree: Any, X: jax.Array) -> jax.Array:
        arrays = (tree.opcode, tree.value, tree.size, tree.output)
        n_vars = X.shape[1]
        if is_concrete(*arrays):
            message = first_invalid_tree(tuple(jnp.reshape(a, (1, -1)) for a in arrays), function_set, n_vars)
            if message is not None:
                raise ArgumentError(message)
            return evaluate_tree(*arrays, X, function_set, n_outputs)
        ok = tree_validity(tree.opcode[None], tree.value[None], tree.size[None], function_set.arity, n_vars)
        return jnp.where(ok[0], evaluate_tree(*arrays, X, function_set, n_outputs), jnp.nan)

    return run


def _forest_evaluator(function_set: FunctionSet, n_outputs: int, backend: str) -> TreeEvaluator:
    def run(tree: Any, X: jax.Array) -> jax.Array:
        return evaluate(tree, X, function_set, n_outputs, backend=backend)

    return run


class TreePolicy:
    """A GP forest as control policies: the decoder of a GP on a policy problem.

    Args:
        function_set: the GP's :class:`~evotensor.gp.FunctionSet`.
        n_vars: observation size (the GP's ``n_vars``).
        n_outputs: policy outputs (the GP's ``n_outputs``): the number of actions of a discrete
            action space, the action dimension of a continuous one.
        evaluator: ``"auto"``, ``"tree"``, ``"forest"`` (:data:`EVALUATORS`, see the module
            docstring) or a callable ``(tree, X [1, n_vars]) -> [1, n_outputs]``.
        backend: the :func:`evotensor.gp.evaluate` backend of ``evaluator="forest"`` (one of
            :data:`evotensor.gp.evaluate.BACKENDS`).

    ``decode(forest [pop, max_len])`` hands the trees on unchanged (as a
    :class:`~evotensor.gp.encoding.DecodedForest` carrying ``n_vars`` and ``n_outputs``);
    ``apply(tree [max_len], obs [n_vars]) -> float32 [n_outputs]`` runs one tree on one observation
    and works under ``jit`` and ``vmap``. Build one for a GP and a problem with :meth:`from_gp` (it
    checks that they match) or with :func:`gp_for_control`.
    """

    def __init__(
        self,
        function_set: FunctionSet,
        n_vars: int,
        n_outputs: int = 1,
        *,
        evaluator: str | TreeEvaluator = "auto",
        backend: str = "auto",
    ):
        if not isinstance(function_set, FunctionSet):
            raise ArgumentError(f"function_set must be a FunctionSet, got {function_set!r}")
        self.function_set = function_set
        self.n_vars = check_int(n_vars, "n_vars")
        self.n_outputs = check_int(n_outputs, "n_outputs")
        self.backend = check_choice(backend, "backend", BACKENDS)
        if callable(evaluator):
            self.evaluator, self._run = getattr(evaluator, "__name__", "custom"), evaluator
            return
        check_choice(evaluator, "evaluator", EVALUATORS)
        if evaluator == "auto":
            evaluator = choose_evaluator(function_set)
        if evaluator == "tree":
            self._run = _tree_evaluator(function_set, self.n_outputs)
        else:
            self._run = _forest_evaluator(function_set, self.n_outputs, self.backend)
        self.evaluator = evaluator

    @classmethod
    def from_gp(cls, gp: GP, problem: Any = None, **options: Any) -> TreePolicy:
        """The policy decoder of ``gp`` (its function set, ``n_vars``, ``n_outputs``); with
        ``problem``, first checks that they match its observation and output sizes
        (:func:`check_control_problem`). ``options``: ``evaluator``, ``backend``."""
        if not isinstance(gp, GP):
            raise ArgumentError(f"gp must be an evotensor.gp.GP, got {type(gp).__name__}")
        if problem is not None:
            check_control_problem(problem, gp.n_vars, gp.n_outputs)
        return cls(gp.function_set, gp.n_vars, gp.n_outputs, **options)

    def decode(self, genotypes: Forest) -> Forest:
        """The trees themselves (no decoding), tagged with ``n_vars`` / ``n_outputs``."""
        return DecodedForest.of(genotypes, self.n_vars, self.n_outputs)

    def apply(self, tree: Forest, obs: jax.Array) -> jax.Array:
        """One tree ``[max_len]`` on one observation (any shape of ``n_vars`` elements, flattened):
        ``float32 [n_outputs]``."""
        x = jnp.ravel(jnp.asarray(obs, jnp.float32))
        if x.shape[0] != self.n_vars:
            raise ArgumentError(
                f"n_vars mismatch: the policy reads n_vars={self.n_vars} observation entries but got an "
                f"observation of {x.shape[0]}; build the GP with n_vars={x.shape[0]}"
            )
        if jnp.ndim(tree.opcode) != 1:
            raise ArgumentError(
                f"apply runs one tree: opcode must be [max_len], got shape {jnp.shape(tree.opcode)}"
            )
        return self._run(tree, x[None, :])[0]

    def __call__(self, tree: Forest, obs: jax.Array) -> jax.Array:
        return self.apply(tree, obs)

    def __repr__(self) -> str:
        return (
            f"TreePolicy(n_vars={self.n_vars}, n_outputs={self.n_outputs}, evaluator={self.evaluator!r}, "
            f"function_set={self.function_set!r})"
        )


def check_control_problem(problem: Any, n_vars: int, n_outputs: int) -> None:
    """Raise :class:`~evotensor.core.checks.ArgumentError` naming ``n_vars`` or ``n_outputs`` when
    they differ from ``problem``'s ``observation_size`` / ``output_size`` (a policy problem)."""
    sizes = (getattr(problem, "observation_size", None), getattr(problem, "output_size", None))
    if getattr(problem, "kind", None) != "policy" or None in sizes:
        raise ArgumentError(
            f"problem must be a policy problem with observation_size and output_size (a GymnaxProblem "
            f"or BraxProblem), got {type(problem).__name__}"
        )
    if getattr(problem, "flatten_observation", True) is False:
        raise ArgumentError(
            "problem gives policies unflattened observations (flatten_observation=False); GP trees read "
            "a flat observation: build the problem with flatten_observation=True"
        )
    obs_size, out_size = sizes
    if n_vars != obs_size:
        raise ArgumentError(
            f"n_vars={n_vars!r} does not match {problem!r}: its observations have {obs_size} entries, "
            f"so the GP needs n_vars={obs_size}"
        )
    if n_outputs != out_size:
        what = "actions (argmax)" if getattr(problem, "discrete", False) else "action dimensions (tanh)"
        raise ArgumentError(
            f"n_outputs={n_outputs!r} does not match {problem!r}: it takes {out_size} {what}, so the GP "
            f"needs n_outputs={out_size}"
        )


class PolicyGP(GP):
    """A :class:`~evotensor.gp.GP` whose family decoder is a :class:`TreePolicy`, so
    ``evotensor.run(gp, problem, generations, key)`` runs its trees as policies without a
    ``decoder=`` (a plain GP's decoder runs trees on data sets). Built by :func:`gp_for_control`.

    Args:
        population_size, function_set, n_vars, max_len, **options: as :class:`~evotensor.gp.GP`.
        evaluator, backend: of the :class:`TreePolicy`.
    """

    def __init__(
        self,
        population_size: int,
        function_set: FunctionSet,
        n_vars: int,
        max_len: int = 128,
        *,
        evaluator: str | TreeEvaluator = "auto",
        backend: str = "auto",
        **options: Any,
    ):
        super().__init__(population_size, function_set, n_vars, max_len, **options)
        self.policy = TreePolicy(
            self.function_set, self.n_vars, self.n_outputs, evaluator=evaluator, backend=backend
        )

    @property
    def decoder(self) -> TreePolicy:  # type: ignore[override]
        """The :class:`TreePolicy` (``decode``: the trees; ``apply``: one tree on one observation)."""
        return self.policy


def gp_for_control(
    problem: Any,
    population_size: int,
    function_set: FunctionSet | None = None,
    *,
    evaluator: str | TreeEvaluator = "auto",
    backend: str = "auto",
    **gp_kwargs: Any,
) -> tuple[PolicyGP, TreePolicy]:
    """A GP and its policy decoder for a control ``problem``.

    Args:
        problem: a policy problem (:class:`~evotensor.problems.control.GymnaxProblem`,
            :class:`~evotensor.problems.control.BraxProblem`).
        population_size: trees per generation.
        function_set: default :func:`control_function_set` (``+ - * /``, protected division).
        evaluator, backend: of the :class:`TreePolicy`.
        **gp_kwargs: any other :class:`~evotensor.gp.GP` argument. ``n_vars`` and ``n_outputs``
            default to the problem's observation and output sizes (other values are refused);
            ``max_len`` defaults to 64 and ``init_depth`` to (1, 4): a small policy is a readable one,
            and every step of every rollout runs every tree.

    Returns:
        ``(gp, policy)``: a :class:`PolicyGP` (``gp.decoder is policy``) and its :class:`TreePolicy`;
        run with ``evotensor.run(gp, problem, generations, key)``.

    Raises:
        ArgumentError: ``n_vars`` / ``n_outputs`` not matching the problem (naming the argument), a
            problem that is not a policy problem, any bad GP argument.
    """
    n_vars = gp_kwargs.pop("n_vars", getattr(problem, "observation_size", None))
    n_outputs = gp_kwargs.pop("n_outputs", getattr(problem, "output_size", None))
    check_control_problem(problem, n_vars, n_outputs)
    fs = control_function_set() if function_set is None else function_set
    gp_kwargs.setdefault("max_len", 64)
    gp_kwargs.setdefault("init_depth", (1, 4))
    gp = PolicyGP(
        population_size, fs, n_vars, n_outputs=n_outputs, evaluator=evaluator, backend=backend, **gp_kwargs
    )
    return gp, gp.policy


def policy_expressions(
    tree: Forest, policy: TreePolicy, *, simplify: bool = True, digits: int = 4, timeout: float = 5.0
) -> list[str]:
    """One readable expression per output of a policy tree ``[max_len]`` (or ``forest[i]``):
    :func:`evotensor.gp.export.to_sympy` of each output (faithful to the evaluated semantics,
    protected operators as ``Piecewise``), constants to ``digits`` significant digits; an output
    no Modi node writes to is ``0``. Over the symbols ``x0, x1, ...`` (observation entries)."""
    import sympy as sp

    from evotensor.gp.export import to_sympy

    digits = check_int(digits, "digits")
    n = policy.n_outputs
    out = []
    for k in range(n):
        expr = to_sympy(tree, policy.function_set, output=k, simplify=simplify, n_outputs=n, timeout=timeout)
        out.append(str(sp.N(expr, digits)))
    return out
