"""Multi-device scenarios of the sharded QD archive, launched by tests/qd/test_sharded_archive.py
through tests/distributed/harness.py: 4 devices in one process, or 2 processes x 2.

Each scenario runs MAP-Elites through ``evotensor.run(..., mesh=)`` on a mesh over ``jax.devices()``
(the archive split along its cells) and the same key without a mesh on this process's first device,
and returns both as lists (float32 values exactly). Every archive's cell count is chosen *not* to
divide by 4, so the padding is exercised. Arrays split across processes are gathered first.
"""

from __future__ import annotations

import dataclasses
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import evotensor
from evotensor.core import Evaluation
from evotensor.core.numerics import exact_sum, exact_vecmat, rounded
from evotensor.problems.multi_task import MultiTaskFunction
from evotensor.problems.qd import LinearProjection
from evotensor.qd import (
    CMAESEmitter,
    CVTArchive,
    DensityArchive,
    DiscountArchive,
    DiscountMLP,
    EmitterGroup,
    GaussianEmitter,
    GenotypeEmitter,
    GradientOperatorEmitter,
    GridArchive,
    IsoLineEmitter,
    MAPElites,
    MEESEmitter,
    MOMEArchive,
    MultiTaskMAPElites,
    dcrl_me_emitters,
    pga_me_emitters,
    problem_jacobian,
)
from evotensor.qd.density_archive import DensityState
from evotensor.qd.discount_archive import DiscountState
from evotensor.qd.emitters import DCRLState, MEESEmitterState, PolicyGradientState
from evotensor.qd.sharded_archive import ShardedArchive, trim_padding

# metrics that are sums over cells: equal to float32 rounding only (summation order per device)
SUMMED_METRICS = ("qd_score", "norm_qd_score", "obj_mean")
SHARDED = {"checkpoint_format": "sharded"}


def _mesh() -> jax.sharding.Mesh:
    return jax.make_mesh((jax.device_count(),), ("pop",))


