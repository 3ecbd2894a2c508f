"""TensorNEAT's side of the NEAT benchmarks; runs INSIDE the ``tensorneat`` venv of ``bench_venvs.py``
(TensorNEAT at a pinned commit, JAX 0.10.2 CPU, gymnax 1.0.1), never in the project's
(``benchmarks/neat_xor.py`` / ``neat_cartpole.py`` start it there).

Each mode prints one JSON object per line on stdout (the first, ``"record": "meta"``, gives date,
machine, versions and the exact settings); TensorNEAT's own prints go to stderr.

Timing. A generation is TensorNEAT's ``Pipeline.step`` (ask, ``vmap``-ed transform + evaluate,
NaN -> -inf, ``NEAT.tell``: species update, crossover, mutation, speciation), compiled ahead of
time exactly as ``Pipeline.auto_run`` does (``jax.jit(pipeline.step).lower(state).compile()``:
``compile_s``). The generations then run in the same loop as ``auto_run`` (the fitnesses fetched
to the host after each step and the target checked there) but without its per-generation
printing and statistics (``analysis``, ``show_details``), which would time the terminal.
``setup_s`` is ``Pipeline.setup`` (initial population, op by op). ``first_gen_s`` is the first
call of the compiled step, ``rest_s`` the others.

Modes:

* ``xor``: one record per seed (``Pipeline(seed=seed)``: ``np.random.seed`` and
  ``PRNGKey(seed)``). Two presets (``--preset``):

  - ``like`` (default): the task of neat-python's XOR example on TensorNEAT: 2-input XOR
    (``problem.XOR()``, fitness = -MSE over the 4 cases), pop 150, at most 300 generations,
    ``fitness_target = -0.025`` (MSE <= 0.025 is SSE <= 0.1, i.e. neat-python's 4 - SSE >= 3.9).
    The algorithm settings are those of TensorNEAT's XOR example (``examples/func_fit/xor.py``:
    ``species_size=20``, ``max_nodes=7``, ``output_transform=ACT.sigmoid``, defaults otherwise)
    except ``survival_threshold``: the example's 0.01 (meant for its pop 10000) gives every
    species with fewer than 100 members ``floor(0.01 * n) = 0`` parents and a 0/0 parent
    distribution, so at pop 150 TensorNEAT's default 0.1 is used (``--survival-threshold``
    overrides it; 0.2 is neat-python's XOR value).
  - ``example``: ``examples/func_fit/xor.py`` as written: 3-input XOR (``problem.XOR3d()``),
    pop 10000, ``species_size=20``, ``survival_threshold=0.01``, ``max_nodes=7``, sigmoid output
    transform, ``fitness_target=-1e-6``, ``generation_limit=200``.

  Record fields: ``solve_generation`` (0-based index of the generation whose evaluation first
  reached the target, neat-python's counting, or None), ``generations_evaluated``,
  ``best_fitness`` (-MSE) and ``best_sse``, ``species`` (species of the last evaluated
  generation), ``best_nodes`` (output + hidden nodes: input rows are left out, as neat-python does
  not count its input pins) and ``best_conns``, the times above and ``wall_s`` (setup + compile +
  all generations).

* ``timing``: seconds per generation at ``--pop`` (1000) for exactly ``--generations`` generations
  (no target) on ``--task xor`` (the ``like`` preset at that population) or ``--task cartpole``
  (TensorNEAT's ``examples/gymnax/cartpole.py``: gymnax ``CartPole-v1``, ``repeat_times=5``,
  ``max_step`` 1000 (the episode ends at 500 in gymnax), ``species_size=20``,
  ``survival_threshold=0.1``, ``compatibility_threshold=1.0``, 4 inputs, 2 outputs,
  ``BiasNode(tanh, sum)``, ``output_transform=jnp.argmax``). Besides the fused step, on the final
  state the evaluation (ask + transform + evaluate, jitted alone) and ``NEAT.tell`` (jitted alone)
  are compiled and timed separately (median of ``--repeats`` calls each, wall and process CPU;
  their compile times too).

* ``forward``: the network forward pass alone, for ``neat_forward.py`` (which starts it): the
  networks of ``--npz`` (evotensor's node keys: inputs ``-1..-n``, outputs from 0, hidden after)
  become TensorNEAT rows (``DefaultGenome`` with ``DefaultNode`` / ``DefaultConn``: node
  ``[key, bias, response, aggregation, activation]``, inputs keyed ``0..n-1`` and outputs after
  them, connection ``[in key, out key, weight]``); ``jax.vmap(genome.transform)`` and
  ``jax.vmap`` over networks of ``jax.vmap`` over inputs of ``genome.forward`` are compiled and
  timed by ``jax_measure`` (as evotensor's side is), the outputs saved to ``--out-npy``.

Usage (from the repository root)::

    .bench/venvs/tensorneat/bin/python benchmarks/neat_anchor_tensorneat.py xor --seeds 0-9
    .bench/venvs/tensorneat/bin/python benchmarks/neat_anchor_tensorneat.py xor --preset example --seeds 0
    .bench/venvs/tensorneat/bin/python benchmarks/neat_anchor_tensorneat.py timing --task xor --pop 1000
    .bench/venvs/tensorneat/bin/python benchmarks/neat_anchor_tensorneat.py timing --task cartpole --pop 1000
    .bench/venvs/tensorneat/bin/python benchmarks/neat_anchor_tensorneat.py forward \
        --npz nets.npz --out-npy y.npy

Only TensorNEAT's public API is used (``Pipeline``, ``algorithm.NEAT``, ``genome.DefaultGenome``,
``BiasNode``, ``problem.XOR`` / ``XOR3d``, ``problem.rl.GymNaxEnv``, ``common.ACT`` / ``AGG``);
nothing of its code is copied here.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import statistics
import sys
import time
from importlib.metadata import version

import jax
import jax.numpy as jnp
import numpy as np
from tensorneat import algorithm, genome, problem
from tensorneat.common import ACT, AGG
from tensorneat.pipeline import Pipeline

PACKAGES = ("tensorneat", "jax", "jaxlib", "gymnax", "numpy")


def versions() -> dict:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = version(name)
        except Exception:  # noqa: BLE001 (absent package)
            out[name] = None
    return out


def machine() -> dict:
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "jax_devices": [str(d) for d in jax.devices()],
        "load": os.getloadavg()[0],
    }


# ------------------------------------------------------------------------------------ set-ups


def xor_setup(preset: str, pop: int | None, survival_threshold: float | None) -> dict:
    """The algorithm, problem and run settings of a preset (see the module docstring)."""
    if preset == "like":
        pop = pop or 150
        st = 0.1 if survival_threshold is None else survival_threshold
        settings = {
            "problem": "XOR (2 inputs, 4 cases), fitness -MSE",
            "pop_size": pop,
            "species_size": 20,
            "survival_threshold": st,
            "max_nodes": 7,
            "max_conns": 100,
            "output_transform": "sigmoid",
            "fitness_target": -0.025,
            "generation_limit": 300,
        }
        prob = problem.XOR()
        inputs = 2
    elif preset == "example":
        pop = pop or 10000
        st = 0.01 if survival_threshold is None else survival_threshold
        settings = {
            "problem": "XOR3d (3 inputs, 8 cases), fitness -MSE",
            "pop_size": pop,
            "species_size": 20,
            "survival_threshold": st,
            "max_nodes": 7,
            "max_conns": 100,
            "output_transform": "sigmoid",
            "fitness_target": -1e-6,
            "generation_limit": 200,
        }
        prob = problem.XOR3d()
        inputs = 3
    else:
        raise ValueError(f"unknown preset {preset!r}")
    algo = algorithm.NEAT(
        pop_size=pop,
        species_size=20,
        survival_threshold=st,
        genome=genome.DefaultGenome(
            num_inputs=inputs, num_outputs=1, max_nodes=7, output_transform=ACT.sigmoid
        ),
    )
    settings["defaults_otherwise"] = (
        "NEAT: max_stagnation 15, species_elitism 2, genome_elitism 2, spawn_number_change_rate 0.5, "
        "min_species_size 1, compatibility_threshold 2.0, species_fitness_func max, spawn by rank; "
        "DefaultNode: bias/response init N(0,1)/1, mutate power 0.15 rate 0.2 replace 0.015, bounds +-5, "
        "sigmoid + sum only (act/agg replace 0.1 among one option); DefaultConn: weight init N(0,1), "
        "mutate power 0.15 rate 0.2 replace 0.015, bounds +-5; DefaultMutation: conn add/delete 0.2/0.2, "
        "node add/delete 0.1/0.1; DefaultDistance: disjoint 1.0, weight 0.4; full initial connection"
    )
    return {"algorithm": algo, "problem": prob, "settings": settings, "num_inputs": inputs}


def cartpole_setup(pop: int) -> dict:
    from tensorneat.genome import BiasNode
    from tensorneat.problem.rl import GymNaxEnv

    settings = {
        "problem": "gymnax CartPole-v1, repeat_times 5, max_step 1000 (episodes end at 500)",
        "pop_size": pop,
        "species_size": 20,
        "survival_threshold": 0.1,
        "compatibility_threshold": 1.0,
        "genome": "DefaultGenome(4 in, 2 out, no hidden, max_nodes 50, max_conns 100), "
        "BiasNode(tanh, sum), output_transform argmax",
        "fitness_target": 500,
        "defaults_otherwise": "as TensorNEAT's NEAT / BiasNode / DefaultConn / DefaultMutation defaults",
    }
    algo = algorithm.NEAT(
        pop_size=pop,
        species_size=20,
        survival_threshold=0.1,
        compatibility_threshold=1.0,
        genome=genome.DefaultGenome(
            num_inputs=4,
            num_outputs=2,
            init_hidden_layers=(),
            node_gene=BiasNode(activation_options=ACT.tanh, aggregation_options=AGG.sum),
            output_transform=jnp.argmax,
        ),
    )
    prob = GymNaxEnv(env_name="CartPole-v1", repeat_times=5)
    return {"algorithm": algo, "problem": prob, "settings": settings, "num_inputs": 4}


# ------------------------------------------------------------------------------------ runs


def count_rows(rows) -> int:
    return int(np.sum(~np.isnan(np.asarray(rows)[:, 0])))


def species_count(state) -> int:
    counts = np.asarray(jax.device_get(state.species.member_count))
    return int(np.sum(counts > 0))


def run_pipeline(setup: dict, seed: int, generations: int, target: float | None) -> dict:
    """Set up, compile and run one pipeline; the per-generation record of times and fitnesses."""
    with contextlib.redirect_stdout(sys.stderr):
        pipeline = Pipeline(
            setup["algorithm"],
            setup["problem"],
            seed=seed,
            fitness_target=np.inf if target is None else target,
            generation_limit=generations,
        )
        t0 = time.perf_counter()
        state = pipeline.setup()
        jax.block_until_ready(state)
        setup_s = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    step = jax.jit(pipeline.step).lower(state).compile()
    compile_s, compile_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    gen_s, gen_cpu_s, best_per_gen = [], [], []
    best_fitness, best_genome, solved_at, species = -np.inf, None, None, species_count(state)
    for g in range(generations):
        species = species_count(state)  # the species of the population evaluated now
        t, c = time.perf_counter(), time.process_time()
        state, pop, fitnesses = step(state)
        fitnesses = jax.device_get(fitnesses)
        jax.block_until_ready(state)
        gen_s.append(time.perf_counter() - t)
        gen_cpu_s.append(time.process_time() - c)
        i = int(np.argmax(fitnesses))
        best_per_gen.append(float(fitnesses[i]))
        if fitnesses[i] > best_fitness:
            best_fitness = float(fitnesses[i])
            best_genome = jax.device_get((pop[0][i], pop[1][i]))
        if target is not None and fitnesses[i] >= target:
            solved_at = g
            break
    return {
        "pipeline": pipeline,
        "state": state,
        "setup_s": setup_s,
        "compile_s": compile_s,
        "compile_cpu_s": compile_cpu_s,
        "gen_s": gen_s,
        "gen_cpu_s": gen_cpu_s,
        "best_per_gen": best_per_gen,
        "best_fitness": best_fitness,
        "best_genome": best_genome,
        "solve_generation": solved_at,
        "species": species,
    }


def run_xor(args, seed: int) -> dict:
    setup = xor_setup(args.preset, args.pop, args.survival_threshold)
    s = setup["settings"]
    generations = args.generations or s["generation_limit"]
    out = run_pipeline(setup, seed, generations, s["fitness_target"])
    cases = 4 if args.preset == "like" else 8
    nodes, conns = out["best_genome"]
    first, rest = out["gen_s"][0], sum(out["gen_s"][1:])
    return {
        "record": "xor",
        "engine": "tensorneat",
        "preset": args.preset,
        "seed": seed,
        "pop": s["pop_size"],
        "max_generations": generations,
        "solve_generation": out["solve_generation"],
        "generations_evaluated": len(out["gen_s"]),
        "setup_s": out["setup_s"],
        "compile_s": out["compile_s"],
        "first_gen_s": first,
        "rest_s": rest,
        "rest_per_gen_ms": 1e3 * rest / max(1, len(out["gen_s"]) - 1),
        "run_s": first + rest,
        "compile_cpu_s": out["compile_cpu_s"],
        "run_cpu_s": sum(out["gen_cpu_s"]),
        "wall_s": out["setup_s"] + out["compile_s"] + first + rest,
        "best_fitness": out["best_fitness"],
        "best_sse": -out["best_fitness"] * cases,
        "species": out["species"],
        "best_nodes": count_rows(nodes) - setup["num_inputs"],
        "best_conns": count_rows(conns),
    }


def time_parts(pipeline, state, repeats: int) -> dict:
    """Compile and time the evaluation and ``NEAT.tell`` alone on ``state`` (median of ``repeats``)."""
    algo, prob, pop = pipeline.algorithm, pipeline.problem, pipeline.pop_size

    def evaluate(state, key):
        population = algo.ask(state)
        transformed = jax.vmap(algo.transform, in_axes=(None, 0))(state, population)
        keys = jax.random.split(key, pop)
        fit = jax.vmap(prob.evaluate, in_axes=(None, 0, None, 0))(state, keys, algo.forward, transformed)
        return jnp.where(jnp.isnan(fit), -jnp.inf, fit)

    key = jax.random.PRNGKey(0)  # legacy uint32 key, as Pipeline uses
    out = {}
    t0 = time.perf_counter()
    eval_c = jax.jit(evaluate).lower(state, key).compile()
    out["eval_compile_s"] = time.perf_counter() - t0
    fitness = eval_c(state, key)
    times, cpus = [], []
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        jax.block_until_ready(eval_c(state, key))
        times.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    out["eval_s"], out["eval_cpu_s"] = statistics.median(times), statistics.median(cpus)
    t0 = time.perf_counter()
    tell_c = jax.jit(algo.tell).lower(state, fitness).compile()
    out["tell_compile_s"] = time.perf_counter() - t0
    times, cpus = [], []
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        jax.block_until_ready(tell_c(state, fitness))
        times.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    out["tell_s"], out["tell_cpu_s"] = statistics.median(times), statistics.median(cpus)
    return out


def run_timing(args, seed: int) -> dict:
    if args.task == "xor":
        setup = xor_setup("like", args.pop, args.survival_threshold)
    else:
        setup = cartpole_setup(args.pop)
    generations = args.generations or 20
    out = run_pipeline(setup, seed, generations, None)
    gen_s = out["gen_s"]
    rec = {
        "record": "timing",
        "engine": "tensorneat",
        "task": args.task,
        "seed": seed,
        "pop": setup["settings"]["pop_size"],
        "generations": generations,
        "setup_s": out["setup_s"],
        "compile_s": out["compile_s"],
        "compile_cpu_s": out["compile_cpu_s"],
        "first_gen_s": gen_s[0],
        "rest_s": sum(gen_s[1:]),
        "s_per_generation": sum(gen_s[1:]) / max(1, len(gen_s) - 1),
        "median_generation_s": statistics.median(gen_s[1:] or gen_s),
        "cpu_s_per_generation": sum(out["gen_cpu_s"][1:]) / max(1, len(gen_s) - 1),
        "gen_s": gen_s,
        "gen_cpu_s": out["gen_cpu_s"],
        "best_per_gen": out["best_per_gen"],
        "species_last": out["species"],
    }
    if args.repeats:
        rec.update(time_parts(out["pipeline"], out["state"], args.repeats))
    pop_nodes = np.asarray(jax.device_get(out["state"].pop_nodes))
    pop_conns = np.asarray(jax.device_get(out["state"].pop_conns))
    rec["mean_nodes"] = float(np.mean(np.sum(~np.isnan(pop_nodes[:, :, 0]), axis=1))) - setup["num_inputs"]
    rec["mean_conns"] = float(np.mean(np.sum(~np.isnan(pop_conns[:, :, 0]), axis=1)))
    return rec


def run_forward(npz: str, out_npy: str, repeats: int) -> dict:
    """Transform and forward of ``npz``'s networks with TensorNEAT (module docstring, ``forward``)."""
    import resource

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from jax_measure import compiled_with_time, figures

    data = dict(np.load(npz))
    n_in, n_out = int(data["num_inputs"]), int(data["num_outputs"])
    pop, N = data["node_key"].shape
    C = data["conn_src"].shape[1]

    def key(k):  # evotensor's node key -> TensorNEAT's (inputs 0..n_in-1, then outputs, then hidden)
        return np.where(k < 0, -1 - k, n_in + k).astype(np.float32)

    zeros = np.zeros((pop, N))  # aggregation and activation ids: sum and sigmoid, the only options
    nodes = np.stack([key(data["node_key"]), data["bias"], data["response"], zeros, zeros], axis=-1)
    conns = np.stack([key(data["conn_src"]), key(data["conn_dst"]), data["weight"]], axis=-1)
    nodes, conns = nodes.astype(np.float32), conns.astype(np.float32)
    g = genome.DefaultGenome(num_inputs=n_in, num_outputs=n_out, max_nodes=N, max_conns=C)
    state = g.setup()
    nodes, conns, x = jnp.asarray(nodes), jnp.asarray(conns), jnp.asarray(data["x"])

    def transform(nodes, conns):
        return jax.vmap(g.transform, in_axes=(None, 0, 0))(state, nodes, conns)

    def forward(transformed, x):
        one = lambda t: jax.vmap(lambda xi: g.forward(state, t, xi))(x)  # noqa: E731
        return jax.vmap(one)(transformed)

    tr, transform_compile_s = compiled_with_time(transform, nodes, conns)
    transformed = jax.block_until_ready(tr(nodes, conns))
    fw, forward_compile_s = compiled_with_time(forward, transformed, x)
    np.save(out_npy, np.asarray(fw(transformed, x)))
    return {
        "record": "forward",
        "engine": "tensorneat",
        **figures("transform", tr, transform_compile_s, nodes, conns, repeats=repeats),
        **figures("forward", fw, forward_compile_s, transformed, x, repeats=repeats),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "versions": versions(),
        "backend": jax.default_backend(),
    }


