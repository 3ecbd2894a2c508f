"""QDax's mixing emitter (evotensor.qd.emitters.mixing): polynomial mutation, gene-swap crossover, SBX,
Iso+LineDD as a crossover, and the batch that mixes them."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.bad_input_table import refusal_test

import evotensor
from evotensor.core.checks import ArgumentError
from evotensor.problems.qd import QDRastrigin
from evotensor.qd import (
    GeneSwapCrossover,
    GridArchive,
    MAPElites,
    MixingEmitter,
    PolynomialMutation,
    polynomial_step,
)
from evotensor.qd.emitters import IsoLineCrossover, SBXCrossover, iso_line_step, sbx_step

KEY = jax.random.key(0)


def mutate(operator, key, x):
    return jax.jit(operator)(key, jnp.asarray(x, jnp.float32))


def cross(operator, key, x1, x2):
    return jax.jit(operator)(key, jnp.asarray(x1, jnp.float32), jnp.asarray(x2, jnp.float32))


# ---------------------------------------------------------------------------------------------
# the polynomial step against its definition


def ref_step(u, v, eta, low, high):
    """QDax's formula, one value in float64."""
    width = high - low
    delta1, delta2 = (v - low) / width, (high - v) / width
    power = 1.0 / (1.0 + eta)
    if u < 0.5:
        dq = (2 * u + (1 - 2 * u) * delta1 ** (1 + eta)) ** power - 1
    else:
        dq = 1 - (2 * (1 - u) + 2 * (u - 0.5) * delta2 ** (1 + eta)) ** power
    return v + dq * width


@pytest.mark.parametrize("eta", [0.5, 1.0, 20.0])
def test_polynomial_step_matches_the_formula_on_a_grid(eta):
    low, high = -2.0, 4.0
    u_grid = np.concatenate([np.linspace(0.0, 0.999, 37), [0.5, 0.4999]]).astype(np.float32)
    v_grid = np.linspace(low, high, 25).astype(np.float32)
    u, v = np.meshgrid(u_grid, v_grid)
    got = np.asarray(jax.jit(polynomial_step, static_argnums=(2, 3, 4))(u, v, eta, low, high))
    expected = np.vectorize(lambda a, b: ref_step(float(a), float(b), eta, low, high))(u, v)
    np.testing.assert_allclose(got, expected, rtol=0, atol=2e-5 * (high - low))


def test_polynomial_step_moves_outside_values_to_the_bound_first():
    u = jnp.array([0.2, 0.7])
    np.testing.assert_allclose(
        polynomial_step(u, jnp.array([-5.0, 9.0]), 1.0, 0.0, 1.0),
        polynomial_step(u, jnp.array([0.0, 1.0]), 1.0, 0.0, 1.0),
    )
    assert np.all(np.isfinite(np.asarray(polynomial_step(u, jnp.array([-5.0, 9.0]), 1.0, 0.0, 1.0))))


# ---------------------------------------------------------------------------------------------
# polynomial mutation


