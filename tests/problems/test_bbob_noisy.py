"""The noisy BBOB testbed f101-f130 against pycma's ``cma.bbobbenchmarks.F101`` … ``F130``.

pycma's classes are a float64 transcription of the BBOB reference code. The tests plug the random
ingredients of a pycma instance (x_opt, f_opt, rotations, Gallagher peaks) into our functions and
feed both sides the *same* noise variates (pycma draws them through its module-level ``_rand`` and
``_randn``, which the tests replace), so noiseless and noisy values must agree to float32
accuracy. Separately, the noise variates we draw ourselves are compared in distribution with
pycma's (NumPy's generator) by a two-sample Kolmogorov-Smirnov test.

Every test evaluates batches of the same shape ``[12, 5]`` so that the compiled programs (one per
base function and one per noise model) are shared.
"""

from __future__ import annotations

import copy
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from evotensor.problems import BBOBNoisy as ExportedBBOBNoisy
from evotensor.problems import bbob, bbob_noisy
from evotensor.problems.bbob import NOISE_MODELS, BBOBInstance
from evotensor.problems.bbob_noisy import (
    BBOB_NOISY_NAMES,
    NOISY_FUNCTIONS,
    BBOBNoisy,
    base_function,
    noise_model,
    noiseless_core,
    noiseless_value,
    noisy_function_id,
    noisy_instance_key,
    noisy_value,
    noisy_value_from_draws,
    sample_noisy_instance,
)

bn = pytest.importorskip("cma.bbobbenchmarks")

DIMS = 5
POP = 12
FUNCTIONS = range(101, 131)
TINY = 1e-8  # the target precision: below it the reference code applies no noise


def _points(x_opt: np.ndarray, seed: int) -> np.ndarray:
    """``[12, D]``: x_opt, 4 points within ~0.05 of it, 3 uniform in [-5, 5]^D, 4 just outside the box."""
    rng = np.random.default_rng(seed)
    near = x_opt[None] + 0.05 * rng.standard_normal((4, DIMS))
    far = rng.uniform(-5.0, 5.0, size=(POP - 5, DIMS))
    rows = np.arange(3, POP - 5)
    cols = rng.integers(0, DIMS, rows.size)
    far[rows, cols] = rng.choice([-1.0, 1.0], rows.size) * rng.uniform(5.05, 5.5, rows.size)  # penalised
    return np.concatenate([x_opt[None], near, far]).astype(np.float32)


@pytest.fixture(scope="module")
def problems():
    return {fn: BBOBNoisy(fn, DIMS, instance=7) for fn in FUNCTIONS}


def _with_zero_fopt(problem: BBOBNoisy) -> BBOBNoisy:
    """A copy whose f_opt is 0, so values are ``f_noise(f_core) + 100 f_pen`` without rounding by f_opt."""
    out = copy.copy(problem)
    out.instance = problem.instance.replace(f_opt=jnp.zeros((), jnp.float32))
    return out


# -- the table of functions -----------------------------------------------------------------------
def test_table_matches_pycma_classes():
    """Base function (pycma's ``rrseed`` is the base function's number) and noise parameters."""
    kinds = {
        bn.BBOBGaussFunction: "gaussian",
        bn.BBOBUniformFunction: "uniform",
        bn.BBOBCauchyFunction: "cauchy",
    }
    for fn in FUNCTIONS:
        cls = bn.dictbbob[fn]
        assert base_function(fn) == cls.rrseed, fn
        kind = next(name for parent, name in kinds.items() if issubclass(cls, parent))
        model, (a, b) = NOISE_MODELS[noise_model(fn)]
        assert model == kind, fn
        expected = {
            "gaussian": (cls.__dict__.get("gaussbeta"), 0.0),
            "uniform": (cls.__dict__.get("unifalphafac"), cls.__dict__.get("unifbeta")),
            "cauchy": (cls.__dict__.get("cauchyalpha"), cls.__dict__.get("cauchyp")),
        }[kind]
        assert (a, b) == expected, fn
        assert noise_model(fn).endswith("moderate") == (fn <= 106), fn


