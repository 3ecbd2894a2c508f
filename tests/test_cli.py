"""The CLI end to end, in subprocesses (as a user runs it)."""

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from evotensor.io.rundir import read_metrics


def evotensor(*args, cwd=None):
    env = dict(
        os.environ, EVOTENSOR_CACHE_DIR=os.environ.get("EVOTENSOR_CACHE_DIR", "/tmp/evotensor-test-cache")
    )
    return subprocess.run(
        [sys.executable, "-m", "evotensor.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
    )


def test_list_shows_tasks():
    out = evotensor("list")
    assert out.returncode == 0
    assert "es-rastrigin" in out.stdout and "es-sphere" in out.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "no-such-task"], "unknown task 'no-such-task'"),
        (["run", "es-sphere", "--set", "bogus=1"], "no option(s) bogus"),
        (["run", "es-sphere", "--set", "dims=-3"], "dims must be a positive int"),
        (["run", "es-sphere", "--set", "strategy=nope"], "strategy must be one of"),
        (["run", "es-sphere", "--set", "novalue"], "KEY=VALUE"),
        (["run", "es-sphere", "--config", "/nonexistent.toml"], "file not found"),
        (["run", "es-sphere", "--pop", "abc"], "--pop"),
        (["run", "es-sphere", "--resume", "/nonexistent-run"], "not a run directory"),
        (["show", "/nonexistent-run"], "not a run directory"),
        (["frobnicate"], "No such command"),
        (
            ["run", "es-sphere", "--checkpoint-format", "zip"],
            "--checkpoint-format must be 'single' or 'sharded'",
        ),
    ],
)
def test_bad_input_exits_nonzero_without_traceback(args, message):
    out = evotensor(*args)
    assert out.returncode != 0
    assert message in out.stderr + out.stdout
    assert "Traceback" not in out.stderr + out.stdout


def test_run_show_and_resume(tmp_path):
    run_dir = tmp_path / "run"
    config = tmp_path / "c.toml"
    config.write_text('dims = 4\nstrategy = "simple_es"\n')
    out = evotensor(
        "run",
        "es-sphere",
        "--config",
        str(config),
        "--generations",
        "8",
        "--chunk-size",
        "4",
        "--out",
        str(run_dir),
        "--seed",
        "3",
        "--checkpoint-format",
        "sharded",
    )
    assert out.returncode == 0, out.stderr
    assert "best fitness" in out.stdout
    assert (run_dir / "checkpoint-00000008" / "manifest.json").is_file()
    assert not (run_dir / "checkpoint.npz").exists()
    recorded = json.loads((run_dir / "config.json").read_text())
    assert recorded["config"]["dims"] == 4 and recorded["config"]["seed"] == 3
    first = read_metrics(run_dir / "metrics.csv")
    assert len(first["generation"]) == 8

    # continue the same run to 16 generations (reading the sharded checkpoint, writing the default
    # single file), then compare with a straight 16-generation run
    out = evotensor("run", "es-sphere", "--resume", str(run_dir), "--generations", "16", "--chunk-size", "4")
    assert out.returncode == 0, out.stderr
    assert (run_dir / "checkpoint.npz").is_file()
    assert not list(run_dir.glob("checkpoint-*"))
    straight = tmp_path / "straight"
    out = evotensor(
        "run",
        "es-sphere",
        "--config",
        str(config),
        "--generations",
        "16",
        "--out",
        str(straight),
        "--seed",
        "3",
        "--quiet",
    )
    assert out.returncode == 0, out.stderr
    a, b = read_metrics(run_dir / "metrics.csv"), read_metrics(straight / "metrics.csv")
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])

    shown = evotensor("show", str(run_dir))
    assert shown.returncode == 0 and "fitness.png" in shown.stdout and "es-sphere" in shown.stdout

    refused = evotensor("run", "es-sphere", "--resume", str(run_dir), "--seed", "9")
    assert refused.returncode == 2 and "cannot change when resuming" in refused.stderr


def test_full_disk_through_the_cli_entry_then_resume_is_bit_identical(tmp_path, monkeypatch, capsys):
    """ENOSPC at the second checkpoint: one error line saying the first checkpoint is intact and how
    to resume; once space is back the resumed run equals an uninterrupted one bit for bit."""
    from evotensor import cli
    from evotensor.io import atomic

    monkeypatch.setattr(cli, "_configure_jax", lambda: None)  # keep this process's JAX settings
    real = atomic.atomic_open
    checkpoints = []

    def disk_full_at_second_checkpoint(path, mode="wb"):
        if Path(path).name == "checkpoint.npz":
            checkpoints.append(path)
            if len(checkpoints) == 2:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(path, mode)

    def main(*args):
        with pytest.raises(SystemExit) as exit_:
            cli.main(["run", "es-sphere", "--set", "dims=2", "--chunk-size", "2", "--quiet", *args])
        return exit_.value.code, capsys.readouterr()

    run_dir, straight = tmp_path / "run", tmp_path / "straight"
    monkeypatch.setattr(atomic, "atomic_open", disk_full_at_second_checkpoint)
    code, out = main("--generations", "6", "--out", str(run_dir))
    monkeypatch.setattr(atomic, "atomic_open", real)
    assert code == 2 and "Traceback" not in out.err
    last = out.err.strip().splitlines()[-1]
    assert last == (
        f"error: No space left on device ({run_dir / 'checkpoint.npz'}); resume with "
        f"`evotensor run es-sphere --resume {run_dir}` (its checkpoint of generation 2 is intact)"
    )
    assert [p.name for p in run_dir.iterdir() if p.name.endswith(".tmp")] == []

    code, out = main("--resume", str(run_dir))  # space is back
    assert code == 0, out.err
    code, out = main("--generations", "6", "--out", str(straight))
    assert code == 0, out.err
    a, b = read_metrics(run_dir / "metrics.csv"), read_metrics(straight / "metrics.csv")
    np.testing.assert_array_equal(a["generation"], np.arange(1, 7))
    for name in b:
        np.testing.assert_array_equal(a[name], b[name])
    assert (
        json.loads((run_dir / "best.json").read_text())["best_fitness"]
        == json.loads((straight / "best.json").read_text())["best_fitness"]
    )


def test_in_process_option_errors_are_one_line_naming_the_option(monkeypatch, capsys):
    from evotensor import cli

    monkeypatch.setattr(cli, "_configure_jax", lambda: None)
    for args, names in [
        (["--set", "seed=abc"], "--set seed=abc: seed must be an int"),
        (["--set", "sigma_frac=abc"], "--set sigma_frac=abc: option sigma_frac must be a finite number"),
        (["--seed", str(2**64)], f"seed must be an int <= {2**32 - 1}"),
        (["--set", "generations=0"], "--set generations=0: generations must be an int >= 1"),
        (["--pop", "1", "--set", "dims=2"], "population_size"),
    ]:
        with pytest.raises(SystemExit) as exit_:
            cli.main(["run", "es-sphere", *args])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and err.count("\n") == 1 and names in err, (args, err)
