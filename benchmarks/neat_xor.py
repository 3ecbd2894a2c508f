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

* ``evotensor``: :func:`run_evotensor`, this script run with ``--worker`` in the project's venv:
  ``evotensor.neat.NEAT`` in mode ``--mode`` (``neat-python``, the default: ``NEAT.from_mode(
  "neat-python", 2, 1, population_size=150, max_nodes=32, max_conns=64)``; ``tensorneat``: like
  for like with TensorNEAT's ``like`` preset, see :func:`evotensor_strategy`) on
  ``evotensor.problems.function_fit.XOR``. XOR runs go in compiled chunks of ``--chunk`` (10)
  generations and stop at the first generation that reaches 3.9 (:func:`evotensor_xor_run`); the
  timing runs call one compiled generation at a time (:func:`evotensor_timing_run`).
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
    .venv/bin/python benchmarks/neat_xor.py --seeds 0-9 --mode tensorneat --engines evotensor tensorneat

CPU time (``cpu_s``, ``run_cpu_s``, ``cpu_s_per_generation``: the process's, all its threads) is
reported beside wall time: on a loaded machine it is the steadier figure. Every record carries the
1-minute load average at its end (``load``).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
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


def compiled(loop, lowered):
    """``lowered`` compiled as the run loop compiles its programs: with the XLA options the strategy
    and problem ask for (``Loop.compile``; NEAT's on a CPU: ``evotensor.neat.CPU_COMPILER_OPTIONS``),
    plain on a package from before ``Loop.compile`` existed."""
    return loop.compile(lowered) if hasattr(loop, "compile") else lowered.compile()


def with_xla_defaults(strategy):
    """``strategy`` compiled with XLA's default options (``NEAT(compiler_options={})``), for the A/B
    of ``--xla-defaults``."""
    from evotensor.neat import NEAT

    return NEAT(strategy.spec, strategy.population_size, strategy.config, compiler_options={})


def evotensor_strategy(mode: str, num_inputs: int, num_outputs: int, pop: int, task: str = "xor"):
    """evotensor's NEAT for a benchmark: ``mode="neat-python"`` is ``NEAT.from_mode("neat-python",
    ...)`` with the ``neat-xor`` task's shape (``max_nodes=32, max_conns=64``); ``mode="tensorneat"``
    is ``NEAT.from_mode("tensorneat", ...)`` adjusted to the TensorNEAT anchor's set-up of that
    task, like for like:

    * XOR (the ``like`` preset): ``max_nodes=7`` (input rows included, as TensorNEAT counts),
      ``max_conns=100``, 20 species slots (``species_size=20``), the plain sigmoid as the output
      transform (``output_transform=ACT.sigmoid``; no activation on output nodes);
    * CartPole (``examples/gymnax/cartpole.py``): ``max_nodes=50``, ``max_conns=100``, hidden nodes
      ``tanh`` with a bias and a fixed response of 1 (``BiasNode(tanh, sum)``), 20 species slots,
      compatibility threshold 1.0, outputs without activation (the problem takes the argmax).
    """
    import jax

    from evotensor.neat import NEAT, ChoiceAttribute, FloatAttribute, NodeGene, OutputMode

    if mode == "neat-python":
        return NEAT.from_mode(
            "neat-python", num_inputs, num_outputs, population_size=pop, max_nodes=32, max_conns=64
        )
    if mode != "tensorneat":
        raise ValueError(f"mode must be 'neat-python' or 'tensorneat', got {mode!r}")
    if task == "xor":
        base = NEAT.from_mode(
            "tensorneat", num_inputs, num_outputs, population_size=pop, max_nodes=7, max_conns=100
        )
        config = base.config.replace(
            outputs=OutputMode.tensorneat(jax.nn.sigmoid), species={"max_species": 20}
        )
        return NEAT(base.spec, pop, config)
    tn = NEAT.from_mode(
        "tensorneat", num_inputs, num_outputs, population_size=pop, max_nodes=50, max_conns=100
    )
    bias = tn.spec.node_gene.floats[0]
    node = NodeGene(
        bias=bias,
        response=FloatAttribute("response", 1.0, 0.0, "gaussian", 0.0, 0.0, 0.0, -5.0, 5.0),
        activation=ChoiceAttribute("activation", ("tanh",), "tanh", 0.1),
        aggregation=ChoiceAttribute("aggregation", ("sum",), "sum", 0.1),
    )
    base = NEAT.from_mode(
        "tensorneat",
        num_inputs,
        num_outputs,
        population_size=pop,
        max_nodes=50,
        max_conns=100,
        node_gene=node,
    )
    config = base.config.replace(species={"max_species": 20, "compatibility_threshold": 1.0})
    return NEAT(base.spec, pop, config)


def _genome_size(genome) -> tuple[int, int]:
    """(output + hidden nodes, enabled connections) of one genome (input pins are not nodes)."""
    import numpy as np

    from evotensor.neat import EMPTY

    key = np.asarray(genome.node_key)
    nodes = int(np.sum((key != EMPTY) & (key >= 0)))
    conns = int(np.sum((np.asarray(genome.conn_innov) != EMPTY) & np.asarray(genome.conn_enabled)))
    return nodes, conns


def evotensor_xor_run(strategy, seed: int, generations: int, threshold: float, chunk: int = 10) -> dict:
    """One XOR run stopping at the first generation whose best fitness reaches ``threshold``.

    The generations are :meth:`evotensor.core.run.Loop.step` (exactly a generation of
    ``evotensor.run``, same key schedule), ``chunk`` of them per compiled ``lax.scan`` call; inside
    the scan a ``lax.cond`` skips the remaining generations of the chunk once one has reached the
    threshold (or ``generations`` were run), so the state, the best genome and the generation count
    are those of the solving generation, as in neat-python, not of the chunk's end.
    """
    import jax
    import jax.numpy as jnp
    import numpy as np

    from evotensor.core.run import Loop
    from evotensor.problems.function_fit import XOR

    t_wall, t_cpu = time.perf_counter(), time.process_time()
    problem = XOR(strategy.spec.num_inputs)
    loop = Loop(strategy, problem)
    t0 = time.perf_counter()
    carry, loop_key = jax.jit(loop.init)(jax.random.key(seed), None)
    carry = jax.block_until_ready(carry)
    setup_s = time.perf_counter() - t0
    species0 = int(carry.strategy_state.species.num_species)
    metric_shapes = jax.eval_shape(lambda c: loop.step(c, loop_key, None)[1], carry)

    def run_chunk(carry, done, loop_key, limit):
        def body(state, _):
            carry, done = state

            def go(c):
                c, m = loop.step(c, loop_key, None)
                return c, m, jnp.ones((), bool)

            def skip(c):
                zeros = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), metric_shapes)
                return c, zeros, jnp.zeros((), bool)

            carry, m, ran = jax.lax.cond(done, skip, go, carry)
            done = done | (ran & (m["generation_best"] >= threshold)) | (carry.generation >= limit)
            return (carry, done), (m, ran)

        (carry, done), (metrics, ran) = jax.lax.scan(body, (carry, done), None, length=chunk)
        return carry, done, metrics, ran

    done = jnp.zeros((), bool)
    limit = jnp.asarray(generations, jnp.int32)
    t0, c0 = time.perf_counter(), time.process_time()
    compiled_chunk = compiled(loop, jax.jit(run_chunk, donate_argnums=0).lower(carry, done, loop_key, limit))
    compile_s, compile_cpu_s = time.perf_counter() - t0, time.process_time() - c0

    chunk_s, chunk_cpu_s, parts = [], [], []
    while not bool(done):
        t, c = time.perf_counter(), time.process_time()
        carry, done, metrics, ran = compiled_chunk(carry, done, loop_key, limit)
        metrics, ran = jax.device_get((metrics, ran))
        chunk_s.append(time.perf_counter() - t)
        chunk_cpu_s.append(time.process_time() - c)
        parts.append({k: np.asarray(v)[np.asarray(ran)] for k, v in metrics.items()})
    history = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    gen_best = history["generation_best"]
    hit = np.flatnonzero(gen_best >= threshold)
    solve = int(hit[0]) if hit.size else None
    n = len(gen_best)
    last = n - 1  # the last evaluated generation (the solving one, if solved)
    species = species0 if last == 0 else int(history["num_species"][last - 1])
    nodes, conns = _genome_size(carry.best_genotype)
    best = float(history["best_fitness"][-1])
    run_s = sum(chunk_s)
    return {
        "solve_generation": solve,
        "generations_evaluated": n,
        "chunk": chunk,
        "chunks": len(chunk_s),
        "setup_s": setup_s,
        "compile_s": compile_s,
        "compile_cpu_s": compile_cpu_s,
        "first_gen_s": None,
        "first_chunk_s": chunk_s[0],
        "rest_s": run_s - chunk_s[0],
        "run_s": run_s,
        "run_cpu_s": sum(chunk_cpu_s),
        "wall_s": time.perf_counter() - t_wall,
        "cpu_s": time.process_time() - t_cpu,
        "best_fitness": best,
        "best_sse": problem.max_fitness - best,
        "species": species,
        "best_nodes": nodes,
        "best_conns": conns,
        "note": (
            f"compiled chunks of {chunk} generations, the rest of the solving chunk skipped by lax.cond; "
            f"{len(chunk_s)} chunk calls"
        ),
    }


