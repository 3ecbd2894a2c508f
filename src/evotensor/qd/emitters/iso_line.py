"""Iso+LineDD variation (Vassiliades & Mouret 2018; pyribs' IsoLineEmitter, QDax's isoline_variation)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from evotensor.core import rng
from evotensor.core.checks import check_spread
from evotensor.qd.archive import Archive, ArchiveState
from evotensor.qd.emitters.base import VariationEmitter


class IsoLineEmitter(VariationEmitter):
    """``x = x_i + iso_sigma N(0, I) + line_sigma N(0, 1) (x_j - x_i)`` for two elites drawn
    uniformly (with replacement): isotropic noise plus a step along the line between two elites,
    which follows the elites' hyper-volume ("directional" variation).

    While the archive is empty both parents are ``x0`` (so the line term is zero), or the batch is
    ``initial_solutions``.

    Args:
        x0: ``[dims]`` start point.
        iso_sigma: isotropic step (pyribs' default 0.01).
        line_sigma: line step (pyribs' default 0.2).
        batch_size: solutions per ask (pyribs' default 64).
        bounds: optional ``(low, high)`` box the solutions are clipped to.
        initial_solutions: optional ``[batch_size, dims]`` first batch.
    """

    def __init__(self, x0: Any, *, iso_sigma: float = 0.01, line_sigma: float = 0.2, **kwargs: Any):
        super().__init__(x0, **kwargs)
        self.iso_sigma = check_spread(iso_sigma, "iso_sigma")
        self.line_sigma = check_spread(line_sigma, "line_sigma")

    def ask(
        self, key: jax.Array, state: tuple[()], archive: Archive, archive_state: ArchiveState
    ) -> tuple[jax.Array, tuple[()]]:
        """``-> ([batch_size, dims], state)``."""
        parent_key, iso_key, line_key = jax.random.split(key, 3)
        n = self.batch_size
        parents = self.parents(parent_key, archive, archive_state, 2 * n)
        x_i, x_j = parents[:n], parents[n:]
        iso = self.iso_sigma * rng.normal(iso_key, x_i.shape, jnp.float32)
        line = self.line_sigma * rng.normal(line_key, (n, 1), jnp.float32)
        return self.first_batch(archive, archive_state, x_i + iso + line * (x_j - x_i)), state
