"""evotensor.core.packing: rows of several arrays in one int32 array, bit for bit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from evotensor.core.checks import ArgumentError
from evotensor.core.packing import from_int32, pack_rows, packable, to_int32, unpack_rows

DTYPES = [np.float32, np.int32, np.uint32, np.bool_]


def _leaf(rng, dtype, rows, tail):
    shape = (rows, *tail)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype == np.float32:
        a = rng.standard_normal(shape).astype(np.float32)
        specials = np.array([np.nan, -0.0, np.inf, -np.inf], np.float32)
        a.reshape(-1)[: min(a.size, 4)] = specials[: min(a.size, 4)]
        return a
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


@given(
    rows=st.integers(1, 5),
    leaves=st.lists(
        st.tuples(st.sampled_from(DTYPES), st.lists(st.integers(1, 3), max_size=2)), min_size=1, max_size=4
    ),
    seed=st.integers(0, 2**16),
)
def test_rows_round_trip_bit_for_bit(rows, leaves, seed):
    rng = np.random.default_rng(seed)
    tree = {f"leaf{i}": _leaf(rng, d, rows, tuple(t)) for i, (d, t) in enumerate(leaves)}
    packed = pack_rows(tree)
    width = sum(int(np.prod(t, dtype=np.int64)) for _, t in leaves)
    assert packed.dtype == jnp.int32 and packed.shape == (rows, width)
    back = unpack_rows(packed, tree)
    for key, a in tree.items():
        b = np.asarray(back[key])
        assert b.dtype == a.dtype and b.shape == a.shape
        np.testing.assert_array_equal(b.view(np.uint8), a.view(np.uint8), err_msg=key)
    # a selection of rows (as after a gather) unpacks with the same template
    picked = unpack_rows(packed[jnp.array([rows - 1, 0])], tree)
    for key, a in tree.items():
        np.testing.assert_array_equal(np.asarray(picked[key]).view(np.uint8), a[[rows - 1, 0]].view(np.uint8))


def test_only_bool_and_32_bit_arrays_pack():
    assert packable(jnp.float32) and packable(jnp.uint32) and packable(bool)
    assert not packable(jnp.int8) and not packable(jnp.float16)
    with pytest.raises(ArgumentError, match="int8"):
        to_int32(jnp.zeros(3, jnp.int8))
    with pytest.raises(ArgumentError, match="row count"):
        pack_rows((jnp.zeros((3, 2)), jnp.zeros((4,))))
    with pytest.raises(ArgumentError, match="at least one"):
        pack_rows(())
    with pytest.raises(ArgumentError, match="width 3"):
        unpack_rows(jnp.zeros((2, 3), jnp.int32), (jnp.zeros((2, 2)),))
    np.testing.assert_array_equal(from_int32(to_int32(jnp.array([True, False])), bool), [True, False])


def test_all_gather_rows_on_one_device_is_the_identity_bit_for_bit():
    from jax.sharding import PartitionSpec as P

    from evotensor.core.mesh import auto_mesh
    from evotensor.core.packing import all_gather_rows

    mesh = auto_mesh(jax.make_mesh((1,), ("pop",)))
    tree = (jnp.array([[np.nan, -0.0]], jnp.float32), jnp.array([7], jnp.int8), jnp.array([True]))
    spec = (P("pop"), P("pop"), P("pop"))
    gather = jax.shard_map(
        lambda t: all_gather_rows(t, "pop"), mesh=mesh, in_specs=(spec,), out_specs=P(), check_vma=False
    )
    got = jax.jit(gather)(tree)
    for a, b in zip(got, tree):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))
