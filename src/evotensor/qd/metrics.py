"""Archive metrics beyond ``Archive.stats``: the Continuous QD score (Kent et al. 2022).

The CQD score measures an archive against target points in measure space, rewarding an elite for
its (normalised) objective and penalising it for its distance from each target, over a range of
penalties, so archives without cells (proximity, DNS) and archives of different resolutions can be
compared::

    targets = jax.random.uniform(key, (5, 1000, 2))                # 5 iterations of 1000 targets
    cqd = cqd_score(archive, state, target_points=targets, penalties=5,
                    obj_min=-1.0, obj_max=0.0, dist_max=jnp.sqrt(2.0))
    cqd.mean

Per iteration ``t``: ``sum_k sum_j max_i (f_hat_i - theta_k d_hat_ij)`` over the penalties
``theta_k``, the targets ``j`` and the archive's elites ``i``, with ``f_hat = (f - obj_min) /
(obj_max - obj_min)`` and ``d_hat = ||m_i - target_j|| / dist_max``. pyribs' ``cqd_score`` divides
``f`` by ``obj_max - obj_min`` without subtracting ``obj_min`` first (the same numbers when
``obj_min = 0``); here it is the paper's normalisation.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from evotensor.core.checks import ArgumentError, check_int, check_memory, check_real
from evotensor.core.pytree import pytree_dataclass
from evotensor.qd.emitters.base import check_vector


@pytree_dataclass
class CQDScore:
    """What :func:`cqd_score` returns.

    Attributes:
        mean: ``[]`` the mean of ``scores`` (what most users report).
        scores: ``[iterations]`` the score of each iteration's targets.
        penalties: ``[P]`` the penalties used.
    """

    mean: jax.Array
    scores: jax.Array
    penalties: jax.Array


def _penalties(penalties: Any) -> jax.Array:
    if isinstance(penalties, (int, np.integer)) and not isinstance(penalties, bool):
        return jnp.linspace(0.0, 1.0, check_int(penalties, "penalties"), dtype=jnp.float32)
    values = check_vector(penalties, "penalties")
    return jnp.asarray(values)


def cqd_score(
    archive: Any,
    state: Any,
    *,
    target_points: Any,
    penalties: int | Any,
    obj_min: float,
    obj_max: float,
    dist_max: float,
    dist_ord: float = 2,
) -> CQDScore:
    """The CQD score of an archive's elites (module docstring for the formula).

    Args:
        archive: a single-objective archive (grid, CVT, proximity, DNS, or a sharded one), which
            gives ``measure_dim``.
        state: its state (``objective [C]``, ``measures [C, D]``, ``occupied [C]``).
        target_points: ``[iterations, n, D]`` targets in measure space.
        penalties: a count ``P`` (``P`` values evenly spaced over ``[0, 1]``) or a ``[P]`` array.
        obj_min, obj_max: the objective range, ``obj_min < obj_max``.
        dist_max: the largest distance in measure space, ``> 0``.
        dist_ord: the norm's order (``p >= 1``, or ``inf``); default Euclidean.

    Returns:
        :class:`CQDScore`. An archive with no elite scores ``-inf`` (no solution reaches any
        target). Memory ``O(C n)`` per iteration; jit-able.
    """
    if getattr(archive, "num_objectives", None) is not None:
        raise ArgumentError("cqd_score needs a single-objective archive, got a multi-objective one")
    measure_dim = getattr(archive, "measure_dim", None)
    if not isinstance(measure_dim, int):
        raise ArgumentError(f"archive must be an evotensor.qd archive, got {type(archive).__name__}")
    targets = jnp.asarray(target_points, jnp.float32)
    if targets.ndim != 3 or targets.shape[1] < 1 or targets.shape[2] != measure_dim:
        raise ArgumentError(
            f"target_points must be [iterations, n, {measure_dim}] (the archive's measures), got "
            f"{list(targets.shape)}"
        )
    penalty = _penalties(penalties)
    low = check_real(obj_min, "obj_min")
    high = check_real(obj_max, "obj_max")
    if not high > low:
        raise ArgumentError(f"obj_max must be > obj_min, got {obj_max!r} and {obj_min!r}")
    dist_max = check_real(dist_max, "dist_max", 0.0, low_open=True)
    number = isinstance(dist_ord, (int, float, np.integer, np.floating)) and not isinstance(dist_ord, bool)
    if not (number and float(dist_ord) >= 1):  # NaN fails too
        raise ArgumentError(f"dist_ord must be a number >= 1 or inf, got {dist_ord!r}")
    dist_ord = float(dist_ord)
    cells = state.objective.shape[0]
    # one iteration's [C, n, D] gaps and [C, n] distances live at once
    check_memory(
        4 * cells * targets.shape[1] * (measure_dim + 2),
        f"target_points of {targets.shape[1]} targets x {cells} cells",
    )

    occupied = state.occupied
    quality = (state.objective - low) / (high - low)

    def one_iteration(points: jax.Array) -> jax.Array:
        gap = jnp.abs(state.measures[:, None, :] - points[None])
        if math.isinf(dist_ord):
            distance = jnp.max(gap, axis=-1)
        else:
            distance = jnp.sum(gap**dist_ord, axis=-1) ** (1.0 / dist_ord)
        distance = distance / dist_max

        def per_penalty(theta: jax.Array) -> jax.Array:
            value = jnp.where(occupied[:, None], quality[:, None] - theta * distance, -jnp.inf)
            return jnp.sum(jnp.max(value, axis=0))

        return jnp.sum(lax.map(per_penalty, penalty))

    scores = lax.map(one_iteration, targets)
    return CQDScore(mean=jnp.mean(scores), scores=scores, penalties=penalty)
