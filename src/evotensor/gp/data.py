"""User data for GP: a CSV file or arrays, checked, and a deterministic (stratified) train/test split.

:func:`load_csv` reads a CSV file with a header line into ``X float32 [n, d]``, ``y float32 [n]`` and
the feature names; :func:`check_data` checks arrays the same way (it is what :func:`load_csv` ends
with); :func:`train_test_split` holds out a seeded fraction of the rows, stratified by class when
asked. Every problem with the data raises :class:`~evotensor.core.checks.ArgumentError` naming what is
wrong and where: the column by its header name, the row as the 1-based data row *and* the file line
(a CSV) or as ``X[i, j]`` (an array), the cell as it was written. Nothing is dropped silently:
missing cells are an error unless ``drop_missing=True``, which drops their rows and warns with the
count.

What counts as missing: an empty cell and the usual markers ``NA``, ``N/A``, ``NaN``, ``null``,
``None``, ``?`` (any case). ``inf`` and values beyond float32's range are never missing, always an
error (a non-finite input or target makes every tree's fitness the worst value).

Example::

    X, y, names = load_csv("data.csv", target="y")                   # every other column a feature
    X, y, names = load_csv("data.csv", target="y", features=["a", "b"])
    X_train, y_train, X_test, y_test = train_test_split(X, y, test_fraction=0.25, seed=0)
"""

from __future__ import annotations

import csv
import io
import math
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evotensor.core.checks import FLOAT32_MAX, ArgumentError, check_int, check_real

__all__ = ["MISSING_MARKERS", "MIN_TRAIN_ROWS", "check_data", "load_csv", "train_test_split"]

MISSING_MARKERS = frozenset({"", "na", "n/a", "nan", "null", "none", "?"})
"""Cell texts (stripped, lower case) that mean "no value"."""

MIN_TRAIN_ROWS = 2
"""Fewest rows a model is fitted on: with one row every constant fits exactly and R^2 is undefined."""


def _read_text(path: Any) -> tuple[Path, str]:
    """The text of the file at ``path`` (UTF-8, a byte-order mark allowed); errors name the path."""
    if not isinstance(path, (str, Path)) or not str(path).strip():
        raise ArgumentError(f"path must be a path to a CSV file, got {path!r}")
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise ArgumentError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise ArgumentError(f"{p}: is a directory, not a CSV file") from None
    except OSError as err:
        raise ArgumentError(f"{p}: cannot read it ({err.strerror or err})") from None
    try:
        return p, data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ArgumentError(f"{p}: not a UTF-8 text file (invalid byte at offset {err.start})") from None


def _header(row: list[str], where: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in row)
    for j, name in enumerate(names):
        if not name:
            raise ArgumentError(f"{where}: column {j + 1} of the header has no name")
    seen: dict[str, int] = {}
    for j, name in enumerate(names):
        if name in seen:
            raise ArgumentError(
                f"{where}: duplicate column name {name!r} (columns {seen[name] + 1} and {j + 1}); "
                "every column needs its own name"
            )
        seen[name] = j
    return names


def _pick_columns(
    names: tuple[str, ...], target: Any, features: Any, where: str
) -> tuple[int, tuple[int, ...]]:
    """Indices of the target column and the feature columns (default: every other column)."""
    listing = ", ".join(repr(n) for n in names)
    if target is None:
        t = len(names) - 1
    elif isinstance(target, str):
        if target not in names:
            raise ArgumentError(f"target column {target!r} is not in {where}; its columns are {listing}")
        t = names.index(target)
    else:
        raise ArgumentError(f"target must be a column name (a string) or None, got {target!r}")
    if features is None:
        cols = tuple(j for j in range(len(names)) if j != t)
    else:
        if isinstance(features, str) or not isinstance(features, Sequence) or len(features) == 0:
            raise ArgumentError(f"features must be a non-empty sequence of column names, got {features!r}")
        cols = []
        for f in features:
            if not isinstance(f, str) or f not in names:
                raise ArgumentError(f"features: column {f!r} is not in {where}; its columns are {listing}")
            if f == names[t]:
                raise ArgumentError(f"features: {f!r} is the target column; a feature cannot be the target")
            if names.index(f) in cols:
                raise ArgumentError(f"features: column {f!r} is listed twice")
            cols.append(names.index(f))
        cols = tuple(cols)
    if not cols:
        raise ArgumentError(f"{where} has no feature column besides the target {names[t]!r}")
    return t, cols


