"""The optional compiled core of Tree (``evotensor.tree._speedups``) against the pure-Python reference.

The reference is the same package imported a second time with ``EVOTENSOR_NO_SPEEDUPS=1`` (fresh
module objects, so its ``Tree`` is the pure-Python class); random trees and random sequences of
set/get/delete/constraint operations must give identical results and identical errors on both.
The whole tree test suite is also run once on the pure-Python path, in a subprocess (slow tier).
"""

import copy
import gc
import importlib
import os
import pickle
import subprocess
import sys
import weakref
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import evotensor
import evotensor.tree as fast

ROOT = Path(__file__).resolve().parents[2]


def _import_pure_copy():
    """``evotensor.tree`` imported afresh with the speedups disabled; the live modules are restored."""
    prefix = "evotensor.tree"
    saved = {k: m for k, m in sys.modules.items() if k == prefix or k.startswith(prefix + ".")}
    saved_env = os.environ.get("EVOTENSOR_NO_SPEEDUPS")
    for k in saved:
        del sys.modules[k]
    os.environ["EVOTENSOR_NO_SPEEDUPS"] = "1"
    try:
        return importlib.import_module(prefix)
    finally:
        if saved_env is None:
            del os.environ["EVOTENSOR_NO_SPEEDUPS"]
        else:
            os.environ["EVOTENSOR_NO_SPEEDUPS"] = saved_env
        for k in [k for k in sys.modules if k == prefix or k.startswith(prefix + ".")]:
            del sys.modules[k]
        sys.modules.update(saved)
        evotensor.tree = saved[prefix]


pure = _import_pure_copy()
SIDES = {"fast": fast, "pure": pure}


# ---- (a) the extension is built and in use -------------------------------------------------------


def test_extension_is_built_and_active():
    from evotensor.tree import _speedups

    assert fast.SPEEDUPS is True, "evotensor.tree._speedups did not build/import (is gcc installed?)"
    assert issubclass(fast.Tree, _speedups.TreeBase)
    # a Python __setattr__/__getitem__ on Tree would override the C slots
    for name in ("__setattr__", "__delattr__", "__getitem__", "__setitem__", "__delitem__"):
        assert name not in vars(fast.Tree), name
    assert pure.SPEEDUPS is False and pure.Tree.__mro__[1] is object
    assert pure.Tree is not fast.Tree


def test_reserved_names_and_dir_are_the_same_on_both():
    assert fast.Tree._reserved_names == pure.Tree._reserved_names
    assert dir(fast.Tree) == dir(pure.Tree)
    t = fast.Tree(a=1)
    assert dir(t) == dir(pure.Tree(a=1))


# ---- (b) reference test: random trees and operation sequences ---------------------------------

KEYS = ["a", "b", "c", "x", "keys", "get", "each", "_p", "__class__", "_cons"]
SEGS = ["a", "b", "c", "x", "keys", "get"]


def leaf_values():
    arrays = st.sampled_from(
        [
            ("f32", (2,)),
            ("f32", (2, 3)),
            ("f64", (2,)),
            ("i32", (3,)),
            ("f32", ()),
        ]
    )
    return st.one_of(
        st.integers(-3, 3),
        st.none(),
        st.text("ab", max_size=2),  # never "BAD": that one only comes with sets
        arrays.map(lambda s: ("array", *s)),
    )


def values():
    # a value spec, built into real objects separately on each side
    return st.recursive(
        leaf_values(),
        lambda inner: st.one_of(
            st.dictionaries(st.sampled_from(SEGS), inner, max_size=3).map(lambda d: ("dict", d)),
            st.dictionaries(st.sampled_from(SEGS), inner, max_size=2).map(lambda d: ("raw", d)),
            st.dictionaries(st.sampled_from(SEGS), inner, max_size=2).map(lambda d: ("tree", d)),
        ),
        max_leaves=6,
    )


DTYPES = {"f32": np.float32, "f64": np.float64, "i32": np.int32}


