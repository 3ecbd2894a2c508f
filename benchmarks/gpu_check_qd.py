"""QD section of the one-command GPU check (``benchmarks/gpu_check.py``): MAP-Elites throughput over
batch sizes, the novelty archives' insertion (proximity, DNS), ME-ES generations, and MAP-Elites over
NEAT genomes and GP trees, multi-objective MAP-Elites (MOME), OMG-MEGA and multi-task MAP-Elites.

Case ``map-elites arm 100x100``: the ``qd-arm`` task's search (``evotensor.qd.tasks``: Iso+LineDD
with iso_sigma 0.01, line_sigma 0.2 from the arm stretched straight, genotypes clipped to [0, 1]) on
the 100-joint planar arm (``evotensor.problems.qd.Arm``), with a 100 x 100 grid over the end
position as in ``benchmarks/qd_map_elites.py``; QD score offset -1 (each elite adds 0.5..1).

For each batch size (mode ``"gpu"``: 256, 1024, ..., 4194304; ``"cpu"``: 64, 256), one generation is
``evotensor.core.run.Loop.step`` (ask, evaluate, tell, best-so-far: exactly a generation of
``evotensor.run``), jitted with the run state donated:

* ``compile_s``: ``lower(...).compile()`` of that generation, timed on its own;
* ``ms_per_gen``: the median over the generations after the first ``WARMUP`` of one call plus
  ``jax.block_until_ready`` (so it includes one dispatch and one host sync per generation, which
  ``evotensor.run``'s compiled chunks of generations avoid);
* ``evals_per_s``: ``batch / ms_per_gen``;
* ``coverage`` and ``qd_score`` (pyribs' definitions, ``GridArchive.stats``) after ``generations``
  generations from ``jax.random.key(0)``. Bigger batches evaluate more per generation, so quality
  grows with the batch at a fixed generation count.

Case ``novelty add`` (section ``qd-novelty``): ``ProximityArchive.add`` (``k_neighbors=15``, novelty
threshold 0.002, local competition on; measures uniform in [0, 1]^2, solution_dim 10) of ``adds``
batches into an archive of ``capacity`` rows that starts empty, jitted with the state donated:
``compile_s``, ``ms_per_add`` (median), ``adds_per_s`` in candidates per second, and the elites at
the end (its cost grows with the archive: every candidate is compared with every stored measure).
Sizes: ``"gpu"`` batch 1024 and 8192 into 100,000 rows; ``"cpu"`` batch 256 into 2,000 rows.
``benchmarks/qd_novelty.py`` sets it beside pyribs on a CPU.

Case ``dns add`` (section ``qd-dns``): ``DNSArchive.add`` (``k_neighbors=3``; the same candidate
stream as ``novelty add``) of ``adds`` batches into a population of ``capacity`` members: every add
scores ``capacity + batch`` competitors against each other (quadratic). Sizes: ``"gpu"`` batch 1024
into 4096 and 4096 into 16,384; ``"cpu"`` 64 into 256. ``benchmarks/qd_novelty.py --archive dns``
sets it beside pyribs on a CPU.

Case ``me-es arm 64x64`` (section ``qd-mees``): ME-ES (``MEESEmitter``, QDax's defaults, explore
and exploit alternating every 10 steps, novelty archive of 1000 rows) on the same arm, a 64 x 64
grid: ``samples`` ES samples per generation (``"gpu"``: 1000 and 10,000; ``"cpu"``: 100), compile,
``ms_per_gen`` (median over explore and exploit steps), ``evals_per_s`` (the samples and the
offspring), the elites after ``generations``. ``benchmarks/qd_mees.py`` sets it beside QDax on a
CPU.

Cases ``neat map-elites xor`` and ``gp map-elites pagie`` (section ``qd-genotypes``): MAP-Elites over
genotypes of another family, an archive of NEAT genomes (the ``neat-map-elites`` task: ``NEATEmitter``
on XOR, one cell per network size) and of GP trees (``sr-map-elites``: ``GPEmitter`` on Pagie-1, one
cell per tree length and depth), at ``batch`` children per generation (``"gpu"``: 1024 and 8192;
``"cpu"``: 64): compile, ``ms_per_gen`` (median), ``evals_per_s``, the elites and the best objective
after ``generations``.

Cases ``pga-me <task>`` and ``dcrl-me <task>`` (section ``qd-pgame``): PGA-ME and DCRL-ME, the
``qd-brax`` task with ``emitter=pga`` / ``dcrl`` (QDax's example sizes: walker2d_uni, episodes of
250 steps, 256-256 policies and critic; PGA-ME 100 PG steps per elite and 300 critic steps per
generation, DCRL-ME 150 and 3000) at ``batch`` policies per generation (``"gpu"``: PGA-ME 100 and
1000, DCRL-ME 256; ``"cpu"``: 6 and 8 on a tiny hopper): compile, ``ms_per_gen`` (median),
``evals_per_s``, the elites and the QD score after ``generations``; a ``skipped`` row without brax.
``benchmarks/qd_pgame.py`` sets it beside QDax on a CPU.

Case ``mome rastrigin`` (section ``qd-mome``): the ``qd-mome`` task (QDax's MOME example: a Pareto
front of up to 50 per CVT cell, 64 cells, the 100-d two-objective Rastrigin) at ``batch`` children
per generation (``"gpu"``: 100, 1024, 8192; ``"cpu"``: 32 on a 10-d task with 16 cells and fronts
of 8): compile, ``ms_per_gen`` (median), ``evals_per_s``, the solutions stored and the MOQD score
after ``generations``. ``benchmarks/qd_mome.py`` sets it beside QDax on a CPU (QDax inserts a batch
one candidate after another).

Case ``omg-mega rastrigin-proj`` (section ``qd-omg-mega``): the ``qd-omg-mega`` task (QDax's OMG-MEGA
example: the 1000-d Rastrigin-proj, a 100 x 100 grid, gradients by ``jax.jacrev`` at every parent)
at ``batch`` children per generation (``"gpu"``: 36, 1024, 8192; ``"cpu"``: 8 on a 20-d task with
a 20 x 20 grid): compile, ``ms_per_gen`` (median), ``evals_per_s``, coverage and the best fitness
after ``generations``. ``benchmarks/qd_omg_mega.py`` sets it beside QDax on a CPU.

Case ``me-ls noisy arm`` (section ``qd-mels``): the ``qd-noisy-arm`` task (ME-LS on QDax's noisy
8-joint arm, each solution evaluated 5 times) at ``batch`` solutions per generation (``"gpu"``: 64,
1024, 8192; ``"cpu"``: 16 on a 4-joint arm with an 8 x 8 grid): compile, ``ms_per_gen`` (median),
``evals_per_s`` (every evaluation), the elites and their mean spread after ``generations``.
``benchmarks/qd_mels.py`` sets ME-LS beside QDax's on a brax task on a CPU.

Case ``dds sphere`` (section ``qd-dds``): the ``qd-dds`` task (Density Descent Search with pyribs'
sphere example setup: 15 CMA-ES emitters ranked by a Gaussian KDE over 10,000 buffered measures,
the 100-d linear-projection sphere, a 100 x 100 result grid) at ``batch`` solutions per emitter
(``"gpu"``: 36, 2048; ``"cpu"``: 8 with 2 emitters on a 10-d task, a 10 x 10 grid and 200
buffered measures): compile, ``ms_per_gen`` (median), ``evals_per_s``, the result archive's
coverage and best objective after ``generations``. ``benchmarks/qd_dds.py`` sets it beside pyribs
on a CPU.

Case ``dms sphere`` (section ``qd-dms``): the ``qd-dms`` task (Discount Model Search with the DMS
paper's ``sphere_100d`` setup: 15 CMA-ES emitters ranked by improvement over a 128 x 128 ReLU
discount network trained every generation by minibatches of 32, the 100-d linear-projection sphere,
a 100 x 100 result grid) at ``batch`` solutions per emitter (``"gpu"``: 36, 2048; ``"cpu"``: 8 with
2 emitters on a 10-d task and a 10 x 10 grid): the same figures as ``dds sphere``.
``benchmarks/qd_dms.py`` sets it beside pyribs on a CPU.

Case ``multi-task arm`` (section ``qd-multitask``): the ``qd-multitask-arm`` task (multi-task
MAP-Elites with pymap_elites' example setup: 5000 tasks of the 10-joint arm, SBX, the bandit-sized
tournament) at ``batch`` children per generation (``"gpu"``: 100, 1024, 16384; ``"cpu"``: 32 on 100
tasks): compile, ``ms_per_gen`` (median), ``evals_per_s``, the tasks filled and the mean fitness
over them after ``generations``. ``benchmarks/qd_multitask.py`` sets it beside pymap_elites on a CPU.

In ``"gpu"`` mode the sweep stops at the first batch size whose evaluations/s are below
``PLATEAU_GAIN`` x the best so far (the throughput has plateaued), or once ``BUDGET_S`` seconds of
timed generations have passed. Needs only the project's own packages.

    .venv/bin/python benchmarks/gpu_check_qd.py cpu      # or gpu; prints one JSON row per line
    # from Python: sys.path.insert(0, "benchmarks"); import gpu_check_qd; rows = gpu_check_qd.run("cpu")
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any

import jax
import numpy as np

from evotensor.core.run import Loop
from evotensor.problems.qd import Arm
from evotensor.qd import DNSArchive, GridArchive, IsoLineEmitter, MAPElites, MEESEmitter, ProximityArchive

CASE = "map-elites arm 100x100"
JOINTS, CELLS = 100, (100, 100)
ISO_SIGMA, LINE_SIGMA = 0.01, 0.2  # the qd-arm task's (pyribs' defaults)
QD_OFFSET = -1.0
WARMUP = 2  # generations left out of the median (first calls, allocator warm-up)
PLATEAU_GAIN = 1.1
SIZES = {
    "gpu": dict(
        batches=(256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304), generations=100, budget_s=40.0
    ),
    "cpu": dict(batches=(64, 256), generations=8, budget_s=30.0),
}
DNS = {"gpu": dict(sizes=((1024, 4096), (4096, 16384)), adds=20), "cpu": dict(sizes=((64, 256),), adds=4)}
MEES = {"gpu": dict(samples=(1000, 10000), generations=60), "cpu": dict(samples=(100,), generations=12)}
GENOTYPES = {"gpu": dict(batches=(1024, 8192), generations=20), "cpu": dict(batches=(64,), generations=6)}
GENOTYPE_TASKS = {"neat map-elites xor": "neat-map-elites", "gp map-elites pagie": "sr-map-elites"}
# qd-mome: the task's setup (QDax's MOME example) at these batches; the CPU mode shrinks the task
MOME = {
    "gpu": dict(batches=(100, 1024, 8192), generations=30, task={}),
    "cpu": dict(batches=(32,), generations=6, task={"dims": 10, "cells": 16, "front_size": 8}),
}
# qd-pgame: the qd-brax task's PGA-ME (QDax's PGAME example sizes on walker2d_uni); the CPU mode a
# tiny hopper
PGAME = {
    "gpu": dict(
        batches=(100, 1000),
        generations=10,
        task={"env": "walker2d_uni", "hidden": "256,256"},
        dcrl_batches=(256,),  # DCRL-ME at QDax's example batch (128 + 64 + 64)
    ),
    "cpu": dict(
        batches=(6,),
        dcrl_batches=(8,),
        generations=3,
        task={
            "env": "hopper_uni",
            "episode_length": 5,
            "hidden": "4",
            "critic_hidden": "8",
            "pg_steps": 2,
            "critic_steps": 4,
            "buffer": 500,
            "transitions_batch": 16,
        },
    ),
}
# qd-omg-mega: the qd-omg-mega task (QDax's OMG-MEGA example, 1000-d) at these batches
OMG_MEGA = {
    "gpu": dict(batches=(36, 1024, 8192), generations=30, task={}),
    "cpu": dict(batches=(8,), generations=6, task={"dims": 20, "cells": 20}),
}
# qd-multitask: the qd-multitask-arm task (pymap_elites' example) at these batches
MULTITASK = {
    "gpu": dict(batches=(100, 1024, 16384), generations=30, task={}),
    "cpu": dict(batches=(32,), generations=6, task={"tasks": 100, "cvt_samples": 2000}),
}
# qd-mels: the qd-noisy-arm task (ME-LS, 5 evaluations per solution) at these batches of solutions
MELS = {
    "gpu": dict(batches=(64, 1024, 8192), generations=30, task={"reevals": 0}),
    "cpu": dict(batches=(16,), generations=6, task={"joints": 4, "cells": 8, "reevals": 0}),
}
# qd-dms: the qd-dms task (the DMS paper's sphere_100d) at these batches per emitter
DMS = {
    "gpu": dict(batches=(36, 2048), generations=30, task={}),
    "cpu": dict(batches=(8,), generations=6, task={"dims": 10, "cells": 10, "emitters": 2}),
}
# qd-dds: the qd-dds task (pyribs' sphere example "dds") at these batches per emitter
DDS = {
    "gpu": dict(batches=(36, 2048), generations=30, task={}),
    "cpu": dict(batches=(8,), generations=6, task={"dims": 10, "cells": 10, "emitters": 2, "buffer": 200}),
}
NOVELTY = {
    "gpu": dict(batches=(1024, 8192), capacity=100_000, adds=30),
    "cpu": dict(batches=(256,), capacity=2_000, adds=6),
}


def _arm_archive(problem: Arm) -> GridArchive:
    return GridArchive(
        solution_dim=problem.num_dims, dims=CELLS, ranges=problem.descriptor_ranges, qd_score_offset=QD_OFFSET
    )


def _generation_row(
    section: str, case: str, batch: int, generations: int, compile_s: float, ms_per_gen: float
) -> dict:
    """The fields every per-generation row shares (section, case, sizes, compile, speed)."""
    return {
        "family": "qd",
        "section": section,
        "case": case,
        "batch": batch,
        "generations": generations,
        "compile_s": round(compile_s, 3),
        "ms_per_gen": round(ms_per_gen, 4),
        "evals_per_s": round(batch / (ms_per_gen / 1e3)),
    }


def _timed_generations(
    strategy: MAPElites, problem: Any, generations: int, seed: int, decoder: Any = None
) -> tuple:
    """``(compile_s, ms_per_gen, times, final carry)`` of ``generations`` generations of
    ``Loop.step`` (one generation of ``evotensor.run``), jitted with the state donated."""
    loop = Loop(strategy, problem, decoder=decoder)
    params = loop.strategy.default_params()
    carry, loop_key = loop.init(jax.random.key(seed), params)
    carry = jax.block_until_ready(carry)

    t0 = time.perf_counter()
    step = jax.jit(loop.step, donate_argnums=0).lower(carry, loop_key, params).compile()
    compile_s = time.perf_counter() - t0

    times = []
    for _ in range(generations):
        t0 = time.perf_counter()
        carry, _ = step(carry, loop_key, params)
        jax.block_until_ready(carry)
        times.append(time.perf_counter() - t0)
    ms_per_gen = 1e3 * statistics.median(times[WARMUP:] if len(times) > WARMUP else times)
    return compile_s, ms_per_gen, times, carry


def measure(batch: int, generations: int, seed: int = 0) -> dict:
    """One row: compile time, steady ms per generation, evaluations/s and quality after
    ``generations`` generations of MAP-Elites with ``batch`` candidates per generation."""
    problem = Arm(num_joints=JOINTS)
    archive = _arm_archive(problem)
    emitter = IsoLineEmitter(
        x0=np.full(problem.num_dims, 0.5, np.float32),
        iso_sigma=ISO_SIGMA,
        line_sigma=LINE_SIGMA,
        batch_size=batch,
        bounds=problem.bounds,
    )
    compile_s, ms_per_gen, times, carry = _timed_generations(
        MAPElites(archive, [emitter]), problem, generations, seed
    )
    stats = archive.stats(carry.strategy_state.archive)
    return {
        "family": "qd",
        "case": CASE,
        "batch": batch,
        "generations": generations,
        "compile_s": round(compile_s, 3),
        "ms_per_gen": round(ms_per_gen, 4),
        "evals_per_s": round(batch / (ms_per_gen / 1e3)),
        "coverage": round(float(stats["coverage"]), 4),
        "qd_score": round(float(stats["qd_score"]), 2),
        "timed_s": round(sum(times), 2),
        "backend": jax.default_backend(),
    }


def measure_mees(samples: int, generations: int, seed: int = 0) -> dict:
    """One ``qd-mees`` row: ME-ES (QDax's defaults but ``samples`` samples, explore and exploit
    alternating every 10 steps) on the arm: compile, ms per generation (the median over explore and
    exploit steps), evaluations/s, and the archive after ``generations`` generations."""
    problem = Arm(num_joints=JOINTS)
    archive = _arm_archive(problem)
    emitter = MEESEmitter(
        np.full(problem.num_dims, 0.5), num_samples=samples, novelty_capacity=1000, bounds=problem.bounds
    )
    compile_s, ms_per_gen, times, carry = _timed_generations(
        MAPElites(archive, [emitter]), problem, generations, seed
    )
    stats = archive.stats(carry.strategy_state.archive)
    return {
        "family": "qd",
        "section": "qd-mees",
        "case": "me-es arm 64x64",
        "samples": samples,
        "generations": generations,
        "compile_s": round(compile_s, 3),
        "ms_per_gen": round(ms_per_gen, 4),
        "evals_per_s": round(emitter.batch_size / (ms_per_gen / 1e3)),
        "elites": int(stats["num_elites"]),
        "qd_score": round(float(stats["qd_score"]), 2),
        "skipped": int(carry.strategy_state.emitters[0].skipped),
        "backend": jax.default_backend(),
    }


def _task_generations(
    section: str, case: str, task_name: str, batch: int, generations: int, options: dict, seed: int
) -> tuple[dict, Any, dict]:
    """``(row, strategy, archive stats)`` after ``generations`` generations of the registered task
    ``task_name`` (built with ``options`` and ``batch`` children per generation)."""
    from evotensor.tasks import get_task

    task = get_task(task_name).build({**options, "pop": batch})
    compile_s, ms_per_gen, times, carry = _timed_generations(
        task.strategy, task.problem, generations, seed, decoder=task.decoder
    )
    reported = getattr(task.strategy, "reported_archive", None)  # a result archive, where there is one
    archive, state = (
        reported(carry.strategy_state) if reported else (task.strategy.archive, carry.strategy_state.archive)
    )
    stats = archive.stats(state)
    row = _generation_row(section, case, batch, generations, compile_s, ms_per_gen)
    return {**row, "backend": jax.default_backend()}, task.strategy, stats


def measure_genotypes(case: str, batch: int, generations: int, seed: int = 0) -> dict:
    """One ``qd-genotypes`` row: ``generations`` generations of the MAP-Elites task of ``case``
    (:data:`GENOTYPE_TASKS`) with ``batch`` children per generation."""
    row, _, stats = _task_generations(
        "qd-genotypes", case, GENOTYPE_TASKS[case], batch, generations, {}, seed
    )
    return {**row, "elites": int(stats["num_elites"]), "obj_max": round(float(stats["obj_max"]), 4)}


def measure_mome(batch: int, generations: int, task_options: dict, seed: int = 0) -> dict:
    """One ``qd-mome`` row: ``generations`` generations of the ``qd-mome`` task (a Pareto front per
    CVT cell) with ``batch`` children per generation."""
    row, _, stats = _task_generations(
        "qd-mome", "mome rastrigin", "qd-mome", batch, generations, task_options, seed
    )
    return {**row, "solutions": int(stats["num_elites"]), "moqd_score": float(stats["moqd_score"])}


def measure_pgame(
    batch: int, generations: int, task_options: dict, seed: int = 0, algorithm: str = "pga"
) -> dict:
    """One ``qd-pgame`` row: ``generations`` generations of PGA-ME (the ``qd-brax`` task with
    ``emitter=pga``: half the batch improved along a TD3 critic, half Iso+LineDD) or DCRL-ME
    (``algorithm="dcrl"``) with ``batch`` policies per generation; a row saying so when brax is not
    installed."""
    case = f"{algorithm}-me {task_options['env']}"
    try:
        import brax  # noqa: F401 - optional dependency
    except ImportError:
        row = {"family": "qd", "section": "qd-pgame", "case": case, "batch": batch}
        return {**row, "skipped": "brax is not installed"}
    options = {**task_options, "emitter": algorithm}
    row, _, stats = _task_generations("qd-pgame", case, "qd-brax", batch, generations, options, seed)
    return {**row, "elites": int(stats["num_elites"]), "qd_score": float(stats["qd_score"])}


def measure_multitask(batch: int, generations: int, task_options: dict, seed: int = 0) -> dict:
    """One ``qd-multitask`` row: ``generations`` generations of the ``qd-multitask-arm`` task with
    ``batch`` children per generation."""
    row, strategy, stats = _task_generations(
        "qd-multitask", "multi-task arm", "qd-multitask-arm", batch, generations, task_options, seed
    )
    return {
        **row,
        "tasks": strategy.num_tasks,
        "filled": int(stats["num_elites"]),
        "mean_fitness": round(float(stats["obj_mean"]), 4),
    }


def measure_omg_mega(batch: int, generations: int, task_options: dict, seed: int = 0) -> dict:
    """One ``qd-omg-mega`` row: ``generations`` generations of the ``qd-omg-mega`` task (OMG-MEGA on
    Rastrigin-proj, gradients by ``jax.jacrev`` at every parent) with ``batch`` children per
    generation."""
    case = f"omg-mega rastrigin-proj {task_options.get('dims', 1000)}-d"
    row, _, stats = _task_generations(
        "qd-omg-mega", case, "qd-omg-mega", batch, generations, task_options, seed
    )
    return {
        **row,
        "coverage": round(float(stats["coverage"]), 4),
        "obj_max": round(float(stats["obj_max"]), 2),
    }


def _sphere_search(section: str, case: str, batch: int, generations: int, task_options: dict, seed: int):
    """``(row, strategy)``: ``generations`` generations of the task ``section`` (CMA-ES emitters on
    the linear-projection sphere searching a cell-less archive, a result grid) with ``batch``
    solutions per emitter (``evals_per_s`` counts every emitter's)."""
    row, strategy, stats = _task_generations(section, case, section, batch, generations, task_options, seed)
    row = {
        **row,
        "evals_per_s": round(strategy.population_size / (row["ms_per_gen"] / 1e3)),
        "emitters": strategy.emitters[0].n,
        "coverage": round(float(stats["coverage"]), 4),
        "obj_max": round(float(stats["obj_max"]), 4),
    }
    return row, strategy


def measure_dds(batch: int, generations: int, task_options: dict, seed: int = 0) -> dict:
    """One ``qd-dds`` row: the ``qd-dds`` task (Density Descent Search), its buffer size added."""
    row, strategy = _sphere_search("qd-dds", "dds sphere", batch, generations, task_options, seed)
    return {**row, "buffer": strategy.archive.buffer_size}


def measure_dms(batch: int, generations: int, task_options: dict, seed: int = 0) -> dict:
    """One ``qd-dms`` row: the ``qd-dms`` task (Discount Model Search: the discount network trained
    by minibatches of 32 inside every generation), its training minibatch size added."""
    row, strategy = _sphere_search("qd-dms", "dms sphere", batch, generations, task_options, seed)
    return {**row, "train_batch": strategy.archive.train_batch_size}


def measure_mels(batch: int, generations: int, task_options: dict, seed: int = 0) -> dict:
    """One ``qd-mels`` row: ``generations`` generations of the ``qd-noisy-arm`` task (ME-LS) with
    ``batch`` solutions per generation, each evaluated ``samples`` times (``evals_per_s`` counts
    every evaluation)."""
    row, strategy, stats = _task_generations(
        "qd-mels", "me-ls noisy arm", "qd-noisy-arm", batch, generations, task_options, seed
    )
    samples = strategy.archive.num_samples
    return {
        **row,
        "samples": samples,
        "evals_per_s": row["evals_per_s"] * samples,
        "elites": int(stats["num_elites"]),
        "spread_mean": round(float(stats["spread_mean"]), 4),
    }


def _timed_adds(archive: Any, batch: int, adds: int, seed: int) -> tuple[float, float, Any]:
    """``(compile_s, median ms per add, final state)`` of ``adds`` insertions of ``batch`` candidates
    (solution_dim 10, objectives N(0, 1), measures uniform in [0, 1]^2) into ``archive``, starting
    empty, ``add`` jitted with the state donated."""
    rng = np.random.default_rng(seed)
    data = [
        (
            rng.normal(size=(batch, 10)).astype(np.float32),
            rng.normal(size=batch).astype(np.float32),
            rng.uniform(0.0, 1.0, (batch, 2)).astype(np.float32),
        )
        for _ in range(adds)
    ]
    state = archive.init()
    t0 = time.perf_counter()
    add = jax.jit(archive.add, donate_argnums=0).lower(state, *data[0]).compile()
    compile_s = time.perf_counter() - t0
    times = []
    for x, f, m in data:
        t0 = time.perf_counter()
        state, info = add(state, x, f, m)
        jax.block_until_ready((state, info))
        times.append(time.perf_counter() - t0)
    return compile_s, 1e3 * statistics.median(times), state


def _add_row(
    section: str, case: str, batch: int, capacity: int, adds: int, compile_s: float, ms: float
) -> dict:
    return {
        "family": "qd",
        "section": section,
        "case": case,
        "batch": batch,
        "capacity": capacity,
        "adds": adds,
        "compile_s": round(compile_s, 3),
        "ms_per_add": round(ms, 4),
        "adds_per_s": round(batch / (ms / 1e3)),
    }


def measure_novelty(batch: int, capacity: int, adds: int, seed: int = 0) -> dict:
    """One ``qd-novelty`` row: ``adds`` insertions of ``batch`` candidates into a ProximityArchive."""
    archive = ProximityArchive(
        solution_dim=10,
        measure_dim=2,
        capacity=capacity,
        k_neighbors=15,
        novelty_threshold=0.002,
        local_competition=True,
    )
    compile_s, ms, state = _timed_adds(archive, batch, adds, seed)
    return {
        **_add_row("qd-novelty", "novelty add", batch, capacity, adds, compile_s, ms),
        "elites": int(state.occupied.sum()),
        "dropped": int(state.dropped),
        "backend": jax.default_backend(),
    }


def measure_dns(batch: int, capacity: int, adds: int, seed: int = 0) -> dict:
    """One ``qd-dns`` row: ``adds`` insertions of ``batch`` candidates into a DNSArchive of
    ``capacity`` members (``k_neighbors=3``)."""
    archive = DNSArchive(solution_dim=10, measure_dim=2, capacity=capacity, k_neighbors=3)
    compile_s, ms, state = _timed_adds(archive, batch, adds, seed)
    return {
        **_add_row("qd-dns", "dns add", batch, capacity, adds, compile_s, ms),
        "members": int(state.occupied.sum()),
        "backend": jax.default_backend(),
    }


def run(mode: str) -> list[dict]:
    """The QD rows for ``mode`` (``"gpu"``: real sizes; ``"cpu"``: tiny sizes, a few seconds)."""
    if mode not in SIZES:
        raise ValueError(f"mode must be 'gpu' or 'cpu', got {mode!r}")
    cfg = SIZES[mode]
    rows: list[dict] = []
    best = 0.0
    spent = 0.0
    for batch in cfg["batches"]:
        row = measure(batch, cfg["generations"])
        rows.append(row)
        spent += row["timed_s"]
        if mode == "gpu" and rows[:-1] and row["evals_per_s"] < PLATEAU_GAIN * best:
            row["note"] = f"plateau: < {PLATEAU_GAIN} x the best evaluations/s so far; sweep stopped"
            break
        best = max(best, row["evals_per_s"])
        if spent > cfg["budget_s"]:
            row["note"] = f"time budget ({cfg['budget_s']} s of timed generations) spent; sweep stopped"
            break
    novelty = NOVELTY[mode]
    for batch in novelty["batches"]:
        rows.append(measure_novelty(batch, novelty["capacity"], novelty["adds"]))
    dns = DNS[mode]
    for batch, capacity in dns["sizes"]:
        rows.append(measure_dns(batch, capacity, dns["adds"]))
    mees = MEES[mode]
    for samples in mees["samples"]:
        rows.append(measure_mees(samples, mees["generations"]))
    mome = MOME[mode]
    for batch in mome["batches"]:
        rows.append(measure_mome(batch, mome["generations"], mome["task"]))
    omg = OMG_MEGA[mode]
    for batch in omg["batches"]:
        rows.append(measure_omg_mega(batch, omg["generations"], omg["task"]))
    multitask = MULTITASK[mode]
    for batch in multitask["batches"]:
        rows.append(measure_multitask(batch, multitask["generations"], multitask["task"]))
    dds = DDS[mode]
    for batch in dds["batches"]:
        rows.append(measure_dds(batch, dds["generations"], dds["task"]))
    dms = DMS[mode]
    for batch in dms["batches"]:
        rows.append(measure_dms(batch, dms["generations"], dms["task"]))
    mels = MELS[mode]
    for batch in mels["batches"]:
        rows.append(measure_mels(batch, mels["generations"], mels["task"]))
    pgame = PGAME[mode]
    for batch in pgame["batches"]:
        rows.append(measure_pgame(batch, pgame["generations"], pgame["task"]))
    for batch in pgame["dcrl_batches"]:
        rows.append(measure_pgame(batch, pgame["generations"], pgame["task"], algorithm="dcrl"))
    genotypes = GENOTYPES[mode]
    for case in GENOTYPE_TASKS:
        for batch in genotypes["batches"]:
            rows.append(measure_genotypes(case, batch, genotypes["generations"]))
    return rows


if __name__ == "__main__":
    for r in run(sys.argv[1] if len(sys.argv) > 1 else ("gpu" if jax.default_backend() == "gpu" else "cpu")):
        print(json.dumps(r), flush=True)
