"""Ray evaluator overhead per individual versus a local Python loop, and the distributed-gradient ES's
traffic.

    .venv/bin/python benchmarks/scale_ray.py [--rounds 5] [--no-append]

For a trivial fitness (``sum(x^2)``, ~2 us) and a 1-ms one (a busy loop: a CPU-bound simulator
step), one generation's evaluation runs as

* ``local``: the fitness in a Python loop on the driver (the same chunk code the actors run, the
  same per-individual seeds);
* ``ray k actors``: :class:`evotensor.distributed.ray_evaluator.RayEvaluator` with ``k`` actors
  (default chunks: four per actor), per individual and, for the trivial fitness, batched;

alternating in every round, on one local Ray cluster (8 logical CPUs so that the pools live side by
side; only one works at a time, on the machine's real cores). ``overhead/ind`` is the wall time
per individual beyond a perfect ``k``-way split of the local loop: ``(t_ray - t_local / k) / pop``.
The medians over ``--rounds`` generations after a warm-up are printed and appended to
``benchmarks/results_scale.md`` with the date and the machine.

It then runs one generation of :class:`evotensor.es.core.ray_gradient.RayGradientES` (OpenES,
pop 256, 2 shards) for a range of dimensions and prints the bytes sent to and from the actors
next to the ``pop x dims`` float32 population that never travels.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path

import jax
import numpy as np

from evotensor.distributed.ray_evaluator import (
    Batched,
    PerIndividual,
    RayEvaluator,
    connect,
    individual_seeds,
)

RESULTS = Path(__file__).with_name("results_scale.md")


def trivial(x, seed):
    return float(np.dot(x, x))


def trivial_batch(chunk, seeds):
    return np.einsum("ij,ij->i", chunk, chunk)


def one_ms(x, seed):
    end = time.perf_counter() + 1e-3
    while time.perf_counter() < end:
        pass
    return float(np.dot(x, x))


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(name, fitness, batch, pop, rounds, dims=16):
    population = np.random.default_rng(0).normal(size=(pop, dims)).astype(np.float32)
    key = jax.random.key(0)
    local = PerIndividual(fitness)
    evaluators = {f"ray {k} actor{'s' if k > 1 else ''}": RayEvaluator(fitness, num_actors=k) for k in (1, 2)}
    if batch is not None:
        evaluators.update(
            {f"ray {k} actors, batched": RayEvaluator(Batched(batch), num_actors=k) for k in (2,)}
        )
    variants = {"local": lambda: local(population, individual_seeds(key, pop), 0)}
    for label, ev in evaluators.items():
        variants[label] = lambda ev=ev: ev.evaluate(key, population)
    reference = local(population, individual_seeds(key, pop), 0)[0]
    for label, run in variants.items():  # warm-up: actors start, seeds compile
        out = run()
        values = out.fitness if hasattr(out, "fitness") else out[0]
        assert np.allclose(values, reference, rtol=1e-5), label
    times = {label: [] for label in variants}
    for _ in range(rounds):
        for label, run in variants.items():
            times[label].append(timed(run))
    for ev in evaluators.values():
        ev.close()
    t_local = statistics.median(times["local"])
    rows = []
    for label, ts in times.items():
        t = statistics.median(ts)
        k = 1 if label == "local" else int(label.split()[1])
        overhead = (t - t_local / k) / pop
        rows.append((name, pop, label, 1e3 * t, 1e6 * t / pop, 1e6 * overhead, t_local / t))
    return rows


def traffic(dims_list, pop=256):
    import optax

    from evotensor.core.run import generation_keys
    from evotensor.es import OpenES
    from evotensor.es.core.ray_gradient import RayGradientES

    rows = []
    for dims in dims_list:
        es = OpenES(pop, num_dims=dims, sigma_init=0.1, optimizer=optax.adam(0.01))
        with RayGradientES(es, trivial, num_actors=2, num_shards=2) as dist:
            state, loop_key = dist.init(jax.random.key(0))
            state, info = dist.step(state, generation_keys(loop_key, 0))
        rows.append((dims, info["bytes_to_actors"], info["bytes_from_actors"], pop * dims * 4))
    return rows


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores (shared), load {Path('/proc/loadavg').read_text().split()[:3]}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--trivial-pop", type=int, default=1024)
    parser.add_argument("--ms-pop", type=int, default=256)
    parser.add_argument("--no-append", action="store_true", help="print only")
    args = parser.parse_args()
    connect(init_kwargs={"num_cpus": 8, "log_to_driver": False})
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    where = machine()
    rows = measure("trivial", trivial, trivial_batch, args.trivial_pop, args.rounds)
    rows += measure("1 ms busy", one_ms, None, args.ms_pop, args.rounds)
    table = [
        "| fitness | pop | variant | ms/generation | us/individual | overhead us/individual | speedup |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    table += [f"| {n} | {p} | {v} | {t:.1f} | {u:.1f} | {o:.1f} | {s:.2f} |" for n, p, v, t, u, o, s in rows]
    sent = traffic((1_000, 10_000, 100_000))
    table2 = [
        "| dims | bytes to actors | bytes from actors | population pop x dims (never sent) |",
        "|---:|---:|---:|---:|",
    ]
    table2 += [f"| {d:,} | {a:,} | {b:,} | {p:,} |" for d, a, b, p in sent]
    import ray

    ray.shutdown()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    text = "\n".join(
        [
            "",
            f"## Ray evaluator overhead per individual (benchmarks/scale_ray.py), {when}",
            "",
            f"Machine: {where}; jax {jax.__version__}, ray {ray.__version__}; commit {commit} + changes.",
            f"Command: `.venv/bin/python benchmarks/scale_ray.py --rounds {args.rounds}`; medians over "
            f"{args.rounds} generations after a warm-up; one local Ray cluster on this machine.",
            "",
            *table,
            "",
            "Distributed-gradient ES (OpenES, pop 256, 2 shards on 2 actors), one generation's traffic:",
            "",
            *table2,
            "",
        ]
    )
    print(text)
    if not args.no_append:
        with RESULTS.open("a") as fh:
            fh.write(text)
        print(f"appended to {RESULTS}")


if __name__ == "__main__":
    main()
