"""The 24 noiseless BBOB functions (Finck, Hansen, Ros, Auger 2009) and the BBOB noise models.

Definitions follow "Real-Parameter Black-Box Optimization Benchmarking 2009: Noiseless Functions
Definitions" (INRIA RR-6829, 2019 update) and, for noise, the companion "Noisy Functions
Definitions" (RR-6869). Where the document and the reference C code differ, the C code wins and
the comment says so (f4: odd coordinates of ``x_opt`` are made positive).

An *instance* (:class:`BBOBInstance`) holds the random ingredients of one function: the optimum
``x_opt``, the optimal value ``f_opt``, two rotations ``R`` and ``Q`` (Haar-distributed orthogonal
matrices) and, for Gallagher's functions, the peaks. Instances are drawn with JAX from a key, so
:func:`sample_instance` is pure and can be ``vmap``-ed over keys (many instances in one program).
Instance *numbers* map to keys deterministically; they are not COCO's legacy random numbers, so
``x_opt``/``f_opt`` differ from COCO's for the same instance number (the functions do not).

Transformations (all act on the last axis, ``D = num_dims``, ``t_i = i / (D - 1)``, 0-based ``i``):

* ``T_osz`` — smooth oscillation: ``sign(x) exp(x^ + 0.049 (sin(c1 x^) + sin(c2 x^)))`` with
  ``x^ = log|x|``, ``(c1, c2) = (10, 7.9)`` for ``x > 0`` and ``(5.5, 3.1)`` otherwise.
* ``T_asy^beta`` — ``x_i^(1 + beta t_i sqrt(x_i))`` for ``x_i > 0``, else ``x_i``.
* ``Lambda^alpha`` — diagonal ``alpha^(t_i / 2)``.
* ``f_pen`` — ``sum(max(0, |x_i| - 5)^2)``, the boundary penalty.

Noise (``noise="gaussian-moderate"``…, see :data:`NOISE_MODELS`) can be put on any of the 24
functions; the noisy testbed f101-f130 pairs a few of them with these models and a stronger
boundary penalty (:mod:`evotensor.problems.bbob_noisy`), whereas here each function keeps its own.

Everything is computed in float32 (the library default). The tests compare every function with
two float64 references to ~1e-3 relative accuracy: a loop-by-loop transcription of the
definitions document, and pycma's ``cma.bbobbenchmarks`` (a port of the BBOB C code) with its
instances' ingredients plugged into :func:`bbob_value`. Weierstrass' highest frequency ``3^11``
is what limits float32 accuracy.

Example::

    problem = BBOB("rastrigin", num_dims=10, instance=1)
    ev = problem.evaluate(jax.random.key(0), x)            # x: [pop, 10] -> ev.fitness: [pop]
    problem(problem.x_opt) == problem.f_opt                  # up to float32 rounding
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from jax.lax import Precision

from evotensor.core import rng
from evotensor.core.checks import ArgumentError
from evotensor.core.evaluation import Evaluation
from evotensor.core.pytree import pytree_dataclass

# Function names in BBOB order: BBOB_NAMES[i - 1] is function f_i.
BBOB_NAMES: tuple[str, ...] = (
    "sphere",
    "ellipsoid_separable",
    "rastrigin_separable",
    "bueche_rastrigin",
    "linear_slope",
    "attractive_sector",
    "step_ellipsoid",
    "rosenbrock",
    "rosenbrock_rotated",
    "ellipsoid",
    "discus",
    "bent_cigar",
    "sharp_ridge",
    "different_powers",
    "rastrigin",
    "weierstrass",
    "schaffers_f7",
    "schaffers_f7_ill",
    "griewank_rosenbrock",
    "schwefel",
    "gallagher_101",
    "gallagher_21",
    "katsuura",
    "lunacek",
)

# Noise models of the noisy testbed: name -> (model, level parameters). The uniform model's alpha
# depends on D: alpha = alpha_factor * (0.49 + 1/D).
NOISE_MODELS: dict[str, tuple[str, tuple[float, float]]] = {
    "gaussian-moderate": ("gaussian", (0.01, 0.0)),  # beta
    "gaussian-severe": ("gaussian", (1.0, 0.0)),
    "uniform-moderate": ("uniform", (0.01, 0.01)),  # (alpha_factor, beta)
    "uniform-severe": ("uniform", (1.0, 1.0)),
    "cauchy-moderate": ("cauchy", (0.01, 0.05)),  # (alpha, p)
    "cauchy-severe": ("cauchy", (1.0, 0.2)),
}

_NOISE_THRESHOLD = 1e-8  # below this f - f_opt, no noise is applied (the target precision)
_GALLAGHER = {21: (101, 10.0, 5.0, 1000.0), 22: (21, 9.8, 4.9, 1e6)}  # peaks, b, c, alpha_1
_SCHWEFEL_XOPT = 4.2096874637 / 2.0
_LUNACEK_MU0 = 2.5
# Weierstrass constants: 12 summands, f0 = sum 2^-k cos(pi 3^k) (computed in float64).
_WEIERSTRASS_K = np.arange(12)
_WEIERSTRASS_F0 = float(np.sum(0.5**_WEIERSTRASS_K * np.cos(np.pi * 3.0**_WEIERSTRASS_K)))
_INSTANCE_SEED = 20090  # root of the instance-number -> key map


@pytree_dataclass
class BBOBInstance:
    """The random ingredients of one BBOB function instance.

    Attributes:
        x_opt: ``[D]`` location of the global optimum.
        f_opt: ``[]`` optimal value (Cauchy-distributed, rounded to 0.01, clipped to ±1000).
        R: ``[D, D]`` orthogonal matrix (applied first).
        Q: ``[D, D]`` orthogonal matrix (applied second).
        peaks_y: ``[P, D]`` Gallagher peak locations (``peaks_y[0] == x_opt``); None otherwise.
        peaks_scale: ``[P, D]`` Gallagher per-peak diagonal conditioning; None otherwise.
        peaks_w: ``[P]`` Gallagher peak heights (10 for the global peak); None otherwise.
    """

    x_opt: jax.Array
    f_opt: jax.Array
    R: jax.Array
    Q: jax.Array
    peaks_y: jax.Array | None = None
    peaks_scale: jax.Array | None = None
    peaks_w: jax.Array | None = None


def function_id(function: int | str) -> int:
    """BBOB function number (1..24) from a number or a name in :data:`BBOB_NAMES`."""
    if isinstance(function, str):
        name = function.lower().replace("-", "_")
        if name.startswith("f") and name[1:].isdigit():
            return function_id(int(name[1:]))
        if name not in BBOB_NAMES:
            raise ArgumentError(
                f"unknown BBOB function {function!r}; names: {', '.join(BBOB_NAMES)} "
                "(or a number 1..24, 'f1'..'f24')"
            )
        return BBOB_NAMES.index(name) + 1
    if isinstance(function, bool) or not isinstance(function, (int, np.integer)) or not 1 <= function <= 24:
        raise ArgumentError(f"function must be an int in 1..24 or a BBOB name, got {function!r}")
    return int(function)


MAX_DIMS = 2**14
"""The largest BBOB dimension: an instance holds two ``D x D`` float32 rotations (2 GiB at ``2**14``)."""


def _check_dims(num_dims: Any) -> int:
    if isinstance(num_dims, bool) or not isinstance(num_dims, (int, np.integer)) or num_dims < 2:
        raise ArgumentError(f"num_dims must be an int >= 2 (BBOB scales by i/(D-1)), got {num_dims!r}")
    if num_dims > MAX_DIMS:
        raise ArgumentError(
            f"num_dims must be <= {MAX_DIMS} (an instance holds two D x D rotations), got {num_dims!r}"
        )
    return int(num_dims)


# -- random ingredients ----------------------------------------------------------------------------
def random_rotation(key: jax.Array, num_dims: int) -> jax.Array:
    """A Haar-distributed orthogonal matrix ``[D, D]`` (QR of a Gaussian matrix, signs fixed)."""
    a = rng.normal(key, (num_dims, num_dims), jnp.float32)
    q, r = jnp.linalg.qr(a)
    # Multiplying column j by sign(r_jj) makes the factorization unique, hence the law uniform.
    return q * jnp.where(jnp.diagonal(r) < 0, -1.0, 1.0)[None, :]


def _base_xopt(key: jax.Array, num_dims: int) -> jax.Array:
    """Uniform on [-4, 4] rounded to 1e-4, with 0 replaced by -1e-5 (as in the BBOB code)."""
    u = rng.uniform(key, (num_dims,), jnp.float32)
    x = 8.0 * jnp.floor(1e4 * u) / 1e4 - 4.0
    return jnp.where(x == 0.0, -1e-5, x)


def _sample_fopt(key: jax.Array) -> jax.Array:
    """``clip(round(100 * 100 N1 / N2) / 100, -1000, 1000)``: a rounded Cauchy variate."""
    n1, n2 = rng.normal(key, (2,), jnp.float32)
    n2 = jnp.where(jnp.abs(n2) < 1e-30, 1e-30, n2)
    return jnp.clip(jnp.round(100.0 * 100.0 * n1 / n2) / 100.0, -1000.0, 1000.0)


def _rosenbrock_scale(num_dims: int) -> float:
    return max(1.0, math.sqrt(num_dims) / 8.0)


def _common_ingredients(num_dims: int, key: jax.Array) -> tuple[BBOBInstance, jax.Array]:
    """The draws every function shares: base ``x_opt``, ``f_opt``, ``R``, ``Q`` (+ a key for peaks)."""
    k_x, k_f, k_r, k_q, k_peaks = jax.random.split(key, 5)
    base = BBOBInstance(
        x_opt=_base_xopt(k_x, num_dims),
        f_opt=_sample_fopt(k_f),
        R=random_rotation(k_r, num_dims),
        Q=random_rotation(k_q, num_dims),
    )
    return base, k_peaks


def _gallagher_peaks(fn_id: int, num_dims: int, key: jax.Array) -> dict[str, jax.Array]:
    """Peak locations ``[P, D]``, conditioning ``[P, D]`` and heights ``[P]`` of f21 / f22."""
    d = num_dims
    num_peaks, b, c, alpha_1 = _GALLAGHER[fn_id]
    k_y, k_alpha, k_perm = jax.random.split(key, 3)
    y = b * rng.uniform(k_y, (num_peaks, d), jnp.float32) - c
    y = y.at[0].multiply(0.8)  # the global peak lies in a smaller box
    levels = jnp.asarray(1000.0 ** (2.0 * np.arange(num_peaks - 1) / (num_peaks - 2)), jnp.float32)
    alpha = jnp.concatenate([jnp.full((1,), alpha_1, jnp.float32), rng.permutation(k_alpha, levels)])
    # C_i = Lambda^{alpha_i} / alpha_i^{1/4} with the diagonal of Lambda randomly permuted per peak
    # (argsort of uniforms: one independent random permutation per row).
    perm = jnp.argsort(rng.uniform(k_perm, (num_peaks, d)), axis=-1)
    exponent = 0.5 * perm.astype(jnp.float32) / (d - 1) - 0.25
    scale = alpha[:, None] ** exponent
    heights = 1.1 + 8.0 * jnp.arange(num_peaks - 1, dtype=jnp.float32) / (num_peaks - 2)
    w = jnp.concatenate([jnp.full((1,), 10.0, jnp.float32), heights])
    return {"peaks_y": y, "peaks_scale": scale, "peaks_w": w}


def _specialize(
    fn_id: int, base: BBOBInstance, k_peaks: jax.Array, peaks_fn: Any = _gallagher_peaks
) -> BBOBInstance:
    """Turn the shared draws into function ``fn_id``'s instance (its own ``x_opt`` rule)."""
    d = base.x_opt.shape[0]
    x_opt = base.x_opt
    sign = jnp.sign(x_opt)  # the base x_opt is never 0
    if fn_id == 4:
        # The reference C code (not the document) makes every other coordinate of x_opt positive.
        return base.replace(x_opt=x_opt.at[0::2].set(jnp.abs(x_opt[0::2])))
    if fn_id == 5:
        return base.replace(x_opt=5.0 * sign)
    if fn_id == 8:
        return base.replace(x_opt=0.75 * x_opt)
    if fn_id in (9, 19):
        # z = c R x + 1/2 has its optimum at z = 1, i.e. x = R^T 1 / (2c).
        half_over_c = jnp.full((d,), 0.5 / _rosenbrock_scale(d), jnp.float32)
        return base.replace(x_opt=jnp.matmul(base.R.T, half_over_c, precision=Precision.HIGHEST))
    if fn_id == 20:
        return base.replace(x_opt=_SCHWEFEL_XOPT * sign)
    if fn_id == 24:
        return base.replace(x_opt=0.5 * _LUNACEK_MU0 * sign)
    if fn_id in (21, 22):
        peaks = peaks_fn(fn_id, d, k_peaks)
        return base.replace(x_opt=peaks["peaks_y"][0], **peaks)
    return base


