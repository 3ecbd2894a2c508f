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

Checks at this boundary, shared by every backend:

* **Malformed trees** (:func:`evotensor.gp.metrics.tree_validity`: a length outside ``[1,
  max_len]``, unknown or ``PAD`` opcodes inside a tree, opcodes that do not form one prefix tree,
  wrong subtree sizes, a variable index that is not a whole number below ``X``'s column count). A
  concrete forest with one is refused with an :class:`~evotensor.core.checks.ArgumentError` naming
  the tree and position; inside ``jit`` (a traced forest) such a tree is never run (it costs no
  time whatever its stored size) and gets NaN predictions and the metric's worst fitness, on every
  backend alike. ``opcode``, ``size`` and ``output`` must have integer dtypes.
* **Sizes**: an evaluation whose memory (predictions plus working memory, see
  :func:`evotensor.gp.metrics.check_evaluation_size`) exceeds
  :func:`evotensor.gp.metrics.memory_limit` (the physical memory, or ``EVOTENSOR_GP_MEMORY_LIMIT``
  bytes) is refused up front, naming ``n_outputs``, ``max_len`` or the data.
* **Data**: :func:`fitness` refuses NaN/inf in ``X`` or ``y`` (when concrete), naming the row and
  column; :func:`evaluate` computes on non-finite inputs as they are.
* **A GP's own forest** (:class:`evotensor.gp.encoding.DecodedForest`, what ``GP.decoder`` hands a
  problem) must match the data: its ``n_vars`` must equal ``X``'s columns and its ``n_outputs``
  the outputs asked for.

Dependencies run one way: this module -> the backends -> :mod:`evotensor.gp.metrics`.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from evotensor.core.checks import ArgumentError, check_choice, check_int
from evotensor.gp import native, scaling
from evotensor.gp.encoding import DecodedForest
from evotensor.gp.functions import CONST, PAD, FunctionSet
from evotensor.gp.jax_evaluator import block_sizes, evaluate_jax, fitness_jax, moments_jax
from evotensor.gp.metrics import (
    MAXIMIZED_METRICS,
    METRICS,
    check_evaluation_size,
    check_finite_data,
    check_function_set,
    check_X,
    check_y,
    finalize_metric,
    first_invalid_tree,
    forest_fields,
    is_concrete,
    metric_from_predictions,
    total_sum_of_squares,
    tree_validity,
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
    "scaling_coefficients",
]

SCALED_METRICS = ("mse", "rmse", "r2")
"""The metrics linear scaling applies to (the regression ones)."""

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


def _forest_shape(forest: Any) -> tuple[int, int] | None:
    """``(pop, max_len)`` read from ``forest.opcode``'s shape without converting it (``None`` if it
    has no such field or an odd shape: :func:`~evotensor.gp.metrics.forest_fields` then says why)."""
    shape = tuple(getattr(getattr(forest, "opcode", None), "shape", ()) or ())
    if len(shape) == 1:
        return 1, int(shape[0])
    if len(shape) == 2:
        return int(shape[0]), int(shape[1])
    return None


def _check_decoded(forest: Any, n_vars: int, n_outputs: int) -> None:
    """A GP's decoded forest carries the ``n_vars`` / ``n_outputs`` it was evolved for: they must be
    the data's."""
    if not isinstance(forest, DecodedForest):
        return
    if forest.n_vars is not None and forest.n_vars != n_vars:
        raise ArgumentError(
            f"n_vars mismatch: the GP was built with n_vars={forest.n_vars} but the data X has {n_vars} "
            f"column(s), so its trees would read variables the data does not have (or never read some); "
            f"build GP(..., n_vars={n_vars})"
        )
    if forest.n_outputs is not None and forest.n_outputs != n_outputs:
        raise ArgumentError(
            f"n_outputs mismatch: the GP was built with n_outputs={forest.n_outputs} but the problem "
            f"evaluates {n_outputs} output(s) (its targets y); build GP(..., n_outputs={n_outputs}) or "
            f"give y {forest.n_outputs} columns"
        )


