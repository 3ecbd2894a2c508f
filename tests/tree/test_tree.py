"""Tree: construction, access, operators, pytree behaviour under JAX transformations."""

import copy
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import evotensor.tree as tt
from evotensor.tree import Tree


def sample():
    return Tree({"a": np.arange(6.0).reshape(2, 3), "x": {"c": np.ones((2, 4)), "d": np.zeros(2)}})


# ---- construction and the copy/alias rule ---------------------------------------------------


def test_construction_from_dict_and_kwargs_sorts_keys():
    t = Tree({"z": 1, "b": {"y": 2, "a": 3}}, m=4)
    assert list(t.keys()) == ["b", "m", "z"]
    assert list(t.b.keys()) == ["a", "y"]
    assert isinstance(t.b, Tree)
    assert Tree(a=1, b=2).to_dict() == {"a": 1, "b": 2}
    assert len(Tree()) == 0


def test_construction_never_calls_repr_on_leaves():
    class NoRepr:
        def __repr__(self):
            raise AssertionError("repr called")

    t = Tree({"a": NoRepr(), "x": {"c": NoRepr()}})
    t.b = NoRepr()
    assert isinstance(t.x.c, NoRepr)


def test_non_string_keys_are_rejected_with_path():
    with pytest.raises(TypeError, match="strings"):
        Tree({1: 2})
    with pytest.raises(TypeError, match=r"x"):
        Tree({"x": {3: 1}})
    with pytest.raises(TypeError, match="dict or a Tree"):
        Tree([1, 2])


def test_copy_alias_rule():
    inner = Tree(c=np.ones(2))
    leaf = np.zeros(3)
    src = {"x": inner, "y": {"d": leaf}}
    t = Tree(src)
    assert t.x is inner  # Tree nodes are aliased
    assert t.y.d is leaf  # leaves are aliased
    src["y"]["e"] = 1  # dicts were copied into fresh nodes
    assert "e" not in t.y
    shallow = Tree(t)
    assert shallow is not t and shallow.x is t.x
    shallow.new = 1
    assert "new" not in t
    deep = copy.deepcopy(t)
    assert deep.x is not t.x and deep.y.d is not leaf
    np.testing.assert_array_equal(deep.y.d, leaf)
    c = copy.copy(t)
    assert c.x is t.x and c is not t


def test_access_set_delete_iteration():
    t = sample()
    assert t.x.c is t["x"]["c"]
    t.x.e = 5
    t["x"]["f"] = 6
    t["b"] = {"q": 1}
    assert isinstance(t.b, Tree) and t.b.q == 1
    assert list(t.x.keys()) == ["c", "d", "e", "f"]
    del t.x.e
    del t["x"]["f"]
    assert list(t.x) == ["c", "d"]
    assert "a" in t and "zz" not in t
    assert len(t) == 3
    assert [k for k, _ in t.items()] == list(t.keys()) == ["a", "b", "x"]
    assert t.get("zz", 7) == 7
    assert t.pop("b").q == 1 and "b" not in t
    assert t.pop("nope", None) is None
    with pytest.raises(KeyError, match="zz"):
        t["zz"]
    with pytest.raises(AttributeError):
        del t.zz
    with pytest.raises(KeyError):
        del t["zz"]


def test_inserting_keys_keeps_sorted_order():
    t = Tree(m=1)
    for k in ["z", "a", "q", "b"]:
        t[k] = k
    assert list(t.keys()) == sorted(["m", "z", "a", "q", "b"])
    leaves, treedef = jax.tree_util.tree_flatten(t)
    assert leaves == [t[k] for k in sorted(t.keys())]


def test_method_name_keys_are_reachable_and_methods_still_work():
    t = Tree({"keys": 1, "values": 2, "shape": np.ones(3)})
    assert t["keys"] == 1 and t["values"] == 2
    assert list(t.keys()) == ["keys", "shape", "values"]  # the method still wins over the key
    np.testing.assert_array_equal(t.shape, np.ones(3))  # a key wins over leaf attributes
    with pytest.raises(AttributeError, match=r"t\['keys'\]"):
        t.keys = 3
    t["keys"] = 3
    assert t["keys"] == 3


