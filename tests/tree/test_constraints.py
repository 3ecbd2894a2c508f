"""Constraints: attached, inherited, enforced on construction and set, derived by operations."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import evotensor.tree as tt
from evotensor.tree import ConstraintError, Tree


def rollout(T=4, B=3):
    return Tree(
        obs=np.zeros((T, B, 5), np.float32),
        reward=np.zeros((T, B), np.float32),
        agents={"pos": np.zeros((T, B, 2, 3), np.float32)},
    )


def test_attach_checks_every_leaf_and_names_path():
    t = rollout()
    c = t.with_constraints(tt.dtype("float32"), tt.shape_prefix(4, 3))
    assert c.constraints == (tt.dtype(np.float32), tt.shape_prefix(4, 3))
    assert c.agents.constraints == c.constraints  # inherited by the subtree node
    assert t.constraints == ()  # the original is untouched
    bad = Tree(a=np.zeros((4, 3)), x={"y": np.zeros((4, 2), np.float32)})
    with pytest.raises(ConstraintError, match=r"shape_prefix\(4, 3\).*x\.y.*\(4, 2\)") as info:
        bad.with_constraints(tt.shape_prefix(4, 3))
    assert info.value.path == ("x", "y")
    with pytest.raises(ConstraintError, match=r"dtype\('float32'\) violated at a: dtype is float64"):
        bad.with_constraints(tt.dtype(jnp.float32))


def test_set_is_checked_and_rolled_back():
    c = rollout().with_constraints(tt.dtype("float32"), tt.shape_prefix(4, 3))
    c.extra = np.ones((4, 3, 7), np.float32)  # fine
    with pytest.raises(ConstraintError, match=r"violated at agents\.vel"):
        c.agents.vel = np.ones((4, 2), np.float32)
    assert "vel" not in c.agents
    old = c.reward
    with pytest.raises(ConstraintError, match=r"reward: dtype is int64"):
        c["reward"] = np.ones((4, 3), np.int64)
    assert c.reward is old
    with pytest.raises(ConstraintError, match=r"new\.deep\.leaf"):
        c.new = {"deep": {"leaf": np.ones((2, 3), np.float32)}}
    assert "new" not in c
    c.new = {"deep": {"leaf": np.ones((4, 3), np.float32)}}
    # the inserted subtree carries the inherited constraints: deeper sets are checked too
    with pytest.raises(ConstraintError, match=r"new\.deep\.z"):
        c.new.deep.z = np.ones(1, np.float32)


def test_inserting_a_subtree_does_not_mutate_the_callers_tree():
    c = Tree(a=np.ones((2,), np.float32)).with_constraints(tt.dtype("float32"))
    mine = Tree(b=np.ones(3, np.float32))
    c.sub = mine
    assert mine.constraints == () and c.sub.constraints == (tt.dtype("float32"),)
    mine.z = np.ones(1, np.int32)  # my tree is unconstrained
    assert "z" not in c.sub


def test_inherited_vs_node_constraints():
    same = tt.node_predicate(lambda n: n.anchor.shape == n.positive.shape, "same_shape")
    m = Tree(anchor=np.ones((8, 4)), positive=np.ones((8, 4)), inner={"k": np.ones(3)})
    c = m.with_constraints(same, tt.predicate(lambda x: x.ndim >= 1, "at_least_1d"))
    assert same in c.constraints and same not in c.inner.constraints  # not inherited
    with pytest.raises(ConstraintError, match=r"node_predicate\(same_shape\) violated at <root>"):
        c.positive = np.ones((8, 5))
    assert c.positive.shape == (8, 4)
    c.inner.k = np.ones((2, 2))  # node constraint of the root does not reach here
    with pytest.raises(ConstraintError, match=r"predicate\(at_least_1d\).*inner\.k"):
        c.inner.k = np.float64(1.0)
    with pytest.raises(ConstraintError, match="same_shape"):
        del c.anchor
    assert "anchor" in c


def test_ndim_device_and_predicate_errors():
    cpu = jax.devices("cpu")[0]  # explicitly: a GPU host puts new arrays on its GPU
    t = Tree(a=jax.device_put(jnp.ones((2, 3)), cpu), b=jax.device_put(jnp.ones((2, 2)), cpu))
    assert t.with_constraints(tt.ndim(2), tt.device("cpu")).constraints[1] == tt.device("cpu:0")
    with pytest.raises(ConstraintError, match=r"ndim\(3\) violated at a: ndim is 2"):
        t.with_constraints(tt.ndim(3))
    with pytest.raises(ConstraintError, match=r"device\('gpu:0'\).*expected gpu:0"):
        t.with_constraints(tt.device("gpu:0"))
    assert t.with_constraints(tt.device(cpu)).constraints == (tt.device("cpu:0"),)
    # the default device, whatever it is (a jax Device names its platform and id)
    default = jax.devices()[0]
    on_default = Tree(a=jnp.ones(2)).with_constraints(tt.device(default))
    assert on_default.constraints == (tt.device(f"{default.platform}:{default.id}"),)
    with pytest.raises(ConstraintError, match=r"predicate\(nonneg\) violated at b: predicate is false"):
        Tree(a=t.a, b=-t.b).with_constraints(tt.predicate(lambda x: bool((x >= 0).all()), "nonneg"))
    with pytest.raises(ConstraintError, match="raised"):
        Tree(a="text").with_constraints(tt.predicate(lambda x: x.ndim == 0, "scalar"))
    with pytest.raises(ConstraintError, match="has no dtype"):
        Tree(a="text").with_constraints(tt.dtype("float32"))
    with pytest.raises(TypeError, match="Constraint objects"):
        t.with_constraints("float32")
    with pytest.raises(ValueError, match="non-negative"):
        tt.shape_prefix(-1)


def test_validate_catches_in_place_mutation():
    arr = np.zeros(3)
    c = Tree(a=arr).with_constraints(tt.predicate(lambda x: bool((x == 0).all()), "zero"))
    c.a[1] = 5.0  # invisible to the tree
    with pytest.raises(ConstraintError, match=r"zero.*at a"):
        c.validate()
    c.a[1] = 0.0
    assert c.validate() is c


def test_indexing_derives_shape_prefix_ndim_dtype():
    c = rollout(T=4, B=3).with_constraints(tt.dtype("float32"), tt.shape_prefix(4, 3), tt.device("cpu"))
    assert c[0].constraints == (tt.dtype("float32"), tt.shape_prefix(3), tt.device("cpu"))
    assert c[1:3].constraints[1] == tt.shape_prefix(2, 3)
    assert c[::2].constraints[1] == tt.shape_prefix(2, 3)
    idx = np.array([0, 0, 1, 2, 3, 3, 1])
    assert c[idx].constraints[1] == tt.shape_prefix(7, 3)
    assert c[:, 0].constraints[1] == tt.shape_prefix(4)
    assert c[0, 0].constraints == (tt.dtype("float32"), tt.device("cpu"))  # prefix fully consumed
    mask = np.array([True, False, True, True])
    assert c[mask].constraints[1] == tt.shape_prefix(None, 3)
    assert c[None].constraints[1] == tt.shape_prefix(1, 4, 3)
    assert c[..., 0].constraints == (tt.dtype("float32"), tt.device("cpu"))
    # derived constraints hold and keep being enforced
    sub = c[1:3]
    sub.validate()
    with pytest.raises(ConstraintError, match="does not start with"):
        sub.obs = np.zeros((4, 3, 5), np.float32)
    # index along another axis
    assert tt.index(c, 1, axis=1).constraints[1] == tt.shape_prefix(4)
    nd = Tree(a=np.zeros((4, 3))).with_constraints(tt.ndim(2))
    assert nd[0].constraints == (tt.ndim(1),) and nd[:, None].constraints == (tt.ndim(3),)


def test_astype_derives_dtype():
    c = rollout().with_constraints(tt.dtype("float32"), tt.shape_prefix(4, 3))
    h = c.astype(np.float16)
    assert h.constraints == (tt.dtype("float16"), tt.shape_prefix(4, 3))
    assert h.obs.dtype == np.float16 and h.agents.pos.dtype == np.float16
    h.validate()
    with pytest.raises(ConstraintError):
        h.reward = np.zeros((4, 3), np.float32)


def test_no_checks_inside_traced_code():
    c = Tree(a=jnp.ones((4, 2))).with_constraints(
        tt.shape_prefix(4), tt.predicate(lambda x: bool(x.sum() > 0), "pos")
    )

    @jax.jit
    def f(t):
        # attaching and setting under jit never evaluates predicates on tracers
        u = Tree(a=t.a * 0).with_constraints(tt.predicate(lambda x: bool(x.sum() > 0), "pos"))
        u.b = t.a[:1]
        return u.a + u.b.sum()

    out = f(c)
    assert out.shape == (4, 2)
    # jit outputs are fresh unconstrained trees (the pytree aux data holds only the keys)
    g = jax.jit(lambda t: t * 2)(c)
    assert g.constraints == ()


def test_operations_without_proof_drop_constraints():
    c = Tree(a=np.ones((2, 3), np.float32)).with_constraints(tt.dtype("float32"))
    assert (c + 1).constraints == ()
    assert tt.map(c, lambda x: x).constraints == ()
    assert Tree(c).constraints == c.constraints  # a shallow copy keeps them


def test_stack_concatenate_split_derive_constraints():
    c = rollout(T=4, B=3).with_constraints(tt.dtype("float32"), tt.shape_prefix(4, 3), tt.device("cpu"))
    s = tt.stack([c, c, c])
    assert s.constraints == (tt.dtype("float32"), tt.shape_prefix(3, 4, 3), tt.device("cpu"))
    assert s.agents.constraints == s.constraints
    s.validate()
    assert tt.stack([c, c], axis=1).constraints[1] == tt.shape_prefix(4, 2, 3)
    cat = tt.concatenate([c, c])
    assert cat.constraints[1] == tt.shape_prefix(8, 3)
    cat.validate()
    with pytest.raises(ConstraintError, match="does not start with"):
        cat.reward = np.zeros((4, 3), np.float32)
    halves = tt.split(c, 2)
    assert halves[0].constraints[1] == tt.shape_prefix(2, 3)
    halves[1].validate()
    uneven = tt.split(c, [1])
    assert uneven[0].constraints[1] == tt.shape_prefix(None, 3)
    # inputs that disagree give an unconstrained result
    assert tt.stack([c, rollout()]).constraints == ()
    nd = Tree(a=np.zeros((2, 3))).with_constraints(tt.ndim(2))
    assert tt.stack([nd, nd]).constraints == (tt.ndim(3),)
    assert tt.concatenate([nd, nd]).constraints == (tt.ndim(2),)
