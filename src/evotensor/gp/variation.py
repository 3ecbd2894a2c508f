"""GP's variation operators as objects, and the registry a :class:`~evotensor.gp.GP` is built from.

Each mutation and crossover is one :class:`GPOperator`: its name, the shapes of the uniforms it
draws for ``n`` trees, how it applies them, whether it can grow a tree (so its results may hit the
``max_len`` cap and be rejected and counted), and its default weight among the mutations. An
:class:`OperatorRegistry` holds them in order; ``GP`` iterates it for everything that depends on
the operators: the mutation weights and per-operator child counts, the layout of the generation's
one random draw, and the mutation passes (:func:`mutation_blocks`).

Operators that share most of their work run together as one :class:`FusedPass` over consecutive
row blocks (structural: one exchange for subtree, hoist, insert and delete mutation; in place: one
rewrite for the point and constant mutations), instead of one pipeline per operator: on CPU, XLA's
compile time grows with the number of kernels. An operator names its pass (``fused=``); one without
a pass runs alone on its own block of children, after the passes.

A user's own operator is registered on a copy of the default registry and chosen by name::

    def negate_constants(draws, forest, ctx, params):
        (u,) = draws                                             # [n] uniforms
        hit = (forest.opcode == CONST) & (u[:, None] < 0.5)
        return forest.replace(value=jnp.where(hit, -forest.value, forest.value)), jnp.any(hit, -1)

    registry = default_registry()
    registry.register(GPOperator("negate", "mutation", lambda n, ctx: ((n,),), negate_constants,
                                 grows=False))
    gp = GP(500, fs, n_vars=2, operators=registry, mutation_probs={"subtree": 0.7, "negate": 0.3})

``apply`` contracts (``draws``: arrays of the shapes ``draw_shapes`` gave, in order; ``ctx``: the
GP's :class:`VariationContext`; ``params``: its :class:`~evotensor.gp.GPParams`, possibly traced):

* mutation: ``apply(draws, forest [n, L], ctx, params) -> (forest [n, L], ok bool [n])``, ``ok``
  False where the tree came back unchanged (e.g. no eligible node, or the ``max_len`` cap);
* crossover: ``apply(draws, pair [2C, L], crossing bool [C], ctx, params) -> (children [C, L],
  ok bool [C])``: ``pair`` holds the recipients then the donors, ``draw_shapes(C, ctx)`` is called
  with the number of pairs, and a pair with ``crossing`` False must come back as its recipient.

Rows are independent: each result row reads only its own tree (pair) and its own draws, where a
draw either has one axis of rows (for a fused pass: its members' rows, in member order) or is shared
by every row. On a mesh the children are then made per device, each device running an operator on
its own rows with the slices of the draws they read (:mod:`evotensor.gp.mesh_variation`), and the
offspring stay those of one device; a block whose draw shapes do not show that layout is computed
whole on every device instead.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core.checks import ArgumentError
from evotensor.gp import operators as ops
from evotensor.gp.encoding import Forest
from evotensor.gp.exchange import exchange
from evotensor.gp.generate import TreeGenerator

__all__ = [
    "KINDS",
    "FusedPass",
    "GPOperator",
    "MutationBlock",
    "OperatorRegistry",
    "VariationContext",
    "default_registry",
    "mutation_blocks",
]

Shapes = tuple[tuple[int, ...], ...]
KINDS = ("mutation", "crossover")


@dataclasses.dataclass(frozen=True, eq=False)
class VariationContext:
    """The static configuration operators read besides their draws, the forest and the params.

    Attributes:
        function_set: the trees' :class:`~evotensor.gp.FunctionSet`.
        n_vars: input variables of the trees.
        max_len: slots per tree.
        const_range: ``(low, high)`` of new constants.
        const_prob: probability that a new leaf is a constant.
        const_perturb: constant mutations perturb by ``params.const_sigma * N(0, 1)`` (True) or
            redraw in ``const_range`` (False).
        subtree_generator: the fresh subtrees of subtree mutation.
        insert_generator: the fresh parents of insert mutation.
        weighted_variables: the trees' variables are weighted variables ``mul(CONST w, VAR i)``
            (:mod:`evotensor.gp.weighted`), which the built-in operators keep whole (a user's
            operator reads it to do the same).
    """

    function_set: Any
    n_vars: int
    max_len: int
    const_range: tuple[float, float]
    const_prob: float
    const_perturb: bool
    subtree_generator: TreeGenerator
    insert_generator: TreeGenerator
    weighted_variables: bool = False

    def const_sigma(self, params: Any) -> jax.Array | None:
        """The perturbation scale of constant mutations (``None``: redraw uniformly)."""
        return params.const_sigma if self.const_perturb else None


@dataclasses.dataclass(frozen=True, eq=False)
class GPOperator:
    """One mutation or crossover operator (see the module docstring for the ``apply`` contracts).

    Attributes:
        name: its name in ``mutation_probs`` / ``crossover=`` (unique in a registry).
        kind: ``"mutation"`` or ``"crossover"``.
        draw_shapes: ``(n, ctx) -> shapes``: the uniforms it draws for ``n`` trees (``n`` pairs for
            a crossover), float32 in ``[0, 1)``, cut from the generation's one random draw.
        apply: runs it on those draws.
        grows: whether it can make a tree longer; its rows with ``ok`` False are counted in the
            ``crossover_rejected`` / ``mutation_rejected`` metrics.
        weight: default relative weight among the mutations (when ``mutation_probs`` is not given).
        fused: name of the :class:`FusedPass` that runs it together with other operators, or
            ``None``: it runs alone on its block of children.
    """

    name: str
    kind: str
    draw_shapes: Callable[[int, VariationContext], Shapes]
    apply: Callable[..., tuple[Forest, jax.Array]]
    grows: bool
    weight: float = 0.0
    fused: str | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ArgumentError(f"operator name must be an identifier, got {self.name!r}")
        if self.kind not in KINDS:
            raise ArgumentError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if not callable(self.draw_shapes) or not callable(self.apply):
            raise ArgumentError(f"operator {self.name!r}: draw_shapes and apply must be callables")
        w = self.weight
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not (math.isfinite(w) and w >= 0):
            raise ArgumentError(f"operator {self.name!r}: weight must be a finite number >= 0, got {w!r}")
        if self.fused is not None and self.kind != "mutation":
            raise ArgumentError(f"operator {self.name!r}: only mutations run in a fused pass")


@dataclasses.dataclass(frozen=True, eq=False)
class FusedPass:
    """Several mutations computed in one pass over consecutive row blocks, one block per member.

    Attributes:
        name: the name its members give as ``fused``.
        members: the mutations it runs, in the order of its row blocks.
        draw_shapes: ``(counts, ctx) -> shapes`` for ``counts[i]`` rows of ``members[i]``.
        apply: ``(draws, forest [sum(counts), L], counts, ctx, params) -> (forest, ok bool
            [sum(counts)])``; each block as its member's own ``apply`` would do it (the fusion is an
            optimization, not a semantics).
    """

    name: str
    members: tuple[str, ...]
    draw_shapes: Callable[[tuple[int, ...], VariationContext], Shapes]
    apply: Callable[..., tuple[Forest, jax.Array]]


class OperatorRegistry:
    """An ordered set of :class:`GPOperator` and the :class:`FusedPass` es that run some of them.

    Registration order is the mutations' order in ``mutation_probs`` and in the children (passes
    first, in their order, then the unfused mutations). ``GP`` copies the registry it is given, so
    registering later does not change a built strategy.

    Args:
        operators, passes: registered in order (passes first).
    """

    def __init__(self, operators: Iterable[GPOperator] = (), passes: Iterable[FusedPass] = ()):
        self._operators: dict[str, GPOperator] = {}
        self._passes: dict[str, FusedPass] = {}
        for fused in passes:
            self.register_pass(fused)
        for op in operators:
            self.register(op)

    def register(self, operator: GPOperator) -> GPOperator:
        """Add ``operator`` (its name must be new among the operators and passes; its pass, if any,
        registered and listing it). Returns it."""
        if not isinstance(operator, GPOperator):
            raise ArgumentError(f"operator must be a GPOperator, got {type(operator).__name__}")
        if operator.name in self._operators or operator.name in self._passes:
            raise ArgumentError(f"an operator or pass named {operator.name!r} is already registered")
        if operator.fused is not None:
            fused = self._passes.get(operator.fused)
            if fused is None or operator.name not in fused.members:
                raise ArgumentError(
                    f"operator {operator.name!r} names fused pass {operator.fused!r}, which is not "
                    f"registered or does not list it (passes: {tuple(self._passes)})"
                )
        self._operators[operator.name] = operator
        return operator

    def register_pass(self, fused: FusedPass) -> FusedPass:
        """Add a fused pass (its name must be new among the operators and passes). Returns it."""
        if not isinstance(fused, FusedPass):
            raise ArgumentError(f"fused must be a FusedPass, got {type(fused).__name__}")
        if fused.name in self._passes or fused.name in self._operators:
            raise ArgumentError(f"an operator or pass named {fused.name!r} is already registered")
        self._passes[fused.name] = fused
        return fused

    def copy(self) -> OperatorRegistry:
        """An independent registry with the same operators and passes."""
        return OperatorRegistry(self._operators.values(), self._passes.values())

    def __getitem__(self, name: str) -> GPOperator:
        return self._operators[name]

    def __contains__(self, name: object) -> bool:
        return name in self._operators

    def __iter__(self) -> Iterator[GPOperator]:
        return iter(self._operators.values())

    def __len__(self) -> int:
        return len(self._operators)

    def names(self, kind: str) -> tuple[str, ...]:
        """Names of the operators of ``kind`` (``"mutation"`` / ``"crossover"``), in order."""
        return tuple(op.name for op in self if op.kind == kind)

    @property
    def mutations(self) -> tuple[GPOperator, ...]:
        """The registered mutations, in registration order."""
        return tuple(op for op in self if op.kind == "mutation")

    @property
    def crossovers(self) -> tuple[GPOperator, ...]:
        """The registered crossovers, in registration order."""
        return tuple(op for op in self if op.kind == "crossover")

    @property
    def passes(self) -> tuple[FusedPass, ...]:
        """The registered fused passes, in registration order."""
        return tuple(self._passes.values())

    def __repr__(self) -> str:
        return f"OperatorRegistry(mutations={self.names('mutation')}, crossovers={self.names('crossover')})"


# ---- the plan of one generation's mutations -----------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class MutationBlock:
    """Consecutive children mutated by one call: a fused pass over its members' rows, or one
    unfused operator.

    Attributes:
        name: the pass's or the operator's name (its draws: :meth:`draw_name`).
        members: the operators of its row blocks (``None`` for a pass member the registry lacks).
        counts: rows per member.
        shapes: the uniforms it draws.
        fused: the pass, or ``None`` for one operator.
    """

    name: str
    members: tuple[GPOperator | None, ...]
    counts: tuple[int, ...]
    shapes: Shapes
    fused: FusedPass | None

    @property
    def size(self) -> int:
        """Children this block makes (the sum of its operators' counts)."""
        return sum(self.counts)

    def draw_name(self, i: int) -> str:
        """The key of its ``i``-th draw in the generation's draws (``"mutation/<name>/<i>"``; names
        are unique among a registry's operators and passes, so keys never collide)."""
        return f"mutation/{self.name}/{i}"

    @property
    def grows(self) -> np.ndarray:
        """bool ``[size]``: the rows whose operator can grow a tree."""
        flags = [op is not None and op.grows for op in self.members]
        return np.repeat(np.asarray(flags, bool), self.counts)

    def apply(
        self, draws: tuple[jax.Array, ...], forest: Forest, ctx: VariationContext, params: Any
    ) -> tuple[Forest, jax.Array]:
        """Mutate ``forest [size, L]`` -> ``(forest [size, L], ok bool [size])``."""
        if self.fused is not None:
            return self.fused.apply(draws, forest, self.counts, ctx, params)
        (op,) = self.members
        return op.apply(draws, forest, ctx, params)  # type: ignore[union-attr]


def mutation_blocks(
    registry: OperatorRegistry, counts: dict[str, int], ctx: VariationContext
) -> tuple[MutationBlock, ...]:
    """The blocks of a generation's mutations: every fused pass with rows (in pass order), then every
    unfused mutation with rows (in registry order).

    Args:
        registry: the operators.
        counts: children per mutation name (missing: 0).
        ctx: the GP's context (the draw shapes depend on it).
    """
    blocks = []
    for fused in registry.passes:
        n = tuple(int(counts.get(m, 0)) for m in fused.members)
        if sum(n):
            members = tuple(registry[m] if m in registry else None for m in fused.members)
            blocks.append(MutationBlock(fused.name, members, n, tuple(fused.draw_shapes(n, ctx)), fused))
    for op in registry.mutations:
        n_op = int(counts.get(op.name, 0))
        if op.fused is None and n_op:
            blocks.append(MutationBlock(op.name, (op,), (n_op,), tuple(op.draw_shapes(n_op, ctx)), None))
    return tuple(blocks)


# ---- the built-in operators -------------------------------------------------------------------------


def _exchange_pairs(pair: Forest, points: jax.Array, crossing: jax.Array) -> tuple[Forest, jax.Array]:
    """Children of ``pair [2C, L]`` by one subtree exchange at ``points [2C]`` (recipients' then
    donors'); a pair that is not crossing gets an invalid position, so the exchange returns its
    recipient."""
    C = crossing.shape[0]
    recipients = jax.tree_util.tree_map(lambda a: a[:C], pair)
    donors = jax.tree_util.tree_map(lambda a: a[C:], pair)
    return exchange(recipients, jnp.where(crossing, points[:C], -1), donors, points[C:])


def _one_point(draws, pair, crossing, ctx, params):
    (u,) = draws
    fs, weighted = ctx.function_set, ctx.weighted_variables
    points = ops.crossover_points(u, pair.opcode, pair.length, fs, params.internal_bias, weighted)
    return _exchange_pairs(pair, points, crossing)


def _leaf_biased(draws, pair, crossing, ctx, params):
    (u,) = draws
    fs, weighted = ctx.function_set, ctx.weighted_variables
    points = ops.leaf_biased_points(u, pair.opcode, pair.length, fs, params.leaf_bias, weighted)
    return _exchange_pairs(pair, points, crossing)


def _crossover_shapes(name: str) -> Callable[[int, VariationContext], Shapes]:
    return lambda n, ctx: ops.uniform_shapes(name, n)


def _builtin_mutation(
    name: str,
    weight: float,
    grows: bool,
    fused: str,
    args: Callable[[VariationContext, Any], tuple],
    generator: str | None = None,
    weighted: bool = False,
) -> GPOperator:
    """The public operator ``<name>_mutation`` of :mod:`evotensor.gp.operators` on its draws, with
    ``args(ctx, params)`` after the forest (``generator``: the context field its draw shapes need;
    ``weighted``: it takes ``weighted=ctx.weighted_variables``): what its fused pass computes on its
    block, and what runs if it is registered without the pass."""
    full = name + "_mutation"

    def draw_shapes(n: int, ctx: VariationContext) -> Shapes:
        gen = getattr(ctx, generator) if generator else None
        return ops.uniform_shapes(full, n, max_len=ctx.max_len, generator=gen)

    def apply(draws, forest, ctx, params):
        kwargs = {"weighted": ctx.weighted_variables} if weighted else {}
        return ops.apply_with_uniforms(full, draws, forest, *args(ctx, params), **kwargs)

    return GPOperator(name, "mutation", draw_shapes, apply, grows=grows, weight=weight, fused=fused)


def _structural_shapes(counts, ctx):
    return ops.structural_uniform_shapes(counts, ctx.subtree_generator, ctx.insert_generator)


def _structural(draws, forest, counts, ctx, params):
    fs, weighted = ctx.function_set, ctx.weighted_variables
    gens = (ctx.subtree_generator, ctx.insert_generator)
    return ops.structural_mutations(draws, forest, counts, fs, *gens, weighted=weighted)


def _inplace_shapes(counts, ctx):
    return ((sum(counts), max(ctx.max_len, 2)),)


def _inplace(draws, forest, counts, ctx, params):
    (u,) = draws
    return ops.inplace_mutations(
        u,
        forest,
        counts,
        ctx.function_set,
        ctx.n_vars,
        params.point_rate,
        params.const_rate,
        ctx.const_range,
        ctx.const_prob,
        ctx.const_sigma(params),
        ctx.weighted_variables,
    )


BUILTIN_PASSES = (
    FusedPass("structural", ops.STRUCTURAL, _structural_shapes, _structural),
    FusedPass("inplace", ops.INPLACE, _inplace_shapes, _inplace),
)


# In the order of GP's mutation_probs; the weights are GP's default mutation_probs.
_S, _I = "structural", "inplace"
BUILTIN_OPERATORS = (
    _builtin_mutation(
        "subtree",
        weight=0.35,
        grows=True,
        fused=_S,
        args=lambda c, p: (c.subtree_generator,),
        generator="subtree_generator",
    ),
    _builtin_mutation(
        "hoist", weight=0.1, grows=False, fused=_S, args=lambda c, p: (c.function_set,), weighted=True
    ),
    _builtin_mutation(
        "single_point",
        weight=0.1,
        grows=False,
        fused=_I,
        args=lambda c, p: (c.function_set, c.n_vars, c.const_range, c.const_prob),
        weighted=True,
    ),
    _builtin_mutation(
        "multi_point",
        weight=0.05,
        grows=False,
        fused=_I,
        args=lambda c, p: (c.function_set, c.n_vars, p.point_rate, c.const_range, c.const_prob),
        weighted=True,
    ),
    _builtin_mutation(
        "insert",
        weight=0.1,
        grows=True,
        fused=_S,
        args=lambda c, p: (c.insert_generator,),
        generator="insert_generator",
    ),
    _builtin_mutation(
        "delete", weight=0.1, grows=False, fused=_S, args=lambda c, p: (c.function_set,), weighted=True
    ),
    _builtin_mutation(
        "single_constant",
        weight=0.1,
        grows=False,
        fused=_I,
        args=lambda c, p: (c.const_range, c.const_sigma(p)),
    ),
    _builtin_mutation(
        "multi_constant",
        weight=0.1,
        grows=False,
        fused=_I,
        args=lambda c, p: (p.const_rate, c.const_range, c.const_sigma(p)),
    ),
    GPOperator("one_point", "crossover", _crossover_shapes("one_point_crossover"), _one_point, grows=True),
    GPOperator(
        "leaf_biased", "crossover", _crossover_shapes("leaf_biased_crossover"), _leaf_biased, grows=True
    ),
)
"""The ten operators of :mod:`evotensor.gp.operators` (eight mutations, then two crossovers)."""


def default_registry() -> OperatorRegistry:
    """A new registry with the built-in operators and passes (a fresh copy each call, so registering
    an operator on it changes no other GP)."""
    return OperatorRegistry(BUILTIN_OPERATORS, BUILTIN_PASSES)
