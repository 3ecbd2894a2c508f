"""A pure-``jax.numpy`` evaluator of ONE prefix-encoded tree: differentiable, vmappable, per-tree data.

:func:`evaluate_tree` runs one tree (the four ``[max_len]`` arrays of a
:class:`~evotensor.gp.encoding.Forest` row) on its own data ``X``. It is the building block for
what the fast forest paths (:func:`evotensor.gp.evaluate`, shared data for the whole population)
do not give:

* **derivatives** with respect to the node values (the constants): forward mode (``jax.jvp``,
  ``jax.jacfwd``) and reverse mode (``jax.grad``, ``jax.vjp``), correct wherever the tree is
  differentiable; :func:`tree_jacobian` gives the whole Jacobian with respect to the node values
  for the cost of a few forward passes, whatever the number of constants (used by
  :mod:`evotensor.gp.constants`);
* **per-tree data**: ``jax.vmap(evaluate_tree, in_axes=(0, 0, 0, 0, 0, None, None))`` evaluates
  tree ``t`` on its own rows ``X[t]`` (e.g. each control policy on its own observation);
* a plain JAX program that runs unchanged on a CPU and a GPU under ``jit``.

For a population on shared data, :func:`evotensor.gp.evaluate` / :func:`evotensor.gp.fitness` stay
the fast path (block scheduling, costly functions computed only where needed, a GPU kernel).

How it works: one ``lax.scan`` over the ``max_len`` slots in reverse prefix order with a value
buffer ``[max_len + 1, n]``: node ``i`` writes slot ``i``; its children sit at ``i + 1``, then
``+ size`` of the previous child (:func:`evotensor.gp.jax_evaluator.child_slots`), and slot
``max_len`` is a zero sentinel for absent children. Every slot is dispatched by a ``lax.switch``
over the opcodes, so an unbatched tree computes only its node's function; under ``vmap`` over
trees JAX turns the switch into a select over all branches. Each function branch replaces the
arguments of a node that does not select it by 1.0 (a point where every built-in is finite and
differentiable), so an unselected branch's inf or NaN cannot leak into a reverse-mode derivative
through the select's zero cotangent (``0 * inf = nan``).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from evotensor.core.checks import ArgumentError, check_int
from evotensor.gp.functions import CONST, FIRST_FUNCTION, PAD, VAR, FunctionSet
from evotensor.gp.jax_evaluator import child_slots

__all__ = ["evaluate_tree", "tree_jacobian"]


def _shape(x: Any, name: str) -> tuple[int, ...]:
    shape = getattr(x, "shape", None)
    if shape is None:
        raise ArgumentError(f"{name} must be an array, got {type(x).__name__}")
    return tuple(shape)


def _branches(fs: FunctionSet, n_vars: int, n_partials: int) -> list:
    """One ``lax.switch`` branch per opcode: ``branch(op, val, var, XT, a, b, c) -> (node [n],
    partials)``, ``partials`` the node's ``n_partials`` derivatives with respect to its children
    (0 for an absent child and for leaves)."""

    def leaf(value_of):
        def branch(op, val, var, XT, a, b, c):
            return value_of(val, var, XT, a), (jnp.zeros_like(a),) * n_partials

        return branch

    def pad(val, var, XT, a):
        return jnp.zeros_like(a)

    def const(val, var, XT, a):
        return jnp.broadcast_to(val, a.shape).astype(a.dtype)

    def variable(val, var, XT, a):
        if n_vars == 0:
            return jnp.zeros_like(a)
        return lax.dynamic_index_in_dim(XT, var, axis=0, keepdims=False).astype(a.dtype)

    def function(f):
        def branch(op, val, var, XT, a, b, c):
            # a no-op unbatched (the switch picked this branch); under vmap every branch runs for
            # every tree and the mask keeps an unselected node's derivatives finite
            selected = op == f.opcode
            args = tuple(jnp.where(selected, x, jnp.ones_like(x)) for x in (a, b, c)[: f.arity])
            node = f.fn(*args).astype(a.dtype)
            partials = []
            for k in range(n_partials):
                if k >= f.arity:
                    partials.append(jnp.zeros_like(a))
                    continue
                unit = tuple(jnp.ones_like(x) if j == k else jnp.zeros_like(x) for j, x in enumerate(args))
                partials.append(jax.jvp(f.fn, args, unit)[1].astype(a.dtype))
            return node, tuple(partials)

        return branch

    branches = [leaf(pad), leaf(const), leaf(variable)]
    assert (PAD, CONST, VAR, FIRST_FUNCTION) == (0, 1, 2, 3)
    branches += [function(f) for f in fs.functions]
    return branches


def _check_arguments(opcode, value, size, output, X, function_set, n_outputs) -> int:
    """Static checks of :func:`evaluate_tree`'s arguments; returns ``n_outputs``."""
    if not isinstance(function_set, FunctionSet):
        raise ArgumentError(f"function_set must be a FunctionSet, got {type(function_set).__name__}")
    n_outputs = check_int(n_outputs, "n_outputs", minimum=1)
    shapes = {name: _shape(x, name) for name, x in (("opcode", opcode), ("value", value))}
    shapes.update({name: _shape(x, name) for name, x in (("size", size), ("output", output))})
    if len(shapes["opcode"]) != 1 or shapes["opcode"][0] < 1:
        raise ArgumentError(f"opcode must have shape [max_len] (one tree), got {shapes['opcode']}")
    for name, shape in shapes.items():
        if shape != shapes["opcode"]:
            raise ArgumentError(f"{name} must have opcode's shape {shapes['opcode']}, got {shape}")
    X_shape = _shape(X, "X")
    if len(X_shape) != 2:
        raise ArgumentError(f"X must have shape [n, n_vars], got {X_shape}")
    return n_outputs


