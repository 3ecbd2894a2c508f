"""The emitter protocol and what the variation emitters share (start point, bounds, first batch).

An emitter proposes a fixed-size batch of solutions from the archive and learns from how the batch
fared. All three methods are pure; the archive object (static) and its state are passed in::

    state = emitter.init(key, archive)
    solutions, state = emitter.ask(key, state, archive, archive_state)        # [batch_size, dims]
    state = emitter.tell(key, state, archive, archive_state, solutions, objective, measures, info)

``tell`` sees the archive *after* the batch was added and the batch's :class:`AddInfo` (status and
improvement value against the archive before it), so ranking emitters need no copy of the archive.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core.strategy import check_population_size
from evotensor.qd.archive import AddInfo, Archive, ArchiveState


@runtime_checkable
class Emitter(Protocol):
    """Anything with these attributes and methods is an emitter."""

    batch_size: int

    def init(self, key: jax.Array, archive: Archive) -> Any: ...

    def ask(
        self, key: jax.Array, state: Any, archive: Archive, archive_state: ArchiveState
    ) -> tuple[jax.Array, Any]: ...

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
    ) -> Any: ...


class VariationEmitter:
    """Shared set-up of emitters that vary archive elites (Gaussian, Iso+LineDD).

    Args:
        x0: ``[dims]`` start point: while the archive is empty, parents are ``x0``.
        batch_size: solutions per :meth:`ask`.
        bounds: optional ``(low, high)``, each a scalar or ``[dims]``; solutions are clipped to it.
        initial_solutions: optional ``[batch_size, dims]``, returned (clipped) by the first
            :meth:`ask` while the archive is empty, in place of samples around ``x0``.
    """

    def __init__(
        self,
        x0: Any,
        *,
        batch_size: int = 64,
        bounds: tuple[Any, Any] | None = None,
        initial_solutions: Any = None,
    ):
        x0 = np.asarray(x0, np.float32)
        if x0.ndim != 1 or x0.size == 0 or not np.all(np.isfinite(x0)):
            raise ValueError(f"x0 must be a finite, non-empty 1-d array, got shape {x0.shape}")
        self.x0 = jnp.asarray(x0)
        self.solution_dim = x0.size
        self.batch_size = check_population_size(batch_size, name="batch_size")
        self.bounds = None
        if bounds is not None:
            try:
                low, high = bounds
            except (TypeError, ValueError) as err:
                raise ValueError(f"bounds must be (low, high), got {bounds!r}") from err
            low = np.broadcast_to(np.asarray(low, np.float32), x0.shape)
            high = np.broadcast_to(np.asarray(high, np.float32), x0.shape)
            if np.any(np.isnan(low)) or np.any(np.isnan(high)) or np.any(low > high):
                raise ValueError("bounds must satisfy low <= high everywhere (no NaN)")
            self.bounds = (jnp.asarray(low), jnp.asarray(high))
        self.initial_solutions = None
        if initial_solutions is not None:
            initial = np.asarray(initial_solutions, np.float32)
            if initial.shape != (self.batch_size, self.solution_dim):
                raise ValueError(
                    f"initial_solutions must have shape ({self.batch_size}, {self.solution_dim}) "
                    f"(batch_size, dims), got {initial.shape}"
                )
            self.initial_solutions = jnp.asarray(initial)

    def check_archive(self, archive: Archive) -> None:
        if archive.solution_dim != self.solution_dim:
            raise ValueError(
                f"{type(self).__name__}: x0 has {self.solution_dim} elements but the archive stores "
                f"solutions of {archive.solution_dim}"
            )

    def clip(self, x: jax.Array) -> jax.Array:
        return x if self.bounds is None else jnp.clip(x, self.bounds[0], self.bounds[1])

    def parents(self, key: jax.Array, archive: Archive, archive_state: ArchiveState, n: int) -> jax.Array:
        """``[n, dims]`` elites drawn uniformly with replacement, or ``x0`` while the archive is empty."""
        cells = archive.sample_elites(key, archive_state, n)
        return jnp.where(archive_state.occupied.any(), archive_state.solutions[cells], self.x0)

    def first_batch(self, archive_state: ArchiveState, sampled: jax.Array) -> jax.Array:
        """``initial_solutions`` (if given) while the archive is empty, else ``sampled``; clipped."""
        if self.initial_solutions is not None:
            sampled = jnp.where(archive_state.occupied.any(), sampled, self.initial_solutions)
        return self.clip(sampled)

    def init(self, key: jax.Array, archive: Archive) -> tuple[()]:
        """Stateless: checks the archive and returns ``()``."""
        self.check_archive(archive)
        return ()

    def tell(self, key, state, archive, archive_state, solutions, objective, measures, info):
        """Nothing to learn."""
        return state
