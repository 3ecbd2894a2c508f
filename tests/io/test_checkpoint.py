import errno
import os
import re
import stat

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from evotensor.io.atomic import atomic_open, remove_stale_temp_files, temp_name_pattern, write_text_atomic
from evotensor.io.checkpoint import (
    CheckpointError,
    load_extra_arrays,
    load_metadata,
    load_pytree,
    save_pytree,
)


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


# ---- damaged files, permissions, stale temporary files ---------------------------------------------


def _damaged_variants(good: bytes) -> dict[str, bytes]:
    middle = bytearray(good)
    middle[len(good) // 5 : len(good) // 5 + 16] = b"\xff" * 16  # inside the first member's data
    return {
        "empty": b"",
        "truncated": good[: len(good) // 2],
        "tail_cut": good[:-7],
        "random_bytes": bytes(np.random.default_rng(0).integers(0, 256, 600, dtype=np.uint8)),
        "corrupted_middle": bytes(middle),
        "npy_not_npz": b"\x93NUMPY\x01\x00" + b"x" * 40,
    }


@pytest.mark.parametrize("variant", list(_damaged_variants(b"0" * 64)))
def test_damaged_checkpoint_is_a_checkpoint_error_naming_the_file(tmp_path, variant):
    good_path = tmp_path / "good.npz"
    save_pytree(good_path, {"a": jnp.arange(40.0), "k": jax.random.key(1)}, metadata={"generation": 3})
    bad = tmp_path / f"{variant}.npz"
    bad.write_bytes(_damaged_variants(good_path.read_bytes())[variant])
    template = {"a": jnp.zeros(40), "k": jax.random.key(0)}
    loaders = [lambda p: load_pytree(p, template), load_metadata, load_extra_arrays]
    if variant == "corrupted_middle":  # a damaged leaf: only the loader that reads it can tell
        loaders = loaders[:1]
    for load in loaders:
        with pytest.raises(CheckpointError, match=re.escape(str(bad))) as info:
            load(bad)
        assert "pickled" not in str(info.value)  # numpy's misleading guess for random bytes
        assert isinstance(info.value, ValueError)


def test_npz_of_another_kind_is_refused_by_name(tmp_path):
    path = tmp_path / "other.npz"
    np.savez(path, x=np.arange(3))
    with pytest.raises(CheckpointError, match=r"other\.npz is not a checkpoint written by evotensor"):
        load_metadata(path)
    np.savez(path, __meta__=np.frombuffer(b"{not json", np.uint8))
    with pytest.raises(CheckpointError, match=r"other\.npz is damaged"):
        load_pytree(path, {"x": jnp.zeros(3)})


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_atomic_writes_honour_the_umask_like_open(tmp_path, umask):
    old = os.umask(umask)
    try:
        with open(tmp_path / "plain", "w") as handle:
            handle.write("x")
        atomic_open_path = tmp_path / "atomic"
        with atomic_open(atomic_open_path, "w") as handle:
            handle.write("x")
        save_pytree(tmp_path / "c.npz", {"a": jnp.zeros(2)})
    finally:
        os.umask(old)
    expected = stat.S_IMODE(os.stat(tmp_path / "plain").st_mode)
    assert expected == 0o666 & ~umask
    assert stat.S_IMODE(os.stat(atomic_open_path).st_mode) == expected
    assert stat.S_IMODE(os.stat(tmp_path / "c.npz").st_mode) == expected


def test_atomic_replace_keeps_the_mode_of_the_file_it_replaces(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text("old")
    os.chmod(path, 0o640)
    write_text_atomic(path, "new ü")
    assert path.read_text(encoding="utf-8") == "new ü"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640


def test_remove_stale_temp_files_only_touches_the_named_files(tmp_path):
    stale = [tmp_path / ".checkpoint.npz.0123456789abcdef.tmp", tmp_path / ".checkpoint.npz.k2_x9qzp.tmp"]
    keep = [
        tmp_path / ".other.npz.0123456789abcdef.tmp",  # not one of the names
        tmp_path / "checkpoint.npz",
        tmp_path / ".checkpoint.npz.tmp",  # no token
        tmp_path / "notes.tmp",
    ]
    for path in stale + keep:
        path.write_bytes(b"x")
    removed = remove_stale_temp_files(tmp_path, ["checkpoint.npz", "config.json"])
    assert sorted(removed) == sorted(stale)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in keep)
    assert temp_name_pattern().match(stale[0].name)["name"] == "checkpoint.npz"


def test_failed_atomic_write_of_a_checkpoint_leaves_the_old_one_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "c.npz"
    save_pytree(path, {"a": jnp.arange(3.0)}, metadata={"generation": 1})

    def no_space(handle, **arrays):
        handle.write(b"partial")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(np, "savez", no_space)
    with pytest.raises(OSError) as info:
        save_pytree(path, {"a": jnp.arange(3.0) + 1}, metadata={"generation": 2})
    assert info.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert load_metadata(path) == {"generation": 1}
    np.testing.assert_array_equal(load_pytree(path, {"a": jnp.zeros(3)})["a"], np.arange(3.0))
    assert os.listdir(tmp_path) == ["c.npz"]


@pytest.mark.parametrize("variant", ["empty", "truncated", "random_bytes", "corrupted_middle", "npy_not_npz"])
def test_tree_load_of_a_damaged_file_names_the_file(tmp_path, variant):
    import evotensor.tree as et
    from evotensor.tree import Tree

    good = tmp_path / "good.npz"
    et.save(Tree(a=np.arange(50.0), b={"c": np.ones(3)}), good)
    bad = tmp_path / f"{variant}.npz"
    bad.write_bytes(_damaged_variants(good.read_bytes())[variant])
    with pytest.raises(ValueError, match=re.escape(str(bad))) as info:
        et.load(bad)
    assert "pickled" not in str(info.value)
    assert et.load(good).b.c.shape == (3,)