def test_names_and_ids():
    assert len(BBOB_NOISY_NAMES) == 30 and len(set(BBOB_NOISY_NAMES)) == 30
    for fn in FUNCTIONS:
        name = BBOB_NOISY_NAMES[fn - 101]
        assert noisy_function_id(name) == fn and noisy_function_id(f"f{fn}") == fn
        assert NOISY_FUNCTIONS[fn][0] == name
    assert noisy_function_id("sphere_gaussian_moderate") == 101
    assert noisy_function_id("gallagher-101-cauchy") == 130
    assert noisy_function_id(np.int64(116)) == 116
    p = BBOBNoisy("schaffers_f7_uniform", DIMS)
    assert (p.fn_id, p.base_id, p.noise) == (123, 17, "uniform-severe")
    assert p.kind == "function" and p.maximize is False and p.bounds == (-5.0, 5.0)
    assert ExportedBBOBNoisy is BBOBNoisy
    assert "f123" in repr(p) and "uniform-severe" in repr(p)


def test_bad_arguments():
    for bad in (100, 131, 1, True, 101.0, "f24", None):
        with pytest.raises(ValueError, match="function"):
            BBOBNoisy(bad, DIMS)
    with pytest.raises(ValueError, match="unknown noisy BBOB function"):
        BBOBNoisy("rastrigin", DIMS)
    with pytest.raises(ValueError, match="num_dims"):
        BBOBNoisy(101, 1)
    with pytest.raises(TypeError, match="instance"):
        BBOBNoisy(101, DIMS, instance="one")
    with pytest.raises(ValueError, match="instance"):
        BBOBNoisy(101, DIMS, instance=-1)
    p = BBOBNoisy(101, DIMS)
    with pytest.raises(ValueError, match=r"genotypes must be \[pop, 5\]"):
        p.evaluate(jax.random.key(0), jnp.zeros((3, 4)))
    with pytest.raises(ValueError, match="key"):
        p.evaluate(None, jnp.zeros((3, DIMS)))
    with pytest.raises(ValueError, match=r"x must be \[\.\.\., 5\]"):
        p(jnp.zeros((3, 4)))


def _rel_tol(fn: int, rel: float) -> float:
    # f125-f127 take cos of s_i up to ~1e5: the float32 argument alone is uncertain by |s_i| 2^-24,
    # and XLA:CPU's cheaper compile mode (tests/conftest.py) reduces such arguments less accurately.
    return max(rel, 5e-3) if base_function(fn) == 19 else rel


def _assert_close(ours: np.ndarray, ref: np.ndarray, f_opt: float, rel: float) -> None:
    """Relative accuracy ``rel`` of ``f - f_opt``, plus ``f_opt``'s own float32 rounding."""
    ours, ref = np.asarray(ours, np.float64), np.asarray(ref, np.float64)
    err = np.abs(ours - ref)
    assert np.all(err <= rel * np.abs(ref - f_opt) + 2e-6 * abs(f_opt) + 1e-5), (ours, ref)


# -- against pycma, with identical noise variates ------------------------------------------------
def _pycma_instance(fn: int, f) -> BBOBInstance:
    """Our instance holding pycma's ingredients (pycma multiplies row vectors from the right)."""

    def arr(a):
        return jnp.asarray(np.asarray(a, np.float64), jnp.float32)

    base = base_function(fn)
    if base == 21:
        rot = f.rotation.T
        return BBOBInstance(
            x_opt=arr(f.xopt),
            f_opt=arr(f.fopt),
            R=arr(rot),
            Q=arr(rot),
            peaks_y=arr(f.xlocal @ f.rotation.T),  # pycma stores the peaks in rotated space
            peaks_scale=arr(f.arrscales),
            peaks_w=arr(f.peakvalues),
        )
    first = bn.compute_rotation(f.rseed + 1e6, DIMS).T
    second = bn.compute_rotation(f.rseed, DIMS).T
    if base in (7, 19):  # these apply the seed-rseed rotation first
        first, second = second, first
    return BBOBInstance(x_opt=arr(f.xopt), f_opt=arr(f.fopt), R=arr(first), Q=arr(second))


