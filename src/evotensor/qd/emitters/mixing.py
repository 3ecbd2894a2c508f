"""Mutation and crossover of elites, mixed in one batch (QDax's ``MixingEmitter``).

Three operators ready to compose, in the form ``op(key, x [n, d]) -> [n, d]`` (a mutation) or
``op(key, x1 [n, d], x2 [n, d]) -> [n, d]`` (a crossover); any callable of that form works::

    emitter = MixingEmitter(
        x0=jnp.zeros(10),
        mutation=PolynomialMutation(low=-2.0, high=4.0, eta=1.0, proportion=0.6),
        crossover=GeneSwapCrossover(proportion=0.5),
        crossover_fraction=0.5,
        bounds=(-2.0, 4.0),
    )

Definitions after QDax ``qdax/core/emitters/mutation_operators.py`` (``polynomial_mutation``,
``polynomial_crossover``) and ``standard_emitters.py`` (``MixingEmitter``), and Deb's bounded SBX as
pymap_elites' ``map_elites/common.py`` applies it (``sbx``); re-implemented, not copied.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core import rng
from evotensor.core.checks import ArgumentError, check_fraction, check_real
from evotensor.qd.archive import Archive, ArchiveState
from evotensor.qd.emitters.base import VariationEmitter, check_vector


def polynomial_step(u: Any, v: Any, eta: Any, low: Any, high: Any) -> jax.Array:
    """QDax's polynomial mutation of values ``v`` by uniforms ``u`` (all arguments broadcast together).

    With ``w = high - low``, ``delta1 = (v - low) / w``, ``delta2 = (high - v) / w`` and
    ``p = 1 / (1 + eta)``::

        dq = (2u + (1 - 2u) delta1^(1+eta))^p - 1              if u < 0.5
        dq = 1 - (2(1 - u) + 2(u - 0.5) delta2^(1+eta))^p      otherwise
        v' = v + dq w

    This is QDax's form; Deb's NSGA-II form raises ``1 - delta`` instead of ``delta``, which keeps
    ``v'`` inside the box. Here ``v'`` may leave ``[low, high]`` (the mutation clips it). A ``v``
    outside the box is first moved to its nearest bound (QDax would take the power of a negative
    number there: NaN).

    Args:
        u: uniforms in ``[0, 1)``, e.g. ``[n, d]``.
        v: values, e.g. ``[n, d]``.
        eta: distribution index ``> 0`` (larger: smaller steps).
        low, high: the box, scalars or ``[d]``, ``low < high``.

    Returns:
        ``v'``, the broadcast shape of the arguments (not clipped).
    """
    u, v = jnp.asarray(u), jnp.asarray(v)
    width = high - low
    v = jnp.clip(v, low, high)
    delta1 = (v - low) / width
    delta2 = (high - v) / width
    power = 1.0 / (1.0 + eta)
    down = jnp.power(2.0 * u + (1.0 - 2.0 * u) * jnp.power(delta1, 1.0 + eta), power) - 1.0
    up = 1.0 - jnp.power(2.0 * (1.0 - u) + 2.0 * (u - 0.5) * jnp.power(delta2, 1.0 + eta), power)
    return v + jnp.where(u < 0.5, down, up) * width


def _as_batch(x: Any, name: str) -> jax.Array:
    """``x`` as an ``[n, d]`` floating array (integers become float32)."""
    x = jnp.asarray(x)
    if x.ndim != 2:
        raise ArgumentError(f"{name} must be [n, d], got shape {tuple(x.shape)}")
    return x if jnp.issubdtype(x.dtype, jnp.floating) else x.astype(jnp.float32)


def _bound(value: Any, name: str) -> float | tuple[float, ...]:
    """A finite float32 scalar, or a ``[d]`` vector as a tuple (so the operator stays hashable)."""
    if np.ndim(value) == 0:
        return check_real(value, name)
    return tuple(float(v) for v in check_vector(value, name))


def _check_box(low: Any, high: Any) -> tuple[Any, Any]:
    """``(low, high)`` checked: finite scalars or equal-length vectors, ``low < high`` everywhere."""
    low, high = _bound(low, "low"), _bound(high, "high")
    try:
        ends = np.broadcast_arrays(np.float32(low), np.float32(high))
    except ValueError as err:
        raise ArgumentError(f"high must have low's length, got {len(low)} and {len(high)}") from err
    with np.errstate(over="ignore"):
        width = ends[1] - ends[0]
    if np.any(ends[0] >= ends[1]) or not np.all(np.isfinite(width)):
        raise ArgumentError(f"high must be > low everywhere (and high - low finite), got {low} and {high}")
    return low, high


def _box(op: Any, d: int) -> tuple[jax.Array, jax.Array]:
    """An operator's ``low, high`` as float32 arrays, checked against ``d`` coordinates."""
    for name in ("low", "high"):
        value = getattr(op, name)
        if isinstance(value, tuple) and len(value) != d:
            raise ArgumentError(f"{name} has {len(value)} elements but the solutions have {d}")
    return jnp.asarray(op.low, jnp.float32), jnp.asarray(op.high, jnp.float32)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PolynomialMutation:
    """QDax's ``polynomial_mutation``: ``op(key, x [n, d]) -> [n, d]``.

    In every row exactly ``int(proportion * d)`` distinct coordinates, drawn uniformly, take a
    :func:`polynomial_step` with their own uniform ``u``; then the whole row is clipped to
    ``[low, high]`` (so an unchosen coordinate outside the box moves too, as in QDax).

    Args:
        low, high: the box, scalars or ``[d]`` arrays, finite, ``low < high`` (QDax's
            ``minval`` / ``maxval``; no default).
        eta: distribution index ``> 0``, default 1.0 (QDax's MOME example); larger: smaller steps.
        proportion: fraction of the coordinates mutated, in ``[0, 1]``, default 0.6 (QDax's MOME
            example's ``proportion_to_mutate``).
    """

    low: float | tuple[float, ...]
    high: float | tuple[float, ...]
    eta: float = 1.0
    proportion: float = 0.6

    def __post_init__(self):
        low, high = _check_box(self.low, self.high)
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)
        object.__setattr__(self, "eta", check_real(self.eta, "eta", 0.0, low_open=True))
        object.__setattr__(self, "proportion", check_fraction(self.proportion, "proportion", allow_zero=True))

    def __call__(self, key: jax.Array, x: Any) -> jax.Array:
        """``x [n, d] -> [n, d]``, of ``x``'s floating dtype."""
        x = _as_batch(x, "x")
        n, d = x.shape
        low, high = _box(self, d)
        pick_key, step_key = jax.random.split(key)
        # the k smallest of d uniforms per row: a uniform choice of k distinct coordinates
        # (argsort is stable, so ties still give exactly k)
        rank = jnp.argsort(jnp.argsort(rng.uniform(pick_key, (n, d)), axis=1), axis=1)
        chosen = rank < int(self.proportion * d)
        u = rng.uniform(step_key, (n, d), x.dtype)
        stepped = polynomial_step(u, x, self.eta, low, high).astype(x.dtype)
        return jnp.clip(jnp.where(chosen, stepped, x), low, high)


