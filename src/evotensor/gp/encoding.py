"""The tensor encoding of a GP population: a :class:`Forest` of prefix-ordered trees.

A forest is four arrays sharing the shape ``[..., max_len]`` (usually ``[pop, max_len]``), one slot
per node in prefix (pre-order) order:

* ``opcode int32`` — ``PAD = 0``, ``CONST = 1``, ``VAR = 2``, functions from 3 (see
  :class:`evotensor.gp.functions.FunctionSet`);
* ``value float32`` — the constant for ``CONST``, the variable index (as a float) for ``VAR``,
  0 otherwise;
* ``size int32`` — the size of the subtree rooted at the slot: the subtree at ``i`` is the slice
  ``[i, i + size[i])``, so no operator ever re-parses a tree; a tree's length is ``size[0]``;
* ``output int32`` — for a multi-output (Modi) node the output it adds its value to (``>= 0``);
  ``-1`` everywhere else. Generation only makes function nodes Modi nodes.

Every slot after a tree's length is padding: ``opcode PAD, value 0, size 0, output -1``. Padding is
always initialized, so forests compare and hash bit-for-bit.

Nested-tuple form (:meth:`Forest.from_tuples` / :meth:`Forest.to_tuples`)::

    ("add", ("var", 0), ("mul", ("const", 1.5), ("var", 1)))      # x0 + 1.5 * x1
    ("modi", 2, ("sin", ("var", 0)))                               # a Modi node: sin(x0) -> output 2

``("modi", k, node)`` marks ``node`` (usually a function node; a leaf is allowed) as a Modi node
writing to output ``k`` (see :mod:`evotensor.gp.reference` for the Modi semantics).

Conversions (:meth:`Forest.from_tuples`, :meth:`Forest.to_tuples`, :meth:`Forest.to_infix`) walk
trees iteratively, so a tree of any depth that fits ``max_len`` converts (no ``RecursionError``).
"""

from __future__ import annotations

import dataclasses
import reprlib
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core.checks import ArgumentError
from evotensor.core.pytree import pytree_dataclass, static_field
from evotensor.gp.functions import CONST, PAD, VAR, FunctionSet

__all__ = ["CONST", "PAD", "VAR", "DecodedForest", "Forest", "subtree_sizes", "subtree_sizes_numpy"]

MODI_TAG = "modi"


