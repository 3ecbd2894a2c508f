import errno
import json
import os
import re
import stat
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import evotensor
from evotensor.es.simple_es import SimpleES
from evotensor.io import atomic
from evotensor.io.checkpoint import CheckpointError
from evotensor.io.rundir import MetricsError, RunDirectory, read_metrics
from evotensor.problems import Rastrigin, Sphere


class Interrupt(Exception):
    pass


def _stop_after(generation):
    def callback(info):
        if info["generation"] >= generation:
            raise Interrupt

    return callback


def _leaves_equal(a, b):
    return all(
        np.array_equal(np.asarray(x), np.asarray(y))
        for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b))
    )


def test_run_directory_contents(tmp_path):
    es = SimpleES(10, num_dims=3, sigma_init=2.0)
    result = evotensor.run(
        es,
        Rastrigin(3),
        12,
        jax.random.key(0),
        run_dir=tmp_path,
        chunk_size=5,
        config={"note": "x"},
        task_name="demo",
        progress=False,
    )
    for name in (
        "config.json",
        "metrics.csv",
        "checkpoint.npz",
        "best.npz",
        "best.txt",
        "best.json",
        "fitness.png",
    ):
        assert (tmp_path / name).exists(), name
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["task"] == "demo" and config["config"] == {"note": "x"}
    assert config["strategy"]["population_size"] == 10
    assert "['sigma_init']" in "".join(config["params"]) or any("sigma_init" in k for k in config["params"])
    assert config["versions"]["jax"] and config["device"]["backend"] == jax.default_backend()
    metrics = read_metrics(tmp_path / "metrics.csv")
    np.testing.assert_array_equal(metrics["generation"], np.arange(1, 13))
    np.testing.assert_allclose(metrics["best_fitness"], result.history["best_fitness"], rtol=1e-7)
    assert json.loads((tmp_path / "best.json").read_text())["best_fitness"] == pytest.approx(
        result.best_fitness
    )
    assert RunDirectory.checkpoint_generation(tmp_path) == 12


def test_resume_after_interruption_is_bit_identical(tmp_path):
    es, problem, key = SimpleES(10, num_dims=3, sigma_init=2.0), Rastrigin(3), jax.random.key(4)
    full = evotensor.run(es, problem, 30, key, chunk_size=4)

    with pytest.raises(Interrupt):
        evotensor.run(
            es, problem, 30, key, run_dir=tmp_path, chunk_size=4, callback=_stop_after(12), progress=False
        )
    assert RunDirectory.checkpoint_generation(tmp_path) == 12
    # a crash could leave metric rows past the checkpoint: resume must drop them
    with (tmp_path / "metrics.csv").open("a") as handle:
        handle.write("13,999,999,999,999,0,1\n")

    resumed = evotensor.run(es, problem, 30, key, run_dir=tmp_path, chunk_size=7, resume=True, progress=False)
    assert _leaves_equal(resumed.state, full.state)
    assert _leaves_equal(resumed.best_genotype, full.best_genotype)
    assert resumed.best_fitness == full.best_fitness
    for name in full.history:
        np.testing.assert_array_equal(resumed.history[name], full.history[name])
    metrics = read_metrics(tmp_path / "metrics.csv")
    np.testing.assert_array_equal(metrics["generation"], np.arange(1, 31))


def test_resume_without_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        evotensor.run(
            SimpleES(8, num_dims=2), Rastrigin(2), 5, jax.random.key(0), run_dir=tmp_path, resume=True
        )


# ---- run identity, stale files, write failures -----------------------------------------------------


def _run(tmp_path, es=None, problem=None, key=None, **kwargs):
    es = es if es is not None else SimpleES(10, num_dims=3, sigma_init=2.0)
    problem = problem if problem is not None else Rastrigin(3)
    key = key if key is not None else jax.random.key(4)
    return evotensor.run(
        es, problem, kwargs.pop("generations", 8), key, run_dir=tmp_path, progress=False, **kwargs
    )


def test_resume_refuses_a_checkpoint_of_another_run(tmp_path):
    _run(tmp_path, generations=4, chunk_size=4, config={"note": "x"})
    es = SimpleES(10, num_dims=3, sigma_init=2.0)
    changes = {
        "key": {"key": jax.random.key(5)},
        "params": {"params": es.default_params().replace(c_sigma=jnp.float32(0.2))},
        "strategy": {"es": SimpleES(12, num_dims=3, sigma_init=2.0)},
        "problem": {"problem": Sphere(3)},  # the same state shapes: only the identity tells
        "task": {"task_name": "other"},
        "config": {"config": {"note": "y"}},
    }
    for part, change in changes.items():
        kwargs = {"config": {"note": "x"}, **change}
        with pytest.raises(CheckpointError, match="belongs to another run") as info:
            _run(tmp_path, generations=8, chunk_size=4, resume=True, **kwargs)
        what = {"key": "key (seed)", "params": "strategy params"}.get(part, part)
        assert f"mismatch in its {what} (" in str(info.value), part
        assert str(tmp_path / "checkpoint.npz") in str(info.value)
    # the same run resumes: generations (also inside config) and the chunking may change
    resumed = _run(tmp_path, generations=8, chunk_size=2, resume=True, config={"note": "x", "generations": 9})
    assert resumed.generations == 8


