"""Per-generation overhead of the compiled run loop versus a Python loop of jitted ask/tell.

    .venv/bin/python benchmarks/run_loop.py [--dims 10] [--pop 32] [--generations 2000]

Both variants run the same CMA-ES on the same problem with the same key schedule; the figure of
interest is steady-state microseconds per generation (compile time is reported separately).
"""

from __future__ import annotations

import argparse
import platform
import time

import jax
import numpy as np

import evotensor
from evotensor.core import to_minimization
from evotensor.es import CMAES
from evotensor.problems import Rastrigin


def python_loop(es, problem, generations, key):
    ask, tell, evaluate = jax.jit(es.ask), jax.jit(es.tell), jax.jit(problem.evaluate)
    init_key, loop_key = jax.random.split(key)
    params = es.default_params()
    state = es.init(init_key, params)
    # warm-up compile outside the timing
    t0 = time.perf_counter()
    x, _ = ask(jax.random.key(1), state, params)
    jax.block_until_ready(tell(jax.random.key(1), state, x, evaluate(jax.random.key(1), x), params))
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for g in range(generations):
        ka, ke, kt = evotensor.generation_keys(loop_key, g)
        x, state = ask(ka, state, params)
        state, _ = tell(kt, state, x, to_minimization(evaluate(ke, x), problem.maximize), params)
    jax.block_until_ready(state)
    return compile_s, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dims", type=int, default=10)
    parser.add_argument("--pop", type=int, default=32)
    parser.add_argument("--generations", type=int, default=2000)
    args = parser.parse_args()
    es, problem, key = (
        CMAES(args.pop, num_dims=args.dims, sigma_init=2.0),
        Rastrigin(args.dims),
        jax.random.key(0),
    )

    result = evotensor.run(es, problem, args.generations, key, chunk_size=args.generations)
    compile_py, run_py = python_loop(es, problem, args.generations, key)
    us = lambda s: 1e6 * s / args.generations  # noqa: E731
    print(f"machine: {platform.processor() or platform.machine()}, {jax.devices()[0]}, jax {jax.__version__}")
    print(f"CMA-ES d={args.dims} pop={args.pop}, {args.generations} generations")
    print(f"{'variant':<28}{'compile s':>10}{'us/generation':>16}")
    print(f"{'evotensor.run (lax.scan)':<28}{result.compile_seconds:>10.2f}{us(result.run_seconds):>16.1f}")
    print(f"{'python loop of jitted steps':<28}{compile_py:>10.2f}{us(run_py):>16.1f}")
    print(f"speed-up: {run_py / result.run_seconds:.1f}x; best fitness {result.best_fitness:.4g}")
    assert np.isfinite(result.best_fitness)


if __name__ == "__main__":
    main()
