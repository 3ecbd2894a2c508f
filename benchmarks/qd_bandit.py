"""Bandit-scheduled CMA-ME: evotensor's ``BanditMAPElites`` beside pyribs' ``BanditScheduler`` (run by
hand, not a test).

Workload (pyribs' sphere example, scaled down): the linear-projection sphere in 20 dimensions
(``evotensor.problems.qd.LinearProjection``; the pyribs worker computes the same formulas in NumPy), a
50 x 50 grid over the two measures, a pool of six CMA-ES emitters (rankers ``imp, imp, rd, rd, obj,
obj``; ``x0 = 0``, ``sigma0 = 0.5``, batch 36, both libraries' default selection rule ``filter`` and
restart rule ``no_improvement``), ``num_active = 2``, ``zeta = 0.05``, ``reselect="terminated"``,
``ITERATIONS`` generations. Each library runs every seed in a fresh interpreter, alternating.

Reported per run: wall time of the generations, with the first-call cost apart (evotensor:
``evotensor.run``'s compile time and the time of the generations; pyribs: its first generation,
which compiles numpy_groupies' numba kernels, ~3.5 s, and the time of the other generations),
QD score (offset 0: the objective is in [0, 100]), coverage, best objective, and how many of the six
emitters ever ran. The two libraries draw different random numbers, so the quality is compared over
seeds, not run by run.

    .venv/bin/python benchmarks/qd_bandit.py --seeds 3
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402
from bench_venvs import alternating, run_json_worker, stamp, venv_python  # noqa: E402

DIM, CELLS, BATCH, NUM_ACTIVE, ZETA, SIGMA0 = 20, (50, 50), 36, 2, 0.05, 0.5
RANKERS = ("imp", "imp", "rd", "rd", "obj", "obj")
LIMIT, SHIFT = 5.12, 0.4 * 5.12


def sphere(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(objective [B], measures [B, 2])`` of pyribs' sphere example (``LinearProjection``'s formulas)."""
    z = x - SHIFT
    worst = (-LIMIT - SHIFT) ** 2 * x.shape[1]
    objective = (np.sum(z * z, axis=1) - worst) / (0.0 - worst) * 100.0
    folded = np.where((x < -LIMIT) | (x > LIMIT), LIMIT / x, x)
    half = x.shape[1] // 2
    return objective, np.stack([folded[:, :half].sum(1), folded[:, half:].sum(1)], axis=1)


def ranges() -> list[tuple[float, float]]:
    half = DIM // 2
    return [(-LIMIT * half, LIMIT * half), (-LIMIT * (DIM - half), LIMIT * (DIM - half))]


def worker_evotensor(a) -> dict:
    import jax

    import evotensor
    from evotensor.problems.qd import LinearProjection
    from evotensor.qd import BanditMAPElites, CMAESEmitter, GridArchive

    archive = GridArchive(solution_dim=DIM, dims=CELLS, ranges=ranges())
    pool = [CMAESEmitter(np.zeros(DIM), SIGMA0, ranker=r, batch_size=BATCH) for r in RANKERS]
    strategy = BanditMAPElites(archive, pool, NUM_ACTIVE, zeta=ZETA)
    t0 = time.perf_counter()
    result = evotensor.run(
        strategy, LinearProjection(DIM, "sphere"), a.iterations, jax.random.key(a.seed), progress=False
    )
    wall = time.perf_counter() - t0
    stats = {k: float(v) for k, v in archive.stats(result.state.archive).items()}
    return {
        "wall_s": wall,
        "compile_s": float(result.compile_seconds),
        "run_s": float(result.run_seconds),
        "qd_score": stats["qd_score"],
        "coverage": stats["coverage"],
        "obj_max": stats["obj_max"],
        "emitters_used": int((np.asarray(result.state.selection) > 0).sum()),
        "version": f"evotensor, jax {jax.__version__}",
    }


def worker_pyribs(a) -> dict:
    from importlib.metadata import version

    from ribs.archives import GridArchive
    from ribs.emitters import EvolutionStrategyEmitter
    from ribs.schedulers import BanditScheduler

    archive = GridArchive(solution_dim=DIM, dims=CELLS, ranges=ranges())
    pool = [
        EvolutionStrategyEmitter(
            archive, x0=np.zeros(DIM), sigma0=SIGMA0, ranker=r, batch_size=BATCH, seed=a.seed * 100 + i
        )
        for i, r in enumerate(RANKERS)
    ]
    scheduler = BanditScheduler(archive, pool, num_active=NUM_ACTIVE, zeta=ZETA)
    used, times = set(), []
    for _ in range(a.iterations):
        t0 = time.perf_counter()
        x = scheduler.ask()
        used.update(np.flatnonzero(scheduler.active).tolist())
        objective, measures = sphere(x)
        scheduler.tell(objective, measures)
        times.append(time.perf_counter() - t0)
    # its first generation compiles (numba, in numpy_groupies): reported apart, as evotensor's compile
    first, run = times[0], sum(times[1:])
    s = archive.stats
    return {
        "wall_s": first + run,
        "compile_s": first,
        "run_s": run,
        "qd_score": float(s.qd_score),
        "coverage": float(s.coverage),
        "obj_max": float(s.obj_max),
        "emitters_used": len(used),
        "version": f"ribs {version('ribs')}",
    }


def run_worker(impl: str, a, seed: int) -> dict:
    python = sys.executable if impl == "evotensor" else venv_python("qd")
    return run_json_worker(
        python, __file__, ["--worker", impl, "--seed", str(seed), "--iterations", str(a.iterations)]
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", choices=("evotensor", "pyribs"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=500)
    ap.add_argument("--impls", default="evotensor,pyribs")
    ap.add_argument("--out", help="write the raw rows here (JSON)")
    a = ap.parse_args()
    if a.worker:
        print(json.dumps((worker_evotensor if a.worker == "evotensor" else worker_pyribs)(a)))
        return
    impls = a.impls.split(",")
    print(stamp())
    print("| seed | library | run s (compile s) | QD score | coverage | best | emitters used |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    for seed, impl in alternating(impls, a.seeds):
        g = run_worker(impl, a, seed)
        rows.append({"seed": seed, "impl": impl, **g})
        timing = f"{g['run_s']:.2f} ({g['compile_s']:.1f})"
        print(
            f"| {seed} | {impl} ({g['version']}) | {timing} | {g['qd_score']:.0f} "
            f"| {g['coverage']:.3f} | {g['obj_max']:.2f} | {g['emitters_used']} |",
            flush=True,
        )
    print(f"load after: {os.getloadavg()}")
    if a.out:
        with open(a.out, "w") as fh:
            json.dump({"iterations": a.iterations, "rows": rows}, fh)


if __name__ == "__main__":
    main()
