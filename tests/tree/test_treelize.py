"""treelize: policies, missing, inherit, method/class forms, proxy modules."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import evotensor.tree as tt
from evotensor.tree import Tree, treelize

# ---- a slow, obviously correct reference on nested dicts ------------------------------------

_NOT_GIVEN = object()


def ref_apply(fn, args, mode, missing=_NOT_GIVEN):
    """Reference semantics on nested dicts (dict = subtree), written from the specification."""
    dicts = [a for a in args if isinstance(a, dict)]
    if not dicts:
        return fn(*args)
    keysets = [set(d) for d in dicts]
    if mode == "strict":
        assert all(k == keysets[0] for k in keysets)
        keys = keysets[0]
    elif mode == "inner":
        keys = set.intersection(*keysets)
    elif mode == "outer":
        keys = set.union(*keysets)
    else:
        keys = keysets[0]
    out = {}
    for k in sorted(keys):
        sub = []
        for a in args:
            if isinstance(a, dict):
                if k in a:
                    sub.append(a[k])
                else:
                    assert missing is not _NOT_GIVEN
                    sub.append(missing() if callable(missing) else missing)
            else:
                sub.append(a)
        out[k] = ref_apply(fn, sub, mode, missing)
    return out


keys_st = st.sampled_from(["a", "b", "c", "x"])
nested = st.recursive(
    st.integers(-5, 5),
    lambda children: st.dictionaries(keys_st, children, min_size=0, max_size=3),
    max_leaves=8,
).filter(lambda v: isinstance(v, dict))


@settings(max_examples=60, deadline=None)
@given(nested, nested, st.sampled_from(["inner", "outer", "left"]))
def test_policies_match_reference(a, b, mode):
    missing = 100

    def f(x, y):
        return (x, y)  # keep both operands visible

    got = treelize(f, mode=mode, missing=missing)(Tree(a), Tree(b))
    want = ref_apply(f, [a, b], mode, missing)
    assert (got.to_dict() if isinstance(got, Tree) else got) == want


@settings(max_examples=40, deadline=None)
@given(nested)
def test_strict_single_tree_matches_reference(a):
    got = treelize(lambda x, k: x * k)(Tree(a), 3)
    assert got.to_dict() == ref_apply(lambda x, k: x * k, [a, 3], "strict")


# ---- policies at nested levels ---------------------------------------------------------------


def test_no_tree_argument_calls_fn_unchanged():
    calls = []

    def f(*args, **kwargs):
        calls.append((args, kwargs))
        return "raw"

    assert treelize(f)(1, b=[2]) == "raw"
    assert calls == [((1,), {"b": [2]})]


def test_strict_error_names_first_differing_path():
    f = treelize(lambda a, b: a + b)
    with pytest.raises(KeyError, match=r"at x\.y.*'q'"):
        f(Tree(a=1, x={"y": {"p": 1, "q": 2}}), Tree(a=1, x={"y": {"p": 1}}))


def test_inner_outer_left_nested_with_missing_value():
    t1 = Tree(a=1, x={"c": 2, "d": 3})
    t2 = Tree(a=10, b=20, x={"c": 30, "e": 40})
    add = lambda a, b: a + b  # noqa: E731
    inner = treelize(add, mode="inner")(t1, t2)
    assert inner.to_dict() == {"a": 11, "x": {"c": 32}}
    outer = treelize(add, mode="outer", missing=0)(t1, t2)
    assert outer.to_dict() == {"a": 11, "b": 20, "x": {"c": 32, "d": 3, "e": 40}}
    left = treelize(add, mode="left", missing=0)(t1, t2)
    assert left.to_dict() == {"a": 11, "x": {"c": 32, "d": 3}}
    right_first = treelize(add, mode="left", missing=0)(t2, t1)
    assert right_first.to_dict() == {"a": 11, "b": 20, "x": {"c": 32, "e": 40}}


def test_left_mode_orders_positional_then_keywords_by_name():
    f = treelize(lambda *args, **kw: (args, sorted(kw.items())), mode="left", missing=None)
    r = f(zeta=Tree(z=1), alpha=Tree(a=2))
    assert list(r.keys()) == ["a"]  # keyword trees: the first by name ('alpha') decides
    r2 = f(Tree(p=0), alpha=Tree(a=2))
    assert list(r2.keys()) == ["p"]  # positional before keywords


def test_missing_factory_called_afresh_per_slot():
    f = treelize(lambda a, b: b, mode="outer", missing=list)
    r = f(Tree(a=1, x={"c": 1, "d": 2}), Tree(q=1))
    assert r.a == [] and r.x.c == [] and r.x.d == []
    assert r.a is not r.x.c  # two missing slots (a and x): two calls
    assert r.x.c is r.x.d  # one slot (x) facing a subtree: its value is broadcast into it
    r3 = f(Tree(a=1, b=2), Tree(q=1))
    assert r3.a == [] and r3.a is not r3.b
    # a missing key facing a subtree is broadcast into it (treevalue issue #10 case)
    g = treelize(lambda a, b: (a, b), mode="outer", missing=lambda: [])
    r2 = g(Tree(x={"c": 1, "d": 2}), Tree(y=3))
    assert r2.x.c == (1, []) and r2.y == ([], 3)


def test_missing_key_without_missing_is_error_naming_path():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        f = treelize(lambda a, b: a, mode="outer")
    with pytest.raises(KeyError, match=r"'d' is missing from argument 1 at x"):
        f(Tree(x={"c": 1, "d": 2}), Tree(x={"c": 1}))


def test_build_time_warnings():
    with pytest.warns(RuntimeWarning, match="ignored in strict"):
        treelize(lambda a: a, missing=0)
    with pytest.warns(RuntimeWarning, match="outer"):
        treelize(lambda a: a, mode="outer")
    with pytest.raises(ValueError, match="mode"):
        treelize(lambda a: a, mode="upper")


def test_inherit_broadcasts_values_and_leaves_facing_subtrees():
    f = treelize(lambda a, b, scale=1: (a + b) * scale)
    r = f(Tree(x=7, y=1), Tree(x={"c": 1, "d": 2}, y=5), scale=Tree(x=10, y={"k": 2}))
    assert r.to_dict() == {"x": {"c": 80, "d": 90}, "y": {"k": 12}}
    g = treelize(lambda a, b: a + b, inherit=False)
    assert g(Tree(x=1), Tree(x=2)).x == 3
    with pytest.raises(TypeError, match=r"inherit=False.*argument 1.*<root>"):
        g(Tree(x=1), 5)
    with pytest.raises(TypeError, match=r"inherit=False.*at x"):
        g(Tree(x=1), Tree(x={"c": 1}))


def test_errors_inside_leaf_functions_name_the_path():
    def boom(v):
        if v == 2:
            raise ValueError("bad leaf")
        return v

    with pytest.raises(ValueError, match="bad leaf") as info:
        treelize(boom)(Tree(a=1, x={"c": 2}))
    assert any("x.c" in n for n in info.value.__notes__)


def test_subside_and_rise_options():
    stack = treelize(np.stack, subside=True)
    t1 = Tree(a=np.zeros(2), x={"c": np.ones(3)})
    t2 = Tree(a=np.ones(2), x={"c": np.zeros(3)})
    s = stack([t1, t2])
    assert s.a.shape == (2, 2) and s.x.c.shape == (2, 3)
    np.testing.assert_array_equal(s.x.c[0], t1.x.c)
    halves = treelize(lambda x: (x[:1], x[1:]), rise=True)(Tree(a=np.arange(3), b=np.arange(4)))
    assert isinstance(halves, tuple) and len(halves) == 2
    np.testing.assert_array_equal(halves[1].b, [1, 2, 3])


def test_return_type():
    class Mine(Tree):
        pass

    r = treelize(lambda a: a + 1, return_type=Mine)(Tree(a=1, x={"c": 2}))
    assert type(r) is Mine and type(r.x) is Mine
    assert type(treelize(lambda a: a)(Mine(a=1))) is Mine


# ---- method, class-method and class forms ------------------------------------------------------


class Scores(Tree):
    @tt.treelize_method
    def clipped(self, lo, hi):
        return np.clip(self, lo, hi)

    @tt.treelize_method(self_copy=True)
    def clip_(self, lo, hi):
        return np.clip(self, lo, hi)

    @tt.treelize_classmethod
    def parse(cls, raw):
        assert cls is Scores
        return np.asarray(raw, dtype=np.float32)


def test_method_form_self_is_leaf_and_result_keeps_class():
    s = Scores(a=np.array([-1.0, 5.0]), x={"c": np.array([0.5])})
    r = s.clipped(0, 1)
    assert type(r) is Scores and type(r.x) is Scores
    np.testing.assert_array_equal(r.a, [0.0, 1.0])
    np.testing.assert_array_equal(s.a, [-1.0, 5.0])
    lo = Scores(a=0.0, x={"c": 0.6})
    np.testing.assert_array_equal(s.clipped(lo, 1).x.c, [0.6])


def test_method_self_copy_keeps_identity():
    s = Scores(a=np.array([-1.0, 5.0]), x={"c": np.array([2.0])})
    x_node = s.x
    out = s.clip_(0, 1)
    assert out is s and s.x is x_node
    np.testing.assert_array_equal(s.a, [0.0, 1.0])
    np.testing.assert_array_equal(s.x.c, [1.0])


def test_classmethod_form():
    r = Scores.parse(Tree(a=[1, 2], x={"c": [3]}))
    assert type(r) is Scores
    assert r.a.dtype == np.float32 and r.x.c.tolist() == [3.0]
    assert Scores.parse([1]).tolist() == [1.0]  # no tree: plain call


class Point:
    """A small leaf class."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def norm(self):
        return (self.x**2 + self.y**2) ** 0.5

    def scaled(self, k):
        return Point(self.x * k, self.y * k)

    @property
    def xy(self):
        return (self.x, self.y)

    @classmethod
    def origin(cls):
        return cls(0, 0)

    @staticmethod
    def from_pair(p):
        return Point(*p)


