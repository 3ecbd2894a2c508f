"""`evotensor run TASK --distributed`: two CPU processes (2 devices each, gloo) run a small ES task
into the same run directory.

* Only process 0 writes: process 1 runs with a file-size limit of 0 bytes (any byte it wrote to a
  file would kill it with SIGXFSZ), metrics.csv has one row per generation, config.json records
  process 0's command line.
* The run equals a single process with 4 devices (`--devices 4`) for the same seed: bit for bit for
  everything the strategy computes; the run loop's generation mean and std are sums over devices,
  which gloo adds in another order than XLA:CPU does within one process (float32 tolerance).
* The 2-process checkpoint resumes in one process: on 4 devices bit for bit what an uninterrupted
  4-device run computes, on 1 device bit for bit what a 1-device run resumed in two steps computes
  (and, across layouts, equal to float32 tolerance: CMA-ES's sums over the population are split
  differently over 4 devices than on 1).
* A problem found by one process (process 0 cannot use the run directory) stops both, each with a
  one-line error naming the process.

The single-process runs happen in one subprocess with 4 CPU devices (tests.distributed.harness),
through the CLI's own `main`, in :func:`scenario_reference`.
"""

import contextlib
import csv
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from tests.distributed import harness

REPO = Path(__file__).resolve().parents[2]
TASK = ["es-sphere", "--pop", "8", "--chunk-size", "2", "--quiet"]
APPROXIMATE = ()  # the run loop replicates the [pop] fitness before its sums: every metric is exact
TIMEOUT = 240.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _environment() -> dict[str, str]:
    env = dict(os.environ, JAX_PLATFORMS="cpu", EVOTENSOR_CACHE_DIR="off", PYTHONDONTWRITEBYTECODE="1")
    # the suite's compile options are kept (the single-process reference compiles with the same ones)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith("--xla_force_host_platform")]
    env["XLA_FLAGS"] = " ".join(flags)
    return env


# process 1 runs under RLIMIT_FSIZE = 0: writing any byte to any file kills it (SIGXFSZ)
_NO_FILE_WRITES = (
    "import os, resource, sys; resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0)); "
    "os.execv(sys.executable, [sys.executable, '-m', 'evotensor.cli', *sys.argv[1:]])"
)


