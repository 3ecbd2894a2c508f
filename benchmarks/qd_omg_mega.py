"""OMG-MEGA: evotensor's ``GradientOperatorEmitter`` under ``MAPElites`` beside QDax's
``OMGMEGAEmitter``, like for like (run by hand).

Setup of QDax's ``examples/omgmega.ipynb``: Rastrigin-proj in ``DIMS`` dimensions (fitness
``-(10 n + sum(z^2 - 10 cos 2 pi z))``, ``z = x - 2.048``; descriptors the means of the folded
halves), a 100 x 100 grid over ``[-5.12, 5.12]^2`` (QDax: the same cells as Euclidean centroids),
batch 36, gradient coefficients of variance 10 (QDax ``sigma_g=10``; ours ``sigma_g=sqrt(10)``, a
standard deviation), normalised gradients, no clipping, ``GENERATIONS`` batches in all (QDax:
``init`` on the first batch, then ``GENERATIONS - 1`` ``scan_update``s in one compiled scan, its
metrics returned as its example does; ours: one ``evotensor.run``). The first batch is the same
36 N(0, 1) solutions in both (QDax's example draws 100). QDax's gradients come from its scoring
function (``jax.grad`` of the example's objective and descriptors, ``nan_to_num``), stored per elite;
ours from ``problem_jacobian`` at the parents.

Reported per seed, the engines alternating, each in a fresh process: compile s, run s,
evaluations/s; then both final archives re-scored by the same code (every elite evaluated by
``RastriginProj`` and inserted into an empty grid): coverage, QD score (offset: the task's worst
fitness), QDax's normalised QD score (the mean over all cells of ``(f - worst) / (best - worst)``,
worst and best as its example computes them), the best fitness.

QDax 0.5.0 runs in the ``qd`` venv of ``bench_venvs.py`` (``make bench-venvs VENVS=qd``), this script
calling itself there with ``--impl qdax``.

    .venv/bin/python benchmarks/qd_omg_mega.py
    .venv/bin/python benchmarks/qd_omg_mega.py --generations 2000 --seeds 1
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

DIMS, CELLS, BATCH, GENERATIONS, VARIANCE_G = 1000, 100, 36, 20_000, 10.0
LIMIT, SHIFT = 5.12, 0.4 * 5.12


def first_batch(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(BATCH, DIMS)).astype(np.float32)


# -- evotensor ---------------------------------------------------------------------------------
def run_evotensor(seed: int, generations: int, out_path: str) -> dict:
    import jax

    import evotensor
    from evotensor.problems.qd import RastriginProj
    from evotensor.qd import GradientOperatorEmitter, GridArchive, MAPElites, problem_jacobian

    problem = RastriginProj(DIMS)
    emitter = GradientOperatorEmitter(
        np.zeros(DIMS),
        sigma_g=math.sqrt(VARIANCE_G),
        jacobian=problem_jacobian(problem),
        batch_size=BATCH,
        initial_solutions=first_batch(seed),
    )
    archive = GridArchive(solution_dim=DIMS, dims=(CELLS, CELLS), ranges=problem.descriptor_ranges)
    result = evotensor.run(
        MAPElites(archive, [emitter]), problem, generations, jax.random.key(seed), progress=False
    )
    state = result.state.archive
    np.savez(out_path, solutions=np.asarray(state.solutions), occupied=np.asarray(state.occupied))
    return {"compile_s": result.compile_seconds, "run_s": result.run_seconds}


def rescore(path: str) -> dict:
    """Both engines' elites through the same code: evaluated by ``RastriginProj``, added to an empty
    grid."""
    import jax.numpy as jnp

    from evotensor.problems.qd import RastriginProj
    from evotensor.qd import GridArchive

    problem = RastriginProj(DIMS)
    data = np.load(path)
    x = jnp.asarray(data["solutions"][data["occupied"]])
    evaluation = problem.evaluate(None, x)
    worst = problem.fitness_range[0]
    archive = GridArchive(
        solution_dim=DIMS, dims=(CELLS, CELLS), ranges=problem.descriptor_ranges, qd_score_offset=worst
    )
    state, _ = archive.add(archive.init(), x, evaluation.fitness, evaluation.descriptor)
    stats = {k: float(v) for k, v in archive.stats(state).items()}
    # QDax's example normalisation: worst at x = -5.12 everywhere, best at x = 2.048
    qdax_worst = float(problem.evaluate(None, jnp.full((1, DIMS), -LIMIT)).fitness[0])
    objective = np.asarray(state.objective)[np.asarray(state.occupied)]
    normalised = float(np.sum((objective - qdax_worst) / (0.0 - qdax_worst)) / archive.num_cells)
    return {
        "coverage": stats["coverage"],
        "qd_score": stats["qd_score"],
        "qdax_qd_score": normalised,
        "best": stats["obj_max"],
    }


# -- QDax (in its venv) ------------------------------------------------------------------------
def run_qdax(seed: int, generations: int, out_path: str) -> dict:
    import jax
    import jax.numpy as jnp
    from qdax.core.containers.mapelites_repertoire import compute_euclidean_centroids
    from qdax.core.emitters.omg_mega_emitter import OMGMEGAEmitter
    from qdax.core.map_elites import MAPElites

    # the example's functions, as it writes them
    def scoring(x):
        return -(10 * x.shape[-1] + jnp.sum((x - SHIFT) ** 2 - 10 * jnp.cos(2 * jnp.pi * (x - SHIFT))))

    def clip(x):
        return x * (x <= LIMIT) * (x >= -LIMIT) + LIMIT / x * ((x > LIMIT) + (x < -LIMIT))

    def descriptor_1(x):
        return jnp.mean(clip(x[: x.shape[0] // 2]))

    def descriptor_2(x):
        return jnp.mean(clip(x[x.shape[0] // 2 :]))

    def one(x):
        gradients = jnp.array([jax.grad(scoring)(x), jax.grad(descriptor_1)(x), jax.grad(descriptor_2)(x)]).T
        return (
            scoring(x),
            jnp.array([descriptor_1(x), descriptor_2(x)]),
            {"gradients": jnp.nan_to_num(gradients)},
        )

    def scoring_fn(x, key):
        return jax.vmap(one)(x)

    def metrics(repertoire):
        return {"coverage": jnp.mean(repertoire.fitnesses != -jnp.inf)}

    centroids = compute_euclidean_centroids(grid_shape=(CELLS, CELLS), minval=-LIMIT, maxval=LIMIT)
    emitter = OMGMEGAEmitter(batch_size=BATCH, sigma_g=VARIANCE_G, num_descriptors=2, centroids=centroids)
    map_elites = MAPElites(scoring_function=scoring_fn, emitter=emitter, metrics_function=metrics)
    key = jax.random.key(seed)
    repertoire, emitter_state, _ = map_elites.init(jnp.asarray(first_batch(seed)), centroids, key)

    def loop(repertoire, emitter_state, key):
        (repertoire, emitter_state, key), history = jax.lax.scan(
            map_elites.scan_update, (repertoire, emitter_state, key), (), length=generations - 1
        )
        return repertoire, history

    t = time.perf_counter()
    compiled = jax.jit(loop).lower(repertoire, emitter_state, key).compile()
    compile_s = time.perf_counter() - t
    t = time.perf_counter()
    repertoire, _ = jax.block_until_ready(compiled(repertoire, emitter_state, key))
    run_s = time.perf_counter() - t
    occupied = np.asarray(repertoire.fitnesses).reshape(-1) != -np.inf
    np.savez(out_path, solutions=np.asarray(repertoire.genotypes), occupied=occupied)
    return {"compile_s": compile_s, "run_s": run_s}


# -- driver ------------------------------------------------------------------------------------
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--impl", choices=["evotensor", "qdax"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--generations", type=int, default=GENERATIONS)
    p.add_argument("--out")
    args = p.parse_args()
    if args.impl:
        run = run_evotensor if args.impl == "evotensor" else run_qdax
        print(json.dumps(run(args.seed, args.generations, args.out)))
        return
    print(
        f"# OMG-MEGA, Rastrigin-proj {DIMS}-d, {CELLS}x{CELLS} grid, batch {BATCH}, {args.generations} gens"
    )
    print(f"# {bench_venvs.stamp()}")
    print("| seed | engine | compile s | run s | evals/s | coverage | QD score | QDax-normalised | best |")
    print("|---|---|---|---|---|---|---|---|---|")
    pythons = {"evotensor": sys.executable, "qdax": bench_venvs.venv_python("qd")}
    names = {"evotensor": "evotensor", "qdax": "QDax 0.5.0 OMGMEGAEmitter"}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed, impl in bench_venvs.alternating(["evotensor", "qdax"], args.seeds):
            out = os.path.join(tmp, f"{impl}-{seed}.npz")
            extra = [
                "--impl",
                impl,
                "--seed",
                str(seed),
                "--generations",
                str(args.generations),
                "--out",
                out,
            ]
            r = bench_venvs.run_json_worker(pythons[impl], __file__, extra)
            r.update(rescore(out))
            rows.append((impl, r))
            print(
                f"| {seed} | {names[impl]} | {r['compile_s']:.1f} | {r['run_s']:.1f} | "
                f"{BATCH * args.generations / r['run_s']:,.0f} | {r['coverage']:.4f} | {r['qd_score']:.4g} | "
                f"{r['qdax_qd_score']:.4f} | {r['best']:.1f} |",
                flush=True,
            )
    for impl in ("evotensor", "qdax"):
        mine = [r for name, r in rows if name == impl]
        print(
            f"# {names[impl]}: median run {statistics.median(r['run_s'] for r in mine):.1f} s, median "
            f"coverage {statistics.median(r['coverage'] for r in mine):.4f}"
        )
    print(f"# finished {datetime.datetime.now(datetime.UTC):%H:%M} UTC")


if __name__ == "__main__":
    main()
