"""Sharded checkpoints (evotensor.io.sharded_checkpoint) and their use by the run directory.

In this process (one device): a run written with ``checkpoint_format="sharded"`` resumes bit for bit,
keeps the ``keep`` newest checkpoints, switches formats, refuses another run's checkpoint; a write
that fails at any step leaves the previous checkpoint readable; a missing or short shard file or a
manifest that does not fit names the file and the leaf; any tiling of a leaf into shards reads back
any box exactly (hypothesis); a ``Padded`` leaf stores only its rows and restores onto any padding
(hypothesis). In a subprocess with 4 CPU devices (tests.distributed.harness): a pytree of every
kind of leaf saved from 4 devices restores bit for bit onto 4 (another layout), 2 and 1 devices,
and a ``Padded`` leaf padded for 4, 2 or 1 devices is written by the devices holding its rows and
restored onto every other padding. Slow: GP and QD runs resumed on 4, 2 and 1 devices, and two
processes that each write only their own shards."""

from __future__ import annotations

import json
import math
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.distributed import harness

import evotensor
from evotensor.core.checks import ArgumentError
from evotensor.core.mesh import Padded, portable_state, trim_padded
from evotensor.core.run import RunState
from evotensor.es.simple_es import SimpleES
from evotensor.io import sharded_checkpoint as sc
from evotensor.io.checkpoint import CheckpointError, SingleFileCheckpoints, load_pytree, save_pytree
from evotensor.io.rundir import RunDirectory, run_identity
from evotensor.problems import Sphere

SCENARIOS = "tests.io.sharded_checkpoint_scenarios"
ES = SimpleES(8, num_dims=3, sigma_init=1.0)
RUN = dict(chunk_size=2, progress=False)


class Stop(Exception):
    pass


def _run(tmp_path, generations=6, key=0, stop_at=None, **kw):
    def stop(info):
        if stop_at is not None and info["generation"] >= stop_at:
            raise Stop

    try:
        return evotensor.run(
            ES, Sphere(3), generations, jax.random.key(key), run_dir=tmp_path, callback=stop, **RUN, **kw
        )
    except Stop:
        return None


def _host(x):
    if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
        return jax.random.key_data(x)
    return np.asarray(x)


def _same(a, b):
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_array_equal(_host(x), _host(y))


@pytest.fixture(scope="module")
def whole():
    """The uninterrupted 6-generation run."""
    return evotensor.run(ES, Sphere(3), 6, jax.random.key(0), **RUN)


def _checkpoints(path):
    return [p.name for _, p in sc.ShardedCheckpoints.all(path)]


def test_a_sharded_run_resumes_bit_identically_and_keeps_the_newest(tmp_path, whole):
    _run(tmp_path, stop_at=4, checkpoint_format=sc.ShardedCheckpoints(keep=2))
    assert _checkpoints(tmp_path) == ["checkpoint-00000002", "checkpoint-00000004"]
    assert not (tmp_path / "checkpoint.npz").exists()
    assert RunDirectory.checkpoint_generation(tmp_path) == 4
    newest = tmp_path / "checkpoint-00000004"
    assert sorted(p.name for p in newest.iterdir()) == ["extra.npz", "manifest.json", "process-00000.bin"]
    manifest = json.loads((newest / "manifest.json").read_text())
    assert manifest["metadata"]["generation"] == 4 and manifest["metadata"]["identity"]["task"] == "run"
    resumed = _run(tmp_path, resume=True, checkpoint_format="sharded")
    _same(resumed.state, whole.state)
    _same(resumed.best_genotype, whole.best_genotype)
    for name in whole.history:
        np.testing.assert_array_equal(resumed.history[name], whole.history[name])
    assert _checkpoints(tmp_path) == ["checkpoint-00000006"]  # keep=1 now: older ones removed


def _directory(path, checkpoint_format="sharded", key=0, resume=False):
    """A run directory of ``ES`` on ``Sphere(3)`` with ``key``, started or (identity only) resumed."""
    directory = RunDirectory(path, task_name="t", checkpoint_format=checkpoint_format)
    run = dict(strategy=ES, problem=Sphere(3), params=ES.default_params(), key=jax.random.key(key))
    directory.identity = run_identity("t", {}, **run)
    if not resume:
        directory.start({}, **run)
    return directory


def _carry(generation):
    state = {"w": jnp.arange(6.0) * generation, "k": jax.random.key(generation), "n": np.arange(2)}
    return RunState(state, jnp.ones(3), jnp.float32(generation), jnp.int32(generation))


def _history(generation):
    return {"best_fitness": np.arange(float(generation))}


