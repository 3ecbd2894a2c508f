"""Gaussian mutation of archive elites (the original MAP-Elites variation; pyribs' GaussianEmitter)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core import rng
from evotensor.core.checks import MAX_SPREAD, ArgumentError
from evotensor.qd.archive import Archive, ArchiveState
from evotensor.qd.emitters.base import VariationEmitter


class GaussianEmitter(VariationEmitter):
    """``x = elite + sigma * N(0, I)``, each elite drawn uniformly from the archive.

    While the archive is empty the parent is ``x0`` (or the batch is ``initial_solutions``).

    Args:
        sigma: step size, a scalar or ``[dims]`` (no default, as in pyribs).
        x0: ``[dims]`` start point.
        batch_size: solutions per ask (pyribs' default 64).
        bounds: optional ``(low, high)`` box the solutions are clipped to.
        initial_solutions: optional ``[batch_size, dims]`` first batch.

    Example::

        emitter = GaussianEmitter(sigma=0.1, x0=jnp.zeros(10), batch_size=32)
    """

    def __init__(self, sigma: Any, x0: Any, **kwargs: Any):
        super().__init__(x0, **kwargs)
        if isinstance(sigma, (bool, np.bool_, str, bytes)) or sigma is None:
            raise ArgumentError(f"sigma must be a number or a [{self.solution_dim}] array, got {sigma!r}")
        try:
            sigma = np.asarray(sigma, np.float64)
        except (TypeError, ValueError) as err:
            raise ArgumentError(
                f"sigma must be a number or a [{self.solution_dim}] array, got {sigma!r}"
            ) from err
        if sigma.ndim > 1 or (sigma.ndim == 1 and sigma.size != self.solution_dim):
            raise ArgumentError(f"sigma must be a scalar or [{self.solution_dim}], got shape {sigma.shape}")
        if not np.all(np.isfinite(sigma)) or np.any(sigma < 0) or np.any(sigma > MAX_SPREAD):
            raise ArgumentError(f"sigma must be finite, >= 0 and <= {MAX_SPREAD:g}, got {sigma!r}")
        self.sigma = jnp.asarray(sigma.astype(np.float32))

    def ask(
        self, key: jax.Array, state: tuple[()], archive: Archive, archive_state: ArchiveState
    ) -> tuple[jax.Array, tuple[()]]:
        """``-> ([batch_size, dims], state)``."""
        parent_key, noise_key = jax.random.split(key)
        parents = self.parents(parent_key, archive, archive_state, self.batch_size)
        noise = rng.normal(noise_key, parents.shape, jnp.float32)
        return self.first_batch(archive, archive_state, parents + self.sigma * noise), state
