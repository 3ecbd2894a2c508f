"""Sharded checkpoints: every process writes its own shards, no array is ever gathered whole.

The single-file checkpoint (:mod:`evotensor.io.checkpoint`) gathers each leaf onto process 0 and
writes one ``.npz``: simple and portable, but every leaf must fit in one host's memory. A sharded
checkpoint is a *directory* written by all processes in parallel::

    checkpoint-00000012/              (in a run directory: checkpoint-<generation, 8 digits>)
        manifest.json                 format, version, metadata (generation, task, run identity),
                                      every leaf: tree path, kind, global shape, dtype, and its
                                      shards: file, byte offset, global index range [[start, stop], ...]
        process-00000.bin             process 0's shards, raw C-order bytes, each 64-byte aligned
        process-00001.bin             process 1's shards ...
        extra.npz                     small named host arrays (a run's metric history), by process 0

Each *distinct* shard is stored once: a process writes the addressable shards whose ``replica_id`` is
0, so a leaf replicated over every device is written by one process and a leaf split over 4 devices
by the processes owning those devices. Leaves that are not ``jax.Array`` (NumPy values, Python
numbers) are held whole by every process and written by process 0. Typed PRNG keys are stored as
their raw key data (kind ``key:<impl>``) and wrapped again on load; ``bfloat16`` and other
``ml_dtypes`` are stored as their raw bytes under their dtype name.

**Padded leaves.** A :class:`~evotensor.core.mesh.Padded` leaf (``array``, ``length``: a sharded
QD archive padded to a multiple of the device count, as ``portable_state`` hands it over) is
stored as its first ``length`` rows: each device's shard cut at ``length`` and written by the
process that holds it, the padding never, and nothing gathered. The stored leaf is the plain
``[length, ...]`` array, so any template restores it; a ``Padded`` template restores it in the
template's padded layout, the rows past ``length`` taken from the template itself (its own
padding), without ever building the leaf whole.

**Atomic as a whole.** The shards are written into a temporary sibling directory
``.<name>.tmp``; every process fsyncs its file and all agree that they succeeded (a collective,
:func:`evotensor.io.multihost.agree`); then process 0 merges the processes' shard lists into the
manifest (checking that the shards of every leaf tile its global shape exactly), writes the
manifest last and renames the directory into place. A crash at any step leaves the previous
checkpoint untouched and at most a temporary directory, which the run directory removes on its
next start or resume: there is never a half checkpoint under a checkpoint's name.

**Restore onto any layout.** :func:`load_sharded` builds each leaf on the template leaf's
sharding, one device at a time (``jax.make_array_from_single_device_arrays``): the slice a device
holds is assembled from the stored shards that overlap it, reading them through ``np.memmap`` (only
the pages it needs) and put on that device before the next is read, so a checkpoint written on 4
devices restores onto 2, 1 or 8, each process of a multi-process job reads only its own devices'
parts, and the host holds one slice at a time. Reading checks the
manifest against the template first (leaf paths, kinds, shapes, dtypes, every shard file present and
long enough) and raises :class:`~evotensor.io.checkpoint.CheckpointError` naming the file and the
leaf's tree path.

The files are plain: ``np.memmap(file, dtype, offset=..., shape=...)`` reads any shard without
evotensor, and nothing is pickled.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import math
import os
import re
import shutil
import zipfile
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core.checks import check_int
from evotensor.core.mesh import is_padded
from evotensor.io import atomic, multihost
from evotensor.io.checkpoint import CheckpointError

__all__ = [
    "FORMAT",
    "MANIFEST",
    "VERSION",
    "ShardedCheckpoints",
    "load_sharded",
    "load_sharded_extra_arrays",
    "place_sharded",
    "read_sharded",
    "read_sharded_manifest",
    "save_sharded",
]

FORMAT = "evotensor-sharded-checkpoint"
VERSION = 1
MANIFEST = "manifest.json"
EXTRA = "extra.npz"
_ALIGN = 64  # bytes: every shard starts aligned, so a memmap view of any dtype is aligned
_INDEX = "process-{:05d}.json"  # a process's shard list, merged into the manifest by process 0
_DATA = "process-{:05d}.bin"
_STEP = re.compile(r"^checkpoint-(?P<generation>\d{8,})$")
_STEP_TEMP = re.compile(r"^\.checkpoint-\d{8,}(\.old)?\.tmp$")


# -- writing -------------------------------------------------------------------------------------


def _is_key(leaf: Any) -> bool:
    return isinstance(leaf, jax.Array) and jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key)


def _names(tree: Any) -> list[tuple[str, Any]]:
    flat, _ = jax.tree_util.tree_flatten_with_path(tree)
    return [(jax.tree_util.keystr(path) or "<root>", leaf) for path, leaf in flat]


def _box(index: tuple, shape: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """A device's index (a tuple of slices, possibly shorter than ``shape``) as ``((start, stop), ...)``."""
    out = []
    for axis, size in enumerate(shape):
        piece = index[axis] if axis < len(index) else slice(None)
        start, stop, step = piece.indices(size)
        if step != 1:  # no JAX sharding makes strided shards
            raise ValueError(f"strided shard index {index} is not supported")
        out.append((start, max(start, stop)))
    return tuple(out)