def test_escape_hatch_reaches_leaf_attributes():
    t = Tree({"shape": np.ones((2, 3)), "b": np.ones(4)})
    shapes = t.each.shape
    assert shapes["shape"] == (2, 3) and shapes.b == (4,)
    # a leaf method named like a Tree method (astype) is reachable through `each`
    t2 = Tree(a=np.arange(3))
    assert t2.each.astype(np.float32).a.dtype == np.float32
    assert "shape" in dir(t.each)


def test_leaf_attribute_and_method_forwarding():
    t = sample()
    assert t.shape.to_dict() == {"a": (2, 3), "x": {"c": (2, 4), "d": (2,)}}
    s = t.sum(axis=0)
    np.testing.assert_array_equal(s.a, t.a.sum(axis=0))
    np.testing.assert_array_equal(s.x.c, t.x.c.sum(axis=0))
    assert t.reshape(-1).x.c.shape == (8,)
    with pytest.raises(AttributeError, match=r"x\.e.*no attribute 'shape'"):
        _ = Tree(a=np.ones(2), x={"e": 3}).shape
    assert not hasattr(Tree(a=1), "__jax_array__")
    assert not hasattr(Tree(a=1), "_private")


def test_non_string_indexing_indexes_every_leaf():
    t = sample()
    np.testing.assert_array_equal(t[0].a, t.a[0])
    np.testing.assert_array_equal(t[0].x.c, t.x.c[0])
    assert t[:1].x.c.shape == (1, 4)
    idx = np.array([1, 0, 1])
    assert t[idx].a.shape == (3, 3)
    np.testing.assert_array_equal(t[idx].x.d, t.x.d[idx])
    t[0] = 7.0  # numpy leaves: in place
    assert (t.a[0] == 7).all() and (t.x.c[0] == 7).all()
    t[1] = Tree(a=1.0, x={"c": 2.0, "d": 3.0})
    assert t.x.d[1] == 3.0 and t.a[1, 2] == 1.0


def test_jax_leaves_update_through_at():
    t = Tree(a=jnp.zeros(3), b=jnp.ones((3, 2)))
    u = t.at[1].set(5.0)
    assert float(u.a[1]) == 5.0 and float(u.b[1, 0]) == 5.0
    with pytest.raises(TypeError):
        t[0] = 1.0


def test_operators_are_leafwise_and_reflected():
    t = Tree(a=np.array([1.0, 2.0]), x={"c": np.array([3.0])})
    u = Tree(a=np.array([10.0, 20.0]), x={"c": np.array([30.0])})
    ref = {"a": t.a + u.a, "c": t.x.c + u.x.c}
    s = t + u
    np.testing.assert_array_equal(s.a, ref["a"])
    np.testing.assert_array_equal(s.x.c, ref["c"])
    np.testing.assert_array_equal((1 - t).a, 1 - t.a)
    np.testing.assert_array_equal((2**t).x.c, 2**t.x.c)
    np.testing.assert_array_equal((np.ones(2) + Tree(a=t.a)).a, 1 + t.a)  # numpy defers
    np.testing.assert_array_equal((jnp.ones(2) * Tree(a=t.a)).a, t.a)  # jax defers
    np.testing.assert_array_equal((-t).a, -t.a)
    np.testing.assert_array_equal(abs(-t).a, t.a)
    np.testing.assert_array_equal((t @ t).a, t.a @ t.a)
    q, r = divmod(t, 2)
    np.testing.assert_array_equal(q.a, t.a // 2)
    ti = Tree(a=np.array([5, 6]))
    np.testing.assert_array_equal((ti & 3).a, ti.a & 3)
    np.testing.assert_array_equal((~ti).a, ~ti.a)
    np.testing.assert_array_equal((ti << 1).a, ti.a << 1)
    assert round(Tree(a=1.26), 1).a == 1.3


def test_comparisons_are_leafwise_and_equal_is_bool():
    t = Tree(a=np.array([1, 2]), x={"c": np.array([3])})
    eq = t == t
    assert isinstance(eq, Tree)
    assert eq.a.all() and eq.x.c.all()
    lt = t < 2
    np.testing.assert_array_equal(lt.a, [True, False])
    assert tt.equal(t, Tree(a=np.array([1, 2]), x={"c": np.array([3])})) is True
    assert tt.equal(t, t + 1) is False
    assert tt.equal(t, Tree(a=np.array([1, 2]))) is False
    assert tt.equal(Tree(a=np.array([1, 2])), Tree(a=np.array([[1, 2]]))) is False
    with pytest.raises(TypeError, match="ambiguous"):
        bool(t == t)


def test_inplace_operators_keep_identity():
    t = Tree(a=np.array([1.0]), x={"c": np.array([2.0])})
    x_node = t.x
    a_leaf = t.a
    t_id = id(t)
    t += 1
    assert id(t) == t_id and t.x is x_node and t.a is a_leaf  # numpy leaves updated in place
    assert t.a[0] == 2.0 and t.x.c[0] == 3.0
    j = Tree(a=jnp.ones(2), x={"c": jnp.ones(1)})
    jx = j.x
    j *= 3
    assert j.x is jx and float(j.a[0]) == 3.0


def test_call_tree_of_callables():
    t = Tree(f=lambda v: v + 1, g=lambda v: v * 2)
    assert t(3).to_dict() == {"f": 4, "g": 6}
    assert t(Tree(f=1, g=10)).to_dict() == {"f": 2, "g": 20}


def test_repr_shows_shape_dtype_and_shared_nodes_once():
    shared = Tree(c=np.ones((3, 4), dtype=np.float32))
    t = Tree(a=jnp.zeros((2, 3)), p=shared, q=shared, s="hello")
    text = repr(t)
    assert "shape=(2, 3)" in text and "dtype=float32" in text
    assert text.index("a:") < text.index("p:") < text.index("q:") < text.index("s:")
    assert "same node as p" in text
    assert text.count("shape=(3, 4)") == 1
    assert "'hello'" in text


# ---- pytree ---------------------------------------------------------------------------------


def test_pytree_flatten_sorted_with_key_paths():
    t = Tree({"b": jnp.ones(2), "a": {"z": jnp.zeros(1), "c": jnp.ones(3)}})
    leaves = jax.tree_util.tree_leaves(t)
    assert [x.shape for x in leaves] == [(3,), (1,), (2,)]
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(t)[0]]
    assert paths == ["['a']['c']", "['a']['z']", "['b']"]
    # equal logical trees built in different orders have equal treedefs
    u = Tree(a=Tree(c=1, z=2), b=3)
    v = Tree()
    v.b = 3
    v.a = {"z": 2, "c": 1}
    assert jax.tree_util.tree_structure(u) == jax.tree_util.tree_structure(v)
    back = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(t), leaves)
    assert isinstance(back, Tree) and tt.equal(back, t)