def sample_instance(fn_id: int, num_dims: int, key: jax.Array) -> BBOBInstance:
    """Draw an instance of BBOB function ``fn_id`` in ``num_dims`` dimensions (pure, jit/vmap-able).

    Args:
        fn_id: function number 1..24 or name (static).
        num_dims: dimension D >= 2 (static).
        key: a ``jax.random.key``.
    """
    fn_id = function_id(fn_id)
    base, k_peaks = _common_ingredients(_check_dims(num_dims), key)
    return _specialize(fn_id, base, k_peaks)


def instance_key(fn_id: int, num_dims: int, instance: int) -> jax.Array:
    """The key behind instance number ``instance`` of ``f_{fn_id}`` in ``num_dims`` dimensions."""
    key = jax.random.key(_INSTANCE_SEED)
    for part in (function_id(fn_id), num_dims, instance):
        key = jax.random.fold_in(key, part)
    return key


# -- transformations -------------------------------------------------------------------------------
def t_osz(x: jax.Array) -> jax.Array:
    """Oscillation transformation ``T_osz`` (elementwise)."""
    nonzero = x != 0
    xhat = jnp.where(nonzero, jnp.log(jnp.where(nonzero, jnp.abs(x), 1.0)), 0.0)
    c1 = jnp.where(x > 0, 10.0, 5.5)
    c2 = jnp.where(x > 0, 7.9, 3.1)
    return jnp.sign(x) * jnp.exp(xhat + 0.049 * (jnp.sin(c1 * xhat) + jnp.sin(c2 * xhat)))


