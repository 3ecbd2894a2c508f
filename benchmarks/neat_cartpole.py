"""NEAT on CartPole-v1 (gymnax): evotensor vs TensorNEAT, seconds per generation at pop 1000 (run
by hand, not a test).

The workload is TensorNEAT's ``examples/gymnax/cartpole.py`` (``neat_anchor_tensorneat.py timing
--task cartpole`` has it written out): pop 1000, gymnax ``CartPole-v1``, fitness = mean return of
5 episodes (``repeat_times=5``; an episode ends at 500 steps), 4 inputs, 2 outputs, action =
argmax, ``BiasNode(tanh, sum)``, ``species_size=20``, ``survival_threshold=0.1``,
``compatibility_threshold=1.0``. Each engine runs exactly ``--generations`` generations (no early
stop) in a fresh process, alternating by seed as in ``neat_xor.py``; reported: compile time, the
first generation, seconds per generation after it (wall and process CPU), the evaluation and the
reproduction timed apart on the final state (compile times too), and the first generation whose
best return reached 500 (TensorNEAT's example's target).

neat-python has no JAX environment; a CartPole in pure Python would time a different simulator,
so it is not an engine here (its per-generation cost on XOR is in ``neat_xor.py --timing``).

Engines: ``evotensor`` (:func:`run_evotensor`, **not written yet**: the driver says so and runs
the anchor alone) and ``tensorneat`` (``tensorneat`` venv of ``bench_venvs.py``; TensorNEAT at a
pinned commit with JAX 0.10.2 CPU and gymnax 0.0.9, the last gymnax whose ``step`` returns the
5-tuple TensorNEAT's ``GymNaxEnv`` unpacks). On a 2-core CPU a generation takes tens of seconds
(5000 episodes of up to 500 steps each through TensorNEAT's per-node forward loop), hence the few
default generations.

Usage::

    .venv/bin/python benchmarks/neat_cartpole.py --seeds 0 --generations 5
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from bench_venvs import venv_python
from neat_xor import fmt, machine, parse_seeds

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
POP, GENERATIONS, TARGET = 1000, 5, 500.0
ENGINES = ("evotensor", "tensorneat")


def run_evotensor(seed: int, *, pop: int = POP, generations: int = GENERATIONS) -> dict:
    """**evotensor's side: to be plugged in once ``evotensor.neat`` exists.** Runs in a fresh
    process of the project's venv (``neat_cartpole.py --worker evotensor``); returns one record.

    The workload above on evotensor (gymnax ``CartPole-v1`` through ``evotensor.problems.control``,
    mean return of 5 episodes, 4 inputs, 2 outputs, argmax action, tanh hidden nodes) for exactly
    ``generations`` generations at population ``pop``; seed ``jax.random.key(seed)``. Record keys
    (as ``neat_anchor_tensorneat.py timing`` writes them): ``setup_s``, ``compile_s``,
    ``compile_cpu_s``, ``first_gen_s``, ``rest_s``, ``s_per_generation`` (rest / (generations -
    1)), ``cpu_s_per_generation``, ``gen_s`` (per-generation list, if the run loop gives one),
    ``best_per_gen`` (best mean return of each generation), ``species_last``, ``mean_nodes``,
    ``mean_conns``, and if measured apart ``eval_s`` / ``tell_s`` with ``eval_compile_s`` /
    ``tell_compile_s``.
    """
    raise NotImplementedError("evotensor.neat is not written yet: plug it into run_evotensor()")


def run_one(engine: str, seed: int, args) -> list[dict]:
    if engine == "evotensor":
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "evotensor", "--seeds", str(seed)]
        cmd += ["--pop", str(args.pop), "--generations", str(args.generations)]
    else:
        cmd = [venv_python("tensorneat"), os.path.join(HERE, "neat_anchor_tensorneat.py"), "timing"]
        cmd += ["--task", "cartpole", "--seeds", str(seed), "--pop", str(args.pop)]
        cmd += ["--generations", str(args.generations), "--repeats", str(args.repeats)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        if "NotImplementedError" in proc.stderr:
            raise NotImplementedError(proc.stderr.strip().splitlines()[-1])
        raise RuntimeError(f"{engine} seed {seed} failed:\n{proc.stderr[-3000:]}")
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    for row in rows:
        row["engine_label"] = engine
        if row.get("record") == "timing":
            best = row.get("best_per_gen") or []
            row["first_generation_at_target"] = next((g for g, b in enumerate(best) if b >= TARGET), None)
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="0", help="e.g. 0-2 or 0,3 (default 0)")
    ap.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    ap.add_argument("--pop", type=int, default=POP)
    ap.add_argument("--generations", type=int, default=GENERATIONS)
    ap.add_argument("--repeats", type=int, default=1, help="TensorNEAT: calls of eval / tell alone (0: skip)")
    ap.add_argument("--out", default=None, help="JSON lines file (default .bench/neat/cartpole_<time>.jsonl)")
    ap.add_argument("--worker", choices=["evotensor"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:
        seed = parse_seeds(args.seeds)[0]
        rec = run_evotensor(seed, pop=args.pop, generations=args.generations)
        rec.setdefault("record", "timing")
        rec.setdefault("engine", "evotensor")
        rec.setdefault("seed", seed)
        print(json.dumps(rec), flush=True)
        return

    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = args.out or os.path.join(ROOT, ".bench", "neat", f"cartpole_{stamp}.jsonl")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    head = machine()
    print(f"# {head['date']}, {head['cpu']}, {head['nproc']} CPUs, load {head['load']}; raw -> {out}")
    rows = [head]
    with open(out, "a") as fh:
        fh.write(json.dumps(head) + "\n")
    engines = list(args.engines)
    for seed in parse_seeds(args.seeds):
        k = seed % len(engines)
        for engine in engines[k:] + engines[:k]:
            if engine not in engines:
                continue
            try:
                got = run_one(engine, seed, args)
            except NotImplementedError as e:
                print(f"# {engine}: not run ({e}); the anchor runs alone", flush=True)
                engines.remove(engine)
                continue
            rows += got
            with open(out, "a") as fh:
                for row in got:
                    fh.write(json.dumps(row) + "\n")
            rec = got[-1]
            print(
                f"{engine:10s} seed {seed}: {rec['s_per_generation']:.2f} s/gen, compile "
                f"{fmt(rec.get('compile_s'))} s, load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
        if not engines:
            break
    print(f"# end {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {os.getloadavg()}")
    print(
        "\n| engine | pop | generations | compile s | first gen s | s / generation (rest) "
        "| CPU s / generation | eval s (compile) | tell s (compile) | first generation at 500 "
        "| mean nodes / conns at end |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["record"] != "timing":
            continue
        print(
            f"| {r['engine_label']} (seed {r['seed']}) | {r['pop']} | {r['generations']} "
            f"| {fmt(r.get('compile_s'))} | {fmt(r.get('first_gen_s'))} | {r['s_per_generation']:.2f} "
            f"| {fmt(r.get('cpu_s_per_generation'))} "
            f"| {fmt(r.get('eval_s'))} ({fmt(r.get('eval_compile_s'))}) "
            f"| {fmt(r.get('tell_s'))} ({fmt(r.get('tell_compile_s'))}) "
            f"| {fmt(r.get('first_generation_at_target'), 'd')} "
            f"| {fmt(r.get('mean_nodes'), '.1f')} / {fmt(r.get('mean_conns'), '.1f')} |"
        )


if __name__ == "__main__":
    main()
