"""The one structural primitive of tree GP: vectorized subtree exchange.

Every structural operator (crossover, subtree / hoist / insert / delete mutation) is one or two
calls of :func:`exchange`. With subtree sizes stored, replacing the subtree at ``p`` (size ``sA``)
of a recipient by the subtree at ``q`` (size ``sB``) of a donor is a single gather per slot ``j``::

    j < p              -> recipient[j]             (sizes of ancestors of p: += sB - sA)
    p <= j < p + sB    -> donor[q + j - p]
    p + sB <= j < n'   -> recipient[j - sB + sA]   (the shifted tail)
    j >= n'            -> padding                  (n' = n - sA + sB)

No loops over nodes, static shapes, vmapped over the population.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from evotensor.gp.encoding import PAD, Forest


def _exchange_one(r: Forest, p: jax.Array, d: Forest, q: jax.Array) -> tuple[Forest, jax.Array]:
    L = r.opcode.shape[-1]
    Ld = d.opcode.shape[-1]
    n = r.size[0]
    n_d = d.size[0]
    p_ok = (p >= 0) & (p < n)
    q_ok = (q >= 0) & (q < n_d)
    pc = jnp.clip(p, 0, L - 1)
    qc = jnp.clip(q, 0, Ld - 1)
    s_a = r.size[pc]
    s_b = d.size[qc]
    new_n = n - s_a + s_b
    ok = p_ok & q_ok & (new_n <= L)

    j = jnp.arange(L)
    in_head = j < pc
    in_donor = (j >= pc) & (j < pc + s_b)
    in_tail = (j >= pc + s_b) & (j < new_n)
    d_idx = jnp.clip(qc + j - pc, 0, Ld - 1)
    r_idx = jnp.where(in_tail, jnp.clip(j - s_b + s_a, 0, L - 1), j)

    def pick(r_arr, d_arr, pad):
        from_r = r_arr[r_idx]
        from_d = d_arr[d_idx]
        return jnp.where(in_donor, from_d, jnp.where(in_head | in_tail, from_r, pad))

    opcode = pick(r.opcode, d.opcode, PAD)
    value = pick(r.value, d.value, 0.0)
    output = pick(r.output, d.output, -1)
    size = pick(r.size, d.size, 0)
    # Ancestors of p are the head slots whose subtree covers p.
    ancestor = in_head & (j + r.size > pc)
    size = jnp.where(ancestor, size + (s_b - s_a), size)
    out = Forest(opcode=opcode, value=value, size=size, output=output)
    out = jax.tree_util.tree_map(lambda new, old: jnp.where(ok, new, old), out, r)
    return out, ok


def exchange(
    recipients: Forest, positions: jax.Array, donors: Forest, donor_positions: jax.Array
) -> tuple[Forest, jax.Array]:
    """Replace, for every ``j``, the subtree of ``recipients[j]`` at ``positions[j]`` by the subtree of
    ``donors[j]`` at ``donor_positions[j]``.

    Args:
        recipients: Forest ``[pop, L]``.
        positions: int ``[pop]``, node indices into each recipient (``0 <= p < length``).
        donors: Forest ``[pop, Ld]`` (``Ld`` may differ from ``L``; e.g. freshly generated subtrees).
        donor_positions: int ``[pop]``, node indices into each donor.

    Returns:
        ``(forest [pop, L], ok bool [pop])``. Slot ``j`` holds recipient ``j``'s nodes before the
        position, donor ``j``'s subtree, then recipient ``j``'s shifted tail; every ancestor's size
        changes by the size difference. Where the result would exceed ``L`` nodes, or a position
        is not a node of its tree, the recipient is returned unchanged and ``ok`` is False.
    """
    if recipients.opcode.ndim != 2 or donors.opcode.ndim != 2:
        raise ValueError(
            f"recipients and donors must be forests [pop, max_len], got {recipients.opcode.shape} "
            f"and {donors.opcode.shape}"
        )
    pop = recipients.opcode.shape[0]
    if donors.opcode.shape[0] != pop:
        raise ValueError(f"donors has {donors.opcode.shape[0]} trees, recipients {pop}")
    positions = jnp.asarray(positions, jnp.int32)
    donor_positions = jnp.asarray(donor_positions, jnp.int32)
    for name, arr in (("positions", positions), ("donor_positions", donor_positions)):
        if arr.shape != (pop,):
            raise ValueError(f"{name} must have shape ({pop},), got {arr.shape}")
    return jax.vmap(_exchange_one)(recipients, positions, donors, donor_positions)