def _time_alone(loop, name: str, fn, args: tuple, repeats: int) -> dict:
    """``fn`` compiled alone as ``loop`` compiles (``<name>_compile_s``) and the median of
    ``repeats`` calls (wall ``<name>_s`` and process CPU ``<name>_cpu_s``)."""
    import statistics

    import jax

    t0 = time.perf_counter()
    program = compiled(loop, jax.jit(fn).lower(*args))
    out = {f"{name}_compile_s": time.perf_counter() - t0}
    times, cpus = [], []
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        jax.block_until_ready(program(*args))
        times.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    out[f"{name}_s"], out[f"{name}_cpu_s"] = statistics.median(times), statistics.median(cpus)
    return out


def evotensor_timing_run(strategy, problem, seed: int, generations: int, repeats: int = 3) -> dict:
    """Exactly ``generations`` generations, each one call of the compiled
    :meth:`~evotensor.core.run.Loop.step` (run state donated) followed by
    ``jax.block_until_ready``, timed one by one (wall and process CPU). On the final state the
    evaluation (``ask`` + decode + ``problem.evaluate``) and ``NEAT.tell`` are compiled and timed
    alone (median of ``repeats`` calls each)."""
    import statistics

    import jax
    import numpy as np

    from evotensor.core.evaluation import to_minimization
    from evotensor.core.run import Loop

    loop = Loop(strategy, problem)
    t0 = time.perf_counter()
    carry, loop_key = jax.jit(loop.init)(jax.random.key(seed), None)
    carry = jax.block_until_ready(carry)
    setup_s = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    step = compiled(loop, jax.jit(loop.step, donate_argnums=0).lower(carry, loop_key, None))
    compile_s, compile_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    gen_s, gen_cpu_s, best_per_gen, mean_per_gen, metrics = [], [], [], [], {}
    for _ in range(generations):
        t, c = time.perf_counter(), time.process_time()
        carry, metrics = step(carry, loop_key, None)
        metrics = jax.device_get(metrics)
        gen_s.append(time.perf_counter() - t)
        gen_cpu_s.append(time.process_time() - c)
        best_per_gen.append(float(metrics["generation_best"]))
        mean_per_gen.append(float(metrics["generation_mean"]))
    rest = gen_s[1:] or gen_s
    rec = {
        "pop": strategy.population_size,
        "generations": generations,
        "setup_s": setup_s,
        "compile_s": compile_s,
        "compile_cpu_s": compile_cpu_s,
        "first_gen_s": gen_s[0],
        "rest_s": sum(gen_s[1:]),
        "s_per_generation": sum(rest) / len(rest),
        "cpu_s_per_generation": sum(gen_cpu_s[1:] or gen_cpu_s) / len(rest),
        "median_generation_s": statistics.median(rest),
        "gen_s": gen_s,
        "gen_cpu_s": gen_cpu_s,
        "best_per_gen": best_per_gen,
        "mean_per_gen": mean_per_gen,
        "species_last": int(carry.strategy_state.species.num_species),
        "mean_nodes": float(metrics["mean_nodes"]),
        "mean_conns": float(metrics["mean_conns"]),
    }
    if repeats:
        state, key = carry.strategy_state, jax.random.key(seed + 1)

        def evaluate(state, key):
            genotypes, _ = strategy.ask(key, state, None)
            return loop.evaluate(key, genotypes)

        def tell(state, key, evaluation):
            genotypes, state = strategy.ask(key, state, None)
            return strategy.tell(key, state, genotypes, to_minimization(evaluation, loop.maximize), None)

        rec.update(_time_alone(loop, "eval", evaluate, (state, key), repeats))
        evaluation = jax.jit(evaluate)(state, key)
        rec["eval_best"] = float(np.max(np.asarray(evaluation.fitness)))
        rec.update(_time_alone(loop, "tell", tell, (state, key, evaluation), repeats))
    return rec