@settings(max_examples=15, deadline=None)
@given(
    d=st.integers(1, 24),
    proportion=st.floats(0.0, 1.0),
    eta=st.floats(0.1, 30.0),
    per_coordinate=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_mutation_changes_int_proportion_d_coordinates_inside_the_box(
    d, proportion, eta, per_coordinate, seed
):
    gen = np.random.default_rng(seed)
    n = 16
    if per_coordinate:
        low = gen.uniform(-3, 0, d)
        high = low + gen.uniform(0.5, 3, d)
    else:
        low, high = -1.0, 2.0
    x = gen.uniform(low, high, (n, d)).astype(np.float32)
    operator = PolynomialMutation(low=low, high=high, eta=eta, proportion=proportion)
    y = np.asarray(mutate(operator, jax.random.key(seed), x))
    k = int(proportion * d)
    changed = np.sum(y != x, axis=1)
    assert y.shape == x.shape and y.dtype == np.float32
    assert np.all(changed <= k)  # only the chosen coordinates move
    # a chosen coordinate keeps its value only if its step rounds to 0 (probability ~1e-6)
    assert np.mean(changed == k) >= 0.9
    low32, high32 = np.float32(low), np.float32(high)
    assert np.all((low32 <= y) & (y <= high32))


def test_mutation_chooses_coordinates_uniformly_and_distinct():
    n, d = 4000, 10
    x = np.full((n, d), 0.5, np.float32)
    y = np.asarray(mutate(PolynomialMutation(low=0.0, high=1.0, proportion=0.3), KEY, x))
    changed = y != x
    assert np.all(changed.sum(axis=1) <= 3) and np.mean(changed.sum(axis=1) == 3) > 0.99
    # each coordinate is chosen with probability 3/10: 4000 rows put the frequency within +-0.03
    np.testing.assert_allclose(changed.mean(axis=0), 0.3, atol=0.03)


def test_mutation_of_the_midpoint_is_symmetric_and_eta_sets_the_spread():
    n, d = 8000, 4
    x = np.full((n, d), 1.0, np.float32)  # the midpoint of [-2, 4]
    wide = np.asarray(mutate(PolynomialMutation(low=-2.0, high=4.0, eta=1.0, proportion=1.0), KEY, x))
    narrow = np.asarray(mutate(PolynomialMutation(low=-2.0, high=4.0, eta=20.0, proportion=1.0), KEY, x))
    # 32000 steps of standard deviation < 3: the mean lies within 0.06 of 1 (about 4 sigma)
    assert abs(wide.mean() - 1.0) < 0.06 and abs(narrow.mean() - 1.0) < 0.06
    assert abs(np.mean(wide > 1.0) - 0.5) < 0.02
    assert np.mean(np.abs(narrow - 1.0)) < 0.5 * np.mean(np.abs(wide - 1.0))


def test_mutation_with_zero_proportion_only_clips():
    x = np.array([[-3.0, 0.5, 7.0]], np.float32)
    y = mutate(PolynomialMutation(low=0.0, high=1.0, proportion=0.0), KEY, x)
    np.testing.assert_array_equal(y, [[0.0, 0.5, 1.0]])


def test_mutation_is_deterministic_per_key_and_hashable():
    operator = PolynomialMutation(low=0.0, high=1.0)
    x = np.random.default_rng(0).uniform(0, 1, (8, 6))
    np.testing.assert_array_equal(mutate(operator, KEY, x), mutate(operator, KEY, x))
    assert not np.array_equal(mutate(operator, KEY, x), mutate(operator, jax.random.key(1), x))
    assert hash(operator) == hash(PolynomialMutation(low=0.0, high=1.0))
    assert PolynomialMutation(low=[0, 0], high=[1, 2]).high == (1.0, 2.0)


# ---------------------------------------------------------------------------------------------
# gene-swap crossover


@settings(max_examples=15, deadline=None)
@given(d=st.integers(1, 24), proportion=st.floats(0.0, 1.0), seed=st.integers(0, 2**31 - 1))
def test_crossover_takes_between_one_and_k_coordinates_from_x2(d, proportion, seed):
    gen = np.random.default_rng(seed)
    x1 = gen.uniform(-1, 1, (16, d)).astype(np.float32)
    x2 = x1 + 3.0  # differs everywhere
    y = np.asarray(cross(GeneSwapCrossover(proportion), jax.random.key(seed), x1, x2))
    assert np.all((y == x1) | (y == x2))
    taken = np.sum(y == x2, axis=1)
    k = int(proportion * d)
    assert np.all(taken <= k) and np.all(taken >= min(k, 1))


def test_crossover_draws_coordinates_with_replacement():
    n, d = 4000, 10
    x1, x2 = np.zeros((n, d)), np.ones((n, d))
    taken = np.asarray(cross(GeneSwapCrossover(1.0), KEY, x1, x2)).sum(axis=1)
    # 10 draws of 10 coordinates with replacement hit 10 (1 - 0.9^10) = 6.51 distinct on average
    assert abs(taken.mean() - 10 * (1 - 0.9**10)) < 0.1
    assert np.mean(taken == d) < 0.01  # all ten distinct: 10! / 10^10 = 0.00036
    # every coordinate equally likely: 1 - 0.9^10 = 0.651 each
    np.testing.assert_allclose(
        np.asarray(cross(GeneSwapCrossover(1.0), KEY, x1, x2)).mean(axis=0), 1 - 0.9**10, atol=0.03
    )


# ---------------------------------------------------------------------------------------------
# the emitter


def archive_with_elites():
    archive = GridArchive(solution_dim=3, dims=(4, 4), ranges=[(0, 1), (0, 1)])
    elites = jnp.array([[0.1, 0.1, 5.0], [0.6, 0.3, 6.0], [0.9, 0.8, 7.0]])
    state, _ = archive.add(archive.init(), elites, jnp.zeros(3), elites[:, :2])
    return archive, state, np.asarray(elites)


def ask(emitter, archive, state, key=KEY):
    return jax.jit(lambda k, s: emitter.ask(k, emitter.init(k, archive), archive, s))(key, state)


def test_crossed_rows_come_first_then_mutated_rows():
    archive, state, _ = archive_with_elites()
    emitter = MixingEmitter(
        np.zeros(3),
        mutation=lambda key, x: x * 0 + 2,
        crossover=lambda key, x1, x2: x1 * 0 + 1,
        crossover_fraction=0.5,
        batch_size=10,
    )
    x, new_state = ask(emitter, archive, state)
    assert new_state == () and x.shape == (10, 3) and x.dtype == jnp.float32
    np.testing.assert_array_equal(x[:5], 1.0)
    np.testing.assert_array_equal(x[5:], 2.0)
    assert (emitter.num_crossed, emitter.num_mutated) == (5, 5)
    assert (
        MixingEmitter(
            np.zeros(3), mutation=lambda k, x: x, crossover_fraction=0.09, batch_size=10
        ).num_crossed
        == 0
    )


def test_parents_are_elites_drawn_independently_and_x0_while_empty():
    archive, state, elites = archive_with_elites()
    emitter = MixingEmitter(
        np.full(3, 0.25),
        mutation=lambda key, x: x,
        crossover=lambda key, x1, x2: jnp.where(jnp.arange(3) < 1, x1, x2),  # x1's first, x2's rest
        crossover_fraction=0.5,
        batch_size=200,
    )
    x = np.asarray(ask(emitter, archive, state)[0])
    is_elite = (x[100:, None, :] == elites[None]).all(-1).any(-1)
    assert is_elite.all()  # mutated rows: unchanged elites
    first, rest = x[:100, :1], x[:100, 1:]
    assert (
        np.isin(first, elites[:, 0]).all() and ((rest[:, None] == elites[None, :, 1:]).all(-1)).any(-1).all()
    )
    assert np.mean(~(x[:100, None, :] == elites[None]).all(-1).any(-1)) > 0.4  # mixed pairs: 2/3 expected
    empty = ask(emitter, archive, archive.init())[0]
    np.testing.assert_array_equal(empty, np.full((200, 3), 0.25))


def test_bounds_and_initial_solutions_apply_to_the_batch():
    archive, state, _ = archive_with_elites()
    initial = np.full((4, 3), 0.5)
    emitter = MixingEmitter(
        np.zeros(3),
        mutation=lambda key, x: x * 0 + 5,
        batch_size=4,
        bounds=(0.0, 1.0),
        initial_solutions=initial,
    )
    np.testing.assert_array_equal(ask(emitter, archive, state)[0], np.ones((4, 3)))
    np.testing.assert_array_equal(ask(emitter, archive, archive.init())[0], initial)


def test_operator_returning_the_wrong_shape_is_named():
    archive, state, _ = archive_with_elites()
    emitter = MixingEmitter(np.zeros(3), mutation=lambda key, x: x[:, :2], batch_size=4)
    with pytest.raises(ArgumentError, match=r"mutation must return \[4, 3\]"):
        ask(emitter, archive, state)
    emitter = MixingEmitter(
        np.zeros(3), crossover=lambda key, a, b: a[:1], crossover_fraction=1.0, batch_size=4
    )
    with pytest.raises(ArgumentError, match="crossover must return"):
        ask(emitter, archive, state)


def test_mixing_emitter_fills_a_qd_rastrigin_grid():
    archive = GridArchive(solution_dim=10, dims=(10, 10), ranges=[(0, 1), (0, 1)])
    emitter = MixingEmitter(
        np.full(10, 0.5),
        mutation=PolynomialMutation(low=0.0, high=1.0, eta=1.0, proportion=0.6),
        crossover=GeneSwapCrossover(0.5),
        crossover_fraction=0.5,
        batch_size=32,
        bounds=(0.0, 1.0),
    )
    result = evotensor.run(MAPElites(archive, [emitter]), QDRastrigin(num_dims=10), 20, KEY, progress=False)
    coverage = np.asarray(result.history["coverage"])
    assert np.all(np.diff(coverage) >= 0) and coverage[-1] > coverage[0] + 0.3
    solutions = np.asarray(result.state.archive.solutions)[np.asarray(result.state.archive.occupied)]
    assert np.all((solutions >= 0.0) & (solutions <= 1.0))


# ---------------------------------------------------------------------------------------------
# SBX against a per-gene loop of Deb's bounded formula (as pymap_elites writes it), in float64


def reference_spread(u, beta, eta):
    alpha = 2.0 - beta ** -(eta + 1)
    if u <= 1.0 / alpha:
        return (u * alpha) ** (1.0 / (eta + 1))
    return (1.0 / (2.0 - u * alpha)) ** (1.0 / (eta + 1))


def reference_sbx(u, side, x, y, eta, low, high):
    z = np.array(x, np.float64)
    for i in range(len(x)):
        if abs(x[i] - y[i]) <= 1e-15:
            continue
        a, b = min(x[i], y[i]), max(x[i], y[i])
        c1 = 0.5 * (a + b - reference_spread(u[i], 1.0 + 2.0 * (a - low) / (b - a), eta) * (b - a))
        c2 = 0.5 * (a + b + reference_spread(u[i], 1.0 + 2.0 * (high - b) / (b - a), eta) * (b - a))
        z[i] = min(max(c2 if side[i] <= 0.5 else c1, low), high)
    return z


@pytest.mark.parametrize("eta", [0.5, 2.0, 10.0, 30.0])
def test_sbx_step_equals_the_per_gene_formula(eta):
    rng = np.random.default_rng(int(eta * 10))
    n, d, low, high = 64, 7, -1.0, 2.0
    x = rng.uniform(low, high, (n, d))
    y = np.where(rng.uniform(size=(n, d)) < 0.2, x, rng.uniform(low, high, (n, d)))  # some equal genes
    y[0] = x[0] + 1e-3  # close parents
    u, side = rng.uniform(size=(n, d)), rng.uniform(size=(n, d))
    got = np.asarray(sbx_step(u, side, x, y, eta, low, high))
    want = np.stack([reference_sbx(*rows, eta, low, high) for rows in zip(u, side, x, y, strict=True)])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert np.array_equal(got[x == y], x[x == y].astype(np.float32))  # equal genes are copied


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    eta=st.floats(0.1, 50.0),
    box=st.tuples(st.floats(-5, 0), st.floats(0.01, 5)),
)
def test_sbx_children_stay_in_the_box_and_between_reachable_values(seed, eta, box):
    low, high = box[0], box[0] + box[1]
    rng = np.random.default_rng(seed)
    x1 = rng.uniform(low - 1, high + 1, (16, 5)).astype(np.float32)  # parents outside move inside first
    x2 = rng.uniform(low, high, (16, 5)).astype(np.float32)
    child = np.asarray(cross(SBXCrossover(low=low, high=high, eta=eta), jax.random.key(seed), x1, x2))
    assert (
        np.all(np.isfinite(child)) and np.all(child >= np.float32(low)) and np.all(child <= np.float32(high))
    )


