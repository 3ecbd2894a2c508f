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

The calls are ``jax.ffi.ffi_call``: they trace under ``jit`` (no host callback), run ``sequential``
under ``vmap`` (one call per batch element), and have no derivative.
"""

from __future__ import annotations

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


def supported(fs: FunctionSet) -> bool:
    """Whether the native evaluator is built and implements every function of ``fs``."""
    return AVAILABLE and all(name in _NAMES for name in fs.names)


def _table(fs: FunctionSet) -> jax.Array:
    """``int32 [n_opcodes]``: the native function id of each opcode (-1 for PAD / CONST / VAR)."""
    ids = [-1, -1, -1] + [_NAMES.index(name) for name in fs.names]
    return jnp.asarray(np.asarray(ids, np.int32))


def _check(fs: FunctionSet) -> None:
    if not supported(fs):
        reason = (
            UNAVAILABLE_REASON
            if not AVAILABLE
            else f"function_set has functions the native evaluator lacks: "
            f"{[n for n in fs.names if n not in _NAMES]}"
        )
        raise ValueError(f"backend='native' is not available: {reason}")


def evaluate_native(arrays, X: jax.Array, fs: FunctionSet, n_outputs: int) -> jax.Array:
    """Forward of ``arrays = (opcode, value, size, output)``, each ``[pop, max_len]``, on ``X
    [n_points, n_vars]``: ``float32 [pop, n_points, n_outputs]``."""
    _check(fs)
    _register()
    opcode, value, size, output = arrays
    pop, n_points = opcode.shape[0], X.shape[0]
    call = jax.ffi.ffi_call(
        "evotensor_gp_forward",
        jax.ShapeDtypeStruct((pop, n_points, n_outputs), jnp.float32),
        vmap_method="sequential",
    )
    return call(
        opcode,
        value,
        size,
        output,
        X.T,
        _table(fs),
        n_outputs=np.int32(n_outputs),
        protected=np.int32(fs.protected),
    )


def fitness_sums(arrays, X: jax.Array, yt: jax.Array, fs: FunctionSet, n_outputs: int, metric_id: int):
    """Per-tree sums of :func:`evotensor.gp.metrics.row_terms` over all rows.

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
    opcode = arrays[0]
    pop = opcode.shape[0]
    call = jax.ffi.ffi_call(
        "evotensor_gp_fitness",
        (jax.ShapeDtypeStruct((pop,), jnp.float32), jax.ShapeDtypeStruct((pop,), jnp.float32)),
        vmap_method="sequential",
    )
    return call(
        *arrays,
        X.T,
        yt,
        _table(fs),
        n_outputs=np.int32(n_outputs),
        metric=np.int32(metric_id),
        protected=np.int32(fs.protected),
    )
