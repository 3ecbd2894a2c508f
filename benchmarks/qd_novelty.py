"""Novelty-search archives: evotensor's ``ProximityArchive`` and ``DNSArchive`` beside pyribs' (run by
hand, not a test).

Workload: ``T`` successive ``add`` calls of ``B`` candidates each (solution_dim 10, 2 measures
uniform in [0, 1]^2, objectives N(0, 1); float64 draws from ``numpy.random.default_rng(seed)``
rounded to float32, so both libraries get the same, float32-representable, values) into an archive
that starts empty: ``k_neighbors=15``, ``novelty_threshold=0.02``, with and without local
competition. evotensor's capacity and pyribs' ``initial_capacity`` are both 10,000 (the stream
never fills it, so no candidate is dropped and pyribs never grows its arrays).

Reported per configuration and library: the median and total wall time of one ``add`` over the
``T`` calls (evotensor: ``jax.jit(archive.add)`` with the state donated, compiled ahead of time,
compile time apart, ``block_until_ready`` after each call; pyribs: ``ProximityArchive.add``, NumPy
and a SciPy k-d tree rebuilt after each insertion, ``dtype=np.float32``), the elites at the end,
and the agreement of the two: the fraction of candidates with the same ``status`` in every call
(novelty is computed in float32 by evotensor and in float64 by SciPy, so a candidate within
rounding of the threshold may differ, and the archives drift apart from there).

``--archive dns``: the same stream into a Dominated Novelty Search population (``DNSArchive``,
``k_neighbors=3``, capacity ``DNS_CAPACITY`` = 1024 on both sides: every add after the first scores
the stored 1024 and the batch together and keeps 1024; pyribs: ``DNSArchive(dtype=np.float32)``,
``cdist`` in float64). Equal scores are ordered differently (pyribs: ``argpartition``), which the
continuous draws make rare.

    .venv/bin/python benchmarks/qd_novelty.py                 # both (pyribs from the qd venv)
    .venv/bin/python benchmarks/qd_novelty.py --batch 1024 --adds 40 --repeats 3
    .venv/bin/python benchmarks/qd_novelty.py --archive dns

pyribs lives in the ``qd`` venv of ``bench_venvs.py`` (``make bench-venvs VENVS=qd``); each run is
a fresh interpreter, the libraries alternating run by run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import numpy as np  # noqa: E402
from bench_venvs import run_json_worker, venv_python  # noqa: E402

K, THRESHOLD, CAPACITY, SOLUTION_DIM, MEASURE_DIM = 15, 0.02, 10_000, 10, 2
DNS_K, DNS_CAPACITY = 3, 1024


def stream(seed: int, batch: int, adds: int):
    """The candidate batches: ``(solutions [B, 10], objective [B], measures [B, 2])`` float32."""
    rng = np.random.default_rng(seed)
    for _ in range(adds):
        yield (
            rng.normal(size=(batch, SOLUTION_DIM)).astype(np.float32),
            rng.normal(size=batch).astype(np.float32),
            rng.uniform(0.0, 1.0, (batch, MEASURE_DIM)).astype(np.float32),
        )


def worker_evotensor(a) -> dict:
    import jax

    from evotensor.qd import DNSArchive, ProximityArchive

    if a.archive == "dns":
        archive = DNSArchive(
            solution_dim=SOLUTION_DIM, measure_dim=MEASURE_DIM, capacity=DNS_CAPACITY, k_neighbors=DNS_K
        )
    else:
        archive = ProximityArchive(
            solution_dim=SOLUTION_DIM,
            measure_dim=MEASURE_DIM,
            capacity=CAPACITY,
            k_neighbors=K,
            novelty_threshold=THRESHOLD,
            local_competition=a.local_competition,
        )
    state = archive.init()
    data = list(stream(a.seed, a.batch, a.adds))
    t0 = time.perf_counter()
    add = jax.jit(archive.add, donate_argnums=0).lower(state, *data[0]).compile()
    compile_s = time.perf_counter() - t0
    times, statuses = [], []
    for x, f, m in data:
        t = time.perf_counter()
        state, info = add(state, x, f, m)
        jax.block_until_ready((state, info))
        times.append(time.perf_counter() - t)
        statuses.append(np.asarray(info.status).tolist())
    return {
        "times": times,
        "compile_s": compile_s,
        "elites": int(state.occupied.sum()),
        "statuses": statuses,
        "version": f"evotensor, jax {jax.__version__}",
    }


def worker_pyribs(a) -> dict:
    from importlib.metadata import version

    from ribs.archives import DNSArchive, ProximityArchive

    if a.archive == "dns":
        archive = DNSArchive(
            solution_dim=SOLUTION_DIM,
            measure_dim=MEASURE_DIM,
            capacity=DNS_CAPACITY,
            k_neighbors=DNS_K,
            dtype=np.float32,
        )
    else:
        archive = ProximityArchive(
            solution_dim=SOLUTION_DIM,
            measure_dim=MEASURE_DIM,
            k_neighbors=K,
            novelty_threshold=THRESHOLD,
            local_competition=a.local_competition,
            initial_capacity=CAPACITY,
            dtype=np.float32,
        )
    times, statuses = [], []
    for x, f, m in stream(a.seed, a.batch, a.adds):
        t = time.perf_counter()
        info = archive.add(x, f, m)
        times.append(time.perf_counter() - t)
        statuses.append(np.asarray(info["status"]).tolist())
    return {
        "times": times,
        "compile_s": 0.0,
        "elites": len(archive),
        "statuses": statuses,
        "version": f"ribs {version('ribs')}",
    }


def run_worker(impl: str, a) -> dict:
    python = sys.executable if impl == "evotensor" else venv_python("qd")
    args = ["--worker", impl, "--batch", str(a.batch), "--adds", str(a.adds), "--seed", str(a.seed)]
    args += ["--archive", a.archive]
    return run_json_worker(python, __file__, args + (["--local-competition"] if a.local_competition else []))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", choices=("evotensor", "pyribs"))
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--adds", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--local-competition", action="store_true")
    ap.add_argument("--archive", choices=("proximity", "dns"), default="proximity")
    ap.add_argument("--impls", default="evotensor,pyribs")
    ap.add_argument("--out", help="write the raw rows here (JSON)")
    a = ap.parse_args()
    if a.worker:
        result = (worker_evotensor if a.worker == "evotensor" else worker_pyribs)(a)
        print(json.dumps(result))
        return
    impls = a.impls.split(",")
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    cpu = platform.processor() or platform.machine()
    print(f"{stamp}, {cpu}, {os.cpu_count()} CPUs, load {os.getloadavg()}")
    rows = []
    print(
        "| local competition | batch x adds | library | add ms median | adds total s | compile s | elites | ",
        end="",
    )
    print("same status |")
    print("|---|---|---|---|---|---|---|---|")
    for lc in (False, True) if a.archive == "proximity" else (False,):
        a.local_competition = lc
        for r in range(a.repeats):
            got = {}
            for impl in impls if r % 2 == 0 else impls[::-1]:  # alternate which goes first
                got[impl] = run_worker(impl, a)
            agree = "—"
            if len(got) == 2:
                s = [np.asarray(got[i]["statuses"]) for i in impls]
                agree = f"{np.mean(s[0] == s[1]) * 100:.2f}%"
            for impl in impls:
                g = got[impl]
                rows.append({"local_competition": lc, "impl": impl, "repeat": r, **g})
                median_ms = np.median(g["times"]) * 1e3
                print(
                    f"| {lc} | {a.batch} x {a.adds} | {impl} ({g['version']}) | {median_ms:.2f} "
                    f"| {sum(g['times']):.3f} | {g['compile_s']:.2f} | {g['elites']} | {agree} |"
                )
    print(f"load after: {os.getloadavg()}")
    if a.out:
        with open(a.out, "w") as fh:
            json.dump(
                {"archive": a.archive, "batch": a.batch, "adds": a.adds, "seed": a.seed, "rows": rows}, fh
            )


if __name__ == "__main__":
    main()
