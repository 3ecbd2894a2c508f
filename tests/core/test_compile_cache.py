"""The persistent compilation cache run() and run_many() turn on (each case in a fresh interpreter,
since JAX's configuration is process-global)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SCRIPT = """
import jax, jax.numpy as jnp, evotensor, json, os
from evotensor.es import OpenES
from evotensor.problems import Sphere
if os.environ.get("USER_DIR"):
    jax.config.update("jax_compilation_cache_dir", os.environ["USER_DIR"])
evotensor.run(OpenES(8, solution=jnp.zeros(3)), Sphere(3), 2, jax.random.key(0), progress=False)
print(json.dumps(jax.config.jax_compilation_cache_dir))
"""


def _run(env_extra: dict[str, str], tmp_path) -> str | None:
    env = {k: v for k, v in os.environ.items() if k != "EVOTENSOR_CACHE_DIR"}
    env.update(env_extra, HOME=str(tmp_path), JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    import json

    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "env, expected",
    [
        ({}, None),  # the Python API turns the cache on only when asked (the CLI always)
        ({"EVOTENSOR_CACHE_DIR": "TMP/mine"}, "TMP/mine"),
        ({"EVOTENSOR_CACHE_DIR": ""}, "HOME/.cache/evotensor/jax"),  # set but empty: the default place
        ({"EVOTENSOR_CACHE_DIR": "off"}, None),
        ({"USER_DIR": "TMP/users"}, "TMP/users"),  # the user's own JAX setting is never replaced
    ],
)
def test_run_turns_on_the_persistent_cache_when_asked(env, expected, tmp_path):
    env = {k: v.replace("TMP", str(tmp_path)) for k, v in env.items()}
    got = _run(env, tmp_path)
    if expected is None:
        assert got is None
    else:
        want = expected.replace("HOME", str(tmp_path)).replace("TMP", str(tmp_path))
        assert got == want and os.path.isdir(want)


DEFAULT_SCRIPT = """
import json, os, warnings
import jax
from evotensor.core import compile_cache as cc

def scenario(env, user_dir=None, unwritable=False):
    os.environ.pop("EVOTENSOR_CACHE_DIR", None)
    os.environ.update(env)
    jax.config.update("jax_compilation_cache_dir", user_dir)
    real_access = os.access
    if unwritable:  # root writes anywhere: pretend the directory is read-only
        os.access = lambda path, mode: False
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = [cc.enable_default_cache(warn=True) for _ in range(2)]  # a second fit: no new warning
    finally:
        os.access = real_access
    return {
        "returned": got[0],
        "same_twice": got[0] == got[1],
        "jax_dir": jax.config.jax_compilation_cache_dir,
        "min_secs": jax.config.jax_persistent_cache_min_compile_time_secs,
        "warnings": [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)],
    }

