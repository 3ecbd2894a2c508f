"""The native CPU evaluator: C++ handlers (``_native.cc``) called from jitted code via XLA's FFI.

It interprets each tree once per chunk of 256 rows (nodes in reverse prefix order, one tight loop
per node over the rows), so a node computes only its own function, with no per-step XLA runtime
overhead; trees run in parallel on XLA's CPU thread pool. Semantics are exactly those of
:mod:`evotensor.gp.functions` (raw or protected) and :mod:`evotensor.gp.reference` (Modi outputs).
``sin cos tan`` are vectorized polynomials (float32 reduction modulo pi where a 256-row chunk's
arguments are all below 8192, else double; within 4 float32 ulps of the true value; ``|x| >=
2**20``, ``inf`` and ``nan`` use the library functions).

The extension is built by ``pip install`` when a C++ compiler and jaxlib's FFI headers are present
(``setup.py``, optional). :data:`AVAILABLE` says whether it was; ``EVOTENSOR_NO_NATIVE=1`` turns it
off (:data:`UNAVAILABLE_REASON` says why it is unavailable). :func:`supported` says whether a
function set can run here (built-in functions only).

The calls are ``jax.ffi.ffi_call``: they trace under ``jit`` (no host callback in a program for the
CPU), run ``sequential`` under ``vmap`` (one call per batch element), and have no derivative.

Memory: each thread holds ``(max_len + n_outputs) * 256`` float32 of working memory (the normal
equations of constant optimization, :func:`normal_equations`, also ``(K + 1) * 256`` float32 and
``(K + 2) * 256`` float64 for ``K`` constants, checked by :mod:`evotensor.gp.constants`);
:func:`evotensor.gp.evaluate` refuses up front a call whose memory exceeds
:func:`evotensor.gp.metrics.memory_limit`. An allocation that still fails inside the evaluator (on
any of its threads) is caught there and raised as ``jax.errors.JaxRuntimeError`` with
``RESOURCE_EXHAUSTED``; the process and the evaluator stay usable.

The handlers exist for the CPU only. A program compiled for another platform (a GPU: the default
device of a GPU machine) still runs the evaluator on the CPU: ``jax.lax.platform_dependent`` puts
the FFI call in the CPU lowering, and elsewhere a host callback that copies the operands to the
host, runs the same call on JAX's CPU device and copies the result back (correct, but a round trip
per call; on a GPU ``backend="auto"`` is the Pallas kernel). Data already on the CPU device, or a
call under ``jax.default_device(jax.devices("cpu")[0])``, takes the direct path.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.gp.functions import FunctionSet


def _load():
    """The extension module, or None and why not."""
    if os.environ.get("EVOTENSOR_NO_NATIVE", "") not in ("", "0"):
        return None, "disabled by EVOTENSOR_NO_NATIVE"
    try:
        from evotensor.gp import _native
    except ImportError as e:
        return None, f"the extension evotensor.gp._native is not built ({e})"
    # The FFI handler was compiled against one jaxlib's headers; only that version is trusted.
    running = importlib.metadata.version("jaxlib")
    if _native.built_against() != running:
        return None, (
            f"evotensor.gp._native was built against jaxlib {_native.built_against()} but jaxlib {running} "
            "is running (reinstall evotensor to rebuild it)"
        )
    return _native, ""


_ext, UNAVAILABLE_REASON = _load()
AVAILABLE: bool = _ext is not None
_NAMES: tuple[str, ...] = tuple(_ext.function_names()) if _ext is not None else ()
_registered = False


def _register() -> None:
    global _registered
    if not _registered:
        for name, capsule in _ext.handlers().items():
            jax.ffi.register_ffi_target(name, capsule, platform="cpu")
        _registered = True


def register() -> None:
    """Register the FFI handlers with XLA now (once per process; nothing when the extension is not
    built). Tracing a native call registers them itself; a program compiled earlier and loaded from
    disk without tracing (the estimators' stored executables) needs them before it is loaded."""
    if AVAILABLE:
        _register()


def supported(fs: FunctionSet) -> bool:
    """Whether the native evaluator is built and implements every function of ``fs``."""
    return AVAILABLE and all(name in _NAMES for name in fs.names)


def _table(fs: FunctionSet) -> jax.Array:
    """``int32 [n_opcodes]``: the native function id of each opcode (-1 for PAD / CONST / VAR)."""
    ids = [-1, -1, -1] + [_NAMES.index(name) for name in fs.names]
    return jax.device_put(np.asarray(ids, np.int32))  # (jnp.asarray compiles a program in a fresh process)


def _check(fs: FunctionSet) -> None:
    if not supported(fs):
        reason = (
            UNAVAILABLE_REASON
            if not AVAILABLE
            else f"function_set has functions the native evaluator lacks: "
            f"{[n for n in fs.names if n not in _NAMES]}"
        )
        raise ValueError(f"backend='native' is not available: {reason}")


def _cpu_device() -> jax.Device:
    try:
        return jax.devices("cpu")[0]
    except RuntimeError as e:
        raise ValueError(
            "backend='native' runs on the CPU, but JAX has no CPU backend here (JAX_PLATFORMS="
            f"{os.environ.get('JAX_PLATFORMS', '')!r}): add 'cpu' to it or choose another backend"
        ) from e


def _compute_on_the_cpu(ffi_fn, *args):
    """The jitted FFI call ``ffi_fn`` on JAX's CPU device, for host (or any device's) arrays
    ``args``: its outputs as NumPy arrays."""
    out = ffi_fn(*jax.device_put(args, _cpu_device()))
    return jax.tree.map(np.asarray, out)


def _platform_dependent(ffi_fn, *args):
    """``ffi_fn(*args)`` in a traced program: the FFI call itself where the program is compiled for
    the CPU, a host callback running :func:`_compute_on_the_cpu` elsewhere (a GPU)."""

    def via_host_callback(*operands):
        out_types = jax.eval_shape(ffi_fn, *operands)
        on_host = functools.partial(_compute_on_the_cpu, ffi_fn)
        return jax.pure_callback(on_host, out_types, *operands, vmap_method="sequential")

    return jax.lax.platform_dependent(*args, cpu=ffi_fn, default=via_host_callback)


@functools.partial(jax.jit, static_argnames=("kind", "options"))
def _compiled_on_the_cpu(*args, kind: str, options: tuple):
    # a jit of its own, so that a call outside jit is compiled for the device of its operands
    return _platform_dependent(functools.partial(_FFI[kind], **dict(options)), *args)


def _on_the_cpu(kind: str, *args, **options):
    """The FFI call ``kind`` (a key of :data:`_FFI`) with static ``options``, computed on the CPU on
    any host. Traced (under ``jit``), or wherever new arrays go to the CPU: see
    :func:`_platform_dependent`. Called on concrete arrays where new arrays go to another device (a
    GPU host): run on the CPU device directly (no callback), and the result handed back like any new
    array (on the default device)."""
    if jax.default_backend() == "cpu" or any(isinstance(a, jax.core.Tracer) for a in args):
        return _compiled_on_the_cpu(*args, kind=kind, options=tuple(sorted(options.items())))
    out = _compute_on_the_cpu(functools.partial(_FFI[kind], **options), *args)
    return jax.tree.map(jnp.asarray, out)


@functools.partial(jax.jit, static_argnames=("n_outputs", "protected"))
def _forward_ffi(opcode, value, size, output, XT, table, *, n_outputs: int, protected: bool):
    call = jax.ffi.ffi_call(
        "evotensor_gp_forward",
        jax.ShapeDtypeStruct((opcode.shape[0], XT.shape[1], n_outputs), jnp.float32),
        vmap_method="sequential",
    )
    return call(
        opcode, value, size, output, XT, table, n_outputs=np.int32(n_outputs), protected=np.int32(protected)
    )


@functools.partial(jax.jit, static_argnames=("n_outputs", "metric_id", "protected"))
def _fitness_ffi(
    opcode, value, size, output, XT, yt, table, *, n_outputs: int, metric_id: int, protected: bool
):
    pop = opcode.shape[0]
    call = jax.ffi.ffi_call(
        "evotensor_gp_fitness",
        (jax.ShapeDtypeStruct((pop,), jnp.float32), jax.ShapeDtypeStruct((pop,), jnp.float32)),
        vmap_method="sequential",
    )
    return call(
        opcode,
        value,
        size,
        output,
        XT,
        yt,
        table,
        n_outputs=np.int32(n_outputs),
        metric=np.int32(metric_id),
        protected=np.int32(protected),
    )


@functools.partial(jax.jit, static_argnames=("n_outputs", "protected"))
def _moments_ffi(opcode, value, size, output, XT, yct, table, *, n_outputs: int, protected: bool):
    pop = opcode.shape[0]
    call = jax.ffi.ffi_call(
        "evotensor_gp_moments",
        (jax.ShapeDtypeStruct((pop, n_outputs, 3), jnp.float32), jax.ShapeDtypeStruct((pop,), jnp.float32)),
        vmap_method="sequential",
    )
    return call(
        opcode,
        value,
        size,
        output,
        XT,
        yct,
        table,
        n_outputs=np.int32(n_outputs),
        protected=np.int32(protected),
    )


@functools.partial(jax.jit, static_argnames=("protected",))
def _normal_equations_ffi(opcode, value, size, output, XT, yt, slots, table, *, protected: bool):
    pop, q = opcode.shape[0], slots.shape[1] + 2
    call = jax.ffi.ffi_call(
        "evotensor_gp_normal_equations",
        (
            jax.ShapeDtypeStruct((pop, q), jnp.float32),
            jax.ShapeDtypeStruct((pop, q, q), jnp.float32),
            jax.ShapeDtypeStruct((pop, 2), jnp.float32),
            jax.ShapeDtypeStruct((pop,), jnp.float32),
        ),
        vmap_method="sequential",
    )
    return call(opcode, value, size, output, XT, yt, slots, table, protected=np.int32(protected))


_FFI = {
    "forward": _forward_ffi,
    "fitness": _fitness_ffi,
    "moments": _moments_ffi,
    "normal_equations": _normal_equations_ffi,
}


def evaluate_native(arrays, X: jax.Array, fs: FunctionSet, n_outputs: int) -> jax.Array:
    """Forward of ``arrays = (opcode, value, size, output)``, each ``[pop, max_len]``, on ``X
    [n_points, n_vars]``: ``float32 [pop, n_points, n_outputs]``. Computed on the CPU on any host
    (see the module docstring)."""
    _check(fs)
    _register()
    if isinstance(X, jax.core.Tracer) or jax.default_backend() != "cpu":
        XT = X.T
    else:  # concrete CPU data: transposed by NumPy (an eager transpose compiles a program)
        XT = jax.device_put(np.ascontiguousarray(np.asarray(X).T))
    return _on_the_cpu(
        "forward", *arrays, XT, _table(fs), n_outputs=int(n_outputs), protected=bool(fs.protected)
    )


def fitness_sums(arrays, X: jax.Array, yt: jax.Array, fs: FunctionSet, n_outputs: int, metric_id: int):
    """Per-tree sums of :func:`evotensor.gp.metrics.row_terms` over all rows, computed on the CPU on
    any host (see the module docstring).

    Args:
        arrays: ``(opcode, value, size, output)``, each ``[pop, max_len]``.
        X: ``[n_points, n_vars]``.
        yt: ``[n_y, n_points]`` targets (class labels: ``n_y = 1``).
        metric_id: index of the metric in :data:`evotensor.gp.metrics.METRICS`.

    Returns:
        ``(term_sum, bad_sum)``, ``float32 [pop]`` each (a malformed tree: nan, 1).
    """
    _check(fs)
    _register()
    return _on_the_cpu(
        "fitness",
        *arrays,
        X.T,
        yt,
        _table(fs),
        n_outputs=int(n_outputs),
        metric_id=int(metric_id),
        protected=bool(fs.protected),
    )


def scaling_moments(arrays, X: jax.Array, yct: jax.Array, fs: FunctionSet, n_outputs: int):
    """Per-tree, per-output moments of the predictions for closed-form linear scaling (see
    :mod:`evotensor.gp.scaling`), computed on the CPU on any host.

    Args:
        arrays: ``(opcode, value, size, output)``, each ``[pop, max_len]``.
        X: ``[n_points, n_vars]``.
        yct: ``[n_outputs, n_points]`` targets minus their per-output mean.

    Returns:
        ``(moments, bad_sum)``: ``float32 [pop, n_outputs, 3]`` = (mean of the predictions, sum of their
        squared deviations, sum of prediction * centered target), and ``float32 [pop]`` rows with a
        non-finite prediction (a malformed tree: nan moments, 1).
    """
    _check(fs)
    _register()
    return _on_the_cpu(
        "moments", *arrays, X.T, yct, _table(fs), n_outputs=int(n_outputs), protected=bool(fs.protected)
    )


def normal_equations(arrays, X: jax.Array, y: jax.Array, slots: jax.Array, fs: FunctionSet):
    """Least-squares statistics of every tree linearized in its constants (for Levenberg-Marquardt,
    :mod:`evotensor.gp.constants`), in one pass over the rows per tree, computed on the CPU on any host.

    With ``D_k = d f / d c_k`` the derivative of the tree's output ``f`` with respect to the constant
    at position ``slots[t, k]`` (forward-mode tangents; the derivative rules of ``jax.jvp`` on the
    functions of :mod:`evotensor.gp.functions`, raw or protected) and ``w = (D_1 .. D_K, f, y)``,
    over the rows where ``f`` is finite, accumulated in double and centered chunk by chunk:

    Args:
        arrays: ``(opcode, value, size, output)``, each ``[pop, max_len]`` (single-output trees).
        X: ``[n_points, n_vars]``.
        y: ``[n_points]`` targets.
        slots: ``int32 [pop, K]`` positions of the constants to differentiate by; an entry outside
            ``[0, size[t, 0])`` or on a non-``CONST`` node is unused (its ``D_k`` is 0).

    Returns:
        ``(mean, cov, sse, bad)``, float32: ``mean [pop, K + 2]`` the means of ``w``; ``cov [pop, K + 2,
        K + 2]`` the centered cross products ``sum (w - mean)(w - mean)^T`` (a non-finite ``D_k``
        counts as 0); ``sse [pop, 2]`` = ``sum (y - f)^2`` and the least squared error of ``a f + b``
        over ``a, b``, ``Syy - C^2 / M2`` (``Syy`` where ``M2 = 0``), both computed in double; ``bad
        [pop]`` the rows with a non-finite ``f`` (left out of the rest). A malformed tree: nan, 1.

    Working memory per thread: ``(max_len + K + 1) * 256`` float32 and ``(K + 2) * 256`` float64.
    """
    _check(fs)
    _register()
    y = jnp.asarray(y, jnp.float32).reshape(1, -1)
    return _on_the_cpu(
        "normal_equations",
        *arrays,
        X.T,
        y,
        jnp.asarray(slots, jnp.int32),
        _table(fs),
        protected=bool(fs.protected),
    )