def _our_draws(fn: int, seed: int) -> tuple[np.ndarray, ...]:
    """Our variates for one [12] evaluation; Cauchy's uniforms spread so both branches occur."""
    draws = [np.asarray(v) for v in bbob.noise_draws(jax.random.key(seed), noise_model(fn), (POP,))]
    if noise_model(fn).startswith("cauchy"):
        draws[0] = np.linspace(0.01, 0.99, POP, dtype=np.float32)[
            np.random.default_rng(seed).permutation(POP)
        ]
    return tuple(draws)


def _feed_pycma(monkeypatch, fn: int, draws: tuple[np.ndarray, ...]) -> tuple[list, list]:
    """Make pycma's ``_rand`` / ``_randn`` return ``draws`` in the order its noise models consume them."""
    model = noise_model(fn).split("-")[0]
    as64 = [np.asarray(v, np.float64) for v in draws]
    uniforms, normals = {
        "gaussian": ([], as64),
        "uniform": (as64, []),
        "cauchy": (as64[:1], as64[1:]),
    }[model]

    def make(queue):
        def draw(size):
            assert tuple(np.atleast_1d(size)) == (POP,)
            return queue.pop(0)

        return draw

    monkeypatch.setattr(bn, "_rand", make(uniforms))
    monkeypatch.setattr(bn, "_randn", make(normals))
    return uniforms, normals


@pytest.mark.parametrize("fn", FUNCTIONS)
def test_matches_pycma_with_identical_noise(fn, monkeypatch, problems):
    f = bn.dictbbob[fn](3)
    f._evalfull(np.zeros((POP, DIMS)))  # initialises pycma's instance for this dimension and shape
    if hasattr(f, "arrxopt") and base_function(fn) not in (19, 21):
        # Round pycma's x_opt to float32, as ours is: at x = x_opt both cores are then exactly 0
        # (f119-f121's core grows like |x - x_opt|, so a 1e-7 offset would cross the 1e-8 threshold).
        f.arrxopt = f.arrxopt.astype(np.float32).astype(np.float64)
        f.xopt = f.arrxopt[0]
    inst = _pycma_instance(fn, f)
    x = _points(np.asarray(inst.x_opt), seed=fn)
    draws = _our_draws(fn, seed=fn)
    uniforms, normals = _feed_pycma(monkeypatch, fn, draws)
    noisy_ref, true_ref = f._evalfull(x.astype(np.float64))
    assert uniforms == [] and normals == []  # pycma consumed exactly our variates

    problem = copy.copy(problems[fn])
    problem.instance = inst
    true_ours = np.asarray(problem(x), np.float64)
    noisy_ours = np.asarray(problem.noisy_with_draws(draws, x), np.float64)
    for ours, ref in ((true_ours, true_ref), (noisy_ours, noisy_ref)):
        _assert_close(ours, ref, float(f.fopt), _rel_tol(fn, 1e-3))
    # The two parts separately (large cores would hide a wrong penalty in the sums above): the
    # points outside [-5, 5]^D carry pycma's penalty (factor 100), the core is what remains.
    outside = np.any(np.abs(x) > 5.0, axis=1)
    assert outside.any() and (~outside).any()
    core, offset = bbob_noisy._core_and_offset_jit(base_function(fn), inst, jnp.asarray(x))
    penalty_ref = np.asarray(f.boundaryhandling(x.astype(np.float64)), np.float64)
    assert np.all(penalty_ref[outside] > 0.0) and np.all(penalty_ref[~outside] == 0.0)
    np.testing.assert_allclose(np.asarray(offset, np.float64), penalty_ref + f.fopt, rtol=1e-5, atol=1e-4)
    _assert_close(np.asarray(core), true_ref - penalty_ref - f.fopt, 0.0, _rel_tol(fn, 1e-3))


