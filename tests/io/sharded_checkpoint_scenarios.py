"""Sharded checkpoints on several devices and processes: scenarios run by the multi-device launcher
(``tests/distributed/harness.py``), checked by ``tests/io/test_sharded_checkpoint.py``.

* ``round_trip`` (1 process, 4 devices): a pytree of every kind of leaf (split along one axis, a
  2 x 2 grid, replicated, typed keys of two implementations, bfloat16, 0-d, empty, NumPy, a Python
  number) saved from 4 devices and restored onto other layouts of 4, 2 and 1 devices.
* ``run_resume`` (1 process, 4 devices): ``evotensor.run(..., mesh=, checkpoint_format="sharded")``
  of a GP (forest split over the devices) stopped after its first chunk and resumed on 4, 2 and 1
  devices; QD (archive padded per device count) resumed on 2 devices and without a mesh.
* ``two_processes`` (2 processes x 2 devices): the same GP run over both processes' devices; each
  process's shard file holds exactly the forest rows of its own devices; resumed by both.

Results are SHA-256 fingerprints of every leaf's bytes, so the test compares runs bit for bit.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import evotensor
from evotensor.core.mesh import Padded
from evotensor.io.sharded_checkpoint import MANIFEST, load_sharded, read_sharded_manifest, save_sharded

GENERATIONS, CHUNK = 4, 2


def _host(leaf: Any) -> np.ndarray:
    """A leaf's whole value on this process (gathered across processes when it must be)."""
    if isinstance(leaf, jax.Array) and jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        leaf = jax.random.key_data(leaf)
    if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
        if leaf.is_fully_replicated:
            return np.asarray(leaf.addressable_data(0))
        return np.asarray(multihost_utils.process_allgather(leaf, tiled=True))
    return np.asarray(leaf)


def fingerprint(tree: Any) -> dict[str, str]:
    """``{tree path: sha256 of dtype, shape and bytes}`` of every leaf."""
    out = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        value = _host(leaf)
        digest = hashlib.sha256(f"{value.dtype}{value.shape}".encode() + value.tobytes()).hexdigest()
        out[jax.tree_util.keystr(path)] = digest
    return out


def _scratch() -> Path:
    return Path(tempfile.mkdtemp(dir=os.environ.get("EVOTENSOR_SCENARIO_TMP")))


# -- round trip ----------------------------------------------------------------------------------


def _tree(devices: list, layout: str) -> dict[str, Any]:
    """The test pytree laid out on ``devices``: ``"saved"`` (4 devices as written), ``"other"``
    (4 devices, every split leaf split another way) or ``"line"`` (split along a 1-d mesh)."""
    n = len(devices)
    line = jax.make_mesh((n,), ("pop",), devices=devices)
    grid = jax.make_mesh((2, 2), ("a", "b"), devices=devices) if n == 4 else line

    def on(mesh: Any, *spec: Any):
        return lambda x: jax.device_put(x, NamedSharding(mesh, P(*spec)))

    if layout == "saved":
        rows, cells, cols, keys = on(line, "pop"), on(grid, "a", "b"), on(line, None, "pop"), on(line, "pop")
    elif layout == "other":
        rows, cells, cols, keys = on(grid, ("b", "a")), on(grid, "b"), on(grid, "a", "b"), on(grid, "b")
    else:
        rows, cells, cols, keys = on(line, "pop"), on(line, None, "pop"), on(line, "pop"), on(line, "pop")
    everywhere = on(line)
    return {
        "rows": rows(jnp.arange(16 * 6, dtype=jnp.float32).reshape(16, 6) / 7),
        "cells": cells(jnp.arange(8 * 4, dtype=jnp.int32).reshape(8, 4) - 9),
        "cols": cols(jnp.linspace(-1, 1, 4 * 8, dtype=jnp.float32).reshape(4, 8)),
        "keys": keys(jax.random.split(jax.random.key(5), 8)),
        "rbg": everywhere(jax.random.key(6, impl="rbg")),
        "half": rows(jnp.linspace(0, 3, 16, dtype=jnp.bfloat16)),
        "replicated": everywhere(jnp.arange(5, dtype=jnp.uint8)),
        "scalar": everywhere(jnp.int32(-3)),
        "empty": everywhere(jnp.zeros((0, 3), jnp.float32)),
        "host": np.arange(3, dtype=np.int64),
        "number": 2.5,
    }


