"""Checkpoints of arbitrary pytrees as one ``.npz`` file, written atomically.

Leaves are stored as plain arrays keyed by their pytree path (no pickled JAX objects, so files stay
readable across JAX versions); typed PRNG keys are stored as their raw key data and re-wrapped
on load. Loading needs a *template* pytree of the same structure (e.g. a freshly initialized
state): its treedef, dtypes and key types are used to rebuild the saved values exactly, so a resumed
run continues bit-identically.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.io.atomic import atomic_open

_META = "__meta__"


def _is_prng_key(leaf: Any) -> bool:
    return isinstance(leaf, jax.Array) and jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key)


def _leaf_names(tree: Any) -> list[tuple[str, Any]]:
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [(jax.tree_util.keystr(path) or "<root>", leaf) for path, leaf in flat]


_EXTRA = "extra:"


def save_pytree(
    path: str | os.PathLike,
    tree: Any,
    metadata: dict[str, Any] | None = None,
    extra_arrays: dict[str, np.ndarray] | None = None,
) -> None:
    """Atomically save every leaf of ``tree`` (plus JSON ``metadata`` and named ``extra_arrays``,
    which need no template to load) to ``path`` (.npz)."""
    arrays: dict[str, np.ndarray] = {_EXTRA + k: np.asarray(v) for k, v in (extra_arrays or {}).items()}
    kinds: dict[str, str] = {}
    for i, (name, leaf) in enumerate(_leaf_names(tree)):
        slot = f"{i:05d}"
        if _is_prng_key(leaf):
            arrays[slot] = np.asarray(jax.random.key_data(leaf))
            kinds[slot] = "key:" + str(jax.random.key_impl(leaf))
        else:
            arr = np.asarray(leaf)
            if arr.dtype.kind == "V":  # ml_dtypes (bfloat16, float8...): npz stores raw bits
                arrays[slot] = arr.view(f"u{arr.dtype.itemsize}")
                kinds[slot] = "bits:" + arr.dtype.name
            else:
                arrays[slot] = arr
                kinds[slot] = "array"
        kinds[slot + ":path"] = name
    meta = {"kinds": kinds, "metadata": metadata or {}}
    arrays[_META] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    with atomic_open(Path(path), "wb") as handle:
        np.savez(handle, **arrays)


def load_extra_arrays(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The ``extra_arrays`` stored by :func:`save_pytree`."""
    with np.load(Path(path)) as data:
        return {k[len(_EXTRA) :]: data[k] for k in data.files if k.startswith(_EXTRA)}


def load_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """The JSON metadata stored by :func:`save_pytree`."""
    with np.load(Path(path)) as data:
        return json.loads(bytes(data[_META]).decode())["metadata"]


def load_pytree(path: str | os.PathLike, template: Any) -> Any:
    """Load a pytree saved by :func:`save_pytree`, using ``template`` for its structure.

    Raises:
        ValueError: naming the first leaf path whose structure, shape or dtype differs.
    """
    leaves_t, treedef = jax.tree_util.tree_flatten(template)
    names = [name for name, _ in _leaf_names(template)]
    with np.load(Path(path)) as data:
        kinds = json.loads(bytes(data[_META]).decode())["kinds"]
        n_saved = sum(1 for k in kinds if not k.endswith(":path"))
        if n_saved != len(leaves_t):
            raise ValueError(f"checkpoint {path} has {n_saved} leaves, the template has {len(leaves_t)}")
        out = []
        for i, (name, ref) in enumerate(zip(names, leaves_t)):
            slot = f"{i:05d}"
            saved_name = kinds[slot + ":path"]
            if saved_name != name:
                raise ValueError(f"checkpoint leaf {i} is {saved_name}, the template has {name}")
            value = data[slot]
            if kinds[slot].startswith("key:"):
                if not _is_prng_key(ref):
                    raise ValueError(f"checkpoint leaf {name} is a PRNG key, the template's is not")
                out.append(jax.random.wrap_key_data(jnp.asarray(value), impl=jax.random.key_impl(ref)))
                continue
            ref_arr = np.asarray(ref)
            if kinds[slot].startswith("bits:"):
                if ref_arr.dtype.name != kinds[slot][5:]:
                    raise ValueError(
                        f"checkpoint leaf {name} has dtype {kinds[slot][5:]}, the template {ref_arr.dtype}"
                    )
                value = value.view(ref_arr.dtype)
            if value.shape != ref_arr.shape or value.dtype != ref_arr.dtype:
                raise ValueError(
                    f"checkpoint leaf {name} has shape {value.shape} dtype {value.dtype}, "
                    f"the template expects {ref_arr.shape} {ref_arr.dtype}"
                )
            out.append(jnp.asarray(value) if isinstance(ref, jax.Array) else value)
    return jax.tree_util.tree_unflatten(treedef, out)
