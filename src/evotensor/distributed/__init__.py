"""Running on many processes and hosts.

* :func:`initialize` joins a multi-process JAX job (``jax.distributed``) with settings from its
  arguments, ``EVOTENSOR_*`` variables (a Kubernetes indexed Job), Open MPI or SLURM
  (:func:`resolve_cluster` says where each came from, without starting anything);
  :func:`shutdown` leaves it; :func:`process_index`, :func:`process_count` and
  :func:`is_main_process` tell where this process stands.
* :func:`global_mesh` is the one-axis mesh over every process's devices that
  ``evotensor.run(..., mesh=...)`` splits the population over; :func:`use_cpu_devices` gives one
  process several host CPU devices.
* A run directory is written by process 0 only, and checkpoints are written collectively
  (:mod:`evotensor.io.rundir`); :func:`gather_to_host` and :func:`agree` are the two collectives it
  builds on.

``evotensor run TASK --distributed`` does all of this from the command line; see
``docs/distributed.md`` for SLURM and Kubernetes recipes.

Example (the same program on every process)::

    import evotensor
    from evotensor import distributed

    distributed.initialize()          # from srun / mpirun / EVOTENSOR_* variables
    mesh = distributed.global_mesh()  # every device of every process
    result = evotensor.run(strategy, problem, 500, jax.random.key(0), mesh=mesh, run_dir="runs/big")
    distributed.shutdown()
"""

from evotensor.distributed.cluster import (
    ClusterSpec,
    initialize,
    is_initialized,
    is_main_process,
    process_count,
    process_index,
    resolve_cluster,
    shutdown,
)
from evotensor.distributed.devices import global_mesh, mesh_devices, use_cpu_devices
from evotensor.io.multihost import ProcessFailure, agree, broadcast_text, gather_to_host

__all__ = [
    "ClusterSpec",
    "ProcessFailure",
    "agree",
    "broadcast_text",
    "gather_to_host",
    "global_mesh",
    "initialize",
    "is_initialized",
    "is_main_process",
    "mesh_devices",
    "process_count",
    "process_index",
    "resolve_cluster",
    "shutdown",
    "use_cpu_devices",
]

from evotensor.distributed.ray_evaluator import Batched, PerIndividual, RayEvaluator  # noqa: E402 - Ray evaluator

__all__ += ["Batched", "PerIndividual", "RayEvaluator"]
