"""Incremental AMaLGaM (iAMaLGaM; Bosman, Grahl & Thierens 2013, "Benchmarking parameter-free
AMaLGaM on functions with and without noise", Evolutionary Computation 21(3)), with a full
(``IAMaLGaMFull``) or diagonal (``IAMaLGaMUnivariate``) Gaussian.

Each generation, with selection size ``k = floor(tau * N)`` (``tau = 0.35``):

1. **Selection (elitist).** The ``k`` best of the ``N`` new samples plus the best solution so far.
2. **Adaptive variance scaling (AVS).** If a selected new sample beats the previous best: reset
   the no-improvement stretch ``NIS = 0``, raise ``c_mult`` to at least 1 and multiply it by
   ``eta_inc = 1/0.9`` when the standard-deviation ratio ``SDR = max_j |L^-1 (x_imp - mean)|_j``
   (``x_imp`` = average improving sample, ``L`` the sampling Cholesky factor) exceeds
   ``theta_sdr = 1``. Otherwise: if ``c_mult <= 1`` increment ``NIS``; if ``c_mult > 1`` or
   ``NIS >= NIS_max = 25 + n``, multiply ``c_mult`` by ``eta_dec = 0.9``; if then ``c_mult < 1``
   while ``NIS < NIS_max``, set it back to 1.
3. **Estimation.** ``mean`` = average of the selection (the single best if ``c_mult < 1``); the
   maximum-likelihood covariance of the selection around that new mean is blended in,
   ``Sigma <- (1 - eta_Sigma) Sigma + eta_Sigma Sigma_hat``, and the anticipated mean shift
   ``shift <- (1 - eta_shift) shift + eta_shift (mean - mean_old)``. In the first generation both
   rates are 1 (plain estimates), as in the reference implementation.
4. **Sampling.** ``x = mean + L z`` with ``L L^T = c_mult Sigma``; the first
   ``floor(alpha_ams (N - 1))`` samples (``alpha_ams = tau N / (2 (N - 1))``) are moved by
   ``delta_ams c_mult shift`` (``delta_ams = 2``): anticipated mean shift (AMS).

Learning rates (Bosman et al. 2013, table of iAMaLGaM settings), with ``n`` the dimension:
``eta_Sigma = 1 - exp(-1.1 k^1.2 / n^1.6)``, ``eta_shift = 1 - exp(-1.2 k^0.31 / n^0.5)``. The
same formulas are used for the univariate model (as evosax does); a literature-exact univariate
table was not available when this was written.

Population size: ``population_size=None`` selects the iAMaLGaM guideline of Bosman, Grahl &
Thierens (2013), ``N = max(floor(2 / tau + 1), floor(10 sqrt(n)))`` for the full model and
``N = max(floor(2 / tau + 1), floor(4 sqrt(n)))`` for the univariate one (the first term keeps
``floor(tau N) >= 2``). These are the *incremental* variants' rules; the non-incremental AMaLGaM
guidelines are larger (``17 + 3 n^1.5`` full, ``10 sqrt(n)`` univariate). The same rules are in
the authors' group's reference implementations (S. C. Maree's HillVallEA / HICAM ``iamalgam``).

Robustness: the Cholesky factor falls back to the square root of the diagonal if the float32
factorization fails, so long runs past convergence stay finite.
"""

from __future__ import annotations

import functools
import math
import warnings

import jax
import jax.numpy as jnp
from jax.lax import Precision

from evotensor.core import rng
from evotensor.core.checks import ArgumentError, check_fraction, check_spread
from evotensor.core.pytree import pytree_dataclass
from evotensor.es.core.base import InvalidAsInfStrategy, population_size_or_default


@pytree_dataclass
class IAMaLGaMParams:
    """Dynamic hyperparameters (Bosman et al. 2013 parameter-free defaults).

    Attributes:
        eta_sigma: covariance learning rate (default from ``k`` and ``n``, see module docs).
        eta_shift: mean-shift learning rate (default from ``k`` and ``n``).
        eta_inc: variance-multiplier increase factor (default 1/0.9).
        eta_dec: variance-multiplier decrease factor (default 0.9).
        theta_sdr: SDR threshold (default 1.0).
        nis_max: maximum no-improvement stretch (default ``25 + n``).
        delta_ams: anticipated-mean-shift step multiplier (default 2.0).
        std_init: initial standard deviation, ``Sigma_0 = std_init^2 I`` (default 1.0).
    """

    eta_sigma: jax.Array
    eta_shift: jax.Array
    eta_inc: jax.Array
    eta_dec: jax.Array
    theta_sdr: jax.Array
    nis_max: jax.Array
    delta_ams: jax.Array
    std_init: jax.Array


@pytree_dataclass
class IAMaLGaMState:
    """``mean [dims]``; ``cov`` ``[dims, dims]`` (full) or ``[dims]`` (univariate variances);
    ``shift [dims]``; ``c_mult []``; ``nis []`` int32; ``best_solution [dims]``, ``best_fitness []``;
    ``generation []``."""

    mean: jax.Array
    cov: jax.Array
    shift: jax.Array
    c_mult: jax.Array
    nis: jax.Array
    best_solution: jax.Array
    best_fitness: jax.Array
    generation: jax.Array


