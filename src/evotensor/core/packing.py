"""Rows of several arrays packed into one ``int32`` array, bit for bit.

Moving or gathering a pytree of ``[rows, ...]`` arrays costs one operation per leaf; packing the
leaves side by side into one ``int32 [rows, width]`` array makes it one (one all-gather of a
population between devices, one gather of a sorted table's payload). 32-bit leaves travel
bit-cast (NaN payloads, ``-0.0`` and infinities survive), booleans as 0/1.

    packed = pack_rows((forest.opcode, forest.value))    # int32 [pop, 2 * max_len]
    opcode, value = unpack_rows(packed, (forest.opcode, forest.value))
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from evotensor.core.checks import ArgumentError

__all__ = ["all_gather_rows", "from_int32", "packable", "pack_rows", "to_int32", "unpack_rows"]


def packable(dtype: Any) -> bool:
    """Whether leaves of ``dtype`` pack bit for bit: ``bool`` and the 32-bit int, uint and float."""
    d = jnp.dtype(dtype)
    return d == jnp.bool_ or (d.itemsize == 4 and d.kind in "iuf")


def to_int32(a: jax.Array) -> jax.Array:
    """``a`` (``bool`` or 32-bit) as ``int32`` of the same shape: bit-cast, booleans as 0/1.

    Raises:
        ArgumentError: another dtype (it would not come back bit for bit).
    """
    if not packable(a.dtype):
        raise ArgumentError(f"only bool and 32-bit arrays pack into int32, got {jnp.dtype(a.dtype)}")
    if a.dtype == jnp.bool_:
        return a.astype(jnp.int32)
    return a if a.dtype == jnp.int32 else lax.bitcast_convert_type(a, jnp.int32)


def from_int32(x: jax.Array, dtype: Any) -> jax.Array:
    """The inverse of :func:`to_int32`: ``int32`` ``x`` as ``dtype`` (same shape)."""
    if jnp.dtype(dtype) == jnp.bool_:
        return x != 0
    return x if jnp.dtype(dtype) == jnp.int32 else lax.bitcast_convert_type(x, dtype)


def pack_rows(tree: Any) -> jax.Array:
    """Every leaf of ``tree`` (leading axis ``[rows]``, ``bool`` or 32-bit) flattened per row and
    laid side by side: ``int32 [rows, width]``, ``width`` the leaves' per-row sizes summed.

    Raises:
        ArgumentError: a leaf of another dtype, or leaves with different row counts.
    """
    leaves = jax.tree_util.tree_leaves(tree)
    if not leaves:
        raise ArgumentError("pack_rows needs at least one array")
    rows = leaves[0].shape[0] if leaves[0].ndim else None
    if rows is None or any(a.ndim == 0 or a.shape[0] != rows for a in leaves):
        shapes = [a.shape for a in leaves]
        raise ArgumentError(f"pack_rows needs arrays with one leading row count, got shapes {shapes}")
    return jnp.concatenate([to_int32(a).reshape(rows, -1) for a in leaves], axis=1)


def unpack_rows(packed: jax.Array, like: Any) -> Any:
    """The inverse of :func:`pack_rows`: ``packed`` ``int32 [rows, width]`` as a pytree with
    ``like``'s structure, per-row shapes and dtypes (``like``'s row count may differ: a gathered or
    indexed packed array has its own)."""
    leaves, treedef = jax.tree_util.tree_flatten(like)
    out, start = [], 0
    for a in leaves:
        width = math.prod(a.shape[1:])
        part = packed[:, start : start + width].reshape((packed.shape[0],) + tuple(a.shape[1:]))
        out.append(from_int32(part, a.dtype))
        start += width
    if start != packed.shape[-1]:
        raise ArgumentError(f"packed rows have width {packed.shape[-1]}, like needs {start}")
    return jax.tree_util.tree_unflatten(treedef, out)


def all_gather_rows(tree: Any, axis: str) -> Any:
    """Inside ``shard_map``: every device's rows of ``tree`` (leaves ``[rows, ...]``) along mesh
    axis ``axis``, in device order, with one all-gather of the packable leaves packed side by side
    (any other dtype: an all-gather of its own)."""
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    packed = [a for a in leaves if packable(a.dtype)]
    whole = iter(unpack_rows(lax.all_gather(pack_rows(packed), axis, tiled=True), packed) if packed else ())
    out = [next(whole) if packable(a.dtype) else lax.all_gather(a, axis, tiled=True) for a in leaves]
    return jax.tree_util.tree_unflatten(treedef, out)
