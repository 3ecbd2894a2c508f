"""QD-RL with a critic: evotensor's ``pga_me_emitters`` (``--algorithm pga``, default) or
``dcrl_me_emitters`` (``--algorithm dcrl``) under ``MAPElites`` beside QDax's ``PGAMEEmitter`` or
``DCRLMEEmitter``, like for like (run by hand).

QDax's ``examples/pgame.ipynb`` set-up, scaled down so that a 2-core CPU finishes in minutes (every
reduction applied to both engines; ``--full`` restores the example's sizes, meant for a GPU):

* task ``TASK`` (QDax's brax QD task; ``--task``), episodes of ``EPISODE`` steps, a random reset
  per policy (QDax's ``play_reset_fn = env.reset``);
* policies: MLP ``POLICY`` hidden ReLU layers, ``tanh`` output, LeCun-uniform weights and zero
  biases; the first batch is ``BATCH`` independently initialised policies, the same numbers in
  both engines (drawn here with NumPy and handed to both);
* the archive: ``CELLS`` centroids, the same array in both (evenly spaced for one descriptor,
  our k-means for more), QDax's QD-score offset;
* PGA-ME: half the batch Iso+LineDD (0.005 / 0.05), half policy-gradient variation:
  ``PG_STEPS`` Adam steps per elite (lr 1e-3) on a TD3 critic ``CRITIC`` trained
  ``CRITIC_STEPS`` steps per generation (policy delay 2, batch ``TRANSITIONS`` transitions,
  the other TD3 values QDax's defaults), replay buffer ``BUFFER``;
* DCRL-ME (``--algorithm dcrl``): QDax's example split of the batch (half Iso+LineDD, a quarter PG
  towards the parent's own descriptor, a quarter injected actors), lengthscale 0.1, the same PG and
  critic steps and transition batch as above; QDax's example offsets the environment's rewards by
  the task's ``reward_offset`` and clips them at 0 (its fitness then includes the offset); ours
  gives the same offset and clip to the critic only (``reward_offset=``), or with
  ``--offset-fitness`` to the problem (``BraxQDProblem(offset_rewards=True)``), so that both
  engines select on the same fitness;
* ``GENERATIONS`` batches in all (QDax: ``init`` plus ``GENERATIONS - 1`` ``scan_update``s; ours:
  one ``evotensor.run``), each engine's per-generation metrics computed as it does.

Reported per seed, the engines alternating: compile s, run s, evaluations/s, QD score (offset),
coverage, max fitness, each as the engine measures them (one episode per policy; the two engines'
resets differ, so fitness has the same distribution, not the same numbers); then both final
archives re-scored by the same code (``rescore``: every elite run once more by our
``BraxQDProblem`` with fixed reset keys, inserted into an empty archive of the same centroids).
What differs by design: QDax's rollouts auto-reset, so its replay buffer also stores the steps of new episodes
started after a fall; ours stores only the steps of each policy's one episode.

QDax 0.5.1 runs in the ``qd051`` venv of ``bench_venvs.py`` (``make bench-venvs VENVS=qd051``; PyPI's
0.5.0 PGA-ME imports ``brax.v1``, gone from brax >= 0.11), this script
calling itself there with ``--impl qdax``.

    .venv/bin/python benchmarks/qd_pgame.py
    .venv/bin/python benchmarks/qd_pgame.py --seeds 0 --generations 20 --impl evotensor
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

TASK, EPISODE, BATCH = "hopper_uni", 100, 64
POLICY, CRITIC = (32, 32), (64, 64)
PG_STEPS, CRITIC_STEPS, TRANSITIONS, BUFFER = 20, 100, 128, 200_000
CELLS, GENERATIONS, SEEDS = 64, 100, (0, 1, 2)
FULL = dict(episode=250, batch=100, policy=(256, 256), critic=(256, 256), pg_steps=100, critic_steps=300)
FULL |= dict(transitions=256, buffer=1_000_000, cells=1024, generations=1000)
# QDax's DCRL-ME example (examples/dcrlme.ipynb): its batch, networks and training sizes
FULL_DCRL = dict(FULL, batch=256, policy=(128, 128), pg_steps=150, critic_steps=3000, transitions=100)
FULL_DCRL |= dict(generations=200)


def config(args: argparse.Namespace) -> dict:
    base = dict(
        algorithm=args.algorithm,
        offset_fitness=args.offset_fitness,
        task=args.task,
        episode=EPISODE,
        batch=BATCH,
        policy=POLICY,
        critic=CRITIC,
        pg_steps=PG_STEPS,
        critic_steps=CRITIC_STEPS,
        transitions=TRANSITIONS,
        buffer=BUFFER,
        cells=CELLS,
        generations=GENERATIONS,
    )
    if args.full:
        base |= FULL_DCRL if args.algorithm == "dcrl" else FULL
    if args.generations:
        base["generations"] = args.generations
    return base


def initial_layers(cfg: dict, sizes: tuple[int, ...], seed: int) -> list[list[tuple[np.ndarray, np.ndarray]]]:
    """``batch`` policies, each a list of ``(W [in, out], b [out])``: LeCun-uniform, zero biases."""
    rng = np.random.default_rng(1000 + seed)
    population = []
    for _ in range(cfg["batch"]):
        layers = []
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
            limit = np.sqrt(3.0 / fan_in)
            w = rng.uniform(-limit, limit, (fan_in, fan_out)).astype(np.float32)
            layers.append((w, np.zeros(fan_out, np.float32)))
        population.append(layers)
    return population


def centroids(cfg: dict, num_descriptors: int, ranges) -> np.ndarray:
    import jax

    from evotensor.qd import grid_centroids, kmeans_centroids

    if num_descriptors == 1:
        return np.asarray(grid_centroids((cfg["cells"],), ranges), np.float32)
    c, _ = kmeans_centroids(jax.random.key(0), cfg["cells"], ranges, samples=50_000)
    return np.asarray(c, np.float32)


def qdax_initial_variables(policy: Any, observation_size: int, seed: int, population: list) -> dict:
    """A QDax ``MLP``'s variables for ``population`` (lists of ``(W [in, out], b [out])`` per
    layer, :func:`initial_layers`' numbers, so that QDax starts from our first batch)."""
    import jax
    import jax.numpy as jnp

    batch = len(population)
    variables = jax.vmap(policy.init)(
        jax.random.split(jax.random.key(seed), batch), jnp.zeros((batch, observation_size))
    )
    layers = variables["params"]
    for i in range(len(population[0])):
        name = f"Dense_{i}"
        kernel = np.stack([np.asarray(p[i][0], np.float32) for p in population])
        bias = np.stack([np.asarray(p[i][1], np.float32) for p in population])
        assert layers[name]["kernel"].shape == kernel.shape, (layers[name]["kernel"].shape, kernel.shape)
        layers[name] = {"kernel": jnp.asarray(kernel), "bias": jnp.asarray(bias)}
    return {"params": layers}


