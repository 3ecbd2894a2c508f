"""A whole MAP-Elites run: evotensor vs pyribs and QDax on the planar arm (run by hand, not a test).

Workload, the same in each library:

* task: the planar arm with 100 joints (QDax's ``arm`` / ``arm_scoring_function``; evotensor's
  ``evotensor.problems.qd.Arm(num_joints=100)``; for pyribs, which ships no tasks, ``arm_numpy``
  below, written from the definition: fitness ``-std(clip(x, 0, 1))`` in [-0.5, 0], descriptor
  the end effector in [0, 1]^2). 100 joints is evotensor's default and the size of QDax's arm
  tests;
* archive: grid 100 x 100 over [0, 1]^2 (QDax: ``compute_euclidean_centroids((100, 100), 0, 1)``,
  i.e. the same cells found by nearest centre);
* variation: Iso+LineDD with iso_sigma 0.005, line_sigma 0.05, genotypes clipped to [0, 1]
  (pyribs ``IsoLineEmitter``; QDax ``MixingEmitter(variation_percentage=1.0)`` over
  ``isoline_variation(minval=0, maxval=1)``; evotensor ``IsoLineEmitter(bounds=(0, 1))``); parents
  drawn uniformly with replacement from the archive;
* batch 1024; the first batch is the same 1024 uniform genotypes in [0, 1]^100 for every library
  (``numpy.random.default_rng(seed)``): pyribs and evotensor take them as ``initial_solutions``,
  QDax as ``MAPElites.init``; a run of G generations evaluates G x 1024 genotypes everywhere
  (QDax: init + G - 1 updates);
* metrics at the end, pyribs' definitions: coverage = filled cells / 10^4, QD score =
  sum over elites of (objective - offset) with offset -1 (the arm's fitness lies in [-0.5, 0], so
  each elite adds 0.5..1). QDax is given ``qd_offset=+1`` (it *adds* its offset: sum f + 1 * n is
  the same number) and its coverage (in %) is divided by 100.

Timing: seconds per generation in the steady state, wall and process CPU time.

* evotensor: ``evotensor.run(...)`` (chunks of 50 generations compiled with ``lax.scan``; its
  ``compile_seconds`` is reported separately). Steady state = from the end of the first chunk to
  the end of the last (host callbacks after every chunk), so it includes the run loop's per-chunk
  host work.
* QDax: ``jax.lax.scan(map_elites.scan_update, ..., length=50)`` compiled ahead of time (compile
  reported separately, as is ``jit(MAPElites.init)``'s first call); chunks run back to back; steady
  state = every chunk after the first.
* pyribs: ``Scheduler.ask`` / NumPy arm / ``Scheduler.tell`` in a Python loop (archive and emitter
  float64, pyribs' default); steady state = every generation after the first.

    .venv/bin/python benchmarks/qd_map_elites.py                   # everything; competitors via their venv
    .venv/bin/python benchmarks/qd_map_elites.py --impl evotensor --seeds 0,1,2
    .venv/bin/python benchmarks/qd_map_elites.py --generations 200  # smoke

QDax's cell lookup is a brute-force nearest centroid over all 10^4 cells for every candidate,
~0.2 s per generation here, so by default it runs one seed (``--qdax-seeds`` for more); the others
run three. pyribs and QDax live in the ``qd`` venv of ``bench_venvs.py``.
"""

from __future__ import annotations

import argparse
import json
import os

from bench_venvs import venv_python

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy loads; see es_cma.py
import functools
import platform
import subprocess
import sys
import time

import numpy as np

QD_PYTHON = venv_python("qd")
JOINTS, DIMS, BATCH, GENS = 100, (100, 100), 1024, 1000
ISO_SIGMA, LINE_SIGMA = 0.005, 0.05
QD_OFFSET = -1.0  # pyribs' sign: subtracted from every objective
CHUNK = 50


class Clock:
    """Wall time and this process's CPU time (all threads) since construction, in seconds."""

    def __init__(self):
        self.wall0, self.cpu0 = time.perf_counter(), time.process_time()

    def read(self):
        return time.perf_counter() - self.wall0, time.process_time() - self.cpu0


def initial_genotypes(seed):
    return np.random.default_rng(seed).uniform(0.0, 1.0, (BATCH, JOINTS)).astype(np.float32)


def arm_numpy(x):
    """The planar arm on [pop, n] genotypes: (fitness [pop], descriptor [pop, 2])."""
    x = np.clip(x, 0.0, 1.0)
    n = x.shape[1]
    fitness = -np.sqrt(np.mean((x - x.mean(axis=1, keepdims=True)) ** 2, axis=1))
    angles = np.cumsum(2.0 * np.pi * x - np.pi, axis=1)
    end = np.stack([np.cos(angles).sum(axis=1), np.sin(angles).sum(axis=1)], axis=1) / (2 * n) + 0.5
    return fitness, end


