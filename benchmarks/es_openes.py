"""OpenAI-ES at d=100,000, pop=1024: evotensor vs evosax, EvoTorch and EvoX on one machine.

Each implementation runs in its own process (so peak RSS is comparable), one after the other:
evotensor with the project venv, each competitor with its own benchmark venv (never installed into
the project): evosax, EvoTorch and EvoX in the ``es``, ``evotorch`` and ``evox`` venvs of
``bench_venvs.py`` (``make bench-venvs``; the torch ones over a CPU-only torch wheel). One
generation = ask + sphere evaluation ``sum((x-1)^2)`` + tell; the state is carried between calls.
Same configuration for all: antithetic (mirrored) sampling, centered-rank shaping, Adam(1e-3),
constant sigma 0.02, float32, mean starting at 0.

* evotensor / evosax: the generation is jitted as one function, state donated.
* EvoTorch 0.6 has no OpenAI-ES class; its ``PGPE`` with ``symmetric=True``,
  ``stdev_learning_rate=0`` (sigma stays 0.02), ``ranking_method="centered"`` and
  ``optimizer="adam"`` (lr 1e-3) is OpenAI-ES with antithetic sampling: the centre gradient is
  the rank-weighted sum of the antithetic noise pairs. It runs eagerly (no compile).
* EvoX 1.x ``OpenES(mirrored_sampling=True, optimizer="adam")`` in a ``StdWorkflow`` whose
  ``fitness_transform`` is a centered-rank module (EvoX's OpenES has no shaping of its own); the
  generation is ``use_state(workflow.step)`` under ``evox.core.compile`` (torch.compile). EvoX's
  Adam has no bias correction (its own ``adam_single_tensor``).

Reported:
  * compile time (JAX: ``jit(...).lower(...).compile()``; EvoX: the first call of the compiled
    step, i.e. compile + one generation; EvoTorch: the first, warm-up generation), separately from
  * steady-state time per generation (median of timed generations after one warm-up), in wall time
    and in process CPU time (all threads; the machine is shared),
  * peak memory: XLA's own estimate for the compiled generation (arguments + outputs + temporaries
    from ``compiled.memory_analysis()``; JAX only) and the process's peak RSS; the floor is the
    population itself, ``pop * d * 4`` bytes = 409.6 MB,
  * the best fitness of the last generation, so a reader can see the runs did the same work.

Usage::

    .venv/bin/python benchmarks/es_openes.py                  # both, prints a markdown table
    .venv/bin/python benchmarks/es_openes.py --impl evotensor --generations 5
    .venv/bin/python benchmarks/es_openes.py --impl evotensor --regenerate-noise   # tell redraws the noise

``build_evotensor`` and ``build_evosax`` take the sizes as arguments (``benchmarks/gpu_check_es.py``
reuses them).
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
import tempfile
import time

from bench_venvs import venv_python

DIMS = 100_000
POP = 1024
EVOSAX_PYTHON = venv_python("es")
EVOTORCH_PYTHON = venv_python("evotorch")
EVOX_PYTHON = venv_python("evox")
PYTHONS = {"evosax": EVOSAX_PYTHON, "evotorch": EVOTORCH_PYTHON, "evox": EVOX_PYTHON}
TORCH_IMPLS = ("evotorch", "evox")


def build_evotensor(dims: int = DIMS, pop: int = POP, regenerate_noise: bool = False):
    import jax
    import jax.numpy as jnp
    import optax

    from evotensor.es import OpenES

    es = OpenES(
        pop, num_dims=dims, optimizer=optax.adam(1e-3), sigma_init=0.02, regenerate_noise=regenerate_noise
    )
    params = es.default_params()

    def generation(state, key):
        k1, k2 = jax.random.split(key)
        x, state = es.ask(k1, state, params)
        fitness = jnp.sum((x - 1.0) ** 2, axis=1)
        state, metrics = es.tell(k2, state, x, fitness, params)
        return state, metrics["best_fitness"]

    state = es.init(jax.random.key(0), params)
    return generation, state


def build_evosax(dims: int = DIMS, pop: int = POP):
    import jax
    import jax.numpy as jnp
    import optax
    from evosax.algorithms import Open_ES
    from evosax.core.fitness_shaping import centered_rank_fitness_shaping_fn

    es = Open_ES(
        pop,
        jnp.zeros(dims),
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

    state = es.init(jax.random.key(0), jnp.zeros(dims), params)
    return generation, state


def build_evotorch():
    """One EvoTorch PGPE generation as a closure; returns the last generation's best fitness."""
    import torch
    from evotorch import Problem
    from evotorch.algorithms import PGPE

    last = {}

    def sphere(x):
        f = torch.sum((x - 1.0) ** 2, dim=-1)
        last["best"] = f.min()
        return f

    torch.manual_seed(0)
    problem = Problem("min", sphere, solution_length=DIMS, dtype=torch.float32, vectorized=True)
    es = PGPE(
        problem,
        popsize=POP,
        center_learning_rate=1e-3,
        stdev_learning_rate=0.0,
        stdev_init=0.02,
        optimizer="adam",
        ranking_method="centered",
        center_init=torch.zeros(DIMS),
        symmetric=True,
        stdev_max_change=None,
    )

    def generation():
        es.step()
        return last["best"]

    return generation


