"""ES section of the one-command GPU check (``benchmarks/gpu_check.py``): OpenAI-ES and CMA-ES beside
evosax, like for like.

Cases (mode ``"gpu"``: the issue's sizes; ``"cpu"``: tiny sizes that run in seconds on 2 CPU cores):

* ``openai-es d=100000 pop=1024`` (cpu: d=1000, pop=64): one generation = ask + sphere
  ``sum((x-1)^2)`` + tell, jitted as one function with the state donated, the configuration of
  ``benchmarks/es_openes.py`` (whose ``build_evotensor`` / ``build_evosax`` are used): antithetic
  sampling, centered ranks, Adam(1e-3), constant sigma 0.02, mean 0, float32. evotensor runs twice:
  ``evotensor`` (tell from the population, the default) and ``evotensor-regen``
  (``OpenES(regenerate_noise=True)``: tell draws the noise again from ask's key).
* ``cma-es d=100 pop=256`` (cpu: d=10, pop=16): Rastrigin, mean 3, sigma 2, float32, the settings
  of ``benchmarks/es_cma.py``; a whole run of ``generations`` is one jitted ``lax.scan``. Once as a
  single run, once as ``x16 seeds`` (cpu: 2) under ``vmap``. evosax runs twice: with JAX's default
  matmul precision (TF32 on a GPU) and as ``evosax-highest`` with float32 matmuls at HIGHEST, which
  is what evotensor's CMA-ES uses (the like-for-like row).

Every case runs its implementations alternately, run by run (A B A B ..., ``rounds`` rounds), after
one compile each; ``ms_per_gen`` is the median over the rounds of (run time / generations), a run
being ``generations`` generations dispatched back to back and waited for once. ``peak_mb`` is XLA's
``memory_analysis()`` of the compiled program: arguments + outputs + temporaries - aliased (the
state is donated). For OpenAI-ES, ``floor_ms`` is the one-pass bandwidth floor ``2 * pop * d * 4``
bytes (the population written once and read once) over an *assumed* 4.3e12 B/s (an H200's measured
copy bandwidth; an H100 reaches ~3.0e12), and ``floor_ms_measured`` the same over the bandwidth of a
1 GiB ``x + 1`` measured here (``measured_gbs``); both None on CPU. ``largest_allocations`` lists the
largest buffer allocations of the compiled OpenAI-ES generation from XLA's memory-usage report
(size: the shapes of the values sharing the allocation), to show what holds memory beyond one
population; it costs one more compile per implementation.

evosax rows appear when ``import evosax`` works (on the GPU machine: ``pip install --no-deps
.whl/evosax-*.whl .whl/dotmap-*.whl``); evosax is never a dependency of the project.

    .venv/bin/python benchmarks/gpu_check_es.py cpu      # or gpu; prints one JSON row per line
    # from Python: sys.path.insert(0, "benchmarks"); import gpu_check_es; rows = gpu_check_es.run("cpu")
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import statistics
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import es_openes  # noqa: E402
from es_cma import rastrigin_jax  # noqa: E402

ASSUMED_BANDWIDTH = 4.3e12  # B/s: an H200's measured device copy bandwidth (shared/research notes)

# oes_*: OpenAI-ES (gens per timed run); cma_*: CMA-ES (gens per run = one compiled scan)
SIZES = {
    "gpu": dict(oes_dims=100_000, oes_pop=1024, oes_gens=50, cma_dims=100, cma_pop=256, cma_gens=300),
    "cpu": dict(oes_dims=1000, oes_pop=64, oes_gens=10, cma_dims=10, cma_pop=16, cma_gens=20),
}
SIZES["gpu"].update(seeds=16, rounds=5)
SIZES["cpu"].update(seeds=2, rounds=3)


def have_evosax() -> bool:
    try:
        import evosax  # noqa: F401
    except Exception:
        return False
    return True


def peak_mb(compiled) -> float | None:
    """XLA's estimate for one call: arguments + outputs + temporaries - aliased (donated), in MB."""
    mem = compiled.memory_analysis()
    if mem is None:
        return None
    total = mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes
    return (total - mem.alias_size_in_bytes) / 1e6


def largest_allocations(lowered, limit: int = 4) -> str:
    """The largest buffer allocations of ``lowered`` compiled once more with an XLA dump: XLA's own
    ``*memory-usage-report.txt`` (size and the shapes of the values sharing each allocation), so that
    memory beyond one population shows what holds it. Best effort: "n/a (...)" if no report."""
    with tempfile.TemporaryDirectory(prefix="xla-dump-") as tmp:
        try:
            lowered.compile(compiler_options={"xla_dump_to": tmp})
        except Exception as e:
            return f"n/a ({type(e).__name__}: {e})"[:300]
        reports = sorted(glob.glob(os.path.join(tmp, "*memory-usage-report.txt")), key=os.path.getsize)
        if not reports:
            return "n/a (no memory-usage-report in the dump)"
        with open(reports[-1]) as fh:  # the generation's module is the largest report
            lines = fh.read().splitlines()
    out = []
    for line in lines:
        parts = [p.strip() for p in line.split(";")]
        if len(parts) == 5 and parts[1] and parts[1][0].isdigit():  # cumulative; size; offset; n; shapes
            out.append(f"{parts[1]}: {parts[4]}")
            if len(out) == limit:
                break
    return " | ".join(out) or "n/a (report not parsed)"


