"""The one-command GPU check in its tiny CPU mode, so that the script cannot rot between GPU runs."""

import json
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_gpu_check_cpu_mode_runs_every_family_and_writes_json_and_markdown(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.join(ROOT, "src"), ROOT])}
    proc = subprocess.run(
        [
            sys.executable,
            "benchmarks/gpu_check.py",
            "--mode",
            "cpu",
            "--sections",
            "tests,gp,es,qd,neat",
            "--out",
            str(tmp_path),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    assert report["meta"]["mode"] == "cpu" and report["meta"]["backend"] == "cpu"
    rows = report["rows"]
    errors = [r for r in rows if "error" in r]
    assert not errors, errors
    by_section = {}
    for r in rows:
        by_section.setdefault(r.get("section"), []).append(r)
    assert "tests" not in by_section  # the test files run in the default suite on a CPU
    assert {r["family"] for r in rows} == {"gp", "es", "qd", "neat"}

    # the kernel divides exactly like XLA
    assert by_section["gp-division"][0]["differ"] == 0
    # against float64, the kernel is no worse than the float32 reference interpreter (up to noise)
    acc = {r["path"]: r for r in by_section["gp-accuracy"]}
    assert {"pallas", "jax", "reference_f32", "pallas vs jax"} <= set(acc)
    assert acc["pallas"]["pred_beyond_1e-4"] <= 2 * acc["reference_f32"]["pred_beyond_1e-4"] + 5
    assert acc["pallas"]["finiteness_differs"] == acc["reference_f32"]["finiteness_differs"]
    for r in by_section["gp-fitness"] + by_section["gp-sweep"]:
        assert r["gpops"] > 0 and r["compile_s"] >= 0 and r["ms"] > 0
    runs = [r for r in by_section["sr-pagie"] if r["what"].startswith("evotensor.run")]
    assert len(runs) == 1 and all(np.isfinite(r["best_mse"]) and r["compile_s"] >= 0 for r in runs)

    es_rows = [r for r in rows if r["family"] == "es"]
    assert es_rows and all(r["ms_per_gen"] > 0 and np.isfinite(r["best_fitness"]) for r in es_rows)
    qd_rows = [r for r in rows if r["family"] == "qd" and "section" not in r]
    assert qd_rows and all(r["evals_per_s"] > 0 and 0 < r["coverage"] <= 1 for r in qd_rows)
    novelty = by_section["qd-novelty"]
    assert novelty and all(r["adds_per_s"] > 0 and 0 < r["elites"] <= r["capacity"] for r in novelty)
    dns = by_section["qd-dns"]
    assert dns and all(r["adds_per_s"] > 0 and r["members"] == r["capacity"] for r in dns)
    genotypes = by_section["qd-genotypes"]  # MAP-Elites over NEAT genomes and GP trees
    assert {r["case"] for r in genotypes} == {"neat map-elites xor", "gp map-elites pagie"}
    assert all(r["evals_per_s"] > 0 and r["elites"] > 0 for r in genotypes)
    mome = by_section["qd-mome"]  # a Pareto front per cell
    assert mome and all(r["evals_per_s"] > 0 and r["solutions"] > 0 and r["moqd_score"] > 0 for r in mome)
    pgame = by_section["qd-pgame"]  # PGA-ME and DCRL-ME on a tiny hopper (brax is a test dependency)
    assert {r["case"] for r in pgame} == {"pga-me hopper_uni", "dcrl-me hopper_uni"}
    assert all("skipped" not in r and r["evals_per_s"] > 0 and r["elites"] > 0 for r in pgame)
    omg = by_section["qd-omg-mega"]  # gradients at every parent
    assert omg and all(r["evals_per_s"] > 0 and 0 < r["coverage"] <= 1 for r in omg)
    multitask = by_section["qd-multitask"]  # one cell per task
    assert multitask and all(r["evals_per_s"] > 0 and 0 < r["filled"] <= r["tasks"] for r in multitask)
    assert all(-2 < r["mean_fitness"] < 0 for r in multitask)
    mels = by_section["qd-mels"]  # every solution evaluated `samples` times
    assert mels and all(r["samples"] == 5 and r["evals_per_s"] > 0 and r["elites"] > 0 for r in mels)
    assert all(np.isfinite(r["spread_mean"]) and r["spread_mean"] >= 0 for r in mels)
    dds = by_section["qd-dds"]  # density-ranked CMA-ES emitters, a result grid
    assert dds and all(r["evals_per_s"] > 0 and 0 < r["coverage"] <= 1 and r["emitters"] == 2 for r in dds)
    dms = by_section["qd-dms"]  # improvement over a discount network, a result grid
    assert dms and all(
        r["evals_per_s"] > 0 and 0 < r["coverage"] <= 1 and r["train_batch"] == 32 for r in dms
    )
    mees = by_section["qd-mees"]  # one offspring per generation may enter the archive
    assert mees and all(r["evals_per_s"] > 0 and 0 < r["elites"] <= r["generations"] for r in mees)

    generation = by_section["neat-generation"]
    assert generation and all(r["ms_per_gen"] > 0 and r["compile_s"] > 0 for r in generation)
    assert all(np.isfinite(r["best_fitness"]) and r["species"] >= 1 for r in generation)
    forward = by_section["neat-forward"]
    assert {r["method"] for r in forward} == {"auto (dense)", "auto (sparse)"}
    assert all(r["finite_outputs"] and r["samples_per_s"] > 0 and r["mean_depth"] >= 1 for r in forward)
    grad = by_section["neat-grad"]
    assert grad and all(r["finite"] and r["genomes_per_s"] > 0 and r["compile_s"] > 0 for r in grad)

    table = (tmp_path / "gpu_check.md").read_text()
    assert "## gp-fitness" in table and "## gp-accuracy" in table
    assert "## neat-generation" in table and "## neat-forward" in table and "## qd-novelty" in table
    assert "## neat-grad" in table
    assert "## qd-mees" in table and "## qd-dns" in table and "## qd-genotypes" in table
    assert "## qd-mome" in table and "## qd-multitask" in table and "## qd-omg-mega" in table
    assert "## qd-mels" in table and "## qd-dds" in table and "## qd-dms" in table