def _host(x) -> np.ndarray:
    """The whole value of a (possibly multi-process) array on the host."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)


def _lists(tree) -> dict:
    """Every leaf of a pytree as a list, keyed by its path."""
    flat = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {jax.tree_util.keystr(path): _host(leaf).tolist() for path, leaf in flat}


@dataclasses.dataclass(frozen=True)
class Bowl:
    """fitness ``-|x - 0.4|^2`` (maximized), descriptor the first two coordinates, NaN fitness where
    the first coordinate is above ``nan_above``, and an extra per-candidate field (the coordinate
    sum). Row sums are :func:`~evotensor.core.numerics.exact_sum` trees: a plain row reduction of a
    population split over devices may round differently from the whole population's, and the
    archive can only be as exact as the evaluation it is given."""

    nan_above: float = np.inf
    maximize: bool = True

    def evaluate(self, key, x):
        fitness = -exact_sum((x - 0.4) ** 2, axis=1)
        fitness = jnp.where(x[:, 0] > self.nan_above, jnp.nan, fitness)
        return Evaluation(fitness=fitness, descriptor=x[:, :2], info={"total": exact_sum(x, axis=1)})


def _summary(me: MAPElites, result) -> dict:
    archive, state = me.reported_archive(result.state)
    out = {
        "archive": _lists(state),
        "history": {k: v.tolist() for k, v in result.history.items()},
        "best_fitness": result.best_fitness,
        "cells": archive.num_cells,
    }
    if isinstance(me.archive, (DensityArchive, DiscountArchive)):  # the reservoir, the discount model
        search = result.state.archive
        out["search"] = _lists(search.replace(key=jax.random.key_data(search.key)))
    elif result.state.result is not None:  # the search archive too (CMA-MAE thresholds)
        out["search"] = _lists(trim_padding(result.state.archive, me.archive.num_cells))
    cma = [s.cma for s in result.state.emitters if hasattr(s, "cma")]
    if cma:
        out["cma"] = [_lists({"mean": c.mean, "sigma": c.sigma, "C": c.C}) for c in cma]
    pg = [s.td3 for s in result.state.emitters if isinstance(s, (PolicyGradientState, DCRLState))]
    if pg:
        out["pg"] = [_lists(s) for s in pg]
    mees = [s for s in result.state.emitters if isinstance(s, MEESEmitterState)]
    if mees:
        out["mees"] = [_lists(s.replace(noise_key=jax.random.key_data(s.noise_key))) for s in mees]
    return out


def _both(make, problem, generations: int, seed: int) -> dict:
    """The mesh run (two chunks: the sharded state crosses a chunk boundary) and the one-device run."""
    kw = dict(chunk_size=generations // 2, progress=False)
    me = make()
    mesh = _mesh()
    mesh_run = evotensor.run(me, problem, generations, jax.random.key(seed), mesh=mesh, **kw)
    single_run = evotensor.run(make(), problem, generations, jax.random.key(seed), **kw)
    archives = {"search": mesh_run.state.archive, "result": mesh_run.state.result}
    return {
        "mesh": _summary(me, mesh_run),
        "single": _summary(me, single_run),
        "devices": jax.device_count(),
        "layout": {name: _layout(state) for name, state in archives.items() if state is not None},
    }


def _layout(state) -> dict:
    """Rows of the archive state (a density archive's: of its buffer) and of each of this process's
    shards, and the sharding spec."""
    if isinstance(state, DiscountState):  # the first layer's weights
        rows = state.params[0]["w"]
    else:
        rows = state.buffer if isinstance(state, DensityState) else state.solutions
    solutions = jax.tree_util.tree_leaves(rows)[0]
    return {
        "rows": int(solutions.shape[0]),
        "rows_per_device": [int(s.data.shape[0]) for s in solutions.addressable_shards],
        "spec": str(solutions.sharding.spec),
    }


def scenario_map_elites() -> dict:
    """MAP-Elites with every part sharded at once: a CVT search archive of 50 centroids (52 rows on 4
    devices) with CMA-MAE thresholds and an extra field, a 15 x 15 grid result archive (225 cells:
    228 rows), Gaussian and Iso+LineDD emitters and CMA-ME's CMA-ES emitter (improvement ranking,
    restarts), NaN fitness in part of the space. Archives and the (replicated) CMA-ES state must
    equal the one-device run bit for bit. (One CMA-ES emitter: each one more doubles the compile.)"""
    centroids = np.random.default_rng(0).uniform(0, 1, (50, 2)).astype(np.float32)

    def make():
        search = CVTArchive(
            solution_dim=5,
            centroids=centroids,
            ranges=[(0, 1), (0, 1)],
            chunk_size=8,  # several blocks per device
            learning_rate=0.3,
            threshold_min=-0.4,
            extra_fields={"total": ((), jnp.float32)},
        )
        result = GridArchive(solution_dim=5, dims=(15, 15), ranges=[(0, 1), (0, 1)], qd_score_offset=-1.0)
        x0 = np.full(5, 0.5)
        emitters = [
            GaussianEmitter(0.15, x0, batch_size=8, bounds=(0, 1)),
            IsoLineEmitter(x0, iso_sigma=0.1, line_sigma=0.3, batch_size=8),
            # ranked by the batch's AddInfo (status, then value); restarts from an archive elite
            CMAESEmitter(np.full(5, 0.3), 0.2, ranker="2imp", restart_rule=3, batch_size=8),
            GaussianEmitter(0.05, x0, batch_size=8),
        ]
        return MAPElites(search, emitters, result_archive=result)

    return _both(make, Bowl(nan_above=0.75), 12, seed=1)


def scenario_mees() -> dict:
    """ME-ES (explore and exploit phases of 3 steps, parents drawn through the sharded archive's
    ``best_cells``, its samples evaluate-only) on a 9 x 9 grid (81 cells: 84 rows), the batch
    padded to a multiple of 4 devices; the archive and the emitter state must equal the one-device
    run's bit for bit."""

    def make():
        archive = GridArchive(solution_dim=5, dims=(9, 9), ranges=[(0, 1), (0, 1)], qd_score_offset=-1.0)
        emitter = MEESEmitter(
            np.full(5, 0.5), num_samples=10, sigma=0.2, num_optimizer_steps=3, batch_multiple=4, bounds=(0, 1)
        )
        return MAPElites(archive, [emitter])

    return _both(make, Bowl(), 14, seed=2)


