"""Multi-device scenarios of the evolution strategies under ``evotensor.run(..., mesh=)``, launched
by tests/es/test_mesh.py (4 devices in one process, with tests/neat/mesh_scenarios.py in the same
subprocess) and by the 2-process launch (2 processes x 2 devices).

Each scenario builds its mesh over ``jax.devices()`` and returns the mesh run next to a run of the
same key on one device (this process's first device), as lists:

* shardable strategies (``on_mesh``: population split for sampling, evaluation and update): the
  sharded sample is drawn per device from ``fold_in(ask_key, device)``, so the one-device run that
  matches it draws each device's rows itself (:func:`emulated_run`, the strategy's own ``_sample``)
  and tells the unsharded ``tell``; equal within float32 summation order. OpenES is also run by the
  existing sharded ``ask``/``tell`` loop on the mesh.
* CMA-ES (no hook: state replicated, evaluation split): the plain ``run`` without a mesh, bit for
  bit.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax

import evotensor
from evotensor.core.evaluation import Evaluation
from evotensor.core.mesh import auto_mesh, on_mesh
from evotensor.core.run import Loop, generation_keys
from evotensor.es import CMAES, PGPE, SNES, OpenES, PersistentES
from evotensor.es.core.sharding import population_order, shard_state, sharded

POP, DIMS = 24, 13  # distinctive sizes: "[24,13]" in a program's text can only be the population
GENERATIONS, CHUNK = 4, 2  # two chunks: the state crosses a chunk boundary in its mesh layout
START = jnp.linspace(-1.0, 1.0, DIMS)
RUN = dict(generations=GENERATIONS, chunk_size=CHUNK, progress=False)


# the default tier's 4-device launches (ES under the suite's fast compiler options, NEAT under XLA's
# defaults, see four_devices) and the slow tier's; programs() and program() are facts about compiled
# programs, not runs
FAST = [
    "tests.es.mesh_scenarios:scenario_open_es",
    "tests.es.mesh_scenarios:scenario_cma_es",
    "tests.es.mesh_scenarios:programs",
    "tests.neat.mesh_scenarios:collectives",
]
FAST_NEAT = ["tests.neat.mesh_scenarios:scenario_neat_xor"]
SLOW = [  # SNES and PGPE: spot checks of the same MeshStrategy path OpenES takes in the default tier
    "tests.es.mesh_scenarios:scenario_snes",
    "tests.es.mesh_scenarios:scenario_pgpe",
    "tests.es.mesh_scenarios:scenario_persistent_es",
    "tests.neat.mesh_scenarios:program",
]


@functools.cache
def four_devices(tier: str = "fast") -> dict:
    """Every scenario of ``tier`` (``"fast"``: :data:`FAST`, ``"neat"``: :data:`FAST_NEAT`,
    ``"slow"``: :data:`SLOW`) run once in ONE subprocess with 4 CPU devices;
    ``{"module:function": result}``.

    NEAT's launches use XLA's default compiler options, not the test suite's fast-compile ones: under
    those (LLVM at -O0) the one-device NEAT program itself rounds a few mutated attributes one ulp
    differently depending on what else the program holds, which a bit-for-bit comparison of two
    different programs would report. The ES scenarios keep the suite's options (faster to compile).
    """
    from tests.distributed.harness import run_single

    if tier == "fast":
        return run_single(FAST, devices=4)
    return run_single(FAST_NEAT if tier == "neat" else SLOW, devices=4, env={"XLA_FLAGS": ""})


@functools.cache
def two_processes() -> list[dict]:
    """Every ``scenario_*`` of both tiers in 2 processes x 2 CPU devices joined by
    ``jax.distributed`` (gloo); one ``{"module:function": result}`` per process."""
    from tests.distributed.harness import run_multiprocess

    names = [name for name in FAST + FAST_NEAT + SLOW if ":scenario_" in name]
    return run_multiprocess(names, processes=2, devices_per_process=2, env={"XLA_FLAGS": ""}, timeout=600)


def _mesh() -> jax.sharding.Mesh:
    return jax.make_mesh((jax.device_count(),), ("pop",))


def _local(x) -> np.ndarray:
    """A replicated (or single-device) array's value in this process."""
    return np.asarray(x.addressable_data(0) if isinstance(x, jax.Array) else x)


