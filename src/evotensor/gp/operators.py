"""The ten variation operators of the EvoGP paper's table, vectorized over the population.

Structural operators are one or two calls of :func:`evotensor.gp.exchange.exchange`; point and
constant mutations rewrite nodes in place (the tree's shape does not change). Every operator takes a
new-style key and a Forest ``[pop, L]`` and returns ``(forest [pop, L], ok bool [pop])``: ``ok`` is
False where the operator could not apply (no eligible node, or the result would exceed ``L``) and the
tree is returned unchanged; the strategy counts those in its metrics.

Semantics (fixing the known bugs of the reference implementation):

* **multi-point** and **multi-constant** mutation decide *per node* (each node independently with
  probability ``rate``), not once per tree;
* **hoist** picks a node ``q`` *strictly inside* the chosen subtree ``p`` (``p < q < p + size[p]``),
  so a tree never grows;
* **delete** keeps any child of the deleted function node, uniformly;
* crossover points may use Koza's internal/leaf bias (``internal_bias=0.9``: a function node with
  probability 0.9 when the tree has one, else a leaf); ``None`` draws uniformly over all nodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.gp.encoding import CONST, PAD, VAR, Forest
from evotensor.gp.exchange import exchange
from evotensor.gp.generate import BELOW_ONE as _BELOW_ONE
from evotensor.gp.generate import TreeGenerator
from evotensor.gp.generate import split_uniform as _reuse

# ---- node choice -----------------------------------------------------------------------------------


def _node_masks(forest: Forest, function_set: Any) -> tuple[jax.Array, jax.Array]:
    """``(is_node, is_function)`` bool ``[pop, L]``."""
    arity = jnp.asarray(function_set.arity, jnp.int32)
    is_node = forest.opcode != PAD
    return is_node, is_node & (arity[forest.opcode] > 0)


def _uniform_choice(u: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """One index per row, uniform over the True entries of ``mask [pop, L]`` given uniforms
    ``u [pop]``; ``(idx, any)``."""
    count = jnp.sum(mask, axis=-1)
    k = jnp.minimum(jnp.floor(u * count), jnp.maximum(count - 1, 0)).astype(jnp.int32)
    # The (k+1)-th True entry is the first slot whose running count exceeds k, i.e. the number of
    # slots whose running count is <= k (running counts never decrease). The running count is a
    # product with an upper-triangular matrix of ones (exact: integers <= L in float32): on CPU a
    # library call, where a cumsum becomes a reduce-window kernel and argmax a variadic reduction,
    # which cost compile time at every one of the ~12 call sites of a generation.
    L = mask.shape[-1]
    running = jnp.dot(mask.astype(jnp.float32), jnp.asarray(np.triu(np.ones((L, L), np.float32))))
    idx = jnp.sum(running <= k[..., None].astype(jnp.float32), axis=-1, dtype=jnp.int32)
    has = count > 0
    return jnp.where(has, idx, 0), has


def random_nodes(
    key: jax.Array, forest: Forest, function_set: Any, internal_bias: float | jax.Array | None = None
) -> jax.Array:
    """One node index per tree, int32 ``[pop]``.

    ``internal_bias=None``: uniform over the tree's nodes. Otherwise Koza's bias: with probability
    ``internal_bias`` a uniform function node (if the tree has any), else a uniform leaf.
    """
    u = jax.random.uniform(key, (3, forest.opcode.shape[0]))
    return _random_nodes(u, forest, function_set, internal_bias)


def _random_nodes(u: jax.Array, forest: Forest, function_set: Any, internal_bias) -> jax.Array:
    """:func:`random_nodes` given uniforms ``u [3, pop]`` (one random call per operator keeps the
    compiled program small)."""
    is_node, is_func = _node_masks(forest, function_set)
    if internal_bias is None:
        return _uniform_choice(u[0], is_node)[0]
    func_idx, has_func = _uniform_choice(u[0], is_func)
    leaf_idx, _ = _uniform_choice(u[1], is_node & ~is_func)
    want_func = u[2] < internal_bias
    return jnp.where(want_func & has_func, func_idx, leaf_idx)


# ---- crossover --------------------------------------------------------------------------------------


def one_point_crossover(
    key: jax.Array,
    recipients: Forest,
    donors: Forest,
    function_set: Any,
    internal_bias: float | jax.Array | None = None,
) -> tuple[Forest, jax.Array]:
    """Replace a random subtree of each recipient by a random subtree of its donor.

    Args:
        recipients, donors: Forests ``[pop, L]`` (row ``j`` is one parent pair).
        internal_bias: Koza's function-node probability for both crossover points (None: uniform).
    """
    (u,) = _draw(key, uniform_shapes("one_point_crossover", recipients.opcode.shape[0]))
    return _one_point_crossover(u, recipients, donors, function_set, internal_bias)


def _one_point_crossover(u, recipients, donors, function_set, internal_bias=None):
    p = _random_nodes(u[:3], recipients, function_set, internal_bias)
    q = _random_nodes(u[3:], donors, function_set, internal_bias)
    return exchange(recipients, p, donors, q)


def leaf_biased_crossover(
    key: jax.Array, recipients: Forest, donors: Forest, function_set: Any, leaf_bias: float | jax.Array = 0.3
) -> tuple[Forest, jax.Array]:
    """One-point crossover whose points are both leaves with probability ``leaf_bias`` (per pair),
    otherwise both uniform over all nodes (EvoGP's leaf-biased crossover)."""
    (u,) = _draw(key, uniform_shapes("leaf_biased_crossover", recipients.opcode.shape[0]))
    return _leaf_biased_crossover(u, recipients, donors, function_set, leaf_bias)


def _leaf_biased_crossover(u, recipients, donors, function_set, leaf_bias=0.3):
    r_node, r_func = _node_masks(recipients, function_set)
    d_node, d_func = _node_masks(donors, function_set)
    leaves = u[0] < leaf_bias
    p = jnp.where(leaves, _uniform_choice(u[1], r_node & ~r_func)[0], _uniform_choice(u[1], r_node)[0])
    q = jnp.where(leaves, _uniform_choice(u[2], d_node & ~d_func)[0], _uniform_choice(u[2], d_node)[0])
    return exchange(recipients, p, donors, q)


# ---- structural mutations ---------------------------------------------------------------------------


def _pad_to(forest: Forest, max_len: int) -> Forest:
    extra = max_len - forest.max_len
    if extra <= 0:
        return forest
    widths = [(0, 0)] * (forest.opcode.ndim - 1) + [(0, extra)]
    return Forest(
        opcode=jnp.pad(forest.opcode, widths),
        value=jnp.pad(forest.value, widths),
        size=jnp.pad(forest.size, widths),
        output=jnp.pad(forest.output, widths, constant_values=-1),
    )


def subtree_mutation(
    key: jax.Array, forest: Forest, generator: TreeGenerator, internal_bias: float | jax.Array | None = None
) -> tuple[Forest, jax.Array]:
    """Replace a random subtree of each tree by a fresh random tree from ``generator``."""
    us = _draw(key, uniform_shapes("subtree_mutation", forest.opcode.shape[0], generator=generator))
    return _subtree_mutation(us, forest, generator, internal_bias)


def _subtree_mutation(us, forest, generator, internal_bias=None):
    p = _random_nodes(us[0], forest, generator.function_set, internal_bias)
    fresh = generator.from_uniforms(us[1])
    return exchange(forest, p, fresh, jnp.zeros_like(p))


def hoist_mutation(key: jax.Array, forest: Forest, function_set: Any) -> tuple[Forest, jax.Array]:
    """Replace a random function node's subtree by a random subtree strictly inside it.

    ``p`` is uniform over function nodes, ``q`` uniform over ``(p, p + size[p])``; trees without a
    function node are unchanged (``ok`` False).
    """
    (u,) = _draw(key, uniform_shapes("hoist_mutation", forest.opcode.shape[0]))
    return _hoist_mutation(u, forest, function_set)


def _hoist_mutation(u, forest, function_set):
    _, is_func = _node_masks(forest, function_set)
    p, has_func = _uniform_choice(u[0], is_func)
    s = jnp.take_along_axis(forest.size, p[:, None], axis=1)[:, 0]
    q = p + 1 + jnp.minimum(jnp.floor(u[1] * (s - 1)), jnp.maximum(s - 2, 0)).astype(jnp.int32)
    p = jnp.where(has_func, p, -1)  # an invalid position makes exchange return the tree unchanged
    return exchange(forest, p, forest, q)


def delete_mutation(key: jax.Array, forest: Forest, function_set: Any) -> tuple[Forest, jax.Array]:
    """Replace a random function node by one of its children (uniform over its children)."""
    (u,) = _draw(key, uniform_shapes("delete_mutation", forest.opcode.shape[0]))
    return _delete_mutation(u, forest, function_set)


def _delete_mutation(u, forest, function_set):
    arity = jnp.asarray(function_set.arity, jnp.int32)
    _, is_func = _node_masks(forest, function_set)
    p, has_func = _uniform_choice(u[0], is_func)
    L = forest.max_len
    a = arity[jnp.take_along_axis(forest.opcode, p[:, None], axis=1)[:, 0]]
    c = jnp.minimum(jnp.floor(u[1] * a), jnp.maximum(a - 1, 0)).astype(jnp.int32)
    # child k starts right after child k-1's subtree
    pos = p + 1
    for k in range(1, int(function_set.max_arity)):
        nxt = pos + jnp.take_along_axis(forest.size, jnp.clip(pos, 0, L - 1)[:, None], axis=1)[:, 0]
        pos = jnp.where(c >= k, nxt, pos)
    p = jnp.where(has_func, p, -1)
    return exchange(forest, p, forest, pos)


def default_insert_generator(
    function_set: Any, n_vars: int, max_len: int, **leaf_options: Any
) -> TreeGenerator:
    """The generator :func:`insert_mutation` uses by default: one function over fresh leaves
    (full trees of depth 1), as in DEAP's ``mutInsert``."""
    return TreeGenerator(
        function_set=function_set,
        n_vars=n_vars,
        max_len=max_len,
        min_depth=1,
        max_depth=1,
        method="full",
        **leaf_options,
    )


def insert_mutation(key: jax.Array, forest: Forest, generator: TreeGenerator) -> tuple[Forest, jax.Array]:
    """Insert a new node above a random subtree.

    A fresh tree ``T`` is drawn from ``generator`` (e.g. :func:`default_insert_generator`: one
    function with new leaves); the chosen subtree of the parent is grafted at a uniform non-root
    position of ``T``, and the result replaces the chosen subtree: two exchanges.
    """
    us = _draw(key, uniform_shapes("insert_mutation", forest.opcode.shape[0], generator=generator))
    return _insert_mutation(us, forest, generator)


def _insert_mutation(us, forest, generator):
    L = forest.max_len
    u = us[0]
    p = _random_nodes(u[:3], forest, generator.function_set, None)
    fresh = generator.from_uniforms(us[1])
    fresh = _pad_to(fresh, L)
    if fresh.max_len > L:
        raise ValueError(f"insert generator max_len {fresh.max_len} exceeds the forest's {L}")
    n_t = fresh.length
    slot = 1 + jnp.minimum(jnp.floor(u[3] * (n_t - 1)), jnp.maximum(n_t - 2, 0)).astype(jnp.int32)
    slot = jnp.where(n_t > 1, slot, -1)
    grafted, ok1 = exchange(fresh, slot, forest, p)
    out, ok2 = exchange(forest, jnp.where(ok1, p, -1), grafted, jnp.zeros_like(p))
    return out, ok1 & ok2


# ---- in-place rewrites ------------------------------------------------------------------------------


def _same_arity_table(function_set: Any) -> tuple[np.ndarray, np.ndarray]:
    """``alt [n_opcodes, n_funcs]``: other functions of the same arity; ``count [n_opcodes]``."""
    arity = np.asarray(function_set.arity)
    n_op = len(arity)
    alt = np.zeros((n_op, max(n_op, 1)), np.int32)
    count = np.zeros(n_op, np.int32)
    for o in range(n_op):
        if arity[o] == 0:
            continue
        others = [f for f in range(n_op) if f != o and arity[f] == arity[o]]
        count[o] = len(others)
        alt[o, : len(others)] = others
    alt = np.where(count[:, None] > 0, alt, np.arange(n_op)[:, None])  # no alternative: itself
    return alt, count


def _rewrite_nodes(
    r: jax.Array,
    forest: Forest,
    mask: jax.Array,
    function_set: Any,
    n_vars: int,
    const_range: tuple[float, float],
    const_prob: float | jax.Array,
) -> Forest:
    """Point-mutate the nodes in ``mask [pop, L]`` given uniforms ``r`` (broadcastable to it).

    A function becomes another function of the same arity (uniform; unchanged if it has none), a
    leaf becomes a fresh leaf (a constant uniform in ``const_range`` with probability ``const_prob``,
    else a uniform variable). Modi outputs stay."""
    alt_np, count_np = _same_arity_table(function_set)
    alt, count = jnp.asarray(alt_np), jnp.asarray(count_np)
    arity = jnp.asarray(function_set.arity, jnp.int32)
    op = forest.opcode
    r = jnp.broadcast_to(r, op.shape)
    is_func = arity[op] > 0
    k = jnp.minimum(jnp.floor(r * count[op]), jnp.maximum(count[op] - 1, 0)).astype(jnp.int32)
    new_func = jnp.take_along_axis(alt[op], k[..., None], axis=-1)[..., 0]
    lo, hi = (float(c) for c in const_range)
    as_const, rest = _reuse(r, const_prob if n_vars > 0 else 1.0)
    var = jnp.minimum(jnp.floor(rest * n_vars), max(n_vars - 1, 0)).astype(jnp.float32)
    cval = lo + (hi - lo) * rest
    new_op = jnp.where(is_func, new_func, jnp.where(as_const, CONST, VAR))
    new_val = jnp.where(is_func, 0.0, jnp.where(as_const, cval, var))
    return forest.replace(  # type: ignore[attr-defined]
        opcode=jnp.where(mask, new_op, op).astype(jnp.int32),
        value=jnp.where(mask, new_val, forest.value).astype(jnp.float32),
    )


def single_point_mutation(
    key: jax.Array,
    forest: Forest,
    function_set: Any,
    n_vars: int,
    const_range: tuple[float, float] = (-1.0, 1.0),
    const_prob: float | jax.Array = 0.5,
) -> tuple[Forest, jax.Array]:
    """Rewrite one uniformly chosen node per tree (see :func:`multi_point_mutation` for the rule)."""
    (u,) = _draw(key, uniform_shapes("single_point_mutation", forest.opcode.shape[0]))
    return _single_point_mutation(u, forest, function_set, n_vars, const_range, const_prob)


def _single_point_mutation(u, forest, function_set, n_vars, const_range=(-1.0, 1.0), const_prob=0.5):
    is_node, _ = _node_masks(forest, function_set)
    p, has = _uniform_choice(u[0], is_node)
    mask = (jnp.arange(forest.max_len)[None, :] == p[:, None]) & has[:, None]
    return _rewrite_nodes(u[1][:, None], forest, mask, function_set, n_vars, const_range, const_prob), has


def multi_point_mutation(
    key: jax.Array,
    forest: Forest,
    function_set: Any,
    n_vars: int,
    rate: float | jax.Array = 0.1,
    const_range: tuple[float, float] = (-1.0, 1.0),
    const_prob: float | jax.Array = 0.5,
) -> tuple[Forest, jax.Array]:
    """Rewrite every node independently with probability ``rate``.

    A function becomes a uniformly drawn *other* function of the same arity (unchanged if none),
    a leaf becomes a fresh leaf (constant uniform in ``const_range`` with probability ``const_prob``,
    else a uniform variable); the shape and the Modi outputs are kept. ``ok``: at least one node
    was rewritten.
    """
    (u,) = _draw(key, uniform_shapes("multi_point_mutation", *forest.opcode.shape))
    return _multi_point_mutation(u, forest, function_set, n_vars, rate, const_range, const_prob)


def _multi_point_mutation(u, forest, function_set, n_vars, rate=0.1, const_range=(-1.0, 1.0), const_prob=0.5):
    is_node, _ = _node_masks(forest, function_set)
    hit, r = _reuse(u, rate)
    mask = is_node & hit
    out = _rewrite_nodes(r, forest, mask, function_set, n_vars, const_range, const_prob)
    return out, jnp.any(mask, -1)


def _new_constants(
    r: jax.Array, value: jax.Array, const_range: tuple[float, float], sigma: float | jax.Array | None
) -> jax.Array:
    """New constants from uniforms ``r``: uniform in ``const_range`` (``sigma=None``) or
    ``value + sigma * N(0, 1)`` (by the inverse normal CDF)."""
    if sigma is None:
        lo, hi = (float(c) for c in const_range)
        return lo + (hi - lo) * r
    mid = jnp.clip(r + 2.0**-25, 2.0**-25, _BELOW_ONE)  # strictly inside (0, 1): finite quantiles
    return value + sigma * jax.scipy.special.ndtri(mid)


def single_constant_mutation(
    key: jax.Array,
    forest: Forest,
    const_range: tuple[float, float] = (-1.0, 1.0),
    sigma: float | jax.Array | None = None,
) -> tuple[Forest, jax.Array]:
    """Change one uniformly chosen constant per tree: redrawn uniform in ``const_range``
    (``sigma=None``) or perturbed by ``sigma * N(0, 1)``. Trees without constants: ``ok`` False."""
    (u,) = _draw(key, uniform_shapes("single_constant_mutation", forest.opcode.shape[0]))
    return _single_constant_mutation(u, forest, const_range, sigma)


def _single_constant_mutation(u, forest, const_range=(-1.0, 1.0), sigma=None):
    is_const = forest.opcode == CONST
    p, has = _uniform_choice(u[0], is_const)
    mask = (jnp.arange(forest.max_len)[None, :] == p[:, None]) & has[:, None]
    new = _new_constants(u[1][:, None], forest.value, const_range, sigma)
    return forest.replace(value=jnp.where(mask, new, forest.value)), has  # type: ignore[attr-defined]


def multi_constant_mutation(
    key: jax.Array,
    forest: Forest,
    rate: float | jax.Array = 0.3,
    const_range: tuple[float, float] = (-1.0, 1.0),
    sigma: float | jax.Array | None = None,
) -> tuple[Forest, jax.Array]:
    """Change every constant independently with probability ``rate`` (as in
    :func:`single_constant_mutation`). ``ok``: at least one constant changed."""
    (u,) = _draw(key, uniform_shapes("multi_constant_mutation", *forest.opcode.shape))
    return _multi_constant_mutation(u, forest, rate, const_range, sigma)


def _multi_constant_mutation(u, forest, rate=0.3, const_range=(-1.0, 1.0), sigma=None):
    hit, r = _reuse(u, rate)
    mask = (forest.opcode == CONST) & hit
    new = _new_constants(r, forest.value, const_range, sigma)
    return forest.replace(value=jnp.where(mask, new, forest.value)), jnp.any(mask, -1)  # type: ignore[attr-defined]


# ---- the operators' random draws -----------------------------------------------------------------


def uniform_shapes(
    name: str, n: int, max_len: int | None = None, generator: TreeGenerator | None = None
) -> tuple[tuple[int, ...], ...]:
    """Shapes of the uniforms operator ``name`` (in :data:`OPERATORS`) draws from its key for ``n``
    trees (``max_len``: needed by the per-node mutations; ``generator``: by subtree / insert mutation).

    One shape: ``uniform(key, shape)``; two: the key is split in two first (:func:`uniform_keys`),
    one draw per half. The strategy uses this to draw the uniforms of all its operators in one
    random call (:func:`evotensor.gp.generate.batched_uniforms`) and runs them with
    :func:`apply_with_uniforms`; calling the operator with the key gives the same result.
    """
    if name == "one_point_crossover":
        return ((6, n),)
    if name == "leaf_biased_crossover":
        return ((3, n),)
    if name in ("subtree_mutation", "insert_mutation"):
        if generator is None:
            raise ValueError(f"{name} needs its generator to know its uniform shapes")
        return ((3 if name == "subtree_mutation" else 4, n), generator.uniform_shape(n))
    if name in ("multi_point_mutation", "multi_constant_mutation"):
        if max_len is None:
            raise ValueError(f"{name} needs max_len to know its uniform shapes")
        return ((n, max_len),)
    if name in ("hoist_mutation", "delete_mutation", "single_point_mutation", "single_constant_mutation"):
        return ((2, n),)
    raise ValueError(f"unknown operator {name!r}; valid: {OPERATORS}")


def uniform_keys(key: jax.Array, n_draws: int) -> tuple[jax.Array, ...]:
    """The keys of an operator's ``n_draws`` uniform draws (see :func:`uniform_shapes`)."""
    return (key,) if n_draws == 1 else tuple(jax.random.split(key, n_draws))


def _draw(key: jax.Array, shapes: tuple[tuple[int, ...], ...]) -> tuple[jax.Array, ...]:
    return tuple(jax.random.uniform(k, s) for k, s in zip(uniform_keys(key, len(shapes)), shapes))


def apply_with_uniforms(name: str, uniforms: Sequence[jax.Array], *args: Any, **kwargs: Any):
    """Run operator ``name`` on uniforms of the shapes :func:`uniform_shapes` gives instead of a key:
    ``apply_with_uniforms(name, draws, *args)`` equals ``operator(key, *args)`` when ``draws`` are
    that key's draws. Returns ``(forest, ok)`` as the operator."""
    if name not in _WITH_UNIFORMS:
        raise ValueError(f"unknown operator {name!r}; valid: {OPERATORS}")
    fn = _WITH_UNIFORMS[name]
    if name in ("subtree_mutation", "insert_mutation"):
        return fn(tuple(uniforms), *args, **kwargs)
    (u,) = uniforms
    return fn(u, *args, **kwargs)


_WITH_UNIFORMS = {
    "one_point_crossover": _one_point_crossover,
    "leaf_biased_crossover": _leaf_biased_crossover,
    "subtree_mutation": _subtree_mutation,
    "hoist_mutation": _hoist_mutation,
    "single_point_mutation": _single_point_mutation,
    "multi_point_mutation": _multi_point_mutation,
    "insert_mutation": _insert_mutation,
    "delete_mutation": _delete_mutation,
    "single_constant_mutation": _single_constant_mutation,
    "multi_constant_mutation": _multi_constant_mutation,
}


OPERATORS = (
    "one_point_crossover",
    "leaf_biased_crossover",
    "subtree_mutation",
    "hoist_mutation",
    "single_point_mutation",
    "multi_point_mutation",
    "insert_mutation",
    "delete_mutation",
    "single_constant_mutation",
    "multi_constant_mutation",
)
