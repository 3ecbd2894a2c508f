"""CMA-ES: construction, convergence, numerical robustness, NaN handling, vmap exactness."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.es.scan_runner import check_vmap_over_seeds_and_sigma_init, make_run, sphere
from tests.platforms import assert_equal_on_cpu_close_on_gpu

from evotensor.es import CMAES
from evotensor.es.core.cma import cma_constants, decompose


def test_default_population_size():
    for n in (2, 10, 30, 100):
        assert CMAES(num_dims=n).population_size == 4 + math.floor(3 * math.log(n))


def test_bad_arguments_raise_naming_the_argument():
    with pytest.raises(ValueError, match="preset"):
        CMAES(num_dims=3, preset="textbook")
    with pytest.raises(ValueError, match="sigma_init"):
        CMAES(num_dims=3, sigma_init=0.0)
    with pytest.raises(ValueError, match="mean_init"):
        CMAES(num_dims=3, mean_init=np.zeros(4))
    with pytest.raises(ValueError, match="population_size"):
        CMAES(1, num_dims=3)
    with pytest.raises(ValueError, match="step_size"):
        CMAES(num_dims=3, step_size="msr")


def test_step_size_auto_follows_pycma_tpa_dimension():
    assert CMAES(num_dims=299).step_size == "csa"
    assert CMAES(num_dims=300).step_size == "tpa"
    assert CMAES(num_dims=300, preset="tutorial").step_size == "csa"  # purecma has no TPA
    assert CMAES(num_dims=300, step_size="csa").step_size == "csa"
    assert CMAES(num_dims=5, step_size="tpa").two_point
    # TPA keeps the h_sigma path with the uncapped rate; CSA caps it at 1/2 (visible at small n)
    big_pop = 200
    assert CMAES(big_pop, num_dims=2, step_size="tpa").constants["c_sigma"] > 0.5
    assert CMAES(big_pop, num_dims=2).constants["c_sigma"] == 0.5


def test_tpa_line_samples_and_step_size_response():
    """Rows 0/1 are mean +- sigma*y0 along the last mean shift after the first tell (not before);
    the step size grows on a linear function (the forward line sample wins) and shrinks once the
    backward one wins (a sphere around the mean)."""
    n = 8
    es = CMAES(num_dims=n, sigma_init=0.3, step_size="tpa")
    params = es.default_params()
    state = es.init(jax.random.key(0), params)
    x, _ = es.ask(jax.random.key(1), state, params)
    assert not np.allclose(np.asarray(x[0] - state.mean), -np.asarray(x[1] - state.mean))
    linear = lambda x: jnp.sum(x, axis=-1)  # noqa: E731
    ask, tell = jax.jit(es.ask), jax.jit(es.tell)  # 66 generations op by op would take a minute
    for g in range(6):
        x, state = ask(jax.random.key(10 + g), state, params)
        if g:
            d = np.asarray(state.mean_shift)
            y0, y1 = np.asarray(x[0] - state.mean), np.asarray(x[1] - state.mean)
            np.testing.assert_allclose(y1, -y0, rtol=1e-6, atol=1e-7)
            assert np.dot(y0, d) / (np.linalg.norm(y0) * np.linalg.norm(d)) > 1 - 1e-5
        state, _ = tell(jax.random.key(20 + g), state, x, linear(x), params)
    assert float(state.tpa_s) > 0 and float(state.sigma) > 0.3
    center = state.mean
    s0, negative_s = float(state.sigma), False
    for g in range(60):  # a sphere around the current mean: the mean shifts overshoot, sigma shrinks
        x, state = ask(jax.random.key(100 + g), state, params)
        state, _ = tell(jax.random.key(200 + g), state, x, jnp.sum((x - center) ** 2, axis=-1), params)
        negative_s |= float(state.tpa_s) < 0
    assert negative_s and float(state.sigma) < 0.1 * s0


def test_large_dimension_warns_about_memory():
    with pytest.warns(UserWarning, match="SepCMAES or LMMAES"):
        CMAES(num_dims=2001)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        CMAES(num_dims=2000)


def test_weights_and_learning_rates_are_consistent():
    es = CMAES(num_dims=10)
    c = es.constants
    w = c["weights"]
    assert np.all(np.diff(w) <= 0)  # best rank first
    assert np.sum(w[w > 0]) == pytest.approx(1.0)
    assert c["mu_eff"] == pytest.approx(1 / np.sum(w[w > 0] ** 2))
    # active weights are finalized so that the decay 1 - c1 - cmu * sum(w) is at most 1
    assert c["c_1"] + c["c_mu"] * np.sum(w) >= -1e-12
    t = CMAES(num_dims=10, preset="tutorial").constants
    assert np.all(t["weights"] >= 0) and t["c_sigma"] < c["c_sigma"]


def test_solves_10d_sphere():
    """Documented tolerance: best f < 1e-12 within 300 generations (float32)."""
    es = CMAES(num_dims=10, sigma_init=1.0, mean_init=np.full(10, 3.0))
    state, best = make_run(es, sphere, 300)(jax.random.key(0), es.default_params())
    assert float(best[-1]) < 1e-12
    assert float(sphere(state.mean)) < 1e-10


def test_tpa_solves_10d_sphere():
    es = CMAES(num_dims=10, sigma_init=1.0, mean_init=np.full(10, 3.0), step_size="tpa")
    _, best = make_run(es, sphere, 300)(jax.random.key(0), es.default_params())
    assert float(best[-1]) < 1e-12


def test_tutorial_preset_solves_10d_sphere():
    es = CMAES(num_dims=10, sigma_init=1.0, mean_init=np.full(10, 3.0), preset="tutorial")
    _, best = make_run(es, sphere, 300)(jax.random.key(0), es.default_params())
    assert float(best[-1]) < 1e-12


@pytest.mark.parametrize("step_size", ["csa", "tpa"])
def test_3000_generations_past_convergence_stay_finite_float32(step_size):
    es = CMAES(num_dims=30, sigma_init=1.0, mean_init=np.full(30, 3.0), step_size=step_size)
    state, best = make_run(es, sphere, 3000)(jax.random.key(1), es.default_params())
    assert state.mean.dtype == jnp.float32
    for name, leaf in vars(state).items():
        assert bool(jnp.all(jnp.isfinite(leaf))), name
    assert float(best[-1]) < 1e-20
    assert float(state.sigma) > 0


def test_nonfinite_fitness_ranks_last_and_never_enters_state():
    es = CMAES(num_dims=5, sigma_init=0.5)
    params = es.default_params()
    tell = jax.jit(es.tell)
    state = es.init(jax.random.key(0), params)
    x, state = es.ask(jax.random.key(1), state, params)
    f = sphere(x)
    bad_idx = jnp.asarray([1, 4, 6])
    bad = f.at[bad_idx].set(jnp.asarray([jnp.nan, jnp.inf, -jnp.nan]))
    # reference: the same candidates ranked last (ties among non-finite values keep index order)
    ref = f.at[bad_idx].set(1e30 + jnp.arange(3.0) * 1e24)
    s_bad, _ = tell(jax.random.key(2), state, x, bad, params)
    s_ref, _ = tell(jax.random.key(2), state, x, ref, params)
    for a, b in zip(jax.tree_util.tree_leaves(s_bad), jax.tree_util.tree_leaves(s_ref)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    all_bad, _ = tell(jax.random.key(2), state, x, jnp.full_like(f, jnp.nan), params)
    # an all-invalid generation leaves the state as it was (VectorStrategy.tell), so a fresh state's
    # best_fitness keeps its +inf "nothing valid evaluated yet" marker; everything else is finite
    assert not any(bool(jnp.any(jnp.isnan(leaf))) for leaf in jax.tree_util.tree_leaves(all_bad))
    assert all(bool(jnp.all(jnp.isfinite(v))) for k, v in vars(all_bad).items() if k != "best_fitness")
    assert float(all_bad.best_fitness) == float(state.best_fitness)


def test_lazy_eigendecomposition_follows_the_gap():
    es = CMAES(num_dims=100)  # pycma's gap is ~1.07 generations here
    params = es.default_params()
    assert float(params.lazy_gap) > 1
    state = es.init(jax.random.key(0), params)
    tell = jax.jit(es.tell)
    ask = jax.jit(es.ask)
    updated = []
    for g in range(10):
        x, state = ask(jax.random.key(g), state, params)
        state, m = tell(jax.random.key(g), state, x, sphere(x - 1.0), params)
        updated.append(bool(m["eigen_updated"]))
        if updated[-1]:  # C == B diag(D^2) B^T right after a decomposition
            # HIGHEST: a GPU's default float32 matmul (TF32) alone would be off by ~1e-3
            rebuilt = jnp.matmul(state.B * state.D**2, state.B.T, precision=jax.lax.Precision.HIGHEST)
            np.testing.assert_allclose(rebuilt, state.C, atol=2e-5)
    assert updated == [False, True] * 5


def test_decompose_limits_condition_and_survives_nan():
    C = jnp.diag(jnp.asarray([1e-20, 1.0, 4.0]))
    C2, B, D = decompose(C, jnp.eye(3), jnp.ones(3), jnp.asarray(1e6))
    assert float(D[-1] ** 2 / D[0] ** 2) == pytest.approx(1e6, rel=1e-3)
    rebuilt = jnp.matmul(B * D**2, B.T, precision=jax.lax.Precision.HIGHEST)  # no TF32 on GPUs
    np.testing.assert_allclose(rebuilt, C2, rtol=1e-5, atol=1e-9)
    C3, B3, D3 = decompose(jnp.full((3, 3), jnp.nan), jnp.eye(3), jnp.full(3, 2.0), jnp.asarray(1e6))
    np.testing.assert_array_equal(D3, jnp.full(3, 2.0))
    np.testing.assert_allclose(C3, 4 * jnp.eye(3))


def test_pytree_solution_and_mean_solution():
    template = {"a": jnp.ones((2, 2)), "b": jnp.zeros(3)}
    es = CMAES(solution=template, sigma_init=0.3)
    assert es.num_dims == 7
    params = es.default_params()
    state = es.init(jax.random.key(0), params)
    pop, state = jax.jit(es.ask)(jax.random.key(1), state, params)
    assert pop["a"].shape == (es.population_size, 2, 2)
    fit = jnp.sum(pop["a"] ** 2, axis=(1, 2)) + jnp.sum(pop["b"] ** 2, axis=1)
    state, _ = jax.jit(es.tell)(jax.random.key(2), state, pop, fit, params)
    mean = es.mean_solution(state)
    assert mean["a"].shape == (2, 2) and mean["b"].shape == (3,)


@pytest.mark.parametrize("n", [6, pytest.param(30, marks=pytest.mark.slow)])
@pytest.mark.parametrize("step_size", ["csa", "tpa"])
@pytest.mark.fusion_emitters
def test_vmap_over_seeds_and_sigma_init_is_bit_identical(n, step_size):
    es = CMAES(num_dims=n, mean_init=np.full(n, 2.0), step_size=step_size)
    check_vmap_over_seeds_and_sigma_init(es, generations=20)


_RUN_MANY_CHECK = """
import sys
import jax, numpy as np
import evotensor
from evotensor.es import CMAES
from evotensor.problems import Sphere
for n in map(int, sys.argv[1:]):
    es, problem = CMAES(16, num_dims=n, mean_init=np.full(n, 1.5)), Sphere(n)
    keys = jax.random.split(jax.random.key(n), 2)
    many = evotensor.run_many(es, problem, 20, keys)
    single = evotensor.run(es, problem, 20, keys[1], chunk_size=20)
    pairs = list(zip(jax.tree_util.tree_leaves(single.state), jax.tree_util.tree_leaves(many.state)))
    pairs += [(single.history[k], many.history[k]) for k in single.history]
    same = all(np.array_equal(np.asarray(a), np.asarray(b)[1]) for a, b in pairs)
    print(n, "same" if same else "DIFFERENT")
