"""Joining a multi-process JAX job: where its settings come from, and starting it.

A job of ``n`` processes (one per host, or one per GPU) needs three settings in every process: the
*coordinator* (``HOST:PORT`` of process 0, where a small gRPC service lets the processes find each
other), the number of processes and this process's index. :func:`resolve_cluster` finds them —
without touching JAX, so it can be tested with made-up environments — and :func:`initialize` then
calls ``jax.distributed.initialize`` with them.

Where each setting comes from, first match wins, field by field (as in ``jax.distributed``:
explicit arguments override what is detected):

1. the arguments (the CLI's ``--coordinator``, ``--num-processes``, ``--process-id``);
2. ``EVOTENSOR_COORDINATOR``, ``EVOTENSOR_NUM_PROCESSES``, ``EVOTENSOR_PROCESS_ID`` — what a
   Kubernetes indexed Job sets in its pod template (the process id may instead come from the Job's
   own ``JOB_COMPLETION_INDEX``); for the coordinator also JAX's ``JAX_COORDINATOR_ADDRESS``;
3. Open MPI (``mpirun``): ``OMPI_COMM_WORLD_SIZE``, ``OMPI_COMM_WORLD_RANK``; the coordinator is
   the launching host from ``OMPI_MCA_orte_hnp_uri`` (Open MPI 4; set ``EVOTENSOR_COORDINATOR``
   with Open MPI 5, which has no such variable);
4. SLURM (``srun``): ``SLURM_NTASKS``, ``SLURM_PROCID``; the coordinator is the first host of
   ``SLURM_STEP_NODELIST``.

Open MPI is looked at before SLURM (``mpirun`` inside a SLURM allocation sees both), as JAX does.
A coordinator derived from Open MPI or SLURM gets JAX's port: ``JAX_COORDINATOR_PORT`` if set, else
one derived from the job id in ``61440..65535`` (so two jobs sharing a node rarely collide).
``local_device_ids`` (the GPUs this process drives) follow JAX as well: the argument, else
``JAX_LOCAL_DEVICE_IDS``, else the launcher's local rank (``SLURM_LOCALID``,
``OMPI_COMM_WORLD_LOCAL_RANK``: one process per GPU), else every local device. ``"all"`` asks for
every local device explicitly (one process per node driving all its GPUs). CPU runs ignore it.

Every failure names the setting: a missing one says how to give it (and notes a half-present
launcher environment, e.g. ``SLURM_JOB_ID`` without ``SLURM_PROCID`` when a script runs outside
``srun``), a malformed value names the argument or variable and shows it, and a process index that is
not below the process count names both sources.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import jax

from evotensor.core.checks import ArgumentError, check_int

__all__ = [
    "ClusterSpec",
    "initialize",
    "is_initialized",
    "is_main_process",
    "process_count",
    "process_index",
    "resolve_cluster",
    "shutdown",
]

# How :func:`resolve_cluster` names explicit settings in its messages (the CLI passes its flags).
PYTHON_NAMES = {
    "coordinator": "coordinator",
    "num_processes": "num_processes",
    "process_id": "process_id",
    "local_device_ids": "local_device_ids",
}
CLI_NAMES = {
    "coordinator": "--coordinator",
    "num_processes": "--num-processes",
    "process_id": "--process-id",
    "local_device_ids": "local_device_ids",
}
_PORT_BASE = 65535 - 2**12 + 1  # JAX's range for derived coordinator ports: 61440..65535
_SLURM_STEP = ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID")


@dataclasses.dataclass(frozen=True)
class ClusterSpec:
    """The settings of one process of a multi-process job.

    Attributes:
        coordinator: ``HOST:PORT`` of process 0's coordination service.
        num_processes: processes in the job.
        process_id: this process's index, ``0 <= process_id < num_processes``.
        local_device_ids: the local devices (GPU ordinals) this process drives, or ``None`` for all.
        sources: for each field, where its value came from (an argument, a variable, a launcher).
    """

    coordinator: str
    num_processes: int
    process_id: int
    local_device_ids: tuple[int, ...] | None
    sources: Mapping[str, str] = dataclasses.field(default_factory=dict, compare=False)

    def describe(self) -> str:
        """One line: ``process 1 of 4, coordinator node01:61443 (from SLURM_STEP_NODELIST)``."""
        return (
            f"process {self.process_id} of {self.num_processes} (from {self.sources.get('process_id')}), "
            f"coordinator {self.coordinator} (from {self.sources.get('coordinator')})"
        )


# ---- parsing one value -----------------------------------------------------------------------------


def _coordinator(value: Any, where: str) -> str:
    """``HOST:PORT`` checked: a non-empty host (a name, an IPv4 address or a bracketed IPv6
    address) and a port in 1..65535."""
    if not isinstance(value, str):
        raise ArgumentError(f"{where} must be HOST:PORT (e.g. 10.0.0.1:1234), got {value!r}")
    text = value.strip()
    match = re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.\-]+):(\d+)", text)
    if match is None:
        raise ArgumentError(f"{where} must be HOST:PORT (e.g. 10.0.0.1:1234 or [::1]:1234), got {value!r}")
    host, port = match.group(1), int(match.group(2))
    if host.startswith("["):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise ArgumentError(f"{where} has an invalid IPv6 address {host}, got {value!r}") from None
    if not 1 <= port <= 65535:
        raise ArgumentError(f"{where} must have a port in 1..65535, got {value!r}")
    return text


def _integer(value: Any, where: str, minimum: int) -> int:
    """An int (or the decimal text of one, from a variable) ``>= minimum``."""
    if isinstance(value, str):
        text = value.strip()
        if not re.fullmatch(r"[+-]?\d+", text):
            raise ArgumentError(f"{where} must be an int >= {minimum}, got {value!r}")
        value = int(text)
    return check_int(value, where, minimum=minimum)


def _device_ids(value: Any, where: str) -> tuple[int, ...] | None:
    """``None``/``"all"`` (every local device), an int, a sequence of ints, or text ``"0,1"``."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "all"):
        return None
    if isinstance(value, str):
        items: Sequence[Any] = [v for v in value.split(",") if v.strip()]
    elif isinstance(value, Sequence):
        items = value
    else:
        items = [value]
    ids = tuple(_integer(v, where, 0) for v in items)
    if not ids or len(set(ids)) != len(ids):
        raise ArgumentError(f"{where} must be 'all' or distinct device ids >= 0 (e.g. 0,1), got {value!r}")
    return ids


