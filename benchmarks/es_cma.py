"""CMA-ES throughput: evotensor vs evosax vs pycma (run by hand, not a test).

Workload (issue 4): CMA-ES, d=100, population 256, 300 generations on Rastrigin; a single run and
16 seeds vmapped. Compile time is measured separately from steady-state time per generation.

    .venv/bin/python benchmarks/es_cma.py                 # all three, evosax via its own venv
    .venv/bin/python benchmarks/es_cma.py --impl evotensor

evosax lives in a separate venv (/work/bench-venvs/es, `pip install evosax jax`); the driver runs
that part with the venv's interpreter. pycma is timed per generation (ask + evaluate + tell) on the
same Rastrigin, numpy float64, one run (it has no batching).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

DIMS, POP, GENS, SEEDS = 100, 256, 300, 16
EVOSAX_PYTHON = "/work/bench-venvs/es/bin/python"


def rastrigin_jax(jnp, x):
    return 10 * x.shape[-1] + jnp.sum(x**2 - 10 * jnp.cos(2 * jnp.pi * x), axis=-1)


def timed(fn, *args):
    """(seconds of the first call incl. compile, seconds of a second call, result)."""
    import jax

    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    second = time.perf_counter() - t0
    return first, second, out


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
    return dict(
        impl="evotensor",
        compile_plus_run_s=c1,
        run_s=s1,
        per_gen_ms=1e3 * s1 / GENS,
        vmap16_compile_plus_run_s=c16,
        vmap16_run_s=s16,
        vmap16_per_gen_ms=1e3 * s16 / GENS,
        final_best=float(best1[-1]),
        vmap16_final_best_median=float(jnp.median(best16[:, -1])),
        lazy_gap=float(params.lazy_gap),
    )


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
    return dict(
        impl="evosax",
        compile_plus_run_s=c1,
        run_s=s1,
        per_gen_ms=1e3 * s1 / GENS,
        vmap16_compile_plus_run_s=c16,
        vmap16_run_s=s16,
        vmap16_per_gen_ms=1e3 * s16 / GENS,
        final_best=float(best1[-1]),
        vmap16_final_best_median=float(jnp.median(best16[:, -1])),
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
    t0 = time.perf_counter()
    for _ in range(gens):
        X = np.asarray(es.ask())
        es.tell(list(X), list(rastrigin(X)))
    dt = time.perf_counter() - t0
    return dict(
        impl="pycma",
        per_gen_ms=1e3 * dt / gens,
        generations_timed=gens,
        final_best=float(es.best.f),
        eigen_decompositions=int(es.sm.count_eigen),
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--impl", choices=["all", "evotensor", "evosax", "pycma"], default="all")
    args = ap.parse_args()
    if args.impl == "all":
        results = []
        for impl in ("evotensor", "pycma"):
            results.append(globals()[f"bench_{impl}"]())
        if os.path.exists(EVOSAX_PYTHON):
            out = subprocess.run(
                [EVOSAX_PYTHON, __file__, "--impl", "evosax"], capture_output=True, text=True
            )
            lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
            results.append(json.loads(lines[-1]) if lines else dict(impl="evosax", error=out.stderr[-2000:]))
        else:
            results.append(dict(impl="evosax", error=f"{EVOSAX_PYTHON} not found"))
        info = dict(
            date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            machine=platform.processor() or platform.machine(),
            cpus=os.cpu_count(),
            load=os.getloadavg(),
        )
        print(json.dumps(info))
        for r in results:
            print(json.dumps(r))
    else:
        print(json.dumps(globals()[f"bench_{args.impl}"]()))


if __name__ == "__main__":
    sys.exit(main())
