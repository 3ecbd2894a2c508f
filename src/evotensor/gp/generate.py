"""Random tree generation: full, grow and ramped half-and-half, vectorized over the population.

Every tree is built in prefix order by one ``lax.scan`` over the ``max_len`` slots with a stack of
pending child depths, ``vmap``-ed over the population (static shapes, no host round-trips). Subtree
sizes then come from :func:`evotensor.gp.encoding.subtree_sizes`.

At a node of depth ``d`` in a tree whose depth bound is ``D`` (root depth 0):

* ``d >= D``: a leaf;
* *full*: a function while ``d < D``;
* *grow*: a function while ``d < min_depth``, then a leaf with probability ``leaf_prob[d]``;
* a function is only chosen if its children still fit into ``max_len`` (counting the slots already
  promised to pending children), so **every generated tree is valid and at most ``max_len`` long**;
  a full tree that would not fit is cut short by leaves where the budget runs out.

Functions are drawn by ``function_weights`` (uniform by default). A leaf is a constant with
probability ``const_prob`` (uniform in the continuous ``const_range``), otherwise a variable drawn
uniformly from ``n_vars``. With ``n_outputs > 1`` a function node becomes a Modi node with
probability ``modi_prob``, its output uniform in ``[0, n_outputs)``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.gp.encoding import CONST, PAD, VAR, Forest, subtree_sizes

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


def batched_uniforms(
    keys: Sequence[jax.Array], shapes: Sequence[tuple[int, ...]], max_waste: int = 4, slack: int = 16384
) -> list[jax.Array]:
    """``[jax.random.uniform(k, s) for k, s in zip(keys, shapes)]`` in as few random calls as possible.

    Every random call site compiles its own threefry loop, and on CPU XLA's compile time grows with
    the number of kernels: in a GP generation the ~15 separate draws of the operators were half of
    the variation's compile time. Here the keys are stacked and drawn by one ``vmap``-ed call per
    group, every key drawing the group's largest size and keeping the prefix it needs. With
    ``jax_threefry_partitionable`` (JAX's default) element ``i`` of a draw depends only on the key
    and ``i``, so the result equals the separate calls bit for bit; without it, it is still i.i.d.
    uniform, just a different stream. Draws are grouped by size (largest first) so that a group
    draws at most ``max_waste`` times what it keeps plus ``slack`` elements.

    Args:
        keys: scalar new-style keys, one per draw.
        shapes: one static shape per key.

    Returns:
        float32 uniforms in ``[0, 1)``, one array of ``shapes[i]`` per key.
    """
    if len(keys) != len(shapes):
        raise ValueError(f"need one shape per key, got {len(keys)} keys and {len(shapes)} shapes")
    sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
    groups: list[list[int]] = []
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        if groups:
            g = groups[-1]
            drawn = sizes[g[0]] * (len(g) + 1)
            if drawn <= max_waste * (sum(sizes[j] for j in g) + sizes[i]) + slack:
                g.append(i)
                continue
        groups.append([i])
    out: list[jax.Array] = [None] * len(sizes)  # type: ignore[list-item]
    for g in groups:
        if len(g) == 1:
            out[g[0]] = jax.random.uniform(keys[g[0]], shapes[g[0]])
            continue
        stacked = jnp.stack([keys[i] for i in g])
        draws = jax.vmap(lambda k, m=sizes[g[0]]: jax.random.uniform(k, (m,)))(stacked)
        for row, i in enumerate(g):
            out[i] = draws[row, : sizes[i]].reshape(shapes[i])
    return out


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
        lp = np.atleast_1d(np.asarray(self.leaf_prob, np.float64))
        if lp.ndim != 1 or lp.size == 0 or np.any((lp < 0) | (lp > 1)):
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
        arity = np.asarray(self.function_set.arity)
        n_funcs = int(np.sum(arity > 0))
        if n_funcs == 0:
            raise ValueError("function_set has no functions")
        if self.function_weights is not None:
            w = np.asarray(self.function_weights, np.float64)
            if w.shape != (n_funcs,) or np.any(w < 0) or not np.any(w > 0):
                bad("function_weights", f"must be {n_funcs} non-negative weights, not all zero")

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
        return self.from_uniforms(jax.random.uniform(key, self.uniform_shape(n)))

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
        opcode, value, output = self._batch(u[:-1], depth_bound, full)
        arity, _, _ = self._tables()
        size = subtree_sizes(opcode, arity)
        return Forest(opcode=opcode, value=value, size=size, output=output)

    def _batch(self, u: jax.Array, depth_bound: jax.Array, full: jax.Array):
        """Prefix-order construction of ``n`` trees at once (a scan over slots; the stack of pending
        child depths is updated with one-hot selects, which compile and vectorize well)."""
        n = depth_bound.shape[0]
        L = self.max_len
        arity_np, weights_np, leaf_np = self._tables()
        arity = jnp.asarray(arity_np)
        weights = jnp.asarray(weights_np)
        leaf_by_depth = jnp.asarray(leaf_np)
        max_arity = int(arity_np.max())
        lo, hi = (float(c) for c in self.const_range)
        const_prob = 1.0 if self.n_vars == 0 else float(self.const_prob)
        modi_prob = float(self.modi_prob) if self.n_outputs > 1 else 0.0
        slots = jnp.arange(L)[None, :]

        def step(carry, xs):
            stack, top = carry  # [n, L] pending depths, [n] stack height
            t, r = xs  # r: [2, n]
            active = top > 0
            d = jnp.sum(jnp.where(slots == (top - 1)[:, None], stack, 0), axis=1)
            top = jnp.where(active, top - 1, top)
            budget = L - t - 1 - top  # child slots left once this node and the pending ones are placed
            # r[0]: leaf-or-function, then (reused) the function; r[1]: the leaf, or the Modi output
            p_leaf = jnp.where(full | (d < self.min_depth), 0.0, leaf_by_depth[jnp.minimum(d, L)])
            leaf_draw, r_func = split_uniform(r[0], p_leaf)
            want_func = (d < depth_bound) & ~leaf_draw
            w = jnp.where(arity[None, :] <= budget[:, None], weights[None, :], 0.0)  # [n, n_opcodes]
            total = jnp.sum(w, axis=1)
            is_func = want_func & (total > 0)
            func = jnp.argmax(jnp.cumsum(w, axis=1) > (r_func * total)[:, None], axis=1).astype(jnp.int32)
            is_const, r_leaf = split_uniform(r[1], const_prob)
            var = jnp.minimum(jnp.floor(r_leaf * self.n_vars), max(self.n_vars - 1, 0))
            cval = lo + (hi - lo) * r_leaf
            opcode = jnp.where(is_func, func, jnp.where(is_const, CONST, VAR))
            value = jnp.where(is_func, 0.0, jnp.where(is_const, cval, var))
            modi_draw, r_out = split_uniform(r[1], modi_prob)
            is_modi = is_func & modi_draw
            out = jnp.where(is_modi, jnp.minimum(jnp.floor(r_out * self.n_outputs), self.n_outputs - 1), -1)
            a = jnp.where(is_func, arity[opcode], 0)
            # push a copies of d + 1 onto slots top .. top + a - 1
            push = (slots >= top[:, None]) & (slots < (top + a)[:, None])
            stack = jnp.where(push, (d + 1)[:, None], stack)
            top = jnp.where(active, top + a, 0)
            opcode = jnp.where(active, opcode, PAD).astype(jnp.int32)
            value = jnp.where(active, value, 0.0).astype(jnp.float32)
            out = jnp.where(active, out, -1).astype(jnp.int32)
            return (stack, top), (opcode, value, out)

        del max_arity
        init = (jnp.zeros((n, L), jnp.int32), jnp.ones(n, jnp.int32))
        _, (opcode, value, output) = jax.lax.scan(step, init, (jnp.arange(L), u))
        return opcode.T, value.T, output.T


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
    )
    return gen(key, n)