def _volume(box: tuple[tuple[int, int], ...]) -> int:
    return math.prod(stop - start for start, stop in box)


def _clip(box: tuple[tuple[int, int], ...], length: int) -> tuple[tuple[int, int], ...]:
    """``box`` cut to the first ``length`` rows (axis 0)."""
    (start, stop), rest = box[0], box[1:]
    return ((min(start, length), min(stop, length)), *rest)


def _local_shards(leaf: Any) -> tuple[str, tuple[int, ...], np.dtype, list[tuple[tuple, Any]]]:
    """``(kind, stored shape, dtype, [(box, data)])`` of the shards this process stores of ``leaf``:
    the addressable shards with ``replica_id`` 0 of a global ``jax.Array``, the whole value on
    process 0 for any other leaf. ``data`` is still on its device (copied to the host one at a time);
    it may hold more rows than ``box`` (a :class:`~evotensor.core.mesh.Padded` leaf's shards are
    cut to its ``length`` rows: only the box's leading part is stored)."""
    if is_padded(leaf) and isinstance(leaf.array, jax.Array):
        _, shape, dtype, shards = _local_shards(leaf.array)
        cut = [(_clip(box, leaf.length), data) for box, data in shards]
        return "array", leaf.shape, dtype, [(box, data) for box, data in cut if _volume(box)]
    kind = "array"
    if _is_key(leaf):
        kind = f"key:{jax.random.key_impl(leaf)}"
        leaf = jax.random.key_data(leaf)  # same layout as the key array, one trailing axis more
    if isinstance(leaf, jax.Array) and (jax.process_count() == 1 or not leaf.is_fully_addressable):
        shape = tuple(leaf.shape)
        shards = [(_box(s.index, shape), s.data) for s in leaf.addressable_shards if s.replica_id == 0]
        return kind, shape, np.dtype(leaf.dtype), shards
    # a host value, or an array on this process's devices only (each process has its own): process
    # 0's copy is the one stored, as the single-file format stores it
    value = np.asarray(leaf)
    shape = tuple(value.shape)
    whole = tuple((0, n) for n in shape)
    return kind, shape, value.dtype, [(whole, value)] if jax.process_index() == 0 else []


def _write_process_shards(directory: Path, tree: Any) -> list[dict[str, Any]]:
    """Write this process's shards of ``tree`` into ``directory/process-<i>.bin`` and its shard list
    into ``process-<i>.json`` (both fsynced). Returns the leaves' descriptions (path, kind, shape,
    dtype), the same on every process."""
    process = jax.process_index()
    data_name = _DATA.format(process)
    leaves, index = [], []
    offset = 0
    with open(directory / data_name, "wb") as handle:
        for i, (name, leaf) in enumerate(_names(tree)):
            kind, shape, dtype, shards = _local_shards(leaf)
            leaves.append({"path": name, "kind": kind, "shape": list(shape), "dtype": dtype.name})
            for box, data in shards:
                host = np.asarray(data)[tuple(slice(0, stop - start) for start, stop in box)]
                host = np.ascontiguousarray(host)  # one shard on the host at a time
                pad = -offset % _ALIGN
                handle.write(b"\0" * pad)
                offset += pad
                handle.write(host.reshape(-1).view(np.uint8).data)
                index.append({"leaf": i, "index": [list(r) for r in box], "offset": offset})
                offset += host.nbytes
        handle.flush()
        os.fsync(handle.fileno())
    record = {"process": process, "file": data_name, "size": offset, "shards": index}
    with atomic.atomic_open(directory / _INDEX.format(process), "w") as handle:
        json.dump(record, handle)
    return leaves