class SineSphere:
    """``sum(sin(x)^2)`` per row: its ``sine`` op marks the evaluation in a compiled program; it
    records, at trace time, how many rows one device evaluates."""

    maximize = False

    def __init__(self):
        self.rows: list[int] = []

    def evaluate(self, key, genotypes):
        del key
        jax.debug.inspect_array_sharding(
            genotypes, callback=lambda s: self.rows.append(int(s.shard_shape(genotypes.shape)[0]))
        )
        return Evaluation(fitness=jnp.sum(jnp.sin(genotypes) ** 2, axis=1))


def _run_summary(result, strategy) -> dict:
    state = result.state
    return {
        "mean": _local(state.mean).tolist(),
        "best_fitness": result.best_fitness,
        "best_genotype": _local(result.best_genotype).tolist(),
        "history": {k: v.tolist() for k, v in result.history.items()},
        "state_specs": {
            f: str(getattr(state, f).sharding.spec) for f in ("mean", *strategy.shard_state_fields)
        },
    }


def emulated_run(es, problem, generations: int, key, devices: int) -> dict:
    """The run of ``es.on_mesh(mesh of devices)`` on ONE device: each generation, device ``s``'s
    rows drawn by ``es._sample`` from ``fold_in(ask_key, s)`` (per-member state sliced per device),
    evaluated, put in the strategy's row order and told to the unsharded ``tell``; best-so-far
    tracked as ``run`` does (lowest fitness, first index on ties, over the sharded order)."""
    params = es.default_params()
    init_key, loop_key = jax.random.split(key)
    state = es.init(init_key, params)
    rows = es.population_size // devices
    order = population_order(es, devices)
    sample = jax.jit(es._sample, static_argnums=3)
    evaluate, tell = jax.jit(problem.evaluate), jax.jit(es.tell)
    fields = tuple(es.shard_state_fields)
    best, best_fitness = None, np.inf
    for generation in range(generations):
        ask_key, eval_key, tell_key = generation_keys(loop_key, generation)
        xs, parts = [], {f: [] for f in fields}
        for s in range(devices):
            local = state.replace(
                **{f: np.asarray(getattr(state, f)).reshape(devices, -1, es.num_dims)[s] for f in fields}
            )
            x, local = sample(jax.random.fold_in(ask_key, s), local, params, rows)
            xs.append(np.asarray(x))
            for f in fields:
                parts[f].append(np.asarray(getattr(local, f)))
        state = state.replace(**{f: jnp.asarray(np.concatenate(v)) for f, v in parts.items()})
        x = np.concatenate(xs)
        fitness = np.asarray(evaluate(eval_key, jnp.asarray(x)).fitness)
        i = int(np.argmin(fitness))
        if fitness[i] < best_fitness:
            best, best_fitness = x[i], float(fitness[i])
        state, _ = tell(tell_key, state, jnp.asarray(x[order]), jnp.asarray(fitness[order]), params)
    mean = np.asarray(state.mean).tolist()
    return {"mean": mean, "best_fitness": best_fitness, "best_genotype": best.tolist()}


def sharded_loop(es, problem, generations: int, key, mesh) -> dict:
    """The existing sharded ``ask``/``tell`` (:func:`sharded`) driven by hand on ``mesh`` with
    ``run``'s key schedule (every program waited for: XLA:CPU collectives)."""
    ask, tell = sharded(es, mesh)
    init_key, loop_key = jax.random.split(key)
    state = shard_state(es, es.init(init_key), mesh)
    evaluate = jax.jit(lambda k, x: problem.evaluate(k, x).fitness)
    for generation in range(generations):
        ask_key, eval_key, tell_key = generation_keys(loop_key, generation)
        x, state = jax.block_until_ready(ask(ask_key, state))
        fitness = jax.block_until_ready(evaluate(eval_key, x))
        state, _ = jax.block_until_ready(tell(tell_key, state, x, fitness))
    return {"mean": _local(state.mean).tolist()}


def _shardable(name: str):
    return {
        "OpenES": lambda: OpenES(POP, solution=START, optimizer=optax.sgd(0.05), sigma_init=0.1),
        "SNES": lambda: SNES(POP, solution=START),
        "PGPE": lambda: PGPE(POP, solution=START, optimizer=optax.adam(0.05), sigma_init=0.1),
        "PersistentES": lambda: PersistentES(POP, solution=START, optimizer=optax.sgd(0.02), T=4, K=2),
    }[name]()


