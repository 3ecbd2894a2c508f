"""MAP-Elites Low-Spread on a noisy brax task: evotensor's ``LowSpreadArchive`` under ``MAPElites``
beside QDax's ``MELS``, like for like, plus our plain MAP-Elites on the same evaluations (run by hand).
``--algorithm sampling``: MAP-Elites-Sampling instead, our ``SampledArchive`` (average extractors)
beside QDax's ``MAPElites`` scoring through ``qdax.utils.sampling.sampling`` (its defaults: average
fitness and descriptor over the samples), the same set-up.

QDax's ``examples/mels.ipynb`` set-up, scaled down so that a 2-core CPU finishes in minutes (every
reduction applied to every engine; ``--full`` restores the example's sizes, meant for a GPU):

* task ``TASK`` (``walker2d_uni``: feet-contact descriptors), episodes of ``EPISODE`` steps, a
  random reset per evaluation (the task's only noise);
* policies: MLP ``POLICY`` hidden ReLU layers, ``tanh`` output, LeCun-uniform weights and zero
  biases; the first batch is ``BATCH`` independently initialised policies, the same numbers in
  every engine (``qd_pgame.initial_layers``);
* the archive: ``CELLS`` centroids (our k-means of 50,000 uniform samples), the same array in every
  engine, QDax's QD-score offset;
* Iso+LineDD (0.005 / 0.05, no clipping: QDax's ``MixingEmitter`` with ``variation_percentage``
  1.0) on ``BATCH`` solutions per generation, each evaluated ``SAMPLES`` times (ME-LS), for
  ``GENERATIONS`` generations (QDax: ``init`` plus ``GENERATIONS - 1`` ``scan_update``s; ours one
  ``evotensor.run``);
* ``evotensor-me``: our plain MAP-Elites with a batch of ``BATCH * SAMPLES`` solutions, one
  evaluation each (the same number of evaluations): what the low-spread rule buys.

Reported per seed, the engines alternating, each a fresh process: compile s, run s, evaluations/s,
the engine's own archive (QD score, coverage), then every final archive *corrected* by the same
code (``evotensor.qd.corrected_archive``: each elite re-evaluated ``REEVALS`` times with fixed
keys, the medians inserted into an empty archive of the same centroids; QDax's
``reevaluation_function``): corrected QD score and coverage, and the elites' mean descriptor and
fitness std over the re-evaluations. QDax stores each elite's cell centroid as its descriptor and
breaks ties between candidates of one cell by its scatter; we store the mean descriptor of the
samples in the cell and break ties to the first candidate.

QDax 0.5.1 runs in the ``qd051`` venv of ``bench_venvs.py`` (``make bench-venvs VENVS=qd051``).

    .venv/bin/python benchmarks/qd_mels.py
    .venv/bin/python benchmarks/qd_mels.py --seeds 1 --generations 10
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_venvs  # noqa: E402
from qd_pgame import (  # noqa: E402
    initial_layers,
    qdax_brax_scoring,
    qdax_flat_policies,
    qdax_initial_variables,
)

TASK, EPISODE, BATCH, SAMPLES = "walker2d_uni", 100, 64, 5
POLICY, CELLS, GENERATIONS, REEVALS = (64, 64), 256, 60, 8
FULL = dict(batch=100, cells=1024, generations=1000)  # the example's (episode 100, 64-64, 5 samples)
ENGINES = {"mels": ["evotensor", "qdax", "evotensor-me"], "sampling": ["evotensor-sampling", "qdax-sampling"]}
NAMES = {
    "evotensor": "evotensor ME-LS",
    "qdax": "QDax 0.5.1 MELS",
    "evotensor-me": "evotensor ME",
    "evotensor-sampling": "evotensor ME-Sampling",
    "qdax-sampling": "QDax 0.5.1 ME + sampling",
}


def config(args: argparse.Namespace) -> dict:
    cfg = dict(task=TASK, episode=EPISODE, batch=BATCH, samples=SAMPLES, policy=POLICY, cells=CELLS)
    cfg |= dict(generations=GENERATIONS, reevals=REEVALS)
    if args.full:
        cfg |= FULL
    if args.generations:
        cfg["generations"] = args.generations
    return cfg


def flat_template(cfg: dict, observation_size: int, action_size: int) -> tuple:
    """Our policy pytree (per layer ``{"b", "w"}``: flat vectors hold the bias, then the kernel)."""
    sizes = (observation_size, *cfg["policy"], action_size)
    return tuple(
        {"w": np.zeros((a, b), np.float32), "b": np.zeros(b, np.float32)}
        for a, b in zip(sizes[:-1], sizes[1:], strict=True)
    )


# -- evotensor (in this venv) ---------------------------------------------------------------------
def run_evotensor(cfg: dict, seed: int, cells: np.ndarray, kind: str) -> tuple[dict, np.ndarray, np.ndarray]:
    """``kind``: ``"low-spread"`` (ME-LS), ``"sampling"`` (ME-Sampling) or ``"plain"`` (MAP-Elites
    on ``samples`` times the batch, one evaluation each)."""
    import jax
    from jax.flatten_util import ravel_pytree

    import evotensor
    from evotensor.problems.networks import ParamsDecoder, mlp_apply
    from evotensor.problems.qd_control import BraxQDProblem
    from evotensor.qd import CVTArchive, IsoLineEmitter, LowSpreadArchive, MAPElites, SampledArchive

    problem = BraxQDProblem(cfg["task"], episode_length=cfg["episode"])
    template = flat_template(cfg, problem.observation_size, problem.output_size)
    sizes = (problem.observation_size, *cfg["policy"], problem.output_size)
    batch = cfg["batch"] * (cfg["samples"] if kind == "plain" else 1)
    first = [
        tuple({"w": w, "b": b} for w, b in layers)
        for layers in initial_layers(dict(cfg, batch=batch), sizes, seed)
    ]
    initial = np.stack([np.asarray(ravel_pytree(t)[0]) for t in first])
    archive = CVTArchive(
        solution_dim=initial.shape[1],
        centroids=cells,
        ranges=problem.descriptor_ranges,
        qd_score_offset=problem.qd_score_offset,
    )
    if kind == "low-spread":
        archive = LowSpreadArchive(archive, num_samples=cfg["samples"])
    elif kind == "sampling":
        archive = SampledArchive(archive, num_samples=cfg["samples"])
    emitter = IsoLineEmitter(
        x0=initial[0], iso_sigma=0.005, line_sigma=0.05, batch_size=batch, initial_solutions=initial
    )
    strategy = MAPElites(archive, [emitter], solution=template)
    decoder = ParamsDecoder(mlp_apply, activation="relu")
    result = evotensor.run(
        strategy, problem, cfg["generations"], jax.random.key(seed), decoder=decoder, progress=False
    )
    state = result.state.archive
    stats = archive.stats(state)
    out = {
        "compile_s": result.compile_seconds,
        "run_s": result.run_seconds,
        "qd_score": float(stats["qd_score"]),
        "coverage": float(stats["coverage"]),
    }
    return out, np.asarray(state.solutions), np.asarray(state.occupied)


# -- QDax (in its venv) ---------------------------------------------------------------------------
def run_qdax(cfg: dict, seed: int, cells: np.ndarray, algorithm: str) -> tuple[dict, np.ndarray, np.ndarray]:
    """``algorithm``: ``"mels"`` (QDax's ``MELS``) or ``"sampling"`` (its ``MAPElites`` scoring
    through ``sampling``)."""
    import functools

    import jax
    import jax.numpy as jnp
    import qdax.tasks.brax as environments
    from qdax.core.emitters.mutation_operators import isoline_variation
    from qdax.core.emitters.standard_emitters import MixingEmitter
    from qdax.core.map_elites import MAPElites
    from qdax.core.mels import MELS
    from qdax.core.neuroevolution.networks.networks import MLP
    from qdax.utils.metrics import default_qd_metrics

    env = environments.create(cfg["task"], episode_length=cfg["episode"])
    policy = MLP(
        layer_sizes=(*cfg["policy"], env.action_size),
        kernel_init=jax.nn.initializers.lecun_uniform(),
        final_activation=jnp.tanh,
    )
    batch = cfg["batch"]
    sizes = (env.observation_size, *cfg["policy"], env.action_size)
    population = initial_layers(cfg, sizes, seed)  # the same numbers as ours
    variables = qdax_initial_variables(policy, env.observation_size, seed, population)

    scoring = qdax_brax_scoring(env, policy, cfg)
    offset = environments.reward_offset[cfg["task"]] * cfg["episode"]
    emitter = MixingEmitter(
        mutation_fn=None,
        variation_fn=functools.partial(isoline_variation, iso_sigma=0.005, line_sigma=0.05),
        variation_percentage=1.0,
        batch_size=batch,
    )
    metrics = functools.partial(default_qd_metrics, qd_offset=offset)
    if algorithm == "mels":
        mels = MELS(
            scoring_function=scoring, emitter=emitter, metrics_function=metrics, num_samples=cfg["samples"]
        )
    else:
        from qdax.utils.sampling import sampling

        sampled = functools.partial(sampling, scoring_fn=scoring, num_samples=cfg["samples"])
        mels = MAPElites(scoring_function=sampled, emitter=emitter, metrics_function=metrics)

    def whole(variables, key):
        key, init_key = jax.random.split(key)
        repertoire, emitter_state, _ = mels.init(variables, jnp.asarray(cells), init_key)
        (repertoire, emitter_state, key), _ = jax.lax.scan(
            mels.scan_update, (repertoire, emitter_state, key), (), length=cfg["generations"] - 1
        )
        return repertoire

    key = jax.random.key(seed)
    t = time.perf_counter()
    compiled = jax.jit(whole).lower(variables, key).compile()
    compile_s = time.perf_counter() - t
    t = time.perf_counter()
    repertoire = jax.block_until_ready(compiled(variables, key))
    run_s = time.perf_counter() - t
    fitness = np.asarray(repertoire.fitnesses).reshape(-1)
    filled = fitness > -np.inf
    flat = qdax_flat_policies(repertoire.genotypes["params"], len(cfg["policy"]) + 1)
    out = {
        "compile_s": compile_s,
        "run_s": run_s,
        "qd_score": float(np.sum(fitness[filled] + offset)),
        "coverage": float(filled.mean()),
    }
    return out, flat, filled


# -- the same correction for every engine ----------------------------------------------------------
def corrected(cfg: dict, cells: np.ndarray, solutions: np.ndarray, occupied: np.ndarray) -> dict:
    """Every elite re-evaluated ``reevals`` times (fixed keys) by our ``BraxQDProblem``, the medians
    inserted into an empty archive of the same centroids (``corrected_archive``)."""
    import jax

    from evotensor.problems.networks import ParamsDecoder, mlp_apply
    from evotensor.problems.qd_control import BraxQDProblem
    from evotensor.qd import CVTArchive, corrected_archive

    problem = BraxQDProblem(cfg["task"], episode_length=cfg["episode"])
    archive = CVTArchive(
        solution_dim=solutions.shape[1],
        centroids=cells,
        ranges=problem.descriptor_ranges,
        qd_score_offset=problem.qd_score_offset,
    )
    state = archive.init().replace(
        solutions=jax.numpy.asarray(solutions), occupied=jax.numpy.asarray(occupied)
    )
    fixed = corrected_archive(
        archive,
        state,
        problem,
        jax.random.key(2024),
        num_reevals=cfg["reevals"],
        solution=flat_template(cfg, problem.observation_size, problem.output_size),
        decoder=ParamsDecoder(mlp_apply, activation="relu"),
    )
    stats = fixed.archive.stats(fixed.state)
    return {
        "corrected_qd_score": float(stats["qd_score"]),
        "corrected_coverage": float(stats["coverage"]),
        "descriptor_std": float(np.nanmean(np.asarray(fixed.measures_std))),
        "fitness_std": float(np.nanmean(np.asarray(fixed.fitness_std))),
    }


def worker(args: argparse.Namespace) -> None:
    with open(args.case) as f:
        case = json.load(f)
    cfg, seed, cells = case["cfg"], case["seed"], np.asarray(case["cells"], np.float32)
    if args.impl.startswith("qdax"):
        out, solutions, occupied = run_qdax(
            cfg, seed, cells, "sampling" if args.impl == "qdax-sampling" else "mels"
        )
    else:
        kind = {"evotensor": "low-spread", "evotensor-me": "plain", "evotensor-sampling": "sampling"}[
            args.impl
        ]
        out, solutions, occupied = run_evotensor(cfg, seed, cells, kind)
    np.savez(case["elites"], solutions=solutions, occupied=occupied)
    print(json.dumps(out))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--impl", choices=[e for engines in ENGINES.values() for e in engines])
    p.add_argument("--algorithm", choices=sorted(ENGINES), default="mels")
    p.add_argument("--case", help="internal: a JSON file of one run's arguments")
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--generations", type=int, default=None)
    p.add_argument("--full", action="store_true", help="QDax's example sizes (for a GPU)")
    args = p.parse_args()
    if args.impl:
        worker(args)
        return
    import jax

    from evotensor.problems.qd_control import BraxQDProblem
    from evotensor.qd import kmeans_centroids

    cfg = config(args)
    ranges = BraxQDProblem(cfg["task"], episode_length=cfg["episode"]).descriptor_ranges
    cells = np.asarray(kmeans_centroids(jax.random.key(0), cfg["cells"], ranges, samples=50_000)[0])
    qdax_python = bench_venvs.venv_python("qd051")
    engines = ENGINES[args.algorithm]
    engines = engines if os.path.exists(qdax_python) else [e for e in engines if not e.startswith("qdax")]
    evaluations = cfg["generations"] * cfg["batch"] * cfg["samples"]
    print(
        f"# {'ME-LS' if args.algorithm == 'mels' else 'ME-Sampling'} on {cfg['task']}, {evaluations:,} "
        f"evaluations; {bench_venvs.stamp()}; "
        f"{bench_venvs.machine()}"
    )
    print(f"# {json.dumps(cfg)}")
    print(
        "| seed | engine | compile s | run s | evaluations/s | QD score | coverage | corrected QD score | "
        "corrected coverage | descriptor std | fitness std | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for seed, impl in bench_venvs.alternating(engines, args.seeds):
            case = os.path.join(tmp, "case.json")
            elites = os.path.join(tmp, f"{impl}-{seed}.npz")
            with open(case, "w") as f:
                json.dump({"cfg": cfg, "seed": seed, "cells": cells.tolist(), "elites": elites}, f)
            python = qdax_python if impl.startswith("qdax") else sys.executable
            r = bench_venvs.run_json_worker(python, __file__, ["--impl", impl, "--case", case])
            data = np.load(elites)
            r |= corrected(cfg, cells, data["solutions"], data["occupied"])
            print(
                f"| {seed} | {NAMES[impl]} | {r['compile_s']:.1f} | {r['run_s']:.1f} | "
                f"{evaluations / r['run_s']:,.0f} | {r['qd_score']:.1f} | {r['coverage']:.3f} | "
                f"{r['corrected_qd_score']:.1f} | {r['corrected_coverage']:.3f} | "
                f"{r['descriptor_std']:.4f} | {r['fitness_std']:.3f} | {os.getloadavg()[0]:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
