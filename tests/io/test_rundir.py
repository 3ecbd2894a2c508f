import json

import jax
import numpy as np
import pytest

import evotensor
from evotensor.es.simple_es import SimpleES
from evotensor.io.rundir import RunDirectory, read_metrics
from evotensor.problems import Rastrigin


class Interrupt(Exception):
    pass


def _stop_after(generation):
    def callback(info):
        if info["generation"] >= generation:
            raise Interrupt

    return callback


def _leaves_equal(a, b):
    return all(
        np.array_equal(np.asarray(x), np.asarray(y))
        for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b))
    )


def test_run_directory_contents(tmp_path):
    es = SimpleES(10, num_dims=3, sigma_init=2.0)
    result = evotensor.run(
        es,
        Rastrigin(3),
        12,
        jax.random.key(0),
        run_dir=tmp_path,
        chunk_size=5,
        config={"note": "x"},
        task_name="demo",
        progress=False,
    )
    for name in (
        "config.json",
        "metrics.csv",
        "checkpoint.npz",
        "best.npz",
        "best.txt",
        "best.json",
        "fitness.png",
    ):
        assert (tmp_path / name).exists(), name
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["task"] == "demo" and config["config"] == {"note": "x"}
    assert config["strategy"]["population_size"] == 10
    assert "['sigma_init']" in "".join(config["params"]) or any("sigma_init" in k for k in config["params"])
    assert config["versions"]["jax"] and config["device"]["backend"] == jax.default_backend()
    metrics = read_metrics(tmp_path / "metrics.csv")
    np.testing.assert_array_equal(metrics["generation"], np.arange(1, 13))
    np.testing.assert_allclose(metrics["best_fitness"], result.history["best_fitness"], rtol=1e-7)
    assert json.loads((tmp_path / "best.json").read_text())["best_fitness"] == pytest.approx(
        result.best_fitness
    )
    assert RunDirectory.checkpoint_generation(tmp_path) == 12


def test_resume_after_interruption_is_bit_identical(tmp_path):
    es, problem, key = SimpleES(10, num_dims=3, sigma_init=2.0), Rastrigin(3), jax.random.key(4)
    full = evotensor.run(es, problem, 30, key, chunk_size=4)

    with pytest.raises(Interrupt):
        evotensor.run(
            es, problem, 30, key, run_dir=tmp_path, chunk_size=4, callback=_stop_after(12), progress=False
        )
    assert RunDirectory.checkpoint_generation(tmp_path) == 12
    # a crash could leave metric rows past the checkpoint: resume must drop them
    with (tmp_path / "metrics.csv").open("a") as handle:
        handle.write("13,999,999,999,999,0,1\n")

    resumed = evotensor.run(es, problem, 30, key, run_dir=tmp_path, chunk_size=7, resume=True, progress=False)
    assert _leaves_equal(resumed.state, full.state)
    assert _leaves_equal(resumed.best_genotype, full.best_genotype)
    assert resumed.best_fitness == full.best_fitness
    for name in full.history:
        np.testing.assert_array_equal(resumed.history[name], full.history[name])
    metrics = read_metrics(tmp_path / "metrics.csv")
    np.testing.assert_array_equal(metrics["generation"], np.arange(1, 31))


def test_resume_without_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        evotensor.run(
            SimpleES(8, num_dims=2), Rastrigin(2), 5, jax.random.key(0), run_dir=tmp_path, resume=True
        )
