"""Multi-task MAP-Elites: evotensor's ``MultiTaskMAPElites`` beside pymap_elites' ``multitask.compute``
(Mouret's reference implementation of the paper), like for like (run by hand).

Setup of pymap_elites' ``examples/multitask_arm.py``: a 10-joint arm must reach ``(0.5, 0.5)``;
5000 tasks ``(angular range, length)``, the same array in both (our k-means of 100,000 uniform
samples of ``[0, 1]^2``, handed to pymap_elites as its ``centroids``, so it uses the task distance);
batch 100 of SBX children (eta 10, box ``[0, 1]``), random batches of 100 until 10% of the tasks
have an elite, tournament sizes 1, 10, 50, 100, 500 picked by UCB1, ``EVALS`` evaluations in all
(the example's 10^6 by default). pymap_elites runs in one process (``parallel`` False, as its
example), with no archive dumps and no log file; it compares its arrays with ``[]``, which today's
NumPy refuses, so its centroids come as an array that answers that comparison as old NumPy did
(:class:`OldNumpyComparison`).

Engines, each seed in turn (``bench_venvs.alternating``), every run a fresh process:

* ``evotensor``: our default, UCB1 rewarded with the batch's success rate;
* ``evotensor-count``: rewarded with the number of successes, as pymap_elites does;
* ``pymap_elites``: its ``compute`` at the commit of ``bench_venvs.SOURCES["pymap"]``, exported
  from the local git copy into a temporary folder outside the repository (never installed).

Reported per run: compile s and run s (pymap_elites: its whole ``compute`` as run s), evaluations/s,
then both final archives re-scored by the same code (pymap_elites' own arm fitness in float64,
``reference_arm``, one call per elite on its task): tasks filled, mean fitness over the filled tasks,
QD score ``sum(fitness + 2)`` over all tasks.

    .venv/bin/python benchmarks/qd_multitask.py
    .venv/bin/python benchmarks/qd_multitask.py --evals 200000 --seeds 1
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_venvs  # noqa: E402

TASKS, JOINTS, BATCH, EVALS = 5000, 10, 100, 1_000_000
ENGINES = ["evotensor", "evotensor-count", "pymap_elites"]


def reference_arm(angles: np.ndarray, task: np.ndarray) -> float:
    """The example's fitness in float64: links of ``L / n``, joint turns ``(angle - 0.5) 2 pi a / n``,
    minus the distance of the tip to (0.5, 0.5)."""
    n = len(angles)
    heading = np.cumsum((np.clip(angles, 0, 1) - 0.5) * (task[0] / n) * 2 * math.pi)
    tip = (task[1] / n) * np.array([np.cos(heading).sum(), np.sin(heading).sum()])
    return -float(np.hypot(tip[0] - 0.5, tip[1] - 0.5))


def make_tasks(path: str) -> None:
    import jax

    from evotensor.qd import kmeans_centroids

    tasks, _ = kmeans_centroids(jax.random.key(0), TASKS, ((0.0, 1.0), (0.0, 1.0)), samples=100_000)
    np.save(path, np.asarray(tasks))


def run_evotensor(tasks: np.ndarray, seed: int, evals: int, reward: str) -> tuple[dict, np.ndarray]:
    """``(timings, [TASKS, JOINTS] elites with NaN rows for empty tasks)``."""
    import jax

    import evotensor
    from evotensor.problems.multi_task import MultiTaskArm
    from evotensor.qd import MultiTaskMAPElites

    me = MultiTaskMAPElites(tasks, solution_dim=JOINTS, batch_size=BATCH, bandit_reward=reward)
    result = evotensor.run(
        me,
        MultiTaskArm(JOINTS),
        evals // BATCH,
        jax.random.key(seed),
        chunk_size=evals // BATCH,
        progress=False,
    )
    archive = result.state.archive
    elites = np.where(
        np.asarray(archive.occupied)[:, None], np.asarray(archive.solutions, np.float64), np.nan
    )
    pulls = np.asarray(result.state.pulls).tolist()
    return {"compile_s": result.compile_seconds, "run_s": result.run_seconds, "pulls": pulls}, elites


class OldNumpyComparison(np.ndarray):
    """pymap_elites tests ``centroids != []``, a scalar in the NumPy it was written for and an error
    in today's: this array answers a comparison with an empty list as that NumPy did."""

    def __eq__(self, other):
        if isinstance(other, list) and not other:
            return False
        return np.asarray(self) == other

    def __ne__(self, other):
        if isinstance(other, list) and not other:
            return True
        return np.asarray(self) != other