@pytree_dataclass
class Forest:
    """A population of prefix-encoded trees (struct of arrays, see the module docstring).

    Attributes:
        opcode: ``int32 [..., max_len]``.
        value: ``float32 [..., max_len]``.
        size: ``int32 [..., max_len]``.
        output: ``int32 [..., max_len]``.

    Indexing ``forest[i]`` (or any numpy-style index on the leading axes) returns a Forest of the
    selected trees; ``forest[i]`` with an integer gives a single tree with arrays ``[max_len]``.
    """

    opcode: jax.Array
    value: jax.Array
    size: jax.Array
    output: jax.Array

    # -- construction ------------------------------------------------------------------------
    @staticmethod
    def empty(pop: int | tuple[int, ...], max_len: int) -> Forest:
        """An all-padding forest ``[pop, max_len]`` (a buffer; not valid trees: length 0)."""
        if isinstance(max_len, bool) or not isinstance(max_len, (int, np.integer)) or max_len < 1:
            raise ValueError(f"max_len must be a positive int, got {max_len!r}")
        shape = (pop, max_len) if isinstance(pop, (int, np.integer)) else (*pop, max_len)
        return Forest(
            opcode=jnp.zeros(shape, jnp.int32),
            value=jnp.zeros(shape, jnp.float32),
            size=jnp.zeros(shape, jnp.int32),
            output=jnp.full(shape, -1, jnp.int32),
        )

    @staticmethod
    def from_tuples(trees: Sequence[Any], max_len: int, function_set: Any) -> Forest:
        """Encode nested tuples (see the module docstring) into a Forest ``[len(trees), max_len]``.

        Raises:
            ValueError: unknown function name, wrong number of children, bad leaf, or a tree longer
                than ``max_len`` (the message names the tree index).
        """
        if isinstance(trees, tuple) and trees and isinstance(trees[0], str):
            raise TypeError("trees must be a list of nested tuples; wrap a single tree in a list")
        if isinstance(max_len, bool) or not isinstance(max_len, (int, np.integer)) or max_len < 1:
            raise ValueError(f"max_len must be a positive int, got {max_len!r}")
        _check_function_set(function_set)
        arity = np.asarray(function_set.arity)
        n = len(trees)
        op = np.zeros((n, max_len), np.int32)
        val = np.zeros((n, max_len), np.float32)
        out = np.full((n, max_len), -1, np.int32)
        for t, tree in enumerate(trees):
            nodes: list[tuple[int, float, int]] = []
            try:
                _flatten(tree, function_set, arity, nodes)
            except (ValueError, TypeError, KeyError) as err:
                raise ValueError(f"tree {t}: {err}") from None
            if len(nodes) > max_len:
                raise ValueError(f"tree {t} has {len(nodes)} nodes, more than max_len={max_len}")
            for i, (o, v, k) in enumerate(nodes):
                op[t, i], val[t, i], out[t, i] = o, v, k
        size = subtree_sizes_numpy(op, arity)
        return Forest(jnp.asarray(op), jnp.asarray(val), jnp.asarray(size), jnp.asarray(out))

    # -- shape helpers ---------------------------------------------------------------------
    @property
    def max_len(self) -> int:
        """Number of slots per tree (static)."""
        return int(self.opcode.shape[-1])

    @property
    def batch_shape(self) -> tuple[int, ...]:
        """The leading axes (``(pop,)`` for a population, ``()`` for a single tree)."""
        return tuple(self.opcode.shape[:-1])

    @property
    def length(self) -> jax.Array:
        """Number of nodes of each tree: ``size[..., 0]``, int32 ``[...]``."""
        return self.size[..., 0]

    def __getitem__(self, index: Any) -> Forest:
        if not self.batch_shape:
            raise IndexError("a single tree (no leading axes) cannot be indexed")
        if isinstance(index, (int, np.integer)) and not isinstance(index, bool):
            n = self.batch_shape[0]
            if not -n <= index < n:  # JAX would clamp it to the last tree
                raise IndexError(f"tree index {index} is out of range for a forest of {n} trees")
        return jax.tree_util.tree_map(lambda a: a[index], self)

    def __len__(self) -> int:
        if not self.batch_shape:
            raise TypeError("a single tree has no length; use .length for its node count")
        return self.batch_shape[0]

    def depth(self) -> jax.Array:
        """Depth of every node (root 0; padding 0): int32 ``[..., max_len]``.

        A node's depth is its number of ancestors, i.e. of slots ``i < j < i + size[i]``
        (``O(max_len^2)`` per tree, fine for metrics and tests).
        """
        idx = jnp.arange(self.max_len)
        i = idx[:, None]
        j = idx[None, :]
        anc = (i < j) & (j < i + self.size[..., :, None])  # [..., i, j]
        return jnp.sum(anc, axis=-2).astype(jnp.int32)

    # -- validation ----------------------------------------------------------------------------
    def check(self, function_set: Any, n_vars: int | None = None, n_outputs: int | None = None) -> None:
        """Validate every tree; raise ``ValueError`` naming the tree index and position.

        Checks: dtypes and shapes; ``1 <= length <= max_len``; opcodes known; no ``PAD`` inside a tree;
        every ``size`` equals one plus its children's sizes (children found through the arities);
        value 0 except on ``CONST`` (finite) and ``VAR`` (an integer, ``< n_vars`` if given);
        ``output >= -1`` (``< n_outputs`` if given); padding exactly
        ``(PAD, 0, 0, -1)``.
        """
        _check_function_set(function_set)
        arity = np.asarray(function_set.arity)
        n_op = len(arity)
        shapes = {f: np.shape(getattr(self, f)) for f in ("opcode", "value", "size", "output")}
        if len(set(shapes.values())) != 1 or not shapes["opcode"]:
            raise ValueError(f"forest arrays must share one shape [..., max_len], got {shapes}")
        for f, kind in (("opcode", "i"), ("value", "f"), ("size", "i"), ("output", "i")):
            if np.asarray(getattr(self, f)).dtype.kind != kind:
                raise ValueError(f"forest.{f} has dtype {np.asarray(getattr(self, f)).dtype}")
        L = self.max_len
        op = np.asarray(self.opcode).reshape(-1, L)
        val = np.asarray(self.value).reshape(-1, L)
        size = np.asarray(self.size).reshape(-1, L)
        out = np.asarray(self.output).reshape(-1, L)
        batch = self.batch_shape
        for t in range(op.shape[0]):
            where = f"tree {tuple(int(i) for i in np.unravel_index(t, batch)) if batch else ()}"
            n = int(size[t, 0])
            if not 1 <= n <= L:
                raise ValueError(f"{where}: length size[0]={n} outside [1, {L}]")
            o = op[t]
            if np.any((o < 0) | (o >= n_op)):
                i = int(np.argmax((o < 0) | (o >= n_op)))
                raise ValueError(f"{where}, position {i}: unknown opcode {o[i]}")
            body = slice(0, n)
            if np.any(o[body] == PAD):
                raise ValueError(f"{where}, position {int(np.argmax(o[body] == PAD))}: PAD inside the tree")
            tail = slice(n, L)
            bad_pad = (o[tail] != PAD) | (size[t, tail] != 0) | (val[t, tail] != 0) | (out[t, tail] != -1)
            if np.any(bad_pad):
                raise ValueError(
                    f"{where}, position {n + int(np.argmax(bad_pad))}: padding is not (PAD,0,0,-1)"
                )
            expected = _sizes_one(o[:n], arity, where)
            if np.any(expected != size[t, :n]):
                i = int(np.argmax(expected != size[t, :n]))
                raise ValueError(
                    f"{where}, position {i}: size {size[t, i]} but the subtree has {expected[i]} nodes"
                )
            for i in range(n):
                v, k = float(val[t, i]), int(out[t, i])
                if o[i] == CONST:
                    if not np.isfinite(v):
                        raise ValueError(f"{where}, position {i}: constant {v} is not finite")
                elif o[i] == VAR:
                    if v != np.floor(v) or v < 0 or (n_vars is not None and v >= n_vars):
                        raise ValueError(f"{where}, position {i}: bad variable index {v}")
                elif v != 0:
                    raise ValueError(f"{where}, position {i}: function node has value {v} (must be 0)")
                if k < -1 or (n_outputs is not None and k >= n_outputs):
                    raise ValueError(f"{where}, position {i}: output index {k} out of range")

    # -- conversion ------------------------------------------------------------------------------
    def to_tuples(self, function_set: Any) -> Any:
        """Nested tuples (module docstring) of a single tree, or a (nested) list for leading axes."""
        _check_function_set(function_set)
        op = np.asarray(self.opcode)
        if op.ndim > 1:
            return [self[i].to_tuples(function_set) for i in range(op.shape[0])]
        val, out = np.asarray(self.value), np.asarray(self.output)

        def leaf(i: int) -> tuple:
            return ("const", float(val[i])) if op[i] == CONST else ("var", int(val[i]))

        def function(i: int, kids: list) -> tuple:
            return (function_set.name(int(op[i])), *kids)

        def mark(i: int, node: tuple) -> tuple:
            return (MODI_TAG, int(out[i]), node) if out[i] >= 0 else node

        return _walk_prefix(op, np.asarray(function_set.arity), leaf, function, mark)

    def to_infix(self, function_set: Any, precision: int = 3) -> Any:
        """Human-readable infix string of a single tree (a list of strings for a forest).

        Constants are rounded to ``precision`` significant digits, variables print as ``x0, x1…``,
        infix operators are parenthesized where they are operands of other infix operators (not as
        function arguments or at the root), other functions print as ``name(a, b)``, and a Modi node
        prints as ``out[k]=<expr>`` (its value goes to output ``k``; its parent sees its last child).
        """
        _check_function_set(function_set)
        op = np.asarray(self.opcode)
        if op.ndim > 1:
            return [self[i].to_infix(function_set, precision) for i in range(op.shape[0])]
        val, out = np.asarray(self.value), np.asarray(self.output)
        symbols = function_set.symbols
        # each node is (text, bare): ``text`` is safe as an operand of an infix operator, ``bare``
        # drops the outer grouping parentheses (used for function arguments and the root)

        def leaf(i: int) -> tuple[str, str]:
            if op[i] == CONST:
                bare = f"{float(val[i]):.{precision}g}"
                return (f"({bare})" if bare.startswith("-") else bare), bare
            return f"x{int(val[i])}", f"x{int(val[i])}"

        def function(i: int, kids: list) -> tuple[str, str]:
            o = int(op[i])
            sym = symbols[o]
            if len(kids) == 2 and function_set.is_infix(o):
                bare = f"{kids[0][0]} {sym} {kids[1][0]}"
                return f"({bare})", bare
            text = f"{sym}({', '.join(k[1] for k in kids)})"
            return text, text

        def mark(i: int, node: tuple[str, str]) -> tuple[str, str]:
            if out[i] >= 0:
                text = f"out[{int(out[i])}]={node[0]}"
                return text, text
            return node

        if int(np.asarray(self.size)[0]) < 1:
            return "<empty>"
        return _walk_prefix(op, np.asarray(function_set.arity), leaf, function, mark)[1]