def run_evotensor(
    seed: int,
    *,
    mode: str = "xor",
    pop: int = POP,
    generations: int = MAX_GENERATIONS,
    fitness_threshold: float = FITNESS_THRESHOLD,
    neat_mode: str = "neat-python",
    chunk: int = 10,
    repeats: int = 3,
    xla_defaults: bool = False,
) -> dict:
    """evotensor's side; runs in a fresh process of the project's venv (``neat_xor.py --worker
    evotensor``) and returns one record (``xla_defaults``: :func:`with_xla_defaults`).

    ``mode="xor"``: neat-python's XOR example on evotensor's NEAT (``neat_mode``: ``"neat-python"``
    (default; :func:`evotensor_strategy`), or ``"tensorneat"`` against TensorNEAT's ``like``
    preset): population ``pop`` (150), fitness ``4 - sum((out - target)^2)`` over the four cases
    (``evotensor.problems.function_fit.XOR``), stop at the first generation whose best fitness is
    ``>= fitness_threshold`` (3.9, neat-python's test) or after ``generations`` (300) evaluated
    generations; seed ``jax.random.key(seed)``. Generations run in compiled chunks of ``chunk``
    (:func:`evotensor_xor_run`). Record keys (``None`` where not applicable), as the anchors write
    them:

    - ``solve_generation``: 0-based index of the generation whose evaluation first reached the
      threshold, or None; ``generations_evaluated``;
    - ``setup_s`` (``Loop.init``: initial population and its speciation, including its own
      compilation), ``compile_s`` (the chunk's ``lower().compile()``), ``first_gen_s`` (None: a
      chunk is the unit; ``first_chunk_s`` instead), ``rest_s``, ``run_s``, ``wall_s``
      (everything, imports excluded), ``compile_cpu_s``, ``run_cpu_s``;
    - ``best_fitness`` (neat-python's scale, 4 - SSE) and ``best_sse``;
    - ``species``: species of the last evaluated generation's population;
    - ``best_nodes`` (output + hidden nodes, no inputs) and ``best_conns`` (enabled
      connections) of the best genome.

    ``mode="timing"``: exactly ``generations`` generations at population ``pop`` (1000) on the
    same fitness, no early stop (:func:`evotensor_timing_run`). Record keys: ``setup_s``,
    ``compile_s``, ``compile_cpu_s``, ``first_gen_s``, ``rest_s``, ``s_per_generation`` (rest /
    (generations - 1)), ``cpu_s_per_generation``, ``median_generation_s``, ``gen_s``,
    ``eval_s`` / ``tell_s`` (median of ``repeats`` calls on the final state) with their
    ``eval_compile_s`` / ``tell_compile_s``; ``species_last``, ``mean_nodes``, ``mean_conns``.
    """
    import jax

    from evotensor.problems.function_fit import XOR

    strategy = evotensor_strategy(neat_mode, 2, 1, pop, "xor")
    if xla_defaults:
        strategy = with_xla_defaults(strategy)
    if mode == "xor":
        rec = evotensor_xor_run(strategy, seed, generations, fitness_threshold, chunk)
        rec.update(record="xor", pop=pop, max_generations=generations)
    else:
        rec = evotensor_timing_run(strategy, XOR(2), seed, generations, repeats)
        rec.update(record="timing", task="xor")
    rec.update(
        engine="evotensor",
        version=evotensor_version(),
        neat_mode=neat_mode,
        seed=seed,
        jax=jax.__version__,
        backend=jax.default_backend(),
        strategy=repr(strategy),
    )
    return rec