def test_sbx_spread_shrinks_with_eta_and_centres_on_the_parents():
    x1 = np.full((20_000, 1), 0.4, np.float32)
    x2 = np.full((20_000, 1), 0.6, np.float32)

    def spread(eta):
        child = np.asarray(cross(SBXCrossover(low=0.0, high=1.0, eta=eta), KEY, x1, x2))
        return np.mean(child), np.std(child)

    (mean_wide, wide), (mean_narrow, narrow) = spread(1.0), spread(20.0)
    assert abs(mean_wide - 0.5) < 0.01 and abs(mean_narrow - 0.5) < 0.01
    # children near one parent or the other: the larger eta, the nearer (std -> 0.1)
    assert wide > narrow > 0.095 and narrow < 0.105


def test_iso_line_crossover_is_the_emitters_step():
    rng = np.random.default_rng(3)
    x1, x2 = rng.uniform(0, 1, (6, 4)), rng.uniform(0, 1, (6, 4))
    child = cross(IsoLineCrossover(0.05, 0.3), KEY, x1, x2)
    iso_key, line_key = jax.random.split(KEY)
    want = iso_line_step(
        iso_key, line_key, jnp.asarray(x1, jnp.float32), jnp.asarray(x2, jnp.float32), 0.05, 0.3
    )
    np.testing.assert_allclose(child, want, rtol=1e-6, atol=1e-7)  # jit may fuse into an FMA
    # one line step per row: with (almost) no iso noise, child - x1 lies along x2 - x1
    line = np.asarray(cross(IsoLineCrossover(1e-9, 0.3), KEY, x1, x2)) - x1.astype(np.float32)
    ratio = line / (x2 - x1).astype(np.float32)
    np.testing.assert_allclose(ratio, np.repeat(ratio[:, :1], 4, axis=1), rtol=1e-4)