class _Frame:
    """A function node of :func:`_walk_prefix` waiting for its children."""

    __slots__ = ("i", "arity", "kids")

    def __init__(self, i: int, arity: int):
        self.i, self.arity, self.kids = i, arity, []


def _walk_prefix(op: np.ndarray, arity: np.ndarray, leaf: Any, function: Any, mark: Any) -> Any:
    """Fold one prefix-ordered tree bottom-up without recursion: ``leaf(i)`` for a leaf,
    ``function(i, children)`` for a function node, then ``mark(i, node)`` for every node (Modi
    marking). Children are found by the arities from position 0 (``size`` is not read)."""
    L = op.shape[0]
    stack: list[_Frame] = []
    i = 0
    while True:
        if i >= L:
            raise ValueError(f"the tree runs past max_len={L}: a function node lacks children")
        o = int(op[i])
        if o in (CONST, VAR):
            node = mark(i, leaf(i))
            i += 1
        elif o == PAD or not 0 <= o < len(arity):
            raise ValueError(f"position {i}: opcode {o} is not a node of the function set")
        else:
            stack.append(_Frame(i, int(arity[o])))
            i += 1
            continue
        while True:  # hand the finished node to its parent; finish parents that are complete
            if not stack:
                return node
            frame = stack[-1]
            frame.kids.append(node)
            if len(frame.kids) < frame.arity:
                break
            stack.pop()
            node = mark(frame.i, function(frame.i, frame.kids))