def _zeros_like(tree: dict[str, Any]) -> dict[str, Any]:
    """A template: ``tree``'s structure, dtypes and layout, other values (keys of other seeds)."""

    def zero(leaf: Any) -> Any:
        if isinstance(leaf, jax.Array) and jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            impl = jax.random.key_impl(leaf)
            fresh = (
                jax.random.split(jax.random.key(0, impl=impl), leaf.shape)
                if leaf.ndim
                else jax.random.key(0, impl=impl)
            )
            return jax.device_put(fresh, leaf.sharding)
        if isinstance(leaf, jax.Array):
            return jax.device_put(jnp.zeros_like(leaf), leaf.sharding)
        return np.zeros_like(leaf) if isinstance(leaf, np.ndarray) else 0.0

    return jax.tree_util.tree_map(zero, tree)


def scenario_round_trip() -> dict:
    devices = jax.devices()
    saved = _tree(devices[:4], "saved")
    path = _scratch() / "tree"
    save_sharded(path, saved, metadata={"note": "round trip"}, extra_arrays={"x": np.arange(3.0)})
    manifest = read_sharded_manifest(path)
    restored = {}
    for name, where, layout in (
        ("4 other", devices[:4], "other"),
        ("2", devices[2:4], "line"),
        ("1", devices[:1], "line"),
    ):
        template = _zeros_like(_tree(where, layout))
        loaded = load_sharded(path, template)
        same_layout = all(
            a.sharding == b.sharding
            for a, b in zip(jax.tree_util.tree_leaves(loaded), jax.tree_util.tree_leaves(template))
            if isinstance(a, jax.Array)
        )
        restored[name] = {"fingerprint": fingerprint(loaded), "layout_of_template": same_layout}
    return {
        "saved": fingerprint(saved),
        "restored": restored,
        "shards": {leaf["path"]: len(leaf["shards"]) for leaf in manifest["leaves"]},
        "files": sorted(p.name for p in path.iterdir()),
        "metadata": manifest["metadata"],
        "padded": _padded_round_trips(devices, path.parent),
    }


def _padded(devices: list, rows: int, fill: float, layout: str = "line") -> Padded:
    """``Padded`` of the first 13 rows of a ``[rows, 3]`` array split along its rows over
    ``devices`` (``layout="grid"``: over both axes of a 2 x 2 mesh), rows past 13 all ``fill``."""
    n = len(devices)
    value = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3) / 7
    value[13:] = fill
    if layout == "grid":
        sharding = NamedSharding(jax.make_mesh((2, 2), ("a", "b"), devices=devices), P(("b", "a")))
    else:
        sharding = NamedSharding(jax.make_mesh((n,), ("pop",), devices=devices), P("pop"))
    return Padded(jax.device_put(value, sharding), 13)


def _padded_round_trips(devices: list, root: Path) -> dict:
    """A leaf padded for 4, 2 and 1 devices (16, 14 and 13 rows; the padding rows hold -9, which must
    never be stored) saved, then restored onto ``Padded`` templates padded for 4 (another layout), 2
    and 1 devices (padding rows 5) and onto a plain ``[13, 3]`` template on one device. For each
    pair: whether the first 13 rows are the saved ones, the rest the template's, and the layout the
    template's; and for each save, the stored shards' row ranges."""
    saved = {4: devices[:4], 2: devices[2:4], 1: devices[:1]}
    targets = {
        "4 other": lambda: _padded(devices[:4], 16, 5.0, "grid"),
        "2": lambda: _padded(devices[:2], 14, 5.0),
        "1": lambda: _padded(devices[3:4], 13, 5.0),
        "plain": lambda: jax.device_put(np.zeros((13, 3), np.float32), devices[1]),
    }
    truth = np.arange(13 * 3, dtype=np.float32).reshape(13, 3) / 7
    out: dict[str, Any] = {}
    for n, where in saved.items():
        path = root / f"padded{n}"
        save_sharded(path, {"x": _padded(where, {4: 16, 2: 14, 1: 13}[n], -9.0)})
        leaf = read_sharded_manifest(path)["leaves"][0]
        out[f"{n} stored"] = {"shape": leaf["shape"], "rows": sorted(s["index"][0] for s in leaf["shards"])}
        for name, make in targets.items():
            template = make()
            loaded = load_sharded(path, {"x": template})["x"]
            ref = template.array if isinstance(template, Padded) else template
            value = np.asarray(loaded)
            out[f"{n} -> {name}"] = {
                "rows": int(value.shape[0]),
                "saved_rows": bool(np.array_equal(value[:13], truth)),
                "template_rows": bool(np.all(value[13:] == 5.0)),
                "layout_of_template": loaded.sharding == ref.sharding,
            }
    return out


