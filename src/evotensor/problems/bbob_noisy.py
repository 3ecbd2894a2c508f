"""The BBOB noisy testbed: functions f101-f130 (Hansen, Finck, Ros, Auger 2009).

Definitions follow "Real-Parameter Black-Box Optimization Benchmarking 2009: Noisy Functions
Definitions" (INRIA RR-6869) and its reference code (the BBOB C code and pycma's
``cma.bbobbenchmarks.F101`` … ``F130``). Each of the 30 functions is a noiseless *core* ``f_core``
(eight base functions, some modified) with one noise model put on it:

    f(x) = f_noise(f_core(x)) + 100 f_pen(x) + f_opt

* the boundary penalty ``f_pen(x) = sum(max(0, |x_i| - 5)^2)`` has factor 100 on every noisy
  function and is added *after* the noise, so noise never acts on it;
* ``f_noise`` leaves ``f_core < 1e-8`` untouched and adds ``1.01e-8`` elsewhere, so the target
  precision ``1e-8`` can only be reached noiselessly (see :func:`evotensor.problems.bbob.noise_from_draws`);
* moderate noise: gaussian ``beta = 0.01``, uniform ``(alpha, beta) = (0.01 (0.49 + 1/D), 0.01)``,
  cauchy ``(alpha, p) = (0.01, 0.05)``; severe: ``beta = 1``, ``(0.49 + 1/D, 1)``, ``(1, 0.2)``.

The functions, as ``f_id: core`` (noise models in the order gaussian, uniform, cauchy):

=========  ===================================================================================
f101-103   sphere ``||x - x_opt||^2``, moderate noise
f104-106   Rosenbrock (f8's core, not rotated), moderate noise
f107-109   sphere, severe noise
f110-112   Rosenbrock, severe noise
f113-115   step ellipsoid (f7's core, condition 100), severe noise
f116-118   ellipsoid with ``T_osz`` (f10's core with condition 1e4 instead of 1e6), severe noise
f119-121   sum of different powers (f14's core), severe noise
f122-124   Schaffers F7 (f17's core, condition 10), severe noise
f125-127   Griewank-Rosenbrock ``1 + sum(s_i / 4000 - cos s_i) / (D - 1)`` (f19 has 10 for 1)
f128-130   Gallagher 101 peaks (f21's core), severe noise
=========  ===================================================================================

Instances (``x_opt``, ``f_opt``, rotations, Gallagher peaks) are drawn exactly like the noiseless
ones in :mod:`evotensor.problems.bbob` (same helpers, same ``x_opt`` rule as the base function),
from a key that depends on the noisy function's own number; they are not COCO's instances.

Example::

    problem = BBOBNoisy(122, num_dims=10)                     # or "schaffers_f7_gaussian"
    ev = problem.evaluate(jax.random.key(0), x)              # x: [pop, 10] -> ev.fitness: [pop], noisy
    problem(x)                                                # [pop], the noiseless value
    problem(problem.x_opt) == problem.f_opt                   # exactly: the core is 0 there
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from evotensor.core.checks import ArgumentError
from evotensor.core.evaluation import Evaluation
from evotensor.problems import bbob
from evotensor.problems.bbob import BBOBInstance

# (family, base noiseless function id, noise level) of the ten blocks of three functions, in id order.
_BLOCKS: tuple[tuple[str, int, str], ...] = (
    ("sphere", 1, "moderate"),
    ("rosenbrock", 8, "moderate"),
    ("sphere", 1, "severe"),
    ("rosenbrock", 8, "severe"),
    ("step_ellipsoid", 7, "severe"),
    ("ellipsoid", 10, "severe"),
    ("different_powers", 14, "severe"),
    ("schaffers_f7", 17, "severe"),
    ("griewank_rosenbrock", 19, "severe"),
    ("gallagher_101", 21, "severe"),
)
_MODELS = ("gaussian", "uniform", "cauchy")

# fn_id -> (name, base noiseless function id, noise model key of bbob.NOISE_MODELS)
NOISY_FUNCTIONS: dict[int, tuple[str, int, str]] = {
    101 + 3 * block + k: (
        f"{family}_{model}" + ("_moderate" if level == "moderate" else ""),
        base_id,
        f"{model}-{level}",
    )
    for block, (family, base_id, level) in enumerate(_BLOCKS)
    for k, model in enumerate(_MODELS)
}
# Function names in id order: BBOB_NOISY_NAMES[i - 101] is function f_i.
BBOB_NOISY_NAMES: tuple[str, ...] = tuple(NOISY_FUNCTIONS[i][0] for i in range(101, 131))

PENALTY_FACTOR = 100.0  # every noisy function's boundary-penalty factor (added after the noise)
_ELLIPSOID_LOG10_CONDITION = 4.0  # f116-f118: condition 1e4 (f10 has 1e6)


def noisy_function_id(function: int | str) -> int:
    """Noisy BBOB function number (101..130) from a number, ``"f101"`` or a :data:`BBOB_NOISY_NAMES` name."""
    if isinstance(function, str):
        name = function.lower().replace("-", "_")
        if name.startswith("f") and name[1:].isdigit():
            return noisy_function_id(int(name[1:]))
        if name not in BBOB_NOISY_NAMES:
            raise ArgumentError(
                f"unknown noisy BBOB function {function!r}; names: "
                f"{', '.join(BBOB_NOISY_NAMES)} (or a number 101..130, 'f101'..'f130')"
            )
        return BBOB_NOISY_NAMES.index(name) + 101
    if (
        isinstance(function, bool)
        or not isinstance(function, (int, np.integer))
        or not 101 <= function <= 130
    ):
        raise ArgumentError(f"function must be an int in 101..130 or a noisy BBOB name, got {function!r}")
    return int(function)


def noise_model(fn_id: int | str) -> str:
    """The noise model of ``f_{fn_id}``: a key of :data:`evotensor.problems.bbob.NOISE_MODELS`."""
    return NOISY_FUNCTIONS[noisy_function_id(fn_id)][2]


def base_function(fn_id: int | str) -> int:
    """The noiseless BBOB function (1..24) whose core and instance rule ``f_{fn_id}`` shares."""
    return NOISY_FUNCTIONS[noisy_function_id(fn_id)][1]


# -- instances -------------------------------------------------------------------------------------
def sample_noisy_instance(fn_id: int | str, num_dims: int, key: jax.Array) -> BBOBInstance:
    """Draw an instance of ``f_{fn_id}`` (101..130) in ``num_dims`` dimensions (pure, jit/vmap-able).

    The draws and the ``x_opt`` rule are those of the base noiseless function
    (:func:`evotensor.problems.bbob.sample_instance`).
    """
    return bbob.sample_instance(base_function(fn_id), num_dims, key)


def noisy_instance_key(fn_id: int | str, num_dims: int, instance: int) -> jax.Array:
    """The key behind instance number ``instance`` of ``f_{fn_id}`` in ``num_dims`` dimensions."""
    key = jax.random.key(bbob._INSTANCE_SEED)
    for part in (noisy_function_id(fn_id), num_dims, instance):
        key = jax.random.fold_in(key, part)
    return key


# -- values ----------------------------------------------------------------------------------------
def _core(base_id: int, inst: BBOBInstance, x: jax.Array) -> jax.Array:
    """``f_core`` of base function ``base_id`` on ``x [pop, D]`` -> ``[pop]`` (no noise, penalty, f_opt)."""
    if base_id in (1, 8, 14):  # sphere, Rosenbrock, different powers: f1/f8/f14 have no penalty
        return bbob._raw(base_id, inst, x)
    if base_id == 7:
        return bbob._step_ellipsoid_core(x, inst)
    if base_id == 10:
        return bbob._ellipsoid_core(x, inst, _ELLIPSOID_LOG10_CONDITION)
    if base_id == 17:
        return bbob._schaffers_core(x, inst, 10.0)
    if base_id == 19:
        # Dividing (not multiplying by 1/(D-1)) keeps f_core(x_opt) exactly 0: the sum is -(D-1).
        return 1.0 + bbob._griewank_rosenbrock_sum(x, inst) / (x.shape[-1] - 1)
    return bbob._gallagher_core(x, inst)


def _core_and_offset(base_id: int, inst: BBOBInstance, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(f_core, f_opt + 100 f_pen)`` for ``x [pop, D]``: the part the noise acts on, and the rest."""
    return _core(base_id, inst, x), inst.f_opt + PENALTY_FACTOR * bbob.f_pen(x)


