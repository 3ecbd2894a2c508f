"""Checkpoints of arbitrary pytrees as one ``.npz`` file, written atomically.

Leaves are stored as plain arrays keyed by their pytree path (no pickled JAX objects, so files stay
readable across JAX versions); typed PRNG keys are stored as their raw key data and re-wrapped
on load. Loading needs a *template* pytree of the same structure (e.g. a freshly initialized
state): its treedef, dtypes and key types are used to rebuild the saved values exactly, so a resumed
run continues bit-identically.

A file holds *global* values, never a device layout: a leaf sharded over several devices is stored
whole (a leaf sharded over several processes must first be gathered by all of them, see
:func:`evotensor.io.multihost.gather_to_host`), and :func:`load_pytree` places each value onto the
sharding of its template leaf. So a checkpoint written on 4 devices loads onto 2, 1 or 8.
Loading is two steps that can be taken apart (:func:`read_pytree` reads the file on the host,
:func:`place_like` puts the values on devices), so that the processes of a multi-process job can
agree that each of them read the checkpoint before any of them starts a device program.

A file that cannot be read as such a checkpoint (empty, truncated, corrupted, random bytes, another
kind of ``.npz``) or that does not fit the template raises :class:`CheckpointError`, a ``ValueError``
whose message names the file. File-system errors (a missing file, a directory) stay ``OSError``
exceptions, which name the file too.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.io import atomic, multihost

__all__ = [
    "CheckpointError",
    "SingleFileCheckpoints",
    "load_extra_arrays",
    "load_metadata",
    "load_pytree",
    "place_like",
    "read_pytree",
    "save_pytree",
]

_META = "__meta__"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: damaged, not written by :func:`save_pytree`, or not matching
    the template (or the run) it is loaded for. The message names the file."""


@contextlib.contextmanager
def _reading(path: Path) -> Iterator[Any]:
    """``np.load(path)`` as an ``NpzFile``; any failure to parse it (also while reading its members
    inside the ``with`` block) becomes a :class:`CheckpointError` naming ``path``."""
    try:
        data = np.load(path, allow_pickle=False)
    except (EOFError, zipfile.BadZipFile, ValueError, KeyError, IndexError) as err:
        raise CheckpointError(_damaged(path, err)) from err
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise CheckpointError(f"{path} is a single .npy array, not a checkpoint (.npz) written by evotensor")
    try:
        with data:
            yield data
    except CheckpointError:
        raise
    except (
        EOFError,
        zipfile.BadZipFile,
        ValueError,
        KeyError,
        IndexError,
        TypeError,
        UnicodeDecodeError,
    ) as err:
        raise CheckpointError(_damaged(path, err)) from err


def _damaged(path: Path, err: BaseException) -> str:
    if isinstance(err, KeyError):
        detail = f"entry {err.args[0] if err.args else ''} is missing"
    elif isinstance(err, EOFError) or (isinstance(err, zipfile.BadZipFile) and "not a zip" in str(err)):
        detail = "empty, truncated or not an .npz archive"
    elif isinstance(err, ValueError) and "pickle" in str(err):
        detail = "not an .npz archive"
    else:
        detail = f"{type(err).__name__}: {err}"
    return f"{path} is damaged or is not a checkpoint written by evotensor ({detail})"


def _meta(data: Any, path: Path) -> dict[str, Any]:
    if _META not in data.files:
        raise CheckpointError(f"{path} is not a checkpoint written by evotensor (no {_META} entry)")
    meta = json.loads(bytes(data[_META]).decode())
    if not isinstance(meta, dict) or not isinstance(meta.get("kinds"), dict):
        raise CheckpointError(f"{path} is damaged (its {_META} entry is not a checkpoint record)")
    return meta


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
            if isinstance(leaf, jax.Array) and not (leaf.is_fully_addressable or leaf.is_fully_replicated):
                raise ValueError(
                    f"save_pytree: leaf {name} is sharded over devices of other processes; gather it "
                    "first on every process (evotensor.io.multihost.gather_to_host)"
                )
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
    with atomic.atomic_open(Path(path), "wb") as handle:
        np.savez(handle, **arrays)


