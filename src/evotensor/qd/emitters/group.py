"""Many copies of one emitter run as one, vectorised: the pyribs set-up of CMA-ME / CMA-MAE with 15
CMA-ES emitters compiles one emitter's code instead of fifteen::

    emitters = EmitterGroup(CMAESEmitter(np.zeros(100), 0.5, ranker="imp", batch_size=36), 15)
    me = MAPElites(archive, [emitters])                     # population 15 x 36

The group's state is the emitter's state with a leading axis of ``n``; ``ask`` and ``tell`` are the
emitter's, ``jax.vmap``-ped over the copies (each its own key, state and slice of the batch, all
seeing the same archive). The batch is the copies' batches in order, and so is the
``insert_mask``. What differs from ``n`` separate emitters: the copies' keys come from one split of
the group's key (statistically the same, not the same numbers), and a conditional inside an emitter
(CMA-ES's lazy eigendecomposition, a restart) runs both branches under ``vmap`` and selects: fewer
programs to compile, more work per generation where branches are costly.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from evotensor.core import rng
from evotensor.core.checks import ArgumentError, check_int
from evotensor.qd.archive import AddInfo, Archive, ArchiveState


class EmitterGroup:
    """``n`` copies of ``emitter``, vectorised (module docstring).

    Args:
        emitter: any emitter (``init``, ``ask``, ``tell``, ``batch_size``).
        n: the number of copies, >= 1.

    Attributes:
        emitter, n; batch_size (``n x emitter.batch_size``); insert_mask (the emitter's, repeated;
        absent when it has none).
    """

    def __init__(self, emitter: Any, n: int):
        for method in ("init", "ask", "tell"):
            if not callable(getattr(emitter, method, None)):
                raise ArgumentError(f"emitter ({type(emitter).__name__}) has no {method}() method")
        if getattr(emitter, "uses_evaluation", False):
            raise ArgumentError(
                f"{type(emitter).__name__} learns from every evaluation (uses_evaluation) and cannot be "
                "vectorised in an EmitterGroup: put it in MAPElites' emitters directly"
            )
        self.emitter = emitter
        self.n = check_int(n, "n")
        self.batch_size = self.n * int(emitter.batch_size)
        mask = getattr(emitter, "insert_mask", None)
        if mask is not None:
            self.insert_mask = np.tile(np.asarray(mask), self.n)

    def __repr__(self) -> str:
        return f"EmitterGroup({self.emitter!r}, n={self.n})"

    def init(self, key: jax.Array, archive: Archive) -> Any:
        """The copies' states, stacked: each leaf ``[n, ...]``."""
        return jax.vmap(lambda k: self.emitter.init(k, archive))(rng.split(key, self.n))

    def ask(
        self, key: jax.Array, state: Any, archive: Archive, archive_state: ArchiveState
    ) -> tuple[jax.Array, Any]:
        """``[n x batch, dims]`` (genotypes ``[n x batch]``): every copy's batch, in order."""
        x, state = jax.vmap(lambda k, s: self.emitter.ask(k, s, archive, archive_state))(
            rng.split(key, self.n), state
        )
        return jax.tree_util.tree_map(lambda a: a.reshape(self.batch_size, *a.shape[2:]), x), state

    def tell(
        self,
        key: jax.Array,
        state: Any,
        archive: Archive,
        archive_state: ArchiveState,
        solutions: jax.Array,
        objective: jax.Array,
        measures: jax.Array,
        info: AddInfo,
    ) -> Any:
        """Each copy learns from its own slice of the batch."""

        def per_copy(a):
            return a.reshape(self.n, a.shape[0] // self.n, *a.shape[1:])

        parts = jax.tree_util.tree_map(per_copy, (solutions, objective, measures, info))
        return jax.vmap(lambda k, s, p: self.emitter.tell(k, s, archive, archive_state, *p))(
            rng.split(key, self.n), state, parts
        )
