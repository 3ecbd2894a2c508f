"""Random tree generation: full, grow and ramped half-and-half, vectorized over the population.

Every tree is built in prefix order by one ``lax.scan`` over the ``max_len`` slots with a stack of
pending child depths, batched over the population (static shapes, no host round-trips); subtree
sizes follow from the stack heights the scan records (no second scan). Trees of depth at most 1
(insert mutation's) are built in closed form, without a scan, from the same uniforms.

At a node of depth ``d`` in a tree whose depth bound is ``D`` (root depth 0):

* ``d >= D``: a leaf;
* *full*: a function while ``d < D``;
* *grow*: a function while ``d < min_depth``, then a leaf with probability ``leaf_prob[d]``;
* a function is only chosen if its children still fit into ``max_len`` (counting the slots already
  promised to pending children), so **every generated tree is valid and at most ``max_len`` long**;
  a full tree that would not fit is cut short by leaves where the budget runs out.

Functions are drawn by ``function_weights`` (uniform by default). A leaf is a constant with
probability ``const_prob`` (uniform in the continuous ``const_range``), otherwise a variable drawn
from ``n_vars`` by ``variable_weights`` (uniform by default). With ``n_outputs > 1`` a function
node becomes a Modi node with probability ``modi_prob``, its output uniform in ``[0, n_outputs)``.

With ``weighted_variables=True`` a variable leaf is a weighted variable ``mul(CONST w, VAR i)``
(:mod:`evotensor.gp.weighted`), ``w`` drawn from N(0, 1) as Operon initializes its variables'
weights: the scan places the ``mul`` like a function and pushes its two leaves, already decided, onto
the stack of pending children (so the trees stay prefix-ordered and within ``max_len``). A variable
leaf drawn where fewer than two more slots fit becomes a constant. A weighted variable stands where
the leaf was drawn, so it is a leaf for the depth bounds. Depth-one trees then go through the scan
too (their closed form places plain leaves).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core import rng
from evotensor.core.checks import ArgumentError
from evotensor.gp.encoding import CONST, PAD, VAR, Forest
from evotensor.gp.functions import FunctionSet, table_lookup
from evotensor.gp.weighted import mul_opcode

METHODS = ("full", "grow", "half_and_half")

BELOW_ONE = float(np.nextafter(np.float32(1.0), np.float32(0.0)))


def split_uniform(u: jax.Array, p: float | jax.Array) -> tuple[jax.Array, jax.Array]:
    """Split uniforms ``u`` into Bernoulli(``p``) outcomes and fresh uniforms given those outcomes.

    ``u < p`` happens with probability ``p``, and conditionally on it ``u / p`` is uniform on
    ``[0, 1)``; likewise ``(u - p) / (1 - p)`` given ``u >= p``. Reusing uniforms this way keeps the
    random bits drawn per node few: generating threefry bits, not the arithmetic, dominates the cost
    of variation on CPU.
    """
    hit = u < p
    safe_p = jnp.where(p > 0, p, 1.0)
    safe_q = jnp.where(p < 1, 1.0 - p, 1.0)
    rest = jnp.where(hit, u / safe_p, (u - p) / safe_q)
    return hit, jnp.clip(rest, 0.0, BELOW_ONE)


@dataclasses.dataclass(frozen=True, eq=False)
class TreeGenerator:
    """Static configuration of random tree generation; call it as ``generator(key, n) -> Forest``.

    Args:
        function_set: a :class:`evotensor.gp.functions.FunctionSet`.
        n_vars: number of input variables (``>= 0``; with 0 every leaf is a constant).
        max_len: slots per tree (every tree fits).
        min_depth, max_depth: depth bounds (root depth 0); each tree draws its depth bound
            uniformly in ``[min_depth, max_depth]`` (ramping).
        method: ``"full"``, ``"grow"`` or ``"half_and_half"`` (each tree full or grow by a coin flip).
        leaf_prob: grow's probability that a node at depth ``d >= min_depth`` is a leaf: a float or a
            per-depth sequence (depths past its end use its last entry).
        const_prob: probability that a leaf is a constant (1.0 if ``n_vars == 0``).
        const_range: ``(low, high)`` of the continuous uniform constants.
        n_outputs: number of outputs (Modi nodes only when ``> 1``).
        modi_prob: probability that a function node is a Modi node.
        function_weights: optional relative weights of the functions (in ``function_set.names``
            order).
        variable_weights: optional relative weights of the ``n_vars`` variables when a leaf is a
            variable (e.g. to make columns of fixed constants appended to the data rarer than the
            features: :mod:`evotensor.gp.terminals`). ``None``: uniform.
        weighted_variables: every variable leaf is ``mul(CONST w, VAR i)`` with ``w ~ N(0, 1)``
            (see the module docstring; needs ``mul`` in ``function_set``). Such a leaf takes three
            of the ``max_len`` slots.
    """

    function_set: Any
    n_vars: int
    max_len: int
    min_depth: int = 2
    max_depth: int = 6
    method: str = "half_and_half"
    leaf_prob: float | Sequence[float] = 0.3
    const_prob: float = 0.5
    const_range: tuple[float, float] = (-1.0, 1.0)
    n_outputs: int = 1
    modi_prob: float = 0.0
    function_weights: Sequence[float] | None = None
    variable_weights: Sequence[float] | None = None
    weighted_variables: bool = False

    def __post_init__(self):
        def bad(name, why):
            raise ValueError(f"{name} {why}, got {getattr(self, name)!r}")

        for name in ("n_vars", "max_len", "min_depth", "max_depth", "n_outputs"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                bad(name, "must be an int")
        if self.n_vars < 0:
            bad("n_vars", "must be >= 0")
        if self.max_len < 1:
            bad("max_len", "must be >= 1")
        if not 0 <= self.min_depth <= self.max_depth:
            raise ValueError(f"need 0 <= min_depth <= max_depth, got ({self.min_depth}, {self.max_depth})")
        if self.method not in METHODS:
            bad("method", f"must be one of {METHODS}")
        try:
            lp = np.atleast_1d(np.asarray(self.leaf_prob, np.float64))
        except (TypeError, ValueError):
            lp = np.full(0, np.nan)
        if lp.ndim != 1 or lp.size == 0 or not np.all((lp >= 0) & (lp <= 1)):  # NaN fails too
            bad("leaf_prob", "must be a probability or a sequence of probabilities")
        if not 0 <= self.const_prob <= 1:
            bad("const_prob", "must be in [0, 1]")
        lo, hi = self.const_range
        if not (np.isfinite(lo) and np.isfinite(hi) and lo <= hi):
            bad("const_range", "must be a finite (low, high) with low <= high")
        if self.n_outputs < 1:
            bad("n_outputs", "must be >= 1")
        if not 0 <= self.modi_prob <= 1:
            bad("modi_prob", "must be in [0, 1]")
        if not isinstance(self.function_set, FunctionSet):
            raise ArgumentError(f"function_set must be a FunctionSet, got {type(self.function_set).__name__}")
        arity = np.asarray(self.function_set.arity)
        n_funcs = int(np.sum(arity > 0))
        if n_funcs == 0:
            raise ValueError("function_set has no functions")
        if self.function_weights is not None:
            w = np.asarray(self.function_weights, np.float64)
            if w.shape != (n_funcs,) or np.any(w < 0) or not np.any(w > 0):
                bad("function_weights", f"must be {n_funcs} non-negative weights, not all zero")
        if self.variable_weights is not None:
            w = np.asarray(self.variable_weights, np.float64)
            if w.shape != (self.n_vars,) or not np.all(w >= 0) or not np.any(w > 0):  # NaN fails too
                bad("variable_weights", f"must be {self.n_vars} non-negative weights, not all zero")
        if not isinstance(self.weighted_variables, (bool, np.bool_)):
            bad("weighted_variables", "must be a bool")
        if self.weighted_variables:
            object.__setattr__(self, "_mul", mul_opcode(self.function_set))

    # -- tables (NumPy constants baked into the trace) -----------------------------------------
    def _tables(self):
        arity = np.asarray(self.function_set.arity, np.int32)
        is_func = arity > 0
        weights = np.zeros(len(arity), np.float32)
        weights[is_func] = 1.0 if self.function_weights is None else np.asarray(self.function_weights)
        leaf_prob = np.atleast_1d(np.asarray(self.leaf_prob, np.float32))
        depths = np.arange(self.max_len + 1)
        leaf_by_depth = leaf_prob[np.minimum(depths, leaf_prob.size - 1)]
        return arity, weights, leaf_by_depth

    def __call__(self, key: jax.Array, n: int) -> Forest:
        """Generate ``n`` random trees: Forest ``[n, max_len]`` (jit-able; ``n`` static)."""
        # one random call for everything (each call site costs compile time)
        return self.from_uniforms(rng.uniform(key, self.uniform_shape(n)))

    def uniform_shape(self, n: int) -> tuple[int, int, int]:
        """Shape of the uniforms that generating ``n`` trees consumes: ``(max_len + 1, 2, n)``."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"n must be a positive int, got {n!r}")
        return (self.max_len + 1, 2, int(n))

    def from_uniforms(self, u: jax.Array) -> Forest:
        """The trees that ``generator(key, n)`` builds from ``u = uniform(key, uniform_shape(n))``
        (lets a caller draw the uniforms of several operators in one random call)."""
        if u.ndim != 3 or u.shape[:2] != (self.max_len + 1, 2):
            raise ValueError(f"u must have shape ({self.max_len + 1}, 2, n), got {u.shape}")
        n = u.shape[2]
        n_bounds = self.max_depth - self.min_depth + 1
        depth_bound = self.min_depth + jnp.minimum(jnp.floor(u[-1, 0] * n_bounds), n_bounds - 1).astype(
            jnp.int32
        )
        if self.method == "full":
            full = jnp.ones(n, bool)
        elif self.method == "grow":
            full = jnp.zeros(n, bool)
        else:
            full = u[-1, 1] < 0.5
        if self.max_depth <= 1 and not self.weighted_variables:  # a root and its leaves: no scan needed
            opcode, value, output, size = self._depth_one(u[:-1], depth_bound, full)
        else:
            opcode, value, output, height = self._batch(u[:-1], depth_bound, full)
            size = _sizes_from_heights(height)
        return Forest(opcode=opcode, value=value, size=size, output=output)

    def _node(self, r0, r1, d, budget, depth_bound, full):
        """One node at depth ``d [n]`` given its uniforms ``r0, r1 [n]`` and the child slots left
        (``budget [n]``): ``(opcode, value, output, arity)``, shared by the scan and the closed form
        so that both build the same trees from the same uniforms."""
        L = self.max_len
        arity_np, weights_np, leaf_np = self._tables()
        arity = jnp.asarray(arity_np)
        weights = jnp.asarray(weights_np)
        leaf_by_depth = jnp.asarray(leaf_np)
        modi_prob = float(self.modi_prob) if self.n_outputs > 1 else 0.0
        # r0: leaf-or-function, then (reused) the function; r1: the leaf, or the Modi output
        p_leaf = jnp.where(full | (d < self.min_depth), 0.0, leaf_by_depth[jnp.minimum(d, L)])
        leaf_draw, r_func = split_uniform(r0, p_leaf)
        want_func = (d < depth_bound) & ~leaf_draw
        w = jnp.where(arity[None, :] <= budget[:, None], weights[None, :], 0.0)  # [n, n_opcodes]
        total = jnp.sum(w, axis=1)
        is_func = want_func & (total > 0)
        func = jnp.argmax(jnp.cumsum(w, axis=1) > (r_func * total)[:, None], axis=1).astype(jnp.int32)
        leaf_op, leaf_val = self._leaf(r1, budget)
        opcode = jnp.where(is_func, func, leaf_op)
        value = jnp.where(is_func, 0.0, leaf_val)
        modi_draw, r_out = split_uniform(r1, modi_prob)
        is_modi = is_func & modi_draw
        out = jnp.where(is_modi, jnp.minimum(jnp.floor(r_out * self.n_outputs), self.n_outputs - 1), -1)
        a = jnp.where(is_func, table_lookup(arity_np, opcode), 0)
        return opcode, value, out, a

    def _leaf(self, r1, budget=None):
        """A leaf from its uniform ``r1``: ``(opcode, value)`` (constant with ``const_prob``). With
        weighted variables a variable leaf is returned as its ``mul`` (value: the variable index;
        the scan pushes its two leaves), or as a constant where ``budget [n]`` (child slots left)
        is under 2."""
        lo, hi = (float(c) for c in self.const_range)
        is_const, r_leaf = split_uniform(r1, 1.0 if self.n_vars == 0 else float(self.const_prob))
        if self.variable_weights is None:
            var = jnp.minimum(jnp.floor(r_leaf * self.n_vars), max(self.n_vars - 1, 0))
        else:  # inverse CDF: the first variable whose cumulative weight exceeds r_leaf
            w = np.asarray(self.variable_weights, np.float64)
            cdf = jnp.asarray((np.cumsum(w) / np.sum(w))[:-1], jnp.float32)
            var = jnp.sum(r_leaf[..., None] >= cdf, axis=-1).astype(jnp.float32)
        cval = lo + (hi - lo) * r_leaf
        if self.weighted_variables:
            is_const = is_const | (budget < 2)
            return jnp.where(is_const, CONST, self._mul), jnp.where(is_const, cval, var)
        return jnp.where(is_const, CONST, VAR), jnp.where(is_const, cval, var)

    def _depth_one(self, u: jax.Array, depth_bound: jax.Array, full: jax.Array):
        """Trees of depth <= 1 in closed form, equal to what the scan of :meth:`_batch` builds from
        the same uniforms: slot 0 is the root (a function only if its children fit), slots
        ``1 .. arity`` its leaves (each from its own slot's uniforms), padding after."""
        n = depth_bound.shape[0]
        L = self.max_len
        zeros = jnp.zeros(n, jnp.int32)
        r_op, r_val, r_out, a = self._node(u[0, 0], u[0, 1], zeros, zeros + (L - 1), depth_bound, full)
        # every later slot is a depth-1 node, hence a leaf (depth_bound <= 1; no Modi output), made
        # from its slot's r1 as the scan makes it
        l_op, l_val = self._leaf(u[1:, 1])  # [L - 1, n]
        slot = jnp.arange(1, L)[:, None]
        active = slot <= a[None, :]  # [L - 1, n]
        opcode = jnp.concatenate([r_op[None], jnp.where(active, l_op, PAD)], 0)
        value = jnp.concatenate([r_val[None], jnp.where(active, l_val, 0.0)], 0)
        output = jnp.concatenate([r_out[None], jnp.full((L - 1, n), -1, jnp.int32)], 0)
        size = jnp.concatenate([(1 + a)[None], active.astype(jnp.int32)], 0)
        return (
            opcode.T.astype(jnp.int32),
            value.T.astype(jnp.float32),
            output.T.astype(jnp.int32),
            size.T.astype(jnp.int32),
        )

    def _batch(self, u: jax.Array, depth_bound: jax.Array, full: jax.Array):
        """Prefix-order construction of ``n`` trees at once (a scan over slots; the stack of pending
        child depths is updated with one-hot selects, which compile and vectorize well). Also returns
        the stack height before each slot (``[n, L]``; 0 on padding), from which the subtree sizes
        follow without a second scan (:func:`_sizes_from_heights`)."""
        n = depth_bound.shape[0]
        L = self.max_len
        slots = jnp.arange(L)[None, :]

        def step(carry, xs):
            stack, top = carry  # [n, L] pending depths, [n] stack height
            t, r = xs  # r: [2, n]
            height = top
            active = top > 0
            d = jnp.sum(jnp.where(slots == (top - 1)[:, None], stack, 0), axis=1)
            top = jnp.where(active, top - 1, top)
            budget = L - t - 1 - top  # child slots left once this node and the pending ones are placed
            opcode, value, out, a = self._node(r[0], r[1], jnp.maximum(d, 0), budget, depth_bound, full)
            # push a copies of d + 1 onto slots top .. top + a - 1
            push = (slots >= top[:, None]) & (slots < (top + a)[:, None])
            child = jnp.broadcast_to((d + 1)[:, None], stack.shape)
            if self.weighted_variables:
                opcode, value, a, child = self._weighted_step(r, d, opcode, value, a, child, top)
                out = jnp.where(d < 0, -1, out)  # a decided leaf is never a Modi node
                push = (slots >= top[:, None]) & (slots < (top + a)[:, None])
            stack = jnp.where(push, child, stack)
            top = jnp.where(active, top + a, 0)
            opcode = jnp.where(active, opcode, PAD).astype(jnp.int32)
            value = jnp.where(active, value, 0.0).astype(jnp.float32)
            out = jnp.where(active, out, -1).astype(jnp.int32)
            return (stack, top), (opcode, value, out, height)

        init = (jnp.zeros((n, L), jnp.int32), jnp.ones(n, jnp.int32))
        _, (opcode, value, output, height) = jax.lax.scan(step, init, (jnp.arange(L), u))
        return opcode.T, value.T, output.T, height.T

    # A pending entry of the stack is a depth (>= 0) or a leaf a weighted variable's ``mul`` already
    # decided: _WEIGHT for its weight, _VAR_BASE - i for its variable i (negative, so never a depth).
    def _weighted_step(self, r, d, opcode, value, a, child, top):
        """The scan step's node with weighted variables: a popped decided leaf (``d < 0``) becomes
        that leaf (the weight drawn from N(0, 1) by the inverse CDF of this slot's ``r[1]``); a new
        weighted variable's ``mul`` (``opcode == mul`` from :meth:`_leaf` with arity 0, unlike a drawn
        ``mul`` function) gets arity 2 and pushes its variable, then its
        weight on top (popped first: prefix order ``mul, CONST, VAR``)."""
        slots = jnp.arange(child.shape[-1])[None, :]
        forced = d < 0
        is_weight = d == _WEIGHT
        w = jax.scipy.special.ndtri(jnp.clip(r[1], 2.0**-25, BELOW_ONE))
        head = ~forced & (opcode == self._mul) & (a == 0)
        var = value
        opcode = jnp.where(forced, jnp.where(is_weight, CONST, VAR), jnp.where(head, self._mul, opcode))
        value = jnp.where(forced, jnp.where(is_weight, w, (_VAR_BASE - d).astype(jnp.float32)), value)
        value = jnp.where(head, 0.0, value)
        a = jnp.where(forced, 0, jnp.where(head, 2, a))
        decided = jnp.where(slots == top[:, None], (_VAR_BASE - var).astype(jnp.int32)[:, None], _WEIGHT)
        child = jnp.where(head[:, None], decided, child)
        return opcode, value, a, child