def _ramp(d: int) -> jax.Array:
    """``t_i = i / (D - 1)``, ``[D]``."""
    return jnp.arange(d, dtype=jnp.float32) / (d - 1)


def t_asy(x: jax.Array, beta: float) -> jax.Array:
    """Asymmetric transformation ``T_asy^beta`` over the last axis."""
    positive = x > 0
    base = jnp.where(positive, x, 1.0)
    exponent = 1.0 + beta * _ramp(x.shape[-1]) * jnp.sqrt(base)
    return jnp.where(positive, base**exponent, x)


def lambda_diag(alpha: float, d: int) -> jax.Array:
    """Diagonal of ``Lambda^alpha``: ``alpha^(t_i / 2)``, ``[D]``."""
    return jnp.asarray(alpha, jnp.float32) ** (0.5 * _ramp(d))


def f_pen(x: jax.Array) -> jax.Array:
    """Boundary penalty ``sum(max(0, |x| - 5)^2)`` over the last axis."""
    return jnp.sum(jnp.maximum(0.0, jnp.abs(x) - 5.0) ** 2, axis=-1)


def _rot(x: jax.Array, m: jax.Array) -> jax.Array:
    """``m @ x`` for every row of ``x [pop, D]`` (exact float32 products: GPUs default to TF32)."""
    return jnp.matmul(x, m.T, precision=Precision.HIGHEST)


