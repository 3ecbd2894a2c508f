"""Gradient descent through NEAT topologies, side by side with TensorNEAT: the workload of TensorNEAT's
``examples/func_fit/xor_grad.py`` (its ``genome.grad``, added 2026-02) in both engines.

Workload (TensorNEAT's example settings, both engines): 3-input XOR (8 cases), pop 1000 genomes of
``max_nodes`` 50 and ``max_conns`` 100, made diverse by 20 rounds of structural mutation
(``conn_add`` 0.5, ``conn_delete`` 0.1, ``node_add`` 0.3, ``node_delete`` 0.05), then ``--steps``
(500) steps of plain gradient descent at learning rate 0.5 on every genome's MSE, output nodes
without activation and a sigmoid on the output (TensorNEAT's ``output_transform=ACT.sigmoid``).
Both start from one hidden layer of 3 nodes, inputs -> hidden -> output fully connected (TensorNEAT's
``init_hidden_layers=(3,)``, evotensor's ``GenomeSpec(hidden_layers=(3,))``), TensorNEAT-mode genes;
the mutations then differ in their details (each engine's own operators), so each record gives the
mean node and enabled-connection counts beside the losses.

Timing: TensorNEAT's step is its example's ``jax.jit(jax.vmap(grad_step))``, compiled ahead of time
(``compile_s``) and then called ``--steps`` times from Python (the example's loop, without its
logging); ``step_ms`` is the median of steps 2.. (each waited for). evotensor's is
:meth:`evotensor.neat.GradientTuner.tune` with ``optax.sgd(0.5)`` and ``keep_best=False``: the whole
descent is one compiled scan, so ``step_ms`` is its run time divided by ``--steps``. Both on the
same machine, engines alternating, each run in a fresh process (TensorNEAT in its venv of
``bench_venvs.py``).

``--task lamarckian``: NEAT itself with every genome tuned before it is scored
(:class:`evotensor.neat.GradientFit`, 20 Adam steps at 0.1 on the SSE, tuned genomes inherited)
against the same NEAT on the plain task (``FunctionFit``, the SSE), neat-python mode, 2-input XOR,
pop 150, at most ``--generations`` (100) generations, ``--fraction`` of each generation tuned (1.0:
all), seeds ``0 .. --seeds - 1`` alternating: the
first generation whose best SSE is below 0.1 (neat-python's XOR target ``4 - SSE > 3.9``), the wall
time of the whole run (compile included) and of its compiled generations.

Usage::

    .venv/bin/python benchmarks/neat_grad.py                   # 2 rounds x 2 engines
    .venv/bin/python benchmarks/neat_grad.py --rounds 3 --steps 200 --engines evotensor
    .venv/bin/python benchmarks/neat_grad.py --task lamarckian --seeds 10
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_venvs import machine, venv_python  # noqa: E402

ROOT = os.path.dirname(HERE)
MUTATION = dict(conn_add=0.5, conn_delete=0.1, node_add=0.3, node_delete=0.05)


def _args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", choices=["descent", "lamarckian"], default="descent")
    p.add_argument("--seeds", type=int, default=10, help="lamarckian: seeds 0 .. N-1")
    p.add_argument("--generations", type=int, default=100, help="lamarckian: at most this many")
    p.add_argument("--fraction", type=float, default=1.0, help="lamarckian: GradientFit(fraction=)")
    p.add_argument("--engines", nargs="+", default=["evotensor", "tensorneat"])
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--pop", type=int, default=1000)
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--mutation-rounds", type=int, default=20)
    p.add_argument("--lr", type=float, default=0.5)
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def _summary(losses, nodes, conns) -> dict:
    import numpy as np

    losses = np.asarray(losses, np.float64)
    finite = np.isfinite(losses)
    return {
        "best_loss": float(losses[finite].min()) if finite.any() else None,
        "mean_loss": float(losses[finite].mean()) if finite.any() else None,
        "finite": int(finite.sum()),
        "mean_nodes": float(np.mean(nodes)),
        "mean_enabled_conns": float(np.mean(conns)),
    }


def evotensor_worker(args) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    from evotensor.neat import GradientTuner, MutationConfig, OutputMode, mutate, neat_mode, neat_policy
    from evotensor.neat.innovation import initial_counters
    from evotensor.problems.function_fit import xor_cases

    spec, _ = neat_mode("tensorneat", 3, 1, 50, 100, hidden_layers=(3,))
    key = jax.random.key(args.seed)
    k_init, k_mut = jax.random.split(key)
    population = spec.initial(k_init, args.pop)
    config = MutationConfig.tensorneat(
        conn_add_prob=MUTATION["conn_add"],
        conn_delete_prob=MUTATION["conn_delete"],
        node_add_prob=MUTATION["node_add"],
        node_delete_prob=MUTATION["node_delete"],
    )
    node_key, innov = initial_counters(spec)
    step = jax.jit(mutate, static_argnums=(1, 2))
    for k in jax.random.split(k_mut, args.mutation_rounds):
        population, node_key, innov, _ = step(k, spec, config, population, node_key, innov)
    policy = neat_policy(
        spec, "feedforward", functions="tensorneat", outputs=OutputMode.tensorneat(jax.nn.sigmoid)
    )
    x, y = (jnp.asarray(a) for a in xor_cases(3))
    tuner = GradientTuner(steps=args.steps, optimizer=optax.sgd(args.lr), keep_best=False)
    tune = jax.jit(lambda p: tuner.tune(policy, p, x, lambda pred: jnp.mean((pred - y) ** 2)))
    t0 = time.perf_counter()
    compiled = tune.lower(population).compile()
    compile_s = time.perf_counter() - t0
    jax.block_until_ready(population)
    t0 = time.perf_counter()
    result = jax.block_until_ready(compiled(population))
    run_s = time.perf_counter() - t0
    non_input = np.arange(spec.max_nodes) >= spec.num_inputs
    nodes = np.sum(np.asarray(population.node_valid)[:, non_input], axis=1)
    conns = np.sum(np.asarray(population.conn_valid & population.conn_enabled), axis=1)
    return {
        "engine": "evotensor",
        "compile_s": compile_s,
        "run_s": run_s,
        "step_ms": run_s / args.steps * 1e3,
        "initial_mean_loss": float(
            np.mean(np.asarray(result.initial_loss)[np.isfinite(result.initial_loss)])
        ),
        **_summary(result.loss, nodes, conns),
        "jax": jax.__version__,
    }


def tensorneat_worker(args) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from tensorneat import algorithm, genome, problem
    from tensorneat.common import ACT, State
    from tensorneat.genome import DefaultMutation

    state = State(randkey=jax.random.key(args.seed))
    neat = algorithm.NEAT(
        pop_size=args.pop,
        species_size=20,
        survival_threshold=0.01,
        genome=genome.DefaultGenome(
            num_inputs=3,
            num_outputs=1,
            max_nodes=50,
            max_conns=100,
            init_hidden_layers=(3,),
            output_transform=ACT.sigmoid,
            mutation=DefaultMutation(**MUTATION),
        ),
    )
    task = problem.XOR3d()
    state = task.setup(neat.setup(state))
    g = neat.genome
    nodes, conns = neat.ask(state)
    mutate = jax.jit(jax.vmap(g.execute_mutation, in_axes=(None, 0, 0, 0, 0, 0)))
    key = state.randkey
    for _ in range(args.mutation_rounds):
        k1, _, key = jax.random.split(key, 3)
        new_node_keys = jnp.arange(args.pop) + jnp.nanmax(nodes[:, :, 0]) + 1
        markers = jnp.full((args.pop, 3), 0)
        nodes, conns = mutate(state, jax.random.split(k1, args.pop), nodes, conns, new_node_keys, markers)

    def loss_fn(pred):
        return jnp.mean((pred - task.targets) ** 2)

    def grad_step(n, c, state):
        loss, (gn, gc) = g.grad(state, n, c, task.inputs, loss_fn)
        return n - args.lr * gn, c - args.lr * gc, loss

    t0 = time.perf_counter()
    compiled = jax.jit(jax.vmap(grad_step, in_axes=(0, 0, None))).lower(nodes, conns, state).compile()
    compile_s = time.perf_counter() - t0
    n0 = np.asarray(nodes)
    node_count = np.sum(~np.isnan(n0[:, :, 0]), axis=1) - 3
    conn_count = np.sum(~np.isnan(np.asarray(conns)[:, :, 0]), axis=1)
    times, initial = [], None
    t_all = time.perf_counter()
    for i in range(args.steps):
        t0 = time.perf_counter()
        nodes, conns, losses = jax.block_until_ready(compiled(nodes, conns, state))
        times.append(time.perf_counter() - t0)
        if i == 0:
            initial = np.asarray(losses)
    run_s = time.perf_counter() - t_all
    # the losses of the last step are those of the parameters before it; one more forward for the final ones
    _, _, final = compiled(nodes, conns, state)
    return {
        "engine": "tensorneat",
        "compile_s": compile_s,
        "run_s": run_s,
        "step_ms": statistics.median(times[1:]) * 1e3,
        "initial_mean_loss": float(np.mean(initial[np.isfinite(initial)])),
        **_summary(final, node_count, conn_count),
        "jax": jax.__version__,
    }


def lamarckian_worker(args, tuned: bool) -> dict:
    import jax
    import numpy as np

    import evotensor
    from evotensor.neat import NEAT, GradientFit, GradientTuner
    from evotensor.problems.function_fit import FunctionFit, xor_cases

    x, y = xor_cases(2)
    strategy = NEAT.from_mode("neat-python", 2, 1, 150)
    if tuned:
        tuner = GradientTuner(steps=20, learning_rate=0.1)
        problem = GradientFit(strategy.decoder, x, y, loss="sse", tuner=tuner, fraction=args.fraction)
    else:
        problem = FunctionFit(x, y, loss="sse")
    t0 = time.perf_counter()
    result = evotensor.run(strategy, problem, args.generations, jax.random.key(args.seed), progress=False)
    wall = time.perf_counter() - t0
    best = np.asarray(result.history["best_fitness"])
    solved = np.flatnonzero(best < 0.1)
    return {
        "engine": "evotensor+grad" if tuned else "evotensor",
        "seed": args.seed,
        "solve_generation": int(solved[0]) if solved.size else None,
        "best_sse": float(best[-1]),
        "wall_s": wall,
        "compile_s": result.compile_seconds,
        "run_s": result.run_seconds,
    }


def lamarckian(args) -> None:
    import numpy as np

    print("| seed | engine | solved in generation | final best SSE | run s (compile s) | wall s |")
    print("|---|---|---|---|---|---|")
    rows = {"evotensor+grad": [], "evotensor": []}
    for seed in range(args.seeds):
        for worker in ("lamarckian-grad", "lamarckian-plain"):
            cmd = [sys.executable, __file__, "--worker", worker, "--seed", str(seed)]
            cmd += ["--generations", str(args.generations), "--fraction", str(args.fraction)]
            env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if proc.returncode != 0:
                print(f"| {seed} | {worker} | failed: {proc.stderr.strip().splitlines()[-1:]} |")
                continue
            d = json.loads(proc.stdout.strip().splitlines()[-1])
            rows[d["engine"]].append(d)
            print(
                f"| {seed} | {d['engine']} | {d['solve_generation']} | {d['best_sse']:.2e} | "
                f"{d['run_s']:.1f} ({d['compile_s']:.1f}) | {d['wall_s']:.1f} |",
                flush=True,
            )
    for engine, ds in rows.items():
        gens = [d["solve_generation"] for d in ds]
        solved = [g for g in gens if g is not None]
        median = float(np.median([g if g is not None else args.generations for g in gens])) if gens else None
        print(f"# {engine}: solved {len(solved)}/{len(gens)}, median generation {median} (unsolved = limit)")


def main() -> None:
    args = _args()
    if args.worker:
        workers = {
            "evotensor": lambda: evotensor_worker(args),
            "tensorneat": lambda: tensorneat_worker(args),
            "lamarckian-grad": lambda: lamarckian_worker(args, True),
            "lamarckian-plain": lambda: lamarckian_worker(args, False),
        }
        print(json.dumps(workers[args.worker]()))
        return
    if args.task == "lamarckian":
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        print(f"# Lamarckian NEAT on XOR, {now}; {machine()}; load {os.getloadavg()[0]:.1f}")
        lamarckian(args)
        print(f"# load at the end {os.getloadavg()[0]:.1f}")
        return
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    load = os.getloadavg()[0]
    print(f"# NEAT gradient descent (TensorNEAT's xor_grad workload), {now}; {machine()}; load {load:.1f}")
    print(f"# pop {args.pop}, {args.mutation_rounds} mutation rounds, {args.steps} steps of SGD at {args.lr}")
    print(
        "| round | engine | compile s | step ms | run s | initial mean MSE | final best / mean MSE | finite "
        "| mean nodes / conns |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in range(args.rounds):
        for engine in args.engines:
            python = sys.executable if engine == "evotensor" else venv_python("tensorneat")
            cmd = [python, __file__, "--worker", engine, "--seed", str(r), "--pop", str(args.pop)]
            cmd += [
                "--steps",
                str(args.steps),
                "--mutation-rounds",
                str(args.mutation_rounds),
                "--lr",
                str(args.lr),
            ]
            # TensorNEAT's venv has its package installed; a GPU machine's stand-in venv
            # (gpu_neat_tensorneat.sh) puts its source on PYTHONPATH, which is kept
            env = dict(os.environ)
            if engine == "evotensor":
                env["PYTHONPATH"] = os.path.join(ROOT, "src")
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if proc.returncode != 0:
                print(f"| {r} | {engine} | failed: {proc.stderr.strip().splitlines()[-1:]} |")
                continue
            d = json.loads(proc.stdout.strip().splitlines()[-1])
            print(
                f"| {r} | {engine} | {d['compile_s']:.1f} | {d['step_ms']:.2f} | {d['run_s']:.2f} | "
                f"{d['initial_mean_loss']:.4f} | {d['best_loss']:.2e} / {d['mean_loss']:.4f} | "
                f"{d['finite']} | {d['mean_nodes']:.1f} / {d['mean_enabled_conns']:.1f} |",
                flush=True,
            )
    print(f"# load at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
