"""Forward evaluation and fused fitness of GP forests: the entry points and the backend choice.

A forest is struct-of-arrays in prefix order (fields ``opcode, value, size, output`` of shape
``[pop, max_len]``, see :mod:`evotensor.gp.functions` for the opcodes and
:mod:`evotensor.gp.reference` for the output / Modi semantics, which every path shares). Metrics
and argument checks live in :mod:`evotensor.gp.metrics`.

Backends (``backend=``, one of :data:`BACKENDS`):

* ``"native"``: the C++ evaluator of :mod:`evotensor.gp.native`, called through XLA's FFI (it
  traces under ``jit``, runs sequentially under ``vmap``). Each tree is interpreted once per chunk
  of 256 rows, so a node computes only its own function; trees run on XLA's CPU thread pool.
  2-4x the JAX path per CPU-second (``benchmarks/results_gp_eval.md``). Built-in functions only.
  It always computes on the CPU: a program compiled for a GPU reaches it through a host callback.
* ``"jax"``: the plain-JAX interpreter of :mod:`evotensor.gp.jax_evaluator`; runs anywhere, any
  function set.
* ``"pallas"``: the GPU kernel (:mod:`evotensor.gp.pallas_kernel`), Triton-compiled on a GPU; on
  a CPU it runs in Pallas's interpreter (slow: for tests).
* ``"auto"`` (default): ``"pallas"`` when JAX's default backend is a GPU; on a CPU ``"native"`` when
  the extension is built and the function set has only built-in functions, else ``"jax"``. The
  JAX path is written for CPU caches and is never picked on a GPU (it runs there, slowly, when
  asked for by name).

Dependencies run one way: this module -> the backends -> :mod:`evotensor.gp.metrics`.
"""

from __future__ import annotations

from typing import Any

import jax

from evotensor.core.checks import check_choice, check_int
from evotensor.gp import native, pallas_kernel
from evotensor.gp.functions import FunctionSet
from evotensor.gp.jax_evaluator import block_sizes, evaluate_jax, fitness_jax
from evotensor.gp.metrics import (
    MAXIMIZED_METRICS,
    METRICS,
    check_function_set,
    check_X,
    check_y,
    finalize_metric,
    forest_fields,
    metric_from_predictions,
    total_sum_of_squares,
)

# METRICS, MAXIMIZED_METRICS and metric_from_predictions are re-exported: they were defined here
# before evotensor.gp.metrics existed, and code imports them from this module.
__all__ = [
    "BACKENDS",
    "MAXIMIZED_METRICS",
    "METRICS",
    "choose_backend",
    "evaluate",
    "fitness",
    "metric_from_predictions",
]

BACKENDS = ("auto", "jax", "native", "pallas")
"""The evaluation paths ``backend=`` accepts (see the module docstring); problems check against it."""


def choose_backend(backend: str, fs: FunctionSet) -> str:
    """The evaluation path ``backend`` (one of :data:`BACKENDS`) resolves to for ``fs`` on this
    machine: ``"jax"``, ``"native"`` or ``"pallas"`` (``"auto"``: see the module docstring)."""
    check_choice(backend, "backend", BACKENDS)
    if backend != "auto":
        return backend
    if jax.default_backend() == "gpu":
        return "pallas"
    if jax.default_backend() == "cpu" and native.supported(fs):
        return "native"
    return "jax"


