"""CMA-ES throughput: evotensor vs evosax, EvoTorch, EvoX and pycma (run by hand, not a test).

Workload (issue 4): CMA-ES, d=100, population 256, 300 generations on Rastrigin (mean_init 3,
sigma_init 2, float32); a single run and 16 seeds batched. Compile (or warm-up) time is measured
separately from steady-state time per generation, in wall time and in process CPU time (the
benchmark machine is shared, so CPU time is the steadier figure).

    .venv/bin/python benchmarks/es_cma.py                        # evotensor vs evosax, 5 rounds
    .venv/bin/python benchmarks/es_cma.py --impls evotensor,evosax,pycma,evotorch,evox
    .venv/bin/python benchmarks/es_cma.py --pop 17 --modes vmap16     # lazy gap > 1 (see below)

Side by side, alternating: each implementation runs in a worker process of its own (its venv's
interpreter) that compiles everything once (compile time reported apart: AOT ``lower().compile()``
for the JAX ones, the first compiled generation for EvoX), then the driver asks the workers for one
timed whole run at a time, A B A B ..., for ``--rounds`` rounds (round r rotates the order by r and
uses seed r), so that load on the shared machine hits every implementation alike. Reported: the
median and range over the rounds of ms per generation (wall and process CPU time) and of the final
fitness (best of the last generation; 16 seeds: the median over the seeds) beside it.

Precision: jax on CPU computes float32 matmuls in full float32 whatever
``jax_default_matmul_precision`` says (the setting only matters on GPU/TPU); each JAX worker
reports ``x64`` and that setting, and both run float32 with the default.

``--pop`` changes the population size (default 256, the issue's workload). At d=100 pycma's lazy
eigendecomposition gap ``1/(c_1+c_mu)/n/10`` is 0.079 generations at lambda=256 (C is decomposed
every generation) but 1.14 at the default lambda=17 (every second generation); ``--pop 17`` shows
what the lazy update saves, batched over seeds too.

Competitors live in separate venvs; the driver runs each worker with that venv's interpreter:

* evosax: the `es` venv of `benchmarks/bench_venvs.py` (`make bench-venvs`);
* EvoTorch: the `evotorch` venv (`evotorch` over a CPU torch wheel). EvoTorch
  runs eagerly (no compile) and has no batching over seeds, so its "16 seeds" row runs 16 runs one
  after the other (in its "vmap16" mode); its warm-up is one 2-generation run;
* EvoX 1.x (PyTorch): the `evox` venv (`evox` over a CPU torch wheel). One
  generation is `use_state(StdWorkflow.step)` under `evox.core.compile` (torch.compile); 16 seeds
  are `evox.core.vmap(..., randomness="different")` over stacked workflow states, compiled.

pycma (``cma`` in the project's venv) is timed over whole runs (ask + evaluate + tell) on the same
Rastrigin, numpy float64, one run (it has no batching, so no vmap16 row).

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


# ---- one implementation = prepare() -> (setup info, run(mode, seed) -> timing and quality) --------
#
# ``prepare_<impl>()`` compiles (or warms up) everything once and returns ``(info, run)``; ``info``
# holds the compile / warm-up times, ``run("single" | "vmap16", seed)`` one timed whole run of GENS
# generations from that seed: ``dict(wall_s, cpu_s, final_best)`` (``final_best``: best fitness of
# the last generation; for vmap16 the median over the 16 seeds), or ``None`` if the mode does not
# exist for that implementation.


def _jax_prepare(impl, make_run):
    """AOT-compile ``run(key)`` and ``vmap(run)(keys)`` (compile time alone), warm each up once."""
    import jax
    import jax.numpy as jnp

    single, batched = jax.jit(make_run), jax.jit(jax.vmap(make_run))
    key = jax.random.key(0)
    keys = jax.random.split(key, SEEDS)
    info = dict(
        impl=impl,
        versions=dict(jax=jax.__version__),
        x64=bool(jax.config.jax_enable_x64),
        matmul_precision=str(jax.config.jax_default_matmul_precision),  # None = full f32 on CPU
    )
    compiled = {}
    for mode, fn, arg in (("single", single, key), ("vmap16", batched, keys)):
        clock = Clock()
        compiled[mode] = fn.lower(arg).compile()
        info[f"{mode}_compile_s"], info[f"{mode}_compile_cpu_s"] = clock.read()
        clock = Clock()
        jax.block_until_ready(compiled[mode](arg))  # first execution, not counted
        info[f"{mode}_first_run_s"] = clock.read()[0]

    def run(mode, seed):
        key = jax.random.key(seed)
        arg = key if mode == "single" else jax.random.split(key, SEEDS)
        clock = Clock()
        best = jax.block_until_ready(compiled[mode](arg))
        wall, cpu = clock.read()
        last = best[..., -1]
        return dict(wall_s=wall, cpu_s=cpu, final_best=float(jnp.median(last)))

    return info, run


def prepare_evotensor():
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

    info, fn = _jax_prepare("evotensor", run)
    info["lazy_gap"] = float(params.lazy_gap)
    return info, fn


def prepare_evosax():
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

    info, fn = _jax_prepare("evosax", run)
    from importlib.metadata import version

    info["versions"]["evosax"] = version("evosax")
    return info, fn


def rastrigin_torch(torch, x):
    return 10 * x.shape[-1] + torch.sum(x**2 - 10 * torch.cos(2 * torch.pi * x), dim=-1)


def prepare_evotorch():
    """EvoTorch CMAES (eager PyTorch, float32). Warm-up = one 2-generation run. It has no batching over
    seeds: its "vmap16" mode runs 16 runs one after the other."""
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

    def one_run(seed, gens):
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
        for _ in range(gens):
            es.step()
        return float(last["best"]), int(es.decompose_C_freq)

    clock = Clock()
    _, freq = one_run(0, 2)
    info = dict(
        impl="evotorch",
        versions=dict(evotorch=version("evotorch"), torch=torch.__version__, threads=torch.get_num_threads()),
        warmup_s=clock.read()[0],
        decompose_C_every=freq,
    )

    def run(mode, seed):
        clock = Clock()
        if mode == "single":
            best = one_run(seed, GENS)[0]
        else:
            best = statistics.median(one_run(seed * SEEDS + s, GENS)[0] for s in range(SEEDS))
        wall, cpu = clock.read()
        return dict(wall_s=wall, cpu_s=cpu, final_best=best)

    return info, run


def prepare_evox():
    """EvoX 1.x CMAES in a StdWorkflow, one generation = a compiled `use_state(workflow.step)`.

    EvoX 1.4.0's CMAES chooses between decomposing C and keeping the old factors with `torch.cond`,
    which torch 2.13 rejects ("Encountered aliasing during higher order op tracing"), eager and
    compiled alike. The subclass below decomposes every generation instead, which is exactly what
    that `torch.cond` picks at this configuration: `decomp_per_iter = max(floor(1 / (c_1 + c_mu) /
    d / 10), 1) = 1`, so `iteration % 1 == 0` always holds. Nothing else is changed. Compile time =
    the first (compiling) generation of each mode.
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

    def initial_state(mode, seed):
        torch.manual_seed(seed)
        if mode == "single":
            wf = workflow()
            return wf, {k: v.detach().clone() for k, v in [*wf.named_parameters(), *wf.named_buffers()]}
        wf = workflow()
        params, buffers = torch.func.stack_module_state([wf] * SEEDS)
        return wf, {**params, **buffers}

    info = dict(
        impl="evox",
        versions=dict(evox=version("evox"), torch=torch.__version__, threads=torch.get_num_threads()),
    )
    steps = {}
    for mode in ("single", "vmap16"):
        wf, state = initial_state(mode, 0)
        fn = use_state(wf.step)
        steps[mode] = (wf, compile(fn if mode == "single" else vmap(fn, randomness="different")))
        clock = Clock()
        steps[mode][1](state)  # compile + one generation
        info[f"{mode}_compile_s"], info[f"{mode}_compile_cpu_s"] = clock.read()

    def run(mode, seed):
        _, state = initial_state(mode, seed)
        step = steps[mode][1]
        clock = Clock()
        for _ in range(GENS):
            state = step(state)
        wall, cpu = clock.read()
        best = state["monitor.last_best"]
        best = float(best) if mode == "single" else statistics.median(best.tolist())
        return dict(wall_s=wall, cpu_s=cpu, final_best=best)

    return info, run


