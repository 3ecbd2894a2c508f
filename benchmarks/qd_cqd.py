"""The CQD score: evotensor's ``cqd_score`` beside pyribs' ``cqd_score`` on the same elites (run by
hand).

An archive of ``CELLS`` x ``CELLS`` grid cells over ``[0, 1]^2`` filled by ``FILL`` random candidates
(objectives uniform in ``[0, 1]``, so ``obj_min = 0`` and both normalisations agree), ``ITERATIONS``
iterations of ``TARGETS`` uniform target points, ``PENALTIES`` penalties, ``dist_max = sqrt(2)``, the
Euclidean norm. The elites (objectives and measures) are drawn here and handed to both: ours into a
``GridArchive``, pyribs' into its ``GridArchive`` (float32), in its venv.

Reported per repeat, alternating, each library in a fresh process: ours the jitted call's compile s
and the median ms of ``REPEATS`` calls; pyribs the median ms of ``REPEATS`` calls; the mean score of
each, which must agree to float32 rounding.

pyribs 0.12.0 runs in the ``qd`` venv of ``bench_venvs.py`` (``make bench-venvs VENVS=qd``).

    .venv/bin/python benchmarks/qd_cqd.py
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_venvs  # noqa: E402

CELLS, FILL, ITERATIONS, TARGETS, PENALTIES, REPEATS = 100, 20_000, 5, 1000, 5, 7


def data(path: str) -> None:
    g = np.random.default_rng(0)
    measures = g.uniform(0, 1, (FILL, 2)).astype(np.float32)
    objective = g.uniform(0, 1, FILL).astype(np.float32)
    targets = g.uniform(0, 1, (ITERATIONS, TARGETS, 2)).astype(np.float32)
    np.savez(path, measures=measures, objective=objective, targets=targets)


def run_evotensor(path: str) -> dict:
    import jax

    from evotensor.qd import GridArchive, cqd_score

    d = np.load(path)
    archive = GridArchive(solution_dim=2, dims=(CELLS, CELLS), ranges=[(0, 1), (0, 1)])
    state, _ = archive.add(archive.init(), d["measures"], d["objective"], d["measures"])

    def score(s, targets):
        return cqd_score(
            archive, s, target_points=targets, penalties=PENALTIES, obj_min=0.0, obj_max=1.0, dist_max=2**0.5
        ).mean

    t = time.perf_counter()
    compiled = jax.jit(score).lower(state, d["targets"]).compile()
    compile_s = time.perf_counter() - t
    times, value = [], None
    for _ in range(REPEATS):
        t = time.perf_counter()
        value = float(jax.block_until_ready(compiled(state, d["targets"])))
        times.append(1e3 * (time.perf_counter() - t))
    return {
        "compile_s": compile_s,
        "ms": statistics.median(times),
        "mean": value,
        "elites": int(state.occupied.sum()),
    }


def run_pyribs(path: str) -> dict:
    from ribs.archives import GridArchive, cqd_score

    d = np.load(path)
    archive = GridArchive(solution_dim=2, dims=(CELLS, CELLS), ranges=[(0, 1), (0, 1)], dtype=np.float32)
    archive.add(d["measures"], d["objective"], d["measures"])
    times, value = [], None
    for _ in range(REPEATS):
        t = time.perf_counter()
        value = float(
            cqd_score(
                archive,
                iterations=ITERATIONS,
                target_points=d["targets"],
                penalties=PENALTIES,
                obj_min=0.0,
                obj_max=1.0,
                dist_max=2**0.5,
            ).mean
        )
        times.append(1e3 * (time.perf_counter() - t))
    return {"compile_s": 0.0, "ms": statistics.median(times), "mean": value, "elites": len(archive)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--impl", choices=["evotensor", "pyribs"])
    p.add_argument("--data")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    if args.impl:
        print(json.dumps((run_evotensor if args.impl == "evotensor" else run_pyribs)(args.data)))
        return
    print(
        f"# CQD score, {CELLS}x{CELLS} grid from {FILL:,} candidates, {ITERATIONS} x {TARGETS} targets, "
        f"{PENALTIES} penalties"
    )
    print(f"# {bench_venvs.stamp()}")
    print("| round | library | compile s | ms per call (median of 7) | elites | mean score |")
    print("|---|---|---|---|---|---|")
    pythons = {"evotensor": sys.executable, "pyribs": bench_venvs.venv_python("qd")}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "data.npz")
        data(path)
        for round_, impl in bench_venvs.alternating(["evotensor", "pyribs"], args.rounds):
            r = bench_venvs.run_json_worker(pythons[impl], __file__, ["--impl", impl, "--data", path])
            cells = f"{r['compile_s']:.2f} | {r['ms']:.1f} | {r['elites']} | {r['mean']:.4f}"
            print(f"| {round_} | {impl} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
