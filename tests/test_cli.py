"""The CLI end to end, in subprocesses (as a user runs it)."""

import json
import os
import subprocess
import sys

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
    )
    assert out.returncode == 0, out.stderr
    assert "best fitness" in out.stdout
    recorded = json.loads((run_dir / "config.json").read_text())
    assert recorded["config"]["dims"] == 4 and recorded["config"]["seed"] == 3
    first = read_metrics(run_dir / "metrics.csv")
    assert len(first["generation"]) == 8

    # continue the same run to 16 generations, then compare with a straight 16-generation run
    out = evotensor("run", "es-sphere", "--resume", str(run_dir), "--generations", "16", "--chunk-size", "4")
    assert out.returncode == 0, out.stderr
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