def qdax_brax_scoring(env: Any, policy: Any, cfg: dict, transition: Any = None) -> Any:
    """QDax's brax scoring function as its examples write it (``play_step_fn`` with ``policy``,
    random resets, the task's descriptor extractor); ``transition(fields)`` makes each step's
    record (default ``QDTransition``)."""
    import functools

    import qdax.tasks.brax as environments
    from qdax.core.neuroevolution.buffers.buffer import QDTransition
    from qdax.tasks.brax.env_creators import scoring_function_brax_envs

    def play_step_fn(env_state, policy_params, key):
        actions = policy.apply(policy_params, env_state.obs)
        next_state = env.step(env_state, actions)
        fields = dict(
            obs=env_state.obs,
            next_obs=next_state.obs,
            rewards=next_state.reward,
            dones=next_state.done,
            actions=actions,
            truncations=next_state.info["truncation"],
            state_desc=env_state.info["state_descriptor"],
            next_state_desc=next_state.info["state_descriptor"],
        )
        record = QDTransition(**fields) if transition is None else transition(fields)
        return next_state, policy_params, key, record

    return functools.partial(
        scoring_function_brax_envs,
        episode_length=cfg["episode"],
        play_reset_fn=env.reset,
        play_step_fn=play_step_fn,
        descriptor_extractor=environments.descriptor_extractor[cfg["task"]],
    )


