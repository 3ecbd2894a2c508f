"""A wall-clock limit for slow pure-Python work (sympy simplification, symbolic checks)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["TimeLimitExceeded", "can_time_limit", "call_with_time_limit"]


class TimeLimitExceeded(Exception):
    """Raised by :func:`call_with_time_limit` when ``fn`` ran past its limit."""


def can_time_limit() -> bool:
    """Whether :func:`call_with_time_limit` can stop a call here: a POSIX main thread with no
    real-time timer already running (one set by the caller is left alone)."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        return False
    return signal.getitimer(signal.ITIMER_REAL)[0] <= 0


def call_with_time_limit(fn: Callable[[], Any], seconds: float) -> Any:
    """``fn()``, stopped by a SIGALRM timer after ``seconds`` (:class:`TimeLimitExceeded`) where
    :func:`can_time_limit`; unbounded elsewhere."""
    if seconds <= 0:
        raise ValueError(f"seconds must be positive, got {seconds!r}")
    if not can_time_limit():
        return fn()

    def on_alarm(signum, frame):
        raise TimeLimitExceeded

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
