"""Construction checks of every strategy class exported by :mod:`evotensor.es`, as one table.

The strategies come from the package (:mod:`tests.es.strategy_table`) and their float arguments
from their constructors' signatures (the whole class hierarchy), so a new strategy, or a new float
argument, is covered without editing this file, and an argument without a rule in :data:`RULES`
fails :func:`test_every_float_argument_has_a_rule` until one is written. Each rule lists values
that must be refused with an :class:`~evotensor.core.checks.ArgumentError` naming the argument:
NaN, +-inf, ``1e30`` for spreads (its square overflows float32: ``check_spread``'s bound is 1e15),
``1e39`` (not a float32) for other reals, and 0 / negative / out-of-range values where invalid.
"""

from __future__ import annotations

import inspect
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tests.es.strategy_table import STRATEGY_NAMES, build

import evotensor.es as es_package
from evotensor.core.checks import MAX_SPREAD, ArgumentError
from evotensor.es.core.optimizers import clipup

INF, NAN = math.inf, math.nan
ALWAYS = [INF, -INF, NAN, 1e39, "1.0", True, None]

# value kinds -> the values each must refuse (beyond ALWAYS)
SPREAD = [1e30, MAX_SPREAD * 2, 0.0, -1.0]  # > 0, <= 1e15
SPREAD_OR_ZERO = [1e30, -1.0, -1e-30]  # >= 0, <= 1e15
FRACTION = [0.0, -0.5, 1.5, 1e30]  # (0, 1]
FRACTION_OR_ZERO = [-0.5, 1.5, 1e30]  # [0, 1]
NON_NEGATIVE = [-1.0, -1e-30]  # >= 0, finite in float32
RULES: dict[str, list] = {
    # spreads: standard deviations, step sizes, radii, initial ranges, step factors
    "sigma_init": SPREAD,
    "std_init": SPREAD,
    "init_range": SPREAD,
    "radius": SPREAD,
    "radius_max": SPREAD,
    "radius_min": SPREAD,
    "std_max": SPREAD,
    "std_meta": SPREAD,
    "sigma_min": SPREAD,
    "beta": SPREAD,
    "perturb_low": SPREAD,
    "perturb_high": SPREAD,
    "std_min": SPREAD_OR_ZERO,
    "extra_noise": SPREAD_OR_ZERO,
    # fractions: ratios, smoothing and learning rates that interpolate, decay factors
    "elite_ratio": FRACTION,
    "selection_ratio": FRACTION,
    "truncation": FRACTION + [0.75],  # at most 0.5
    "decay": FRACTION,
    "threshold": FRACTION,
    "mean_smoothing": FRACTION,
    "std_smoothing": FRACTION,
    "std_ratio": FRACTION,
    "success_target": FRACTION,
    "adapt_factor": FRACTION,
    "lr_mean": FRACTION,
    "lr_std": FRACTION,
    "std_decay": FRACTION,
    "temp_decay": FRACTION,
    "crossover_rate": FRACTION_OR_ZERO,
    "alpha": FRACTION_OR_ZERO,
    "resample_probability": FRACTION_OR_ZERO,
    "sigma_max_change": FRACTION_OR_ZERO,
    "inertia": FRACTION_OR_ZERO,
    # other reals
    "temperature": NON_NEGATIVE,
    "temp_init": NON_NEGATIVE,
    "temp_min": NON_NEGATIVE,
    "sigma_learning_rate": NON_NEGATIVE + [1e30],
    "differential_weight": [0.0, -0.5, 2.5],  # (0, 2]
    "cognitive": NON_NEGATIVE + [4.5],  # [0, 4]
    "social": NON_NEGATIVE + [4.5],
}
# arguments that take something else than a float (ints, names, callables, arrays) and are
# checked by the tests of their strategies
NOT_FLOAT = {
    "population_size", "num_dims", "solution", "mean_init", "optimizer", "fitness_shaping",
    "sigma_schedule", "step_size", "preset", "variant", "init_bounds", "antithetic",
    "regenerate_noise", "es_gradient_as_surrogate", "base_population_size", "max_population_size",
    "T", "K", "num_groups", "memory", "num_paths", "subspace_dims", "min_subspace_dims",
}  # fmt: skip


def constructor_arguments(cls) -> dict[str, object]:
    """Every named constructor argument of ``cls`` and of the classes above that it passes
    ``**options`` on to, with its default."""
    arguments: dict[str, object] = {}
    for klass in cls.__mro__:
        if "__init__" in vars(klass):
            parameters = inspect.signature(klass.__init__).parameters.values()
            for p in parameters:
                if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
                    arguments.setdefault(p.name, p.default)
            if not any(p.kind == p.VAR_KEYWORD for p in parameters):
                break  # nothing more reaches the classes above
    return arguments


CASES = [
    (name, argument, value)
    for name in STRATEGY_NAMES
    for argument in constructor_arguments(getattr(es_package, name))
    if argument in RULES
    for value in ALWAYS + RULES[argument]
    # None is a valid value where it is the argument's default
    if not (value is None and constructor_arguments(getattr(es_package, name))[argument] is None)
]


def test_every_float_argument_has_a_rule():
    for name in STRATEGY_NAMES:
        for argument, default in constructor_arguments(getattr(es_package, name)).items():
            assert argument in RULES or argument in NOT_FLOAT, (
                f"{name}({argument}=...) has no rule in RULES: decide its valid range, check it at "
                "construction (evotensor.core.checks) and add it here"
            )
            if isinstance(default, float):
                assert argument in RULES, f"{name}({argument}={default}) is a float without a rule"