def scenario_emitter_group() -> dict:
    """Three CMA-ES emitters as one EmitterGroup (vmapped; restarts from elites drawn through the
    sharded archive inside the vmap) on a 9 x 9 grid (84 rows on 4 devices): the archive and the
    stacked CMA-ES states must equal the one-device run's bit for bit."""

    def make():
        archive = GridArchive(solution_dim=5, dims=(9, 9), ranges=[(0, 1), (0, 1)], qd_score_offset=-1.0)
        emitter = CMAESEmitter(np.full(5, 0.5), 0.2, ranker="imp", restart_rule=3, batch_size=4)
        return MAPElites(archive, [EmitterGroup(emitter, 3)])

    return _both(make, Bowl(), 10, seed=3)


class GenotypeBowl:
    """Bowl on ``{"x": float32 [5], "k": int32 []}`` genotypes: fitness ``-|x - 0.4|^2 - k / 10``
    (maximized), descriptor ``x[:2]``."""

    maximize = True

    def evaluate(self, key, genotypes):
        x = genotypes["x"]
        fitness = -exact_sum((x - 0.4) ** 2, axis=1) - genotypes["k"].astype(jnp.float32) / 10
        return Evaluation(fitness=fitness, descriptor=x[:, :2])


def scenario_genotypes() -> dict:
    """MAP-Elites over genotype pytrees (a float leaf and an exact int32 leaf; GenotypeEmitter with
    a Gaussian step on ``x`` and +-1 on ``k``) on a 9 x 9 grid (81 cells: 84 rows on 4 devices):
    every leaf of the archive must equal the one-device run's bit for bit."""

    def variation(key, parents):
        a, b = jax.random.split(key)
        x = jnp.clip(parents["x"] + 0.1 * jax.random.normal(a, parents["x"].shape), 0, 1)
        k = jnp.clip(parents["k"] + jax.random.randint(b, parents["k"].shape, -1, 2), 0, 5)
        return {"x": x, "k": k}

    def initial(key, n):
        return {"x": jax.random.uniform(key, (n, 5)), "k": jnp.full((n,), 5, jnp.int32)}

    def make():
        template = {"x": jnp.zeros(5), "k": jnp.zeros((), jnp.int32)}
        archive = GridArchive(genotype=template, dims=(9, 9), ranges=[(0, 1), (0, 1)], qd_score_offset=-2.0)
        return MAPElites(archive, [GenotypeEmitter(variation, initial, batch_size=8)])

    return _both(make, GenotypeBowl(), 10, seed=4)


class TwoBowls:
    """Two objectives (maximized): ``-|x - 0.2|^2`` and ``-|x - 0.7|^2`` (exact row sums), descriptor
    the first two coordinates clipped to the unit square."""

    maximize = True

    def evaluate(self, key, x):
        f = jnp.stack([-exact_sum((x - 0.2) ** 2, axis=1), -exact_sum((x - 0.7) ** 2, axis=1)], axis=1)
        return Evaluation(fitness=f, descriptor=jnp.clip(x[:, :2], 0, 1))


def scenario_mome() -> dict:
    """MOME (a Pareto front of up to 5 per cell of a 50-centroid CVT archive: 52 rows on 4 devices)
    with Iso+LineDD and a CMA-ES emitter ranked by hypervolume gain, crowding truncation: every front,
    slot and the CMA-ES state must equal the one-device run's bit for bit."""
    centroids = np.random.default_rng(5).uniform(0, 1, (50, 2)).astype(np.float32)

    def make():
        cells = CVTArchive(solution_dim=4, centroids=centroids, ranges=[(0, 1), (0, 1)], chunk_size=8)
        archive = MOMEArchive(cells, num_objectives=2, front_size=5, reference_point=[-4.0, -4.0])
        emitters = [
            IsoLineEmitter(np.full(4, 0.5), iso_sigma=0.1, line_sigma=0.2, batch_size=16),
            CMAESEmitter(np.full(4, 0.5), 0.2, ranker="2imp", batch_size=8),
        ]
        return MAPElites(archive, emitters)

    return _both(make, TwoBowls(), 12, seed=5)