def first_slurm_host(nodelist: str) -> str:
    """The first host of a SLURM host list: ``node[001-004,9],gpu1`` -> ``node001``,
    ``rack[1-2]-n[01-02]`` -> ``rack1-n01``, ``a,b`` -> ``a``."""
    host, i = [], 0
    while i < len(nodelist) and nodelist[i] != ",":
        if nodelist[i] == "[":
            end = nodelist.find("]", i)
            if end < 0:
                raise ArgumentError(f"SLURM_STEP_NODELIST has an unclosed '[', got {nodelist!r}")
            host.append(re.split(r"[,\-]", nodelist[i + 1 : end], maxsplit=1)[0])
            i = end + 1
        else:
            host.append(nodelist[i])
            i += 1
    name = "".join(host).strip()
    if not name:
        raise ArgumentError(f"SLURM_STEP_NODELIST names no host, got {nodelist!r}")
    return name


def _derived_port(environ: Mapping[str, str], job_id: int) -> tuple[int, str]:
    """JAX's port for a launcher-derived coordinator, and where it came from."""
    if environ.get("JAX_COORDINATOR_PORT"):
        port = _integer(environ["JAX_COORDINATOR_PORT"], "JAX_COORDINATOR_PORT", 1)
        if port > 65535:
            raise ArgumentError(f"JAX_COORDINATOR_PORT must be in 1..65535, got {port}")
        return port, "JAX_COORDINATOR_PORT"
    return job_id % 2**12 + _PORT_BASE, "the job id"


