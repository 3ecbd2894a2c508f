"""One NEAT generation piece by piece: compile time and run time of every component and of the whole
``NEAT.tell`` + evaluation, at several population sizes (the profile behind issue 14).

Setting: neat-python's XOR example (``NEAT.from_mode("neat-python", 2, 1, pop)``: ``max_nodes`` 50,
``max_conns`` 100, 32 species slots or fewer) with the XOR fitness, through the run loop
(``evotensor.core.run.Loop``: ask, decode, evaluate, tell, best-so-far). Every piece runs on the state
after ``--age`` generations of that run (so genomes, species and counters are realistic), with the
arguments ``tell`` would give it:

* ``generation``: the whole compiled loop step (``Loop.step``: evaluation + ``NEAT.tell``);
* ``mutate``: :func:`evotensor.neat.mutation.mutate` of the population (the plan's elites inactive);
* ``crossover``: :func:`evotensor.neat.crossover.crossover_population` with the plan's parents;
* ``speciate``: :func:`evotensor.neat.species.speciate` of the population (its distances included);
* ``distance_matrix (all slots)``: the population against all species slots at once (for
  reference: speciate computes only the columns it needs);
* ``stagnation+plan``: :func:`~evotensor.neat.species.update_stagnation` and
  :func:`~evotensor.neat.reproduction.plan`;
* ``decode+eval``: the decoder and the XOR evaluation (``network.py``; not part of ``tell``).

Compile time is ``jax.jit(f).lower(...)`` compiled as the run loop compiles (``Loop.compile``: with the
XLA options NEAT asks for on a CPU; ``--xla-defaults``: XLA's own) in CPU seconds (``time.process_time``, all
threads: the box is shared and wall time follows its load; XLA:CPU compiles kernels on both cores, so
an idle box's wall time is lower), with the optimized HLO's fusion and ``while`` counts (each fusion is
a kernel LLVM compiles; on XLA:CPU compile time grows with their number). Run time is CPU ms and wall
ms per call, best of ``--repeats`` rounds of ``--inner`` calls. XLA's default options unless
``XLA_FLAGS`` says otherwise (the test suite's fast flags are *not* set here).

"Before" runs a copy of the package: ``--package /tmp/copy`` puts ``/tmp/copy`` (a directory that
holds an ``evotensor`` package) first on ``sys.path``. Never commit such a copy.

Usage::

    .venv/bin/python benchmarks/neat_generation.py                       # pop 150 and 1000
    .venv/bin/python benchmarks/neat_generation.py --pops 150 --no-pieces
    .venv/bin/python benchmarks/neat_generation.py --package /tmp/before --pops 1000
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import sys
import time


def _args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--package", default=None, help="directory holding an evotensor package to import first")
    p.add_argument("--pops", type=int, nargs="+", default=[150, 1000])
    p.add_argument("--mode", default="neat-python", help="NEAT mode (neat-python, paper, tensorneat)")
    p.add_argument("--age", type=int, default=30, help="generations run before measuring")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--inner", type=int, default=10)
    p.add_argument("--no-pieces", action="store_true", help="the whole generation only")
    p.add_argument("--no-compile", action="store_true", help="run times only")
    p.add_argument(
        "--xla-defaults",
        action="store_true",
        help="compile with XLA's default options, not those NEAT asks for "
        "(evotensor.neat.CPU_COMPILER_OPTIONS)",
    )
    return p.parse_args()


ARGS = _args()
if ARGS.package:
    sys.path.insert(0, os.path.abspath(ARGS.package))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from bench_venvs import machine  # noqa: E402

import evotensor  # noqa: E402
from evotensor.core.run import Loop  # noqa: E402
from evotensor.neat.crossover import crossover_population  # noqa: E402
from evotensor.neat.distance import distance_matrix  # noqa: E402
from evotensor.neat.mutation import mutate  # noqa: E402
from evotensor.neat.reproduction import plan  # noqa: E402
from evotensor.neat.species import sanitize_fitness, speciate, update_stagnation  # noqa: E402
from evotensor.neat.strategy import NEAT  # noqa: E402
from evotensor.problems.function_fit import XOR  # noqa: E402


def compile_stats(loop: Loop, fn, *args) -> tuple[float, float, int, int, object]:
    """``(CPU-s, wall-s, fusions, whiles, compiled)`` of compiling ``fn`` for ``args`` as ``loop``
    compiles its programs (with the XLA options NEAT asks for, ``Loop.compile``; XLA's defaults with
    ``--xla-defaults`` or on a package from before ``Loop.compile``)."""
    lowered = jax.jit(fn).lower(*args)
    c0, w0 = time.process_time(), time.perf_counter()
    with_options = hasattr(loop, "compile") and not ARGS.xla_defaults
    compiled = loop.compile(lowered) if with_options else lowered.compile()
    text = compiled.as_text()
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    return cpu, wall, len(re.findall(r" fusion\(", text)), len(re.findall(r" while\(", text)), compiled


def run_ms(fn, *args) -> tuple[float, float]:
    """Best-of-repeats ``(CPU ms, wall ms)`` per call of the jitted ``fn``."""
    jax.block_until_ready(fn(*args))
    best_cpu = best_wall = float("inf")
    for _ in range(ARGS.repeats):
        c0, w0 = time.process_time(), time.perf_counter()
        for _ in range(ARGS.inner):
            out = fn(*args)
        jax.block_until_ready(out)
        best_cpu = min(best_cpu, (time.process_time() - c0) / ARGS.inner)
        best_wall = min(best_wall, (time.perf_counter() - w0) / ARGS.inner)
    return best_cpu * 1e3, best_wall * 1e3


def pieces(strategy: NEAT, state, loop: Loop, carry, loop_key):
    """``{name: (fn, args)}``: the generation and its components on ``state`` (as ``tell`` calls them)."""
    spec, cfg, P = strategy.spec, strategy.config, strategy.population_size
    problem = XOR()
    networks = strategy.decoder.decode(state.population)
    fitness = sanitize_fitness(problem.evaluate(None, networks, strategy.decoder.apply).fitness)
    species, _ = update_stagnation(cfg.species, state.species, state.species_of, fitness)
    the_plan = plan(jax.random.key(1), cfg.reproduction, species, state.species_of, fitness, P)
    key = jax.random.key(2)
    out = {"generation": (lambda c, k: loop.step(c, k, None), (carry, loop_key))}
    if ARGS.no_pieces:
        return out
    out["mutate"] = (
        lambda k, pop, nk, ni, active: mutate(k, spec, cfg.mutation, pop, nk, ni, active=active),
        (key, state.population, state.next_node_key, state.next_innov, ~the_plan.elite),
    )
    out["crossover"] = (
        lambda k, pop, p1, p2, f: crossover_population(
            k, spec, pop, p1, p2, f, maximize=True, config=cfg.crossover
        ),
        (key, state.population, the_plan.parent1, the_plan.parent2, fitness),
    )
    distances = lambda pop, reps: distance_matrix(spec, cfg.distance, pop, reps)  # noqa: E731
    out["speciate"] = (
        lambda pop, sp: speciate(spec, cfg.species, distances, pop, sp),
        (state.population, the_plan.species_state),
    )
    out["distance_matrix (all slots)"] = (distances, (state.population, state.species.representatives))
    out["stagnation+plan"] = (
        lambda k, sp, so, f: plan(
            k, cfg.reproduction, update_stagnation(cfg.species, sp, so, f)[0], so, f, P
        ),
        (key, state.species, state.species_of, fitness),
    )
    out["decode+eval (network.py)"] = (
        lambda pop: problem.evaluate(None, strategy.decoder.decode(pop), strategy.decoder.apply).fitness,
        (state.population,),
    )
    return out


def main():
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"# NEAT generation profile ({ARGS.mode}, XOR), {now}")
    print(
        f"# machine: {machine()}; load average {os.getloadavg()[0]:.1f}; jax {jax.__version__}; "
        f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}; package {os.path.dirname(evotensor.__file__)}"
    )
    print()
    print("| pop | piece | compile CPU-s | compile wall-s | fusions | whiles | run CPU-ms | run wall-ms |")
    print("|---|---|---|---|---|---|---|---|")
    for P in ARGS.pops:
        strategy = NEAT.from_mode(ARGS.mode, 2, 1, P)
        loop = Loop(strategy, XOR())
        carry, loop_key = jax.jit(lambda k, loop=loop: loop.init(k, None))(jax.random.key(0))
        step = jax.jit(lambda c, k, loop=loop: loop.step(c, k, None))
        for _ in range(ARGS.age):
            carry, _ = step(carry, loop_key)
        state = carry.strategy_state
        for name, (fn, args) in pieces(strategy, state, loop, carry, loop_key).items():
            cpu, wall, fusions, whiles, compiled = compile_stats(loop, fn, *args)
            stats = "- | - | - | -" if ARGS.no_compile else f"{cpu:.2f} | {wall:.2f} | {fusions} | {whiles}"
            cpu_ms, wall_ms = run_ms(compiled, *args)
            print(f"| {P} | {name} | {stats} | {cpu_ms:.2f} | {wall_ms:.2f} |", flush=True)
        sizes = jnp.mean(state.population.num_nodes.astype(jnp.float32)) - strategy.spec.num_inputs
        print(
            f"|  | (state: {int(state.species.num_species)} species, mean nodes {float(sizes):.2f}, "
            f"age {ARGS.age}) | | | | | | |",
            flush=True,
        )
    print()
    print(f"# load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