def _load(path, checkpoint_format="sharded", key=0):
    directory = _directory(path, checkpoint_format, key=key, resume=True)
    return directory.load_checkpoint(_carry(0), identity=directory.identity)


def test_formats_switch_on_resume_and_the_newest_wins(tmp_path):
    _directory(tmp_path, "single").save_checkpoint(_carry(2), _history(2))
    assert (tmp_path / "checkpoint.npz").exists() and not _checkpoints(tmp_path)
    carry, history = _load(tmp_path)  # a sharded run resumes from the single file
    assert int(carry.generation) == 2 and len(history["best_fitness"]) == 2
    _directory(tmp_path, resume=True).save_checkpoint(_carry(4), _history(4))
    assert _checkpoints(tmp_path) == ["checkpoint-00000004"]
    assert not (tmp_path / "checkpoint.npz").exists()  # the other format's (older) checkpoint is removed
    carry, _ = _load(tmp_path, "single")  # and a single-file run from the sharded one
    _same(carry, _carry(4))
    # both present (a crash between writing one and removing the other): the newer generation wins
    _directory(tmp_path / "b", "single").save_checkpoint(_carry(6), _history(6))
    shutil.copytree(tmp_path / "checkpoint-00000004", tmp_path / "b" / "checkpoint-00000004")
    assert RunDirectory.checkpoint_generation(tmp_path / "b") == 6
    assert int(_load(tmp_path / "b")[0].generation) == 6


def test_a_fresh_run_removes_sharded_checkpoints(tmp_path):
    _directory(tmp_path).save_checkpoint(_carry(2), _history(2))
    assert _checkpoints(tmp_path)
    _directory(tmp_path, "single", key=1)  # another run starts in the same directory
    assert not _checkpoints(tmp_path)
    with pytest.raises(FileNotFoundError, match="no checkpoint to resume from"):
        _load(tmp_path)


def test_refuses_a_checkpoint_of_another_run(tmp_path):
    _directory(tmp_path).save_checkpoint(_carry(2), _history(2))
    with pytest.raises(
        CheckpointError, match=r"checkpoint-00000002 belongs to another run: mismatch in its key"
    ):
        _load(tmp_path, key=1)


def _fail(monkeypatch, name):
    def failing(*args, **kwargs):
        if name == "_write_process_shards":  # half a shard file, then the failure
            (args[0] / "process-00000.bin").write_bytes(b"\1" * 10)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(sc, name, failing)


@pytest.mark.parametrize("step", ["_write_process_shards", "_write_manifest", "_move_into_place"])
def test_a_torn_write_leaves_the_previous_checkpoint(tmp_path, monkeypatch, step):
    _directory(tmp_path).save_checkpoint(_carry(2), _history(2))
    _fail(monkeypatch, step)
    with pytest.raises(OSError, match="No space left") as info:
        _directory(tmp_path, resume=True).save_checkpoint(_carry(4), _history(4))
    assert "checkpoint-00000002 (generation 2) is intact" in " ".join(info.value.__notes__)
    assert _checkpoints(tmp_path) == ["checkpoint-00000002"]
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == [".checkpoint-00000004.tmp"]
    monkeypatch.undo()
    carry, history = _load(tmp_path)  # the previous checkpoint, whole
    _same(carry, _carry(2))
    assert len(history["best_fitness"]) == 2
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # the leftover is removed
    _directory(tmp_path, resume=True).save_checkpoint(_carry(4), _history(4))  # and writing works again
    _same(_load(tmp_path)[0], _carry(4))


