"""GP evaluation throughput: evotensor's CPU path vs gplearn, Operon and DEAP on the same trees.

Measures GPops/s = (sum of tree lengths) x (rows) / second, EvoGP's measure, for the *fitness*
of a whole population (forward pass + MSE), on

* Pagie-1: the 676-point grid, 2 variables;
* 4096 random points, 2 variables uniform in [-5, 5];

for populations of 1000 and 5000 random trees (ramped half-and-half, depths 2..6, at most 64
nodes) over EvoGP's symbolic-regression function set ``+ - * / sin cos tan`` and the arithmetic
set ``+ - * /``. All engines score the *same* trees on the *same* data:

* evotensor: :func:`evotensor.gp.fitness` on each of ``--backends`` (the native C++ and the plain-JAX
  CPU paths; best of ``--repeats``);
* gplearn 0.4: ``_Program.raw_fitness`` per program (its evaluation loop; one process);
* Operon (pyoperon): ``EvaluateTrees`` on 1 and on all threads, plus the MSE in NumPy;
* DEAP 1.4: what its symbolic-regression example does per individual, ``gp.compile`` of the
  ``PrimitiveTree`` to a Python lambda, then one call on the whole data with NumPy (raw ``+ - * /
  sin cos tan``) and the MSE; compile + evaluation are timed together (one process).

Both wall time and process CPU time are reported (best of the repeats): on a shared machine the
CPU time is the steadier figure (for multi-threaded runs it sums the threads).

The competitors run in a separate venv (``--competitor-python``, default
the ``gp`` venv of ``bench_venvs.py``, ``make bench-venvs VENVS=gp``); this script calls
itself there with ``--worker``. Usage::

    .venv/bin/python benchmarks/gp_eval.py                 # everything
    .venv/bin/python benchmarks/gp_eval.py --pops 1000 --sets sr --no-competitors
    .venv/bin/python benchmarks/gp_eval.py --competitors deap
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np
from bench_venvs import venv_python

SETS = {"sr": ("add", "sub", "mul", "div", "sin", "cos", "tan"), "arith": ("add", "sub", "mul", "div")}
ARITY = {"add": 2, "sub": 2, "mul": 2, "div": 2, "sin": 1, "cos": 1, "tan": 1}
MAX_LEN = 64
PAD, CONST, VAR = 0, 1, 2


# ---- problem data and random trees (NumPy only, shared by all engines) ----------------------------


def pagie1():
    axis = np.round(np.arange(26) * 0.4 - 5.0, 6)
    gx, gy = np.meshgrid(axis, axis, indexing="ij")
    X = np.stack([gx.ravel(), gy.ravel()], 1)
    return X.astype(np.float32), (1 / (1 + X[:, 0] ** -4) + 1 / (1 + X[:, 1] ** -4)).astype(np.float32)


def random_points(n=4096, seed=0):
    X = np.random.default_rng(seed).uniform(-5, 5, (n, 2))
    return X.astype(np.float32), (1 / (1 + X[:, 0] ** -4) + 1 / (1 + X[:, 1] ** -4)).astype(np.float32)


def random_trees(names, pop, seed, n_vars=2):
    """Ramped half-and-half (depth 2..6) prefix arrays ``opcode, value, size [pop, MAX_LEN]``."""
    rng = np.random.default_rng(seed)
    opcode = np.zeros((pop, MAX_LEN), np.int32)
    value = np.zeros((pop, MAX_LEN), np.float32)
    size = np.zeros((pop, MAX_LEN), np.int32)
    p_func = len(names) / (len(names) + n_vars + 1)

    def grow(depth, full, out):
        if depth == 0 or (not full and out and rng.random() > p_func):
            if rng.random() < 1 / (n_vars + 1):
                out.append((CONST, float(np.float32(rng.uniform(-1, 1)))))
            else:
                out.append((VAR, float(rng.integers(n_vars))))
            return
        k = int(rng.integers(len(names)))
        out.append((3 + k, 0.0))
        for _ in range(ARITY[names[k]]):
            grow(depth - 1, full, out)

    t = 0
    while t < pop:
        nodes = []
        grow(int(rng.integers(2, 7)), bool(rng.random() < 0.5), nodes)
        if len(nodes) > MAX_LEN:
            continue
        arity = [0 if op < 3 else ARITY[names[op - 3]] for op, _ in nodes]
        sizes = [0] * len(nodes)
        for i in range(len(nodes) - 1, -1, -1):  # size = 1 + sizes of the children
            j, s = i + 1, 1
            for _ in range(arity[i]):
                s += sizes[j]
                j += sizes[j]
            sizes[i] = s
        opcode[t, : len(nodes)] = [op for op, _ in nodes]
        value[t, : len(nodes)] = [v for _, v in nodes]
        size[t, : len(nodes)] = sizes
        t += 1
    return opcode, value, size


def prefix_tokens(opcode, value, size, names):
    """One tree as a prefix list of (kind, payload)."""
    return [
        ("const", float(value[i]))
        if opcode[i] == CONST
        else ("var", int(value[i]))
        if opcode[i] == VAR
        else ("fn", names[opcode[i] - 3])
        for i in range(size[0])
    ]


# ---- competitors (run inside the competitor venv) -----------------------------------------------


def _infix(tokens, pos=0):
    kind, payload = tokens[pos]
    if kind == "const":
        return f"({payload!r})", pos + 1
    if kind == "var":
        return f"X{payload + 1}", pos + 1
    args = []
    pos += 1
    for _ in range(ARITY[payload]):
        s, pos = _infix(tokens, pos)
        args.append(s)
    sym = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
    if payload in sym:
        return f"({args[0]} {sym[payload]} {args[1]})", pos
    return f"{payload}({args[0]})", pos


def _best_time(fn, repeats):
    best = best_cpu = np.inf
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        fn()
        best = min(best, time.perf_counter() - t)
        best_cpu = min(best_cpu, time.process_time() - c)
    return {"seconds": best, "cpu_seconds": best_cpu}


def deap_fitness(trees, names, X, y, repeats):
    """DEAP: compile each tree (``gp.compile``) and evaluate it on all rows with NumPy, + MSE."""
    import operator

    import deap
    from deap import gp

    fns = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": np.divide}
    fns.update({"sin": np.sin, "cos": np.cos, "tan": np.tan})
    pset = gp.PrimitiveSet("MAIN", X.shape[1])
    for n in names:
        pset.addPrimitive(fns[n], ARITY[n], name=n)
    prims = {p.name: p for ps in pset.primitives.values() for p in ps}
    args = [pset.mapping[f"ARG{k}"] for k in range(X.shape[1])]
    individuals = [
        gp.PrimitiveTree(
            [
                prims[p] if k == "fn" else args[p] if k == "var" else gp.Terminal(p, False, object)
                for k, p in toks
            ]
        )
        for toks in trees
    ]
    cols = [X[:, k].astype(np.float64) for k in range(X.shape[1])]
    yy = y.astype(np.float64)

    def run():
        with np.errstate(all="ignore"):
            for ind in individuals:
                pred = gp.compile(ind, pset)(*cols)
                np.mean((pred - yy) ** 2)

    out = _best_time(run, max(1, repeats // 2))
    out["version"] = deap.__version__
    return out


def worker(path, repeats, engines):
    data = np.load(path)
    names = tuple(str(n) for n in data["names"])
    X, y = data["X"], data["y"]
    trees = [prefix_tokens(o, v, s, names) for o, v, s in zip(data["opcode"], data["value"], data["size"])]
    out = {}
    if "gplearn" in engines:
        out["gplearn"] = gplearn_fitness(trees, names, X, y, repeats)
    if "operon" in engines:
        out.update(operon_fitness(trees, X, y, repeats))
    if "deap" in engines:
        out["deap"] = deap_fitness(trees, names, X, y, repeats)
    print(json.dumps(out))


def gplearn_fitness(trees, names, X, y, repeats):
    import gplearn
    from gplearn import functions as gf
    from gplearn._program import _Program
    from gplearn.fitness import mean_square_error

    fmap = {
        "add": gf.add2,
        "sub": gf.sub2,
        "mul": gf.mul2,
        "div": gf.div2,
        "sin": gf.sin1,
        "cos": gf.cos1,
        "tan": gf.tan1,
    }
    arities = {}
    for n in names:
        arities.setdefault(ARITY[n], []).append(fmap[n])
    programs = []
    for toks in trees:
        prog = [fmap[p] if k == "fn" else (p if k == "const" else int(p)) for k, p in toks]
        programs.append(
            _Program(
                [fmap[n] for n in names],
                arities,
                (2, 6),
                "half and half",
                X.shape[1],
                (-1.0, 1.0),
                mean_square_error,
                0.05,
                0.0,
                np.random.RandomState(0),
                program=prog,
            )
        )
    weights = np.ones(len(y))
    best = best_cpu = np.inf
    for _ in range(max(1, repeats // 2)):
        t, c = time.perf_counter(), time.process_time()
        for p in programs:
            p.raw_fitness(X.astype(np.float64), y.astype(np.float64), weights)
        best = min(best, time.perf_counter() - t)
        best_cpu = min(best_cpu, time.process_time() - c)
    return {"seconds": best, "cpu_seconds": best_cpu, "version": gplearn.__version__}


def operon_fitness(trees, X, y, repeats):
    out = {}
    import pyoperon as op

    ds = op.Dataset(np.asfortranarray(X))
    varmap = {v.Name: v.Hash for v in ds.Variables}
    otrees = [op.InfixParser.Parse(_infix(t)[0], varmap) for t in trees]
    lengths = sum(t.Length for t in otrees)
    result = np.zeros(len(otrees) * len(y), np.float32)
    rng = op.Range(0, len(y))
    for threads in (1, os.cpu_count() or 1):
        best = best_cpu = np.inf
        for _ in range(repeats):
            t, c = time.perf_counter(), time.process_time()
            op.EvaluateTrees(otrees, ds, rng, result, threads)
            np.mean((result.reshape(len(otrees), -1) - y) ** 2, axis=1)
            best = min(best, time.perf_counter() - t)
            best_cpu = min(best_cpu, time.process_time() - c)
        out[f"operon_{threads}t"] = {"seconds": best, "cpu_seconds": best_cpu, "operon_lengths": lengths}
    return out


# ---- evotensor ------------------------------------------------------------------------------------


def run_evotensor(opcode, value, size, names, X, y, repeats, backend="jax"):
    import jax.numpy as jnp

    from evotensor.gp.evaluate import fitness
    from evotensor.gp.functions import FunctionSet

    fs = FunctionSet(names)

    class Forest:  # the four contract fields; no Modi nodes here
        pass

    forest = Forest()
    forest.opcode, forest.value, forest.size = jnp.asarray(opcode), jnp.asarray(value), jnp.asarray(size)
    forest.output = jnp.full(opcode.shape, -1, jnp.int32)
    Xj, yj = jnp.asarray(X), jnp.asarray(y)
    fitness(forest, Xj, yj, fs, backend=backend).block_until_ready()  # compile
    best_wall = best_cpu = np.inf
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        fitness(forest, Xj, yj, fs, backend=backend).block_until_ready()
        best_wall = min(best_wall, time.perf_counter() - t)
        best_cpu = min(best_cpu, time.process_time() - c)
    return {"seconds": best_wall, "cpu_seconds": best_cpu}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pops", default="1000,5000")
    ap.add_argument("--sets", default="sr,arith")
    ap.add_argument("--data", default="pagie1,random4096")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--competitor-python", default=venv_python("gp"))
    ap.add_argument("--no-competitors", action="store_true")
    ap.add_argument("--backends", default="native,jax", help="evotensor's CPU paths to time")
    ap.add_argument(
        "--competitors",
        nargs="*",
        default=["gplearn", "operon", "deap"],
        choices=["gplearn", "operon", "deap"],
    )
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args.worker, args.repeats, args.competitors)

    print(
        f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}"
    )
    print("| data | set | pop | mean len | engine | wall s | CPU s | GPops/s (wall) | GPops per CPU-s |")
    print("|---|---|---|---|---|---|---|---|---|")
    datasets = {"pagie1": pagie1, "random4096": random_points}
    for dname in args.data.split(","):
        X, y = datasets[dname]()
        for sname in args.sets.split(","):
            names = SETS[sname]
            for pop in (int(p) for p in args.pops.split(",")):
                opcode, value, size = random_trees(names, pop, seed=pop)
                mean_len = size[:, 0].mean()
                rows = {
                    f"evotensor ({b})": run_evotensor(opcode, value, size, names, X, y, args.repeats, b)
                    for b in args.backends.split(",")
                }
                if not args.no_competitors:
                    with tempfile.TemporaryDirectory() as tmp:
                        path = os.path.join(tmp, "trees.npz")
                        np.savez(path, opcode=opcode, value=value, size=size, names=np.array(names), X=X, y=y)
                        res = subprocess.run(
                            [
                                args.competitor_python,
                                __file__,
                                "--worker",
                                path,
                                "--repeats",
                                str(args.repeats),
                                "--competitors",
                                *args.competitors,
                            ],
                            capture_output=True,
                            text=True,
                            check=True,
                        )
                        comp = json.loads(res.stdout.strip().splitlines()[-1])
                    for k in ("gplearn", "deap"):
                        if k in comp:
                            rows[k] = comp[k]
                    for k, v in comp.items():
                        if k.startswith("operon"):
                            rows[f"Operon ({k.split('_')[1].replace('t', ' thread(s)')})"] = v
                work = float(size[:, 0].sum()) * len(y)
                for engine, r in rows.items():
                    print(
                        f"| {dname} | {sname} | {pop} | {mean_len:.1f} | {engine} | {r['seconds']:.4f} | "
                        f"{r['cpu_seconds']:.4f} | {work / r['seconds'] / 1e9:.3f} G | "
                        f"{work / r['cpu_seconds'] / 1e9:.3f} G |",
                        flush=True,
                    )


if __name__ == "__main__":
    sys.exit(main())
