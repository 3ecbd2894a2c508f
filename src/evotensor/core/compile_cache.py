"""JAX's persistent compilation cache: on by default for the CLI and the scikit-learn estimators, on
request for :func:`evotensor.run` / :func:`evotensor.run_many`.

A compiled generation of a GP, NEAT or QD run takes seconds to compile and milliseconds to run, so
the compile dominates a short run. With the cache a repeated run (same strategy settings, shapes
and JAX version) loads the compiled program from disk instead: a fresh process pays the compile
once per configuration, not once per process.

Where: ``$EVOTENSOR_CACHE_DIR`` (default ``~/.cache/evotensor/jax``); ``EVOTENSOR_CACHE_DIR=off``
(or ``0``/``none``) turns it off. The CLI (an application, one program per process) and the
scikit-learn estimators (whose first ``fit`` in a fresh process otherwise compiles for seconds
before a fit of a fraction of a second) turn it on by default (:func:`enable_default_cache`).
:func:`evotensor.run` and :func:`evotensor.run_many` are library calls inside a user's own program:
they turn it on only when ``EVOTENSOR_CACHE_DIR`` is set (:func:`enable_requested_cache`), so
importing evotensor never starts writing into a user's home directory unasked. A cache directory
the user already gave JAX (``jax.config.update("jax_compilation_cache_dir", ...)``) is respected
and never replaced. Programs compiling in under :data:`MIN_COMPILE_SECONDS` are not stored. A
directory that cannot be created or written is not used: the run compiles as without a cache (the
estimators say so once per process in a ``RuntimeWarning``; the CLI stays silent).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import jax

__all__ = ["MIN_COMPILE_SECONDS", "cache_dir", "enable_default_cache", "enable_requested_cache"]

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
                stacklevel=3,
            )
        return None
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    return path


def enable_requested_cache() -> str | None:
    """:func:`enable_default_cache` if ``EVOTENSOR_CACHE_DIR`` is set (and not ``off``); else only
    reports a cache directory the user gave JAX, or ``None``."""
    if os.environ.get("EVOTENSOR_CACHE_DIR") is None:
        return jax.config.jax_compilation_cache_dir or None
    return enable_default_cache()
