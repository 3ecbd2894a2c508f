import dataclasses

import jax
import jax.numpy as jnp
import pytest

from evotensor.core import pytree_dataclass, static_field


@pytree_dataclass
class State:
    x: jax.Array
    n: int = static_field(default=3)


def test_leaves_and_static_fields():
    s = State(x=jnp.ones(2), n=4)
    leaves, treedef = jax.tree_util.tree_flatten(s)
    assert len(leaves) == 1
    assert jax.tree_util.tree_unflatten(treedef, leaves).n == 4


def test_frozen_and_replace():
    s = State(x=jnp.ones(2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.x = jnp.zeros(2)
    t = s.replace(x=jnp.zeros(2))
    assert float(t.x.sum()) == 0.0 and float(s.x.sum()) == 2.0


def test_passes_through_jit_vmap_scan():
    s = State(x=jnp.arange(6.0).reshape(3, 2))
    out = jax.jit(jax.vmap(lambda st: st.replace(x=st.x * 2)))(s)
    assert out.x.shape == (3, 2) and float(out.x[2, 1]) == 10.0
    final, _ = jax.lax.scan(lambda c, _: (c.replace(x=c.x + 1), None), State(x=jnp.zeros(2)), None, length=5)
    assert float(final.x[0]) == 5.0


def test_a_subclass_adds_its_own_fields_as_leaves():
    @pytree_dataclass
    class More(State):
        y: jax.Array = None

    m = More(x=jnp.ones(2), y=jnp.zeros(3))
    assert isinstance(m, State) and [f.name for f in dataclasses.fields(m)] == ["x", "n", "y"]
    leaves, treedef = jax.tree_util.tree_flatten(m)
    assert [leaf.shape for leaf in leaves] == [(2,), (3,)]
    back = jax.tree_util.tree_unflatten(treedef, leaves)
    assert type(back) is More and back.y.shape == (3,) and back.n == 3
    assert float(jax.jit(lambda s: s.replace(y=s.y + 2))(m).y.sum()) == 6.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.y = jnp.ones(3)