def _check_tiling(directory: Path, leaf: dict[str, Any]) -> None:
    """The shards of ``leaf`` lie inside its shape, do not overlap and cover it whole."""
    shape = leaf["shape"]
    boxes = [tuple(map(tuple, s["index"])) for s in leaf["shards"]]
    for box in boxes:
        if len(box) != len(shape) or any(not 0 <= a <= b <= n for (a, b), n in zip(box, shape)):
            raise CheckpointError(
                f"{directory}: a shard of leaf {leaf['path']} has index {list(map(list, box))}, outside its "
                f"shape {tuple(shape)}"
            )
    for i, a in enumerate(boxes):
        for b in boxes[:i]:
            if _volume(a) and _volume(b) and all(max(x[0], y[0]) < min(x[1], y[1]) for x, y in zip(a, b)):
                raise CheckpointError(f"{directory}: two shards of leaf {leaf['path']} overlap ({a} and {b})")
    if sum(_volume(b) for b in boxes) != math.prod(shape) or (math.prod(shape) and not boxes):
        raise CheckpointError(
            f"{directory}: the shards of leaf {leaf['path']} do not cover its shape {tuple(shape)} "
            f"({sum(_volume(b) for b in boxes)} of {math.prod(shape)} elements stored)"
        )


def _write_manifest(
    directory: Path,
    leaves: list[dict[str, Any]],
    processes: int,
    metadata: dict[str, Any] | None,
    extra_arrays: dict[str, np.ndarray] | None,
) -> None:
    """Process 0, after every process wrote its shards: merge their shard lists into the manifest,
    check that the shards tile every leaf, and write ``extra.npz`` and then the manifest (last)."""
    leaves = [dict(leaf, shards=[]) for leaf in leaves]
    files = {}
    for process in range(processes):
        path = directory / _INDEX.format(process)
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise CheckpointError(f"{path} is damaged ({err})") from err
        files[record["file"]] = record["size"]
        for shard in record["shards"]:
            leaves[shard["leaf"]]["shards"].append(
                {"file": record["file"], "offset": shard["offset"], "index": shard["index"]}
            )
    for leaf in leaves:
        _check_tiling(directory, leaf)
    keep = {*files, *(_INDEX.format(p) for p in range(processes))}
    for entry in directory.iterdir():  # left by a killed write of another process count
        if entry.name not in keep and entry.is_file():
            entry.unlink()
    if extra_arrays:
        with atomic.atomic_open(directory / EXTRA, "wb") as handle:
            np.savez(handle, **{k: np.asarray(v) for k, v in extra_arrays.items()})
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "metadata": metadata or {},
        "processes": processes,
        "files": files,
        "extra": EXTRA if extra_arrays else None,
        "leaves": leaves,
    }
    with atomic.atomic_open(directory / MANIFEST, "w") as handle:
        json.dump(manifest, handle)
    for process in range(processes):  # merged into the manifest
        (directory / _INDEX.format(process)).unlink(missing_ok=True)
    _fsync_directory(directory)


def _fsync_directory(path: Path) -> None:
    with contextlib.suppress(OSError):  # where the OS allows: make renames and new names durable
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _move_into_place(temporary: Path, target: Path) -> None:
    """Rename the finished ``temporary`` directory to ``target``. An existing ``target`` (the same
    checkpoint written again) is first moved aside and removed after the rename."""
    aside = None
    if target.exists():
        aside = target.with_name(f".{target.name}.old.tmp")
        if aside.exists():
            shutil.rmtree(aside)
        os.replace(target, aside)
    os.replace(temporary, target)
    _fsync_directory(target.parent)
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def _temporary(target: Path) -> Path:
    return target.with_name(f".{target.name}.tmp")