def _cell(text: str, where: str) -> float | None:
    """A cell's number, ``None`` when missing; ``ArgumentError`` naming ``where`` otherwise."""
    s = text.strip()
    if s.lower() in MISSING_MARKERS:
        return None
    try:
        # Python's float() also takes "1_000"; a CSV number never has an underscore
        if "_" in s:
            raise ValueError
        x = float(s)
    except ValueError:
        raise ArgumentError(
            f"{where}: {text!r} is not a number (leave a non-numeric column out with features=[...])"
        ) from None
    if not math.isfinite(x) or abs(x) > FLOAT32_MAX:
        raise ArgumentError(f"{where}: {text!r} is not a finite float32 number (|x| <= 3.4e38)")
    return x


def load_csv(
    path: Any,
    target: str | None = None,
    features: Sequence[str] | None = None,
    *,
    delimiter: str = ",",
    drop_missing: bool = False,
) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """Read a CSV file with a header line: features ``X``, target ``y`` and the feature names.

    Args:
        path: the CSV file. Its first line names the columns; blank lines are skipped; every other
            line is one data row with one cell per column.
        target: the target column's name (default: the last column).
        features: names of the feature columns, in the order ``X`` gets them (default: every
            column but the target, in file order).
        delimiter: one character between cells (default ``","``; ``";"`` or ``"\\t"`` for other
            dialects).
        drop_missing: drop every row with a missing cell in a used column (warning with the count)
            instead of refusing it. Default False.

    Returns:
        ``X`` float32 ``[n, d]``, ``y`` float32 ``[n]``, ``feature_names`` (``d`` strings).

    Raises:
        ArgumentError: the file does not exist or cannot be read; it is empty or has no data row;
            the header has an empty or a duplicate name; the target or a feature column is not
            there (the message lists the columns); a row has the wrong number of cells; a cell is
            not a number, is missing (without ``drop_missing``) or is not finite in float32; fewer
            than :data:`MIN_TRAIN_ROWS` rows remain. Rows are named as ``data row r (line l)``.
    """
    if not isinstance(delimiter, str) or len(delimiter) != 1 or delimiter in '\r\n"':
        raise ArgumentError(f"delimiter must be one character (not a quote or newline), got {delimiter!r}")
    if not isinstance(drop_missing, (bool, np.bool_)):
        raise ArgumentError(f"drop_missing must be a bool, got {drop_missing!r}")
    p, text = _read_text(path)
    where = str(p)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
    header: tuple[str, ...] | None = None
    t, cols = -1, ()
    rows: list[list[float | None]] = []
    lines: list[int] = []  # the file line of each data row (1-based; a quoted cell may span lines)
    try:
        for record in reader:
            line = reader.line_num
            if not any(cell.strip() for cell in record):
                continue  # a blank line
            if header is None:
                header = _header(record, f"{where} line {line} (the header)")
                t, cols = _pick_columns(header, target, features, where)
                continue
            r = len(rows) + 1
            if len(record) != len(header):
                raise ArgumentError(
                    f"{where} data row {r} (line {line}) has {len(record)} cells, but the header names "
                    f"{len(header)} columns"
                )
            rows.append(
                [
                    _cell(record[j], f"{where} data row {r} (line {line}), column {header[j]!r}")
                    for j in (t, *cols)
                ]
            )
            lines.append(line)
    except csv.Error as err:
        raise ArgumentError(f"{where} line {reader.line_num}: not valid CSV ({err})") from None
    if header is None:
        raise ArgumentError(f"{where}: the file is empty; a CSV needs a header line and data rows")
    if not rows:
        raise ArgumentError(f"{where} has a header but no data rows")
    used = (header[t], *(header[j] for j in cols))
    missing = [i for i, row in enumerate(rows) if any(v is None for v in row)]
    if missing and not drop_missing:
        i = missing[0]
        j = next(k for k, v in enumerate(rows[i]) if v is None)
        raise ArgumentError(
            f"{where} data row {i + 1} (line {lines[i]}), column {used[j]!r}: missing value "
            f"({len(missing)} row(s) with missing values in all); fill them in, or pass drop_missing=True "
            "to drop those rows"
        )
    if missing:
        warnings.warn(
            f"{where}: dropped {len(missing)} of {len(rows)} data rows with missing values "
            f"(the first: data row {missing[0] + 1}, line {lines[missing[0]]})",
            stacklevel=2,
        )
        keep = sorted(set(range(len(rows))) - set(missing))
        rows = [rows[i] for i in keep]
    if len(rows) < MIN_TRAIN_ROWS:
        raise ArgumentError(
            f"{where} has {len(rows)} usable data row(s); at least {MIN_TRAIN_ROWS} are needed to fit a "
            "model (and a held-out test set needs more)"
        )
    table = np.asarray(rows, np.float64)
    X, y = table[:, 1:], table[:, 0]
    return check_data(X, y, tuple(header[j] for j in cols))


