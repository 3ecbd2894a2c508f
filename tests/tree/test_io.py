"""Printing, save/load, pickle and drawing."""

import io
import pickle
import zipfile

import jax.numpy as jnp
import matplotlib
import numpy as np
import pytest

import evotensor.tree as tt
from evotensor.tree import Tree

matplotlib.use("Agg")


def mixed():
    return Tree(
        a=jnp.arange(6.0).reshape(2, 3),
        x={"c": np.ones((3, 4), np.int16), "empty": Tree(), "s": np.float32(2.5)},
        n=3,
        f=1.5,
        flag=True,
        text="hello",
        nothing=None,
        odd={"a/b%c": np.zeros(2)},
    )


def test_save_load_roundtrip_restores_kinds(tmp_path):
    t = mixed()
    path = tmp_path / "t.npz"
    tt.save(t, path)
    with pytest.raises(ValueError, match=r"leaf at (nothing|text) is a pickled object"):
        tt.load(path)
    back = tt.load(path, allow_pickle=True)
    assert tt.equal(back, t)
    assert list(back.x.keys()) == ["c", "empty", "s"]
    assert isinstance(back.x.empty, Tree) and len(back.x.empty) == 0
    assert type(back.a) is type(t.a) and back.a.dtype == jnp.float32
    assert isinstance(back.x.c, np.ndarray) and back.x.c.dtype == np.int16
    assert type(back.n) is int and type(back.f) is float and back.flag is True
    assert isinstance(back.x.s, np.float32)
    assert back.text == "hello" and back.nothing is None
    np.testing.assert_array_equal(back.odd["a/b%c"], np.zeros(2))
    # path-keyed npz: other tools can read leaves by path
    with np.load(path) as data:
        assert "x/c" in data.files
        np.testing.assert_array_equal(data["x/c"], np.ones((3, 4)))


def test_save_load_file_objects_and_bad_files(tmp_path):
    buf = io.BytesIO()
    tt.save(Tree(a=np.arange(3)), buf)
    buf.seek(0)
    assert tt.equal(tt.load(buf), Tree(a=np.arange(3)))
    other = tmp_path / "plain.npz"
    np.savez(other, a=np.ones(2))
    with pytest.raises(ValueError, match="manifest"):
        tt.load(other)
    with pytest.raises(TypeError, match="Tree"):
        tt.save({"a": 1}, tmp_path / "x.npz")
    assert zipfile.is_zipfile(tmp_path / "plain.npz")


def test_bfloat16_roundtrip(tmp_path):
    t = Tree(w=jnp.ones(3, jnp.bfloat16))
    tt.save(t, tmp_path / "b.npz")
    back = tt.load(tmp_path / "b.npz")
    assert back.w.dtype == jnp.bfloat16 and tt.equal(back, t)


def test_pickle_keeps_shared_nodes():
    shared = Tree(c=np.ones(2))
    t = Tree(p=shared, q=shared)
    back = pickle.loads(pickle.dumps(t))
    assert back.p is back.q and tt.equal(back, t)


def test_repr_sorted_and_compact():
    t = Tree(b=np.zeros((2, 2), np.float32), a={"z": 1, "y": "long " * 40})
    text = repr(t)
    lines = text.splitlines()
    assert lines[0] == "<Tree keys=['a', 'b']>"
    assert lines[1].startswith("├── a: <Tree keys=['y', 'z']>")
    assert lines[2].startswith("│   ├── y: 'long long") and lines[2].endswith("...")
    assert lines[3] == "│   └── z: 1"
    assert lines[4] == "└── b: ndarray(shape=(2, 2), dtype=float32)"
    assert str(t) == text
    assert "'weird key'" in repr(Tree({"weird key": 1}))


def test_to_dot_and_draw():
    shared = Tree(c=np.ones(2))
    t = Tree(a=1, x={"c": np.zeros((2, 3))}, p=shared, q=shared)
    dot = tt.to_dot(t)
    assert dot.startswith('digraph "tree" {') and dot.rstrip().endswith("}")
    assert '[label="x"]' in dot and "shape=(2, 3)" in dot
    assert dot.count('label="Tree"') == 3  # root, x, and the shared node once
    ax = tt.draw(t)
    labels = [txt.get_text() for txt in ax.texts]
    assert "x" in labels and "Tree" in labels and any("shape=(2, 3)" in s for s in labels)
    import matplotlib.pyplot as plt

    plt.close("all")