def _stage(target: Path, tree: Any) -> list[dict[str, Any]]:
    """Every process: write its shards into ``target``'s temporary directory (created by whichever
    process comes first; a stale file of this process from a killed write is overwritten)."""
    temporary = _temporary(target)
    temporary.mkdir(parents=True, exist_ok=True)
    return _write_process_shards(temporary, tree)


def _settle(error: BaseException | None, what: str) -> None:
    """All processes learn whether any failed; a failed one raises its own error, the others
    :class:`~evotensor.io.multihost.ProcessFailure`."""
    failures = multihost.agree(None if error is None else f"{type(error).__name__}: {error}")
    if error is not None:
        raise error
    multihost.raise_for_failures(failures, what)


def save_sharded(
    path: str | os.PathLike,
    tree: Any,
    metadata: dict[str, Any] | None = None,
    extra_arrays: dict[str, np.ndarray] | None = None,
) -> None:
    """Atomically save ``tree`` as the sharded checkpoint directory ``path`` (replacing one that is
    there), every process writing its own shards; plus JSON ``metadata`` and small named host
    ``extra_arrays`` (written by process 0).

    A collective in a multi-process job: **every process calls it with the same tree** (arrays
    sharded over all processes' devices, as a compiled program returns them). The directory must be
    on a file system all processes share.

    Raises:
        OSError: from the file system, on the process that failed (the others raise
            :class:`~evotensor.io.multihost.ProcessFailure`); ``path`` is left as it was.
    """
    target = Path(path)
    error, leaves = None, []
    try:
        leaves = _stage(target, tree)
    except (OSError, ValueError) as err:
        error = err
    _settle(error, f"writing the shards of {target}")
    error = None
    if multihost.is_main_process():
        try:
            _write_manifest(_temporary(target), leaves, jax.process_count(), metadata, extra_arrays)
            _move_into_place(_temporary(target), target)
        except (OSError, ValueError) as err:
            error = err
    _settle(error, f"writing the manifest of {target}")


# -- reading -------------------------------------------------------------------------------------


