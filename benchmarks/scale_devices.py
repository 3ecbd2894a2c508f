"""Throughput and compile time versus device count, for every family, through ``run(..., mesh=)``.

    .venv/bin/python benchmarks/scale_devices.py [--devices 1,2,4] [--rounds 2] [--size small]
        [--families es-cma,es-openes,qd,gp,neat] [--generations N] [--no-append]

Each device count runs in its own subprocess (JAX fixes its device count when it starts): on a CPU
machine it gets that many host CPU devices (``jax_num_cpu_devices``), on a GPU machine the first
that many GPUs. The rounds alternate the order of the device counts (1, 2, 4, then 4, 2, 1, ...), so
a drift of the machine's load does not favour one count. In every subprocess each family is one
``evotensor.run(strategy, problem, generations, key, mesh=mesh)`` over a 1-d ``"pop"`` mesh, its
generations in one compiled chunk:

* ``es-cma``: CMA-ES (state replicated: only the evaluation is split) on an expensive-ish fitness
  (``ITERATED_MAP`` steps of a nonlinear map per individual, then Rastrigin);
* ``es-openes``: OpenAI-ES on the same fitness;
* ``qd``: the ``qd-arm`` task (MAP-Elites, Iso+LineDD, 100-joint arm);
* ``gp``: the ``sr-pagie`` task (tree GP symbolic regression, Pagie-1);
* ``neat``: the ``neat-xor`` task.

Families whose strategies have ``on_mesh`` hooks use them (sharded state, per-device kernels); the
others run with a replicated state and the split evaluation. Reported per family and device count
(median over rounds): ``compile_s`` (``RunResult.compile_seconds``) and evaluations/s
(``RunResult.evaluations / run_seconds``), and the speed-up over 1 device. Prints a table and appends
it, with date, machine, load and command, to ``benchmarks/results_scale.md``.

Host CPU devices share the machine's cores: on a 2-core machine 4 devices cannot be faster than 2,
and a single device already uses both cores for its larger operations (XLA:CPU's intra-op threads).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results_scale.md"
FAMILIES = ("es-cma", "es-openes", "qd", "gp", "neat")
ITERATED_MAP = 64  # steps of the per-individual map in the ES fitness (its cost per individual)
# population (a multiple of 8: it must split over every device count) and generations per size
SIZES = {
    "tiny": {"pop": 32, "generations": 3, "dims": 16},
    "small": {"pop": 256, "generations": 10, "dims": 64},
    "gpu": {"pop": 8192, "generations": 50, "dims": 256},
}
PREFIX = "SCALE_ROW "


# -- the worker: one device count ----------------------------------------------------------------


class IteratedRastrigin:
    """An expensive-ish fitness: ``ITERATED_MAP`` steps of ``x <- x + 0.1 sin(3x)`` per individual,
    then Rastrigin of the result (its cost grows with the population, as a simulator's would)."""

    maximize = False

    def __init__(self, dims: int):
        self.dims = dims

    def evaluate(self, key, genotypes):
        import jax
        import jax.numpy as jnp

        from evotensor.core import Evaluation

        x = jax.lax.fori_loop(0, ITERATED_MAP, lambda _, v: v + 0.1 * jnp.sin(3.0 * v), genotypes)
        fitness = 10.0 * self.dims + jnp.sum(x * x - 10.0 * jnp.cos(2 * jnp.pi * x), axis=1)
        return Evaluation(fitness=fitness)


def _family(name: str, size: dict):
    """``(strategy, problem)`` of one family at ``size``."""
    from evotensor.tasks import get_task

    pop, dims = size["pop"], size["dims"]
    if name == "es-cma":
        from evotensor.es import CMAES

        return CMAES(pop, num_dims=dims, sigma_init=2.0), IteratedRastrigin(dims)
    if name == "es-openes":
        import optax

        from evotensor.es import OpenES

        return OpenES(pop, num_dims=dims, optimizer=optax.sgd(0.01), sigma_init=0.5), IteratedRastrigin(dims)
    task = {"qd": "qd-arm", "gp": "sr-pagie", "neat": "neat-xor"}[name]
    built = get_task(task).build({"pop": pop, "generations": size["generations"]})
    return built.strategy, built.problem


def _size(name: str, generations: int | None) -> dict:
    """The sizes of ``name``, with ``generations`` instead of its own when given (more generations:
    a run long enough to time on a loaded machine)."""
    return {**SIZES[name], **({"generations": generations} if generations else {})}


def worker(devices: int, families: list[str], size_name: str, generations: int | None = None) -> None:
    """Runs in a subprocess: one JSON row per family on a mesh of ``devices`` devices."""
    import jax

    # before JAX starts a backend: the count of host CPU devices (ignored by a GPU backend)
    jax.config.update("jax_num_cpu_devices", devices)
    if jax.default_backend() == "cpu" and jax.device_count() != devices:
        raise SystemExit(f"asked for {devices} CPU devices, JAX has {jax.device_count()}")
    import numpy as np

    import evotensor

    size = _size(size_name, generations)
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:devices]), ("pop",))
    for name in families:
        strategy, problem = _family(name, size)
        generations = size["generations"]
        row = {"family": name, "devices": devices, "pop": int(strategy.population_size)}
        try:
            t0 = time.perf_counter()
            result = evotensor.run(
                strategy, problem, generations, jax.random.key(0), mesh=mesh, chunk_size=generations,
                progress=False,
            )  # fmt: skip
            row.update(
                compile_s=result.compile_seconds,
                run_s=result.run_seconds,
                evals_per_s=result.evaluations / result.run_seconds,
                total_s=time.perf_counter() - t0,
                best_fitness=result.best_fitness,
                hooks=callable(getattr(strategy, "on_mesh", None)),
            )
        except Exception as err:  # one family failing must not hide the others' figures
            row["error"] = f"{type(err).__name__}: {str(err)[:300]}"
        print(PREFIX + json.dumps(row), flush=True)


