"""The devices a run is spread over: a one-axis mesh over every process's devices (or some of
them), and host CPU devices for trying it on one machine.

``evotensor.run(..., mesh=global_mesh())`` splits the population over every device of the job; in a
multi-process job each process passes the same mesh (built from the same global device list), which
is what SPMD needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh

from evotensor.core.checks import ArgumentError, check_int
from evotensor.core.mesh import POPULATION_AXIS

__all__ = ["global_mesh", "mesh_devices", "use_cpu_devices"]


def mesh_devices(devices: Any = None) -> list[jax.Device]:
    """The devices :func:`global_mesh` uses, in mesh order (process by process, then local id).

    Args:
        devices: ``None`` or ``"all"``: every device of every process; an int ``n``: ``n``
            devices, ``n / processes`` from each process (so every process keeps taking part; ``n``
            must be a multiple of the process count); or a sequence of ``jax.Device``.

    Raises:
        ArgumentError: ``n`` is not positive, exceeds the devices there are, or does not split
            evenly over the processes; an empty or repeating device sequence.
    """
    everything = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
    if devices is None or (isinstance(devices, str) and devices == "all"):
        return everything
    if isinstance(devices, Sequence) and not isinstance(devices, str):
        chosen = list(devices)
        if not chosen or not all(isinstance(d, jax.Device) for d in chosen):
            raise ArgumentError(f"devices must be a non-empty sequence of jax.Device, got {devices!r}")
        if len(set(chosen)) != len(chosen):
            raise ArgumentError(f"devices must not repeat a device, got {devices!r}")
        return chosen
    if isinstance(devices, str):
        raise ArgumentError(
            f"devices must be 'all', a positive int or a sequence of devices, got {devices!r}"
        )
    n = check_int(devices, "devices", minimum=1)
    if n > len(everything):
        raise ArgumentError(
            f"devices must be at most the {len(everything)} devices there are "
            f"({jax.process_count()} process(es) x {jax.local_device_count()}), got {n}"
        )
    processes = jax.process_count()
    if n % processes:
        raise ArgumentError(
            f"devices must be a multiple of the {processes} processes (every process drives the same "
            f"number of devices), got {n}"
        )
    per_process = n // processes
    by_process = [[d for d in everything if d.process_index == p] for p in range(processes)]
    return [d for local in by_process for d in local[:per_process]]


def global_mesh(axis: str = POPULATION_AXIS, devices: Any = None) -> Mesh:
    """A one-axis ``Mesh`` named ``axis`` over :func:`mesh_devices` (every device of every process
    by default, or the first ``n`` spread evenly over the processes).

    Example::

        evotensor.distributed.initialize()          # on every process, first
        mesh = evotensor.distributed.global_mesh()  # e.g. 4 hosts x 8 GPUs: Mesh('pop': 32)
        evotensor.run(strategy, problem, 1000, key, mesh=mesh, run_dir="runs/x")
    """
    if not isinstance(axis, str) or not axis:
        raise ArgumentError(f"axis must be a non-empty str, got {axis!r}")
    return Mesh(np.array(mesh_devices(devices)), (axis,))


def use_cpu_devices(count: int) -> None:
    """Give this process ``count`` host CPU devices (``jax_num_cpu_devices``), to run a mesh on
    one machine's CPU cores; call it before anything uses JAX.

    Raises:
        ArgumentError: ``count`` is not a positive int.
        RuntimeError: JAX has started its backends already (naming the count it has).
    """
    count = check_int(count, "cpu_devices", minimum=1)
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError as err:
        raise RuntimeError(
            f"cannot give this process {count} CPU devices: JAX has already started its backends; "
            "set the device count first thing in the program (or XLA_FLAGS="
            f"--xla_force_host_platform_device_count={count} before Python starts)"
        ) from err