@pytest.mark.parametrize("fn", [102, 116, 125, 128])
def test_noisy_value_from_key_is_the_same_function(fn, problems):
    """``noisy_value`` = ``noisy_value_from_draws`` with ``noise_draws(key)``; ``evaluate`` likewise."""
    p = problems[fn]
    x = jnp.asarray(_points(np.asarray(p.x_opt), seed=1))
    key = jax.random.key(5)
    draws = bbob.noise_draws(key, p.noise, (POP,))
    by_draws = np.asarray(noisy_value_from_draws(fn, p.instance, draws, x))
    by_key = np.asarray(noisy_value(fn, p.instance, key, x))
    by_problem = np.asarray(p.evaluate(key, x).fitness)
    f_opt, rel = float(p.f_opt), _rel_tol(fn, 1e-5)  # eager vs compiled: a few float32 ulps
    _assert_close(by_key, by_draws, f_opt, rel)
    _assert_close(by_problem, by_draws, f_opt, rel)
    _assert_close(np.asarray(noiseless_value(fn, p.instance, x)), np.asarray(p(x)), f_opt, rel)
    _assert_close(np.asarray(p.noisy_with_draws(draws, x)), by_draws, f_opt, rel)
    core = noiseless_core(fn, p.instance, x)
    assert float(core[0]) == 0.0  # at x_opt
    _assert_close(np.asarray(core + p.f_opt + 100.0 * bbob.f_pen(x)), np.asarray(p(x)), f_opt, rel)


# -- the optimum and the 1e-8 threshold -----------------------------------------------------------
@pytest.mark.parametrize("fn", FUNCTIONS)
def test_optimum_exact_and_noiseless(fn, problems):
    p = problems[fn]
    x = jnp.asarray(_points(np.asarray(p.x_opt), seed=fn))
    assert float(_with_zero_fopt(p)(x)[0]) == 0.0  # f_core(x_opt) is exactly 0, not just absorbed
    assert float(p(x)[0]) == float(p.f_opt)  # exactly, not up to rounding
    for seed in range(3):
        assert float(p.evaluate(jax.random.key(seed), x).fitness[0]) == float(p.f_opt)
    # Everywhere else the noiseless value is above f_opt, and noise never goes below it.
    assert np.all(np.asarray(p(x))[1:] > float(p.f_opt))


@pytest.mark.parametrize("fn", [101, 102, 103, 107, 108, 109])
def test_threshold_1e8(fn, problems):
    """``f_core < 1e-8``: the value is noiseless (exactly); above, noise applies and adds 1.01e-8."""
    p = _with_zero_fopt(problems[fn])  # sphere: f_core = ||x - x_opt||^2
    deltas = np.array([1e-6, 3e-5, 7e-5, 9.5e-5, 9.9e-5, 1.02e-4, 1.1e-4, 2e-4, 1e-3, 1e-2, 0.1, 1.0])
    x = np.repeat(np.asarray(p.x_opt)[None], POP, axis=0)
    x[:, 0] += deltas
    x = jnp.asarray(x, jnp.float32)
    core = np.asarray(p(x))  # f_opt = 0 and no penalty: the noiseless value is f_core
    below = core < TINY
    assert below.sum() >= 3 and (~below).sum() >= 5
    for seed in range(4):
        noisy = np.asarray(p.evaluate(jax.random.key(seed), x).fitness)
        np.testing.assert_array_equal(noisy[below], core[below])
        assert np.all(noisy[~below] >= 1.01 * TINY * (1 - 1e-6))
        assert np.all(noisy[~below] != core[~below])


