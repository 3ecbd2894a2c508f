"""Quality-diversity benchmark problems: the planar arm, standard functions and linear projection.

Each problem is a function problem whose fitness is **maximized** (``maximize = True``, as in QD):
``evaluate(key, genotypes) -> Evaluation(fitness [pop] float32, descriptor [pop, d] float32)``.
Genotypes are ``[pop, num_dims]`` arrays or pytrees with a leading ``pop`` axis (flattened with
``ravel_pytree``, so any solution template of ``num_dims`` elements works).

Every problem exposes

* ``num_dims``: genotype length; ``num_descriptors``: descriptor length ``d``;
* ``bounds``: the genotype box ``(low, high)`` per coordinate the task expects (to initialise or
  clip genotypes; evaluation itself accepts any real genotype);
* ``descriptor_ranges``: ``((low, high), ...)`` per descriptor, containing every descriptor of a
  genotype inside ``bounds`` (the usual grid / CVT ranges of the task);
* ``fitness_range``: ``(low, high)`` containing the fitness of every genotype inside ``bounds``
  (the high end is attained at the optimum; the low end is the exact minimum over the box).

The multi-objective :class:`MORastrigin` returns ``fitness [pop, num_objectives]`` and gives
``fitness_range`` as one ``(low, high)`` pair per objective.

Sources (definitions re-implemented, not copied):

* :class:`Arm`, :class:`NoisyArm`: QDax ``qdax/tasks/arm.py`` (``arm``, ``noisy_arm_scoring_function``),
  itself after ``fast_map-elites``; genotype and descriptor boxes from QDax ``qdax/tasks/README.md``.
* :class:`QDSphere`, :class:`QDRastrigin`, :class:`RastriginProj`: QDax ``qdax/tasks/standard_functions.py``
  (``sphere``, ``rastrigin``, ``_rastrigin_proj_scoring``); the ``[-5.12, 5.12]`` box of
  ``RastriginProj`` is the one QDax's CMA-MEGA / OMG-MEGA examples use with these descriptors.
* :class:`MORastrigin`: QDax ``examples/mome.ipynb`` and ``tests/core_test/mome_test.py``
  (``rastrigin_scorer``, the ``[-2, 4]`` box, ``lag = 2.2``, ``base_lag = 0``).
* :class:`LinearProjection`: Fontaine et al. 2020 (CMA-ME, arXiv:1912.02400, Section 4) as written
  in pyribs ``examples/sphere.py`` (objective normalisation, clip rule, measure ranges); the
  Rastrigin variant uses the same shift and normalisation (worst value at ``x = -5.12``), as QDax's
  ``examples/cmame.ipynb`` does.

Non-finite genotypes never raise: they give NaN (or infinite) fitness, which MAP-Elites archives
reject.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from evotensor.core import rng
from evotensor.core.checks import ArgumentError, check_int, check_real, check_spread
from evotensor.core.evaluation import Evaluation

_LIMIT = 5.12  # the Rastrigin box half-width used by the projection benchmarks
_SHIFT = 0.4 * _LIMIT  # optimum of the shifted sphere / Rastrigin: x_i = 2.048


# --------------------------------------------------------------------------------------------
# validation and input handling


def _as_matrix(genotypes: Any, num_dims: int, who: str) -> jax.Array:
    """``[pop, num_dims]`` float32 from an array or a pytree with a leading pop axis."""
    if isinstance(genotypes, (jax.Array, np.ndarray)):
        x = jnp.asarray(genotypes)
    else:
        x = jax.vmap(lambda g: ravel_pytree(g)[0])(genotypes)
    if x.ndim != 2 or x.shape[1] != num_dims:
        raise ArgumentError(f"{who}: genotypes must be [pop, {num_dims}], got {tuple(x.shape)}")
    return x.astype(jnp.float32)


# --------------------------------------------------------------------------------------------
# shared definitions


def _fold(x: jax.Array, limit: float = _LIMIT) -> jax.Array:
    """The CMA-ME clip rule: ``x`` if ``-limit <= x <= limit`` else ``limit / x``.

    Values beyond the box are folded back inside it (``|limit / x| < 1``). The division uses a
    safe denominator so that ``x = 0`` gives ``0`` (QDax's multiply-by-mask form gives NaN there)
    and gradients stay finite.
    """
    inside = (x >= -limit) & (x <= limit)
    return jnp.where(inside, x, limit / jnp.where(inside, 1.0, x))


def _rastrigin_terms(z: jax.Array) -> jax.Array:
    """``sum(z**2 - 10 cos(2 pi z)) + 10 d`` over the last axis."""
    return 10.0 * z.shape[-1] + jnp.sum(z * z - 10.0 * jnp.cos(2.0 * jnp.pi * z), axis=-1)


def _rastrigin_term_np(z: np.ndarray) -> np.ndarray:
    return 10.0 + z * z - 10.0 * np.cos(2.0 * np.pi * z)


@functools.cache
def _rastrigin_term_max(low: float, high: float) -> float:
    """``max 10 + z^2 - 10 cos(2 pi z)`` over ``[low, high]`` (dense grid, then Newton on g')."""
    z = np.linspace(low, high, 200_001)
    best = float(z[np.argmax(_rastrigin_term_np(z))])
    for _ in range(20):  # refine the interior maximum: g' = 2z + 20 pi sin(2 pi z)
        g1 = 2.0 * best + 20.0 * np.pi * np.sin(2.0 * np.pi * best)
        g2 = 2.0 + 40.0 * np.pi**2 * np.cos(2.0 * np.pi * best)
        if g2 >= 0.0:
            break
        best = min(max(best - g1 / g2, low), high)
    return float(max(_rastrigin_term_np(np.array([best, low, high]))))


def _arm(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """QDax's planar arm on ``[pop, n]`` genotypes: (fitness ``[pop]``, descriptor ``[pop, 2]``)."""
    x = jnp.clip(x, 0.0, 1.0)
    n = x.shape[-1]
    centred = x - jnp.mean(x, axis=-1, keepdims=True)
    fitness = 0.0 - jnp.sqrt(jnp.mean(centred * centred, axis=-1))  # 0.0 - v: no -0.0
    angles = jnp.cumsum(2.0 * jnp.pi * x - jnp.pi, axis=-1)
    end_x = jnp.sum(jnp.cos(angles), axis=-1) / (2 * n) + 0.5
    end_y = jnp.sum(jnp.sin(angles), axis=-1) / (2 * n) + 0.5
    return fitness, jnp.stack([end_x, end_y], axis=-1)


# --------------------------------------------------------------------------------------------
# the planar arm


@dataclasses.dataclass(frozen=True)
class Arm:
    """QDax's planar arm (after ``fast_map-elites``): ``num_joints`` revolute joints in the plane.

    A genotype ``p`` holds one normalised angle per joint. With ``c = clip(p, 0, 1)``:

    * joint ``i`` turns by ``a_i = 2 pi c_i - pi`` relative to the previous link (``c_i = 0.5`` is
      straight on), so link ``i`` points at ``t_i = a_1 + ... + a_i``;
    * descriptor: the end effector, ``x = 0.5 + sum_i cos(t_i) / (2n)``,
      ``y = 0.5 + sum_i sin(t_i) / (2n)``: ``n`` links of length ``1/(2n)`` based at ``(0.5, 0.5)``,
      so it lies in the disc of radius 0.5 inside ``[0, 1]^2``;
    * fitness: ``-sqrt(mean((c - mean(c))^2))``, minus the (population) standard deviation of the
      normalised angles (QDax's docstring says "variance", its code takes the square root);
      it lies in ``[-0.5, 0]`` (0 for equal angles, -0.5 for half the angles at 0, half at 1).

    All angles ``c_i = 0.5`` stretch the arm straight along +x: descriptor ``(1, 0.5)``, fitness 0.

    Args:
        num_joints: number of joints ``n`` (>= 1). Default 100, the size QDax's arm tests use
            (``num_param_dimensions = 100`` in ``tests/tasks_test/arm_test.py``; QDax has no arm
            example notebook).

    Attributes:
        bounds: ``(0, 1)`` (genotypes outside are clipped before use).
        descriptor_ranges: ``((0, 1), (0, 1))``, for every genotype.
        fitness_range: ``(-0.5, 0)``, for every finite genotype.
    """

    num_joints: int = 100
    maximize: bool = dataclasses.field(default=True, init=False)
    kind: str = dataclasses.field(default="function", init=False)

    def __post_init__(self):
        object.__setattr__(self, "num_joints", check_int(self.num_joints, "num_joints", 1))

    @property
    def num_dims(self) -> int:
        return self.num_joints

    @property
    def num_descriptors(self) -> int:
        return 2

    @property
    def bounds(self) -> tuple[float, float]:
        return (0.0, 1.0)

    @property
    def descriptor_ranges(self) -> tuple[tuple[float, float], ...]:
        return ((0.0, 1.0), (0.0, 1.0))

    @property
    def fitness_range(self) -> tuple[float, float]:
        return (-0.5, 0.0)

    def evaluate(self, key: jax.Array, genotypes: Any) -> Evaluation:
        """``genotypes``: ``[pop, num_joints]`` or a pytree with a leading pop axis; ``key`` unused."""
        fitness, descriptor = _arm(_as_matrix(genotypes, self.num_dims, type(self).__name__))
        return Evaluation(fitness=fitness, descriptor=descriptor)


@dataclasses.dataclass(frozen=True)
class NoisyArm(Arm):
    """QDax's noisy planar arm: :class:`Arm` with Gaussian noise drawn from ``key``.

    As in QDax's ``noisy_arm_scoring_function``, the key is split into four,
    ``(_, k_f, k_d, k_p) = jax.random.split(key, 4)``, and

    * ``p' = p + params_noise * N(0, 1)`` (drawn with ``k_p``, shape ``[pop, n]``), then the arm
      is evaluated on ``p'`` (so the clip to ``[0, 1]`` applies after this noise);
    * ``fitness = arm_fitness(p') + fitness_noise * N(0, 1)`` (``k_f``, shape ``[pop]``);
    * ``descriptor = arm_descriptor(p') + descriptor_noise * N(0, 1)`` (``k_d``, shape ``[pop, 2]``).

    The noise arguments are standard deviations (QDax calls them ``*_variance`` but multiplies a
    standard normal by them). With the same key the draws equal QDax's. Noisy fitnesses and
    descriptors may leave ``fitness_range`` / ``descriptor_ranges``, which describe the noiseless arm.

    Args:
        num_joints: number of joints (>= 1), default 100.
        fitness_noise: std of the fitness noise (>= 0), default 0.1 (QDax's arm test).
        descriptor_noise: std of the descriptor noise (>= 0), default 0.1 (QDax's arm test).
        params_noise: std of the genotype noise (>= 0), default 0 (QDax's arm test uses 0.05).
    """

    fitness_noise: float = 0.1
    descriptor_noise: float = 0.1
    params_noise: float = 0.0

    def __post_init__(self):
        super().__post_init__()
        for name in ("fitness_noise", "descriptor_noise", "params_noise"):
            object.__setattr__(self, name, check_spread(getattr(self, name), name, allow_zero=True))

    def evaluate(self, key: jax.Array, genotypes: Any) -> Evaluation:
        """``genotypes``: ``[pop, num_joints]`` or a pytree; the noise is drawn from ``key``."""
        x = _as_matrix(genotypes, self.num_dims, type(self).__name__)
        _, k_f, k_d, k_p = jax.random.split(key, 4)
        if self.params_noise > 0.0:
            x = x + self.params_noise * rng.normal(k_p, x.shape, jnp.float32)
        fitness, descriptor = _arm(x)
        fitness = fitness + self.fitness_noise * rng.normal(k_f, fitness.shape, jnp.float32)
        descriptor = descriptor + self.descriptor_noise * rng.normal(k_d, descriptor.shape, jnp.float32)
        return Evaluation(fitness=fitness, descriptor=descriptor)


# --------------------------------------------------------------------------------------------
# QDax's standard functions


@dataclasses.dataclass(frozen=True)
class _TwoDescriptorFunction:
    """Shared part of QDax's standard-function tasks: ``num_dims >= 2``, two descriptors."""

    num_dims: int = 100
    maximize: bool = dataclasses.field(default=True, init=False)
    kind: str = dataclasses.field(default="function", init=False)

    def __post_init__(self):
        object.__setattr__(self, "num_dims", check_int(self.num_dims, "num_dims", 2))

    @property
    def num_descriptors(self) -> int:
        return 2


@dataclasses.dataclass(frozen=True)
class _UnitBoxFunction(_TwoDescriptorFunction):
    """Shared part of QDax's ``sphere`` / ``rastrigin`` tasks on ``[0, 1]^n``."""

    @property
    def bounds(self) -> tuple[float, float]:
        return (0.0, 1.0)

    @property
    def descriptor_ranges(self) -> tuple[tuple[float, float], ...]:
        return ((0.0, 1.0), (0.0, 1.0))

    def _objective(self, z: jax.Array) -> jax.Array:  # pragma: no cover - overridden
        raise NotImplementedError

    def evaluate(self, key: jax.Array, genotypes: Any) -> Evaluation:
        """``genotypes``: ``[pop, num_dims]`` or a pytree with a leading pop axis; ``key`` unused."""
        p = _as_matrix(genotypes, self.num_dims, type(self).__name__)
        fitness = 0.0 - self._objective(10.0 * p - 5.0)
        return Evaluation(fitness=fitness, descriptor=p[:, :2])


@dataclasses.dataclass(frozen=True)
class QDSphere(_UnitBoxFunction):
    """QDax's ``sphere`` task: with ``z = 10 p - 5`` (``[0, 1] -> [-5, 5]``, no clipping),

    * fitness ``-sum(z_i^2)`` (maximum 0 at ``p = 0.5``);
    * descriptor ``(p_1, p_2)``: the first two raw genotype coordinates.

    Args:
        num_dims: genotype length (>= 2), default 100 (QDax's standard-function tests).

    Attributes:
        bounds: ``(0, 1)``; descriptor_ranges: ``((0, 1), (0, 1))`` inside the bounds;
        fitness_range: ``(-25 num_dims, 0)`` inside the bounds.
    """

    @property
    def fitness_range(self) -> tuple[float, float]:
        return (-25.0 * self.num_dims, 0.0)

    def _objective(self, z: jax.Array) -> jax.Array:
        return jnp.sum(z * z, axis=-1)


@dataclasses.dataclass(frozen=True)
class QDRastrigin(_UnitBoxFunction):
    """QDax's ``rastrigin`` task: with ``z = 10 p - 5`` (``[0, 1] -> [-5, 5]``, no clipping),

    * fitness ``-(10 n + sum(z_i^2 - 10 cos(2 pi z_i)))`` (maximum 0 at ``p = 0.5``);
    * descriptor ``(p_1, p_2)``: the first two raw genotype coordinates.

    Args:
        num_dims: genotype length (>= 2), default 100 (QDax's standard-function tests).

    Attributes:
        bounds: ``(0, 1)``; descriptor_ranges: ``((0, 1), (0, 1))`` inside the bounds;
        fitness_range: ``(-num_dims * max_{|z| <= 5} (10 + z^2 - 10 cos 2 pi z), 0)`` inside the
            bounds (about ``-40.35 num_dims``).
    """

    @property
    def fitness_range(self) -> tuple[float, float]:
        return (-self.num_dims * _rastrigin_term_max(-5.0, 5.0), 0.0)

    def _objective(self, z: jax.Array) -> jax.Array:
        return _rastrigin_terms(z)


@dataclasses.dataclass(frozen=True)
class RastriginProj(_TwoDescriptorFunction):
    """QDax's ``rastrigin_proj`` task (Rastrigin with a folded, projected descriptor space).

    With ``z = x - 2.048`` (QDax: ``x + minval * 0.4``, ``minval = -5.12``) and the clip rule
    ``fold(v) = v if -5.12 <= v <= 5.12 else 5.12 / v``:

    * fitness ``-(10 n + sum(z_i^2 - 10 cos(2 pi z_i)))`` (raw, not normalised; maximum 0 at
      ``x_i = 2.048``);
    * descriptors: the **means** of ``fold(x)`` over the first ``n // 2`` coordinates and over the
      remaining ``n - n // 2``; each lies in ``[-5.12, 5.12]`` for every genotype.

    QDax's ``rastrigin_proj_scoring_function`` also returns gradients (not here) and takes
    ``minval`` / ``maxval`` (fixed here at their defaults ``-5.12`` / ``5.12``). Its fold computes
    ``5.12 / x`` times a mask, which is NaN at ``x = 0``; here ``x = 0`` folds to 0.

    Args:
        num_dims: genotype length (>= 2), default 100.

    Attributes:
        bounds: ``(-5.12, 5.12)``, the box QDax's CMA-MEGA / OMG-MEGA examples use with these
            descriptors (QDax's task README and test state ``[0, 1]``, a sub-box of it).
        descriptor_ranges: ``((-5.12, 5.12), (-5.12, 5.12))``.
        fitness_range: ``(-num_dims * max_{z in [-7.168, 3.072]} (10 + z^2 - 10 cos 2 pi z), 0)``
            inside the bounds (about ``-62.5 num_dims``).
    """

    @property
    def bounds(self) -> tuple[float, float]:
        return (-_LIMIT, _LIMIT)

    @property
    def descriptor_ranges(self) -> tuple[tuple[float, float], ...]:
        return ((-_LIMIT, _LIMIT), (-_LIMIT, _LIMIT))

    @property
    def fitness_range(self) -> tuple[float, float]:
        return (-self.num_dims * _rastrigin_term_max(-_LIMIT - _SHIFT, _LIMIT - _SHIFT), 0.0)

    def evaluate(self, key: jax.Array, genotypes: Any) -> Evaluation:
        """``genotypes``: ``[pop, num_dims]`` or a pytree with a leading pop axis; ``key`` unused."""
        x = _as_matrix(genotypes, self.num_dims, type(self).__name__)
        half = self.num_dims // 2
        folded = _fold(x)
        descriptor = jnp.stack(
            [jnp.mean(folded[:, :half], axis=-1), jnp.mean(folded[:, half:], axis=-1)], axis=-1
        )
        return Evaluation(fitness=0.0 - _rastrigin_terms(x - _SHIFT), descriptor=descriptor)


# --------------------------------------------------------------------------------------------
# the CMA-ME linear projection benchmark

_PROJECTION_FUNCTIONS = ("sphere", "rastrigin")


@dataclasses.dataclass(frozen=True)
class LinearProjection:
    """The linear-projection benchmark of CMA-ME (Fontaine et al. 2020, Section 4), as in pyribs.

    With ``z = x - 2.048`` (the optimum moved to ``x_i = 0.4 * 5.12``) and ``f`` the sphere
    ``sum(z_i^2)`` or Rastrigin ``10 n + sum(z_i^2 - 10 cos(2 pi z_i))``:

    * fitness: ``(f(z) - worst) / (0 - worst) * scale``, the objective normalised so that ``scale``
      (100, pyribs' example; 1 in the DDS and DMS papers' domains) is the optimum (``f = 0``) and 0
      is ``worst = f`` at ``x = (-5.12, ..., -5.12)``
      (``worst = n * 7.168^2`` for the sphere, pyribs' ``(-5.12 - sphere_shift) ** 2 * dim``);
    * measures, with the clip rule ``fold(v) = v if -5.12 <= v <= 5.12 else 5.12 / v`` (pyribs:
      ``clipped[mask] = 5.12 / clipped[mask]`` where ``mask = (x < -5.12) | (x > 5.12)``): the sums
      of ``fold(x_i)`` over ``k = num_measures`` groups of consecutive coordinates,
      ``(sum_{i < n//2} fold(x_i), sum_{i >= n//2} fold(x_i))`` for ``k = 2``. The groups have
      ``n // k`` coordinates, the last ``n mod k`` one more: pyribs' example's halves for ``k = 2``,
      and the DMS paper's ``np.array_split`` groups whenever ``k`` divides ``n`` (its 100-d domains
      with 20 or 50 measures).

    For the sphere the fitness lies in ``[0, 100]`` inside ``[-5.12, 5.12]^n`` (unbounded below
    outside it). For Rastrigin ``x = -5.12`` is not the worst point of the box, so the normalised
    fitness can be negative inside it (down to about -10.65).

    Args:
        num_dims: genotype length (>= 2), default 100 (pyribs' ``sphere.py`` default ``dim``).
        function: ``"sphere"`` (pyribs' example) or ``"rastrigin"`` (CMA-ME's second benchmark).
        scale: the optimum's fitness, > 0 (default 100).
        num_measures: the measure-space dimension ``k``, ``2 <= k <= n`` (default 2).

    Attributes:
        bounds: ``(-5.12, 5.12)`` (pyribs starts from ``x0 = 0`` and does not bound solutions).
        descriptor_ranges: ``(-5.12 m, 5.12 m)`` with ``m`` the number of coordinates of each group,
            i.e. pyribs' ``(-n/2 * 5.12, n/2 * 5.12)`` for even ``n``; they hold for every genotype.
        fitness_range: ``(0, scale)`` for the sphere; ``(scale (1 - max_term / worst_term),
            scale)`` for Rastrigin, both inside the bounds.
    """

    num_dims: int = 100
    function: str = "sphere"
    scale: float = 100.0
    num_measures: int = 2
    maximize: bool = dataclasses.field(default=True, init=False)
    kind: str = dataclasses.field(default="function", init=False)

    def __post_init__(self):
        object.__setattr__(self, "num_dims", check_int(self.num_dims, "num_dims", 2))
        if not isinstance(self.function, str):
            raise ArgumentError(f"function must be a str, got {self.function!r}")
        if self.function not in _PROJECTION_FUNCTIONS:
            raise ArgumentError(
                f"function must be one of {', '.join(_PROJECTION_FUNCTIONS)}, got {self.function!r}"
            )
        object.__setattr__(self, "scale", check_real(self.scale, "scale", low=0.0, low_open=True))
        object.__setattr__(
            self, "num_measures", check_int(self.num_measures, "num_measures", 2, maximum=self.num_dims)
        )

    @property
    def num_descriptors(self) -> int:
        return self.num_measures

    @property
    def bounds(self) -> tuple[float, float]:
        return (-_LIMIT, _LIMIT)

    def group_sizes(self) -> tuple[int, ...]:
        """Coordinates per measure: ``n // k``, the last ``n mod k`` groups one more."""
        n, k = self.num_dims, self.num_measures
        return tuple(n // k + (g >= k - n % k) for g in range(k))

    @property
    def descriptor_ranges(self) -> tuple[tuple[float, float], ...]:
        return tuple((-_LIMIT * m, _LIMIT * m) for m in self.group_sizes())

    def _worst_term(self) -> float:
        z = -_LIMIT - _SHIFT
        if self.function == "sphere":
            return z * z
        return float(_rastrigin_term_np(np.float64(z)))

    @property
    def worst_objective(self) -> float:
        """The raw objective at ``x = -5.12`` (normalised fitness 0)."""
        return self.num_dims * self._worst_term()

    @property
    def fitness_range(self) -> tuple[float, float]:
        if self.function == "sphere":
            return (0.0, self.scale)
        max_term = _rastrigin_term_max(-_LIMIT - _SHIFT, _LIMIT - _SHIFT)
        return (self.scale * (1.0 - max_term / self._worst_term()), self.scale)

    def evaluate(self, key: jax.Array, genotypes: Any) -> Evaluation:
        """``genotypes``: ``[pop, num_dims]`` or a pytree with a leading pop axis; ``key`` unused."""
        x = _as_matrix(genotypes, self.num_dims, type(self).__name__)
        z = x - _SHIFT
        raw = jnp.sum(z * z, axis=-1) if self.function == "sphere" else _rastrigin_terms(z)
        worst = self.worst_objective
        fitness = (raw - worst) / (0.0 - worst) * self.scale
        folded = _fold(x)
        ends = np.cumsum(self.group_sizes())
        descriptor = jnp.stack(
            [
                jnp.sum(folded[:, end - m : end], axis=-1)
                for end, m in zip(ends, self.group_sizes(), strict=True)
            ],
            axis=-1,
        )
        return Evaluation(fitness=fitness.astype(jnp.float32), descriptor=descriptor)


# --------------------------------------------------------------------------------------------
# QDax's multi-objective Rastrigin (MOME)

_MO_BOX = (-2.0, 4.0)  # QDax's MOME example: minval = -2, maxval = 4


@dataclasses.dataclass(frozen=True)
class MORastrigin(_TwoDescriptorFunction):
    """The two-objective Rastrigin of QDax's MOME example (``rastrigin_scorer``).

    With ``R(z) = 10 n + sum(z_i^2 - 10 cos(2 pi z_i))``:

    * fitness ``[pop, 2]``: ``(-R(x - base_lag), -R(x - lag))``, both maximized; objective 1 is 0
      at ``x_i = base_lag``, objective 2 at ``x_i = lag``, so the two conflict;
    * descriptor ``(x_1, x_2)``: the first two raw genotype coordinates.

    Args:
        num_dims: genotype length (>= 2), default 100 (QDax's MOME example).
        lag: optimum of the second objective, default 2.2 (QDax's MOME example).
        base_lag: optimum of the first objective, default 0.0 (QDax's MOME example).

    Attributes:
        num_objectives: 2.
        bounds: ``(-2, 4)``, QDax's ``minval`` / ``maxval``; descriptor_ranges:
            ``((-2, 4), (-2, 4))`` inside the bounds.
        fitness_range: one ``(low, high)`` pair per objective, containing its fitness inside the
            bounds: ``(-num_dims * max_{z in [-2 - s, 4 - s]} (10 + z^2 - 10 cos 2 pi z), 0)`` with
            ``s = base_lag`` for the first and ``s = lag`` for the second (the high end 0 is
            attained when ``s`` lies in the bounds).
    """

    lag: float = 2.2
    base_lag: float = 0.0

    def __post_init__(self):
        super().__post_init__()
        for name in ("lag", "base_lag"):
            object.__setattr__(self, name, check_real(getattr(self, name), name))

    @property
    def num_objectives(self) -> int:
        return 2

    @property
    def bounds(self) -> tuple[float, float]:
        return _MO_BOX

    @property
    def descriptor_ranges(self) -> tuple[tuple[float, float], ...]:
        return (_MO_BOX, _MO_BOX)

    @property
    def fitness_range(self) -> tuple[tuple[float, float], tuple[float, float]]:
        low, high = _MO_BOX
        return tuple(  # type: ignore[return-value]
            (-self.num_dims * _rastrigin_term_max(low - s, high - s), 0.0) for s in (self.base_lag, self.lag)
        )

    def evaluate(self, key: jax.Array, genotypes: Any) -> Evaluation:
        """``genotypes``: ``[pop, num_dims]`` or a pytree with a leading pop axis; ``key`` unused.
        Returns fitness ``[pop, 2]`` and descriptor ``[pop, 2]``, float32."""
        x = _as_matrix(genotypes, self.num_dims, type(self).__name__)
        fitness = jnp.stack(
            [0.0 - _rastrigin_terms(x - self.base_lag), 0.0 - _rastrigin_terms(x - self.lag)], axis=-1
        )
        return Evaluation(fitness=fitness, descriptor=x[:, :2])


__all__ = ["Arm", "LinearProjection", "MORastrigin", "NoisyArm", "QDRastrigin", "QDSphere", "RastriginProj"]
