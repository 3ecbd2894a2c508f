"""Hardening of the run loop: every argument of ``run`` / ``run_many`` checked up front (one table),
``params`` checked against the strategy's defaults, and host memory that stays flat over many chunks.
"""

from __future__ import annotations

import dataclasses
import gc
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tests.core.toy import ToyStrategy

import evotensor
from evotensor.core.checks import ArgumentError
from evotensor.es import CMAES, SNES
from evotensor.es.simple_es import SimpleES
from evotensor.problems import Sphere

ES = SimpleES(8, num_dims=2)
PROBLEM = Sphere(2)
KEY = jax.random.key(0)
KEYS = jax.random.split(KEY, 2)
GOOD_PARAMS = ES.default_params()
BATCHED = jax.tree_util.tree_map(lambda leaf: jnp.stack([leaf, leaf]), GOOD_PARAMS)  # 2 runs

# (label, keyword arguments that replace the good ones, the argument the error must name)
RUN_CASES = [
    ("chunk_size float", dict(chunk_size=2.7), "chunk_size"),
    ("chunk_size integral float", dict(chunk_size=2.0), "chunk_size"),
    ("chunk_size zero", dict(chunk_size=0), "chunk_size"),
    ("chunk_size negative", dict(chunk_size=-3), "chunk_size"),
    ("chunk_size bool", dict(chunk_size=True), "chunk_size"),
    ("chunk_size str", dict(chunk_size="5"), "chunk_size"),
    ("generations zero", dict(generations=0), "generations"),
    ("generations negative", dict(generations=-1), "generations"),
    ("generations float", dict(generations=10.0), "generations"),
    ("generations bool", dict(generations=True), "generations"),
    ("generations None", dict(generations=None), "generations"),
    ("key int", dict(key=0), "key"),
    ("key old-style", dict(key=jax.random.PRNGKey(0)), "key"),
    ("key batch", dict(key=KEYS), "key"),
    ("key None", dict(key=None), "key"),
    ("strategy None", dict(strategy=None), "strategy"),
    ("strategy object", dict(strategy=object()), "strategy"),
    ("problem None", dict(problem=None), "problem"),
    ("decoder without decode", dict(decoder=object()), "decoder"),
    ("params None-free wrong type", dict(params={"sigma_init": 1.0}), "params"),
    ("params NaN", dict(params=GOOD_PARAMS.replace(sigma_init=jnp.float32(jnp.nan))), "params.sigma_init"),
    ("params inf", dict(params=GOOD_PARAMS.replace(sigma_init=jnp.float32(jnp.inf))), "params.sigma_init"),
    ("params wrong shape", dict(params=GOOD_PARAMS.replace(sigma_init=jnp.ones(3))), "params.sigma_init"),
    ("params str leaf", dict(params=GOOD_PARAMS.replace(sigma_init="big")), "params.sigma_init"),
    ("run_dir int", dict(run_dir=3), "run_dir"),
    ("resume str", dict(resume="yes"), "resume"),
    ("progress str", dict(progress="no"), "progress"),
    ("callback not callable", dict(callback=5), "callback"),
    ("config list", dict(config=[1, 2]), "config"),
    ("task_name empty", dict(task_name=""), "task_name"),
    ("task_name int", dict(task_name=3), "task_name"),
    ("best_to_text not callable", dict(best_to_text="x"), "best_to_text"),
]


@pytest.mark.parametrize(("label", "changes", "name"), RUN_CASES, ids=[c[0] for c in RUN_CASES])
def test_run_refuses_every_bad_argument_naming_it(label, changes, name, tmp_path):
    kwargs = {**dict(strategy=ES, problem=PROBLEM, generations=4, key=KEY), **changes}
    with pytest.raises(ArgumentError, match=name.replace(".", r"\.")):
        evotensor.run(**kwargs)
    assert list(tmp_path.iterdir()) == []  # nothing was written anywhere before the check


MANY_CASES = [
    ("generations float", dict(generations=3.5), "generations"),
    ("generations zero", dict(generations=0), "generations"),
    ("keys single", dict(keys=KEY), "keys"),
    ("keys empty", dict(keys=jax.random.split(KEY, 0)), "keys"),
    ("keys old-style", dict(keys=jnp.zeros((2, 2), jnp.uint32)), "keys"),
    ("keys 2-d", dict(keys=jax.random.split(KEY, (2, 2))), "keys"),
    ("strategy None", dict(strategy=None), "strategy"),
    ("problem None", dict(problem=None), "problem"),
    ("params NaN", dict(params=GOOD_PARAMS.replace(sigma_init=jnp.float32(jnp.nan))), "params.sigma_init"),
    ("params_batched str", dict(params_batched="yes"), "params_batched"),
    ("batched without params", dict(params_batched=True), "params_batched"),
    (
        "batched NaN entry",
        dict(params=BATCHED.replace(sigma_init=jnp.array([1.0, jnp.nan])), params_batched=True),
        "params.sigma_init",
    ),
    (
        "batched wrong runs",
        dict(params=BATCHED.replace(sigma_init=jnp.ones(3)), params_batched=True),
        "sigma_init",
    ),
]