def _noisy_from_core(
    key: jax.Array, core: jax.Array, offset: jax.Array, noise: str, num_dims: int
) -> jax.Array:
    """As in the reference code, ``f_opt`` and the penalty are added together after the noise."""
    draws = bbob.noise_draws(key, noise, core.shape)
    return bbob.noise_from_draws(core, draws, noise, num_dims) + offset


def _flat(x: jax.Array) -> tuple[jax.Array, tuple[int, ...]]:
    x = jnp.asarray(x, jnp.float32)
    return x.reshape((-1, x.shape[-1])), x.shape[:-1]


def noiseless_core(fn_id: int | str, instance: BBOBInstance, x: jax.Array) -> jax.Array:
    """``f_core`` of ``f_{fn_id}`` on ``x [..., D] -> [...]``: what the noise acts on; 0 at ``x_opt``."""
    flat, lead = _flat(x)
    return _core(base_function(fn_id), instance, flat).reshape(lead)


def noiseless_value(fn_id: int | str, instance: BBOBInstance, x: jax.Array) -> jax.Array:
    """``f_core(x) + 100 f_pen(x) + f_opt`` of ``f_{fn_id}`` on ``x [..., D] -> [...]`` (pure)."""
    flat, lead = _flat(x)
    core, offset = _core_and_offset(base_function(fn_id), instance, flat)
    return (core + offset).reshape(lead)