def test_treedef_aux_is_hashable_and_ignores_constraints():
    t = Tree(a=np.ones(2, np.float32))
    c = t.with_constraints(tt.dtype("float32"))
    sa, sb = jax.tree_util.tree_structure(t), jax.tree_util.tree_structure(c)
    assert sa == sb and hash(sa) == hash(sb)


@jax.jit
def _affine(t):
    return t * 2 + 1


def test_jit_tree_in_and_out():
    t = Tree(a=jnp.ones((2, 3)), x={"c": jnp.arange(4.0)})
    out = _affine(t)
    assert isinstance(out, Tree) and isinstance(out.x, Tree)
    np.testing.assert_allclose(out.x.c, np.arange(4.0) * 2 + 1)
    assert _affine._cache_size() >= 1
    before = _affine._cache_size()
    _affine(Tree(x={"c": jnp.zeros(4)}, a=jnp.zeros((2, 3))))  # same structure: no retrace
    assert _affine._cache_size() == before


def test_jit_with_leafwise_comparison_inside():
    f = jax.jit(lambda t, u: jnp.where(tt.jnp.all(t == u).a, 1.0, 0.0))
    t = Tree(a=jnp.ones(2))
    assert float(f(t, t)) == 1.0
    assert float(f(t, t + 1)) == 0.0


def test_vmap_with_prefix_in_axes_tree():
    t = Tree(a=jnp.arange(12.0).reshape(4, 3), w={"b": jnp.ones(3), "c": jnp.arange(4.0)})
    f = jax.vmap(lambda t: t.a * t.w.b + t.w.c, in_axes=(Tree(a=0, w=Tree(b=None, c=0)),))
    out = f(t)
    ref = t.a * t.w.b[None] + t.w.c[:, None]
    np.testing.assert_allclose(out, ref)
    # a subtree prefix: a leaf axis standing for a whole subtree
    g = jax.vmap(lambda t: t.a.sum() + t.w.b.sum(), in_axes=(Tree(a=0, w=None),))
    t2 = Tree(a=jnp.ones((5, 2)), w={"b": jnp.ones(3)})
    np.testing.assert_allclose(g(t2), np.full(5, 5.0))
    # vmap returning a Tree
    h = jax.vmap(lambda x: Tree(sq=x**2, neg=-x))
    r = h(jnp.arange(3.0))
    np.testing.assert_allclose(r.sq, [0.0, 1.0, 4.0])


