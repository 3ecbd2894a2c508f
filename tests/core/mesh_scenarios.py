"""Multi-device scenarios of the run loop (``run(..., mesh=)``), launched by tests/core/test_mesh.py
through tests/distributed/harness.py: 4 devices in one process, or 2 processes x 2.

Each scenario builds its mesh over ``jax.devices()`` and returns the mesh run next to the run of the
same key without a mesh (on this process's first device), as lists the test compares.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from tests.core.toy import ToyStrategy

import evotensor
from evotensor.core import Evaluation, pytree_dataclass
from evotensor.core.checks import ArgumentError
from evotensor.problems import Rastrigin


def _mesh() -> jax.sharding.Mesh:
    return jax.make_mesh((jax.device_count(),), ("pop",))


def _local(x) -> np.ndarray:
    """A replicated (or single-device) array's value in this process."""
    return np.asarray(x.addressable_data(0) if isinstance(x, jax.Array) else x)


def _summary(result) -> dict:
    """A run's replicated outputs as lists (float32 values exactly)."""
    return {
        "center": _local(result.state.center).tolist(),
        "best_genotype": _local(result.best_genotype).tolist(),
        "best_fitness": result.best_fitness,
        "history": {k: v.tolist() for k, v in result.history.items()},
    }


class ShardProbe:
    """A problem wrapper that records, at compile time, how many rows of the population one device
    evaluates (``jax.debug.inspect_array_sharding``)."""

    def __init__(self, inner):
        self.inner, self.maximize, self.rows = inner, inner.maximize, []

    def evaluate(self, key, genotypes):
        jax.debug.inspect_array_sharding(
            genotypes, callback=lambda s: self.rows.append(int(s.shard_shape(genotypes.shape)[0]))
        )
        return self.inner.evaluate(key, genotypes)


TOY = dict(generations=8, chunk_size=4, progress=False)  # shared by the toy and resume scenarios


def _toy_run(problem, **kw):
    return evotensor.run(ToyStrategy(8, 4), problem, key=jax.random.key(3), **TOY, **kw)


def scenario_toy_equals_one_device() -> dict:
    """A strategy with replicated state (argmin-based tell: exact under any split) on every device,
    two chunks, against the same run on one device; the evaluation must see 1/n of the rows."""
    probe = ShardProbe(Rastrigin(4))
    mesh_run = _toy_run(probe, mesh=_mesh())
    return {
        "mesh": _summary(mesh_run),
        "single": _summary(_toy_run(Rastrigin(4))),
        "rows_per_device": probe.rows,
        "center_replicated": bool(mesh_run.state.center.sharding.is_fully_replicated),
    }


@pytree_dataclass
class MemberState:
    center: jax.Array  # [dims]
    center_fitness: jax.Array  # []
    last_fitness: jax.Array  # [pop] per member: kept split over the mesh


class MemberToy(ToyStrategy):
    """ToyStrategy with a per-member state field and the optional mesh hooks."""

    mesh = None

    def init(self, key, params=None):
        base = super().init(key, params)
        return MemberState(base.center, base.center_fitness, jnp.zeros(self.population_size))

    def tell(self, key, state, genotypes, evaluation, params=None):
        told, metrics = super().tell(key, state, genotypes, evaluation, params)
        return MemberState(told.center, told.center_fitness, evaluation.fitness), metrics

    def on_mesh(self, mesh, axis):
        placed = MemberToy(self.population_size, self.num_dims)
        placed.mesh, placed.axis = mesh, axis
        return placed

    def state_shardings(self, state):
        whole = NamedSharding(self.mesh, P())
        return MemberState(whole, whole, NamedSharding(self.mesh, P(self.axis)))


def scenario_state_hook_keeps_member_state_split() -> dict:
    """The toy run with a per-member state field that the strategy's hook keeps split (its centre
    is the toy's: compared with the one-device toy run of :func:`scenario_toy_equals_one_device`)."""
    mesh_run = evotensor.run(MemberToy(8, 4), Rastrigin(4), key=jax.random.key(3), **TOY, mesh=_mesh())
    last = mesh_run.state.last_fitness
    return {
        "spec": str(last.sharding.spec),
        "rows_here": [int(s.data.shape[0]) for s in last.addressable_shards],
        "mesh": _summary(mesh_run),
    }


def scenario_resume_on_another_device_count() -> dict:
    """The toy run stopped after its first chunk on the mesh, resumed on the mesh and (from a copy of
    its run directory: the checkpoint holds plain arrays) on one device; both must equal the
    uninterrupted runs of :func:`scenario_toy_equals_one_device`."""
    root = os.environ.get("EVOTENSOR_SCENARIO_TMP") or tempfile.mkdtemp()
    on_mesh, on_one = os.path.join(root, "resume-mesh"), os.path.join(root, "resume-one")
    evotensor.run(
        ToyStrategy(8, 4), Rastrigin(4), key=jax.random.key(3), **(TOY | {"generations": 4}), mesh=_mesh(),
        run_dir=on_mesh,
    )  # fmt: skip
    if jax.process_index() == 0:  # the run directory is process 0's (the others only read it)
        shutil.copytree(on_mesh, on_one)
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices("run directory copied")
    return {
        "mesh": _summary(_toy_run(Rastrigin(4), mesh=_mesh(), run_dir=on_mesh, resume=True)),
        "one_device": _summary(_toy_run(Rastrigin(4), run_dir=on_one, resume=True)),
    }


def scenario_refusals() -> dict:
    """The mesh checks' messages, raised before anything runs."""
    messages = {}
    attempts = {
        "indivisible": lambda: evotensor.run(
            ToyStrategy(6, 2), Rastrigin(2), 2, jax.random.key(0), mesh=_mesh()
        ),
        "axis": lambda: evotensor.run(
            ToyStrategy(8, 2), Rastrigin(2), 2, jax.random.key(0), mesh=_mesh(), mesh_axis="batch"
        ),
    }
    for name, attempt in attempts.items():
        try:
            attempt()
            messages[name] = None
        except ArgumentError as err:
            messages[name] = str(err)
    return messages


class HostRastrigin:
    """Rastrigin evaluated on the host in NumPy (float32)."""

    maximize = False
    evaluates_on_host = True

    def evaluate(self, key, genotypes):
        assert isinstance(genotypes, np.ndarray)
        x = genotypes.astype(np.float32)
        a = np.float32(10.0)
        fitness = a * x.shape[1] + np.sum(x * x - a * np.cos(np.float32(2 * np.pi) * x), axis=1)
        return Evaluation(fitness=fitness.astype(np.float32))


def scenario_host_problem_on_mesh() -> dict:
    """A host-evaluated problem with the ask/tell programs on the mesh (one process only: a mesh
    across processes is refused, the refusal message is returned)."""
    kw = dict(chunk_size=2, progress=False)
    args = (ToyStrategy(8, 4), HostRastrigin(), 4, jax.random.key(2))
    if jax.process_count() > 1:
        try:
            evotensor.run(*args, mesh=_mesh(), **kw)
        except ArgumentError as err:
            return {"refused": str(err)}
        return {"refused": None}
    mesh_run = evotensor.run(*args, mesh=_mesh(), **kw)
    single = evotensor.run(*args, **kw)
    return {"mesh": _summary(mesh_run), "single": _summary(single)}