def _column_name(j: int, feature_names: tuple[str, ...] | None) -> str:
    return repr(feature_names[j]) if feature_names is not None else str(j)


def _numeric(a: Any, name: str, feature_names: tuple[str, ...] | None) -> np.ndarray:
    """``a`` as float64, naming the first cell that is not a real number."""
    try:
        out = np.asarray(a)
    except Exception as err:  # noqa: BLE001 - ragged or otherwise not array-like
        raise ArgumentError(f"{name} must be an array of numbers, got {type(a).__name__} ({err})") from None
    if out.dtype.kind in "biuf":
        return out.astype(np.float64)
    if out.dtype.kind == "c":
        raise ArgumentError(f"{name} must hold real numbers, got complex dtype {out.dtype}")
    flat = out.reshape(-1) if out.ndim else out.reshape(1)
    for k, v in enumerate(flat):
        bad = isinstance(v, (bool, np.bool_, str, bytes))
        if not bad:
            try:
                float(v)
            except (TypeError, ValueError):
                bad = True
        if bad:
            idx = np.unravel_index(k, out.shape) if out.ndim else ()
            at = ", ".join(str(int(i)) for i in idx)
            col = f" (column {_column_name(int(idx[1]), feature_names)})" if out.ndim == 2 else ""
            raise ArgumentError(f"{name}[{at}]{col} = {v!r} is not a number")
    return out.astype(np.float64)


def check_data(
    X: Any, y: Any, feature_names: Sequence[str] | None = None
) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """Check a data set given as arrays: what :func:`load_csv` returns, and what a GP problem takes.

    Args:
        X: ``[n, d]`` real numbers (``n >= 2`` rows, ``d >= 1`` features).
        y: ``[n]`` (or ``[n, 1]``) real numbers.
        feature_names: ``d`` distinct non-empty strings (default ``x0 .. x{d-1}``, the names the
            exports and :func:`evotensor.gp.is_symbolic_solution` use).

    Returns:
        ``X`` float32 ``[n, d]``, ``y`` float32 ``[n]``, ``feature_names`` (a tuple).

    Raises:
        ArgumentError: a wrong shape, a non-numeric cell, a NaN or inf (or a value beyond float32's
            range), naming the first bad cell as ``X[i, j] (column 'name')`` / ``y[i]``; fewer than
            :data:`MIN_TRAIN_ROWS` rows; bad ``feature_names``.
    """
    names = None
    if feature_names is not None:
        if isinstance(feature_names, str) or not isinstance(feature_names, Sequence):
            raise ArgumentError(f"feature_names must be a sequence of strings, got {feature_names!r}")
        names = tuple(feature_names)
        for j, f in enumerate(names):
            if not isinstance(f, str) or not f.strip():
                raise ArgumentError(f"feature_names[{j}] must be a non-empty string, got {f!r}")
        dup = next((f for j, f in enumerate(names) if f in names[:j]), None)
        if dup is not None:
            raise ArgumentError(f"feature_names has {dup!r} twice; every column needs its own name")
    X = _numeric(X, "X", names)
    y = _numeric(y, "y", None)
    if X.ndim != 2 or X.shape[1] < 1:
        raise ArgumentError(f"X must be [n_rows, n_features >= 1], got shape {X.shape}")
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1 or y.shape[0] != X.shape[0]:
        raise ArgumentError(f"y must be [n_rows={X.shape[0]}] (X's rows), got shape {y.shape}")
    if names is not None and len(names) != X.shape[1]:
        raise ArgumentError(f"feature_names has {len(names)} names but X has {X.shape[1]} columns")
    if X.shape[0] < MIN_TRAIN_ROWS:
        raise ArgumentError(f"X has {X.shape[0]} row(s); at least {MIN_TRAIN_ROWS} are needed to fit a model")
    for arr, label in ((X, "X"), (y, "y")):
        bad = ~np.isfinite(arr) | (np.abs(arr) > FLOAT32_MAX)
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            col = f" (column {_column_name(idx[1], names)})" if arr.ndim == 2 else ""
            what = (
                "NaN (a missing value?)"
                if np.isnan(arr[idx])
                else f"{float(arr[idx])!r}, not finite in float32"
            )
            raise ArgumentError(
                f"{label}[{', '.join(map(str, idx))}]{col} is {what} ({int(bad.sum())} such value(s) "
                f"in {label}): a non-finite value makes every tree's fitness the worst value"
            )
    names = names if names is not None else tuple(f"x{j}" for j in range(X.shape[1]))
    return X.astype(np.float32), y.astype(np.float32), names