def test_grad_returns_tree():
    def loss(p):
        return jnp.sum(p.w**2) + jnp.sum(jnp.sin(p.sub.b))

    p = Tree(w=jnp.array([1.0, -2.0]), sub={"b": jnp.array([0.0, 1.0])})
    g = jax.grad(loss)(p)
    assert isinstance(g, Tree) and isinstance(g.sub, Tree)
    np.testing.assert_allclose(g.w, 2 * p.w)
    np.testing.assert_allclose(g.sub.b, np.cos(p.sub.b), rtol=1e-6)


def test_scan_and_cond_and_tree_map():
    def step(carry, x):
        new = carry + x
        return new, new.a

    init = Tree(a=jnp.zeros(()), b=jnp.ones(2))
    xs = Tree(a=jnp.arange(4.0), b=jnp.ones((4, 2)))
    final, ys = jax.lax.scan(step, init, xs)
    assert float(final.a) == 6.0 and final.b.tolist() == [5.0, 5.0]
    np.testing.assert_allclose(ys, [0.0, 1.0, 3.0, 6.0])
    out = jax.lax.cond(jnp.array(False), lambda t: t + 1, lambda t: t - 1, init)
    assert float(out.a) == -1.0 and isinstance(out, Tree)
    m = jax.tree.map(lambda x: x.shape, xs)
    assert m.to_dict() == {"a": (4,), "b": (4, 2)}
    # prefix broadcasting in jax.tree.map: a leaf of the first tree faces a subtree of the second
    pref = jax.tree.map(
        lambda p, sub: sub * p, Tree(a=2.0, n=3.0), Tree(a=jnp.ones(1), n=Tree(c=jnp.ones(2)))
    )
    assert float(pref.n.c[0]) == 3.0 and float(pref.a[0]) == 2.0


def test_unflatten_accepts_placeholders():
    treedef = jax.tree_util.tree_structure(Tree(a=1, b=Tree(c=2)))
    odd = jax.tree_util.tree_unflatten(treedef, [object(), None])
    assert isinstance(odd, Tree) and odd.b.c is None


def test_pickle_roundtrip():
    t = Tree(a=np.arange(3), x={"c": jnp.ones(2), "s": "text"})
    t2 = pickle.loads(pickle.dumps(t))
    assert tt.equal(t, t2)
    c = Tree(a=np.ones(2, np.float32)).with_constraints(tt.dtype("float32"), tt.shape_prefix(2))
    c2 = pickle.loads(pickle.dumps(c))
    assert c2.constraints == c.constraints


def test_subclass_is_registered_and_keeps_class():
    class Obs(Tree):
        def total(self):
            return sum(float(jnp.sum(v)) for v in jax.tree_util.tree_leaves(self))

    o = Obs(a=jnp.ones(2), b={"c": jnp.ones(3)})
    assert isinstance(o.b, Obs)
    assert o.total() == 5.0
    out = jax.jit(lambda o: o * 2)(o)
    assert type(out) is Obs and type(out.b) is Obs
    assert type(o + 1) is Obs
    assert Obs({"total": 1})["total"] == 1 and callable(Obs({"total": 1}).total)


def test_keyword_keys_named_like_parameters_and_raw_dict_leaves():
    t = Tree(data=1, each=2, constraints=3)
    assert t["data"] == 1 and t.data == 1
    assert t["each"] == 2 and not isinstance(t.each, int)  # `each` stays the escape hatch
    cfg = Tree(opt=tt.raw({"lr": 0.1}), net={"w": 1})
    assert cfg.opt == {"lr": 0.1} and isinstance(cfg.net, Tree)
    cfg.extra = tt.raw({"k": 1})
    assert cfg.extra == {"k": 1}


def test_tree_as_evaluation_info_under_jit():
    from evotensor.core import Evaluation

    ev = Evaluation(fitness=jnp.zeros(4), info=Tree(steps=jnp.arange(4), extra={"x": jnp.ones((4, 2))}))
    out = jax.jit(lambda e: e.replace(info=e.info * 2))(ev)
    assert isinstance(out.info, Tree) and isinstance(out.info.extra, Tree)
    np.testing.assert_array_equal(out.info.steps, np.arange(4) * 2)


