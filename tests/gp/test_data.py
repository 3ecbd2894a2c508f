"""User data: CSV loading, array checks and the deterministic (stratified) split (gp/data.py)."""

from __future__ import annotations

import csv
import math
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from evotensor.core.checks import ArgumentError
from evotensor.gp.data import MIN_TRAIN_ROWS, check_data, load_csv, train_test_split

GOOD = "a,b,y\n1,2,3\n4,5,6\n7,8,9\n"


def write(tmp_path, text, name="d.csv", encoding="utf-8"):
    path = tmp_path / name
    path.write_bytes(text.encode(encoding) if isinstance(text, str) else text)
    return path


# (label, file text, load_csv kwargs, every piece the message must hold)
BAD_CSV = [
    (
        "missing target",
        GOOD,
        {"target": "q"},
        ["target column 'q' is not in", "its columns are 'a', 'b', 'y'"],
    ),
    ("unknown feature", GOOD, {"target": "y", "features": ["a", "z"]}, ["features: column 'z' is not in"]),
    ("feature is target", GOOD, {"target": "y", "features": ["y"]}, ["'y' is the target column"]),
    ("feature twice", GOOD, {"target": "y", "features": ["a", "a"]}, ["column 'a' is listed twice"]),
    (
        "non-numeric",
        "a,b,y\n1,2,3\n4,abc,6\n",
        {},
        ["data row 2 (line 3), column 'b'", "'abc' is not a number"],
    ),
    ("underscore number", "a,b,y\n1,2,3\n4,1_000,6\n", {}, ["column 'b'", "'1_000' is not a number"]),
    ("empty cell", "a,b,y\n1,,3\n4,5,6\n7,8,9\n", {}, ["data row 1 (line 2), column 'b': missing value"]),
    ("NA marker", "a,b,y\n1,2,3\n4,5,NA\n7,8,9\n", {}, ["data row 2 (line 3), column 'y': missing value"]),
    ("nan cell", "a,b,y\n1,2,3\n4,5,6\nnan,8,9\n", {}, ["data row 3 (line 4), column 'a': missing value"]),
    (
        "inf cell",
        "a,b,y\n1,2,3\n-inf,5,6\n",
        {},
        ["data row 2 (line 3), column 'a'", "'-inf'", "not a finite"],
    ),
    ("float32 overflow", "a,b,y\n1,2,3\n4,5,1e39\n", {}, ["data row 2 (line 3), column 'y'", "'1e39'"]),
    ("ragged row", "a,b,y\n1,2,3\n4,5\n", {}, ["data row 2 (line 3) has 2 cells", "names 3 columns"]),
    ("blank lines", "a,b,y\n\n1,2,3\n\n4,x,6\n", {}, ["data row 2 (line 5), column 'b'"]),
    ("duplicate name", "a,b,a\n1,2,3\n4,5,6\n", {}, ["duplicate column name 'a'", "columns 1 and 3"]),
    ("unnamed column", "a,,y\n1,2,3\n4,5,6\n", {}, ["column 2 of the header has no name"]),
    ("empty file", "", {}, ["the file is empty"]),
    ("blank file", "\n\n", {}, ["the file is empty"]),
    ("header only", "a,b,y\n", {}, ["has a header but no data rows"]),
    ("one row", "a,b,y\n1,2,3\n", {}, ["1 usable data row(s)", f"at least {MIN_TRAIN_ROWS}"]),
    ("only target", "y\n1\n2\n", {"target": "y"}, ["no feature column besides the target 'y'"]),
    ("bad quoting", 'a,b,y\n1,"2,3\n', {}, ["not valid CSV"]),
    ("not utf-8", b"a,b,y\n1,\xff,3\n", {}, ["not a UTF-8 text file"]),
    ("bad target type", GOOD, {"target": 3}, ["target must be a column name"]),
    ("features a string", GOOD, {"features": "a"}, ["features must be a non-empty sequence"]),
    ("bad delimiter", GOOD, {"delimiter": ";;"}, ["delimiter must be one character"]),
    ("drop_missing not bool", GOOD, {"drop_missing": "yes"}, ["drop_missing must be a bool"]),
]


@pytest.mark.parametrize(("label", "text", "kwargs", "pieces"), BAD_CSV, ids=[c[0] for c in BAD_CSV])
def test_bad_csv_is_refused_naming_the_column_or_row(tmp_path, label, text, kwargs, pieces):
    path = write(tmp_path, text)
    with pytest.raises(ArgumentError) as err:
        load_csv(path, **kwargs)
    message = str(err.value)
    for piece in pieces:
        assert piece in message, (label, message)
    if label not in ("bad target type", "features a string", "bad delimiter", "drop_missing not bool"):
        assert str(path) in message or "features:" in message or "target column" in message, message