class PointMass:
    """A point in the unit square pushed for 6 steps by a linear policy ``tanh(s @ w + b)`` (flat
    genotypes in ``ravel_pytree`` order of ``{"b", "w"}``): reward ``-|s' - (0.8, 0.2)|^2``, the
    last step a time-limit truncation, descriptor the final point; every step's transitions in
    ``info`` (what PGA-ME's critic learns from). The rollout's sums are exact trees and its products
    rounded (:mod:`evotensor.core.numerics`), as Bowl's."""

    maximize = True
    steps = 6

    def __init__(self):
        from jax.flatten_util import ravel_pytree

        self.template = {"b": jnp.zeros(2), "w": jnp.zeros((2, 2))}
        self.unravel = ravel_pytree(self.template)[1]

    @staticmethod
    def apply(params, obs):
        return obs @ params["w"] + params["b"]

    def evaluate(self, key, x):
        from evotensor.core.replay import Transitions

        starts = jax.random.uniform(key, (x.shape[0], 2))

        def rollout(flat, s):
            params = self.unravel(flat)

            def step(s, t):
                # batching-invariant arithmetic (products rounded, sums as fixed trees): the rows
                # split over devices must round as the whole population's
                a = jnp.tanh(rounded(exact_vecmat(s, params["w"]) + params["b"]))
                nxt = jnp.clip(s + rounded(0.2 * a), 0.0, 1.0)
                r = -exact_sum((nxt - jnp.array([0.8, 0.2])) ** 2)
                last = (t == self.steps - 1).astype(jnp.float32)
                return nxt, Transitions(s, a, r, nxt, last, last, jnp.ones((), bool))

            final, steps = jax.lax.scan(step, s, jnp.arange(self.steps))
            return final, steps

        finals, steps = jax.vmap(rollout)(x, starts)
        fitness = exact_sum(steps.reward, axis=1)
        return Evaluation(fitness=fitness, descriptor=finals, info={"transitions": steps})


def scenario_pga_me() -> dict:
    """PGA-ME (Iso+LineDD and the policy-gradient emitter: a TD3 critic trained on every transition,
    elites improved along it, the greedy actor injected) on a 9 x 9 grid (84 rows on 4 devices), the
    population's transitions split over the devices: the archive and the replicated TD3 state
    (critic, actor, targets, replay buffer) must equal the one-device run's bit for bit."""
    problem = PointMass()

    def make():
        archive = GridArchive(solution_dim=6, dims=(9, 9), ranges=[(0, 1), (0, 1)], qd_score_offset=-6.0)
        emitters = pga_me_emitters(
            problem.template,
            problem.apply,
            2,
            env_batch_size=8,
            num_pg_training_steps=3,
            num_critic_training_steps=4,
            critic_hidden_layer_size=(8,),
            transitions_batch_size=16,
            replay_buffer_size=200,  # wraps around within the run
            initial_solutions=np.random.default_rng(6).normal(0, 1, (8, 6)).astype(np.float32),
        )
        return MAPElites(archive, emitters)

    return _both(make, problem, 8, seed=6)