def build_evox():
    """One compiled EvoX OpenES generation as a closure; returns the last generation's best fitness."""
    import torch
    from evox.algorithms import OpenES
    from evox.core import Monitor, Mutable, Problem, compile, use_state
    from evox.workflows import StdWorkflow

    class Sphere(Problem):
        def evaluate(self, x):
            return torch.sum((x - 1.0) ** 2, dim=-1)

    class CenteredRanks(torch.nn.Module):
        # rank 0 (best, smallest) -> -0.5, rank n-1 -> +0.5; EvoX minimizes the transformed value
        def forward(self, f):
            ranks = torch.argsort(torch.argsort(f)).to(f.dtype)
            return ranks / (f.shape[0] - 1) - 0.5

    class LastBest(Monitor):
        def __init__(self):
            super().__init__()
            self.last_best = Mutable(torch.tensor(float("inf")))

        def pre_eval(self, population):
            pass

        def post_eval(self, fitness):
            self.last_best = torch.min(fitness)  # raw fitness, before the rank transform

    torch.manual_seed(0)
    algo = OpenES(
        POP, torch.zeros(DIMS), learning_rate=1e-3, noise_stdev=0.02, optimizer="adam", mirrored_sampling=True
    )
    wf = StdWorkflow(algo, Sphere(), monitor=LastBest(), fitness_transform=CenteredRanks())
    step = compile(use_state(wf.step))
    box = {"state": {k: v.detach().clone() for k, v in [*wf.named_parameters(), *wf.named_buffers()]}}

    def generation():
        box["state"] = step(box["state"])
        return box["state"]["monitor.last_best"]

    return generation


def measure_torch(impl: str, generations: int) -> dict:
    """Like `measure`, for the PyTorch competitors (eager EvoTorch, torch.compile-d EvoX)."""
    import torch

    generation = (build_evotorch if impl == "evotorch" else build_evox)()
    t0, c0 = time.perf_counter(), time.process_time()
    best = generation()  # EvoX: compile + one generation; EvoTorch: first (warm-up) generation
    compile_s, compile_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    times, cpu_times = [], []
    for _ in range(generations):
        t0, c0 = time.perf_counter(), time.process_time()
        best = float(generation())
        times.append(time.perf_counter() - t0)
        cpu_times.append(time.process_time() - c0)
    return dict(
        impl=impl,
        version=_version(impl),
        jax=f"torch {torch.__version__}",
        compile_s=compile_s,
        compile_cpu_s=compile_cpu_s,
        step_s_median=statistics.median(times),
        step_s_min=min(times),
        step_cpu_s_median=statistics.median(cpu_times),
        xla_peak_mb=None,
        max_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3,
        generations=generations,
        best_fitness=best,
    )