# ---------------------------------------------------------------------------------------------
# bad arguments


def mixing(**kw):
    return MixingEmitter(**{"x0": np.zeros(3), "mutation": lambda k, x: x, "batch_size": 4, **kw})


def polynomial(**kw):
    return PolynomialMutation(**{"low": 0.0, "high": 1.0, **kw})


def call_polynomial(x=None, **kw):
    return polynomial(**kw)(KEY, np.zeros((2, 3)) if x is None else x)


def call_crossover(x1=None, x2=None):
    pair = np.zeros((2, 3))
    return GeneSwapCrossover()(KEY, pair if x1 is None else x1, pair if x2 is None else x2)


CASES: list[tuple[str, object, str, dict]] = []


def case(label, build, argument, **kw):
    CASES.append((label, build, argument, kw))


for value in [math.nan, math.inf, 1e39, "0", None, True, [0.0, math.nan], np.zeros((2, 2))]:
    case("polynomial", polynomial, "low", low=value)
    case("polynomial", polynomial, "high", high=value)
for low, high in [
    (1.0, 0.0),
    (1.0, 1.0),
    ([0.0, 0.0], [1.0, 0.0]),
    ([0.0, 0.0], [1.0, 1.0, 1.0]),
    (-3e38, 3e38),
]:
    case("polynomial", polynomial, "high", low=low, high=high)
