"""Population-axis sharding for evolution strategies.

The population matrix ``[pop, dims]`` is split along ``pop`` over one axis of a
``jax.sharding.Mesh`` (``NamedSharding(mesh, P(axis, None))``). For OpenAI-ES,
:func:`sharded_open_es` goes further: each device draws its own noise shard from
``jax.random.fold_in(key, shard_index)`` inside ``shard_map`` and reduces its own partial gradient,
so no device ever holds the full population — only the ``[pop]`` fitness vector (for the ranks)
and the ``[dims]`` gradient (one ``psum``) cross devices.

Layout of a sharded OpenES population with ``n`` shards of ``m = pop / n`` rows: shard ``s`` holds
``[mean + sigma z_s; mean - sigma z_s]`` with ``z_s = normal(fold_in(key, s), (m / 2, dims))`` —
antithetic pairs never straddle devices. This is a different (equally distributed) sample than the
unsharded :meth:`OpenES.ask` for the same key.

Example (4 CPU devices via ``XLA_FLAGS=--xla_force_host_platform_device_count=4``)::

    mesh = jax.make_mesh((4,), ("pop",))
    es = OpenES(1024, num_dims=100_000)
    ask, tell = sharded_open_es(es, mesh)
    state = es.init(key)
    x, state = ask(k1, state)           # x: [1024, 100000], sharded 4 ways along pop
    state, metrics = tell(k2, state, x, fitness_fn(x))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from evotensor.core.evaluation import worst_for_nonfinite
from evotensor.es.open_es import OpenES


def population_sharding(mesh: Mesh, axis_name: str = "pop") -> NamedSharding:
    """``NamedSharding`` that splits the leading (population) axis over ``axis_name``."""
    if axis_name not in mesh.axis_names:
        raise ValueError(f"axis_name {axis_name!r} is not an axis of the mesh {mesh.axis_names}")
    return NamedSharding(mesh, P(axis_name))


def shard_population(population: Any, mesh: Mesh, axis_name: str = "pop") -> Any:
    """Place every leaf of a population pytree (leading ``pop`` axis) sharded along ``axis_name``."""
    sharding = population_sharding(mesh, axis_name)
    n = mesh.shape[axis_name]
    for leaf in jax.tree_util.tree_leaves(population):
        if leaf.shape[0] % n:
            raise ValueError(
                f"population axis {leaf.shape[0]} is not divisible by the {n} shards of {axis_name!r}"
            )
    return jax.device_put(population, sharding)


def _check_open_es(es: OpenES, mesh: Mesh, axis_name: str) -> int:
    if not isinstance(es, OpenES):
        raise TypeError(f"es must be an OpenES, got {type(es).__name__}")
    if not es.antithetic:
        raise ValueError("sharded_open_es needs an OpenES with antithetic=True (pairs stay on one device)")
    if axis_name not in mesh.axis_names:
        raise ValueError(f"axis_name {axis_name!r} is not an axis of the mesh {mesh.axis_names}")
    n = mesh.shape[axis_name]
    if es.population_size % (2 * n):
        raise ValueError(
            f"population_size {es.population_size} must be divisible by 2 * {n} shards of {axis_name!r}"
        )
    return n


def local_perturbations(key: jax.Array, shard_index: jax.Array, rows: int, num_dims: int) -> jax.Array:
    """The noise of one shard: ``[rows, dims]``, antithetic within the shard (``rows`` even)."""
    z = jax.random.normal(jax.random.fold_in(key, shard_index), (rows // 2, num_dims), jnp.float32)
    return jnp.concatenate([z, -z])


def sharded_open_es(
    es: OpenES, mesh: Mesh, axis_name: str = "pop"
) -> tuple[Callable[..., tuple[jax.Array, Any]], Callable[..., tuple[Any, dict]]]:
    """Jitted ``(ask, tell)`` for ``es`` with the population sharded over ``mesh[axis_name]``.

    Args:
        es: an antithetic :class:`~evotensor.es.open_es.OpenES` whose population size is divisible
            by ``2 * mesh.shape[axis_name]``.
        mesh: the device mesh; other mesh axes replicate.
        axis_name: the mesh axis that splits the population.

    Returns:
        ``ask(key, state, params=None) -> (x [pop, dims] sharded, state)`` and
        ``tell(key, state, x, fitness [pop], params=None) -> (state, metrics)``, with the same state
        and params as ``es``. Flat arrays only (the solution template is not unravelled).
    """
    n = _check_open_es(es, mesh, axis_name)
    rows = es.population_size // n
    d = es.num_dims
    pop_spec = P(axis_name)

    def _local_ask(key, mean, sigma):
        z = local_perturbations(key, jax.lax.axis_index(axis_name), rows, d)
        return mean + sigma * z

    ask_map = jax.shard_map(_local_ask, mesh=mesh, in_specs=(P(), P(), P()), out_specs=pop_spec)

    def _local_grad(x, w, f):
        h = x.shape[0] // 2
        c = w[:h] - w[h:]
        grad = jax.lax.psum(c @ x[:h] - c @ x[h:], axis_name)
        # best row of each shard; only these n rows (not the population) are gathered
        i = jnp.argmin(f)
        rows = jax.lax.all_gather(x[i], axis_name)
        vals = jax.lax.all_gather(f[i], axis_name)
        return grad, rows, vals

    grad_map = jax.shard_map(
        _local_grad,
        mesh=mesh,
        in_specs=(pop_spec, pop_spec, pop_spec),
        out_specs=(P(), P(), P()),
        check_vma=False,  # psum / all_gather results are replicated; the checker cannot see all_gather's
    )

    @jax.jit
    def _ask(key, state, params):
        return ask_map(key, state.mean, es.sigma(state, params)), state

    @jax.jit
    def _tell(key, state, x, fitness, params):
        # the [pop] fitness vector is replicated (ranks need all of it); it is the only per-member data
        # that crosses devices
        fitness = jax.sharding.reshard(jnp.asarray(fitness, jnp.float32), NamedSharding(mesh, P()))
        fitness = worst_for_nonfinite(fitness)
        sigma = es.sigma(state, params)
        w = es._weights(fitness)
        # explicit-sharding meshes need the split stated; for auto meshes this is a constraint
        split = NamedSharding(mesh, pop_spec)
        x, w, f = (jax.sharding.reshard(a, split) for a in (x, w, fitness))
        grad, rows, vals = grad_map(x, w, f)
        grad = grad / (2.0 * es.population_size * sigma**2)
        state, metrics = es._apply_gradient(state, grad, rows, vals, sigma)
        metrics["mean_fitness"] = jnp.mean(fitness)
        return state, metrics

    def ask(key: jax.Array, state: Any, params: Any = None) -> tuple[jax.Array, Any]:
        return _ask(key, state, es.default_params() if params is None else params)

    def tell(key: jax.Array, state: Any, x: jax.Array, fitness: jax.Array, params: Any = None):
        fitness = jnp.asarray(fitness)
        if fitness.shape != (es.population_size,):
            raise ValueError(f"fitness must have shape ({es.population_size},), got {fitness.shape}")
        if x.shape != (es.population_size, d):
            raise ValueError(f"x must have shape ({es.population_size}, {d}), got {x.shape}")
        return _tell(key, state, x, fitness, es.default_params() if params is None else params)

    return ask, tell
