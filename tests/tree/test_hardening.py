"""Hardening of Tree (issue 16): a Tree can never contain itself (a cycle used to kill the
interpreter under ``jit``), concrete out-of-range indexing raises as NumPy does, and ``rise`` refuses
ragged leaves it cannot lift. Runs on the compiled core here and on the pure-Python one through
``tests/tree/test_speedups.py::test_tree_suite_passes_without_speedups``."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import evotensor.tree as tt
from evotensor.tree import Tree

ROOT = Path(__file__).resolve().parents[2]
KEYS = st.sampled_from(["a", "b", "c", "x", "y"])
SPECS = st.recursive(
    st.integers(0, 9), lambda c: st.dictionaries(KEYS, c, min_size=1, max_size=3), max_leaves=10
).filter(lambda s: isinstance(s, dict))


def _nodes(t, path=()):
    yield path, t
    for k, v in t.items():
        if isinstance(v, Tree):
            yield from _nodes(v, (*path, k))


def _set_routes(node, key, value):
    """Every public way of setting a child (attribute, item, through a dict that becomes a node)."""
    return [
        lambda: setattr(node, key, value),
        lambda: node.__setitem__(key, value),
        lambda: setattr(node, key, {"wrap": value}),
        lambda: node.__setitem__(key, tt.raw(value)),
    ]


# ---- cycles ---------------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(spec=SPECS, data=st.data())
def test_setting_a_tree_into_itself_or_a_descendant_is_refused(spec, data):
    t = Tree(spec)
    nodes = list(_nodes(t))
    target_path, target = data.draw(st.sampled_from(nodes))
    # an ancestor of the target (or the target itself) as the value: always a cycle
    ancestors = [(p, n) for p, n in nodes if target_path[: len(p)] == p]
    value_path, value = data.draw(st.sampled_from(ancestors))
    key = data.draw(st.sampled_from(["a", "new_key"]))
    before = jax.tree_util.tree_structure(t)
    for route in _set_routes(target, key, value):
        with pytest.raises(
            ValueError, match=f"cannot set key '{key}': the Tree being set .*would contain itself"
        ):
            route()
    assert jax.tree_util.tree_structure(t) == before  # nothing changed
    jax.jit(lambda u: u)(t)  # and the tree is still a finite pytree


def test_cycle_message_names_the_path_and_constrained_nodes_refuse_too():
    t = Tree(a={"b": {"c": 1}})
    with pytest.raises(ValueError, match=r"holds this node at a\.b"):
        t.a.b.c = t
    with pytest.raises(ValueError, match="is this node itself"):
        t.a["b"] = t.a
    c = Tree(x={"y": np.ones(2)}).with_constraints(tt.dtype("float64"))
    with pytest.raises(ValueError, match="would contain itself"):
        c.x.z = c
    # a subtree elsewhere (shared, not an ancestor) is allowed, and a copy of an ancestor too
    t.d = t.a.b
    t.a.b.e = jax.tree.map(lambda v: v, t)
    assert t.d is t.a.b and t.a.b.e.a.b.c == 1 and "e" not in t.a.b.e.a.b
    assert len(jax.tree_util.tree_leaves(jax.jit(lambda u: u)(t))) == len(jax.tree_util.tree_leaves(t)) == 6


def test_a_cyclic_tree_under_jit_cannot_be_made_and_the_interpreter_survives():
    """In a subprocess: this used to kill the interpreter (no catchable exception, with the C core)."""
    code = textwrap.dedent(
        """
        import jax, jax.numpy as jnp
        from evotensor.tree import Tree, SPEEDUPS
        t = Tree(a=Tree(b=jnp.ones(2)), c=jnp.zeros(3))
        attempts = (lambda: setattr(t.a, "b", t), lambda: t.a.__setitem__("b", t), lambda: setattr(t, "c", t))
        for attempt in attempts:
            try:
                attempt()
                print("created a cycle")
            except ValueError as e:
                print("refused:", str(e)[:40])
        out = jax.jit(lambda u: u * 2)(t)
        print("jit ok", SPEEDUPS, float(out.a.b.sum()), float(out.c.sum()))
        """
    )
    for env in ({}, {"EVOTENSOR_NO_SPEEDUPS": "1"}):
        proc = subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            env=dict(os.environ, JAX_PLATFORMS="cpu", **env),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])  # never a signal
        assert proc.stdout.count("refused: cannot set key") == 3 and "created a cycle" not in proc.stdout
        assert "jit ok" in proc.stdout and "4.0 0.0" in proc.stdout, proc.stdout


# ---- construction and indexing ----------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(spec=SPECS, bad_key=st.one_of(st.integers(), st.none(), st.tuples(st.integers())))
def test_construction_from_nested_dicts_and_non_string_keys(spec, bad_key):
    t = Tree(spec)
    assert t.to_dict() == spec
    with pytest.raises(TypeError, match="keys must be strings"):
        Tree({**spec, bad_key: 1})
    with pytest.raises(TypeError, match="keys must be strings"):
        Tree({"a": {bad_key: 1}})


@settings(max_examples=40, deadline=None)
@given(
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    index=st.one_of(
        st.integers(-8, 8),
        st.tuples(st.integers(-8, 8), st.integers(-8, 8)),
        st.tuples(st.just(Ellipsis), st.integers(-8, 8)),
        st.lists(st.integers(-8, 8), min_size=1, max_size=4).map(np.array),
        st.lists(st.integers(-8, 8), min_size=1, max_size=4).map(jnp.array),
        st.tuples(st.none(), st.integers(-8, 8), st.builds(slice, st.none() | st.integers(-5, 5))),
    ),
)
def test_concrete_indexing_raises_where_numpy_raises_naming_the_leaf(shape, index):
    leaf = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    t = Tree(p=jnp.asarray(leaf), q={"r": jnp.asarray(leaf) + 1})
    try:
        ref = leaf[index if not isinstance(index, jax.Array) else np.asarray(index)]
    except IndexError:
        with pytest.raises(IndexError) as info:
            t[index]
        text = str(info.value) + " ".join(getattr(info.value, "__notes__", []))
        assert " p" in text or "at p" in text or "q.r" in text, text
        return
    out = t[index]
    np.testing.assert_array_equal(np.asarray(out.p), ref)
    np.testing.assert_array_equal(np.asarray(out.q.r), ref + 1)


def test_out_of_range_index_message_and_traced_indexing_is_unchanged():
    t = Tree(x=jnp.arange(4.0))
    with pytest.raises(
        IndexError, match=r"index 10 is out of bounds for axis 0 with size 4 of the leaf at x"
    ):
        t[10]
    with pytest.raises(IndexError, match=r"index -5 .* leaf at x"):
        tt.index(t, -5)
    # inside jit nothing can raise: JAX's clamping applies, as documented
    assert float(jax.jit(lambda u, i: u[i])(t, 10).x) == 3.0


# ---- rise -----------------------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(1, 4), min_size=2, max_size=4), kind=st.sampled_from([list, tuple]))
def test_rise_of_ragged_leaves_raises_naming_the_lengths(lengths, kind):
    t = Tree({f"k{i}": kind(range(n)) for i, n in enumerate(lengths)})
    if len(set(lengths)) == 1:
        out = tt.rise(t)
        assert isinstance(out, kind) and len(out) == lengths[0]
        return
    odd = next(i for i, n in enumerate(lengths) if n != lengths[0])
    with pytest.raises(
        ValueError,
        match=f"ragged {kind.__name__}s: the leaf at k0 has {lengths[0]} items, "
        f"the one at k{odd} has {lengths[odd]}",
    ):
        tt.rise(t)


def test_rise_of_ragged_dicts_raises_and_nested_raggedness_still_stops():
    with pytest.raises(
        ValueError, match=r"ragged dicts: the leaf at x has keys \['a'\], the one at y has \['b'\]"
    ):
        tt.rise(Tree(x=tt.raw({"a": 1}), y=tt.raw({"b": 1})))
    # below a lifted level, ragged lists stay leaves (the documented example)
    out = tt.rise(Tree(x=tt.raw({"a": [1, 2], "b": [2, 3]}), y=tt.raw({"a": [5, 6, 7], "b": [7, 8]})))
    assert out["a"].to_dict() == {"x": [1, 2], "y": [5, 6, 7]}
    # leaves that are not containers: nothing to lift, the tree comes back (not an error)
    t = Tree(x=1, y=jnp.ones(2))
    assert tt.rise(t) is t
