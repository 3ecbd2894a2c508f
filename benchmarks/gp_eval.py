"""GP evaluation throughput: evotensor's CPU path vs gplearn, Operon and DEAP on the same trees.

Measures GPops/s = (sum of tree lengths) x (rows) / second, EvoGP's measure, for the *fitness*
of a whole population (forward pass + MSE), on

* Pagie-1: the 676-point grid, 2 variables;
* 4096 random points, 2 variables uniform in [-5, 5];

for populations of 1000 and 5000 random trees (ramped half-and-half, depths 2..6, at most 64
nodes) over EvoGP's symbolic-regression function set ``+ - * / sin cos tan`` and the arithmetic
set ``+ - * /``. All engines score the *same* trees on the *same* data:

* evotensor: :func:`evotensor.gp.fitness` on each of ``--backends`` (the native C++ and the plain-JAX
  CPU paths; compiled once before the timed rounds, compile time reported apart);
* gplearn 0.4: ``_Program.raw_fitness`` per program (its evaluation loop; one process);
* Operon (pyoperon): ``EvaluateTrees`` on 1 and on all threads, plus the MSE in NumPy;
* DEAP 1.4: what its symbolic-regression example does per individual, ``gp.compile`` of the
  ``PrimitiveTree`` to a Python lambda, then one call on the whole data with NumPy (raw ``+ - * /
  sin cos tan``) and the MSE; compile + evaluation are timed together (one process).

Side by side, alternating: for each data set x function set x population, the competitors are
prepared once in a worker process of the competitor venv (``--competitor-python``, default the ``gp``
venv of ``bench_venvs.py``, ``make bench-venvs VENVS=gp``; this script calls itself there with
``--worker``), evotensor's backends are compiled in this process, and then ``--repeats`` rounds time
one fitness pass of every engine each, in an order rotated by the round (A B C, B C A, ...), so load
on the shared machine hits all engines alike. Reported: the median (and range) over the rounds of
wall time and process CPU time; GPops per CPU-second is the steadier figure on a shared machine (it
sums the threads of multi-threaded engines). Beside it, "agree" is the fraction of trees whose MSE
matches evotensor's first backend (relative 1e-3, or both non-finite): a check that the engines
compute the same thing (gplearn's protected ``/`` and ``tan`` cannot agree everywhere).

Usage::

    .venv/bin/python benchmarks/gp_eval.py                 # everything
    .venv/bin/python benchmarks/gp_eval.py --data random4096 --backends native --competitors operon
    .venv/bin/python benchmarks/gp_eval.py --pops 1000 --sets sr --no-competitors
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


class _Timer:
    def __init__(self):
        self.t, self.c = time.perf_counter(), time.process_time()

    def read(self):
        return {"seconds": time.perf_counter() - self.t, "cpu_seconds": time.process_time() - self.c}


def prepare_deap(trees, names, X, y):
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
            return np.array([np.mean((gp.compile(ind, pset)(*cols) - yy) ** 2) for ind in individuals])

    return {"deap": (run, {"version": deap.__version__})}


def prepare_gplearn(trees, names, X, y):
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
    X64, y64 = X.astype(np.float64), y.astype(np.float64)

    def run():
        return np.array([p.raw_fitness(X64, y64, weights) for p in programs])

    return {"gplearn": (run, {"version": gplearn.__version__})}


def prepare_operon(trees, X, y):
    from importlib.metadata import version

    import pyoperon as op

    ds = op.Dataset(np.asfortranarray(X, dtype=np.float64))
    varmap = {v.Name: v.Hash for v in ds.Variables}
    otrees = [op.InfixParser.Parse(_infix(t)[0], varmap) for t in trees]
    lengths = sum(t.Length for t in otrees)
    result = np.zeros(len(otrees) * len(y), np.float32)
    rng = op.Range(0, len(y))
    out = {}
    for threads in sorted({1, os.cpu_count() or 1}):

        def run(threads=threads):
            op.EvaluateTrees(otrees, ds, rng, result, threads)
            return np.mean((result.reshape(len(otrees), -1) - y) ** 2, axis=1)

        out[f"Operon ({threads} thread{'s' if threads > 1 else ''})"] = (
            run,
            {"version": version("pyoperon"), "operon_lengths": lengths},
        )
    return out


def worker(path, engines):
    """Prepare the competitors on the trees in ``path``; print their names and metadata as one JSON
    line, then time one fitness pass per engine name read from stdin (one JSON line each; the MSE
    vector with the first pass)."""
    data = np.load(path)
    names = tuple(str(n) for n in data["names"])
    X, y = data["X"], data["y"]
    trees = [prefix_tokens(o, v, s, names) for o, v, s in zip(data["opcode"], data["value"], data["size"])]
    runs = {}
    if "gplearn" in engines:
        runs.update(prepare_gplearn(trees, names, X, y))
    if "operon" in engines:
        runs.update(prepare_operon(trees, X, y))
    if "deap" in engines:
        runs.update(prepare_deap(trees, names, X, y))
    print(json.dumps({k: meta for k, (_, meta) in runs.items()}), flush=True)
    sent = set()
    for line in sys.stdin:
        name = line.strip()
        if name in ("", "quit"):
            break
        timer = _Timer()
        mse = runs[name][0]()
        out = timer.read()
        if name not in sent:
            out["mse"] = [float(v) for v in mse]
            sent.add(name)
        print(json.dumps(out), flush=True)


class Competitors:
    """The competitor worker process for one tree set."""

    def __init__(self, python, path, engines):
        cmd = [python, __file__, "--worker", path, "--competitors", *engines]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.meta = json.loads(self.proc.stdout.readline())

    def run(self, name):
        self.proc.stdin.write(name + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self):
        self.proc.stdin.write("quit\n")
        self.proc.stdin.close()
        self.proc.wait()


# ---- evotensor ------------------------------------------------------------------------------------


def prepare_evotensor(opcode, value, size, names, X, y, backend="jax"):
    """(run, compile seconds): one fitness pass of :func:`evotensor.gp.fitness` on ``backend``."""
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
    timer = _Timer()
    fitness(forest, Xj, yj, fs, backend=backend).block_until_ready()  # compile + first pass
    compile_s = timer.read()["seconds"]

    def run():
        return np.asarray(fitness(forest, Xj, yj, fs, backend=backend).block_until_ready())

    return run, compile_s


def agreement(a, b):
    """Fraction of trees whose MSEs agree (relative 1e-3, or both non-finite)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    both_bad = ~np.isfinite(a) & ~np.isfinite(b)
    with np.errstate(all="ignore"):
        close = np.isclose(a, b, rtol=1e-3, atol=1e-6)
    return float(np.mean(both_bad | close))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pops", default="1000,5000")
    ap.add_argument("--sets", default="sr,arith")
    ap.add_argument("--data", default="pagie1,random4096")
    ap.add_argument("--repeats", type=int, default=5, help="alternation rounds per configuration")
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
        return worker(args.worker, args.competitors)

    print(
        f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()}; "
        f"{args.repeats} alternating rounds, median (range)"
    )
    print(
        "| data | set | pop | mean len | engine | compile s | wall s | CPU s | GPops/s (wall) "
        "| GPops per CPU-s | agree |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    datasets = {"pagie1": pagie1, "random4096": random_points}
    for dname in args.data.split(","):
        X, y = datasets[dname]()
        for sname in args.sets.split(","):
            names = SETS[sname]
            for pop in (int(p) for p in args.pops.split(",")):
                opcode, value, size = random_trees(names, pop, seed=pop)
                mean_len = size[:, 0].mean()
                engines, compile_s = {}, {}
                for b in args.backends.split(","):
                    engines[f"evotensor ({b})"], compile_s[f"evotensor ({b})"] = prepare_evotensor(
                        opcode, value, size, names, X, y, b
                    )
                comp = None
                with tempfile.TemporaryDirectory() as tmp:
                    if not args.no_competitors:
                        path = os.path.join(tmp, "trees.npz")
                        np.savez(path, opcode=opcode, value=value, size=size, names=np.array(names), X=X, y=y)
                        comp = Competitors(args.competitor_python, path, args.competitors)
                        for name in comp.meta:
                            engines[name] = lambda name=name, comp=comp: comp.run(name)
                    times = {name: [] for name in engines}
                    mses = {}
                    order = list(engines)
                    try:
                        for r in range(args.repeats):
                            k = r % len(order)
                            for name in order[k:] + order[:k]:
                                if name.startswith("evotensor"):
                                    timer = _Timer()
                                    mse = engines[name]()
                                    t = timer.read()
                                    mses.setdefault(name, mse)
                                else:
                                    t = engines[name]()
                                    if "mse" in t:
                                        mses[name] = t.pop("mse")
                                times[name].append(t)
                    finally:
                        if comp is not None:
                            comp.close()
                work = float(size[:, 0].sum()) * len(y)
                ref = mses[order[0]]
                for name, ts in times.items():
                    wall = [t["seconds"] for t in ts]
                    cpu = [t["cpu_seconds"] for t in ts]
                    mw, mc = float(np.median(wall)), float(np.median(cpu))
                    cs = f"{compile_s[name]:.2f}" if name in compile_s else "—"
                    print(
                        f"| {dname} | {sname} | {pop} | {mean_len:.1f} | {name} | {cs} | {mw:.4f} "
                        f"({min(wall):.4f}–{max(wall):.4f}) | {mc:.4f} | {work / mw / 1e9:.3f} G | "
                        f"{work / mc / 1e9:.3f} G "
                        f"({work / max(cpu) / 1e9:.2f}–{work / min(cpu) / 1e9:.2f}) | "
                        f"{agreement(ref, mses[name]):.3f} |",
                        flush=True,
                    )


if __name__ == "__main__":
    sys.exit(main())