def _rastrigin_core(z: jax.Array) -> jax.Array:
    d = z.shape[-1]
    return 10.0 * (d - jnp.sum(jnp.cos(2.0 * jnp.pi * z), axis=-1)) + jnp.sum(z**2, axis=-1)


def _rosenbrock_core(z: jax.Array) -> jax.Array:
    return jnp.sum(100.0 * (z[:, :-1] ** 2 - z[:, 1:]) ** 2 + (z[:, :-1] - 1.0) ** 2, axis=-1)


# Cores without boundary penalty, shared with the noisy testbed (bbob_noisy.py), which puts its
# noise on these and adds its own, stronger penalty afterwards.
def _schaffers_core(x: jax.Array, inst: BBOBInstance, condition: float) -> jax.Array:
    d = x.shape[-1]
    z = lambda_diag(condition, d) * _rot(t_asy(_rot(x - inst.x_opt, inst.R), 0.5), inst.Q)
    s = jnp.sqrt(z[:, :-1] ** 2 + z[:, 1:] ** 2)
    root = jnp.sqrt(s)
    mean = jnp.mean(root + root * jnp.sin(50.0 * s**0.2) ** 2, axis=-1)
    return mean**2


def _schaffers(x: jax.Array, inst: BBOBInstance, condition: float) -> jax.Array:
    return _schaffers_core(x, inst, condition) + 10.0 * f_pen(x)


