"""The library's one set of argument checks: each names the argument and the value it got.

Constructors call these at construction time, so bad input fails there with a clear message
instead of deep inside a compiled program. A failed check raises :class:`ArgumentError`, which is
both a ``ValueError`` and a ``TypeError`` (a wrong type and a wrong value are reported alike, and
code that catches either keeps working).

Example::

    from evotensor.core.checks import check_int, check_positive

    pop = check_int(population_size, "population_size", minimum=2)
    sigma = check_positive(sigma_init, "sigma_init")
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["ArgumentError", "check_choice", "check_fraction", "check_int", "check_positive", "check_ranges"]


class ArgumentError(ValueError, TypeError):
    """A bad argument; the message names it and shows the value."""


def _number(value: Any, name: str) -> float:
    """A real number: a Python/NumPy scalar or a 0-d NumPy/JAX array of a real dtype (not a bool or
    a string)."""
    if isinstance(value, (bool, np.bool_, str, bytes)):
        raise ArgumentError(f"{name} must be a number, got {value!r}")
    if isinstance(value, (int, float, np.integer, np.floating)):
        return float(value)
    dtype = getattr(value, "dtype", None)
    if getattr(value, "shape", None) == () and dtype is not None and np.issubdtype(dtype, np.number):
        if not np.issubdtype(dtype, np.complexfloating):
            return float(value)
    raise ArgumentError(f"{name} must be a number, got {value!r}")


def check_int(value: Any, name: str, minimum: int | None = 1, maximum: int | None = None) -> int:
    """``value`` as an ``int`` in ``[minimum, maximum]`` (``None``: unbounded); bools are refused."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ArgumentError(f"{name} must be an int, got {value!r}")
    if minimum is not None and value < minimum:
        raise ArgumentError(f"{name} must be an int >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise ArgumentError(f"{name} must be an int <= {maximum}, got {value!r}")
    return int(value)


def check_positive(value: Any, name: str, allow_zero: bool = False) -> float:
    """``value`` as a finite ``float`` ``> 0`` (``>= 0`` with ``allow_zero``); NaN and inf are refused."""
    x = _number(value, name)
    if not (math.isfinite(x) and (x >= 0.0 if allow_zero else x > 0.0)):
        raise ArgumentError(f"{name} must be finite and {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return x


def check_fraction(value: Any, name: str, allow_zero: bool = False) -> float:
    """``value`` as a ``float`` in ``(0, 1]`` (``[0, 1]`` with ``allow_zero``)."""
    x = _number(value, name)
    if not ((0.0 <= x if allow_zero else 0.0 < x) and x <= 1.0):
        raise ArgumentError(f"{name} must be in {'[0, 1]' if allow_zero else '(0, 1]'}, got {value!r}")
    return x


def check_choice(value: Any, name: str, choices: Sequence[Any]) -> Any:
    """``value`` if it is one of ``choices``."""
    if value not in tuple(choices):
        raise ArgumentError(f"{name} must be one of {tuple(choices)}, got {value!r}")
    return value


def check_ranges(
    ranges: Any, name: str = "ranges", count: int | None = None
) -> tuple[tuple[float, float], ...]:
    """``ranges`` as a non-empty tuple of finite ``(low, high)`` float pairs with ``low < high``
    (exactly ``count`` of them if given)."""
    if isinstance(ranges, (str, bytes)) or not hasattr(ranges, "__len__") or len(ranges) < 1:
        raise ArgumentError(f"{name} must be a non-empty sequence of (low, high) pairs, got {ranges!r}")
    out = []
    for i, pair in enumerate(ranges):
        values = tuple(pair) if hasattr(pair, "__len__") and not isinstance(pair, (str, bytes)) else ()
        if len(values) != 2:
            raise ArgumentError(f"{name}[{i}] must be a (low, high) pair of numbers, got {pair!r}")
        low, high = (_number(v, f"{name}[{i}]") for v in values)
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            raise ArgumentError(f"{name}[{i}] must be finite with low < high, got {pair!r}")
        out.append((low, high))
    if count is not None and len(out) != count:
        raise ArgumentError(f"{name} has {len(out)} pairs but must have {count}")
    return tuple(out)


# -- spreads and bounded reals (added for issue 16) ----------------------------------------------------
FLOAT32_MAX = float(np.finfo(np.float32).max)

MAX_SPREAD = 1e15
"""The largest spread a strategy accepts: every standard deviation, step size, radius, initial
range, noise level and multiplicative step factor (``sigma_init``, ``std_init``, ``std_max``,
``init_range``, ``radius``, ...). A spread is squared and summed over coordinates (variances, norms,
covariance matrices); ``1e15**2 = 1e30`` summed over up to ``10**8`` coordinates stays below float32's
largest value (``3.4e38``), while ``1e30`` (or ``inf``) overflowed to inf/NaN states."""


def check_real(
    value: Any,
    name: str,
    low: float | None = None,
    high: float | None = None,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """``value`` as a ``float`` that is finite *in float32* (``|x| <= 3.4e38``: a Python float such
    as ``1e300`` would become ``inf`` on the device) and lies in ``[low, high]`` (``None``: unbounded;
    ``low_open`` / ``high_open`` exclude the end). NaN and inf are refused."""
    x = _number(value, name)
    if not (math.isfinite(x) and abs(x) <= FLOAT32_MAX):
        raise ArgumentError(f"{name} must be a finite float32 number, got {value!r}")
    if low is not None and (x <= low if low_open else x < low):
        raise ArgumentError(f"{name} must be {'>' if low_open else '>='} {low:g}, got {value!r}")
    if high is not None and (x >= high if high_open else x > high):
        raise ArgumentError(f"{name} must be {'<' if high_open else '<='} {high:g}, got {value!r}")
    return x


def check_spread(value: Any, name: str, allow_zero: bool = False, maximum: float = MAX_SPREAD) -> float:
    """``value`` as a finite spread ``> 0`` (``>= 0`` with ``allow_zero``) and ``<= maximum``
    (default :data:`MAX_SPREAD`, ``1e15``: larger spreads overflow float32 once squared)."""
    x = check_positive(value, name, allow_zero=allow_zero)
    if x > maximum:
        raise ArgumentError(
            f"{name} must be <= {maximum:g} (a larger spread overflows float32 once squared), got {value!r}"
        )
    return x


__all__ += ["FLOAT32_MAX", "MAX_SPREAD", "check_real", "check_spread"]


def memory_limit_bytes() -> int:
    """The most memory a state built at construction may need: ``EVOTENSOR_MAX_STATE_BYTES`` (bytes)
    if set, else the default device's memory (a GPU's ``bytes_limit``; on a CPU, the machine's
    physical memory)."""
    override = os.environ.get("EVOTENSOR_MAX_STATE_BYTES", "").strip()
    if override:
        try:
            return int(float(override))
        except ValueError:
            raise ArgumentError(
                f"EVOTENSOR_MAX_STATE_BYTES must be a number of bytes, got {override!r}"
            ) from None
    import jax  # here, not at the top: the checks stay importable without initializing a backend

    try:
        stats = jax.devices()[0].memory_stats()
    except Exception:  # noqa: BLE001 - a backend without memory statistics
        stats = None
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 2**40


def check_memory(need_bytes: int, what: str) -> None:
    """Raise :class:`ArgumentError` when ``need_bytes`` exceed :func:`memory_limit_bytes`; ``what``
    names the arguments and the object (e.g. ``"num_dims=100000 with population_size=200 (CMAES's
    state)"``)."""
    limit = memory_limit_bytes()
    if need_bytes > limit:
        raise ArgumentError(
            f"{what} needs about {need_bytes / 2**30:.3g} GiB, more than the {limit / 2**30:.3g} GiB "
            "available (the default device's memory; set EVOTENSOR_MAX_STATE_BYTES to change the limit)"
        )


__all__ += ["check_memory", "memory_limit_bytes"]
