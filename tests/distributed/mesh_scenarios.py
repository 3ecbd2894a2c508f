"""Scenarios for the harness's own test (tests/distributed/test_harness.py): small programs whose
results say how many devices and processes the worker had and whether a collective over all of them
ran."""

import os

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def scenario_devices() -> dict:
    """A population-sharded sum over every device (a cross-device, and across processes a
    cross-process, reduction), plus a float32 value that JSON must carry exactly."""
    n = jax.device_count()
    mesh = jax.make_mesh((n,), ("pop",))
    rows = 4 * n
    whole = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
    x = jax.make_array_from_callback((rows, 3), NamedSharding(mesh, P("pop")), lambda idx: whole[idx])
    total_of = jax.jit(lambda a: jnp.sum(a * 0.1), out_shardings=NamedSharding(mesh, P()))
    total = jax.block_until_ready(total_of(x))
    return {
        "device_count": n,
        "local_device_count": jax.local_device_count(),
        "process_index": jax.process_index(),
        "process_count": jax.process_count(),
        "shards_here": len(x.addressable_shards),
        "total": float(np.asarray(total.addressable_data(0))),
        "third": np.float32(1) / np.float32(3),
        "scratch_is_a_directory": os.path.isdir(os.environ["EVOTENSOR_SCENARIO_TMP"]),
        "scratch": os.environ["EVOTENSOR_SCENARIO_TMP"],
    }


def scenario_raises() -> dict:
    raise ValueError("scenario_raises failed on purpose")