def test_threshold_in_noise_from_draws():
    """The same rule on the noise map itself, for every model, with ftrue straddling 1e-8."""
    ftrue = jnp.asarray([0.0, 1e-12, 5e-9, 9.9e-9, 1.1e-8, 2e-8, 1e-6, 1.0, 10.0, 1e3, 1e6, 1e9], jnp.float32)
    for noise in NOISE_MODELS:
        draws = bbob.noise_draws(jax.random.key(3), noise, ftrue.shape)
        out = np.asarray(bbob.noise_from_draws(ftrue, draws, noise, DIMS))
        np.testing.assert_array_equal(out[:4], np.asarray(ftrue)[:4])
        assert np.all(out[4:] >= 1.01 * TINY * (1 - 1e-6)), noise
        assert np.all(np.isfinite(out)), noise


# -- the noise distribution against pycma's ------------------------------------------------------
def _ks_statistic(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov statistic (exact with ties: both ECDFs on the pooled points)."""
    grid = np.concatenate([a, b])
    cdf_a = np.searchsorted(np.sort(a), grid, side="right") / a.size
    cdf_b = np.searchsorted(np.sort(b), grid, side="right") / b.size
    return float(np.max(np.abs(cdf_a - cdf_b)))


def _zero_sphere_instance() -> BBOBInstance:
    eye = jnp.eye(DIMS, dtype=jnp.float32)
    return BBOBInstance(x_opt=jnp.zeros(DIMS, jnp.float32), f_opt=jnp.zeros((), jnp.float32), R=eye, Q=eye)


@pytest.mark.parametrize("fn", [101, 102, 103, 107, 108, 109])
def test_noise_distribution_matches_pycma(fn, problems):
    """Our noisy sphere at fixed ``f_core`` in {1, 100} vs pycma's noise model, 2000 draws each.

    Two-sample KS at level 1e-3 (critical value 1.949 sqrt(2/n)); seeds fixed, so deterministic.
    Values are compared in float32, so both sides' atoms (Cauchy: f_core + 1000 alpha) coincide.
    """
    n = 2000
    f = bn.dictbbob[fn](1)
    f.dim = DIMS  # the uniform model's alpha depends on D
    np.random.seed(12345)  # pycma draws its noise from NumPy's global generator
    crit = 1.949 * math.sqrt(2.0 / n)
    sphere = copy.copy(problems[fn])
    sphere.instance = _zero_sphere_instance()
    # ||x - 0||^2 == level exactly, inside the box (no penalty): (1, 0, 0, 0, 0) and (5, 5, 5, 5, 0).
    for i, (level, point) in enumerate(((1.0, [1.0, 0, 0, 0, 0]), (100.0, [5.0, 5, 5, 5, 0]))):
        ref = np.asarray(f.noise(np.full(n, level)), np.float32)
        x = jnp.tile(jnp.asarray(point, jnp.float32), (n, 1))
        draws = bbob.noise_draws(jax.random.key(i), noise_model(fn), (n,))
        ours = np.asarray(sphere.noisy_with_draws(draws, x), np.float32)
        stat = _ks_statistic(ours, ref)
        assert stat < crit, (fn, level, stat)


# -- instances, vmap, properties ------------------------------------------------------------------
def test_instances(problems):
    for fn in (110, 125):  # two x_opt rules (0.75 x base, from R); the others are checked below
        p = problems[fn]
        direct = jax.jit(sample_noisy_instance, static_argnums=(0, 1))(
            fn, DIMS, noisy_instance_key(fn, DIMS, 7)
        )
        np.testing.assert_allclose(np.asarray(direct.x_opt), np.asarray(p.x_opt), rtol=1e-6)
        np.testing.assert_allclose(np.asarray(direct.R), np.asarray(p.instance.R), atol=1e-6)
        np.testing.assert_allclose(float(direct.f_opt), float(p.f_opt), rtol=1e-6)
    for p in problems.values():
        x_opt = np.asarray(p.x_opt)
        assert np.all(np.abs(x_opt) <= 5.0) and -1000.0 <= float(p.f_opt) <= 1000.0
    # Moderate and severe versions of one core are distinct instances; one instance is reproducible.
    assert not np.allclose(np.asarray(problems[101].x_opt), np.asarray(problems[107].x_opt))
    np.testing.assert_array_equal(np.asarray(BBOBNoisy(101, DIMS, 7).x_opt), np.asarray(problems[101].x_opt))
    assert np.all(np.abs(np.asarray(problems[110].x_opt)) <= 3.0)  # Rosenbrock: 0.75 * U[-4, 4]
    gr = problems[125].instance  # Griewank-Rosenbrock: x_opt = R^T 1 / (2 max(1, sqrt(D) / 8))
    np.testing.assert_allclose(np.asarray(gr.R) @ np.asarray(gr.x_opt), 0.5, rtol=1e-5)
    gal = problems[128].instance
    assert gal.peaks_y.shape == (101, DIMS)
    np.testing.assert_array_equal(np.asarray(gal.peaks_y[0]), np.asarray(gal.x_opt))


@pytest.mark.parametrize("fn", [103, 128])
def test_vmap_over_noise_keys_equals_loop(fn, problems):
    """One compiled vmapped program vs separate evaluations (different programs: float32 ulps)."""
    p = problems[fn]
    x = jnp.asarray(_points(np.asarray(p.x_opt), seed=2))
    keys = jax.random.split(jax.random.key(9), 3)
    batched = jax.jit(jax.vmap(lambda k: noisy_value(fn, p.instance, k, x)))(keys)
    for i, k in enumerate(keys):
        _assert_close(batched[i], p.evaluate(k, x).fitness, float(p.f_opt), _rel_tol(fn, 1e-5))


def test_vmap_over_instances_equals_loop():
    """Vmapped instance sampling and evaluation vs one problem per instance key."""
    fn = 122  # Schaffers F7: x_opt and both rotations matter
    x = jnp.asarray(np.random.default_rng(0).uniform(-5.0, 5.0, (POP, DIMS)), jnp.float32)
    inst_keys = jax.random.split(jax.random.key(4), 2)
    keys = jax.random.split(jax.random.key(9), 2)
    insts = jax.jit(jax.vmap(lambda k: sample_noisy_instance(fn, DIMS, k)))(inst_keys)
    clean = jax.jit(jax.vmap(lambda inst: noiseless_value(fn, inst, x)))(insts)
    noisy = jax.jit(jax.vmap(lambda inst, k: noisy_value(fn, inst, k, x)))(insts, keys)
    for i in range(2):
        single = BBOBNoisy(fn, DIMS, instance=inst_keys[i])
        np.testing.assert_allclose(np.asarray(insts.x_opt[i]), np.asarray(single.x_opt), rtol=1e-6)
        np.testing.assert_allclose(np.asarray(insts.Q[i]), np.asarray(single.instance.Q), atol=1e-6)
        _assert_close(clean[i], single(x), float(single.f_opt), 1e-5)
        _assert_close(noisy[i], single.evaluate(keys[i], x).fitness, float(single.f_opt), 1e-5)


def test_evaluate_keys_pytrees_and_shapes(problems):
    p = problems[107]
    x = jnp.asarray(_points(np.asarray(p.x_opt), seed=3))
    a = np.asarray(p.evaluate(jax.random.key(1), x).fitness)
    b = np.asarray(p.evaluate(jax.random.key(1), x).fitness)
    c = np.asarray(p.evaluate(jax.random.key(2), x).fitness)
    np.testing.assert_array_equal(a, b)
    assert np.all(a[1:] != c[1:])  # severe Gaussian noise: a new key gives new values
    tree = {"a": x[:, :2], "b": x[:, 2:]}
    np.testing.assert_array_equal(np.asarray(p.evaluate(jax.random.key(1), tree).fitness), a)
    clean = np.asarray(p(x))
    np.testing.assert_allclose(np.asarray(p(x.reshape(3, 4, DIMS))).reshape(-1), clean, rtol=1e-6)


@given(
    fn=st.sampled_from(list(FUNCTIONS)),
    seed=st.integers(0, 2**31 - 1),
    scale=st.sampled_from([1e-4, 0.1, 2.0, 6.0]),
)
def test_noise_never_goes_below_the_noiseless_floor(fn, seed, scale, problems):
    """``f_noise(f_core) >= 0`` (so values >= f_opt + 100 f_pen), Cauchy noise only adds, and above
    the threshold every noisy value carries the 1.01e-8 offset."""
    p = _with_zero_fopt(problems[fn])
    rng = np.random.default_rng(seed)
    x = np.asarray(p.x_opt)[None] + scale * rng.uniform(-1.0, 1.0, (POP, DIMS))
    x = jnp.asarray(np.clip(x, -6.5, 6.5), jnp.float32)
    offset = 100.0 * np.asarray(bbob.f_pen(x), np.float64)
    clean = np.asarray(p(x), np.float64)
    noisy = np.asarray(p.evaluate(jax.random.key(seed), x).fitness, np.float64)
    core = clean - offset
    tol = 1e-6 * np.maximum(clean, 1.0)
    assert np.all(core >= -tol)
    assert np.all(noisy - offset >= -tol)
    # Inside the box (no penalty, f_opt = 0) values are f_core and f_noise(f_core) themselves.
    inside = offset == 0.0
    assert np.all(clean[inside] >= 0.0)
    np.testing.assert_array_equal(noisy[inside & (clean < TINY)], clean[inside & (clean < TINY)])
    assert np.all(noisy[inside & (clean >= 2 * TINY)] >= 1.01 * TINY * (1 - 1e-6))
    if p.noise.startswith("cauchy"):
        assert np.all(noisy >= clean - tol)


# -- the CLI task ----------------------------------------------------------------------------------
def test_es_bbob_noisy_task_builds_and_reports():
    from types import SimpleNamespace

    from evotensor.tasks import get_task

    spec = get_task("es-bbob-noisy")
    assert spec.description and {"pop", "generations", "seed", "function", "dims"} <= set(spec.defaults)
    task = spec.build({})
    assert isinstance(task.problem, BBOBNoisy) and task.problem.fn_id == 101 and task.problem.num_dims == 10
    assert task.decoder is None and task.strategy.population_size == 4 + int(np.floor(3 * np.log(10)))
    task = spec.build({"function": "122", "dims": "5", "instance": "7"})  # as from the command line
    assert (task.problem.fn_id, task.problem.num_dims) == (122, 5)
    np.testing.assert_array_equal(np.asarray(task.problem.x_opt), np.asarray(BBOBNoisy(122, 5, 7).x_opt))
    p = task.problem
    result = SimpleNamespace(state=SimpleNamespace(mean=p.x_opt), best_genotype=p.x_opt + 1.0)
    line = task.report(result, None)
    gap_best = float(p(p.x_opt + 1.0)) - float(p.f_opt)
    assert "0.000e+00 at the final mean" in line and f"{gap_best:.3e} at the best" in line
    with pytest.raises(ValueError, match="function"):
        spec.build({"function": 5})
    with pytest.raises(ValueError, match="sigma"):
        spec.build({"sigma": -1.0})


@pytest.mark.slow
def test_es_bbob_noisy_task_solves_moderate_noise_sphere():
    from evotensor.core.run import run
    from evotensor.tasks import get_task

    task = get_task("es-bbob-noisy").build({"function": 101, "dims": 4, "generations": 200, "seed": 1})
    result = run(task.strategy, task.problem, task.generations, jax.random.key(0), progress=False)
    p = _with_zero_fopt(task.problem)  # the gap without f_opt's float32 rounding
    # The fitness CMA-ES sees is f_core + f_opt in float32: with |f_opt| ~ 1e2-1e3 its resolution is
    # ~1e-5-1e-4, so progress stalls there (the noise itself, multiplicative, would not stop it).
    assert float(p(jnp.asarray(result.state.mean))) < 1e-3  # from ~10-50 at a uniform start in [-4, 4]^4
