"""Atomic file writes: write a temporary sibling file, fsync it, then rename it over the target.

A reader (or a resumed run after a crash, a kill or a full disk) sees either the old file or the
new one, never a torn write. The temporary file is ``.<name>.<16 hex digits>.tmp`` in the target's
directory; a process killed while writing leaves it behind, and :func:`remove_stale_temp_files`
(called by the run directory when a run starts or resumes there) removes such leftovers.

New files get the permissions a plain ``open(path, "w")`` would give them (``0o666`` minus the
umask); a file that is replaced keeps its mode.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO

__all__ = ["atomic_open", "remove_stale_temp_files", "temp_name_pattern", "write_text_atomic"]

# ``.<target name>.<token>.tmp``; the token is 16 hex digits here, and 6-32 word characters covers
# the ``tempfile.mkstemp`` names of earlier versions.
_TEMP = re.compile(r"^\.(?P<name>.+)\.(?P<token>[A-Za-z0-9_]{6,32})\.tmp$")


def temp_name_pattern() -> re.Pattern[str]:
    """The regular expression of the temporary names :func:`atomic_open` uses (group ``name``: the
    target's file name)."""
    return _TEMP


def _create_temp(path: Path) -> tuple[int, Path]:
    """A new, exclusively created temporary sibling of ``path``, opened for writing (mode ``0o666``
    minus the umask, as ``open`` would create it)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:  # pragma: no cover - a 64-bit collision
            continue


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "wb") -> Iterator[IO]:
    """Open a temporary sibling of ``path`` for writing (``"w"``: UTF-8 text, ``"wb"``: bytes); when
    the ``with`` block ends without an exception it replaces ``path``, otherwise it is removed.

    Raises:
        OSError: from the file system (``ENOSPC``, ``EACCES``, ``EISDIR``, ...); ``path`` is left as
            it was.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open supports modes 'w' and 'wb', got {mode!r}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        keep_mode = stat.S_IMODE(os.stat(path).st_mode)  # a replaced file keeps its permissions
    except OSError:
        keep_mode = None
    fd, tmp = _create_temp(path)
    try:
        if keep_mode is not None:
            os.fchmod(fd, keep_mode)
        handle = os.fdopen(fd, mode, **({"encoding": "utf-8"} if mode == "w" else {}))
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    try:
        with handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # make the rename itself durable where the OS allows
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Atomically write ``text`` (UTF-8) to ``path``."""
    with atomic_open(path, "w") as handle:
        handle.write(text)


def remove_stale_temp_files(directory: str | os.PathLike, names: Iterable[str]) -> list[Path]:
    """Remove the temporary files that an interrupted :func:`atomic_open` of one of ``names`` (file
    names in ``directory``) left behind; returns the removed paths.

    Only the caller may write these files at this time (a run directory belongs to one run).
    """
    wanted = set(names)
    removed = []
    directory = Path(directory)
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for entry in directory.iterdir():
            match = _TEMP.match(entry.name)
            if match and match["name"] in wanted and entry.is_file() and not entry.is_symlink():
                with contextlib.suppress(FileNotFoundError):
                    entry.unlink()
                    removed.append(entry)
    return removed
