"""NEAT tasks: ``neat-xor``, ``neat-cartpole``, ``hyperneat-xor`` and ``neat-map-elites``.

* ``neat-xor`` — NEAT on XOR (fitness ``4 - SSE``), neat-python 2.1's XOR example settings
  (``mode`` option: ``neat-python`` (default), ``paper`` or ``tensorneat``), pop 150, 300
  generations; the report prints the best network's genes and its outputs on the four cases.
* ``neat-cartpole`` — NEAT on gymnax CartPole-v1 (4 inputs, 2 outputs, argmax action; mean return
  of one episode, at most 500), pop 1000, 50 generations; the rollout exits early
  (``GymnaxProblem(chunk=64)``): a generation costs about the steps the networks balance.

* ``neat-map-elites`` — MAP-Elites over NEAT genomes (:class:`~evotensor.neat.NEATEmitter`) on XOR
  (fitness ``4 - SSE``; ``num_inputs=3``: 3-input parity), the archive a grid of network sizes (hidden
  nodes x enabled connections, :class:`~evotensor.neat.TopologyDescriptors`): the best network of
  every size; batch 256, 300 generations; the report lists the best fitness per hidden-node count.
  ``--set problem=hopper_uni`` (any QDax QD-RL task of
  :class:`~evotensor.problems.qd_control.BraxQDProblem`, ``episode_length`` 250): QD-RL with NEAT
  networks as the policies, the task's behaviour descriptor on a grid of ``cells`` per descriptor
  (a CVT of ``cvt_cells`` beyond two).

Options (``--set KEY=VALUE``) besides ``pop``/``generations``/``seed``: ``mode``, ``max_nodes``,
``max_conns``, ``num_inputs`` (XOR only: 3 gives 3-input parity), ``grad_steps``, ``grad_lr`` and
``grad_fraction`` (XOR only: with ``grad_steps > 0`` the best ``grad_fraction`` of the genomes (all by
default) are tuned by that many Adam steps at ``grad_lr`` on their SSE before they are scored, and the
tuned genomes are inherited (:class:`~evotensor.neat.GradientFit`); the fitness is then the SSE,
minimized).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jax
import numpy as np

from evotensor.neat.genome import GenomeSpec, genome_to_dict
from evotensor.neat.network import OutputMode
from evotensor.neat.strategy import NEAT
from evotensor.tasks import Task, positive_float_option, positive_int_option, register_task

CARTPOLE_CHUNK = 64
"""Networks stepped at a time by ``neat-cartpole``'s rollout on a CPU (``GymnaxProblem(chunk=...)``);
on an accelerator the whole population is one chunk (chunks run one after the other: on a GPU a
chunk of 64 networks would leave it idle), so the rollout only stops once every episode ended."""


def cartpole_chunk(pop: int) -> int:
    """``neat-cartpole``'s rollout chunk for a population of ``pop`` on the default backend."""
    return min(CARTPOLE_CHUNK, pop) if jax.default_backend() == "cpu" else pop


def genome_text(spec: GenomeSpec, genome: Any) -> str:
    """One genome as indented JSON (nodes by key, connections by ``"in->out"``)."""
    d = genome_to_dict(spec, genome)
    out = {
        "nodes": {str(k): v for k, v in sorted(d["nodes"].items())},
        "connections": {
            f"{a}->{b}": v
            for (a, b), v in sorted(d["connections"].items(), key=lambda kv: kv[1]["innovation"])
        },
    }
    return json.dumps(out, indent=1)


def _summary(strategy: NEAT, genome: Any) -> str:
    d = genome_to_dict(strategy.spec, genome)
    hidden = [k for k in d["nodes"] if k >= strategy.spec.num_outputs]
    enabled = sum(1 for c in d["connections"].values() if c["enabled"])
    return f"{len(hidden)} hidden nodes, {enabled} enabled of {len(d['connections'])} connections"