def noisy_value_from_draws(
    fn_id: int | str, instance: BBOBInstance, draws: tuple[jax.Array, ...], x: jax.Array
) -> jax.Array:
    """Noisy ``f_{fn_id}`` on ``x [..., D] -> [...]`` given the noise variates ``draws`` (each ``[...]``).

    ``draws`` are those :func:`evotensor.problems.bbob.noise_draws` returns for :func:`noise_model`;
    this is the deterministic half of :func:`noisy_value`, exposed to test against references.
    """
    flat, lead = _flat(x)
    core, offset = _core_and_offset(base_function(fn_id), instance, flat)
    draws = tuple(jnp.reshape(v, (-1,)) for v in draws)
    noisy = bbob.noise_from_draws(core, draws, noise_model(fn_id), flat.shape[-1])
    return (noisy + offset).reshape(lead)


def noisy_value(fn_id: int | str, instance: BBOBInstance, key: jax.Array, x: jax.Array) -> jax.Array:
    """Noisy ``f_{fn_id}`` on ``x [..., D] -> [...]``; ``key`` draws the noise (pure, jit/vmap-able)."""
    flat, lead = _flat(x)
    core, offset = _core_and_offset(base_function(fn_id), instance, flat)
    return _noisy_from_core(key, core, offset, noise_model(fn_id), flat.shape[-1]).reshape(lead)


# Compiled separately for the 8 cores and the 6 noise models (14 programs per shape rather than 30
# core-noise pairs): sweeping the whole testbed compiles about half as much. Inside a caller's jit
# the two are inlined into one program anyway.
_core_and_offset_jit = jax.jit(_core_and_offset, static_argnums=0)
_noisy_from_core_jit = jax.jit(_noisy_from_core, static_argnums=(3, 4))
_noise_from_draws_jit = jax.jit(bbob.noise_from_draws, static_argnums=(2, 3))