# -- runs ----------------------------------------------------------------------------------------


class _Stop(Exception):
    pass


def _stop_after_first_chunk(info: dict) -> None:
    if info["generation"] >= CHUNK:
        raise _Stop


def _gp() -> tuple[Any, Any]:
    from evotensor.gp import GP, FunctionSet, SymbolicRegression

    rng = np.random.default_rng(7)
    X = rng.uniform(-2.0, 2.0, (64, 2)).astype(np.float32)
    y = (1.5 * X[:, 0] * X[:, 1] + np.sin(X[:, 0])).astype(np.float32)
    problem = SymbolicRegression(X, y, FunctionSet(("add", "sub", "mul", "sin")))
    return GP(24, problem.function_set, 2, max_len=16), problem


def _mesh(n: int) -> Any:
    return None if n == 1 else jax.make_mesh((n,), ("pop",), devices=jax.devices()[:n])


def _gp_run(mesh: Any, **kw: Any) -> Any:
    gp, problem = _gp()
    return evotensor.run(
        gp, problem, GENERATIONS, jax.random.key(3), mesh=mesh, chunk_size=CHUNK, progress=False, **kw
    )


def _stopped(run_dir: Path, mesh: Any, **kw: Any) -> None:
    try:
        _gp_run(mesh, run_dir=run_dir, checkpoint_format="sharded", callback=_stop_after_first_chunk, **kw)
    except _Stop:
        pass


def _summary(result: Any) -> dict:
    return {
        "state": fingerprint(result.state),
        "best": fingerprint(result.best_genotype),
        "history": fingerprint(result.history),
    }


def _shard_layout(checkpoint: Path) -> dict[str, dict[str, list]]:
    """``{leaf path: {file: [index, ...]}}`` of the leaves stored in more than one shard."""
    out: dict[str, dict[str, list]] = {}
    for leaf in read_sharded_manifest(checkpoint)["leaves"]:
        if len(leaf["shards"]) > 1:
            files: dict[str, list] = {}
            for shard in leaf["shards"]:
                files.setdefault(shard["file"], []).append(shard["index"])
            out[leaf["path"]] = files
    return out


def scenario_run_resume() -> dict:
    from tests.qd.mesh_scenarios import Bowl

    from evotensor.qd import GaussianEmitter, GridArchive, MAPElites

    root = _scratch()
    whole = _summary(_gp_run(_mesh(4)))
    _stopped(root / "run", _mesh(4))
    checkpoints = sorted(p.name for p in (root / "run").iterdir() if p.name.startswith("checkpoint"))
    layout = _shard_layout(root / "run" / checkpoints[-1])
    for n in (2, 1):
        shutil.copytree(root / "run", root / f"on{n}")
    resumed = {
        n: _summary(
            _gp_run(
                _mesh(n),
                run_dir=root / ("run" if n == 4 else f"on{n}"),
                resume=True,
                checkpoint_format="sharded",
            )
        )
        for n in (4, 2, 1)
    }

    def qd() -> Any:
        archive = GridArchive(solution_dim=4, dims=(7, 7), ranges=[(0, 1), (0, 1)])
        return MAPElites(archive, [GaussianEmitter(0.2, np.full(4, 0.5), batch_size=8, bounds=(0, 1))])

    kw = dict(chunk_size=CHUNK, progress=False, checkpoint_format="sharded")
    qd_whole = evotensor.run(
        qd(), Bowl(), GENERATIONS, jax.random.key(3), mesh=_mesh(4), chunk_size=CHUNK, progress=False
    )
    try:
        evotensor.run(
            qd(),
            Bowl(),
            GENERATIONS,
            jax.random.key(3),
            mesh=_mesh(4),
            run_dir=root / "qd",
            callback=_stop_after_first_chunk,
            **kw,
        )
    except _Stop:
        pass
    shutil.copytree(root / "qd", root / "qd1")
    qd_two = evotensor.run(
        qd(), Bowl(), GENERATIONS, jax.random.key(3), mesh=_mesh(2), run_dir=root / "qd", resume=True, **kw
    )
    qd_one = evotensor.run(
        qd(), Bowl(), GENERATIONS, jax.random.key(3), run_dir=root / "qd1", resume=True, **kw
    )
    me = qd()
    archives = [fingerprint(me.reported_archive(r.state)[1]) for r in (qd_whole, qd_two, qd_one)]
    shutil.rmtree(root, ignore_errors=True)
    return {
        "whole": whole,
        "resumed": {str(n): s for n, s in resumed.items()},
        "checkpoints": checkpoints,
        "layout": layout,
        "qd_archives": archives,
    }