"""


@pytest.mark.parametrize("dims", [(6,), pytest.param((2, 3, 4, 5, 7, 8), marks=pytest.mark.slow)], ids=str)
def test_run_many_equals_run_at_population_16(dims):
    """``evotensor.run_many`` equals ``evotensor.run`` bit for bit on CPU at population 16, where it
    used to differ in every seed (issue 16): ``sample``'s ``mean + sigma * y`` was contracted into an
    FMA inside the ranking's gather in one program and rounded separately in the other (the
    candidates returned were equal, the ones ranked were not); ``sample`` now pins the product with
    ``rounded``. XLA's default CPU options are needed to see it (the suite's fast compile options do
    not contract), hence a subprocess without them, pinned to the CPU (where bit-identity is
    promised), so the test runs on a GPU host too."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    out = subprocess.run(
        [sys.executable, "-c", _RUN_MANY_CHECK, *map(str, dims)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == [w for n in dims for w in (str(n), "same")], out.stdout


_traced_constants = {}


def _jnp_constants(n, size):
    if (n, size) not in _traced_constants:
        _traced_constants[(n, size)] = jax.jit(lambda lam: cma_constants(n, lam, size, "pycma", jnp))
    return _traced_constants[(n, size)]


@settings(max_examples=25, deadline=None)
@given(n=st.sampled_from([1, 2, 7, 30, 300, 3000]), lam=st.integers(2, 300))
def test_constants_invariants_and_traced_path_agrees(n, lam):
    """Structural invariants of the weights/learning rates, and the traced (dynamic lambda) path used
    by the restart strategies equals the float64 NumPy path."""
    c = cma_constants(n, lam, lam, "pycma", np)
    w = c["weights"]
    assert np.all(np.diff(w) <= 1e-15) and w[0] > 0 and w[-1] <= 0  # 0 when c_1 + c_mu = 1
    assert np.sum(w[w > 0]) == pytest.approx(1.0)
    assert 0 < c["c_1"] and 0 < c["c_mu"] and c["c_1"] + c["c_mu"] <= 1 + 1e-12
    assert 0 < c["c_sigma"] <= 0.5 and 0 < c["c_c"] <= 1 and c["d_sigma"] >= 1
    assert c["c_1"] + c["c_mu"] * np.sum(w) >= -1e-9  # the decay factor of C is at most 1
    size = 320
    t = _jnp_constants(n, size)(jnp.asarray(lam))
    np.testing.assert_allclose(np.asarray(t["weights"])[:lam], w, rtol=2e-5, atol=1e-7)
    assert np.all(np.asarray(t["weights"])[lam:] == 0)
    for name in ("mu_eff", "c_sigma", "d_sigma", "c_c", "c_1", "c_mu"):
        assert float(t[name]) == pytest.approx(c[name], rel=2e-5), name


# --------------------------------------------------------------------------------------------------
# the lazy eigendecomposition under vmap
# --------------------------------------------------------------------------------------------------
def eigh_placements(jaxpr, inside_cond=False):
    """``[bool]``: for every ``eigh`` in ``jaxpr`` (recursively), whether a ``cond`` encloses it."""
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "eigh":
            found.append(inside_cond)
        is_cond = eqn.primitive.name == "cond"
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if isinstance(inner, jax.extend.core.Jaxpr):
                    found += eigh_placements(inner, inside_cond or is_cond)
    return found


def test_vmapped_tell_keeps_the_eigendecomposition_under_a_conditional():
    """A batched ``lax.cond`` predicate would turn into a select (eigh every generation for every run);
    the custom batching rule keeps one ``cond`` on "any run due" around the batched ``eigh``, also for
    nested vmaps (seeds x hyperparameters)."""
    es = CMAES(num_dims=5)
    params = es.default_params()
    state = es.init(jax.random.key(0), params)
    x, _ = es.ask(jax.random.key(1), state, params)
    f = sphere(x)

    def tell(state, x, f, params):
        return es.tell(jax.random.key(2), state, x, f, params)[0]

    def stack(tree, k):
        return jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (k, *jnp.shape(a))), tree)

    single = jax.make_jaxpr(tell)(state, x, f, params).jaxpr
    seeds = jax.make_jaxpr(jax.vmap(tell, in_axes=(0, 0, 0, None)))(
        stack(state, 3), stack(x, 3), stack(f, 3), params
    ).jaxpr
    nested = jax.make_jaxpr(jax.vmap(jax.vmap(tell, in_axes=(0, 0, 0, None)), in_axes=(0, 0, 0, 0)))(
        stack(stack(state, 3), 2), stack(stack(x, 3), 2), stack(stack(f, 3), 2), stack(params, 2)
    ).jaxpr
    for name, jaxpr in (("single", single), ("vmap", seeds), ("nested vmap", nested)):
        placements = eigh_placements(jaxpr)
        assert placements and all(placements), f"{name}: an eigh runs outside a cond: {placements}"