def test_fresh_run_killed_before_its_first_checkpoint_cannot_resume_the_previous_runs_state(
    tmp_path, monkeypatch
):
    _run(tmp_path, generations=4, chunk_size=2)  # run A leaves checkpoint.npz, best.*, fitness.png
    assert (tmp_path / "best.json").exists()

    def killed(self, carry, history):
        raise KeyboardInterrupt  # run B dies before its first checkpoint

    monkeypatch.setattr(RunDirectory, "save_checkpoint", killed)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, key=jax.random.key(99), generations=4, chunk_size=2)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "metrics.csv"]
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        _run(tmp_path, key=jax.random.key(99), generations=4, resume=True)


def test_foreign_checkpoint_copied_into_a_run_directory_is_refused(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _run(a, generations=4, chunk_size=2)
    _run(b, key=jax.random.key(7), generations=2, chunk_size=2)
    (b / "checkpoint.npz").write_bytes((a / "checkpoint.npz").read_bytes())
    with pytest.raises(
        CheckpointError, match=r"mismatch in its key \(seed\) \(key_data\[1\]: checkpoint 4, this run 7\)"
    ):
        _run(b, key=jax.random.key(7), generations=6, resume=True)


def test_checkpoint_without_identity_is_refused(tmp_path):
    _run(tmp_path, generations=2, chunk_size=2)
    path = tmp_path / "checkpoint.npz"
    arrays = dict(np.load(path))
    meta = json.loads(bytes(arrays["__meta__"]).decode())
    del meta["metadata"]["identity"]
    arrays["__meta__"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    np.savez(path, **arrays)
    with pytest.raises(CheckpointError, match="carries no run identity"):
        _run(tmp_path, generations=4, resume=True)


def test_damaged_checkpoint_on_resume_names_the_file(tmp_path):
    _run(tmp_path, generations=2, chunk_size=2)
    good = (tmp_path / "checkpoint.npz").read_bytes()
    for damage in (b"", good[: len(good) // 2], b"\x80\x04random bytes" * 9):
        (tmp_path / "checkpoint.npz").write_bytes(damage)
        with pytest.raises(CheckpointError, match=r"checkpoint\.npz is damaged"):
            _run(tmp_path, generations=4, resume=True)


def test_stale_temp_files_of_a_killed_write_are_removed_by_the_next_run(tmp_path):
    _run(tmp_path, generations=2, chunk_size=2)
    stale = tmp_path / ".checkpoint.npz.a1b2c3d4e5f60718.tmp"
    stale.write_bytes(b"half a checkpoint")
    older = tmp_path / ".config.json.x_1y2z3w.tmp"  # tempfile.mkstemp's names of earlier versions
    older.write_text("{")
    mine = tmp_path / "notes.txt"
    mine.write_text("kept")
    _run(tmp_path, generations=4, chunk_size=2, resume=True)
    assert not stale.exists() and not older.exists() and mine.read_text() == "kept"


def test_run_files_honour_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        _run(tmp_path, generations=2, chunk_size=2)
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    assert modes == dict.fromkeys(modes, 0o644) and "checkpoint.npz" in modes and "config.json" in modes


def test_full_disk_keeps_the_last_checkpoint_and_the_run_resumes_bit_identically(tmp_path, monkeypatch):
    es, problem, key = SimpleES(10, num_dims=3, sigma_init=2.0), Rastrigin(3), jax.random.key(4)
    full = evotensor.run(es, problem, 12, key, chunk_size=4)
    real = atomic.atomic_open
    writes = []

    def disk_full_at_second_checkpoint(path, mode="wb"):
        writes.append(Path(path).name)
        if writes.count("checkpoint.npz") == 2 and Path(path).name == "checkpoint.npz":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(path, mode)

    monkeypatch.setattr(atomic, "atomic_open", disk_full_at_second_checkpoint)
    with pytest.raises(OSError) as info:
        evotensor.run(es, problem, 12, key, run_dir=tmp_path, chunk_size=4, progress=False)
    monkeypatch.undo()
    err = info.value
    assert err.errno == errno.ENOSPC and err.filename == str(tmp_path / "checkpoint.npz")
    assert any("generation 4) is intact" in note and "resume=True" in note for note in err.__notes__)
    assert RunDirectory.checkpoint_generation(tmp_path) == 4
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    # space is back
    resumed = evotensor.run(es, problem, 12, key, run_dir=tmp_path, chunk_size=4, resume=True, progress=False)
    assert _leaves_equal(resumed.state, full.state) and resumed.best_fitness == full.best_fitness
    for name in full.history:
        np.testing.assert_array_equal(resumed.history[name], full.history[name])
    np.testing.assert_array_equal(read_metrics(tmp_path / "metrics.csv")["generation"], np.arange(1, 13))


def test_run_dir_that_is_a_file_is_a_clear_error(tmp_path):
    (tmp_path / "file").write_text("x")
    for path in (tmp_path / "file", tmp_path / "file" / "sub"):
        with pytest.raises(NotADirectoryError) as info:
            _run(path, generations=2)
        assert info.value.filename == str(path)


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "line 1 must be a header"),
        ("gen,best\n1,2\n", "line 1 must be a header"),
        ("generation,best\n1,2\n2\n", "line 3: 1 fields, the header has 2"),
        ("generation,best\n1,abc\n", "line 2: best 'abc' is not a number"),
        (b"generation,best\n1,\xff\n", "not UTF-8"),
    ],
)
def test_read_metrics_names_the_file_and_line_of_damage(tmp_path, text, message):
    path = tmp_path / "metrics.csv"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(MetricsError, match=re.escape(message)) as info:
        read_metrics(path)
    assert str(path) in str(info.value)


def test_read_metrics_leaves_out_a_row_cut_short_by_a_kill(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("generation,best\n1,2.5\n2,1.5\n3,1.")
    np.testing.assert_array_equal(read_metrics(path)["best"], [2.5, 1.5])