def build(side, spec):
    if isinstance(spec, tuple) and spec and spec[0] == "array":
        _, dt, shape = spec
        return np.arange(int(np.prod(shape)), dtype=DTYPES[dt]).reshape(shape)
    if isinstance(spec, tuple) and spec and spec[0] in ("dict", "raw", "tree"):
        kind, d = spec
        inner = {k: build(side, v) for k, v in d.items()}
        if kind == "raw":
            return side.raw(inner)
        if kind == "tree":
            return side.Tree(inner)
        return inner
    return spec


CONSTRAINTS = [
    # holds on every generated tree, so most constrain ops succeed; sets of "BAD" then violate it
    ("no_bad", lambda m: m.predicate(lambda x: not (isinstance(x, str) and x == "BAD"), name="no_bad")),
    ("dtype", lambda m: m.dtype("float32")),
    ("ndim", lambda m: m.ndim(1)),
    ("shape_prefix", lambda m: m.shape_prefix(2)),
    ("predicate", lambda m: m.predicate(lambda x: not isinstance(x, str), name="no_str")),
    ("node_predicate", lambda m: m.node_predicate(lambda n: len(n) <= 3, name="at_most_3")),
]

ops = st.one_of(
    st.tuples(
        st.sampled_from(["setattr", "setitem"]),
        st.integers(0, 50),
        st.sampled_from(KEYS),
        st.one_of(st.just("BAD"), values()),
    ),
    st.tuples(
        st.sampled_from(["getattr", "getitem", "delattr", "delitem", "pop", "contains"]),
        st.integers(0, 50),
        st.sampled_from(KEYS),
    ),
    st.tuples(st.just("constrain"), st.integers(0, 50), st.sampled_from(range(len(CONSTRAINTS)))),
    st.tuples(st.sampled_from(["validate", "flatten", "reduce", "deepcopy", "copy"]), st.integers(0, 50)),
)


def unreduce(t):
    fn, args = t.__reduce__()
    return fn(*args)


def nodes(side, t, path=()):
    out = [(path, t)]
    for k, v in t.items():
        if isinstance(v, side.Tree):
            out.extend(nodes(side, v, (*path, k)))
    return out


def snapshot(side, v):
    """A comparable picture of a value: key order, constraints, leaf types/dtypes/contents."""
    if isinstance(v, side.Tree):
        return (
            "Tree",
            type(v).__name__,
            tuple((k, snapshot(side, c)) for k, c in v.items()),
            tuple(repr(c) for c in v.constraints),
        )
    if isinstance(v, np.ndarray):
        return ("array", str(v.dtype), v.shape, v.tolist())
    if isinstance(v, dict):
        return ("dict", tuple((k, snapshot(side, c)) for k, c in v.items()))
    if isinstance(v, tuple):
        return tuple(snapshot(side, c) for c in v)
    # other objects (bound methods, t.each, classes): by type only, their reprs hold addresses
    return ("value", type(v).__name__, v if isinstance(v, int | str | type(None)) else None)


def outcome(fn):
    try:
        return ("ok", fn())
    except Exception as exc:  # errors must match too: type name and message
        return ("error", type(exc).__name__, str(exc))


