"""Population sharding over two processes (run by tests/es/test_sharding.py).

``python multiprocess_check.py PROCESS_ID PORT`` joins a 2-process JAX job on 127.0.0.1:PORT, each
process with 2 CPU devices and gloo collectives, and runs :func:`scenario` on the 4-device global
mesh. ``sharding_check.py`` runs the same scenario in one process with 4 devices; the test compares
the two. Prints ``SCENARIO <json>`` and then ``OK``.
"""

import json
import os
import sys

import numpy as np


def scenario() -> dict:
    """A few generations of sharded OpenES and PersistentES (its per-pair state sharded too) on a
    4-device mesh over ``jax.devices()``; returns each final mean and best fitness."""
    import jax
    import jax.numpy as jnp
    import optax

    from evotensor.es import OpenES, PersistentES
    from evotensor.es.core.sharding import shard_state, sharded

    mesh = jax.make_mesh((4,), ("pop",))
    start = jnp.linspace(-1.0, 1.0, 10)
    sphere = jax.jit(lambda x: jnp.sum((x - 0.3) ** 2, axis=1))
    strategies = {
        "open_es": OpenES(16, solution=start, optimizer=optax.sgd(0.05), sigma_init=0.1),
        "persistent_es": PersistentES(16, solution=start, optimizer=optax.sgd(0.02), T=4, K=2),
    }
    out = {}
    for name, es in strategies.items():
        ask, tell = sharded(es, mesh)
        state = shard_state(es, es.init(jax.random.key(0)), mesh)
        for gen in range(4):
            key = jax.random.fold_in(jax.random.key(1), gen)
            # waited for one by one, as sharding_check.launch does (an XLA:CPU rendezvous hang)
            x, state = jax.block_until_ready(ask(key, state))
            state, metrics = jax.block_until_ready(tell(key, state, x, sphere(x)))
        # replicated results: every process holds a full copy on each of its devices
        out[name] = {
            "mean": np.asarray(state.mean.addressable_data(0)).tolist(),
            "best_fitness": float(np.asarray(metrics["best_fitness"].addressable_data(0))),
        }
    return out


def main() -> None:
    process_id, port = int(sys.argv[1]), int(sys.argv[2])
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.config.update("jax_num_cpu_devices", 2)
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=process_id)
    assert jax.process_count() == 2 and jax.device_count() == 4 and jax.local_device_count() == 2
    result = scenario()
    print("SCENARIO " + json.dumps(result), flush=True)
    jax.distributed.shutdown()
    print("OK", flush=True)


if __name__ == "__main__":
    main()
