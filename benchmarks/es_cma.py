"""CMA-ES throughput: evotensor vs evosax, EvoTorch, EvoX and pycma (run by hand, not a test).

Workload (issue 4): CMA-ES, d=100, population 256, 300 generations on Rastrigin (mean_init 3,
sigma_init 2, float32); a single run and 16 seeds batched. Compile (or warm-up) time is measured
separately from steady-state time per generation, in wall time and in process CPU time (the
benchmark machine is shared, so CPU time is the steadier figure).

    .venv/bin/python benchmarks/es_cma.py                 # everything, competitors via their venvs
    .venv/bin/python benchmarks/es_cma.py --impl evotensor
    .venv/bin/python benchmarks/es_cma.py --impl evotensor --pop 17   # lazy gap > 1 (see below)

``--pop`` changes the population size (default 256, the issue's workload). At d=100 pycma's lazy
eigendecomposition gap ``1/(c_1+c_mu)/n/10`` is 0.079 generations at lambda=256 (C is decomposed
every generation) but 1.14 at the default lambda=17 (every second generation); ``--pop 17`` shows
what the lazy update saves, batched over seeds too.

Competitors live in separate venvs and the driver runs each with that venv's interpreter, one after
the other:

* evosax: the `es` venv of `benchmarks/bench_venvs.py` (`make bench-venvs`);
* EvoTorch: the `evotorch` venv (`evotorch` over a CPU torch wheel). EvoTorch
  runs eagerly (no compile) and has no batching over seeds, so its "16 seeds" row runs 16 runs one
  after the other; its warm-up is the first generation;
* EvoX 1.x (PyTorch): the `evox` venv (`evox` over a CPU torch wheel). One
  generation is `use_state(StdWorkflow.step)` under `evox.core.compile` (torch.compile); 16 seeds
  are `evox.core.vmap(..., randomness="different")` over stacked workflow states, compiled.

pycma is timed per generation (ask + evaluate + tell) on the same Rastrigin, numpy float64, one run
(it has no batching).

OpenBLAS (behind jaxlib's CPU `eigh` and NumPy) is pinned to one thread for this process and every
competitor it starts (`OPENBLAS_NUM_THREADS=1`, set before NumPy loads unless the environment
already sets it): on a loaded 2-core box its threads busy-wait for each other and a generation then costs
~40x its CPU time (benchmarks/results_es_cma.md, run 6). Runs 1-5 there predate this pin.
"""

from __future__ import annotations

import argparse
import json
import os

from bench_venvs import venv_python

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy/jaxlib load OpenBLAS; see above
import platform
import subprocess
import sys
import tempfile
import time

DIMS, POP, GENS, SEEDS = 100, 256, 300, 16
EVOSAX_PYTHON = venv_python("es")
EVOTORCH_PYTHON = venv_python("evotorch")
EVOX_PYTHON = venv_python("evox")
COMPETITORS = (("evosax", EVOSAX_PYTHON), ("evotorch", EVOTORCH_PYTHON), ("evox", EVOX_PYTHON))


def rastrigin_jax(jnp, x):
    return 10 * x.shape[-1] + jnp.sum(x**2 - 10 * jnp.cos(2 * jnp.pi * x), axis=-1)


class Clock:
    """Wall time and this process's CPU time (all threads) since construction, in seconds."""

    def __init__(self):
        self.wall0, self.cpu0 = time.perf_counter(), time.process_time()

    def read(self):
        return time.perf_counter() - self.wall0, time.process_time() - self.cpu0


def timed(fn, *args):
    """((wall, cpu) of the first call incl. compile, (wall, cpu) of a second call, result)."""
    import jax

    clock = Clock()
    out = jax.block_until_ready(fn(*args))
    first = clock.read()
    clock = Clock()
    out = jax.block_until_ready(fn(*args))
    second = clock.read()
    return first, second, out


def jax_row(impl, c1, s1, best1, c16, s16, best16):
    """Result row for a JAX implementation timed with `timed` (whole 300-generation runs)."""
    import jax.numpy as jnp

    return dict(
        impl=impl,
        compile_plus_run_s=c1[0],
        run_s=s1[0],
        per_gen_ms=1e3 * s1[0] / GENS,
        per_gen_cpu_ms=1e3 * s1[1] / GENS,
        vmap16_compile_plus_run_s=c16[0],
        vmap16_run_s=s16[0],
        vmap16_per_gen_ms=1e3 * s16[0] / GENS,
        vmap16_per_gen_cpu_ms=1e3 * s16[1] / GENS,
        final_best=float(best1[-1]),
        vmap16_final_best_median=float(jnp.median(best16[:, -1])),
    )


