"""The first ``SymbolicRegressor().fit`` in a fresh process: import, fit, compile, programs compiled.

Each measurement is a fresh interpreter (this script calls itself with ``--worker``) with
``JAX_COMPILATION_CACHE_DIR`` unset and ``EVOTENSOR_CACHE_DIR`` pointing at a cache directory made
empty for it: a *cold* run compiles everything (and writes the cache), then a *warm* run, another
fresh process on the same directory, reads it. ``--cache off`` measures with the persistent cache
turned off (``EVOTENSOR_CACHE_DIR=off``; cold only).

Per run it reports the wall time of ``import evotensor.gp``, of the first ``fit``, the fit's
``compile_seconds_`` (compile or cache read, as the estimator counts it), a second fit's wall time in
the same process (``--second-fit``), and from JAX's compile log (``jax_log_compiles``) the programs
XLA compiled: how many distinct ones, the seconds of XLA compilation in all (trace and lowering
apart) and the top ones by XLA seconds. "stored" counts the estimators' stored executables in the
cache directory after the run (``executables/*.exe``, :mod:`evotensor.core.compile_cache`; 0 for a
version without that store).

Configurations (``--configs``): ``default`` is ``SymbolicRegressor()``; ``nsga2-co`` is
``SymbolicRegressor(survival="nsga2", constant_optimization="auto", refine_top=64)``. Problems
(``--problems``): any :data:`evotensor.gp.SR_PROBLEMS` name (seed 0's training draw).

To compare two versions of evotensor, give each its source folder (``--package NAME=PATH`` puts
``PATH``, the folder holding the ``evotensor`` package, first on ``PYTHONPATH``); runs alternate
between packages (A B, B A, ...) so that the machine's load hits both alike. The table notes the
load average before and after; "fit CPU s" (process CPU time) is the steadier figure on a shared
machine.

Usage::

    .venv/bin/python benchmarks/gp_first_fit.py
    .venv/bin/python benchmarks/gp_first_fit.py --problems pagie-1 --configs default --repeats 3 \\
        --package before=/tmp/before --package after=src
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

CONFIGS = {
    "default": {},
    "nsga2-co": {"survival": "nsga2", "constant_optimization": "auto", "refine_top": 64},
}

_FINISHED = re.compile(
    r"Finished (tracing|jaxpr to MLIR module conversion|XLA compilation of) "
    r"(\S+?)(?: for jit)? in ([0-9.e-]+) sec"
)


class _CompileLog(logging.Handler):
    """Collects JAX's ``Finished ... in X sec`` compile-log lines (``jax_log_compiles``)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.events: list[tuple[str, str, float]] = []
        self.cache_hits = 0

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if "Persistent compilation cache hit" in msg:
            self.cache_hits += 1
        m = _FINISHED.search(msg)
        if m:
            kind = {"tracing": "trace", "XLA compilation of": "xla"}.get(m.group(1), "lower")
            self.events.append((kind, m.group(2), float(m.group(3))))


def worker(a: argparse.Namespace) -> dict:
    """One fresh process: import, then the first (and optionally a second) fit."""
    t0 = time.perf_counter()
    import jax

    log = _CompileLog()
    for name in ("jax._src.interpreters.pxla", "jax._src.dispatch", "jax._src.pjit", "jax._src.compiler"):
        logging.getLogger(name).addHandler(log)
        logging.getLogger(name).setLevel(logging.DEBUG)
    jax.config.update("jax_log_compiles", True)
    import numpy as np

    from evotensor.gp import SymbolicRegressor, sr_data

    t_import = time.perf_counter() - t0
    X, y, _, _ = sr_data(a.problem, 0)
    options = dict(CONFIGS[a.config], random_state=a.seed)
    if a.pop:
        options["population_size"] = a.pop
    if a.generations:
        options["generations"] = a.generations
    t1, c1 = time.perf_counter(), time.process_time()
    est = SymbolicRegressor(**options).fit(X, y)
    t_fit, c_fit = time.perf_counter() - t1, time.process_time() - c1
    first_events = list(log.events)
    out = {
        "import_s": t_import,
        "fit_s": t_fit,
        "fit_cpu_s": c_fit,
        "compile_s": float(est.compile_seconds_),
        "run_s": float(est.run_seconds_),
        "cache_dir": jax.config.jax_compilation_cache_dir,
        "cache_hits": log.cache_hits,
        "best": est.best_.expression,
        "best_loss": float(est.best_.loss),
        "best_fitness": float(est.run_result_.best_fitness),
        "xla": [(n, s) for k, n, s in first_events if k == "xla"],
        "trace_s": sum(s for k, _, s in first_events if k == "trace"),
        "lower_s": sum(s for k, _, s in first_events if k == "lower"),
        "numpy": np.__version__,
    }
    if a.second_fit:
        t2 = time.perf_counter()
        est2 = SymbolicRegressor(**options).fit(X, y)
        out["fit2_s"] = time.perf_counter() - t2
        out["compile2_s"] = float(est2.compile_seconds_)
    return out