def qdax_flat_policies(params: dict, num_layers: int) -> np.ndarray:
    """A QDax repertoire's MLP genotypes (``Dense_i``: ``kernel [C, in, out]``, ``bias [C, out]``)
    as our flat vectors ``[C, D]``: per layer the bias, then the kernel row-major (the order of
    ``ravel_pytree`` over our ``({"b", "w"}, ...)`` policies)."""
    cells = np.asarray(params["Dense_0"]["bias"]).shape[0]
    return np.concatenate(
        [
            np.concatenate(
                [
                    np.asarray(params[f"Dense_{i}"]["bias"]),
                    np.asarray(params[f"Dense_{i}"]["kernel"]).reshape(cells, -1),
                ],
                axis=1,
            )
            for i in range(num_layers)
        ],
        axis=1,
    ).astype(np.float32)


def timed_calls(call, repeats: int = 9) -> dict:
    """Compile s (the first call) and the median ms of ``repeats`` more calls of ``call``."""
    import jax

    t = time.perf_counter()
    jax.block_until_ready(call())
    compile_s = time.perf_counter() - t
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(call())
        times.append(1000 * (time.perf_counter() - t))
    return {"compile_s": compile_s, "ms": float(np.median(times)), "ms_min": float(np.min(times))}


# -- evotensor -----------------------------------------------------------------------------------
def rollout_evotensor(cfg: dict, seed: int, transitions: bool) -> tuple[dict, dict]:
    """One evaluation of the first batch (``batch`` policies, one episode each), jitted."""
    import jax

    from evotensor.problems.networks import ParamsDecoder, mlp_apply
    from evotensor.problems.qd_control import BraxQDProblem

    problem = BraxQDProblem(cfg["task"], episode_length=cfg["episode"], transitions=transitions)
    sizes = (problem.observation_size, *cfg["policy"], problem.output_size)
    population = initial_layers(cfg, sizes, seed)
    trees = [tuple({"w": w, "b": b} for w, b in layers) for layers in population]
    stacked = jax.tree_util.tree_map(lambda *a: np.stack(a), *trees)
    apply = ParamsDecoder(mlp_apply, activation="relu").apply
    evaluate = jax.jit(lambda k, p: problem.evaluate(k, p, apply).fitness)
    key = jax.random.key(seed)
    shared = {"cells": [], "initial": [[(w.tolist(), b.tolist()) for w, b in p] for p in population]}
    return timed_calls(lambda: evaluate(key, stacked)), shared


def run_evotensor(cfg: dict, seed: int) -> tuple[dict, dict]:
    import jax
    from jax.flatten_util import ravel_pytree

    import evotensor
    from evotensor.problems.networks import ParamsDecoder, mlp_apply
    from evotensor.problems.qd_control import BraxQDProblem
    from evotensor.qd import CVTArchive, MAPElites, dcrl_me_emitters, pga_me_emitters

    offset = cfg["algorithm"] == "dcrl" and cfg["offset_fitness"]
    problem = BraxQDProblem(
        cfg["task"], episode_length=cfg["episode"], transitions=True, offset_rewards=offset
    )
    sizes = (problem.observation_size, *cfg["policy"], problem.output_size)
    population = initial_layers(cfg, sizes, seed)
    as_tree = [tuple({"w": w, "b": b} for w, b in layers) for layers in population]
    initial = np.stack([np.asarray(ravel_pytree(t)[0]) for t in as_tree])
    decoder = ParamsDecoder(mlp_apply, activation="relu")
    common = dict(
        initial_solutions=initial,
        num_pg_training_steps=cfg["pg_steps"],
        num_critic_training_steps=cfg["critic_steps"],
        critic_hidden_layer_size=cfg["critic"],
        transitions_batch_size=cfg["transitions"],
        replay_buffer_size=cfg["buffer"],
    )
    if cfg["algorithm"] == "dcrl":
        ga, dc, ai = dcrl_split(cfg["batch"])
        emitters = dcrl_me_emitters(
            as_tree[0],
            problem.descriptor_ranges,
            activation="relu",
            ga_batch_size=ga,
            dcrl_batch_size=dc,
            ai_batch_size=ai,
            lengthscale=0.1,
            # QDax's example offsets and clips the environment's rewards: the critic's alone here,
            # or (--offset-fitness) the problem's, so that the fitness is QDax's too
            reward_offset=0.0 if offset else problem.reward_offset,
            **common,
        )
        # QDax's DCRL-ME order is [DCRL, GA] in its batch; ours the same
    else:
        emitters = pga_me_emitters(
            as_tree[0], decoder.apply, problem.observation_size, env_batch_size=cfg["batch"], **common
        )
    cells = centroids(cfg, problem.num_descriptors, problem.descriptor_ranges)
    archive = CVTArchive(
        solution_dim=initial.shape[1],
        centroids=cells,
        ranges=problem.descriptor_ranges,
        qd_score_offset=problem.qd_score_offset,
    )
    strategy = MAPElites(archive, emitters, solution=as_tree[0])
    result = evotensor.run(
        strategy,
        problem,
        cfg["generations"],
        jax.random.key(seed),
        decoder=decoder,
        progress=False,
    )
    stats = archive.stats(result.state.archive)
    out = {
        "compile_s": result.compile_seconds,
        "run_s": result.run_seconds,
        "qd_score": float(stats["qd_score"]),
        "coverage": float(stats["coverage"]),
        "max_fitness": float(stats["obj_max"]),
    }
    state = result.state.archive
    out |= rescore(cfg, cells, np.asarray(state.solutions)[np.asarray(state.occupied)])
    initial_lists = [[(w.tolist(), b.tolist()) for w, b in p] for p in population]
    return out, {"cells": cells.tolist(), "initial": initial_lists}