def bench_evotensor():
    import jax
    import jax.numpy as jnp

    from evotensor.es import CMAES

    es = CMAES(POP, num_dims=DIMS, sigma_init=2.0, mean_init=[3.0] * DIMS)
    params = es.default_params()

    def run(key):
        def step(state, k):
            k1, k2 = jax.random.split(k)
            x, state = es.ask(k1, state, params)
            f = rastrigin_jax(jnp, x)
            state, _ = es.tell(k2, state, x, f, params)
            return state, jnp.min(f)

        state = es.init(key, params)
        return jax.lax.scan(step, state, jax.random.split(key, GENS))[1]

    single = jax.jit(run)
    batched = jax.jit(jax.vmap(run))
    key = jax.random.key(0)
    keys = jax.random.split(key, SEEDS)
    c1, s1, best1 = timed(single, key)
    c16, s16, best16 = timed(batched, keys)
    return dict(jax_row("evotensor", c1, s1, best1, c16, s16, best16), lazy_gap=float(params.lazy_gap))


def bench_evosax():
    import jax
    import jax.numpy as jnp
    from evosax.algorithms import CMA_ES

    es = CMA_ES(population_size=POP, solution=jnp.zeros(DIMS))
    params = es.default_params.replace(std_init=2.0)

    def run(key):
        def step(state, k):
            k1, k2 = jax.random.split(k)
            x, state = es.ask(k1, state, params)
            f = rastrigin_jax(jnp, x)
            state, _ = es.tell(k2, x, f, state, params)
            return state, jnp.min(f)

        state = es.init(key, jnp.full(DIMS, 3.0), params)
        return jax.lax.scan(step, state, jax.random.split(key, GENS))[1]

    single = jax.jit(run)
    batched = jax.jit(jax.vmap(run))
    key = jax.random.key(0)
    keys = jax.random.split(key, SEEDS)
    c1, s1, best1 = timed(single, key)
    c16, s16, best16 = timed(batched, keys)
    return jax_row("evosax", c1, s1, best1, c16, s16, best16)


def rastrigin_torch(torch, x):
    return 10 * x.shape[-1] + torch.sum(x**2 - 10 * torch.cos(2 * torch.pi * x), dim=-1)


def bench_evotorch():
    """EvoTorch CMAES (eager PyTorch, float32). Warm-up = the first generation of each run."""
    import statistics
    from importlib.metadata import version

    import torch
    from evotorch import Problem
    from evotorch.algorithms import CMAES

    last = {}

    def fitness(x):
        f = rastrigin_torch(torch, x)
        last["best"] = f.min()  # best of the latest generation, like the JAX rows
        return f

    def one_run(seed):
        torch.manual_seed(seed)
        problem = Problem(
            "min",
            fitness,
            solution_length=DIMS,
            initial_bounds=(-5.0, 5.0),
            dtype=torch.float32,
            vectorized=True,
        )
        es = CMAES(problem, stdev_init=2.0, popsize=POP, center_init=[3.0] * DIMS)
        clock = Clock()
        es.step()
        first = clock.read()
        clock = Clock()
        for _ in range(GENS - 1):
            es.step()
        rest = clock.read()
        return first, rest, float(last["best"]), es.decompose_C_freq

    first, rest, best, freq = one_run(0)
    clock = Clock()
    bests16 = [one_run(seed)[2] for seed in range(SEEDS)]
    wall16, cpu16 = clock.read()
    return dict(
        impl="evotorch",
        versions=dict(evotorch=version("evotorch"), torch=torch.__version__, threads=torch.get_num_threads()),
        warmup_first_gen_s=first[0],
        run_s=first[0] + rest[0],
        per_gen_ms=1e3 * rest[0] / (GENS - 1),
        per_gen_cpu_ms=1e3 * rest[1] / (GENS - 1),
        seq16_run_s=wall16,
        seq16_per_gen_ms=1e3 * wall16 / GENS,
        seq16_per_gen_cpu_ms=1e3 * cpu16 / GENS,
        final_best=best,
        seq16_final_best_median=statistics.median(bests16),
        decompose_C_every=int(freq),
    )


