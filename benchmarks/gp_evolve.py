"""Whole GP runs on Pagie-1: evotensor's ``sr-pagie`` task vs gplearn, same population and generations.

Pagie-1 (``1/(1+x^-4) + 1/(1+y^-4)`` on the 676-point grid, step 0.4 in [-5, 5]), EvoGP's function set
``+ - * / sin cos tan``, training MSE. For each population size and seed it reports the final
training MSE of the best tree, its length, and the wall time (evotensor: compile time separately,
then the compiled run). The EvoGP paper's Table VI (pop 5000, 100 generations) gives training MSE
0.009 +- 0.006 (64 points), 0.021 +- 0.019 (256), 0.034 +- 0.025 (512), 0.025 +- 0.027 (1024).

* evotensor: ``evotensor.tasks.get_task("sr-pagie")`` with its defaults (tournament 7, elite 1%,
  crossover 0.9 with Koza's 90/10 bias, 10% of the children mutated, max_len 64, constants in
  [-5, 5], raw semantics), ``evotensor.core.run.run``.
* gplearn 0.4 (``SymbolicRegressor``, one process): the same population, generations, function
  set, constant range and init depths; metric ``mse``; its own defaults otherwise (tournament 20,
  parsimony 0.001, protected division). It runs in a separate venv (``--competitor-python``, default
  ``/work/bench-venvs/gp/bin/python``); this script calls itself there with ``--worker``.

Usage::

    .venv/bin/python benchmarks/gp_evolve.py --pops 1000 5000 --seeds 5 --gplearn-seeds 1
    .venv/bin/python benchmarks/gp_evolve.py --pops 1000 --seeds 1 --no-competitors
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import time

import numpy as np

FUNCTIONS = ("add", "sub", "mul", "div", "sin", "cos", "tan")


def pagie1():
    axis = np.round(np.arange(26) * 0.4 - 5.0, 6)
    gx, gy = np.meshgrid(axis, axis, indexing="ij")
    X = np.stack([gx.ravel(), gy.ravel()], 1)
    return X.astype(np.float32), (1 / (1 + X[:, 0] ** -4) + 1 / (1 + X[:, 1] ** -4)).astype(np.float32)


def run_evotensor(pop: int, generations: int, seed: int) -> dict:
    import jax

    from evotensor.core.run import run
    from evotensor.tasks import get_task

    task = get_task("sr-pagie").build({"pop": pop, "generations": generations, "seed": seed})
    t0 = time.perf_counter()
    res = run(
        task.strategy, task.problem, generations, jax.random.key(seed), decoder=task.decoder, progress=False
    )
    wall = time.perf_counter() - t0
    return {
        "engine": "evotensor",
        "pop": pop,
        "generations": generations,
        "seed": seed,
        "mse": float(res.best_fitness),
        "length": int(res.best_genotype.length),
        "compile_s": float(res.compile_seconds),
        "run_s": float(res.run_seconds),
        "wall_s": wall,
        "expression": res.best_genotype.to_infix(task.problem.function_set, precision=3),
    }


def run_gplearn(pop: int, generations: int, seed: int) -> dict:
    from gplearn.genetic import SymbolicRegressor

    X, y = pagie1()
    est = SymbolicRegressor(
        population_size=pop,
        generations=generations,
        function_set=FUNCTIONS,
        metric="mse",
        const_range=(-5.0, 5.0),
        init_depth=(2, 6),
        n_jobs=1,
        random_state=seed,
        verbose=0,
    )
    t0 = time.perf_counter()
    est.fit(X.astype(np.float64), y.astype(np.float64))
    wall = time.perf_counter() - t0
    pred = est.predict(X.astype(np.float64))
    return {
        "engine": "gplearn",
        "pop": pop,
        "generations": generations,
        "seed": seed,
        "mse": float(np.mean((pred - y) ** 2)),
        "length": int(est._program.length_),
        "compile_s": 0.0,
        "run_s": wall,
        "wall_s": wall,
        "expression": str(est._program),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pops", type=int, nargs="+", default=[1000, 5000])
    ap.add_argument("--generations", type=int, default=100)
    ap.add_argument("--seeds", type=int, default=5, help="evotensor seeds per population size")
    ap.add_argument("--gplearn-seeds", type=int, default=1)
    ap.add_argument("--gplearn-pops", type=int, nargs="*", default=None, help="default: --pops")
    ap.add_argument("--no-competitors", action="store_true")
    ap.add_argument("--competitor-python", default="/work/bench-venvs/gp/bin/python")
    ap.add_argument("--json", default=None, help="append one JSON line per run to this file")
    ap.add_argument("--worker", choices=["gplearn"], help=argparse.SUPPRESS)
    ap.add_argument("--worker-args", type=int, nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        pop, gens, seed = args.worker_args
        print(json.dumps(run_gplearn(pop, gens, seed)))
        return

    rows = []

    def record(row):
        rows.append(row)
        print(
            f"{row['engine']:9s} pop {row['pop']:5d} seed {row['seed']}: MSE {row['mse']:.5f} "
            f"len {row['length']:3d} compile {row['compile_s']:6.1f}s run {row['run_s']:7.1f}s",
            flush=True,
        )
        if args.json:
            with open(args.json, "a") as fh:
                fh.write(json.dumps(row) + "\n")

    print(
        f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.1f}"
    )
    for pop in args.pops:
        for seed in range(args.seeds):
            record(run_evotensor(pop, args.generations, seed))
    if not args.no_competitors:
        for pop in args.gplearn_pops if args.gplearn_pops is not None else args.pops:
            for seed in range(args.gplearn_seeds):
                out = subprocess.run(
                    [
                        args.competitor_python,
                        __file__,
                        "--worker",
                        "gplearn",
                        "--worker-args",
                        str(pop),
                        str(args.generations),
                        str(seed),
                    ],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                record(json.loads(out.stdout.strip().splitlines()[-1]))

    print(
        "\n| engine | pop | gens | seeds | training MSE (mean +- std) | best length "
        "| run s / seed | compile s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for engine in ("evotensor", "gplearn"):
        for pop in sorted({r["pop"] for r in rows}):
            rs = [r for r in rows if r["engine"] == engine and r["pop"] == pop]
            if not rs:
                continue
            mse = np.array([r["mse"] for r in rs])
            print(
                f"| {engine} | {pop} | {args.generations} | {len(rs)} "
                f"| {mse.mean():.4f} +- {mse.std():.4f} | "
                f"{np.mean([r['length'] for r in rs]):.0f} | {np.mean([r['run_s'] for r in rs]):.1f} | "
                f"{np.mean([r['compile_s'] for r in rs]):.1f} |"
            )


if __name__ == "__main__":
    main()
