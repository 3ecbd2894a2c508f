import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evotensor.core.checks import ArgumentError
from evotensor.core.problem import FunctionProblem
from evotensor.problems.qd import (
    Arm,
    LinearProjection,
    MORastrigin,
    NoisyArm,
    QDRastrigin,
    QDSphere,
    RastriginProj,
)

KEY = jax.random.key(0)


@functools.cache
def _jitted(problem):
    return jax.jit(problem.evaluate)


def run(problem, key, x):
    """``problem.evaluate`` compiled once per problem and shape (eager dispatch is slow to warm up)."""
    return _jitted(problem)(key, jnp.asarray(x, jnp.float32))


# ---------------------------------------------------------------------------------------------
# slow NumPy float64 references, written from the definitions one genotype at a time


def ref_arm(p):
    n = len(p)
    c = [min(max(float(v), 0.0), 1.0) for v in p]
    mean = sum(c) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in c) / n)
    heading, x, y = 0.0, 0.5, 0.5
    for v in c:
        heading += 2 * math.pi * v - math.pi
        x += math.cos(heading) / (2 * n)
        y += math.sin(heading) / (2 * n)
    return -std, [x, y]


def ref_rastrigin_value(z):
    return 10 * len(z) + sum(v * v - 10 * math.cos(2 * math.pi * v) for v in z)


def ref_qd_sphere(p):
    z = [10 * float(v) - 5 for v in p]
    return -sum(v * v for v in z), [float(p[0]), float(p[1])]


def ref_qd_rastrigin(p):
    z = [10 * float(v) - 5 for v in p]
    return -ref_rastrigin_value(z), [float(p[0]), float(p[1])]


def ref_fold(v):
    v = float(v)
    return v if -5.12 <= v <= 5.12 else 5.12 / v


def ref_rastrigin_proj(x):
    h = len(x) // 2
    first = [ref_fold(v) for v in x[:h]]
    second = [ref_fold(v) for v in x[h:]]
    z = [float(v) - 2.048 for v in x]
    return -ref_rastrigin_value(z), [sum(first) / len(first), sum(second) / len(second)]


def ref_linear_projection(x, function):
    n = len(x)
    f = (lambda z: sum(v * v for v in z)) if function == "sphere" else ref_rastrigin_value
    raw = f([float(v) - 2.048 for v in x])
    worst = f([-5.12 - 2.048] * n)
    h = n // 2
    return (raw - worst) / (0.0 - worst) * 100, [
        sum(ref_fold(v) for v in x[:h]),
        sum(ref_fold(v) for v in x[h:]),
    ]


CASES = {
    "arm": (lambda n: Arm(n), ref_arm, 1),
    "qd_sphere": (lambda n: QDSphere(n), ref_qd_sphere, 2),
    "qd_rastrigin": (lambda n: QDRastrigin(n), ref_qd_rastrigin, 2),
    "rastrigin_proj": (lambda n: RastriginProj(n), ref_rastrigin_proj, 2),
    "proj_sphere": (lambda n: LinearProjection(n, "sphere"), lambda x: ref_linear_projection(x, "sphere"), 2),
    "proj_rastrigin": (
        lambda n: LinearProjection(n, "rastrigin"),
        lambda x: ref_linear_projection(x, "rastrigin"),
        2,
    ),
}


def check_against_reference(problem, reference, x):
    ev = run(problem, KEY, x)
    assert ev.fitness.dtype == jnp.float32 and ev.descriptor.dtype == jnp.float32
    assert ev.fitness.shape == (x.shape[0],) and ev.descriptor.shape == (x.shape[0], 2)
    x32 = np.asarray(x, np.float32).astype(np.float64)  # the reference sees the same float32 inputs
    expected = [reference(row) for row in x32]
    fit = np.array([e[0] for e in expected])
    desc = np.array([e[1] for e in expected])
    scale = max(1.0, float(np.max(np.abs(fit))))
    np.testing.assert_allclose(ev.fitness, fit, rtol=2e-5, atol=2e-5 * scale)
    np.testing.assert_allclose(ev.descriptor, desc, rtol=2e-5, atol=2e-5 * max(1.0, x.shape[1]))


