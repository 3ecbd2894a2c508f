"""PyTorch leaves and the evotensor.tree.torch proxy (runs only where torch is installed)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import evotensor.tree as tt  # noqa: E402
import evotensor.tree.torch  # noqa: E402,F401 - registers Tree with torch.utils._pytree
from evotensor.tree import Tree  # noqa: E402


def tensors():
    return Tree(a=torch.arange(6.0).reshape(2, 3), x={"c": torch.ones(2, 4)})


def test_torch_proxy_and_methods():
    t = tensors()
    s = tt.torch.sigmoid(t)
    assert torch.allclose(s.x.c, torch.sigmoid(torch.ones(2, 4)))
    assert tt.torch.nn.functional.relu(t - 3).a.tolist() == [[0.0, 0.0, 0.0], [0.0, 1.0, 2.0]]
    assert tt.torch.float32 is torch.float32
    summed = t.sum(dim=0)
    assert summed.a.tolist() == [3.0, 5.0, 7.0]
    assert t.shape.to_dict() == {"a": torch.Size([2, 3]), "x": {"c": torch.Size([2, 4])}}
    assert (torch.ones(3) + Tree(a=torch.ones(3))).a.tolist() == [2.0, 2.0, 2.0]
    assert tt.torch.cat([torch.ones(1), torch.ones(2)]).shape == (3,)  # no tree: unchanged
    st = tt.torch.stack([t, t * 2])  # a list of trees is subsided, like ttorch.stack
    assert st.x.c.shape == (2, 2, 4) and torch.equal(st.a[1], t.a * 2)


def test_torch_stack_concat_split_index():
    t = tensors()
    s = tt.stack([t, t * 2, t * 3])
    assert s.a.shape == (3, 2, 3) and isinstance(s.a, torch.Tensor)
    assert torch.equal(s.x.c[1], t.x.c * 2)
    c = tt.concatenate([t, t])
    assert c.a.shape == (4, 3)
    parts = tt.split(s, 3)
    assert len(parts) == 3 and parts[2].a.shape == (1, 2, 3)
    assert tt.equal(tt.concatenate(parts), s)
    uneven = tt.split(c, [1])
    assert [p.a.shape[0] for p in uneven] == [1, 3]
    assert tt.equal(tt.index(s, 1), t * 2)
    assert tt.index(s, 0, axis=1).a.shape == (3, 3)


def test_torch_constraints_astype_equal_save(tmp_path):
    t = tensors().with_constraints(tt.dtype(torch.float32), tt.shape_prefix(2), tt.device("cpu"))
    h = t.astype(torch.float16)
    assert h.a.dtype == torch.float16 and h.constraints[0] == tt.dtype("float16")
    h2 = t.astype("float64")
    assert h2.a.dtype == torch.float64
    with pytest.raises(tt.ConstraintError, match=r"x\.d: dtype is int64"):
        t.x.d = torch.ones(2, dtype=torch.int64)
    assert t[0].constraints[1:] == (tt.device("cpu"),)
    assert tt.equal(t, Tree(a=np.arange(6.0).reshape(2, 3), x={"c": np.ones((2, 4))}))
    tt.save(t, tmp_path / "t.npz")
    back = tt.load(tmp_path / "t.npz")
    assert isinstance(back.a, torch.Tensor) and torch.equal(back.a, t.a)


def test_torch_inplace_and_treelize():
    t = tensors()
    a = t.a
    t += 1
    assert t.a is a and t.a[0, 0].item() == 1.0
    stack = tt.treelize(torch.stack, subside=True)
    s = stack([t, t])
    assert s.x.c.shape == (2, 2, 4)
    chunks = tt.treelize(lambda x: torch.split(x, 1), rise=True)(t)
    assert isinstance(chunks, tuple) and len(chunks) == 2 and chunks[1].a.shape == (1, 3)


def test_torch_pytree_registration_and_torch_func():
    import torch.utils._pytree as tp

    t = tensors()
    leaves, spec = tp.tree_flatten(t)
    assert [x.shape for x in leaves] == [(2, 3), (2, 4)]
    back = tp.tree_unflatten(leaves, spec)
    assert isinstance(back, Tree) and tt.equal(back, t)
    doubled = tp.tree_map(lambda x: x * 2, t)
    assert isinstance(doubled.x, Tree) and torch.equal(doubled.a, t.a * 2)
    paths = [tp.keystr(p) for p, _ in tp.tree_flatten_with_path(t)[0]]
    assert paths == ["['a']", "['x']['c']"]
    g = torch.func.grad(lambda p: (p.a**2).sum() + p.x.c.sum())(t)
    assert isinstance(g, Tree) and torch.allclose(g.a, 2 * t.a) and torch.equal(g.x.c, torch.ones(2, 4))

    class Later(Tree):  # subclasses defined after the import are registered too
        pass

    assert isinstance(tp.tree_map(lambda x: x, Later(a=torch.ones(1))), Later)
