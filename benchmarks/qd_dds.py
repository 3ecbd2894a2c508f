"""Density Descent Search: evotensor's ``DensityArchive`` + ``ranker="density"`` beside pyribs 0.12's
``DensityArchive`` + ``DensityRanker`` (run by hand, not a test).

Workload: pyribs' sphere example, configuration ``dds`` (``examples/sphere.py``, "hyperparameters
from the DDS paper"), at its sizes: the linear-projection sphere in 100 dimensions
(``evotensor.problems.qd.LinearProjection``; the pyribs worker computes the same formulas in NumPy),
a ``DensityArchive`` of 10,000 buffered measures with a Gaussian KDE of bandwidth 25.6, fifteen
CMA-ES emitters (``x0 = 0``, ``sigma0 = 1.5``, ranker ``density``, selection ``mu``, restart
``basic``, batch 36) that draw their restart elites from a 100 x 100 grid result archive over
``[-256, 256]^2``. ``--iterations`` generations (pyribs' example runs 10,000). Each library runs
every seed in a fresh interpreter, alternating.

Reported per run: wall time of the generations with the first-call cost apart (evotensor:
``evotensor.run``'s compile time; pyribs: its first generation, which compiles numpy_groupies'
numba kernels), and the result archive's QD score (offset 0: the objective is in [0, 100]),
coverage and best objective. The libraries draw different random numbers, so quality is compared
over seeds, not run by run. pyribs' reservoir over-represents the first measures of each batch
(``evotensor.qd.density_archive``'s docstring); ours is a uniform sample.

    .venv/bin/python benchmarks/qd_dds.py --seeds 3 --iterations 1000
    .venv/bin/python benchmarks/qd_dds.py --part reservoir   # the buffers alone, both libraries
    .venv/bin/python benchmarks/qd_dds.py --impls evotensor --raw-density   # ranking ablation

``--part reservoir`` feeds ``RESERVOIR_BATCHES`` batches of ``RESERVOIR_BATCH`` distinct scalar
measures (the stream position) into a buffer of ``RESERVOIR_SIZE`` rows, over ``RESERVOIR_SEEDS``
seeds, and reports per buffer the repeated rows, the rows holding the first measure of a batch (a
uniform sample holds ``RESERVOIR_SIZE / RESERVOIR_BATCH`` of them) and the mean stream position
over the stream length (0.5 for a uniform sample).
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
from qd_bandit import LIMIT, sphere  # noqa: E402

DIM, CELLS, BATCH, EMITTERS, SIGMA0 = 100, (100, 100), 36, 15, 1.5
BUFFER, BANDWIDTH = 10_000, 25.6
RESERVOIR_SIZE, RESERVOIR_BATCH, RESERVOIR_BATCHES, RESERVOIR_SEEDS = 100, 1000, 100, 20


def reservoir_figures(buffers: list[np.ndarray]) -> dict:
    """Mean over the buffers of: repeated rows, batch-first rows, mean position / stream length."""
    total = RESERVOIR_BATCH * RESERVOIR_BATCHES
    return {
        "repeated": float(np.mean([RESERVOIR_SIZE - len(np.unique(b)) for b in buffers])),
        "batch_first": float(np.mean([np.sum(b % RESERVOIR_BATCH == 0) for b in buffers])),
        "mean_position": float(np.mean([b.mean() / total for b in buffers])),
    }


def reservoir_evotensor() -> dict:
    import jax
    import jax.numpy as jnp

    from evotensor.qd import DensityArchive

    archive = DensityArchive(measure_dim=1, buffer_size=RESERVOIR_SIZE, bandwidth=1.0)
    add = jax.jit(lambda s, m: archive.add(s, None, jnp.zeros(RESERVOIR_BATCH), m)[0])
    buffers = []
    for seed in range(RESERVOIR_SEEDS):
        state = archive.init(jax.random.key(seed))
        for b in range(RESERVOIR_BATCHES):
            start = b * RESERVOIR_BATCH
            state = add(state, np.arange(start, start + RESERVOIR_BATCH, dtype=np.float32)[:, None])
        buffers.append(np.asarray(state.buffer)[:, 0])
    return reservoir_figures(buffers)


def reservoir_pyribs() -> dict:
    from ribs.archives import DensityArchive

    buffers = []
    for seed in range(RESERVOIR_SEEDS):
        archive = DensityArchive(measure_dim=1, buffer_size=RESERVOIR_SIZE, bandwidth=1.0, seed=seed)
        for b in range(RESERVOIR_BATCHES):
            start = b * RESERVOIR_BATCH
            archive.add(None, None, np.arange(start, start + RESERVOIR_BATCH, dtype=float)[:, None])
        buffers.append(np.asarray(archive.buffer)[:, 0])
    return reservoir_figures(buffers)


def ranges() -> list[tuple[float, float]]:
    half = DIM // 2
    return [(-LIMIT * half, LIMIT * half), (-LIMIT * (DIM - half), LIMIT * (DIM - half))]


def worker_evotensor(a) -> dict:
    import jax

    import evotensor
    from evotensor.problems.qd import LinearProjection
    from evotensor.qd import CMAESEmitter, DensityArchive, EmitterGroup, GridArchive, MAPElites
    from evotensor.qd.emitters import Ranker

    grid = GridArchive(solution_dim=DIM, dims=CELLS, ranges=ranges())
    # --raw-density: rank by the density itself, as pyribs' values (float32 underflow makes far
    # batches flat, so CMA-ES's flat-ranking stop restarts the emitter)
    ranker = Ranker("raw-density", lambda o, m, info, d: -info.density) if a.raw_density else "density"
    emitter = CMAESEmitter(
        np.zeros(DIM), SIGMA0, ranker=ranker, selection_rule="mu", restart_rule="basic", batch_size=BATCH
    )
    strategy = MAPElites(
        DensityArchive(measure_dim=2, buffer_size=BUFFER, bandwidth=BANDWIDTH),
        [EmitterGroup(emitter, EMITTERS)],
        result_archive=grid,
    )
    t0 = time.perf_counter()
    result = evotensor.run(
        strategy, LinearProjection(DIM, "sphere"), a.iterations, jax.random.key(a.seed), progress=False
    )
    wall = time.perf_counter() - t0
    stats = {k: float(v) for k, v in grid.stats(result.state.result).items()}
    return {
        "wall_s": wall,
        "compile_s": float(result.compile_seconds),
        "run_s": float(result.run_seconds),
        "qd_score": stats["qd_score"],
        "coverage": stats["coverage"],
        "obj_max": stats["obj_max"],
        "restarts": int(np.asarray(result.state.emitters[0].restarts).sum()),
        "version": f"evotensor, jax {jax.__version__}",
    }


def worker_pyribs(a) -> dict:
    from importlib.metadata import version

    from ribs.archives import DensityArchive, GridArchive
    from ribs.emitters import EvolutionStrategyEmitter
    from ribs.schedulers import Scheduler

    density = DensityArchive(
        measure_dim=2, buffer_size=BUFFER, density_method="kde", bandwidth=BANDWIDTH, seed=a.seed
    )
    grid = GridArchive(solution_dim=DIM, dims=CELLS, ranges=ranges(), seed=a.seed)
    seeds = np.random.SeedSequence(a.seed).spawn(EMITTERS)
    emitters = [
        EvolutionStrategyEmitter(
            grid,  # as the example's pass_result_archive_to_emitters: restarts from its elites
            x0=np.zeros(DIM),
            sigma0=SIGMA0,
            ranker="density",
            selection_rule="mu",
            restart_rule="basic",
            batch_size=BATCH,
            seed=s,
        )
        for s in seeds
    ]
    scheduler = Scheduler(density, emitters, result_archive=grid)
    times = []
    for _ in range(a.iterations):
        t0 = time.perf_counter()
        x = scheduler.ask()
        objective, measures = sphere(x)
        scheduler.tell(objective, measures)
        times.append(time.perf_counter() - t0)
    first, run = times[0], sum(times[1:])
    s = grid.stats
    return {
        "wall_s": first + run,
        "compile_s": first,
        "run_s": run,
        "qd_score": float(s.qd_score),
        "coverage": float(s.coverage),
        "obj_max": float(s.obj_max),
        "restarts": int(sum(e.restarts for e in emitters)),
        "version": f"ribs {version('ribs')}",
    }


def run_worker(impl: str, a, seed: int) -> dict:
    python = sys.executable if impl == "evotensor" else venv_python("qd")
    args = ["--worker", impl, "--seed", str(seed), "--iterations", str(a.iterations)]
    return run_json_worker(python, __file__, args + (["--raw-density"] if a.raw_density else []))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", choices=("evotensor", "pyribs"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=1000)
    ap.add_argument("--impls", default="evotensor,pyribs")
    ap.add_argument("--out", help="write the raw rows here (JSON)")
    ap.add_argument("--part", choices=("run", "reservoir"), default="run")
    ap.add_argument(
        "--raw-density", action="store_true", help="evotensor ranks by the density, not its logarithm"
    )
    a = ap.parse_args()
    if a.worker:
        if a.part == "reservoir":
            print(json.dumps(reservoir_evotensor() if a.worker == "evotensor" else reservoir_pyribs()))
        else:
            print(json.dumps((worker_evotensor if a.worker == "evotensor" else worker_pyribs)(a)))
        return
    if a.part == "reservoir":
        print(stamp())
        print(
            f"# {RESERVOIR_BATCHES} batches of {RESERVOIR_BATCH} into {RESERVOIR_SIZE} rows, "
            f"{RESERVOIR_SEEDS} seeds; uniform: {RESERVOIR_SIZE / RESERVOIR_BATCH:g} batch-first rows"
        )
        print("| library | repeated rows | batch-first rows | mean position |")
        print("|---|---|---|---|")
        for impl in a.impls.split(","):
            python = sys.executable if impl == "evotensor" else venv_python("qd")
            r = run_json_worker(python, __file__, ["--worker", impl, "--part", "reservoir"])
            print(f"| {impl} | {r['repeated']:.2f} | {r['batch_first']:.2f} | {r['mean_position']:.3f} |")
        return
    impls = a.impls.split(",")
    print(stamp())
    print(f"# pyribs sphere 'dds': {DIM}-d, {EMITTERS} x {BATCH}, {a.iterations} iterations")
    print("| seed | library | run s (first call s) | QD score | coverage | best | restarts |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    for seed, impl in alternating(impls, a.seeds):
        g = run_worker(impl, a, seed)
        rows.append({"seed": seed, "impl": impl, **g})
        timing = f"{g['run_s']:.2f} ({g['compile_s']:.1f})"
        print(
            f"| {seed} | {impl} ({g['version']}) | {timing} | {g['qd_score']:.0f} "
            f"| {g['coverage']:.3f} | {g['obj_max']:.2f} | {g['restarts']} |",
            flush=True,
        )
    print(f"load after: {os.getloadavg()}")
    if a.out:
        with open(a.out, "w") as fh:
            json.dump({"iterations": a.iterations, "rows": rows}, fh)


if __name__ == "__main__":
    main()