def evaluate(
    forest: Any,
    X: Any,
    function_set: FunctionSet,
    n_outputs: int = 1,
    *,
    backend: str = "auto",
    tree_block: int | None = None,
    row_block: int | None = None,
) -> jax.Array:
    """Forward of every tree on every row.

    Args:
        forest: a :class:`evotensor.gp.Forest` (or anything with fields ``opcode, value, size,
            output``) of shape ``[pop, max_len]``, or one tree ``[max_len]``. Variable indices must be
            ``< n_vars`` (out-of-range ones are clamped; ``Forest.check`` catches them).
        X: ``[n_points, n_vars]`` data.
        function_set: the opcodes' :class:`FunctionSet`.
        n_outputs: outputs per tree (``> 1``: Modi semantics, see :mod:`evotensor.gp.reference`).
        backend: ``"auto"``, ``"native"``, ``"jax"`` or ``"pallas"`` (:data:`BACKENDS`; see the module
            docstring).
        tree_block, row_block: largest block sizes of the JAX and Pallas paths (default 8 trees x
            256 rows on the JAX path, so one node step works on L1-resident arrays; balanced so the
            last block is not mostly padding). The native path ignores them.

    Returns:
        ``float32 [pop, n_points, n_outputs]`` (``[n_points, n_outputs]`` for a single tree).
        Non-finite values are kept as computed (raw semantics).

    Works under ``jax.jit`` (the forest may be traced; the function set, ``n_outputs`` and block
    sizes are static).
    """
    fs = check_function_set(function_set)
    n_outputs = check_int(n_outputs, "n_outputs")
    X = check_X(X)
    *arrays, single = forest_fields(forest)
    arrays = tuple(arrays)
    path = choose_backend(backend, fs)
    if path == "pallas":
        out = pallas_kernel.evaluate_pallas(
            arrays, X, fs, n_outputs, tree_block=tree_block, row_block=row_block
        )
    elif path == "native":
        out = native.evaluate_native(arrays, X, fs, n_outputs)
    else:
        tb, rb = block_sizes(arrays[0].shape[0], X.shape[0], tree_block, row_block)
        out = evaluate_jax(arrays, X, fs, n_outputs, tb, rb)
    return out[0] if single else out


def fitness(
    forest: Any,
    X: Any,
    y: Any,
    function_set: FunctionSet,
    metric: str = "mse",
    n_outputs: int | None = None,
    *,
    backend: str = "auto",
    tree_block: int | None = None,
    row_block: int | None = None,
) -> jax.Array:
    """Fused forward + metric: ``[pop]`` fitness without materializing ``[pop, n_points]``.

    Args:
        forest: ``[pop, max_len]`` forest (or one tree ``[max_len]``), as in :func:`evaluate`.
        X: ``[n_points, n_vars]`` data.
        y: regression targets ``[n_points]`` / ``[n_points, n_outputs]``, or class labels
            ``[n_points]`` in ``{0..n_outputs-1}`` for ``"accuracy"`` / ``"cross_entropy"``.
        function_set: the opcodes' :class:`FunctionSet`.
        metric: ``"mse" | "rmse" | "r2" | "accuracy" | "cross_entropy"`` (defined in
            :mod:`evotensor.gp.metrics`).
        n_outputs: outputs per tree; inferred from ``y`` for regression, default 1 (binary) for
            classification.
        backend, tree_block, row_block: as in :func:`evaluate`.

    Returns:
        ``float32 [pop]`` (a scalar for a single tree) in natural orientation; a tree with any
        non-finite prediction gets ``+inf`` (minimized metrics) or ``-inf`` (``r2``, ``accuracy``).
    """
    fs = check_function_set(function_set)
    X = check_X(X)
    yt, n_out = check_y(y, X.shape[0], metric, n_outputs)
    *arrays, single = forest_fields(forest)
    arrays = tuple(arrays)
    path = choose_backend(backend, fs)
    if path == "pallas":
        out = pallas_kernel.fitness_pallas(
            arrays, X, yt, fs, n_out, metric, tree_block=tree_block, row_block=row_block, y_is_transposed=True
        )
    elif path == "native":
        term_sum, bad_sum = native.fitness_sums(arrays, X, yt, fs, n_out, METRICS.index(metric))
        out = finalize_metric(term_sum, bad_sum, metric, X.shape[0], n_out, total_sum_of_squares(yt))
    else:
        tb, rb = block_sizes(arrays[0].shape[0], X.shape[0], tree_block, row_block)
        out = fitness_jax(arrays, X, yt, fs, n_out, metric, tb, rb)
    return out[0] if single else out
