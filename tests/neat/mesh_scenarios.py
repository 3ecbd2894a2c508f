"""Multi-device scenarios of NEAT under ``evotensor.run(..., mesh=)``, launched by
tests/neat/test_sharding.py (4 devices in one process, in the same subprocess as
tests/es/mesh_scenarios.py) and by the 2-process launch (2 processes x 2 devices).

Each scenario builds its mesh over ``jax.devices()`` and returns the mesh run next to the run of the
same key without a mesh (this process's first device), as lists the test compares bit for bit.
"""

from __future__ import annotations

import re

import jax
import numpy as np
from jax.experimental import multihost_utils

import evotensor
from evotensor.neat.strategy import NEAT
from evotensor.problems.function_fit import XOR

POP, MAX_NODES, MAX_CONNS = 40, 16, 32  # pop / 4 devices = 10 genomes each
RUN = dict(generations=4, chunk_size=2, progress=False)  # two chunks: the state crosses a boundary


def _mesh() -> jax.sharding.Mesh:
    return jax.make_mesh((jax.device_count(),), ("pop",))


def _local(x) -> np.ndarray:
    """An array's whole value in this process: a replicated one's local copy, a split one gathered
    from every process."""
    if not isinstance(x, jax.Array) or x.is_fully_addressable:
        return np.asarray(x)
    if x.sharding.is_fully_replicated:
        return np.asarray(x.addressable_data(0))
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def small_neat() -> NEAT:
    return NEAT.from_mode("neat-python", 2, 1, population_size=POP, max_nodes=MAX_NODES, max_conns=MAX_CONNS)


class ProbedXOR(XOR):
    """XOR that records, at trace time, how many networks one device evaluates."""

    def __init__(self):
        super().__init__()
        self.rows: list[int] = []

    def evaluate(self, key, phenotypes, apply):
        weights = phenotypes.edge_weight
        jax.debug.inspect_array_sharding(
            weights, callback=lambda s: self.rows.append(int(s.shard_shape(weights.shape)[0]))
        )
        return super().evaluate(key, phenotypes, apply)


def _summary(result) -> dict:
    return {
        "state": {
            jax.tree_util.keystr(path): _local(leaf).tolist()
            for path, leaf in jax.tree_util.tree_flatten_with_path(result.state)[0]
        },
        "best_genotype": [_local(leaf).tolist() for leaf in jax.tree_util.tree_leaves(result.best_genotype)],
        "best_fitness": result.best_fitness,
        "history": {k: v.tolist() for k, v in result.history.items()},
    }


def scenario_neat_xor() -> dict:
    """NEAT on XOR for 4 generations (2 chunks) on the mesh and on one device; the population's
    layout on the mesh and the rows one device evaluates."""
    key = jax.random.key(3)
    problem = ProbedXOR()
    mesh_run = evotensor.run(small_neat(), problem, key=key, mesh=_mesh(), **RUN)
    single = evotensor.run(small_neat(), XOR(), key=key, **RUN)
    population = mesh_run.state.population
    specs = {str(leaf.sharding.spec) for leaf in jax.tree_util.tree_leaves(population)}
    return {
        "mesh": _summary(mesh_run),
        "single": _summary(single),
        "rows_per_device": problem.rows,
        "population_specs": sorted(specs),
        "rows_here": sorted({s.data.shape[0] for s in population.conn_attrs.addressable_shards}),
        "species_of_spec": str(mesh_run.state.species_of.sharding.spec),
    }


def program() -> dict:
    """Facts about NEAT's compiled generation on the mesh (one process): the population shapes of
    the genome tables, the forward pass's outputs ``[P, 4 cases, 1]`` and the collectives."""
    from tests.es.mesh_scenarios import compiled_generation_text

    n = jax.device_count()
    neat = small_neat()
    text = compiled_generation_text(neat, XOR(), _mesh())
    gathered = re.findall(r"= \(?[a-z0-9]+\[([\d,]*)\][^ ]* all-gather(?:-start)?\(", text)
    # a genome's tables packed side by side (MeshLayout.gathered): one row of this many 32-bit words
    width = sum(int(np.prod(leaf.shape[1:])) for leaf in jax.tree_util.tree_leaves(neat.spec.empty((1,))))
    return {
        "forward_whole": f"f32[{POP},4,1]" in text,
        "forward_shard": f"f32[{POP // n},4,1]" in text,
        "conn_table_shard": f"s32[{POP // n},{MAX_CONNS}]" in text,
        "population_gathers": sum(1 for shape in gathered if shape == f"{POP},{width}"),
        "table_gathers": sum(1 for shape in gathered if shape == f"{POP},{MAX_CONNS}"),
        "all_gather_shapes": sorted(set(gathered)),
    }


_COLLECTIVE = re.compile(r"\b(all-gather|all-to-all|collective-permute|all-reduce)(?:-start)?\(")
_CALLEE = re.compile(
    r"(condition|body|to_apply|calls|branch_computations|true_computation|false_computation)"
    r"=(?:\{([^}]*)\}|%?([\w.\-]+))"
)


def loop_depths(hlo: str) -> list[tuple[int, str]]:
    """``[(loops, op)]``: every collective of an optimized HLO text with the number of ``while`` loops
    around it (0: once per program run; more: once per iteration of each), found from the
    computations' call graph (a loop's body and condition are one level deeper than the loop)."""
    computations: dict[str, list[str]] = {}
    current, entry = None, None
    for line in hlo.splitlines():
        header = re.match(r"^(ENTRY )?%?([\w.\-]+) .*\{\s*$", line)
        if header:
            current = header.group(2)
            computations[current] = []
            entry = current if header.group(1) else entry
        elif current is not None and line.startswith(" "):
            computations[current].append(line)
    depth = {entry: 0}
    todo = [entry]
    while todo:
        name = todo.pop()
        for line in computations[name]:
            loop = " while(" in line
            for kind, braced, single in _CALLEE.findall(line):
                for callee in re.findall(r"%?([\w.\-]+)", braced or single):
                    d = depth[name] + int(loop and kind in ("condition", "body"))
                    if callee in computations and depth.get(callee, -1) < d:
                        depth[callee] = d
                        todo.append(callee)
    return [
        (depth[name], match.group(1))
        for name, lines in computations.items()
        if name in depth
        for line in lines
        if (match := _COLLECTIVE.search(line))
    ]


def collectives() -> dict:
    """The collectives of one compiled generation of :func:`small_neat` on XOR on this process's
    devices: ``{"total": {op: count}, "in_loops": {op: count}}`` (``in_loops``: those inside a loop
    of the generation, paid once per iteration)."""
    from tests.es.mesh_scenarios import compiled_generation_text

    found = loop_depths(compiled_generation_text(small_neat(), XOR(), _mesh()))
    total: dict[str, int] = {}
    in_loops: dict[str, int] = {}
    for loops, op in found:
        total[op] = total.get(op, 0) + 1
        if loops:
            in_loops[op] = in_loops.get(op, 0) + 1
    return {"total": total, "in_loops": in_loops}
