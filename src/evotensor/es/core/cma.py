"""The public core of CMA-ES: constants, params and state, sampling and the update, as pure functions.

:class:`evotensor.es.CMAES` is a thin strategy around these; the restart wrappers
(:mod:`evotensor.es.core.restarts`) and the CMA-ES emitter of CMA-ME / CMA-MAE
(:mod:`evotensor.qd.emitters.cma_es`) use them with constants of their own. What is public here is
``__all__``; everything a caller needs is in it.

The update follows pycma 4.x exactly (``cma/evolution_strategy.py``, ``CMAEvolutionStrategy.tell``),
for its default options without mirrored sampling. :func:`cma_update` is a sequence of small steps,
each a function below tagged with the equation it implements: Hansen's tutorial (N. Hansen, "The
CMA Evolution Strategy: A Tutorial", arXiv:1604.00772, Appendix A, eqs. 38-47) where pycma follows
it, pycma's code where it refines it. In short:

* recombination weights ``w'_i = ln((lambda+1)/2) - ln i``; positive ones sum to 1, negative
  ("active") ones are finalized as ``min(1 + c1/cmu, (1-c1-cmu)/(n cmu), 1 + 2 mu_eff^-/(mu_eff+2))``
  times a shape summing to -1;
* ``c_sigma = (mu_eff+2)/(n+mu_eff+3)`` (capped at 1/2), pycma's damping ``d_sigma``,
  ``c_c = (4+mu_eff/n)/(n+4+2mu_eff/n)``, ``c_1 = min(1, lambda/6) * 2/((n+1.3)^2+mu_eff)``,
  ``c_mu = min(1-c_1, 2(0.25+mu_eff-2+1/mu_eff)/((n+2)^2+mu_eff))``;
* squared-form ``h_sigma``: ``|p_sigma|^2 / (1-(1-c_sigma)^(2g)) / n - 1 < 1 + 4/(n+1)``;
* negative-weight vectors rescaled to Mahalanobis length ``sqrt(n)`` before the rank-mu update;
* a *lazy* eigendecomposition: ``C = B diag(D^2) B^T`` is decomposed only when at least
  ``lazy_gap = 1/(c_1+c_mu)/n/10`` generations passed since the last decomposition, kept lazy under
  ``vmap`` (:mod:`evotensor.es.core.lazy_eigen`).

Step size: cumulative step-size adaptation (CSA, tutorial eq. 44 with pycma's clipping), purecma's
squared-length rule (``preset="tutorial"``), or two-point adaptation (TPA, pycma's
``CMAAdaptSigmaTPA``): from the second generation on the first two candidates are
``mean +- sigma * y0``, ``y0`` the last mean shift rescaled to the Mahalanobis length of a fresh
``N(0, I)`` sample, and ``tell`` turns their fitness ranks into
``z = (#{f < f_1} - #{f < f_0}) / (lambda - 1)``, ``s <- (1 - 0.3) s + 0.3 sign(z) |z|^0.5``,
``sigma <- sigma exp(s / d_TPA)`` with ``d_TPA = 0.7 + 2 ln n + 2 ln max(1, lambda - n)``; the
conjugate path is still kept, for ``h_sigma`` (with pycma's uncapped ``c_sigma``).

``preset="tutorial"`` gives the textbook constants of pycma's ``purecma`` (positive weights only,
``c_sigma`` with +5, ``c_1`` without the ``min(1, lambda/6)`` factor, ``c_mu`` without the 0.25
offset, ``d_sigma = 2 mu_eff/lambda + 0.3 + c_sigma``, the squared-length step-size rule and
``lazy_gap = 0.5/(c_1+c_mu)/n``).

Numerical guards (float32 runs far past convergence stay finite): ``sigma`` is clipped to
``[sigma_min, sigma_max]``, the eigenvalues of ``C`` are lifted to a condition number of at most
``max_condition`` (pycma's ``limit_condition``), and a non-finite decomposition keeps the previous
``B, D``. The update expects finite fitness (``VectorStrategy.tell`` ranks NaN/inf last first).

Bit-identical ``vmap``: sums over rows and matrix-vector products are explicit
(:func:`evotensor.core.numerics.exact_sum`) and divisions by scalars are multiplications by their
reciprocals; XLA lowers a batched dot and a batched division differently from the unbatched ones.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.lax import Precision

from evotensor.core import rng
from evotensor.core.checks import check_choice
from evotensor.core.numerics import exact_sum, rounded
from evotensor.core.pytree import pytree_dataclass
from evotensor.es.core.lazy_eigen import decompose, lazy_eigen_update

__all__ = [
    "GUARDS",
    "PRESETS",
    "STEP_SIZE_RULES",
    "TPA_DIMENSION",
    "CMAESParams",
    "CMAESState",
    "adapt_covariance",
    "chi_n",
    "cma_constants",
    "cma_update",
    "conjugate_path",
    "decompose",
    "evolution_path",
    "h_sigma_flag",
    "initial_state",
    "lazy_eigen_update",
    "log_step_csa",
    "log_step_squared",
    "log_step_tpa",
    "params_from_constants",
    "rank_population",
    "recombine",
    "resolve_step_size",
    "sample",
]

PRESETS = ("pycma", "tutorial")
STEP_SIZE_RULES = ("auto", "csa", "tpa")
TPA_DIMENSION = 300  # pycma's ``TPA_dimension``: "auto" uses TPA from this many dimensions on


# --------------------------------------------------------------------------------------------------
# constants
# --------------------------------------------------------------------------------------------------
def chi_n(num_dims: int, preset: str = "pycma") -> float:
    """Expected norm of an ``n``-dimensional standard normal vector, as the preset computes it.

    pycma stores the exact value ``sqrt(2) Gamma((n+1)/2) / Gamma(n/2)`` for ``n <= 100`` and uses
    ``sqrt(n) (1 - 1/(4n) + 1/(32 n^2))`` above; purecma always uses ``1/(21 n^2)``.
    """
    n = num_dims
    if preset == "tutorial":
        return n**0.5 * (1 - 1.0 / (4 * n) + 1.0 / (21 * n**2))
    if n <= 100:
        return math.sqrt(2.0) * math.exp(math.lgamma((n + 1) / 2.0) - math.lgamma(n / 2.0))
    return n**0.5 * (1 - 1.0 / (4 * n) + 1.0 / (32 * n**2))


def cma_constants(
    num_dims: int, lam: Any, size: int, preset: str = "pycma", xp: Any = np, two_point: bool = False
) -> dict[str, Any]:
    """All derived CMA-ES constants for dimension ``num_dims`` and population size ``lam``.

    Written once for NumPy (exact float64 at construction) and ``jax.numpy`` (a *traced* ``lam``
    for restarts with a dynamic population size).

    Args:
        num_dims: ``n`` (static int).
        lam: population size (int, or a traced integer scalar when ``xp`` is ``jax.numpy``).
        size: length of the returned weight vector (``>= lam``); ranks ``>= lam`` get weight 0.
        preset: ``"pycma"`` or ``"tutorial"``.
        xp: ``numpy`` or ``jax.numpy``.
        two_point: the constants for TPA step-size adaptation (``c_sigma`` of the ``h_sigma`` path
            then is pycma's uncapped ``(mu_eff+2)/(n+mu_eff+3)``).

    Returns:
        dict with ``weights [size]`` (rank-ordered, best first), ``mu_eff, c_sigma, d_sigma, c_c,
        c_1, c_mu, lazy_gap, tpa_damp, tpa_c`` (scalars) and ``chi_n`` (:func:`chi_n`, a float).
    """
    n = float(num_dims)
    dtype = xp.float64 if xp is np else jnp.result_type(float)
    total = np.sum if xp is np else exact_sum  # batch-invariant sums when traced (see exact_sum)
    lam_f = xp.asarray(lam, dtype=dtype)
    i = xp.arange(1, size + 1, dtype=dtype)
    valid = i <= lam_f
    raw = xp.where(valid, xp.log((lam_f + 1) / 2) - xp.log(i), 0.0)
    pos = raw > 0
    neg = valid & (raw < 0)
    w_pos = xp.where(pos, raw, 0.0)
    w_pos = w_pos / total(w_pos)
    mu_eff = 1.0 / total(w_pos**2)
    if preset == "tutorial":
        c_sigma = (mu_eff + 2) / (n + mu_eff + 5)
        c_c = (4 + mu_eff / n) / (n + 4 + 2 * mu_eff / n)
        c_1 = 2 / ((n + 1.3) ** 2 + mu_eff)
        c_mu = xp.minimum(1 - c_1, 2 * (mu_eff - 2 + 1 / mu_eff) / ((n + 2) ** 2 + mu_eff))
        d_sigma = 2 * mu_eff / lam_f + 0.3 + c_sigma
        weights = w_pos
        lazy_gap = 0.5 / (c_1 + c_mu) / n
    else:
        c_sigma = (mu_eff + 2) / (n + mu_eff + 3)
        if not two_point:  # pycma's CSA caps it; its TPA keeps the path with the plain value
            c_sigma = xp.minimum(0.5, c_sigma)
        # pycma 4.x CSA damping, no mirrors: 0.5 + 1/2 + 2 max(0, d_in sqrt((mu_eff-1)/(n+1)) - 1) + c_sigma
        damp_in = max(1.0, 3.0 * (1 - 0.5 ** (n / 9.0)))
        d_sigma = 1.0 + 2 * xp.maximum(0.0, damp_in * xp.sqrt((mu_eff - 1) / (n + 1)) - 1) + c_sigma
        c_c = (4 + mu_eff / n) / (n + 4 + 2 * mu_eff / n)
        c_1 = xp.minimum(1.0, lam_f / 6) * 2 / ((n + 1.3) ** 2 + mu_eff)
        c_mu = xp.minimum(1 - c_1, 2 * (0.25 + mu_eff - 2 + 1 / mu_eff) / ((n + 2) ** 2 + mu_eff))
        w_neg = xp.where(neg, raw, 0.0)
        w_neg = w_neg / -total(w_neg)  # sums to -1
        mu_eff_minus = 1.0 / total(w_neg**2)
        neg_sum = xp.minimum(
            xp.minimum(1 + c_1 / c_mu, (1 - c_1 - c_mu) / (c_mu * n)), 1 + 2 * mu_eff_minus / (mu_eff + 2)
        )
        weights = w_pos + neg_sum * w_neg
        lazy_gap = 1.0 / (c_1 + c_mu + 1e-23) / n / 10
    # pycma's CMAAdaptSigmaTPA: damping 0.7 + 2 ln n + 2 ln max(1, lambda - n), averaging rate 0.3
    tpa_damp = 0.7 + 2 * math.log(n) + 2 * xp.log(xp.maximum(1.0, lam_f - n))
    return dict(
        weights=weights,
        mu_eff=mu_eff,
        c_sigma=c_sigma,
        d_sigma=d_sigma,
        c_c=c_c,
        c_1=c_1,
        c_mu=c_mu,
        lazy_gap=lazy_gap,
        tpa_damp=tpa_damp,
        tpa_c=0.3,
        chi_n=chi_n(num_dims, preset),
    )


def resolve_step_size(step_size: str, num_dims: int, preset: str = "pycma") -> str:
    """``"csa"`` or ``"tpa"`` for the ``step_size`` argument (``"auto"``: pycma's choice, TPA from
    ``TPA_DIMENSION`` dimensions on, never for ``preset="tutorial"``); ValueError names it."""
    check_choice(step_size, "step_size", STEP_SIZE_RULES)
    if step_size == "auto":
        return "tpa" if preset == "pycma" and num_dims >= TPA_DIMENSION else "csa"
    return step_size


# --------------------------------------------------------------------------------------------------
# params and state
# --------------------------------------------------------------------------------------------------
GUARDS = dict(sigma_min=1e-20, sigma_max=1e20, max_condition=1e14)  # default numerical guards of the params


@pytree_dataclass
class CMAESParams:
    """Dynamic hyperparameters of CMA-ES (a pytree: ``vmap`` over any field).

    Attributes:
        mean_init: ``[n]`` initial mean.
        sigma_init: ``[]`` initial step size.
        weights: ``[pop]`` rank-ordered recombination weights (best first; negative = active).
        mu_eff, c_mean, c_sigma, d_sigma, c_c, c_1, c_mu, chi_n: ``[]`` learning rates and constants.
        lazy_gap: ``[]`` generations between eigendecompositions (``<= 1``: every generation).
        tpa_damp, tpa_c: ``[]`` damping and averaging rate of two-point step-size adaptation.
        sigma_min, sigma_max: ``[]`` bounds for ``sigma`` (numerical guard).
        max_condition: ``[]`` largest allowed condition number of ``C`` (numerical guard).
    """

    mean_init: jax.Array
    sigma_init: jax.Array
    weights: jax.Array
    mu_eff: jax.Array
    c_mean: jax.Array
    c_sigma: jax.Array
    d_sigma: jax.Array
    c_c: jax.Array
    c_1: jax.Array
    c_mu: jax.Array
    chi_n: jax.Array
    lazy_gap: jax.Array
    tpa_damp: jax.Array
    tpa_c: jax.Array
    sigma_min: jax.Array
    sigma_max: jax.Array
    max_condition: jax.Array


@pytree_dataclass
class CMAESState:
    """CMA-ES state.

    Attributes:
        mean: ``[n]`` distribution mean.
        sigma: ``[]`` step size.
        p_sigma: ``[n]`` conjugate evolution path (for step-size adaptation).
        p_c: ``[n]`` evolution path (rank-one update).
        C: ``[n, n]`` covariance matrix.
        B: ``[n, n]`` eigenvectors of ``C`` at the last decomposition (columns).
        D: ``[n]`` square roots of the eigenvalues at the last decomposition (ascending).
        generation: ``[]`` int32, completed ``tell`` calls.
        last_eigen: ``[]`` int32, generation of the last decomposition.
        mean_shift: ``[n]`` ``mean - previous mean`` of the last ``tell`` (TPA's sampling direction).
        tpa_s: ``[]`` TPA's averaged rank difference (stays 0 under CSA).
        best_solution: ``[n]`` best candidate seen; ``best_fitness``: ``[]`` its (minimized) fitness.
    """

    mean: jax.Array
    sigma: jax.Array
    p_sigma: jax.Array
    p_c: jax.Array
    C: jax.Array
    B: jax.Array
    D: jax.Array
    generation: jax.Array
    last_eigen: jax.Array
    mean_shift: jax.Array
    tpa_s: jax.Array
    best_solution: jax.Array
    best_fitness: jax.Array


def params_from_constants(
    consts: dict[str, Any],
    dtype: Any,
    mean_init: jax.Array,
    sigma_init: jax.Array,
    **guards: jax.Array,
) -> CMAESParams:
    """:class:`CMAESParams` from :func:`cma_constants`' dict (NumPy or traced; a caller may have
    changed entries), every constant cast to ``dtype``, ``c_mean = 1``, ``mean_init [n]`` and
    ``sigma_init []`` as given, and the numerical guards ``sigma_min``, ``sigma_max``,
    ``max_condition``: :data:`GUARDS` in ``dtype``, unless given in ``guards``."""
    rates = ("mu_eff", "c_sigma", "d_sigma", "c_c", "c_1", "c_mu", "chi_n", "lazy_gap", "tpa_damp", "tpa_c")
    guards = {**{k: jnp.asarray(v, dtype) for k, v in GUARDS.items()}, **guards}
    return CMAESParams(
        mean_init=mean_init,
        sigma_init=sigma_init,
        weights=jnp.asarray(consts["weights"], dtype),
        c_mean=jnp.asarray(1.0, dtype),
        **{k: jnp.asarray(consts[k], dtype) for k in rates},
        **guards,
    )


# --------------------------------------------------------------------------------------------------
# sampling
# --------------------------------------------------------------------------------------------------
def initial_state(mean: jax.Array, sigma: jax.Array) -> CMAESState:
    """Fresh state around ``mean [n]`` with ``C = I``."""
    n = mean.shape[0]
    dtype = mean.dtype
    eye = jnp.eye(n, dtype=dtype)
    return CMAESState(
        mean=mean,
        sigma=jnp.asarray(sigma, dtype),
        p_sigma=jnp.zeros(n, dtype),
        p_c=jnp.zeros(n, dtype),
        C=eye,
        B=eye,
        D=jnp.ones(n, dtype),
        generation=jnp.zeros((), jnp.int32),
        last_eigen=jnp.zeros((), jnp.int32),
        mean_shift=jnp.zeros(n, dtype),
        tpa_s=jnp.zeros((), dtype),
        best_solution=mean,
        best_fitness=jnp.asarray(jnp.inf, dtype),
    )


def sample(key: jax.Array, state: CMAESState, population_size: int, two_point: bool = False) -> jax.Array:
    """``x = mean + sigma * B diag(D) z``, ``z ~ N(0, I)``: ``[population_size, n]``.

    With ``two_point`` (TPA) and after the first ``tell``, rows 0 and 1 are ``mean +- sigma * y0``
    instead: ``y0`` is the last mean shift scaled to the Mahalanobis length ``|C^-1/2 y0|`` of a
    fresh standard normal vector (pycma's ``_random_rescaling_factor_to_mahalanobis_size``; a zero
    shift gives ``y0 = 0``). Rows 2.. are drawn as without it.
    """
    n = state.mean.shape[0]
    z = rng.normal(key, (population_size, n), state.mean.dtype)
    # tie z to the state: under ``vmap`` over hyperparameters with one shared key, z would be
    # unbatched and XLA would lower the product below as a different (not bit-identical) matmul
    z = z + 0 * state.sigma
    # HIGHEST (here and below): exact float32 on GPUs, whose default float32 matmul precision is TF32
    y = jnp.matmul(z * state.D, state.B.T, precision=Precision.HIGHEST)
    if two_point:
        length = jnp.sqrt(exact_sum(rng.normal(jax.random.fold_in(key, 1), (n,), state.mean.dtype) ** 2))
        dm = state.mean_shift
        maha = jnp.sqrt(exact_sum((exact_sum(state.B * dm[:, None], axis=0) / state.D) ** 2))
        y0 = dm * jnp.where(maha > 0, length / jnp.where(maha > 0, maha, 1), 0.0)
        line = jnp.stack([y0, -y0])
        y = y.at[:2].set(jnp.where(state.generation > 0, line, y[:2]))
    return state.mean + rounded(state.sigma * y)


# --------------------------------------------------------------------------------------------------
# the update, step by step (cma_update below runs them in this order)
# --------------------------------------------------------------------------------------------------
def rank_population(
    state: CMAESState, x: jax.Array, fitness: jax.Array, params: CMAESParams
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Sort the candidates by fitness and recover their steps (tutorial eqs. 39-40 read backwards).

    Args: ``x [pop, n]`` candidates, ``fitness [pop]`` (finite, minimized; ties by index).

    Returns:
        ``(order [pop], xs [pop, n], ys [pop, n], w [pop])``: the ranking (best first), the sorted
        candidates ``x_i:lambda`` in the state's dtype, ``y_i:lambda = (x_i:lambda - m) / sigma`` and
        the recombination weights by rank.
    """
    x = x.astype(state.mean.dtype)
    order = jnp.argsort(fitness, stable=True)
    xs = x[order]
    # multiply by reciprocals of scalars: XLA may rewrite ``v / s`` as ``v * (1/s)`` in the batched
    # (vmapped) program but not in the unbatched one, which breaks bit-identical vmap
    ys = (xs - state.mean) * (1 / state.sigma)
    return order, xs, ys, params.weights.astype(state.mean.dtype)


def recombine(
    state: CMAESState, xs: jax.Array, w: jax.Array, params: CMAESParams
) -> tuple[jax.Array, jax.Array]:
    """Move the mean (tutorial eqs. 41-42): ``m' = m + c_m sum_{w_i > 0} w_i (x_i:lambda - m)``.

    Args: ``xs [pop, n]`` sorted candidates, ``w [pop]`` weights by rank (negative ones do not move
    the mean).

    Returns:
        ``(mean [n], dm [n])`` with ``dm = (m' - m) / (c_m sigma) = <y>_w``, the step the paths use.
    """
    w_pos = jnp.where(w > 0, w, 0.0)
    # an explicit weighted sum (not ``w @ xs``): XLA lowers the dot differently when batched
    mean = state.mean + params.c_mean * (exact_sum(w_pos[:, None] * xs, axis=0) - state.mean)
    return mean, (mean - state.mean) * ((1 / state.sigma) / params.c_mean)


def conjugate_path(state: CMAESState, dm: jax.Array, params: CMAESParams) -> jax.Array:
    """Cumulate the conjugate evolution path (tutorial eq. 43):
    ``p_sigma' = (1 - c_sigma) p_sigma + sqrt(c_sigma (2 - c_sigma) mu_eff) C^-1/2 <y>_w``, ``[n]``.

    ``C^-1/2 = B diag(1/D) B^T`` with the (possibly stale) factors of the last decomposition, as
    pycma does; the matrix-vector products are explicit sums, bit-identical under vmap.
    """
    bt_dm = exact_sum(state.B * dm[:, None], axis=0) / state.D
    z_mean = exact_sum(state.B * bt_dm[None, :], axis=1)
    c_s = params.c_sigma
    return (1 - c_s) * state.p_sigma + jnp.sqrt(c_s * (2 - c_s) * params.mu_eff) * z_mean


def h_sigma_flag(ps_sq: jax.Array, c_sigma: jax.Array, generation: jax.Array, num_dims: int) -> jax.Array:
    """pycma's stall indicator ``hsig`` (squared form; the tutorial's ``h_sigma`` of eq. 45):
    ``|p_sigma|^2 / (1 - (1 - c_sigma)^(2 g)) / n - 1 < 1 + 4 / (n + 1)``, ``[]`` bool.

    Args: ``ps_sq`` = ``|p_sigma|^2`` after this generation's update, ``generation`` = ``g`` counting it.
    """
    n = num_dims
    decay = 1 - (1 - c_sigma) ** (2 * generation.astype(ps_sq.dtype))
    return ps_sq / decay / n - 1 < 1 + 4.0 / (n + 1)


def evolution_path(state: CMAESState, dm: jax.Array, h: jax.Array, params: CMAESParams) -> jax.Array:
    """Cumulate the evolution path (tutorial eq. 45):
    ``p_c' = (1 - c_c) p_c + h_sigma sqrt(c_c (2 - c_c) mu_eff) <y>_w``, ``[n]`` (``h`` = ``h_sigma``
    as 0/1 in the state's dtype)."""
    c_c = params.c_c
    return (1 - c_c) * state.p_c + h * jnp.sqrt(c_c * (2 - c_c) * params.mu_eff) * dm


def adapt_covariance(
    state: CMAESState, ys: jax.Array, w: jax.Array, p_c: jax.Array, h: jax.Array, params: CMAESParams
) -> jax.Array:
    """The covariance update (tutorial eqs. 46-47), ``[n, n]``::

        w°_i = w_i                                  w_i >= 0
             = w_i n / |C^-1/2 y_i:lambda|^2        w_i < 0      (active vectors at length sqrt(n))
        C'   = (1 - c_1a - c_mu sum_j w_j) C + c_1 p_c p_c^T + c_mu sum_i w°_i y_i:lambda y_i:lambda^T

    with pycma's ``c1a = c_1 (1 - (1 - h_sigma^2) c_c (2 - c_c))``, which makes up for the variance
    a stalled path (``h_sigma = 0``) loses (the tutorial's ``c_1 delta(h_sigma)``). ``C^-1/2`` uses the
    factors of the last decomposition (pycma's ``sm.update``).

    Args: ``ys [pop, n]`` sorted steps, ``w [pop]`` weights by rank, ``p_c [n]`` the new path, ``h []``.
    """
    n = ys.shape[1]
    c_1, c_mu, c_c = params.c_1, params.c_mu, params.c_c
    c_1a = c_1 * (1 - (1 - h**2) * c_c * (2 - c_c))
    maha = jnp.sqrt(exact_sum((jnp.matmul(ys, state.B, precision=Precision.HIGHEST) / state.D) ** 2, axis=1))
    w_c = jnp.where(w < 0, w * n / (maha + 1e-9) ** 2, w)
    # HIGHEST: exact float32 on GPUs, whose default float32 matmul precision is TF32
    rank_mu = jnp.matmul(c_mu * (ys.T * w_c), ys, precision=Precision.HIGHEST)
    return state.C * (1 - c_1a - c_mu * exact_sum(w)) + c_1 * jnp.outer(p_c, p_c) + rank_mu


def log_step_csa(ps_sq: jax.Array, params: CMAESParams) -> jax.Array:
    """Cumulative step-size adaptation (tutorial eq. 44, pycma's CSA), ``log(sigma' / sigma)``:
    ``(|p_sigma| / E|N(0, I)| - 1) c_sigma / d_sigma``, clipped to ``[-1, 1]`` as pycma does."""
    # reciprocals again: these scalars are broadcast per run when params are vmapped
    return jnp.clip(
        (jnp.sqrt(ps_sq) * (1 / params.chi_n) - 1) * params.c_sigma * (1 / params.d_sigma), -1.0, 1.0
    )


def log_step_squared(ps_sq: jax.Array, params: CMAESParams, num_dims: int) -> jax.Array:
    """purecma's squared-length rule (``preset="tutorial"``), ``log(sigma' / sigma)``:
    ``min(1, c_sigma / d_sigma (|p_sigma|^2 / n - 1) / 2)``."""
    return jnp.minimum(1.0, params.c_sigma * (1 / params.d_sigma) * (ps_sq / num_dims - 1) / 2)


def log_step_tpa(
    state: CMAESState, fitness: jax.Array, params: CMAESParams, active_size: Any = None
) -> tuple[jax.Array, jax.Array]:
    """Two-point step-size adaptation (pycma ``CMAAdaptSigmaTPA.update2``): the rank difference of
    the two line samples (rows 0 and 1 of :func:`sample`, in ask order),
    ``z = (#{f < f_1} - #{f < f_0}) / (lambda - 1)`` in ``[-1, 1]``, is averaged into
    ``s' = (1 - tpa_c) s + tpa_c sign(z) |z|^(1/2)``.

    Args: ``fitness [pop]`` in ask order; ``active_size`` the number of real candidates when the rest
    is padding (``None``: all ``pop``).

    Returns: ``(log(sigma' / sigma) = s' / tpa_damp, s')``.
    """
    dtype = state.mean.dtype
    lam = fitness.shape[0] if active_size is None else jnp.asarray(active_size).astype(dtype)
    z = (jnp.sum(fitness < fitness[1]) - jnp.sum(fitness < fitness[0])).astype(dtype) / (lam - 1)
    tpa_s = (1 - params.tpa_c) * state.tpa_s + params.tpa_c * jnp.sign(z) * jnp.sqrt(jnp.abs(z))
    return tpa_s * (1 / params.tpa_damp), tpa_s


def cma_update(
    state: CMAESState,
    x: jax.Array,
    fitness: jax.Array,
    params: CMAESParams,
    squared_csa: bool = False,
    two_point: bool = False,
    active_size: Any = None,
) -> tuple[CMAESState, dict[str, jax.Array]]:
    """One CMA-ES update from a scored population: the steps above, in pycma's order.

    Args:
        state: current state.
        x: ``[pop, n]`` candidates.
        fitness: ``[pop]`` finite, minimized. Entries with weight 0 after ranking (e.g. masked
            candidates given ``+inf``, ranked last) do not influence the update.
        params: constants; ``params.weights`` has length ``pop``.
        squared_csa: use purecma's squared-length step-size rule (``preset="tutorial"``).
        two_point: two-point step-size adaptation (TPA) from the fitness ranks of rows 0 and 1 (the
            mean-shift line samples of :func:`sample`); otherwise CSA.
        active_size: ``[]`` number of real candidates when the rows beyond it are padding (given
            ``+inf`` fitness; the restart wrappers' dynamic population); ``None``: all ``pop``.

    Returns:
        ``(new state, metrics)``: metrics ``sigma``, ``h_sigma``, ``axis_ratio`` (``D_max / D_min``)
        and ``eigen_updated`` (whether this generation decomposed ``C``).
    """
    n = x.shape[1]
    dtype = state.mean.dtype
    order, xs, ys, w = rank_population(state, x, fitness, params)
    mean, dm = recombine(state, xs, w, params)  # eqs. 41-42
    p_sigma = conjugate_path(state, dm, params)  # eq. 43
    generation = state.generation + 1
    ps_sq = exact_sum(p_sigma**2)
    h_sigma = h_sigma_flag(ps_sq, params.c_sigma, generation, n)
    h = h_sigma.astype(dtype)
    p_c = evolution_path(state, dm, h, params)  # eq. 45
    C = adapt_covariance(state, ys, w, p_c, h, params)  # eqs. 46-47

    tpa_s = state.tpa_s
    if two_point:
        log_step, tpa_s = log_step_tpa(state, fitness, params, active_size)
    elif squared_csa:
        log_step = log_step_squared(ps_sq, params, n)
    else:
        log_step = log_step_csa(ps_sq, params)  # eq. 44
    new_sigma = jnp.clip(state.sigma * jnp.exp(log_step), params.sigma_min, params.sigma_max)

    # decompose C = B diag(D^2) B^T once lazy_gap generations passed (pycma's updateBD)
    do_eigen = (generation - state.last_eigen).astype(dtype) >= params.lazy_gap
    max_condition = jnp.asarray(params.max_condition, dtype)
    C, B, D, last_eigen = lazy_eigen_update(
        do_eigen, C, state.B, state.D, state.last_eigen, generation, max_condition
    )

    best_idx = order[0]
    better = fitness[best_idx] < state.best_fitness
    new_state = CMAESState(
        mean=mean,
        sigma=new_sigma,
        p_sigma=p_sigma,
        p_c=p_c,
        C=C,
        B=B,
        D=D,
        generation=generation,
        last_eigen=last_eigen,
        mean_shift=mean - state.mean,
        tpa_s=tpa_s,
        best_solution=jnp.where(better, xs[0], state.best_solution),
        best_fitness=jnp.where(better, fitness[best_idx].astype(dtype), state.best_fitness),
    )
    metrics = {"sigma": new_sigma, "h_sigma": h_sigma, "axis_ratio": D[-1] / D[0], "eigen_updated": do_eigen}
    return new_state, metrics