@pytest.mark.parametrize("name", list(CASES))
@settings(max_examples=10, deadline=None)
@given(num_dims=st.integers(1, 6), seed=st.integers(0, 2**31 - 1))
def test_matches_reference_on_random_genotypes(name, num_dims, seed):
    make, reference, minimum = CASES[name]
    problem = make(max(num_dims, minimum))
    low, high = problem.bounds
    width = high - low
    # inside and somewhat outside the box: exercises the arm's clip and the projection's fold
    x = np.random.default_rng(seed).uniform(low - width, high + width, (4, problem.num_dims))
    check_against_reference(problem, reference, x)


@pytest.mark.parametrize("name", list(CASES))
def test_matches_reference_at_default_size(name):
    make, reference, _ = CASES[name]
    problem = make(100)
    low, high = problem.bounds
    x = np.random.default_rng(1).uniform(low, high, (3, 100))
    check_against_reference(problem, reference, x)


# ---------------------------------------------------------------------------------------------
# hand-checked special cases


def test_arm_straight_when_all_angles_are_zero():
    for n in (1, 100):
        ev = run(Arm(n), KEY, jnp.full((1, n), 0.5))  # 2 pi 0.5 - pi = 0 at every joint
        np.testing.assert_allclose(ev.descriptor[0], [1.0, 0.5], atol=1e-6)
        assert float(ev.fitness[0]) == 0.0


def test_arm_hand_checked_poses():
    arm = Arm(1)
    # one joint turned by +pi/2: straight up; by -pi/2: straight down
    ev = run(arm, KEY, jnp.array([[0.75], [0.25], [0.0]]))
    np.testing.assert_allclose(ev.descriptor, [[0.5, 1.0], [0.5, 0.0], [0.0, 0.5]], atol=1e-6)
    # two joints, the second folding back by pi: the end effector returns to the base
    ev = run(Arm(2), KEY, jnp.array([[0.5, 0.0]]))
    np.testing.assert_allclose(ev.descriptor[0], [0.5, 0.5], atol=1e-6)
    np.testing.assert_allclose(ev.fitness[0], -0.25, atol=1e-7)  # std of (0.5, 0) is 0.25
    # half at 0, half at 1: the lowest fitness, -0.5
    ev = run(Arm(4), KEY, jnp.array([[0.0, 1.0, 0.0, 1.0]]))
    np.testing.assert_allclose(ev.fitness[0], -0.5, atol=1e-7)


def test_arm_clips_genotypes_to_unit_box():
    arm = Arm(3)
    x = jnp.array([[-2.0, 0.3, 7.0]])
    ev, clipped = run(arm, KEY, x), run(arm, KEY, jnp.array([[0.0, 0.3, 1.0]]))
    np.testing.assert_allclose(ev.fitness, clipped.fitness, atol=1e-7)
    np.testing.assert_allclose(ev.descriptor, clipped.descriptor, atol=1e-7)


@pytest.mark.parametrize("problem", [QDSphere(5), QDRastrigin(5)])
def test_qdax_standard_functions_optimum(problem):
    x = jnp.array([[0.5, 0.5, 0.5, 0.5, 0.5], [0.2, 0.9, 0.5, 0.5, 0.5]])
    ev = run(problem, KEY, x)
    assert float(ev.fitness[0]) == 0.0
    assert float(ev.fitness[1]) < -1.0
    np.testing.assert_allclose(ev.descriptor, [[0.5, 0.5], [0.2, 0.9]], atol=1e-7)


def test_rastrigin_proj_hand_checked():
    problem = RastriginProj(4)
    x = jnp.array([[2.048] * 4, [0.0] * 4, [10.24, 1.0, -10.24, 5.12]])
    ev = run(problem, KEY, x)
    np.testing.assert_allclose(ev.fitness[0], 0.0, atol=1e-4)
    # means of the halves (10.24 -> 0.5, -10.24 -> -0.5, 5.12 stays): (0.75, 2.31)
    np.testing.assert_allclose(ev.descriptor, [[2.048, 2.048], [0.0, 0.0], [0.75, 2.31]], atol=1e-6)
    assert np.isfinite(np.asarray(ev.descriptor)).all()  # x = 0 folds to 0, not NaN


