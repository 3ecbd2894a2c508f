"""How the NEAT benchmarks time and size a compiled JAX program, the same way in every venv.

Only JAX and the standard library: the anchors' scripts (``neat_anchor_tensorneat.py``, run in
TensorNEAT's venv) import it too, so both sides of a side-by-side row are measured by one piece of
code.
"""

from __future__ import annotations

import statistics
import time

import jax

MIB = 2**20


def memory_mib(compiled) -> dict:
    """XLA's memory figures of a compiled program (``compiled.memory_analysis()``), in MiB:
    ``temp_mib`` (scratch buffers), ``args_out_mib`` (arguments + outputs, aliased bytes counted
    once) and ``peak_mib`` where the backend reports a peak. ``{}`` where it gives none."""
    try:
        m = compiled.memory_analysis()
    except Exception:  # noqa: BLE001 (not every backend gives one)
        return {}
    if m is None:
        return {}
    out = {
        "temp_mib": round(m.temp_size_in_bytes / MIB, 2),
        "args_out_mib": round(
            (m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes) / MIB, 2
        ),
    }
    peak = getattr(m, "peak_memory_in_bytes", None)
    if peak:
        out["peak_mib"] = round(peak / MIB, 2)
    return out


def timed(compiled, *args, repeats: int = 5) -> tuple[float, float]:
    """``(median wall s, median process CPU s)`` of ``repeats`` calls of ``compiled(*args)``, each
    waited for (``jax.block_until_ready``); a first call is made and left out."""
    jax.block_until_ready(compiled(*args))
    walls, cpus = [], []
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        jax.block_until_ready(compiled(*args))
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return statistics.median(walls), statistics.median(cpus)


def compiled_with_time(fn, *args):
    """``(jax.jit(fn).lower(*args).compile(), wall seconds that took)``."""
    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    return compiled, time.perf_counter() - t0


def figures(name: str, compiled, compile_s: float, *args, repeats: int = 5) -> dict:
    """The record fields of one compiled program ``name`` run on ``args``: ``<name>_compile_s``,
    ``<name>_ms`` and ``<name>_cpu_ms`` (:func:`timed`) and its :func:`memory_mib` figures."""
    wall, cpu = timed(compiled, *args, repeats=repeats)
    out = {f"{name}_compile_s": compile_s, f"{name}_ms": 1e3 * wall, f"{name}_cpu_ms": 1e3 * cpu}
    out.update({f"{name}_{k}": v for k, v in memory_mib(compiled).items()})
    return out
