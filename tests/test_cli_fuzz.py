"""The CLI against bad invocations and faults, in subprocesses (as a user runs it).

Every bad invocation must end with exactly ONE ``error: ...`` line on stderr (the last line) that
names the option, file or directory, exit with status 2 and print no traceback; each subprocess is
time-boxed. The fast tier (the default run) runs the table's fast cases in parallel threads, one
subprocess each, plus the fault tests: ``kill -9`` in the middle of a checkpoint write, a stale
checkpoint of another run, ``SIGINT`` after the first checkpoint. The slow tier (``-m slow``) runs
the rest of the table and hypothesis-generated ``--set`` values.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evotensor.io.checkpoint import load_metadata
from evotensor.io.rundir import RunDirectory, read_metrics

TIMEOUT = 180  # seconds for one CLI subprocess (a loaded 2-core CI machine)
SMALL = ["--set", "dims=2", "--chunk-size", "2", "--quiet"]  # es-sphere, tiny


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("EVOTENSOR_CACHE_DIR", "/tmp/evotensor-test-cache")
    env.pop("EVOTENSOR_TRACEBACK", None)
    return env


def cli(args: list[str], cwd: Path, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "evotensor.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=cli_env(),
        timeout=timeout,
    )


def one_line_error_problem(out: subprocess.CompletedProcess, substring: str) -> str | None:
    """Why ``out`` is not a proper one-line error naming ``substring`` (None when it is)."""
    lines = out.stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("error:")]
    if "Traceback" in out.stderr + out.stdout:
        return "traceback:\n" + out.stderr[-2000:]
    if out.returncode != 2:
        return f"exit status {out.returncode}, stderr:\n{out.stderr[-1500:]}"
    if len(errors) != 1 or lines[-1] != errors[0]:
        return f"not exactly one error line, last on stderr:\n{out.stderr[-1500:]}"
    if substring not in errors[0]:
        return f"{substring!r} not in {errors[0]!r}"
    return None


# ---- the table of bad invocations -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    """``argv`` ({d}: the case's own directory, {run}: a copy of a finished es-sphere run there);
    ``setup(d)`` prepares files; the error line must contain ``names``."""

    id: str
    argv: tuple[str, ...]
    names: str
    setup: Callable[[Path], None] | None = None
    fast: bool = True


def _write(name: str, data: bytes | str) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        path = d / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
        path.write_bytes(data if isinstance(data, bytes) else data.encode())

    return setup


def _mkdir(name: str) -> Callable[[Path], None]:
    def setup(d: Path) -> None:
        path = d / name
        if path.exists() and not path.is_dir():
            path.unlink()
        path.mkdir(parents=True, exist_ok=True)

    return setup


def _remove(name: str) -> Callable[[Path], None]:
    return lambda d: (d / name).unlink()


def _foreign_checkpoint(d: Path) -> None:
    shutil.copy(d.parent.parent / "base" / "B" / "checkpoint.npz", d / "run" / "checkpoint.npz")


def _unwritable(d: Path) -> None:
    (d / "ro").mkdir()
    os.chmod(d / "ro", 0o555)


# as root a read-only directory is writable: use a place no one can create a directory in
UNWRITABLE = "/sys/evotensor-fuzz-out" if os.geteuid() == 0 else "{d}/ro/out"
RUN = ("run", "es-sphere")
R = ("run", "es-sphere", "--resume", "{run}")

CASES = [
    # options that do not parse or are out of range
    Case("unknown-task", ("run", "no-such-task"), "unknown task 'no-such-task'"),
    Case("unknown-option", (*RUN, "--set", "bogus=1"), "no option(s) bogus"),
    Case("set-no-equals", (*RUN, "--set", "novalue"), "KEY=VALUE"),
    Case("set-empty-key", (*RUN, "--set", "=5"), "KEY=VALUE"),
    Case("generations-0", (*RUN, "--set", "generations=0"), "generations"),
    Case("generations-abc", (*RUN, "--set", "generations=abc"), "generations"),
    Case("generations-huge", (*RUN, "--generations", "99999999999"), "generations"),
    Case("pop-0", (*RUN, "--set", "pop=0"), "pop"),
    Case("pop-float", (*RUN, "--set", "pop=2.5"), "pop"),
    Case("seed-abc", (*RUN, "--set", "seed=abc"), "seed"),
    Case("seed-negative", (*RUN, "--set", "seed=-1"), "seed"),
    Case("seed-2**64", (*RUN, "--seed", str(2**64)), "--seed"),
    Case("seed-2**32-set", (*RUN, "--set", f"seed={2**32}"), "seed"),
    Case("sigma_frac-abc", (*RUN, "--set", "sigma_frac=abc"), "sigma_frac"),
    Case("sigma_frac-nan", (*RUN, "--set", "sigma_frac=nan"), "sigma_frac"),
    Case("sigma_frac-negative", (*RUN, "--set", "sigma_frac=-1"), "sigma_frac"),
    Case("dims-float", (*RUN, "--set", "dims=2.5"), "dims"),
    Case("dims-negative", (*RUN, "--set", "dims=-3"), "dims must be a positive int"),
    Case("strategy-unknown", (*RUN, "--set", "strategy=nope"), "strategy must be one of"),
    Case("pop-flag-abc", (*RUN, "--pop", "abc"), "--pop"),
    Case("generations-flag-0", (*RUN, "--generations", "0"), "--generations"),
    Case("chunk-size-0", (*RUN, "--chunk-size", "0"), "--chunk-size"),
    Case("unknown-flag", (*RUN, "--frobnicate"), "--frobnicate"),
    Case("unknown-command", ("frobnicate",), "No such command"),
    # files where a file is expected
    Case("config-missing", (*RUN, "--config", "{d}/missing.toml"), "missing.toml: file not found"),
    Case("config-directory", (*RUN, "--config", "{d}"), "is a directory"),
    Case(
        "config-binary",
        (*RUN, "--config", "{d}/bin.toml"),
        "--config",
        _write("bin.toml", b"\x00\xff\xfe\x93"),
    ),
    Case("config-bad-toml", (*RUN, "--config", "{d}/c.toml"), "invalid TOML", _write("c.toml", "dims = = 3")),
    Case(
        "config-bad-value",
        (*RUN, "--config", "{d}/c.toml"),
        "sigma_frac",
        _write("c.toml", 'sigma_frac = "x"'),
    ),
    # the run directory
    Case("out-empty", (*RUN, "--out", ""), "--out"),
    Case("out-is-a-file", (*RUN, *SMALL, "--out", "{d}/f"), "--out", _write("f", "x")),
    Case("out-under-a-file", (*RUN, *SMALL, "--out", "{d}/f/sub"), "--out", _write("f", "x")),
    Case("out-unwritable", (*RUN, *SMALL, "--out", UNWRITABLE), "--out", _unwritable),
    # resume
    Case("resume-empty", (*RUN, "--resume", ""), "--resume"),
    Case("resume-missing", (*RUN, "--resume", "{d}/nope"), "not a run directory"),
    Case("resume-a-file", (*RUN, "--resume", "{d}/f"), "not a run directory", _write("f", "x")),
    Case("resume-no-config", (*RUN, "--resume", "{d}"), "no config.json"),
    Case("resume-config-damaged", R, "config.json is damaged", _write("run/config.json", '{"task": ')),
    Case("resume-config-a-directory", R, "config.json: is a directory", _mkdir("run/config.json")),
    Case("resume-checkpoint-empty", R, "checkpoint.npz", _write("run/checkpoint.npz", b"")),
    Case("resume-checkpoint-random", R, "checkpoint.npz", _write("run/checkpoint.npz", os.urandom(700))),
    Case("resume-checkpoint-a-directory", R, "checkpoint.npz", _mkdir("run/checkpoint.npz")),
    Case("resume-no-checkpoint", R, "no checkpoint to resume from", _remove("run/checkpoint.npz")),
    Case("resume-foreign-checkpoint", R, "belongs to another run", _foreign_checkpoint),
    Case("resume-changes-problem", (*R, "--set", "dims=3"), "--set dims=3: dims cannot change when resuming"),
    Case("resume-changes-seed", (*R, "--seed", "9"), "cannot change when resuming"),
    Case("resume-with-out", (*R, "--out", "{d}/x"), "--out"),
    Case("resume-other-task", ("run", "es-rastrigin", "--resume", "{run}"), "is a run of task 'es-sphere'"),
    Case("resume-before-checkpoint", (*R, "--generations", "2"), "past the requested 2"),
    # show
    Case("show-empty", ("show", ""), "run directory"),
    Case("show-missing", ("show", "{d}/nope"), "not a run directory"),
    Case(
        "show-config-damaged", ("show", "{run}"), "config.json is damaged", _write("run/config.json", "[1,")
    ),
    Case(
        "show-metrics-damaged",
        ("show", "{run}"),
        "metrics.csv",
        _write("run/metrics.csv", "generation,x\n1,a\n"),
    ),
    Case("show-best-damaged", ("show", "{run}"), "best.json", _write("run/best.json", "{")),
]
SLOW_IDS = {  # the first six are also in tests/test_cli.py
    "unknown-task",
    "unknown-option",
    "set-no-equals",
    "strategy-unknown",
    "pop-flag-abc",
    "dims-float",
    "set-empty-key",
    "generations-abc",
    "pop-float",
    "seed-2**32-set",
    "sigma_frac-nan",
    "dims-negative",
    "generations-flag-0",
    "chunk-size-0",
    "unknown-command",
    "config-missing",
    "resume-empty",
    "resume-a-file",
    "resume-checkpoint-a-directory",
    "resume-with-out",
    "show-empty",
    "show-missing",
}
CASES = [dataclasses.replace(c, fast=c.id not in SLOW_IDS) for c in CASES]


@pytest.fixture(scope="module")
def base_runs(tmp_path_factory) -> Path:
    """Two finished 4-generation es-sphere runs, ``A`` (seed 0) and ``B`` (seed 1)."""
    base = tmp_path_factory.mktemp("cli_fuzz") / "base"
    base.mkdir()
    argv = [*RUN, *SMALL, "--generations", "4"]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        outs = list(
            pool.map(lambda a: cli([*argv, *a], cwd=base), [["--out", "A"], ["--out", "B", "--seed", "1"]])
        )
    for out in outs:
        assert out.returncode == 0, out.stderr
    return base


def _run_case(case: Case, root: Path, base: Path) -> str | None:
    d = root / case.id
    d.mkdir(parents=True)
    if any("{run}" in a for a in case.argv):
        shutil.copytree(base / "A", d / "run")
    if case.setup is not None:
        case.setup(d)
    argv = [a.replace("{d}", str(d)).replace("{run}", str(d / "run")) for a in case.argv]
    try:
        out = cli(argv, cwd=d)
    except subprocess.TimeoutExpired:
        return f"{case.id}: no answer within {TIMEOUT}s"
    problem = one_line_error_problem(out, case.names)
    return None if problem is None else f"{case.id} ({' '.join(argv)}): {problem}"


def _run_table(cases: list[Case], base: Path) -> None:
    root = base.parent / f"cases-{time.monotonic_ns()}"
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        problems = [p for p in pool.map(lambda c: _run_case(c, root, base), cases) if p]
    assert not problems, "\n\n".join(problems)


def test_case_ids_are_unique():
    assert len({c.id for c in CASES}) == len(CASES) and SLOW_IDS <= {c.id for c in CASES}
    assert 20 <= sum(c.fast for c in CASES) <= 45


def test_bad_invocations_fast_tier(base_runs):
    _run_table([c for c in CASES if c.fast], base_runs)


@pytest.mark.slow
def test_bad_invocations_slow_tier(base_runs):
    _run_table([c for c in CASES if not c.fast], base_runs)


@pytest.mark.slow
@settings(max_examples=25)
@given(
    name=st.sampled_from(["dims", "strategy", "sigma_frac", "pop", "seed", "generations", "x", "dims "]),
    value=st.one_of(
        st.sampled_from(
            ["", "abc", "nan", "inf", "-inf", "1e400", "0", "-1", "2.5", "[1,2]", "{a=1}", "true"]
        ),
        st.sampled_from(["18446744073709551616", "1979-05-27", '"3"', "'x'", "0x10", "1_000"]),
        st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=8),
    ),
)
def test_random_set_values_give_a_result_or_one_error_line(tmp_path_factory, name, value):
    d = tmp_path_factory.mktemp("fuzz")
    out = cli(
        [*RUN, "--set", f"{name}={value}", "--generations", "1", "--set", "dims=2", "--out", str(d / "r")], d
    )
    assert "Traceback" not in out.stderr + out.stdout, out.stderr
    if out.returncode != 0:
        assert one_line_error_problem(out, "") is None, out.stderr


# ---- faults -----------------------------------------------------------------------------------------

# A CLI run whose N-th checkpoint write stalls after writing its temporary file (then it is killed).
STALLING_CHILD = """
import contextlib, sys, time
from pathlib import Path
from evotensor.io import atomic

real, marker, stall_at = atomic.atomic_open, Path(sys.argv[1]), int(sys.argv[2])
count = [0]

@contextlib.contextmanager
def stalling(path, mode="wb"):
    with real(path, mode) as handle:
        yield handle
        if Path(path).name == "checkpoint.npz":
            count[0] += 1
            if count[0] == stall_at:
                handle.flush()
                marker.write_text("writing")
                time.sleep(600)

atomic.atomic_open = stalling
from evotensor.cli import main
main(sys.argv[3:])
"""


def _kill_while_writing_checkpoint(stall_at: int, argv: list[str], cwd: Path) -> Path:
    """Run the CLI with ``argv``, kill -9 it while it writes its ``stall_at``-th checkpoint."""
    marker = cwd / f"marker-{stall_at}"
    child = subprocess.Popen(
        [sys.executable, "-c", STALLING_CHILD, str(marker), str(stall_at), *argv],
        cwd=cwd,
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + TIMEOUT
        while not marker.exists():
            assert child.poll() is None, f"the child ended before the write: {child.stderr.read()[-2000:]}"
            assert time.monotonic() < deadline, "the child never reached the checkpoint write"
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stderr.close()
    return marker


def _temp_files(run_dir: Path) -> list[str]:
    return sorted(p.name for p in run_dir.iterdir() if p.name.startswith(".") and p.name.endswith(".tmp"))


def test_kill_9_during_a_checkpoint_write_keeps_the_previous_one_and_resume_cleans_up(tmp_path):
    run_dir, straight = tmp_path / "run", tmp_path / "straight"
    argv = [*RUN, *SMALL, "--generations", "6"]
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # the uninterrupted run, meanwhile
        straight_run = pool.submit(cli, [*argv, "--out", str(straight)], tmp_path)
        _kill_while_writing_checkpoint(2, [*argv, "--out", str(run_dir)], tmp_path)
        assert straight_run.result().returncode == 0
    stray = _temp_files(run_dir)
    assert len(stray) == 1 and stray[0].startswith(".checkpoint.npz."), stray
    assert load_metadata(run_dir / "checkpoint.npz")["generation"] == 2  # the previous checkpoint

    out = cli([*RUN, "--resume", str(run_dir), "--quiet"], tmp_path)
    assert out.returncode == 0, out.stderr
    assert _temp_files(run_dir) == []
    a, b = read_metrics(run_dir / "metrics.csv"), read_metrics(straight / "metrics.csv")
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])


def test_run_killed_before_its_first_checkpoint_does_not_resume_the_previous_runs_checkpoint(
    base_runs, tmp_path
):
    run_dir = tmp_path / "run"
    shutil.copytree(base_runs / "A", run_dir)  # another run's directory, with its checkpoint
    _kill_while_writing_checkpoint(
        1, [*RUN, *SMALL, "--seed", "5", "--generations", "6", "--out", str(run_dir)], tmp_path
    )
    out = cli([*RUN, "--resume", str(run_dir)], tmp_path)
    assert one_line_error_problem(out, "no checkpoint to resume from") is None, out.stderr
    assert _temp_files(run_dir) == []  # this (refused) run still removed the killed write's leftovers


def _default_sigint() -> None:
    """In the child before exec: SIGINT unblocked and at its default disposition."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _signal_masks(pid: int) -> str:
    """The blocked / ignored / caught signal masks of process ``pid`` (Linux), for a failure message."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError as err:
        return f"unreadable ({err})"
    return "; ".join(line for line in lines if line.startswith(("SigBlk", "SigIgn", "SigCgt")))


def test_sigint_after_the_first_checkpoint_prints_how_to_resume(tmp_path):
    run_dir = tmp_path / "run"
    argv = [*RUN, "--set", "dims=2", "--generations", "100000000", "--chunk-size", "5000"]
    child = subprocess.Popen(
        [sys.executable, "-m", "evotensor.cli", *argv, "--out", str(run_dir)],
        cwd=tmp_path,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # as a shell starts it: SIGINT neither ignored nor blocked (a pytest worker that ran the
        # whole suite may pass either on to its children; the CLI's handling is what is tested)
        preexec_fn=_default_sigint,
    )
    try:
        deadline = time.monotonic() + TIMEOUT
        while not (run_dir / "checkpoint.npz").exists():
            assert child.poll() is None, child.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "no checkpoint was written"
            time.sleep(0.05)
        child.send_signal(signal.SIGINT)
        try:
            _, stderr = child.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            masks = _signal_masks(child.pid)
            raise AssertionError(f"SIGINT did not stop the run; the child's signal masks: {masks}") from None
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 130, stderr[-2000:]
    assert "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    generation = RunDirectory.checkpoint_generation(run_dir)
    assert generation >= 5000 and generation % 5000 == 0
    assert last == (
        f"interrupted; resume with `evotensor run es-sphere --resume {run_dir}` "
        f"(its checkpoint of generation {generation} is intact)"
    )
    out = cli([*RUN, "--resume", str(run_dir), "--generations", str(generation), "--quiet"], tmp_path)
    assert out.returncode == 0, out.stderr
    assert read_metrics(run_dir / "metrics.csv")["generation"][-1] == generation