for value in [0.0, -1.0, math.nan, math.inf, "1", True, None]:
    case("polynomial", polynomial, "eta", eta=value)
for value in [-0.1, 1.5, math.nan, "0.5", None]:
    case("polynomial", polynomial, "proportion", proportion=value)
    case("crossover", GeneSwapCrossover, "proportion", proportion=value)
case("polynomial call", call_polynomial, "x", x=np.zeros(3))
case("polynomial call", call_polynomial, "low", low=[0.0, 0.0], high=[1.0, 1.0])
case("crossover call", call_crossover, "x1", x1=np.zeros(3))
case("crossover call", call_crossover, "x2", x2=np.zeros((2, 4)))
for value in [math.nan, "0", None, [0.0, math.nan]]:
    case("sbx", SBXCrossover, "low", low=value, high=1.0)
case("sbx", SBXCrossover, "high", low=1.0, high=0.0)
for value in [0.0, -1.0, math.inf, "10"]:
    case("sbx", SBXCrossover, "eta", low=0.0, high=1.0, eta=value)
case("sbx call", lambda **kw: SBXCrossover(low=0.0, high=1.0)(KEY, np.zeros((2, 3)), np.zeros((2, 4))), "x2")
case(
    "sbx call",
    lambda **kw: SBXCrossover(low=[0.0, 0.0], high=[1.0, 1.0])(KEY, np.zeros((2, 3)), np.zeros((2, 3))),
    "low",
)
for value in [-0.1, math.nan, "0.1"]:
    case("iso-line crossover", IsoLineCrossover, "iso_sigma", iso_sigma=value)
    case("iso-line crossover", IsoLineCrossover, "line_sigma", line_sigma=value)
case("mixing", mixing, "mutation", mutation=None)
case("mixing", mixing, "mutation", mutation="gauss")
case("mixing", mixing, "crossover", crossover_fraction=0.5)
case("mixing", mixing, "crossover", crossover=3, crossover_fraction=0.5)
for value in [-0.1, 1.5, math.nan, "0.5", None]:
    case("mixing", mixing, "crossover_fraction", crossover_fraction=value)
case("mixing", mixing, "x0", x0=[0.0, math.nan])
case("mixing", mixing, "batch_size", batch_size=0)
case("mixing", mixing, "bounds", bounds=(1.0, 0.0))

test_bad_argument_is_refused_naming_it = refusal_test(CASES)


def test_only_the_operators_in_use_are_required():
    assert mixing(mutation=None, crossover=lambda k, a, b: a, crossover_fraction=1.0).num_mutated == 0
    assert mixing(crossover=None).num_crossed == 0
