"""Run by tests/es/test_sharding.py in a subprocess: XLA_FLAGS must be set before jax starts.

Checks that the population-sharded OpenES (each of 4 host devices drawing its own noise from
``fold_in(key, shard)``) equals an unsharded reference computed with the same per-shard keys.
Prints ``OK`` on success; any failed check raises.
"""

import os

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from evotensor.es.open_es import OpenES  # noqa: E402
from evotensor.es.sharding import shard_population, sharded_open_es  # noqa: E402


@jax.jit(static_argnums=(2, 3, 4))
def reference_population(key, mean, n_dev, h, d):
    """Single-device population built from the same per-shard keys, in shard order."""
    blocks = []
    for s in range(n_dev):
        z = jax.random.normal(jax.random.fold_in(key, s), (h, d), jnp.float32)
        blocks.append(jnp.concatenate([mean + 0.1 * z, mean - 0.1 * z]))
    return jnp.concatenate(blocks)


def main() -> None:
    n_dev = 4
    assert jax.device_count() == n_dev, jax.devices()
    mesh = jax.make_mesh((n_dev,), ("pop",))
    pop, d = 32, 24
    es = OpenES(pop, solution=jnp.linspace(-1.0, 1.0, d), optimizer=optax.sgd(0.05), sigma_init=0.1)
    ask, tell = sharded_open_es(es, mesh)
    params = es.default_params()
    state = es.init(jax.random.key(0))
    ref_state = state
    f = lambda x: jnp.sum((x - 0.3) ** 2, axis=1)
    for gen in range(3):
        key = jax.random.fold_in(jax.random.key(1), gen)
        x, state = ask(key, state)
        # every device holds only its own rows
        shards = x.addressable_shards
        assert len(shards) == n_dev and all(s.data.shape == (pop // n_dev, d) for s in shards), [
            s.data.shape for s in shards
        ]
        # reference: the same per-shard keys, generated on one device
        m, h = pop // n_dev, pop // n_dev // 2
        x_ref = reference_population(key, ref_state.mean, n_dev, h, d)
        # same values up to float32 rounding (XLA may fuse the normal transform differently
        # inside shard_map); a different key per shard would differ by O(sigma)
        np.testing.assert_allclose(np.asarray(x), np.asarray(x_ref), rtol=1e-6, atol=1e-6)
        xs = np.asarray(x)
        assert not np.allclose(xs[:h], xs[m : m + h])  # shards draw different noise
        if gen == 1:
            fit = f(x)  # a sharded jax array straight from the population
        else:
            fit = np.array(f(x))
            fit[gen] = np.nan  # non-finite fitness handled like the unsharded tell
        state, metrics = tell(key, state, x, fit)
        fit = np.asarray(fit)
        # unsharded reference tell: reorder rows so pairs sit at (i, i + pop/2) as OpenES expects
        plus = np.concatenate([np.arange(s * m, s * m + h) for s in range(n_dev)])
        order = np.concatenate([plus, plus + h])
        ref_state, ref_metrics = es.tell(key, ref_state, x_ref[order], fit[order], params)
        np.testing.assert_allclose(np.asarray(state.mean), np.asarray(ref_state.mean), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(
            float(metrics["best_fitness"]), float(ref_metrics["best_fitness"]), rtol=1e-6
        )
        assert np.all(np.isfinite(np.asarray(state.mean)))
    # generic helper: a population pytree split along pop
    sharded = shard_population({"w": jnp.zeros((pop, 3))}, mesh)
    assert all(s.data.shape == (pop // n_dev, 3) for s in sharded["w"].addressable_shards)
    print("OK")


if __name__ == "__main__":
    main()
