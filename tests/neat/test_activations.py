"""Activations and aggregations: every built-in equals its scalar formula (neat-python 2.1 and
TensorNEAT), the segment and dense forms agree, id dispatch selects per node, registration works."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.neat.reference_network import NEAT_PYTHON_ACT, NEAT_PYTHON_AGG, TENSORNEAT_ACT, TENSORNEAT_AGG

from evotensor.core.checks import ArgumentError
from evotensor.neat import activations as A

GRID = np.array(
    [-1e3, -70.0, -13.0, -3.5, -2.0, -1.0, -0.5, -0.2, -1e-3, -1e-8, 0.0, 1e-8, 1e-3, 0.2, 0.5, 1.0, 2.0]
    + [3.5, 13.0, 70.0, 1e3]
    + list(np.linspace(-4, 4, 41)),
    np.float32,
)


def test_registries_list_every_name():
    assert set(A.activation_set("neat-python")) >= set(NEAT_PYTHON_ACT)
    assert set(A.activation_set("tensorneat")) >= set(TENSORNEAT_ACT)
    assert set(A.aggregation_set("neat-python")) >= set(NEAT_PYTHON_AGG)
    assert set(A.aggregation_set("tensorneat")) >= set(TENSORNEAT_AGG)
    assert "median" not in A.aggregation_set("tensorneat")
    assert A.activation_set() is not A.activation_set()  # copies


@pytest.mark.parametrize(
    "scheme, name",
    [("neat-python", n) for n in NEAT_PYTHON_ACT] + [("tensorneat", n) for n in TENSORNEAT_ACT],
)
def test_activation_equals_scalar_formula(scheme, name):
    ref = (NEAT_PYTHON_ACT if scheme == "neat-python" else TENSORNEAT_ACT)[name]
    fn = A.activation_set(scheme)[name]
    got = np.asarray(jax.jit(fn)(jnp.asarray(GRID)))
    assert got.shape == GRID.shape and got.dtype == np.float32
    for z, g in zip(GRID.tolist(), got.tolist()):
        try:
            want = ref(z)
        except OverflowError:
            want = math.inf
        if abs(want) > 3e38:
            assert not np.isfinite(g) or abs(g) > 1e37, (name, z, g)
            continue
        np.testing.assert_allclose(g, want, rtol=2e-6, atol=1e-6, err_msg=f"{scheme} {name}({z})")


def test_scheme_differences():
    np_acts, tn_acts = A.activation_set("neat-python"), A.activation_set("tensorneat")
    z = jnp.asarray([0.3])
    assert float(np_acts["sigmoid"](z)[0]) == pytest.approx(1 / (1 + math.exp(-1.5)), rel=1e-6)
    assert float(tn_acts["sigmoid"](z)[0]) == pytest.approx(1 / (1 + math.exp(-0.3)), rel=1e-6)
    assert float(np_acts["inv"](jnp.zeros(1))[0]) == 0.0
    assert float(tn_acts["inv"](jnp.zeros(1))[0]) == pytest.approx(-1e7)
    assert A.aggregation_set("neat-python")["product"].empty == 1.0
    assert A.aggregation_set("tensorneat")["product"].empty == 0.0


segments = st.lists(
    st.lists(st.floats(-5, 5, allow_nan=False, width=32), max_size=6),
    min_size=1,
    max_size=6,  # MAX_SEGS, MAX_LEN
)


MAX_SEGS, MAX_LEN = 6, 6
E_PAD = MAX_SEGS * MAX_LEN + 2


def _padded(segs):
    """Fixed shapes (one compilation per aggregation): edges sorted by segment, the unused slots
    (and two junk values) in the dump segment ``MAX_SEGS``, as the network passes them."""
    values = [v for s in segs for v in s]
    ids = [i for i, s in enumerate(segs) for _ in s]
    pad = E_PAD - len(values)
    values = np.asarray(values + [7.0, -9.0] + [0.0] * (pad - 2), np.float32)
    ids = np.asarray(ids + [MAX_SEGS] * pad, np.int32)
    counts = np.zeros(MAX_SEGS, np.int32)
    counts[: len(segs)] = [len(s) for s in segs]
    mat = np.full((MAX_SEGS, MAX_LEN), 123.0, np.float32)
    mask = np.zeros((MAX_SEGS, MAX_LEN), bool)
    for i, s in enumerate(segs):
        mat[i, : len(s)] = s
        mask[i, : len(s)] = True
    return values, ids, counts, mat, mask


_COMPILED = {}


def _compiled(scheme, name):
    if (scheme, name) not in _COMPILED:
        fs = A.function_set(scheme)
        agg = fs.aggregation(name)
        plain = A.Aggregation(name, agg.segment, agg.empty)

        @jax.jit
        def run(values, ids, counts, mat, mask):
            seg = A.apply_aggregation(fs, (name,), jnp.zeros(MAX_SEGS, jnp.int32), values, ids, counts)
            return seg, agg.dense_reduce(mat, mask), plain.dense_reduce(mat, mask)

        _COMPILED[scheme, name] = run
    return _COMPILED[scheme, name]


@pytest.mark.parametrize(
    "scheme, name",
    [("neat-python", n) for n in NEAT_PYTHON_AGG] + [("tensorneat", n) for n in TENSORNEAT_AGG],
)
@given(segs=segments)
def test_aggregation_equals_scalar_formula(scheme, name, segs):
    ref = (NEAT_PYTHON_AGG if scheme == "neat-python" else TENSORNEAT_AGG)[name]
    values, ids, counts, mat, mask = _padded(segs)
    seg, dense, fallback = _compiled(scheme, name)(values, ids, counts, mat, mask)
    n = len(segs)
    want = np.asarray([ref([float(np.float32(v)) for v in s]) for s in segs])
    np.testing.assert_allclose(np.asarray(seg)[:n], want, rtol=1e-5, atol=1e-5)
    # the dense (row-wise masked) form, and the generic one derived from the segment form
    nonempty = counts[:n] > 0
    np.testing.assert_allclose(np.asarray(dense)[:n][nonempty], want[nonempty], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(fallback)[:n][nonempty], want[nonempty], rtol=1e-5, atol=1e-5)


def test_maxabs_ties_take_the_first_edge():
    fs = A.function_set()
    values = jnp.asarray([2.0, -3.0, 3.0, -1.0, 1.0])
    ids = jnp.asarray([0, 0, 0, 1, 1], jnp.int32)
    run = jax.jit(
        lambda v: A.apply_aggregation(fs, ("maxabs",), jnp.zeros(2, jnp.int32), v, ids, jnp.asarray([3, 2]))
    )
    got = run(values)
    assert np.asarray(got).tolist() == [-3.0, -1.0]  # Python's max(x, key=abs) keeps the first
    assert NEAT_PYTHON_AGG["maxabs"]([2.0, -3.0, 3.0]) == -3.0


def test_segment_reductions_gpu_form_matches_cpu_form():
    """The fixed-order scan used off-CPU equals the CPU segment ops."""
    rng = np.random.default_rng(0)
    ids = np.sort(rng.integers(0, 9, 40)).astype(np.int32)
    ids[-5:] = 9  # dropped
    values = rng.normal(size=40).astype(np.float32)
    scan = jax.jit(A._seg_scan, static_argnums=(2, 3))
    got_sum = scan(jnp.asarray(values), jnp.asarray(ids), 9, jnp.add)
    got_prod = scan(jnp.asarray(values), jnp.asarray(ids), 9, jnp.multiply)
    want_sum = np.asarray(jax.ops.segment_sum(values, ids, 9))
    want_prod = np.asarray(jax.ops.segment_prod(values, ids, 9))
    present = np.isin(np.arange(9), ids)
    np.testing.assert_allclose(np.asarray(got_sum), want_sum, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(got_prod)[present], want_prod[present], rtol=1e-5)


def test_activation_dispatch_by_id():
    fs = A.function_set()
    options = ("sigmoid", "relu", "identity", "sigmoid", "cube")
    ids = jnp.asarray([0, 1, 2, 3, 4, 1], jnp.int32)
    z = jnp.asarray([0.3, -0.7, -2.0, -0.1, 1.5, 2.5])
    run = jax.jit(lambda z: A.apply_activation(fs, options, ids, z))
    got = np.asarray(run(z))
    want = [NEAT_PYTHON_ACT[options[i]](float(np.float32(v))) for i, v in zip(ids.tolist(), z.tolist())]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    # batch axes in front broadcast against the per-node ids
    got2 = np.asarray(run(jnp.stack([z, z])))
    np.testing.assert_allclose(got2, np.stack([got, got]))


def test_aggregation_dispatch_by_id():
    fs = A.function_set()
    options = ("sum", "product", "max", "median")
    values = jnp.asarray([1.0, 2.0, 3.0, 4.0, -1.0, 0.5, 2.0, 9.0])
    ids = jnp.asarray([0, 0, 1, 1, 2, 2, 3, 4], jnp.int32)  # node 4 has one edge, node 5 none
    counts = jnp.asarray([2, 2, 2, 1, 1, 0])
    node_ids = jnp.asarray([0, 1, 2, 3, 0, 1], jnp.int32)
    got = np.asarray(jax.jit(lambda v: A.apply_aggregation(fs, options, node_ids, v, ids, counts))(values))
    np.testing.assert_allclose(got, [3.0, 12.0, 0.5, 2.0, 9.0, 1.0])  # empty product is 1
    empty = A.aggregation_empty(fs, options, node_ids)
    np.testing.assert_array_equal(np.asarray(empty), [0.0, 1.0, 0.0, 0.0, 0.0, 1.0])


def test_register_and_function_sets():
    name = "test_swish_for_registry"
    with pytest.raises(ArgumentError, match="unknown activation"):
        A.function_set().activation(name)
    A.register_activation(name, lambda z: z * jax.nn.sigmoid(z))
    try:
        fs = A.function_set("neat-python")
        assert float(fs.activation(name)(jnp.asarray(1.0))) == pytest.approx(1 / (1 + math.exp(-1)))
        assert name not in A.activation_set("tensorneat")
        with pytest.raises(ArgumentError, match="already exists"):
            A.register_activation(name, jnp.tanh)
        A.register_activation(name, jnp.tanh, replace=True)
        assert float(A.function_set().activation(name)(jnp.asarray(1.0))) == pytest.approx(math.tanh(1))
    finally:
        A._REGISTRY["neat-python"][0].pop(name)
    # a user aggregation, as a plain segment function, registered and in a private set
    rms = lambda v, s, n: jnp.sqrt(jax.ops.segment_sum(v * v, s, n))  # noqa: E731
    A.register_aggregation("test_l2", rms, scheme="tensorneat", empty=-1.0)
    try:
        agg = A.function_set("tensorneat").aggregation("test_l2")
        assert agg.empty == -1.0 and agg.name == "test_l2"
    finally:
        A._REGISTRY["tensorneat"][1].pop("test_l2")
    fs = A.function_set().with_activation("double", lambda z: 2 * z).with_aggregation("l2", rms, empty=0.5)
    assert float(fs.activation("double")(jnp.asarray(3.0))) == 6.0
    got = A.apply_aggregation(
        fs,
        ("l2",),
        jnp.zeros(2, jnp.int32),
        jnp.asarray([3.0, 4.0]),
        jnp.asarray([0, 0]),
        jnp.asarray([2, 0]),
    )
    np.testing.assert_allclose(np.asarray(got), [5.0, 0.5])
    assert hash(fs) == hash(fs) and fs == fs
    with pytest.raises(ArgumentError, match="unknown activation"):
        A.function_set().activation("double")  # the private set did not touch the registry


def test_bad_arguments():
    with pytest.raises(ArgumentError, match="scheme"):
        A.activation_set("neat")
    with pytest.raises(ArgumentError, match="functions"):
        A.function_set("pytorch-neat")
    with pytest.raises(ArgumentError, match="callable"):
        A.register_activation("x", 3)
    with pytest.raises(ArgumentError, match="name"):
        A.register_activation("", jnp.tanh)
    with pytest.raises(ArgumentError, match="segment"):
        A.Aggregation("bad", None)
    with pytest.raises(ArgumentError, match="empty"):
        A.Aggregation("bad", A.segment_sum, empty="zero")
    with pytest.raises(ArgumentError, match="unknown aggregation"):
        A.function_set().check_options(("sigmoid",), ("sum", "nope"))
