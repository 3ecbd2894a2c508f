"""Population-axis sharding (evotensor.es.core.sharding).

The multi-device checks run in subprocesses (XLA_FLAGS / jax.distributed must be set before jax
initializes), all started at once: ``sharding_check.py`` on 4 host devices of one process, and
``multiprocess_check.py`` as 2 processes x 2 devices joined by ``jax.distributed`` (gloo). The
4-device check is rerun once, alone, if XLA:CPU aborts it in a collective rendezvous (see the
fixture). Both are the slow tier (the default tier's 4-device ES checks are tests/es/test_mesh.py's,
its 2-process check tests/distributed/test_multihost_cli.py's). The in-process tests use a 1-device mesh.
"""

import json
import os
import socket
import subprocess
import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given
from hypothesis import strategies as st

from evotensor.core.evaluation import Evaluation
from evotensor.es import ARS, ASEBO, CMAES, ESMC, PGPE, SNES, GuidedES, OpenES, PersistentES, SepCMAES
from evotensor.es.core.sharding import (
    population_layout,
    population_order,
    population_sharding,
    shard_state,
    sharded,
    sharded_open_es,
)

HERE = os.path.dirname(__file__)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def subprocess_runs():
    """Start the 4-device check and the two distributed processes together; wait for all three."""
    env = dict(
        os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", "")
    )
    env.pop("XLA_FLAGS", None)  # each script sets its own device count
    port = str(_free_port())
    kw = dict(text=True, env=env)
    single = [sys.executable, os.path.join(HERE, "sharding_check.py")]
    procs = {
        "single": subprocess.Popen(single, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw),
        **{
            f"process{i}": subprocess.Popen(
                [sys.executable, os.path.join(HERE, "multiprocess_check.py"), str(i), port],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw,
            )
            for i in range(2)
        },
    }  # fmt: skip
    out = {name: _wait(p) for name, p in procs.items()}
    code, _, stderr = out["single"]
    if code < 0 and RENDEZVOUS_ABORT in stderr:
        # XLA:CPU aborted a collective whose 4 emulated devices did not all arrive (seen once in CI,
        # not reproduced in ~170 local runs of the strategy checks): one rerun, alone, which must pass in full
        warnings.warn(
            f"4-device check hit an XLA:CPU rendezvous abort; rerunning it:\n{stderr[-2000:]}", stacklevel=1
        )
        out["single"] = _wait(subprocess.Popen(single, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw))
    return out


RENDEZVOUS_ABORT = "Termination timeout for"


def _wait(p: subprocess.Popen) -> tuple[int, str, str]:
    try:
        stdout, stderr = p.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        p.kill()
        stdout, stderr = p.communicate()
    return p.returncode, stdout, stderr


def _scenario(stdout: str) -> dict:
    lines = [line for line in stdout.splitlines() if line.startswith("SCENARIO ")]
    assert len(lines) == 1, stdout
    return json.loads(lines[0][len("SCENARIO ") :])


@pytest.mark.slow  # ~35 s of subprocesses (see the module docstring)
def test_every_shardable_strategy_on_4_host_devices(subprocess_runs):
    code, stdout, stderr = subprocess_runs["single"]
    assert code == 0, stdout + stderr
    assert stdout.strip().endswith("OK")
    for name in ["OpenES", "PGPE", "ARS", "SNES", "SimpleES", "SepCMAES", "PersistentES", "NoiseReuseES"]:
        assert f"{name}: equivalent" in stdout
    for name in ["ESMC", "GuidedES", "ASEBO"]:
        assert f"{name}: equivalent" in stdout


