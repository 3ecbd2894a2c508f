"""MAP-Elites over GP trees against a GP run's hall of fame and Operon's NSGA-II front, at the same
number of generations of the same population.

The question a symbolic-regression user asks of an accuracy / complexity map: for every tree length,
how good is the best expression found? Two ways to answer it, side by side in one process,
alternating per seed, on Pagie-1 with scaled R² (the ``sr-map-elites`` task's problem):

* ``map-elites``: the ``sr-map-elites`` task (:class:`evotensor.gp.GPEmitter`, one cell per length and
  depth, batch ``--pop``); the best R² of each length is the best of its cells;
* ``gp``: :class:`evotensor.gp.GP` with the same operators, ``max_len`` and population (tournament
  selection, 1% elites, the GP's defaults otherwise), whose hall of fame keeps the best tree of every
  length (:class:`evotensor.gp.front.HallOfFame`), each re-scored here with the problem;
* ``operon``: pyoperon 0.6.2 (the strongest SR anchor, in the ``gp`` venv of ``bench_venvs.py``) with
  NSGA-II on (R², length) (``objectives=["r2", "length"]``), the same population, generations,
  ``max_length`` and functions (``+ - * / sin cos tan``, constants), one thread, its defaults otherwise
  (its variable leaves carry fitted weights at no cost in length, and it tunes constants by local
  search); its ``pareto_front_`` gives the best R² per length. Operon's ``length`` counts its linear
  scaling, ``offset + scale * (tree)`` (4 nodes: a constant model has length 5); those 4 are taken
  off here, since ours is not counted either. Skipped, with a note, where that venv is missing.

All run ``--generations`` generations of ``--pop`` trees. Reported per run: compile and run seconds
(the run loop's; Operon's whole fit as its run), the best R², and the Pareto front of (length, R²) at
a few lengths: the best R² of a tree of at most that length (the front all answer, so a length a
method fills with a worse tree than a shorter one does not count against it).

Usage (``make bench-venvs VENVS=gp`` first for Operon)::

    .venv/bin/python benchmarks/qd_trees.py --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from bench_venvs import machine, venv_python  # noqa: E402

import evotensor  # noqa: E402
from evotensor.gp import GP, Pagie1  # noqa: E402
from evotensor.tasks import get_task  # noqa: E402

LENGTHS = (3, 5, 7, 9, 11, 15, 19, 23, 32)


def front_at(best_by_length: dict[int, float]) -> list[float]:
    """The best R² among trees of at most each of :data:`LENGTHS` nodes (``nan`` if none)."""
    out = []
    for n in LENGTHS:
        values = [v for length, v in best_by_length.items() if length <= n]
        out.append(max(values) if values else float("nan"))
    return out


def run_map_elites(seed: int, pop: int, generations: int, max_len: int) -> dict:
    task = get_task("sr-map-elites").build({"pop": pop, "max_len": max_len})
    result = evotensor.run(task.strategy, task.problem, generations, jax.random.key(seed), progress=False)
    state = result.state.archive
    occupied = np.asarray(state.occupied)
    length = np.asarray(state.measures)[occupied, 0].astype(int)
    r2 = np.asarray(state.objective)[occupied]
    best = {int(n): float(r2[length == n].max()) for n in np.unique(length)}
    return {"result": result, "best": best, "cells": int(occupied.sum())}


def run_gp(seed: int, pop: int, generations: int, max_len: int) -> dict:
    problem = Pagie1(metric="r2")
    gp = GP(pop, problem.function_set, n_vars=2, max_len=max_len, elite_rate=0.01, const_range=(-5.0, 5.0))
    result = evotensor.run(gp, problem, generations, jax.random.key(seed), progress=False)
    hof = result.state.hall_of_fame
    filled = np.flatnonzero(np.isfinite(np.asarray(hof.loss)))
    trees = jax.tree_util.tree_map(lambda a: a[filled], hof.forest)
    r2 = np.asarray(problem.evaluate(None, trees).fitness)
    length = np.asarray(trees.length)
    best = {int(n): float(r2[length == n].max()) for n in np.unique(length)}
    return {"result": result, "best": best, "cells": len(filled)}


OPERON = """
import json, sys, time
import numpy as np
from pyoperon.sklearn import SymbolicRegressor
seed, pop, generations, max_len = (int(a) for a in sys.argv[1:5])
X, y = (np.asarray(a, np.float64) for a in json.loads(sys.stdin.read()))
est = SymbolicRegressor(allowed_symbols="add,sub,mul,div,sin,cos,tan,constant,variable",
    objectives=["r2", "length"], population_size=pop, generations=generations,
    max_evaluations=100 * pop * (generations + 1), max_length=max_len, n_threads=1, random_state=seed)
t = time.perf_counter()
est.fit(X, y)
wall = time.perf_counter() - t
front = [(int(m["length"]) - 4, -float(m["objective_values"][0])) for m in est.pareto_front_]
print(json.dumps({"wall": wall, "front": front}))
"""


def run_operon(seed: int, pop: int, generations: int, max_len: int) -> dict | None:
    python = venv_python("gp")
    if not os.path.exists(python):
        return None
    problem = Pagie1()
    data = json.dumps([np.asarray(problem.X).tolist(), np.asarray(problem.y).tolist()])
    args = [python, "-c", OPERON, str(seed), str(pop), str(generations), str(max_len)]
    out = subprocess.run(args, input=data, capture_output=True, text=True, check=True)
    record = json.loads(out.stdout.strip().splitlines()[-1])
    best: dict[int, float] = {}
    for length, r2 in record["front"]:
        best[length] = max(r2, best.get(length, -np.inf))
    return {"run_seconds": record["wall"], "best": best}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--pop", type=int, default=512)
    p.add_argument("--generations", type=int, default=300)
    p.add_argument("--max-len", type=int, default=32)
    args = p.parse_args()
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"# MAP-Elites over GP trees vs GP's hall of fame and Operon's front, Pagie-1 scaled R², {now}")
    print(f"# machine: {machine()}; load {os.getloadavg()[0]:.1f}; jax {jax.__version__}")
    print(f"# pop {args.pop} x {args.generations} generations, max_len {args.max_len}")
    print()
    head = " | ".join(f"<= {n}" for n in LENGTHS)
    print(f"| seed | method | compile s | run s | lengths filled | best R² | front: {head} |")
    print("|---" * (6 + len(LENGTHS)) + "|")
    for seed in args.seeds:
        for name, fn in (("map-elites", run_map_elites), ("gp", run_gp), ("operon", run_operon)):
            out = fn(seed, args.pop, args.generations, args.max_len)
            if out is None:
                print(f"| {seed} | {name} | not run: no venv at {venv_python('gp')} |")
                continue
            front = " | ".join(f"{v:.4f}" for v in front_at(out["best"]))
            if "result" in out:
                compile_s, run_s = out["result"].compile_seconds, out["result"].run_seconds
            else:  # Operon's whole fit (it compiles nothing)
                compile_s, run_s = float("nan"), out["run_seconds"]
            print(
                f"| {seed} | {name} | {compile_s:.2f} | {run_s:.2f} | {len(out['best'])} | "
                f"{max(out['best'].values()):.4f} | {front} |",
                flush=True,
            )
    print(f"\n# load at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
