"""OpenAI-ES at d=100,000, pop=1024: evotensor vs evosax, side by side on one machine.

Each implementation runs in its own process (so peak RSS is comparable): evotensor with the
project venv, evosax with the benchmark venv (``/work/bench-venvs/es``; never installed into the
project). One generation = ask + sphere evaluation + tell, jitted as one function; the state is
carried between calls. Same configuration for both: antithetic sampling, centered-rank shaping,
Adam(1e-3), constant sigma 0.02, float32.

Reported:
  * compile time (``jit(...).lower(...).compile()``), separately from
  * steady-state time per generation (median of timed generations after one warm-up),
  * peak memory: XLA's own estimate for the compiled generation (arguments + outputs + temporaries
    from ``compiled.memory_analysis()``) and the process's peak RSS; the floor is the population
    itself, ``pop * d * 4`` bytes = 409.6 MB.

Usage::

    .venv/bin/python benchmarks/es_openes.py                  # both, prints a markdown table
    .venv/bin/python benchmarks/es_openes.py --impl evotensor --generations 5
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

DIMS = 100_000
POP = 1024
EVOSAX_PYTHON = "/work/bench-venvs/es/bin/python"


def build_evotensor():
    import jax
    import jax.numpy as jnp
    import optax

    from evotensor.es import OpenES

    es = OpenES(POP, num_dims=DIMS, optimizer=optax.adam(1e-3), sigma_init=0.02)
    params = es.default_params()

    def generation(state, key):
        k1, k2 = jax.random.split(key)
        x, state = es.ask(k1, state, params)
        fitness = jnp.sum((x - 1.0) ** 2, axis=1)
        state, metrics = es.tell(k2, state, x, fitness, params)
        return state, metrics["best_fitness"]

    state = es.init(jax.random.key(0), params)
    return generation, state


def build_evosax():
    import jax
    import jax.numpy as jnp
    import optax
    from evosax.algorithms import Open_ES
    from evosax.core.fitness_shaping import centered_rank_fitness_shaping_fn

    es = Open_ES(
        POP,
        jnp.zeros(DIMS),
        use_antithetic_sampling=True,
        optimizer=optax.adam(1e-3),
        std_schedule=optax.constant_schedule(0.02),
        fitness_shaping_fn=centered_rank_fitness_shaping_fn,
    )
    params = es.default_params

    def generation(state, key):
        k1, k2 = jax.random.split(key)
        x, state = es.ask(k1, state, params)
        fitness = jnp.sum((x - 1.0) ** 2, axis=1)
        state, metrics = es.tell(k2, x, fitness, state, params)
        return state, metrics["best_fitness"]

    state = es.init(jax.random.key(0), jnp.zeros(DIMS), params)
    return generation, state


def measure(impl: str, generations: int) -> dict:
    import jax

    generation, state = (build_evotensor if impl == "evotensor" else build_evosax)()
    step = jax.jit(generation, donate_argnums=0)
    key = jax.random.key(1)
    t0 = time.perf_counter()
    compiled = step.lower(state, key).compile()
    compile_s = time.perf_counter() - t0
    mem = compiled.memory_analysis()
    xla_bytes = None
    if mem is not None:
        xla_bytes = (
            mem.argument_size_in_bytes
            + mem.output_size_in_bytes
            + mem.temp_size_in_bytes
            - mem.alias_size_in_bytes
        )
    state, best = compiled(state, jax.random.fold_in(key, 0))  # warm-up
    jax.block_until_ready(best)
    times = []
    for g in range(1, generations + 1):
        t0 = time.perf_counter()
        state, best = compiled(state, jax.random.fold_in(key, g))
        jax.block_until_ready(best)
        times.append(time.perf_counter() - t0)
    return dict(
        impl=impl,
        version=_version(impl),
        jax=jax.__version__,
        compile_s=compile_s,
        step_s_median=statistics.median(times),
        step_s_min=min(times),
        xla_peak_mb=None if xla_bytes is None else xla_bytes / 1e6,
        max_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3,
        generations=generations,
        best_fitness=float(best),
    )


def _version(impl: str) -> str:
    from importlib.metadata import version

    return version("evosax" if impl == "evosax" else "evotensor")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--impl", choices=["evotensor", "evosax"])
    ap.add_argument("--generations", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=1, help="alternate the implementations this many times")
    args = ap.parse_args()
    if args.impl:
        print(json.dumps(measure(args.impl, args.generations)))
        return
    rows = []
    impls = [("evotensor", sys.executable), ("evosax", EVOSAX_PYTHON)]
    for rep in range(args.repeats):
        # alternate the order so that drifting machine load does not favour one side
        for impl, python in impls if rep % 2 == 0 else impls[::-1]:
            if not os.path.exists(python):
                print(f"# {impl}: interpreter {python} not found, skipped", file=sys.stderr)
                continue
            out = subprocess.run(
                [python, __file__, "--impl", impl, "--generations", str(args.generations)],
                capture_output=True,
                text=True,
            )
            if out.returncode != 0:
                print(f"# {impl} failed:\n{out.stderr[-2000:]}", file=sys.stderr)
                continue
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    print(f"OpenAI-ES d={DIMS:,}, pop={POP}, population floor {POP * DIMS * 4 / 1e6:.1f} MB\n")
    header = ["impl", "version", "jax", "compile (s)", "step median (s)", "step min (s)", "XLA peak (MB)"]
    print("| " + " | ".join(header + ["max RSS (MB)"]) + " |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        xla = "n/a" if r["xla_peak_mb"] is None else f"{r['xla_peak_mb']:.0f}"
        cells = [r["impl"], r["version"], r["jax"], f"{r['compile_s']:.2f}", f"{r['step_s_median']:.3f}"]
        cells += [f"{r['step_s_min']:.3f}", xla, f"{r['max_rss_mb']:.0f}"]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