def apply(side, root, op):
    kind, where = op[0], op[1]
    all_nodes = nodes(side, root)
    path, node = all_nodes[where % len(all_nodes)]
    if kind == "setattr":
        return path, outcome(lambda: setattr(node, op[2], build(side, op[3])))
    if kind == "setitem":
        return path, outcome(lambda: node.__setitem__(op[2], build(side, op[3])))
    if kind == "getattr":
        return path, outcome(lambda: snapshot(side, getattr(node, op[2])))
    if kind == "getitem":
        return path, outcome(lambda: snapshot(side, node[op[2]]))
    if kind == "delattr":
        return path, outcome(lambda: delattr(node, op[2]))
    if kind == "delitem":
        return path, outcome(lambda: node.__delitem__(op[2]))
    if kind == "pop":
        return path, outcome(lambda: snapshot(side, node.pop(op[2], "missing")))
    if kind == "contains":
        return path, outcome(lambda: op[2] in node)
    if kind == "constrain":
        # replace the node by a constrained copy, through the parent (or the root itself)
        c = CONSTRAINTS[op[2]][1](side)

        def constrain():
            new = node.with_constraints(c)
            if not path:
                return new
            parent = root
            for k in path[:-1]:
                parent = parent[k]
            parent[path[-1]] = new
            return None

        return path, outcome(constrain)
    if kind == "validate":
        return path, outcome(lambda: snapshot(side, node.validate()))
    if kind == "flatten":
        return path, outcome(lambda: snapshot(side, tuple(side.flatten(node).items())))
    if kind == "reduce":
        # pickle's reconstruction (the pure copy's classes cannot be pickled by name)
        return path, outcome(lambda: snapshot(side, unreduce(node)))
    if kind == "deepcopy":
        return path, outcome(lambda: snapshot(side, copy.deepcopy(node)))
    if kind == "copy":
        return path, outcome(lambda: snapshot(side, copy.copy(node)))
    raise AssertionError(kind)


trees = st.dictionaries(st.sampled_from(SEGS), values(), max_size=4)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(trees, st.lists(ops, max_size=14))
def test_operation_sequences_match_the_pure_python_reference(init, sequence):
    roots = {}
    for name, side in SIDES.items():
        roots[name] = outcome(lambda side=side: side.Tree(build(side, ("dict", init))))
    # construction itself must agree (dict values become subtrees, raw stays a leaf)
    assert [r[0] for r in roots.values()] == [roots["fast"][0]] * 2
    if roots["fast"][0] == "error":
        assert roots["fast"] == roots["pure"]
        return
    t = {name: r[1] for name, r in roots.items()}
    for op in sequence:
        results = {}
        for name, side in SIDES.items():
            path, res = apply(side, t[name], op)
            if op[0] == "constrain" and res[0] == "ok" and res[1] is not None:
                t[name] = res[1]
                res = ("ok", "root replaced")
            results[name] = (path, res)
        assert results["fast"] == results["pure"], op
        assert snapshot(fast, t["fast"]) == snapshot(pure, t["pure"]), op


@pytest.mark.parametrize("name", ["fast", "pure"])
def test_fast_paths_and_their_edges(name):
    side = SIDES[name]
    t = side.Tree({"a": 1, "keys": 2, "x": {"c": 3}})
    t.a = 5
    t["a"] = 6
    assert t.a == 6 and t["a"] == 6
    t.b = 7  # new key: sorted insertion
    t["aa"] = 8
    assert list(t) == ["a", "aa", "b", "keys", "x"]
    with pytest.raises(AttributeError, match="'keys' is a Tree attribute"):
        t.keys = 1  # reserved name, even though "keys" is a key
    t["keys"] = 9  # item set may use it
    assert t["keys"] == 9
    t.a = {"d": 1}  # a dict value becomes a subtree
    assert isinstance(t.a, side.Tree) and t.a.d == 1
    t.a = side.raw({"d": 1})
    assert t.a == {"d": 1}
    with pytest.raises(KeyError, match="no key 'zz' in tree"):
        t["zz"]
    with pytest.raises(AttributeError, match="no key 'zz' in tree"):
        del t.zz
    with pytest.raises(KeyError, match="no key 'zz' in tree"):
        del t["zz"]
    with pytest.raises(AttributeError):
        t._cons = ()
    with pytest.raises(TypeError, match="keys must be strings"):
        side.Tree({1: 2})

    class Key(str):
        pass

    t[Key("k")] = 1  # a str subclass goes through the general path, stored as a plain str
    assert type(next(k for k in t if k == "k")) is str and t[Key("k")] == 1
    c = side.Tree(v=np.ones(2, np.float32)).with_constraints(side.dtype("float32"))
    with pytest.raises(side.ConstraintError, match=r"dtype\('float32'\) violated at v"):
        c.v = np.ones(2, np.int32)
    with pytest.raises(side.ConstraintError, match=r"dtype\('float32'\) violated at v"):
        c["v"] = np.ones(2, np.int32)
    assert c.v.dtype == np.float32