def scenario_dcrl_me() -> dict:
    """DCRL-ME (Iso+LineDD and the descriptor-conditioned emitter: parents' descriptors and the
    injected actors' targets read through the sharded archive's ``elite_measures``) on a 9 x 9 grid
    (84 rows on 4 devices), the DCRL rows after the Iso+LineDD ones: the archive and the replicated
    TD3 state (conditioned critic and actor, targets, replay buffer with ``desc``/``desc_prime``)
    must equal the one-device run's bit for bit."""
    problem = PointMass()

    def make():
        archive = GridArchive(solution_dim=6, dims=(9, 9), ranges=[(0, 1), (0, 1)], qd_score_offset=-6.0)
        dc, ga = dcrl_me_emitters(
            (problem.template,),  # one linear layer: the problem's flat layout (b, then w)
            [(0.0, 1.0), (0.0, 1.0)],
            activation="identity",
            ga_batch_size=4,
            dcrl_batch_size=2,
            ai_batch_size=2,
            num_pg_training_steps=3,
            num_critic_training_steps=4,
            critic_hidden_layer_size=(8,),
            transitions_batch_size=16,
            replay_buffer_size=300,
            initial_solutions=np.random.default_rng(7).normal(0, 1, (8, 6)).astype(np.float32),
        )
        return MAPElites(archive, [ga, dc])

    return _both(make, problem, 8, seed=7)


# distinctive sizes: "[1001,7]" in the HLO text can only be the whole archive's solutions
HLO_CELLS, HLO_DIMS, HLO_BATCH = 1001, 7, 64


def scenario_dds() -> dict:
    """Density Descent Search (three CMA-ES emitters ranked by density, restarts from the sharded
    result grid's elites; the density archive whole on every device) on a 9 x 9 grid: the result
    archive, the reservoir and the CMA-ES states must equal the one-device run's bit for bit."""
    problem = LinearProjection(6, "sphere")

    def make():
        grid = GridArchive(solution_dim=6, dims=(9, 9), ranges=problem.descriptor_ranges)
        density = DensityArchive(measure_dim=2, buffer_size=30, bandwidth=1.5)
        emitter = CMAESEmitter(
            np.zeros(6), 1.0, ranker="density", selection_rule="mu", restart_rule=4, batch_size=4
        )
        return MAPElites(density, [EmitterGroup(emitter, 3)], result_archive=grid)

    return _both(make, problem, 10, seed=9)


def scenario_dms() -> dict:
    """Discount Model Search (three CMA-ES emitters ranked by improvement over a discount network
    trained every generation on the batch and the sharded result grid's empty cells) on a 9 x 9
    grid: the result archive, the model, its optimizer and the CMA-ES states must equal the
    one-device run's bit for bit."""
    problem = LinearProjection(6, "sphere", scale=1.0)

    def make():
        grid = GridArchive(solution_dim=6, dims=(9, 9), ranges=problem.descriptor_ranges)
        search = DiscountArchive(
            result_archive=grid,
            learning_rate=0.1,
            threshold_min=0.0,
            model=DiscountMLP((16, 16)),
            init_train_points=40,
            empty_points=10,
            train_batch_size=8,
            train_cutoff_loss=1e-4,
        )
        emitter = CMAESEmitter(
            np.zeros(6), 1.0, ranker="imp", selection_rule="mu", restart_rule=4, batch_size=4
        )
        return MAPElites(search, [EmitterGroup(emitter, 3)], result_archive=grid)

    return _both(make, problem, 10, seed=11)


def scenario_omg_mega() -> dict:
    """OMG-MEGA (gradients by ``jax.jacrev`` at parents drawn through the sharded archive, Iso+LineDD
    intermediate solutions) on a 9 x 9 grid (84 rows on 4 devices): the archive must equal the
    one-device run's bit for bit."""
    problem = LinearProjection(6, "sphere")

    def make():
        archive = GridArchive(solution_dim=6, dims=(9, 9), ranges=problem.descriptor_ranges)
        emitter = GradientOperatorEmitter(
            np.zeros(6),
            sigma_g=1.0,
            jacobian=problem_jacobian(problem),
            sigma=0.1,
            line_sigma=0.2,
            batch_size=8,
        )
        return MAPElites(archive, [emitter])

    return _both(make, problem, 10, seed=8)