def checked_forest(
    forest: Any, X: jax.Array, fs: FunctionSet, n_outputs: int, materialize: bool, valid: Any = None
):
    """The forest's arrays for a backend, ``(arrays, single, valid)``, after the boundary checks of
    the module docstring. ``valid`` is ``None`` for a concrete forest (a malformed one raised);
    for a traced one it is ``bool [pop]``, and its malformed trees are replaced by a one-node tree
    (so no backend runs them) whose results the caller masks. ``X`` gives the columns (and rows,
    for the size check) the trees run on; ``materialize``: whether the caller builds
    ``[pop, n_points, n_outputs]`` predictions. Used by :func:`evaluate`, :func:`fitness` and the
    per-device evaluation of :mod:`evotensor.gp.sharding`.

    A caller that already knows which trees are well formed (a hall of fame's entries with a finite
    loss were evaluated before) gives ``valid`` (bool ``[pop]``) instead of having it checked: the
    check is most of a small program's compile time. Trees it marks valid are run as they are."""
    shape = _forest_shape(forest)
    if shape is not None:
        check_evaluation_size(shape[0], shape[1], X.shape[0], n_outputs, materialize)
    _check_decoded(forest, X.shape[1], n_outputs)
    *arrays, single = forest_fields(forest)
    arrays = tuple(arrays)
    if valid is None and is_concrete(*arrays):
        message = first_invalid_tree(arrays, fs, X.shape[1])
        if message is not None:
            raise ArgumentError(message)
        return arrays, single, None
    opcode, value, size, output = arrays
    if valid is None:
        valid = tree_validity(opcode, value, size, fs.arity, X.shape[1])
    else:
        valid = jnp.asarray(valid, bool)
        if valid.size != opcode.shape[0]:
            n = opcode.shape[0]
            raise ArgumentError(f"valid must be bool [{n}] (one per tree), got shape {valid.shape}")
        valid = valid.reshape(opcode.shape[:1])
    ok = valid[:, None]
    first = jnp.arange(opcode.shape[1]) == 0
    arrays = (
        jnp.where(ok, opcode, jnp.where(first, CONST, PAD)),
        jnp.where(ok, value, 0.0),
        jnp.where(ok, size, jnp.where(first, 1, 0)),
        jnp.where(ok, output, -1),
    )
    return arrays, single, valid


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
            output``) of shape ``[pop, max_len]``, or one tree ``[max_len]``. A malformed tree
            (including a variable index ``>= n_vars``) is refused when the forest is concrete and
            gives NaN predictions inside ``jit`` (see the module docstring).
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

    Raises:
        ArgumentError: a malformed concrete forest (naming the tree and position), an evaluation
            over the memory limit (naming ``n_outputs``, ``max_len`` or the data), bad arguments.

    Works under ``jax.jit`` (the forest may be traced; the function set, ``n_outputs`` and block
    sizes are static).
    """
    fs = check_function_set(function_set)
    n_outputs = check_int(n_outputs, "n_outputs")
    check_choice(backend, "backend", BACKENDS)
    X = check_X(X)
    arrays, single, valid = checked_forest(forest, X, fs, n_outputs, materialize=True)
    path = choose_backend(backend, fs)
    if path == "pallas":
        from evotensor.gp import pallas_kernel  # Pallas/Triton imported only where used

        out = pallas_kernel.evaluate_pallas(
            arrays, X, fs, n_outputs, tree_block=tree_block, row_block=row_block
        )
    elif path == "native":
        out = native.evaluate_native(arrays, X, fs, n_outputs)
    else:
        tb, rb = block_sizes(arrays[0].shape[0], X.shape[0], tree_block, row_block)
        out = evaluate_jax(arrays, X, fs, n_outputs, tb, rb)
    if valid is not None:
        out = jnp.where(valid[:, None, None], out, jnp.nan)
    return out[0] if single else out


def check_fitness_arguments(
    X: Any, y: Any, function_set: Any, metric: str, n_outputs: int | None, backend: str, linear_scaling: Any
) -> tuple[FunctionSet, jax.Array, jax.Array, int]:
    """:func:`fitness`'s argument checks (every entry point that scores a forest on data makes them):
    ``-> (function set, X [n, vars], y as targets [n, outputs], outputs)``; an
    :class:`ArgumentError` names the offending argument (NaN/inf cells by row and column)."""
    fs = check_function_set(function_set)
    check_choice(backend, "backend", BACKENDS)
    X = check_X(X)
    yt, n_out = check_y(y, X.shape[0], metric, n_outputs)
    check_finite_data(X, "X")
    check_finite_data(jnp.asarray(y, jnp.float32), "y")
    if not isinstance(linear_scaling, bool):
        raise ArgumentError(f"linear_scaling must be a bool, got {linear_scaling!r}")
    if linear_scaling and metric not in SCALED_METRICS:
        raise ArgumentError(
            f"linear_scaling applies to the regression metrics {SCALED_METRICS}, not metric={metric!r}"
        )
    return fs, X, yt, n_out


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
    linear_scaling: bool = False,
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
        linear_scaling: score every output as ``a * f + b`` with the least-squares ``a, b`` for
            the data (:mod:`evotensor.gp.scaling`; regression metrics only). The same single fused
            pass, with three running sums instead of one.

    Returns:
        ``float32 [pop]`` (a scalar for a single tree) in natural orientation; a tree with any
        non-finite prediction gets ``+inf`` (minimized metrics) or ``-inf`` (``r2``, ``accuracy``),
        and so does a malformed tree inside ``jit``.

    Raises:
        ArgumentError: NaN/inf in a concrete ``X`` or ``y`` (naming the row and column), a malformed
            concrete forest, an evaluation over the memory limit, bad arguments (see
            :func:`evaluate`).
    """
    fs, X, yt, n_out = check_fitness_arguments(X, y, function_set, metric, n_outputs, backend, linear_scaling)
    arrays, single, valid = checked_forest(forest, X, fs, n_out, materialize=False)
    path = choose_backend(backend, fs)
    if linear_scaling:
        moments, bad_sum, y_mean = _scaling_moments(arrays, X, yt, fs, n_out, path, tree_block, row_block)
        _, _, syy = scaling.centered_targets(yt)
        sse = scaling.scaled_sse(moments, syy, X.shape[0])
        out = finalize_metric(sse, bad_sum, metric, X.shape[0], n_out, total_sum_of_squares(yt))
    elif path == "pallas":
        from evotensor.gp import pallas_kernel

        out = pallas_kernel.fitness_pallas(
            arrays, X, yt, fs, n_out, metric, tree_block=tree_block, row_block=row_block, y_is_transposed=True
        )
    elif path == "native":
        term_sum, bad_sum = native.fitness_sums(arrays, X, yt, fs, n_out, METRICS.index(metric))
        out = finalize_metric(term_sum, bad_sum, metric, X.shape[0], n_out, total_sum_of_squares(yt))
    else:
        tb, rb = block_sizes(arrays[0].shape[0], X.shape[0], tree_block, row_block)
        out = fitness_jax(arrays, X, yt, fs, n_out, metric, tb, rb)
    if valid is not None:
        out = jnp.where(valid, out, -jnp.inf if metric in MAXIMIZED_METRICS else jnp.inf)
    return out[0] if single else out


