"""NEAT on XOR: evotensor vs neat-python and TensorNEAT, side by side (run by hand, not a test).

Two measurements, each run for every engine in turn, alternating (the engine order rotated by the
seed: seed 0: A B C, seed 1: B C A, ...), each run in a fresh process, one at a time:

* ``xor`` (default): neat-python's XOR example (pop 150, fitness 4 - SSE, threshold 3.9, at most
  300 generations; ``benchmarks/neat_anchor_neatpython.py`` has its config written out) on every
  engine: per seed, the generation at which it is solved (0-based, neat-python's counting, or
  None), wall time (TensorNEAT and evotensor: set-up and compile time apart from the run, and
  the first generation apart from the rest), best fitness as SSE, species count, best genome
  size (output + hidden nodes, enabled connections).
* ``timing`` (``--timing``): seconds per generation at pop 1000 (``--timing-pop``) on the same
  XOR fitness for exactly ``--timing-generations`` generations, evaluation and reproduction apart
  where the engine lets us time them (compile time apart).

Engines (``--engines``; each anchor lives in a venv of ``bench_venvs.py``, ``make bench-venvs
VENVS="neat neat21 tensorneat"``):

* ``evotensor``: :func:`run_evotensor`, this script run with ``--worker`` in the project's venv.
  **Not written yet** (``evotensor.neat`` does not exist): it raises ``NotImplementedError``, the
  driver says so once and runs the anchors alone.
* ``neat-python``: neat-python 2.0.0, the newest release on PyPI (``neat`` venv).
* ``neat-python-2.1``: neat-python 2.1.0 from its repository at a pinned commit (``neat21`` venv):
  the version whose semantics evotensor's neat-python mode follows (distance matched by
  innovation number, dangling-node pruning, the exact 75 % disable rule).
* ``tensorneat``: TensorNEAT at a pinned commit (``tensorneat`` venv; JAX 0.10.2 CPU), preset
  ``like`` of ``neat_anchor_tensorneat.py``: 2-input XOR, pop 150, target MSE <= 0.025 (= SSE <=
  0.1), TensorNEAT's XOR-example algorithm settings (species_size 20, max_nodes 7, sigmoid output
  transform) with survival threshold 0.1 (``--tensorneat-preset example`` runs its example as
  written: XOR3d, pop 10000).

Raw records (one JSON line per run, plus a first ``"record": "machine"`` line with date, CPU
model, core count and load) go to ``--out`` (default ``.bench/neat/xor_<UTC time>.jsonl``,
git-ignored); a summary table is printed at the end.

Usage::

    .venv/bin/python benchmarks/neat_xor.py --seeds 0-9
    .venv/bin/python benchmarks/neat_xor.py --seeds 0-9 --engines neat-python-2.1 tensorneat
    .venv/bin/python benchmarks/neat_xor.py --seeds 0-2 --timing --timing-generations 50
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

from bench_venvs import venv_python

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# XOR as in neat-python's example: the settings every engine is given
POP, MAX_GENERATIONS, FITNESS_THRESHOLD = 150, 300, 3.9  # fitness 4 - SSE, so SSE <= 0.1
TIMING_POP, TIMING_GENERATIONS = 1000, 50

# engine -> (venv group of bench_venvs.py or None for the project's venv, anchor script)
ENGINES: dict[str, tuple[str | None, str | None]] = {
    "evotensor": (None, None),
    "neat-python": ("neat", "neat_anchor_neatpython.py"),
    "neat-python-2.1": ("neat21", "neat_anchor_neatpython.py"),
    "tensorneat": ("tensorneat", "neat_anchor_tensorneat.py"),
}


# ------------------------------------------------------------------------------ evotensor (ours)


def run_evotensor(
    seed: int,
    *,
    mode: str = "xor",
    pop: int = POP,
    generations: int = MAX_GENERATIONS,
    fitness_threshold: float = FITNESS_THRESHOLD,
) -> dict:
    """**evotensor's side: to be plugged in once ``evotensor.neat`` exists.** Runs in a fresh
    process of the project's venv (``neat_xor.py --worker evotensor``); returns one record.

    ``mode="xor"``: neat-python's XOR example on evotensor's neat-python mode: population
    ``pop`` (150), fitness ``4 - sum((out - target)^2)`` over the four cases, stop at the first
    generation whose best fitness is ``>= fitness_threshold`` (3.9) or after ``generations``
    (300) evaluated generations; seed ``jax.random.key(seed)``. Record keys (``None`` where not
    applicable), as the anchors write them:

    - ``solve_generation``: 0-based index of the generation whose evaluation first reached the
      threshold, or None; ``generations_evaluated``;
    - ``setup_s`` (initial population), ``compile_s``, ``first_gen_s``, ``rest_s``,
      ``run_s`` (= first + rest), ``wall_s`` (everything), ``compile_cpu_s``, ``run_cpu_s``;
    - ``best_fitness`` (neat-python's scale, 4 - SSE) and ``best_sse``;
    - ``species``: species of the last evaluated generation;
    - ``best_nodes`` (output + hidden nodes, no inputs) and ``best_conns`` (enabled
      connections) of the best genome.

    If the run goes in compiled chunks (``evotensor.run``'s ``lax.scan``) and can only stop at a
    chunk's end, report the first generation that reached the threshold as
    ``solve_generation`` and say in ``"note"`` how many generations were computed.

    ``mode="timing"``: exactly ``generations`` generations at population ``pop`` (1000) on the
    same fitness, no early stop. Record keys: ``setup_s``, ``compile_s``, ``compile_cpu_s``,
    ``first_gen_s``, ``rest_s``, ``s_per_generation`` (rest / (generations - 1)),
    ``cpu_s_per_generation``, ``median_generation_s`` (where per-generation times exist), and,
    if measured apart, ``eval_s`` / ``tell_s`` (one call each on a late state) with their
    ``eval_compile_s`` / ``tell_compile_s``; ``species_last``, ``mean_nodes``, ``mean_conns``.
    """
    raise NotImplementedError("evotensor.neat is not written yet: plug it into run_evotensor()")


# ------------------------------------------------------------------------------ driver


def machine() -> dict:
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "record": "machine",
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "platform": platform.platform(),
        "load": os.getloadavg(),
    }


def parse_seeds(text: str) -> list[int]:
    """``"0-9"`` or ``"0,3,5"`` -> seeds."""
    seeds = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        seeds.extend(range(int(lo), int(hi) + 1) if hi else [int(lo)])
    return seeds


def anchor_command(engine: str, mode: str, seed: int, args) -> list[str]:
    group, script = ENGINES[engine]
    cmd = [venv_python(group), os.path.join(HERE, script)]
    if mode == "xor":
        cmd += ["xor", "--seeds", str(seed)]
        if engine == "tensorneat":
            cmd += ["--preset", args.tensorneat_preset]
            if args.tensorneat_survival is not None:
                cmd += ["--survival-threshold", str(args.tensorneat_survival)]
    else:
        cmd += ["timing", "--seeds", str(seed), "--pop", str(args.timing_pop)]
        cmd += ["--generations", str(args.timing_generations)]
        if engine == "tensorneat":
            cmd += ["--task", "xor"]
    return cmd


def run_one(engine: str, mode: str, seed: int, args) -> list[dict]:
    """One run of ``engine`` in a fresh process; its JSON lines (meta first, then the record)."""
    if engine == "evotensor":
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "evotensor", "--worker-mode", mode]
        cmd += ["--worker-seed", str(seed)]
        if mode == "timing":
            cmd += [
                "--timing-pop",
                str(args.timing_pop),
                "--timing-generations",
                str(args.timing_generations),
            ]
    else:
        cmd = anchor_command(engine, mode, seed, args)
    env = dict(
        os.environ, PYTHONPATH=os.path.join(ROOT, "src") + os.pathsep + os.environ.get("PYTHONPATH", "")
    )
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env if engine == "evotensor" else None)
    if proc.returncode != 0:
        if "NotImplementedError" in proc.stderr:
            raise NotImplementedError(proc.stderr.strip().splitlines()[-1])
        raise RuntimeError(f"{engine} seed {seed} failed:\n{proc.stderr[-3000:]}")
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    for row in rows:
        row["engine_label"] = engine
    return rows


def fmt(x, spec=".2f", none="–"):
    return none if x is None else format(x, spec)


def summarize_xor(rows: list[dict]) -> None:
    print(
        "\n| engine | version | seeds | solved | solve generation (median, range) "
        "| evaluations (mean, solved) | wall s (median) | setup + compile s (median) "
        "| run ms / generation (median) | best SSE (median) "
        "| species | best nodes / conns (median) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for engine in ENGINES:
        rs = [r for r in rows if r.get("engine_label") == engine and r["record"] == "xor"]
        if not rs:
            continue
        meta = next((r for r in rows if r.get("engine_label") == engine and r["record"] == "meta"), {})
        ver = meta.get("version") or (meta.get("versions") or {}).get("tensorneat") or ""
        solved = [r for r in rs if r["solve_generation"] is not None]
        gens = [r["solve_generation"] for r in solved]
        med = statistics.median
        gen_txt = f"{med(gens):.0f} ({min(gens)}–{max(gens)})" if gens else "–"
        evals = statistics.mean((g + 1) * r["pop"] for g, r in zip(gens, solved)) if solved else None
        setup = [r["setup_s"] + r["compile_s"] for r in rs if "compile_s" in r]
        setup_txt = fmt(med(setup) if setup else None)
        per_gen = [1e3 * r.get("run_s", r["wall_s"]) / r["generations_evaluated"] for r in rs]
        print(
            f"| {engine} | {ver} | {len(rs)} | {len(solved)}/{len(rs)} | {gen_txt} | {fmt(evals, '.0f')} "
            f"| {med([r['wall_s'] for r in rs]):.2f} | {setup_txt} | {med(per_gen):.1f} "
            f"| {med([r['best_sse'] for r in rs]):.3f} | {med([r['species'] for r in rs]):.0f} "
            f"| {med([r['best_nodes'] for r in rs]):.0f} / {med([r['best_conns'] for r in rs]):.0f} |"
        )


def summarize_timing(rows: list[dict]) -> None:
    print(
        "\n| engine | pop | generations | compile s | first gen s | s / generation (rest) "
        "| CPU s / generation | eval s | reproduce (+ speciate) s | mean nodes / conns at end |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["record"] != "timing":
            continue
        if r["engine"] == "neat-python":
            evals = fmt(r["median_eval_s"], ".3f")
            repro = f"{r['median_reproduce_s']:.3f} + {r['median_speciate_s']:.3f}"
        else:
            evals, repro = fmt(r.get("eval_s"), ".3f"), fmt(r.get("tell_s"), ".3f")
        print(
            f"| {r['engine_label']} (seed {r['seed']}) | {r['pop']} | {r['generations']} "
            f"| {fmt(r.get('compile_s'))} | {fmt(r.get('first_gen_s'), '.3f')} | {r['s_per_generation']:.3f} "
            f"| {fmt(r.get('cpu_s_per_generation'), '.3f')} | {evals} | {repro} "
            f"| {fmt(r.get('mean_nodes'), '.1f')} / {fmt(r.get('mean_conns'), '.1f')} |"
        )


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="0-9", help="e.g. 0-9 or 0,3,5 (default 0-9)")
    ap.add_argument("--engines", nargs="+", choices=list(ENGINES), default=list(ENGINES))
    ap.add_argument("--timing", action="store_true", help="the pop-1000 seconds-per-generation runs instead")
    ap.add_argument("--timing-pop", type=int, default=TIMING_POP)
    ap.add_argument("--timing-generations", type=int, default=TIMING_GENERATIONS)
    ap.add_argument("--tensorneat-preset", choices=("like", "example"), default="like")
    ap.add_argument("--tensorneat-survival", type=float, default=None, help="TensorNEAT's survival_threshold")
    ap.add_argument("--out", default=None, help="JSON lines file (default .bench/neat/xor_<time>.jsonl)")
    ap.add_argument("--worker", choices=["evotensor"], help=argparse.SUPPRESS)
    ap.add_argument("--worker-mode", choices=["xor", "timing"], help=argparse.SUPPRESS)
    ap.add_argument("--worker-seed", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:
        if args.worker_mode == "xor":
            rec = run_evotensor(args.worker_seed)
        else:
            rec = run_evotensor(
                args.worker_seed, mode="timing", pop=args.timing_pop, generations=args.timing_generations
            )
        rec.setdefault("record", args.worker_mode)
        rec.setdefault("engine", "evotensor")
        rec.setdefault("seed", args.worker_seed)
        print(json.dumps(rec), flush=True)
        return

    mode = "timing" if args.timing else "xor"
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = args.out or os.path.join(ROOT, ".bench", "neat", f"xor_{mode}_{stamp}.jsonl")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    head = machine()
    print(f"# {head['date']}, {head['cpu']}, {head['nproc']} CPUs, load {head['load']}; raw -> {out}")
    rows = [head]
    with open(out, "a") as fh:
        fh.write(json.dumps(head) + "\n")
    engines = list(args.engines)
    for seed in parse_seeds(args.seeds):
        k = seed % len(engines)
        for engine in engines[k:] + engines[:k]:  # rotated by the seed: A B C, B C A, ...
            if engine not in engines:
                continue  # dropped earlier in this round
            try:
                got = run_one(engine, mode, seed, args)
            except NotImplementedError as e:
                print(f"# {engine}: not run ({e}); the anchors run alone", flush=True)
                engines.remove(engine)
                continue
            rows += got
            with open(out, "a") as fh:
                for row in got:
                    fh.write(json.dumps(row) + "\n")
            rec = got[-1]
            if mode == "xor":
                what = (
                    f"solved at {rec['solve_generation']} wall {rec['wall_s']:.2f}s SSE {rec['best_sse']:.3f}"
                )
            else:
                what = f"{rec['s_per_generation']:.3f} s/gen compile {fmt(rec.get('compile_s'))}s"
            print(f"{engine:16s} seed {seed}: {what} load {os.getloadavg()[0]:.1f}", flush=True)
        if not engines:
            break
    print(f"# end {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {os.getloadavg()}")
    summarize_xor(rows) if mode == "xor" else summarize_timing(rows)


if __name__ == "__main__":
    main()
