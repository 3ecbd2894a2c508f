"""Extractors: one value from a solution's repeated noisy evaluations (QDax's ``utils/sampling.py``).

An *expectation* extractor reduces ``S`` samples to the value an archive stores; a
*reproducibility* extractor measures how much they vary. All take ``[B, S, ...]`` (a batch of
``B`` solutions, ``S`` samples each, any trailing shape) and return ``[B, ...]``:

* ``"average"``: the mean (QDax's default), correctly rounded: ``sum / S`` with ``S`` kept out of
  XLA's reach (it would multiply by the rounded ``1/S``);
* ``"median"``: the median (the mean of the two middle samples for even ``S``);
* ``"mode"``: per element, the most frequent value, equal counts going to the lowest (QDax's
  dimension-wise ``mode``: ``jnp.unique`` sorts, ``argmax`` takes the first);
* ``"closest"``: the sample with the smallest mean Euclidean distance (over the trailing axes) to
  all samples, itself included; equal means going to the first sample (QDax's ``closest``, an
  approximation of the geometric median);
* ``"std"``, ``"mad"``, ``"iqr"``: the population standard deviation, the median absolute deviation
  from the median, and the inter-quartile range (``quantile(0.75) - quantile(0.25)``, linear
  interpolation), QDax's reproducibility extractors.

Each is also a plain function here, and :func:`get_extractor` resolves a name or passes a callable
through (composition over flags: any ``[B, S, ...] -> [B, ...]`` function is an extractor).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from evotensor.core.checks import ArgumentError

Extractor = Callable[[jax.Array], jax.Array]


def average(samples: jax.Array) -> jax.Array:
    """The mean over the samples axis, correctly rounded: ``[B, S, ...] -> [B, ...]``."""
    count = lax.optimization_barrier(
        jnp.full(samples.shape[:1] + samples.shape[2:], samples.shape[1], samples.dtype)
    )
    return jnp.sum(samples, axis=1) / count


def median(samples: jax.Array) -> jax.Array:
    """The median over the samples axis: ``[B, S, ...] -> [B, ...]``."""
    return jnp.median(samples, axis=1)


def mode(samples: jax.Array) -> jax.Array:
    """The most frequent value of each element over the samples axis, equal counts going to the
    lowest value: ``[B, S, ...] -> [B, ...]`` (integers or floats). O(B S^2) per element."""
    counts = jnp.sum(samples[:, :, None] == samples[:, None, :], axis=2)
    most = jnp.max(counts, axis=1, keepdims=True)
    top = jnp.iinfo(samples.dtype).max if jnp.issubdtype(samples.dtype, jnp.integer) else jnp.inf
    return jnp.min(jnp.where(counts == most, samples, top), axis=1)


def closest(samples: jax.Array) -> jax.Array:
    """The sample nearest, on average, to all samples: ``[B, S, ...] -> [B, ...]`` (Euclidean over
    the trailing axes; the first of equal means)."""
    flat = samples.reshape(samples.shape[0], samples.shape[1], -1)
    distance = jnp.sqrt(jnp.sum(jnp.square(flat[:, :, None] - flat[:, None, :]), axis=-1))  # [B, S, S]
    pick = jnp.argmin(jnp.mean(distance, axis=2), axis=1)
    return jnp.take_along_axis(samples, pick.reshape((-1, 1) + (1,) * (samples.ndim - 2)), axis=1)[:, 0]


def std(samples: jax.Array) -> jax.Array:
    """The population standard deviation over the samples axis: ``[B, S, ...] -> [B, ...]``."""
    return jnp.std(samples, axis=1)


def mad(samples: jax.Array) -> jax.Array:
    """The median absolute deviation from the median: ``[B, S, ...] -> [B, ...]``."""
    return jnp.median(jnp.abs(samples - jnp.median(samples, axis=1, keepdims=True)), axis=1)


def iqr(samples: jax.Array) -> jax.Array:
    """The inter-quartile range (linear interpolation): ``[B, S, ...] -> [B, ...]``."""
    return jnp.quantile(samples, 0.75, axis=1) - jnp.quantile(samples, 0.25, axis=1)


EXPECTATIONS: dict[str, Extractor] = {"average": average, "median": median, "mode": mode, "closest": closest}
REPRODUCIBILITY: dict[str, Extractor] = {"std": std, "mad": mad, "iqr": iqr}


def get_extractor(
    extractor: Any,
    name: str,
    table: dict[str, Extractor] = EXPECTATIONS,
    shapes: str = "[B, S, ...] -> [B, ...]",
) -> Extractor:
    """``extractor`` as a function: a name of ``table`` or a callable (of ``shapes``); an
    :class:`ArgumentError` naming the argument ``name`` otherwise."""
    if callable(extractor):
        return extractor
    if isinstance(extractor, str) and extractor in table:
        return table[extractor]
    raise ArgumentError(
        f"{name} must be one of {', '.join(sorted(table))} or a callable {shapes}, got {extractor!r}"
    )