@pytest.mark.parametrize("name", ["fast", "pure"])
def test_weakref_gc_cycles_pickle_deepcopy_and_subclasses(name):
    side = SIDES[name]
    t = side.Tree(a=np.ones(2))
    with pytest.raises(ValueError, match="would contain itself"):
        t.me = t  # a Tree containing itself is refused on set (flatten and jit could not walk it)
    t.__dict__["me"] = t  # a reference cycle through the node's dict, made behind the API's back
    r = weakref.ref(t)
    del t
    gc.collect()
    assert r() is None  # the cycle was found and freed

    class Sub(side.Tree):
        pass

    s = Sub({"a": 1, "x": {"c": np.arange(3)}})
    assert type(s.x) is Sub
    s.a = 2
    for other in (copy.deepcopy(s), unreduce(s), copy.copy(s)):
        assert type(other) is Sub and other.a == 2 and np.array_equal(other.x.c, np.arange(3))
    if side is fast:  # by name: only the live module's classes can be found again
        c = fast.Tree(a=np.ones(2), x={"c": np.zeros(3)}).with_constraints(fast.dtype("float64"))
        back = pickle.loads(pickle.dumps(c))
        assert fast.equal(back, c) and back.constraints == c.constraints
    out = jax.jit(lambda u: u)(s)
    assert type(out) is Sub and type(out.x) is Sub and out.constraints == ()


# ---- (c) pytree round-trips through jit / vmap on both --------------------------------------


@pytest.mark.parametrize("name", ["fast", "pure"])
@given(
    st.dictionaries(
        st.sampled_from(SEGS),
        st.recursive(
            st.integers(0, 3), lambda c: st.dictionaries(st.sampled_from(SEGS), c, max_size=3), max_leaves=8
        ),
        max_size=4,
    )
)
@settings(max_examples=25, deadline=None)
def test_pytree_round_trips(name, spec):
    side = SIDES[name]

    def arrays(d):
        return {
            k: arrays(v) if isinstance(v, dict) else jnp.full((2, 3), v, jnp.float32) for k, v in d.items()
        }

    t = side.Tree(arrays(spec))
    leaves, treedef = jax.tree_util.tree_flatten(t)
    back = treedef.unflatten(leaves)
    assert side.equal(back, t) and list(back.keys()) == list(t.keys())
    # key paths and structure are the same as those of the same dict pytree
    dict_paths = [p for p, _ in jax.tree_util.tree_flatten_with_path(arrays(spec))[0]]
    tree_paths = [p for p, _ in jax.tree_util.tree_flatten_with_path(t)[0]]
    assert [tuple(k.key for k in p) for p in tree_paths] == [tuple(k.key for k in p) for p in dict_paths]
    out = jax.jit(lambda u: u * 2 + 1)(t)
    assert isinstance(out, side.Tree)
    assert side.equal(out, side.map(t, lambda x: x * 2 + 1))
    assert jax.tree_util.tree_structure(out) == treedef
    vm = jax.vmap(lambda u: jax.tree.map(lambda x: x.sum(), u), axis_size=2)(t)
    assert jax.tree_util.tree_structure(vm) == treedef
    for x, y in zip(jax.tree_util.tree_leaves(vm), leaves):
        np.testing.assert_allclose(x, y.sum(axis=1))


def test_prefix_in_axes_and_grad_on_the_compiled_tree():
    t = fast.Tree(w=jnp.ones((4, 3)), b=jnp.zeros(3), cfg={"s": jnp.float32(2.0)})
    axes = fast.Tree(w=0, b=None, cfg=None)
    out = jax.vmap(lambda u: u.w * u.cfg.s + u.b, in_axes=(axes,))(t)
    assert out.shape == (4, 3)
    g = jax.grad(lambda u: (u.w.sum() + u.b.sum()) * u.cfg.s)(t)
    assert isinstance(g, fast.Tree) and float(g.cfg.s) == 12.0 and float(g.w[0, 0]) == 2.0


