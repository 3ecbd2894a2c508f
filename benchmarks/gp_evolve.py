"""Whole GP runs on Pagie-1: evotensor's ``sr-pagie`` task vs Operon, gplearn and DEAP, side by side.

Pagie-1 (``1/(1+x^-4) + 1/(1+y^-4)`` on the 676-point grid, step 0.4 in [-5, 5]; or, with
``--data random4096``, on 4096 random points x, y ~ U(-5, 5), the issue's second workload), EvoGP's
function set ``+ - * / sin cos tan``, training MSE (and R² = 1 - MSE / var(y)) of the best tree
beside the wall time (evotensor: compile time apart, then the compiled run). The EvoGP paper's
Table VI (pop 5000, 100 generations) gives training MSE 0.009 +- 0.006 (64 points), 0.021 +- 0.019
(256), 0.034 +- 0.025 (512), 0.025 +- 0.027 (1024).

Side by side, alternating: for each population size and seed the engines run one after the other,
the order rotated by the seed (seed 0: A B C, seed 1: B C A, ...), each competitor run in a fresh
process of the competitor venv (``--competitor-python``, default the ``gp`` venv of
``bench_venvs.py``; this script calls itself there with ``--worker``), one run at a time.

Like for like. evotensor runs ``evotensor.tasks.get_task("sr-pagie")`` with its defaults
(tournament 7, elite 1%, crossover 0.9 with Koza's 90/10 bias, 10% of the children mutated, max_len
64, ramped half-and-half init depth 2..6, constants in [-5, 5], raw semantics) and
``parsimony_coefficient = --parsimony``. The competitors get evotensor's settings where their API
has them:

* gplearn 0.4 (``SymbolicRegressor``, one process): the same population, generations, function set,
  constant range and init depths; metric ``mse``; **tournament 7 and ``parsimony_coefficient =
  --parsimony``** (evotensor's, not gplearn's defaults 20 / 0.001; the penalty is the same
  ``c * length`` on the minimized fitness), ``p_crossover 0.9, p_subtree_mutation 0.1`` and no hoist /
  point mutation (evotensor's 90% crossover, 10% mutated). Not matched: gplearn's protected ``/``
  (evotensor's is raw), no elitism. ``--gplearn-generations G`` runs it for G generations only; its
  table row then gives the measured s / generation and an extrapolated full-run time, marked "extrap."
  (its MSE is then that of the shorter run). ``--operon-generations G`` does the same for both Operon
  rows.
* Operon (pyoperon 0.6, its scikit-learn ``SymbolicRegressor``, 1 thread), two rows:

  - "Operon (matched)": objective MSE **without linear scaling** (the evaluator is built with
    ``linear_scaling=False`` and the final model gets no scale / offset terms, so the MSE is that of
    the raw tree, as evotensor's), no local search (``optimizer_iterations=0``), tournament 7,
    crossover 0.9, mutation 0.1, max length 64, BTC init of uniform length 2..24 (mean ~13, the mean
    length of ramped half-and-half depth 2..6 trees over this function set; Operon's Koza grow init
    with depth <= 6 took 13-45 s for 200 trees x 5 generations, so it is not used), and generational
    replacement keeping the best 1% (``reinserter='replace-worst'`` with ``pool_size = pop -
    ceil(0.01 pop)``: the pool replaces all but the best 1%, i.e. evotensor's elitism). Not matched:
    Operon's leaves carry a weight each (a variable node is ``w * x``) and its constants start
    N(0, 1); its mutation mix (8 kinds, equal weights); no parsimony in its single-objective GP.
  - "Operon (defaults)": what a user gets: only ``population_size``, ``generations``, the function set
    (``allowed_symbols``), ``max_evaluations`` (raised so that it does not stop early), ``n_threads=1``
    and the seed are set; R² objective with linear scaling, tournament 5, keep-best reinsertion, BTC
    init, max length 50, no local search (pyoperon's default ``optimizer_iterations=0``). Its MSE is
    that of the returned (linearly scaled) model.
* DEAP 1.4 (same venv), its symbolic-regression example's setup: ``eaSimple`` with crossover 0.5 /
  mutation 0.1, tournament 7, ``cxOnePoint``, ``mutUniform`` with ``genFull`` 0..2, static height
  limit 17 on both operators, hall of fame of 1; the same function set with raw semantics (NumPy on
  the whole data; a non-finite MSE is the worst fitness), ephemeral constants U(-5, 5), ramped
  half-and-half init depth 2..6. Each individual is compiled (``gp.compile``) and evaluated with
  NumPy, one process. DEAP has no parsimony (only the height limit).

``run s`` is wall time; ``cpu s`` is process CPU time (steadier on a shared machine).

Usage::

    .venv/bin/python benchmarks/gp_evolve.py --pops 1000 --seeds 2 --parsimony 0.001
    .venv/bin/python benchmarks/gp_evolve.py --pops 5000 --generations 50 --data random4096 \
        --seeds 2 --parsimony 0.001 --gplearn-generations 10
    .venv/bin/python benchmarks/gp_evolve.py --pops 1000 --competitors operon operon-defaults
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


def r2(mse: float, data: str) -> float:
    """R² of a model with training MSE ``mse`` on ``data``: 1 - MSE / var(y)."""
    return 1.0 - mse / float(np.var(DATA[data]()[1].astype(np.float64)))


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
        "settings": f"tournament 7, elite 1%, parsimony {parsimony}",
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


def run_gplearn(pop: int, generations: int, seed: int, data: str, parsimony: float) -> dict:
    """gplearn with evotensor's tournament size, parsimony coefficient and crossover / mutation split."""
    from gplearn.genetic import SymbolicRegressor

    X, y = DATA[data]()
    est = SymbolicRegressor(
        population_size=pop,
        generations=generations,
        function_set=FUNCTIONS,
        metric="mse",
        const_range=(-5.0, 5.0),
        init_depth=(2, 6),
        tournament_size=7,
        parsimony_coefficient=parsimony,
        p_crossover=0.9,
        p_subtree_mutation=0.1,
        p_hoist_mutation=0.0,
        p_point_mutation=0.0,
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
        "settings": f"tournament 7, parsimony {parsimony}, crossover 0.9, subtree mutation 0.1",
        "data": data,
        "parsimony": parsimony,
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


def run_operon(pop: int, generations: int, seed: int, data: str, matched: bool) -> dict:
    """pyoperon's SymbolicRegressor: evotensor's settings where it has them (``matched``), or its defaults."""
    import math
    import warnings
    from importlib.metadata import version

    import pyoperon as op
    from pyoperon.sklearn import SymbolicRegressor

    class UnscaledMSE(SymbolicRegressor):
        """MSE of the raw tree: no linear scaling during the run nor on the returned model."""

        @staticmethod
        def _init_evaluator(objective, problem, dtable, uncertainty):
            assert objective == "mse"
            return op.Evaluator(problem, dtable, op.MSE(), False)

        def _resolve_params(self):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "overriding to True": undone below
                out = super()._resolve_params()
            out["add_model_scale_term"] = out["add_model_intercept_term"] = False
            return out

    X, y = DATA[data]()
    X, y = X.astype(np.float64), y.astype(np.float64)
    common = dict(
        allowed_symbols="add,sub,mul,div,sin,cos,tan,constant,variable",
        population_size=pop,
        generations=generations,
        max_evaluations=10 * pop * (generations + 1),
        n_threads=1,
        random_state=seed,
    )
    if matched:
        elite = math.ceil(0.01 * pop)
        est = UnscaledMSE(
            **common,
            objectives=["mse"],
            optimizer_iterations=0,
            local_search_probability=0.0,
            tournament_size=7,
            crossover_probability=0.9,
            mutation_probability=0.1,
            max_length=64,
            max_depth=64,
            initialization_method="btc",
            initialization_max_length=24,
            reinserter="replace-worst",
            pool_size=pop - elite,
        )
        settings = f"MSE unscaled, tournament 7, cx 0.9, mut 0.1, max_len 64, BTC init len<=24, elite {elite}"
    else:
        est = SymbolicRegressor(**common)
        settings = "defaults (R2 + linear scaling, tournament 5, keep-best, BTC, max_len 50)"
    t0, c0 = time.perf_counter(), time.process_time()
    est.fit(X, y)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    with np.errstate(all="ignore"):
        mse = float(np.mean((est.predict(X) - y) ** 2))
    return {
        "engine": "operon" if matched else "operon-defaults",
        "settings": settings,
        "data": data,
        "parsimony": 0.0,
        "pop": pop,
        "generations": generations,
        "generations_run": int(est.stats_["generations"]),
        "evaluations": int(est.stats_["evaluation_count"]),
        "seed": seed,
        "mse": mse,
        "length": int(est.stats_["model_length"]),
        "compile_s": 0.0,
        "run_s": wall,
        "wall_s": wall,
        "cpu_s": cpu,
        "expression": est.get_model_string(est.model_, 3),
        "version": version("pyoperon"),
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
        "settings": "DEAP example: eaSimple cx 0.5 mut 0.1, tournament 7, height limit 17",
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


ENGINES = ("evotensor", "operon", "operon-defaults", "gplearn", "deap")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pops", type=int, nargs="+", default=[1000, 5000])
    ap.add_argument("--generations", type=int, default=100)
    ap.add_argument("--seeds", type=int, default=2, help="seeds (alternation rounds) per population size")
    ap.add_argument(
        "--first-seed", type=int, default=0, help="seeds run: first-seed .. first-seed + seeds - 1"
    )
    ap.add_argument("--data", choices=sorted(DATA), default="pagie1")
    ap.add_argument(
        "--parsimony", type=float, default=0.0, help="parsimony_coefficient of evotensor and gplearn alike"
    )
    ap.add_argument("--gplearn-generations", type=int, default=None, help="default: --generations")
    ap.add_argument(
        "--operon-generations", type=int, default=None, help="both Operon rows; default: --generations"
    )
    ap.add_argument(
        "--competitors",
        nargs="*",
        choices=ENGINES[1:],
        default=["operon", "operon-defaults", "gplearn"],
        help="run in alternation with evotensor (DEAP is slow: name it to run it)",
    )
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
    ap.add_argument("--worker", choices=ENGINES[1:], help=argparse.SUPPRESS)
    ap.add_argument("--worker-args", type=int, nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        pop, gens, seed = args.worker_args
        if args.worker == "gplearn":
            row = run_gplearn(pop, gens, seed, args.data, args.parsimony)
        elif args.worker == "deap":
            row = run_deap(pop, gens, seed, args.data)
        else:
            row = run_operon(pop, gens, seed, args.data, matched=args.worker == "operon")
        print(json.dumps(row))
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
        row["r2"] = r2(row["mse"], row["data"])
        row["load"] = os.getloadavg()[0]
        rows.append(row)
        print(
            f"{row['engine']:15s} {row['data']} pop {row['pop']:5d} gens {row['generations']} "
            f"seed {row['seed']}: MSE {row['mse']:.5f} R2 {row['r2']:.4f} len {row['length']:3d} "
            f"compile {row['compile_s']:5.1f}s run {row['run_s']:7.2f}s cpu {row['cpu_s']:7.2f}s "
            f"load {row['load']:.1f}",
            flush=True,
        )
        if args.json:
            with open(args.json, "a") as fh:
                fh.write(json.dumps(row) + "\n")

    def competitor(engine, pop, seed):
        gens = args.generations
        if engine == "gplearn" and args.gplearn_generations is not None:
            gens = args.gplearn_generations
        if engine.startswith("operon") and args.operon_generations is not None:
            gens = args.operon_generations
        cmd = [args.competitor_python, __file__, "--worker", engine, "--data", args.data]
        cmd += ["--parsimony", str(args.parsimony), "--worker-args", str(pop), str(gens), str(seed)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1])

    print(
        f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()}"
    )
    engines = ["evotensor", *args.competitors]
    for pop in args.pops:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            k = seed % len(engines)
            for engine in engines[k:] + engines[:k]:  # rotated by the seed: A B C, B C A, ...
                if engine == "evotensor":
                    record(run_evotensor(pop, args.generations, seed, args.data, args.parsimony))
                else:
                    record(competitor(engine, pop, seed))
    print(f"# end {time.strftime('%H:%M UTC', time.gmtime())}, load {os.getloadavg()}")

    print(
        "\n| engine | data | pop | gens | seeds | training MSE (mean +- std) | R² (mean) | best length "
        "| run s / seed (range) | s / generation | cpu s / seed | compile s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for engine in ENGINES:
        for pop in sorted({r["pop"] for r in rows}):
            rs = [r for r in rows if r["engine"] == engine and r["pop"] == pop]
            if not rs:
                continue
            mse = np.array([r["mse"] for r in rs])
            run = [r["run_s"] for r in rs]
            gens = rs[0]["generations"]
            per_gen = np.mean(run) / gens
            run_txt = f"{np.mean(run):.2f} ({min(run):.2f}–{max(run):.2f})"
            if gens != args.generations:  # a competitor for fewer generations: extrapolate, marked
                run_txt += f"; extrap. to {args.generations} gens: {per_gen * args.generations:.0f}"
            print(
                f"| {engine} | {args.data} | {pop} | {gens} | {len(rs)} "
                f"| {mse.mean():.4f} +- {mse.std():.4f} | {np.mean([r['r2'] for r in rs]):.3f} | "
                f"{np.mean([r['length'] for r in rs]):.0f} | {run_txt} | {per_gen:.4f} | "
                f"{np.mean([r['cpu_s'] for r in rs]):.2f} | {np.mean([r['compile_s'] for r in rs]):.1f} |"
            )


if __name__ == "__main__":
    main()
