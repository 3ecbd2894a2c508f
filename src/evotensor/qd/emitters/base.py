"""The emitter protocol and what the variation emitters share (start point, bounds, first batch).

An emitter proposes a fixed-size batch of solutions from the archive and learns from how the batch
fared. All three methods are pure; the archive object (static) and its state are passed in::

    state = emitter.init(key, archive)
    solutions, state = emitter.ask(key, state, archive, archive_state)        # [batch_size, dims]
    state = emitter.tell(key, state, archive, archive_state, solutions, objective, measures, info)

``tell`` sees the archive *after* the batch was added and the batch's :class:`AddInfo` (status and
improvement value against the archive before it), so ranking emitters need no copy of the archive.
An emitter may also have an ``insert_mask`` (``[batch_size]`` bool, NumPy): the rows MAP-Elites adds
to the archive; the others are evaluated and handed to ``tell`` only (ME-ES's gradient samples).
An emitter with ``uses_evaluation = True`` also gets ``evaluation=``, the whole population's
:class:`~evotensor.core.evaluation.Evaluation` (every emitter's rows, with the problem's ``info``),
and ``offset=``, the population row where its own batch starts: PGA-ME's and DCRL-ME's emitters
learn from all transitions (QDax's ``use_all_data``).

An emitter reads the archive through its methods (``sample_elites``, ``elite_solutions``,
``has_elites``, ``retrieve``), never by indexing the state's arrays: so it works unchanged on a
:class:`~evotensor.qd.sharded_archive.ShardedArchive`, whose cells are split over devices.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core.checks import FLOAT32_MAX, ArgumentError, check_int
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


def check_flat_archive(archive: Any, who: str) -> None:
    """Raise :class:`ArgumentError` if ``archive`` stores genotypes (a pytree template) rather than
    the flat float32 solutions that emitter ``who`` samples and varies."""
    if getattr(archive, "genotype", None) is not None:
        raise ArgumentError(
            f"{who} varies flat solutions [solution_dim], but the archive stores genotypes (a pytree): "
            "use a GenotypeEmitter with a variation of those genotypes, or a family's emitter "
            "(evotensor.neat.NEATEmitter, evotensor.gp.GPEmitter)"
        )


def check_vector(value: Any, name: str) -> np.ndarray:
    """``value`` as a finite, non-empty 1-d float32 NumPy array; an :class:`ArgumentError` naming
    ``name`` otherwise (also for values that are not numbers or overflow float32)."""
    try:
        x = np.asarray(value, np.float64)
    except (TypeError, ValueError) as err:
        raise ArgumentError(
            f"{name} must be a finite, non-empty 1-d array of numbers, got {value!r}"
        ) from err
    if x.ndim != 1 or x.size == 0 or not np.all(np.isfinite(x)) or np.any(np.abs(x) > FLOAT32_MAX):
        raise ArgumentError(f"{name} must be a finite, non-empty 1-d array (float32), got shape {x.shape}")
    return x.astype(np.float32)


def check_bounds(bounds: Any, shape: tuple[int, ...], unbounded: bool = False) -> tuple[Any, Any] | None:
    """``bounds = (low, high)`` broadcast to ``shape`` as float32 arrays with ``low <= high`` and no
    NaN (``None``/``+-inf`` ends allowed with ``unbounded``, else finite); ``None`` stays ``None``."""
    if bounds is None:
        return None
    if isinstance(bounds, (str, bytes)) or not hasattr(bounds, "__len__") or len(bounds) != 2:
        raise ArgumentError(f"bounds must be (low, high), got {bounds!r}")
    ends = []
    for end, fill in zip(bounds, (-np.inf, np.inf), strict=True):
        try:
            end = np.broadcast_to(np.asarray(fill if end is None and unbounded else end, np.float64), shape)
        except (TypeError, ValueError) as err:
            raise ArgumentError(
                f"bounds must be (low, high), each a number or {list(shape)}, got {bounds!r}"
            ) from err
        finite = np.isfinite(end) & (np.abs(end) <= FLOAT32_MAX)
        if np.any(np.isnan(end)) or (not unbounded and not np.all(finite)):
            raise ArgumentError(f"bounds must be {'free of NaN' if unbounded else 'finite'}, got {bounds!r}")
        ends.append(end.astype(np.float32))
    if np.any(ends[0] > ends[1]):
        raise ArgumentError(f"bounds must satisfy low <= high everywhere, got {bounds!r}")
    return ends[0], ends[1]


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
        x0 = check_vector(x0, "x0")
        self.x0 = jnp.asarray(x0)
        self.solution_dim = x0.size
        self.batch_size = check_int(batch_size, "batch_size")
        bounds = check_bounds(bounds, x0.shape, unbounded=True)
        self.bounds = None if bounds is None else (jnp.asarray(bounds[0]), jnp.asarray(bounds[1]))
        self.initial_solutions = None
        if initial_solutions is not None:
            try:
                initial = np.asarray(initial_solutions, np.float32)
            except (TypeError, ValueError) as err:
                raise ArgumentError(
                    f"initial_solutions must be an array of numbers, got {initial_solutions!r}"
                ) from err
            if not np.all(np.isfinite(initial)):
                raise ArgumentError("initial_solutions must be finite (in float32)")
            if initial.shape != (self.batch_size, self.solution_dim):
                raise ArgumentError(
                    f"initial_solutions must have shape ({self.batch_size}, {self.solution_dim}) "
                    f"(batch_size, dims), got {initial.shape}"
                )
            self.initial_solutions = jnp.asarray(initial)

    def check_archive(self, archive: Archive) -> None:
        """Raise :class:`ArgumentError` unless ``archive`` stores solutions of this emitter's size."""
        check_flat_archive(archive, type(self).__name__)
        if archive.solution_dim != self.solution_dim:
            raise ArgumentError(
                f"{type(self).__name__}: x0 has {self.solution_dim} elements but the archive stores "
                f"solutions of {archive.solution_dim}"
            )

    def clip(self, x: jax.Array) -> jax.Array:
        """``x [n, dims]`` clipped to ``bounds`` (unchanged without bounds)."""
        return x if self.bounds is None else jnp.clip(x, self.bounds[0], self.bounds[1])

    def parents(self, key: jax.Array, archive: Archive, archive_state: ArchiveState, n: int) -> jax.Array:
        """``[n, dims]`` elites drawn uniformly with replacement, or ``x0`` while the archive is empty."""
        cells = archive.sample_elites(key, archive_state, n)
        elites = archive.elite_solutions(archive_state, cells)
        return jnp.where(archive.has_elites(archive_state), elites, self.x0)

    def first_batch(self, archive: Archive, archive_state: ArchiveState, sampled: jax.Array) -> jax.Array:
        """``initial_solutions`` (if given) while the archive is empty, else ``sampled``; clipped."""
        if self.initial_solutions is not None:
            sampled = jnp.where(archive.has_elites(archive_state), sampled, self.initial_solutions)
        return self.clip(sampled)

    def init(self, key: jax.Array, archive: Archive) -> tuple[()]:
        """Stateless: checks the archive and returns ``()``."""
        self.check_archive(archive)
        return ()

    def tell(self, key, state, archive, archive_state, solutions, objective, measures, info):
        """Nothing to learn."""
        return state
