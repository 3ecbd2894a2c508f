"""The multi-device launcher (tests/distributed/harness.py): devices and processes as asked,
scenario errors reported by name with their traceback, hangs and crashed peers stopped, the
XLA:CPU rendezvous-abort retry."""

import sys

import numpy as np
import pytest
from tests.distributed import harness

HERE = "tests.distributed.mesh_scenarios"
DEVICES = f"{HERE}:scenario_devices"
RAISES = f"{HERE}:scenario_raises"


def _expected_total(n: int) -> float:
    rows = 4 * n
    return float(np.sum(np.arange(rows * 3, dtype=np.float32).reshape(rows, 3) * np.float32(0.1)))


def test_one_process_with_4_devices():
    result = harness.run_single([DEVICES], devices=4)[DEVICES]
    assert result["device_count"] == result["local_device_count"] == 4
    assert (result["process_count"], result["shards_here"]) == (1, 4)
    np.testing.assert_allclose(result["total"], _expected_total(4), rtol=1e-6)
    assert np.float32(result["third"]) == np.float32(1) / np.float32(3) and result["third"] != 1 / 3


def test_two_processes_of_2_devices_each():
    results = harness.run_multiprocess([DEVICES], processes=2, devices_per_process=2)
    assert [r[DEVICES]["process_index"] for r in results] == [0, 1]
    for r in results:
        got = r[DEVICES]
        assert (got["device_count"], got["local_device_count"], got["process_count"], got["shards_here"]) == (
            4, 2, 2, 2,
        )  # fmt: skip
        np.testing.assert_allclose(got["total"], _expected_total(4), rtol=1e-6)
        assert got["scratch_is_a_directory"]
    assert results[0][DEVICES]["scratch"] == results[1][DEVICES]["scratch"]  # one shared scratch directory


def test_a_raising_scenario_is_named_with_its_traceback():
    with pytest.raises(harness.ScenarioError, match="scenario_raises raised in worker") as info:
        harness.run_single([DEVICES, RAISES], devices=1)
    assert "ValueError: scenario_raises failed on purpose" in str(info.value)
    assert "Traceback" in str(info.value)


def test_bad_scenario_names_are_refused_before_launching():
    with pytest.raises(ValueError, match="module.path:function"):
        harness.run_single(["tests.distributed.mesh_scenarios.scenario_devices"], devices=1)
    with pytest.raises(ValueError, match="list"):
        harness.run_single(DEVICES, devices=1)
    with pytest.raises(ValueError, match="devices"):
        harness.run_single([DEVICES], devices=0)


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_hanging_worker_is_killed_at_the_timeout():
    (outcome,) = harness._run_job(["x:y"], [_python("import time; time.sleep(60)")], timeout=1.0, env=None)
    assert outcome.killed and "timed out" in outcome.killed
    with pytest.raises(harness.ScenarioError, match="worker timed out .* unfinished"):
        harness._results([outcome], ["x:y"])


def test_a_failed_process_stops_its_waiting_peers(monkeypatch):
    monkeypatch.setattr(harness, "PEER_GRACE_SECONDS", 0.5)
    commands = [_python("import time; time.sleep(60)"), _python("import sys; sys.exit('peer died')")]
    outcomes = harness._run_job(["x:y"], commands, timeout=60.0, env=None)
    assert outcomes[0].killed == "stopped after a peer failed" and outcomes[1].killed is None
    # the process that failed by itself is the one reported, with its stderr
    with pytest.raises(harness.ScenarioError, match="(?s)process 1 exited with status 1.*peer died"):
        harness._results(outcomes, ["x:y"])


def test_a_rendezvous_abort_is_retried_once():
    aborted = harness._Outcome("worker", -6, "", "Termination timeout for all-reduce", None)
    fine = harness._Outcome("worker", 0, "", "", None)
    attempts = iter([[aborted], [fine], [aborted]])
    with pytest.warns(UserWarning, match="rendezvous abort"):
        assert harness._with_rendezvous_retry(lambda: next(attempts)) == [fine]
    # only once: a second abort is returned (and then reported as a crash), not retried again
    attempts = iter([[aborted], [aborted], [fine]])
    with pytest.warns(UserWarning):
        assert harness._with_rendezvous_retry(lambda: next(attempts)) == [aborted]