def _shardable_scenario(name: str) -> dict:
    es = _shardable(name)
    key = jax.random.key(7)
    problem = SineSphere()
    result = evotensor.run(es, problem, key=key, mesh=_mesh(), **RUN)
    return {
        "mesh": _run_summary(result, es),
        "single": emulated_run(es, SineSphere(), GENERATIONS, key, jax.device_count()),
        "rows_per_device": problem.rows,
    }


def scenario_open_es() -> dict:
    """OpenES (mirrored pairs kept on one device) through ``run(..., mesh=)``, the same run by the
    existing sharded ask/tell loop, and its one-device emulation."""
    out = _shardable_scenario("OpenES")
    out["loop"] = sharded_loop(_shardable("OpenES"), SineSphere(), GENERATIONS, jax.random.key(7), _mesh())
    return out


def scenario_snes() -> dict:
    """SNES through ``run(..., mesh=)`` and its one-device emulation."""
    return _shardable_scenario("SNES")


def scenario_pgpe() -> dict:
    """PGPE (pairs, Adam) through ``run(..., mesh=)`` and its one-device emulation."""
    return _shardable_scenario("PGPE")


def scenario_persistent_es() -> dict:
    """PersistentES, whose per-pair perturbation state ``run`` must keep split between chunks."""
    return _shardable_scenario("PersistentES")


def scenario_cma_es() -> dict:
    """CMA-ES (no ``on_mesh``: state replicated, evaluation split) against the plain run."""
    key = jax.random.key(5)
    cma = CMAES(POP, solution=START)
    problem = SineSphere()
    mesh_run = evotensor.run(cma, problem, key=key, mesh=_mesh(), **RUN)
    single = evotensor.run(cma, SineSphere(), key=key, **RUN)
    summary = lambda r: {  # noqa: E731
        "state": [_local(leaf).tolist() for leaf in jax.tree_util.tree_leaves(r.state)],
        "best_fitness": r.best_fitness,
        "best_genotype": _local(r.best_genotype).tolist(),
        "history": {k: v.tolist() for k, v in r.history.items()},
    }
    return {"mesh": summary(mesh_run), "single": summary(single), "rows_per_device": problem.rows}


def compiled_generation_text(strategy, problem, mesh, length: int = 1) -> str:
    """The optimized, partitioned program of ``length`` generations as ``run(..., mesh=mesh)``
    builds it (its :class:`~evotensor.core.run.Loop` on the mesh, the carry in its mesh layout):
    per-device shapes, collectives."""
    from evotensor.core.mesh import replicated, replicated_shardings, state_shardings
    from evotensor.core.run import RunState

    mesh = auto_mesh(mesh)
    placed = on_mesh(strategy, mesh, "pop")
    loop = Loop(placed, problem, mesh=mesh, mesh_axis="pop", population_size=strategy.population_size)
    params = strategy.default_params()
    carry, loop_key = jax.eval_shape(loop.init, jax.random.key(0), params)
    everywhere = replicated(mesh)
    shardings = RunState(
        state_shardings(placed, carry.strategy_state, mesh),
        replicated_shardings(carry.best_genotype, mesh),
        everywhere,
        everywhere,
    )
    fn = jax.jit(
        functools.partial(loop.chunk, length=length),
        in_shardings=(shardings, everywhere, everywhere),
        out_shardings=(shardings, everywhere),
    )
    return fn.lower(carry, loop_key, params).compile().as_text()


def programs() -> dict:
    """Facts about the compiled programs on the mesh (4 devices in one process): which population
    shapes appear, and the shapes of the evaluation's ``sine`` ops."""
    import re

    mesh = _mesh()
    n = jax.device_count()
    out = {}
    try:  # mirrored pairs stay on one device: 6 candidates cannot split 4 ways
        OpenES(6, num_dims=2).on_mesh(mesh)
        out["refusal"] = None
    except ValueError as err:
        out["refusal"] = str(err)
    for name, strategy in [("OpenES", _shardable("OpenES")), ("CMAES", CMAES(POP, solution=START))]:
        text = compiled_generation_text(strategy, SineSphere(), mesh)
        out[name] = {
            "whole_population": f"[{POP},{DIMS}]" in text,
            "shard": f"[{POP // n},{DIMS}]" in text,
            "sine_shapes": sorted(set(re.findall(r"= f32\[([\d,]+)\][^=]*? sine\(", text))),
            "all_gathers": sorted(
                set(re.findall(r"= \(?[a-z0-9]+\[([\d,]*)\][^ ]* all-gather(?:-start)?\(", text))
            ),
        }
    return out