def test_linear_projection_optimum_and_normalisation():
    for function in ("sphere", "rastrigin"):
        problem = LinearProjection(6, function)
        x = jnp.stack([jnp.full(6, 2.048), jnp.full(6, -5.12)])
        ev = run(problem, KEY, x)
        np.testing.assert_allclose(ev.fitness, [100.0, 0.0], atol=1e-4)
        np.testing.assert_allclose(ev.descriptor, [[6.144, 6.144], [-15.36, -15.36]], atol=1e-5)
    # the sphere at the origin: 100 (1 - 2.048^2 / 7.168^2) = 100 * 45 / 49; measures 0
    ev = run(LinearProjection(6), KEY, jnp.zeros((1, 6)))
    np.testing.assert_allclose(ev.fitness[0], 100 * 45 / 49, rtol=1e-6)
    np.testing.assert_allclose(ev.descriptor[0], [0.0, 0.0], atol=1e-7)
    assert LinearProjection(100).worst_objective == pytest.approx(100 * 7.168**2)


@settings(max_examples=20, deadline=None)
@given(num_dims=st.integers(2, 12), k=st.integers(2, 12), seed=st.integers(0, 2**31 - 1))
def test_linear_projection_measures_are_folded_group_sums(num_dims, k, seed):
    """``k`` measures: sums over consecutive groups of ``n // k`` coordinates, the last ``n mod k``
    groups one longer (``np.array_split``'s groups reversed), inside their ranges."""
    k = min(k, num_dims)
    problem = LinearProjection(num_dims, "sphere", num_measures=k)
    x = np.random.default_rng(seed).uniform(-12, 12, (5, num_dims)).astype(np.float32)
    ev = run(problem, KEY, jnp.asarray(x))
    groups = np.array_split(np.arange(num_dims)[::-1], k)[::-1]  # bigger groups last
    folded = np.array([[ref_fold(v) for v in row] for row in x.astype(np.float64)])
    want = np.stack([folded[:, sorted(g)].sum(1) for g in groups], axis=1)
    np.testing.assert_allclose(ev.descriptor, want, rtol=2e-5, atol=1e-4)
    assert problem.num_descriptors == k and len(problem.descriptor_ranges) == k
    for j, (low, high) in enumerate(problem.descriptor_ranges):
        assert high == -low == pytest.approx(5.12 * len(groups[j]))
        assert np.all((low <= np.asarray(ev.descriptor)[:, j]) & (np.asarray(ev.descriptor)[:, j] <= high))
    if k == 2:  # pyribs' example: the first n // 2 coordinates, then the rest
        h = num_dims // 2
        np.testing.assert_allclose(
            ev.descriptor, np.stack([folded[:, :h].sum(1), folded[:, h:].sum(1)], 1), rtol=2e-5, atol=1e-4
        )
    # the fitness is scaled to scale, the measures not
    ev1 = run(LinearProjection(num_dims, "sphere", scale=1.0, num_measures=k), KEY, jnp.asarray(x))
    np.testing.assert_allclose(ev1.fitness, np.asarray(ev.fitness) / 100, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(ev1.descriptor, ev.descriptor)


def test_linear_projection_clip_rule():
    problem = LinearProjection(4)
    x = jnp.array(
        [
            [10.24, 0.0, -10.24, 0.0],  # folded to 5.12 / x: 0.5 and -0.5
            [5.12, -5.12, 5.13, 0.0],  # the box edges are kept; just beyond folds to ~0.998
            [1e30, -1e30, 0.0, 2.0],  # far away folds to ~0
        ]
    )
    ev = run(problem, KEY, x)
    np.testing.assert_allclose(
        ev.descriptor, [[0.5, -0.5], [0.0, 5.12 / 5.13], [0.0, 2.0]], rtol=1e-6, atol=1e-6
    )


def test_odd_dimension_halves():
    problem = LinearProjection(5)
    assert problem.descriptor_ranges == ((-10.24, 10.24), (-15.36, 15.36))
    ev = run(problem, KEY, jnp.full((1, 5), 5.12))
    np.testing.assert_allclose(ev.descriptor[0], [10.24, 15.36], rtol=1e-6)
    ev = run(RastriginProj(5), KEY, jnp.array([[1.0, 3.0, 0.0, 1.0, 5.0]]))
    np.testing.assert_allclose(ev.descriptor[0], [2.0, 2.0], rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# ranges


ALL_PROBLEMS = [
    Arm(7),
    NoisyArm(7, 0.0, 0.0),
    QDSphere(6),
    QDRastrigin(6),
    RastriginProj(6),
    RastriginProj(7),
    LinearProjection(6),
    LinearProjection(7, "rastrigin"),
]


@pytest.mark.parametrize("problem", ALL_PROBLEMS, ids=lambda p: type(p).__name__)
def test_outputs_lie_in_declared_ranges_inside_bounds(problem):
    low, high = problem.bounds
    n = problem.num_dims
    rng = np.random.default_rng(3)
    x = np.concatenate(
        [
            rng.uniform(low, high, (500, n)),
            rng.choice([low, high], (200, n)),  # corners
            np.full((1, n), low),
            np.full((1, n), high),
        ]
    )
    ev = run(problem, KEY, x)
    desc = np.asarray(ev.descriptor)
    assert desc.shape == (len(x), problem.num_descriptors) == (len(x), len(problem.descriptor_ranges))
    for j, (d_low, d_high) in enumerate(problem.descriptor_ranges):
        assert d_low <= desc[:, j].min() and desc[:, j].max() <= d_high + 1e-5 * abs(d_high)
    f_low, f_high = problem.fitness_range
    fit = np.asarray(ev.fitness)
    tol = 1e-5 * max(1.0, abs(f_low), abs(f_high))
    assert f_low - tol <= fit.min() and fit.max() <= f_high + tol
    assert problem.maximize is True


def test_fitness_range_low_end_is_tight():
    # the worst single coordinate of Rastrigin on [-5, 5] (about 40.35 at z ~ +-4.52) fills the box
    problem = QDRastrigin(2)
    z = np.linspace(-5, 5, 100_001)
    term = 10 + z**2 - 10 * np.cos(2 * np.pi * z)
    assert problem.fitness_range[0] == pytest.approx(-2 * term.max(), rel=1e-9)
    z = np.linspace(-5.12 - 2.048, 5.12 - 2.048, 100_001)
    term = 10 + z**2 - 10 * np.cos(2 * np.pi * z)
    worst = 10 + 7.168**2 - 10 * np.cos(2 * np.pi * 7.168)
    low = LinearProjection(4, "rastrigin").fitness_range[0]
    assert low == pytest.approx(100 * (1 - term.max() / worst), rel=1e-7)
    assert low < -10  # x = -5.12 is not the worst point of the box for Rastrigin
    assert RastriginProj(3).fitness_range[0] == pytest.approx(-3 * term.max(), rel=1e-9)


# ---------------------------------------------------------------------------------------------
# noisy arm


def test_noisy_arm_uses_the_key():
    x = np.random.default_rng(1).uniform(0, 1, (16, 10))
    noisy = NoisyArm(10, fitness_noise=0.1, descriptor_noise=0.05, params_noise=0.02)
    a = run(noisy, jax.random.key(5), x)
    b = run(noisy, jax.random.key(5), x)
    c = run(noisy, jax.random.key(6), x)
    np.testing.assert_array_equal(a.fitness, b.fitness)
    np.testing.assert_array_equal(a.descriptor, b.descriptor)
    assert not np.allclose(a.fitness, c.fitness)
    assert not np.allclose(a.descriptor, c.descriptor)


@pytest.mark.fusion_emitters
def test_noisy_arm_without_noise_is_arm():
    x = np.random.default_rng(1).uniform(0, 1, (16, 10))
    noiseless = NoisyArm(10, fitness_noise=0.0, descriptor_noise=0.0, params_noise=0.0)
    a, b = run(noiseless, jax.random.key(5), x), run(Arm(10), KEY, x)
    np.testing.assert_array_equal(a.fitness, b.fitness)
    np.testing.assert_array_equal(a.descriptor, b.descriptor)


def test_noisy_arm_draws_follow_qdax_key_split():
    key = jax.random.key(9)
    x = np.random.default_rng(1).uniform(0, 1, (8, 6))

    @jax.jit
    def expected(key, x):  # QDax: (_, fitness, descriptor, params) keys, noise = std * N(0, 1)
        _, k_f, k_d, k_p = jax.random.split(key, 4)
        clean = Arm(6).evaluate(KEY, x + 0.1 * jax.random.normal(k_p, x.shape))
        fitness = clean.fitness + 0.3 * jax.random.normal(k_f, (8,))
        return fitness, clean.descriptor + 0.2 * jax.random.normal(k_d, (8, 2))

    fitness, descriptor = expected(key, jnp.asarray(x, jnp.float32))
    ev = run(NoisyArm(6, fitness_noise=0.3, descriptor_noise=0.2, params_noise=0.1), key, x)
    np.testing.assert_allclose(ev.fitness, fitness, atol=1e-6)
    np.testing.assert_allclose(ev.descriptor, descriptor, atol=1e-6)


def test_noisy_arm_noise_std_matches_setting():
    x = np.random.default_rng(1).uniform(0, 1, (4000, 5))
    clean = run(Arm(5), KEY, x)
    ev = run(NoisyArm(5, fitness_noise=0.3, descriptor_noise=0.05), jax.random.key(2), x)
    fit_err = np.asarray(ev.fitness - clean.fitness)
    desc_err = np.asarray(ev.descriptor - clean.descriptor)
    # 4000 draws: the sample std is within ~3.5% of the truth with overwhelming probability
    assert abs(fit_err.std() / 0.3 - 1) < 0.06 and abs(fit_err.mean()) < 0.03
    assert abs(desc_err.std(axis=0) / 0.05 - 1).max() < 0.06 and abs(desc_err.mean(axis=0)).max() < 0.005
    assert abs(np.corrcoef(desc_err.T)[0, 1]) < 0.1  # independent per descriptor


def test_noisy_arm_params_noise_moves_descriptors():
    x = jnp.full((2000, 3), 0.5)  # straight arm; genotype noise bends it
    ev = run(NoisyArm(3, fitness_noise=0.0, descriptor_noise=0.0, params_noise=0.05), KEY, x)
    assert float(jnp.std(ev.fitness)) > 0.0
    assert float(jnp.mean(ev.descriptor[:, 0])) < 1.0


# ---------------------------------------------------------------------------------------------
# transformations, pytrees, non-finite inputs, errors


@pytest.mark.parametrize(
    "problem",
    [Arm(6), NoisyArm(6), QDSphere(6), QDRastrigin(6), RastriginProj(6), LinearProjection(6, "rastrigin")],
    ids=lambda p: type(p).__name__,
)
def test_jit_vmap_and_pytree(problem):
    assert isinstance(problem, FunctionProblem)
    low, high = problem.bounds
    x = jnp.asarray(np.random.default_rng(3).uniform(low, high, (3, 5, 6)), jnp.float32)
    eager = problem.evaluate(KEY, x[0])
    jitted = run(problem, KEY, x[0])
    np.testing.assert_allclose(jitted.fitness, eager.fitness, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(jitted.descriptor, eager.descriptor, rtol=1e-5, atol=1e-5)
    batched = jax.jit(jax.vmap(problem.evaluate, in_axes=(None, 0)))(KEY, x)
    assert batched.fitness.shape == (3, 5) and batched.descriptor.shape == (3, 5, 2)
    for i in range(3):
        one = run(problem, KEY, x[i])
        np.testing.assert_allclose(batched.fitness[i], one.fitness, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(batched.descriptor[i], one.descriptor, rtol=1e-5, atol=1e-5)
    tree = {"a": x[0][:, :2], "b": x[0][:, 2:].reshape(5, 2, 2)}  # ravel order: a, then b
    from_tree = jax.jit(problem.evaluate)(KEY, tree)
    np.testing.assert_allclose(from_tree.fitness, jitted.fitness, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(from_tree.descriptor, jitted.descriptor, rtol=1e-6, atol=1e-6)


def test_numpy_and_float64_genotypes_give_float32():
    x = np.random.default_rng(0).uniform(0, 1, (4, 3))
    ev = Arm(3).evaluate(KEY, x)
    assert ev.fitness.dtype == jnp.float32 and ev.descriptor.dtype == jnp.float32
    np.testing.assert_allclose(ev.fitness, Arm(3).evaluate(KEY, jnp.asarray(x, jnp.float32)).fitness)


@pytest.mark.parametrize("problem", ALL_PROBLEMS, ids=lambda p: type(p).__name__)
def test_non_finite_genotypes_do_not_crash(problem):
    low, high = problem.bounds
    x = np.full((3, problem.num_dims), (low + high) / 2, np.float32)
    x[0, 0] = np.nan
    ev = run(problem, KEY, jnp.asarray(x))
    fit = np.asarray(ev.fitness)
    assert np.isnan(fit[0])
    assert np.isfinite(fit[1:]).all() and np.isfinite(np.asarray(ev.descriptor[1:])).all()


def test_wrong_genotype_shape():
    with pytest.raises(ValueError, match=r"\[pop, 4\]"):
        LinearProjection(4).evaluate(KEY, jnp.zeros((2, 5)))
    with pytest.raises(ValueError, match=r"\[pop, 3\]"):
        Arm(3).evaluate(KEY, jnp.zeros(3))


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda: Arm(0), ValueError, "num_joints"),
        (lambda: Arm(2.0), TypeError, "num_joints"),
        (lambda: Arm(True), TypeError, "num_joints"),
        (lambda: NoisyArm(0), ValueError, "num_joints"),
        (lambda: NoisyArm(3, fitness_noise=-0.1), ValueError, "fitness_noise"),
        (lambda: NoisyArm(3, descriptor_noise=float("nan")), ValueError, "descriptor_noise"),
        (lambda: NoisyArm(3, params_noise=-1), ValueError, "params_noise"),
        (lambda: NoisyArm(3, fitness_noise="0.1"), TypeError, "fitness_noise"),
        (lambda: QDSphere(1), ValueError, "num_dims"),
        (lambda: QDRastrigin(1), ValueError, "num_dims"),
        (lambda: RastriginProj(1), ValueError, "num_dims"),
        (lambda: LinearProjection(1), ValueError, "num_dims"),
        (lambda: LinearProjection(4.5), TypeError, "num_dims"),
        (lambda: LinearProjection(4, "ackley"), ValueError, "function"),
        (lambda: LinearProjection(4, 3), TypeError, "function"),
    ],
)
def test_constructor_errors_name_the_argument(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_problems_are_frozen_and_defaults_follow_sources():
    assert Arm().num_joints == 100 and Arm().num_dims == 100
    noisy = NoisyArm(np.int64(5), fitness_noise=1)
    assert noisy.num_dims == 5 and isinstance(noisy.num_joints, int) and noisy.fitness_noise == 1.0
    assert (noisy.fitness_noise, noisy.descriptor_noise, noisy.params_noise) == (1.0, 0.1, 0.0)
    assert LinearProjection().num_dims == 100 and LinearProjection().function == "sphere"
    assert LinearProjection().descriptor_ranges == ((-256.0, 256.0), (-256.0, 256.0))
    with pytest.raises(AttributeError):
        Arm(3).num_joints = 4


# ---------------------------------------------------------------------------------------------
# QDax's multi-objective Rastrigin (MOME)


def ref_mo_rastrigin(x, base_lag, lag):
    """Float64 NumPy: ``[pop, n] -> [pop, 2]``."""
    n = x.shape[1]

    def objective(z):
        return -(10 * n + np.sum(z**2 - 10 * np.cos(2 * np.pi * z), axis=1))

    return np.stack([objective(x - base_lag), objective(x - lag)], axis=1)


@pytest.mark.parametrize("num_dims, base_lag, lag", [(2, 0.0, 2.2), (10, 0.0, 2.2), (100, -0.5, 1.3)])
def test_mo_rastrigin_matches_reference(num_dims, base_lag, lag):
    problem = MORastrigin(num_dims, lag=lag, base_lag=base_lag)
    x = np.random.default_rng(num_dims).uniform(-2.0, 4.0, (16, num_dims)).astype(np.float32)
    ev = run(problem, KEY, x)
    assert ev.fitness.shape == (16, 2) and ev.descriptor.shape == (16, 2)
    assert ev.fitness.dtype == jnp.float32 and ev.descriptor.dtype == jnp.float32
    np.testing.assert_allclose(ev.fitness, ref_mo_rastrigin(x.astype(np.float64), base_lag, lag), rtol=1e-5)
    np.testing.assert_array_equal(ev.descriptor, x[:, :2])


def test_mo_rastrigin_optima_and_attributes():
    problem = MORastrigin(6)
    ev = run(problem, KEY, np.stack([np.zeros(6), np.full(6, 2.2)]))
    np.testing.assert_allclose(ev.fitness[0, 0], 0.0, atol=1e-5)  # x = base_lag: f1 = 0
    np.testing.assert_allclose(ev.fitness[1, 1], 0.0, atol=1e-4)  # x = lag: f2 = 0
    assert float(ev.fitness[0, 1]) < -1.0 and float(ev.fitness[1, 0]) < -1.0  # the objectives conflict
    assert (problem.num_dims, problem.lag, problem.base_lag) == (6, 2.2, 0.0)
    assert (problem.num_objectives, problem.num_descriptors, problem.maximize) == (2, 2, True)
    assert problem.bounds == (-2.0, 4.0)
    assert problem.descriptor_ranges == ((-2.0, 4.0), (-2.0, 4.0))
    assert MORastrigin().num_dims == 100
    # the worst coordinate term on [-2, 4] (and on the lagged [-4.2, 1.8]) is near |z| = 3.5
    z = np.linspace(-2, 4, 600_001)
    worst = np.max(10 + z**2 - 10 * np.cos(2 * np.pi * z))
    (low1, high1), (low2, high2) = problem.fitness_range
    assert low1 == pytest.approx(-6 * worst, rel=1e-9) and low2 == pytest.approx(-6 * worst, rel=1e-9)
    assert high1 == high2 == 0.0


def test_mo_rastrigin_fitness_lies_in_its_range_inside_the_box():
    problem = MORastrigin(5, lag=1.0, base_lag=-1.0)
    rng = np.random.default_rng(4)
    x = np.concatenate(
        [rng.uniform(-2, 4, (500, 5)), rng.choice([-2.0, 4.0], (200, 5)), np.full((1, 5), 3.5)]
    )
    fit = np.asarray(run(problem, KEY, x).fitness)
    for j, (low, high) in enumerate(problem.fitness_range):
        assert low - 1e-4 * abs(low) <= fit[:, j].min() and fit[:, j].max() <= high
    # each range comes from its own shifted box: [-1, 5] (worst term near z = 4.5) for objective 1,
    # [-3, 3] (worst near |z| = 2.5) for objective 2
    assert problem.fitness_range[0][0] < problem.fitness_range[1][0] < 0.0


def test_mo_rastrigin_non_finite_genotypes_give_nan():
    x = np.zeros((3, 4), np.float32)
    x[0, 1] = np.nan
    x[1, 2] = np.inf
    fit = np.asarray(run(MORastrigin(4), KEY, x).fitness)
    assert np.isnan(fit[:2]).all() and np.isfinite(fit[2]).all()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"num_dims": 1}, "num_dims"),
        ({"num_dims": 0}, "num_dims"),
        ({"num_dims": 3.0}, "num_dims"),
        ({"num_dims": True}, "num_dims"),
        ({"num_dims": 4, "lag": float("nan")}, "lag"),
        ({"num_dims": 4, "base_lag": "0"}, "base_lag"),
    ],
)
def test_mo_rastrigin_bad_arguments_name_them(kwargs, match):
    with pytest.raises(ArgumentError, match=match):
        MORastrigin(**kwargs)
