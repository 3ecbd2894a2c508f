"""Multi-objective MAP-Elites: evotensor's ``MOMEArchive`` under ``MAPElites`` beside QDax's ``MOME``,
like for like (run by hand).

Setup of QDax's ``examples/mome.ipynb``: the two-objective Rastrigin (100-d, optima at 0 and 2.2,
box [-2, 4]; descriptors the first two genes), 64 CVT cells (the same centroids in both: our
k-means of 20,000 samples, handed to QDax), Pareto fronts of up to 50, batch 100 of gene-swap
crossovers (half the genes drawn with replacement; QDax's ``polynomial_crossover`` with
``variation_percentage`` 1), a first batch uniform in the box (the same NumPy draw in both), 1000
generations in one compiled scan.

* ``run``: compile s and run s of the whole run, seeds 0-2, the engines alternating. QDax runs
  with its ``default_moqd_metrics`` (as its example; a global Pareto front per generation) and
  again with no metrics, to separate its insertion from its metrics. Quality is measured on both
  final archives by the same code (ours, float64-free exact hypervolume): the MOQD score (sum of
  the cells' hypervolumes), the global hypervolume, solutions stored, coverage; reference point
  the box's worst objective values (QDax's example uses (-150, -150), which no point of the
  100-d task reaches, so every hypervolume would be 0).
* ``add``: one ``add`` of B candidates (B 100, 1024, 4096) into an archive of 64 cells x 50 or
  1024 cells x 10 already holding sparse fronts (of random points of the task) or full ones (the
  steady state of a long run: every add truncates; see ``prefilled``), both jitted ahead of time,
  each repeat on a fresh copy: ms per add (median of 7), compile s, and the solutions stored
  afterwards (the same in both when they keep the same fronts: with full fronts they differ, as
  QDax keeps the first points and we the least crowded).

QDax runs in the ``qd`` venv of ``bench_venvs.py`` (``make bench-venvs VENVS=qd``), this script
calling itself there with ``--impl qdax``.

    .venv/bin/python benchmarks/qd_mome.py            # both parts
    .venv/bin/python benchmarks/qd_mome.py --part add
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Any

import numpy as np

DIMS, LOW, HIGH, LAG = 100, -2.0, 4.0, 2.2
CELLS, FRONT, BATCH, GENERATIONS = 64, 50, 100, 1000
SEEDS = (0, 1, 2)
ADD_CASES = (
    (64, 50, 100, "random"),
    (64, 50, 1024, "random"),
    (64, 50, 4096, "random"),
    (1024, 10, 1024, "random"),
    (1024, 10, 4096, "random"),
    (64, 50, 100, "full"),
    (64, 50, 1024, "full"),
    (1024, 10, 1024, "full"),
)
REPEATS = 7


def centroids(cells: int) -> np.ndarray:
    """The CVT centroids both engines use (our k-means, computed in the main venv)."""
    import jax

    from evotensor.qd import kmeans_centroids

    c, _ = kmeans_centroids(jax.random.key(0), cells, [(LOW, HIGH)] * 2, samples=20_000)
    return np.asarray(c, np.float32)


def first_batch(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(LOW, HIGH, (BATCH, DIMS)).astype(np.float32)


def rastrigin_pair(jnp, x):
    """The two objectives (maximized) of QDax's MOME example, ``[n, 2]``."""

    def r(z):
        return -(10 * z.shape[1] + jnp.sum(z**2 - 10 * jnp.cos(2 * jnp.pi * z), axis=1))

    return jnp.stack([r(x), r(x - LAG)], axis=-1)


# -- evotensor ---------------------------------------------------------------------------------
def reference_point() -> list[float]:
    from evotensor.problems.qd import MORastrigin

    return [worst for worst, _ in MORastrigin(num_dims=DIMS).fitness_range]


def our_archive(cells: np.ndarray, front: int):
    from evotensor.qd import CVTArchive, MOMEArchive

    cvt = CVTArchive(solution_dim=DIMS, centroids=cells, ranges=[(LOW, HIGH)] * 2)
    return MOMEArchive(cvt, num_objectives=2, front_size=front, reference_point=reference_point())