def test_rewriting_the_same_generation_replaces_it_whole(tmp_path):
    tree = {"a": jnp.arange(6.0), "b": np.ones(2)}
    sc.save_sharded(tmp_path / "c", tree, metadata={"n": 1})
    sc.save_sharded(tmp_path / "c", {"a": jnp.arange(6.0) * 2, "b": np.zeros(2)}, metadata={"n": 2})
    assert sc.read_sharded_manifest(tmp_path / "c")["metadata"] == {"n": 2}
    np.testing.assert_array_equal(sc.load_sharded(tmp_path / "c", tree)["a"], np.arange(6.0) * 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c"]


@pytest.fixture
def saved(tmp_path):
    tree = {"w": jnp.arange(12, dtype=jnp.float32).reshape(4, 3), "k": jax.random.key(1), "n": np.arange(2)}
    sc.save_sharded(tmp_path / "c", tree, extra_arrays={"h": np.arange(3)})
    return tmp_path / "c", tree


def test_round_trip_in_one_process(saved):
    path, tree = saved
    template = {"w": jnp.zeros((4, 3)), "k": jax.random.key(0), "n": np.zeros(2, np.int64)}
    loaded = sc.load_sharded(path, template)
    _same(loaded["w"], tree["w"])
    _same(jax.random.key_data(loaded["k"]), jax.random.key_data(tree["k"]))
    np.testing.assert_array_equal(sc.load_sharded_extra_arrays(path)["h"], np.arange(3))
    manifest = sc.read_sharded_manifest(path)
    assert (manifest["format"], manifest["version"], manifest["processes"]) == (sc.FORMAT, sc.VERSION, 1)
    leaves = {leaf["path"]: leaf for leaf in manifest["leaves"]}
    assert leaves["['k']"]["kind"] == f"key:{jax.random.key_impl(tree['k'])}"
    assert leaves["['w']"]["shards"] == [
        {
            "file": "process-00000.bin",
            "offset": leaves["['w']"]["shards"][0]["offset"],
            "index": [[0, 4], [0, 3]],
        }
    ]
    assert all(leaf["shards"][0]["offset"] % 64 == 0 for leaf in manifest["leaves"])


def test_a_missing_or_short_shard_file_names_the_file_and_the_leaf(saved):
    path, tree = saved
    data = path / "process-00000.bin"
    content = data.read_bytes()
    data.write_bytes(content[:-8])
    with pytest.raises(CheckpointError, match=r"process-00000.bin of leaf \['k'\] is truncated"):
        sc.read_sharded(path, tree)
    data.unlink()
    with pytest.raises(CheckpointError, match=r"shard file .*process-00000.bin of leaf \['k'\] is missing"):
        sc.read_sharded(path, tree)


def test_a_manifest_that_does_not_fit_names_the_leaf(saved):
    path, tree = saved
    manifest = json.loads((path / "manifest.json").read_text())
    with pytest.raises(
        CheckpointError, match=r"leaf \['w'\] has shape \(4, 3\) dtype float32, the template expects \(4, 4\)"
    ):
        sc.read_sharded(path, dict(tree, w=jnp.zeros((4, 4))))
    with pytest.raises(CheckpointError, match=r"leaf \['w'\] is stored as 'array', the template's is 'key"):
        sc.read_sharded(path, dict(tree, w=jax.random.key(0)))
    leaf = next(x for x in manifest["leaves"] if x["path"] == "['w']")
    leaf["shards"][0]["index"] = [[0, 2], [0, 3]]  # half the leaf lost
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(
        CheckpointError, match=r"manifest.json: the shards of leaf \['w'\] do not cover its shape \(4, 3\)"
    ):
        sc.read_sharded(path, tree)
    (path / "manifest.json").write_text("{not json")
    with pytest.raises(CheckpointError, match=r"manifest.json is damaged"):
        sc.read_sharded(path, tree)
    (path / "manifest.json").unlink()
    with pytest.raises(CheckpointError, match=r"not a complete sharded checkpoint: manifest.json is missing"):
        sc.read_sharded(path, tree)


def test_bad_arguments_are_named(tmp_path):
    with pytest.raises(ArgumentError, match="checkpoint_format must be one of .*'zip'"):
        _run(tmp_path, checkpoint_format="zip")
    with pytest.raises(ArgumentError, match=r"checkpoint_format must be .* \(it has no find"):
        _run(tmp_path, checkpoint_format=object())
    with pytest.raises(ArgumentError, match="keep must be an int >= 1, got 0"):
        sc.ShardedCheckpoints(keep=0)
    with pytest.raises(ArgumentError, match="checkpoint_format='sharded' needs run_dir"):
        evotensor.run(ES, Sphere(3), 2, jax.random.key(0), checkpoint_format="sharded", progress=False)
    assert not list(tmp_path.iterdir())  # refused before anything was written


def test_padded_leaves_are_checked_and_cut_only_when_asked(tmp_path):
    array = jnp.arange(12, dtype=jnp.float32).reshape(6, 2)
    leaf = Padded(array, 4)
    assert (leaf.shape, leaf.dtype, leaf.length) == ((4, 2), np.dtype(np.float32), 4)
    assert repr(leaf) == "Padded((4, 2) of (6, 2) float32)"
    np.testing.assert_array_equal(np.asarray(leaf), np.asarray(array)[:4])
    assert trim_padded({"a": leaf, "b": array})["b"] is array
    with pytest.raises(ArgumentError, match=r"length must be an int in \[0, 6\] \(array's rows\), got 7"):
        Padded(array, 7)
    with pytest.raises(ArgumentError, match="array must be an array of at least one axis, got float"):
        Padded(1.0, 0)
    with pytest.raises(ArgumentError, match="array must be a numeric array: PRNG key arrays"):
        Padded(jax.random.split(jax.random.key(0), 3), 2)

    class Hooked:  # a strategy whose layout pads: the hook returns Padded, nothing moved
        def portable_state(self, state):
            return {"cells": Padded(state["cells"], 4)}

    state = {"cells": array}
    assert portable_state(Hooked(), state, keep_padded=True)["cells"].array is array
    assert portable_state(Hooked(), state)["cells"].shape == (4, 2)  # cut for a whole-file format
    assert sc.ShardedCheckpoints.writes_padded and not getattr(SingleFileCheckpoints, "writes_padded", False)
    # a template whose value has other rows than the stored leaf is refused by name
    sc.save_sharded(tmp_path / "c", {"cells": leaf})
    with pytest.raises(CheckpointError, match=r"leaf \['cells'\] has shape \(4, 2\) .* expects \(5, 2\)"):
        sc.read_sharded(tmp_path / "c", {"cells": Padded(jnp.zeros((6, 2)), 5)})
    # a single-file checkpoint holds the value cut; read onto a Padded template it comes back as NumPy
    save_pytree(tmp_path / "c.npz", trim_padded({"cells": leaf}))
    back = load_pytree(tmp_path / "c.npz", {"cells": Padded(jnp.zeros((8, 2)), 4)})["cells"]
    assert isinstance(back, np.ndarray)
    np.testing.assert_array_equal(back, np.asarray(array)[:4])


@given(
    rows=st.integers(1, 7),
    cut=st.integers(0, 7),
    extra=st.integers(0, 3),
    width=st.integers(0, 2),
    dtype=st.sampled_from([np.float32, np.int8, np.bool_]),
    committed=st.booleans(),
)
def test_a_padded_leaf_stores_its_rows_and_restores_onto_any_padding(
    tmp_path_factory, rows, cut, extra, width, dtype, committed
):
    length = min(cut, rows)
    value = (np.arange(rows * width).reshape(rows, width) % 5).astype(dtype)
    path = tmp_path_factory.mktemp("padded") / "c"
    sc.save_sharded(path, {"x": Padded(jax.device_put(value), length)})
    leaf = sc.read_sharded_manifest(path)["leaves"][0]
    assert leaf["shape"] == [length, width]
    assert sum(math.prod(b - a for a, b in s["index"]) for s in leaf["shards"]) == length * width
    filler = np.ones((length + extra, width), dtype)
    template = jax.device_put(filler, jax.devices()[0] if committed else None)
    loaded = sc.load_sharded(path, {"x": Padded(template, length)})["x"]
    assert loaded.shape == (length + extra, width) and loaded.committed == committed
    np.testing.assert_array_equal(np.asarray(loaded)[:length], value[:length])
    np.testing.assert_array_equal(np.asarray(loaded)[length:], filler[length:])
    plain = sc.load_sharded(path, {"x": jax.device_put(np.zeros((length, width), dtype))})["x"]
    np.testing.assert_array_equal(np.asarray(plain), value[:length])


@st.composite
def _tilings(draw):
    """A shape, a tiling of it into boxes (cuts along every axis), and a box to read."""
    ndim = draw(st.integers(0, 3))
    shape = tuple(draw(st.integers(0, 6)) for _ in range(ndim))
    cuts = [sorted(set(draw(st.lists(st.integers(0, n), max_size=3))) | {0, n}) for n in shape]
    boxes = [()]
    for edges in cuts:
        spans = [(a, b) for a, b in zip(edges, edges[1:])] or [(0, 0)]
        boxes = [box + (span,) for box in boxes for span in spans]
    read = []
    for n in shape:
        a = draw(st.integers(0, n))
        read.append((a, draw(st.integers(a, n))))
    return shape, boxes, tuple(read)


@given(_tilings())
def test_any_tiling_reads_back_any_box(tmp_path_factory, case):
    shape, boxes, read = case
    directory = tmp_path_factory.mktemp("tiling")
    whole = np.arange(math.prod(shape), dtype=np.float32).reshape(shape) * 0.5
    files, shards, offset = {}, [], 0
    with open(directory / "process-00000.bin", "wb") as handle:
        for box in boxes:
            part = np.ascontiguousarray(whole[tuple(slice(a, b) for a, b in box)])
            handle.write(b"\0" * (-offset % 64))
            offset += -offset % 64
            handle.write(part.tobytes())
            shards.append({"file": "process-00000.bin", "offset": offset, "index": [list(b) for b in box]})
            offset += part.nbytes
    files["process-00000.bin"] = offset
    leaf = {"path": "<root>", "kind": "array", "shape": list(shape), "dtype": "float32", "shards": shards}
    manifest = {
        "format": sc.FORMAT,
        "version": sc.VERSION,
        "metadata": {},
        "processes": 1,
        "files": files,
        "extra": None,
        "leaves": [leaf],
    }
    (directory / "manifest.json").write_text(json.dumps(manifest))
    stored = sc.read_sharded(directory, np.zeros(shape, np.float32))
    np.testing.assert_array_equal(stored.read(read), whole[tuple(slice(a, b) for a, b in read)])
    np.testing.assert_array_equal(np.asarray(stored), whole)


def test_round_trip_from_4_devices_onto_4_2_and_1():
    spec = f"{SCENARIOS}:scenario_round_trip"
    result = harness.run_single([spec], devices=4)[spec]
    for name in ("4 other", "2", "1"):
        assert result["restored"][name]["fingerprint"] == result["saved"], name
        assert result["restored"][name]["layout_of_template"], name
    # each distinct shard once: split leaves 4 shards, replicated ones 1 (replica 0 only)
    assert result["shards"] == {
        "['cells']": 4, "['cols']": 4, "['empty']": 1, "['half']": 4, "['host']": 1, "['keys']": 4,
        "['number']": 1, "['rbg']": 1, "['replicated']": 1, "['rows']": 4, "['scalar']": 1,
    }  # fmt: skip
    assert result["files"] == ["extra.npz", "manifest.json", "process-00000.bin"]
    # Padded leaves (a QD archive padded per device count): each device's rows below the length
    # stored from that device (the padding never), restored onto any padding and layout
    padded = result["padded"]
    assert padded["4 stored"] == {"shape": [13, 3], "rows": [[0, 4], [4, 8], [8, 12], [12, 13]]}
    assert padded["2 stored"] == {"shape": [13, 3], "rows": [[0, 7], [7, 13]]}
    assert padded["1 stored"] == {"shape": [13, 3], "rows": [[0, 13]]}
    rows = {"4 other": 16, "2": 14, "1": 13, "plain": 13}
    for saved in (4, 2, 1):
        for target, n in rows.items():
            expected = dict(rows=n, saved_rows=True, template_rows=True, layout_of_template=True)
            assert padded[f"{saved} -> {target}"] == expected, (saved, target)


@pytest.mark.slow
def test_runs_resume_bit_identically_on_4_2_and_1_devices():
    spec = f"{SCENARIOS}:scenario_run_resume"
    result = harness.run_single([spec], devices=4, timeout=900)[spec]
    for n in ("4", "2", "1"):
        assert result["resumed"][n] == result["whole"], n
    assert result["checkpoints"] == ["checkpoint-00000002"]
    forest = result["layout"][".strategy_state.forest.opcode"]["process-00000.bin"]
    assert sorted(index[0] for index in forest) == [[0, 6], [6, 12], [12, 18], [18, 24]]  # never gathered
    assert result["qd_archives"][1] == result["qd_archives"][0] == result["qd_archives"][2]


@pytest.mark.slow
def test_two_processes_write_only_their_own_shards_and_resume():
    spec = f"{SCENARIOS}:scenario_two_processes"
    results = [
        r[spec] for r in harness.run_multiprocess([spec], processes=2, devices_per_process=2, timeout=900)
    ]
    assert [r["process"] for r in results] == [0, 1]
    for r in results:
        assert r["resumed"] == r["whole"]
        assert r["manifest_processes"] == 2
        assert r["files"] == ["extra.npz", "manifest.json", "process-00000.bin", "process-00001.bin"]
    layout = results[0]["layout"]
    assert layout, "no leaf was stored in several shards"
    for path, files in layout.items():
        for p, r in enumerate(results):
            rows = sorted(index[0] for index in files[f"process-{p:05d}.bin"])
            assert rows == r["forest_rows_here"], (path, p)  # only its own devices' rows
    # a process that cannot write its shards: it raises its error, the other ProcessFailure, and the
    # previous checkpoint stays whole
    failed = [r["one_process_fails"] for r in results]
    assert failed[1]["raised"].startswith("OSError: [Errno 28] No space left on device")
    assert failed[0]["raised"].startswith("ProcessFailure: writing the shards of ")
    assert "process 1: OSError" in failed[0]["raised"]
    assert all(f["metadata"] == {"n": 1} and f["intact"] for f in failed)
    sizes = results[0]["sizes"]
    assert sizes["process-00001.bin"] > 0 and sizes["process-00000.bin"] > 0
