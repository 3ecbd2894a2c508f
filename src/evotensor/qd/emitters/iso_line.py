"""Iso+LineDD variation (Vassiliades & Mouret 2018; pyribs' IsoLineEmitter, QDax's isoline_variation)."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from evotensor.core import rng
from evotensor.core.checks import ArgumentError, check_spread
from evotensor.qd.archive import Archive, ArchiveState
from evotensor.qd.emitters.base import VariationEmitter


def iso_line_step(
    iso_key: jax.Array,
    line_key: jax.Array,
    x_i: jax.Array,
    x_j: jax.Array,
    iso_sigma: float,
    line_sigma: float,
) -> jax.Array:
    """``x_i + iso_sigma N(0, I) + line_sigma N(0, 1) (x_j - x_i)``: ``[n, d]`` parents -> ``[n, d]``
    (one line draw per row)."""
    iso = iso_sigma * rng.normal(iso_key, x_i.shape, x_i.dtype)
    line = line_sigma * rng.normal(line_key, (x_i.shape[0], 1), x_i.dtype)
    return x_i + iso + line * (x_j - x_i)


@dataclasses.dataclass(frozen=True)
class IsoLineCrossover:
    """Iso+LineDD as a two-parent operator, ``op(key, x1 [n, d], x2 [n, d]) -> [n, d]``
    (:func:`iso_line_step`, not clipped; pymap_elites' ``iso_dd`` clips to its box, which the
    strategy using it does). A variation for :class:`~evotensor.qd.MultiTaskMAPElites` or
    :class:`~evotensor.qd.MixingEmitter`.

    Args:
        iso_sigma: isotropic step (default 0.01).
        line_sigma: line step (default 0.2).
    """

    iso_sigma: float = 0.01
    line_sigma: float = 0.2

    def __post_init__(self):
        object.__setattr__(self, "iso_sigma", check_spread(self.iso_sigma, "iso_sigma"))
        object.__setattr__(self, "line_sigma", check_spread(self.line_sigma, "line_sigma"))

    def __call__(self, key: jax.Array, x1: Any, x2: Any) -> jax.Array:
        """``x1 [n, d], x2 [n, d] -> [n, d]`` float32."""
        x1, x2 = jnp.asarray(x1, jnp.float32), jnp.asarray(x2, jnp.float32)
        if x1.ndim != 2 or x1.shape != x2.shape:
            raise ArgumentError(f"x1 and x2 must be [n, d] of one shape, got {x1.shape} and {x2.shape}")
        iso_key, line_key = jax.random.split(key)
        return iso_line_step(iso_key, line_key, x1, x2, self.iso_sigma, self.line_sigma)


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
        x = iso_line_step(iso_key, line_key, parents[:n], parents[n:], self.iso_sigma, self.line_sigma)
        return self.first_batch(archive, archive_state, x), state