def measure(impl: str, generations: int, regenerate_noise: bool = False) -> dict:
    if impl in TORCH_IMPLS:
        return measure_torch(impl, generations)
    import jax

    if impl == "evotensor":
        generation, state = build_evotensor(regenerate_noise=regenerate_noise)
    else:
        generation, state = build_evosax()
    step = jax.jit(generation, donate_argnums=0)
    key = jax.random.key(1)
    t0, c0 = time.perf_counter(), time.process_time()
    compiled = step.lower(state, key).compile()
    compile_s, compile_cpu_s = time.perf_counter() - t0, time.process_time() - c0
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
    times, cpu_times = [], []
    for g in range(1, generations + 1):
        t0, c0 = time.perf_counter(), time.process_time()
        state, best = compiled(state, jax.random.fold_in(key, g))
        jax.block_until_ready(best)
        times.append(time.perf_counter() - t0)
        cpu_times.append(time.process_time() - c0)
    return dict(
        impl=impl,
        version=_version(impl),
        jax=jax.__version__,
        compile_s=compile_s,
        compile_cpu_s=compile_cpu_s,
        step_s_median=statistics.median(times),
        step_s_min=min(times),
        step_cpu_s_median=statistics.median(cpu_times),
        xla_peak_mb=None if xla_bytes is None else xla_bytes / 1e6,
        max_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3,
        generations=generations,
        best_fitness=float(best),
        **({"regenerate_noise": True} if regenerate_noise else {}),
    )


def _version(impl: str) -> str:
    from importlib.metadata import version

    return version(impl)


def run_competitor(cmd: list) -> subprocess.CompletedProcess:
    """Run one competitor's subprocess. torch.compile gets an empty inductor cache, so its compile
    time is a cold compile (as JAX's is: its persistent compilation cache is off)."""
    with tempfile.TemporaryDirectory(prefix="inductor-cache-") as cache:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache)
        return subprocess.run(cmd, capture_output=True, text=True, env=env)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--impl", choices=["evotensor", "evosax", "evotorch", "evox"])
    ap.add_argument("--only", default="evotensor,evosax,evotorch,evox", help="without --impl: which to run")
    ap.add_argument("--generations", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=1, help="alternate the implementations this many times")
    ap.add_argument(
        "--regenerate-noise", action="store_true", help="evotensor: OpenES(regenerate_noise=True)"
    )
    args = ap.parse_args()
    if args.impl:
        print(json.dumps(measure(args.impl, args.generations, args.regenerate_noise)))
        return
    rows = []
    impls = [(impl, PYTHONS.get(impl, sys.executable)) for impl in args.only.split(",")]
    for rep in range(args.repeats):
        # alternate the order so that drifting machine load does not favour one side
        for impl, python in impls if rep % 2 == 0 else impls[::-1]:
            if not os.path.exists(python):
                print(f"# {impl}: interpreter {python} not found, skipped", file=sys.stderr)
                continue
            out = run_competitor([python, __file__, "--impl", impl, "--generations", str(args.generations)])
            if out.returncode != 0:
                print(f"# {impl} failed:\n{out.stderr[-2000:]}", file=sys.stderr)
                continue
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )
    print(f"OpenAI-ES d={DIMS:,}, pop={POP}, population floor {POP * DIMS * 4 / 1e6:.1f} MB\n")
    print(f"load average {os.getloadavg()}\n")
    header = ["impl", "version", "backend", "compile or warm-up (s)", "step median (s)", "step min (s)"]
    header += ["step CPU median (s)", "XLA peak (MB)", "max RSS (MB)", "last best f"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        xla = "n/a" if r["xla_peak_mb"] is None else f"{r['xla_peak_mb']:.0f}"
        cells = [r["impl"], r["version"], r["jax"], f"{r['compile_s']:.2f}", f"{r['step_s_median']:.3f}"]
        cells += [f"{r['step_s_min']:.3f}", f"{r['step_cpu_s_median']:.3f}", xla, f"{r['max_rss_mb']:.0f}"]
        cells += [f"{r['best_fitness']:.1f}"]
        print("| " + " | ".join(cells) + " |")
    for r in rows:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
