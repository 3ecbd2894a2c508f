"""The README's Tree tour runs and does what its comments say."""

import contextlib
import io
import re
from pathlib import Path

import numpy as np

import evotensor.tree as et

ROOT = Path(__file__).resolve().parents[2]
MARKER = "# evotensor-tree-tour"


def tour_source() -> str:
    """The tour's code block in README.md."""
    for path in (ROOT / "README.md",):
        if path.exists():
            for block in re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S):
                if block.startswith(MARKER):
                    return block
    raise AssertionError(f"no ```python block starting with {MARKER!r} in README.md")


def test_tour_runs_and_its_comments_hold():
    ns: dict = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(tour_source(), "tree_tour", "exec"), ns)
    printed = out.getvalue()
    assert ns["total"].to_dict() == {"a": 1.0, "b": 12.0, "c": 5.0}
    assert ns["sub"].to_dict() == {"x": [1, 3], "y": [2, 4]}
    assert [t.to_dict() for t in ns["back"]] == [{"x": 1, "y": 2}, {"x": 3, "y": 4}]
    assert "constraint shape_prefix(8) violated at obs.acc: shape (4, 3) does not start with (8,)" in printed
    assert "acc" not in ns["checked"].obs
    assert "[1. 3. 5.]" in printed
    assert ns["preds"].shape == (8,)
    assert isinstance(ns["grads"], et.Tree)
    np.testing.assert_allclose(ns["grads"].w, [6.0, 6.0, 6.0])  # d/dw mean((sum w)^2) = 2*3*1
