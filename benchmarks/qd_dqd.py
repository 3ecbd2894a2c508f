"""CMA-MEGA: evotensor's ``GradientArborescenceEmitter`` beside pyribs' ``GradientArborescenceEmitter``
with its ``Scheduler`` (run by hand, not a test).

Workload (pyribs' sphere example, its ``cma_mega`` configuration, scaled down): the linear-projection
sphere in 100 dimensions (``evotensor.problems.qd.LinearProjection``; the pyribs worker computes the
same objective and measures, and their analytic Jacobian, in NumPy), a plain 100 x 100 grid over the
two measures, one gradient arborescence emitter (``x0 = 0``, ``sigma0 = 10``, gradient ascent with
``lr = 1``: pyribs ``grad_opt="gradient_ascent"``, evotensor ``optax.sgd(1.0)``; ``normalize_grad``,
ranker ``2imp``, selection rule ``mu``, restart rule ``no_improvement``), 35 branches per iteration,
``ITERATIONS`` iterations. Each iteration evaluates 36 solutions on both sides: pyribs evaluates
``theta`` with its Jacobian (``ask_dqd`` / ``tell_dqd``), then the 35 branches (``ask`` / ``tell``);
evotensor computes the Jacobian inside the emitter (``jax.jacrev`` of the problem) and evaluates
``theta`` and its branches as one batch of 36. Each library runs every seed in a fresh interpreter,
alternating.

Reported per run: wall time of the iterations, with the first-call cost apart (evotensor:
``evotensor.run``'s compile time and the time of the iterations; pyribs: its first iteration, which
compiles numpy_groupies' numba kernels, and the time of the other iterations), evaluations per second
of the timed part (36 x iterations / run seconds), QD score (offset 0: the objective is in
[0, 100]), coverage, best objective, and the emitter's restarts; then the median of each library.
The two libraries draw different random numbers, so the quality is compared over seeds, not run by
run.

    .venv/bin/python benchmarks/qd_dqd.py --seeds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402
from bench_venvs import alternating, run_json_worker, stamp, venv_python  # noqa: E402

DIM, CELLS, BRANCHES, SIGMA0, LR = 100, (100, 100), 35, 10.0, 1.0
EVALS_PER_ITERATION = 1 + BRANCHES
LIMIT, SHIFT = 5.12, 0.4 * 5.12
WORST = DIM * (-LIMIT - SHIFT) ** 2


def sphere(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(objective [B], measures [B, 2], jacobian [B, 3, DIM])`` of pyribs' sphere example
    (``LinearProjection``'s formulas), the Jacobian's rows the gradients of the objective and of each
    measure."""
    z = x - SHIFT
    objective = (np.sum(z * z, axis=1) - WORST) / (0.0 - WORST) * 100.0
    outside = (x < -LIMIT) | (x > LIMIT)
    folded = np.where(outside, LIMIT / x, x)
    # d fold / dx: 1 inside [-5.12, 5.12], -5.12 / x^2 outside
    slope = np.where(outside, -LIMIT / (x * x), 1.0)
    half = x.shape[1] // 2
    measures = np.stack([folded[:, :half].sum(1), folded[:, half:].sum(1)], axis=1)
    jacobian = np.zeros((x.shape[0], 3, x.shape[1]))
    jacobian[:, 0] = 2.0 * z * 100.0 / (0.0 - WORST)
    jacobian[:, 1, :half] = slope[:, :half]
    jacobian[:, 2, half:] = slope[:, half:]
    return objective, measures, jacobian


def ranges() -> list[tuple[float, float]]:
    half = DIM // 2
    return [(-LIMIT * half, LIMIT * half), (-LIMIT * (DIM - half), LIMIT * (DIM - half))]


def worker_evotensor(a) -> dict:
    import jax
    import optax

    import evotensor
    from evotensor.problems.qd import LinearProjection
    from evotensor.qd import GradientArborescenceEmitter, GridArchive, MAPElites, problem_jacobian

    problem = LinearProjection(DIM, "sphere")
    archive = GridArchive(solution_dim=DIM, dims=CELLS, ranges=ranges())
    emitter = GradientArborescenceEmitter(
        np.zeros(DIM),
        SIGMA0,
        problem_jacobian(problem),
        optimizer=optax.sgd(LR),
        selection_rule="mu",
        batch_size=BRANCHES,
    )
    t0 = time.perf_counter()
    strategy = MAPElites(archive, [emitter])
    result = evotensor.run(strategy, problem, a.iterations, jax.random.key(a.seed), progress=False)
    wall = time.perf_counter() - t0
    stats = {k: float(v) for k, v in archive.stats(result.state.archive).items()}
    return {
        "wall_s": wall,
        "compile_s": float(result.compile_seconds),
        "run_s": float(result.run_seconds),
        "qd_score": stats["qd_score"],
        "coverage": stats["coverage"],
        "obj_max": stats["obj_max"],
        "restarts": int(result.state.emitters[0].coefficients.restarts),
        "version": f"evotensor, jax {jax.__version__}",
    }


