"""XLA compiler options that a strategy or problem asks for, and compiling a program with them.

A family whose programs compile much faster under some XLA option, at no cost in its results, says
so by a method ``compiler_options(platform) -> Mapping[str, Any] | None`` on its strategy or problem
(``platform``: ``"cpu"``, ``"gpu"``, ``"tpu"``). The run loop (:class:`evotensor.core.run.Loop`)
merges the strategy's and the problem's and compiles every program of the run with them
(:func:`compile_lowered`). They are XLA ``DebugOptions`` fields, e.g.
``{"xla_cpu_use_fusion_emitters": False}``; the options must not change what a program computes
beyond XLA's own rounding freedom, and a family states what its options do and measures it
(``benchmarks/``).

Why per program, not ``XLA_FLAGS``: the flags are global to a process and fixed at its first
compile; a compiler option applies to one program and is part of JAX's compile-cache key. A family's
options are its defaults: an option that the environment's ``XLA_FLAGS`` sets keeps that value (a
user's explicit choice, or the test suite's cheap compile options, win).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import jax

from evotensor.core.checks import ArgumentError

__all__ = ["CLASSIC_CPU_EMITTERS", "compile_lowered", "flags_set", "merged_compiler_options", "platform_of"]

CLASSIC_CPU_EMITTERS: Mapping[str, Any] = {"xla_cpu_use_fusion_emitters": False}
"""XLA:CPU's classic elemental emitters instead of its newer fusion emitters: fewer, larger kernels,
and on XLA:CPU every kernel is compiled as its own LLVM module, so programs of many small steps
compile markedly faster (NEAT's and the GP estimators' CPU options; measured in
``benchmarks/results_neat.md`` and ``results_sr_suite.md``)."""

_REFUSED: set[str] = set()  # option sets (their repr) this XLA refused (never tried again)


def platform_of(mesh: Any = None) -> str:
    """The platform programs compile for: that of ``mesh``'s devices, else JAX's default backend."""
    if mesh is not None:
        return str(mesh.devices.flat[0].platform)
    return jax.default_backend()


def _options_of(part: Any, platform: str) -> dict[str, Any]:
    ask = getattr(part, "compiler_options", None)
    if not callable(ask):
        return {}
    options = ask(platform)
    if options is None:
        return {}
    if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
        raise ArgumentError(
            f"{type(part).__name__}.compiler_options({platform!r}) must return a mapping of option names "
            f"to values or None, got {options!r}"
        )
    return dict(options)


def merged_compiler_options(*parts: Any, platform: str) -> dict[str, Any]:
    """The compiler options every part (a strategy, a problem, a decoder; ``None`` parts are skipped)
    asks for on ``platform``, merged. Raises :class:`~evotensor.core.checks.ArgumentError` naming both
    parts when two ask for different values of one option."""
    merged: dict[str, Any] = {}
    owner: dict[str, str] = {}
    for part in parts:
        if part is None:
            continue
        for name, value in _options_of(part, platform).items():
            if name in merged and merged[name] != value:
                raise ArgumentError(
                    f"compiler option {name!r}: {owner[name]} asks for {merged[name]!r}, "
                    f"{type(part).__name__} for {value!r}"
                )
            merged[name] = value
            owner[name] = type(part).__name__
    return merged


def flags_set() -> set[str]:
    """The names of the XLA options the environment's ``XLA_FLAGS`` sets (``--name=value`` or
    ``--name``), without their leading dashes."""
    names = set()
    for token in os.environ.get("XLA_FLAGS", "").split():
        if token.startswith("--"):
            names.add(token[2:].split("=", 1)[0])
    return names


def compile_lowered(lowered: Any, options: Mapping[str, Any] | None) -> Any:
    """``lowered.compile()`` with compiler ``options`` (none: XLA's defaults), less those that the
    environment's ``XLA_FLAGS`` sets (:func:`flags_set`: the process's value stays).

    An XLA that does not know one of the options (an older or newer jaxlib) refuses the whole set:
    the program then compiles with XLA's defaults (the same results; only its compile and run times
    differ), and that set is not tried again in this process. Any other compile error raises.
    """
    named = isinstance(options, Mapping) and all(isinstance(k, str) for k in options)
    if options is not None and not named:
        raise ArgumentError(
            f"options must be a mapping of XLA option names to values, or None, got {options!r}"
        )
    process = flags_set()
    options = {name: value for name, value in (options or {}).items() if name not in process}
    if not options:
        return lowered.compile()
    tag = repr(sorted(options.items()))
    if tag in _REFUSED:
        return lowered.compile()
    try:
        return lowered.compile(compiler_options=dict(options))
    except Exception as error:  # noqa: BLE001 -- XLA reports an unknown option as a runtime error
        if "No such compile option" not in str(error):
            raise
        _REFUSED.add(tag)
        return lowered.compile()
