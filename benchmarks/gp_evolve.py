"""Whole GP runs on Pagie-1: evotensor's ``sr-pagie`` task vs gplearn and DEAP at equal pop and generations.

Pagie-1 (``1/(1+x^-4) + 1/(1+y^-4)`` on the 676-point grid, step 0.4 in [-5, 5]; or, with
``--data random4096``, on 4096 random points x, y ~ U(-5, 5), the issue's second workload), EvoGP's
function set ``+ - * / sin cos tan``, training MSE. For each population size and seed it reports the final
training MSE of the best tree, its length, and the wall time (evotensor: compile time separately,
then the compiled run). The EvoGP paper's Table VI (pop 5000, 100 generations) gives training MSE
0.009 +- 0.006 (64 points), 0.021 +- 0.019 (256), 0.034 +- 0.025 (512), 0.025 +- 0.027 (1024).

* evotensor: ``evotensor.tasks.get_task("sr-pagie")`` with its defaults (tournament 7, elite 1%,
  crossover 0.9 with Koza's 90/10 bias, 10% of the children mutated, max_len 64, constants in
  [-5, 5], raw semantics), ``evotensor.core.run.run``.
* gplearn 0.4 (``SymbolicRegressor``, one process): the same population, generations, function
  set, constant range and init depths; metric ``mse``; its own defaults otherwise (tournament 20,
  parsimony 0.001, protected division). It runs in a separate venv (``--competitor-python``, default
  the ``gp`` venv of ``bench_venvs.py``); this script calls itself there with ``--worker``.
  ``--gplearn-generations`` runs it for fewer generations (its per-generation time is reported).
* DEAP 1.4 (same venv, ``pip install deap``), its symbolic-regression example's setup:
  ``eaSimple`` with crossover 0.5 / mutation 0.1, tournament 7, ``cxOnePoint``, ``mutUniform``
  with ``genFull`` 0..2, static height limit 17 on both operators, hall of fame of 1; the same
  function set with raw semantics (NumPy ``+ - * / sin cos tan`` on the whole data; a non-finite
  MSE is the worst fitness), ephemeral constants U(-5, 5), ramped half-and-half init depth 2..6
  (as the other engines; the example's is 1..2). Each individual is compiled (``gp.compile``)
  and evaluated vectorized over the rows with NumPy, one process.

``run s`` is wall time; ``cpu s`` is process CPU time (steadier on a shared machine).
``--parsimony C`` passes ``parsimony_coefficient=C`` to evotensor's ``GP`` (gplearn always uses its
default 0.001; DEAP has none, only the height limit).

Usage::

    .venv/bin/python benchmarks/gp_evolve.py --pops 1000 5000 --seeds 5 --gplearn-seeds 1
    .venv/bin/python benchmarks/gp_evolve.py --pops 1000 --seeds 1 --competitors gplearn deap
    .venv/bin/python benchmarks/gp_evolve.py --pops 5000 --generations 50 --data random4096 \
        --seeds 1 --gplearn-generations 5
    .venv/bin/python benchmarks/gp_evolve.py --pops 1000 5000 --compile-breakdown
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import time

import numpy as np
from bench_venvs import venv_python

FUNCTIONS = ("add", "sub", "mul", "div", "sin", "cos", "tan")


def pagie1():
    axis = np.round(np.arange(26) * 0.4 - 5.0, 6)
    gx, gy = np.meshgrid(axis, axis, indexing="ij")
    X = np.stack([gx.ravel(), gy.ravel()], 1)
    return X.astype(np.float32), (1 / (1 + X[:, 0] ** -4) + 1 / (1 + X[:, 1] ** -4)).astype(np.float32)


def random4096(n: int = 4096, seed: int = 0):
    """The issue's second workload: ``n`` random points x, y ~ U(-5, 5) with the Pagie-1 target."""
    X = np.random.default_rng(seed).uniform(-5, 5, (n, 2))
    return X.astype(np.float32), (1 / (1 + X[:, 0] ** -4) + 1 / (1 + X[:, 1] ** -4)).astype(np.float32)


