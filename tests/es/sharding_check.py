"""Run by tests/es/test_sharding.py in a subprocess: XLA_FLAGS must be set before jax starts.

On 4 host devices, for every shardable strategy (ESMC with its mean repeated on every shard, Guided
ES and ASEBO with their subspace computed once and handed to every shard):

(a) the population (and any per-member state) is split 4 ways, and the compiled ask/tell programs
    never hold a ``[pop, dims]`` array on a device nor all-gather anything larger than ``[pop]``;
(b) the sharded ask equals a slow reference that draws each shard on one device from
    ``fold_in(key, shard)``, and the sharded tell equals the unsharded ``tell`` on the gathered
    population (put in the strategy's row order), within float32 tolerance, over generations that
    include a NaN fitness (and, for ESMC, absurd fitness on the ignored copies of the mean); OpenES
    is also checked against a NumPy float64 re-derivation;
(c) it solves a small sphere.

Also: a 2-axis mesh (population split over one axis, replicated over the other), a pytree solution
template, and the single-process run of ``multiprocess_check.scenario`` (printed for the test to
compare with the 2-process run). Prints ``SCENARIO <json>`` and ``OK``; any failed check raises.
"""

import os

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import json  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from multiprocess_check import scenario  # noqa: E402

from evotensor.es import (  # noqa: E402
    ARS,
    ASEBO,
    ESMC,
    PGPE,
    SNES,
    GuidedES,
    NoiseReuseES,
    OpenES,
    PersistentES,
    SepCMAES,
    SimpleES,
)
from evotensor.es.core.sharding import (  # noqa: E402
    population_layout,
    population_order,
    shard_population,
    shard_state,
    sharded,
)

N_DEV, POP, DIMS = 4, 24, 13  # distinctive sizes: "[24,13]" in the HLO text can only be the population
ESMC_POP = 25  # the mean + 12 pairs, 3 per shard: a sharded population of 28 rows, 7 per shard
START = jnp.linspace(-1.0, 1.0, DIMS)


def sphere(x):
    return jnp.sum((x - 0.3) ** 2, axis=-1)


sphere_jit = jax.jit(sphere)


@jax.jit
def fitness_jit(x, gen):
    """Sphere; in generation 2 two entries are NaN (handled like the unsharded tell)."""
    size = x.shape[0]
    nan_rows = (jnp.arange(size) == 1) | (jnp.arange(size) == size - 1)
    return jnp.where(nan_rows & (gen == 2), jnp.nan, sphere(x))


# strategy, generations and tolerance for the sphere (c); f(START) = 5.2
CASES = {
    "OpenES": (lambda: OpenES(POP, solution=START, optimizer=optax.adam(0.05), sigma_init=0.05), 150, 0.02),
    "PGPE": (lambda: PGPE(POP, solution=START, optimizer=optax.adam(0.05), sigma_init=0.1), 150, 0.02),
    "ARS": (lambda: ARS(POP, solution=START, optimizer=optax.adam(0.05), sigma_init=0.05), 150, 0.02),
    "SNES": (lambda: SNES(POP, solution=START), 100, 1e-4),
    "SimpleES": (lambda: SimpleES(POP, solution=START), 150, 1e-2),
    "SepCMAES": (lambda: SepCMAES(POP, solution=START), 100, 1e-4),
    "PersistentES": (
        lambda: PersistentES(POP, solution=START, optimizer=optax.adam(0.05), sigma_init=0.05, T=4, K=2),
        150,
        0.05,
    ),
    "NoiseReuseES": (
        lambda: NoiseReuseES(POP, solution=START, optimizer=optax.adam(0.05), sigma_init=0.05, T=4, K=2),
        150,
        0.05,
    ),
    "ESMC": (lambda: ESMC(ESMC_POP, solution=START, optimizer=optax.adam(0.05), sigma_init=0.05), 150, 0.05),
    "GuidedES": (
        lambda: GuidedES(POP, solution=START, subspace_dims=2, optimizer=optax.adam(0.05), sigma_init=0.05),
        150,
        0.05,
    ),
    "ASEBO": (
        lambda: ASEBO(
            POP,
            solution=START,
            subspace_dims=3,
            min_subspace_dims=1,
            optimizer=optax.adam(0.05),
            sigma_init=0.2,
        ),
        150,
        0.02,
    ),
}


def launch(program, *args):
    """``program(*args)`` started only once every input exists, and waited for.

    So no other program is in flight on any device while a sharded one runs its collectives. With
    asynchronous CPU dispatch, a sharded program queued behind single-device work (the references
    below run on device 0) once hung in XLA:CPU's all-gather rendezvous in CI (3 of 4 devices
    arrived; the process aborted after 40 s).
    """
    return jax.block_until_ready(program(*jax.block_until_ready(args)))


