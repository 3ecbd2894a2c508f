"""OMG-MEGA's emitter (Fontaine & Nikolaidis 2021, "Differentiable Quality Diversity"): elites
stepped along a random mix of their objective and measure gradients.

Each child comes from an elite ``x`` drawn uniformly from the archive (``x0`` while it is empty):

* **Intermediate solution.** ``y = clip(x + sigma N(0, I))``; with ``line_sigma > 0`` also a step
  along the line to a second elite ``x2`` (Iso+LineDD): ``y = clip(x + sigma N(0, I) +
  line_sigma N(0, 1) (x2 - x))``. The default ``sigma = 0`` keeps ``y = x`` (QDax's emitter).
* **Gradients** at ``y``: the Jacobian's rows, the objective's first (maximized) then each measure's,
  non-finite entries set to 0 (as QDax's example does), each row divided by its norm plus
  ``epsilon`` (``normalize_grad``).
* **Branch.** ``y + |c_0| grad f + sum_j c_j grad m_j`` with ``c ~ N(0, sigma_g^2 I)``, clipped to
  ``bounds``; with ``measure_gradients=False``, ``y + sigma_g grad f``.

These are pyribs 0.12's ``GradientOperatorEmitter`` rules (``sigma_g`` a standard deviation; QDax's
``OMGMEGAEmitter`` takes its variance: QDax's ``sigma_g=10`` is ``sigma_g=sqrt(10)`` here), with two
differences, both QDax's way: the emitter computes the Jacobian itself (the ``jacobian`` function
traced into the compiled generation, as :class:`~evotensor.qd.emitters.GradientArborescenceEmitter`)
instead of pyribs' separate evaluation of the intermediate solutions (``ask_dqd`` / ``tell_dqd``,
which also offers them to the archive), and gradients are normalised by default (pyribs' default is
not to; QDax always does, without ``epsilon``). ::

    emitter = GradientOperatorEmitter(np.zeros(1000), sigma_g=10**0.5,
                                      jacobian=problem_jacobian(RastriginProj(1000)), batch_size=36)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core import rng
from evotensor.core.checks import ArgumentError, check_real, check_spread
from evotensor.qd.archive import Archive, ArchiveState
from evotensor.qd.emitters.base import VariationEmitter
from evotensor.qd.emitters.gradient_arborescence import jacobian_measure_dim
from evotensor.qd.emitters.iso_line import iso_line_step


def omg_branch(
    key: jax.Array, y: jax.Array, jacobian: jax.Array, sigma_g: float, measure_gradients: bool = True
) -> jax.Array:
    """The gradient step of OMG-MEGA, unclipped.

    Args:
        key: draws the coefficients ``c [n, 1 + D] ~ N(0, sigma_g^2)``, ``c_0`` made ``|c_0|``.
        y: ``[n, dims]`` the points branched from.
        jacobian: ``[n, 1 + D, dims]`` their gradients (objective first), as they are to be used
            (normalised or not).
        sigma_g: the coefficients' standard deviation (the objective step itself without measure
            gradients).
        measure_gradients: use the measure gradients; else ``y + sigma_g grad f``.

    Returns:
        ``[n, dims]``.
    """
    if not measure_gradients:
        return y + sigma_g * jacobian[:, 0]
    c = sigma_g * rng.normal(key, jacobian.shape[:2], y.dtype)
    c = c.at[:, 0].set(jnp.abs(c[:, 0]))
    return y + jnp.einsum("nk,nkd->nd", c, jacobian, precision=jax.lax.Precision.HIGHEST)


class GradientOperatorEmitter(VariationEmitter):
    """OMG-MEGA's emitter (module docstring for the rules).

    Args:
        x0: ``[dims]`` start point (the parent while the archive is empty).
        sigma_g: standard deviation of the gradient coefficients (> 0).
        jacobian: ``x [dims] -> [1 + D, dims]``, the gradients of the objective (maximized) and of
            each measure at ``x``, a pure JAX function (e.g.
            :func:`~evotensor.qd.emitters.problem_jacobian`).
        sigma: isotropic noise of the intermediate solutions (>= 0; default 0: none).
        line_sigma: Iso+LineDD line step of the intermediate solutions (>= 0; default 0: none).
        measure_gradients: step along the measure gradients too (default True).
        normalize_grad: divide each gradient by its norm plus ``epsilon`` (default True).
        epsilon: the normalisation's guard (default 1e-8).
        batch_size: children per generation (pyribs' default 64; QDax's example 36).
        bounds, initial_solutions: as for :class:`~evotensor.qd.emitters.base.VariationEmitter`.

    Attributes:
        measure_dim: ``D``, read from the Jacobian's shape at construction.
    """

    def __init__(
        self,
        x0: Any,
        *,
        sigma_g: float,
        jacobian: Callable[[jax.Array], jax.Array],
        sigma: float = 0.0,
        line_sigma: float = 0.0,
        measure_gradients: bool = True,
        normalize_grad: bool = True,
        epsilon: float = 1e-8,
        **kwargs: Any,
    ):
        super().__init__(x0, **kwargs)
        self.sigma_g = check_spread(sigma_g, "sigma_g")
        self.sigma = check_spread(sigma, "sigma", allow_zero=True)
        self.line_sigma = check_spread(line_sigma, "line_sigma", allow_zero=True)
        self.epsilon = check_real(epsilon, "epsilon", 0.0, low_open=True)
        for name, flag in (("measure_gradients", measure_gradients), ("normalize_grad", normalize_grad)):
            if not isinstance(flag, (bool, np.bool_)):
                raise ArgumentError(f"{name} must be a bool, got {flag!r}")
        self.measure_gradients = bool(measure_gradients)
        self.normalize_grad = bool(normalize_grad)
        self.measure_dim = jacobian_measure_dim(jacobian, self.solution_dim)
        self.jacobian = jacobian

    def init(self, key: jax.Array, archive: Archive) -> tuple[()]:
        """Stateless: checks the archive (its solutions and its ``D`` measures)."""
        self.check_archive(archive)
        if archive.measure_dim != self.measure_dim:
            raise ArgumentError(
                f"GradientOperatorEmitter: the jacobian gives {self.measure_dim} measure gradients but the "
                f"archive has {archive.measure_dim} measures"
            )
        return ()

    def gradients(self, y: jax.Array) -> jax.Array:
        """``[n, dims] -> [n, 1 + D, dims]``: the Jacobians, normalised per row if asked."""
        jac = jax.vmap(self.jacobian)(y).astype(jnp.float32)
        jac = jnp.where(jnp.isfinite(jac), jac, 0.0)  # a non-finite gradient entry steps nowhere
        if self.normalize_grad:
            jac = jac / (jnp.linalg.norm(jac, axis=-1, keepdims=True) + self.epsilon)
        return jac

    def ask(
        self, key: jax.Array, state: tuple[()], archive: Archive, archive_state: ArchiveState
    ) -> tuple[jax.Array, tuple[()]]:
        """``-> ([batch_size, dims], state)``."""
        parent_key, line_parent_key, noise_key, line_key, coefficient_key = jax.random.split(key, 5)
        n = self.batch_size
        y = self.parents(parent_key, archive, archive_state, n)
        if self.line_sigma > 0:
            other = self.parents(line_parent_key, archive, archive_state, n)
            y = iso_line_step(noise_key, line_key, y, other, self.sigma, self.line_sigma)
        elif self.sigma > 0:
            y = y + self.sigma * rng.normal(noise_key, y.shape, jnp.float32)
        y = self.clip(y)
        branches = omg_branch(coefficient_key, y, self.gradients(y), self.sigma_g, self.measure_gradients)
        return self.first_batch(archive, archive_state, branches), state