def scenario_multi_task() -> dict:
    """Multi-task MAP-Elites (replicated state: 49 task cells, the bandit) with its batch of 16
    evaluated 4 rows per device, NaN fitness for part of the space: the archive, the bandit's record
    and the history must equal the one-device run's bit for bit."""
    side = (np.arange(7) + 0.5) / 7
    tasks = np.stack(np.meshgrid(side, side, indexing="ij"), -1).reshape(-1, 2).astype(np.float32)

    def fitness(x, p):
        value = -exact_sum((x[:, :2] - p) ** 2, axis=1) - exact_sum(x[:, 2:] ** 2, axis=1)
        return jnp.where(x[:, 0] > 0.9, jnp.nan, value)

    def run(mesh):
        me = MultiTaskMAPElites(tasks, solution_dim=4, batch_size=16, tournament_sizes=(1, 4, 16))
        options = dict(chunk_size=6, progress=False, mesh=mesh)
        return evotensor.run(me, MultiTaskFunction(fitness), 12, jax.random.key(7), **options)

    out = {}
    for name, mesh in (("mesh", _mesh()), ("single", None)):
        result = run(mesh)
        out[name] = {
            "state": _lists(result.state),
            "history": {k: v.tolist() for k, v in result.history.items()},
            "best_fitness": result.best_fitness,
        }
    out["devices"] = jax.device_count()
    return out


def scenario_insertion_hlo() -> dict:
    """Collectives of the compiled sharded insertion and parent selection (CVT, 1001 cells): every
    collective's operand shape, and whether a whole-archive ``[cells, dims]`` array appears."""
    centroids = np.random.default_rng(1).uniform(0, 1, (HLO_CELLS, 2)).astype(np.float32)
    archive = ShardedArchive(
        CVTArchive(solution_dim=HLO_DIMS, centroids=centroids, ranges=[(0, 1), (0, 1)]), _mesh()
    )
    state = archive.init()
    # the candidates as the run loop hands them over: split along the population
    split = NamedSharding(archive.mesh, P("pop"))
    x, f, m = (
        jax.device_put(jnp.zeros(shape), split)
        for shape in [(HLO_BATCH, HLO_DIMS), HLO_BATCH, (HLO_BATCH, 2)]
    )

    def parents(key, state):
        return archive.elite_solutions(state, archive.sample_elites(key, state, HLO_BATCH))

    texts = {
        "add": jax.jit(archive.add).lower(state, x, f, m).compile().as_text(),
        "parents": jax.jit(parents).lower(jax.random.key(0), state).compile().as_text(),
    }
    collectives = {}
    for name, text in texts.items():
        shapes = []
        for line in text.splitlines():
            op = re.search(
                r"\b(all-gather|all-reduce|all-to-all|collective-permute|reduce-scatter)(-start)?\(", line
            )
            if op:  # the result shape(s) precede the op name: "%x = s32[64,7]{1,0} all-reduce(..."
                for shape in re.findall(r"[a-z]+[0-9]*\[([\d,]*)\]", line[: op.start()]):
                    shapes.append([int(s) for s in shape.split(",") if s])
        collectives[name] = shapes
    whole = f"[{archive.padded_cells},{HLO_DIMS}]"
    return {
        "collectives": collectives,
        "largest": {k: max((math.prod(s) for s in v), default=0) for k, v in collectives.items()},
        "whole_archive_in_hlo": {
            k: (whole in t or f"[{HLO_CELLS},{HLO_DIMS}]" in t) for k, t in texts.items()
        },
        "shard_in_hlo": {k: f"[{archive.shard_cells},{HLO_DIMS}]" in t for k, t in texts.items()},
        "shard_cells": archive.shard_cells,
        "batch_x_dims": HLO_BATCH * HLO_DIMS,
        "devices": jax.device_count(),
    }