def parse_seeds(text: str) -> list[int]:
    """``"0-9"`` or ``"0,3,5"`` -> seeds."""
    seeds = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        seeds.extend(range(int(lo), int(hi) + 1) if hi else [int(lo)])
    return seeds


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", nargs="?", default="xor", choices=("xor", "timing", "forward"))
    parser.add_argument("--seeds", default="0-9", help="e.g. 0-9 or 0,3,5 (default 0-9)")
    parser.add_argument("--preset", default="like", choices=("like", "example"), help="xor mode's set-up")
    parser.add_argument("--task", default="xor", choices=("xor", "cartpole"), help="timing mode's task")
    parser.add_argument("--pop", type=int, help="population (xor: the preset's; timing: 1000)")
    parser.add_argument("--generations", type=int, help="xor: at most (the preset's); timing: exactly (20)")
    parser.add_argument("--survival-threshold", type=float, help="override the preset's survival threshold")
    parser.add_argument("--repeats", type=int, default=5, help="timing: calls of eval / tell alone (0: skip)")
    parser.add_argument("--npz", help="forward: the networks (written by neat_forward.py)")
    parser.add_argument("--out-npy", help="forward: where the outputs [pop, batch, outputs] go")
    args = parser.parse_args(argv)
    if args.mode == "forward":
        print(json.dumps(run_forward(args.npz, args.out_npy, args.repeats)), flush=True)
        return
    if args.mode == "timing" and args.pop is None:
        args.pop = 1000
    if args.mode == "xor":
        settings = xor_setup(args.preset, args.pop, args.survival_threshold)["settings"]
    elif args.task == "xor":
        settings = xor_setup("like", args.pop, args.survival_threshold)["settings"]
        settings["fitness_target"] = None
    else:
        settings = cartpole_setup(args.pop)["settings"]
        settings["fitness_target"] = None
    meta = {
        "record": "meta",
        "engine": "tensorneat",
        "mode": args.mode,
        "preset": args.preset if args.mode == "xor" else None,
        "task": args.task if args.mode == "timing" else "xor",
        "versions": versions(),
        "settings": settings,
        **machine(),
    }
    print(json.dumps(meta), flush=True)
    for seed in parse_seeds(args.seeds):
        rec = run_xor(args, seed) if args.mode == "xor" else run_timing(args, seed)
        rec["load"] = os.getloadavg()[0]
        print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    sys.exit(main())
