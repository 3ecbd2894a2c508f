"""Test helpers: random pointer trees (nested tuples) and slow reference operations on them.

A pointer tree is the nested-tuple form of :meth:`Forest.from_tuples`; nodes are numbered in prefix
order. These helpers never look at sizes or padding, so they are an independent reference for the
tensor operators.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from evotensor.gp.encoding import Forest
from evotensor.gp.functions import FunctionSet

FS = FunctionSet(("add", "sub", "mul", "div", "sin", "neg", "if_then_else"))
N_VARS = 3
ARITY = {n: int(FS.arity[FS.opcode(n)]) for n in FS.names}


def count(tree) -> int:
    """Number of nodes of a pointer tree."""
    if tree[0] == "modi":
        return count(tree[2])
    if tree[0] in ("const", "var"):
        return 1
    return 1 + sum(count(k) for k in tree[1:])


def _children(tree):
    if tree[0] == "modi":
        return None
    if tree[0] in ("const", "var"):
        return []
    return list(tree[1:])


def subtree(tree, p: int):
    """The subtree at prefix index ``p``."""
    if p == 0:
        return tree
    if tree[0] == "modi":
        return subtree(tree[2], p)
    i = 1
    for kid in _children(tree):
        n = count(kid)
        if p < i + n:
            return subtree(kid, p - i)
        i += n
    raise IndexError(p)


def replace(tree, p: int, new):
    """``tree`` with the subtree at prefix index ``p`` replaced by ``new``."""
    if p == 0:
        return new
    if tree[0] == "modi":
        return ("modi", tree[1], replace(tree[2], p, new))
    i = 1
    kids = _children(tree)
    for j, kid in enumerate(kids):
        n = count(kid)
        if p < i + n:
            kids[j] = replace(kid, p - i, new)
            return (tree[0], *kids)
        i += n
    raise IndexError(p)


def is_function(node) -> bool:
    if node[0] == "modi":
        return is_function(node[2])
    return node[0] not in ("const", "var")


def children_of(node):
    if node[0] == "modi":
        return children_of(node[2])
    return [] if node[0] in ("const", "var") else list(node[1:])


@st.composite
def trees(draw, budget: int, n_outputs: int = 1, depth: int = 0):
    """A random pointer tree with at most ``budget`` nodes."""
    leaf = budget < 4 or depth > 6 or draw(st.booleans())
    if leaf:
        if draw(st.booleans()):
            node = ("const", draw(st.floats(-5, 5, width=32, allow_subnormal=False)))
        else:
            node = ("var", draw(st.integers(0, N_VARS - 1)))
    else:
        name = draw(st.sampled_from(FS.names))
        a = ARITY[name]
        kids = []
        left = budget - 1
        for j in range(a):
            share = max(1, (left - (a - j - 1)) // (a - j))
            kid = draw(trees(share, n_outputs, depth + 1))
            left -= count(kid)
            kids.append(kid)
        node = (name, *kids)
        if n_outputs > 1 and draw(st.integers(0, 3)) == 0:
            node = ("modi", draw(st.integers(0, n_outputs - 1)), node)
    return node


@st.composite
def forests(draw, pop: int, max_len: int, n_outputs: int = 1):
    """``(Forest [pop, max_len], list of pointer trees)``."""
    ts = [draw(trees(max_len, n_outputs)) for _ in range(pop)]
    return Forest.from_tuples(ts, max_len, FS), ts


def as_numpy(forest: Forest) -> dict:
    return {f: np.asarray(getattr(forest, f)) for f in ("opcode", "value", "size", "output")}