def scenario_checkpoint_across_device_counts() -> dict:
    """A 7 x 7 grid (49 cells: 52 rows on 4 devices, 50 on 2, 49 without a mesh) run on 4 devices,
    stopped after its first chunk, then resumed from the run directory on 2 devices and, from a
    copy, without a mesh: the checkpoint holds the unpadded archive (``portable_state``), so both
    resumes finish with the uninterrupted 4-device run's archive, bit for bit."""
    import os
    import shutil
    import tempfile

    def make():
        archive = GridArchive(solution_dim=4, dims=(7, 7), ranges=[(0, 1), (0, 1)])
        return MAPElites(archive, [GaussianEmitter(0.2, np.full(4, 0.5), batch_size=8, bounds=(0, 1))])

    class Stop(Exception):
        pass

    def stop(info):
        if info["generation"] >= 3:
            raise Stop

    devices = jax.devices()
    four = jax.make_mesh((4,), ("pop",), devices=devices[:4])
    two = jax.make_mesh((2,), ("pop",), devices=devices[:2])
    kw = dict(chunk_size=3, progress=False)
    key, problem = jax.random.key(3), Bowl()
    whole = evotensor.run(make(), problem, 6, key, mesh=four, **kw)
    root = tempfile.mkdtemp(dir=os.environ.get("EVOTENSOR_SCENARIO_TMP"))
    first, copy = os.path.join(root, "run"), os.path.join(root, "copy")
    try:
        evotensor.run(make(), problem, 6, key, mesh=four, run_dir=first, callback=stop, **kw)
    except Stop:
        pass
    shutil.copytree(first, copy)
    on_two = evotensor.run(make(), problem, 6, key, mesh=two, run_dir=first, resume=True, **kw)
    on_one = evotensor.run(make(), problem, 6, key, run_dir=copy, resume=True, **kw)
    # the sharded format: written from each device's own cells, restored straight onto 2 devices
    sharded, written = os.path.join(root, "sharded"), []
    kw.update(SHARDED)
    try:
        with _recording_writes(written):
            evotensor.run(make(), problem, 6, key, mesh=four, run_dir=sharded, callback=stop, **kw)
    except Stop:
        pass
    stored = _stored_rows(sharded, "archive.solutions")
    sharded_two = evotensor.run(make(), problem, 6, key, mesh=two, run_dir=sharded, resume=True, **kw)
    shutil.rmtree(root, ignore_errors=True)
    me = make()
    return {
        "whole": _summary(me, whole)["archive"],
        "two": _summary(me, on_two)["archive"],
        "one": _summary(me, on_one)["archive"],
        "sharded_two": _summary(me, sharded_two)["archive"],
        "stored": stored,
        "written": written,
        "rows": [int(r.state.archive.objective.shape[0]) for r in (whole, on_two, on_one, sharded_two)],
    }


def _stored_rows(run_dir, leaf: str) -> dict:
    """The newest sharded checkpoint's leaf whose path ends with ``leaf``: its shape and, per shard
    file, the row ranges stored there."""
    from evotensor.io import sharded_checkpoint as sc

    manifest = sc.read_sharded_manifest(sc.ShardedCheckpoints().find(run_dir))
    found = next(x for x in manifest["leaves"] if x["path"].endswith(leaf))
    files: dict = {}
    for shard in found["shards"]:
        files.setdefault(shard["file"], []).append(shard["index"][0])
    return {"shape": found["shape"], "files": {k: sorted(v) for k, v in files.items()}}


def _small_grid() -> MAPElites:
    """MAP-Elites on a 7 x 7 grid: 49 cells, padded to 52 rows on 4 devices and 50 on 2."""
    archive = GridArchive(solution_dim=4, dims=(7, 7), ranges=[(0, 1), (0, 1)])
    return MAPElites(archive, [GaussianEmitter(0.2, np.full(4, 0.5), batch_size=8, bounds=(0, 1))])


class _Stop(Exception):
    pass


def _stop_at(generation: int):
    def stop(info):
        if info["generation"] >= generation:
            raise _Stop

    return stop


