"""A slow, obviously correct reference interpreter for GP forests (pure Python + NumPy).

Every fast evaluation path is tested against :func:`reference_eval`. It walks each tree
recursively in prefix order (children left to right, parsed by arity, not by the ``size`` array),
checks that the stored subtree sizes agree with what it parsed, and applies
:meth:`FunctionSet.apply_numpy` on float32 NumPy vectors over all data rows.

Output semantics (shared by every path):

* ``n_outputs == 1``: the output is the root's value; ``output`` indices are ignored.
* ``n_outputs > 1`` (Modi multi-output, Zhang & Zhang 2004, as in EvoGP): a node with
  ``output[i] = k >= 0`` adds its own value to output ``k`` and passes the value of its *rightmost
  child* to its parent (a Modi leaf passes its own value). Output ``k`` is the sum of its Modi
  contributions (0 if there are none); indices ``k >= n_outputs`` contribute nothing; the value
  the root passes up is discarded.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from evotensor.gp.functions import CONST, FIRST_FUNCTION, PAD, VAR, FunctionSet


def _field(forest: Any, name: str) -> np.ndarray:
    if not hasattr(forest, name):
        raise ValueError(f"forest has no field {name!r} (expected opcode, value, size, output)")
    return np.asarray(getattr(forest, name))


def _eval_tree(opcode, value, size, output, X, fs: FunctionSet, n_outputs: int) -> np.ndarray:
    n_points = X.shape[0]
    outs = np.zeros((n_outputs, n_points), np.float32)
    arity = fs.arity
    max_len = opcode.shape[0]

    def node(i: int) -> tuple[np.ndarray, np.ndarray, int]:
        """Evaluate the subtree at ``i``: (its value, the value it passes up, index after it)."""
        if i >= max_len:
            raise ValueError(f"tree runs past max_len={max_len} (a function node lacks children)")
        op = int(opcode[i])
        if op == PAD:
            raise ValueError(f"PAD node at position {i} inside a tree")
        if op == CONST:
            children, end = [], i + 1
            val = np.full(n_points, value[i], np.float32)
        elif op == VAR:
            children, end = [], i + 1
            var = float(value[i])
            if var != int(var) or not 0 <= int(var) < X.shape[1]:
                raise ValueError(f"VAR node at {i} has index {var}, X has {X.shape[1]} variables")
            val = X[:, int(var)].astype(np.float32)
        elif FIRST_FUNCTION <= op < fs.n_opcodes:
            children, end = [], i + 1
            for _ in range(int(arity[op])):
                _, passed, end = node(end)
                children.append(passed)
            val = fs.apply_numpy(fs.name(op), *children)
        else:
            raise ValueError(f"opcode {op} at position {i} is not in the function set {fs}")
        if int(size[i]) != end - i:
            raise ValueError(f"size[{i}] = {int(size[i])} but the subtree at {i} has {end - i} nodes")
        k = int(output[i])
        if n_outputs > 1 and k >= 0:
            if k < n_outputs:
                outs[k] = outs[k] + val
            return val, (children[-1] if children else val), end
        return val, val, end

    root, _, end = node(0)
    if np.any(opcode[end:] != PAD):
        raise ValueError(f"non-PAD node after the tree's last node (tree length {end})")
    if n_outputs == 1:
        return root[:, None]
    return outs.T


def reference_eval(forest: Any, X: Any, function_set: FunctionSet, n_outputs: int = 1) -> np.ndarray:
    """Evaluate every tree of a forest on every data row, slowly and obviously correctly.

    Args:
        forest: anything with array fields ``opcode, value, size, output`` of shape
            ``[..., max_len]`` (a :class:`evotensor.gp.Forest`, a single tree ``[max_len]``, or a
            population ``[pop, max_len]``).
        X: ``[n_points, n_vars]`` data.
        function_set: the :class:`FunctionSet` the opcodes refer to.
        n_outputs: number of outputs (see the module docstring for the Modi semantics).

    Returns:
        ``float32 [..., n_points, n_outputs]`` NumPy array.

    Raises:
        ValueError: malformed tree (sizes that disagree with the arities, PAD inside a tree,
            non-PAD after it, a variable index outside ``X``), bad ``X`` or ``n_outputs``.
    """
    if not isinstance(function_set, FunctionSet):
        raise ValueError(f"function_set must be a FunctionSet, got {type(function_set).__name__}")
    if isinstance(n_outputs, bool) or not isinstance(n_outputs, (int, np.integer)) or n_outputs < 1:
        raise ValueError(f"n_outputs must be a positive int, got {n_outputs!r}")
    X = np.asarray(X, np.float32)
    if X.ndim != 2:
        raise ValueError(f"X must be [n_points, n_vars], got shape {X.shape}")
    opcode, value, size, output = (_field(forest, f) for f in ("opcode", "value", "size", "output"))
    if not opcode.shape == value.shape == size.shape == output.shape or opcode.ndim < 1:
        raise ValueError("forest fields opcode, value, size, output must share one shape [..., max_len]")
    batch = opcode.shape[:-1]
    flat = [a.reshape(-1, opcode.shape[-1]) for a in (opcode, value.astype(np.float32), size, output)]
    result = (
        np.stack(
            [
                _eval_tree(*(a[t] for a in flat), X, function_set, int(n_outputs))
                for t in range(flat[0].shape[0])
            ]
        )
        if flat[0].shape[0]
        else np.zeros((0, X.shape[0], n_outputs), np.float32)
    )
    return result.reshape(*batch, X.shape[0], int(n_outputs))
