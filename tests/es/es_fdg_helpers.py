"""Shared helpers for the gradient-estimating / NES strategy tests (not a test module).

Compilation dominates test time on a small CPU, so every strategy test compiles one runner whose
generation count is dynamic (a ``fori_loop``), and reuses it for several checks.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from tests.platforms import assert_trees_equal_on_cpu_close_on_gpu


def sphere(x: jax.Array) -> jax.Array:
    """``[pop, d] -> [pop]``."""
    return jnp.sum(x**2, axis=-1)


def make_runner(es, fitness_fn=sphere, nonfinite: bool = False):
    """``run(key, params, num_generations) -> (state, metrics of the last generation)``, jitted.

    With ``nonfinite``, every generation two members (rotating indices) get NaN and +inf fitness.
    """

    def run(key, params, num_generations):
        k_init, k_loop = jax.random.split(key)
        state = es.init(k_init, params)
        pop = es.population_size

        def body(g, carry):
            state, _ = carry
            k_ask, k_tell = jax.random.split(jax.random.fold_in(k_loop, g))
            x, state = es.ask(k_ask, state, params)
            f = fitness_fn(es.space.ravel_population(x))
            if nonfinite:
                f = f.at[g % pop].set(jnp.nan).at[(g + 1) % pop].set(jnp.inf)
            state, metrics = es.tell(k_tell, state, x, f, params)
            return state, metrics

        # one traced generation gives the metrics' structure for the carry
        x0, s0 = es.ask(k_loop, state, params)
        _, m0 = es.tell(k_loop, s0, x0, fitness_fn(es.space.ravel_population(x0)), params)
        zeros = jax.tree_util.tree_map(jnp.zeros_like, m0)
        return jax.lax.fori_loop(0, num_generations, body, (state, zeros))

    return jax.jit(run)


def assert_finite_tree(tree) -> None:
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if jax.dtypes.issubdtype(getattr(leaf, "dtype", None), jax.dtypes.prng_key):
            continue  # a key (OpenES(regenerate_noise=True)'s noise_key) has no float values
        arr = np.asarray(leaf)
        if np.issubdtype(arr.dtype, np.floating):
            assert np.all(np.isfinite(arr)), f"non-finite state at {jax.tree_util.keystr(path)}"


def check_vmap_matches_separate(es, run, params_batch, keys, num_generations: int, rtol: float = 0.0) -> None:
    """``vmap(run)`` over seeds and a hyperparameter batch equals separate runs bit for bit
    (``rtol=0``; on GPU to :data:`tests.platforms.GPU_RTOL`), or to ``rtol`` where XLA:CPU fuses the
    batched program differently."""
    batched = jax.jit(jax.vmap(run, in_axes=(0, 0, None)))(keys, params_batch, num_generations)
    for i in range(keys.shape[0]):
        params_i = jax.tree_util.tree_map(lambda p, i=i: p[i], params_batch)
        single = run(keys[i], params_i, num_generations)
        batched_i = jax.tree_util.tree_map(lambda v, i=i: v[i], batched)
        if rtol == 0.0:
            assert_trees_equal_on_cpu_close_on_gpu(batched_i, single)
        else:
            for a, b in zip(jax.tree_util.tree_leaves(batched_i), jax.tree_util.tree_leaves(single)):
                if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
                    a, b = jax.random.key_data(a), jax.random.key_data(b)
                a, b = np.asarray(a), np.asarray(b)
                scale = float(np.max(np.abs(b))) if b.size else 0.0
                np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * scale)


def stack_params(params, **overrides):
    """Batch ``params`` (size = length of the overrides' lists), overriding the given fields."""
    n = len(next(iter(overrides.values())))
    batch = jax.tree_util.tree_map(lambda p: jnp.stack([p] * n), params)
    return batch.replace(**{k: jnp.asarray(v, jnp.float32) for k, v in overrides.items()})


def mean_and_stderr(samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column mean and standard error of ``[n, ...]`` samples."""
    samples = np.asarray(samples, np.float64)
    return samples.mean(axis=0), samples.std(axis=0, ddof=1) / np.sqrt(samples.shape[0])


def assert_unbiased(samples, expected, power: float = 0.1) -> None:
    """Each coordinate's mean within 5 standard errors of ``expected``; and the scale of the
    estimate along ``expected`` is 1 within 5 standard errors, with enough samples that a relative
    bias of ``power`` would be detected."""
    samples = np.asarray(samples, np.float64)
    expected = np.asarray(expected, np.float64)
    mean, se = mean_and_stderr(samples)
    assert np.all(np.abs(mean - expected) < 5 * se + 1e-6 * np.abs(expected).max()), (mean, expected, se)
    scale_mean, scale_se = mean_and_stderr(samples @ expected / (expected @ expected))
    assert abs(scale_mean - 1.0) < 5 * scale_se, (scale_mean, scale_se)
    assert 5 * scale_se < power, f"too few samples to detect a {power:.0%} bias (se {scale_se})"