def _ompi_coordinator(environ: Mapping[str, str]) -> tuple[str, str] | None:
    """The launching host of an Open MPI 4 job (``OMPI_MCA_orte_hnp_uri``, e.g.
    ``1531576320.0;tcp://10.96.0.1,10.148.0.1:34911``) and a port from its job id."""
    uri = environ.get("OMPI_MCA_orte_hnp_uri")
    if not uri:
        return None
    match = re.match(r"(\d+)\.\d+;(tcp6?)://(.*)", uri)
    if match is None:
        raise ArgumentError(f"OMPI_MCA_orte_hnp_uri is not an Open MPI launcher address, got {uri!r}")
    job, scheme, rest = int(match.group(1)), match.group(2), match.group(3)
    if scheme == "tcp6":
        inner = re.match(r"\[([^\],]+)", rest)
        host = f"[{inner.group(1)}]" if inner else ""
    else:
        host = re.split(r"[,:]", rest, maxsplit=1)[0]
    if not host:
        raise ArgumentError(f"OMPI_MCA_orte_hnp_uri names no host, got {uri!r}")
    # Open MPI's job ids are multiples of 2**12 (JAX divides them out to spread ports)
    port, whence = _derived_port(environ, job // 2**12)
    return f"{host}:{port}", f"OMPI_MCA_orte_hnp_uri, port from {whence}"


# ---- resolution --------------------------------------------------------------------------------------


def _launcher(environ: Mapping[str, str], need_coordinator: bool) -> dict[str, tuple[Any, str]]:
    """Settings an Open MPI or SLURM launcher gives, as ``{field: (raw value, source)}`` (the
    coordinator only when ``need_coordinator``: deriving it can fail on a variable not needed)."""
    if "OMPI_COMM_WORLD_SIZE" in environ or "OMPI_COMM_WORLD_RANK" in environ:
        found: dict[str, tuple[Any, str]] = {}
        for field, var in (("num_processes", "OMPI_COMM_WORLD_SIZE"), ("process_id", "OMPI_COMM_WORLD_RANK")):
            if var in environ:
                found[field] = (environ[var], var)
        if "OMPI_COMM_WORLD_LOCAL_RANK" in environ:
            found["local_device_ids"] = (environ["OMPI_COMM_WORLD_LOCAL_RANK"], "OMPI_COMM_WORLD_LOCAL_RANK")
        coordinator = _ompi_coordinator(environ) if need_coordinator else None
        if coordinator is not None:
            found["coordinator"] = coordinator
        return found
    if all(var in environ for var in _SLURM_STEP):
        found = {
            "num_processes": (environ["SLURM_NTASKS"], "SLURM_NTASKS"),
            "process_id": (environ["SLURM_PROCID"], "SLURM_PROCID"),
        }
        if need_coordinator:
            job_id = _integer(environ["SLURM_JOB_ID"], "SLURM_JOB_ID", 0)
            port, whence = _derived_port(environ, job_id)
            host = first_slurm_host(environ["SLURM_STEP_NODELIST"])
            found["coordinator"] = (f"{host}:{port}", f"SLURM_STEP_NODELIST, port from {whence}")
        if "SLURM_LOCALID" in environ:
            found["local_device_ids"] = (environ["SLURM_LOCALID"], "SLURM_LOCALID")
        return found
    return {}


def _hints(environ: Mapping[str, str]) -> str:
    """Why a launcher that seems present gave nothing (a half-present environment)."""
    notes = []
    if "SLURM_JOB_ID" in environ:
        missing = [v for v in _SLURM_STEP if v not in environ]
        if missing:
            notes.append(
                f"SLURM_JOB_ID is set but {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not: "
                "start every process with srun (a batch script's own shell is not a job step)"
            )
    if ("OMPI_COMM_WORLD_SIZE" in environ or "OMPI_COMM_WORLD_RANK" in environ) and not environ.get(
        "OMPI_MCA_orte_hnp_uri"
    ):
        notes.append(
            "Open MPI gives the process count and rank but no coordinator here (Open MPI 5): "
            "set EVOTENSOR_COORDINATOR=HOST:PORT"
        )
    return "".join(f"; note: {n}" for n in notes)


def resolve_cluster(
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    local_device_ids: Any = None,
    *,
    environ: Mapping[str, str] | None = None,
    names: Mapping[str, str] = PYTHON_NAMES,
) -> ClusterSpec:
    """The settings of this process of a multi-process job, from the arguments and ``environ``
    (default ``os.environ``), as the module docstring lists. Pure: reads nothing else and does not
    touch JAX.

    Args:
        coordinator: ``HOST:PORT`` of process 0.
        num_processes: processes in the job (``>= 1``).
        process_id: this process's index.
        local_device_ids: ``None`` (detect), ``"all"``, an int or a sequence of ints.
        environ: the environment variables to read.
        names: how messages call the explicit settings (the CLI passes :data:`CLI_NAMES`).

    Raises:
        ArgumentError: a setting is missing (the message says how to give it), malformed (it names
            the argument or variable and shows the value), or the process index is not below the
            process count.
    """
    env = os.environ if environ is None else environ
    raw: dict[str, tuple[Any, str]] = {}
    explicit = {
        "coordinator": coordinator,
        "num_processes": num_processes,
        "process_id": process_id,
        "local_device_ids": local_device_ids,
    }
    for field, value in explicit.items():
        if value is not None:
            raw[field] = (value, names[field])
    ours = {
        "coordinator": ("EVOTENSOR_COORDINATOR", "JAX_COORDINATOR_ADDRESS"),
        "num_processes": ("EVOTENSOR_NUM_PROCESSES",),
        "process_id": ("EVOTENSOR_PROCESS_ID", "JOB_COMPLETION_INDEX"),
        "local_device_ids": ("JAX_LOCAL_DEVICE_IDS",),
    }
    for field, variables in ours.items():
        for var in variables:
            if field not in raw and env.get(var, "").strip():
                raw[field] = (env[var], var)
    for field, found in _launcher(env, need_coordinator="coordinator" not in raw).items():
        raw.setdefault(field, found)

    missing = [f for f in ("coordinator", "num_processes", "process_id") if f not in raw]
    if missing:
        how = {
            "coordinator": f"{names['coordinator']} HOST:PORT or EVOTENSOR_COORDINATOR",
            "num_processes": f"{names['num_processes']} N or EVOTENSOR_NUM_PROCESSES",
            "process_id": f"{names['process_id']} I or EVOTENSOR_PROCESS_ID",
        }
        found = ", ".join(f"{f} from {src}" for f, (_, src) in raw.items()) or "nothing"
        raise ArgumentError(
            f"multi-process settings incomplete: {', '.join(missing)} not set (give "
            f"{'; '.join(how[f] for f in missing)}, or start the processes with srun or mpirun); "
            f"found {found}{_hints(env)}"
        )

    def where(field: str) -> str:
        value, source = raw[field]
        return source if source in names.values() else f"{source}={value!r}"

    coord = _coordinator(raw["coordinator"][0], where("coordinator"))
    count = _integer(raw["num_processes"][0], where("num_processes"), 1)
    index = _integer(raw["process_id"][0], where("process_id"), 0)
    if index >= count:
        raise ArgumentError(
            f"process id {index} (from {where('process_id')}) must be below the number of processes "
            f"{count} (from {where('num_processes')})"
        )
    ids_raw, ids_source = raw.get("local_device_ids", (None, "every local device"))
    ids = _device_ids(ids_raw, where("local_device_ids") if "local_device_ids" in raw else ids_source)
    sources = {field: source for field, (_, source) in raw.items()}
    sources.setdefault("local_device_ids", ids_source)
    return ClusterSpec(coord, count, index, ids, sources)


# ---- starting and stopping ---------------------------------------------------------------------------

_current: ClusterSpec | None = None  # what initialize() started in this process


def _settings(spec: ClusterSpec) -> dict[str, Any]:
    return {
        "coordinator": spec.coordinator,
        "num_processes": spec.num_processes,
        "process_id": spec.process_id,
        "local_device_ids": spec.local_device_ids,
    }


def _differences(a: ClusterSpec, b: ClusterSpec) -> str:
    old, new = _settings(a), _settings(b)
    return ", ".join(f"{k} {old[k]!r} -> {new[k]!r}" for k in old if old[k] != new[k])


def initialize(
    coordinator: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    local_device_ids: Any = None,
    platform: str | None = None,
    *,
    initialization_timeout: int = 300,
    names: Mapping[str, str] = PYTHON_NAMES,
) -> ClusterSpec:
    """Join (or, on process 0, start) a multi-process JAX job; call it first, before anything else
    uses JAX (a computation, ``jax.devices()``, a ``jax.random.key``, building a task).

    The settings come from the arguments or the environment (:func:`resolve_cluster`). On a CPU
    the processes' collectives run over gloo (set here unless another implementation was chosen).
    Afterwards ``jax.devices()`` lists every process's devices; build a mesh over them with
    :func:`evotensor.distributed.global_mesh` and pass it to ``evotensor.run(..., mesh=...)`` in
    every process.

    A second call with the same settings returns the same :class:`ClusterSpec` and does nothing
    else; with other settings it raises.

    Args:
        coordinator, num_processes, process_id, local_device_ids: see :func:`resolve_cluster`.
        platform: ``"cpu"``, ``"gpu"``/``"cuda"``, ``"rocm"`` or ``"tpu"`` to fix JAX's platform
            (``JAX_PLATFORMS``); ``None`` leaves JAX's choice.
        initialization_timeout: seconds to wait for every process to connect.
        names: how messages call the explicit settings.

    Returns:
        The :class:`ClusterSpec` of this process.

    Raises:
        ArgumentError: settings missing, malformed or inconsistent (see :func:`resolve_cluster`).
        RuntimeError: JAX already started its backends (called too late), or a job with other
            settings is already running in this process.
    """
    global _current
    platforms = {"cpu": "cpu", "gpu": "cuda", "cuda": "cuda", "rocm": "rocm", "tpu": "tpu"}
    if platform is not None and platform not in platforms:
        raise ArgumentError(f"platform must be one of {tuple(platforms)} or None, got {platform!r}")
    timeout = check_int(initialization_timeout, "initialization_timeout", minimum=1)
    spec = resolve_cluster(coordinator, num_processes, process_id, local_device_ids, names=names)
    if _current is not None:
        if _settings(_current) == _settings(spec):
            return _current
        raise RuntimeError(
            f"evotensor.distributed.initialize() was already called in this process with other "
            f"settings ({_differences(_current, spec)}); call shutdown() first"
        )
    if jax.distributed.is_initialized():
        # started by the user's own jax.distributed.initialize(): fine if it is the same job
        if (jax.process_count(), jax.process_index()) == (spec.num_processes, spec.process_id):
            _current = spec
            return spec
        raise RuntimeError(
            f"jax.distributed is already initialized as process {jax.process_index()} of "
            f"{jax.process_count()}, not as {spec.describe()}"
        )
    if platform is not None:
        jax.config.update("jax_platforms", platforms[platform])
    if jax.config.jax_cpu_collectives_implementation in (None, "", "none"):
        jax.config.update("jax_cpu_collectives_implementation", "gloo")  # cross-process CPU collectives
    try:
        jax.distributed.initialize(
            spec.coordinator,
            num_processes=spec.num_processes,
            process_id=spec.process_id,
            local_device_ids=list(spec.local_device_ids) if spec.local_device_ids is not None else None,
            cluster_detection_method="deactivate",  # resolved above, from the same sources
            initialization_timeout=timeout,
        )
    except RuntimeError as err:
        if "before" in str(err) and "backend" in str(err):
            raise RuntimeError(
                "evotensor.distributed.initialize() must be called before anything else uses JAX: JAX "
                "has already started its backends in this process (a computation, jax.devices(), "
                "jax.random.key(...) or building a strategy does that); call it first thing in your "
                "program (the CLI does with --distributed)"
            ) from err
        raise
    _current = spec
    return spec


def is_initialized() -> bool:
    """Whether this process is part of a multi-process job (``jax.distributed`` started)."""
    return jax.distributed.is_initialized()


def shutdown() -> None:
    """Leave the job (``jax.distributed.shutdown``); nothing happens when none was started. Every
    process should call it at the end (it waits for the others)."""
    global _current
    if jax.distributed.is_initialized():
        jax.distributed.shutdown()
    _current = None


def process_index() -> int:
    """This process's index in the job (0 without one)."""

    return jax.process_index()


def process_count() -> int:
    """Processes in the job (1 without one)."""

    return jax.process_count()


def is_main_process() -> bool:
    """Whether this is process 0, the one that writes run directories and prints results."""
    return process_index() == 0