DATA = {"pagie1": pagie1, "random4096": random4096}


def run_evotensor(pop: int, generations: int, seed: int, data: str, parsimony: float) -> dict:
    import jax

    from evotensor.core.run import run
    from evotensor.gp.regression import SymbolicRegression
    from evotensor.tasks import get_task

    cfg = {"pop": pop, "generations": generations, "seed": seed, "parsimony_coefficient": parsimony}
    task = get_task("sr-pagie").build(cfg)
    problem = task.problem
    if data != "pagie1":
        X, y = DATA[data]()
        problem = SymbolicRegression(X, y, problem.function_set)
    t0, c0 = time.perf_counter(), time.process_time()
    res = run(task.strategy, problem, generations, jax.random.key(seed), decoder=task.decoder, progress=False)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "engine": "evotensor",
        "data": data,
        "parsimony": parsimony,
        "pop": pop,
        "generations": generations,
        "seed": seed,
        "mse": float(res.best_fitness),
        "length": int(res.best_genotype.length),
        "compile_s": float(res.compile_seconds),
        "run_s": float(res.run_seconds),
        "wall_s": wall,
        "cpu_s": cpu,  # compile included
        "expression": res.best_genotype.to_infix(problem.function_set, precision=3),
    }


def compile_breakdown(pop: int, parsimony: float) -> None:
    """Compile time (CPU-s and wall) and optimized-HLO size of each piece of the ``sr-pagie``
    generation: the fused fitness, ``GP.ask`` (variation + selection), ``GP.tell``, one
    ``Loop.step`` and the run loop's 5-generation chunk (what ``run`` compiles for 100 generations).
    Each piece is compiled in isolation, so the pieces need not add up to the chunk."""
    import re

    import jax
    import jax.numpy as jnp

    from evotensor.core.run import Loop
    from evotensor.gp.evaluate import fitness
    from evotensor.tasks import get_task

    task = get_task("sr-pagie").build(
        {"pop": pop, "generations": 100, "seed": 0, "parsimony_coefficient": parsimony}
    )
    gp, problem = task.strategy, task.problem
    loop = Loop(gp, problem, task.decoder)
    params = gp.default_params()
    key = jax.random.key(0)
    carry, loop_key = jax.jit(loop.init)(key, params)
    state = carry.strategy_state
    pieces = {
        "fitness": (lambda f: fitness(f, problem.X, problem.y, problem.function_set), (state.forest,)),
        "ask": (lambda k, s: gp.ask(k, s, params), (key, state)),
        "tell": (lambda k, s, f, y: gp.tell(k, s, f, y, params), (key, state, state.forest, jnp.zeros(pop))),
        "step": (lambda c, k: loop.step(c, k, params), (carry, loop_key)),
        "chunk(5)": (lambda c, k: loop.chunk(c, k, params, 5), (carry, loop_key)),
    }
    print(f"# compile breakdown, sr-pagie pop {pop}, parsimony {parsimony}, load {os.getloadavg()[0]:.1f}")
    for name, (fn, args) in pieces.items():
        lowered = jax.jit(fn).lower(*args)
        c0, t0 = time.process_time(), time.perf_counter()
        text = lowered.compile().as_text()
        cpu, wall = time.process_time() - c0, time.perf_counter() - t0
        n = {op: len(re.findall(rf" {op}\(", text)) for op in ("fusion", "while", "conditional")}
        instr = len(re.findall(r"^\s*(?:ROOT )?%\S+ = ", text, re.M))
        print(
            f"{name:9s} compile {cpu:6.2f} CPU-s {wall:6.2f} s wall | HLO instructions {instr:6d} "
            f"fusions {n['fusion']:4d} while {n['while']:3d} conditional {n['conditional']:2d}",
            flush=True,
        )