def _write_pictures(strategy: NEAT, result: Any, run_dir: Path | None) -> str:
    """The best network as ``best_network.png`` and in neat-python's JSON format
    (``best_network.json``), the species history as ``species.png``; returns the report line."""
    if run_dir is None:
        return ""
    from evotensor.neat.draw import draw, plot_species
    from evotensor.neat.export import to_neat_python_json

    run_dir = Path(run_dir)
    spec, best = strategy.spec, result.best_genotype
    draw(spec, best, run_dir / "best_network.png", title="best network")
    written = ["best_network.png"]
    cfg = strategy.config
    if cfg.outputs.transform is None:  # a JAX output transform has no JSON form
        to_neat_python_json(
            spec,
            best,
            metadata={"fitness": float(result.best_fitness)},
            functions=cfg.functions,
            outputs=cfg.outputs,
            path=run_dir / "best_network.json",
        )
        written.append("best_network.json")
    if "num_species" in result.history or "species_sizes" in result.history:
        plot_species(result.history, run_dir / "species.png")
        written.append("species.png")
    return "\nwrote " + " ".join(written)


def _xor_report(strategy: NEAT, problem: Any):
    def report(result: Any, run_dir: Path | None) -> str:
        import jax

        best = result.best_genotype
        net = strategy.decoder.decode(best)
        pred = np.asarray(jax.vmap(lambda x: strategy.decoder.apply(net, x))(problem.x))
        lines = [f"best network: {_summary(strategy, best)}"]
        for x, y, p in zip(np.asarray(problem.x), np.asarray(problem.y), pred):
            lines.append(f"  {x.astype(int).tolist()} -> {p[0]:.3f} (target {int(y[0])})")
        return "\n".join(lines) + _write_pictures(strategy, result, run_dir)

    return report


def _strategy(cfg: dict[str, Any], num_inputs: int, num_outputs: int, pop: int, squash: bool = False) -> NEAT:
    strategy = NEAT.from_mode(
        str(cfg["mode"]),
        num_inputs=num_inputs,
        num_outputs=num_outputs,
        population_size=pop,
        max_nodes=positive_int_option(cfg, "max_nodes"),
        max_conns=positive_int_option(cfg, "max_conns"),
    )
    if squash and not strategy.config.outputs.activate:
        # TensorNEAT leaves outputs unactivated; its XOR example squashes them with a sigmoid
        config = strategy.config.replace(outputs=OutputMode.tensorneat(jax.nn.sigmoid))
        strategy = NEAT(strategy.spec, strategy.population_size, config)
    return strategy


@register_task(
    "neat-xor",
    "NEAT (neat-python 2.1 settings) on XOR, pop 150 x up to 300 generations",
    defaults={
        "mode": "neat-python",
        "max_nodes": 32,
        "max_conns": 64,
        "num_inputs": 2,
        "grad_steps": 0,
        "grad_lr": 0.1,
        "grad_fraction": 1.0,
    },
)
def _build_xor(cfg: dict[str, Any]) -> Task:
    from evotensor.neat.gradient import GradientFit, GradientTuner
    from evotensor.problems.function_fit import XOR

    problem = XOR(positive_int_option(cfg, "num_inputs"))
    strategy = _strategy(cfg, problem.num_inputs, 1, cfg["pop"] or 150, squash=True)
    steps = cfg["grad_steps"]
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"option grad_steps must be an int >= 0, got {steps!r}")
    scored = problem
    if steps:
        tuner = GradientTuner(steps=steps, learning_rate=positive_float_option(cfg, "grad_lr"))
        fraction = positive_float_option(cfg, "grad_fraction")
        if fraction > 1.0:
            raise ValueError(f"option grad_fraction must be in (0, 1], got {cfg['grad_fraction']!r}")
        scored = GradientFit(
            strategy.decoder, problem.x, problem.y, loss="sse", tuner=tuner, fraction=fraction
        )
    return Task(
        strategy=strategy,
        problem=scored,
        decoder=strategy.decoder,
        generations=cfg["generations"] or 300,
        report=_xor_report(strategy, problem),
        best_to_text=lambda best: genome_text(strategy.spec, best),
    )