def prepare_pycma():
    """pycma (NumPy float64, one run; no batching over seeds, so no vmap16 mode)."""
    import warnings

    import cma
    import numpy as np

    def rastrigin(x):
        return 10 * x.shape[-1] + np.sum(x**2 - 10 * np.cos(2 * np.pi * x), axis=-1)

    info = dict(impl="pycma", versions=dict(cma=cma.__version__))

    def run(mode, seed):
        if mode != "single":
            return None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            es = cma.CMAEvolutionStrategy(
                [3.0] * DIMS, 2.0, {"popsize": POP, "verbose": -9, "seed": seed + 1}
            )
            clock = Clock()
            for _ in range(GENS):
                X = np.asarray(es.ask())
                f = rastrigin(X)
                es.tell(list(X), list(f))
            wall, cpu = clock.read()
        return dict(wall_s=wall, cpu_s=cpu, final_best=float(f.min()), eigen=int(es.sm.count_eigen))

    return info, run


# ---- driver: one worker process per implementation, driven in alternation ------------------------


def worker(impl):
    """Prepare ``impl``, print its info as one JSON line, then answer ``MODE SEED`` lines on stdin
    with one JSON line each (``quit`` or EOF ends)."""
    info, run = globals()[f"prepare_{impl}"]()
    print(json.dumps(info), flush=True)
    for line in sys.stdin:
        if line.strip() in ("", "quit"):
            break
        mode, seed = line.split()
        print(json.dumps(run(mode, int(seed))), flush=True)


