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