def close(a, b, what, rtol=2e-5, atol=2e-6):
    """Every leaf of pytree ``a`` within float32 tolerance of the same leaf of ``b``."""
    leaves_b = jax.tree_util.tree_leaves(b)
    for (path, x), y in zip(jax.tree_util.tree_flatten_with_path(a)[0], leaves_b, strict=True):
        np.testing.assert_allclose(
            np.asarray(x, np.float64), np.asarray(y, np.float64), rtol=rtol, atol=atol,
            err_msg=f"{what}: {jax.tree_util.keystr(path)}",
        )  # fmt: skip


def check_hlo(ask, tell, key, state, x, fitness):
    """(a) on the compiled, partitioned programs (per-device shapes)."""
    ask_text = ask.lower(key, state).compile().as_text()
    tell_text = tell.lower(key, state, x, fitness).compile().as_text()
    size = x.shape[0]  # the sharded population (ESMC: more rows than its population_size)
    for name, text in [("ask", ask_text), ("tell", tell_text)]:
        for whole in {POP, ESMC_POP, size}:
            assert f"[{whole},{DIMS}]" not in text, f"{name} materializes the whole population on a device"
        assert f"[{size // N_DEV},{DIMS}]" in text, f"{name} should work on [{size // N_DEV},{DIMS}] shards"
        for line in text.splitlines():
            if re.search(r"\ball-gather(-start)?\(", line):
                shape = re.search(r"= \(?[a-z0-9]+\[([\d,]*)\]", line).group(1)
                numel = math.prod(int(s) for s in shape.split(",") if s)
                assert numel <= size, f"{name} all-gathers {shape}: {line[:160]}"
    assert not re.search(r"all-gather|all-reduce|all-to-all|collective-permute", ask_text), "ask communicates"
    assert "all-reduce" in tell_text  # the psum of the statistics


def reference_ask(es, sample, key, state, params):
    """Each shard drawn on one device from fold_in(key, shard) by ``sample`` (the strategy's
    ``_sample``, jitted); per-member state sliced per shard; the shared sampling context (Guided ES,
    ASEBO) computed once, unsharded, and given to every shard."""
    rows = len(population_layout(es, N_DEV)) // N_DEV
    context = ()
    if hasattr(es, "_sample_context"):
        state, shared = jax.jit(es._sample_context)(state, params)
        context = (shared,)
    xs, parts = [], {f: [] for f in es.shard_state_fields}
    for s in range(N_DEV):
        local = state.replace(
            **{f: np.asarray(getattr(state, f)).reshape(N_DEV, -1, DIMS)[s] for f in es.shard_state_fields}
        )
        x, local = sample(jax.random.fold_in(key, s), local, params, rows, *context)
        xs.append(np.asarray(x))
        for f in parts:
            parts[f].append(np.asarray(getattr(local, f)))
    return np.concatenate(xs), state.replace(**{f: jnp.asarray(np.concatenate(v)) for f, v in parts.items()})


def numpy_open_es_mean(mean, x, fitness, sigma, lr):
    """Salimans et al.'s update in float64 NumPy: centered ranks, g = sum w_i eps_i / (pop sigma), SGD."""
    pop = len(fitness)
    ranks = np.empty(pop)
    ranks[np.argsort(fitness, kind="stable")] = np.arange(pop)
    w = ranks / (pop - 1) - 0.5
    eps = (x - mean) / sigma
    return mean - lr * (w @ eps) / (pop * sigma)