def row(impl, seed, gens_timed, wall, cpu, coverage, qd_score, obj_max, load0, **extra):
    return dict(
        impl=impl,
        seed=seed,
        generations_timed=gens_timed,
        per_gen_ms=1e3 * wall / gens_timed,
        per_gen_cpu_ms=1e3 * cpu / gens_timed,
        coverage=float(coverage),
        qd_score=float(qd_score),
        obj_max=float(obj_max),
        load_before=load0,
        load_after=os.getloadavg()[0],
        **extra,
    )


def bench_evotensor(seed, gens):
    import jax
    import jax.numpy as jnp

    import evotensor
    from evotensor.problems.qd import Arm
    from evotensor.qd import GridArchive, IsoLineEmitter, MAPElites

    load0 = os.getloadavg()[0]
    init = initial_genotypes(seed)
    problem = Arm(num_joints=JOINTS)
    # the same task as the NumPy arm given to pyribs (float32 here, float64 there)
    ours = problem.evaluate(None, jnp.asarray(init))
    f64, d64 = arm_numpy(init.astype(np.float64))
    arm_diff = max(
        float(np.max(np.abs(np.asarray(ours.fitness) - f64))),
        float(np.max(np.abs(np.asarray(ours.descriptor) - d64))),
    )
    archive = GridArchive(solution_dim=JOINTS, dims=DIMS, ranges=[(0.0, 1.0)] * 2, qd_score_offset=QD_OFFSET)
    emitter = IsoLineEmitter(
        x0=np.full(JOINTS, 0.5, np.float32),
        iso_sigma=ISO_SIGMA,
        line_sigma=LINE_SIGMA,
        batch_size=BATCH,
        bounds=(0.0, 1.0),
        initial_solutions=init,
    )
    strategy = MAPElites(archive, [emitter])
    ticks = []

    def tick(info):
        ticks.append((info["generation"], time.perf_counter(), time.process_time()))

    clock = Clock()
    result = evotensor.run(
        strategy, problem, GENS if gens is None else gens, jax.random.key(seed), callback=tick
    )
    total_wall, total_cpu = clock.read()
    (g0, w0, c0), (g1, w1, c1) = ticks[0], ticks[-1]
    stats = archive.stats(result.state.archive)
    return row(
        "evotensor",
        seed,
        g1 - g0,
        w1 - w0,
        c1 - c0,
        stats["coverage"],
        stats["qd_score"],
        stats["obj_max"],
        load0,
        chunk=g0,
        compile_s=result.compile_seconds,
        run_s=result.run_seconds,
        run_per_gen_ms=1e3 * result.run_seconds / result.generations,
        total_wall_s=total_wall,
        total_cpu_s=total_cpu,
        arm_vs_numpy_max_abs_diff=arm_diff,
    )