@pytest.mark.fusion_emitters
def test_vmap_over_different_lazy_gaps_is_bit_identical():
    """Runs whose decompositions fall in different generations (lazy gaps 1, 2.5 and 4): each keeps
    its own schedule and equals its separate run bit for bit (on CPU; to GPU_RTOL on GPU), vmapped
    over (seed, gap) pairs and nested (gaps x seeds)."""
    es = CMAES(num_dims=5, mean_init=np.full(5, 2.0))
    run = make_run(es, sphere, 12, record=lambda state, fitness, metrics: metrics["eigen_updated"])
    params = es.default_params()
    gaps = jnp.asarray([1.0, 2.5, 4.0])
    keys = jax.random.split(jax.random.key(7), 3)
    p_batched = jax.vmap(lambda g: params.replace(lazy_gap=g))(gaps)
    single = jax.jit(run)
    separate = [[single(keys[i], params.replace(lazy_gap=gaps[j])) for i in range(3)] for j in range(3)]
    schedules = np.asarray([separate[j][0][1] for j in range(3)])
    assert schedules[0].all() and 0 < schedules[1].sum() < 12 and 0 < schedules[2].sum() < schedules[1].sum()

    paired = jax.jit(jax.vmap(run))(keys, p_batched)  # run i: key i, gap i
    nested = jax.jit(jax.vmap(jax.vmap(run, in_axes=(0, None)), in_axes=(None, 0)))(keys, p_batched)
    for j in range(3):
        for i in range(3):
            for a, b, c in zip(*(jax.tree_util.tree_leaves(t) for t in (nested, separate[j][i], paired))):
                assert_equal_on_cpu_close_on_gpu(np.asarray(a)[j, i], b)
                if i == j:
                    assert_equal_on_cpu_close_on_gpu(np.asarray(c)[i], b)


def test_grad_through_tell_matches_finite_differences():
    """Reverse-mode AD passes through the lazy update (its custom_vmap rule has a custom_jvp beside it)."""
    es = CMAES(num_dims=3)
    key = jax.random.key(0)
    state = es.init(key)
    x, state = es.ask(key, state)
    fitness = jnp.sum(x**2, axis=1)

    @jax.jit  # compiled: op by op, the derivative passes took most of a minute
    def covariance_sum(x):
        return es.tell(key, state, x, fitness)[0].C.sum()

    grad = jax.jit(jax.grad(covariance_sum))
    v = jax.random.normal(jax.random.key(1), x.shape)
    directional = jnp.vdot(grad(x), v)
    eps = 1e-3
    central = (covariance_sum(x + eps * v) - covariance_sum(x - eps * v)) / (2 * eps)
    assert abs(float(directional)) > 1e-3
    np.testing.assert_allclose(float(directional), float(central), rtol=1e-3)
    batched = jax.jit(jax.vmap(jax.grad(covariance_sum)))(jnp.stack([x, 2 * x]))
    np.testing.assert_allclose(batched[0], grad(x), rtol=1e-6)
