"""NEAT on CartPole-v1 at pop 1000: evotensor vs neat-python 2.1 and TensorNEAT, seconds per
generation (run by hand, not a test).

The workload is TensorNEAT's ``examples/gymnax/cartpole.py`` (``neat_anchor_tensorneat.py timing
--task cartpole`` has it written out): pop 1000, CartPole-v1, fitness = mean return of
5 episodes (``repeat_times=5``; an episode ends at 500 steps), 4 inputs, 2 outputs, action =
argmax. Each engine runs exactly ``--generations`` generations (no early stop) in a fresh
process, alternating by seed as in ``neat_xor.py``; reported: compile time, the first
generation, seconds per generation after it (wall and CPU), the evaluation and the reproduction
timed apart, best and mean return per generation (CartPole pays 1 per step, so the mean return
is also the mean episode length), and the first generation whose best return reached 500.

Engines:

* ``evotensor`` (:func:`run_evotensor`; the project's venv, gymnax 1.0.1): ``--mode neat-python``
  (default) is the ``neat-cartpole`` task's NEAT, ``--mode tensorneat`` the like-for-like set-up
  of TensorNEAT's example; ``--episodes`` (5) episodes per fitness. ``--chunk 64`` (default):
  the early-exit rollout of ``GymnaxProblem(chunk=64)`` (the ``neat-cartpole`` task's), whose cost
  follows how long the networks balance; ``--chunk 0``: the plain scan, every episode all 500
  steps with a done mask. Both give the same returns.
* ``neat-python`` and ``neat-python-x2`` (``neat_anchor_neatpython.py cartpole`` in the ``neat21``
  venv of ``bench_venvs.py``: neat-python 2.1.0 and gymnasium 1.3.0): the XOR example's config
  (the same settings as our ``neat-python`` mode) with 4 inputs and 2 outputs, neat-python's
  ``nn.FeedForwardNetwork`` on gymnasium's ``CartPole-v1`` (``gymnasium.make``, its TimeLimit of
  500 steps), ``--episodes`` episodes per fitness; serial, or through
  ``neat.ParallelEvaluator(--workers)`` (default 2: the machine's cores). A neat-python episode
  stops when the pole falls, so its cost grows with the mean episode length. CPU seconds include
  the pool's workers.
* ``tensorneat`` (``tensorneat`` venv of ``bench_venvs.py``; TensorNEAT at a pinned commit with
  JAX 0.10.2 CPU and gymnax 0.0.9, the last gymnax whose ``step`` returns the 5-tuple
  TensorNEAT's ``GymNaxEnv`` unpacks). A generation takes tens of seconds on a 2-core CPU
  (TensorNEAT's per-node forward loop).

Usage::

    .venv/bin/python benchmarks/neat_cartpole.py --seeds 0 --generations 5
    .venv/bin/python benchmarks/neat_cartpole.py --seeds 0 --generations 5 --mode tensorneat
    .venv/bin/python benchmarks/neat_cartpole.py --seeds 0 --engines evotensor neat-python neat-python-x2
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
POP, GENERATIONS, TARGET, EPISODES, CHUNK = 1000, 5, 500.0, 5, 64
ENGINES = ("evotensor", "neat-python", "neat-python-x2", "tensorneat")


def run_evotensor(
    seed: int,
    *,
    pop: int = POP,
    generations: int = GENERATIONS,
    neat_mode: str = "neat-python",
    episodes: int = EPISODES,
    repeats: int = 1,
    chunk: int = CHUNK,
    xla_defaults: bool = False,
) -> dict:
    """evotensor's side; runs in a fresh process of the project's venv (``neat_cartpole.py
    --worker evotensor``) and returns one record.

    ``NEAT`` (:func:`neat_xor.evotensor_strategy`: mode ``neat_mode``, 4 inputs, 2 outputs,
    population ``pop``; ``"neat-python"`` is the ``neat-cartpole`` task's strategy,
    ``"tensorneat"`` is set up like TensorNEAT's ``examples/gymnax/cartpole.py``: tanh bias nodes,
    20 species slots, threshold 1.0, 50 x 100 rows) on
    ``evotensor.problems.control.GymnaxProblem("CartPole-v1", num_episodes=episodes, chunk=chunk or
    None)`` (mean return of ``episodes`` episodes, at most 500 steps each, argmax action; ``chunk``
    0 is the plain scan) for exactly
    ``generations`` generations, one compiled ``Loop.step`` call each
    (:func:`neat_xor.evotensor_timing_run`); seed ``jax.random.key(seed)``. Record keys (as
    ``neat_anchor_tensorneat.py timing`` writes them): ``setup_s``, ``compile_s``,
    ``compile_cpu_s``, ``first_gen_s``, ``rest_s``, ``s_per_generation`` (rest / (generations -
    1)), ``cpu_s_per_generation``, ``gen_s``, ``best_per_gen`` (best mean return of each
    generation), ``mean_per_gen`` (mean return = mean episode length), ``species_last``,
    ``mean_nodes``, ``mean_conns``, and ``eval_s`` / ``tell_s`` (median of ``repeats`` calls on
    the final state) with ``eval_compile_s`` / ``tell_compile_s``; ``compiler_options``: the XLA
    options every program compiled with (``Loop.compiler_options``; ``xla_defaults``: none).
    """
    import jax
    from neat_xor import evotensor_strategy, evotensor_timing_run, evotensor_version, with_xla_defaults

    from evotensor.core.run import Loop
    from evotensor.problems.control import GymnaxProblem

    # chunk 0: the plain scan, also on a package from before GymnaxProblem had chunk=
    problem = GymnaxProblem("CartPole-v1", num_episodes=episodes, **({"chunk": chunk} if chunk else {}))
    strategy = evotensor_strategy(neat_mode, 4, 2, pop, "cartpole")
    if xla_defaults:
        strategy = with_xla_defaults(strategy)
    rec = evotensor_timing_run(strategy, problem, seed, generations, repeats)
    rec.update(
        record="timing",
        task="cartpole",
        engine="evotensor",
        version=evotensor_version(),
        neat_mode=neat_mode,
        episodes=episodes,
        chunk=chunk,
        seed=seed,
        jax=jax.__version__,
        backend=jax.default_backend(),
        strategy=repr(strategy),
        compiler_options=Loop(strategy, problem).compiler_options if hasattr(Loop, "compile") else {},
    )
    return rec


def run_one(engine: str, seed: int, args) -> list[dict]:
    if engine == "evotensor":
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "evotensor", "--seeds", str(seed)]
        cmd += ["--pop", str(args.pop), "--generations", str(args.generations), "--mode", args.mode]
        cmd += ["--episodes", str(args.episodes), "--repeats", str(args.repeats), "--chunk", str(args.chunk)]
        cmd += ["--src", args.src] + (["--xla-defaults"] if args.xla_defaults else [])
    elif engine.startswith("neat-python"):
        cmd = [venv_python("neat21"), os.path.join(HERE, "neat_anchor_neatpython.py"), "cartpole"]
        cmd += ["--seeds", str(seed), "--pop", str(args.pop), "--generations", str(args.generations)]
        cmd += ["--episodes", str(args.episodes)]
        cmd += ["--workers", str(args.workers if engine.endswith("-x2") else 0)]
    else:
        cmd = [venv_python("tensorneat"), os.path.join(HERE, "neat_anchor_tensorneat.py"), "timing"]
        cmd += ["--task", "cartpole", "--seeds", str(seed), "--pop", str(args.pop)]
        cmd += ["--generations", str(args.generations), "--repeats", str(args.repeats)]
    env = dict(
        os.environ, PYTHONPATH=os.path.abspath(args.src) + os.pathsep + os.environ.get("PYTHONPATH", "")
    )
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env if engine == "evotensor" else None)
    if proc.returncode != 0:
        if "NotImplementedError" in proc.stderr:
            raise NotImplementedError(proc.stderr.strip().splitlines()[-1])
        raise RuntimeError(f"{engine} seed {seed} failed:\n{proc.stderr[-3000:]}")
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    for row in rows:
        row["engine_label"] = engine
        if engine == "evotensor":
            row["src"] = os.path.abspath(args.src)
        if row.get("record") == "timing":
            if engine == "neat-python-x2":
                row["engine_label"] = f"neat-python ParallelEvaluator({row.get('workers')})"
            row.setdefault("mean_per_gen", row.get("mean_return_per_gen"))
            best = row.get("best_per_gen") or []
            row["first_generation_at_target"] = next((g for g, b in enumerate(best) if b >= TARGET), None)
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="0", help="e.g. 0-2 or 0,3 (default 0)")
    ap.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    ap.add_argument("--pop", type=int, default=POP)
    ap.add_argument("--generations", type=int, default=GENERATIONS)
    ap.add_argument("--repeats", type=int, default=1, help="calls of eval / tell alone (0: skip)")
    ap.add_argument(
        "--mode",
        choices=("neat-python", "tensorneat"),
        default="neat-python",
        help="evotensor's NEAT mode: neat-python (the neat-cartpole task's) or tensorneat (set up like "
        "TensorNEAT's cartpole example: like for like)",
    )
    ap.add_argument(
        "--episodes",
        type=int,
        default=EPISODES,
        help="evotensor and neat-python: episodes per fitness (TensorNEAT: 5, fixed)",
    )
    ap.add_argument("--workers", type=int, default=2, help="neat-python-x2: ParallelEvaluator workers")
    ap.add_argument(
        "--chunk",
        type=int,
        default=CHUNK,
        help="evotensor: GymnaxProblem(chunk=...), networks stepped at a time by the early-exit rollout "
        "(0: the plain scan of all 500 steps)",
    )
    ap.add_argument(
        "--src",
        default=os.path.join(ROOT, "src"),
        help="evotensor: the package's source folder (e.g. an exported older revision, to time it alike)",
    )
    ap.add_argument(
        "--xla-defaults",
        action="store_true",
        help="evotensor: compile with XLA's default options (NEAT(compiler_options={})) instead of the "
        "options NEAT asks for on a CPU (evotensor.neat.CPU_COMPILER_OPTIONS)",
    )
    ap.add_argument("--out", default=None, help="JSON lines file (default .bench/neat/cartpole_<time>.jsonl)")
    ap.add_argument("--worker", choices=["evotensor"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:
        seed = parse_seeds(args.seeds)[0]
        rec = run_evotensor(
            seed,
            pop=args.pop,
            generations=args.generations,
            neat_mode=args.mode,
            episodes=args.episodes,
            repeats=args.repeats,
            chunk=args.chunk,
            xla_defaults=args.xla_defaults,
        )
        rec["load"] = os.getloadavg()[0]
        rec.setdefault("record", "timing")
        rec.setdefault("engine", "evotensor")
        rec.setdefault("seed", seed)
        print(json.dumps(rec), flush=True)
        return

    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = args.out or os.path.join(ROOT, ".bench", "neat", f"cartpole_{stamp}.jsonl")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    head = machine()
    head.update(argv=sys.argv[1:], evotensor_mode=args.mode)
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
        "| best return per generation | mean return = mean episode length per generation "
        "| mean nodes / conns at end | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["record"] != "timing":
            continue
        label = r["engine_label"] + (f" [{r['neat_mode']}]" if r.get("neat_mode") else "")
        if r["engine_label"] == "evotensor":
            label += f" chunk={r['chunk']}" if r.get("chunk") else " scan"
            label += " xla-defaults" if r.get("compiler_options") == {} else ""
        best = " ".join(f"{b:.0f}" for b in r.get("best_per_gen") or [])
        mean = " ".join(f"{m:.0f}" for m in r.get("mean_per_gen") or [])
        print(
            f"| {label} (seed {r['seed']}) | {r['pop']} | {r['generations']} "
            f"| {fmt(r.get('compile_s'))} | {fmt(r.get('first_gen_s'))} | {r['s_per_generation']:.2f} "
            f"| {fmt(r.get('cpu_s_per_generation'))} "
            f"| {fmt(r.get('eval_s'))} ({fmt(r.get('eval_compile_s'))}) "
            f"| {fmt(r.get('tell_s'))} ({fmt(r.get('tell_compile_s'))}) "
            f"| {fmt(r.get('first_generation_at_target'), 'd')} "
            f"| {best} | {mean} | {fmt(r.get('mean_nodes'), '.1f')} / {fmt(r.get('mean_conns'), '.1f')} "
            f"| {fmt(r.get('load'), '.1f')} |"
        )


if __name__ == "__main__":
    main()