PointTree = tt.treelize_class(Point)


def test_treelize_class():
    pts = PointTree.of(Tree(a=3.0, b=1.0), Tree(a=4.0, b=0.0))
    assert type(pts) is PointTree and isinstance(pts.a, Point)
    assert pts.norm().to_dict() == {"a": 5.0, "b": 1.0}
    assert pts.xy.to_dict() == {"a": (3.0, 4.0), "b": (1.0, 0.0)}
    sc = pts.scaled(Tree(a=2, b=3))
    assert type(sc) is PointTree and sc.a.xy == (6.0, 8.0) and sc.b.xy == (3.0, 0.0)
    fp = PointTree.from_pair(Tree(a=(1, 2)))
    assert type(fp) is PointTree and fp.a.xy == (1, 2)
    assert isinstance(PointTree.origin(), Point)
    assert PointTree.__name__ == "PointTree"


# ---- proxy modules ----------------------------------------------------------------------------


def test_numpy_proxy():
    t = Tree(a=np.arange(6.0).reshape(2, 3), x={"c": np.ones((2, 2))})
    m = tt.np.mean(t, axis=0)
    np.testing.assert_array_equal(m.a, t.a.mean(axis=0))
    np.testing.assert_array_equal(tt.np.add.reduce(t).x.c, np.add.reduce(t.x.c))
    np.testing.assert_array_equal(tt.np.where(t > 1, t, 0).a, np.where(t.a > 1, t.a, 0))
    np.testing.assert_array_equal(tt.np.linalg.norm(t, axis=-1).a, np.linalg.norm(t.a, axis=-1))
    assert tt.np.float32 is np.float32 and tt.np.pi == np.pi
    assert tt.np.sum([1, 2]) == 3  # no tree: unchanged
    with pytest.raises(AttributeError, match="no attribute"):
        _ = tt.np.definitely_not_numpy