# ---- hot paths: the inlined set fast path and the pytree callbacks -------------------------------


class _Sub(Tree):
    pass


@pytest.mark.parametrize("by", ["attr", "item"])
def test_set_on_existing_key_fast_path_matches_checked_path(by):
    """Replacing an existing child (the inlined fast path) behaves as inserting it afresh would."""
    from collections import OrderedDict

    def put(t, k, v):
        if by == "attr":
            setattr(t, k, v)
        else:
            t[k] = v

    values = [
        np.ones(2),  # plain leaf: replaced in place
        {"z": 1, "b": 2},  # dict: becomes a subtree of the node's class
        OrderedDict(z=1, b=2),  # dict subclass: converted as well
        tt.raw({"k": 1}),  # raw: unwrapped, stored as a leaf
        Tree(q=3),  # Tree: aliased
    ]
    for v in values:
        t = _Sub(a=0, m=0, z=0)
        put(t, "m", v)  # existing key
        ref = _Sub(a=0, z=0)
        put(ref, "m", v)  # new key: always the checked path (set_child)
        assert list(t.keys()) == list(ref.keys()) == ["a", "m", "z"]
        assert type(t.m) is type(ref.m)
        if isinstance(ref.m, Tree):
            assert tt.equal(t.m, ref.m) and list(t.m.keys()) == list(ref.m.keys())
            if isinstance(v, dict):
                assert type(t.m) is _Sub
            else:
                assert t.m is v
        elif isinstance(v, tt.raw):
            assert t.m == v.value and t.m is v.value
        else:
            assert t.m is v


def test_set_on_existing_key_named_like_a_method_still_refused():
    t = Tree(a=1)
    t["keys"] = 1  # reachable by item
    with pytest.raises(AttributeError, match=r"t\['keys'\]"):
        t.keys = 2  # an existing key does not bypass the reserved-name check
    assert t["keys"] == 1
    t["keys"] = 2
    assert t["keys"] == 2
    with pytest.raises(AttributeError, match=r"t\['_cons'\]"):
        t._cons = ("not constraints",)  # the constraint slot cannot be set by attribute
    assert t.constraints == ()


def test_set_on_existing_key_of_constrained_node_is_checked():
    t = Tree(a=np.ones(2, np.float32), b=np.ones(2, np.float32)).with_constraints(tt.dtype("float32"))
    old = t.a
    for setter in (lambda: setattr(t, "a", np.ones(2, np.int32)), lambda: t.__setitem__("a", np.ones(2))):
        with pytest.raises(tt.ConstraintError, match=r"violated at a"):
            setter()
        assert t.a is old


def test_pytree_callbacks_one_level():
    from jax._src.tree_util import flatten_one_level, flatten_one_level_with_keys

    t = _Sub({"b": np.ones(2), "a": {"c": 1}, "x": 3})
    children, aux = flatten_one_level(t)
    children = list(children)
    assert [id(c) for c in children] == [id(v) for v in t.values()]
    assert aux == ("a", "b", "x") and hash(aux) == hash(("a", "b", "x"))
    keyed, aux_k = flatten_one_level_with_keys(t)
    assert aux_k == aux
    assert [k.key for k, _ in keyed] == ["a", "b", "x"]
    assert [id(v) for _, v in keyed] == [id(v) for v in t.values()]
    # leaves from the fast flatten and from the keyed flatten agree, in the same order
    leaves = jax.tree_util.tree_leaves(t)
    with_path = jax.tree_util.tree_flatten_with_path(t)[0]
    assert [id(x) for x in leaves] == [id(x) for _, x in with_path]


def test_unflattened_nodes_are_complete_trees():
    t = _Sub(a=jnp.ones(2), x={"c": jnp.zeros(3)})
    leaves, treedef = jax.tree_util.tree_flatten(t)
    for back in (jax.tree_util.tree_unflatten(treedef, leaves), jax.jit(lambda u: u)(t)):
        assert type(back) is _Sub and type(back.x) is _Sub
        assert back.constraints == () and back.x.constraints == ()
        assert list(back.keys()) == ["a", "x"]
        back.a = 5  # the set fast path reads the constraint slot: it must be initialised
        back.x.d = 1
        assert back.a == 5 and list(back.x.keys()) == ["c", "d"]
        assert "a" in t and t.a is not back.a
