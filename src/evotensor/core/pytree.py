"""Typed pytree state: frozen dataclasses registered with JAX.

Every strategy state and params object in evotensor is a ``pytree_dataclass``: typed fields,
immutable, and transparent to ``jit``/``vmap``/``lax.scan``. Fields marked ``static_field()`` are
part of the treedef (hashable configuration), all others are leaves.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

import jax

T = TypeVar("T")


def static_field(**kwargs: Any) -> Any:
    """A dataclass field that is static (part of the treedef, not a leaf)."""
    metadata = dict(kwargs.pop("metadata", {}) or {})
    metadata["static"] = True
    return dataclasses.field(metadata=metadata, **kwargs)


def pytree_dataclass(cls: type[T]) -> type[T]:
    """Make ``cls`` a frozen dataclass registered as a JAX pytree.

    Example::

        @pytree_dataclass
        class State:
            mean: jax.Array       # [dims]
            sigma: jax.Array      # []

        state = State(mean=jnp.zeros(3), sigma=jnp.ones(()))
        state = state.replace(sigma=state.sigma * 2)
    """
    # (a subclass of a pytree dataclass inherits ``__dataclass_params__``: it is made a dataclass of
    # its own, so that the fields it adds are fields)
    params = cls.__dict__.get("__dataclass_params__")
    if params is None or not params.frozen:
        cls = dataclasses.dataclass(frozen=True)(cls)
    fields = dataclasses.fields(cls)
    data = [f.name for f in fields if not f.metadata.get("static", False)]
    meta = [f.name for f in fields if f.metadata.get("static", False)]
    jax.tree_util.register_dataclass(cls, data_fields=data, meta_fields=meta)

    def replace(self: T, **changes: Any) -> T:
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]

    cls.replace = replace  # type: ignore[attr-defined]
    return cls
