"""The one-command GPU check: tests with compiled kernels, then the benchmark grid of every family.

    make gpu-check                                   # on a machine with an NVIDIA GPU
    python benchmarks/gpu_check.py --mode cpu        # the tiny CPU mode (run by the test suite; JAX
                                                     # computes on the CPU even on a GPU machine)

Sections (``--sections``, default all):

* ``tests``: the test files whose numerics depend on the device, run with pytest on the GPU (the GP
  kernel tests then compile the Pallas kernel instead of interpreting it); pass/fail counts and the
  names of failures (the whole output goes to ``gpu_check_pytest.log``).
* ``gp``: ``benchmarks/gpu_check_gp.py`` (accuracy against float64, division, fitness GPops/s
  with a block sweep, ``sr-pagie`` end to end with a kernel profile).
* ``es``: ``benchmarks/gpu_check_es.py`` (OpenAI-ES and CMA-ES beside evosax when it imports).
* ``qd``: ``benchmarks/gpu_check_qd.py`` (MAP-Elites evaluations/s over batch sizes, the novelty
  archives' insertion (proximity, DNS), ME-ES generations, MAP-Elites over NEAT genomes and GP
  trees, MOME generations).
* ``neat``: ``benchmarks/gpu_check_neat.py`` (one NEAT generation on XOR at pop 150 / 1000 / 10000
  and on CartPole at pop 1000; the network forward pass over pop x genome size, with XLA's
  memory figures).

Writes ``gpu_check.json`` (every row, with the machine, date and versions) and ``gpu_check.md``
(one table per section) into ``--out`` (default ``$OUT`` if set, else ``runs/gpu_check``). A
section that raises is recorded as an error row and the others still run. Fits in about 5 minutes
of one H100 or H200 without ``neat``; the ``neat`` section (new, not yet timed on a GPU) adds an
estimated 2-4 minutes, mostly the compilations of whole NEAT generations (each part stops adding
rows after 90 s).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

GPU_TEST_FILES = (
    "tests/gp/test_pallas_kernel.py",
    "tests/gp/test_evaluate.py",
    "tests/gp/test_strategy.py",
    "tests/qd/test_archive.py",
    "tests/qd/test_centroids.py",
    "tests/qd/test_dns_archive.py",
    "tests/qd/test_emitter_group.py",
    "tests/qd/test_gradient_arborescence.py",
    "tests/qd/test_map_elites.py",
    "tests/qd/test_mees.py",
    "tests/qd/test_proximity_archive.py",
    "tests/es/test_cma_es.py",
    "tests/es/test_open_es.py",
    "tests/core/test_run.py",
    "tests/neat/test_network.py",
    "tests/neat/test_strategy.py",
)


def run_tests(mode: str, workers: int, files=GPU_TEST_FILES, out_dir: str | None = None) -> list[dict]:
    if mode != "gpu":
        return []  # on a CPU the default suite runs these files already
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rf", *files]
    if workers > 1:
        cmd += ["-n", str(workers)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    if out_dir:  # the whole pytest output, failures' tracebacks included
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "gpu_check_pytest.log"), "w") as fh:
            fh.write(out)
    counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|error|errors|skipped|deselected)", out)}
    failed = re.findall(r"^FAILED (\S+)", out, re.M)
    rows = [
        {
            "section": "tests",
            "files": len(files),
            "seconds": round(time.perf_counter() - t0, 1),
            "returncode": proc.returncode,
            **counts,
        }
    ]
    rows += [{"section": "tests-failed", "test": name} for name in failed]
    if proc.returncode not in (0, 1):
        rows.append({"section": "tests-output", "tail": out[-3000:]})
    return rows


def _section(name: str, mode: str) -> list[dict]:
    module = __import__(f"gpu_check_{name}")
    return [{"family": name, **row} for row in module.run(mode)]


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [f"# GPU check — {meta['date']}, {meta['device']}", ""]
    lines.append(
        f"jax {meta['jax']}, backend {meta['backend']}, mode {meta['mode']}, commit {meta['commit']}"
    )
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(str(r.get("section", r.get("family", "?"))), []).append(r)
    for name, group in groups.items():
        keys = [k for k in dict.fromkeys(k for r in group for k in r) if k not in ("section",)]
        lines += ["", f"## {name}", "", "| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
        for r in group:
            lines.append("| " + " | ".join(str(r.get(k, "")).replace("|", "/") for k in keys) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--mode",
        choices=("gpu", "cpu"),
        default=None,
        help="default: gpu if JAX sees one; cpu runs on the CPU",
    )
    parser.add_argument("--sections", default="tests,gp,es,qd,neat")
    parser.add_argument("--out", default=os.environ.get("OUT") or os.path.join(ROOT, "runs", "gpu_check"))
    parser.add_argument("--workers", type=int, default=4, help="pytest-xdist workers for the tests")
    parser.add_argument("--test-files", default=",".join(GPU_TEST_FILES), help="comma-separated test files")
    args = parser.parse_args(argv)

    if args.mode == "cpu":
        # the tiny CPU mode computes on the CPU also where JAX sees a GPU (set before jax starts)
        os.environ["JAX_PLATFORMS"] = "cpu"
    import jax

    mode = args.mode or ("gpu" if jax.default_backend() == "gpu" else "cpu")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    # a copied working tree may carry an older .git: changed files then show the commit is not the code
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True
    )
    meta = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "device": str(jax.devices()[0].device_kind),
        "host": platform.node(),
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "mode": mode,
        "commit": commit.stdout.strip() or "?",
        "changed_tracked_files": len(dirty.stdout.splitlines()),
    }
    rows: list[dict] = []
    for name in [s for s in args.sections.split(",") if s]:
        t0 = time.perf_counter()
        try:
            rows += (
                run_tests(mode, args.workers, args.test_files.split(","), args.out)
                if name == "tests"
                else _section(name, mode)
            )
        except Exception as e:  # one broken section must not hide the others
            rows.append({"section": name, "error": f"{type(e).__name__}: {e}"[:2000]})
        print(f"[gpu_check] {name}: {time.perf_counter() - t0:.1f} s", flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "gpu_check.json"), "w") as fh:
        json.dump({"meta": meta, "rows": rows}, fh, indent=1, default=str)
    table = markdown(rows, meta)
    with open(os.path.join(args.out, "gpu_check.md"), "w") as fh:
        fh.write(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