def _gallagher_core(x: jax.Array, inst: BBOBInstance) -> jax.Array:
    d = x.shape[-1]
    rx = _rot(x, inst.R)  # [pop, D]
    ry = _rot(inst.peaks_y, inst.R)  # [P, D]
    diff = rx[:, None, :] - ry[None, :, :]  # [pop, P, D]
    quad = jnp.sum(inst.peaks_scale[None] * diff**2, axis=-1)  # [pop, P]
    best = jnp.max(inst.peaks_w[None] * jnp.exp(-quad / (2.0 * d)), axis=-1)
    return t_osz(10.0 - best) ** 2


def _gallagher(x: jax.Array, inst: BBOBInstance) -> jax.Array:
    return _gallagher_core(x, inst) + f_pen(x)


def _step_ellipsoid_core(x: jax.Array, inst: BBOBInstance) -> jax.Array:
    d = x.shape[-1]
    zhat = lambda_diag(10.0, d) * _rot(x - inst.x_opt, inst.R)
    ztil = jnp.where(jnp.abs(zhat) > 0.5, jnp.floor(0.5 + zhat), jnp.floor(0.5 + 10.0 * zhat) / 10.0)
    z = _rot(ztil, inst.Q)
    core = jnp.maximum(jnp.abs(zhat[:, 0]) / 1e4, jnp.sum(10.0 ** (2.0 * _ramp(d)) * z**2, axis=-1))
    return 0.1 * core


def _ellipsoid_core(x: jax.Array, inst: BBOBInstance, log10_condition: float) -> jax.Array:
    """Rotated ellipsoid with ``T_osz``, condition ``10^log10_condition`` (f10: 6, noisy f116-f118: 4)."""
    t = _ramp(x.shape[-1])
    return jnp.sum(10.0 ** (log10_condition * t) * t_osz(_rot(x - inst.x_opt, inst.R)) ** 2, axis=-1)


def _griewank_rosenbrock_sum(x: jax.Array, inst: BBOBInstance) -> jax.Array:
    """``sum_i s_i / 4000 - cos(s_i)`` over the 2-D Rosenbrock blocks ``s_i`` of f19 / f125-f127."""
    d = x.shape[-1]
    z = _rosenbrock_scale(d) * _rot(x, inst.R) + 0.5
    s = 100.0 * (z[:, :-1] ** 2 - z[:, 1:]) ** 2 + (z[:, :-1] - 1.0) ** 2
    return jnp.sum(s / 4000.0 - jnp.cos(s), axis=-1)