def check_strategy(name, mesh):
    make, gens, tol = CASES[name]
    t0 = time.perf_counter()
    es = make()
    ask, tell = sharded(es, mesh)
    params = es.default_params()
    order = population_order(es, N_DEV)
    size = len(population_layout(es, N_DEV))
    ignored = np.setdiff1d(np.arange(size), order)  # ESMC: the copies of the mean on shards 1..n-1
    assert ignored.size == (N_DEV - 1 if name == "ESMC" else 0)
    ref_tell, ref_sample = jax.jit(es.tell), jax.jit(es._sample, static_argnums=3)
    ref = es.init(jax.random.key(0))
    state = shard_state(es, ref, mesh)
    for gen in range(4):
        key = jax.random.fold_in(jax.random.key(1), gen)
        x, state = launch(ask, key, state)
        # (a) every device holds only its own rows, per-member state too
        shapes = [s.data.shape for s in x.addressable_shards]
        assert len(shapes) == N_DEV and set(shapes) == {(size // N_DEV, DIMS)}, shapes
        for f in es.shard_state_fields:
            shapes = {s.data.shape for s in getattr(state, f).addressable_shards}
            assert shapes == {(POP // N_DEV // 2, DIMS)}, (f, shapes)
        # (b) ask against the per-shard reference
        x_ref, ref = reference_ask(es, ref_sample, key, ref, params)
        np.testing.assert_allclose(np.asarray(x), x_ref, rtol=1e-6, atol=1e-6, err_msg=f"{name} ask")
        close(ref, state, f"{name} state after ask")
        rows = size // N_DEV
        assert not np.allclose(x_ref[:rows], x_ref[rows : 2 * rows])  # shards draw different noise
        if name == "ESMC":  # every shard starts with the mean
            np.testing.assert_array_equal(
                x_ref.reshape(N_DEV, rows, DIMS)[:, 0], np.tile(ref.mean, (N_DEV, 1))
            )
        fitness = fitness_jit(x, gen)  # sharded along pop, like x
        fit = np.array(fitness)
        if ignored.size and gen % 2:  # fitness of the ignored copies must not matter
            fit[ignored] = -1e9 if gen == 1 else np.nan
            fitness = jax.device_put(fit, fitness.sharding)
        if gen == 0:
            check_hlo(ask, tell, key, state, x, fitness)
        new, metrics = launch(tell, key, state, x, fitness)
        # (b) tell against the unsharded tell on the gathered population, in the strategy's order
        ref, ref_metrics = ref_tell(key, ref, jnp.asarray(x_ref[order]), jnp.asarray(fit[order]), params)
        close(ref, new, f"{name} state after tell (generation {gen})")
        close(ref_metrics, metrics, f"{name} metrics", rtol=1e-4)
        if name == "OpenES":
            sgd = OpenES(POP, solution=START, optimizer=optax.sgd(0.1), sigma_init=0.05)
            _, sgd_tell = sharded(sgd, mesh)
            sgd_state, _ = launch(sgd_tell, key, sgd.init(jax.random.key(0)).replace(mean=state.mean), x, fit)
            want = numpy_open_es_mean(
                np.asarray(state.mean, np.float64), x_ref[order], np.where(np.isnan(fit), np.inf, fit)[order],
                0.05, 0.1,
            )  # fmt: skip
            np.testing.assert_allclose(np.asarray(sgd_state.mean), want, rtol=1e-5, atol=1e-6)
        state = new
    for f in es.shard_state_fields:  # per-member state still sharded after tell
        assert {s.data.shape for s in getattr(state, f).addressable_shards} == {(POP // N_DEV // 2, DIMS)}
    t1 = time.perf_counter()
    # (c) a small sphere
    f0 = float(sphere(START))
    for gen in range(gens):
        key = jax.random.fold_in(jax.random.key(2), gen)
        x, state = launch(ask, key, state)
        state, _ = launch(tell, key, state, x, sphere_jit(x))
    final = float(sphere(state.mean))
    assert final < tol, f"{name}: sphere {f0:.3g} -> {final:.3g} after {gens} generations (want < {tol})"
    t2 = time.perf_counter()
    print(
        f"{name}: equivalent over 4 generations ({t1 - t0:.1f} s); sphere {f0:.3g} -> {final:.2e} "
        f"in {gens} generations ({t2 - t1:.1f} s)",
        flush=True,
    )


def check_two_axis_mesh_and_pytree_template():
    """A dict solution template on a 2-axis mesh with auto (not explicit) axes: the population split
    2 ways over 'pop' and replicated over 'data'; ask returns the template's structure, sharded
    along pop, and tell equals the unsharded tell."""
    mesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 2), ("data", "pop"))
    assert mesh.axis_types == (jax.sharding.AxisType.Auto,) * 2
    template = {"w": jnp.zeros((3, 2)), "b": jnp.ones(4)}
    es = SNES(8, solution=template)
    ask, tell = sharded(es, mesh)
    key = jax.random.key(4)
    state = shard_state(es, es.init(key), mesh)
    genotypes, state = launch(ask, key, state)
    assert genotypes["w"].shape == (8, 3, 2) and genotypes["b"].shape == (8, 4)
    assert {s.data.shape for s in genotypes["w"].addressable_shards} == {(4, 3, 2)}
    fit = jnp.sum(genotypes["w"] ** 2, axis=(1, 2)) + jnp.sum(genotypes["b"] ** 2, axis=1)
    new, _ = launch(tell, key, state, genotypes, fit)
    host = jax.tree_util.tree_map(lambda a: jnp.asarray(np.asarray(a)), genotypes)
    ref, _ = jax.jit(es.tell)(key, es.init(key), host, jnp.asarray(np.asarray(fit)))
    close(ref, new, "2-axis mesh, pytree template")


def main() -> None:
    assert jax.device_count() == N_DEV, jax.devices()
    mesh = jax.make_mesh((N_DEV,), ("pop",))
    for name in CASES:
        check_strategy(name, mesh)
    check_two_axis_mesh_and_pytree_template()
    sharded_leaf = shard_population({"w": jnp.zeros((POP, 3))}, mesh)["w"]
    assert {s.data.shape for s in sharded_leaf.addressable_shards} == {(POP // N_DEV, 3)}
    print("SCENARIO " + json.dumps(scenario()), flush=True)
    print("OK")


if __name__ == "__main__":
    main()
