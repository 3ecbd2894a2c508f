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
