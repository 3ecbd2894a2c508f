"""Compiled programs kept on disk: JAX's persistent compilation cache, on by default for the CLI, on
request for :func:`evotensor.run` / :func:`evotensor.run_many`; the scikit-learn estimators' own
store of whole executables, on by default.

A compiled generation of a GP, NEAT or QD run takes seconds to compile and milliseconds to run, so
the compile dominates a short run. With the cache a repeated run (same strategy settings, shapes
and JAX version) loads the compiled program from disk instead: a fresh process pays the compile
once per configuration, not once per process.

Where: ``$EVOTENSOR_CACHE_DIR`` (default ``~/.cache/evotensor/jax``); ``EVOTENSOR_CACHE_DIR=off``
(or ``0``/``none``) turns it off. The CLI (an application, one program per process) and the
scikit-learn estimators (whose first ``fit`` in a fresh process otherwise compiles for seconds
before a fit of a fraction of a second) use it by default (:func:`enable_default_cache`; the
estimators, see below, :func:`default_cache_dir`).
:func:`evotensor.run` and :func:`evotensor.run_many` are library calls inside a user's own program:
they turn it on only when ``EVOTENSOR_CACHE_DIR`` is set (:func:`enable_requested_cache`), so
importing evotensor never starts writing into a user's home directory unasked. A cache directory
the user already gave JAX (``jax.config.update("jax_compilation_cache_dir", ...)``) is respected
and never replaced. Programs compiling in under :data:`MIN_COMPILE_SECONDS` are not stored. A
directory that cannot be created or written is not used: the run compiles as without a cache (the
estimators say so once per process in a ``RuntimeWarning``; the CLI stays silent).

JAX's cache still traces and lowers a program to compute its key, and skips programs that compile
quickly. The estimators instead keep their compiled programs whole (:func:`save_executable`,
:func:`load_executable`, in the ``executables`` folder of that directory), keyed by their own
static configuration and :func:`environment_fingerprint` (JAX, jaxlib and evotensor's sources,
backend, devices, ``XLA_FLAGS``, the JAX options that change a traced program): a fresh process
loads them without tracing anything. They turn JAX's cache on only for a configuration that store
cannot key (a user's own functions) and off a CPU (an accelerator's kernels are custom calls the store
refuses, see :func:`save_executable`): a program JAX reads back from its cache cannot be stored again
(:func:`jax_cache_hits`), so JAX's cache would keep programs that two configurations share (the
initial population's, for one) out of the store. A corrupt or mismatched entry is ignored with a
``RuntimeWarning`` and compiled again; at most :data:`MAX_EXECUTABLES` are kept (least recently
used removed). Like JAX's own cache, an entry is trusted code: only point the cache at a directory
you own.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import pickle
import re
import sys
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any

import jax
import numpy as np

__all__ = [
    "MAX_EXECUTABLES",
    "MIN_COMPILE_SECONDS",
    "cache_dir",
    "default_cache_dir",
    "enable_default_cache",
    "enable_requested_cache",
    "environment_fingerprint",
    "executable_key",
    "executables_dir",
    "jax_cache_hits",
    "lean_lowering",
    "load_executable",
    "save_executable",
]

_OFF = ("off", "0", "none", "false", "no")

MIN_COMPILE_SECONDS = 0.2
"""Programs compiling faster than this are not stored (JAX's default is 1 s; a first ``fit`` also
compiles a few programs of 0.2-0.5 s, worth reading back)."""

_WARNED: set[str] = set()  # unusable directories already warned about (once per process each)


def cache_dir() -> str | None:
    """The directory :func:`enable_default_cache` uses, or ``None`` when turned off."""
    value = os.environ.get("EVOTENSOR_CACHE_DIR")
    if value is not None and value.strip().lower() in _OFF:
        return None
    return value or str(Path.home() / ".cache" / "evotensor" / "jax")


def enable_default_cache(warn: bool = False) -> str | None:
    """Turn on the persistent cache unless the user configured JAX's own or turned ours off.

    Args:
        warn: when the directory cannot be created or written, say so in a ``RuntimeWarning``
            (once per process and directory) instead of silently compiling without the cache.

    Returns:
        The cache directory in use (the user's own if they set one), or ``None``.
    """
    path = default_cache_dir(warn, stacklevel=4)
    if path is not None and path != jax.config.jax_compilation_cache_dir:
        jax.config.update("jax_compilation_cache_dir", path)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    return path


def default_cache_dir(warn: bool = False, stacklevel: int = 3) -> str | None:
    """The directory :func:`enable_default_cache` would use (JAX's own if the user configured one),
    created and checked writable, without turning JAX's cache on: the estimators keep their
    executables there (:func:`executables_dir`). ``None`` when turned off or unusable (with ``warn``,
    said once per process and directory in a ``RuntimeWarning``)."""
    current = jax.config.jax_compilation_cache_dir
    if current:
        return current
    path = cache_dir()
    if path is None:
        return None
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
        problem = None if os.access(path, os.W_OK | os.X_OK) else "not writable"
    except OSError as err:  # e.g. a read-only home or a file in the way
        problem = f"{type(err).__name__}: {err.strerror or err}"
    if problem is not None:
        # only read access would do for a warm cache, but every new program would then warn
        # through JAX's failed writes: compile without the cache instead
        if warn and path not in _WARNED:
            _WARNED.add(path)
            warnings.warn(
                f"evotensor's compile cache {path} cannot be used ({problem}); compiling without it. "
                "Set EVOTENSOR_CACHE_DIR to a writable directory, or to 'off' to silence this.",
                RuntimeWarning,
                stacklevel=stacklevel,
            )
        return None
    return path


def enable_requested_cache() -> str | None:
    """:func:`enable_default_cache` if ``EVOTENSOR_CACHE_DIR`` is set (and not ``off``); else only
    reports a cache directory the user gave JAX, or ``None``."""
    if os.environ.get("EVOTENSOR_CACHE_DIR") is None:
        return jax.config.jax_compilation_cache_dir or None
    return enable_default_cache()


# -- whole compiled programs, keyed without tracing ------------------------------------------------------

MAX_EXECUTABLES = 256
"""Stored executables kept per cache directory (the least recently used beyond it are removed)."""

_FORMAT = 2  # an entry: (format, key, serialized executable, in tree, out tree, custom-call targets)

# A program loaded without tracing misses what lowering sets up in the process. JAX's LAPACK kernels
# read their function pointers when first lowered (run uninitialized, they crash the process), so a
# program calling them is stored with its targets and LAPACK is initialized before it loads. XLA's
# own TopK (lax.top_k on a CPU) needs nothing. Other custom calls are stored only when the caller
# names them (``ffi_prefixes``: its own FFI handlers, registered before it loads): an unknown target
# might need state that nothing here sets up.
_LAPACK = "lapack_"
_XLA_TARGETS = ("TopK",)
_TARGET = re.compile(r'custom_call_target="([^"]+)"')

# JAX options that change what a traced function compiles to (the rest, e.g. logging, do not)
_TRACE_OPTIONS = (
    "jax_enable_x64",
    "jax_default_prng_impl",
    "jax_threefry_partitionable",
    "jax_default_matmul_precision",
    "jax_numpy_rank_promotion",
    "jax_numpy_dtype_promotion",
    "jax_use_simplified_jaxpr_constants",
    "jax_enable_custom_prng",
    "jax_legacy_prng_key",
)


def lean_lowering() -> contextlib.AbstractContextManager:
    """A context in which ``jit(...).lower`` writes each operation's location without the full Python
    traceback behind it: the same compiled code, but its stored form is a quarter smaller and loads
    faster (XLA rebuilds the module's metadata on load, see benchmarks/results_sr_suite.md, session
    19). Profiles of a program lowered here name the operations' own source lines only. JAX without
    the option: nothing changes."""
    try:
        from jax._src.config import include_full_tracebacks_in_locations as option
    except ImportError:  # pragma: no cover - a JAX without the option
        return contextlib.nullcontext()
    return option(False)


@functools.cache
def _sources_digest(packages: tuple[str, ...] | None = None) -> str:
    """Digest of evotensor's Python sources (contents) and native extensions (size and mtime): the
    top-level modules and the subpackages ``packages`` (``None``: all)."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if "__pycache__" in path.parts or path.suffix not in (".py", ".so", ".pyd"):
            continue
        inside = path.relative_to(root).parts
        if packages is not None and len(inside) > 1 and inside[0] not in packages:
            continue
        h.update(str(path.relative_to(root)).encode())
        if path.suffix == ".py":
            h.update(path.read_bytes())
        else:  # a few MB of machine code: its size and time stand for it
            st = path.stat()
            h.update(f"{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()


def environment_fingerprint(packages: tuple[str, ...] | None = None) -> str:
    """What, besides a program's own configuration, decides its compiled code: JAX's and jaxlib's
    versions, evotensor's sources (the top-level modules and the subpackages ``packages`` the
    program's code can import, by the import rules of ``docs/design.md``; ``None``: all), the
    default backend and its devices, ``XLA_FLAGS`` and the JAX options that change tracing (a
    string; equal strings, interchangeable executables)."""
    import jaxlib

    backend = jax.devices()[0].client
    options = {name: jax.config.values.get(name) for name in _TRACE_OPTIONS}
    return repr(
        (
            jax.__version__,
            jaxlib.__version__,
            sys.version_info[:2],
            _sources_digest(packages),
            backend.platform,
            backend.platform_version,
            tuple(d.device_kind for d in jax.devices()),
            os.environ.get("XLA_FLAGS", ""),
            sorted(options.items()),
        )
    )


def executable_key(*parts: Any, packages: tuple[str, ...] | None = None) -> str | None:
    """A file-name-safe key of a program from its static configuration ``parts`` (their ``repr``)
    and :func:`environment_fingerprint` (of ``packages``); ``None`` when a part's ``repr`` is an
    object's address (``<... at 0x...>``), which names no configuration and would never match
    again."""
    text = repr(parts)
    if " at 0x" in text:
        return None
    return hashlib.sha256(f"{text}|{environment_fingerprint(packages)}".encode()).hexdigest()[:40]


def executables_dir(cache: str | None) -> Path | None:
    """The folder of stored executables inside the cache directory ``cache`` (``None``: none)."""
    return None if cache is None else Path(cache) / "executables"


def _entry(directory: Path, label: str, key: str) -> Path:
    return directory / f"{label}-{key}.exe"


def load_executable(directory: Path | None, label: str, key: str | None) -> Any:
    """The compiled program stored under ``key`` (a ``jax.stages.Compiled``), or ``None`` when there is
    none; an entry that cannot be read or loaded is reported in a ``RuntimeWarning`` and skipped (the
    caller compiles it again and :func:`save_executable` replaces it)."""
    if directory is None or key is None:
        return None
    path = _entry(directory, label, key)
    try:
        data = path.read_bytes()
    except OSError:  # not stored (yet)
        return None
    try:
        from jax.experimental import serialize_executable

        fmt, stored_key, blob, in_tree, out_tree, targets = pickle.loads(data)
        if fmt != _FORMAT or stored_key != key:
            raise ValueError(f"entry of format {fmt!r} and key {stored_key!r}, not {_FORMAT} and {key}")
        if any(t.startswith(_LAPACK) for t in targets):
            from jaxlib import lapack

            lapack.prepare_lapack_call("getrf_ffi", np.dtype(np.float32))  # initializes LAPACK
        compiled = serialize_executable.deserialize_and_load(blob, in_tree, out_tree)
    except Exception as err:  # a truncated or foreign file, another jaxlib's executable, ...
        warnings.warn(
            f"evotensor's stored executable {path} cannot be loaded ({type(err).__name__}: "
            f"{str(err)[:200]}); compiling it again",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    try:
        os.utime(path)  # recently used: kept when the folder is trimmed
    except OSError:
        pass
    return compiled


_HITS = threading.local()  # JAX persistent-cache hits per thread (compiles run in worker threads)
_LISTENING: list[bool] = []


def _count_hit(event: str, **kwargs: Any) -> None:
    if event == "/jax/compilation_cache/cache_hits":
        _HITS.count = getattr(_HITS, "count", 0) + 1


def jax_cache_hits() -> int:
    """How many programs this thread has read from JAX's persistent cache (counted from the first
    call on). An executable JAX read back from its cache must not be given to
    :func:`save_executable`: XLA:CPU serializes such a program again without some of its kernels
    (the stored entry then fails when it runs)."""
    if not _LISTENING:
        _LISTENING.append(True)
        jax.monitoring.register_event_listener(_count_hit)
    return getattr(_HITS, "count", 0)


def save_executable(
    directory: Path | None, label: str, key: str | None, compiled: Any, ffi_prefixes: tuple[str, ...] = ()
) -> bool:
    """Store ``compiled`` (a ``jax.stages.Compiled`` just compiled by XLA, not read from JAX's cache,
    see :func:`jax_cache_hits`, and not yet run: XLA:CPU cannot serialize some programs after their
    first run) under ``key``, atomically (a temporary file renamed into
    place). Returns whether it was stored; a program that cannot be serialized, one with a custom
    call other than XLA's TopK, JAX's LAPACK kernels and the FFI handlers named by ``ffi_prefixes`` (the
    caller registers those before :func:`load_executable`), or a directory that cannot be written
    is skipped silently (the next process compiles it again)."""
    if directory is None or key is None:
        return False
    try:
        from jax.experimental import serialize_executable

        targets = tuple(sorted(set(_TARGET.findall(compiled.as_text()))))
        if not all(t in _XLA_TARGETS or t.startswith((_LAPACK, *ffi_prefixes)) for t in targets):
            return False
        blob, in_tree, out_tree = serialize_executable.serialize(compiled)
        entry = (_FORMAT, key, blob, in_tree, out_tree, targets)
        data = pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # e.g. a program XLA cannot serialize, or an unpicklable pytree node
        return False
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, _entry(directory, label, key))
        except BaseException:
            os.unlink(tmp)
            raise
        _trim(directory)
    except OSError:
        return False
    return True


def _trim(directory: Path) -> None:
    """Remove the least recently used entries beyond :data:`MAX_EXECUTABLES`."""
    entries = []
    for path in directory.glob("*.exe"):
        try:
            entries.append((path.stat().st_mtime_ns, path))
        except OSError:  # removed meanwhile by another process
            continue
    for _, path in sorted(entries)[: max(0, len(entries) - MAX_EXECUTABLES)]:
        try:
            path.unlink()
        except OSError:
            pass
