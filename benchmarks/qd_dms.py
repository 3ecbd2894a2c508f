"""Discount Model Search: evotensor's ``DiscountArchive`` beside pyribs 0.12's ``DiscountArchive`` +
``DiscountModelManager`` (PyTorch, CPU) (run by hand, not a test).

Workload: the DMS paper's ``sphere_100d`` configuration (Tjanaka et al. 2026, repository
``icaros-usc/discount-models``: ``config/algo/dms.yaml`` and the files it includes): the 100-d
linear-projection sphere with its objective normalised to ``[0, 1]``
(``LinearProjection(100, "sphere", scale=1)``; the pyribs worker computes the same formulas in
NumPy), fifteen CMA-ES emitters (``x0 = 0``, ``sigma0 = 0.5``, ranker ``imp``, selection ``mu``,
restart ``basic``, batch 36) that draw their restart elites from a 100 x 100 grid result archive
over ``[-256, 256]^2``; the discount model an MLP ``2 -> 128 -> 128 -> 1`` with ReLU, measures
scaled to ``[-1, 1]``, Adam (lr 0.001), at most 5 epochs of batches of 32 per generation stopping
at an epoch loss of 0.05, archive learning rate 0.1, ``threshold_min`` 0, 100 empty points per
training and 1000 at init. ``--iterations`` generations (the paper runs 10,000). Each library runs
every seed in a fresh interpreter, alternating; PyTorch runs on the CPU with its default threads.

``--measures 20`` (or 50) is the paper's ``sphere_20_100d`` (``sphere_50_100d``): that many measures
(sums of 5 or 2 consecutive folded coordinates, ranges ``+-5.12`` times that), a CVT result archive
of 10,000 cells whose centroids the parent computes once (``kmeans_centroids``, 100,000 uniform
samples, seed 42) and hands to both libraries in a ``.npy`` file, and emitters restarting every 100
iterations (the paper's ``restart_rule`` for those domains).

Reported per run: wall time of the generations with the first-call cost apart (evotensor:
``evotensor.run``'s compile time; pyribs: its first generation, which compiles numpy_groupies'
numba kernels; pyribs' initial model fit counts as run time), the result archive's QD score
(offset 0), coverage and best objective, and the last training's epochs. The libraries draw
different random numbers, so quality is compared over seeds, not run by run.

    .venv/bin/python benchmarks/qd_dms.py --seeds 3 --iterations 1000
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
from qd_bandit import LIMIT, SHIFT  # noqa: E402
from qd_dds import BATCH, CELLS, DIM, EMITTERS  # noqa: E402

SIGMA0, LEARNING_RATE, CUTOFF, EPOCHS, TRAIN_BATCH = 0.5, 0.1, 0.05, 5, 32
INIT_POINTS, EMPTY_POINTS, HIDDEN, ADAM_LR = 1000, 100, 128, 1e-3
CENTROIDS, CENTROID_SAMPLES, CENTROID_SEED = 10_000, 100_000, 42


def group_sizes(k: int) -> list[int]:
    """Coordinates per measure (``LinearProjection``'s groups: the last ``DIM mod k`` one longer)."""
    return [DIM // k + (g >= k - DIM % k) for g in range(k)]


def ranges(k: int) -> list[tuple[float, float]]:
    return [(-LIMIT * m, LIMIT * m) for m in group_sizes(k)]


def sphere(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(objective [B] in [0, 1], measures [B, k])``: the paper's linear-projection sphere in NumPy."""
    z = x - SHIFT
    worst = (-LIMIT - SHIFT) ** 2 * x.shape[1]
    objective = (np.sum(z * z, axis=1) - worst) / (0.0 - worst)
    folded = np.where((x < -LIMIT) | (x > LIMIT), LIMIT / x, x)
    ends = np.cumsum(group_sizes(k))
    return objective, np.stack([folded[:, e - m : e].sum(1) for e, m in zip(ends, group_sizes(k))], axis=1)


def centroid_file(k: int) -> str:
    """The result archive's CVT centroids for ``k`` measures, computed once (``--measures > 2``)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".bench", f"dms_centroids_{k}.npy")
    if not os.path.exists(path):
        import jax

        from evotensor.qd import kmeans_centroids

        centroids, _ = kmeans_centroids(
            jax.random.key(CENTROID_SEED), CENTROIDS, ranges(k), samples=CENTROID_SAMPLES
        )
        os.makedirs(os.path.dirname(path), exist_ok=True)
        np.save(path, np.asarray(centroids, np.float64))
    return path


def restart_rule(k: int):
    return "basic" if k == 2 else 100


def worker_evotensor(a) -> dict:
    import jax
    import optax

    import evotensor
    from evotensor.problems.qd import LinearProjection
    from evotensor.qd import (
        CMAESEmitter,
        CVTArchive,
        DiscountArchive,
        DiscountMLP,
        EmitterGroup,
        GridArchive,
        MAPElites,
    )

    k = a.measures
    if k == 2:
        grid = GridArchive(solution_dim=DIM, dims=CELLS, ranges=ranges(k))
    else:
        grid = CVTArchive(solution_dim=DIM, centroids=np.load(a.centroids), ranges=ranges(k))
    search = DiscountArchive(
        result_archive=grid,
        learning_rate=LEARNING_RATE,
        threshold_min=0.0,
        model=DiscountMLP((HIDDEN, HIDDEN), "relu"),
        optimizer=optax.adam(ADAM_LR),
        train_epochs=EPOCHS,
        train_cutoff_loss=CUTOFF,
        train_batch_size=TRAIN_BATCH,
        init_train_points=INIT_POINTS,
        empty_points=EMPTY_POINTS,
    )
    emitter = CMAESEmitter(
        np.zeros(DIM),
        SIGMA0,
        ranker="imp",
        selection_rule="mu",
        restart_rule=restart_rule(k),
        batch_size=BATCH,
    )
    strategy = MAPElites(search, [EmitterGroup(emitter, EMITTERS)], result_archive=grid)
    problem = LinearProjection(DIM, "sphere", scale=1.0, num_measures=k)
    t0 = time.perf_counter()
    result = evotensor.run(strategy, problem, a.iterations, jax.random.key(a.seed), progress=False)
    wall = time.perf_counter() - t0
    stats = {name: float(v) for name, v in grid.stats(result.state.result).items()}
    return {
        "wall_s": wall,
        "compile_s": float(result.compile_seconds),
        "run_s": float(result.run_seconds),
        "qd_score": stats["qd_score"],
        "coverage": stats["coverage"],
        "obj_max": stats["obj_max"],
        "epochs": int(result.state.archive.epochs),
        "restarts": int(np.asarray(result.state.emitters[0].restarts).sum()),
        "version": f"evotensor, jax {jax.__version__}",
    }


def worker_pyribs(a) -> dict:
    from importlib.metadata import version

    import torch
    from ribs.archives import CVTArchive, DiscountArchive, GridArchive
    from ribs.discount_models import MLP, DiscountModelManager
    from ribs.emitters import EvolutionStrategyEmitter
    from ribs.schedulers import Scheduler

    torch.manual_seed(a.seed)
    k = a.measures
    if k == 2:
        grid = GridArchive(solution_dim=DIM, dims=CELLS, ranges=ranges(k), seed=a.seed)
    else:
        grid = CVTArchive(solution_dim=DIM, centroids=np.load(a.centroids), ranges=ranges(k), seed=a.seed)
    bounds = np.asarray(ranges(k))
    model = MLP([(k, HIDDEN), (HIDDEN, HIDDEN), (HIDDEN, 1)], torch.nn.ReLU)
    manager = DiscountModelManager(
        model,
        torch.optim.Adam(model.parameters(), lr=ADAM_LR, betas=(0.9, 0.999)),
        torch.device("cpu"),
        train_epochs=EPOCHS,
        train_cutoff_loss=CUTOFF,
        train_batch_size=TRAIN_BATCH,
        normalize_measures="negative_one_one",
        measures_low=bounds[:, 0],
        measures_high=bounds[:, 1],
    )
    search = DiscountArchive(
        solution_dim=DIM,
        measure_dim=k,
        learning_rate=LEARNING_RATE,
        threshold_min=0.0,
        discount_model_manager=manager,
        result_archive=grid,
        init_train_points=INIT_POINTS,
        empty_points=EMPTY_POINTS,
        seed=a.seed,
    )
    seeds = np.random.SeedSequence(a.seed).spawn(EMITTERS)
    emitters = [
        EvolutionStrategyEmitter(
            grid,  # the paper's pass_result_archive_to_emitters: restarts from its elites
            x0=np.zeros(DIM),
            sigma0=SIGMA0,
            ranker="imp",
            selection_rule="mu",
            restart_rule=restart_rule(k),
            batch_size=BATCH,
            seed=s,
        )
        for s in seeds
    ]
    scheduler = Scheduler(search, emitters, result_archive=grid)
    t0 = time.perf_counter()
    search.init_discount_model()
    init = time.perf_counter() - t0
    times, info = [], {"epochs": 0}
    for _ in range(a.iterations):
        t0 = time.perf_counter()
        x = scheduler.ask()
        objective, measures = sphere(x, k)
        scheduler.tell(objective, measures)
        info = search.train_discount_model()
        times.append(time.perf_counter() - t0)
    first, run = times[0], sum(times[1:]) + init
    s = grid.stats
    return {
        "wall_s": first + run,
        "compile_s": first,
        "run_s": run,
        "qd_score": float(s.qd_score),
        "coverage": float(s.coverage),
        "obj_max": float(s.obj_max),
        "epochs": int(info["epochs"]),
        "restarts": int(sum(e.restarts for e in emitters)),
        "version": f"ribs {version('ribs')}, torch {torch.__version__}",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", choices=("evotensor", "pyribs"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=1000)
    ap.add_argument("--measures", type=int, default=2, help="2 (sphere_100d), 20 or 50 (CVT domains)")
    ap.add_argument("--centroids", help="(workers) the CVT centroids' .npy file")
    ap.add_argument("--impls", default="evotensor,pyribs")
    ap.add_argument("--out", help="write the raw rows here (JSON)")
    a = ap.parse_args()
    if a.worker:
        print(json.dumps((worker_evotensor if a.worker == "evotensor" else worker_pyribs)(a)))
        return
    print(stamp())
    domain = "sphere_100d" if a.measures == 2 else f"sphere_{a.measures}_100d"
    centroids = [] if a.measures == 2 else ["--centroids", centroid_file(a.measures)]
    print(f"# DMS {domain}: {DIM}-d, {a.measures} measures, {EMITTERS} x {BATCH}, {a.iterations} iterations")
    print("| seed | library | run s (first call s) | QD score | coverage | best | last epochs | restarts |")
    print("|---|---|---|---|---|---|---|---|")
    rows = []
    for seed, impl in alternating(a.impls.split(","), a.seeds):
        python = sys.executable if impl == "evotensor" else venv_python("dms")
        args = ["--worker", impl, "--seed", str(seed), "--iterations", str(a.iterations)]
        args += ["--measures", str(a.measures), *centroids]
        g = run_json_worker(python, __file__, args)
        rows.append({"seed": seed, "impl": impl, **g})
        print(
            f"| {seed} | {impl} ({g['version']}) | {g['run_s']:.2f} ({g['compile_s']:.1f}) "
            f"| {g['qd_score']:.1f} | {g['coverage']:.3f} | {g['obj_max']:.4f} | {g['epochs']} "
            f"| {g['restarts']} |",
            flush=True,
        )
    print(f"load after: {os.getloadavg()}")
    if a.out:
        with open(a.out, "w") as fh:
            json.dump({"iterations": a.iterations, "measures": a.measures, "rows": rows}, fh)


if __name__ == "__main__":
    main()