def _launch(args: list[str], timeout: float = TIMEOUT) -> list[tuple[int | None, str, str]]:
    """``evotensor run ARGS --distributed`` in 2 processes; ``[(returncode, stdout, stderr)]``.
    Process 1 may not write files. A failed process gets its peer stopped after 15 s; the job is
    repeated once if XLA:CPU aborted a collective rendezvous (as tests.distributed.harness does)."""
    for attempt in range(2):
        port = _free_port()
        procs = []
        for i in range(2):
            prefix = (
                [sys.executable, "-m", "evotensor.cli"] if i == 0 else [sys.executable, "-c", _NO_FILE_WRITES]
            )
            command = [*prefix, "run", *args, "--distributed", "--coordinator", f"127.0.0.1:{port}",
                       "--num-processes", "2", "--process-id", str(i), "--cpu-devices", "2"]  # fmt: skip
            procs.append(
                subprocess.Popen(
                    command, cwd=REPO, env=_environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    text=True, start_new_session=True,
                )
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            if any(p.poll() not in (None, 0) for p in procs):
                deadline = min(deadline, time.monotonic() + 15)
            time.sleep(0.05)
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
        outcomes = [(p.returncode, *p.communicate(timeout=30)) for p in procs]
        aborted = [o for o in outcomes if o[0] is not None and o[0] < 0 and harness.RENDEZVOUS_ABORT in o[2]]
        if not aborted or attempt:
            return outcomes
        warnings.warn(
            f"XLA:CPU rendezvous abort; rerunning the job once:\n{aborted[0][2][-2000:]}", stacklevel=2
        )
    raise AssertionError("unreachable")


def _metrics(path: Path) -> tuple[list[str], list[list[str]]]:
    """metrics.csv as (header, rows of the exact text fields)."""
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


def _same_rows(a: Path, b: Path, rows: slice, exact_everywhere: bool) -> None:
    header, got = _metrics(a)
    header_b, want = _metrics(b)
    assert header == header_b
    got, want = got[rows], want[rows]
    assert len(got) == len(want) > 0
    for row_a, row_b in zip(got, want):
        for name, x, y in zip(header, row_a, row_b):
            if exact_everywhere or name not in APPROXIMATE:
                assert x == y, f"{a} vs {b}, generation {row_a[0]}: {name} {x} != {y}"
            else:
                np.testing.assert_allclose(float(x), float(y), rtol=1e-6, err_msg=f"{name}, gen {row_a[0]}")


def _arrays(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as data:
        return {k: data[k] for k in data.files if k != "__meta__"}


def _assert_same_arrays(a: Path, b: Path, skip=()) -> None:
    x, y = _arrays(a), _arrays(b)
    assert x.keys() == y.keys()
    for k in x:
        if not any(s in k for s in skip):
            np.testing.assert_array_equal(x[k], y[k], err_msg=f"{a.name}: {k}")


def scenario_reference() -> dict:
    """In one process with 4 CPU devices (started by the harness): the reference runs, through
    the CLI. Directories come in ``EVOTENSOR_TEST_DIRS`` (JSON): ``two`` (the 2-process run,
    4 generations), ``root`` (where to write)."""
    from evotensor.cli import main

    dirs = json.loads(os.environ["EVOTENSOR_TEST_DIRS"])
    two, root = Path(dirs["two"]), Path(dirs["root"])
    codes = {}

    def cli(name: str, *args: str) -> None:
        try:
            main(["run", *args])
        except SystemExit as stop:
            codes[name] = stop.code
        else:  # pragma: no cover - main always exits
            codes[name] = None

    for copy in ("resume4", "resume1", "resume1_twice"):
        shutil.copytree(two, root / copy)
    cli(
        "uninterrupted4", *TASK, "--generations", "8", "--devices", "4", "--out", str(root / "uninterrupted4")
    )
    cli(
        "resume4",
        "es-sphere",
        "--resume",
        str(root / "resume4"),
        "--generations",
        "8",
        "--devices",
        "4",
        "--quiet",
    )
    cli("resume1", "es-sphere", "--resume", str(root / "resume1"), "--generations", "8", "--quiet")
    cli("resume1_to6", "es-sphere", "--resume", str(root / "resume1_twice"), "--generations", "6", "--quiet")
    cli("resume1_to8", "es-sphere", "--resume", str(root / "resume1_twice"), "--generations", "8", "--quiet")
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):  # a population that does not split over the devices
        cli("pop10", "es-sphere", "--pop", "10", "--devices", "4", "--out", str(root / "pop10"))
    return {"codes": codes, "pop10": stderr.getvalue()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("multihost")
    two = root / "two"
    outcomes = _launch([*TASK, "--generations", "4", "--out", str(two)])
    for i, (code, out, err) in enumerate(outcomes):
        assert code == 0, f"process {i} exited with {code}:\n{err[-3000:]}\n{out[-1000:]}"
    scenario = f"{__name__}:scenario_reference"
    reference = harness.run_single(
        [scenario], devices=4, env={"EVOTENSOR_TEST_DIRS": json.dumps({"two": str(two), "root": str(root)})}
    )[scenario]
    codes = reference["codes"]
    assert codes.pop("pop10") == 2, codes
    assert all(code == 0 for code in codes.values()), codes
    return root, outcomes, reference["pop10"]


def test_only_process_0_writes_the_run_directory(runs):
    root, outcomes, _ = runs
    two = root / "two"
    (_, out0, err0), (code1, out1, err1) = outcomes
    assert code1 == 0  # with a 0-byte file size limit: it wrote no byte to any file
    assert sorted(p.name for p in two.iterdir()) == sorted(
        ["config.json", "metrics.csv", "checkpoint.npz", "best.npz", "best.json", "best.txt", "fitness.png"]
    )
    assert len(_metrics(two / "metrics.csv")[1]) == 4  # one row per generation, not one per process
    record = json.loads((two / "config.json").read_text())
    command = record["command"]
    assert command[command.index("--process-id") + 1] == "0"
    assert record["device"]["processes"] == 2 and len(record["device"]["devices"]) == 4
    assert "best fitness:" in out0 and "wrote" in out0 and "process 0 of 2" in err0
    assert "best fitness" not in out1 and "wrote" not in out1 and "error" not in err1


def test_two_processes_equal_one_process_with_4_devices(runs):
    root, _, _ = runs
    _same_rows(root / "two" / "metrics.csv", root / "uninterrupted4" / "metrics.csv", slice(0, 4), False)
    best = json.loads((root / "two" / "best.json").read_text())["best_fitness"]
    assert np.float32(best) == np.float32(_metrics(root / "uninterrupted4" / "metrics.csv")[1][3][2])


def test_the_2_process_checkpoint_resumes_on_4_devices_bit_for_bit(runs):
    root, _, _ = runs
    # the state the two processes gathered and saved at generation 4 continues exactly as the
    # uninterrupted 4-device run did: every array of the final state and every later metric
    _same_rows(root / "resume4" / "metrics.csv", root / "uninterrupted4" / "metrics.csv", slice(4, 8), True)
    _assert_same_arrays(root / "resume4" / "checkpoint.npz", root / "uninterrupted4" / "checkpoint.npz",
                        skip=[f"history/{m}" for m in APPROXIMATE])  # fmt: skip
    _assert_same_arrays(root / "resume4" / "best.npz", root / "uninterrupted4" / "best.npz")


def test_the_2_process_checkpoint_resumes_on_1_device(runs):
    root, _, _ = runs
    once, twice = root / "resume1", root / "resume1_twice"
    # the restored history is the 2-process run's, byte for byte
    _same_rows(once / "metrics.csv", root / "two" / "metrics.csv", slice(0, 4), True)
    # resuming on 1 device is bit-identical however the rest is split into resumed runs
    assert (once / "metrics.csv").read_bytes() == (twice / "metrics.csv").read_bytes()
    _assert_same_arrays(once / "checkpoint.npz", twice / "checkpoint.npz")
    _assert_same_arrays(once / "best.npz", twice / "best.npz")
    # and equals the 4-device continuation up to float32 rounding: XLA partitions the sampling
    # (ask's matmul runs on [pop/4] rows per device), which may round differently from one device
    header, got = _metrics(once / "metrics.csv")
    _, want = _metrics(root / "resume4" / "metrics.csv")
    np.testing.assert_allclose(np.float64(got[4:]), np.float64(want[4:]), rtol=1e-4)
    record = json.loads((once / "config.json").read_text())
    assert record["device"]["processes"] == 2  # the record of the run's start is kept


def test_a_problem_on_one_process_stops_both(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    (code0, _, err0), (code1, _, err1) = _launch(
        [*TASK, "--generations", "2", "--out", str(blocker)], timeout=120
    )
    assert code0 == 2 and f"error: --out {blocker}: exists and is not a directory" in err0
    assert (
        code1 == 2 and f"error: [process 1] process 0: --out {blocker}: exists and is not a directory" in err1
    )


def test_a_population_that_does_not_split_is_a_one_line_error(runs):
    message = runs[2]
    assert "error: --devices (4 devices): mesh: the population (10) must split evenly" in message
    assert "(the population size is --pop)" in message and "Traceback" not in message


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--devices", "x"], "--devices must be a positive int or 'all', got 'x'"),
        (["--devices", "0"], "--devices must be a positive int or 'all', got '0'"),
        (["--coordinator", "h:1", "--process-id", "0"], "--coordinator, --process-id only apply with --dist"),
        (["--cpu-devices", "2"], "--cpu-devices 2: cannot give this process 2 CPU devices: JAX has already"),
        (["--devices", "DEVICES+1"], "--devices DEVICES+1: devices must be at most the DEVICES devices"),
        (["--distributed"], "--distributed: multi-process settings incomplete: coordinator, num_processes, "
         "process_id not set (give --coordinator HOST:PORT or EVOTENSOR_COORDINATOR"),
    ],
)  # fmt: skip
def test_device_flags_name_the_flag(flags, message, capsys, monkeypatch, tmp_path):
    import jax

    from evotensor import cli

    monkeypatch.setattr(cli, "_configure_jax", lambda: None)  # this process's JAX config stays as it is
    for var in ["SLURM_JOB_ID", "OMPI_COMM_WORLD_SIZE", "EVOTENSOR_COORDINATOR", "EVOTENSOR_NUM_PROCESSES",
                "EVOTENSOR_PROCESS_ID", "JOB_COMPLETION_INDEX", "JAX_COORDINATOR_ADDRESS"]:  # fmt: skip
        monkeypatch.delenv(var, raising=False)
    jax.devices()  # the backends are up, as in any process that already used JAX
    n = str(jax.device_count())
    flags = [f.replace("DEVICES+1", str(jax.device_count() + 1)) for f in flags]
    with pytest.raises(SystemExit) as stop:
        cli.main(["run", "es-sphere", "--out", str(tmp_path / "run"), *flags])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    expected = message.replace("DEVICES+1", str(jax.device_count() + 1)).replace("DEVICES", n)
    assert f"error: {expected}" in err and "Traceback" not in err


@pytest.mark.slow
def test_two_processes_resume_their_own_checkpoint_bit_for_bit(runs, tmp_path):
    root, _, _ = runs
    resumed = tmp_path / "resumed"
    for args in ([*TASK, "--generations", "2", "--out", str(resumed)],
                 ["es-sphere", "--resume", str(resumed), "--generations", "4", "--quiet"]):  # fmt: skip
        for i, (code, out, err) in enumerate(_launch(args)):
            assert code == 0, f"process {i} exited with {code}:\n{err[-3000:]}\n{out[-1000:]}"
    # every process read the checkpoint and placed its shards; process 1 wrote nothing (file limit 0)
    assert (resumed / "metrics.csv").read_bytes() == (root / "two" / "metrics.csv").read_bytes()
    _assert_same_arrays(resumed / "checkpoint.npz", root / "two" / "checkpoint.npz")
    _assert_same_arrays(resumed / "best.npz", root / "two" / "best.npz")


QD_TASK = ["qd-arm", "--set", "joints=8", "--set", "cells=8", "--pop", "16", "--chunk-size", "2", "--quiet"]


def scenario_qd_reference() -> dict:
    """One process, one device: the QD task uninterrupted for 8 generations, and the 2-process
    run's checkpoint (generation 4, its archive split over 2 processes) resumed to 8."""
    from evotensor.cli import main

    dirs = json.loads(os.environ["EVOTENSOR_TEST_DIRS"])
    two, root = Path(dirs["two"]), Path(dirs["root"])
    shutil.copytree(two, root / "resume1")
    codes = {}
    for name, args in {
        "uninterrupted1": [*QD_TASK, "--generations", "8", "--out", str(root / "uninterrupted1")],
        "resume1": ["qd-arm", "--resume", str(root / "resume1"), "--generations", "8", "--quiet"],
    }.items():
        try:
            main(["run", *args])
        except SystemExit as stop:
            codes[name] = stop.code
    return codes


@pytest.mark.slow
def test_a_sharded_qd_archive_resumes_on_1_device_bit_for_bit(tmp_path):
    """MAP-Elites keeps its archive split over the devices (cells), and its insertion rules are exact:
    so the 2-process run, the 1-device run and the 2-process checkpoint resumed on 1 device agree
    bit for bit in everything but the run loop's own sums (generation mean and std)."""
    two = tmp_path / "two"
    for i, (code, out, err) in enumerate(_launch([*QD_TASK, "--generations", "4", "--out", str(two)])):
        assert code == 0, f"process {i} exited with {code}:\n{err[-3000:]}\n{out[-1000:]}"
    assert (two / "archive.png").exists() and (two / "qd.png").exists()  # process 0's report
    scenario = f"{__name__}:scenario_qd_reference"
    env = {"EVOTENSOR_TEST_DIRS": json.dumps({"two": str(two), "root": str(tmp_path)})}
    assert harness.run_single([scenario], devices=1, env=env)[scenario] == {"uninterrupted1": 0, "resume1": 0}
    one, resumed = tmp_path / "uninterrupted1", tmp_path / "resume1"
    _same_rows(two / "metrics.csv", one / "metrics.csv", slice(0, 4), False)
    _same_rows(resumed / "metrics.csv", one / "metrics.csv", slice(4, 8), False)
    skip = [f"history/{m}" for m in APPROXIMATE]
    _assert_same_arrays(resumed / "checkpoint.npz", one / "checkpoint.npz", skip=skip)
    _assert_same_arrays(resumed / "best.npz", one / "best.npz")
