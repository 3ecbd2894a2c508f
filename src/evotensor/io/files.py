"""Small file utilities shared by the CLI and the tasks."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["file_sha256"]


def file_sha256(path: Any, where: str | None = None, error: Callable[[str], Exception] = ValueError) -> str:
    """The SHA-256 (hex) of the file at ``path``, read in 1 MiB blocks.

    Args:
        path: the file.
        where: how messages name it (default: the path), e.g. ``"--data d.csv"``.
        error: the exception type raised, with a one-line message, when the file is missing, is a
            directory or cannot be read.
    """
    where = str(path) if where is None else where
    digest = hashlib.sha256()
    try:
        with Path(path).open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except FileNotFoundError:
        raise error(f"{where}: no such file") from None
    except IsADirectoryError:
        raise error(f"{where}: is a directory, not a file") from None
    except OSError as err:
        raise error(f"{where}: cannot read it ({err.strerror or err})") from None
    return digest.hexdigest()