class Worker:
    """One implementation's worker process (its own venv's interpreter). torch.compile gets an empty
    inductor cache, so its compile time is a cold compile (as JAX's is: its persistent compilation
    cache is off)."""

    def __init__(self, impl, python):
        self.impl = impl
        self.cache = tempfile.TemporaryDirectory(prefix="inductor-cache-")
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=self.cache.name)
        cmd = [python, __file__, "--worker", impl, "--generations", str(GENS), "--pop", str(POP)]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        self.info = self._read()

    def _read(self):
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"{self.impl} worker died: {self.proc.stderr.read()[-3000:]}")
            if line.startswith("{") or line.startswith("null"):
                return json.loads(line)

    def run(self, mode, seed):
        self.proc.stdin.write(f"{mode} {seed}\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self):
        try:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        self.proc.wait()
        self.cache.cleanup()


def summarize(rows, gens):
    """Median and range of the per-generation times and the median final best, per impl and mode."""
    import statistics

    out = []
    for (impl, mode), rs in rows.items():
        if not rs:
            continue
        wall = [1e3 * r["wall_s"] / gens for r in rs]
        cpu = [1e3 * r["cpu_s"] / gens for r in rs]
        best = [r["final_best"] for r in rs]
        out.append(
            dict(
                impl=impl,
                mode=mode,
                rounds=len(rs),
                ms_per_gen_median=statistics.median(wall),
                ms_per_gen_range=(min(wall), max(wall)),
                cpu_ms_per_gen_median=statistics.median(cpu),
                cpu_ms_per_gen_range=(min(cpu), max(cpu)),
                final_best_median=statistics.median(best),
                final_best_range=(min(best), max(best)),
            )
        )
    return out


def main():
    global GENS, POP
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--impls",
        default="evotensor,evosax",
        help="comma-separated, run in alternation: evotensor, evosax, evotorch, evox, pycma",
    )
    ap.add_argument("--modes", default="single,vmap16", help="single (one run), vmap16 (16 seeds batched)")
    ap.add_argument("--rounds", type=int, default=5, help="alternation rounds (seed = round index)")
    ap.add_argument("--generations", type=int, default=GENS, help="smoke tests only; the workload is 300")
    ap.add_argument("--pop", type=int, default=POP, help="population size (the workload's is 256)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    GENS, POP = args.generations, args.pop
    if args.worker:
        return worker(args.worker)

    pythons = dict(
        evotensor=sys.executable,
        pycma=sys.executable,
        evosax=EVOSAX_PYTHON,
        evotorch=EVOTORCH_PYTHON,
        evox=EVOX_PYTHON,
    )
    impls = args.impls.split(",")
    modes = args.modes.split(",")
    header = dict(
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        machine=platform.processor() or platform.machine(),
        cpus=os.cpu_count(),
        load=os.getloadavg(),
        dims=DIMS,
        population_size=POP,
        generations=GENS,
        rounds=args.rounds,
        order="round r runs the implementations rotated by r, each mode in turn; seed = r",
    )
    print(json.dumps(header), flush=True)
    workers = []
    for impl in impls:  # one at a time: each compiles while the others wait
        if not os.path.exists(pythons[impl]):
            print(json.dumps(dict(impl=impl, error=f"{pythons[impl]} not found")), flush=True)
            continue
        w = Worker(impl, pythons[impl])
        print(json.dumps(dict(setup=w.info, load=os.getloadavg()[0])), flush=True)
        workers.append(w)
    rows = {(w.impl, m): [] for w in workers for m in modes}
    try:
        for r in range(args.rounds):
            order = workers[r % len(workers) :] + workers[: r % len(workers)]
            for mode in modes:
                for w in order:
                    res = w.run(mode, r)
                    if res is None:
                        continue
                    rows[(w.impl, mode)].append(res)
                    print(
                        json.dumps(dict(round=r, impl=w.impl, mode=mode, load=os.getloadavg()[0], **res)),
                        flush=True,
                    )
    finally:
        for w in workers:
            w.close()
    print(json.dumps(dict(load_end=os.getloadavg())))
    print(
        "\n| impl | mode | rounds | ms/gen median (range) | CPU ms/gen median (range) "
        "| final best median (range) |"
    )
    print("|---|---|---|---|---|---|")
    for s in summarize(rows, GENS):
        print(
            f"| {s['impl']} | {s['mode']} | {s['rounds']} | {s['ms_per_gen_median']:.2f} "
            f"({s['ms_per_gen_range'][0]:.2f}–{s['ms_per_gen_range'][1]:.2f}) | "
            f"{s['cpu_ms_per_gen_median']:.2f} "
            f"({s['cpu_ms_per_gen_range'][0]:.2f}–{s['cpu_ms_per_gen_range'][1]:.2f}) | "
            f"{s['final_best_median']:.1f} ({s['final_best_range'][0]:.1f}–{s['final_best_range'][1]:.1f}) |"
        )
    for w in workers:
        print(json.dumps(dict(compile=w.info)))


if __name__ == "__main__":
    sys.exit(main())
