"""Population-axis sharding of OpenES over 4 host devices (run in a subprocess: XLA_FLAGS must be
set before jax initializes)."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

from evotensor.es import OpenES
from evotensor.es.sharding import population_sharding, sharded_open_es


def test_sharded_open_es_matches_unsharded_reference_on_4_host_devices():
    script = os.path.join(os.path.dirname(__file__), "sharding_check.py")
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, script], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().endswith("OK")


def test_validation_errors():
    mesh = jax.make_mesh((1,), ("pop",))
    with pytest.raises(ValueError, match="antithetic"):
        sharded_open_es(OpenES(6, num_dims=2, antithetic=False), mesh)
    with pytest.raises(ValueError, match="axis_name"):
        sharded_open_es(OpenES(6, num_dims=2), mesh, axis_name="batch")
    with pytest.raises(ValueError, match="axis_name"):
        population_sharding(mesh, "x")
    with pytest.raises(TypeError, match="OpenES"):
        sharded_open_es(object(), mesh)


def test_single_device_mesh_runs():
    mesh = jax.make_mesh((1,), ("pop",))
    es = OpenES(8, num_dims=3)
    ask, tell = sharded_open_es(es, mesh)
    state = es.init(jax.random.key(0))
    x, state = ask(jax.random.key(1), state)
    state, metrics = tell(jax.random.key(2), state, x, jnp.sum(x**2, axis=1))
    assert x.shape == (8, 3) and bool(jnp.all(jnp.isfinite(state.mean)))
