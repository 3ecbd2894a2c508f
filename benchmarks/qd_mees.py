"""ME-ES: evotensor's ``MEESEmitter`` beside QDax 0.5's ``MEESEmitter`` (run by hand, not a test).

Workload, the same in both libraries:

* task: QDax's planar arm with 100 joints (evotensor ``evotensor.problems.qd.Arm(num_joints=100)``,
  which reproduces ``qdax.tasks.arm.arm_scoring_function``; genotypes in [0, 1], clipped inside
  the arm on both sides): fitness ``-std(clip(x, 0, 1))`` in [-0.5, 0], descriptor the end
  effector in [0, 1]^2;
* archive: grid 64 x 64 over [0, 1]^2 (evotensor ``GridArchive(dims=(64, 64))``; QDax a
  ``MapElitesRepertoire`` over ``compute_euclidean_centroids((64, 64), 0, 1)``, the same cells
  found by nearest centre);
* ME-ES explore-exploit with QDax's default ``MEESConfig``: 1000 mirrored samples, sigma 0.02,
  centred ranks, 10 optimizer steps per parent, Adam 0.01, l2 coefficient 0.02, 10 novelty
  neighbours, 5 last-updated offspring, 2 exploit cells, 5 explore cells; the novelty archive
  holds ``ITERATIONS`` rows (QDax's ``total_generations``; evotensor's ``novelty_capacity``);
* start point: all angles 0.5 (evotensor's ``x0``; QDax's ``MAPElites.init`` with that one
  genotype, which QDax's ME-ES takes as its first offspring);
* ``ITERATIONS`` ES steps: one evotensor generation evaluates the offspring and 1000 samples (1001
  evaluations); one QDax ``update`` evaluates the offspring, then 1000 samples (1001 evaluations;
  its ``init`` evaluates the start point once more, untimed). In both, only the offspring may enter
  the archive, the samples only estimate the gradient.

Timing: both libraries run chunks of ``--chunk`` generations as one compiled ``lax.scan``, compiled
ahead of time, so compile time is reported beside run time. evotensor: ``evotensor.run(...,
chunk_size=CHUNK)``'s ``compile_seconds`` and ``run_seconds``. QDax: ``jax.lax.scan(
map_elites.scan_update, ..., length=CHUNK)`` lowered and compiled with ``jax.jit(...).lower(...)
.compile()`` (the compile time), then every chunk run back to back with ``block_until_ready`` (the
run time); ``jit(MAPElites.init)`` runs first, untimed (as evotensor's ``init``).

Reported per run: run seconds (compile seconds), evaluations per second of the run part (1001 x
``ITERATIONS`` / run seconds), QD score with offset -1 (sum over elites of fitness + 1: evotensor
``qd_score_offset=-1.0``; QDax ``default_qd_metrics(qd_offset=1.0)``, which *adds* its offset per
elite, the same number), coverage as a fraction of the 4096 cells (QDax reports percent: divided by
100) and the best fitness; then the median of each per library. The two libraries draw different
random numbers, so quality is compared over seeds, not run by run. Each library runs every seed in
a fresh interpreter, alternating; JAX on the CPU.

Where the two runs are not step for step alike (evotensor's ``evotensor/qd/emitters/mees.py`` lists
its documented differences): evotensor scores the offspring and the next step's samples in one
batch, so a resampled parent is drawn from the archive before that offspring is added (QDax:
after); QDax's novelty also counts one empty (all-zero) slot of the novelty archive, a phantom
neighbour at (0, 0); evotensor clips samples and offspring to [0, 1] (``bounds``), while QDax
leaves its genotypes unclipped (only the arm clips; rarely binding here, where the elites stay
near 0.5); QDax's novelty archive of ``ITERATIONS`` rows
wraps on the last update (its mask then keeps one row), which matters only if that last step
climbs novelty (not at 1000 generations: step 999 is an exploit step). Note also that the start
point (all 0.5, a straight arm) already has the best possible fitness, 0.

    .venv/bin/python benchmarks/qd_mees.py --seeds 3
    .venv/bin/python benchmarks/qd_mees.py --seeds 1 --iterations 50   # smoke

QDax lives in the ``qd`` venv of ``bench_venvs.py`` (``make bench-venvs VENVS=qd``).
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

JOINTS, CELLS, QD_OFFSET = 100, (64, 64), -1.0
# QDax's MEESConfig defaults (evotensor's MEESEmitter defaults are the same values)
SAMPLES, SIGMA, LR, L2, STEPS = 1000, 0.02, 0.01, 0.02, 10
NEIGHBORS, RECENT, EXPLOIT_CELLS, EXPLORE_CELLS = 10, 5, 2, 5
EVALS_PER_GENERATION = 1 + SAMPLES


def chunk_lengths(iterations: int, chunk: int) -> list[int]:
    """The scan lengths of a run of ``iterations`` generations in chunks of ``chunk``."""
    return [chunk] * (iterations // chunk) + ([iterations % chunk] if iterations % chunk else [])


def worker_evotensor(a) -> dict:
    import jax

    import evotensor
    from evotensor.problems.qd import Arm
    from evotensor.qd import GridArchive, MAPElites, MEESEmitter

    problem = Arm(num_joints=JOINTS)
    archive = GridArchive(
        solution_dim=JOINTS, dims=CELLS, ranges=problem.descriptor_ranges, qd_score_offset=QD_OFFSET
    )
    emitter = MEESEmitter(np.full(JOINTS, 0.5), novelty_capacity=a.iterations, bounds=(0.0, 1.0))
    strategy = MAPElites(archive, [emitter])
    t0 = time.perf_counter()
    result = evotensor.run(
        strategy,
        problem,
        a.iterations,
        jax.random.key(a.seed),
        progress=False,
        chunk_size=min(a.chunk, a.iterations),
    )
    wall = time.perf_counter() - t0
    stats = {k: float(v) for k, v in archive.stats(result.state.archive).items()}
    run_s = float(result.run_seconds)
    return {
        "wall_s": wall,
        "compile_s": float(result.compile_seconds),
        "run_s": run_s,
        "evals_per_s": EVALS_PER_GENERATION * a.iterations / run_s,
        "qd_score": stats["qd_score"],
        "coverage": stats["coverage"],
        "obj_max": stats["obj_max"] + 0.0,  # no "-0.0"
        "version": f"evotensor, jax {jax.__version__}",
    }


def worker_qdax(a) -> dict:
    from importlib.metadata import version

    import jax
    import jax.numpy as jnp
    from qdax.core.containers.mapelites_repertoire import compute_euclidean_centroids
    from qdax.core.emitters.mees_emitter import MEESConfig, MEESEmitter
    from qdax.core.map_elites import MAPElites
    from qdax.tasks.arm import arm_scoring_function
    from qdax.utils.metrics import default_qd_metrics

    config = MEESConfig(
        sample_number=SAMPLES,
        sample_sigma=SIGMA,
        sample_mirror=True,
        sample_rank_norm=True,
        num_optimizer_steps=STEPS,
        adam_optimizer=True,
        learning_rate=LR,
        l2_coefficient=L2,
        novelty_nearest_neighbors=NEIGHBORS,
        last_updated_size=RECENT,
        exploit_num_cell_sample=EXPLOIT_CELLS,
        explore_num_cell_sample=EXPLORE_CELLS,
        use_explore=True,
        use_exploit=True,
    )
    emitter = MEESEmitter(
        config=config, total_generations=a.iterations, scoring_fn=arm_scoring_function, num_descriptors=2
    )
    # QDax *adds* its offset per elite: sum(f) + 1 * n = sum(f + 1), evotensor's offset -1
    map_elites = MAPElites(
        scoring_function=arm_scoring_function,
        emitter=emitter,
        metrics_function=lambda r: default_qd_metrics(r, qd_offset=-QD_OFFSET),
    )
    centroids = compute_euclidean_centroids(grid_shape=CELLS, minval=0.0, maxval=1.0)
    key, init_key = jax.random.split(jax.random.key(a.seed))
    t_start = time.perf_counter()
    repertoire, emitter_state, _ = jax.block_until_ready(
        jax.jit(map_elites.init)(jnp.full((1, JOINTS), 0.5), centroids, init_key)
    )

    def chunk(carry, length):
        return jax.lax.scan(map_elites.scan_update, carry, None, length=length)

    lengths = chunk_lengths(a.iterations, min(a.chunk, a.iterations))
    carry = (repertoire, emitter_state, key)
    compiled, compile_s = {}, 0.0
    for length in sorted(set(lengths)):
        t0 = time.perf_counter()
        compiled[length] = jax.jit(chunk, static_argnums=1).lower(carry, length).compile()
        compile_s += time.perf_counter() - t0
    run_s = 0.0
    for length in lengths:
        t0 = time.perf_counter()
        carry, metrics = jax.block_until_ready(compiled[length](carry))
        run_s += time.perf_counter() - t0
    wall = time.perf_counter() - t_start
    return {
        "wall_s": wall,
        "compile_s": compile_s,
        "run_s": run_s,
        "evals_per_s": EVALS_PER_GENERATION * a.iterations / run_s,
        "qd_score": float(metrics["qd_score"][-1]),
        "coverage": float(metrics["coverage"][-1]) / 100.0,  # QDax: percent
        "obj_max": float(metrics["max_fitness"][-1]) + 0.0,  # no "-0.0"
        "version": f"qdax {version('qdax')}, jax {jax.__version__}",
    }


def run_worker(impl: str, a, seed: int) -> dict:
    python = sys.executable if impl == "evotensor" else venv_python("qd")
    args = ["--worker", impl, "--seed", str(seed), "--iterations", str(a.iterations), "--chunk", str(a.chunk)]
    return run_json_worker(python, __file__, args)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", choices=("evotensor", "qdax"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=1000)
    ap.add_argument("--chunk", type=int, default=50, help="generations per compiled lax.scan chunk (both)")
    ap.add_argument("--impls", default="evotensor,qdax")
    ap.add_argument("--out", help="write the raw rows here (JSON)")
    a = ap.parse_args()
    if a.worker:
        print(json.dumps((worker_evotensor if a.worker == "evotensor" else worker_qdax)(a)))
        return
    impls = a.impls.split(",")
    print(stamp())
    print(
        f"ME-ES on the {JOINTS}-joint arm, {CELLS[0]} x {CELLS[1]} grid, {a.iterations} generations of "
        f"{EVALS_PER_GENERATION} evaluations, chunks of {min(a.chunk, a.iterations)}"
    )
    print("| seed | library | run s (compile s) | evals/s | QD score | coverage | best |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    for seed, impl in alternating(impls, a.seeds):
        g = run_worker(impl, a, seed)
        rows.append({"seed": seed, "impl": impl, **g})
        timing = f"{g['run_s']:.2f} ({g['compile_s']:.1f})"
        print(
            f"| {seed} | {impl} ({g['version']}) | {timing} | {g['evals_per_s']:,.0f} "
            f"| {g['qd_score']:.1f} | {g['coverage']:.4f} | {g['obj_max']:.4f} |",
            flush=True,
        )
    for impl in impls:
        mine = [r for r in rows if r["impl"] == impl]
        if not mine:
            continue

        def med(key, rows=mine):
            return statistics.median(r[key] for r in rows)

        print(
            f"median {impl} ({len(mine)} seeds): run {med('run_s'):.2f} s, compile {med('compile_s'):.1f} s, "
            f"{med('evals_per_s'):,.0f} evals/s, QD score {med('qd_score'):.1f}, "
            f"coverage {med('coverage'):.4f}, best {med('obj_max'):.4f}"
        )
    print(f"load after: {os.getloadavg()}")
    if a.out:
        with open(a.out, "w") as fh:
            json.dump({"iterations": a.iterations, "chunk": a.chunk, "rows": rows}, fh)


if __name__ == "__main__":
    main()