tmp = os.environ["TMP"]
open(os.path.join(tmp, "a_file"), "w").close()
print(json.dumps({
    "default": scenario({}),
    "off": scenario({"EVOTENSOR_CACHE_DIR": "off"}),
    "user": scenario({}, user_dir=os.path.join(tmp, "users")),
    "under_a_file": scenario({"EVOTENSOR_CACHE_DIR": os.path.join(tmp, "a_file", "jax")}),
    "read_only": scenario({"EVOTENSOR_CACHE_DIR": os.path.join(tmp, "ro")}, unwritable=True),
}))
"""


def test_default_cache_is_the_estimators_and_skips_an_unusable_directory(tmp_path):
    """enable_default_cache (the CLI's and the scikit-learn estimators'): ~/.cache/evotensor/jax unless
    turned off or the user configured JAX's own; a directory that cannot be created or written is
    skipped (cache off) with one RuntimeWarning per process and directory."""
    env = {k: v for k, v in os.environ.items() if k != "EVOTENSOR_CACHE_DIR"}
    env.update(HOME=str(tmp_path), JAX_PLATFORMS="cpu", TMP=str(tmp_path))
    out = subprocess.run(
        [sys.executable, "-c", DEFAULT_SCRIPT], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    import json

    got = json.loads(out.stdout.strip().splitlines()[-1])
    home = str(tmp_path / ".cache" / "evotensor" / "jax")
    assert got["default"]["returned"] == got["default"]["jax_dir"] == home and os.path.isdir(home)
    assert got["default"]["min_secs"] == 0.2 and not got["default"]["warnings"]
    assert got["off"]["returned"] is None and got["off"]["jax_dir"] is None and not got["off"]["warnings"]
    assert got["user"]["returned"] == got["user"]["jax_dir"] == str(tmp_path / "users")
    for case in ("under_a_file", "read_only"):
        assert got[case]["returned"] is None and got[case]["jax_dir"] is None, case
        assert got[case]["same_twice"] and len(got[case]["warnings"]) == 1, (case, got[case]["warnings"])
        assert "EVOTENSOR_CACHE_DIR" in got[case]["warnings"][0]


# -- stored executables (in this process: no JAX configuration is touched) ---------------------------------


def _small_program():
    import jax
    import jax.numpy as jnp

    def f(tree, scale):  # a dict in, a tuple with a dict out: both pytrees must survive the store
        return {"sum": tree["a"].sum() * scale}, tree["b"] * 2

    args = ({"a": jnp.arange(4.0), "b": jnp.ones((2, 3), jnp.int32)}, jnp.float32(3.0))
    return jax.jit(f).lower(*args).compile(), args


def test_a_stored_executable_loads_with_its_pytrees_and_computes_the_same(tmp_path):
    import jax
    import numpy as np

    from evotensor.core import compile_cache as cc

    compiled, args = _small_program()
    key = cc.executable_key("small", 1)
    assert cc.save_executable(tmp_path, "small", key, compiled)
    assert [p.name for p in tmp_path.iterdir()] == [f"small-{key}.exe"]  # no temporary file left
    loaded = cc.load_executable(tmp_path, "small", key)
    assert loaded is not None and loaded.in_tree == compiled.in_tree and loaded.out_tree == compiled.out_tree
    got, want = loaded(*args), compiled(*args)
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    assert cc.load_executable(tmp_path, "small", cc.executable_key("small", 2)) is None  # not stored


def test_a_lean_lowering_stores_a_smaller_program_that_computes_the_same(tmp_path):
    import jax
    import jax.numpy as jnp
    import numpy as np

    from evotensor.core import compile_cache as cc

    def program():  # a new function each time: JAX reuses a function's trace
        def nested(x):  # several frames deep, as the strategies' code is
            def inner(v):
                return jnp.sin(v) * 2.0 + jnp.cumsum(v)

            return jax.lax.fori_loop(0, 3, lambda i, v: inner(v), x)

        return nested

    x = jnp.linspace(-1.0, 1.0, 16)
    full = jax.jit(program()).lower(x)
    with cc.lean_lowering():
        lean = jax.jit(program()).lower(x)
    assert jax.config.jax_include_full_tracebacks_in_locations  # restored after the context
    assert len(lean.as_text(debug_info=True)) < len(full.as_text(debug_info=True))
    sizes = []
    for name, lowered in (("full", full), ("lean", lean)):
        key = cc.executable_key(name)
        assert cc.save_executable(tmp_path, name, key, lowered.compile())
        sizes.append((tmp_path / f"{name}-{key}.exe").stat().st_size)
        loaded = cc.load_executable(tmp_path, name, key)
        np.testing.assert_array_equal(np.asarray(loaded(x)), np.asarray(program()(x)))
    assert sizes[1] < sizes[0]


def test_a_corrupt_or_foreign_entry_is_skipped_with_a_warning(tmp_path):
    import pickle

    from evotensor.core import compile_cache as cc

    compiled, _ = _small_program()
    key, other = cc.executable_key("small", 1), cc.executable_key("small", 2)
    cc.save_executable(tmp_path, "small", key, compiled)
    path = tmp_path / f"small-{key}.exe"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # truncated
    with pytest.warns(RuntimeWarning, match="cannot be loaded.*compiling it again"):
        assert cc.load_executable(tmp_path, "small", key) is None
    (tmp_path / f"small-{other}.exe").write_bytes(data)  # another key's entry under this key's name
    with pytest.warns(RuntimeWarning, match="cannot be loaded"):
        assert cc.load_executable(tmp_path, "small", other) is None
    path.write_bytes(pickle.dumps(("not", "an", "entry")))
    with pytest.warns(RuntimeWarning, match="cannot be loaded"):
        assert cc.load_executable(tmp_path, "small", key) is None
    assert cc.save_executable(tmp_path, "small", key, compiled)  # replaced by a good one
    assert cc.load_executable(tmp_path, "small", key) is not None


def test_executable_keys_name_the_configuration_and_refuse_object_addresses():
    from evotensor.core import compile_cache as cc

    key = cc.executable_key("chunk", (1000, "mse"), 0.5)
    assert key == cc.executable_key("chunk", (1000, "mse"), 0.5) and key.isalnum()
    assert key != cc.executable_key("chunk", (1001, "mse"), 0.5)
    assert cc.executable_key("chunk", object()) is None  # '<object object at 0x...>' names nothing
    assert cc.executable_key("chunk", lambda: 0) is None
    assert cc.executables_dir(None) is None
    assert cc.executable_key("x") != cc.executable_key("x", 1)


def test_the_environment_fingerprint_follows_xla_flags_and_jax_options(monkeypatch):
    import jax

    from evotensor.core import compile_cache as cc

    before = cc.environment_fingerprint()
    assert jax.__version__ in before and cc._sources_digest() in before
    gp_only = cc.environment_fingerprint(("core", "gp"))
    assert cc._sources_digest(("core", "gp")) in gp_only and gp_only != before
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_fast_math=true")
    assert cc.environment_fingerprint() != before
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))
    with jax.numpy_rank_promotion("raise"):
        assert cc.environment_fingerprint() != before


def test_the_store_keeps_the_most_recently_used_entries(tmp_path, monkeypatch):
    from evotensor.core import compile_cache as cc

    compiled, _ = _small_program()
    monkeypatch.setattr(cc, "MAX_EXECUTABLES", 2)
    keys = [cc.executable_key("small", i) for i in range(3)]
    for i, key in enumerate(keys[:2]):
        cc.save_executable(tmp_path, "small", key, compiled)
        os.utime(tmp_path / f"small-{key}.exe", ns=(10**18 + i, 10**18 + i))
    cc.load_executable(tmp_path, "small", keys[0])  # used: now the most recent
    cc.save_executable(tmp_path, "small", keys[2], compiled)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"small-{k}.exe" for k in (keys[0], keys[2]))


def test_an_unwritable_store_or_an_unserializable_program_is_skipped(tmp_path):
    from evotensor.core import compile_cache as cc

    compiled, _ = _small_program()
    (tmp_path / "file").write_text("")
    assert not cc.save_executable(tmp_path / "file" / "sub", "small", cc.executable_key(1), compiled)
    assert not cc.save_executable(tmp_path, "small", cc.executable_key(1), object())
    assert not cc.save_executable(None, "small", cc.executable_key(1), compiled)
    assert not list(tmp_path.glob("*.exe"))


def test_custom_calls_other_than_lapack_and_the_callers_own_are_not_stored(tmp_path):
    """A program with a custom call needs process state that lowering sets up; LAPACK's (initialized
    on load) and the caller's own FFI handlers (registered by it) are the only ones stored."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from evotensor.core import compile_cache as cc

    a = jnp.eye(3) * 2.0
    solve = jax.jit(jnp.linalg.solve).lower(a, jnp.ones(3)).compile()
    assert cc.save_executable(tmp_path, "solve", cc.executable_key("solve"), solve)
    loaded = cc.load_executable(tmp_path, "solve", cc.executable_key("solve"))
    np.testing.assert_array_equal(np.asarray(loaded(a, jnp.ones(3))), 0.5)

    def host(x):
        return jax.pure_callback(lambda v: np.asarray(v) + 1, jax.ShapeDtypeStruct((3,), jnp.float32), x)

    callback = jax.jit(host).lower(jnp.ones(3)).compile()
    assert not cc.save_executable(tmp_path, "host", cc.executable_key("host"), callback)
    assert not list(tmp_path.glob("host-*"))