def _raw(fn_id: int, inst: BBOBInstance, x: jax.Array) -> jax.Array:
    """``f - f_opt`` of function ``fn_id`` for ``x [pop, D]`` (float32) -> ``[pop]``."""
    d = x.shape[-1]
    t = _ramp(d)
    xo = inst.x_opt
    if fn_id == 1:
        return jnp.sum((x - xo) ** 2, axis=-1)
    if fn_id == 2:
        return jnp.sum(10.0 ** (6.0 * t) * t_osz(x - xo) ** 2, axis=-1)
    if fn_id == 3:
        return _rastrigin_core(lambda_diag(10.0, d) * t_asy(t_osz(x - xo), 0.2))
    if fn_id == 4:
        z = t_osz(x - xo)
        odd = (jnp.arange(d) % 2) == 0  # the document's odd 1-based indices
        s = 10.0 ** (0.5 * t) * jnp.where((z > 0) & odd, 10.0, 1.0)
        return _rastrigin_core(s * z) + 100.0 * f_pen(x)
    if fn_id == 5:
        z = jnp.where(xo * x < 25.0, x, xo)
        s = jnp.sign(xo) * 10.0**t
        return jnp.sum(5.0 * jnp.abs(s) - s * z, axis=-1)
    if fn_id == 6:
        z = _rot(lambda_diag(10.0, d) * _rot(x - xo, inst.R), inst.Q)
        s = jnp.where(z * xo > 0, 100.0, 1.0)
        return t_osz(jnp.sum((s * z) ** 2, axis=-1)) ** 0.9
    if fn_id == 7:
        return _step_ellipsoid_core(x, inst) + f_pen(x)
    if fn_id == 8:
        return _rosenbrock_core(_rosenbrock_scale(d) * (x - xo) + 1.0)
    if fn_id == 9:
        return _rosenbrock_core(_rosenbrock_scale(d) * _rot(x, inst.R) + 0.5)
    if fn_id == 10:
        return _ellipsoid_core(x, inst, 6.0)
    if fn_id == 11:
        z = t_osz(_rot(x - xo, inst.R))
        return 1e6 * z[:, 0] ** 2 + jnp.sum(z[:, 1:] ** 2, axis=-1)
    if fn_id == 12:
        z = _rot(t_asy(_rot(x - xo, inst.R), 0.5), inst.R)
        return z[:, 0] ** 2 + 1e6 * jnp.sum(z[:, 1:] ** 2, axis=-1)
    if fn_id == 13:
        z = _rot(lambda_diag(10.0, d) * _rot(x - xo, inst.R), inst.Q)
        return z[:, 0] ** 2 + 100.0 * jnp.sqrt(jnp.sum(z[:, 1:] ** 2, axis=-1))
    if fn_id == 14:
        z = _rot(x - xo, inst.R)
        return jnp.sqrt(jnp.sum(jnp.abs(z) ** (2.0 + 4.0 * t), axis=-1))
    if fn_id == 15:
        inner = t_asy(t_osz(_rot(x - xo, inst.R)), 0.2)
        return _rastrigin_core(_rot(lambda_diag(10.0, d) * _rot(inner, inst.Q), inst.R))
    if fn_id == 16:
        inner = t_osz(_rot(x - xo, inst.R))
        z = _rot(lambda_diag(0.01, d) * _rot(inner, inst.Q), inst.R)
        ak = jnp.asarray(0.5**_WEIERSTRASS_K, jnp.float32)
        bk = jnp.asarray(3.0**_WEIERSTRASS_K, jnp.float32)
        total = jnp.sum(ak * jnp.cos(2.0 * jnp.pi * bk * (z[..., None] + 0.5)), axis=(-2, -1))
        return 10.0 * (total / d - _WEIERSTRASS_F0) ** 3 + 10.0 / d * f_pen(x)
    if fn_id == 17:
        return _schaffers(x, inst, 10.0)
    if fn_id == 18:
        return _schaffers(x, inst, 1000.0)
    if fn_id == 19:
        return 10.0 / (d - 1) * _griewank_rosenbrock_sum(x, inst) + 10.0
    if fn_id == 20:
        two_abs = 2.0 * jnp.abs(xo)
        xhat = 2.0 * jnp.sign(xo) * x
        zhat = xhat.at[:, 1:].add(0.25 * (xhat[:, :-1] - two_abs[:-1]))
        z = 100.0 * (lambda_diag(10.0, d) * (zhat - two_abs) + two_abs)
        core = -jnp.sum(z * jnp.sin(jnp.sqrt(jnp.abs(z))), axis=-1) / (100.0 * d)
        return core + 4.189828872724339 + 100.0 * f_pen(z / 100.0)
    if fn_id in (21, 22):
        return _gallagher(x, inst)
    if fn_id == 23:
        z = _rot(lambda_diag(100.0, d) * _rot(x - xo, inst.R), inst.Q)
        pow2 = 2.0 ** jnp.arange(1, 33, dtype=jnp.float32)
        scaled = z[..., None] * pow2  # exact: powers of two only shift the exponent
        inner = jnp.sum(jnp.abs(scaled - jnp.round(scaled)) / pow2, axis=-1)
        log_prod = jnp.sum(jnp.log1p(jnp.arange(1, d + 1, dtype=jnp.float32) * inner), axis=-1)
        return 10.0 / d**2 * jnp.expm1(10.0 / d**1.2 * log_prod) + f_pen(x)
    if fn_id == 24:
        mu0 = _LUNACEK_MU0
        s = 1.0 - 1.0 / (2.0 * math.sqrt(d + 20.0) - 8.2)
        mu1 = -math.sqrt((mu0**2 - 1.0) / s)
        xhat = 2.0 * jnp.sign(xo) * x
        z = _rot(lambda_diag(100.0, d) * _rot(xhat - mu0, inst.R), inst.Q)
        sphere0 = jnp.sum((xhat - mu0) ** 2, axis=-1)
        sphere1 = d + s * jnp.sum((xhat - mu1) ** 2, axis=-1)
        return (
            jnp.minimum(sphere0, sphere1)
            + 10.0 * (d - jnp.sum(jnp.cos(2.0 * jnp.pi * z), axis=-1))
            + 1e4 * f_pen(x)
        )
    raise ArgumentError(f"fn_id must be in 1..24, got {fn_id!r}")


