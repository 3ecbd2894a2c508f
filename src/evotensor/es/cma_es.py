"""CMA-ES with pycma's default constants (Hansen 2016; pycma ``CMAEvolutionStrategy``).

The update follows pycma 4.x exactly (``cma/evolution_strategy.py`` ``tell2``), for its default
options without mirrored sampling:

* recombination weights ``w'_i = ln((lambda+1)/2) - ln i``; positive ones sum to 1, negative
  ("active") ones are finalized as ``min(1 + c1/cmu, (1-c1-cmu)/(n cmu), 1 + 2 mu_eff^-/(mu_eff+2))``
  times a shape summing to -1;
* ``c_sigma = (mu_eff+2)/(n+mu_eff+3)`` (capped at 1/2), pycma's damping ``d_sigma``,
  ``c_c = (4+mu_eff/n)/(n+4+2mu_eff/n)``, ``c_1 = min(1, lambda/6) * 2/((n+1.3)^2+mu_eff)``,
  ``c_mu = min(1-c_1, 2(0.25+mu_eff-2+1/mu_eff)/((n+2)^2+mu_eff))``;
* squared-form ``h_sigma``: ``|p_sigma|^2 / (1-(1-c_sigma)^(2g)) / n - 1 < 1 + 4/(n+1)``;
* negative-weight vectors rescaled to Mahalanobis length ``sqrt(n)`` before the rank-mu update;
* a *lazy* eigendecomposition: ``C = B diag(D^2) B^T`` is decomposed only when at least
  ``lazy_gap = 1/(c_1+c_mu)/n/10`` generations passed since the last decomposition (a counter
  and ``lax.cond``), so the O(n^3) ``eigh`` does not dominate each generation when ``lazy_gap > 1``.
  It stays lazy under ``vmap`` (seeds, hyperparameters, nested): a custom batching rule
  (:func:`lazy_eigen_update`) runs the batched ``eigh`` only in generations where some run is due.

Step size (``step_size="auto"``, pycma's default): cumulative step-size adaptation (CSA, the rule
above) below 300 dimensions and two-point adaptation (TPA, pycma's ``CMAAdaptSigmaTPA``) from
``n >= 300`` (``cma.evolution_strategy.TPA_dimension``). With TPA, from the second generation on
the first two candidates are ``mean +- sigma * y0``, ``y0`` the last mean shift rescaled to the
Mahalanobis length of a fresh ``N(0, I)`` sample, and ``tell`` turns their fitness ranks into
``z = (#{f < f_1} - #{f < f_0}) / (lambda - 1)``, ``s <- (1 - 0.3) s + 0.3 sign(z) |z|^0.5``,
``sigma <- sigma exp(s / d_TPA)`` with ``d_TPA = 0.7 + 2 ln n + 2 ln max(1, lambda - n)``; the
conjugate path is still kept, for ``h_sigma`` (with pycma's uncapped ``c_sigma``). ``"csa"`` or
``"tpa"`` force either rule; the restart wrappers (IPOP/BIPOP) take the same argument.

``preset="tutorial"`` gives the textbook constants of pycma's ``purecma`` (positive weights only,
``c_sigma`` with +5, ``c_1`` without the ``min(1, lambda/6)`` factor, ``c_mu`` without the 0.25
offset, ``d_sigma = 2 mu_eff/lambda + 0.3 + c_sigma``, the squared-length step-size rule and
``lazy_gap = 0.5/(c_1+c_mu)/n``).

Numerical guards (float32 runs far past convergence stay finite): ``sigma`` is clipped to
``[sigma_min, sigma_max]``, the eigenvalues of ``C`` are lifted to a condition number of at most
``max_condition`` (pycma's ``limit_condition``), and a non-finite decomposition keeps the previous
``B, D``. NaN/inf fitness is ranked last by :meth:`VectorStrategy.tell` before it gets here.

Example::

    es = CMAES(num_dims=10, sigma_init=0.5)
    state = es.init(jax.random.key(0))
    x, state = es.ask(jax.random.key(1), state)          # x: [pop, 10]
    state, metrics = es.tell(jax.random.key(2), state, x, jnp.sum(x**2, axis=1))
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jax.lax import Precision

from evotensor.core import rng
from evotensor.core.numerics import exact_sum
from evotensor.core.pytree import pytree_dataclass
from evotensor.es.base import VectorStrategy
from evotensor.es.mean_sigma import check_sigma_init, float_dtype, population_size_or_default

PRESETS = ("pycma", "tutorial")
STEP_SIZE_RULES = ("auto", "csa", "tpa")
TPA_DIMENSION = 300  # pycma's ``TPA_dimension``: "auto" uses TPA from this many dimensions on
LARGE_DIMS = 2000  # above this, full C costs O(n^2) memory per run and O(n^3) per decomposition


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
        c_1, c_mu, lazy_gap, tpa_damp, tpa_c`` (scalars).
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
    )


def resolve_step_size(step_size: str, num_dims: int, preset: str = "pycma") -> str:
    """``"csa"`` or ``"tpa"`` for the ``step_size`` argument (``"auto"``: pycma's choice, TPA from
    ``TPA_DIMENSION`` dimensions on, never for ``preset="tutorial"``); ValueError names it."""
    if step_size not in STEP_SIZE_RULES:
        raise ValueError(f"step_size must be one of {STEP_SIZE_RULES}, got {step_size!r}")
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
    """:class:`CMAESParams` with the learning rates of ``consts`` (:func:`cma_constants`' dict plus
    ``chi_n``; NumPy or traced) cast to ``dtype``, ``c_mean = 1``, and ``mean_init [n]``,
    ``sigma_init []`` and ``guards`` (``sigma_min``, ``sigma_max``, ``max_condition``) as given."""
    rates = ("mu_eff", "c_sigma", "d_sigma", "c_c", "c_1", "c_mu", "chi_n", "lazy_gap", "tpa_damp", "tpa_c")
    return CMAESParams(
        mean_init=mean_init,
        sigma_init=sigma_init,
        weights=jnp.asarray(consts["weights"], dtype),
        c_mean=jnp.asarray(1.0, dtype),
        **{k: jnp.asarray(consts[k], dtype) for k in rates},
        **guards,
    )


# --------------------------------------------------------------------------------------------------
# pure building blocks (shared with Sep-CMA-ES and the restart wrappers)
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
    return state.mean + state.sigma * y


def decompose(C: jax.Array, B_old: jax.Array, D_old: jax.Array, max_condition: jax.Array):
    """Symmetrize and eigendecompose ``C``; lift eigenvalues to ``max_condition`` (pycma's
    ``limit_condition``: add the same ``eps`` to ``C``'s diagonal). A non-finite result keeps the
    previous ``B, D`` and rebuilds ``C`` from them.

    Args:
        C: ``[n, n]`` covariance matrix (or ``[k, n, n]``, a stack of ``k`` runs: every other
            argument then has the same leading ``k``; ``max_condition`` is ``[k]``).
        B_old, D_old: ``[n, n]``, ``[n]`` factors of the last decomposition.
        max_condition: ``[]`` largest allowed condition number.

    Returns:
        ``(C [n, n], B [n, n], D [n])`` (each with the leading ``k`` for a stack).
    """
    C = (C + jnp.swapaxes(C, -1, -2)) / 2
    # C is now exactly symmetric, so jnp.linalg.eigh's own symmetrization would be a no-op pass
    ev, B = jnp.linalg.eigh(C, symmetrize_input=False)
    tiny = jnp.finfo(C.dtype).tiny
    ev_max = jnp.maximum(ev[..., -1], tiny)
    ev_min = ev[..., 0]
    # eps so that (ev_max + eps) / (ev_min + eps) == max_condition when the limit is exceeded
    excess = ev_max - max_condition * ev_min
    eps = jnp.where(excess > 0, excess / (max_condition - 1), 0.0)[..., None]  # [(k,) 1]
    ev = jnp.maximum(ev + eps, tiny)
    C = C + eps[..., None] * jnp.eye(C.shape[-1], dtype=C.dtype)
    ok = (jnp.all(jnp.isfinite(ev), axis=-1) & jnp.all(jnp.isfinite(B), axis=(-2, -1)))[..., None]
    B = jnp.where(ok[..., None], B, B_old)
    D = jnp.where(ok, jnp.sqrt(ev), D_old)

    # the O(n^3) rebuild only runs when needed (for a stack: when some run of it needs it)
    def _rebuilt():
        rebuilt = jnp.matmul(
            B_old * D_old[..., None, :] ** 2, jnp.swapaxes(B_old, -1, -2), precision=Precision.HIGHEST
        )
        return jnp.where(ok[..., None], C, rebuilt)

    C = jax.lax.cond(jnp.all(ok), lambda: C, _rebuilt)
    return C, B, D


# --- the lazy update, kept lazy under ``vmap`` ----------------------------------------------------
# ``lax.cond`` on a batched predicate is lowered by ``vmap`` to a ``select`` that computes both
# branches, so a vmapped CMA-ES would decompose every run at every generation. These two
# ``custom_vmap`` functions batch it as "decompose the whole stack if ANY run is due, then let each
# run keep its old or its new factors" instead; ``_lazy_stack``'s own rule merges a further
# ``vmap`` axis into the stack, so nested vmaps (seeds x hyperparameters) keep the branch too.
# Every run of the stack computes exactly what a separate run computes (on CPU, batched ``eigh`` is a
# loop of the same LAPACK call), so results stay bit-identical to separate runs (tested).
def _lazy_keep_or_decompose(do, C, B, D, last_eigen, generation, max_condition):
    """Stack of ``k`` runs (every argument has a leading ``[k]``): new factors for the runs where
    ``do [k]`` holds; no ``eigh`` at all when none does."""

    def decomposed():
        C2, B2, D2 = decompose(C, B, D, max_condition)
        return (
            jnp.where(do[:, None, None], C2, C),
            jnp.where(do[:, None, None], B2, B),
            jnp.where(do[:, None], D2, D),
            jnp.where(do, generation, last_eigen),
        )

    return jax.lax.cond(jnp.any(do), decomposed, lambda: (C, B, D, last_eigen))


def _broadcast_unbatched(axis_size, in_batched, args):
    """Every argument with the vmapped axis in front (unbatched ones broadcast to ``axis_size``)."""
    return [a if b else jnp.broadcast_to(a, (axis_size, *a.shape)) for a, b in zip(args, in_batched)]


@jax.custom_batching.custom_vmap
def _lazy_stack(do, C, B, D, last_eigen, generation, max_condition):
    return _lazy_keep_or_decompose(do, C, B, D, last_eigen, generation, max_condition)


@_lazy_stack.def_vmap
def _lazy_stack_vmap(axis_size, in_batched, *args):
    # [m, k, ...] -> [m * k, ...]: one stack, and a call that an outer vmap batches by this rule again
    full = _broadcast_unbatched(axis_size, in_batched, args)
    k = full[0].shape[1]
    merged = [jnp.reshape(a, (axis_size * k, *a.shape[2:])) for a in full]
    out = _lazy_stack(*merged)
    return tuple(jnp.reshape(o, (axis_size, k, *o.shape[1:])) for o in out), (True,) * 4


def _lazy_eigen_update_plain(do, C, B, D, last_eigen, generation, max_condition):
    """The unbatched lazy update: a ``lax.cond`` (also the differentiation rule, see below)."""

    def _decomposed():
        return (*decompose(C, B, D, max_condition), generation)

    return jax.lax.cond(do, _decomposed, lambda: (C, B, D, last_eigen))


@jax.custom_batching.custom_vmap
def _lazy_eigen_update_batchable(do, C, B, D, last_eigen, generation, max_condition):
    return _lazy_eigen_update_plain(do, C, B, D, last_eigen, generation, max_condition)


@_lazy_eigen_update_batchable.def_vmap
def _lazy_eigen_update_vmap(axis_size, in_batched, *args):
    return tuple(_lazy_stack(*_broadcast_unbatched(axis_size, in_batched, args))), (True,) * 4


@jax.custom_jvp
def lazy_eigen_update(do, C, B, D, last_eigen, generation, max_condition):
    """``(C, B, D, last_eigen)`` after a decomposition if ``do``, else unchanged (``C`` as given).

    Args:
        do: ``[]`` bool, whether the lazy-update gap has passed.
        C: ``[n, n]`` updated covariance; B, D: ``[n, n]``, ``[n]`` factors of the last decomposition.
        last_eigen, generation: ``[]`` int32; ``last_eigen`` becomes ``generation`` if ``do``.
        max_condition: ``[]`` condition-number limit (see :func:`decompose`).

    Under ``vmap`` it stays lazy: the ``eigh`` runs only in generations where some run is due.
    Differentiation (``jax.grad`` through ``tell``, e.g. meta-learning) uses the plain ``lax.cond``'s
    derivative: ``custom_vmap`` alone has no reverse-mode rule.
    """
    return _lazy_eigen_update_batchable(do, C, B, D, last_eigen, generation, max_condition)


@lazy_eigen_update.defjvp
def _lazy_eigen_update_jvp(primals, tangents):
    return jax.jvp(_lazy_eigen_update_plain, primals, tangents)


def cma_update(
    state: CMAESState,
    x: jax.Array,
    fitness: jax.Array,
    params: CMAESParams,
    squared_csa: bool = False,
    two_point: bool = False,
    active_size: Any = None,
) -> tuple[CMAESState, dict[str, jax.Array]]:
    """One CMA-ES update from a scored population.

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
        ``(new state, metrics)``.
    """
    n = x.shape[1]
    dtype = state.mean.dtype
    x = x.astype(dtype)
    order = jnp.argsort(fitness, stable=True)
    xs = x[order]
    w = params.weights.astype(dtype)
    sigma, mold = state.sigma, state.mean
    # multiply by reciprocals of scalars: XLA may rewrite ``v / s`` as ``v * (1/s)`` in the batched
    # (vmapped) program but not in the unbatched one, which breaks bit-identical vmap
    inv_sigma = 1 / sigma
    ys = (xs - mold) * inv_sigma  # [pop, n]

    w_pos = jnp.where(w > 0, w, 0.0)
    # an explicit weighted sum (not ``w @ xs``): XLA lowers the dot differently when batched
    mean = mold + params.c_mean * (exact_sum(w_pos[:, None] * xs, axis=0) - mold)
    dm = (mean - mold) * (inv_sigma / params.c_mean)  # [n]

    # conjugate path with the (possibly stale) B, D of the last decomposition, as pycma does
    # matrix-vector products as explicit sums, for bit-identical results under vmap (see above)
    bt_dm = exact_sum(state.B * dm[:, None], axis=0) / state.D
    z_mean = exact_sum(state.B * bt_dm[None, :], axis=1)
    c_s = params.c_sigma
    p_sigma = (1 - c_s) * state.p_sigma + jnp.sqrt(c_s * (2 - c_s) * params.mu_eff) * z_mean
    generation = state.generation + 1
    ps_sq = exact_sum(p_sigma**2)
    h_sigma = ps_sq / (1 - (1 - c_s) ** (2 * generation.astype(dtype))) / n - 1 < 1 + 4.0 / (n + 1)
    h = h_sigma.astype(dtype)

    c_c = params.c_c
    p_c = (1 - c_c) * state.p_c + h * jnp.sqrt(c_c * (2 - c_c) * params.mu_eff) * dm
    c_1, c_mu = params.c_1, params.c_mu
    c_1a = c_1 * (1 - (1 - h**2) * c_c * (2 - c_c))

    # active vectors are rescaled to Mahalanobis length sqrt(n) (keeps C positive definite)
    maha = jnp.sqrt(exact_sum((jnp.matmul(ys, state.B, precision=Precision.HIGHEST) / state.D) ** 2, axis=1))
    w_c = jnp.where(w < 0, w * n / (maha + 1e-9) ** 2, w)
    rank_mu = jnp.matmul(c_mu * (ys.T * w_c), ys, precision=Precision.HIGHEST)
    C = state.C * (1 - c_1a - c_mu * exact_sum(w)) + c_1 * jnp.outer(p_c, p_c) + rank_mu

    tpa_s = state.tpa_s
    if two_point:
        # pycma CMAAdaptSigmaTPA.update2: rank difference of the two line samples, in [-1, 1]
        lam = fitness.shape[0] if active_size is None else jnp.asarray(active_size).astype(dtype)
        z = (jnp.sum(fitness < fitness[1]) - jnp.sum(fitness < fitness[0])).astype(dtype) / (lam - 1)
        tpa_s = (1 - params.tpa_c) * state.tpa_s + params.tpa_c * jnp.sign(z) * jnp.sqrt(jnp.abs(z))
        log_step = tpa_s * (1 / params.tpa_damp)
    elif squared_csa:
        log_step = jnp.minimum(1.0, c_s * (1 / params.d_sigma) * (ps_sq / n - 1) / 2)
    else:
        # reciprocals again: these scalars are broadcast per run when params are vmapped
        log_step = jnp.clip(
            (jnp.sqrt(ps_sq) * (1 / params.chi_n) - 1) * c_s * (1 / params.d_sigma), -1.0, 1.0
        )
    new_sigma = jnp.clip(sigma * jnp.exp(log_step), params.sigma_min, params.sigma_max)

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
        mean_shift=mean - mold,
        tpa_s=tpa_s,
        best_solution=jnp.where(better, x[best_idx], state.best_solution),
        best_fitness=jnp.where(better, fitness[best_idx].astype(dtype), state.best_fitness),
    )
    metrics = {
        "sigma": new_sigma,
        "h_sigma": h_sigma,
        "axis_ratio": D[-1] / D[0],
        "eigen_updated": do_eigen,
    }
    return new_state, metrics


# --------------------------------------------------------------------------------------------------
# the strategy
# --------------------------------------------------------------------------------------------------
class CMAES(VectorStrategy):
    """Covariance Matrix Adaptation Evolution Strategy (pycma defaults).

    Args:
        population_size: ``lambda``; ``None`` -> ``4 + floor(3 ln n)``.
        solution: template pytree (exclusive with ``num_dims``); its values are the default mean.
        num_dims: flat dimension ``n`` (exclusive with ``solution``); the default mean is 0.
        sigma_init: initial step size (> 0).
        preset: ``"pycma"`` (default) or ``"tutorial"`` (purecma's textbook constants).
        mean_init: optional initial mean, ``[n]`` or a pytree like ``solution``.
        step_size: ``"auto"`` (pycma's choice: CSA below 300 dimensions, TPA from 300 on; always
            CSA for ``preset="tutorial"``, as purecma), ``"csa"`` or ``"tpa"``.

    Warns:
        UserWarning when ``n > 2000``: full CMA-ES keeps ``n x n`` matrices (see :class:`SepCMAES`,
        :class:`LMMAES`).
    """

    name = "cma_es"
    min_population_size = 2

    def __init__(
        self,
        population_size: int | None = None,
        solution: Any = None,
        num_dims: int | None = None,
        *,
        sigma_init: float = 1.0,
        preset: str = "pycma",
        mean_init: Any = None,
        step_size: str = "auto",
    ):
        super().__init__(population_size_or_default(population_size, solution, num_dims), solution, num_dims)
        n, population_size = self.num_dims, self.population_size
        if preset not in PRESETS:
            raise ValueError(f"preset must be one of {PRESETS}, got {preset!r}")
        self.step_size = resolve_step_size(step_size, n, preset)
        sigma_init = check_sigma_init(sigma_init)
        if n > LARGE_DIMS:
            warnings.warn(
                f"CMAES with num_dims={n} stores n x n matrices ({4 * n * n / 2**20:.0f} MiB each in "
                "float32) and eigendecomposes them in O(n^3); consider SepCMAES or LMMAES for large n",
                UserWarning,
                stacklevel=2,
            )
        self.preset = preset
        self.sigma_init = sigma_init
        self._mean_init = self._check_mean(mean_init)
        consts = cma_constants(n, population_size, population_size, preset, np, two_point=self.two_point)
        consts["chi_n"] = chi_n(n, preset)
        self.constants = consts  # exact float64 values (NumPy), for inspection and tests

    def _check_mean(self, mean_init: Any) -> np.ndarray:
        if mean_init is None:
            return np.asarray(self.initial_mean(), np.float64)
        leaves = jax.tree_util.tree_leaves(mean_init)
        if len(leaves) == 1 and np.ndim(leaves[0]) == 1 and np.shape(leaves[0])[0] == self.num_dims:
            flat = np.asarray(leaves[0], np.float64)
        else:
            try:
                flat = np.asarray(ravel_pytree(mean_init)[0], np.float64)
            except Exception as err:  # pragma: no cover - message below is what matters
                raise ValueError(f"mean_init could not be flattened: {err}") from err
        if flat.shape != (self.num_dims,):
            raise ValueError(f"mean_init must flatten to shape ({self.num_dims},), got {flat.shape}")
        if not np.all(np.isfinite(flat)):
            raise ValueError("mean_init must be finite")
        return flat

    def default_params(self) -> CMAESParams:
        """pycma's (or purecma's) defaults as arrays of the default float dtype."""
        dtype = float_dtype()
        mean_init, sigma_init = jnp.asarray(self._mean_init, dtype), jnp.asarray(self.sigma_init, dtype)
        guards = {k: jnp.asarray(v, dtype) for k, v in GUARDS.items()}
        return params_from_constants(self.constants, dtype, mean_init, sigma_init, **guards)

    @property
    def squared_csa(self) -> bool:
        return self.preset == "tutorial"

    @property
    def two_point(self) -> bool:
        """Whether the step size follows two-point adaptation (TPA) rather than CSA."""
        return self.step_size == "tpa"

    def _init(self, key, params):
        return initial_state(jnp.asarray(params.mean_init), params.sigma_init)

    def _ask(self, key, state, params):
        return sample(key, state, self.population_size, self.two_point), state

    def _tell(self, key, state, x, fitness, params):
        return cma_update(state, x, fitness, params, self.squared_csa, self.two_point)

    def __repr__(self) -> str:
        return (
            f"CMAES(population_size={self.population_size}, num_dims={self.num_dims}, "
            f"sigma_init={self.sigma_init}, preset={self.preset!r}, step_size={self.step_size!r})"
        )