def test_unreadable_paths_name_the_path(tmp_path):
    for path, piece in (
        (tmp_path / "nope.csv", "no such file"),
        (tmp_path, "is a directory"),
    ):
        with pytest.raises(ArgumentError, match="no such file|is a directory") as err:
            load_csv(path)
        assert str(path) in str(err.value) and piece in str(err.value)
    with pytest.raises(ArgumentError, match="path must be a path"):
        load_csv("  ")


def test_csv_round_trip_keeps_every_float32_value(tmp_path):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(17, 3)).astype(np.float32) * np.float32([1, 1e-8, 1e20])
    y = rng.normal(size=17).astype(np.float32)
    path = tmp_path / "r.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["speed, km/h", "target", "mass", "angle"])  # a quoted name with a comma
        for row, t in zip(X, y):
            w.writerow([repr(float(row[0])), repr(float(t)), repr(float(row[1])), repr(float(row[2]))])
    X2, y2, names = load_csv(path, target="target")
    assert names == ("speed, km/h", "mass", "angle")
    assert X2.dtype == np.float32 and y2.dtype == np.float32
    np.testing.assert_array_equal(X2, X)
    np.testing.assert_array_equal(y2, y)
    # a chosen subset, in the chosen order
    X3, _, names3 = load_csv(path, target="target", features=["angle", "speed, km/h"])
    assert names3 == ("angle", "speed, km/h")
    np.testing.assert_array_equal(X3, X[:, [2, 0]])


def test_default_target_is_the_last_column_and_dialects_work(tmp_path):
    X, y, names = load_csv(
        write(tmp_path, "\ufeffa;b;y\r\n1;2;3\r\n4;5;6\r\n", encoding="utf-8"), delimiter=";"
    )
    assert names == ("a", "b")  # the byte-order mark is not part of the first name
    np.testing.assert_array_equal(y, [3, 6])
    np.testing.assert_array_equal(X, [[1, 2], [4, 5]])


def test_drop_missing_drops_only_rows_missing_a_used_cell_and_warns(tmp_path):
    text = "id,a,b,y\nx,1,2,3\nz,,5,6\nw,7,8,\nv,9,10,11\n"
    path = write(tmp_path, text)
    with pytest.warns(UserWarning, match=r"dropped 2 of 4 data rows .*data row 2, line 3"):
        X, y, names = load_csv(path, target="y", features=["a", "b"], drop_missing=True)
    np.testing.assert_array_equal(X, [[1, 2], [9, 10]])
    np.testing.assert_array_equal(y, [3, 11])
    # the non-numeric id column is never read when it is not a feature
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        X, _, _ = load_csv(write(tmp_path, "id,a,y\nx,1,3\nz,4,6\n", "e.csv"), target="y", features=["a"])
    np.testing.assert_array_equal(X, [[1], [4]])
    with (
        pytest.raises(ArgumentError, match="1 usable data row"),
        pytest.warns(UserWarning, match="dropped 1"),
    ):
        load_csv(write(tmp_path, "a,y\n1,\n2,3\n", "f.csv"), drop_missing=True)


BAD_ARRAYS = [
    ("nan in X", [[1, 2], [3, np.nan]], [1, 2], ("p", "q"), ["X[1, 1] (column 'q') is NaN"]),
    ("inf in X", [[1, np.inf], [3, 4]], [1, 2], None, ["X[0, 1] (column 1)", "inf"]),
    ("inf in y", [[1, 2], [3, 4]], [1, -np.inf], None, ["y[1] is -inf"]),
    ("overflow", [[1, 2], [3, 4e38]], [1, 2], None, ["X[1, 1]", "not finite in float32"]),
    (
        "string cell",
        np.array([[1, "u"], [3, 4]], dtype=object),
        [1, 2],
        ("p", "q"),
        ["X[0, 1] (column 'q') = 'u'"],
    ),
    ("bool cell", np.array([[1, True], [3, 4]], dtype=object), [1, 2], None, ["X[0, 1]", "is not a number"]),
    ("complex", np.ones((2, 2), complex), [1, 2], None, ["X must hold real numbers"]),
    ("1-d X", [1, 2, 3], [1, 2, 3], None, ["X must be [n_rows, n_features >= 1]"]),
    ("y rows", [[1], [2], [3]], [1, 2], None, ["y must be [n_rows=3]"]),
    ("one row", [[1, 2]], [1], None, ["X has 1 row(s)", "at least 2"]),
    ("names count", [[1, 2], [3, 4]], [1, 2], ("p",), ["feature_names has 1 names but X has 2 columns"]),
    ("names twice", [[1, 2], [3, 4]], [1, 2], ("p", "p"), ["feature_names has 'p' twice"]),
    ("empty name", [[1, 2], [3, 4]], [1, 2], ("p", " "), ["feature_names[1] must be a non-empty string"]),
    ("names string", [[1, 2], [3, 4]], [1, 2], "pq", ["feature_names must be a sequence of strings"]),
]