def scenario_two_processes() -> dict:
    """Every process: the uninterrupted run, the stopped run's checkpoint as this process sees it,
    and the resumed run (both processes share the scratch directory)."""
    root = Path(os.environ["EVOTENSOR_SCENARIO_TMP"]) / "two_processes"
    mesh = _mesh(4)
    whole = _gp_run(mesh)
    _stopped(root / "run", mesh)
    checkpoint = root / "run" / f"checkpoint-{CHUNK:08d}"
    here = jax.process_index()
    # the forest rows this process's devices hold, from the live layout
    forest = jax.tree_util.tree_leaves(whole.state.forest)[0]
    rows = {
        tuple(index[0].indices(forest.shape[0])[:2])
        for device, index in forest.sharding.devices_indices_map(forest.shape).items()
        if device.process_index == here
    }
    processes = json.loads((checkpoint / MANIFEST).read_text())["processes"]
    layout = _shard_layout(checkpoint)  # read before the resumed run replaces the checkpoint
    files = sorted(p.name for p in checkpoint.iterdir())
    sizes = {p.name: p.stat().st_size for p in checkpoint.iterdir()}
    resumed = _gp_run(mesh, run_dir=root / "run", resume=True, checkpoint_format="sharded")
    failed = _one_process_fails(root / "tree", mesh)
    return {
        "one_process_fails": failed,
        "process": here,
        "whole": _summary(whole),
        "resumed": _summary(resumed),
        "layout": layout,
        "forest_rows_here": sorted(list(r) for r in rows),
        "files": files,
        "sizes": sizes,
        "manifest_processes": processes,
    }


def _one_process_fails(path: Path, mesh: Any) -> dict:
    """``save_sharded`` over both processes, then again with process 1 failing to write its shards:
    what each process raised, and that the first checkpoint is still there, whole."""
    from evotensor.io import sharded_checkpoint

    split = NamedSharding(mesh, P("pop"))
    first = {"x": jax.device_put(jnp.arange(8.0), split)}
    sharded_checkpoint.save_sharded(path, first, metadata={"n": 1})
    real = sharded_checkpoint._write_process_shards

    def full_disk(directory: Path, tree: Any) -> Any:
        if jax.process_index() == 1:
            raise OSError(28, "No space left on device", str(directory / "process-00001.bin"))
        return real(directory, tree)

    sharded_checkpoint._write_process_shards = full_disk
    try:
        sharded_checkpoint.save_sharded(path, {"x": jax.device_put(jnp.zeros(8), split)}, metadata={"n": 2})
        raised = None
    except Exception as err:  # each process reports what it raised
        raised = f"{type(err).__name__}: {err}"
    finally:
        sharded_checkpoint._write_process_shards = real
    back = sharded_checkpoint.load_sharded(path, first)
    return {
        "raised": raised,
        "metadata": read_sharded_manifest(path)["metadata"],
        "intact": fingerprint(back) == fingerprint(first),
    }
