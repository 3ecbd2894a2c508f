"""The `sr-pagie` task as `make run` runs it: CLI, report lines, run-directory plots; `sr-map-elites`."""

import os
import re
import subprocess
import sys

import numpy as np

from evotensor.gp.front import read_front_csv
from evotensor.gp.regression import Pagie1
from evotensor.io.rundir import read_metrics
from evotensor.tasks import get_task


def test_sr_pagie_cli_reports_the_chosen_model_the_front_and_writes_its_files(tmp_path):
    """`make run`'s task, with NSGA-II survival (so the run loop carries it): the chosen model beside the
    truth, the most accurate tree, the front table; front.csv/front.png/pred_vs_true.png; and
    `evotensor show` prints the front again."""
    run_dir = tmp_path / "run"
    env = dict(
        os.environ, EVOTENSOR_CACHE_DIR=os.environ.get("EVOTENSOR_CACHE_DIR", "/tmp/evotensor-test-cache")
    )
    args = ["run", "sr-pagie", "--pop", "64", "--generations", "3", "--out", str(run_dir), "--quiet"]
    args += ["--set", "survival=nsga2"]
    out = subprocess.run(
        [sys.executable, "-m", "evotensor.cli", *args], capture_output=True, text=True, env=env, timeout=600
    )
    assert out.returncode == 0, out.stderr
    assert re.search(
        r"^chosen: \S.*\n.*PySR's \"best\" rule on the Pareto front: (\d+) nodes", out.stdout, re.M
    )
    assert f"\ntrue:  {Pagie1.true_expression}\n" in out.stdout, out.stdout
    found = re.search(r"^found: (\S.*)$", out.stdout, re.M)
    assert found, out.stdout
    mse = float(re.search(r"most accurate: training MSE (\S+) \((\d+) nodes\)", out.stdout).group(1))
    # the report recomputes the MSE from the best tree's predictions; the run loop recorded the same
    # tree's fitness from the fused fitness kernel: two paths, one number
    best = read_metrics(run_dir / "metrics.csv")["best_fitness"]
    assert np.isfinite(mse) and np.isclose(mse, float(best[-1]), rtol=1e-3), (mse, best[-1])
    for name in ("pred_vs_true.png", "fitness.png", "front.png"):
        data = (run_dir / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, name
    rows = read_front_csv(run_dir / "front.csv")
    assert rows and sum(r["chosen"] for r in rows) == 1
    c = [r["complexity"] for r in rows]
    loss = [r["loss"] for r in rows]
    assert c == sorted(set(c)) and all(a > b for a, b in zip(loss, loss[1:]))
    assert np.isclose(loss[-1], float(best[-1]), rtol=1e-3)  # the front ends at the most accurate tree
    shown = subprocess.run(
        [sys.executable, "-m", "evotensor.cli", "show", str(run_dir)], capture_output=True, text=True, env=env
    )
    assert shown.returncode == 0, shown.stderr
    assert "Pareto front" in shown.stdout and f"{rows[-1]['loss']:.6g}" in shown.stdout, shown.stdout


def test_show_refuses_a_damaged_front_csv_naming_the_file(tmp_path):
    import pytest

    from evotensor.cli import _front_table, _Problem
    from evotensor.gp.front import write_front_csv

    assert _front_table(tmp_path) is None  # no front.csv: no table
    row = {"complexity": 3, "loss": 0.5, "score": float("nan"), "chosen": True, "expression": "x0 * x1"}
    write_front_csv(tmp_path / "front.csv", [row])
    assert _front_table(tmp_path).row_count == 1
    (tmp_path / "front.csv").write_text("complexity,loss\n1,2\n")
    with pytest.raises(_Problem, match=r"front.csv: header must be complexity,loss,score,chosen,expression"):
        _front_table(tmp_path)
    (tmp_path / "front.csv").write_text("complexity,loss,score,chosen,expression\nthree,1,0,0,x0\n")
    with pytest.raises(_Problem, match=r"front.csv, line 2: bad row"):
        _front_table(tmp_path)


def test_sr_map_elites_keeps_the_best_tree_of_every_shape_reports_and_resumes_bit_identically(tmp_path):
    """``sr-map-elites``: MAP-Elites over trees (GPEmitter) on Pagie-1, one cell per (length,
    depth); stopped and resumed, it equals an uninterrupted run bit for bit."""
    from tests.qd.test_tasks_and_plots import run_and_resume

    from evotensor.gp import GPEmitter, ShapeDescriptors

    task = get_task("sr-map-elites").build({"pop": 48, "max_len": 16})
    assert isinstance(task.strategy.emitters[0], GPEmitter) and isinstance(task.problem, ShapeDescriptors)
    assert task.strategy.archive.num_cells == 16 * 16 and task.problem.maximize
    _, resumed = run_and_resume(task, tmp_path, 4, 8, 2)
    text = task.report(resumed, tmp_path)
    assert "best R2 by length: 1: " in text and "true: 1/(1 + x0**-4)" in text
    assert (tmp_path / "archive.png").stat().st_size > 0 and (tmp_path / "qd.png").stat().st_size > 0