def _node_values(
    opcode,
    value,
    size,
    output,
    X,
    fs: FunctionSet,
    n_outputs: int,
    partials: bool = False,
    skip_padding=False,
):
    """The scan: ``(buf [L + 1, n], outs [n_outputs or 0, n], D)``; ``buf[i]`` is the value node
    ``i`` passes to its parent (its own value unless it is a Modi function node), ``buf[L]`` zeros;
    with ``partials``, ``D [max_arity, L, n]`` holds every node's derivatives with respect to its
    children, else ``None``. ``skip_padding``: loop over the tree's own nodes only (a while loop;
    no reverse-mode AD through it)."""
    n, n_vars = X.shape
    L = opcode.shape[0]
    dtype = jnp.result_type(jnp.float32, value, X)
    opcode = jnp.asarray(opcode, jnp.int32)
    value = jnp.asarray(value, dtype)
    size = jnp.asarray(size, jnp.int32)
    output = jnp.asarray(output, jnp.int32)
    XT = jnp.asarray(X, dtype).T  # [n_vars, n]: a variable's column is one dynamic row read
    var = jnp.clip(lax.stop_gradient(value).astype(jnp.int32), 0, max(n_vars - 1, 0))
    c2, c3 = child_slots(size)
    arity = jnp.asarray(fs.arity)
    n_partials = fs.max_arity if partials else 0
    branches = _branches(fs, n_vars, n_partials)
    # With skip_padding (one tree at a time) the partials are computed in the step, by the switch
    # that computes the node (only its own function), and kept beside its value in one buffer row;
    # otherwise after the loop for all nodes at once (XLA's CPU backend copies further carried
    # buffers at every step, and under vmap a wider row costs more than the separate pass).
    in_step = partials and skip_padding
    step_branches = branches if in_step else _branches(fs, n_vars, 0)
    width = 1 + (n_partials if in_step else 0)
    out_ids = jnp.arange(n_outputs, dtype=jnp.int32)[:, None]

    def step(carry, slot):
        buf, outs = carry  # buf [L + 1, width, n]: row j, column 0 holds what node j passes up
        i, op, val, v, j2, j3, k = slot
        a, b, c = (lax.dynamic_index_in_dim(buf, j, axis=0, keepdims=False)[0] for j in (i + 1, j2, j3))
        index = jnp.clip(op, 0, len(branches) - 1)
        node, d = lax.switch(index, step_branches, op, val, v, XT, a, b, c)
        passed = node
        if n_outputs > 1:
            outs = outs + jnp.where(out_ids == k, node[None], jnp.zeros_like(node)[None])
            ar = arity[jnp.clip(op, 0, arity.shape[0] - 1)]
            right = jnp.where(ar == 3, c, jnp.where(ar == 2, b, a))
            passed = jnp.where((k >= 0) & (op >= FIRST_FUNCTION), right, node)
        return (lax.dynamic_update_index_in_dim(buf, jnp.stack([passed, *d]), i, axis=0), outs), None

    buf = jnp.zeros((L + 1, width, n), dtype)
    outs = jnp.zeros((n_outputs if n_outputs > 1 else 0, n), dtype)
    slots = (jnp.arange(L, dtype=jnp.int32), opcode, value, var, c2, c3, output)
    if skip_padding:
        # no reverse-mode AD goes through this path (tree_jacobian derives by hand), so the loop
        # can stop at the tree's length: an unbatched tree skips its padding
        length = jnp.clip(size[0], 1, L)

        def body(k, carry):
            i = length - 1 - k
            return step(carry, tuple(lax.dynamic_index_in_dim(a, i, keepdims=False) for a in slots))[0]

        buf, outs = lax.fori_loop(0, length, body, (buf, outs))
    else:
        (buf, outs), _ = lax.scan(step, (buf, outs), slots, reverse=True)
    if in_step:
        return buf[:, 0], outs, jnp.moveaxis(buf[:L, 1:], 1, 0)
    buf = buf[:, 0]
    if not partials:
        return buf, outs, None
    # every node's partial derivatives at once, after the scan: the step stays one in-place buffer
    # update (XLA's CPU backend copies further carried buffers at every step)
    children = (jnp.minimum(jnp.arange(L) + 1, L), c2, c3)
    a, b, c = (buf[k] for k in children)
    node_partials = jax.vmap(lambda *args: lax.switch(*args)[1], in_axes=(0, None, 0, 0, 0, None, 0, 0, 0))
    index = jnp.clip(opcode, 0, len(branches) - 1)
    D = node_partials(index, branches, opcode, value, var, XT, a, b, c)
    return buf, outs, jnp.stack(D)