def test_jax_numpy_proxy_and_under_jit():
    t = Tree(a=jnp.arange(3.0), x={"c": jnp.ones((2, 2))})
    s = tt.jnp.sin(t)
    np.testing.assert_allclose(s.a, np.sin(np.arange(3.0)), rtol=1e-6)
    cat = tt.jnp.concatenate([t.a, t.a])  # plain arrays: plain call
    assert cat.shape == (6,)
    f = jax.jit(lambda t: tt.jnp.tanh(t) + tt.jnp.sum(t, axis=0))
    r = f(t)
    np.testing.assert_allclose(r.x.c, np.tanh(1.0) + 2.0, rtol=1e-6)
    assert tt.jnp.float32 is jnp.float32
    assert tt.jnp.linalg.norm(Tree(a=jnp.ones(4))).a == 2.0


def test_treelize_class_of_a_builtin_array_type():
    ArrayTree = tt.treelize_class(np.ndarray, "ArrayTree")
    t = ArrayTree(a=np.arange(6).reshape(2, 3), b=np.ones(2))
    s = t.sum()  # ndarray.sum, a method descriptor, treelized
    assert type(s) is ArrayTree and s.to_dict() == {"a": 15, "b": 2.0}
    assert t.T.a.shape == (3, 2)  # a getset descriptor becomes a tree-valued property
    assert "sum" in ArrayTree.__dict__ and ArrayTree.sum.__doc__ == np.ndarray.sum.__doc__


def test_proxies_subside_lists_of_trees():
    t1 = Tree(a=np.zeros(2), x={"c": np.ones(3)})
    t2 = Tree(a=np.ones(2), x={"c": np.zeros(3)})
    s = tt.np.stack([t1, t2])
    assert s.a.shape == (2, 2) and s.x.c[0].tolist() == [1.0, 1.0, 1.0]
    c = tt.jnp.concatenate((Tree(a=jnp.ones(2)), Tree(a=jnp.zeros(3))), axis=0)
    assert c.a.shape == (5,)
    parts = tt.np.split(Tree(a=np.arange(4)), 2)  # a tree of lists, risen on demand
    assert [p.a.tolist() for p in tt.rise(parts)] == [[0, 1], [2, 3]]
    assert tt.np.stack([np.zeros(2), np.ones(2)]).shape == (2, 2)  # no tree anywhere: unchanged