def bench_qdax(seed, gens):
    import jax
    import jax.numpy as jnp
    from qdax.core.containers.mapelites_repertoire import compute_euclidean_centroids
    from qdax.core.emitters.mutation_operators import isoline_variation
    from qdax.core.emitters.standard_emitters import MixingEmitter
    from qdax.core.map_elites import MAPElites
    from qdax.tasks.arm import arm_scoring_function
    from qdax.utils.metrics import default_qd_metrics

    load0 = os.getloadavg()[0]
    variation = functools.partial(
        isoline_variation, iso_sigma=ISO_SIGMA, line_sigma=LINE_SIGMA, minval=0.0, maxval=1.0
    )
    emitter = MixingEmitter(
        mutation_fn=lambda x, key: x,  # never called: variation_percentage=1.0
        variation_fn=variation,
        variation_percentage=1.0,
        batch_size=BATCH,
    )
    map_elites = MAPElites(
        scoring_function=arm_scoring_function,
        emitter=emitter,
        metrics_function=functools.partial(default_qd_metrics, qd_offset=-QD_OFFSET),
    )
    centroids = compute_euclidean_centroids(DIMS, minval=0.0, maxval=1.0)
    key, init_key = jax.random.split(jax.random.key(seed))
    clock = Clock()
    repertoire, emitter_state, _ = jax.block_until_ready(
        jax.jit(map_elites.init)(jnp.asarray(initial_genotypes(seed)), centroids, init_key)
    )
    init_s = clock.read()[0]

    updates = (GENS if gens is None else gens) - 1
    lengths = [CHUNK] * (updates // CHUNK) + ([updates % CHUNK] if updates % CHUNK else [])

    def chunk(carry, length):
        return jax.lax.scan(map_elites.scan_update, carry, None, length=length)

    carry = (repertoire, emitter_state, key)
    compiled, compile_s = {}, 0.0
    for length in sorted(set(lengths)):
        clock = Clock()
        compiled[length] = jax.jit(chunk, static_argnums=1).lower(carry, length).compile()
        compile_s += clock.read()[0]
    wall = cpu = 0.0
    timed = 0
    for i, length in enumerate(lengths):
        clock = Clock()
        carry, metrics = jax.block_until_ready(compiled[length](carry))
        w, c = clock.read()
        if i > 0:
            wall, cpu, timed = wall + w, cpu + c, timed + length
    repertoire = carry[0]
    occupied = repertoire.fitnesses > -jnp.inf
    coverage = jnp.mean(occupied)
    qd_score = jnp.sum(jnp.where(occupied, repertoire.fitnesses - QD_OFFSET, 0.0))
    return row(
        "qdax",
        seed,
        timed,
        wall,
        cpu,
        coverage,
        qd_score,
        jnp.max(repertoire.fitnesses),
        load0,
        chunk=CHUNK,
        compile_s=compile_s,
        init_first_call_s=init_s,
        native_coverage_percent=float(metrics["coverage"][-1]),
        native_qd_score=float(metrics["qd_score"][-1]),
    )


def bench_pyribs(seed, gens, budget_s=600.0):
    from ribs.archives import GridArchive
    from ribs.emitters import IsoLineEmitter
    from ribs.schedulers import Scheduler

    load0 = os.getloadavg()[0]
    archive = GridArchive(
        solution_dim=JOINTS, dims=DIMS, ranges=[(0.0, 1.0)] * 2, qd_score_offset=QD_OFFSET, seed=seed
    )
    emitter = IsoLineEmitter(
        archive,
        iso_sigma=ISO_SIGMA,
        line_sigma=LINE_SIGMA,
        initial_solutions=initial_genotypes(seed),
        bounds=[(0.0, 1.0)] * JOINTS,
        batch_size=BATCH,
        seed=seed,
    )
    scheduler = Scheduler(archive, [emitter])

    def generation():
        x = scheduler.ask()
        objective, measures = arm_numpy(x)
        scheduler.tell(objective, measures)

    clock = Clock()
    generation()
    first = clock.read()[0]
    clock = Clock()
    done = 1
    for _ in range((GENS if gens is None else gens) - 1):
        generation()
        done += 1
        if clock.read()[0] > budget_s:
            break
    wall, cpu = clock.read()
    stats = archive.stats
    return row(
        "pyribs",
        seed,
        done - 1,
        wall,
        cpu,
        stats.coverage,
        stats.qd_score,
        stats.obj_max,
        load0,
        generations_run=done,
        first_gen_s=first,
        dtype=str(archive.dtypes["solution"]),
    )


def versions(impl):
    from importlib.metadata import version

    names = {
        "evotensor": ("evotensor", "jax", "jaxlib", "numpy"),
        "qdax": ("qdax", "jax", "jaxlib", "flax", "numpy"),
        "pyribs": ("ribs", "numpy", "scipy", "numba", "numpy_groupies"),
    }
    return {n: version(n) for n in names[impl]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--impl", choices=["all", "evotensor", "pyribs", "qdax"], default="all")
    ap.add_argument("--competitors", default="pyribs,qdax", help="with --impl all: which to run")
    ap.add_argument("--generations", type=int, default=GENS)
    ap.add_argument("--seeds", default="0,1,2", help="evotensor and pyribs (and --impl qdax)")
    ap.add_argument("--qdax-seeds", default="0", help="with --impl all")
    ap.add_argument("--pyribs-budget", type=float, default=600.0, help="seconds per pyribs run at most")
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    if args.impl != "all":
        print(json.dumps(dict(impl=args.impl, versions=versions(args.impl))))
        for seed in seeds:
            if args.impl == "pyribs":
                r = bench_pyribs(seed, args.generations, args.pyribs_budget)
            else:
                r = globals()[f"bench_{args.impl}"](seed, args.generations)
            print(json.dumps(r), flush=True)
        return None
    info = dict(
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        machine=platform.processor() or platform.machine(),
        cpus=os.cpu_count(),
        load_start=os.getloadavg(),
        workload=dict(
            joints=JOINTS, grid=DIMS, batch=BATCH, generations=args.generations, iso_sigma=ISO_SIGMA,
            line_sigma=LINE_SIGMA, qd_score_offset=QD_OFFSET,
        ),
    )  # fmt: skip
    lines = [json.dumps(dict(impl="evotensor", versions=versions("evotensor")))]
    lines += [json.dumps(bench_evotensor(seed, args.generations)) for seed in seeds]
    for impl in args.competitors.split(","):
        if not os.path.exists(QD_PYTHON):
            lines.append(json.dumps(dict(impl=impl, error=f"{QD_PYTHON} not found")))
            continue
        impl_seeds = args.qdax_seeds if impl == "qdax" else args.seeds
        cmd = [
            QD_PYTHON,
            __file__,
            "--impl",
            impl,
            "--seeds",
            impl_seeds,
            "--generations",
            str(args.generations),
        ]
        cmd += ["--pyribs-budget", str(args.pyribs_budget)]
        out = subprocess.run(cmd, capture_output=True, text=True)  # one competitor at a time
        got = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
        lines += got if got else [json.dumps(dict(impl=impl, error=out.stderr[-2000:]))]
    info["load_end"] = os.getloadavg()
    print(json.dumps(info))
    for line in lines:
        print(line)
    return None


if __name__ == "__main__":
    sys.exit(main())