def evaluate_tree(
    opcode: jax.Array,
    value: jax.Array,
    size: jax.Array,
    output: jax.Array,
    X: jax.Array,
    function_set: FunctionSet,
    n_outputs: int = 1,
) -> jax.Array:
    """Evaluate one prefix-encoded tree on every row of ``X``.

    Args:
        opcode: ``int32 [L]`` opcodes in prefix order, ``PAD`` after the tree's last node.
        value: ``float [L]`` node values: a constant on ``CONST`` slots, the variable index (a whole
            number) on ``VAR`` slots, ignored elsewhere. Derivatives may be taken with respect to
            it (only the ``CONST`` slots have non-zero derivatives).
        size: ``int32 [L]`` subtree sizes (0 on padding).
        output: ``int32 [L]`` Modi output indices (-1: none); read only when ``n_outputs > 1``.
        X: ``float [n, n_vars]`` rows the tree is evaluated on.
        function_set: the :class:`~evotensor.gp.functions.FunctionSet` the opcodes refer to (static).
        n_outputs: outputs of the tree (static); ``> 1``: Modi semantics.

    Returns:
        ``[n, n_outputs]`` predictions, float32 (float64 when ``value`` or ``X`` is float64 under
        ``jax.enable_x64``).

    Semantics are exactly :func:`evotensor.gp.reference_eval`'s: the function set's raw or protected
    functions (:mod:`evotensor.gp.functions`); with ``n_outputs == 1`` the root's value (output
    indices ignored); with ``n_outputs > 1`` output ``k`` is the sum of the values of the nodes with
    ``output == k`` (0 if none; indices ``>= n_outputs`` count nothing), and a Modi function node
    passes its rightmost child's value to its parent. Non-finite values are kept as computed. The
    tree is assumed well formed (:meth:`evotensor.gp.Forest.check`); variable indices are clipped
    into ``[0, n_vars)``.

    Jittable (the function set and ``n_outputs`` static) and vmappable over trees, over data, or
    both: ``jax.vmap(evaluate_tree, in_axes=(0, 0, 0, 0, 0, None, None))(op, val, size, out, X)``
    with ``X [pop, n, n_vars]`` gives ``[pop, n, n_outputs]``. Differentiable with respect to
    ``value`` in forward and reverse mode. Cost: ``L`` scan steps of ``O(n)`` work (all functions of
    the set per step under ``vmap`` over trees). For many trees on shared data,
    :func:`evotensor.gp.evaluate` is much faster; use this one for gradients and per-tree data.

    Example::

        fs = FunctionSet(("add", "mul", "sin"))
        tree = Forest.from_tuples([("mul", ("const", 2.0), ("sin", ("var", 0)))], 8, fs)[0]
        evaluate_tree(tree.opcode, tree.value, tree.size, tree.output, X, fs)  # 2 sin(x0), [n, 1]
        jax.jacfwd(lambda v: evaluate_tree(tree.opcode, v, tree.size, tree.output, X, fs))(tree.value)
    """
    n_outputs = _check_arguments(opcode, value, size, output, X, function_set, n_outputs)
    buf, outs, _ = _node_values(opcode, value, size, output, X, function_set, n_outputs)
    if n_outputs == 1:
        return buf[0][:, None]
    return outs.T