def test_every_strategy_builds_with_its_defaults():
    """The table below needs every strategy to build small; a new one may need a row in BUILD."""
    for name in STRATEGY_NAMES:
        strategy = build(name)
        assert strategy.num_dims == 3, name


@pytest.mark.parametrize(("name", "argument", "value"), CASES, ids=[f"{c[0]}-{c[1]}-{c[2]!r}" for c in CASES])
def test_bad_float_argument_is_refused_naming_it(name, argument, value):
    with pytest.raises(ArgumentError, match=argument):
        build(name, **{argument: value})


@pytest.mark.parametrize("name", STRATEGY_NAMES)
@pytest.mark.parametrize("argument", ["num_dims", "population_size"])
@pytest.mark.parametrize("value", [0, -3, 2.0, 4.5, True, "8", np.float32(8)], ids=repr)
def test_bad_sizes_are_refused_naming_them(name, argument, value):
    if argument == "population_size" and "population_size" not in constructor_arguments(
        getattr(es_package, name)
    ):
        argument = "max_population_size"  # the restart strategies' static population
    with pytest.raises(ArgumentError, match=argument):
        build(name, **{argument: value})


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_a_state_too_large_for_memory_is_refused_naming_num_dims(name):
    """``num_dims=10**12`` (4 TB per population row block) fails at construction, naming the argument
    and the size, before XLA would fail with RESOURCE_EXHAUSTED."""
    extra = {"max_population_size": 256} if name in ("IPOPCMAES", "BIPOPCMAES") else {}  # >= its lambda_0
    with pytest.raises(ArgumentError, match=r"num_dims=1000000000000 .* needs about .* GiB"):
        build(name, num_dims=10**12, **extra)


def test_cma_es_at_100000_dims_is_refused_but_a_linear_strategy_is_not(monkeypatch):
    """CMA-ES keeps ``[n, n]`` matrices: 40 GB each at n = 100,000. With a 64 GiB limit it is refused;
    Sep-CMA-ES (linear state) at the same size is built."""
    monkeypatch.setenv("EVOTENSOR_MAX_STATE_BYTES", str(64 * 2**30))
    with pytest.raises(ArgumentError, match=r"num_dims=100000 .* CMAES"):
        es_package.CMAES(num_dims=100_000)
    with pytest.raises(ArgumentError, match="num_dims=100000"):
        es_package.XNES(num_dims=100_000)
    assert es_package.SepCMAES(num_dims=100_000).num_dims == 100_000


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_memory_estimate_covers_the_state_and_a_generation(name):
    """The construction-time estimate is at least the state plus one population, measured without
    allocating (``jax.eval_shape``) at two sizes: a strategy whose state outgrows its estimate (a new
    ``[n, n]`` field without ``square_matrices``) fails here."""
    for dims in (3, 24):
        strategy = build(name, dims)
        params = strategy.default_params()
        state = jax.eval_shape(strategy.init, jax.random.key(0), params)
        x, _ = jax.eval_shape(strategy.ask, jax.random.key(1), state, params)
        size = sum(leaf.size for leaf in jax.tree_util.tree_leaves((state, x)))
        estimate = strategy.memory_elements(strategy.population_size, strategy.num_dims)
        assert size <= estimate, f"{name} at {dims} dims: {size} elements > estimate {estimate}"


@pytest.mark.parametrize("name", STRATEGY_NAMES)
def test_non_finite_template_or_mean_init_is_refused(name):
    with pytest.raises(ArgumentError, match="solution"):
        build(name, num_dims=None, solution=jnp.array([0.0, jnp.nan, 1.0]))
    if "mean_init" in constructor_arguments(getattr(es_package, name)):
        for bad in ([0.0, jnp.inf, 1.0], [0.0, 1e39, 1.0]):
            with pytest.raises(ArgumentError, match="mean_init"):
                build(name, mean_init=np.array(bad))


@pytest.mark.parametrize("bounds", [(-1e30, 1.0), (0.0, 1e30), (0.0, INF), (NAN, 1.0)])
def test_restart_init_bounds_must_be_finite_and_moderate(bounds):
    with pytest.raises(ArgumentError, match="init_bounds"):
        build("IPOPCMAES", init_bounds=bounds)


@pytest.mark.parametrize("value", [NAN, INF, -1.0, 0.0, 1e30])
def test_clipup_learning_rate_is_checked(value):
    with pytest.raises(ArgumentError, match="learning_rate"):
        clipup(learning_rate=value)
    with pytest.raises(ArgumentError, match=r"learning_rate\(0\)"):
        clipup(learning_rate=lambda step, v=value: v if math.isnan(v) or v <= 0 else -v)


def test_pbt_perturbation_factors_are_ordered():
    with pytest.raises(ArgumentError, match="perturb_low"):
        build("PBT", perturb_low=1.3, perturb_high=1.2)


OPTIMIZER_STRATEGIES = [
    n for n in STRATEGY_NAMES if "optimizer" in constructor_arguments(getattr(es_package, n))
]


@pytest.mark.parametrize("name", OPTIMIZER_STRATEGIES)
@pytest.mark.parametrize("rate", [NAN, INF])
def test_an_optimizer_with_a_non_finite_learning_rate_is_refused(name, rate):
    import optax

    with pytest.raises(ArgumentError, match="optimizer"):
        build(name, optimizer=optax.adam(rate))
    with pytest.raises(ArgumentError, match="optimizer"):
        build(name, optimizer=optax.chain(optax.clip(1.0), optax.sgd(rate)))
    assert build(name, optimizer=optax.sgd(0.1)).optimizer is not None


def test_the_optimizer_table_is_not_empty():
    assert {"OpenES", "PGPE", "ARS"} <= set(OPTIMIZER_STRATEGIES)