@pytest.mark.parametrize(("label", "X", "y", "names", "pieces"), BAD_ARRAYS, ids=[c[0] for c in BAD_ARRAYS])
def test_bad_arrays_are_refused_naming_the_cell(label, X, y, names, pieces):
    with pytest.raises(ArgumentError) as err:
        check_data(X, y, names)
    for piece in pieces:
        assert piece in str(err.value), (label, str(err.value))


def test_check_data_returns_float32_and_default_names():
    X, y, names = check_data([[1, 2], [3, 4], [5, 6]], [[1], [2], [3]])
    assert X.dtype == np.float32 and y.shape == (3,) and names == ("x0", "x1")


def test_split_is_a_deterministic_partition_of_ceil_fraction_rows():
    X = np.arange(40.0).reshape(20, 2)
    y = np.arange(20.0)
    a = train_test_split(X, y, 0.3, seed=7)
    b = train_test_split(X, y, 0.3, seed=7)
    c = train_test_split(X, y, 0.3, seed=8)
    for u, v in zip(a, b):
        np.testing.assert_array_equal(u, v)
    assert not np.array_equal(a[3], c[3])
    X_train, y_train, X_test, y_test = a
    assert len(y_test) == 6 and len(y_train) == 14  # ceil(0.3 * 20)
    assert sorted(np.concatenate([y_train, y_test]).tolist()) == y.tolist()
    np.testing.assert_array_equal(X_train[:, 0], 2 * y_train)  # rows stay whole
    assert np.all(np.diff(y_train) > 0) and np.all(np.diff(y_test) > 0)  # original order kept
    # a fraction that is exact in decimal is not rounded up by float error (0.1 * 30 = 3.0000000000000004)
    assert len(train_test_split(np.zeros((30, 1)), np.zeros(30), 0.1)[3]) == 3


@given(
    counts=st.lists(st.integers(1, 12), min_size=1, max_size=5),
    fraction=st.floats(0.05, 0.6),
    seed=st.integers(0, 2**32 - 1),
)
def test_stratified_split_gives_each_class_its_share(counts, fraction, seed):
    y = np.repeat(np.arange(len(counts)), counts).astype(np.float32)
    n, n_test = len(y), math.ceil(fraction * len(y) - 1e-9)
    if n - n_test < MIN_TRAIN_ROWS:
        with pytest.raises(ArgumentError, match="test_fraction"):
            train_test_split(np.zeros((n, 1)), y, fraction, seed, stratify=True)
        return
    _, y_train, _, y_test = train_test_split(np.arange(n)[:, None], y, fraction, seed, stratify=True)
    assert len(y_test) == n_test and len(y_train) == n - n_test
    got = np.bincount(y_test.astype(int), minlength=len(counts))
    quota = n_test * np.asarray(counts) / n
    assert np.all(got >= np.floor(quota)) and np.all(got <= np.ceil(quota)), (got, quota)
    # largest remainder: a class gets its extra row only if no class with a larger remainder went without
    extra = got - np.floor(quota)
    rem = quota - np.floor(quota)
    if extra.any() and (extra == 0).any():
        assert rem[extra == 1].min() >= rem[extra == 0].max() - 1e-9


@pytest.mark.parametrize(
    ("n", "fraction", "pieces"),
    [
        (3, 0.5, ["leaves 1 training and 2 test row(s)", "at least 4 rows with this test_fraction"]),
        (2, 0.25, ["leaves 1 training and 1 test row(s)", "at least 3 rows"]),
        (10, 0.0, ["test_fraction must be > 0"]),
        (10, 1.0, ["test_fraction must be < 1"]),
        (10, float("nan"), ["test_fraction must be a finite float32 number"]),
    ],
)
def test_split_with_too_few_rows_says_how_many_are_needed(n, fraction, pieces):
    with pytest.raises(ArgumentError) as err:
        train_test_split(np.zeros((n, 1)), np.zeros(n), fraction, 0)
    for piece in pieces:
        assert piece in str(err.value), str(err.value)
    with pytest.raises(ArgumentError, match="seed must be an int >= 0"):
        train_test_split(np.zeros((9, 1)), np.zeros(9), 0.25, -1)
    with pytest.raises(ArgumentError, match="same number of rows"):
        train_test_split(np.zeros((9, 1)), np.zeros(8), 0.25, 0)
