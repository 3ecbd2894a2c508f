"""Gene definitions: which attributes a node or connection gene carries and how each is drawn,
mutated and compared.

A gene type is an object, not a set of flags: :class:`NodeGene` and :class:`ConnectionGene` list
their float attributes (:class:`FloatAttribute`, neat-python's ``*_init_mean``, ``*_init_stdev``,
``*_mutate_power``, ``*_mutate_rate``, ``*_replace_rate``, ``*_min_value``, ``*_max_value``) and
node genes their two categorical attributes (:class:`ChoiceAttribute`: the activation and the
aggregation, by name). A user's own gene (a spiking node, a node with a learning rate, a binary
connection) subclasses one of them and overrides :meth:`NodeGene.node_output`,
:meth:`NodeGene.attribute_distance` or the attribute lists::

    class GatedNode(NodeGene):
        def __init__(self, **kw):
            super().__init__(extra=(FloatAttribute("gate", init_mean=1.0, init_std=0.0),), **kw)

        def node_output(self, attrs, activation, aggregated):
            bias, response, gate = attrs[..., 0], attrs[..., 1], attrs[..., 2]
            return gate * activation(bias + response * aggregated)

Attribute values live in the genome's float matrices (``Genome.node_attrs[..., i]`` is attribute
``i`` of :attr:`NodeGene.floats`); activation and aggregation ids index
:attr:`NodeGene.activation.options` and :attr:`NodeGene.aggregation.options`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core import rng
from evotensor.core.checks import ArgumentError, check_choice, check_fraction, check_real

__all__ = ["ChoiceAttribute", "ConnectionGene", "FloatAttribute", "NodeGene"]


@dataclasses.dataclass(frozen=True)
class FloatAttribute:
    """A float gene attribute with neat-python's init/mutation semantics.

    ``init``: ``init_mean + init_std * N(0, 1)`` (``init_type="gaussian"``) or uniform over
    ``init_mean +- 2 * init_std`` (``"uniform"``), clipped to ``[min_value, max_value]``.
    ``mutate``: per gene, one uniform ``r``: ``r < mutate_rate`` adds ``N(0, mutate_power)``,
    else ``r < mutate_rate + replace_rate`` redraws from ``init``; the result is clipped.
    """

    name: str
    init_mean: float = 0.0
    init_std: float = 1.0
    init_type: str = "gaussian"
    mutate_power: float = 0.5
    mutate_rate: float = 0.7
    replace_rate: float = 0.1
    min_value: float = -30.0
    max_value: float = 30.0

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ArgumentError(f"FloatAttribute name must be a non-empty str, got {self.name!r}")
        for field in ("init_mean", "init_std", "mutate_power", "min_value", "max_value"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ArgumentError(f"{self.name}_{field} must be a finite number, got {value!r}")
            # stored and mutated in float32 on the device: 1e39 would be inf there
            check_real(value, f"{self.name}_{field}")
        if self.init_std < 0 or self.mutate_power < 0:
            raise ArgumentError(f"{self.name}: init_std and mutate_power must be >= 0")
        if self.min_value > self.max_value:
            raise ArgumentError(
                f"{self.name}_min_value ({self.min_value}) must be <= "
                f"{self.name}_max_value ({self.max_value})"
            )
        check_fraction(self.mutate_rate, f"{self.name}_mutate_rate", allow_zero=True)
        check_fraction(self.replace_rate, f"{self.name}_replace_rate", allow_zero=True)
        check_choice(self.init_type, f"{self.name}_init_type", ("gaussian", "normal", "uniform"))

    def init(self, key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
        """Fresh values ``float32 shape``."""
        if self.init_type == "uniform":
            low = max(self.min_value, self.init_mean - 2 * self.init_std)
            high = min(self.max_value, self.init_mean + 2 * self.init_std)
            return rng.uniform(key, shape, jnp.float32, low, high)
        if self.init_std == 0 and math.copysign(1.0, self.init_mean) > 0:
            # ``mean + 0 * N(0, 1)`` is ``mean`` exactly (a ``-0.0`` mean could turn ``+0.0``): no draw
            x = jnp.full(shape, self.init_mean, jnp.float32)
        else:
            x = self.init_mean + self.init_std * rng.normal(key, shape, jnp.float32)
        return jnp.clip(x, self.min_value, self.max_value)

    def mutate(self, key: jax.Array, values: jax.Array) -> jax.Array:
        """Mutated copy of ``values`` (any shape), each element independently."""
        # a zero rate selects nothing (``r`` is never below 0): its draws are left out, which changes
        # no number (the keys are split the same way), only what XLA compiles
        k_r, k_n, k_i = rng.split(key, 3)
        out = values
        if self.mutate_rate > 0 or self.replace_rate > 0:
            r = rng.uniform(k_r, values.shape)
            if self.mutate_rate > 0:
                perturbed = values + self.mutate_power * rng.normal(k_n, values.shape, jnp.float32)
                out = jnp.where(r < self.mutate_rate, perturbed, out)
            if self.replace_rate > 0:
                out = jnp.where(
                    (r >= self.mutate_rate) & (r < self.mutate_rate + self.replace_rate),
                    self.init(k_i, values.shape),
                    out,
                )
        return jnp.clip(out, self.min_value, self.max_value).astype(jnp.float32)


@dataclasses.dataclass(frozen=True)
class ChoiceAttribute:
    """A categorical attribute: one of ``options`` (names), stored as an ``int32`` index.

    ``default``: an option name, or ``"random"`` (uniform over the options). ``mutate_rate``: the
    probability that a gene's value is replaced by a uniformly drawn option (possibly the same one,
    as in neat-python).
    """

    name: str
    options: tuple[str, ...]
    default: str = "random"
    mutate_rate: float = 0.0

    def __post_init__(self):
        options = tuple(self.options) if not isinstance(self.options, str) else (self.options,)
        object.__setattr__(self, "options", options)
        if not options or not all(isinstance(o, str) and o for o in options):
            raise ArgumentError(
                f"{self.name}_options must be a non-empty sequence of names, got {self.options!r}"
            )
        if len(set(options)) != len(options):
            raise ArgumentError(f"{self.name}_options has duplicates: {options!r}")
        if self.default not in (*options, "random", "none", None):
            raise ArgumentError(
                f"{self.name}_default must be one of {options} or 'random', got {self.default!r}"
            )
        check_fraction(self.mutate_rate, f"{self.name}_mutate_rate", allow_zero=True)

    def index(self, name: str) -> int:
        """The id of option ``name``."""
        if name not in self.options:
            raise ArgumentError(f"{self.name}: {name!r} is not among the options {self.options}")
        return self.options.index(name)

    def init(self, key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
        """Fresh ids ``int32 shape``."""
        if self.default in self.options:
            return jnp.full(shape, self.options.index(self.default), jnp.int32)
        if len(self.options) == 1:  # ``randint(0, 1)`` is 0 everywhere
            return jnp.zeros(shape, jnp.int32)
        return rng.randint(key, shape, 0, len(self.options), jnp.int32)

    def mutate(self, key: jax.Array, ids: jax.Array) -> jax.Array:
        """Mutated copy of ``ids`` (any shape)."""
        if self.mutate_rate == 0:  # nothing is replaced: no draws to compile
            return ids.astype(jnp.int32)
        k_r, k_c = rng.split(key)
        replace = rng.uniform(k_r, ids.shape) < self.mutate_rate
        if len(self.options) == 1:  # ``randint(0, 1)`` is 0 everywhere
            fresh = jnp.zeros(ids.shape, jnp.int32)
        else:
            fresh = rng.randint(k_c, ids.shape, 0, len(self.options), jnp.int32)
        return jnp.where(replace, fresh, ids).astype(jnp.int32)


def _sum_abs_diff(a: jax.Array, b: jax.Array) -> jax.Array:
    """``sum |a - b|`` over the (few) trailing attribute columns, added left to right: elementwise
    adds fuse with their neighbours, where XLA:CPU runs a reduction over a size-2 axis as a
    separate, much slower kernel (the distance's hot loop calls this once per genome row)."""
    d = jnp.zeros(a.shape[:-1], jnp.result_type(a, b))
    for i in range(a.shape[-1]):
        d = d + jnp.abs(a[..., i] - b[..., i])
    return d


def _names(attrs: tuple[FloatAttribute, ...]) -> tuple[str, ...]:
    return tuple(a.name for a in attrs)


class _FloatColumns:
    """The float-attribute columns a gene type stores (its ``floats``, in order)."""

    floats: tuple[FloatAttribute, ...]

    @property
    def float_names(self) -> tuple[str, ...]:
        return _names(self.floats)

    @property
    def num_floats(self) -> int:
        return len(self.floats)

    @property
    def float_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """``(min_value, max_value)``, each ``float32 [num_floats]``: the range every float column
        is kept in (by init and mutation, and by gradient descent and weight tuning)."""
        low = np.asarray([a.min_value for a in self.floats], np.float32)
        high = np.asarray([a.max_value for a in self.floats], np.float32)
        return low, high


@dataclasses.dataclass(frozen=True, init=False)
class NodeGene(_FloatColumns):
    """The node gene: float attributes ``bias``, ``response`` (and ``time_constant`` with
    ``ctrnn=True``, then any ``extra``), an activation and an aggregation.

    The defaults are neat-python 2.1's ``[DefaultGenome]`` defaults as its XOR example sets them.
    """

    floats: tuple[FloatAttribute, ...]
    activation: ChoiceAttribute
    aggregation: ChoiceAttribute

    def __init__(
        self,
        bias: FloatAttribute | None = None,
        response: FloatAttribute | None = None,
        activation: ChoiceAttribute | None = None,
        aggregation: ChoiceAttribute | None = None,
        time_constant: FloatAttribute | None = None,
        ctrnn: bool = False,
        extra: tuple[FloatAttribute, ...] = (),
    ):
        bias = bias or FloatAttribute("bias", 0.0, 1.0, "gaussian", 0.5, 0.7, 0.1, -30.0, 30.0)
        response = response or FloatAttribute("response", 1.0, 0.0, "gaussian", 0.0, 0.0, 0.0, -30.0, 30.0)
        floats = [bias, response]
        if ctrnn or time_constant is not None:
            floats.append(
                time_constant
                or FloatAttribute("time_constant", 1.0, 0.0, "gaussian", 0.0, 0.0, 0.0, 0.01, 100.0)
            )
        floats.extend(extra)
        names = _names(tuple(floats))
        if len(set(names)) != len(names):
            raise ArgumentError(f"node gene attribute names must be unique, got {names}")
        object.__setattr__(self, "floats", tuple(floats))
        object.__setattr__(
            self, "activation", activation or ChoiceAttribute("activation", ("sigmoid",), "sigmoid")
        )
        object.__setattr__(
            self, "aggregation", aggregation or ChoiceAttribute("aggregation", ("sum",), "sum")
        )

    def column(self, name: str) -> int:
        """The column of float attribute ``name`` in ``Genome.node_attrs``."""
        if name not in self.float_names:
            raise ArgumentError(f"node gene has no float attribute {name!r}; it has {self.float_names}")
        return self.float_names.index(name)

    def init_attrs(self, key: jax.Array, shape: tuple[int, ...]) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Fresh ``(attrs float32 [*shape, num_floats], activation int32 shape, aggregation int32 shape)``."""
        keys = rng.split(key, len(self.floats) + 2)
        attrs = jnp.stack([a.init(k, shape) for a, k in zip(self.floats, keys)], axis=-1)
        return attrs, self.activation.init(keys[-2], shape), self.aggregation.init(keys[-1], shape)

    def mutate_attrs(
        self, key: jax.Array, attrs: jax.Array, activation: jax.Array, aggregation: jax.Array
    ) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Every attribute mutated independently; shapes as :meth:`init_attrs`."""
        keys = rng.split(key, len(self.floats) + 2)
        cols = [a.mutate(k, attrs[..., i]) for i, (a, k) in enumerate(zip(self.floats, keys))]
        return (
            jnp.stack(cols, axis=-1),
            self.activation.mutate(keys[-2], activation),
            self.aggregation.mutate(keys[-1], aggregation),
        )

    def attribute_distance(
        self,
        attrs_a: jax.Array,
        act_a: jax.Array,
        agg_a: jax.Array,
        attrs_b: jax.Array,
        act_b: jax.Array,
        agg_b: jax.Array,
    ) -> jax.Array:
        """neat-python's node distance before the weight coefficient: ``sum |d float| + [act !=] +
        [agg !=]`` over the trailing attribute axis; shape of the leading axes."""
        d = _sum_abs_diff(attrs_a, attrs_b)
        return d + (act_a != act_b).astype(jnp.float32) + (agg_a != agg_b).astype(jnp.float32)

    def node_output(self, attrs: jax.Array, activation: Any, aggregated: jax.Array) -> jax.Array:
        """A node's output from its aggregated input: ``activation(bias + response * aggregated)``.

        ``attrs [..., num_floats]``, ``aggregated [...]``; ``activation`` is the node's activation
        function (already resolved from its id).
        """
        return activation(attrs[..., 0] + attrs[..., 1] * aggregated)


@dataclasses.dataclass(frozen=True, init=False)
class ConnectionGene(_FloatColumns):
    """The connection gene: float attribute ``weight`` (then any ``extra``) and the enabled flag
    (a separate boolean column of the genome, mutated with ``enabled_mutate_rate``)."""

    floats: tuple[FloatAttribute, ...]
    enabled_mutate_rate: float

    def __init__(
        self,
        weight: FloatAttribute | None = None,
        enabled_mutate_rate: float = 0.01,
        extra: tuple[FloatAttribute, ...] = (),
    ):
        weight = weight or FloatAttribute("weight", 0.0, 1.0, "gaussian", 0.5, 0.8, 0.1, -30.0, 30.0)
        floats = (weight, *extra)
        names = _names(floats)
        if len(set(names)) != len(names):
            raise ArgumentError(f"connection gene attribute names must be unique, got {names}")
        object.__setattr__(self, "floats", floats)
        object.__setattr__(
            self,
            "enabled_mutate_rate",
            check_fraction(enabled_mutate_rate, "enabled_mutate_rate", allow_zero=True),
        )

    def init_attrs(self, key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
        """Fresh ``attrs float32 [*shape, num_floats]``."""
        keys = rng.split(key, len(self.floats))
        return jnp.stack([a.init(k, shape) for a, k in zip(self.floats, keys)], axis=-1)

    def mutate_attrs(
        self, key: jax.Array, attrs: jax.Array, enabled: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        """Mutated ``(attrs, enabled)``: every float independently; with ``enabled_mutate_rate``
        ``enabled`` is redrawn as a fair coin (neat-python's boolean attribute mutation, so it
        actually changes with half that rate)."""
        keys = rng.split(key, len(self.floats) + 2)
        cols = [a.mutate(k, attrs[..., i]) for i, (a, k) in enumerate(zip(self.floats, keys))]
        if self.enabled_mutate_rate == 0:  # never redrawn: no draws to compile
            return jnp.stack(cols, axis=-1), enabled
        redraw = rng.uniform(keys[-2], enabled.shape) < self.enabled_mutate_rate
        coin = jax.random.bernoulli(rng.fast_key(keys[-1]), 0.5, enabled.shape)
        return jnp.stack(cols, axis=-1), jnp.where(redraw, coin, enabled)

    def attribute_distance(self, attrs_a: jax.Array, attrs_b: jax.Array) -> jax.Array:
        """``sum |d float|`` over the trailing attribute axis (the weight difference by default)."""
        return _sum_abs_diff(attrs_a, attrs_b)

    def weight(self, attrs: jax.Array) -> jax.Array:
        """The weight the forward pass multiplies by: ``attrs[..., 0]``."""
        return attrs[..., 0]