# ---- the whole tree suite on the pure-Python path -------------------------------------------------


# ~20 s: the slow tier; the default tier compares the two paths operation by operation above
@pytest.mark.slow
def test_tree_suite_passes_without_speedups():
    env = dict(os.environ, EVOTENSOR_NO_SPEEDUPS="1", JAX_PLATFORMS="cpu")
    env.pop("PYTEST_XDIST_WORKER", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-x",
            "-p",
            "no:randomly",
            "tests/tree",
            "--ignore",
            "tests/tree/test_speedups.py",
            "-p",
            "no:xdist",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and " failed" not in proc.stdout


# ---- (d) stack / concatenate / split: the compiled walks against the Python walk ---------------
# fast.stack/concatenate/split take the C path (join_columns / plain_leaves + build / build_pieces)
# in the plain case; pure.* always run the Python walk. Results (structure, node classes, key
# order, constraints, leaf types, dtypes, values) and errors (type and message) must be identical,
# also for the cases the C walk hands back to Python (constraints, key mismatches, subtrees facing
# leaves, NumPy leaves, shape errors).

JOIN_KEYS = ["a", "b", "x", "y"]


def join_structures():
    return st.recursive(
        st.sampled_from(["f32", "i32", "empty"]),
        lambda inner: st.dictionaries(st.sampled_from(JOIN_KEYS), inner, min_size=1, max_size=3),
        max_leaves=5,
    )


def join_tree(side, struct, i, sub, length=2):
    """A tree of ``struct`` whose leaves are JAX arrays of shape (length, 3) and values from i."""
    if struct == "empty":
        return side.Tree()
    if isinstance(struct, str):
        return jnp.arange(length * 3, dtype=DTYPES[struct]).reshape(length, 3) + i
    node = {k: join_tree(side, v, i, sub, length) for k, v in struct.items()}
    cls = sub[side] if i % 2 else side.Tree  # some nodes of a Tree subclass: classes are kept
    return cls(node)


class _FastSub(fast.Tree):
    pass


class _PureSub(pure.Tree):
    pass


SUBCLASSES = {fast: _FastSub, pure: _PureSub}

# perturbations of the last tree: each sends the C walk back to Python or makes an error
PERTURB = [
    "none",
    "none",
    "drop_key",
    "extra_key",
    "rename_key",
    "numpy_leaf",
    "leaf_for_tree",
    "constrain",
    "shape",
    "not_a_tree",
    "python_leaf",
]


def perturb(side, t, how):
    leaf_paths = [p for p in side.flatten(t) if not isinstance(side.flatten(t)[p], side.Tree)]
    if how == "none" or not leaf_paths:
        return t
    path = leaf_paths[-1]
    parent = t
    for k in path[:-1]:
        parent = parent[k]
    if how == "drop_key":
        del parent[path[-1]]
    elif how == "extra_key":
        parent["zz"] = jnp.zeros((2, 3), jnp.float32)
    elif how == "rename_key":  # same key count, different key set
        parent["zz"] = parent.pop(path[-1])
    elif how == "numpy_leaf":
        parent[path[-1]] = np.asarray(parent[path[-1]])
    elif how == "leaf_for_tree" and len(path) > 1:
        grand = t
        for k in path[:-2]:
            grand = grand[k]
        grand[path[-2]] = jnp.ones((2, 3), jnp.float32)
    elif how == "constrain":
        return t.with_constraints(side.shape_prefix(2))
    elif how == "shape":
        parent[path[-1]] = jnp.ones((2, 4), jnp.float32)
    elif how == "not_a_tree":
        return {"a": 1}
    elif how == "python_leaf":
        parent[path[-1]] = 1.5
    return t


def join_snapshot(side, v):
    if isinstance(v, list):
        return ("list", [join_snapshot(side, x) for x in v])
    if isinstance(v, side.Tree):
        return (
            "Tree",
            type(v).__name__,
            tuple((k, join_snapshot(side, c)) for k, c in v.items()),
            tuple(repr(c) for c in v.constraints),
        )
    if isinstance(v, jax.Array | np.ndarray):
        return (type(v).__module__.split(".")[0], str(v.dtype), v.shape, np.asarray(v).tolist())
    return ("value", type(v).__name__, repr(v))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    struct=join_structures().filter(lambda s: isinstance(s, dict)),
    n=st.integers(1, 4),
    how=st.sampled_from(PERTURB),
    op=st.sampled_from(
        ["stack0", "stack1", "stack-1", "concat0", "concat1", "split2", "split[1]", "split1_axis1", "split3"]
    ),
)
def test_join_and_split_match_the_pure_python_walk(struct, n, how, op):
    got = {}
    for side in (fast, pure):
        trees = [join_tree(side, struct, i, SUBCLASSES) for i in range(n)]
        trees[-1] = perturb(side, trees[-1], how)
        kind, rest = op[:5], op[5:]
        if kind == "stack":
            fn = lambda trees=trees, rest=rest, side=side: side.stack(trees, axis=int(rest))  # noqa: E731
        elif kind == "conca":
            fn = lambda trees=trees, op=op, side=side: side.concatenate(trees, axis=int(op[6:]))  # noqa: E731
        elif rest == "[1]":
            fn = lambda trees=trees, side=side: side.split(trees[-1], [1])  # noqa: E731
        elif rest == "1_axis1":
            fn = lambda trees=trees, side=side: side.split(trees[-1], 1, axis=1)  # noqa: E731
        else:
            fn = lambda trees=trees, rest=rest, side=side: side.split(trees[-1], int(rest))  # noqa: E731
        res = outcome(fn)
        got[side] = res if res[0] == "error" else ("ok", join_snapshot(side, res[1]))
    f, p = got[fast], got[pure]
    if f[0] == "ok" and p[0] == "ok":  # class names differ only by the test's subclass names
        f = repr(f).replace("_FastSub", "Sub")
        p = repr(p).replace("_PureSub", "Sub")
    assert f == p


