"""Statistical parity on XOR: evotensor's NEAT (neat-python mode) vs neat-python 2.1 (run by hand,
not a test).

The question: does evotensor's ``"neat-python"`` mode solve neat-python's XOR example in as many
generations as neat-python 2.1 itself? Both run the example's task (pop 150, fitness 4 - SSE,
solved when a generation's best fitness reaches 3.9, at most 300 generations) for every seed of
``--seeds`` (default 0-29):

* evotensor: ``NEAT.from_mode("neat-python", 2, 1, population_size=150, max_nodes=32,
  max_conns=64)`` on ``evotensor.problems.function_fit.XOR``, all seeds in ONE compiled call of
  ``evotensor.run_many`` (``vmap`` over the runs; run ``i`` equals ``evotensor.run`` with
  ``jax.random.key(seed_i)``, and the per-seed runs of ``neat_xor.py``), 300 generations each;
  the generation to solve is the first whose best fitness (``history["generation_best"]``) is
  ``>= 3.9``, 0-based (neat-python's counting). Run in a fresh process of the project's venv.
* neat-python 2.1.0 (``neat21`` venv of ``bench_venvs.py``; ``--anchor neat`` for 2.0.0):
  ``neat_anchor_neatpython.py xor`` (the example's config written out; ``random.seed(seed)``).

An unsolved run counts as **301** generations (one more than the limit, so it ranks after every
solved run). The two samples are compared by a two-sided Mann-Whitney U test (normal
approximation with the tie correction and a continuity correction of 1/2: SciPy's
``mannwhitneyu(..., method="asymptotic")`` and the same formula written out here, both
reported), with the medians, means, solved counts, the rank-biserial correlation and the
Hodges-Lehmann shift (median of all pairwise differences, evotensor minus neat-python); the
solved counts alone are compared by Fisher's exact test (two-sided). A large p
is no proof of equality: with 30 runs a side the test misses shifts much smaller than the
spread of the samples.

Output: ``<out>.json`` (every per-seed value, the machine, the versions, the statistics) and
``<out>.md`` (tables); ``--out`` defaults to ``.bench/neat/parity_<UTC time>``.

Usage::

    .venv/bin/python benchmarks/neat_xor_parity.py                       # 30 seeds, ~5 min on 2 cores
    .venv/bin/python benchmarks/neat_xor_parity.py --seeds 0-99 --anchor neat21
    .venv/bin/python benchmarks/neat_xor_parity.py --report .bench/neat/parity_X.json  # re-render
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

from bench_venvs import venv_python
from neat_xor import (
    FITNESS_THRESHOLD,
    MAX_GENERATIONS,
    POP,
    evotensor_strategy,
    evotensor_version,
    machine,
    parse_seeds,
)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
UNSOLVED = MAX_GENERATIONS + 1  # an unsolved run's value


# ------------------------------------------------------------------------------ the runs


def evotensor_runs(seeds: list[int], mode: str = "neat-python") -> dict:
    """All seeds in one ``evotensor.run_many`` call; the generation to solve per seed."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import evotensor
    from evotensor.problems.function_fit import XOR

    strategy = evotensor_strategy(mode, 2, 1, POP, "xor")
    keys = jax.vmap(jax.random.key)(jnp.asarray(seeds, jnp.uint32))
    c0 = time.process_time()
    result = evotensor.run_many(strategy, XOR(), MAX_GENERATIONS, keys)
    cpu = time.process_time() - c0
    gen_best = np.asarray(result.history["generation_best"])  # [runs, generations]
    solve = []
    for row in gen_best:
        hit = np.flatnonzero(row >= FITNESS_THRESHOLD)
        solve.append(int(hit[0]) if hit.size else None)
    return {
        "engine": "evotensor",
        "version": evotensor_version(),
        "neat_mode": mode,
        "strategy": repr(strategy),
        "jax": jax.__version__,
        "seeds": seeds,
        "solve_generation": solve,
        "best_fitness_at_300": [float(x) for x in np.asarray(result.history["best_fitness"])[:, -1]],
        "compile_s": result.compile_seconds,
        "run_s": result.run_seconds,
        "cpu_s": cpu,
        "note": f"one run_many call: {len(seeds)} runs x {MAX_GENERATIONS} generations (no early stop)",
        "load": os.getloadavg()[0],
    }


def anchor_runs(seeds: list[int], group: str) -> dict:
    """neat-python's runs (``neat_anchor_neatpython.py xor``) in the ``group`` venv, one process."""
    cmd = [venv_python(group), os.path.join(HERE, "neat_anchor_neatpython.py"), "xor"]
    cmd += ["--seeds", ",".join(map(str, seeds))]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{group} failed:\n{proc.stderr[-3000:]}")
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    meta = next(r for r in rows if r["record"] == "meta")
    by_seed = {r["seed"]: r for r in rows if r["record"] == "xor"}
    return {
        "engine": "neat-python",
        "version": meta["version"],
        "venv": group,
        "seeds": seeds,
        "solve_generation": [by_seed[s]["solve_generation"] for s in seeds],
        "best_fitness": [by_seed[s]["best_fitness"] for s in seeds],
        "cpu_s": sum(by_seed[s]["cpu_s"] for s in seeds),
        "wall_s": time.perf_counter() - t0,
        "load": os.getloadavg()[0],
    }