# -- the launcher ---------------------------------------------------------------------------------


def _launch(
    devices: int, families: list[str], size: str, timeout: float, generations: int | None
) -> list[dict]:
    env = dict(os.environ)
    flags = env.get("XLA_FLAGS", "").split()
    forced = "--xla_force_host_platform_device_count"  # the worker sets its own count
    env["XLA_FLAGS"] = " ".join(f for f in flags if not f.startswith(forced))
    env.setdefault("EVOTENSOR_CACHE_DIR", "off")  # every round compiles: compile time is measured
    command = [sys.executable, __file__, "--worker", str(devices), "--families", ",".join(families)]
    if generations:
        command += ["--generations", str(generations)]
    done = subprocess.run(
        [*command, "--size", size], capture_output=True, text=True, env=env, timeout=timeout
    )
    rows = [json.loads(line[len(PREFIX) :]) for line in done.stdout.splitlines() if line.startswith(PREFIX)]
    if done.returncode != 0:
        rows.append({"devices": devices, "error": f"worker exited {done.returncode}: {done.stderr[-600:]}"})
    return rows


def _machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} logical CPUs"


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def _table(rows: list[dict], counts: list[int], families: list[str]) -> str:
    lines = [
        "| family | pop | devices | compile s | evaluations/s | vs 1 device | rounds |",
        "|---|---|---|---|---|---|---|",
    ]
    for family in families:
        base = None
        for n in counts:
            mine = [r for r in rows if r.get("family") == family and r["devices"] == n]
            good = [r for r in mine if "error" not in r]
            if not good:
                error = mine[0]["error"] if mine else "no result"
                lines.append(f"| {family} | | {n} | | failed: {error[:90]} | | 0 |")
                continue
            speed = statistics.median(r["evals_per_s"] for r in good)
            compile_s = statistics.median(r["compile_s"] for r in good)
            base = speed if n == counts[0] else base
            ratio = f"{speed / base:.2f}x" if base else ""
            hooks = " (hooks)" if good[0].get("hooks") else ""
            cells = [
                f"{family}{hooks}",
                good[0]["pop"],
                n,
                f"{compile_s:.2f}",
                f"{speed:,.0f}",
                ratio,
                len(good),
            ]
            lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", default="1,2,4", help="device counts, comma-separated")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--generations", type=int, default=None, help="generations (default: the size's)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per subprocess")
    parser.add_argument("--no-append", action="store_true", help=f"do not append to {RESULTS.name}")
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    families = [f for f in args.families.split(",") if f]
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        parser.error(f"unknown families {unknown}; choose from {FAMILIES}")
    if args.worker is not None:
        worker(args.worker, families, args.size, args.generations)
        return
    counts = [int(c) for c in args.devices.split(",")]
    started, load_before = _dt.datetime.now(_dt.UTC), _load()
    rows: list[dict] = []
    for r in range(args.rounds):
        for n in counts if r % 2 == 0 else counts[::-1]:
            print(f"round {r + 1}/{args.rounds}: {n} device(s) ...", flush=True)
            rows += _launch(n, families, args.size, args.timeout, args.generations)
    table = _table(rows, counts, families)
    import jax

    header = (
        f"## {started:%Y-%m-%d %H:%M} UTC: {args.size} sizes, devices {args.devices}, "
        f"{args.rounds} rounds\n\n"
        f"- Command: `{' '.join([Path(sys.executable).name, *sys.argv])}`\n"
        f"- Machine: {_machine()}; load average {load_before} before, {_load()} after; "
        f"jax {jax.__version__}, backend {jax.default_backend()}\n"
        f"- Sizes: {_size(args.size, args.generations)}; each row the median over rounds of one "
        "`evotensor.run` per family and device count (all generations in one compiled chunk)\n"
    )
    print()
    print(header)
    print(table)
    if not args.no_append:
        new = not RESULTS.exists()
        with RESULTS.open("a", encoding="utf-8") as handle:
            if new:
                handle.write(
                    "# Throughput versus device count (`benchmarks/scale_devices.py`)\n\n"
                    "Host CPU devices share the machine's cores: on a 2-core machine 4 devices cannot "
                    "be faster than 2.\n\n"
                )
            handle.write(header + "\n" + table + "\n\n")
        print(f"\nappended to {RESULTS}")


if __name__ == "__main__":
    main()