@dataclasses.dataclass(frozen=True)
class GeneSwapCrossover:
    """QDax's ``polynomial_crossover`` (a gene swap, despite the name): ``op(key, x1, x2) -> [n, d]``.

    Row ``i`` is a copy of ``x1[i]`` in which ``int(proportion * d)`` coordinates, drawn uniformly
    *with* replacement (as QDax does, so fewer distinct ones may change), are taken from ``x2[i]``.

    Args:
        proportion: fraction of the coordinates drawn, in ``[0, 1]``, default 0.5 (QDax's MOME
            example's ``proportion_var_to_change``).
    """

    proportion: float = 0.5

    def __post_init__(self):
        object.__setattr__(self, "proportion", check_fraction(self.proportion, "proportion", allow_zero=True))

    def __call__(self, key: jax.Array, x1: Any, x2: Any) -> jax.Array:
        """``x1 [n, d], x2 [n, d] -> [n, d]``."""
        x1, x2 = _as_batch(x1, "x1"), _as_batch(x2, "x2")
        if x1.shape != x2.shape:
            raise ArgumentError(f"x2 must have x1's shape {tuple(x1.shape)}, got {tuple(x2.shape)}")
        n, d = x1.shape
        picks = rng.randint(key, (n, int(self.proportion * d)), 0, d)
        taken = jnp.zeros((n, d), bool).at[jnp.arange(n)[:, None], picks].set(True)
        return jnp.where(taken, x2, x1)


