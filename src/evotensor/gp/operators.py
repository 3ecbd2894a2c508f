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

``weighted=True`` (forests of weighted variables ``mul(CONST w, VAR i)``, :mod:`evotensor.gp.weighted`)
keeps every weighted variable whole: no crossover or structural mutation chooses a slot inside one
(its ``CONST`` or ``VAR``), and a weighted variable counts as a leaf, not as a function (Koza's bias,
leaf-biased crossover, hoist and delete); point mutation never rewrites its ``mul`` and rewrites a
leaf into a leaf of the same kind (a variable into another variable, keeping its weight: Operon's
change-variable mutation; a constant or weight into a new constant), so no bare variable appears.
Subtree and insert mutation take ``weighted`` from their generator.

:class:`~evotensor.gp.GP` uses them as :class:`~evotensor.gp.variation.GPOperator` objects of an
operator registry (:mod:`evotensor.gp.variation`), on uniforms cut from one draw per generation
(:func:`uniform_shapes`, :func:`apply_with_uniforms`, and the fused passes
:func:`structural_mutations` / :func:`inplace_mutations`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core import rng
from evotensor.gp.encoding import CONST, PAD, VAR, Forest
from evotensor.gp.exchange import exchange
from evotensor.gp.functions import table_lookup
from evotensor.gp.generate import BELOW_ONE as _BELOW_ONE
from evotensor.gp.generate import TreeGenerator
from evotensor.gp.generate import split_uniform as _reuse
from evotensor.gp.weighted import inside_weighted, weighted_heads

# ---- node choice -----------------------------------------------------------------------------------


def _uniform_choice(u: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """One index per row, uniform over the True entries of ``mask [pop, L]`` given uniforms
    ``u [pop]``; ``(idx, any)``."""
    L = mask.shape[-1]
    if L > _BITS_CHOICE_MAX_LEN:
        return _uniform_choice_dot(u, mask)
    words = _packed_rows(mask)
    counts = jax.lax.population_count(words).astype(jnp.int32)  # [..., words]
    count = jnp.sum(counts, axis=-1)  # the row's True entries, read off the words (mask is read once)
    k = jnp.minimum(jnp.floor(u * count), jnp.maximum(count - 1, 0)).astype(jnp.int32)
    idx = _kth_set_bit(words, counts, k)
    has = count > 0
    return jnp.where(has, idx, 0), has


_BITS_CHOICE_MAX_LEN = 256  # longer rows: the running-count product (its word loop would be long)


def _packed_rows(mask: jax.Array) -> jax.Array:
    """``mask [..., L]`` packed into uint32 words ``[..., ceil(L / 32)]``: slot ``s`` is bit
    ``s % 32`` of word ``s // 32``."""
    L = mask.shape[-1]
    W = -(-L // 32)
    m = jnp.pad(mask, [(0, 0)] * (mask.ndim - 1) + [(0, 32 * W - L)]).astype(jnp.uint32)
    m = m.reshape(*mask.shape[:-1], W, 32)
    return jnp.sum(m << jnp.arange(32, dtype=jnp.uint32), axis=-1, dtype=jnp.uint32)  # an OR


def _kth_set_bit(words: jax.Array, counts: jax.Array, k: jax.Array) -> jax.Array:
    """The slot of the ``(k + 1)``-th set bit of each row of packed ``words [..., W]`` (see
    :func:`_packed_rows`; ``counts``: their population counts; ``k [...]``, ``0 <= k < count``,
    another ``k`` gives 0), int32 ``[...]``.

    Each word checks from the counts of the words before it whether it holds the entry, and finds
    its bit by a five-step binary search on the counts of its low bits. The packing and the result
    are reductions, so XLA keeps the search in their kernels rather than repeating it in every
    consumer's: a few small kernels, where a running count over the slots costs a
    ``[..., L] x [L, L]`` product and passes over ``[..., L]``."""
    W = words.shape[-1]
    w = np.arange(W)
    before = jnp.sum(jnp.where(jnp.asarray(w[None, :] < w[:, None]), counts[..., None, :], 0), axis=-1)
    rest = k.astype(jnp.int32)[..., None] - before  # [..., W]: the entry's rank inside word w
    here = (rest >= 0) & (rest < counts)
    pos = jnp.zeros(words.shape, jnp.uint32)
    for step in (16, 8, 4, 2, 1):  # keep rest < (set bits of the word at and above pos)
        low = jax.lax.shift_right_logical(words, pos) & jnp.uint32((1 << step) - 1)
        c = jax.lax.population_count(low).astype(jnp.int32)
        skip = rest >= c
        pos = jnp.where(skip, pos + jnp.uint32(step), pos)
        rest = jnp.where(skip, rest - c, rest)
    slot = jnp.asarray(32 * w, jnp.int32) + pos.astype(jnp.int32)
    return jnp.sum(jnp.where(here, slot, 0), axis=-1, dtype=jnp.int32)


def _uniform_choice_dot(u: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """:func:`_uniform_choice` by running counts (for long rows)."""
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


def _units(opcode: jax.Array, function_set: Any, weighted: bool) -> tuple[jax.Array, jax.Array]:
    """``(is_node, is_func)``, bool ``[pop, L]``: the slots an operator may choose, and those of them
    that are functions. With ``weighted``, a weighted variable is one leaf: its ``CONST`` and ``VAR``
    are not choosable and its ``mul`` is not a function."""
    is_node = opcode != PAD
    is_func = is_node & table_lookup(np.asarray(function_set.arity) > 0, opcode)  # no gather (see there)
    if weighted:
        heads = weighted_heads(opcode, function_set)
        is_node = is_node & ~inside_weighted(heads)
        is_func = is_func & ~heads
    return is_node, is_func


def _node_at(u: jax.Array, n: jax.Array) -> jax.Array:
    """A uniform node of each tree given its length ``n [pop]``: the nodes are the slots ``[0, n)``,
    so this is ``_uniform_choice(u, is_node)`` without counting."""
    return jnp.minimum(jnp.floor(u * n), jnp.maximum(n - 1, 0)).astype(jnp.int32)


def random_nodes(
    key: jax.Array,
    forest: Forest,
    function_set: Any,
    internal_bias: float | jax.Array | None = None,
    weighted: bool = False,
) -> jax.Array:
    """One node index per tree, int32 ``[pop]``.

    ``internal_bias=None``: uniform over the tree's nodes. Otherwise Koza's bias: with probability
    ``internal_bias`` a uniform function node (if the tree has any), else a uniform leaf.
    ``weighted``: never inside a weighted variable, which counts as a leaf (module docstring).
    """
    u = rng.uniform(key, (forest.opcode.shape[0],))
    return _random_nodes(u, forest.opcode, forest.size[..., 0], function_set, internal_bias, weighted)


def _random_nodes(
    u: jax.Array, opcode: jax.Array, n: jax.Array, function_set: Any, internal_bias, weighted: bool = False
) -> jax.Array:
    """:func:`random_nodes` from one uniform per tree ``u [pop]``, the trees' ``opcode [pop, L]`` and
    lengths ``n [pop]``. With a bias, ``u`` first decides function-or-leaf and (rescaled,
    :func:`~evotensor.gp.generate.split_uniform`) then picks the node: one counting pass per tree."""
    if internal_bias is None and not weighted:
        return _node_at(u, n)
    is_node, is_func = _units(opcode, function_set, weighted)
    if internal_bias is None:
        return _uniform_choice(u, is_node)[0]
    want_func, r = _reuse(u, internal_bias)
    # A tree without a function node is a single leaf: the function mask is empty there and the
    # choice falls back to slot 0, that leaf, as the leaf choice would.
    idx, _ = _uniform_choice(r, jnp.where(want_func[:, None], is_func, is_node & ~is_func))
    return idx


# ---- crossover --------------------------------------------------------------------------------------


def one_point_crossover(
    key: jax.Array,
    recipients: Forest,
    donors: Forest,
    function_set: Any,
    internal_bias: float | jax.Array | None = None,
    weighted: bool = False,
) -> tuple[Forest, jax.Array]:
    """Replace a random subtree of each recipient by a random subtree of its donor.

    Args:
        recipients, donors: Forests ``[pop, L]`` (row ``j`` is one parent pair).
        internal_bias: Koza's function-node probability for both crossover points (None: uniform).
        weighted: keep weighted variables whole (module docstring).
    """
    (u,) = _draw(key, uniform_shapes("one_point_crossover", recipients.opcode.shape[0]))
    return _one_point_crossover(u, recipients, donors, function_set, internal_bias, weighted)


def crossover_points(
    u: jax.Array, opcode: jax.Array, length: jax.Array, function_set: Any, internal_bias=None, weighted=False
) -> jax.Array:
    """The crossover points of one-point crossover for ``pop`` pairs stacked as ``2 * pop`` trees
    (recipients, then donors): ``u [2, pop]`` uniforms, ``opcode [2 * pop, L]``, ``length [2 * pop]``
    -> int32 ``[2 * pop]``. The strategy gathers both parents' rows in one array, so the points of
    all of them are chosen in one pass."""
    return _random_nodes(u.reshape(-1), opcode, length, function_set, internal_bias, weighted)


def _one_point_crossover(u, recipients, donors, function_set, internal_bias=None, weighted=False):
    opcode = jnp.concatenate([recipients.opcode, donors.opcode], axis=0)
    length = jnp.concatenate([recipients.length, donors.length], axis=0)
    pq = crossover_points(u, opcode, length, function_set, internal_bias, weighted)
    pop = recipients.opcode.shape[0]
    return exchange(recipients, pq[:pop], donors, pq[pop:])


def leaf_biased_crossover(
    key: jax.Array,
    recipients: Forest,
    donors: Forest,
    function_set: Any,
    leaf_bias: float | jax.Array = 0.3,
    weighted: bool = False,
) -> tuple[Forest, jax.Array]:
    """One-point crossover whose points are both leaves with probability ``leaf_bias`` (per pair),
    otherwise both uniform over all nodes (EvoGP's leaf-biased crossover). ``weighted``: keep
    weighted variables whole, each one leaf (module docstring)."""
    (u,) = _draw(key, uniform_shapes("leaf_biased_crossover", recipients.opcode.shape[0]))
    return _leaf_biased_crossover(u, recipients, donors, function_set, leaf_bias, weighted)


def leaf_biased_points(
    u: jax.Array, opcode: jax.Array, length: jax.Array, function_set: Any, leaf_bias=0.3, weighted=False
) -> jax.Array:
    """The points of leaf-biased crossover for ``pop`` pairs stacked as ``2 * pop`` trees (see
    :func:`crossover_points`): ``u [3, pop]`` (the pair's leaf coin, the recipient's and the donor's
    choice) -> int32 ``[2 * pop]``."""
    is_node, is_func = _units(opcode, function_set, weighted)
    leaves = jnp.tile(u[0] < leaf_bias, 2)
    r = u[1:].reshape(-1)
    anywhere = _uniform_choice(r, is_node)[0] if weighted else _node_at(r, length)
    return jnp.where(leaves, _uniform_choice(r, is_node & ~is_func)[0], anywhere)


def _leaf_biased_crossover(u, recipients, donors, function_set, leaf_bias=0.3, weighted=False):
    pop = recipients.opcode.shape[0]
    opcode = jnp.concatenate([recipients.opcode, donors.opcode], axis=0)
    length = jnp.concatenate([recipients.length, donors.length], axis=0)
    pq = leaf_biased_points(u, opcode, length, function_set, leaf_bias, weighted)
    return exchange(recipients, pq[:pop], donors, pq[pop:])


# ---- structural mutations ---------------------------------------------------------------------------
#
# Subtree, hoist, insert and delete mutation are one pass (:func:`structural_mutations`) over rows
# of any mix of them: each row gets a position ``p``, a donor tree and a donor position, and one
# exchange does them all (the strategy mutates its children with one such call instead of one
# pipeline per operator). Each public operator is that pass on rows of its kind only.

STRUCTURAL = ("subtree", "hoist", "insert", "delete")
"""Row kinds of :func:`structural_mutations`, in the order of its ``counts``."""


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


def _row_kinds(counts: Sequence[int]) -> np.ndarray:
    return np.repeat(np.arange(len(counts)), np.asarray(counts, int))


def structural_uniform_shapes(
    counts: Sequence[int],
    subtree_generator: TreeGenerator | None = None,
    insert_generator: TreeGenerator | None = None,
) -> tuple[tuple[int, ...], ...]:
    """Shapes of the uniforms :func:`structural_mutations` consumes for ``counts`` rows of each kind
    in :data:`STRUCTURAL`: ``(2, n)`` (every row's position and second choice), then the subtree
    generator's for ``counts[0]`` trees and the insert generator's for ``counts[2]`` (if any)."""
    counts = tuple(int(c) for c in counts)
    if len(counts) != len(STRUCTURAL) or min(counts) < 0 or sum(counts) < 1:
        raise ValueError(
            f"counts must be {len(STRUCTURAL)} non-negative ints {STRUCTURAL}, not all 0, got {counts}"
        )
    shapes: list[tuple[int, ...]] = [(2, sum(counts))]
    for kind, gen in ((0, subtree_generator), (2, insert_generator)):
        if counts[kind]:
            if gen is None:
                raise ValueError(
                    f"{STRUCTURAL[kind]} mutation needs its generator to know its uniform shapes"
                )
            shapes.append(gen.uniform_shape(counts[kind]))
    return tuple(shapes)


def structural_mutations(
    uniforms: Sequence[jax.Array],
    forest: Forest,
    counts: Sequence[int],
    function_set: Any,
    subtree_generator: TreeGenerator | None = None,
    insert_generator: TreeGenerator | None = None,
    subtree_bias: float | jax.Array | None = None,
    weighted: bool = False,
) -> tuple[Forest, jax.Array]:
    """Subtree, hoist, insert and delete mutation of consecutive row blocks in one exchange.

    Rows ``[0, counts[0])`` get subtree mutation (from ``subtree_generator``, points with Koza's
    ``subtree_bias`` or uniform), the next ``counts[1]`` hoist, then ``counts[2]`` insert (from
    ``insert_generator``), then ``counts[3]`` delete mutation; each with the semantics of its public
    operator (:func:`subtree_mutation` etc., which are this pass on one kind).

    Args:
        uniforms: arrays of the shapes :func:`structural_uniform_shapes` gives.
        forest: Forest ``[sum(counts), L]``.
        weighted: keep weighted variables whole (module docstring): no position, hoisted node or
            graft slot inside one; hoist and delete never take a weighted variable's ``mul``.

    Returns:
        ``(forest [n, L], ok bool [n])`` (``ok`` False: the row is unchanged, see the module docstring).
    """
    counts = tuple(int(c) for c in counts)
    shapes = structural_uniform_shapes(counts, subtree_generator, insert_generator)
    got = tuple(tuple(np.shape(x)) for x in uniforms)
    if got != tuple(shapes):
        raise ValueError(f"uniforms must have shapes {tuple(shapes)} for counts {counts}, got {got}")
    if forest.opcode.shape[0] != shapes[0][1]:
        raise ValueError(f"forest has {forest.opcode.shape[0]} trees, counts {counts} sum to {shapes[0][1]}")
    u = uniforms[0]
    rest = list(uniforms[1:])
    L = forest.max_len
    kinds = _row_kinds(counts)
    arity = jnp.asarray(function_set.arity, jnp.int32)
    is_node, is_func = _units(forest.opcode, function_set, weighted)
    n = forest.length
    rows = (
        lambda f, kind: jax.tree_util.tree_map(  # noqa: E731
            lambda a: a[sum(counts[:kind]) : sum(counts[: kind + 1])], f
        )
    )

    # p: uniform over nodes (subtree without bias, insert), over functions (hoist, delete), or
    # Koza-biased (subtree with a bias); one counting pass for every row that needs one.
    need_func = np.isin(kinds, (1, 3))
    sub = kinds == 0
    if subtree_bias is not None and counts[0]:
        want_func, r = _reuse(u[0], subtree_bias)
        use_func = jnp.asarray(need_func) | (jnp.asarray(sub) & want_func)
        biased = jnp.asarray(sub)
        r = jnp.where(biased, r, u[0])
        mask = jnp.where(use_func[:, None], is_func, jnp.where(biased[:, None], is_node & ~is_func, is_node))
        counted = jnp.asarray(need_func | sub)
    else:
        r, mask, counted = u[0], is_func, jnp.asarray(need_func)
    if weighted:  # every row counts: a uniform slot of the tree may be inside a weighted variable
        mask = jnp.where(counted[:, None], mask, is_node)
        counted = jnp.ones(n.shape, bool)
    p = _node_at(u[0], n)
    has_func = jnp.ones(n.shape, bool)
    if need_func.any() or (subtree_bias is not None and counts[0]) or weighted:
        chosen, has = _uniform_choice(r, mask)
        p = jnp.where(counted, chosen, p)
        has_func = jnp.where(jnp.asarray(need_func), has, True)

    # q and the donor: the row itself (hoist: a node strictly inside p's subtree; delete: a child
    # of p), a fresh tree (subtree: its root), or the fresh tree with p's subtree grafted (insert).
    take = lambda a, i: jnp.take_along_axis(a, i[:, None], axis=1)[:, 0]  # noqa: E731
    s = take(forest.size, jnp.clip(p, 0, L - 1))
    if weighted and counts[1]:  # a unit strictly inside p's subtree (p is never a weighted variable)
        slot = jnp.arange(L)[None, :]
        inside = (slot > p[:, None]) & (slot < (p + s)[:, None]) & is_node
        q_hoist = _uniform_choice(u[1], inside)[0]
    else:
        q_hoist = p + 1 + jnp.minimum(jnp.floor(u[1] * (s - 1)), jnp.maximum(s - 2, 0)).astype(jnp.int32)
    a = arity[take(forest.opcode, jnp.clip(p, 0, L - 1))]
    c = jnp.minimum(jnp.floor(u[1] * a), jnp.maximum(a - 1, 0)).astype(jnp.int32)
    q_delete = p + 1  # child k starts right after child k-1's subtree
    for k in range(1, int(function_set.max_arity)):
        nxt = q_delete + take(forest.size, jnp.clip(q_delete, 0, L - 1))
        q_delete = jnp.where(c >= k, nxt, q_delete)
    q = jnp.where(jnp.asarray(kinds == 1), q_hoist, jnp.where(jnp.asarray(kinds == 3), q_delete, 0))
    p = jnp.where(has_func, p, -1)  # an invalid position makes exchange return the tree unchanged

    blocks = []
    ok_insert = None
    if counts[0]:
        fresh = _pad_to(subtree_generator.from_uniforms(rest.pop(0)), L)
        if fresh.max_len > L:
            raise ValueError(f"subtree generator max_len {fresh.max_len} exceeds the forest's {L}")
        blocks.append(fresh)
    if counts[1]:
        blocks.append(rows(forest, 1))
    if counts[2]:
        fresh = _pad_to(insert_generator.from_uniforms(rest.pop(0)), L)
        if fresh.max_len > L:
            raise ValueError(f"insert generator max_len {fresh.max_len} exceeds the forest's {L}")
        # graft p's subtree at a uniform non-root slot of the fresh tree
        lo, hi = sum(counts[:2]), sum(counts[:3])
        n_t = fresh.length
        if weighted:  # a non-root slot outside the fresh tree's weighted variables
            fresh_units = _units(fresh.opcode, function_set, True)[0] & (jnp.arange(L) > 0)[None, :]
            slot, has_slot = _uniform_choice(u[1, lo:hi], fresh_units)
            slot = jnp.where(has_slot, slot, -1)
        else:
            k = jnp.minimum(jnp.floor(u[1, lo:hi] * (n_t - 1)), jnp.maximum(n_t - 2, 0))
            slot = 1 + k.astype(jnp.int32)
            slot = jnp.where(n_t > 1, slot, -1)
        grafted, ok_insert = exchange(fresh, slot, rows(forest, 2), p[lo:hi])
        blocks.append(grafted)
    if counts[3]:
        blocks.append(rows(forest, 3))
    donors = blocks[0] if len(blocks) == 1 else jax.tree_util.tree_map(lambda *x: jnp.concatenate(x), *blocks)
    if ok_insert is not None:
        lo, hi = sum(counts[:2]), sum(counts[:3])
        p = p.at[lo:hi].set(jnp.where(ok_insert, p[lo:hi], -1))
    return exchange(forest, p, donors, q)


def subtree_mutation(
    key: jax.Array, forest: Forest, generator: TreeGenerator, internal_bias: float | jax.Array | None = None
) -> tuple[Forest, jax.Array]:
    """Replace a random subtree of each tree by a fresh random tree from ``generator``."""
    us = _draw(key, uniform_shapes("subtree_mutation", forest.opcode.shape[0], generator=generator))
    return _subtree_mutation(us, forest, generator, internal_bias)


def _subtree_mutation(us, forest, generator, internal_bias=None):
    n = forest.opcode.shape[0]
    return structural_mutations(
        us,
        forest,
        (n, 0, 0, 0),
        generator.function_set,
        generator,
        None,
        internal_bias,
        weighted=generator.weighted_variables,
    )


def hoist_mutation(
    key: jax.Array, forest: Forest, function_set: Any, weighted: bool = False
) -> tuple[Forest, jax.Array]:
    """Replace a random function node's subtree by a random subtree strictly inside it.

    ``p`` is uniform over function nodes, ``q`` uniform over ``(p, p + size[p])``; trees without a
    function node are unchanged (``ok`` False). ``weighted``: see the module docstring.
    """
    (u,) = _draw(key, uniform_shapes("hoist_mutation", forest.opcode.shape[0]))
    return _hoist_mutation(u, forest, function_set, weighted)


def _hoist_mutation(u, forest, function_set, weighted=False):
    counts = (0, forest.opcode.shape[0], 0, 0)
    return structural_mutations((u,), forest, counts, function_set, weighted=weighted)


def delete_mutation(
    key: jax.Array, forest: Forest, function_set: Any, weighted: bool = False
) -> tuple[Forest, jax.Array]:
    """Replace a random function node by one of its children (uniform over its children).
    ``weighted``: a weighted variable is a leaf, never deleted into its weight or variable."""
    (u,) = _draw(key, uniform_shapes("delete_mutation", forest.opcode.shape[0]))
    return _delete_mutation(u, forest, function_set, weighted)


def _delete_mutation(u, forest, function_set, weighted=False):
    counts = (0, 0, 0, forest.opcode.shape[0])
    return structural_mutations((u,), forest, counts, function_set, weighted=weighted)


def default_insert_generator(
    function_set: Any, n_vars: int, max_len: int, **leaf_options: Any
) -> TreeGenerator:
    """The generator :func:`insert_mutation` uses by default: one function over fresh leaves
    (full trees of depth 1, built in closed form), as in DEAP's ``mutInsert``."""
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
    n = forest.opcode.shape[0]
    fs, weighted = generator.function_set, generator.weighted_variables
    return structural_mutations(us, forest, (0, 0, n, 0), fs, None, generator, weighted=weighted)


# ---- in-place rewrites ------------------------------------------------------------------------------
#
# Single-/multi-point and single-/multi-constant mutation are likewise one pass
# (:func:`inplace_mutations`) over row blocks of each kind; the public operators are that pass on
# one kind.

INPLACE = ("single_point", "multi_point", "single_constant", "multi_constant")
"""Row kinds of :func:`inplace_mutations`, in the order of its ``counts``."""


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
    function_set: Any,
    n_vars: int,
    const_range: tuple[float, float],
    const_prob: float | jax.Array,
    weighted: bool = False,
) -> tuple[jax.Array, jax.Array]:
    """Point rewrites of every node given uniforms ``r`` (broadcastable to ``[pop, L]``):
    ``(opcode, value)`` to use where a node is rewritten.

    A function becomes another function of the same arity (uniform; unchanged if it has none), a
    leaf becomes a fresh leaf (a constant uniform in ``const_range`` with probability ``const_prob``,
    else a uniform variable). Modi outputs stay. ``weighted``: a leaf keeps its kind (a variable
    becomes a uniform variable, a constant a new constant), so no bare variable appears."""
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
    if weighted:  # from the whole uniform: the leaf's kind is not drawn
        as_const = op != VAR
        var = jnp.minimum(jnp.floor(r * n_vars), max(n_vars - 1, 0)).astype(jnp.float32)
        cval = lo + (hi - lo) * r
    new_op = jnp.where(is_func, new_func, jnp.where(as_const, CONST, VAR))
    new_val = jnp.where(is_func, 0.0, jnp.where(as_const, cval, var))
    return new_op, new_val


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


def inplace_mutations(
    u: jax.Array,
    forest: Forest,
    counts: Sequence[int],
    function_set: Any,
    n_vars: int,
    point_rate: float | jax.Array = 0.1,
    const_rate: float | jax.Array = 0.3,
    const_range: tuple[float, float] = (-1.0, 1.0),
    const_prob: float | jax.Array = 0.5,
    sigma: float | jax.Array | None = None,
    weighted: bool = False,
) -> tuple[Forest, jax.Array]:
    """Single-point, multi-point, single-constant and multi-constant mutation of consecutive row
    blocks (``counts`` rows of each kind in :data:`INPLACE` order) in one pass.

    Single kinds use ``u[:, 0]`` to choose their node (uniform over nodes / constants) and
    ``u[:, 1]`` to rewrite it; multi kinds decide every node independently, ``u[:, j] < rate``
    (``point_rate`` / ``const_rate``), and rewrite it from the rescaled ``u[:, j]``. A point rewrite
    is :func:`multi_point_mutation`'s rule, a constant one :func:`single_constant_mutation`'s
    (``sigma``: perturb, ``None``: redraw in ``const_range``).

    Args:
        u: uniforms ``[n, max(L, 2)]``, ``n = sum(counts)``.
        forest: Forest ``[n, L]``.
        weighted: point rows never rewrite a weighted variable's ``mul`` and keep every leaf's kind
            (see :func:`_rewrite_nodes`); the constant rows perturb weights like any constant.

    Returns:
        ``(forest [n, L], ok bool [n])``: ``ok`` False where no node was rewritten (unchanged).
    """
    counts = tuple(int(c) for c in counts)
    n, L = forest.opcode.shape
    if len(counts) != len(INPLACE) or min(counts) < 0 or sum(counts) != n:
        raise ValueError(
            f"counts must be {len(INPLACE)} non-negative ints {INPLACE} summing to {n}, got {counts}"
        )
    if u.shape != (n, max(L, 2)):
        raise ValueError(f"u must have shape ({n}, {max(L, 2)}), got {u.shape}")
    kinds = _row_kinds(counts)
    single_np, point_np = np.isin(kinds, (0, 2)), np.isin(kinds, (0, 1))
    single, point = jnp.asarray(single_np)[:, None], jnp.asarray(point_np)[:, None]
    op = forest.opcode
    slot = jnp.arange(L)[None, :]
    pointable = op != PAD
    if weighted and point_np.any():
        pointable = pointable & ~weighted_heads(op, function_set)
    target = jnp.where(point, pointable, op == CONST)
    if single_np.any():
        if point_np[single_np].all() and not weighted:  # single-point rows only: no counting
            p, has = _node_at(u[:, 0], forest.length), forest.length > 0
        else:
            p, has = _uniform_choice(u[:, 0], target)
        single_mask = (slot == p[:, None]) & has[:, None]
    else:
        single_mask = jnp.zeros(op.shape, bool)
    rate = jnp.where(point, jnp.asarray(point_rate, jnp.float32), jnp.asarray(const_rate, jnp.float32))
    hit, r_multi = _reuse(u[:, :L], rate)
    mask = jnp.where(single, single_mask, target & hit)
    r = jnp.where(single, u[:, 1:2], r_multi)
    value = forest.value
    new_op, new_val = op, value
    if point_np.any():
        pt_op, pt_val = _rewrite_nodes(r, forest, function_set, n_vars, const_range, const_prob, weighted)
        new_op, new_val = jnp.where(point, pt_op, op), jnp.where(point, pt_val, value)
    if not point_np.all():
        new_val = jnp.where(point, new_val, _new_constants(r, value, const_range, sigma))
    out = forest.replace(  # type: ignore[attr-defined]
        opcode=jnp.where(mask, new_op, op).astype(jnp.int32),
        value=jnp.where(mask, new_val, value).astype(jnp.float32),
    )
    return out, jnp.any(mask, axis=-1)


def single_point_mutation(
    key: jax.Array,
    forest: Forest,
    function_set: Any,
    n_vars: int,
    const_range: tuple[float, float] = (-1.0, 1.0),
    const_prob: float | jax.Array = 0.5,
    weighted: bool = False,
) -> tuple[Forest, jax.Array]:
    """Rewrite one uniformly chosen node per tree (see :func:`multi_point_mutation` for the rule)."""
    (u,) = _draw(key, uniform_shapes("single_point_mutation", *forest.opcode.shape))
    return _single_point_mutation(u, forest, function_set, n_vars, const_range, const_prob, weighted)


def _single_point_mutation(
    u, forest, function_set, n_vars, const_range=(-1.0, 1.0), const_prob=0.5, weighted=False
):
    counts = (forest.opcode.shape[0], 0, 0, 0)
    return inplace_mutations(
        u,
        forest,
        counts,
        function_set,
        n_vars,
        const_range=const_range,
        const_prob=const_prob,
        weighted=weighted,
    )


def multi_point_mutation(
    key: jax.Array,
    forest: Forest,
    function_set: Any,
    n_vars: int,
    rate: float | jax.Array = 0.1,
    const_range: tuple[float, float] = (-1.0, 1.0),
    const_prob: float | jax.Array = 0.5,
    weighted: bool = False,
) -> tuple[Forest, jax.Array]:
    """Rewrite every node independently with probability ``rate``.

    A function becomes a uniformly drawn *other* function of the same arity (unchanged if none),
    a leaf becomes a fresh leaf (constant uniform in ``const_range`` with probability ``const_prob``,
    else a uniform variable); the shape and the Modi outputs are kept. ``ok``: at least one node
    was rewritten. ``weighted``: see the module docstring.
    """
    (u,) = _draw(key, uniform_shapes("multi_point_mutation", *forest.opcode.shape))
    return _multi_point_mutation(u, forest, function_set, n_vars, rate, const_range, const_prob, weighted)


def _multi_point_mutation(
    u, forest, function_set, n_vars, rate=0.1, const_range=(-1.0, 1.0), const_prob=0.5, weighted=False
):
    counts = (0, forest.opcode.shape[0], 0, 0)
    return inplace_mutations(
        u,
        forest,
        counts,
        function_set,
        n_vars,
        point_rate=rate,
        const_range=const_range,
        const_prob=const_prob,
        weighted=weighted,
    )


def single_constant_mutation(
    key: jax.Array,
    forest: Forest,
    const_range: tuple[float, float] = (-1.0, 1.0),
    sigma: float | jax.Array | None = None,
) -> tuple[Forest, jax.Array]:
    """Change one uniformly chosen constant per tree: redrawn uniform in ``const_range``
    (``sigma=None``) or perturbed by ``sigma * N(0, 1)``. Trees without constants: ``ok`` False."""
    (u,) = _draw(key, uniform_shapes("single_constant_mutation", *forest.opcode.shape))
    return _single_constant_mutation(u, forest, const_range, sigma)


def _single_constant_mutation(u, forest, const_range=(-1.0, 1.0), sigma=None):
    counts = (0, 0, forest.opcode.shape[0], 0)
    return inplace_mutations(u, forest, counts, None, 0, const_range=const_range, sigma=sigma)


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
    counts = (0, 0, 0, forest.opcode.shape[0])
    return inplace_mutations(
        u, forest, counts, None, 0, const_rate=rate, const_range=const_range, sigma=sigma
    )


# ---- the operators' random draws -----------------------------------------------------------------


def uniform_shapes(
    name: str, n: int, max_len: int | None = None, generator: TreeGenerator | None = None
) -> tuple[tuple[int, ...], ...]:
    """Shapes of the uniforms operator ``name`` (in :data:`OPERATORS`) draws from its key for ``n``
    trees (``max_len``: needed by the in-place mutations; ``generator``: by subtree / insert mutation).

    One shape: ``uniform(key, shape)``; two: the key is split in two first (:func:`uniform_keys`),
    one draw per half. :func:`apply_with_uniforms` runs an operator on such draws; calling the
    operator with the key gives the same result. (The strategy draws the uniforms of a whole
    generation in one call and runs the fused passes :func:`structural_mutations` /
    :func:`inplace_mutations`, of which the mutations are the one-kind cases.)
    """
    if name == "one_point_crossover":
        return ((2, n),)
    if name == "leaf_biased_crossover":
        return ((3, n),)
    if name in ("subtree_mutation", "insert_mutation"):
        if generator is None:
            raise ValueError(f"{name} needs its generator to know its uniform shapes")
        return ((2, n), generator.uniform_shape(n))
    if name in ("hoist_mutation", "delete_mutation"):
        return ((2, n),)
    if name.removesuffix("_mutation") in INPLACE:
        if max_len is None:
            raise ValueError(f"{name} needs max_len to know its uniform shapes")
        return ((n, max(max_len, 2)),)
    raise ValueError(f"unknown operator {name!r}; valid: {OPERATORS}")


def uniform_keys(key: jax.Array, n_draws: int) -> tuple[jax.Array, ...]:
    """The keys of an operator's ``n_draws`` uniform draws (see :func:`uniform_shapes`)."""
    return (key,) if n_draws == 1 else tuple(jax.random.split(key, n_draws))


def _draw(key: jax.Array, shapes: tuple[tuple[int, ...], ...]) -> tuple[jax.Array, ...]:
    return tuple(rng.uniform(k, s) for k, s in zip(uniform_keys(key, len(shapes)), shapes))


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
