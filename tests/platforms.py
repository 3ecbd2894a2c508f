"""Platform-aware exactness checks for tests that compare a vmapped run with separate runs; not a
test module.

On CPU a vmapped (batched) program and the separate unbatched programs give the same float32 bits:
:mod:`evotensor.core.numerics` writes every batch-sensitive sum so that XLA:CPU cannot reorder it,
and the tests check this bit for bit. XLA:GPU gives no such guarantee: for the batched shapes it
picks other GEMM, ``eigh`` and reduction kernels (batched cuBLAS/cuSOLVER calls, split-K, different
reduction trees), so sums are added in another order and the last bits differ; the strategies'
feedback loops (mean, step size, covariance) then carry those differences on from generation to
generation. On an H200 (jax 0.11.2), vmapped and separate CMA-ES runs differed by up to ~1e-4 of each
array's largest magnitude (2.4e-4 relative on single entries).

So these helpers compare bitwise on CPU and to :data:`GPU_RTOL` elsewhere. Integer, boolean and
key arrays (counters, indices, flags, PRNG keys) are compared exactly on every platform.
"""

from __future__ import annotations

import jax
import numpy as np

GPU_RTOL = 1e-3
"""Tolerance of a vmapped-vs-separate comparison off CPU, relative to each array's largest
magnitude (``|actual - expected| <= GPU_RTOL * (|expected| + max |expected|)`` elementwise). A
reordered sum of ``n`` terms differs by ``O(n u)`` of its terms' magnitude (``u = 2**-24 ~ 6e-8``),
and the strategies' feedback compounds that over tens of generations: up to ~1e-4 was seen on an
H200 (CMA-ES, 2026-11-26), so 1e-3 leaves a margin of ten and still fails a vmapped run that computes
something else (its differences are of the order of the values themselves). The scale
is the array's largest magnitude, not each entry's, because a reordered sum's error is relative to
its terms, not to its (possibly cancelling, near-zero) result."""


def bit_exact_platform() -> bool:
    """Whether vmapped and separate runs must agree bit for bit here (XLA:CPU)."""
    return jax.default_backend() == "cpu"


def _host(x) -> np.ndarray:
    if jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    return np.asarray(x)


def assert_equal_on_cpu_close_on_gpu(actual, expected, *, rtol: float = GPU_RTOL, err_msg: str = "") -> None:
    """``actual == expected`` bit for bit on CPU; on GPU (any non-CPU backend) floating arrays to
    ``rtol`` of their largest magnitude (see :data:`GPU_RTOL`), other dtypes still exactly.

    Args:
        actual, expected: arrays (or PRNG key arrays) of the same shape.
        rtol: the off-CPU relative tolerance.
        err_msg: shown on failure (e.g. the leaf's path).
    """
    a, b = _host(actual), _host(expected)
    if bit_exact_platform() or not np.issubdtype(b.dtype, np.inexact):
        np.testing.assert_array_equal(a, b, err_msg=err_msg)
        return
    finite = np.abs(b[np.isfinite(b)])
    scale = float(finite.max()) if finite.size else 0.0
    np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * scale, err_msg=err_msg)


def assert_trees_equal_on_cpu_close_on_gpu(actual, expected, *, rtol: float = GPU_RTOL) -> None:
    """:func:`assert_equal_on_cpu_close_on_gpu` leaf by leaf over two pytrees of the same structure."""
    leaves_a, tree_a = jax.tree_util.tree_flatten_with_path(actual)
    leaves_b, tree_b = jax.tree_util.tree_flatten(expected)
    assert tree_a == tree_b, (tree_a, tree_b)
    for (path, a), b in zip(leaves_a, leaves_b, strict=True):
        assert_equal_on_cpu_close_on_gpu(a, b, rtol=rtol, err_msg=jax.tree_util.keystr(path))