@pytest.mark.parametrize(("label", "changes", "name"), MANY_CASES, ids=[c[0] for c in MANY_CASES])
def test_run_many_refuses_every_bad_argument_naming_it(label, changes, name):
    kwargs = {**dict(strategy=ES, problem=PROBLEM, generations=4, keys=KEYS), **changes}
    with pytest.raises(ArgumentError, match=name.replace(".", r"\.")):
        evotensor.run_many(**kwargs)


def test_good_arguments_still_run_and_numpy_ints_are_ints():
    result = evotensor.run(ES, PROBLEM, np.int64(6), KEY, chunk_size=np.int32(4), params=GOOD_PARAMS)
    assert result.history["best_fitness"].shape == (6,)
    many = evotensor.run_many(
        ES, PROBLEM, 3, KEYS, params=BATCHED.replace(sigma_init=jnp.array([0.5, 2.0])), params_batched=True
    )
    assert many.history["best_fitness"].shape == (2, 3)


def test_params_may_keep_an_infinity_the_defaults_have():
    """The check refuses an infinity only where the default is finite: a strategy's own ``inf``
    (e.g. a disabled bound) stays allowed."""
    from evotensor.core.run import check_params

    @dataclasses.dataclass
    class WithInfDefault:
        def default_params(self):
            return {"bound": jnp.float32(jnp.inf), "rate": jnp.float32(0.1)}

    strategy = WithInfDefault()
    assert check_params(strategy, {"bound": jnp.float32(jnp.inf), "rate": jnp.float32(0.2)})["rate"] == 0.2
    with pytest.raises(ArgumentError, match=r"params\['bound'\]"):
        check_params(strategy, {"bound": jnp.float32(jnp.nan), "rate": jnp.float32(0.2)})
    with pytest.raises(ArgumentError, match=r"params\['rate'\]"):
        check_params(strategy, {"bound": jnp.float32(1.0), "rate": jnp.float32(-jnp.inf)})


def test_nan_learning_rate_in_params_is_refused_for_natural_es():
    """The issue's NaN learning rates: a params field of SNES / CMA-ES set to NaN fails up front."""
    snes = SNES(8, num_dims=2)
    field = dataclasses.fields(snes.default_params())[-1].name
    bad = snes.default_params().replace(**{field: jnp.float32(jnp.nan)})
    with pytest.raises(ArgumentError, match=f"params.{field}"):
        evotensor.run(snes, PROBLEM, 3, KEY, params=bad)
    cma = CMAES(8, num_dims=2)
    with pytest.raises(ArgumentError, match=r"params\.c_1"):
        evotensor.run(cma, PROBLEM, 3, KEY, params=cma.default_params().replace(c_1=jnp.float32(jnp.nan)))


# --------------------------------------------------------------------------------------------------
# host memory over many chunks
# --------------------------------------------------------------------------------------------------
def _rss_kb() -> int:
    with Path("/proc/self/status").open() as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")


def _rss_growth_kb(strategy, generations: int, warmup: int) -> tuple[int, dict]:
    """RSS growth (KB) between chunk ``warmup`` and the last of ``generations`` one-generation chunks."""
    marks: dict[str, int] = {}

    def callback(info):
        if info["generation"] == warmup:
            gc.collect()
            marks["start"] = _rss_kb()

    result = evotensor.run(
        strategy, Sphere(strategy.num_dims), generations, KEY, chunk_size=1, callback=callback
    )
    gc.collect()
    return _rss_kb() - marks["start"], result.history


@linux_only
def test_memory_stays_flat_over_2000_one_generation_chunks():
    """Before the fix every chunk's metrics stayed alive as NumPy views of device buffers: about
    22 KB per chunk, 33 MB over these 1,500 measured chunks. Now only the preallocated history grows
    into its pages (1,500 x 6 metrics x 4 bytes = 36 KB)."""
    growth, history = _rss_growth_kb(ToyStrategy(4, 2), 2000, warmup=500)
    assert history["best_fitness"].shape == (2000,)
    assert growth < 4096, f"RSS grew by {growth} KB over 1,500 chunks"


def test_history_is_host_memory_not_views_of_device_buffers():
    result = evotensor.run(ToyStrategy(4, 2), Sphere(2), 6, KEY, chunk_size=2)
    for name, values in result.history.items():
        assert isinstance(values, np.ndarray) and values.shape[0] == 6, name
        assert values.flags.owndata or values.base is not None and values.base.flags.owndata, name
        assert values.flags.writeable, name  # a view of a device buffer is read-only


@pytest.mark.slow
@linux_only
def test_memory_stays_flat_over_100000_generations():
    """10^5 one-generation chunks of CMA-ES: RSS grows by no more than the history itself (allocated
    once, its pages touched as it fills) plus 8 MB; before the fix this grew by ~2 GB."""
    strategy = CMAES(8, num_dims=4)
    growth, history = _rss_growth_kb(strategy, 100_000, warmup=10_000)
    history_kb = sum(a.nbytes for a in history.values()) // 1024
    assert growth < history_kb + 8192, f"RSS grew by {growth} KB (history {history_kb} KB)"
