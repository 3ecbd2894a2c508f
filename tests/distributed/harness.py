"""Launch multi-device scenarios in subprocesses: the one launcher every family's mesh tests use.

JAX reads its platform and CPU device count once, when it starts, and ``jax.distributed`` must be
initialized before any computation: so a test that needs 4 devices (or 2 processes x 2 devices)
cannot get them in the pytest process. It names scenario functions instead, as
``"tests.qd.mesh_scenarios:scenario_grid"`` (a module importable from the repository root and a
function taking no arguments that returns a JSON-serializable dict), and

* :func:`run_single` runs them all in ONE subprocess with ``devices`` CPU devices;
* :func:`run_multiprocess` runs them in ``processes`` subprocesses, each with
  ``devices_per_process`` CPU devices, joined by ``jax.distributed`` on 127.0.0.1 (a free port) with
  gloo collectives; every process returns its own results.

The subprocess is :mod:`tests.distributed.worker`. A scenario that raises makes the launcher raise
:class:`ScenarioError` with the scenario's name, its traceback and the tail of the worker's stderr.
Every wait has a timeout (a hang fails the test instead of blocking CI), and a multi-process job
whose process fails has its peers stopped after a short grace period instead of waiting for them.

XLA:CPU occasionally aborts a collective whose emulated devices did not all arrive at the
rendezvous ("Termination timeout for ..."; seen once in CI for the ES sharding checks): such a run is
repeated once, alone, with a warning, and the repetition must pass.

Every worker of a job sees the same fresh scratch directory in ``$EVOTENSOR_SCENARIO_TMP`` (removed
afterwards): the place for a run directory that the processes of a multi-process job share.

Results keep float32 values exactly (JSON floats are float64), so scenarios can be compared with a
one-device run bit for bit.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from tests.distributed.worker import DONE_LINE, SCENARIO_PREFIX

SCRATCH_VARIABLE = "EVOTENSOR_SCENARIO_TMP"
REPO_ROOT = Path(__file__).resolve().parents[2]
RENDEZVOUS_ABORT = "Termination timeout for"
DEFAULT_TIMEOUT = 300.0
PEER_GRACE_SECONDS = 10.0  # after one process of a job fails, how long its peers may still finish
TAIL_CHARS = 4000


class ScenarioError(RuntimeError):
    """A scenario raised, a worker crashed, or a worker timed out."""


def run_single(
    scenarios: list[str], devices: int = 4, *, timeout: float = DEFAULT_TIMEOUT, env: dict | None = None
) -> dict[str, Any]:
    """Run ``scenarios`` in one subprocess with ``devices`` CPU devices.

    Returns ``{scenario: result}`` for every scenario name given. Raises :class:`ScenarioError`
    naming the scenario that raised (with its traceback), or the worker's failure (crash, timeout)
    with its stderr tail.
    """
    _check(scenarios, devices)

    def attempt() -> list[_Outcome]:
        return _run_job(scenarios, [_command(scenarios, devices)], timeout, env)

    outcomes = _with_rendezvous_retry(attempt)
    return _results(outcomes, scenarios)[0]


def run_multiprocess(
    scenarios: list[str],
    processes: int = 2,
    devices_per_process: int = 2,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    env: dict | None = None,
) -> list[dict[str, Any]]:
    """Run ``scenarios`` in ``processes`` subprocesses joined by ``jax.distributed`` (gloo, 127.0.0.1).

    Each process has ``devices_per_process`` CPU devices, so ``jax.devices()`` holds
    ``processes * devices_per_process`` devices in every one. Returns one ``{scenario: result}`` per
    process, in process-id order. Raises :class:`ScenarioError` as :func:`run_single` does.
    """
    _check(scenarios, devices_per_process)
    if not isinstance(processes, int) or processes < 1:
        raise ValueError(f"processes must be a positive int, got {processes!r}")

    def attempt() -> list[_Outcome]:
        coordinator = f"127.0.0.1:{_free_port()}"
        commands = [
            _command(
                scenarios,
                devices_per_process,
                "--coordinator", coordinator,
                "--num-processes", str(processes),
                "--process-id", str(i),
                "--init-timeout", str(max(10, int(timeout))),
            )
            for i in range(processes)
        ]  # fmt: skip
        return _run_job(scenarios, commands, timeout, env)

    return _results(_with_rendezvous_retry(attempt), scenarios)


class _Outcome:
    """One finished (or killed) worker: its name, exit status, output and why it was killed
    (``"timed out"``, ``"stopped after a peer failed"``, or None)."""

    def __init__(self, name: str, returncode: int | None, stdout: str, stderr: str, killed: str | None):
        self.name, self.returncode, self.stdout, self.stderr = name, returncode, stdout, stderr
        self.killed = killed

    def rendezvous_abort(self) -> bool:
        return self.returncode is not None and self.returncode < 0 and RENDEZVOUS_ABORT in self.stderr


def _check(scenarios: list[str], devices: int) -> None:
    if isinstance(scenarios, str) or not scenarios:
        raise ValueError(f"scenarios must be a non-empty list of 'module:function' names, got {scenarios!r}")
    for spec in scenarios:
        if not isinstance(spec, str) or spec.count(":") != 1:
            raise ValueError(f"scenario must be 'module.path:function', got {spec!r}")
    if len(set(scenarios)) != len(scenarios):
        raise ValueError(f"scenarios must not repeat, got {scenarios!r}")
    if not isinstance(devices, int) or devices < 1:
        raise ValueError(f"devices must be a positive int, got {devices!r}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _command(scenarios: list[str], devices: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "tests.distributed.worker", "--devices", str(devices), *extra, *scenarios]


def _environment(extra: dict | None) -> dict[str, str]:
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    # The worker sets its own device count; a forced count inherited from the caller would override it.
    # Other flags (the test suite's fast-compile options) are kept.
    flags = env.get("XLA_FLAGS", "").split()
    forced = "--xla_force_host_platform_device_count"
    env["XLA_FLAGS"] = " ".join(f for f in flags if not f.startswith(forced))
    env.update(extra or {})
    return env


def _run_job(
    scenarios: list[str], commands: list[list[str]], timeout: float, env: dict | None
) -> list[_Outcome]:
    """Start every command at once; wait for all of them (at most ``timeout`` seconds in all)."""
    names = ["worker"] if len(commands) == 1 else [f"process {i}" for i in range(len(commands))]
    with tempfile.TemporaryDirectory(prefix="evotensor-harness-") as tmp:
        files, procs = [], []
        scratch = os.path.join(tmp, "scratch")
        os.mkdir(scratch)
        try:
            for i, command in enumerate(commands):
                out = open(os.path.join(tmp, f"{i}.out"), "w+")  # files, not pipes: no pipe can fill up
                err = open(os.path.join(tmp, f"{i}.err"), "w+")
                files.append((out, err))
                procs.append(
                    subprocess.Popen(
                        command, stdout=out, stderr=err, text=True, cwd=REPO_ROOT,
                        env=_environment(env) | {SCRATCH_VARIABLE: scratch}, start_new_session=True,
                    )
                )  # fmt: skip
            killed = _wait_all(procs, timeout)
        finally:
            for p in procs:
                _kill(p)
        outcomes = []
        for name, p, (out, err), why in zip(names, procs, files, killed, strict=True):
            out.seek(0)
            err.seek(0)
            outcomes.append(_Outcome(name, p.returncode, out.read(), err.read(), why))
            out.close()
            err.close()
    return outcomes


def _wait_all(procs: list[subprocess.Popen], timeout: float) -> list[str | None]:
    """Poll until every process exits; once one fails, its peers get :data:`PEER_GRACE_SECONDS`.
    Returns, per process, why it had to be killed (None when it exited by itself)."""
    deadline = time.monotonic() + timeout
    peer_failed = False
    while True:
        codes = [p.poll() for p in procs]  # every one polled: a failure must be seen while a peer runs
        if all(code is not None for code in codes):
            break
        if not peer_failed and any(code not in (None, 0) for code in codes):
            peer_failed = True
            deadline = min(deadline, time.monotonic() + PEER_GRACE_SECONDS)
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    why = "stopped after a peer failed" if peer_failed else f"timed out after {timeout:.0f} s"
    killed = [why if p.poll() is None else None for p in procs]
    for p, reason in zip(procs, killed, strict=True):
        if reason:
            _kill(p)
    return killed


def _kill(p: subprocess.Popen) -> None:
    """Stop a worker and anything it started (its own session), then reap it."""
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:  # pragma: no cover - a process that survives SIGKILL
        pass


def _with_rendezvous_retry(attempt) -> list[_Outcome]:
    outcomes = attempt()
    aborted = [o for o in outcomes if o.rendezvous_abort()]
    if aborted:
        warnings.warn(
            f"{aborted[0].name} hit an XLA:CPU collective rendezvous abort; rerunning the job once:\n"
            + aborted[0].stderr[-2000:],
            stacklevel=3,
        )
        outcomes = attempt()
    return outcomes


def _parse(outcome: _Outcome) -> dict[str, dict]:
    reports = {}
    for line in outcome.stdout.splitlines():
        if line.startswith(SCENARIO_PREFIX):
            payload = json.loads(line[len(SCENARIO_PREFIX) :])
            reports[payload["scenario"]] = payload
    return reports


def _results(outcomes: list[_Outcome], scenarios: list[str]) -> list[dict[str, Any]]:
    """Every worker's ``{scenario: result}``; raises for the first scenario error in any worker,
    then for a worker that crashed or was killed."""
    reports = [_parse(o) for o in outcomes]
    for outcome, report in zip(outcomes, reports, strict=True):
        for spec in scenarios:
            if "error" in report.get(spec, {}):
                raise ScenarioError(
                    f"scenario {spec} raised in {outcome.name}:\n{report[spec]['error']}{_tail(outcome)}"
                )
    # a worker that failed by itself first: the peers it left waiting were killed by the launcher
    for outcome, report in sorted(zip(outcomes, reports, strict=True), key=lambda pair: bool(pair[0].killed)):
        if outcome.killed or outcome.returncode != 0 or DONE_LINE not in outcome.stdout:
            missing = [s for s in scenarios if s not in report]
            how = outcome.killed or f"exited with status {outcome.returncode}"
            raise ScenarioError(
                f"{outcome.name} {how} with scenarios {missing} unfinished{_tail(outcome)}"
                f"\n--- {outcome.name} stdout (tail) ---\n{outcome.stdout[-TAIL_CHARS:]}"
            )
    return [{spec: report[spec]["result"] for spec in scenarios} for report in reports]


def _tail(outcome: _Outcome) -> str:
    return f"\n--- {outcome.name} stderr (tail) ---\n{outcome.stderr[-TAIL_CHARS:]}"
