"""`evotensor run sr --data FILE.csv --target COLUMN`: a run on the user's data end to end, its
resume (refused once the file changed), and bad data as one `error:` line naming the column or row."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest


def evotensor(*args, cwd=None):
    env = dict(os.environ)
    env.setdefault("EVOTENSOR_CACHE_DIR", "/tmp/evotensor-test-cache")
    env.pop("EVOTENSOR_TRACEBACK", None)
    return subprocess.run(
        [sys.executable, "-m", "evotensor.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
    )


def write_csv(path, n=40, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-2, 2, (n, 2))
    y = X[:, 0] * X[:, 1] + 0.5
    rows = ["speed,angle,power"] + [f"{a:.9g},{b:.9g},{c:.9g}" for a, b, c in zip(X[:, 0], X[:, 1], y)]
    path.write_text("\n".join(rows) + "\n")
    return path


def test_run_sr_on_a_csv_records_the_data_and_resume_refuses_a_changed_file(tmp_path):
    data = write_csv(tmp_path / "d.csv")
    run_dir = tmp_path / "run"
    small = ["--pop", "16", "--set", "max_len=16", "--set", "max_depth=3", "--quiet"]
    # a relative path: recorded as the absolute one, so --resume works from any directory
    out = evotensor("run", "sr", "--data", "d.csv", "--target", "power", "--generations", "2",
                    "--out", str(run_dir), *small, cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "found: " in out.stdout and "test R2 " in out.stdout, out.stdout
    config = json.loads((run_dir / "config.json").read_text())["config"]
    assert config["data"] == str(data) and config["target"] == "power"
    assert config["data_sha256"] == hashlib.sha256(data.read_bytes()).hexdigest()
    out = evotensor("run", "sr", "--resume", str(run_dir), "--generations", "3", "--quiet")
    assert out.returncode == 0, out.stderr
    write_csv(data, seed=1)  # the same shape, other numbers
    out = evotensor("run", "sr", "--resume", str(run_dir), "--generations", "4", "--quiet")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("error: task sr: data ") and "changed since the run was started" in last, (
        out.stderr
    )


BAD = [
    (
        "a,b,y\n1,2,3\n4,x,6\n7,8,9\n",
        ["--target", "y"],
        ["data row 2 (line 3), column 'b'", "'x' is not a number"],
    ),
    ("a,b,y\n1,2,3\n4,,6\n7,8,9\n", ["--target", "y"], ["data row 2 (line 3), column 'b': missing value"]),
    ("a,b,y\n1,2,3\n4,5,inf\n7,8,9\n", ["--target", "y"], ["data row 2 (line 3), column 'y'", "'inf'"]),
    (
        "a,b,y\n1,2,3\n4,5,6\n",
        ["--target", "q"],
        ["target column 'q' is not in", "its columns are 'a', 'b', 'y'"],
    ),
    ("a,b,y\n1,2,3\n", ["--target", "y"], ["1 usable data row(s)", "at least 2"]),
    (
        "a,b,y\n1,2,3\n4,5,6\n7,8,9\n",
        ["--target", "y", "--set", "test_fraction=0.5"],
        ["leaves 1 training and 2 test row(s)"],
    ),
    ("a,a,y\n1,2,3\n4,5,6\n", [], ["duplicate column name 'a'"]),
]


@pytest.mark.parametrize(("text", "args", "pieces"), BAD)
def test_bad_data_is_one_error_line_naming_the_column_or_row(
    tmp_path, monkeypatch, capsys, text, args, pieces
):
    from evotensor import cli

    monkeypatch.setattr(cli, "_configure_jax", lambda: None)
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["run", "sr", "--data", str(path), *args, "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and err.startswith("error: task sr: "), err
    for piece in pieces:
        assert piece in err, err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "sr", "--data", "/nonexistent/d.csv"], "error: --data /nonexistent/d.csv: no such file"),
        (["run", "sr", "--data", " "], "error: --data  : needs a path"),
        (["run", "sr"], "task sr needs a data file: evotensor run sr --data FILE.csv --target COLUMN"),
        (["run", "es-sphere", "--data", "x.csv"], "--data x.csv: task 'es-sphere' has no option(s) data"),
    ],
)
def test_data_option_errors_name_the_option(tmp_path, monkeypatch, capsys, args, message):
    from evotensor import cli

    monkeypatch.setattr(cli, "_configure_jax", lambda: None)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        cli.main(args)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and message in err, err
