"""JAX's persistent compilation cache: on by default for the CLI, on request for the Python API.

A compiled generation of a GP, NEAT or QD run takes seconds to compile and milliseconds to run, so
the compile dominates a short run. With the cache a repeated run (same strategy settings, shapes
and JAX version) loads the compiled program from disk instead: a fresh process pays the compile
once per configuration, not once per process.

Where: ``$EVOTENSOR_CACHE_DIR`` (default ``~/.cache/evotensor/jax``); ``EVOTENSOR_CACHE_DIR=off``
(or ``0``/``none``) turns it off. The CLI (an application, one program per process) turns it on by
default (:func:`enable_default_cache`). :func:`evotensor.run`, :func:`evotensor.run_many` and the
scikit-learn estimators are library calls: they turn it on only when ``EVOTENSOR_CACHE_DIR`` is set
(:func:`enable_requested_cache`), so importing evotensor never starts writing into a user's home
directory unasked. A cache directory the user already gave JAX
(``jax.config.update("jax_compilation_cache_dir", ...)``) is respected and never replaced.
Programs compiling in under 0.5 s are not stored. An unwritable cache directory costs compile
time only.
"""

from __future__ import annotations

import os
from pathlib import Path

import jax

__all__ = ["cache_dir", "enable_default_cache", "enable_requested_cache"]

_OFF = ("off", "0", "none", "false", "no")


def cache_dir() -> str | None:
    """The directory :func:`enable_default_cache` uses, or ``None`` when turned off."""
    value = os.environ.get("EVOTENSOR_CACHE_DIR")
    if value is not None and value.strip().lower() in _OFF:
        return None
    return value or str(Path.home() / ".cache" / "evotensor" / "jax")


def enable_default_cache() -> str | None:
    """Turn on the persistent cache unless the user configured JAX's own or turned ours off.

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
        jax.config.update("jax_compilation_cache_dir", path)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    except OSError:
        return None  # an unwritable home only costs compile time
    return path


def enable_requested_cache() -> str | None:
    """:func:`enable_default_cache` if ``EVOTENSOR_CACHE_DIR`` is set (and not ``off``); else only
    reports a cache directory the user gave JAX, or ``None``."""
    if os.environ.get("EVOTENSOR_CACHE_DIR") is None:
        return jax.config.jax_compilation_cache_dir or None
    return enable_default_cache()