def run_gplearn(pop: int, generations: int, seed: int, data: str) -> dict:
    from gplearn.genetic import SymbolicRegressor

    X, y = DATA[data]()
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
    t0, c0 = time.perf_counter(), time.process_time()
    est.fit(X.astype(np.float64), y.astype(np.float64))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    pred = est.predict(X.astype(np.float64))
    return {
        "engine": "gplearn",
        "data": data,
        "parsimony": 0.001,
        "pop": pop,
        "generations": generations,
        "seed": seed,
        "mse": float(np.mean((pred - y) ** 2)),
        "length": int(est._program.length_),
        "compile_s": 0.0,
        "run_s": wall,
        "wall_s": wall,
        "cpu_s": cpu,
        "expression": str(est._program),
    }


def run_deap(pop: int, generations: int, seed: int, data: str) -> dict:
    """DEAP's symbolic-regression example (eaSimple) with this benchmark's data and function set."""
    import operator
    import random

    import deap
    from deap import algorithms, base, creator, gp, tools

    X, y = DATA[data]()
    X, y = X.astype(np.float64), y.astype(np.float64)
    x0, x1 = X[:, 0], X[:, 1]
    random.seed(seed)
    np.random.seed(seed)

    pset = gp.PrimitiveSet("MAIN", 2)
    for fn in (operator.add, operator.sub, operator.mul, np.divide):  # raw division: 1/0 = inf
        pset.addPrimitive(fn, 2)
    for fn in (np.sin, np.cos, np.tan):
        pset.addPrimitive(fn, 1)
    pset.addEphemeralConstant(f"c{seed}_{pop}_{generations}", lambda: random.uniform(-5.0, 5.0))
    pset.renameArguments(ARG0="x0", ARG1="x1")
    if not hasattr(creator, "FitnessMin"):
        creator.create("FitnessMin", base.Fitness, weights=(-1.0,))
        creator.create("Individual", gp.PrimitiveTree, fitness=creator.FitnessMin)

    def evaluate(ind):
        with np.errstate(all="ignore"):
            pred = gp.compile(ind, pset)(x0, x1)
            mse = float(np.mean((pred - y) ** 2))
        return (mse if np.isfinite(mse) else float("inf"),)  # raw semantics: non-finite is the worst

    tb = base.Toolbox()
    tb.register("expr", gp.genHalfAndHalf, pset=pset, min_=2, max_=6)
    tb.register("individual", tools.initIterate, creator.Individual, tb.expr)
    tb.register("population", tools.initRepeat, list, tb.individual)
    tb.register("evaluate", evaluate)
    tb.register("select", tools.selTournament, tournsize=7)
    tb.register("mate", gp.cxOnePoint)
    tb.register("expr_mut", gp.genFull, min_=0, max_=2)
    tb.register("mutate", gp.mutUniform, expr=tb.expr_mut, pset=pset)
    limit = gp.staticLimit(key=operator.attrgetter("height"), max_value=17)
    tb.decorate("mate", limit)
    tb.decorate("mutate", limit)

    population = tb.population(n=pop)
    hof = tools.HallOfFame(1)
    t0, c0 = time.perf_counter(), time.process_time()
    population, _ = algorithms.eaSimple(population, tb, 0.5, 0.1, generations, halloffame=hof, verbose=False)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    best = hof[0]
    return {
        "engine": "deap",
        "data": data,
        "parsimony": 0.0,
        "pop": pop,
        "generations": generations,
        "seed": seed,
        "mse": float(best.fitness.values[0]),
        "length": len(best),
        "mean_length": float(np.mean([len(ind) for ind in population])),
        "compile_s": 0.0,
        "run_s": wall,
        "wall_s": wall,
        "cpu_s": cpu,
        "expression": str(best),
        "version": deap.__version__,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pops", type=int, nargs="+", default=[1000, 5000])
    ap.add_argument("--generations", type=int, default=100)
    ap.add_argument("--seeds", type=int, default=5, help="evotensor seeds per population size")
    ap.add_argument("--data", choices=sorted(DATA), default="pagie1")
    ap.add_argument("--parsimony", type=float, default=0.0, help="evotensor's parsimony_coefficient")
    ap.add_argument("--gplearn-seeds", type=int, default=1, help="seeds of each competitor")
    ap.add_argument("--gplearn-pops", type=int, nargs="*", default=None, help="default: --pops")
    ap.add_argument("--gplearn-generations", type=int, default=None, help="default: --generations")
    ap.add_argument("--competitors", nargs="*", choices=["gplearn", "deap"], default=["gplearn", "deap"])
    ap.add_argument("--no-competitors", action="store_true")
    ap.add_argument("--competitor-python", default=venv_python("gp"))
    ap.add_argument("--json", default=None, help="append one JSON line per run to this file")
    ap.add_argument(
        "--compile-cache",
        default=None,
        metavar="DIR",
        help="JAX's persistent compilation cache in DIR, as the CLI uses it (a second run reads it)",
    )
    ap.add_argument(
        "--compile-breakdown", action="store_true", help="only time the compilation of each piece (see above)"
    )
    ap.add_argument("--worker", choices=["gplearn", "deap"], help=argparse.SUPPRESS)
    ap.add_argument("--worker-args", type=int, nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        pop, gens, seed = args.worker_args
        fn = run_gplearn if args.worker == "gplearn" else run_deap
        print(json.dumps(fn(pop, gens, seed, args.data)))
        return

    if args.compile_cache:
        import jax

        jax.config.update("jax_compilation_cache_dir", args.compile_cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)

    if args.compile_breakdown:
        for pop in args.pops:
            compile_breakdown(pop, args.parsimony)
        return

    rows = []

    def record(row):
        rows.append(row)
        print(
            f"{row['engine']:9s} {row['data']} pop {row['pop']:5d} gens {row['generations']} "
            f"seed {row['seed']}: "
            f"MSE {row['mse']:.5f} len {row['length']:3d} compile {row['compile_s']:6.1f}s "
            f"run {row['run_s']:7.1f}s cpu {row['cpu_s']:7.1f}s",
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
            record(run_evotensor(pop, args.generations, seed, args.data, args.parsimony))
    competitors = [] if args.no_competitors else args.competitors
    gens = args.generations if args.gplearn_generations is None else args.gplearn_generations
    for engine in competitors:
        for pop in args.gplearn_pops if args.gplearn_pops is not None else args.pops:
            for seed in range(args.gplearn_seeds):
                out = subprocess.run(
                    [args.competitor_python, __file__, "--worker", engine, "--data", args.data]
                    + ["--worker-args", str(pop), str(gens), str(seed)],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                record(json.loads(out.stdout.strip().splitlines()[-1]))

    print(
        "\n| engine | data | pop | gens | seeds | training MSE (mean +- std) | best length "
        "| run s / seed | s / generation | cpu s / seed | compile s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for engine in ("evotensor", "gplearn", "deap"):
        for pop in sorted({r["pop"] for r in rows}):
            rs = [r for r in rows if r["engine"] == engine and r["pop"] == pop]
            if not rs:
                continue
            mse = np.array([r["mse"] for r in rs])
            run_s = np.mean([r["run_s"] for r in rs])
            print(
                f"| {engine} | {args.data} | {pop} | {rs[0]['generations']} | {len(rs)} "
                f"| {mse.mean():.4f} +- {mse.std():.4f} | "
                f"{np.mean([r['length'] for r in rs]):.0f} | {run_s:.1f} | "
                f"{run_s / rs[0]['generations']:.3f} | "
                f"{np.mean([r['cpu_s'] for r in rs]):.1f} | {np.mean([r['compile_s'] for r in rs]):.1f} |"
            )


if __name__ == "__main__":
    main()