@pytest.mark.slow  # ~35 s of subprocesses (see the module docstring)
def test_two_processes_equal_one_process_with_4_devices(subprocess_runs):
    runs = [subprocess_runs[f"process{i}"] for i in range(2)]
    for code, stdout, stderr in runs:
        assert code == 0, stdout + stderr
        assert stdout.strip().endswith("OK")
    code, stdout, stderr = subprocess_runs["single"]
    assert code == 0, stdout + stderr
    single = _scenario(stdout)
    for _, stdout, _ in runs:
        multi = _scenario(stdout)
        assert multi.keys() == single.keys() == {"open_es", "persistent_es"}
        for name in single:
            np.testing.assert_allclose(multi[name]["mean"], single[name]["mean"], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(multi[name]["best_fitness"], single[name]["best_fitness"], rtol=1e-5)
            # the run moved away from the start, so equality is not trivial
            assert not np.allclose(single[name]["mean"], np.linspace(-1.0, 1.0, 10), atol=1e-3)


def test_validation_errors():
    mesh = jax.make_mesh((1,), ("pop",))
    with pytest.raises(ValueError, match="axis_name"):
        sharded(OpenES(6, num_dims=2), mesh, axis_name="batch")
    with pytest.raises(ValueError, match="axis_name"):
        population_sharding(mesh, "x")
    with pytest.raises(TypeError, match="OpenES"):
        sharded_open_es(SNES(6, num_dims=2), mesh)
    # strategies whose update is not a sum over independent rows are refused by name
    with pytest.raises(TypeError, match="CMAES cannot be sharded"):
        sharded(CMAES(6, num_dims=2), mesh)
    with pytest.raises(TypeError, match="object cannot be sharded"):
        sharded(object(), mesh)


def test_population_must_split_evenly():
    mesh = jax.sharding.AbstractMesh((3,), ("pop",))  # shapes only: checked before any device is used
    with pytest.raises(ValueError, match="divisible by 2 \\* 3"):
        sharded(PGPE(12 + 2, num_dims=2), mesh)  # pairs: needs a multiple of 6
    with pytest.raises(ValueError, match="divisible by 3"):
        sharded(SNES(8, num_dims=2), mesh)


@given(shards=st.integers(1, 6), pairs_per_shard=st.integers(1, 5))
def test_population_order_keeps_pairs_on_one_shard(shards, pairs_per_shard):
    pop = 2 * shards * pairs_per_shard
    es = ARS(pop, num_dims=1)
    order = population_order(es, shards)
    assert sorted(order.tolist()) == list(range(pop))  # a permutation
    rows, h = pop // shards, pop // 2
    for k in range(h):  # strategy pair (k, k + pop/2) sits on one shard, local rows j and j + rows/2
        plus, minus = order[k], order[k + h]
        assert plus // rows == minus // rows
        assert minus % rows == plus % rows + rows // 2
    assert population_order(SNES(pop, num_dims=1), shards).tolist() == list(range(pop))


@pytest.fixture(scope="module")
def mesh1():
    return jax.make_mesh((1,), ("pop",))


def test_single_device_mesh_equals_unsharded_tell(mesh1):
    """Non-antithetic OpenES, host fitness with a NaN, an Evaluation and explicit params."""
    es = OpenES(8, num_dims=3, optimizer=optax.sgd(0.1), antithetic=False)
    ask, tell = sharded(es, mesh1)
    params = es.default_params().replace(sigma_init=jnp.float32(0.3))
    state = es.init(jax.random.key(0))
    x, state = ask(jax.random.key(1), state, params)
    assert x.shape == (8, 3)
    np.testing.assert_allclose(np.std(np.asarray(x) - np.asarray(state.mean)), 0.3, rtol=0.5)
    fitness = np.array(jnp.sum(x**2, axis=1))
    fitness[3] = np.nan
    new, metrics = tell(jax.random.key(2), state, x, Evaluation(fitness=jnp.asarray(fitness)), params)
    ref, ref_metrics = es.tell(
        jax.random.key(2), state, jnp.asarray(np.asarray(x)), jnp.asarray(fitness), params
    )
    np.testing.assert_allclose(np.asarray(new.mean), np.asarray(ref.mean), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(float(metrics["best_fitness"]), float(ref_metrics["best_fitness"]), rtol=1e-6)
    with pytest.raises(ValueError, match="fitness must have shape"):
        tell(jax.random.key(2), state, x, fitness[:4])


def test_all_invalid_generation_keeps_state_but_counts(mesh1):
    es = SepCMAES(4, num_dims=3)
    ask, tell = sharded(es, mesh1)
    state = shard_state(es, es.init(jax.random.key(0)), mesh1)
    x, state = ask(jax.random.key(1), state)
    new, _ = tell(jax.random.key(2), state, x, jnp.full(4, jnp.nan))
    np.testing.assert_array_equal(np.asarray(new.mean), np.asarray(state.mean))
    np.testing.assert_array_equal(np.asarray(new.c), np.asarray(state.c))
    assert int(new.generation) == int(state.generation) + 1


def test_shard_state_places_per_member_fields(mesh1):
    es = PersistentES(4, num_dims=3)
    state = shard_state(es, es.init(jax.random.key(0)), mesh1)
    assert state.perturbation.sharding.spec == jax.sharding.PartitionSpec("pop")
    assert state.mean.sharding.spec == jax.sharding.PartitionSpec()


@given(shards=st.integers(1, 6), pairs_per_shard=st.integers(1, 4))
def test_esmc_layout_repeats_the_mean_on_every_shard(shards, pairs_per_shard):
    """Shard s holds [mean; its m "+" rows; their m mirrors]; every strategy row is held, the mean's
    fitness is read from shard 0."""
    m = pairs_per_shard
    pop = 1 + 2 * shards * m
    es = ESMC(pop, num_dims=1)
    source = population_layout(es, shards)
    rows = 1 + 2 * m
    assert source.shape == (shards * rows,) and shards * rows == pop + shards - 1
    per_shard = source.reshape(shards, rows)
    assert np.all(per_shard[:, 0] == 0)
    n_pairs = (pop - 1) // 2
    np.testing.assert_array_equal(per_shard[:, m + 1 :], per_shard[:, 1 : m + 1] + n_pairs)  # mirrors
    assert sorted(per_shard[:, 1:].ravel().tolist()) == list(range(1, pop))
    order = population_order(es, shards)
    assert order[0] == 0 and np.array_equal(source[order], np.arange(pop))


def test_esmc_guided_asebo_split_checks():
    mesh = jax.sharding.AbstractMesh((4,), ("pop",))
    with pytest.raises(ValueError, match="ESMC must be 1 \\+ a multiple of 2 \\* 4"):
        sharded(ESMC(13, num_dims=2), mesh)  # 6 pairs do not split 4 ways
    for es in [GuidedES(12, num_dims=3), ASEBO(12, num_dims=3, subspace_dims=2)]:
        with pytest.raises(ValueError, match="divisible by 2 \\* 4"):
            sharded(es, mesh)


def test_esmc_on_a_single_device_mesh_equals_unsharded_tell(mesh1):
    es = ESMC(7, num_dims=3, optimizer=optax.sgd(0.1))
    ask, tell = sharded(es, mesh1)
    state = es.init(jax.random.key(0))
    x, state = ask(jax.random.key(1), state)
    np.testing.assert_array_equal(np.asarray(x[0]), np.asarray(state.mean))
    fitness = jnp.sum((x - 1.0) ** 2, axis=1)  # not minimal at the mean: some pairs beat the baseline
    new, _ = tell(jax.random.key(2), state, x, fitness)
    ref, _ = es.tell(jax.random.key(2), state, jnp.asarray(np.asarray(x)), jnp.asarray(np.asarray(fitness)))
    np.testing.assert_allclose(np.asarray(new.mean), np.asarray(ref.mean), rtol=1e-6, atol=1e-7)
    assert not np.allclose(np.asarray(new.mean), np.asarray(state.mean))