def _plain_jax_trees(n):
    return [
        fast.Tree(a=jnp.full((2, 3), i, jnp.float32), x={"c": jnp.arange(4) + i, "e": fast.Tree()})
        for i in range(n)
    ]


def test_the_compiled_join_and_split_paths_are_taken(monkeypatch):
    from evotensor.tree import joining as structure

    trees = _plain_jax_trees(3)
    expected_stack = structure._join_reference(trees, "stack", 0, "stack")
    expected_split = structure._split_reference(expected_stack, 3, 0, 3)

    def fail(*args, **kwargs):
        raise AssertionError("the Python walk ran")

    monkeypatch.setattr(structure, "_join_reference", fail)
    monkeypatch.setattr(structure, "_split_reference", fail)
    s = fast.stack(trees)
    assert join_snapshot(fast, s) == join_snapshot(fast, expected_stack)
    assert join_snapshot(fast, fast.split(s, 3)) == join_snapshot(fast, expected_split)
    c = fast.concatenate(trees)
    assert c.a.shape == (6, 3) and c.x.c.shape == (12,) and list(c.x.keys()) == ["c", "e"]
    assert type(c.x.e) is fast.Tree and len(c.x.e) == 0


def test_join_columns_and_plain_leaves_against_a_python_column_walk():
    from evotensor.tree import _speedups as sp
    from evotensor.tree import joining as structure

    def columns(nodes):  # the obvious reference: leaf columns in depth-first sorted-key order
        out = []
        for k in nodes[0].keys():
            vals = [nd[k] for nd in nodes]
            if isinstance(vals[0], fast.Tree):
                out.extend(columns(vals))
            else:
                out.append(vals)
        return out

    trees = _plain_jax_trees(3)
    jax_types = {type(trees[0].a)}
    cols, nbytes = sp.join_columns(fast.Tree, trees, jax_types)
    ref = columns(trees)
    assert len(cols) == len(ref) and all(
        c == r for c, r in zip([[id(x) for x in c] for c in cols], [[id(x) for x in r] for r in ref])
    )
    assert nbytes == [len(c) * structure._nbytes(c[0]) for c in cols]
    leaves, lbytes = sp.plain_leaves(fast.Tree, trees[1], jax_types)
    assert [id(x) for x in leaves] == [id(c[1]) for c in ref]
    assert lbytes == [structure._nbytes(x) for x in leaves]
    # a leaf type not in jax_types: columns, but no byte counts
    assert sp.join_columns(fast.Tree, trees, set())[1] is None
    mixed = [trees[0], fast.Tree(a=np.ones((2, 3)), x={"c": jnp.arange(4), "e": fast.Tree()})]
    cols, nbytes = sp.join_columns(fast.Tree, mixed, jax_types)
    assert nbytes is None and [len(c) for c in cols] == [2, 2]
    # not the plain case: None
    assert sp.join_columns(fast.Tree, [trees[0], fast.Tree(a=1)], jax_types) is None  # key sets
    renamed = fast.Tree(a=trees[1].a, x={"c": trees[1].x.c, "f": fast.Tree()})
    assert sp.join_columns(fast.Tree, [trees[0], renamed], jax_types) is None  # same sizes
    assert sp.join_columns(fast.Tree, [trees[0], fast.Tree(a=1, x=2)], jax_types) is None  # tree/leaf
    assert sp.join_columns(fast.Tree, [trees[0], {"a": 1}], jax_types) is None  # not a tree
    anything = fast.node_predicate(lambda n: True, name="any")
    assert sp.join_columns(fast.Tree, [trees[0].with_constraints(anything)], jax_types) is None
    assert (
        sp.plain_leaves(fast.Tree, fast.Tree(x=fast.Tree(a=1).with_constraints(anything)), jax_types) is None
    )
    assert sp.join_columns(fast.Tree, [fast.Tree(), fast.Tree()], jax_types) == ([], [])
    with pytest.raises(TypeError):
        sp.join_columns(fast.Tree, [], jax_types)