SBX_MIN_GAP = 1e-15  # genes closer than this are copied from the first parent (pymap_elites)


def sbx_step(u: Any, side: Any, x1: Any, x2: Any, eta: Any, low: Any, high: Any) -> jax.Array:
    """Deb's bounded simulated binary crossover (SBX), one child per pair of parents, with uniforms
    ``u`` (the spread) and ``side`` (which of the two children a gene is taken from).

    Per gene, with ``a = min(x1, x2)``, ``b = max(x1, x2)``, ``g = b - a`` and ``p = 1 / (eta + 1)``::

        beta_q(beta) = (u alpha)^p               if u <= 1 / alpha,   alpha = 2 - beta^-(eta + 1)
                       (1 / (2 - u alpha))^p     otherwise
        c1 = (a + b - beta_q(1 + 2 (a - low) / g) g) / 2
        c2 = (a + b + beta_q(1 + 2 (high - b) / g) g) / 2
        child = clip(c2 if side <= 0.5 else c1, low, high)     where g > 1e-15, else x1

    which is pymap_elites' ``sbx`` (every gene crossed, one ``u`` for both children). Parents outside
    the box are first moved to its nearest bound.

    Args:
        u, side: uniforms in ``[0, 1)``, ``[n, d]``.
        x1, x2: parents ``[n, d]``.
        eta: distribution index ``> 0`` (larger: children nearer the parents).
        low, high: the box, scalars or ``[d]``, ``low < high``.

    Returns:
        ``[n, d]`` children, inside ``[low, high]``.
    """
    x1 = jnp.clip(jnp.asarray(x1), low, high)
    x2 = jnp.clip(jnp.asarray(x2), low, high)
    a, b = jnp.minimum(x1, x2), jnp.maximum(x1, x2)
    gap = b - a
    crossed = gap > SBX_MIN_GAP
    gap = jnp.where(crossed, gap, 1.0)
    power = 1.0 / (eta + 1.0)

    def spread(beta: jax.Array) -> jax.Array:
        alpha = 2.0 - jnp.power(beta, -(eta + 1.0))
        inside = u <= 1.0 / alpha
        return jnp.where(inside, jnp.power(u * alpha, power), jnp.power(1.0 / (2.0 - u * alpha), power))

    c1 = 0.5 * (a + b - spread(1.0 + 2.0 * (a - low) / gap) * gap)
    c2 = 0.5 * (a + b + spread(1.0 + 2.0 * (high - b) / gap) * gap)
    child = jnp.clip(jnp.where(side <= 0.5, c2, c1), low, high)
    return jnp.where(crossed, child, x1)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SBXCrossover:
    """Simulated binary crossover (Deb & Agrawal 1995, bounded form of Deb 2001): ``op(key, x1 [n, d],
    x2 [n, d]) -> [n, d]``, one child per row (:func:`sbx_step`): multi-task MAP-Elites' variation
    in pymap_elites (``eta`` 10, the box ``[0, 1]``).

    Args:
        low, high: the box, scalars or ``[d]`` arrays, finite, ``low < high``.
        eta: distribution index ``> 0``, default 10.0 (pymap_elites).
    """

    low: float | tuple[float, ...]
    high: float | tuple[float, ...]
    eta: float = 10.0

    def __post_init__(self):
        low, high = _check_box(self.low, self.high)
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)
        object.__setattr__(self, "eta", check_real(self.eta, "eta", 0.0, low_open=True))

    def __call__(self, key: jax.Array, x1: Any, x2: Any) -> jax.Array:
        """``x1 [n, d], x2 [n, d] -> [n, d]``, of ``x1``'s floating dtype."""
        x1, x2 = _as_batch(x1, "x1"), _as_batch(x2, "x2")
        if x1.shape != x2.shape:
            raise ArgumentError(f"x2 must have x1's shape {tuple(x1.shape)}, got {tuple(x2.shape)}")
        low, high = _box(self, x1.shape[1])
        u_key, side_key = jax.random.split(key)
        u = rng.uniform(u_key, x1.shape, x1.dtype)
        side = rng.uniform(side_key, x1.shape, x1.dtype)
        return sbx_step(u, side, x1, x2.astype(x1.dtype), self.eta, low, high).astype(x1.dtype)