# -- the problem -----------------------------------------------------------------------------------
class BBOBNoisy:
    """One instance of a noisy BBOB function f101-f130 as a function problem (minimized).

    Args:
        function: number 101..130, ``"f122"``, or a name from :data:`BBOB_NOISY_NAMES`
            (``"sphere_gaussian_moderate"``, ``"schaffers_f7_cauchy"``…).
        num_dims: dimension D >= 2.
        instance: an instance number (int, default 1) or a ``jax.random.key`` to draw it from.

    Attributes:
        fn_id, name, num_dims: the configuration.
        base_id: the noiseless BBOB function whose core and instance rule this one shares.
        noise: the noise model, a key of :data:`evotensor.problems.bbob.NOISE_MODELS`.
        instance: the :class:`~evotensor.problems.bbob.BBOBInstance`; ``x_opt [D]``, ``f_opt []``.
        bounds: ``(-5.0, 5.0)``, the BBOB search box (outside it the penalty ``100 f_pen`` applies).

    ``evaluate`` returns noisy values; calling the problem returns the noiseless value
    ``f_core + 100 f_pen + f_opt`` (what the reference code reports as ``ftrue``).
    """

    kind = "function"
    maximize = False
    bounds = (-5.0, 5.0)

    def __init__(self, function: int | str, num_dims: int, instance: Any = 1):
        self.fn_id = noisy_function_id(function)
        self.name, self.base_id, self.noise = NOISY_FUNCTIONS[self.fn_id]
        self.num_dims = bbob._check_dims(num_dims)
        # Same draws as sample_noisy_instance(), compiled like BBOB's (shared cache per dimension).
        self.instance = bbob.build_instance(
            self.fn_id, self.num_dims, instance, noisy_instance_key, rule_id=self.base_id
        )

    @property
    def x_opt(self) -> jax.Array:
        """``[D]`` location of the global optimum."""
        return self.instance.x_opt

    @property
    def f_opt(self) -> jax.Array:
        """``[]`` the optimal (minimal) value, reached noiselessly at ``x_opt``."""
        return self.instance.f_opt

    def __call__(self, x: jax.Array) -> jax.Array:
        """Noiseless objective of flat points ``[..., D] -> [...]``."""
        flat, lead = _flat(self._check_points(x))
        core, offset = _core_and_offset_jit(self.base_id, self.instance, flat)
        return (core + offset).reshape(lead)

    def noisy_with_draws(self, draws: tuple[jax.Array, ...], x: jax.Array) -> jax.Array:
        """Noisy values of ``x [..., D] -> [...]`` given the noise variates ``draws`` (each ``[...]``).

        ``draws`` as returned by ``bbob.noise_draws(key, problem.noise, x.shape[:-1])``: reusing them
        across calls gives common random numbers; the reference tests feed the same to pycma.
        """
        flat, lead = _flat(self._check_points(x))
        core, offset = _core_and_offset_jit(self.base_id, self.instance, flat)
        draws = tuple(jnp.reshape(jnp.asarray(v, jnp.float32), (-1,)) for v in draws)
        return (_noise_from_draws_jit(core, draws, self.noise, self.num_dims) + offset).reshape(lead)

    def _check_points(self, x: jax.Array) -> jax.Array:
        x = jnp.asarray(x, jnp.float32)
        if x.ndim < 1 or x.shape[-1] != self.num_dims:
            raise ArgumentError(f"BBOB f{self.fn_id}: x must be [..., {self.num_dims}], got {x.shape}")
        return x

    def evaluate(self, key: jax.Array, genotypes: Any) -> Evaluation:
        """Noisy scores of ``genotypes`` (``[pop, D]`` or a pytree, leading pop axis) -> ``fitness [pop]``.

        ``key`` (a ``jax.random.key``) draws the noise: the same key gives the same values.
        """
        if key is None:
            raise ArgumentError(
                f"BBOB f{self.fn_id}: key must be a jax.random.key (it draws the noise), got None"
            )
        if isinstance(genotypes, jax.Array | np.ndarray):
            x = jnp.asarray(genotypes)
        else:
            x = jax.vmap(lambda g: ravel_pytree(g)[0])(genotypes)
        if x.ndim != 2 or x.shape[1] != self.num_dims:
            raise ArgumentError(
                f"BBOB f{self.fn_id}: genotypes must be [pop, {self.num_dims}], got {x.shape}"
            )
        core, offset = _core_and_offset_jit(self.base_id, self.instance, x.astype(jnp.float32))
        return Evaluation(fitness=_noisy_from_core_jit(key, core, offset, self.noise, self.num_dims))

    def __repr__(self) -> str:
        return f"BBOBNoisy(f{self.fn_id} {self.name!r}, num_dims={self.num_dims}, noise={self.noise!r})"