def dcrl_split(batch: int) -> tuple[int, int, int]:
    """QDax's DCRL-ME example split of a batch: half Iso+LineDD, a quarter PG, a quarter injected."""
    ga, dc = batch // 2, batch // 4
    return ga, dc, batch - ga - dc


def rescore(cfg: dict, cells: np.ndarray, solutions: np.ndarray) -> dict:
    """Both engines' final elites scored by the same code: one episode each (the same reset key for
    every policy, our ``BraxQDProblem``), inserted into an empty archive of the same centroids;
    QD score (QDax's offset), coverage and best return of that archive."""
    import jax
    from jax.flatten_util import ravel_pytree

    from evotensor.problems.networks import ParamsDecoder, mlp_apply
    from evotensor.problems.qd_control import BraxQDProblem
    from evotensor.qd import CVTArchive

    problem = BraxQDProblem(cfg["task"], episode_length=cfg["episode"])
    apply = ParamsDecoder(mlp_apply, activation="relu").apply
    sizes = (problem.observation_size, *cfg["policy"], problem.output_size)
    template = tuple(
        {"w": np.zeros((a, b), np.float32), "b": np.zeros(b, np.float32)}
        for a, b in zip(sizes[:-1], sizes[1:])
    )
    unravel = ravel_pytree(template)[1]
    evaluate = jax.jit(lambda p: problem.evaluate(jax.random.key(12345), jax.vmap(unravel)(p), apply))
    archive = CVTArchive(
        solution_dim=solutions.shape[1],
        centroids=cells,
        ranges=problem.descriptor_ranges,
        qd_score_offset=problem.qd_score_offset,
    )
    state = archive.init()
    for start in range(0, len(solutions), 256):
        part = np.zeros((256, solutions.shape[1]), np.float32)
        chunk = solutions[start : start + 256]
        part[: len(chunk)] = chunk
        ev = evaluate(part)
        fitness = np.where(np.arange(256) < len(chunk), np.asarray(ev.fitness), np.nan).astype(np.float32)
        state, _ = archive.add(state, part, fitness, np.asarray(ev.descriptor))
    stats = archive.stats(state)
    return {
        "re_qd_score": float(stats["qd_score"]),
        "re_coverage": float(stats["coverage"]),
        "re_max_fitness": float(stats["obj_max"]),
    }