def _operator(value: Any, name: str) -> Callable[..., jax.Array] | None:
    if value is not None and not callable(value):
        raise ArgumentError(f"{name} must be a callable or None, got {value!r}")
    return value


class MixingEmitter(VariationEmitter):
    """QDax's ``MixingEmitter``: a batch of crossed elites followed by a batch of mutated elites.

    With ``n_cross = int(batch_size * crossover_fraction)`` and ``n_mut = batch_size - n_cross``,
    ``ask`` returns ``[batch_size, dims]``: rows ``[:n_cross]`` are ``crossover(key, x1, x2)`` of two
    independent uniform draws of ``n_cross`` elites, rows ``[n_cross:]`` are ``mutation(key, x)`` of
    ``n_mut`` elites; then clipped to ``bounds``. While the archive is empty the parents are ``x0``
    (or the batch is ``initial_solutions``). Stateless (state ``()``).

    Args:
        x0: ``[dims]`` start point.
        mutation: ``(key, x [n, dims]) -> [n, dims]``, e.g. :class:`PolynomialMutation`; required
            when ``n_mut > 0``.
        crossover: ``(key, x1 [n, dims], x2 [n, dims]) -> [n, dims]``, e.g.
            :class:`GeneSwapCrossover`; required when ``n_cross > 0``.
        crossover_fraction: share of the batch made by crossover, in ``[0, 1]``, default 0 (QDax's
            ``variation_percentage``).
        batch_size: solutions per ask (default 64).
        bounds: optional ``(low, high)`` box the solutions are clipped to.
        initial_solutions: optional ``[batch_size, dims]`` first batch.
    """

    def __init__(
        self,
        x0: Any,
        *,
        mutation: Callable[..., jax.Array] | None = None,
        crossover: Callable[..., jax.Array] | None = None,
        crossover_fraction: float = 0.0,
        **kwargs: Any,
    ):
        super().__init__(x0, **kwargs)
        self.mutation = _operator(mutation, "mutation")
        self.crossover = _operator(crossover, "crossover")
        self.crossover_fraction = check_fraction(crossover_fraction, "crossover_fraction", allow_zero=True)
        self.num_crossed = int(self.batch_size * self.crossover_fraction)
        self.num_mutated = self.batch_size - self.num_crossed
        if self.num_crossed > 0 and self.crossover is None:
            raise ArgumentError(
                f"crossover is required: crossover_fraction={crossover_fraction!r} makes "
                f"{self.num_crossed} of {self.batch_size} rows by crossover"
            )
        if self.num_mutated > 0 and self.mutation is None:
            raise ArgumentError(
                f"mutation is required: crossover_fraction={crossover_fraction!r} leaves "
                f"{self.num_mutated} of {self.batch_size} rows to mutation"
            )

    def _rows(self, out: Any, n: int, name: str) -> jax.Array:
        out = jnp.asarray(out)
        if out.shape != (n, self.solution_dim):
            raise ArgumentError(f"{name} must return [{n}, {self.solution_dim}], got {list(out.shape)}")
        return out.astype(jnp.float32)

    def ask(
        self, key: jax.Array, state: tuple[()], archive: Archive, archive_state: ArchiveState
    ) -> tuple[jax.Array, tuple[()]]:
        """``-> ([batch_size, dims], state)``: crossed rows first, then mutated rows."""
        first_key, second_key, cross_key, parent_key, mutation_key = jax.random.split(key, 5)
        parts = []
        if self.num_crossed:
            x1 = self.parents(first_key, archive, archive_state, self.num_crossed)
            x2 = self.parents(second_key, archive, archive_state, self.num_crossed)
            parts.append(self._rows(self.crossover(cross_key, x1, x2), self.num_crossed, "crossover"))
        if self.num_mutated:
            x = self.parents(parent_key, archive, archive_state, self.num_mutated)
            parts.append(self._rows(self.mutation(mutation_key, x), self.num_mutated, "mutation"))
        return self.first_batch(archive, archive_state, jnp.concatenate(parts)), state