def measured_bandwidth() -> float:
    """Bytes/s of ``x + 1`` over a 1 GiB float32 array (read + write counted), median of 10."""
    x = jnp.zeros((2**28,), jnp.float32)
    f = jax.jit(lambda x: x + 1.0)
    jax.block_until_ready(f(x))
    times = []
    for _ in range(10):
        t0 = time.perf_counter()
        jax.block_until_ready(f(x))
        times.append(time.perf_counter() - t0)
    return 2 * x.size * 4 / statistics.median(times)


def _alternate(runners: dict, rounds: int) -> dict[str, list[float]]:
    """Seconds of each runner's runs, alternating A B A B ... for ``rounds`` rounds."""
    times = {name: [] for name in runners}
    for _ in range(rounds):
        for name, run in runners.items():
            t0 = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - t0)
    return times


# ---- OpenAI-ES ----------------------------------------------------------------------------------


def _openai_es_runner(build, gens: int):
    """(compile_s, compiled, largest allocations, run, box) for one implementation's generation; ``run``
    does ``gens`` generations, ``box`` holds the state and the last best fitness."""
    generation, state = build()
    step = jax.jit(generation, donate_argnums=0)
    key = jax.random.key(1)
    t0 = time.perf_counter()
    lowered = step.lower(state, key)
    compiled = lowered.compile()
    compile_s = time.perf_counter() - t0
    allocations = largest_allocations(lowered)
    box = {"state": state, "g": 0, "best": None}

    def run():
        state, best = box["state"], None
        for _ in range(gens):
            state, best = compiled(state, jax.random.fold_in(key, box["g"]))
            box["g"] += 1
        jax.block_until_ready((state, best))
        box["state"], box["best"] = state, best

    run()  # warm-up
    return compile_s, compiled, allocations, run, box


def openai_es(mode: str) -> list[dict]:
    cfg = SIZES[mode]
    d, pop, gens = cfg["oes_dims"], cfg["oes_pop"], cfg["oes_gens"]
    builds = {
        "evotensor": lambda: es_openes.build_evotensor(d, pop),
        "evotensor-regen": lambda: es_openes.build_evotensor(d, pop, regenerate_noise=True),
    }
    if have_evosax():
        builds["evosax"] = lambda: es_openes.build_evosax(d, pop)
    gpu = mode == "gpu" and jax.default_backend() == "gpu"
    floor = 2 * pop * d * 4
    bandwidth = measured_bandwidth() if gpu else None
    case = f"openai-es d={d} pop={pop}"
    rows, runners, info = [], {}, {}
    for name, build in builds.items():
        try:
            compile_s, compiled, allocations, run, box = _openai_es_runner(build, gens)
        except Exception as e:  # e.g. an evosax API change: keep the other rows
            rows.append(dict(family="es", case=case, impl=name, error=f"{type(e).__name__}: {e}"[:500]))
            continue
        runners[name] = run
        info[name] = (compile_s, compiled, allocations, box)
    times = _alternate(runners, cfg["rounds"])
    for name, (compile_s, compiled, allocations, box) in info.items():
        per_gen = [1e3 * t / gens for t in times[name]]
        rows.append(
            dict(
                family="es",
                case=case,
                impl=name,
                compile_s=round(compile_s, 3),
                ms_per_gen=round(statistics.median(per_gen), 4),
                ms_per_gen_min=round(min(per_gen), 4),
                peak_mb=None if peak_mb(compiled) is None else round(peak_mb(compiled), 1),
                population_mb=round(pop * d * 4 / 1e6, 1),
                floor_ms=round(1e3 * floor / ASSUMED_BANDWIDTH, 4) if gpu else None,
                floor_note="assumed 4.3e12 B/s" if gpu else None,
                floor_ms_measured=round(1e3 * floor / bandwidth, 4) if bandwidth else None,
                measured_gbs=round(bandwidth / 1e9, 1) if bandwidth else None,
                best_fitness=float(box["best"]),
                largest_allocations=allocations,
                rounds=cfg["rounds"],
                gens_per_run=gens,
                backend=jax.default_backend(),
            )
        )
    return rows


# ---- CMA-ES -------------------------------------------------------------------------------------