def _check_function_set(function_set: Any) -> None:
    if not isinstance(function_set, FunctionSet):
        raise ArgumentError(f"function_set must be a FunctionSet, got {type(function_set).__name__}")


@pytree_dataclass
@dataclasses.dataclass(frozen=True)
class DecodedForest(Forest):
    """A forest as :attr:`evotensor.gp.GP.decoder` hands it to a problem: the trees plus the static
    ``n_vars`` and ``n_outputs`` of the GP that evolved them (``None``: unknown).

    :func:`evotensor.gp.evaluate` and :func:`evotensor.gp.fitness` check them against the data (the
    columns of ``X`` and the outputs asked for), so a GP built for 5 variables fails with a clear
    error on 2-column data instead of evolving trees that read variables the data lacks. It is a
    :class:`Forest` in every other respect.
    """

    n_vars: int | None = static_field(default=None)
    n_outputs: int | None = static_field(default=None)

    @staticmethod
    def of(genotypes: Any, n_vars: int | None, n_outputs: int | None) -> Any:
        """``genotypes`` tagged with ``n_vars`` / ``n_outputs`` (what a GP decoder hands a problem);
        anything that is not a :class:`Forest` is returned as it is."""
        if not isinstance(genotypes, Forest):
            return genotypes
        g = genotypes
        return DecodedForest(g.opcode, g.value, g.size, g.output, n_vars=n_vars, n_outputs=n_outputs)