def adaptive_variance_scaling(
    improved: jax.Array, sdr: jax.Array, c_mult: jax.Array, nis: jax.Array, params: IAMaLGaMParams
) -> tuple[jax.Array, jax.Array]:
    """AVS update of ``(c_mult, nis)`` (scalars), step 2 of the module docs."""
    # improvement branch
    c_up = jnp.maximum(c_mult, 1.0)
    c_up = jnp.where(sdr > params.theta_sdr, c_up * params.eta_inc, c_up)
    # no-improvement branch
    nis_down = jnp.where(c_mult <= 1.0, nis + 1, nis)
    c_down = jnp.where((c_mult > 1.0) | (nis_down >= params.nis_max), c_mult * params.eta_dec, c_mult)
    c_down = jnp.where((c_down < 1.0) & (nis_down < params.nis_max), 1.0, c_down)
    return jnp.where(improved, c_up, c_down), jnp.where(improved, 0, nis_down).astype(jnp.int32)


def default_population_size(num_dims: int, selection_ratio: float = 0.35, univariate: bool = False) -> int:
    """iAMaLGaM's population-size guideline (Bosman, Grahl & Thierens 2013).

    ``max(floor(2 / tau + 1), floor(c sqrt(n)))`` with ``c = 10`` (full) or ``c = 4`` (univariate),
    ``tau`` = ``selection_ratio``, ``n`` = ``num_dims``; e.g. n = 10: 31 (full), 12 (univariate).
    """
    scale = 4.0 if univariate else 10.0
    return max(int(math.floor(2.0 / selection_ratio + 1.0)), int(math.floor(scale * math.sqrt(num_dims))))