def bbob_value(fn_id: int, instance: BBOBInstance, x: jax.Array) -> jax.Array:
    """Noiseless value of ``f_{fn_id}`` on ``x [..., D] -> [...]`` (pure; ``fn_id`` static)."""
    fn_id = function_id(fn_id)
    x = jnp.asarray(x, jnp.float32)
    lead = x.shape[:-1]
    flat = x.reshape((-1, x.shape[-1]))
    return (_raw(fn_id, instance, flat) + instance.f_opt).reshape(lead)


# Compiled once per (function, shape): eager op-by-op dispatch of these many small ops is slow.
_common_jit = jax.jit(_common_ingredients, static_argnums=0)
_gallagher_peaks_jit = jax.jit(_gallagher_peaks, static_argnums=(0, 1))
_bbob_value_jit = jax.jit(bbob_value, static_argnums=0)


# -- noise -----------------------------------------------------------------------------------------
def apply_noise(key: jax.Array, f: jax.Array, f_opt: jax.Array, noise: str, num_dims: int) -> jax.Array:
    """Noisy values from noiseless ``f [pop]`` (the noisy testbed's models, on ``f - f_opt``).

    Noise multiplies or adds to ``ftrue = f - f_opt``; where ``ftrue < 1e-8`` the value stays
    noiseless, elsewhere ``1.01e-8`` is added so the target precision is only reached noiselessly.

    * gaussian: ``ftrue * exp(beta N(0, 1))``;
    * uniform: ``ftrue * U1^beta * max(1, (1e9 / ftrue)^(alpha U2))``, ``alpha = a (0.49 + 1/D)``;
    * cauchy: ``ftrue + alpha * max(0, 1000 + [U < p] N1 / (|N2| + eps))``.
    """
    ftrue = f - f_opt
    return noise_from_draws(ftrue, noise_draws(key, noise, ftrue.shape), noise, num_dims) + f_opt


def _check_noise(noise: Any) -> tuple[str, tuple[float, float]]:
    if noise not in NOISE_MODELS:
        raise ArgumentError(f"noise must be one of {', '.join(NOISE_MODELS)} or None, got {noise!r}")
    return NOISE_MODELS[noise]


def noise_draws(key: jax.Array, noise: str, shape: tuple[int, ...]) -> tuple[jax.Array, ...]:
    """The random variates one evaluation of noise model ``noise`` consumes, each of ``shape``.

    gaussian: ``(N,)``; uniform: ``(U1, U2)``; cauchy: ``(U, N1, N2)`` — the order in which the
    reference code draws them, so the same draws can be fed to both (see :func:`noise_from_draws`).
    """
    model, _ = _check_noise(noise)
    k1, k2, k3 = jax.random.split(key, 3)
    if model == "gaussian":
        return (rng.normal(k1, shape),)
    if model == "uniform":
        return rng.uniform(k1, shape), rng.uniform(k2, shape)
    return rng.uniform(k1, shape), rng.normal(k2, shape), rng.normal(k3, shape)


def noise_from_draws(ftrue: jax.Array, draws: tuple[jax.Array, ...], noise: str, num_dims: int) -> jax.Array:
    """Noisy ``ftrue`` (``f - f_opt``, any shape) given the variates of :func:`noise_draws`."""
    model, (a, b) = _check_noise(noise)
    safe = jnp.maximum(ftrue, _NOISE_THRESHOLD)  # the noisy branch is only used where ftrue >= 1e-8
    if model == "gaussian":
        (n,) = draws
        noisy = safe * jnp.exp(a * n)
    elif model == "uniform":
        alpha = a * (0.49 + 1.0 / num_dims)
        u1, u2 = draws
        noisy = safe * u1**b * jnp.maximum(1.0, (1e9 / safe) ** (alpha * u2))
    else:  # cauchy: a = alpha, b = p
        u, n1, n2 = draws
        ratio = n1 / (jnp.abs(n2) + 1e-30)
        noisy = safe + a * jnp.maximum(0.0, 1000.0 + jnp.where(u < b, ratio, 0.0))
    return jnp.where(ftrue < _NOISE_THRESHOLD, ftrue, noisy + 1.01 * _NOISE_THRESHOLD)


def _noisy_value(fn_id: int, noise: str, instance: BBOBInstance, key: jax.Array, x: jax.Array) -> jax.Array:
    return apply_noise(key, bbob_value(fn_id, instance, x), instance.f_opt, noise, x.shape[-1])