# ------------------------------------------------------------------------------ statistics


def ranks(values: list[float]) -> list[float]:
    """Average ranks (1-based; ties share the mean of their positions)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def mann_whitney(x: list[float], y: list[float]) -> dict:
    """Two-sided Mann-Whitney U test, normal approximation with tie and continuity correction.

    ``U_x = R_x - n_x (n_x + 1) / 2`` (``R_x``: the rank sum of ``x`` in the pooled sample);
    ``sigma^2 = n_x n_y / 12 * ((n + 1) - sum(t^3 - t) / (n (n - 1)))`` over tie groups of size
    ``t``; ``z = (|U_x - n_x n_y / 2| - 1/2) / sigma``; ``p = erfc(z / sqrt 2)``.
    """
    nx, ny = len(x), len(y)
    n = nx + ny
    r = ranks(list(x) + list(y))
    u_x = sum(r[:nx]) - nx * (nx + 1) / 2
    counts: dict[float, int] = {}
    for v in list(x) + list(y):
        counts[v] = counts.get(v, 0) + 1
    ties = sum(t**3 - t for t in counts.values())
    var = nx * ny / 12 * ((n + 1) - ties / (n * (n - 1)))
    mu = nx * ny / 2
    z = (abs(u_x - mu) - 0.5) / math.sqrt(var) if var > 0 else 0.0
    z = max(z, 0.0)
    return {
        "U_evotensor": u_x,
        "U_anchor": nx * ny - u_x,
        "z": z if u_x >= mu else -z,
        "p_two_sided": min(1.0, math.erfc(z / math.sqrt(2))),
        "rank_biserial": 2 * u_x / (nx * ny) - 1,
        "tie_groups": sum(1 for t in counts.values() if t > 1),
    }


def fisher_exact(a: int, b: int, c: int, d: int) -> float:
    """Two-sided Fisher exact test of the 2 x 2 table ``[[a, b], [c, d]]``: the summed
    hypergeometric probability of every table with the same margins that is no more probable than
    the observed one (relative tolerance 1e-7, as SciPy)."""
    row1, col1, n = a + b, a + c, a + b + c + d

    def prob(x: int) -> float:
        return math.comb(col1, x) * math.comb(n - col1, row1 - x) / math.comb(n, row1)

    lo, hi = max(0, row1 - (n - col1)), min(row1, col1)
    observed = prob(a)
    return min(1.0, sum(p for p in map(prob, range(lo, hi + 1)) if p <= observed * (1 + 1e-7)))


def describe(values: list[float]) -> dict:
    v = sorted(values)
    q = statistics.quantiles(v, n=4, method="inclusive") if len(v) > 1 else [v[0]] * 3
    return {
        "n": len(v),
        "median": statistics.median(v),
        "q1": q[0],
        "q3": q[2],
        "mean": statistics.fmean(v),
        "sd": statistics.stdev(v) if len(v) > 1 else 0.0,
        "min": v[0],
        "max": v[-1],
    }


def compare(ours: list[int | None], theirs: list[int | None]) -> dict:
    x = [UNSOLVED if g is None else g for g in ours]
    y = [UNSOLVED if g is None else g for g in theirs]
    out = {
        "unsolved_value": UNSOLVED,
        "evotensor": {**describe(x), "solved": sum(g is not None for g in ours)},
        "anchor": {**describe(y), "solved": sum(g is not None for g in theirs)},
        "mann_whitney": mann_whitney(x, y),
        "hodges_lehmann_shift": statistics.median(a - b for a in x for b in y),
    }
    solved_x, solved_y = out["evotensor"]["solved"], out["anchor"]["solved"]
    out["fisher_solved_p"] = fisher_exact(solved_x, len(x) - solved_x, solved_y, len(y) - solved_y)
    try:
        from scipy.stats import mannwhitneyu

        res = mannwhitneyu(x, y, alternative="two-sided", method="asymptotic", use_continuity=True)
        out["scipy"] = {"U_evotensor": float(res.statistic), "p_two_sided": float(res.pvalue)}
    except ImportError:
        out["scipy"] = None
    return out


# ------------------------------------------------------------------------------ report


def markdown(report: dict) -> str:
    m, ours, theirs, st = report["machine"], report["evotensor"], report["anchor"], report["stats"]
    mw = st["mann_whitney"]
    lines = [
        f"# NEAT XOR parity: evotensor ({ours['neat_mode']}) vs neat-python {theirs['version']}",
        "",
        f"{m['date']}, {m['cpu']}, {m['nproc']} CPUs, load at start {m['load'][0]:.1f} "
        f"(evotensor's runs ended at {ours['load']:.1f}, neat-python's at {theirs['load']:.1f}); "
        f"evotensor {ours['version']}, jax {ours['jax']}.",
        "",
        f"Task: neat-python's XOR example, pop {POP}, solved when a generation's best 4 - SSE >= "
        f"{FITNESS_THRESHOLD}, at most {MAX_GENERATIONS} generations; seeds {report['seeds_text']}. "
        f"Generations to solve are 0-based (neat-python's counting); an unsolved run counts as "
        f"{UNSOLVED}.",
        "",
        "| engine | runs | solved | median (IQR) | mean +- sd | range | CPU s (all runs, compile included) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, d, src in (("evotensor", st["evotensor"], ours), ("neat-python", st["anchor"], theirs)):
        label = f"{name} {src['version']}" + (f", mode {src['neat_mode']}" if name == "evotensor" else "")
        lines.append(
            f"| {label} | {d['n']} | {d['solved']}/{d['n']} "
            f"| {d['median']:.1f} ({d['q1']:.1f}-{d['q3']:.1f}) | {d['mean']:.1f} +- {d['sd']:.1f} "
            f"| {d['min']}-{d['max']} | {src['cpu_s']:.1f} |"
        )
    sp = st.get("scipy")
    lines += [
        "",
        f"Mann-Whitney U (two-sided, normal approximation, tie + continuity corrected): "
        f"U(evotensor) = {mw['U_evotensor']:.1f}, U(neat-python) = {mw['U_anchor']:.1f}, "
        f"z = {mw['z']:.3f}, **p = {mw['p_two_sided']:.4f}**"
        + (f" (SciPy: U = {sp['U_evotensor']:.1f}, p = {sp['p_two_sided']:.4f})" if sp else " (SciPy absent)")
        + f"; rank-biserial r = {mw['rank_biserial']:.3f}; Hodges-Lehmann shift "
        f"(evotensor - neat-python) = {st['hodges_lehmann_shift']:.1f} generations. Solved within "
        f"{MAX_GENERATIONS} generations, {st['evotensor']['solved']}/{st['evotensor']['n']} vs "
        f"{st['anchor']['solved']}/{st['anchor']['n']}: Fisher's exact test (two-sided) "
        f"p = {st['fisher_solved_p']:.4f}.",
        "",
        f"evotensor: one `run_many` call, compile {ours['compile_s']:.1f} s, run {ours['run_s']:.1f} s "
        f"({len(ours['seeds'])} x {MAX_GENERATIONS} generations, no early stop). neat-python: one process, "
        f"wall {theirs['wall_s']:.1f} s.",
        "",
        "| seed | " + " | ".join(str(s) for s in ours["seeds"]) + " |",
        "|---|" + "---|" * len(ours["seeds"]),
        "| evotensor | " + " | ".join(str(g) for g in ours["solve_generation"]) + " |",
        "| neat-python | " + " | ".join(str(g) for g in theirs["solve_generation"]) + " |",
    ]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="0-29", help="e.g. 0-29 (default) or 0,3,5")
    ap.add_argument("--anchor", choices=("neat21", "neat"), default="neat21", help="neat-python's venv")
    ap.add_argument("--mode", choices=("neat-python", "tensorneat"), default="neat-python")
    ap.add_argument("--out", default=None, help="output prefix (default .bench/neat/parity_<time>)")
    ap.add_argument(
        "--report", metavar="JSON", help="recompute the statistics of a saved JSON and rewrite both files"
    )
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    seeds = parse_seeds(args.seeds)

    if args.report:
        with open(args.report) as fh:
            report = json.load(fh)
        report["stats"] = compare(
            report["evotensor"]["solve_generation"], report["anchor"]["solve_generation"]
        )
        out = args.report.removesuffix(".json")
        with open(out + ".json", "w") as fh:
            json.dump(report, fh, indent=1)
        text = markdown(report)
        with open(out + ".md", "w") as fh:
            fh.write(text)
        print(text)
        return

    if args.worker:
        print(json.dumps(evotensor_runs(seeds, args.mode)), flush=True)
        return

    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = args.out or os.path.join(ROOT, ".bench", "neat", f"parity_{stamp}")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    head = machine()
    print(f"# {head['date']}, {head['cpu']}, {head['nproc']} CPUs, load {head['load']}", flush=True)
    # evotensor first, then the anchor (quality only: the order does not change the numbers)
    env = dict(
        os.environ, PYTHONPATH=os.path.join(ROOT, "src") + os.pathsep + os.environ.get("PYTHONPATH", "")
    )
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--seeds", args.seeds, "--mode", args.mode]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"evotensor failed:\n{proc.stderr[-3000:]}")
    ours = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"evotensor: {ours['solve_generation']} (compile {ours['compile_s']:.1f} s)", flush=True)
    theirs = anchor_runs(seeds, args.anchor)
    print(f"neat-python {theirs['version']}: {theirs['solve_generation']}", flush=True)
    report = {
        "machine": head,
        "seeds_text": args.seeds,
        "evotensor": ours,
        "anchor": theirs,
        "stats": compare(ours["solve_generation"], theirs["solve_generation"]),
        "end_load": os.getloadavg(),
    }
    with open(out + ".json", "w") as fh:
        json.dump(report, fh, indent=1)
    text = markdown(report)
    with open(out + ".md", "w") as fh:
        fh.write(text)
    print(text)
    print(f"# wrote {out}.json and {out}.md")


if __name__ == "__main__":
    main()
