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

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

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

    # One source slot per output slot in [recipient (L) | donor (Ld) | padding (1)], read by one
    # gather per field; a rejected exchange reads the recipient's own slots. (Two gathers and three
    # selects per field, as the module docstring's table reads, made this the variation's largest
    # piece of compiled code: XLA fused the masks into every consumer, at all three call sites.)
    j = jnp.arange(L)
    in_head = j < pc
    in_donor = (j >= pc) & (j < pc + s_b)
    in_tail = (j >= pc + s_b) & (j < new_n)
    from_r = jnp.where(in_tail, jnp.clip(j - s_b + s_a, 0, L - 1), jnp.where(in_head, j, L + Ld))
    src = jnp.where(in_donor, L + jnp.clip(qc + j - pc, 0, Ld - 1), from_r)
    src = jnp.where(ok, src, j)
    fields = _gather_fields(r, d, src)
    # Ancestors of p are the head slots whose subtree covers p.
    ancestor = ok & in_head & (j + r.size > pc)
    size = jnp.where(ancestor, fields.size + (s_b - s_a), fields.size)
    return fields.replace(size=size), ok


_FIELDS = (("opcode", PAD), ("value", 0.0), ("size", 0), ("output", -1))  # and their padding


def _gather_fields(r: Forest, d: Forest, src: jax.Array) -> Forest:
    """Every field of ``[r | d | padding]`` at the slots ``src``. With 32-bit fields (always, unless
    x64 is on) they are read side by side as int32 (``value`` by its bits): one gather of 4-wide rows
    reads them all, where on a CPU XLA's gathers cost per index (a gather per field made the
    exchange of the default GP's crossover twice as slow)."""
    dtypes = tuple(getattr(r, name).dtype for name, _ in _FIELDS)
    if any(np.dtype(dt).itemsize != 4 for dt in dtypes):
        out = {}
        for name, pad in _FIELDS:
            a, b = getattr(r, name), getattr(d, name)
            out[name] = jnp.concatenate([a, b.astype(a.dtype), jnp.full(1, pad, a.dtype)])[src]
        return Forest(**out)

    def as_int(x: Any, dt: Any) -> jax.Array:
        return jax.lax.bitcast_convert_type(jnp.asarray(x).astype(dt), jnp.int32)

    def rows(f: Forest) -> jax.Array:  # [len, 4]
        return jnp.stack([as_int(getattr(f, name), dt) for (name, _), dt in zip(_FIELDS, dtypes)], axis=-1)

    pad = jnp.stack([as_int(fill, dt) for (_, fill), dt in zip(_FIELDS, dtypes)])
    got = jnp.concatenate([rows(r), rows(d), pad[None]])[src]  # [L, 4]
    names = [name for name, _ in _FIELDS]
    return Forest(
        **{
            name: jax.lax.bitcast_convert_type(got[:, i], dt)
            for i, (name, dt) in enumerate(zip(names, dtypes))
        }
    )


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