def _scaling_moments(arrays, X, yt, fs, n_out, path, tree_block, row_block):
    """``(moments [pop, n_out, 3], bad_sum [pop], y_mean [n_out])`` on backend ``path``."""
    y_mean, yct, _ = scaling.centered_targets(yt)
    if path == "native":
        moments, bad_sum = native.scaling_moments(arrays, X, yct, fs, n_out)
    elif path == "pallas":
        # materialized predictions (the kernel has no fused moments yet), reduced by XLA
        from evotensor.gp import pallas_kernel

        pred = pallas_kernel.evaluate_pallas(arrays, X, fs, n_out, tree_block=tree_block, row_block=row_block)
        moments, bad_sum = scaling.moments_from_predictions(pred, yct)
    else:
        tb, rb = block_sizes(arrays[0].shape[0], X.shape[0], tree_block, row_block)
        moments, bad_sum = moments_jax(arrays, X, yct, fs, n_out, tb, rb)
    return moments, bad_sum, y_mean


def scaling_coefficients(
    forest: Any,
    X: Any,
    y: Any,
    function_set: FunctionSet,
    n_outputs: int | None = None,
    *,
    backend: str = "auto",
    valid: Any = None,
) -> tuple[jax.Array, jax.Array]:
    """The least-squares slope and intercept of every tree's outputs on ``(X, y)``: the ``a, b`` that
    ``fitness(..., linear_scaling=True)`` scores ``a * f + b`` with (see :mod:`evotensor.gp.scaling`).

    Args:
        forest: ``[pop, max_len]`` forest or one tree ``[max_len]``.
        X: ``[n_points, n_vars]``; y: ``[n_points]`` or ``[n_points, n_outputs]`` targets.
        function_set, n_outputs, backend: as in :func:`fitness`.
        valid: optional bool ``[pop]``, the trees the caller knows to be well formed (e.g. a hall
            of fame's entries with a finite loss: :attr:`~evotensor.gp.front.HallOfFame.exists`),
            instead of the malformed-tree check (most of the compile time of a program that only
            scales a few trees). The others get NaN; a malformed tree marked valid is not caught.

    Returns:
        ``(a, b)``, float32 ``[pop, n_outputs]`` each (``[n_outputs]`` for one tree); ``a = 0, b =
        mean(y)`` for a tree with constant output; NaN for a tree with a non-finite prediction (or
        malformed, or not ``valid``).
    """
    fs = check_function_set(function_set)
    check_choice(backend, "backend", BACKENDS)
    X = check_X(X)
    yt, n_out = check_y(y, X.shape[0], "mse", n_outputs)
    check_finite_data(X, "X")
    check_finite_data(jnp.asarray(y, jnp.float32), "y")
    arrays, single, valid = checked_forest(forest, X, fs, n_out, materialize=False, valid=valid)
    moments, bad_sum, y_mean = _scaling_moments(
        arrays, X, yt, fs, n_out, choose_backend(backend, fs), None, None
    )
    a, b = scaling.coefficients(moments, y_mean, X.shape[0])
    ok = bad_sum == 0
    if valid is not None:
        ok = ok & valid
    a, b = jnp.where(ok[:, None], a, jnp.nan), jnp.where(ok[:, None], b, jnp.nan)
    return (a[0], b[0]) if single else (a, b)