def _flatten(tree: Any, function_set: Any, arity: np.ndarray, nodes: list) -> None:
    """Append ``(opcode, value, output)`` for ``tree`` and its descendants in prefix order (an
    explicit stack: any depth)."""
    pending: list[tuple[Any, int]] = [(tree, -1)]  # (node, output of an enclosing Modi tag)
    while pending:
        node, output = pending.pop()
        if not isinstance(node, tuple) or not node or not isinstance(node[0], str):
            raise TypeError(f"expected a tuple starting with a name, got {reprlib.repr(node)}")
        head = node[0]
        if head == "const":
            if len(node) != 2 or not np.isfinite(float(node[1])):
                raise ValueError(f"bad constant {reprlib.repr(node)}")
            nodes.append((CONST, float(node[1]), output))
            continue
        if head == "var":
            if len(node) != 2 or int(node[1]) != node[1] or node[1] < 0:
                raise ValueError(f"bad variable {reprlib.repr(node)}")
            nodes.append((VAR, float(node[1]), output))
            continue
        if head == MODI_TAG:
            if len(node) != 3 or int(node[1]) != node[1] or node[1] < 0:
                raise ValueError(f"bad Modi node {reprlib.repr(node)}; expected ('modi', k, function_node)")
            inner = node[2]
            if not isinstance(inner, tuple) or not inner or inner[0] == MODI_TAG:
                raise ValueError(f"a Modi node must wrap one (non-Modi) node, got {reprlib.repr(inner)}")
            pending.append((inner, int(node[1])))
            continue
        o = int(function_set.opcode(head))
        a = int(arity[o])
        if len(node) - 1 != a:
            raise ValueError(f"{head!r} takes {a} argument(s), got {len(node) - 1}")
        nodes.append((o, 0.0, output))
        pending.extend((kid, -1) for kid in reversed(node[1:]))


def _sizes_one(op: np.ndarray, arity: np.ndarray, where: str) -> np.ndarray:
    """Subtree sizes of one prefix sequence (no padding) by a reverse stack scan; raise if malformed."""
    n = len(op)
    sizes = np.zeros(n, np.int64)
    stack: list[int] = []
    for i in range(n - 1, -1, -1):
        a = int(arity[op[i]])
        if len(stack) < a:
            raise ValueError(f"{where}, position {i}: opcode {op[i]} needs {a} children, the tree ends first")
        s = 1 + sum(stack[len(stack) - a :])
        del stack[len(stack) - a :]
        stack.append(s)
        sizes[i] = s
    if len(stack) != 1:
        raise ValueError(f"{where}: the nodes form {len(stack)} trees, not one (size[0] is wrong)")
    return sizes


def subtree_sizes_numpy(opcode: np.ndarray, arity: np.ndarray) -> np.ndarray:
    """Subtree sizes ``[..., L]`` of padded prefix sequences (NumPy; 0 on padding)."""
    opcode = np.asarray(opcode)
    flat = opcode.reshape(-1, opcode.shape[-1])
    sizes = np.zeros(flat.shape, np.int32)
    for t in range(flat.shape[0]):
        n = int(np.sum(flat[t] != PAD))
        if n:
            sizes[t, :n] = _sizes_one(flat[t, :n], arity, f"tree {t}")
    return sizes.reshape(opcode.shape)


def subtree_sizes(opcode: jax.Array, arity: jax.Array | np.ndarray) -> jax.Array:
    """Subtree sizes of padded prefix sequences, jit-able: ``int32 [..., L] -> int32 [..., L]``.

    A reverse scan over positions with a stack of finished subtree sizes: a node of arity ``a``
    pops ``a`` sizes and pushes ``1 + their sum``. ``O(L)`` per tree. Assumes well-formed trees
    (padding only after the tree).
    """
    max_arity = max(int(np.max(np.asarray(arity))), 1)
    arity = jnp.asarray(arity, jnp.int32)
    L = opcode.shape[-1]
    batch = opcode.shape[:-1]
    flat = opcode.reshape(-1, L)
    n = flat.shape[0]
    slots = jnp.arange(L)[None, :]

    def step(carry, o):  # o: [n] opcodes at one position, visited last to first
        stack, top = carry  # [n, L] sizes of finished subtrees, [n] stack height
        a = arity[o]
        kids = jnp.zeros(n, jnp.int32)
        for k in range(max_arity):
            kids += jnp.sum(jnp.where((slots == (top - 1 - k)[:, None]) & (k < a)[:, None], stack, 0), axis=1)
        s = 1 + kids
        is_pad = o == PAD
        new_top = top - a
        stack = jnp.where((slots == new_top[:, None]) & ~is_pad[:, None], s[:, None], stack)
        top = jnp.where(is_pad, top, new_top + 1)
        return (stack, top), jnp.where(is_pad, 0, s)

    init = (jnp.zeros((n, L), jnp.int32), jnp.zeros(n, jnp.int32))
    _, sizes = jax.lax.scan(step, init, flat.T, reverse=True)
    return sizes.T.astype(jnp.int32).reshape(*batch, L)
