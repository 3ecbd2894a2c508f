"""Indexing every leaf of a tree: ``t[idx]`` and :func:`evotensor.tree.index`.

An eager ``x[idx]`` on a JAX array runs JAX's Python indexing logic and dispatches one or more
primitives for every leaf, which costs far more than one jitted call (figures in
``benchmarks/results_tree.md``). So the concrete JAX leaves of a tree are indexed in ONE jitted
call for the whole tree, as ``stack``/``split`` do. NumPy, PyTorch and other leaves are indexed
directly (no XLA involved), and so is every leaf inside traced code.

The index goes into the call as a static *spec* plus dynamic operands:
- Python/NumPy integers and integer arrays (NumPy or JAX) are dynamic operands, so ``t[i]`` in a
  loop over ``i`` compiles once per tree structure, not once per ``i``. A concrete integer (or an
  integer array's entry) out of range for a leaf's axis raises ``IndexError`` naming the leaf path
  and the axis size, as NumPy does; JAX alone would clamp it to the last element. Inside traced
  code (traced leaves or a traced index) JAX's clamping applies: nothing can raise there.
- slices (with integer or None bounds), ``None`` and ``...`` are static, so each distinct slice
  compiles once per tree structure (an eager slice also compiles per distinct bounds).
- anything else (booleans, boolean masks, lists, tracers, floats) is indexed leaf by leaf with
  the original index, exactly as before.
If the one call raises (e.g. too many indices for one leaf), the JAX leaves are indexed again one
by one: the error then carries a note naming the leaf path, and a call that only the batched form
rejects (e.g. an integer beyond int32 range) still gets the eager result.

The machinery, :func:`index_leaves` (which ``t[idx]`` calls), is in the private module
:mod:`evotensor.tree._core`, next to ``Tree``; this module re-exports it and holds :func:`index`.
"""

from __future__ import annotations

from typing import Any

from evotensor.tree._core import Tree, _require_tree, index_leaves

__all__ = ["index", "index_leaves"]


def index(t: Tree, idx: Any, axis: int = 0) -> Tree:
    """``leaf[..., idx, ...]`` at ``axis`` for every leaf (``axis=0`` is ``t[idx]``).

    JAX leaves are indexed in one compiled call for the whole tree (integers and integer arrays
    in ``idx`` are operands of that call, so a loop over ``i`` compiles once); NumPy and PyTorch
    leaves with their own indexing. The result equals indexing each leaf on its own.
    Dtype, device, ndim and shape-prefix constraints are carried to the result where provable.
    """
    _require_tree(t, "index")
    if axis == 0:
        return index_leaves(t, idx)
    if axis > 0:
        return index_leaves(t, (*(slice(None),) * axis, idx))
    return index_leaves(t, (Ellipsis, idx, *(slice(None),) * (-axis - 1)))
