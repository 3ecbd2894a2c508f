import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from tests.gp.tree_helpers import FS, N_VARS, count, forests, trees

from evotensor.gp import functions
from evotensor.gp.encoding import CONST, PAD, VAR, Forest, subtree_sizes, subtree_sizes_numpy

_sizes_jit = jax.jit(lambda op: subtree_sizes(op, FS.arity))


def test_opcodes_match_function_set_contract():
    assert (PAD, CONST, VAR) == (functions.PAD, functions.CONST, functions.VAR) == (0, 1, 2)


def test_from_tuples_layout_by_hand():
    f = Forest.from_tuples([("add", ("var", 0), ("mul", ("const", 1.5), ("var", 2)))], 7, FS)
    add, mul = FS.opcode("add"), FS.opcode("mul")
    assert f.opcode.tolist() == [[add, VAR, mul, CONST, VAR, PAD, PAD]]
    assert f.value.tolist() == [[0, 0, 0, 1.5, 2, 0, 0]]
    assert f.size.tolist() == [[5, 1, 3, 1, 1, 0, 0]]
    assert f.output.tolist() == [[-1] * 7]
    assert f.opcode.dtype == jnp.int32 and f.value.dtype == jnp.float32
    assert f.length.tolist() == [5]
    f.check(FS, n_vars=3)


def test_modi_tuples_and_infix():
    t = ("modi", 1, ("sub", ("modi", 0, ("sin", ("var", 1))), ("const", -2.0)))
    f = Forest.from_tuples([t], 6, FS)
    assert f.output.tolist() == [[1, 0, -1, -1, -1, -1]]
    assert f.to_tuples(FS) == [t]
    assert f[0].to_infix(FS) == "out[1]=(out[0]=sin(x1) - (-2))"
    f.check(FS, n_vars=2, n_outputs=2)
    with pytest.raises(ValueError, match="output index"):
        f.check(FS, n_outputs=1)


def test_infix_rounding_and_forms():
    t = ("if_then_else", ("var", 0), ("div", ("const", 3.14159265), ("var", 1)), ("neg", ("const", 2.0)))
    f = Forest.from_tuples([t, ("var", 2)], 8, FS)
    assert f.to_infix(FS, precision=3) == ["if_then_else(x0, 3.14 / x1, neg(2))", "x2"]


@settings(max_examples=40, deadline=None)
@given(forests(6, 24, n_outputs=3))
def test_roundtrip_and_check(data):
    forest, ts = data
    forest.check(FS, n_vars=N_VARS, n_outputs=3)
    assert forest.to_tuples(FS) == [tuple(t) for t in ts]
    assert forest.length.tolist() == [count(t) for t in ts]
    # jit-able sizes equal the NumPy sizes equal the stored sizes
    np.testing.assert_array_equal(np.asarray(_sizes_jit(forest.opcode)), np.asarray(forest.size))
    np.testing.assert_array_equal(subtree_sizes_numpy(np.asarray(forest.opcode), FS.arity), forest.size)
    # indexing gives single trees
    one = forest[2]
    assert one.opcode.shape == (24,) and one.to_tuples(FS) == ts[2]


@settings(max_examples=20, deadline=None)
@given(trees(20))
def test_depth_matches_pointer_tree(t):
    def depths(node, d, out):
        if node[0] == "modi":
            return depths(node[2], d, out)
        out.append(d)
        if node[0] not in ("const", "var"):
            for k in node[1:]:
                depths(k, d + 1, out)
        return out

    f = Forest.from_tuples([t], 20, FS)
    expected = depths(t, 0, [])
    assert np.asarray(f.depth())[0, : len(expected)].tolist() == expected


def _corrupt(field, pos, val):
    f = Forest.from_tuples([("add", ("var", 0), ("const", 1.0))], 5, FS)
    arr = np.asarray(getattr(f, field)).copy()
    arr[0, pos] = val
    return f.replace(**{field: jnp.asarray(arr)})


@pytest.mark.parametrize(
    "field,pos,val,msg",
    [
        ("size", 0, 2, "padding"),
        ("size", 0, 9, "length"),
        ("size", 1, 2, "size"),
        ("opcode", 4, VAR, "padding"),
        ("value", 3, 1.0, "padding"),
        ("output", 4, 0, "padding"),
        ("size", 4, 1, "padding"),
        ("opcode", 1, PAD, "PAD inside"),
        ("opcode", 0, 99, "unknown opcode"),
        ("value", 1, 0.5, "variable index"),
        ("value", 0, 1.0, "function node has value"),
        ("value", 2, np.inf, "not finite"),
        ("opcode", 0, FS.opcode("sin"), "size|trees"),
    ],
)
def test_check_rejects_corruption(field, pos, val, msg):
    with pytest.raises(ValueError, match=msg):
        _corrupt(field, pos, val).check(FS, n_vars=1)


def test_check_names_the_tree_and_position():
    f = Forest.from_tuples([("var", 0), ("add", ("var", 0), ("var", 1))], 4, FS)
    size = np.asarray(f.size).copy()
    size[1, 2] = 3
    with pytest.raises(ValueError, match=r"tree \(1,\), position 2"):
        f.replace(size=jnp.asarray(size)).check(FS)


def test_empty_and_errors():
    e = Forest.empty(3, 5)
    assert e.opcode.shape == (3, 5) and int(jnp.sum(e.output)) == -15 and e.length.tolist() == [0, 0, 0]
    with pytest.raises(ValueError, match="length"):
        e.check(FS)
    with pytest.raises(ValueError, match="max_len"):
        Forest.empty(3, 0)
    with pytest.raises(ValueError, match="more than max_len"):
        Forest.from_tuples([("add", ("var", 0), ("var", 1))], 2, FS)
    with pytest.raises(ValueError, match="tree 0.*takes 2"):
        Forest.from_tuples([("add", ("var", 0))], 4, FS)
    with pytest.raises(ValueError, match="not in this set"):
        Forest.from_tuples([("cosh", ("var", 0))], 4, FS)
    with pytest.raises(TypeError, match="list"):
        Forest.from_tuples(("var", 0), 4, FS)


def test_forest_is_a_pytree_that_jits():
    f = Forest.from_tuples([("var", 0), ("neg", ("var", 1))], 4, FS)
    g = jax.jit(lambda x: x.replace(value=x.value * 2 + (x.opcode == VAR)))(f)
    assert isinstance(g, Forest) and g.value.tolist() == [[1, 0, 0, 0], [0, 3, 0, 0]]
    assert len(jax.tree_util.tree_leaves(f)) == 4