def run_pymap(tasks: np.ndarray, seed: int, evals: int, source: str) -> tuple[dict, np.ndarray]:
    import random

    sys.path.insert(0, source)
    sys.path.insert(0, os.path.join(source, "examples"))
    import map_elites.common as common
    import map_elites.multitask as multitask

    def arm(angles, task):  # the example's fitness, as it writes it (its kinematic chain)
        import kinematic_arm

        angular_range = task[0] / len(angles)
        lengths = np.ones(len(angles)) * task[1] / len(angles)
        ef, _ = kinematic_arm.Arm(lengths).fw_kinematics((angles - 0.5) * angular_range * math.pi * 2)
        return -np.linalg.norm(ef - 0.5 * np.ones(2))

    params = dict(common.default_params, parallel=False, dump_period=-1, batch_size=BATCH)
    random.seed(seed)
    np.random.seed(seed)
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as work:  # it writes its final archive into the cwd
        os.chdir(work)
        try:
            start = time.perf_counter()
            archive = multitask.compute(
                dim_x=JOINTS,
                f=arm,
                centroids=tasks.astype(np.float64).view(OldNumpyComparison),
                max_evals=evals,
                params=params,
            )
            seconds = time.perf_counter() - start
        finally:
            os.chdir(here)
    row = {tuple(map(float, c)): i for i, c in enumerate(tasks.astype(np.float64))}
    elites = np.full((len(tasks), JOINTS), np.nan)
    for centroid, species in archive.items():
        elites[row[centroid]] = species.x
    return {"compile_s": 0.0, "run_s": seconds}, elites


def worker(args: argparse.Namespace) -> None:
    tasks = np.load(args.tasks)
    if args.impl == "pymap_elites":
        timings, elites = run_pymap(tasks, args.seed, args.evals, args.source)
    else:
        reward = "count" if args.impl == "evotensor-count" else "rate"
        timings, elites = run_evotensor(tasks, args.seed, args.evals, reward)
    filled = ~np.isnan(elites[:, 0])
    fitness = np.array(
        [reference_arm(elites[i], tasks[i]) if filled[i] else np.nan for i in range(len(tasks))]
    )
    out = dict(timings, filled=int(filled.sum()), mean_fitness=float(np.nanmean(fitness)))
    out["qd_score"] = float(np.nansum(fitness + 2.0))
    out["evals_per_s"] = args.evals / out["run_s"]
    print(json.dumps(out))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--evals", type=int, default=EVALS)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--impl", choices=ENGINES)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tasks")
    p.add_argument("--source")
    args = p.parse_args()
    if args.impl:
        worker(args)
        return
    print(f"# multi-task MAP-Elites, {TASKS} tasks, {JOINTS} joints, {args.evals:,} evaluations")
    print(f"# {bench_venvs.stamp()}")
    with tempfile.TemporaryDirectory() as tmp:
        tasks = os.path.join(tmp, "tasks.npy")
        make_tasks(tasks)
        source = bench_venvs.export_source(bench_venvs.SOURCES["pymap"], tmp)
        if source.startswith("git+"):
            raise SystemExit(f"no local copy of {bench_venvs.SOURCES['pymap'].repo} (fetch it first)")
        rows = []
        print("| seed | engine | compile s | run s | evals/s | tasks filled | mean fitness | QD score |")
        print("|---|---|---|---|---|---|---|---|")
        for seed, impl in bench_venvs.alternating(ENGINES, args.seeds):
            extra = ["--tasks", tasks, "--source", source, "--seed", str(seed), "--evals", str(args.evals)]
            r = bench_venvs.run_json_worker(sys.executable, __file__, ["--impl", impl, *extra])
            rows.append((impl, r))
            print(
                f"| {seed} | {impl} | {r['compile_s']:.1f} | {r['run_s']:.1f} | {r['evals_per_s']:,.0f} | "
                f"{r['filled']} | {r['mean_fitness']:.4f} | {r['qd_score']:.1f} |",
                flush=True,
            )
        for impl in ENGINES:
            mine = [r for name, r in rows if name == impl]
            print(
                f"# {impl}: median run {statistics.median(r['run_s'] for r in mine):.1f} s, median mean "
                f"fitness {statistics.median(r['mean_fitness'] for r in mine):.4f}"
            )
    print(f"# finished {datetime.datetime.now(datetime.UTC):%H:%M} UTC")


if __name__ == "__main__":
    main()