def _loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def _run(a: argparse.Namespace, path: str | None, problem: str, config: str, cache: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_COMPILATION_CACHE_DIR", "PYTHONPATH")}
    env["EVOTENSOR_CACHE_DIR"] = cache if cache is not None else "off"
    env["JAX_PLATFORMS"] = env.get("JAX_PLATFORMS", "cpu")
    if path:
        env["PYTHONPATH"] = os.path.abspath(path)
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--problem", problem, "--config", config]
    cmd += ["--seed", str(a.seed), "--pop", str(a.pop or 0), "--generations", str(a.generations or 0)]
    cmd += ["--second-fit"] if a.second_fit else []
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=a.timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"worker failed ({problem}, {config}):\n{proc.stderr[-3000:]}")
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    row["process_s"] = time.perf_counter() - t0
    store = os.path.join(cache, "executables") if cache else ""
    row["stored"] = len([f for f in os.listdir(store) if f.endswith(".exe")]) if os.path.isdir(store) else 0
    return row


def _row_text(name: str, problem: str, config: str, phase: str, r: dict, top: int) -> str:
    xla = sorted(r["xla"], key=lambda e: -e[1])
    tops = ", ".join(f"{n} {s:.2f}" for n, s in xla[:top])
    second = f" | {r['fit2_s']:.2f}" if "fit2_s" in r else ""
    return (
        f"| {name} | {problem} | {config} | {phase} | {r['import_s']:.2f} | {r['fit_s']:.2f} | "
        f"{r['fit_cpu_s']:.2f} | "
        f"{r['compile_s']:.2f} | {len(xla)} | {sum(s for _, s in xla):.2f} | "
        f"{r['trace_s'] + r['lower_s']:.2f} | "
        f"{r['cache_hits']} | {r.get('stored', 0)} | {tops}{second} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--problem", default="pagie-1", help=argparse.SUPPRESS)
    ap.add_argument("--config", default="default", help=argparse.SUPPRESS)
    ap.add_argument("--problems", default="pagie-1,nguyen-1")
    ap.add_argument("--configs", default="default,nsga2-co")
    ap.add_argument("--pop", type=int, default=0, help="population_size (0: the estimator's default)")
    ap.add_argument("--generations", type=int, default=0, help="generations (0: the estimator's default)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--cache", choices=("cold-warm", "off"), default="cold-warm")
    ap.add_argument("--second-fit", action="store_true", help="also time a second fit in the same process")
    ap.add_argument(
        "--package", action="append", default=[], help="NAME=PATH: a folder holding the evotensor package"
    )
    ap.add_argument("--top", type=int, default=3, help="programs listed per run, by XLA seconds")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--out", help="write the raw rows here (JSON)")
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(worker(a)))
        return
    packages = [tuple(p.split("=", 1)) for p in a.package] or [("installed", None)]
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    print(f"{stamp}, {os.cpu_count()} CPUs, load before: {_loadavg()}, python {sys.version.split()[0]}")
    print(
        "| package | problem | config | cache | import s | first fit s | fit CPU s | compile_seconds_ | "
        "XLA programs | "
        f"XLA s | trace+lower s | cache hits | stored | top XLA s{' | 2nd fit s' if a.second_fit else ''} |"
    )
    print("|---" * (15 if a.second_fit else 14) + "|")
    rows = []
    for rep in range(a.repeats):
        for problem in a.problems.split(","):
            for config in a.configs.split(","):
                order = packages if rep % 2 == 0 else packages[::-1]
                for name, path in order:
                    cache = tempfile.mkdtemp(prefix="gp_first_fit_") if a.cache == "cold-warm" else None
                    try:
                        phases = ("cold", "warm") if cache else ("off",)
                        for phase in phases:
                            r = _run(a, path, problem, config, cache)
                            r.update(package=name, problem=problem, config=config, phase=phase)
                            r["load"] = _loadavg()
                            rows.append(r)
                            print(_row_text(name, problem, config, phase, r, a.top), flush=True)
                    finally:
                        if cache:
                            shutil.rmtree(cache, ignore_errors=True)
    print(f"load after: {_loadavg()}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