@register_task(
    "neat-cartpole",
    "NEAT on gymnax CartPole-v1 (max return 500), pop 1000 x 50 generations",
    defaults={"mode": "neat-python", "max_nodes": 32, "max_conns": 64},
)
def _build_cartpole(cfg: dict[str, Any]) -> Task:
    from evotensor.problems.control import GymnaxProblem

    pop = cfg["pop"] or 1000
    # the early-exit rollout: same returns as the plain scan, but a network stops costing once its
    # episode has ended (most of a young population's fail within 20-70 of the 500 steps)
    problem = GymnaxProblem("CartPole-v1", chunk=cartpole_chunk(pop))
    strategy = _strategy(cfg, 4, 2, pop)
    return Task(
        strategy=strategy,
        problem=problem,
        decoder=strategy.decoder,
        generations=cfg["generations"] or 50,
        report=lambda result, run_dir: (
            f"best network: {_summary(strategy, result.best_genotype)}"
            + _write_pictures(strategy, result, run_dir)
        ),
        best_to_text=lambda best: genome_text(strategy.spec, best),
    )


@register_task(
    "hyperneat-xor",
    "HyperNEAT (NEAT-evolved CPPNs painting a 2-3-1 substrate) on XOR, pop 150 x 200 generations",
    defaults={"mode": "neat-python", "max_nodes": 32, "max_conns": 64, "es": False},
)
def _build_hyperneat_xor(cfg: dict[str, Any]) -> Task:
    from evotensor.neat.hyperneat import es_hyperneat, hyperneat
    from evotensor.neat.substrate import Substrate
    from evotensor.problems.function_fit import XOR

    problem = XOR(2)
    es = cfg["es"] in (True, "true", "True", 1, "1")
    substrate = Substrate(
        inputs=[(-1.0, -1.0), (1.0, -1.0)],
        outputs=[(0.0, 1.0)],
        hidden=() if es else [[(-1.0, 0.0), (0.0, 0.0), (1.0, 0.0)]],
        bias_coordinate=(0.0, -1.0),
        cppn_bias_input=True,
    )
    make = es_hyperneat if es else hyperneat
    strategy = make(
        substrate,
        population_size=cfg["pop"] or 150,
        mode=str(cfg["mode"]),
        max_nodes=positive_int_option(cfg, "max_nodes"),
        max_conns=positive_int_option(cfg, "max_conns"),
    )

    def report(result: Any, run_dir: Path | None) -> str:
        import jax

        best = jax.tree_util.tree_map(lambda x: x[None], result.best_genotype)
        net = jax.tree_util.tree_map(lambda x: x[0], strategy.decoder.decode(best))
        pred = np.asarray(jax.vmap(lambda x: strategy.decoder.apply(net, x))(problem.x))
        lines = [f"best CPPN: {_summary(strategy, result.best_genotype)}"]
        for x, y, p in zip(np.asarray(problem.x), np.asarray(problem.y), pred):
            lines.append(f"  {x.astype(int).tolist()} -> {float(np.ravel(p)[0]):.3f} (target {int(y[0])})")
        return "\n".join(lines)

    return Task(
        strategy=strategy,
        problem=problem,
        decoder=strategy.decoder,
        generations=cfg["generations"] or 200,
        report=report,
        best_to_text=lambda best: genome_text(strategy.spec, best),
    )