def bench_evox():
    """EvoX 1.x CMAES in a StdWorkflow, one generation = a compiled `use_state(workflow.step)`.

    EvoX 1.4.0's CMAES chooses between decomposing C and keeping the old factors with `torch.cond`,
    which torch 2.13 rejects ("Encountered aliasing during higher order op tracing"), eager and
    compiled alike. The subclass below decomposes every generation instead, which is exactly what
    that `torch.cond` picks at this configuration: `decomp_per_iter = max(floor(1 / (c_1 + c_mu) /
    d / 10), 1) = 1`, so `iteration % 1 == 0` always holds. Nothing else is changed.
    """
    import statistics
    from importlib.metadata import version

    import torch
    from evox.algorithms import CMAES
    from evox.core import Monitor, Mutable, Problem, compile, use_state, vmap
    from evox.workflows import StdWorkflow

    class AlwaysDecomposingCMAES(CMAES):
        def _conditional_decomposition(self, iteration, C):
            B, D, C_invsqrt = self._decomposition(C)
            return B, D, C_invsqrt

    class Rastrigin(Problem):
        def evaluate(self, x):
            return rastrigin_torch(torch, x)

    class LastBest(Monitor):
        def __init__(self):
            super().__init__()
            self.last_best = Mutable(torch.tensor(float("inf")))

        def pre_tell(self, fitness):
            self.last_best = torch.min(fitness)

    def workflow():
        algo = AlwaysDecomposingCMAES(mean_init=torch.full((DIMS,), 3.0), sigma=2.0, pop_size=POP)
        assert int(algo.decomp_per_iter) == 1, "the workaround is only exact when decomp_per_iter == 1"
        return StdWorkflow(algo, Rastrigin(), monitor=LastBest())

    def run(step, state):
        clock = Clock()
        first = step({k: v.clone() for k, v in state.items()})  # compile + one generation
        first_t = clock.read()
        del first
        clock = Clock()
        for _ in range(GENS):
            state = step(state)
        return first_t, clock.read(), state

    torch.manual_seed(0)
    wf = workflow()
    state = {k: v.detach().clone() for k, v in [*wf.named_parameters(), *wf.named_buffers()]}
    c1, s1, state1 = run(compile(use_state(wf.step)), state)

    torch.manual_seed(0)
    wf16 = workflow()
    params, buffers = torch.func.stack_module_state([wf16] * SEEDS)
    state16 = {**params, **buffers}
    c16, s16, state16 = run(compile(vmap(use_state(wf16.step), randomness="different")), state16)
    return dict(
        impl="evox",
        versions=dict(evox=version("evox"), torch=torch.__version__, threads=torch.get_num_threads()),
        compile_plus_gen_s=c1[0],
        compile_plus_gen_cpu_s=c1[1],
        run_s=s1[0],
        per_gen_ms=1e3 * s1[0] / GENS,
        per_gen_cpu_ms=1e3 * s1[1] / GENS,
        vmap16_compile_plus_gen_s=c16[0],
        vmap16_run_s=s16[0],
        vmap16_per_gen_ms=1e3 * s16[0] / GENS,
        vmap16_per_gen_cpu_ms=1e3 * s16[1] / GENS,
        final_best=float(state1["monitor.last_best"]),
        vmap16_final_best_median=statistics.median(state16["monitor.last_best"].tolist()),
    )


def bench_pycma(gens=100):
    import warnings

    import cma
    import numpy as np

    def rastrigin(x):
        return 10 * x.shape[-1] + np.sum(x**2 - 10 * np.cos(2 * np.pi * x), axis=-1)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        es = cma.CMAEvolutionStrategy([3.0] * DIMS, 2.0, {"popsize": POP, "verbose": -9, "seed": 1})
    clock = Clock()
    for _ in range(gens):
        X = np.asarray(es.ask())
        es.tell(list(X), list(rastrigin(X)))
    dt, cpu = clock.read()
    return dict(
        impl="pycma",
        per_gen_ms=1e3 * dt / gens,
        per_gen_cpu_ms=1e3 * cpu / gens,
        generations_timed=gens,
        final_best=float(es.best.f),
        eigen_decompositions=int(es.sm.count_eigen),
    )


def run_competitor(cmd: list) -> subprocess.CompletedProcess:
    """Run one competitor's subprocess. torch.compile gets an empty inductor cache, so its compile
    time is a cold compile (as JAX's is: its persistent compilation cache is off)."""
    with tempfile.TemporaryDirectory(prefix="inductor-cache-") as cache:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache)
        return subprocess.run(cmd, capture_output=True, text=True, env=env)


def main():
    global GENS, POP
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--impl", choices=["all", "evotensor", "evosax", "evotorch", "evox", "pycma"], default="all"
    )
    ap.add_argument("--competitors", default="evosax,evotorch,evox", help="with --impl all: venvs to run")
    ap.add_argument("--generations", type=int, default=GENS, help="smoke tests only; the workload is 300")
    ap.add_argument("--pop", type=int, default=POP, help="population size (the workload's is 256)")
    args = ap.parse_args()
    GENS, POP = args.generations, args.pop
    if args.impl == "all":
        results = []
        for impl in ("evotensor", "pycma"):
            results.append(globals()[f"bench_{impl}"]())
        wanted = args.competitors.split(",")
        for impl, python in COMPETITORS:
            if impl not in wanted:
                continue
            if not os.path.exists(python):
                results.append(dict(impl=impl, error=f"{python} not found"))
                continue
            # one competitor at a time, each in its own interpreter and venv
            cmd = [python, __file__, "--impl", impl, "--generations", str(GENS), "--pop", str(POP)]
            out = run_competitor(cmd)
            lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
            results.append(json.loads(lines[-1]) if lines else dict(impl=impl, error=out.stderr[-2000:]))
        info = dict(
            date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            machine=platform.processor() or platform.machine(),
            cpus=os.cpu_count(),
            load=os.getloadavg(),
            population_size=POP,
        )
        print(json.dumps(info))
        for r in results:
            print(json.dumps(r))
    else:
        print(json.dumps(dict(globals()[f"bench_{args.impl}"](), population_size=POP, load=os.getloadavg())))


if __name__ == "__main__":
    sys.exit(main())
