"""The run directory in a multi-process job. In this process: a process that does not write touches
nothing, a write error is held until the next point where all processes agree, checkpoints hold
global values placed onto the template's layout, and the collectives are plain local operations with
one process. In two processes x 2 devices (tests.distributed.harness): a state split over both
processes' devices is checkpointed collectively and loaded back onto other layouts, and a run
directory that process 0 cannot create stops both processes."""

import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from tests.distributed import harness

from evotensor.es.simple_es import SimpleES
from evotensor.io import multihost
from evotensor.io.checkpoint import CheckpointError, load_pytree, place_like, read_pytree, save_pytree
from evotensor.io.rundir import RunDirectory
from evotensor.problems import Sphere

ES = SimpleES(8, num_dims=3, sigma_init=1.0)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished 4-generation run and its directory (written by this, the only, process)."""
    import evotensor

    target = tmp_path_factory.mktemp("multihost") / "run"
    result = evotensor.run(ES, Sphere(3), 4, jax.random.key(0), chunk_size=2, progress=False, run_dir=target)
    return result, target


def test_one_process_collectives_are_local():
    tree = {"a": jnp.arange(3.0), "k": jax.random.key(1), "n": np.ones(2), "s": 3}
    out = multihost.gather_to_host(tree)
    assert all(x is y for x, y in zip(jax.tree_util.tree_leaves(out), jax.tree_util.tree_leaves(tree)))
    assert multihost.agree(None) == {} and multihost.agree("disk full") == {0: "disk full"}
    assert multihost.broadcast_text("runs/x") == "runs/x" and multihost.differing_processes(b"d") == []
    assert multihost.is_main_process()
    multihost.raise_for_failures({0: "mine"}, "writing")  # a process's own failure: it raises its own error
    with pytest.raises(
        multihost.ProcessFailure, match=r"writing failed on another process .*process 1: disk full"
    ):
        multihost.raise_for_failures({1: "disk full"}, "writing")


@given(st.text(max_size=300))
def test_agreement_messages_survive_the_round_trip(text):
    if len(text.encode()) <= 1024:
        assert multihost._decode(multihost._encode(text)) == text
    else:
        assert len(multihost._decode(multihost._encode(text)).encode()) <= 1024 + 3


def test_a_process_that_does_not_write_touches_nothing(tmp_path, finished):
    result, written = finished
    target = tmp_path / "shared" / "run"
    quiet = RunDirectory(target, task_name="t", writes=False)
    assert not target.exists()
    quiet.start({}, strategy=ES, problem=Sphere(3), params=ES.default_params(), key=jax.random.key(0))
    quiet.append_metrics({"best_fitness": np.ones(2)}, first_generation=0)
    quiet.finish(result)
    assert not target.exists()
    # a directory written by process 0 is read by the others without rewriting anything
    shared = tmp_path / "copy"
    shutil.copytree(written, shared)
    before = {p.name: p.stat().st_mtime_ns for p in shared.iterdir()}
    (shared / "metrics.csv").write_text((shared / "metrics.csv").read_text() + "9,1,1,1,1,1,1\n")
    after_edit = (shared / "metrics.csv").read_bytes()
    from evotensor.core.run import Loop

    template, _ = jax.jit(Loop(ES, Sphere(3)).init)(jax.random.key(0), ES.default_params())
    carry, history = RunDirectory(shared, task_name="run", writes=False).load_checkpoint(template)
    assert int(carry.generation) == 4 and len(history["best_fitness"]) == 4
    assert (shared / "metrics.csv").read_bytes() == after_edit  # only process 0 rebuilds it
    assert {p.name: p.stat().st_mtime_ns for p in shared.iterdir() if p.name != "metrics.csv"} == {
        k: v for k, v in before.items() if k != "metrics.csv"
    }


def test_a_metrics_write_error_is_raised_at_the_next_agreement(tmp_path, finished):
    directory = RunDirectory(tmp_path / "run", task_name="t")
    directory.processes = 2  # as in a job of two processes: errors wait for the next agreement point
    directory.start({}, strategy=ES, problem=Sphere(3), params=ES.default_params(), key=jax.random.key(0))
    (tmp_path / "run" / "metrics.csv").mkdir()  # appending to it fails
    directory.append_metrics({"best_fitness": np.ones(2)}, first_generation=0)  # held, not raised
    result, _ = finished
    from evotensor.core.run import RunState

    carry = RunState(result.state, result.best_genotype, jnp.float32(1.0), jnp.int32(2))
    with pytest.raises(IsADirectoryError) as caught:
        directory.save_checkpoint(carry, {"best_fitness": np.ones(2)})
    assert caught.value.filename == str(tmp_path / "run" / "metrics.csv")
    assert not (tmp_path / "run" / "checkpoint.npz").exists()  # nothing written after the failure


def test_checkpoints_hold_global_values_placed_like_the_template(tmp_path):
    path = tmp_path / "c.npz"
    tree = {"x": jnp.arange(8.0).reshape(4, 2), "k": jax.random.key(3, impl="rbg"), "n": np.arange(2)}
    save_pytree(path, tree)
    mesh = Mesh(np.array(jax.devices()[:1]), ("pop",))
    template = {
        "x": jax.device_put(jnp.zeros((4, 2)), NamedSharding(mesh, P("pop"))),
        "k": jax.random.key(0, impl="rbg"),
        "n": np.zeros(2, np.int64),
    }
    host = read_pytree(path, template)
    assert all(isinstance(v, np.ndarray) for v in jax.tree_util.tree_leaves(host))
    assert host["k"].dtype == np.uint32  # a key is read as its raw data, wrapped again on placing
    placed = place_like(host, template)
    np.testing.assert_array_equal(placed["x"], tree["x"])
    assert str(jax.random.key_impl(placed["k"])) == str(jax.random.key_impl(tree["k"]))
    np.testing.assert_array_equal(jax.random.key_data(placed["k"]), jax.random.key_data(tree["k"]))
    assert isinstance(placed["n"], np.ndarray)
    with pytest.raises(
        CheckpointError, match=r"leaf \['k'\] is a .*rbg.* key .* the template's a .*threefry"
    ):
        load_pytree(path, {**template, "k": jax.random.key(0)})
    with pytest.raises(CheckpointError, match=r"leaf \['x'\] is not a PRNG key, the template's is"):
        load_pytree(path, {**template, "x": jax.random.key(0)})


def scenario_sharded_checkpoint() -> dict:
    """Two processes x 2 devices: a state whose arrays are split over all 4 devices (so over both
    processes) is saved collectively and loaded back onto two other layouts."""
    from pathlib import Path

    from evotensor.core.run import RunState
    from evotensor.distributed import global_mesh, process_index

    mesh = global_mesh()
    split, whole = NamedSharding(mesh, P("pop")), NamedSharding(mesh, P())
    x = np.arange(24, dtype=np.float32).reshape(8, 3) / 7
    keys = jax.random.key_data(jax.random.split(jax.random.key(5), 8))

    def put(value, sharding):
        return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])

    state = {"x": put(x, split), "k": jax.random.wrap_key_data(put(np.asarray(keys), split))}
    carry = RunState(state, put(x[0], whole), put(np.float32(0.5), whole), put(np.int32(3), whole))
    path = Path(os.environ[harness.SCRATCH_VARIABLE]) / "run"
    directory = RunDirectory(path, task_name="t")
    directory.identity = {"task": "t"}
    directory.save_checkpoint(carry, {"best_fitness": np.arange(3.0)})
    out = {"process": process_index(), "files": sorted(p.name for p in path.iterdir())}
    for name, layout in (("same", split), ("replicated", whole)):
        template = RunState({"x": put(np.zeros_like(x), layout), "k": state["k"]}, carry.best_genotype,
                            carry.best_fitness, carry.generation)  # fmt: skip
        loaded, history = RunDirectory(path, task_name="t").load_checkpoint(template)
        shards = loaded.strategy_state["x"].addressable_shards
        out[name] = {
            "layout": all(
                s.data.sharding == t.data.sharding
                for s, t in zip(shards, template.strategy_state["x"].addressable_shards)
            ),
            "values": all(np.array_equal(np.asarray(s.data), x[s.index]) for s in shards),
            "keys": all(
                np.array_equal(np.asarray(jax.random.key_data(s.data)), keys[s.index])
                for s in loaded.strategy_state["k"].addressable_shards
            ),  # fmt: skip
            "generation": int(np.asarray(loaded.generation.addressable_data(0))),
            "history": history["best_fitness"].tolist(),
        }
    main = process_index() == 0
    out["text"] = multihost.broadcast_text("runs/from-0" if main else None)
    out["differ"] = multihost.differing_processes(b"same" if main else b"other")
    out["agree"] = multihost.agree(None if main else "disk full")
    with np.load(path / "checkpoint.npz") as saved:  # what process 0 wrote: the whole arrays
        out["saved_x"] = bool(np.array_equal(saved["00000"], x) or np.array_equal(saved["00001"], x))
    return out


def scenario_unwritable_run_directory() -> dict:
    """Two processes; process 0 cannot create the run directory (its path is a file)."""
    from pathlib import Path

    path = Path(os.environ["EVOTENSOR_TEST_BLOCKER"])
    try:
        RunDirectory(path / "run", task_name="t")
    except Exception as err:  # noqa: BLE001 - the outcome is the result
        return {"type": type(err).__name__, "message": str(err)}
    return {"type": None, "message": ""}


def test_two_processes_checkpoint_sharded_state_and_stop_together(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    sharded, blocked = (
        f"{__name__}:scenario_sharded_checkpoint",
        f"{__name__}:scenario_unwritable_run_directory",
    )
    results = harness.run_multiprocess([sharded, blocked], env={"EVOTENSOR_TEST_BLOCKER": str(blocker)})
    for process, result in enumerate(r[sharded] for r in results):
        assert result["process"] == process and result["saved_x"]
        assert result["files"] == ["checkpoint.npz"]
        assert result["text"] == "runs/from-0" and result["differ"] == [1]
        assert result["agree"] == {"1": "disk full"}  # (JSON keys)
        for layout in ("same", "replicated"):
            assert result[layout] == {
                "layout": True,
                "values": True,
                "keys": True,
                "generation": 3,
                "history": [0.0, 1.0, 2.0],
            }, (process, layout)
    first, second = (r[blocked] for r in results)
    assert first["type"] == "NotADirectoryError"
    assert second["type"] == "ProcessFailure"
    assert (
        "creating the run directory" in second["message"]
        and "process 0: NotADirectoryError" in second["message"]
    )
