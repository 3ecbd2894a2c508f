"""The `sr-pagie` task as `make run` runs it: CLI, report lines, run-directory plots."""

import os
import re
import subprocess
import sys

import numpy as np

from evotensor.gp.regression import Pagie1
from evotensor.io.rundir import read_metrics


def test_sr_pagie_cli_reports_the_found_expression_and_writes_its_plots(tmp_path):
    run_dir = tmp_path / "run"
    env = dict(
        os.environ, EVOTENSOR_CACHE_DIR=os.environ.get("EVOTENSOR_CACHE_DIR", "/tmp/evotensor-test-cache")
    )
    args = ["run", "sr-pagie", "--pop", "64", "--generations", "3", "--out", str(run_dir), "--quiet"]
    out = subprocess.run(
        [sys.executable, "-m", "evotensor.cli", *args], capture_output=True, text=True, env=env, timeout=600
    )
    assert out.returncode == 0, out.stderr
    found = re.search(r"^found: (\S.*)$", out.stdout, re.M)
    assert found, out.stdout
    assert f"\ntrue:  {Pagie1.true_expression}\n" in out.stdout, out.stdout
    mse = float(re.search(r"training MSE (\S+) \((\d+) nodes\)", out.stdout).group(1))
    # the report recomputes the MSE from the best tree's predictions; the run loop recorded the same
    # tree's fitness from the fused fitness kernel: two paths, one number
    best = read_metrics(run_dir / "metrics.csv")["best_fitness"]
    assert np.isfinite(mse) and np.isclose(mse, float(best[-1]), rtol=1e-3), (mse, best[-1])
    for name in ("pred_vs_true.png", "fitness.png"):
        data = (run_dir / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, name