def read_sharded_manifest(path: str | os.PathLike) -> dict[str, Any]:
    """The manifest of the sharded checkpoint directory ``path`` (format and version checked).

    Raises:
        CheckpointError: no manifest, or not one written by evotensor (the message names the file).
    """
    manifest_path = Path(path) / MANIFEST
    if Path(path).is_dir() and not manifest_path.exists():
        raise CheckpointError(f"{path} is not a complete sharded checkpoint: {MANIFEST} is missing")
    try:
        manifest = json.loads(manifest_path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CheckpointError(f"{manifest_path} is damaged ({err})") from err
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise CheckpointError(f"{manifest_path} is not the manifest of an evotensor sharded checkpoint")
    if manifest.get("version") != VERSION:
        raise CheckpointError(
            f"{manifest_path} has format version {manifest.get('version')!r}; this evotensor reads "
            f"version {VERSION}"
        )
    if not isinstance(manifest.get("leaves"), list) or not isinstance(manifest.get("files"), dict):
        raise CheckpointError(f"{manifest_path} is damaged (no leaves or files)")
    return manifest


class _StoredLeaf:
    """One leaf of a sharded checkpoint: reads any box of it from the shards that overlap it."""

    def __init__(self, directory: Path, leaf: dict[str, Any], dtype: np.dtype, maps: dict[str, np.ndarray]):
        self.directory, self.path, self.dtype = directory, leaf["path"], dtype
        self.shape = tuple(leaf["shape"])
        self.shards = [(tuple(map(tuple, s["index"])), s["file"], s["offset"]) for s in leaf["shards"]]
        self._maps = maps  # file name -> uint8 memmap, shared by the leaves of one checkpoint

    def _stored(self, box: tuple, file: str, offset: int) -> np.ndarray:
        if file not in self._maps:
            self._maps[file] = np.memmap(self.directory / file, dtype=np.uint8, mode="r")
        shape = tuple(b - a for a, b in box)
        nbytes = math.prod(shape) * self.dtype.itemsize
        return self._maps[file][offset : offset + nbytes].view(self.dtype).reshape(shape)

    def read(self, box: tuple[tuple[int, int], ...]) -> np.ndarray:
        """The values in ``box`` (``((start, stop), ...)`` per axis) as a new NumPy array."""
        shape = tuple(b - a for a, b in box)
        out = np.empty(shape, self.dtype)
        if not out.size:
            return out
        for stored, file, offset in self.shards:
            cut = [(max(a, c), min(b, d)) for (a, b), (c, d) in zip(box, stored)]
            if any(lo >= hi for lo, hi in cut):
                continue
            source = tuple(slice(lo - c, hi - c) for (lo, hi), (c, _) in zip(cut, stored))
            target = tuple(slice(lo - a, hi - a) for (lo, hi), (a, _) in zip(cut, box))
            out[target] = self._stored(stored, file, offset)[source]
        return out

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        whole = self.read(tuple((0, n) for n in self.shape))
        return whole if dtype is None else whole.astype(dtype)


def _template_leaf(ref: Any) -> tuple[str, tuple[int, ...], np.dtype]:
    """``(kind, stored shape, dtype)`` a template leaf expects, without computing anything."""
    if is_padded(ref):
        return "array", ref.shape, ref.dtype
    if _is_key(ref):
        data = jax.eval_shape(jax.random.key_data, ref)
        return f"key:{jax.random.key_impl(ref)}", tuple(data.shape), np.dtype(data.dtype)
    if isinstance(ref, jax.Array):
        return "array", tuple(ref.shape), np.dtype(ref.dtype)
    value = np.asarray(ref)
    return "array", tuple(value.shape), value.dtype


def read_sharded(path: str | os.PathLike, template: Any) -> Any:
    """``template``'s structure with each leaf a lazy reader of the stored leaf (``np.asarray``
    reads it whole), after checking the checkpoint against ``template`` and its files on disk.
    Nothing is read but the manifest and the files' sizes; no device is touched.

    Raises:
        CheckpointError: the manifest is damaged, differs from the template (the first leaf path
            whose kind, shape or dtype differs), or a shard file is missing or too short (named
            with the leaf).
    """
    directory = Path(path)
    manifest = read_sharded_manifest(directory)
    leaves_t, treedef = jax.tree_util.tree_flatten(template)
    names = [name for name, _ in _names(template)]
    stored = manifest["leaves"]
    if len(stored) != len(leaves_t):
        raise CheckpointError(
            f"checkpoint {directory} has {len(stored)} leaves, the template has {len(leaves_t)}"
        )
    sizes = {}
    for file, size in manifest["files"].items():
        try:
            sizes[file] = (directory / file).stat().st_size
        except FileNotFoundError:
            sizes[file] = None
        if sizes[file] is not None and sizes[file] < size:
            sizes[file] = -1
    maps: dict[str, np.ndarray] = {}
    out = []
    for i, (name, ref, leaf) in enumerate(zip(names, leaves_t, stored)):
        if leaf.get("path") != name:
            raise CheckpointError(
                f"checkpoint {directory}: leaf {i} is {leaf.get('path')}, the template has {name}"
            )
        kind, shape, dtype = _template_leaf(ref)
        if leaf.get("kind") != kind:
            raise CheckpointError(
                f"checkpoint {directory}: leaf {name} is stored as {leaf.get('kind')!r}, "
                f"the template's is {kind!r}"
            )
        if tuple(leaf.get("shape", ())) != shape or leaf.get("dtype") != dtype.name:
            raise CheckpointError(
                f"checkpoint {directory}: leaf {name} has shape {tuple(leaf.get('shape', ()))} dtype "
                f"{leaf.get('dtype')}, the template expects {shape} {dtype.name}"
            )
        _check_tiling(directory / MANIFEST, leaf)
        for shard in leaf["shards"]:
            file = shard["file"]
            if file not in sizes:
                raise CheckpointError(
                    f"checkpoint {directory}: leaf {name} names shard file {file}, not listed"
                )
            if sizes[file] is None:
                raise CheckpointError(f"shard file {directory / file} of leaf {name} is missing")
            end = shard["offset"] + _volume(tuple(map(tuple, shard["index"]))) * dtype.itemsize
            if sizes[file] < 0 or end > manifest["files"][file]:
                raise CheckpointError(
                    f"shard file {directory / file} of leaf {name} is truncated (it must hold "
                    f"{manifest['files'][file]} bytes)"
                )
        out.append(_StoredLeaf(directory, leaf, dtype, maps))
    return jax.tree_util.tree_unflatten(treedef, out)


def _build(stored: _StoredLeaf, ref: jax.Array, length: int | None = None) -> jax.Array:
    """The leaf laid out like ``ref``: each of this process's devices gets the slice it asks for,
    assembled from the stored shards (a slice that several devices hold is read once). An
    uncommitted ``ref`` on
    one device gives an uncommitted array on the default device, as
    :func:`evotensor.io.checkpoint.place_like` does.

    With ``length`` (a :class:`~evotensor.core.mesh.Padded` template), ``ref`` has more rows than
    the ``length`` stored: the result has ``ref``'s shape, rows past ``length`` copied from ``ref``
    (its own padding), fetched from the device that holds them (only those rows)."""
    sharding, shape = ref.sharding, tuple(ref.shape) if length is not None else stored.shape
    own = {} if length is None else {_box(s.index, shape): s.data for s in ref.addressable_shards}

    def piece(box: tuple) -> np.ndarray:
        if length is None or box[0][1] <= length:
            return stored.read(box)
        (start, end), rest = box[0], box[1:]  # the rows past the stored ones are the template's
        cut = min(max(start, length), end)
        return np.concatenate([stored.read(((start, cut), *rest)), np.asarray(own[box][cut - start :])])

    if len(sharding.device_set) == 1 and not ref.committed:
        return jnp.asarray(piece(tuple((0, n) for n in shape)))
    # one device at a time: the host holds one slice (kept while other devices need the same one),
    # not all of this process's slices of the leaf at once
    boxes = {d: _box(index, shape) for d, index in sharding.addressable_devices_indices_map(shape).items()}
    left = collections.Counter(boxes.values())
    held: dict[tuple, np.ndarray] = {}
    arrays = []
    for device, box in boxes.items():
        host = held.pop(box) if box in held else piece(box)
        arrays.append(jax.device_put(host, device))
        left[box] -= 1
        if left[box]:
            held[box] = host
    return jax.make_array_from_single_device_arrays(shape, sharding, arrays)


def place_sharded(values: Any, template: Any) -> Any:
    """The lazy leaves of :func:`read_sharded` laid out like ``template``: a ``jax.Array`` leaf on its
    template's sharding (each process reading only its devices' slices), a key leaf wrapped again
    with the template's implementation, any other leaf as NumPy. Every process calls it (key
    leaves run a small device program)."""
    leaves_t, treedef = jax.tree_util.tree_flatten(template)
    out = []
    for stored, ref in zip(treedef.flatten_up_to(values), leaves_t):
        if is_padded(ref) and isinstance(ref.array, jax.Array):
            out.append(_build(stored, ref.array, ref.length))  # the padded layout, never whole
        elif is_padded(ref):
            out.append(np.asarray(stored))
        elif _is_key(ref):
            data = _build(stored, ref)
            out.append(jax.random.wrap_key_data(data, impl=jax.random.key_impl(ref)))
        elif isinstance(ref, jax.Array):
            out.append(_build(stored, ref))
        else:
            out.append(np.asarray(stored))
    return jax.tree_util.tree_unflatten(treedef, out)


def load_sharded(path: str | os.PathLike, template: Any) -> Any:
    """Load the sharded checkpoint directory ``path`` onto ``template``'s layout (its structure,
    dtypes, key types and shardings: any mesh or device count). See :func:`read_sharded` for the
    errors."""
    return place_sharded(read_sharded(path, template), template)


def load_sharded_extra_arrays(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The ``extra_arrays`` saved with the checkpoint directory ``path``."""
    manifest = read_sharded_manifest(path)
    if not manifest.get("extra"):
        return {}
    file = Path(path) / manifest["extra"]
    try:
        with np.load(file, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (EOFError, zipfile.BadZipFile, ValueError, KeyError) as err:
        raise CheckpointError(f"{file} is damaged ({type(err).__name__}: {err})") from err


# -- in a run directory --------------------------------------------------------------------------


class ShardedCheckpoints:
    """The sharded format for a run directory (``evotensor.run(..., checkpoint_format=
    ShardedCheckpoints(keep=2))`` or ``checkpoint_format="sharded"``): checkpoints are the directories
    ``checkpoint-<generation>/`` (8 digits), the ``keep`` newest are kept, a resume continues from
    the newest.

    The run directory drives the collective protocol: every process calls :meth:`stage` (writes its
    shards), all agree, process 0 calls :meth:`commit` (manifest, rename, older ones removed)."""

    name = "checkpoint-<generation>/"
    agree_before_commit = True  # every process writes files: all must succeed before the commit
    writes_padded = True  # a Padded leaf is written from each device's rows, never gathered

    def __init__(self, keep: int = 1):
        self.keep = check_int(keep, "keep", minimum=1)

    def __repr__(self) -> str:
        return f"ShardedCheckpoints(keep={self.keep})"

    @staticmethod
    def _target(run_path: Path, generation: int) -> Path:
        return run_path / f"checkpoint-{generation:08d}"

    @staticmethod
    def all(run_path: Path) -> list[tuple[int, Path]]:
        """``[(generation, directory)]`` of the finished checkpoints in ``run_path``, oldest first."""
        found = []
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            for entry in Path(run_path).iterdir():
                match = _STEP.match(entry.name)
                if match and entry.is_dir():
                    found.append((int(match["generation"]), entry))
        return sorted(found)

    def find(self, run_path: Path) -> Path | None:
        """The newest checkpoint directory in ``run_path``, or ``None``."""
        found = self.all(run_path)
        return found[-1][1] if found else None

    def stage(self, run_path: Path, tree: Any, generation: int) -> tuple[Path, list[dict[str, Any]]]:
        """Every process: write its shards of ``tree`` into the temporary directory of generation
        ``generation``'s checkpoint."""
        target = self._target(run_path, generation)
        return target, _stage(target, tree)

    def commit(
        self,
        staged: tuple[Path, list[dict[str, Any]]],
        metadata: dict[str, Any],
        extra_arrays: dict[str, Any],
    ) -> Path:
        """Process 0, after every process staged: write the manifest, rename the checkpoint into
        place, remove all but the ``keep`` newest."""
        target, leaves = staged
        _write_manifest(_temporary(target), leaves, jax.process_count(), metadata, extra_arrays)
        _move_into_place(_temporary(target), target)
        for _, old in self.all(target.parent)[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        return target

    def remove_all(self, run_path: Path) -> None:
        """Remove every checkpoint of this format in ``run_path`` (a fresh run starts there)."""
        for _, old in self.all(run_path):
            shutil.rmtree(old)

    @staticmethod
    def remove_stale(run_path: Path) -> None:
        """Remove the temporary directories that a killed write left in ``run_path``."""
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            for entry in Path(run_path).iterdir():
                if _STEP_TEMP.match(entry.name) and entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)

    @staticmethod
    def metadata(path: Path) -> dict[str, Any]:
        metadata = read_sharded_manifest(path).get("metadata")
        if not isinstance(metadata, dict):
            raise CheckpointError(f"{path / MANIFEST} is damaged (its metadata is not a JSON object)")
        return metadata

    @staticmethod
    def digest(path: Path) -> bytes:
        """What every process must read alike: the manifest's SHA-256 (it names every shard)."""
        return hashlib.sha256((path / MANIFEST).read_bytes()).digest()

    @staticmethod
    def read(path: Path, template: Any) -> Any:
        return read_sharded(path, template)

    @staticmethod
    def extra_arrays(path: Path) -> dict[str, np.ndarray]:
        return load_sharded_extra_arrays(path)

    @staticmethod
    def place(values: Any, template: Any) -> Any:
        return place_sharded(values, template)
