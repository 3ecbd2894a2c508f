"""Activation and aggregation functions of NEAT node genes, by name, as JAX functions.

Two schemes, because the two reference libraries give some names different meanings:

* ``"neat-python"`` (the default): neat-python 2.1's ``neat/activations.py`` and
  ``neat/aggregations.py``. Its ``sigmoid`` is ``1 / (1 + exp(-clip(5 z, -60, 60)))``, its ``tanh``
  ``tanh(clip(2.5 z, -60, 60))``; an empty aggregation (a node with no enabled input) is ``0``,
  except ``product``, which is ``1``.
* ``"tensorneat"``: TensorNEAT's ``common/functions``: plain ``sigmoid``/``tanh``/``sin``, ``inv``
  kept ``1e-7`` away from zero, unclipped ``exp``, the ``scaled_*`` variants; every empty
  aggregation is ``0`` (``product`` too), and there is no ``median``.

An **activation** is an elementwise ``fn(z) -> same shape``. An **aggregation** is an
:class:`Aggregation`: a *segment reduction* ``segment(values [E, ...], segment_ids int32 [E],
num_segments) -> [num_segments, ...]`` over the weighted inputs ``w_i * x_i`` of every node at once
(``segment_ids``: the destination row of each edge, **sorted ascending**), plus the value of an
empty segment. Built-in sums and products add in a fixed order on every device (a segmented scan
on a GPU, no atomics), so results repeat bit for bit.

A node gene's ``activation.options`` / ``aggregation.options`` name the functions; a genome stores
per-node ``int32`` ids into them. :func:`apply_activation` and :func:`apply_aggregation` dispatch on
those ids by computing only the options the gene lists and selecting per node.

Register your own function by name (it then resolves in every network of that scheme)::

    from evotensor.neat.activations import register_activation, Aggregation, register_aggregation

    register_activation("swish", lambda z: z * jax.nn.sigmoid(z))
    register_aggregation("rms", Aggregation(
        "rms", lambda v, s, n: jnp.sqrt(jax.ops.segment_sum(v * v, s, n) / jnp.maximum(
            jax.ops.segment_sum(jnp.ones_like(v), s, n), 1)), empty=0.0))

or build a private :class:`FunctionSet` (``function_set("neat-python").with_activation(...)``) and
pass it as ``functions=`` to the network functions.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from evotensor.core.checks import ArgumentError, check_choice

__all__ = [
    "SCHEMES",
    "Aggregation",
    "FunctionSet",
    "activation_set",
    "aggregation_empty",
    "aggregation_set",
    "apply_activation",
    "apply_aggregation",
    "function_set",
    "register_activation",
    "register_aggregation",
]

Activation = Callable[[jax.Array], jax.Array]
SegmentFn = Callable[[jax.Array, jax.Array, int], jax.Array]

SCHEMES = ("neat-python", "tensorneat")

# ---------------------------------------------------------------------------------------------
# activations: neat-python 2.1 (neat/activations.py)

_SELU_LAMBDA = 1.0507009873554804934193349852946
_SELU_ALPHA = 1.6732632423543772848170429916717


def np_sigmoid(z):
    """``1 / (1 + exp(-clip(5 z, -60, 60)))``."""
    return 1.0 / (1.0 + jnp.exp(-jnp.clip(5.0 * z, -60.0, 60.0)))


def np_tanh(z):
    """``tanh(clip(2.5 z, -60, 60))``."""
    return jnp.tanh(jnp.clip(2.5 * z, -60.0, 60.0))


def np_sin(z):
    """``sin(clip(5 z, -60, 60))``."""
    return jnp.sin(jnp.clip(5.0 * z, -60.0, 60.0))


def np_gauss(z):
    """``exp(-5 clip(z, -3.4, 3.4)^2)``."""
    c = jnp.clip(z, -3.4, 3.4)
    return jnp.exp(-5.0 * c * c)


def relu(z):
    """``z if z > 0 else 0``."""
    return jnp.where(z > 0.0, z, jnp.zeros_like(z))


def elu(z):
    """``z if z > 0 else exp(z) - 1``."""
    return jnp.where(z > 0.0, z, jnp.exp(jnp.minimum(z, 0.0)) - 1.0)


def lelu(z):
    """Leaky ReLU: ``z if z > 0 else 0.005 z``."""
    return jnp.where(z > 0.0, z, 0.005 * z)


def selu(z):
    """``lambda z if z > 0 else lambda alpha (exp(z) - 1)`` (the SELU constants)."""
    return jnp.where(
        z > 0.0, _SELU_LAMBDA * z, _SELU_LAMBDA * _SELU_ALPHA * (jnp.exp(jnp.minimum(z, 0.0)) - 1.0)
    )


def np_softplus(z):
    """``0.2 log(1 + exp(clip(5 z, -60, 60)))``."""
    return 0.2 * jnp.log1p(jnp.exp(jnp.clip(5.0 * z, -60.0, 60.0)))


def identity(z):
    """``z``."""
    return z


def clamped(z):
    """``clip(z, -1, 1)``."""
    return jnp.clip(z, -1.0, 1.0)


def np_inv(z):
    """``1 / z``, and ``0`` at ``z = 0`` (neat-python catches the ``ZeroDivisionError``)."""
    zero = z == 0.0
    return jnp.where(zero, jnp.zeros_like(z), 1.0 / jnp.where(zero, jnp.ones_like(z), z))


def np_log(z):
    """``log(max(1e-7, z))``."""
    return jnp.log(jnp.maximum(z, 1e-7))


def np_exp(z):
    """``exp(clip(z, -60, 60))``."""
    return jnp.exp(jnp.clip(z, -60.0, 60.0))


def absolute(z):
    """``|z|``."""
    return jnp.abs(z)


def hat(z):
    """``max(0, 1 - |z|)``."""
    return jnp.maximum(0.0, 1.0 - jnp.abs(z))


def square(z):
    """``z^2``."""
    return z * z


def cube(z):
    """``z^3``."""
    return z * z * z


# ---------------------------------------------------------------------------------------------
# activations: TensorNEAT (src/tensorneat/common/functions/act_jnp.py)

_TN_SCALE = 3.0


def tn_sigmoid(z):
    """``1 / (1 + exp(-z))``."""
    return 1.0 / (1.0 + jnp.exp(-z))


def tn_scaled_sigmoid(z):
    """``3 / (1 + exp(-z))``."""
    return tn_sigmoid(z) * _TN_SCALE


def tn_tanh(z):
    """``tanh(z)``."""
    return jnp.tanh(z)


def tn_scaled_tanh(z):
    """``3 tanh(z)``."""
    return jnp.tanh(z) * _TN_SCALE


def tn_sin(z):
    """``sin(z)``."""
    return jnp.sin(z)


def tn_relu(z):
    """``max(z, 0)``."""
    return jnp.maximum(z, 0.0)


def tn_inv(z):
    """``1 / z`` with ``z`` moved at least ``1e-7`` away from 0 (``z = 0`` gives ``-1e7``)."""
    return 1.0 / jnp.where(z > 0.0, jnp.maximum(z, 1e-7), jnp.minimum(z, -1e-7))


def tn_log(z):
    """``log(max(z, 1e-7))``."""
    return jnp.log(jnp.maximum(z, 1e-7))


def tn_exp(z):
    """``exp(z)`` (unclipped)."""
    return jnp.exp(z)


# ---------------------------------------------------------------------------------------------
# aggregations as segment reductions (segment ids sorted ascending)


@dataclasses.dataclass(frozen=True)
class Aggregation:
    """One aggregation: how a node combines its weighted inputs.

    Args:
        name: its name in the registries.
        segment: ``segment(values [E, ...], segment_ids int32 [E], num_segments) -> [num_segments,
            ...]``: the reduction of every segment at once. ``segment_ids`` are sorted ascending;
            ids ``>= num_segments`` must be dropped. Empty segments may hold anything: the
            network replaces them with ``empty``.
        empty: the value of a node with no enabled input.
        from_sum: optional ``from_sum(sum, count) -> value`` when the aggregation is a function of
            the plain sum and the input count (``sum``, ``mean``); the dense forward path then
            computes it from one matrix product.
        dense: optional ``dense(values [N, M], mask bool [N, M]) -> [N]``: the row-wise reduction
            over the masked entries (the dense forward path's form); derived from ``segment``
            when absent.
    """

    name: str
    segment: SegmentFn
    empty: float = 0.0
    from_sum: Callable[[jax.Array, jax.Array], jax.Array] | None = None
    dense: Callable[[jax.Array, jax.Array], jax.Array] | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ArgumentError(f"Aggregation name must be a non-empty str, got {self.name!r}")
        if not callable(self.segment):
            raise ArgumentError(f"Aggregation {self.name!r}: segment must be callable, got {self.segment!r}")
        if isinstance(self.empty, bool) or not isinstance(self.empty, (int, float)):
            raise ArgumentError(f"Aggregation {self.name!r}: empty must be a number, got {self.empty!r}")

    def dense_reduce(self, values: jax.Array, mask: jax.Array) -> jax.Array:
        """Row-wise reduction ``values [N, M]`` over ``mask [N, M]`` -> ``[N]`` (empty rows: any
        value)."""
        if self.dense is not None:
            return self.dense(values, mask)
        n = values.shape[-2]
        seg = jnp.where(mask, jnp.arange(n, dtype=jnp.int32)[:, None], n).reshape(-1)
        order = jnp.argsort(seg, stable=True)
        return self.segment(values.reshape(-1)[order], seg[order], n)


def _seg_scan(values: jax.Array, segment_ids: jax.Array, num_segments: int, op: Callable) -> jax.Array:
    """A fixed-order segmented reduction over sorted ``segment_ids`` with an associative ``op``:
    a segmented ``associative_scan`` whose last element per segment is written with unique
    indices (no atomics). Empty segments get 0."""
    n = segment_ids.shape[0]
    out = jnp.zeros((num_segments,) + values.shape[1:], values.dtype)
    if n == 0:
        return out
    seg = segment_ids
    start = jnp.concatenate([jnp.ones((1,), bool), seg[1:] != seg[:-1]])
    last = jnp.concatenate([seg[1:] != seg[:-1], jnp.ones((1,), bool)])

    def combine(a, b):
        (fa, va), (fb, vb) = a, b
        fb_ = fb.reshape(fb.shape + (1,) * (vb.ndim - fb.ndim))
        return fa | fb, jnp.where(fb_, vb, op(va, vb))

    _, acc = jax.lax.associative_scan(combine, (start, values))
    target = jnp.where(last & (seg >= 0) & (seg < num_segments), seg, num_segments + jnp.arange(n))
    return out.at[target].set(acc, mode="drop", unique_indices=True)


def segment_sum(values: jax.Array, segment_ids: jax.Array, num_segments: int) -> jax.Array:
    """Sum per segment, in edge order on a CPU and a fixed scan order elsewhere (deterministic)."""
    return jax.lax.platform_dependent(
        values,
        segment_ids,
        cpu=lambda v, s: jax.ops.segment_sum(v, s, num_segments, indices_are_sorted=True),
        default=lambda v, s: _seg_scan(v, s, num_segments, jnp.add),
    )


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def segment_prod(values: jax.Array, segment_ids: jax.Array, num_segments: int) -> jax.Array:
    """Product per segment (deterministic order, like :func:`segment_sum`); differentiable (JAX has
    no derivative of a product scatter with repeated indices)."""
    return jax.lax.platform_dependent(
        values,
        segment_ids,
        cpu=lambda v, s: jax.ops.segment_prod(v, s, num_segments, indices_are_sorted=True),
        default=lambda v, s: _seg_scan(v, s, num_segments, jnp.multiply),
    )


def _within_segments(values: jax.Array, segment_ids: jax.Array) -> jax.Array:
    """``[E, ...]``: each edge's product of the *other* values of its segment (sorted ids), from
    the exclusive prefix and suffix products (exact where some values are 0, unlike ``prod / v``)."""
    seg = segment_ids
    start = jnp.concatenate([jnp.ones((1,), bool), seg[1:] != seg[:-1]])
    expand = (slice(None),) + (None,) * (values.ndim - 1)

    def combine(a, b):
        (fa, va), (fb, vb) = a, b
        return fa | fb, jnp.where(fb.reshape(fb.shape + (1,) * (vb.ndim - 1)), vb, va * vb)

    def exclusive(v, first):
        _, inclusive = jax.lax.associative_scan(combine, (first, v))
        shifted = jnp.concatenate([jnp.ones_like(v[:1]), inclusive[:-1]])
        return jnp.where(first[expand], 1.0, shifted)

    end = jnp.concatenate([seg[1:] != seg[:-1], jnp.ones((1,), bool)])
    before = exclusive(values, start)
    after = exclusive(values[::-1], end[::-1])[::-1]
    return before * after


@segment_prod.defjvp
def _segment_prod_jvp(num_segments, primals, tangents):
    values, segment_ids = primals
    d_values, _ = tangents
    out = segment_prod(values, segment_ids, num_segments)
    if values.shape[0] == 0:
        return out, jnp.zeros_like(out)
    return out, segment_sum(d_values * _within_segments(values, segment_ids), segment_ids, num_segments)


def segment_max(values, segment_ids, num_segments):
    """Maximum per segment."""
    return jax.ops.segment_max(values, segment_ids, num_segments, indices_are_sorted=True)


def segment_min(values, segment_ids, num_segments):
    """Minimum per segment."""
    return jax.ops.segment_min(values, segment_ids, num_segments, indices_are_sorted=True)


def _counts(segment_ids, num_segments, like):
    ones = jnp.ones(segment_ids.shape + like.shape[1:], like.dtype)
    return jax.ops.segment_sum(ones, segment_ids, num_segments, indices_are_sorted=True)


def segment_mean(values, segment_ids, num_segments):
    """Arithmetic mean per segment."""
    return segment_sum(values, segment_ids, num_segments) / jnp.maximum(
        _counts(segment_ids, num_segments, values), 1.0
    )


def segment_maxabs(values, segment_ids, num_segments):
    """The input of largest magnitude per segment (signed); ties go to the first edge, as
    Python's ``max(x, key=abs)``."""
    e = values.shape[0]
    mag = jnp.abs(values)
    best = segment_max(mag, segment_ids, num_segments)
    safe = jnp.clip(segment_ids, 0, num_segments - 1)
    is_best = (mag == best[safe]) & (segment_ids < num_segments)
    idx = jnp.arange(e, dtype=jnp.int32).reshape((e,) + (1,) * (values.ndim - 1))
    first = segment_min(jnp.where(is_best, idx, e), segment_ids, num_segments)
    first = jnp.clip(first, 0, max(e - 1, 0))
    return jnp.take_along_axis(values, first, axis=0) if values.ndim > 1 else values[first]


def segment_median(values, segment_ids, num_segments):
    """neat-python's ``median2`` per segment: the middle input, or the mean of the two middle
    inputs for an even count."""
    if values.ndim != 1:
        return jax.vmap(lambda v: segment_median(v, segment_ids, num_segments), in_axes=1, out_axes=1)(values)
    e = values.shape[0]
    if e == 0:
        return jnp.zeros((num_segments,), values.dtype)
    order = jnp.lexsort((values, segment_ids))
    sv = values[order]
    count = _counts(segment_ids, num_segments, values).astype(jnp.int32)
    start = jnp.cumsum(count) - count
    lo = jnp.clip(start + (count - 1) // 2, 0, e - 1)
    hi = jnp.clip(start + count // 2, 0, e - 1)
    a, b = sv[lo], sv[hi]
    return jnp.where(count % 2 == 1, a, (a + b) / 2.0)


def _dense_sum(v, m):
    return jnp.sum(jnp.where(m, v, 0.0), axis=-1)


def _dense_prod(v, m):
    return jnp.prod(jnp.where(m, v, 1.0), axis=-1)


def _dense_max(v, m):
    return jnp.max(jnp.where(m, v, -jnp.inf), axis=-1)


def _dense_min(v, m):
    return jnp.min(jnp.where(m, v, jnp.inf), axis=-1)


def _dense_maxabs(v, m):
    i = jnp.argmax(jnp.where(m, jnp.abs(v), -1.0), axis=-1)
    return jnp.take_along_axis(v, i[..., None], axis=-1)[..., 0]


def _dense_mean(v, m):
    return _dense_sum(v, m) / jnp.maximum(jnp.sum(m, axis=-1), 1)


def _dense_median(v, m):
    sv = jnp.sort(jnp.where(m, v, jnp.inf), axis=-1)
    count = jnp.sum(m, axis=-1)
    lo = jnp.clip((count - 1) // 2, 0, v.shape[-1] - 1)
    hi = jnp.clip(count // 2, 0, v.shape[-1] - 1)
    a = jnp.take_along_axis(sv, lo[..., None], axis=-1)[..., 0]
    b = jnp.take_along_axis(sv, hi[..., None], axis=-1)[..., 0]
    return jnp.where(count % 2 == 1, a, (a + b) / 2.0)


def _sum_from_sum(s, n):
    return s


def _mean_from_sum(s, n):
    return s / jnp.maximum(n, 1.0)


_SUM = Aggregation("sum", segment_sum, 0.0, _sum_from_sum, _dense_sum)
_MEAN = Aggregation("mean", segment_mean, 0.0, _mean_from_sum, _dense_mean)
_MAX = Aggregation("max", segment_max, 0.0, None, _dense_max)
_MIN = Aggregation("min", segment_min, 0.0, None, _dense_min)
_MAXABS = Aggregation("maxabs", segment_maxabs, 0.0, None, _dense_maxabs)
_MEDIAN = Aggregation("median", segment_median, 0.0, None, _dense_median)


def _neat_python_activations() -> dict[str, Activation]:
    return {
        "sigmoid": np_sigmoid,
        "tanh": np_tanh,
        "sin": np_sin,
        "gauss": np_gauss,
        "relu": relu,
        "elu": elu,
        "lelu": lelu,
        "selu": selu,
        "softplus": np_softplus,
        "identity": identity,
        "clamped": clamped,
        "inv": np_inv,
        "log": np_log,
        "exp": np_exp,
        "abs": absolute,
        "hat": hat,
        "square": square,
        "cube": cube,
    }


def _tensorneat_activations() -> dict[str, Activation]:
    return {
        "scaled_sigmoid": tn_scaled_sigmoid,
        "sigmoid": tn_sigmoid,
        "scaled_tanh": tn_scaled_tanh,
        "tanh": tn_tanh,
        "sin": tn_sin,
        "relu": tn_relu,
        "lelu": lelu,
        "identity": identity,
        "inv": tn_inv,
        "log": tn_log,
        "exp": tn_exp,
        "abs": absolute,
    }


def _neat_python_aggregations() -> dict[str, Aggregation]:
    return {
        "product": Aggregation("product", segment_prod, 1.0, None, _dense_prod),
        "sum": _SUM,
        "max": _MAX,
        "min": _MIN,
        "maxabs": _MAXABS,
        "median": _MEDIAN,
        "mean": _MEAN,
    }


def _tensorneat_aggregations() -> dict[str, Aggregation]:
    # TensorNEAT's apply_aggregation returns 0 for a node without valid inputs, product included
    return {
        "sum": _SUM,
        "product": Aggregation("product", segment_prod, 0.0, None, _dense_prod),
        "max": _MAX,
        "min": _MIN,
        "maxabs": _MAXABS,
        "mean": _MEAN,
    }


_REGISTRY: dict[str, tuple[dict[str, Activation], dict[str, Aggregation]]] = {
    "neat-python": (_neat_python_activations(), _neat_python_aggregations()),
    "tensorneat": (_tensorneat_activations(), _tensorneat_aggregations()),
}


def _scheme(scheme: str) -> tuple[dict[str, Activation], dict[str, Aggregation]]:
    check_choice(scheme, "scheme", SCHEMES)
    return _REGISTRY[scheme]


def activation_set(scheme: str = "neat-python") -> dict[str, Activation]:
    """A copy of the scheme's ``{name: activation}`` (built-ins and registered ones)."""
    return dict(_scheme(scheme)[0])


def aggregation_set(scheme: str = "neat-python") -> dict[str, Aggregation]:
    """A copy of the scheme's ``{name: Aggregation}`` (built-ins and registered ones)."""
    return dict(_scheme(scheme)[1])


def _check_name(name: Any, what: str) -> str:
    if not isinstance(name, str) or not name:
        raise ArgumentError(f"{what} name must be a non-empty str, got {name!r}")
    return name


def register_activation(
    name: str, fn: Activation, scheme: str = "neat-python", replace: bool = False
) -> None:
    """Add activation ``fn`` (elementwise, ``jnp`` in, same shape out) under ``name`` to a scheme's
    registry (every later network of that scheme resolves it). ``replace=True`` overrides an
    existing name (a built-in too)."""
    _check_name(name, "activation")
    if not callable(fn):
        raise ArgumentError(f"activation {name!r} must be callable, got {fn!r}")
    acts = _scheme(scheme)[0]
    if name in acts and not replace:
        raise ArgumentError(f"activation {name!r} already exists in scheme {scheme!r}; pass replace=True")
    acts[name] = fn


def _as_aggregation(name: str, agg: Aggregation | SegmentFn, empty: float) -> Aggregation:
    if isinstance(agg, Aggregation):
        return agg if agg.name == name else dataclasses.replace(agg, name=name)
    if not callable(agg):
        raise ArgumentError(f"aggregation {name!r} must be an Aggregation or a callable, got {agg!r}")
    return Aggregation(name, agg, empty)


def register_aggregation(
    name: str,
    agg: Aggregation | SegmentFn,
    scheme: str = "neat-python",
    empty: float = 0.0,
    replace: bool = False,
) -> None:
    """Add an aggregation under ``name``: an :class:`Aggregation`, or a plain segment reduction
    ``fn(values [E], segment_ids [E] (sorted), num_segments) -> [num_segments]`` whose empty value
    is ``empty``."""
    _check_name(name, "aggregation")
    aggs = _scheme(scheme)[1]
    if name in aggs and not replace:
        raise ArgumentError(f"aggregation {name!r} already exists in scheme {scheme!r}; pass replace=True")
    aggs[name] = _as_aggregation(name, agg, empty)


@dataclasses.dataclass(frozen=True, init=False)
class FunctionSet:
    """An immutable, hashable pair of name -> function tables used to resolve a node gene's
    option names.

    ``FunctionSet()`` or :func:`function_set` ``("neat-python")`` is the neat-python scheme as
    registered now; ``function_set("tensorneat")`` TensorNEAT's. Extend with
    :meth:`with_activation` / :meth:`with_aggregation` (new objects; the registries are untouched).
    """

    activations: tuple[tuple[str, Activation], ...]
    aggregations: tuple[tuple[str, Aggregation], ...]
    scheme: str

    def __init__(
        self,
        activations: Mapping[str, Activation] | None = None,
        aggregations: Mapping[str, Aggregation] | None = None,
        scheme: str = "neat-python",
    ):
        acts = activation_set(scheme) if activations is None else dict(activations)
        aggs = aggregation_set(scheme) if aggregations is None else dict(aggregations)
        for name, fn in acts.items():
            _check_name(name, "activation")
            if not callable(fn):
                raise ArgumentError(f"activation {name!r} must be callable, got {fn!r}")
        aggs = {n: _as_aggregation(_check_name(n, "aggregation"), a, 0.0) for n, a in aggs.items()}
        object.__setattr__(self, "activations", tuple(sorted(acts.items(), key=lambda kv: kv[0])))
        object.__setattr__(self, "aggregations", tuple(sorted(aggs.items(), key=lambda kv: kv[0])))
        object.__setattr__(self, "scheme", scheme)

    def activation(self, name: str) -> Activation:
        """The activation called ``name``; an :class:`ArgumentError` lists the known ones."""
        for n, fn in self.activations:
            if n == name:
                return fn
        known = ", ".join(n for n, _ in self.activations)
        raise ArgumentError(f"unknown activation {name!r} (scheme {self.scheme!r}); known: {known}")

    def aggregation(self, name: str) -> Aggregation:
        """The aggregation called ``name``; an :class:`ArgumentError` lists the known ones."""
        for n, agg in self.aggregations:
            if n == name:
                return agg
        known = ", ".join(n for n, _ in self.aggregations)
        raise ArgumentError(f"unknown aggregation {name!r} (scheme {self.scheme!r}); known: {known}")

    def with_activation(self, name: str, fn: Activation) -> FunctionSet:
        """A copy with activation ``name`` added or replaced."""
        acts = dict(self.activations)
        acts[_check_name(name, "activation")] = fn
        return FunctionSet(acts, dict(self.aggregations), self.scheme)

    def with_aggregation(self, name: str, agg: Aggregation | SegmentFn, empty: float = 0.0) -> FunctionSet:
        """A copy with aggregation ``name`` added or replaced (see :func:`register_aggregation`)."""
        aggs = dict(self.aggregations)
        aggs[_check_name(name, "aggregation")] = _as_aggregation(name, agg, empty)
        return FunctionSet(dict(self.activations), aggs, self.scheme)

    def check_options(
        self, activation_options: tuple[str, ...], aggregation_options: tuple[str, ...]
    ) -> None:
        """Raise an :class:`ArgumentError` naming any option this set cannot resolve."""
        for name in activation_options:
            self.activation(name)
        for name in aggregation_options:
            self.aggregation(name)


def function_set(functions: str | FunctionSet | None = None) -> FunctionSet:
    """Resolve ``functions``: ``None`` -> the neat-python scheme, a scheme name
    (``"neat-python"``, ``"tensorneat"``) -> that scheme as registered now, a :class:`FunctionSet`
    -> itself."""
    if functions is None:
        return FunctionSet()
    if isinstance(functions, FunctionSet):
        return functions
    if isinstance(functions, str):
        return FunctionSet(scheme=check_choice(functions, "functions", SCHEMES))
    raise ArgumentError(f"functions must be a scheme name or a FunctionSet, got {functions!r}")


def apply_activation(
    functions: FunctionSet, options: tuple[str, ...], ids: jax.Array, z: jax.Array
) -> jax.Array:
    """Per-node activation by id: ``out[..., n] = options[ids[n]](z[..., n])``.

    ``ids int32 [N]`` (or any shape broadcasting against ``z``); only the distinct functions among
    ``options`` are evaluated, then selected per node. Out-of-range ids use option 0.
    """
    fns = [functions.activation(name) for name in options]
    out = fns[0](z)
    if len(fns) == 1:
        return out
    seen: dict[int, jax.Array] = {id(fns[0]): out}
    for k, fn in enumerate(fns[1:], start=1):
        val = seen.get(id(fn))
        if val is None:
            val = seen[id(fn)] = fn(z)
        out = jnp.where(ids == k, val, out)
    return out


def apply_aggregation(
    functions: FunctionSet,
    options: tuple[str, ...],
    ids: jax.Array,
    values: jax.Array,
    segment_ids: jax.Array,
    counts: jax.Array,
) -> jax.Array:
    """Per-node aggregation by id over an edge list.

    Args:
        functions: resolves ``options``.
        options: the node gene's aggregation option names.
        ids: ``int32 [N]`` each node's option index.
        values: ``[E, ...]`` weighted inputs ``w_e * x_src(e)``.
        segment_ids: ``int32 [E]`` destination row of each edge, sorted ascending; ``N`` (or more)
            drops the edge.
        counts: ``[N]`` number of edges into each node (its enabled in-degree).

    Returns:
        ``[N, ...]``: each node's aggregate, the option's ``empty`` value where ``counts == 0``.
    """
    n = ids.shape[0]
    aggs = [functions.aggregation(name) for name in options]
    expand = (slice(None),) + (None,) * (values.ndim - 1)
    empty_mask = (counts == 0)[expand]

    def one(agg):
        raw = agg.segment(values, segment_ids, n)
        return jnp.where(empty_mask, jnp.asarray(agg.empty, values.dtype), raw)

    out = one(aggs[0])
    if len(aggs) == 1:
        return out
    seen = {id(aggs[0]): out}
    for k, agg in enumerate(aggs[1:], start=1):
        val = seen.get(id(agg))
        if val is None:
            val = seen[id(agg)] = one(agg)
        out = jnp.where((ids == k)[expand], val, out)
    return out


def aggregation_empty(functions: FunctionSet, options: tuple[str, ...], ids: jax.Array) -> jax.Array:
    """``float32 [N]``: the value of an empty aggregation for each node's option ``ids [N]``."""
    empties = jnp.asarray([functions.aggregation(name).empty for name in options], jnp.float32)
    return empties[jnp.clip(ids, 0, len(options) - 1)]