_WEIGHT = -1
_VAR_BASE = -2


def _sizes_from_heights(height: jax.Array) -> jax.Array:
    """Subtree sizes ``[n, L]`` of prefix trees from the number of pending subtrees before each slot
    (``height``, ``[n, L]``, 0 on padding).

    Placing node ``i`` takes one pending subtree and adds its children, and the height never drops
    by more than one per slot, so node ``i``'s subtree ends at the first slot ``t > i`` whose height
    is below ``height[i]`` (or at ``L``): ``size[i] = t - i``. An ``[n, L, L]`` comparison fused
    into a min-reduction; cheaper to compile than a second scan over the slots.
    """
    L = height.shape[-1]
    t = jnp.arange(L)
    later = t[None, :] > t[:, None]  # [i, t]
    ends = later[None] & (height[:, None, :] < height[:, :, None])
    end = jnp.min(jnp.where(ends, t[None, None, :], L), axis=-1)
    return jnp.where(height > 0, end - t[None, :], 0).astype(jnp.int32)


def generate(
    key: jax.Array,
    n: int,
    function_set: Any,
    n_vars: int,
    max_len: int,
    *,
    min_depth: int = 2,
    max_depth: int = 6,
    method: str = "half_and_half",
    leaf_prob: float | Sequence[float] = 0.3,
    const_prob: float = 0.5,
    const_range: tuple[float, float] = (-1.0, 1.0),
    n_outputs: int = 1,
    modi_prob: float = 0.0,
    function_weights: Sequence[float] | None = None,
    variable_weights: Sequence[float] | None = None,
    weighted_variables: bool = False,
) -> Forest:
    """``n`` random trees, Forest ``[n, max_len]``; see :class:`TreeGenerator` for the arguments.

    Example::

        fs = FunctionSet(("add", "sub", "mul", "div"))
        forest = generate(jax.random.key(0), 100, fs, n_vars=2, max_len=64, max_depth=5)
        forest.check(fs)
    """
    gen = TreeGenerator(
        function_set=function_set,
        n_vars=n_vars,
        max_len=max_len,
        min_depth=min_depth,
        max_depth=max_depth,
        method=method,
        leaf_prob=leaf_prob,
        const_prob=const_prob,
        const_range=tuple(const_range),
        n_outputs=n_outputs,
        modi_prob=modi_prob,
        function_weights=function_weights,
        variable_weights=variable_weights,
        weighted_variables=weighted_variables,
    )
    return gen(key, n)