def train_test_split(
    X: Any, y: Any, test_fraction: float = 0.25, seed: int = 0, *, stratify: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Hold out ``ceil(test_fraction * n)`` rows as a test set, chosen by ``seed``.

    Args:
        X: ``[n, ...]`` inputs; y: ``[n, ...]`` targets (or class labels with ``stratify``).
        test_fraction: in ``(0, 1)``.
        seed: int ``>= 0``; the same seed gives the same split on every machine (NumPy's PCG64).
        stratify: keep each class's share in both parts (``y`` holds class labels): class ``c``
            with ``n_c`` rows gets ``floor(n_test * n_c / n)`` test rows, and the test rows left
            over go to the classes with the largest remainders (ties to the smaller label).

    Returns:
        ``(X_train, y_train, X_test, y_test)`` (the order of :func:`evotensor.gp.sr_data`; note
        that scikit-learn's ``train_test_split`` returns ``X_train, X_test, y_train, y_test``),
        each part's rows in their original order.

    Raises:
        ArgumentError: ``test_fraction`` outside ``(0, 1)``; a split that would leave fewer than
            :data:`MIN_TRAIN_ROWS` training rows or no test row (the message says how many rows
            are needed); ``X`` and ``y`` with different numbers of rows.
    """
    fraction = check_real(test_fraction, "test_fraction", 0.0, 1.0, low_open=True, high_open=True)
    seed = check_int(seed, "seed", minimum=0)
    X, y = np.asarray(X), np.asarray(y)
    if X.ndim < 1 or y.ndim < 1 or X.shape[0] != y.shape[0]:
        raise ArgumentError(f"X and y must have the same number of rows, got shapes {X.shape} and {y.shape}")
    n = X.shape[0]
    n_test = math.ceil(fraction * n - 1e-9)  # 0.25 * 8 is 2, not 3 after float rounding
    if n_test < 1 or n - n_test < MIN_TRAIN_ROWS:
        need = MIN_TRAIN_ROWS + 1
        while need - math.ceil(fraction * need - 1e-9) < MIN_TRAIN_ROWS:
            need += 1
        raise ArgumentError(
            f"test_fraction={test_fraction!r} of {n} rows leaves {n - n_test} training and {n_test} test "
            f"row(s); a split needs at least {MIN_TRAIN_ROWS} training rows and 1 test row (at least "
            f"{need} rows with this test_fraction)"
        )
    rng = np.random.default_rng(seed)
    if not stratify:
        test = rng.permutation(n)[:n_test]
    else:
        if y.ndim != 1:
            raise ArgumentError(f"stratify=True needs class labels y [n], got shape {y.shape}")
        classes, label_index = np.unique(y, return_inverse=True)
        counts = np.bincount(label_index, minlength=len(classes))
        quota = n_test * counts / n
        take = np.floor(quota).astype(np.int64)
        order = np.lexsort((np.arange(len(classes)), -(quota - take)))  # largest remainder first
        take[order[: n_test - int(take.sum())]] += 1
        test = np.concatenate(
            [rng.permutation(np.flatnonzero(label_index == c))[: take[c]] for c in range(len(classes))]
        )
    is_test = np.zeros(n, bool)
    is_test[test] = True
    return X[~is_test], y[~is_test], X[is_test], y[is_test]