class IAMaLGaMFull(InvalidAsInfStrategy):
    """iAMaLGaM with a full covariance matrix.

    Args:
        population_size: samples per generation N (needs ``floor(tau N) >= 2``); ``None``: the
            iAMaLGaM guideline :func:`default_population_size` (``10 sqrt(n)`` full, ``4 sqrt(n)``
            univariate).
        solution: template pytree (initial mean), exclusive with ``num_dims`` (mean 0).
        num_dims: flat dimension n.
        selection_ratio: tau (static, default 0.35).
        std_init: default initial standard deviation (also in params).

    Example::

        es = IAMaLGaMFull(32, num_dims=10)
        state = es.init(jax.random.key(0))
        x, state = es.ask(jax.random.key(1), state)            # x: [32, 10]
        state, metrics = es.tell(jax.random.key(2), state, x, (x**2).sum(1))
    """

    name = "iamalgam_full"
    square_matrices = 3  # the covariance, its Cholesky factor, the refit
    # an all-invalid generation would re-estimate the model from an arbitrary "selection": skip it
    freeze_on_all_invalid = True
    min_population_size = 2
    univariate = False

    def __init__(
        self, population_size=None, solution=None, num_dims=None, *, selection_ratio=0.35, std_init=1.0
    ):
        selection_ratio = check_fraction(selection_ratio, "selection_ratio")
        guideline = functools.partial(
            default_population_size, selection_ratio=selection_ratio, univariate=self.univariate
        )
        super().__init__(
            population_size_or_default(population_size, solution, num_dims, guideline), solution, num_dims
        )
        self.selection_ratio = selection_ratio
        self.num_selected = int(math.floor(self.selection_ratio * self.population_size))
        if self.num_selected < 2:
            raise ArgumentError(
                f"population_size * selection_ratio must select >= 2 samples, got "
                f"floor({self.selection_ratio} * {self.population_size}) = {self.num_selected}"
            )
        alpha_ams = 0.5 * self.selection_ratio * self.population_size / (self.population_size - 1)
        self.num_ams = int(math.floor(alpha_ams * (self.population_size - 1)))
        self.std_init = check_spread(std_init, "std_init")
        if not self.univariate and self.num_dims > 5000:
            warnings.warn(
                f"IAMaLGaMFull stores a {self.num_dims}x{self.num_dims} covariance and factorizes it every "
                "generation; use IAMaLGaMUnivariate (or Sep-CMA-ES / LM-MA-ES) at this dimension.",
                stacklevel=2,
            )

    def default_params(self) -> IAMaLGaMParams:
        k, n = self.num_selected, self.num_dims
        f = jnp.float32
        return IAMaLGaMParams(
            eta_sigma=f(1.0 - math.exp(-1.1 * k**1.2 / n**1.6)),
            eta_shift=f(1.0 - math.exp(-1.2 * k**0.31 / n**0.5)),
            eta_inc=f(1.0 / 0.9),
            eta_dec=f(0.9),
            theta_sdr=f(1.0),
            nis_max=f(25 + n),
            delta_ams=f(2.0),
            std_init=f(self.std_init),
        )

    # -- model-specific pieces (full covariance) -------------------------------------------
    def _initial_cov(self, std_init):
        return std_init**2 * jnp.eye(self.num_dims, dtype=jnp.float32)

    def _factor(self, cov, c_mult):
        """Sampling factor L with ``L L^T = c_mult cov``; falls back to the diagonal if needed."""
        scaled = c_mult * cov
        chol = jnp.linalg.cholesky(scaled)
        diag = jnp.diag(jnp.sqrt(jnp.maximum(jnp.diag(scaled), 0.0)))
        return jnp.where(jnp.all(jnp.isfinite(chol)), chol, diag)

    def _sample(self, z, factor):
        # HIGHEST (here and below): exact float32 on GPUs, whose default matmul precision is TF32
        return jnp.matmul(z, factor.T, precision=Precision.HIGHEST)

    def _whiten(self, v, factor):
        return jax.scipy.linalg.solve_triangular(factor, v, lower=True)

    def _estimate(self, centered):
        return jnp.matmul(centered.T, centered, precision=Precision.HIGHEST) / self.num_selected

    # -- protocol ------------------------------------------------------------------------------
    def _init(self, key, params):
        mean = self.initial_mean()
        return IAMaLGaMState(
            mean=mean,
            cov=self._initial_cov(params.std_init),
            shift=jnp.zeros_like(mean),
            c_mult=jnp.float32(1.0),
            nis=jnp.zeros((), jnp.int32),
            **self._initial_best_fields(),
        )

    def _ask(self, key, state, params):
        z = rng.normal(key, (self.population_size, self.num_dims), jnp.float32)
        x = state.mean + self._sample(z, self._factor(state.cov, state.c_mult))
        moved = (jnp.arange(self.population_size) < self.num_ams)[:, None]
        return jnp.where(moved, x + params.delta_ams * state.c_mult * state.shift, x), state

    def _tell(self, key, state, x, fitness, params):
        k = self.num_selected
        first = state.generation == 0
        # elitist selection over the new samples and the best so far
        pool_x = jnp.concatenate([state.best_solution[None], x])
        pool_f = jnp.concatenate([state.best_fitness[None], fitness])
        chosen = jnp.argsort(pool_f, stable=True)[:k]  # ties keep the elite (index 0)
        selected = pool_x[chosen]
        # AVS: which selected *new* samples improve on the previous best
        improving = (chosen > 0) & (pool_f[chosen] < state.best_fitness)
        count = improving.sum()
        improved = count > 0
        improving_sum = jnp.matmul(improving.astype(jnp.float32), selected, precision=Precision.HIGHEST)
        x_imp = improving_sum / jnp.maximum(count, 1)
        factor = self._factor(state.cov, state.c_mult)
        sdr = jnp.max(jnp.abs(self._whiten(x_imp - state.mean, factor)))
        sdr = jnp.where(improved & jnp.isfinite(sdr), sdr, 0.0)
        c_mult, nis = adaptive_variance_scaling(improved & ~first, sdr, state.c_mult, state.nis, params)
        c_mult = jnp.where(first, state.c_mult, c_mult)
        nis = jnp.where(first, state.nis, nis)
        # estimation
        # sums over samples are written as matvecs so vmapped runs match single runs bitwise
        selected_sum = jnp.matmul(jnp.ones(k, jnp.float32), selected, precision=Precision.HIGHEST)
        mean = jnp.where(c_mult < 1.0, selected[0], selected_sum / k)
        eta_sigma = jnp.where(first, 1.0, params.eta_sigma)
        eta_shift = jnp.where(first, 1.0, params.eta_shift)
        cov = (1.0 - eta_sigma) * state.cov + eta_sigma * self._estimate(selected - mean)
        shift = (1.0 - eta_shift) * state.shift + eta_shift * (mean - state.mean)
        best, metrics = self._next_best_fields(state, x, fitness)
        new = IAMaLGaMState(mean=mean, cov=cov, shift=shift, c_mult=c_mult, nis=nis, **best)
        return new, {**metrics, "c_mult": c_mult}


class IAMaLGaMUnivariate(IAMaLGaMFull):
    """iAMaLGaM with a diagonal covariance (``state.cov`` holds the ``[dims]`` variances).

    Same arguments and parameters as :class:`IAMaLGaMFull`; memory and time are linear in the
    dimension.
    """

    name = "iamalgam_univariate"
    square_matrices = 0
    univariate = True

    def _initial_cov(self, std_init):
        return jnp.full((self.num_dims,), std_init**2, jnp.float32)

    def _factor(self, cov, c_mult):
        return jnp.sqrt(jnp.maximum(c_mult * cov, 0.0))

    def _sample(self, z, factor):
        return z * factor

    def _whiten(self, v, factor):
        return v / factor

    def _estimate(self, centered):
        ones = jnp.ones(self.num_selected, jnp.float32)
        return jnp.matmul(ones, centered**2, precision=Precision.HIGHEST) / self.num_selected