def quality(objective: np.ndarray, occupied: np.ndarray) -> dict:
    """The same figures for both engines' final fronts ``[C, P, 2]``, by evotensor's hypervolume."""
    import jax

    from evotensor.core.pareto import hypervolume

    reference = -np.asarray(reference_point(), np.float32)
    loss = -np.where(occupied[..., None], objective, 0.0).astype(np.float32)
    per_cell = jax.vmap(hypervolume, in_axes=(0, 0, None))(loss, occupied, reference)
    whole = hypervolume(loss.reshape(-1, 2), occupied.reshape(-1), reference)
    return {
        "moqd_score": float(np.sum(per_cell)),
        "global_hv": float(whole),
        "solutions": int(occupied.sum()),
        "coverage": float(occupied.any(axis=1).mean()),
    }


def run_evotensor(seed: int, cells: np.ndarray) -> dict:
    import jax
    import jax.numpy as jnp

    import evotensor
    from evotensor.problems.qd import MORastrigin
    from evotensor.qd import GeneSwapCrossover, MAPElites, MixingEmitter

    emitter = MixingEmitter(
        np.full(DIMS, 1.0),
        crossover=GeneSwapCrossover(proportion=0.5),
        crossover_fraction=1.0,
        batch_size=BATCH,
        bounds=(LOW, HIGH),
        initial_solutions=first_batch(seed),
    )
    archive = our_archive(cells, FRONT)
    problem = MORastrigin(num_dims=DIMS)
    assert np.allclose(
        np.asarray(problem.evaluate(None, jnp.ones((2, DIMS))).fitness),
        rastrigin_pair(jnp, jnp.ones((2, DIMS))),
    )
    result = evotensor.run(
        MAPElites(archive, [emitter]), problem, generations=GENERATIONS, key=jax.random.key(seed)
    )
    state = result.state.archive
    return {
        "compile_s": result.compile_seconds,
        "run_s": result.run_seconds,
        **quality(np.asarray(state.objective), np.asarray(state.occupied)),
    }


def add_evotensor(cells_n: int, front: int, batch: int, kind: str, cells: np.ndarray) -> dict:
    import jax

    archive = our_archive(cells, front)
    state, candidates = prefilled(jax.jit(archive.add), archive.init(), cells_n, front, batch, kind)
    compile_s, ms, (out, _) = timed_adds(jax.jit(archive.add, donate_argnums=0), state, candidates)
    return {"compile_s": compile_s, "ms": ms, "solutions": int(np.asarray(out.occupied).sum())}


def timed_adds(add, state, candidates) -> tuple[float, list[float], Any]:
    """``(compile s, ms per add, last output)``: ``add`` (jitted, state donated) compiled ahead of
    time, then called on a fresh copy of ``state`` for each batch of ``candidates``."""
    import jax

    t = time.perf_counter()
    compiled = add.lower(state, *candidates[0]).compile()
    compile_s = time.perf_counter() - t
    ms = []
    for x, f, m in candidates:
        fresh = jax.block_until_ready(jax.tree_util.tree_map(lambda a: a.copy(), state))
        t = time.perf_counter()
        out = jax.block_until_ready(compiled(fresh, x, f, m))
        ms.append(1e3 * (time.perf_counter() - t))
    return compile_s, ms, out