def tree_jacobian(
    opcode: jax.Array,
    value: jax.Array,
    size: jax.Array,
    X: jax.Array,
    function_set: FunctionSet,
    skip_padding: bool = False,
) -> tuple[jax.Array, jax.Array]:
    """Predictions and their derivatives with respect to every node value, for one single-output tree.

    Args:
        opcode, value, size: ``[L]`` one tree, as in :func:`evaluate_tree`.
        X: ``float [n, n_vars]`` rows.
        function_set: the opcodes' :class:`~evotensor.gp.functions.FunctionSet` (static).
        skip_padding: loop only over the tree's ``size[0]`` nodes (static). Faster for an unbatched
            tree (e.g. under ``lax.map``: 2.5x fewer steps on half-empty trees); under ``vmap``
            over trees it becomes a while loop over the longest tree with a batched predicate,
            slower than the default fixed-length scans.

    Returns:
        ``(f, jacobian)``: ``f [n]`` the tree's value on every row (``evaluate_tree(...)[:, 0]``) and
        ``jacobian [n, L]`` with ``jacobian[r, j] = d f(X[r]) / d value[j]``: non-zero only on ``CONST``
        slots; equal to ``jax.jacfwd`` of :func:`evaluate_tree` where the tree is differentiable.

    The cost does not grow with the number of constants: the forward pass of :func:`evaluate_tree`
    also records every node's partial derivatives with respect to its children (``jax.jvp`` of each
    function, so custom functions work: in the loop's step with ``skip_padding``, else in one pass
    over all nodes after it), and a second loop in prefix order gives each node the derivative of
    the root with respect to it, its parent's times the edge's partial: a few forward passes in
    all, against ``K + 1`` for forward mode over ``K`` constants (which also carries ``K`` tangent
    buffers through the loop); reverse mode would carry an ``[L, n]`` cotangent buffer back. A
    zero partial (the condition of ``if_then_else``, the unselected side of ``max``, a comparison)
    makes the derivatives below it zero even where they are inf or NaN, as forward mode's selects
    do. Output indices are ignored (single output). Jittable and vmappable like :func:`evaluate_tree`.
    """
    output = jnp.full(_shape(opcode, "opcode"), -1, jnp.int32)
    _check_arguments(opcode, value, size, output, X, function_set, 1)
    buf, _, D = _node_values(opcode, value, size, output, X, function_set, 1, True, skip_padding)
    L = buf.shape[0] - 1
    opcode = jnp.asarray(opcode, jnp.int32)
    c2, c3 = child_slots(jnp.asarray(size, jnp.int32))
    slots = jnp.arange(L, dtype=jnp.int32)
    children = (jnp.minimum(slots + 1, L), c2, c3)
    # every node's parent and which child of it the node is (the root and padding: themselves)
    arity = jnp.asarray(function_set.arity)[jnp.clip(opcode, 0, function_set.n_opcodes - 1)]
    parent = jnp.arange(L + 1, dtype=jnp.int32)
    which = jnp.zeros(L + 1, jnp.int32)
    for k in range(function_set.max_arity):
        target = jnp.where(arity > k, children[k], L)  # absent children write to the sentinel
        parent = parent.at[target].set(slots)
        which = which.at[target].set(k)

    def step(adjoint, slot):
        j, p, k = slot  # prefix order: the parent's adjoint is final before its children's
        up = lax.dynamic_index_in_dim(adjoint, p, axis=0, keepdims=False)
        edge = lax.dynamic_slice(D, (k, p, 0), (1, 1, D.shape[2]))[0, 0]
        da = jnp.where((up == 0) | (edge == 0), jnp.zeros_like(up), up * edge)
        da = jnp.where(j == 0, jnp.ones_like(up), da)
        return lax.dynamic_update_index_in_dim(adjoint, da, j, axis=0), None

    adjoint = jnp.zeros((L, buf.shape[1]), buf.dtype)
    order = (slots, parent[:L], which[:L])
    if skip_padding:
        adjoint = lax.fori_loop(
            0,
            jnp.clip(jnp.asarray(size)[0], 1, L),
            lambda j, adj: step(adj, tuple(lax.dynamic_index_in_dim(a, j, keepdims=False) for a in order))[0],
            adjoint,
        )
    else:
        adjoint, _ = lax.scan(step, adjoint, order)
    jacobian = jnp.where((opcode == CONST)[:, None], adjoint, jnp.zeros_like(adjoint))
    return buf[0], jacobian.T