@register_task(
    "neat-map-elites",
    "MAP-Elites over NEAT genomes: XOR on a grid of network sizes (default), or QD-RL on a QDax brax "
    "task (--set problem=hopper_uni), batch 256 x 300 generations",
    defaults={
        "mode": "neat-python",
        "max_nodes": 24,
        "max_conns": 48,
        "num_inputs": 2,
        "problem": "xor",
        "episode_length": 250,
        "cells": 32,
        "cvt_cells": 1024,
        "backend": None,
    },
)
def _build_map_elites(cfg: dict[str, Any]) -> Task:
    from evotensor.neat.config import neat_mode
    from evotensor.neat.qd import NEATEmitter, TopologyDescriptors
    from evotensor.problems.function_fit import XOR
    from evotensor.qd import CVTArchive, GridArchive, MAPElites
    from evotensor.qd.plots import archive_heatmap, plot_qd_history

    sizes = dict(
        max_nodes=positive_int_option(cfg, "max_nodes"), max_conns=positive_int_option(cfg, "max_conns")
    )
    if cfg["problem"] == "xor":
        inputs = positive_int_option(cfg, "num_inputs")
        if inputs < 2:
            raise ValueError(f"option num_inputs must be >= 2 (parity of that many bits), got {inputs}")
        spec, config = neat_mode(str(cfg["mode"]), inputs, 1, **sizes)
        problem = TopologyDescriptors(XOR(inputs), spec)
        # fitness 2^n - SSE is >= 0 for outputs in [0, 1]; one cell per network size
        archive_args = dict(dims=problem.grid, ranges=problem.descriptor_ranges, qd_score_offset=0.0)
        labels = ("hidden nodes", "connections")
    else:
        from evotensor.problems.qd_control import TASKS, BraxQDProblem

        if cfg["problem"] not in TASKS:
            raise ValueError(
                f"option problem must be 'xor' or a QD-RL task ({', '.join(TASKS)}), got {cfg['problem']!r}"
            )
        problem = BraxQDProblem(
            cfg["problem"], episode_length=positive_int_option(cfg, "episode_length"), backend=cfg["backend"]
        )
        spec, config = neat_mode(str(cfg["mode"]), problem.observation_size, problem.output_size, **sizes)
        # outputs left unactivated: the problem's tanh maps them onto brax's [-1, 1] actions
        config = config.replace(outputs=OutputMode.tensorneat())
        common = dict(ranges=problem.descriptor_ranges, qd_score_offset=problem.qd_score_offset)
        if problem.num_descriptors <= 2:
            archive_args = dict(dims=(positive_int_option(cfg, "cells"),) * problem.num_descriptors, **common)
        else:
            archive_args = dict(
                centroids=positive_int_option(cfg, "cvt_cells"), samples=50_000, seed=cfg["seed"], **common
            )
        labels = ("descriptor 0", "descriptor 1")
    emitter = NEATEmitter(spec, config, batch_size=cfg["pop"] or 256)
    kind = GridArchive if "dims" in archive_args else CVTArchive
    archive = kind(genotype=emitter.genotype, **archive_args)
    strategy = MAPElites(archive, [emitter], decoder=emitter.decoder)

    def report(result: Any, run_dir: Path | None) -> str:
        state = result.state.archive
        stats = {k: float(v) for k, v in archive.stats(state).items()}
        best = f"{stats['obj_max']:.4g}"
        if cfg["problem"] == "xor":
            best += f" of {problem.problem.max_fitness:g}"
        lines = [
            f"archive: {int(stats['num_elites'])} of {archive.num_cells} cells (coverage "
            f"{100 * stats['coverage']:.1f}%), QD score {stats['qd_score']:.4g}, best fitness {best}",
        ]
        if cfg["problem"] == "xor":
            best = ", ".join(f"{h}: {f:.3f}" for h, f in _best_by_hidden(archive.data(state)))
            lines.append(f"best fitness by hidden nodes: {best}")
        if run_dir is not None:
            from evotensor.neat.draw import draw

            run_dir = Path(run_dir)
            written = ["qd.png", "best_network.png"]
            plot_qd_history(result.history, run_dir / "qd.png")
            draw(spec, result.best_genotype, run_dir / "best_network.png", title="best network")
            if archive.measure_dim == 2:
                archive_heatmap(archive, state, run_dir / "archive.png", labels=labels)
                written.insert(0, "archive.png")
            lines.append("wrote " + " ".join(written))
        return "\n".join(lines)

    return Task(
        strategy=strategy,
        problem=problem,
        decoder=emitter.decoder,
        generations=cfg["generations"] or 300,
        report=report,
        best_to_text=lambda best: genome_text(spec, best),
    )


def _best_by_hidden(elites: dict[str, Any]) -> list[tuple[int, float]]:
    """``(hidden nodes, best objective)`` over a size archive's elites (``Archive.data``), by hidden
    nodes."""
    hidden = elites["measures"][:, 0].astype(int)
    objective = elites["objective"]
    return [(int(h), float(objective[hidden == h].max())) for h in np.unique(hidden)]