# -- QDax (in its venv) --------------------------------------------------------------------------
def run_qdax(cfg: dict, seed: int, cells: np.ndarray, population: list) -> dict:
    import functools

    import jax
    import jax.numpy as jnp
    import qdax.tasks.brax as environments
    from qdax.core.emitters.mutation_operators import isoline_variation
    from qdax.core.emitters.pga_me_emitter import PGAMEConfig, PGAMEEmitter
    from qdax.core.map_elites import MAPElites
    from qdax.core.neuroevolution.networks.networks import MLP
    from qdax.utils.metrics import default_qd_metrics

    dcrl = cfg["algorithm"] == "dcrl"
    env = environments.create(cfg["task"], episode_length=cfg["episode"])
    if dcrl:  # QDax's DCRL-ME example: rewards offset and clipped at 0
        from qdax.tasks.brax.wrappers.reward_wrappers import ClipRewardWrapper, OffsetRewardWrapper

        env = OffsetRewardWrapper(env, offset=environments.reward_offset[cfg["task"]])
        env = ClipRewardWrapper(env, clip_min=0.0)
    policy = MLP(
        layer_sizes=(*cfg["policy"], env.action_size),
        kernel_init=jax.nn.initializers.lecun_uniform(),
        final_activation=jnp.tanh,
    )
    batch = cfg["batch"]
    variables = qdax_initial_variables(policy, env.observation_size, seed, population)

    def dcrl_transition(fields):
        from qdax.core.neuroevolution.buffers.buffer import DCRLTransition

        unknown = jnp.full((env.descriptor_length,), jnp.nan)  # filled by the emitter, as the example
        return DCRLTransition(**fields, desc=unknown, desc_prime=unknown)

    scoring = qdax_brax_scoring(env, policy, cfg, dcrl_transition if dcrl else None)
    offset = environments.reward_offset[cfg["task"]] * cfg["episode"]
    variation = functools.partial(isoline_variation, iso_sigma=0.005, line_sigma=0.05)
    if dcrl:
        from qdax.core.emitters.dcrl_me_emitter import DCRLMEConfig, DCRLMEEmitter
        from qdax.core.neuroevolution.networks.networks import MLPDC

        ga, dc, ai = dcrl_split(batch)
        config = DCRLMEConfig(
            ga_batch_size=ga,
            dcrl_batch_size=dc,
            ai_batch_size=ai,
            lengthscale=0.1,
            critic_hidden_layer_size=tuple(cfg["critic"]),
            num_critic_training_steps=cfg["critic_steps"],
            num_pg_training_steps=cfg["pg_steps"],
            batch_size=cfg["transitions"],
            replay_buffer_size=cfg["buffer"],
        )
        actor = MLPDC(
            layer_sizes=(*cfg["policy"], env.action_size),
            kernel_init=jax.nn.initializers.lecun_uniform(),
            final_activation=jnp.tanh,
        )
        emitter = DCRLMEEmitter(
            config=config, policy_network=policy, actor_network=actor, env=env, variation_fn=variation
        )
    else:
        config = PGAMEConfig(
            env_batch_size=batch,
            batch_size=cfg["transitions"],
            proportion_mutation_ga=0.5,
            critic_hidden_layer_size=tuple(cfg["critic"]),
            replay_buffer_size=cfg["buffer"],
            num_critic_training_steps=cfg["critic_steps"],
            num_pg_training_steps=cfg["pg_steps"],
        )
        emitter = PGAMEEmitter(config=config, policy_network=policy, env=env, variation_fn=variation)
    map_elites = MAPElites(
        scoring_function=scoring,
        emitter=emitter,
        metrics_function=functools.partial(default_qd_metrics, qd_offset=offset),
    )
    key = jax.random.key(seed)
    if cfg.get("rollout_only"):
        score = jax.jit(scoring)
        return timed_calls(lambda: score(variables, key)[0])

    def whole(variables, key):
        key, init_key = jax.random.split(key)
        repertoire, emitter_state, _ = map_elites.init(variables, jnp.asarray(cells), init_key)
        (repertoire, emitter_state, key), metrics = jax.lax.scan(
            map_elites.scan_update, (repertoire, emitter_state, key), (), length=cfg["generations"] - 1
        )
        return repertoire, metrics

    t = time.perf_counter()
    compiled = jax.jit(whole).lower(variables, key).compile()
    compile_s = time.perf_counter() - t
    t = time.perf_counter()
    repertoire, metrics = jax.block_until_ready(compiled(variables, key))
    run_s = time.perf_counter() - t
    fitness = np.asarray(repertoire.fitnesses).reshape(-1)
    filled = fitness > -np.inf
    flat = qdax_flat_policies(repertoire.genotypes["params"], len(cfg["policy"]) + 1)
    return {
        "elites": flat[filled].tolist(),
        "compile_s": compile_s,
        "run_s": run_s,
        "qd_score": float(np.sum(fitness[filled] + offset)),
        "coverage": float(filled.mean()),
        "max_fitness": float(fitness[filled].max()),
        "qd_score_metric": float(np.asarray(metrics["qd_score"])[-1]),
    }


