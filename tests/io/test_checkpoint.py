import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from evotensor.io.atomic import atomic_open
from evotensor.io.checkpoint import load_extra_arrays, load_metadata, load_pytree, save_pytree


def test_round_trip_with_keys_dtypes_and_extras(tmp_path):
    tree = {
        "key": jax.random.key(3),
        "x": jnp.arange(5, dtype=jnp.float32) / 3,
        "n": jnp.int32(7),
        "nested": (jnp.ones((2, 2), jnp.bfloat16), np.array([True, False])),
    }
    path = tmp_path / "c.npz"
    save_pytree(path, tree, metadata={"generation": 4}, extra_arrays={"h": np.arange(3.0)})
    template = jax.tree_util.tree_map(lambda x: x, tree)
    loaded = load_pytree(path, template)
    assert jax.random.key_impl(loaded["key"]) == jax.random.key_impl(tree["key"])
    np.testing.assert_array_equal(jax.random.key_data(loaded["key"]), jax.random.key_data(tree["key"]))
    np.testing.assert_array_equal(loaded["x"], tree["x"])
    assert loaded["nested"][0].dtype == jnp.bfloat16
    assert load_metadata(path) == {"generation": 4}
    np.testing.assert_array_equal(load_extra_arrays(path)["h"], np.arange(3.0))
    # the reloaded key draws the same numbers
    np.testing.assert_array_equal(
        jax.random.normal(loaded["key"], (3,)), jax.random.normal(tree["key"], (3,))
    )


def test_mismatched_template_names_the_leaf(tmp_path):
    path = tmp_path / "c.npz"
    save_pytree(path, {"a": jnp.zeros(3)})
    with pytest.raises(ValueError, match=r"\['a'\].*shape"):
        load_pytree(path, {"a": jnp.zeros(4)})
    with pytest.raises(ValueError, match="leaves"):
        load_pytree(path, {"a": jnp.zeros(3), "b": jnp.zeros(1)})


def test_atomic_write_leaves_old_file_on_failure(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("old")
    with pytest.raises(RuntimeError):
        with atomic_open(path, "w") as handle:
            handle.write("new partial")
            raise RuntimeError("crash mid-write")
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["f.txt"]  # no temp file left behind