def prefilled(add, state, cells_n: int, front: int, batch: int, kind: str):
    """The archive after some batches, and ``REPEATS`` batches to add, all drawn with NumPy from
    fixed seeds. ``random``: 4 batches of ``C P / 8`` random points of the task (sparse fronts).
    ``full``: 8 batches of ``C P / 4`` points on the line ``f0 + f1 = -2000`` (all non-dominated: the
    fronts fill up and overflow), then candidates near that line, about half of them entering (the
    steady state of a long run, where fronts are full and truncated at every add)."""
    import jax.numpy as jnp

    rng = np.random.default_rng(cells_n + front)

    def points(n: int, noise: float) -> tuple:
        x = rng.uniform(LOW, HIGH, (n, DIMS)).astype(np.float32)
        if kind == "random":
            return x, np.asarray(rastrigin_pair(jnp, jnp.asarray(x))), x[:, :2]
        a = rng.uniform(-1500, -500, n)
        f = np.stack([a, -2000 - a + rng.normal(0, noise, n)], axis=1).astype(np.float32)
        return x, f, x[:, :2]

    rounds, size = (4, cells_n * front // 8) if kind == "random" else (8, cells_n * front // 4)
    for _ in range(rounds):
        state, _ = add(state, *points(size, 0.0))
    return state, [points(batch, 5.0) for _ in range(REPEATS)]


# -- QDax (in its venv) ------------------------------------------------------------------------
def qdax_mome(front: int, metrics: bool):
    import functools

    import jax.numpy as jnp
    from qdax.core.emitters.mutation_operators import polynomial_crossover
    from qdax.core.emitters.standard_emitters import MixingEmitter
    from qdax.core.mome import MOME
    from qdax.utils.metrics import default_moqd_metrics

    def scoring(genotypes, key):
        return rastrigin_pair(jnp, genotypes), genotypes[:, :2], {}

    emitter = MixingEmitter(
        mutation_fn=lambda x, key: x,
        variation_fn=functools.partial(polynomial_crossover, proportion_var_to_change=0.5),
        variation_percentage=1.0,
        batch_size=BATCH,
    )
    metric = functools.partial(default_moqd_metrics, reference_point=jnp.asarray(reference_point_np()))
    return MOME(
        scoring, emitter, metric if metrics else (lambda repertoire: {}), pareto_front_max_length=front
    )


def reference_point_np() -> np.ndarray:
    """The reference point computed in the main venv and passed down (no evotensor in the qd venv)."""
    return np.asarray(json.loads(os.environ["MOME_REFERENCE"]), np.float32)


def run_qdax(seed: int, cells: np.ndarray, metrics: bool, out_path: str) -> dict:
    import jax

    mome = qdax_mome(FRONT, metrics)
    key = jax.random.PRNGKey(seed)
    repertoire, emitter_state, _ = mome.init(first_batch(seed), cells, key)

    def loop(repertoire, emitter_state, key):
        # the metrics are returned (as QDax's example keeps them), so XLA cannot drop their work
        (repertoire, emitter_state, key), metrics = jax.lax.scan(
            mome.scan_update, (repertoire, emitter_state, key), (), length=GENERATIONS - 1
        )
        return repertoire, metrics

    t = time.perf_counter()
    compiled = jax.jit(loop).lower(repertoire, emitter_state, key).compile()
    compile_s = time.perf_counter() - t
    t = time.perf_counter()
    repertoire, _ = jax.block_until_ready(compiled(repertoire, emitter_state, key))
    run_s = time.perf_counter() - t
    fitness = np.asarray(repertoire.fitnesses)
    occupied = np.all(fitness != -np.inf, axis=-1)
    np.savez(out_path, objective=np.where(occupied[..., None], fitness, 0.0), occupied=occupied)
    return {"compile_s": compile_s, "run_s": run_s}


def add_qdax(cells_n: int, front: int, batch: int, kind: str, cells: np.ndarray) -> dict:
    import jax
    from qdax.core.containers.mome_repertoire import MOMERepertoire

    def add(state, x, f, m):
        return state.add(x, m, f), None

    x0 = np.zeros((1, DIMS), np.float32)
    with warnings.catch_warnings():  # it warns that it stores no extra scores
        warnings.simplefilter("ignore")
        state = MOMERepertoire.init(x0, np.full((1, 2), -np.inf, np.float32), x0[:, :2], cells, front)
    state, candidates = prefilled(jax.jit(add), state, cells_n, front, batch, kind)
    add_jit = jax.jit(lambda s, x, f, m: s.add(x, m, f), donate_argnums=0)
    compile_s, ms, out = timed_adds(add_jit, state, candidates)
    solutions = int(np.all(np.asarray(out.fitnesses) != -np.inf, axis=-1).sum())
    return {"compile_s": compile_s, "ms": ms, "solutions": solutions}


# -- driver ------------------------------------------------------------------------------------
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--impl", choices=["both", "evotensor", "qdax"], default="both")
    p.add_argument("--part", choices=["run", "add", "both"], default="both")
    p.add_argument("--case", default=None, help="internal: JSON arguments of one QDax case")
    args = p.parse_args()
    if args.impl == "qdax":  # one case, in the qd venv
        case = json.loads(args.case)
        cells = np.asarray(case.pop("cells"), np.float32)
        if case.pop("part") == "run":
            print(json.dumps(run_qdax(case["seed"], cells, case["metrics"], case["out"])))
        else:
            out = add_qdax(case["cells_n"], case["front"], case["batch"], case["kind"], cells)
            print(json.dumps(out))
        return
    sys.path.insert(0, os.path.dirname(__file__))
    from bench_venvs import machine, venv_python

    qdax_python = venv_python("qd")
    use_qdax = args.impl == "both" and os.path.exists(qdax_python)
    env = dict(os.environ, MOME_REFERENCE=json.dumps(reference_point()))

    def qdax(case: dict) -> dict:
        cmd = [qdax_python, __file__, "--impl", "qdax", "--case", json.dumps(case)]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
        return json.loads(proc.stdout.strip().splitlines()[-1])

    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    if args.part in ("run", "both"):
        title = f"MOME on the 100-d two-objective Rastrigin, {GENERATIONS} generations x {BATCH}"
        print(f"# {title}, {now}; {machine()}")
        print("| engine | seed | compile s | run s | MOQD score | global HV | solutions | coverage | load |")
        print("|---|---|---|---|---|---|---|---|---|")
        cells = centroids(CELLS)
        for seed in SEEDS:
            rows = [("evotensor", run_evotensor(seed, cells))]
            if use_qdax:
                for metrics, name in ((True, "QDax 0.5.0 MOME"), (False, "QDax 0.5.0 MOME, no metrics")):
                    with tempfile.TemporaryDirectory() as tmp:
                        out = os.path.join(tmp, "front.npz")
                        case = {
                            "part": "run",
                            "seed": seed,
                            "metrics": metrics,
                            "out": out,
                            "cells": cells.tolist(),
                        }
                        timing = qdax(case)
                        saved = np.load(out)
                        rows.append((name, {**timing, **quality(saved["objective"], saved["occupied"])}))
            for name, r in rows:
                print(
                    f"| {name} | {seed} | {r['compile_s']:.2f} | {r['run_s']:.2f} | {r['moqd_score']:.5g} | "
                    f"{r['global_hv']:.5g} | {r['solutions']} | {r['coverage']:.3f} | "
                    f"{os.getloadavg()[0]:.2f} |",
                    flush=True,
                )
    if args.part in ("add", "both"):
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
        title = "one add into a pre-filled MOME archive (random: sparse fronts; full: full fronts)"
        print(f"\n# {title}, {now}; {machine()}")
        print(
            "| engine | cells x front | fronts | batch | compile s | ms per add (median) | min | "
            "solutions after | load |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for cells_n, front, batch, kind in ADD_CASES:
            cells = centroids(cells_n)
            rows = [("evotensor", add_evotensor(cells_n, front, batch, kind, cells))]
            if use_qdax:
                case = {"part": "add", "cells_n": cells_n, "front": front, "batch": batch, "kind": kind}
                rows.append(("QDax 0.5.0", qdax({**case, "cells": cells.tolist()})))
            for name, r in rows:
                print(
                    f"| {name} | {cells_n} x {front} | {kind} | {batch} | {r['compile_s']:.2f} | "
                    f"{statistics.median(r['ms']):.2f} | {min(r['ms']):.2f} | {r['solutions']} | "
                    f"{os.getloadavg()[0]:.2f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