_noisy_value_jit = jax.jit(_noisy_value, static_argnums=(0, 1))


# -- the problem -----------------------------------------------------------------------------------


def build_instance(
    fn_id: int, num_dims: int, instance: Any, key_of: Any, rule_id: int | None = None
) -> BBOBInstance:
    """The :class:`BBOBInstance` of ``instance`` (an int ``>= 0``, turned into a key by
    ``key_of(fn_id, num_dims, instance)``, or a ``jax.random.key``), sampled with function
    ``rule_id``'s instance rule (default ``fn_id``); the shared part compiles once per dimension."""
    if isinstance(instance, (int, np.integer)) and not isinstance(instance, bool):
        if instance < 0:
            raise ArgumentError(f"instance must be a non-negative int or a jax.random.key, got {instance!r}")
        key = key_of(fn_id, num_dims, int(instance))
    elif isinstance(instance, jax.Array) and jnp.issubdtype(instance.dtype, jax.dtypes.prng_key):
        key = instance
    else:
        raise ArgumentError(f"instance must be an int or a jax.random.key, got {type(instance).__name__}")
    base, k_peaks = _common_jit(num_dims, key)
    return _specialize(fn_id if rule_id is None else rule_id, base, k_peaks, _gallagher_peaks_jit)


class BBOB:
    """One BBOB function instance as a function problem (minimized).

    Args:
        function: number 1..24, ``"f15"``, or a name from :data:`BBOB_NAMES` (``"rastrigin"``).
        num_dims: dimension D >= 2.
        instance: an instance number (int, default 1) or a ``jax.random.key`` to draw it from.
        noise: None, or one of :data:`NOISE_MODELS` (``"gaussian-moderate"``, ``"cauchy-severe"``…).

    Attributes:
        fn_id, name, num_dims, noise: the configuration.
        instance: the :class:`BBOBInstance`; ``x_opt [D]`` and ``f_opt []`` are shortcuts.
        bounds: ``(-5.0, 5.0)``, the BBOB search box (every optimum lies inside it).
    """

    kind = "function"
    maximize = False
    bounds = (-5.0, 5.0)

    def __init__(self, function: int | str, num_dims: int, instance: Any = 1, noise: str | None = None):
        self.fn_id = function_id(function)
        self.name = BBOB_NAMES[self.fn_id - 1]
        self.num_dims = _check_dims(num_dims)
        if noise is not None and (not isinstance(noise, str) or noise not in NOISE_MODELS):
            raise ArgumentError(f"noise must be None or one of {', '.join(NOISE_MODELS)}, got {noise!r}")
        self.noise = noise
        # Same draws as sample_instance(), but the shared part compiles once per dimension.
        self.instance = build_instance(self.fn_id, self.num_dims, instance, instance_key)

    @property
    def x_opt(self) -> jax.Array:
        """``[D]`` location of the global optimum."""
        return self.instance.x_opt

    @property
    def f_opt(self) -> jax.Array:
        """``[]`` the optimal (minimal) value."""
        return self.instance.f_opt

    def __call__(self, x: jax.Array) -> jax.Array:
        """Noiseless objective of flat points ``[..., D] -> [...]``."""
        return _bbob_value_jit(self.fn_id, self.instance, jnp.asarray(x, jnp.float32))

    def evaluate(self, key: jax.Array, genotypes: Any) -> Evaluation:
        """Score ``genotypes`` (``[pop, D]`` or a pytree with a leading pop axis) -> ``fitness [pop]``.

        ``key`` drives the noise model (unused when ``noise`` is None).
        """
        if isinstance(genotypes, jax.Array | np.ndarray):
            x = jnp.asarray(genotypes)
        else:
            x = jax.vmap(lambda g: ravel_pytree(g)[0])(genotypes)
        if x.ndim != 2 or x.shape[1] != self.num_dims:
            raise ArgumentError(
                f"BBOB f{self.fn_id}: genotypes must be [pop, {self.num_dims}], got {x.shape}"
            )
        if self.noise is None:
            return Evaluation(fitness=self(x))
        noisy = _noisy_value_jit(self.fn_id, self.noise, self.instance, key, x.astype(jnp.float32))
        return Evaluation(fitness=noisy)

    def __repr__(self) -> str:
        noise = f", noise={self.noise!r}" if self.noise else ""
        return f"BBOB(f{self.fn_id} {self.name!r}, num_dims={self.num_dims}{noise})"