# -- driver --------------------------------------------------------------------------------------
def qdax_case(python: str, cfg: dict, seed: int, shared: dict) -> dict:
    """One QDax run in its venv (this script with ``--impl qdax``), its JSON result."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"cfg": cfg, "seed": seed, **shared}, f)
    cmd = [python, __file__, "--impl", "qdax", "--case", f.name]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    os.unlink(f.name)
    if proc.returncode:
        sys.exit(f"QDax run failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--impl", choices=["both", "evotensor", "qdax"], default="both")
    p.add_argument("--task", default=TASK)
    p.add_argument("--algorithm", choices=["pga", "dcrl"], default="pga", help="PGA-ME or DCRL-ME")
    p.add_argument(
        "--offset-fitness",
        action="store_true",
        help="DCRL-ME: our fitness also sums max(r + reward_offset, 0), as QDax's example environment",
    )
    p.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    p.add_argument("--generations", type=int, default=None)
    p.add_argument("--full", action="store_true", help="QDax's example sizes (for a GPU)")
    p.add_argument(
        "--part", choices=["run", "rollout"], default="run", help="rollout: one evaluation of a batch only"
    )
    p.add_argument("--case", default=None, help="internal: a JSON file of one QDax run's arguments")
    args = p.parse_args()
    if args.impl == "qdax" and args.case:  # one run, in the qd venv
        with open(args.case) as f:
            case = json.load(f)
        out = run_qdax(case["cfg"], case["seed"], np.asarray(case["cells"], np.float32), case["initial"])
        print(json.dumps(out))
        return
    sys.path.insert(0, os.path.dirname(__file__))
    from bench_venvs import machine, venv_python

    cfg = config(args)
    qdax_python = venv_python("qd051")
    use_qdax = args.impl == "both" and os.path.exists(qdax_python)
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    title = "DCRL-ME" if cfg["algorithm"] == "dcrl" else "PGA-ME"
    print(f"# {title}, {now}; {machine()}\n# {json.dumps(cfg)}")
    evaluations = cfg["generations"] * cfg["batch"]
    if args.part == "rollout":
        print(f"\n# one evaluation of {cfg['batch']} policies x {cfg['episode']} steps, jitted")
        print("| engine | seed | compile s | ms (median of 9) | min ms | load |")
        print("|---|---|---|---|---|---|")
        for seed in args.seeds:
            rows = []
            for transitions in (True, False):
                r, shared = rollout_evotensor(cfg, seed, transitions)
                rows.append((f"evotensor{'' if transitions else ', no transitions'}", r))
            if use_qdax:
                timing = qdax_case(qdax_python, cfg | {"rollout_only": True}, seed, shared)
                rows.append(("QDax 0.5.1 scoring", timing))
            for name, r in rows:
                print(
                    f"| {name} | {seed} | {r['compile_s']:.1f} | {r['ms']:.1f} | {r['ms_min']:.1f} | "
                    f"{os.getloadavg()[0]:.2f} |",
                    flush=True,
                )
        return
    print(
        "| engine | seed | compile s | run s | evaluations/s | QD score | coverage | max fitness | "
        "re-scored QD score | coverage | max fitness | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for seed in args.seeds:
        ours, shared = run_evotensor(cfg, seed)
        rows: list[tuple[str, Any]] = [("evotensor", ours)]
        if use_qdax:
            theirs = qdax_case(qdax_python, cfg, seed, shared)
            theirs |= rescore(
                cfg, np.asarray(shared["cells"], np.float32), np.asarray(theirs.pop("elites"), np.float32)
            )
            name = "DCRLMEEmitter" if cfg["algorithm"] == "dcrl" else "PGAMEEmitter"
            rows.append((f"QDax 0.5.1 {name}", theirs))
        for name, r in rows:
            print(
                f"| {name} | {seed} | {r['compile_s']:.1f} | {r['run_s']:.1f} | "
                f"{evaluations / r['run_s']:.0f} | {r['qd_score']:.1f} | {r['coverage']:.3f} | "
                f"{r['max_fitness']:.1f} | {r['re_qd_score']:.1f} | {r['re_coverage']:.3f} | "
                f"{r['re_max_fitness']:.1f} | {os.getloadavg()[0]:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