def evotensor_version() -> str:
    """The package version and the checkout's commit; with uncommitted changes under ``src/``,
    ``+dirty:`` and the first 8 hex digits of the SHA-1 of their ``git diff HEAD -- src``."""
    try:
        from importlib.metadata import version

        v = version("evotensor")
    except Exception:  # noqa: BLE001 (not installed: run from src/)
        v = "?"
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "src"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        tag = ""
        if dirty.stdout.strip():  # which uncommitted state of src/ produced the figures
            diff = subprocess.run(["git", "diff", "HEAD", "--", "src"], cwd=ROOT, capture_output=True)
            tag = "+dirty:" + hashlib.sha1(diff.stdout).hexdigest()[:8]
        v += f" ({head.stdout.strip()}{tag})"
    except OSError:
        pass
    return v


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
            cmd += ["--task", "xor", "--repeats", str(args.repeats)]
    return cmd


def run_one(engine: str, mode: str, seed: int, args) -> list[dict]:
    """One run of ``engine`` in a fresh process; its JSON lines (meta first, then the record)."""
    if engine == "evotensor":
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "evotensor", "--worker-mode", mode]
        cmd += ["--worker-seed", str(seed), "--mode", args.mode, "--chunk", str(args.chunk)]
        cmd += ["--xla-defaults"] if args.xla_defaults else []
        if mode == "timing":
            cmd += [
                "--timing-pop",
                str(args.timing_pop),
                "--timing-generations",
                str(args.timing_generations),
                "--repeats",
                str(args.repeats),
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
        "| run ms / generation (median) | run CPU ms / generation (median) | best SSE (median) "
        "| species | best nodes / conns (median) | load (median) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for engine in ENGINES:
        rs = [r for r in rows if r.get("engine_label") == engine and r["record"] == "xor"]
        if not rs:
            continue
        meta = next((r for r in rows if r.get("engine_label") == engine and r["record"] == "meta"), {})
        ver = (
            meta.get("version") or (meta.get("versions") or {}).get("tensorneat") or rs[0].get("version", "")
        )
        if engine == "evotensor":
            ver = f"{ver}, mode {rs[0].get('neat_mode')}"
        solved = [r for r in rs if r["solve_generation"] is not None]
        gens = [r["solve_generation"] for r in solved]
        med = statistics.median
        gen_txt = f"{med(gens):.0f} ({min(gens)}–{max(gens)})" if gens else "–"
        evals = statistics.mean((g + 1) * r["pop"] for g, r in zip(gens, solved)) if solved else None
        setup = [r["setup_s"] + r["compile_s"] for r in rs if "compile_s" in r]
        setup_txt = fmt(med(setup) if setup else None)
        per_gen = [1e3 * r.get("run_s", r["wall_s"]) / r["generations_evaluated"] for r in rs]
        cpu_gen = [1e3 * r.get("run_cpu_s", r.get("cpu_s", 0.0)) / r["generations_evaluated"] for r in rs]
        loads = [r["load"] for r in rs if r.get("load") is not None]
        print(
            f"| {engine} | {ver} | {len(rs)} | {len(solved)}/{len(rs)} | {gen_txt} | {fmt(evals, '.0f')} "
            f"| {med([r['wall_s'] for r in rs]):.2f} | {setup_txt} | {med(per_gen):.1f} | {med(cpu_gen):.1f} "
            f"| {med([r['best_sse'] for r in rs]):.3f} | {med([r['species'] for r in rs]):.0f} "
            f"| {med([r['best_nodes'] for r in rs]):.0f} / {med([r['best_conns'] for r in rs]):.0f} "
            f"| {fmt(med(loads) if loads else None, '.1f')} |"
        )


def summarize_timing(rows: list[dict]) -> None:
    print(
        "\n| engine | pop | generations | compile s | first gen s | s / generation (rest) "
        "| CPU s / generation | eval s | reproduce (+ speciate) s | mean nodes / conns at end | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["record"] != "timing":
            continue
        if r["engine"] == "neat-python":
            evals = fmt(r["median_eval_s"], ".3f")
            repro = f"{r['median_reproduce_s']:.3f} + {r['median_speciate_s']:.3f}"
        else:
            evals, repro = fmt(r.get("eval_s"), ".3f"), fmt(r.get("tell_s"), ".3f")
        label = r["engine_label"] + (f" [{r['neat_mode']}]" if r.get("neat_mode") else "")
        label += " xla-defaults" if r.get("xla_defaults") else ""
        print(
            f"| {label} (seed {r['seed']}) | {r['pop']} | {r['generations']} "
            f"| {fmt(r.get('compile_s'))} | {fmt(r.get('first_gen_s'), '.3f')} | {r['s_per_generation']:.3f} "
            f"| {fmt(r.get('cpu_s_per_generation'), '.3f')} | {evals} | {repro} "
            f"| {fmt(r.get('mean_nodes'), '.1f')} / {fmt(r.get('mean_conns'), '.1f')} "
            f"| {fmt(r.get('load'), '.1f')} |"
        )


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="0-9", help="e.g. 0-9 or 0,3,5 (default 0-9)")
    ap.add_argument("--engines", nargs="+", choices=list(ENGINES), default=list(ENGINES))
    ap.add_argument("--timing", action="store_true", help="the pop-1000 seconds-per-generation runs instead")
    ap.add_argument("--timing-pop", type=int, default=TIMING_POP)
    ap.add_argument("--timing-generations", type=int, default=TIMING_GENERATIONS)
    ap.add_argument(
        "--mode",
        choices=("neat-python", "tensorneat"),
        default="neat-python",
        help="evotensor's NEAT mode: neat-python (default) or tensorneat (like for like with TensorNEAT's "
        "'like' preset: use with --engines evotensor tensorneat)",
    )
    ap.add_argument("--chunk", type=int, default=10, help="evotensor: generations per compiled chunk (xor)")
    ap.add_argument("--repeats", type=int, default=3, help="timing: calls of eval / tell alone (0: skip)")
    ap.add_argument("--tensorneat-preset", choices=("like", "example"), default="like")
    ap.add_argument("--tensorneat-survival", type=float, default=None, help="TensorNEAT's survival_threshold")
    ap.add_argument("--out", default=None, help="JSON lines file (default .bench/neat/xor_<time>.jsonl)")
    ap.add_argument("--worker", choices=["evotensor"], help=argparse.SUPPRESS)
    ap.add_argument(
        "--xla-defaults",
        action="store_true",
        help="evotensor: compile with XLA's default options (NEAT(compiler_options={})) instead of the "
        "options NEAT asks for on a CPU",
    )
    ap.add_argument("--worker-mode", choices=["xor", "timing"], help=argparse.SUPPRESS)
    ap.add_argument("--worker-seed", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker:
        if args.worker_mode == "xor":
            rec = run_evotensor(
                args.worker_seed, neat_mode=args.mode, chunk=args.chunk, xla_defaults=args.xla_defaults
            )
        else:
            rec = run_evotensor(
                args.worker_seed,
                mode="timing",
                pop=args.timing_pop,
                generations=args.timing_generations,
                neat_mode=args.mode,
                repeats=args.repeats,
                xla_defaults=args.xla_defaults,
            )
        rec["xla_defaults"] = args.xla_defaults
        rec["load"] = os.getloadavg()[0]
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
    head.update(argv=sys.argv[1:], evotensor_mode=args.mode)
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