@settings(max_examples=40, deadline=None)
@given(struct=join_structures().filter(lambda s: isinstance(s, dict)), count=st.integers(0, 3))
def test_build_and_build_pieces_against_unflatten(struct, count):
    from evotensor.tree import _speedups as sp

    t = join_tree(fast, struct, 1, SUBCLASSES)
    flat = fast.flatten(t)
    leaf_paths = [p for p, v in flat.items() if not isinstance(v, fast.Tree)]
    new = [f"leaf{i}" for i in range(len(leaf_paths))]
    ref = fast.unflatten({p: (new[leaf_paths.index(p)] if p in leaf_paths else fast.Tree()) for p in flat})
    built = sp.build(fast.Tree, t, new)
    # same structure and values as unflatten's, node classes of the template, no constraints
    assert fast.flatten(built).keys() == fast.flatten(ref).keys()
    assert [v for v in fast.flatten(built).values() if isinstance(v, str)] == new
    assert [type(n).__name__ for _, n in nodes(fast, built)] == [type(n).__name__ for _, n in nodes(fast, t)]
    assert all(n.constraints == () for _, n in nodes(fast, built))
    parts = [[f"{s}/{i}" for i in range(count)] for s in new]
    pieces = sp.build_pieces(fast.Tree, t, parts, count)
    assert len(pieces) == count
    for i, piece in enumerate(pieces):
        assert [v for v in fast.flatten(piece).values() if isinstance(v, str)] == [f"{s}/{i}" for s in new]
    if new:
        with pytest.raises(ValueError, match="fewer leaves"):
            sp.build(fast.Tree, t, new[:-1])
    if new and count:
        with pytest.raises(ValueError, match="fewer pieces"):
            sp.build_pieces(fast.Tree, t, [p[:-1] for p in parts], count)
    with pytest.raises(ValueError, match="more"):
        sp.build(fast.Tree, t, [*new, "extra"])
    with pytest.raises(ValueError, match="unconstrained"):
        sp.build(fast.Tree, t.with_constraints(fast.node_predicate(lambda n: True, name="any")), new)
