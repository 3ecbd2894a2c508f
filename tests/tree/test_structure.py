"""Structural utilities, including hypothesis round-trips on random nested structures."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import evotensor.tree as tt
from evotensor.tree import Tree

# ---- random nested structures -----------------------------------------------------------------

key_st = st.text(alphabet="abcxyz_", min_size=1, max_size=3)
leaf_st = st.one_of(
    st.integers(-100, 100),
    st.builds(lambda n, s: np.arange(n, dtype=np.float32) + s, st.integers(0, 3), st.integers(-3, 3)),
)
nested_st = st.recursive(
    leaf_st, lambda ch: st.dictionaries(key_st, ch, min_size=0, max_size=3), max_leaves=10
).filter(lambda v: isinstance(v, dict))


def ref_flatten(d, prefix=()):
    """Reference flatten of nested dicts (dict = subtree, an empty dict kept as itself)."""
    out = {}
    for k in sorted(d):
        v = d[k]
        if isinstance(v, dict) and v:
            out.update(ref_flatten(v, (*prefix, k)))
        else:
            out[(*prefix, k)] = v
    return out


def same_flat(a, b):
    assert list(a) == list(b)
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, Tree) or isinstance(x, dict):
            assert len(x) == 0 and len(y) == 0
        else:
            np.testing.assert_array_equal(x, y)


@settings(max_examples=60, deadline=None)
@given(nested_st)
def test_flatten_matches_reference_and_unflatten_inverts(d):
    t = Tree(d)
    flat = tt.flatten(t)
    same_flat(flat, ref_flatten(d))
    back = tt.unflatten(flat)
    assert tt.equal(back, t)
    assert jax.tree_util.tree_structure(back) == jax.tree_util.tree_structure(t)


@settings(max_examples=60, deadline=None)
@given(nested_st)
def test_pytree_roundtrip(d):
    t = Tree(d)
    leaves, treedef = jax.tree_util.tree_flatten(t)
    back = jax.tree_util.tree_unflatten(treedef, leaves)
    assert tt.equal(back, t)
    # leaves in sorted-path order, matching the reference flatten
    ref = [v for v in ref_flatten(d).values() if not isinstance(v, dict)]
    assert len(leaves) == len(ref)
    for x, y in zip(leaves, ref):
        np.testing.assert_array_equal(x, y)
    # key paths name the same leaves as t[...] lookups
    for path, leaf in jax.tree_util.tree_flatten_with_path(t)[0]:
        node = t
        for entry in path:
            node = node[entry.key]
        assert node is leaf
    # jax.tree.map keeps the class and the structure
    mapped = jax.tree.map(lambda x: x, t)
    assert isinstance(mapped, Tree) and tt.equal(mapped, t)


def _has_leaf(d):
    return any(not isinstance(v, dict) or _has_leaf(v) for v in d.values())


# several trees of one random nested structure (with empty subtrees allowed), different leaves
same_structure_trees = st.tuples(nested_st.filter(_has_leaf), st.integers(1, 4)).map(
    lambda dk: [tt.map(Tree(dk[0]), lambda x, i=i: x + i) for i in range(dk[1])]
)


@settings(max_examples=50, deadline=None)
@given(same_structure_trees, st.sampled_from(["list", "tuple", "dict", "nested"]))
def test_subside_rise_are_inverse(trees, shape):
    if shape == "list":
        outer = list(trees)
    elif shape == "tuple":
        outer = tuple(trees)
    elif shape == "dict":
        outer = {f"k{i}": t for i, t in enumerate(trees)}
    else:
        outer = {"first": trees[0], "rest": list(trees[1:]) or [trees[0]]}
    sub = tt.subside(outer)
    assert isinstance(sub, Tree)
    assert jax.tree_util.tree_structure(sub, is_leaf=lambda x: not isinstance(x, Tree)) == (
        jax.tree_util.tree_structure(trees[0], is_leaf=lambda x: not isinstance(x, Tree))
    )
    back = tt.rise(sub)
    assert type(back) is type(outer)
    assert _struct_equal(back, outer)
    # and the other way round: subside(rise(t)) == t
    assert _tree_of_structures_equal(tt.subside(back), sub)
    # explicit templates give the same inverse: the exact outer structure, or `[None, ...]`
    assert _struct_equal(tt.rise(sub, template=_template_of(outer)), outer)
    if shape == "list":
        assert _struct_equal(tt.rise(sub, template=[None, ...]), outer)


def _template_of(x):
    """The explicit rise template of an outer structure: containers kept, trees -> None."""
    if isinstance(x, dict):
        return {k: _template_of(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return type(x)(_template_of(v) for v in x)
    return None


def _tree_of_structures_equal(a, b):
    fa, fb = tt.flatten(a), tt.flatten(b)
    return list(fa) == list(fb) and all(_struct_equal(fa[k], fb[k]) for k in fa)


def _struct_equal(a, b):
    if isinstance(a, Tree):
        return isinstance(b, Tree) and tt.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_struct_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(_struct_equal(x, y) for x, y in zip(a, b))
    return bool(np.array_equal(a, b))


# ---- map / filter / mask / reduce --------------------------------------------------------------


def test_map_with_and_without_path():
    t = Tree(a=1, x={"c": 2, "d": 3})
    assert tt.map(t, lambda v: v * 10).to_dict() == {"a": 10, "x": {"c": 20, "d": 30}}
    assert tt.map(t, lambda v, p: "/".join(p)).to_dict() == {"a": "a", "x": {"c": "x/c", "d": "x/d"}}
    assert tt.map(t, np.negative).x.d == -3  # builtins/ufuncs: value only
    # path detection: defaults and keyword-only parameters do not count as a path parameter
    assert tt.map(t, lambda v, k=5: v + k).to_dict() == {"a": 6, "x": {"c": 7, "d": 8}}
    assert tt.map(t, lambda v, *, p=1: v * p).x.c == 2
    assert tt.map(t, lambda v, *rest: len(rest)).x.c == 0


def test_map_error_names_the_nested_leaf_path():
    t = Tree(a=1, x={"c": 2, "y": {"e": "s"}})
    with pytest.raises(TypeError) as info:
        tt.map(t, lambda v: v + 1)
    notes = getattr(info.value, "__notes__", [])
    assert any("x.y.e" in n for n in notes), notes
    with pytest.raises(TypeError, match="map: t must be a Tree"):
        tt.map({"a": 1}, lambda v: v)
    with pytest.raises(TypeError, match="flatten: t must be a Tree"):
        tt.flatten({"a": 1})


def test_filter_and_mask_with_remove_empty():
    t = Tree(a=1, x={"c": 2, "d": 3}, y={"e": 4})
    assert tt.filter(t, lambda v: v % 2 == 0).to_dict() == {"x": {"c": 2}, "y": {"e": 4}}
    assert tt.filter(t, lambda v: v > 3).to_dict() == {"y": {"e": 4}}
    assert tt.filter(t, lambda v: v > 3, remove_empty=False).to_dict() == {"x": {}, "y": {"e": 4}}
    assert tt.filter(t, lambda v, p: p[0] == "x").to_dict() == {"x": {"c": 2, "d": 3}}
    m = Tree(a=True, x={"c": False, "d": True}, y=False)
    assert tt.mask(t, m).to_dict() == {"a": 1, "x": {"d": 3}}
    assert tt.mask(t, m, remove_empty=False).to_dict() == {"a": 1, "x": {"d": 3}, "y": {}}
    with pytest.raises(KeyError, match="no key 'y'"):
        tt.mask(t, Tree(a=True, x=True))


def test_reduce_bottom_up_with_keyword_children():
    t = Tree(a=1, x={"c": 2, "d": {"e": 3, "f": 4}})
    assert tt.reduce(t, lambda **kw: sum(kw.values())) == 10
    seen = tt.reduce(t, lambda **kw: sorted(kw))
    assert seen == ["a", "x"]
    assert tt.reduce(t, lambda **kw: kw) == t.to_dict()
    assert tt.reduce(Tree(), lambda **kw: len(kw)) == 0


def test_flatten_sep_and_unflatten_errors():
    t = Tree(a=1, x={"c": 2})
    assert tt.flatten(t, sep="/") == {"a": 1, "x/c": 2}
    assert tt.equal(tt.unflatten({"a": 1, "x/c": 2}, sep="/"), t)
    with pytest.raises(ValueError, match="separator"):
        tt.flatten(Tree({"a/b": 1}), sep="/")
    with pytest.raises(ValueError, match="both a leaf and a subtree"):
        tt.unflatten({("a",): 1, ("a", "b"): 2})
    with pytest.raises(ValueError, match="both a leaf and a subtree|twice"):
        tt.unflatten({("a", "b"): 2, ("a",): 1})
    # a dict given as a leaf value stays a leaf, and cannot be extended by a deeper path
    leaf = {"b": 1}
    u = tt.unflatten({("a",): leaf, ("x", "c"): 2})
    assert u.a is leaf and isinstance(u.x, Tree) and u.x.c == 2
    with pytest.raises(ValueError, match=r"a is both a leaf and a subtree"):
        tt.unflatten({("a",): {"b": 1}, ("a", "c"): 2})
    assert tt.equal(tt.unflatten({("x", "y", "z"): 1, ("x", "w"): 2}), Tree(x={"w": 2, "y": {"z": 1}}))


def test_union():
    u = tt.union(Tree(a=1, x={"c": 2}), Tree(a=3, x={"c": 4}))
    assert u.to_dict() == {"a": (1, 3), "x": {"c": (2, 4)}}
    with pytest.warns(RuntimeWarning, match="outer"), pytest.raises(KeyError, match="'a' is missing"):
        tt.union(Tree(a=1), Tree(b=2), mode="outer")


def test_union_outer_with_missing():
    u = tt.union(Tree(a=1), Tree(b=2), mode="outer", missing=None)
    assert u.to_dict() == {"a": (1, None), "b": (None, 2)}


def test_subside_docstring_example():
    t1, t2, t3, t4 = (Tree(a=i, b=i + 1) for i in (1, 3, 5, 7))
    s = tt.subside({"a": t1, "x": {"c": t2, "d": [t3, t4]}, "k": "233"})
    assert s.a == {"a": 1, "k": "233", "x": {"c": 3, "d": [5, 7]}}
    assert s.b == {"a": 2, "k": "233", "x": {"c": 4, "d": [6, 8]}}
    assert tt.subside([1, 2]) == [1, 2]  # no tree: unchanged


def test_rise_auto_template_docstring_example():
    t = Tree(x=tt.raw({"a": [1, 2], "b": [2, 3]}), y=tt.raw({"a": [5, 6, 7], "b": [7, 8]}))
    assert isinstance(t.x, dict)
    r = tt.rise(t)
    assert set(r) == {"a", "b"}
    assert r["a"].to_dict() == {"x": [1, 2], "y": [5, 6, 7]}
    assert [p.to_dict() for p in r["b"]] == [{"x": 2, "y": 7}, {"x": 3, "y": 8}]


def test_rise_explicit_templates():
    t = Tree(x=[1, 2, 3], y=[4, 5, 6])
    r = tt.rise(t, template=[None, ...])
    assert [p.to_dict() for p in r] == [{"x": 1, "y": 4}, {"x": 2, "y": 5}, {"x": 3, "y": 6}]
    r2 = tt.rise(t, template=[None, None, ...])  # at least 0 fixed + rest repeated
    assert len(r2) == 3
    r3 = tt.rise(Tree(x=[[1, 2], 3], y=[[4, 5], 6]), template=[[None, None], None])
    assert r3[0][1].to_dict() == {"x": 2, "y": 5} and r3[1].to_dict() == {"x": 3, "y": 6}
    r4 = tt.rise(Tree(x=[[1, 2], 3], y=[[4, 5], 6]), template=[None, None])
    assert r4[0].to_dict() == {"x": [1, 2], "y": [4, 5]}
    r5 = tt.rise(
        Tree(x=tt.raw({"p": 1, "q": (1, 2)}), y=tt.raw({"p": 3, "q": (3, 4)})),
        template={"p": None, "q": tuple},
    )
    assert r5["p"].to_dict() == {"x": 1, "y": 3} and isinstance(r5["q"], tuple)
    assert r5["q"][1].to_dict() == {"x": 2, "y": 4}
    r6 = tt.rise(Tree(x=[1, 2, 3], y=[4, 5, 6]), template=[None, None, None, ...])
    assert len(r6) == 3
    with pytest.raises(ValueError, match=r"leaf at y.*expects 3"):
        tt.rise(Tree(x=[1, 2, 3], y=[4, 5]), template=[None, None, None])
    with pytest.raises(ValueError, match="equal lengths"):
        tt.rise(Tree(x=[1, 2, 3], y=[4, 5]), template=[None, ...])
    with pytest.raises(ValueError, match=r"leaf at x.*at least 4"):
        tt.rise(Tree(x=[1, 2, 3], y=[4, 5, 6]), template=[None, None, None, None, None, ...])
    with pytest.raises(ValueError, match="dict with keys"):
        tt.rise(Tree(x=tt.raw({"a": 1}), y=tt.raw({"b": 1})), template={"a": None})


# ---- stack / concatenate / split / index ----------------------------------------------------


@pytest.mark.parametrize("backend", ["numpy", "jax"])
def test_stack_concat_split_index(backend):
    xp = np if backend == "numpy" else jnp
    t = Tree(obs=xp.ones((3, 4, 2)), x={"r": xp.arange(3.0)})
    n = 5
    trees = [t * i for i in range(n)]
    s = tt.stack(trees)
    assert s.obs.shape == (n, 3, 4, 2) and s.x.r.shape == (n, 3)
    np.testing.assert_array_equal(s.x.r[2], trees[2].x.r)
    c = tt.concatenate(trees)
    assert c.obs.shape == (n * 3, 4, 2)
    np.testing.assert_array_equal(c.x.r[3:6], trees[1].x.r)
    s1 = tt.stack(trees, axis=1)
    assert s1.obs.shape == (3, n, 4, 2)
    pieces = tt.split(s, n)
    assert len(pieces) == n and pieces[3].obs.shape == (1, 3, 4, 2)
    np.testing.assert_array_equal(pieces[3].x.r[0], trees[3].x.r)
    parts = tt.split(c, [3, 9])
    assert [p.obs.shape[0] for p in parts] == [3, 6, 6]
    ax1 = tt.split(s1, n, axis=1)
    assert ax1[0].x.r.shape == (3, 1)
    assert tt.equal(tt.concatenate(pieces), s)
    i = tt.index(s, 2)
    assert tt.equal(i, trees[2])
    j = tt.index(s, np.array([0, 4]), axis=0)
    assert j.obs.shape == (2, 3, 4, 2)
    k = tt.index(s1, 1, axis=1)
    assert tt.equal(k, trees[1])
    last = tt.index(s, 0, axis=-1)
    assert last.obs.shape == (n, 3, 4)
    with pytest.raises(ValueError, match=r"x\.r.*not divisible"):
        tt.split(Tree(x={"r": xp.ones(5)}), 2)


def test_stack_errors_name_paths():
    with pytest.raises(KeyError, match=r"key sets differ at x"):
        tt.stack([Tree(x={"a": np.ones(1)}), Tree(x={"b": np.ones(1)})])
    with pytest.raises(TypeError, match="list or tuple"):
        tt.stack(Tree(a=1))
    with pytest.raises(ValueError, match="empty"):
        tt.stack([])
    with pytest.raises(ValueError) as info:
        tt.stack([Tree(x={"a": np.ones(1)}), Tree(x={"a": np.ones(2)})])
    assert any("x.a" in n for n in info.value.__notes__)


def test_stack_mixed_numpy_and_jax_gives_jax():
    s = tt.stack([Tree(a=np.ones(2)), Tree(a=jnp.zeros(2))])
    assert isinstance(s.a, jax.Array)


def test_equal_edge_cases():
    assert tt.equal(Tree(a=np.array([np.nan])), Tree(a=np.array([np.nan]))) is False
    assert tt.equal(Tree(a=np.array([np.nan])), Tree(a=np.array([np.nan])), equal_nan=True) is True
    assert tt.equal(Tree(a="s", b=None), Tree(a="s", b=None)) is True
    assert tt.equal(Tree(a=1), {"a": 1}) is False
    assert tt.equal(Tree(a=jnp.ones(2)), Tree(a=np.ones(2))) is True


def test_path_detection_matches_inspect_signature():
    """The code-object shortcut of map/filter agrees with inspect.signature on every kind of callable."""
    import functools
    import inspect

    from evotensor.tree.functional import _takes_path, _takes_path_fresh

    def reference(fn):
        try:
            params = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):
            return False
        kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        return sum(p.kind in kinds and p.default is p.empty for p in params) >= 2

    def two(v, p):
        return v

    def pos_only(v, p, /, q=1):
        return v

    def wrapped_two(v, p):
        return v

    @functools.wraps(wrapped_two)
    def wrapper(*args):  # a wrapper's own code says (*args); its signature says (v, p)
        return wrapped_two(*args)

    def with_attr(v):
        return v

    with_attr.__signature__ = inspect.signature(two)

    class K:
        def meth(self, v):
            return v

        def meth2(self, v, p):
            return v

        @classmethod
        def cm(cls, v, p=None):
            return v

        @staticmethod
        def sm(v, p):
            return v

        def __call__(self, v, p):
            return v

    class Slotted:
        __slots__ = ()

        def f(self, a, b, c=0):
            return a

    def with_defaults(v, p=(), *rest, k, **kw):
        return v

    two_defaults_changed = lambda v, p: v  # noqa: E731
    two_defaults_changed.__defaults__ = ((),)  # now p has a default: one required parameter
    callables = [
        lambda v: v,
        lambda v, p: v,
        lambda v, p=1: v,
        lambda v, *a: v,
        lambda *a: 0,
        lambda v, *, p: v,
        two,
        pos_only,
        wrapper,
        with_attr,
        with_defaults,
        two_defaults_changed,
        K().meth,
        K().meth2,
        K.meth2,
        K.cm,
        K.sm,
        K(),
        Slotted().f,
        functools.partial(two, 1),
        functools.partial(pos_only),
        np.negative,
        len,
        max,
        "".join,
    ]
    for fn in callables:
        assert _takes_path_fresh(fn) == reference(fn), fn
        assert _takes_path(fn) == reference(fn), fn  # first call fills the cache
        assert _takes_path(fn) == reference(fn), fn  # second call may be answered from it


def test_path_detection_cache_is_per_function_object():
    import gc
    import weakref

    from evotensor.tree.functional import _TAKES_PATH, _takes_path

    t = Tree(a=1, x={"c": 2})
    # many short-lived functions, alternately with and without a path parameter: ids get reused,
    # the answers must not leak from a dead function to a new one at the same address
    for i in range(200):
        fn = (lambda v, p: p) if i % 2 else (lambda v: v)
        assert _takes_path(fn) == bool(i % 2)
        out = tt.map(t, fn)
        assert out.x.c == (("x", "c") if i % 2 else 2)
        del fn, out
        if i % 50 == 0:
            gc.collect()
    assert len(_TAKES_PATH) <= 4096

    def adder(arr):
        return lambda v: v + arr

    captured = np.ones(1000)
    ref = weakref.ref(captured)
    keep = adder(captured)
    tt.map(t, keep)
    del keep, captured
    gc.collect()
    assert ref() is None  # the cache does not keep closures (and what they capture) alive


# ---- JAX leaves: one compiled call per tree operation ------------------------------------------
# The fast path joins/splits all JAX leaves of a tree in one jitted call; these tests compare it
# with the obviously correct per-leaf computation (jnp.stack / jnp.concatenate / jnp.split on each
# leaf position, found through tt.flatten).


def _jax_trees(n, seed=0):
    rng = np.random.default_rng(seed)
    return [
        Tree(
            obs=jnp.asarray(rng.standard_normal((3, 4)), jnp.float32),
            act=jnp.asarray(rng.integers(0, 9, (3, 1)), jnp.int32),
            x={
                "c": jnp.asarray(rng.standard_normal((3, 2)), jnp.float32),
                "e": {"f": jnp.arange(6.0).reshape(3, 2) + i},
            },
        )
        for i in range(n)
    ]


def _per_leaf_join(trees, op, axis):
    flats = [tt.flatten(t) for t in trees]
    return tt.unflatten({p: op([f[p] for f in flats], axis=axis) for p in flats[0]})


def _assert_same(a, b):
    fa, fb = tt.flatten(a), tt.flatten(b)
    assert list(fa) == list(fb)
    for p in fa:
        assert type(fa[p]) is type(fb[p]), p
        assert fa[p].shape == fb[p].shape and fa[p].dtype == fb[p].dtype, p
        np.testing.assert_array_equal(np.asarray(fa[p]), np.asarray(fb[p]))


@pytest.mark.parametrize("n", [1, 2, 7])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_jax_stack_concatenate_equal_per_leaf_reference(n, axis):
    trees = _jax_trees(n)
    _assert_same(tt.stack(trees, axis=axis), _per_leaf_join(trees, jnp.stack, axis))
    _assert_same(tt.concatenate(trees, axis=axis), _per_leaf_join(trees, jnp.concatenate, axis))


def test_join_keeps_each_backend_per_leaf_position():
    # numpy-only positions stay numpy (no XLA call), jax-only and mixed positions become jax
    a = Tree(n=np.ones(2, np.float32), j=jnp.zeros(2), m=np.ones(2, np.float32))
    b = Tree(n=np.zeros(2, np.float32), j=jnp.ones(2), m=jnp.full(2, 3.0))
    for fn, op in ((tt.stack, jnp.stack), (tt.concatenate, jnp.concatenate)):
        out = fn([a, b])
        assert isinstance(out.n, np.ndarray)
        assert isinstance(out.j, jax.Array) and isinstance(out.m, jax.Array)
        ref = _per_leaf_join([a, b], op, 0)
        for k in ("n", "j", "m"):
            np.testing.assert_array_equal(np.asarray(out[k]), np.asarray(ref[k]))
        assert list(out.keys()) == ["j", "m", "n"]


def test_jax_join_under_jit_with_traced_leaves():
    trees = _jax_trees(3)
    for fn, op in ((tt.stack, jnp.stack), (tt.concatenate, jnp.concatenate)):
        jitted = jax.jit(lambda ts, fn=fn: fn(ts, axis=1))
        _assert_same(jitted(trees), _per_leaf_join(trees, op, 1))
    pieces = jax.jit(lambda t: tt.split(t, 3))(tt.stack(trees))
    for p, t in zip(pieces, trees):
        _assert_same(tt.index(p, 0), t)


def test_jax_join_errors_name_the_leaf_and_the_tree():
    good = Tree(x={"a": jnp.ones(1), "b": jnp.ones(2)})
    bad = Tree(x={"a": jnp.ones(1), "b": jnp.ones(3)})
    with pytest.raises(ValueError) as info:
        tt.stack([good, good, bad])
    assert any("x.b" in n for n in info.value.__notes__)
    with pytest.raises(TypeError) as info:
        tt.concatenate([good, good, bad.x.b.reshape(1, 3)])
    assert "trees[2]" in str(info.value)
    with pytest.raises(TypeError, match=r"trees\[1\].*at x, expected a Tree"):
        tt.stack([good, Tree(x=jnp.ones(1))])
    with pytest.raises(KeyError, match=r"key sets differ at x.*trees\[3\] has \['a'\]"):
        tt.stack([good, good, good, Tree(x={"a": jnp.ones(1)})])
    with pytest.raises(KeyError, match=r"key sets differ at x.*trees\[1\] has \['a', 'c'\]"):
        tt.stack([good, Tree(x={"a": jnp.ones(1), "c": jnp.ones(2)})])


def test_jax_join_derives_constraints():
    c = Tree(obs=jnp.zeros((4, 3, 5)), agents={"pos": jnp.zeros((4, 3, 2))}).with_constraints(
        tt.shape_prefix(4, 3)
    )
    s = tt.stack([c, c])
    assert s.constraints == (tt.shape_prefix(2, 4, 3),) and s.agents.constraints == s.constraints
    s.validate()
    assert tt.concatenate([c, c, c]).constraints == (tt.shape_prefix(12, 3),)


@pytest.mark.parametrize("sections", [3, [1], [1, 2], [0, 3]])
@pytest.mark.parametrize("axis", [0, 1])
def test_jax_split_equals_per_leaf_reference(sections, axis):
    t = tt.stack(_jax_trees(3), axis=axis)  # every leaf has length 3 on `axis`
    t["host"] = np.arange(3 * 4, dtype=np.float32).reshape((3, 4) if axis == 0 else (4, 3))
    pieces = tt.split(t, sections, axis=axis)
    flat = tt.flatten(t)
    ref = {
        p: (np.split if isinstance(v, np.ndarray) else jnp.split)(v, sections, axis=axis)
        for p, v in flat.items()
    }
    assert len(pieces) == len(ref[("obs",)])
    for i, piece in enumerate(pieces):
        _assert_same(piece, tt.unflatten({p: ref[p][i] for p in flat}))
        assert isinstance(piece.host, np.ndarray) and isinstance(piece.obs, jax.Array)


@settings(max_examples=10, deadline=None)
@given(
    d=st.recursive(
        st.integers(1, 2), lambda ch: st.dictionaries(key_st, ch, min_size=1, max_size=3), max_leaves=5
    ).filter(lambda v: isinstance(v, dict)),
    n=st.integers(1, 3),
)
def test_jax_join_split_roundtrip_on_random_structures(d, n):
    def build(v, i):
        if isinstance(v, dict):
            return {k: build(x, i) for k, x in v.items()}
        return jnp.arange(2 * v, dtype=jnp.float32).reshape(2, v) + i

    trees = [Tree(build(d, i)) for i in range(n)]
    s = tt.stack(trees)
    _assert_same(s, _per_leaf_join(trees, jnp.stack, 0))
    for piece, t in zip(tt.split(s, n), trees):
        _assert_same(tt.index(piece, 0), t)
    c = tt.concatenate(trees, axis=1)
    _assert_same(c, _per_leaf_join(trees, jnp.concatenate, 1))


@pytest.mark.parametrize("limit", [1, 100])
def test_jax_large_leaves_get_their_own_call_with_equal_results(monkeypatch, limit):
    # with a tiny byte limit some or all leaves take the one-call-per-large-leaf path
    from evotensor.tree import joining as structure

    assert structure._calls([5, 200, 7, 300]) == [[0, 1, 2, 3]]
    monkeypatch.setattr(structure, "_OWN_CALL_BYTES", limit)
    assert structure._calls([5, 200, 7, 300]) == ([[0], [1], [2], [3]] if limit == 1 else [[1], [3], [0, 2]])
    trees = _jax_trees(4)
    _assert_same(tt.stack(trees), _per_leaf_join(trees, jnp.stack, 0))
    _assert_same(tt.concatenate(trees, axis=1), _per_leaf_join(trees, jnp.concatenate, 1))
    s = tt.stack(trees)
    for piece, t in zip(tt.split(s, 4), trees):
        _assert_same(tt.index(piece, 0), t)
    bad = Tree(**{k: v for k, v in trees[0].items()})
    bad["obs"] = jnp.ones((2, 4))
    with pytest.raises(ValueError) as info:
        tt.stack([trees[0], bad])
    assert any("obs" in n for n in info.value.__notes__)
