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
    text = compiled_generation_text(small_neat(), XOR(), _mesh())
    gathered = re.findall(r"= \(?[a-z0-9]+\[([\d,]*)\][^ ]* all-gather(?:-start)?\(", text)
    return {
        "forward_whole": f"f32[{POP},4,1]" in text,
        "forward_shard": f"f32[{POP // n},4,1]" in text,
        "conn_table_shard": f"s32[{POP // n},{MAX_CONNS}]" in text,
        "population_gathers": sum(1 for shape in gathered if shape == f"{POP},{MAX_CONNS}"),
        "all_gather_shapes": sorted(set(gathered)),
    }
