"""What a run directory needs from a multi-process JAX job: host copies of sharded arrays, and
agreement on success before anyone goes on.

In a job of several processes (after :func:`evotensor.distributed.initialize`) every process runs
the same program (SPMD), and a collective waits until *every* process has joined it. Two rules
follow, and the run directory keeps them:

* an array sharded over several processes' devices can only be read after all processes took part
  in gathering it (:func:`gather_to_host`, a collective where a leaf needs it);
* a process that fails alone (process 0 cannot write a file, one process cannot read a checkpoint)
  must not leave the others waiting in the next collective: every process states whether its part
  succeeded and all of them learn the outcome (:func:`agree`), so they fail together, each with a
  message that names the process that failed and why.

With one process every function here is a plain local operation: no device program runs.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

__all__ = [
    "ProcessFailure",
    "agree",
    "broadcast_text",
    "differing_processes",
    "gather_to_host",
    "is_main_process",
    "raise_for_failures",
]

_MESSAGE_BYTES = 1024  # of each process's message carried by agree(); longer ones are cut


class ProcessFailure(RuntimeError):
    """Another process of the job failed; the message names it and carries its error."""


def is_main_process() -> bool:
    """Whether this is process 0, the one that writes run directories (``True`` without
    ``jax.distributed``)."""
    return jax.process_index() == 0


def _replicated_like(leaf: jax.Array) -> jax.sharding.Sharding:
    """A sharding that keeps a whole copy of ``leaf`` on every device it spans now."""
    devices = sorted(leaf.sharding.device_set, key=lambda d: (d.process_index, d.id))
    mesh = jax.sharding.Mesh(np.array(devices), ("all",))
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())


def gather_to_host(tree: Any) -> Any:
    """``tree`` with every leaf readable by this process: a ``jax.Array`` sharded over devices of
    other processes is gathered (a collective: **every process must call this with the same
    tree**) and replaced by its whole value on one local device; fully addressable or fully
    replicated arrays, NumPy arrays and other leaves are returned as they are. Typed PRNG keys stay
    keys.

    Shapes are unchanged: each leaf keeps its global shape.
    """
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    split = [
        i
        for i, leaf in enumerate(leaves)
        if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable and not leaf.is_fully_replicated
    ]
    if split:
        parts = [leaves[i] for i in split]
        shardings = [_replicated_like(leaf) for leaf in parts]
        # one program gathers every split leaf; blocked on, as XLA:CPU collectives need
        whole = jax.block_until_ready(jax.jit(lambda xs: xs, out_shardings=shardings)(parts))
        for i, leaf in zip(split, whole):
            leaves[i] = leaf
    out = []
    for leaf in leaves:
        if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
            leaf = leaf.addressable_data(0)  # a whole copy held by one of this process's devices
        out.append(leaf)
    return jax.tree_util.tree_unflatten(treedef, out)


def _encode(message: str) -> np.ndarray:
    data = message.encode("utf-8", errors="replace")[:_MESSAGE_BYTES]
    row = np.zeros(_MESSAGE_BYTES + 1, np.int32)  # int32: every collective backend sums it exactly
    row[0] = len(data)
    row[1 : 1 + len(data)] = np.frombuffer(data, np.uint8)
    return row


def _decode(row: np.ndarray) -> str:
    n = int(row[0])
    return bytes(np.asarray(row[1 : 1 + n], np.uint8)).decode("utf-8", errors="replace")


def agree(error: str | None) -> dict[int, str]:
    """Tell every process whether this one's part succeeded (``error`` is ``None``) or failed
    (``error``: a one-line message), and learn the same of all others. A collective (every process
    must call it) and so also a barrier.

    Returns:
        ``{process index: message}`` of every process that failed (empty when all succeeded); the
        same dict on every process. Messages are cut to 1024 bytes.
    """
    row = _encode("" if error is None else error)
    flag = np.array([0 if error is None else 1], np.int32)
    if jax.process_count() == 1:
        return {} if error is None else {0: error}
    from jax.experimental import multihost_utils

    flags, rows = multihost_utils.process_allgather((flag, row))  # [processes, ...] each
    return {p: _decode(rows[p]) for p in range(len(flags)) if int(flags[p][0])}


def raise_for_failures(failures: dict[int, str], what: str) -> None:
    """After :func:`agree`: raise :class:`ProcessFailure` on a process that succeeded while another
    failed, naming the failed process(es) and their messages (a failed process raises its own
    exception instead)."""
    if failures and jax.process_index() not in failures:
        listed = "; ".join(f"process {p}: {m}" for p, m in sorted(failures.items()))
        raise ProcessFailure(f"{what} failed on another process of this job ({listed})")


def differing_processes(value: bytes) -> list[int]:
    """The processes whose ``value`` (at most 1024 bytes, e.g. a file's digest) differs from process
    0's; the same list on every process (a collective). Empty with one process."""
    if jax.process_count() == 1:
        return []
    from jax.experimental import multihost_utils

    rows = multihost_utils.process_allgather(_encode(value.hex()))
    return [p for p in range(1, len(rows)) if not np.array_equal(rows[p], rows[0])]


def broadcast_text(text: str | None) -> str:
    """Process 0's ``text`` on every process (a collective; other processes may pass ``None``).

    Used for values that must agree but are computed from a clock or the file system, such as a
    default run directory name."""
    if jax.process_count() == 1:
        return "" if text is None else text
    from jax.experimental import multihost_utils

    main = is_main_process()
    data = (text or "").encode("utf-8") if main else b""
    size = int(multihost_utils.broadcast_one_to_all(np.array([len(data)], np.int32))[0])
    if size == 0:
        return ""
    buffer = np.zeros(size, np.int32)
    if main:
        buffer[:] = np.frombuffer(data, np.uint8)
    out = multihost_utils.broadcast_one_to_all(buffer)
    return bytes(np.asarray(out, np.uint8)).decode("utf-8")