def load_extra_arrays(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The ``extra_arrays`` stored by :func:`save_pytree`.

    Raises:
        CheckpointError: the file is damaged or not such a checkpoint.
    """
    path = Path(path)
    with _reading(path) as data:
        _meta(data, path)
        return {k[len(_EXTRA) :]: data[k] for k in data.files if k.startswith(_EXTRA)}


def load_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """The JSON metadata stored by :func:`save_pytree`.

    Raises:
        CheckpointError: the file is damaged or not such a checkpoint.
    """
    path = Path(path)
    with _reading(path) as data:
        metadata = _meta(data, path).get("metadata", {})
    if not isinstance(metadata, dict):
        raise CheckpointError(f"{path} is damaged (its metadata is not a JSON object)")
    return metadata


def read_pytree(path: str | os.PathLike, template: Any) -> Any:
    """The values of a pytree saved by :func:`save_pytree`, as NumPy arrays in ``template``'s
    structure, read on the host only (no device is touched). A typed PRNG key leaf comes back as its
    raw key data (:func:`place_like` wraps it again).

    Raises:
        CheckpointError: (a ``ValueError``) the file is damaged or not such a checkpoint, or it
            differs from the template; the message names the file and the first leaf path whose
            structure, shape or dtype differs.
    """
    path = Path(path)
    leaves_t, treedef = jax.tree_util.tree_flatten(template)
    names = [name for name, _ in _leaf_names(template)]
    with _reading(path) as data:
        kinds = _meta(data, path)["kinds"]
        n_saved = sum(1 for k in kinds if not k.endswith(":path"))
        if n_saved != len(leaves_t):
            raise CheckpointError(f"checkpoint {path} has {n_saved} leaves, the template has {len(leaves_t)}")
        out = []
        for i, (name, ref) in enumerate(zip(names, leaves_t)):
            slot = f"{i:05d}"
            saved_name = kinds[slot + ":path"]
            if saved_name != name:
                raise CheckpointError(f"checkpoint {path}: leaf {i} is {saved_name}, the template has {name}")
            value = data[slot]
            if kinds[slot].startswith("key:"):
                if not _is_prng_key(ref):
                    raise CheckpointError(
                        f"checkpoint {path}: leaf {name} is a PRNG key, the template's is not"
                    )
                impl = str(jax.random.key_impl(ref))
                if kinds[slot][4:] != impl or value.shape[: len(ref.shape)] != tuple(ref.shape):
                    raise CheckpointError(
                        f"checkpoint {path}: leaf {name} is a {kinds[slot][4:]} key of shape "
                        f"{value.shape[: len(ref.shape)]}, the template's a {impl} key of shape "
                        f"{tuple(ref.shape)}"
                    )
                out.append(value)
                continue
            if _is_prng_key(ref):
                raise CheckpointError(f"checkpoint {path}: leaf {name} is not a PRNG key, the template's is")
            # the template's shape and dtype without copying it to the host (it may be sharded)
            if isinstance(ref, jax.Array):
                ref_shape, ref_dtype = tuple(ref.shape), np.dtype(ref.dtype)
            else:
                ref_arr = np.asarray(ref)
                ref_shape, ref_dtype = ref_arr.shape, ref_arr.dtype
            if kinds[slot].startswith("bits:"):
                if ref_dtype.name != kinds[slot][5:]:
                    raise CheckpointError(
                        f"checkpoint {path}: leaf {name} has dtype {kinds[slot][5:]}, "
                        f"the template {ref_dtype}"
                    )
                value = value.view(ref_dtype)
            if value.shape != tuple(ref_shape) or value.dtype != ref_dtype:
                raise CheckpointError(
                    f"checkpoint {path}: leaf {name} has shape {value.shape} dtype {value.dtype}, "
                    f"the template expects {tuple(ref_shape)} {ref_dtype}"
                )
            out.append(value)
    return jax.tree_util.tree_unflatten(treedef, out)


def _place(value: np.ndarray, ref: jax.Array) -> jax.Array:
    """``value`` as a ``jax.Array`` laid out like ``ref``: on the default device when ``ref`` is on
    one device, else on ``ref``'s sharding (each process fills only its own devices' shards)."""
    sharding = ref.sharding
    if len(sharding.device_set) == 1:
        return jnp.asarray(value)
    if sharding.is_fully_addressable:
        return jax.device_put(value, sharding)
    return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])


def place_like(values: Any, template: Any) -> Any:
    """The NumPy values of :func:`read_pytree` placed like ``template``: a leaf whose template is a
    ``jax.Array`` becomes one on the template leaf's sharding (so a state saved from any number of
    devices lands on the current mesh), a key leaf is wrapped again with the template's key
    implementation, any other leaf stays NumPy.

    With a template sharded over several processes' devices every process must call this (key
    leaves run a small device program)."""
    leaves_t, treedef = jax.tree_util.tree_flatten(template)
    out = []
    for value, ref in zip(jax.tree_util.tree_leaves(values), leaves_t):
        if _is_prng_key(ref):
            data = _place(np.asarray(value), jax.random.key_data(ref))
            out.append(jax.random.wrap_key_data(data, impl=jax.random.key_impl(ref)))
        elif isinstance(ref, jax.Array):
            out.append(_place(np.asarray(value), ref))
        else:
            out.append(value)
    return jax.tree_util.tree_unflatten(treedef, out)


def load_pytree(path: str | os.PathLike, template: Any) -> Any:
    """Load a pytree saved by :func:`save_pytree`, using ``template`` for its structure and the
    layout of its leaves (:func:`read_pytree` then :func:`place_like`).

    Raises:
        CheckpointError: (a ``ValueError``) the file is damaged or not such a checkpoint, or it
            differs from the template; the message names the file and the first leaf path whose
            structure, shape or dtype differs.
    """
    return place_like(read_pytree(path, template), template)


class SingleFileCheckpoints:
    """The single-file format for a run directory (the default): ``checkpoint.npz``, replaced
    atomically at every checkpoint. Arrays sharded over several processes are gathered whole onto
    process 0, which writes the file: simple and portable, but every leaf must fit in one host's
    memory (:class:`evotensor.io.sharded_checkpoint.ShardedCheckpoints` lifts that).

    The run directory drives it: every process calls :meth:`stage` (the gather, a collective),
    process 0 calls :meth:`commit`."""

    name = "checkpoint.npz"
    agree_before_commit = False  # only process 0 writes: one agreement after the commit suffices

    def __repr__(self) -> str:
        return "SingleFileCheckpoints()"

    def find(self, run_path: Path) -> Path | None:
        """``run_path/checkpoint.npz`` if there is anything by that name (reading says what is
        wrong with it), else ``None``."""
        path = Path(run_path) / self.name
        return path if path.exists() or path.is_symlink() else None

    def stage(self, run_path: Path, tree: Any, generation: int) -> tuple[Path, Any]:
        """Every process: gather ``tree``'s arrays that span several processes (a collective)."""
        return Path(run_path) / self.name, multihost.gather_to_host(tree)

    def commit(
        self, staged: tuple[Path, Any], metadata: dict[str, Any], extra_arrays: dict[str, Any]
    ) -> Path:
        """Process 0: write the file atomically."""
        path, tree = staged
        save_pytree(path, tree, metadata=metadata, extra_arrays=extra_arrays)
        return path

    def remove_all(self, run_path: Path) -> None:
        (Path(run_path) / self.name).unlink(missing_ok=True)

    def remove_stale(self, run_path: Path) -> None:
        atomic.remove_stale_temp_files(run_path, [self.name])

    @staticmethod
    def metadata(path: Path) -> dict[str, Any]:
        return load_metadata(path)

    @staticmethod
    def digest(path: Path) -> bytes:
        return hashlib.sha256(Path(path).read_bytes()).digest()

    @staticmethod
    def read(path: Path, template: Any) -> Any:
        return read_pytree(path, template)

    @staticmethod
    def extra_arrays(path: Path) -> dict[str, np.ndarray]:
        return load_extra_arrays(path)

    @staticmethod
    def place(values: Any, template: Any) -> Any:
        return place_like(values, template)
