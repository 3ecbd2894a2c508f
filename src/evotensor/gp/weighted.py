"""Weighted variables (``w * x``), as Operon has: the masks and the length they need.

With ``weighted_variables=True`` (on :class:`~evotensor.gp.GP`, :class:`~evotensor.gp.TreeGenerator`
and the scikit-learn estimators) every variable leaf a tree gets is a *weighted variable*: the
three-slot prefix subtree ``mul(CONST w, VAR i)``. The encoding is unchanged (every evaluator runs
it as it is); constant optimization tunes ``w`` like any constant and constant mutations perturb it
(Operon initializes a variable's weight from N(0, 1), as the generators here do, and its one-point
mutation perturbs the weights of variables like constants).

A weighted variable is one *unit*: generation builds it whole, crossover and the structural
mutations never choose a point inside it (its ``CONST`` or ``VAR`` slot), point mutation keeps its
``mul`` and changes its variable (or its weight) in place. It counts as one node in every
complexity a user reads (:func:`weighted_length`: the hall of fame's index, the front, parsimony
pressure, NSGA-II's size objective), as in Operon, whose variable nodes carry their weight. It
still takes three slots of ``max_len``.

Any ``mul(CONST, VAR)`` is a weighted variable here: the ``mul``'s first child is a leaf, so its
second child starts two slots after it and the opcodes alone identify the unit (no ``size`` read).

Example::

    fs = FunctionSet(("add", "sub", "mul", "div"))
    forest = generate(key, 100, fs, n_vars=2, max_len=64, weighted_variables=True)
    assert bool(jnp.all(all_weighted(forest.opcode, fs)))
    complexity = weighted_length(forest, fs)          # int32 [100], <= forest.length
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from evotensor.core.checks import ArgumentError
from evotensor.gp.encoding import CONST, VAR, Forest

__all__ = ["all_weighted", "inside_weighted", "mul_opcode", "weighted_heads", "weighted_length"]


def mul_opcode(function_set: Any, name: str = "weighted_variables") -> int:
    """The opcode of ``mul`` in ``function_set``; an :class:`ArgumentError` naming ``name`` (the
    option that needs it) when the set has no ``mul``."""
    if "mul" not in getattr(function_set, "names", ()):
        raise ArgumentError(
            f"{name}=True needs 'mul' in the function set (a weighted variable is mul(w, x)); "
            f"the function set has {tuple(getattr(function_set, 'names', ()))}"
        )
    return int(function_set.opcode("mul"))


def _shift(a: jax.Array, k: int, fill: Any) -> jax.Array:
    """``a`` moved ``k`` slots right along the last axis (``out[..., j] = a[..., j - k]``)."""
    pad = jnp.full((*a.shape[:-1], k), fill, a.dtype)
    return jnp.concatenate([pad, a[..., : a.shape[-1] - k]], axis=-1)


def weighted_heads(opcode: jax.Array, function_set: Any) -> jax.Array:
    """bool ``[..., L]``: the ``mul`` slots of weighted variables (``opcode[j:j+3]`` is
    ``mul, CONST, VAR``)."""
    mul = mul_opcode(function_set)
    L = opcode.shape[-1]
    if L < 3:
        return jnp.zeros(opcode.shape, bool)
    nxt = jnp.concatenate([opcode[..., 1:], jnp.zeros((*opcode.shape[:-1], 1), opcode.dtype)], axis=-1)
    nxt2 = jnp.concatenate([opcode[..., 2:], jnp.zeros((*opcode.shape[:-1], 2), opcode.dtype)], axis=-1)
    return (opcode == mul) & (nxt == CONST) & (nxt2 == VAR)


def inside_weighted(heads: jax.Array) -> jax.Array:
    """bool ``[..., L]``: the ``CONST`` and ``VAR`` slots under a weighted variable's ``mul`` (the
    slots no crossover or structural mutation may choose), from :func:`weighted_heads`."""
    if heads.shape[-1] < 3:
        return jnp.zeros(heads.shape, bool)
    return _shift(heads, 1, False) | _shift(heads, 2, False)


def weighted_length(forest: Forest, function_set: Any) -> jax.Array:
    """The complexity of each tree with a weighted variable counting as one node: int32 ``[...]``
    (``forest.length`` minus two per weighted variable; Operon's length). Vectorized, jittable."""
    heads = weighted_heads(forest.opcode, function_set)
    return (forest.length - 2 * jnp.sum(heads, axis=-1)).astype(jnp.int32)


def all_weighted(opcode: jax.Array, function_set: Any) -> jax.Array:
    """bool ``[...]``: every ``VAR`` of the tree is the ``VAR`` of a weighted variable."""
    heads = weighted_heads(opcode, function_set)
    covered = _shift(heads, 2, False) if opcode.shape[-1] >= 3 else jnp.zeros(opcode.shape, bool)
    return jnp.all((opcode != VAR) | covered, axis=-1)