def _cma_run_fn(impl: str, d: int, pop: int, gens: int):
    """``run(key) -> [gens]`` best fitness per generation of one whole run, the es_cma.py settings."""
    if impl == "evotensor":
        from evotensor.es import CMAES

        es = CMAES(pop, num_dims=d, sigma_init=2.0, mean_init=[3.0] * d)
        params = es.default_params()
        init = lambda key: es.init(key, params)
        tell = lambda k, state, x, f: es.tell(k, state, x, f, params)
    else:
        from evosax.algorithms import CMA_ES

        es = CMA_ES(population_size=pop, solution=jnp.zeros(d))
        params = es.default_params.replace(std_init=2.0)
        init = lambda key: es.init(key, jnp.full(d, 3.0), params)
        tell = lambda k, state, x, f: es.tell(k, x, f, state, params)

    def run(key):
        def step(state, k):
            k1, k2 = jax.random.split(k)
            x, state = es.ask(k1, state, params)
            f = rastrigin_jax(jnp, x)
            state, _ = tell(k2, state, x, f)
            return state, jnp.min(f)

        return jax.lax.scan(step, init(key), jax.random.split(key, gens))[1]

    return run


def cma_es(mode: str) -> list[dict]:
    cfg = SIZES[mode]
    d, pop, gens, seeds = cfg["cma_dims"], cfg["cma_pop"], cfg["cma_gens"], cfg["seeds"]
    # evosax-highest: evosax with float32 matmuls at HIGHEST precision, as evotensor's CMA-ES runs them
    # (JAX's default on a GPU is TF32): the like-for-like comparison
    impls = ["evotensor"] + (["evosax", "evosax-highest"] if have_evosax() else [])
    rows = []
    for batched in (False, True):
        case = f"cma-es d={d} pop={pop}" + (f" x{seeds} seeds (vmap)" if batched else "")
        key = jax.random.key(0)
        arg = jax.random.split(key, seeds) if batched else key
        runners, info = {}, {}
        for impl in impls:
            try:
                fn = _cma_run_fn(impl.removesuffix("-highest"), d, pop, gens)
                fn = jax.jit(jax.vmap(fn) if batched else fn)
                highest = impl.endswith("-highest")
                t0 = time.perf_counter()
                with jax.default_matmul_precision("highest") if highest else contextlib.nullcontext():
                    lowered = fn.lower(arg)
                compiled = lowered.compile()
                compile_s = time.perf_counter() - t0
                allocations = largest_allocations(lowered) if batched and mode == "gpu" else None
                box = {"best": jax.block_until_ready(compiled(arg))}  # warm-up
            except Exception as e:
                rows.append(dict(family="es", case=case, impl=impl, error=f"{type(e).__name__}: {e}"[:500]))
                continue

            def run(compiled=compiled, box=box, arg=arg):
                box["best"] = jax.block_until_ready(compiled(arg))

            runners[impl] = run
            info[impl] = (compile_s, compiled, box, allocations)
        times = _alternate(runners, cfg["rounds"])
        for impl, (compile_s, compiled, box, allocations) in info.items():
            per_gen = [1e3 * t / gens for t in times[impl]]
            last = np.asarray(box["best"])[..., -1]  # the last generation's best (per seed)
            rows.append(
                dict(
                    family="es",
                    case=case,
                    impl=impl,
                    compile_s=round(compile_s, 3),
                    ms_per_gen=round(statistics.median(per_gen), 4),
                    ms_per_gen_min=round(min(per_gen), 4),
                    peak_mb=None if peak_mb(compiled) is None else round(peak_mb(compiled), 3),
                    floor_ms=None,
                    best_fitness=float(np.median(last)),
                    largest_allocations=allocations,
                    rounds=cfg["rounds"],
                    gens_per_run=gens,
                    backend=jax.default_backend(),
                )
            )
    return rows


def run(mode: str) -> list[dict]:
    """All ES rows (flat dicts) for ``mode`` ``"gpu"`` (the issue's sizes) or ``"cpu"`` (tiny)."""
    if mode not in SIZES:
        raise ValueError(f"mode must be 'gpu' or 'cpu', got {mode!r}")
    rows = []
    for part in (openai_es, cma_es):
        t0 = time.perf_counter()
        try:
            new = part(mode)
        except Exception as e:  # a broken part must not hide the other's figures
            new = [dict(family="es", case=part.__name__, error=f"{type(e).__name__}: {e}"[:2000])]
        rows.extend(new)
        for r in new:  # as they come, so a run cut short still shows them
            print(json.dumps(r, default=str), flush=True)
        print(f"[es] {part.__name__}: {time.perf_counter() - t0:.1f} s", flush=True)
    return rows


if __name__ == "__main__":
    run(sys.argv[1] if len(sys.argv) > 1 else ("gpu" if jax.default_backend() == "gpu" else "cpu"))
