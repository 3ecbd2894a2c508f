"""evotensor.distributed.initialize: where each setting comes from (arguments, EVOTENSOR_* and a
Kubernetes indexed Job, Open MPI, SLURM), the messages for missing, malformed and inconsistent
settings, refusing to start after JAX did, idempotence, and the global mesh.

The resolution is a pure function of the arguments and an environment mapping, tested here with made-up
environments; one subprocess starts a real 1-process job (JAX cannot start one in the pytest process,
whose backends are up already)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from evotensor.core.checks import ArgumentError
from evotensor.distributed import global_mesh, initialize, mesh_devices, resolve_cluster
from evotensor.distributed.cluster import CLI_NAMES, first_slurm_host

REPO = Path(__file__).resolve().parents[2]
SLURM = {
    "SLURM_JOB_ID": "123456",
    "SLURM_STEP_NODELIST": "gpu[017-020,031],login1",
    "SLURM_NTASKS": "8",
    "SLURM_PROCID": "5",
    "SLURM_LOCALID": "1",
}
OMPI = {
    "OMPI_COMM_WORLD_SIZE": "4",
    "OMPI_COMM_WORLD_RANK": "3",
    "OMPI_COMM_WORLD_LOCAL_RANK": "0",
    "OMPI_MCA_orte_hnp_uri": "1531576320.0;tcp://10.96.0.1,10.148.0.1:34911",
}


def test_explicit_settings_and_their_sources():
    spec = resolve_cluster("10.0.0.1:1234", 4, 2, environ={})
    assert (spec.coordinator, spec.num_processes, spec.process_id, spec.local_device_ids) == (
        "10.0.0.1:1234", 4, 2, None,
    )  # fmt: skip
    assert spec.sources["coordinator"] == "coordinator" and spec.sources["process_id"] == "process_id"
    assert "process 2 of 4" in spec.describe() and "10.0.0.1:1234" in spec.describe()


def test_kubernetes_indexed_job_variables():
    env = {
        "EVOTENSOR_COORDINATOR": "evo-0.evo:1234",
        "EVOTENSOR_NUM_PROCESSES": "3",
        "JOB_COMPLETION_INDEX": "2",
    }
    spec = resolve_cluster(environ=env)
    assert (spec.coordinator, spec.num_processes, spec.process_id) == ("evo-0.evo:1234", 3, 2)
    assert spec.sources["process_id"] == "JOB_COMPLETION_INDEX"
    spec = resolve_cluster(environ=env | {"EVOTENSOR_PROCESS_ID": "0"})  # the explicit variable wins
    assert spec.process_id == 0 and spec.sources["process_id"] == "EVOTENSOR_PROCESS_ID"
    # JAX's own coordinator variable is honoured after ours
    spec = resolve_cluster(environ={"JAX_COORDINATOR_ADDRESS": "h:9", "EVOTENSOR_NUM_PROCESSES": "1",
                                    "EVOTENSOR_PROCESS_ID": "0"})  # fmt: skip
    assert spec.coordinator == "h:9" and spec.sources["coordinator"] == "JAX_COORDINATOR_ADDRESS"


def test_slurm_as_jax_detects_it():
    spec = resolve_cluster(environ=SLURM)
    # the first host of the step, JAX's port: job id mod 4096 in 61440..65535
    assert spec.coordinator == f"gpu017:{123456 % 4096 + 61440}"
    assert (spec.num_processes, spec.process_id, spec.local_device_ids) == (8, 5, (1,))
    assert spec.sources["num_processes"] == "SLURM_NTASKS"
    assert resolve_cluster(environ=SLURM | {"JAX_COORDINATOR_PORT": "2222"}).coordinator == "gpu017:2222"
    # "all" devices per process (one process per node driving every GPU), and explicit ids
    assert resolve_cluster(environ=SLURM | {"JAX_LOCAL_DEVICE_IDS": "all"}).local_device_ids is None
    assert resolve_cluster(local_device_ids=[0, 1], environ=SLURM).local_device_ids == (0, 1)
    # a coordinator given explicitly: SLURM's host list is not even parsed
    assert resolve_cluster("h:1", environ=SLURM | {"SLURM_STEP_NODELIST": "n[01"}).num_processes == 8


@pytest.mark.parametrize(
    "nodelist, first",
    [
        ("node001", "node001"),
        ("node001,host2", "node001"),
        ("node[001-0015],host2", "node001"),
        ("node[001,007-015],host2", "node001"),
        ("rack[1-2]-n[07-08]", "rack1-n07"),
        ("a-b.c", "a-b.c"),
    ],
)
def test_first_slurm_host(nodelist, first):
    assert first_slurm_host(nodelist) == first


@given(
    prefix=st.from_regex(r"[a-z][a-z0-9\-]{0,6}", fullmatch=True),
    start=st.integers(0, 999),
    width=st.integers(1, 4),
    more=st.lists(st.integers(0, 999), max_size=3),
    suffix=st.sampled_from(["", "-ib", ".cluster"]),
)
def test_first_slurm_host_takes_the_first_of_every_range(prefix, start, width, more, suffix):
    items = [f"{start:0{width}d}-{start + 5:0{width}d}"] + [f"{m:0{width}d}" for m in more]
    nodelist = f"{prefix}[{','.join(items)}]{suffix},other[1-3]"
    assert first_slurm_host(nodelist) == f"{prefix}{start:0{width}d}{suffix}"


def test_open_mpi_and_its_precedence_over_slurm():
    spec = resolve_cluster(environ=OMPI)
    assert spec.coordinator == f"10.96.0.1:{(1531576320 // 4096) % 4096 + 61440}"
    assert (spec.num_processes, spec.process_id, spec.local_device_ids) == (4, 3, (0,))
    # mpirun inside a SLURM allocation sees both: Open MPI's ranks are this job's (as in JAX)
    assert resolve_cluster(environ=SLURM | OMPI).num_processes == 4
    v6 = OMPI | {"OMPI_MCA_orte_hnp_uri": "1314521088.0;tcp6://[fe80::b9b:ac5d,2620:10d::2]:43370"}
    assert resolve_cluster(environ=v6).coordinator.startswith("[fe80::b9b:ac5d]:")
    # Open MPI 5 has no launcher address: the coordinator must be given, and the message says so
    ompi5 = {k: v for k, v in OMPI.items() if k != "OMPI_MCA_orte_hnp_uri"}
    with pytest.raises(ArgumentError, match="coordinator not set.*EVOTENSOR_COORDINATOR.*Open MPI 5"):
        resolve_cluster(environ=ompi5)
    assert resolve_cluster(environ=ompi5 | {"EVOTENSOR_COORDINATOR": "n0:77"}).coordinator == "n0:77"


@given(
    coordinator=st.sampled_from([None, "h1:10", "[::1]:99"]),
    num=st.sampled_from([None, 16, 32]),
    pid=st.sampled_from([None, 0, 7]),
    launcher=st.sampled_from([SLURM, OMPI, {}]),
    ours=st.booleans(),
)
def test_explicit_arguments_win_field_by_field(coordinator, num, pid, launcher, ours):
    env = dict(launcher)
    if ours:
        env |= {
            "EVOTENSOR_COORDINATOR": "k8s-0.svc:5",
            "EVOTENSOR_NUM_PROCESSES": "8",
            "EVOTENSOR_PROCESS_ID": "6",
        }
    try:
        spec = resolve_cluster(coordinator, num, pid, environ=env)
    except ArgumentError as err:
        assert "not set" in str(err) or "must be below" in str(err)
        return
    for field, value in (("coordinator", coordinator), ("num_processes", num), ("process_id", pid)):
        if value is not None:
            assert getattr(spec, field) == value and spec.sources[field] == field
        elif ours:
            assert spec.sources[field].startswith("EVOTENSOR_")
    assert 0 <= spec.process_id < spec.num_processes


def test_missing_settings_say_how_to_give_them():
    with pytest.raises(
        ArgumentError, match=r"coordinator, num_processes, process_id not set.*srun or mpirun"
    ):
        resolve_cluster(environ={})
    with pytest.raises(ArgumentError, match=r"num_processes not set \(give --num-processes N or EVOTENSOR_"):
        resolve_cluster("h:1", process_id=0, environ={}, names=CLI_NAMES)
    # a batch script's own shell (no job step): SLURM_JOB_ID without SLURM_PROCID
    partial = {"SLURM_JOB_ID": "7", "SLURM_NTASKS": "2"}
    with pytest.raises(
        ArgumentError, match="SLURM_STEP_NODELIST, SLURM_PROCID are not: start every process with srun"
    ):
        resolve_cluster(environ=partial)


@pytest.mark.parametrize(
    "kwargs, env, message",
    [
        ({"coordinator": "node1"}, {}, "--coordinator must be HOST:PORT"),
        ({"coordinator": "node1:70000"}, {}, "--coordinator must have a port in 1..65535"),
        ({"coordinator": "[1:2:3:4:5:6:7:8:9]:80"}, {}, "invalid IPv6 address"),
        ({"num_processes": 0}, {}, "--num-processes must be an int >= 1, got 0"),
        ({"process_id": -1}, {}, "--process-id must be an int >= 0, got -1"),
        ({"process_id": True}, {}, "--process-id must be an int"),
        (
            {"num_processes": None},
            {"EVOTENSOR_NUM_PROCESSES": "two"},
            "EVOTENSOR_NUM_PROCESSES='two' must be",
        ),
        (
            {"process_id": 4},
            {},
            r"process id 4 \(from --process-id\) must be below the number of processes 4 ",
        ),
        (
            {"process_id": None},
            {"JOB_COMPLETION_INDEX": "9"},
            r"from JOB_COMPLETION_INDEX='9'\) must be below",
        ),
        ({"local_device_ids": [0, 0]}, {}, "local_device_ids must be 'all' or distinct device ids"),
        ({}, {"JAX_LOCAL_DEVICE_IDS": "0,x"}, "JAX_LOCAL_DEVICE_IDS='0,x' must be an int >= 0"),
        ({}, {"SLURM_STEP_NODELIST": "n[01-02"}, "unclosed"),
    ],
)
def test_malformed_and_inconsistent_settings_name_their_source(kwargs, env, message):
    args = {"coordinator": "h:1", "num_processes": 4, "process_id": 0} | kwargs
    if "SLURM_STEP_NODELIST" in env:
        args, env = {}, SLURM | env
    with pytest.raises(ArgumentError, match=message):
        resolve_cluster(**args, environ=env, names=CLI_NAMES)


def test_initialize_after_jax_started_is_refused_clearly(monkeypatch):
    jax.block_until_ready(jnp.zeros(1))  # this process's backends are up
    with pytest.raises(RuntimeError, match="must be called before anything else uses JAX"):
        initialize("127.0.0.1:1", num_processes=2, process_id=1)
    assert not jax.distributed.is_initialized()
    with pytest.raises(ArgumentError, match="platform must be one of"):
        initialize("127.0.0.1:1", 2, 1, platform="quantum")
    for var in [*SLURM, *OMPI, "EVOTENSOR_COORDINATOR", "JAX_COORDINATOR_ADDRESS"]:
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ArgumentError, match="not set"):  # before JAX is touched
        initialize(num_processes=2)


def test_global_mesh_in_this_process():
    mesh = global_mesh()
    assert mesh.axis_names == ("pop",) and mesh.devices.size == jax.device_count()
    assert global_mesh("rows", devices=1).shape["rows"] == 1
    assert mesh_devices(jax.devices()[:1]) == jax.devices()[:1]
    for bad, message in [
        (jax.device_count() + 1, "at most the"),
        (0, "devices must be an int >= 1"),
        ("some", "'all', a positive int"),
        ([], "non-empty sequence"),
    ]:
        with pytest.raises(ArgumentError, match=message):
            global_mesh(devices=bad)
    with pytest.raises(ArgumentError, match="axis must be a non-empty str"):
        global_mesh("")


_JOB = textwrap.dedent(
    """
    import json, socket, sys
    import jax
    from evotensor import distributed

    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    distributed.use_cpu_devices(2)
    first = distributed.initialize(f"127.0.0.1:{port}", 1, 0, platform="cpu")
    again = distributed.initialize(f"127.0.0.1:{port}", 1, 0)   # the same settings: nothing happens
    try:
        distributed.initialize(f"127.0.0.1:{port + 1}", 1, 0)
        other = None
    except RuntimeError as err:
        other = str(err)
    mesh = distributed.global_mesh()   # JAX starts its backends here
    try:
        distributed.use_cpu_devices(4)
        late = None
    except RuntimeError as err:
        late = str(err)
    out = {
        "same": again is first, "other": other, "late": late,
        "collectives": jax.config.jax_cpu_collectives_implementation,
        "processes": distributed.process_count(), "main": distributed.is_main_process(),
        "mesh": mesh.devices.size, "agree": distributed.agree(None),
        "text": distributed.broadcast_text("run-1"),
    }
    distributed.shutdown()
    distributed.shutdown()   # a second shutdown does nothing
    out["after"] = distributed.is_initialized()
    print("RESULT " + json.dumps(out))
    """
)


def test_a_one_process_job_starts_once_and_stops():
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(REPO / "src"))
    env.pop("XLA_FLAGS", None)
    done = subprocess.run([sys.executable, "-c", _JOB], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    import json

    out = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert out["same"] and out["processes"] == 1 and out["main"] and out["mesh"] == 2
    assert "already called in this process with other settings (coordinator" in out["other"]
    assert "JAX has already started its backends" in out["late"]
    assert out["collectives"] == "gloo" and out["agree"] == {} and out["text"] == "run-1"
    assert out["after"] is False