def _recording_writes(record: list):
    """Context: every tree the sharded writer is handed, its archive leaves described as
    ``{padded, rows, device_rows}`` (``device_rows``: the rows of each shard this process
    holds of the array handed over) and appended to ``record``."""
    import contextlib

    from evotensor.core.mesh import is_padded
    from evotensor.io import sharded_checkpoint as sc

    def describe(leaf) -> dict:
        array = leaf.array if is_padded(leaf) else leaf
        return {
            "padded": is_padded(leaf),
            "rows": int(array.shape[0]),
            "device_rows": [int(s.data.shape[0]) for s in array.addressable_shards],
        }

    @contextlib.contextmanager
    def recording():
        real = sc._write_process_shards

        def write(directory, tree):
            record.append([describe(x) for x in jax.tree_util.tree_leaves(tree.strategy_state.archive)])
            return real(directory, tree)

        sc._write_process_shards = write
        try:
            yield
        finally:
            sc._write_process_shards = real

    return recording()


def scenario_sharded_checkpoint_chain() -> dict:
    """:func:`_small_grid` run for 12 generations in chunks of 3, stopped after every chunk and
    resumed on 4 -> 2 -> 1 -> 4 devices, against the uninterrupted 4-device run. Checkpoints are
    sharded, except the 1-device leg's (single file): so the last leg also restores a single-file
    checkpoint onto the sharded format's padded template. Also what the sharded writer was handed at
    each checkpoint (:func:`_recording_writes`) and where each sharded checkpoint stored the cells."""
    import os
    import shutil
    import tempfile

    devices = jax.devices()
    meshes = {n: jax.make_mesh((n,), ("pop",), devices=devices[:n]) for n in (4, 2)}
    kw = dict(chunk_size=3, progress=False)
    key, problem = jax.random.key(3), Bowl()
    whole = evotensor.run(_small_grid(), problem, 12, key, mesh=meshes[4], **kw)
    root = tempfile.mkdtemp(dir=os.environ.get("EVOTENSOR_SCENARIO_TMP"))
    written, stored = [], []
    legs = ((4, "sharded"), (2, "sharded"), (1, "single"), (4, "sharded"))
    try:
        with _recording_writes(written):
            for i, (n, form) in enumerate(legs):
                try:
                    last = evotensor.run(
                        _small_grid(), problem, 12, key, mesh=meshes.get(n), run_dir=root, resume=i > 0,
                        callback=_stop_at(3 * (i + 1)) if i < 3 else None, checkpoint_format=form, **kw,
                    )  # fmt: skip
                except _Stop:
                    pass
                stored.append(_stored_rows(root, "archive.solutions") if form == "sharded" else None)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    me = _small_grid()
    return {
        "whole": _summary(me, whole),
        "chain": _summary(me, last),
        "emitters": [_lists(r.state.emitters) for r in (whole, last)],
        "written": written,
        "stored": stored,
    }


def scenario_two_processes_sharded_checkpoint() -> dict:
    """2 processes x 2 devices: :func:`_small_grid` on all 4 devices for 12 generations in chunks
    of 3, stopped after every chunk and resumed by both processes, against the uninterrupted run.
    Checkpoints: single file, single file (restored from global arrays), sharded (the single file
    read onto the padded template), sharded (restored, each process reading its own devices'
    cells). Which archive rows each process's shard file holds, and what each process's sharded
    writer was handed."""
    import os

    root = os.path.join(os.environ["EVOTENSOR_SCENARIO_TMP"], "qd_sharded")
    mesh = _mesh()
    kw = dict(chunk_size=3, progress=False)
    key, problem = jax.random.key(3), Bowl()
    whole = evotensor.run(_small_grid(), problem, 12, key, mesh=mesh, **kw)
    written: list = []
    legs = ("single", "single", "sharded", "sharded")
    with _recording_writes(written):
        for i, form in enumerate(legs):
            try:
                resumed = evotensor.run(
                    _small_grid(), problem, 12, key, mesh=mesh, run_dir=root, resume=i > 0,
                    callback=_stop_at(3 * (i + 1)) if i < 3 else None, checkpoint_format=form, **kw,
                )  # fmt: skip
            except _Stop:
                pass
            if i == 2:
                stored = _stored_rows(root, "archive.solutions")
    me = _small_grid()
    return {
        "process": jax.process_index(),
        "whole": _summary(me, whole)["archive"],
        "resumed": _summary(me, resumed)["archive"],
        "stored": stored,
        "written": written,
    }