def worker_pyribs(a) -> dict:
    from importlib.metadata import version

    from ribs.archives import GridArchive
    from ribs.emitters import GradientArborescenceEmitter
    from ribs.schedulers import Scheduler

    # the archive's seed: the elite a restart draws
    archive = GridArchive(solution_dim=DIM, dims=CELLS, ranges=ranges(), seed=a.seed)
    emitter = GradientArborescenceEmitter(
        archive,
        x0=np.zeros(DIM),
        sigma0=SIGMA0,
        lr=LR,
        grad_opt="gradient_ascent",
        selection_rule="mu",
        batch_size=BRANCHES,
        seed=a.seed,
    )
    scheduler = Scheduler(archive, [emitter])
    times = []
    for _ in range(a.iterations):
        t0 = time.perf_counter()
        x = scheduler.ask_dqd()
        objective, measures, jacobian = sphere(x)
        scheduler.tell_dqd(objective, measures, jacobian)
        x = scheduler.ask()
        objective, measures, _ = sphere(x)
        scheduler.tell(objective, measures)
        times.append(time.perf_counter() - t0)
    # its first iteration compiles (numba, in numpy_groupies): reported apart, as evotensor's compile
    first, run = times[0], sum(times[1:])
    s = archive.stats
    return {
        "wall_s": first + run,
        "compile_s": first,
        "run_s": run,
        "qd_score": float(s.qd_score),
        "coverage": float(s.coverage),
        "obj_max": float(s.obj_max),
        "restarts": int(emitter.restarts),
        "version": f"ribs {version('ribs')}",
    }


def run_worker(impl: str, a, seed: int) -> dict:
    python = sys.executable if impl == "evotensor" else venv_python("qd")
    return run_json_worker(
        python, __file__, ["--worker", impl, "--seed", str(seed), "--iterations", str(a.iterations)]
    )


def evals_per_s(g: dict, iterations: int) -> float:
    """Evaluations per second of the timed part (pyribs: its first iteration is not in ``run_s``)."""
    timed = iterations if g["impl"] == "evotensor" else iterations - 1
    return EVALS_PER_ITERATION * timed / g["run_s"] if g["run_s"] > 0 else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", choices=("evotensor", "pyribs"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=1000)
    ap.add_argument("--impls", default="evotensor,pyribs")
    ap.add_argument("--out", help="write the raw rows here (JSON)")
    a = ap.parse_args()
    if a.worker:
        print(json.dumps((worker_evotensor if a.worker == "evotensor" else worker_pyribs)(a)))
        return
    impls = a.impls.split(",")
    print(stamp())
    grid = f"{CELLS[0]} x {CELLS[1]}"
    print(f"{a.iterations} iterations x {EVALS_PER_ITERATION} evaluations, DIM {DIM}, grid {grid}")
    print("| seed | library | run s (compile s) | evals/s | QD score | coverage | best | restarts |")
    print("|---|---|---|---|---|---|---|---|")
    rows = []
    for seed, impl in alternating(impls, a.seeds):
        g = {"seed": seed, "impl": impl, **run_worker(impl, a, seed)}
        g["evals_per_s"] = evals_per_s(g, a.iterations)
        rows.append(g)
        timing = f"{g['run_s']:.2f} ({g['compile_s']:.1f})"
        print(
            f"| {seed} | {impl} ({g['version']}) | {timing} | {g['evals_per_s']:.0f} "
            f"| {g['qd_score']:.0f} | {g['coverage']:.3f} | {g['obj_max']:.2f} | {g['restarts']} |",
            flush=True,
        )
    for impl in impls:
        mine = [g for g in rows if g["impl"] == impl]
        if not mine:
            continue

        def med(key: str, mine=mine) -> float:
            return statistics.median(g[key] for g in mine)

        print(
            f"| median ({len(mine)} seeds) | {impl} | {med('run_s'):.2f} ({med('compile_s'):.1f}) "
            f"| {med('evals_per_s'):.0f} | {med('qd_score'):.0f} | {med('coverage'):.3f} "
            f"| {med('obj_max'):.2f} | {med('restarts'):.0f} |"
        )
    print(f"load after: {os.getloadavg()}")
    if a.out:
        with open(a.out, "w") as fh:
            json.dump({"iterations": a.iterations, "rows": rows}, fh)


if __name__ == "__main__":
    main()
