"""The behavioural contract of the strategies of :mod:`evotensor.es`: one table per family, every test
parametrized over its table (as evosax tests its algorithms). Each strategy's own module keeps only
what is specific to it (reference updates, paper constants, argument errors).

* :data:`ARCHIVE` — the population-based and elitist strategies (GA family, PSO, DE, GLD, hill
  climbing, simulated annealing, PBT, CEM, Discovered ES, iAMaLGaM, random search). One compiled
  batched run per strategy (:mod:`tests.es.archive_contract`) serves several checks: it solves a
  shifted 10-d sphere to the documented tolerance, and improves on its first generation; vmap over
  seeds, over a hyperparameter and over poisoned fitness equals separate runs bit for bit (on CPU;
  to :data:`tests.platforms.GPU_RTOL` on GPU); NaN/inf fitness never enters the state and the
  best-so-far is the running minimum of the valid evaluations. A 3,000-generation float32 run on a
  30-d sphere stays finite.
* :data:`GRADIENT` — the gradient-estimating and natural ES (OpenES, ARS, PGPE, ESMC, Guided ES,
  ASEBO, PES, NRES, xNES, SNES, CR-FM-NES): a 10-d sphere from ``3 * ones`` is solved with two
  NaN/inf members per generation (:mod:`tests.es.fdg_contract`); 3,000 float32 generations past
  convergence stay finite; vmap over seeds and hyperparameters equals separate runs bit for bit.
* :data:`MEAN_SIGMA` — MA-ES, LM-MA-ES, Rm-ES and Sep-CMA-ES: the 10-d sphere to ``1e-12`` in 400
  generations, finite far past convergence, NaN ranked last, argument errors naming the argument,
  vmap over seeds and ``sigma_init`` bit-identical (:mod:`tests.es.scan_runner`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from tests.es import fdg_contract as fdg
from tests.es.archive_contract import (
    POISON,
    RANDOM_SEARCH,
    SEEDS,
    fast_jit,
    make_run,
    random_search_tolerance,
)
from tests.es.es_fdg_helpers import make_runner
from tests.es.scan_runner import check_vmap_over_seeds_and_sigma_init, sphere
from tests.es.scan_runner import make_run as make_scan_run
from tests.platforms import assert_equal_on_cpu_close_on_gpu, bit_exact_platform

from evotensor.core.fitness_shaping import centered_ranks, z_score
from evotensor.es import (
    ARS,
    ASEBO,
    CEM,
    CRFMNES,
    DE,
    ESMC,
    GESMRGA,
    GLD,
    LMMAES,
    MAES,
    MR15GA,
    PBT,
    PGPE,
    PSO,
    SAMRGA,
    SNES,
    XNES,
    DiscoveredES,
    GuidedES,
    HillClimbing,
    IAMaLGaMFull,
    NoiseReuseES,
    OpenES,
    PersistentES,
    RandomSearch,
    RmES,
    SepCMAES,
    SimpleGA,
    SimulatedAnnealing,
)
from evotensor.es.core.optimizers import clipup


# --------------------------------------------------------------------------------------------------
# ARCHIVE: population-based and elitist strategies
# --------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ArchiveCase:
    """One row: the strategy is built as ``cls(pop, num_dims=dims, **kwargs)`` and runs ``gens``
    generations on ``sum_j (x_j - shift)^2``; ``tol`` is its documented tolerance (the comment beside
    each row says where it comes from); ``hyper`` is the params field (and value) of batch entry 4."""

    cls: type
    pop: int
    gens: int
    tol: float
    hyper: tuple[str, float]
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    dims: int = 10
    shift: float = 1.0
    long_run_in_default_suite: bool = False
    # generations over which the vmap check compares off CPU (None: all ``gens``); see
    # test_vmap_equals_separate_runs_bitwise
    gpu_vmap_horizon: int | None = None
    # vmapped and separate runs differ in the last bits under XLA:CPU's classic emitters, which most
    # of `make test` compiles with (tests/conftest.py): the vmap check runs under the default emitters
    vmap_needs_fusion_emitters: bool = False

    def make_es(self, num_dims: int | None = None) -> Any:
        return self.cls(self.pop, num_dims=self.dims if num_dims is None else num_dims, **self.kwargs)


# CEM and iAMaLGaM select by rank and refit their model to the selection: once a reordered GPU sum
# has moved a sample by an ulp, a near tie flips a rank and the runs follow different (equally good)
# trajectories. With one float32 ulp of noise injected into every sample of every generation on a
# CPU, their vmap entries stay within 2e-6 of the separate runs for 10 generations and pass GPU_RTOL
# (1e-3) after 20-80; on an H200 the full 200 generations failed. Off CPU they are compared over
# this many generations (the whole run stays checked bit for bit on CPU).
GPU_VMAP_HORIZON = 10

ARCHIVE = {
    # with mutation std decaying x0.98 per generation, 400 generations reach < 1e-6 (a fixed std
    # stalls near std^2)
    "SimpleGA": ArchiveCase(
        SimpleGA, 32, 400, 1e-6, ("elite_ratio", 0.25), {"std_decay": 0.98, "init_range": 2.0}
    ),
    # self-adapted step sizes give linear convergence; 300 generations reach < 1e-8
    "SAMRGA": ArchiveCase(SAMRGA, 32, 300, 1e-8, ("std_meta", 1.5), {"init_range": 2.0}),
    # group-elite-selected step sizes converge linearly; 300 generations reach < 1e-8
    "GESMRGA": ArchiveCase(GESMRGA, 36, 300, 1e-8, ("std_ratio", 0.25), {"init_range": 2.0}),
    # the 1/5th rule gives linear convergence; 300 generations reach < 1e-8
    "MR15GA": ArchiveCase(MR15GA, 32, 300, 1e-8, ("adapt_factor", 0.9), {"init_range": 2.0}),
    # CEM is known to collapse prematurely from far starts with few elites; with 10 elites of 100
    # and std_init = 3 it reaches < 1e-6
    "CEM": ArchiveCase(
        CEM, 100, 200, 1e-6, ("mean_smoothing", 0.9), {"std_init": 3.0}, gpu_vmap_horizon=GPU_VMAP_HORIZON
    ),
    # DES converges linearly; 400 generations of 16 samples reach < 1e-8
    "DiscoveredES": ArchiveCase(DiscoveredES, 16, 400, 1e-8, ("lr_std", 0.2), long_run_in_default_suite=True),
    # iAMaLGaM converges linearly on the sphere; 200 generations of 32 reach < 1e-8
    "IAMaLGaMFull": ArchiveCase(
        IAMaLGaMFull, 32, 200, 1e-8, ("eta_shift", 0.5), gpu_vmap_horizon=GPU_VMAP_HORIZON
    ),
    # constriction PSO converges linearly on the sphere; 300 generations of 32 particles reach < 1e-8
    "PSO": ArchiveCase(
        PSO, 32, 300, 1e-8, ("inertia", 0.6), {"init_range": 2.0}, long_run_in_default_suite=True
    ),
    # DE/rand/1/bin with NP = 5n (Storn & Price suggest 5n-10n) reaches < 1e-6 in 300 generations
    "DE": ArchiveCase(DE, 50, 300, 1e-6, ("differential_weight", 0.7), {"init_range": 2.0}),
    # radius search over R = 1 ... 1e-6 reaches < 1e-8 in 300 generations
    "GLD": ArchiveCase(GLD, 16, 300, 1e-8, ("radius_max", 2.0)),
    # with a geometric step-size decay of 0.98 per generation, 400 generations reach < 1e-6 (a
    # fixed step cannot converge)
    "HillClimbing": ArchiveCase(
        HillClimbing, 16, 400, 1e-6, ("std_decay", 0.97), {"std_decay": 0.98}, vmap_needs_fusion_emitters=True
    ),
    # geometric cooling (std x0.99 per generation) reaches < 1e-4 in 600 generations (~1e-8 after
    # 1000)
    "SimulatedAnnealing": ArchiveCase(
        SimulatedAnnealing, 16, 600, 1e-4, ("temp_decay", 0.95), vmap_needs_fusion_emitters=True
    ),
    # best f < 0.3 after 300 rounds of 20 members. Why a nonzero shift and resampling: explore
    # multiplies by 0.8 / 1.2, so an optimum at 0 is reached by shrinking alone (a shift of 0
    # reached 1e-6 trivially), and without resampling a hyperparameter never changes sign (see
    # test_pbt.test_multiplicative_explore_never_changes_sign), so members whose coordinates start
    # negative can never reach 0.5 (measured best over 16 seeds: 0.53-1.05). With 10 % resampling,
    # 16 seeds reach 0.024-0.13 (median 0.05); random search with the same 6,000 evaluations in
    # this box gets ~0.5.
    "PBT": ArchiveCase(
        PBT, 20, 300, 0.3, ("truncation", 0.3), {"init_range": 2.0, "resample_probability": 0.1}, shift=0.5
    ),
    # the order-statistics tolerance of tests.es.archive_contract.random_search_tolerance (~1.7)
    "RandomSearch": ArchiveCase(
        RandomSearch,
        RANDOM_SEARCH["pop"],
        RANDOM_SEARCH["gens"],
        random_search_tolerance(),
        ("radius", 2.0),
        dims=RANDOM_SEARCH["dims"],
        shift=RANDOM_SEARCH["shift"],
    ),
}


@dataclasses.dataclass
class ArchiveRun:
    """A case with its strategy, its single-run function and the compiled batch of all entries."""

    case: ArchiveCase
    run_one: Callable[..., Any]
    entry_inputs: Callable[[int], tuple[Any, Any, Any]]
    batch: Any
    es: Any = None
    _short: dict = dataclasses.field(default_factory=dict)

    def short(self, generations: int) -> tuple[Callable[..., Any], Any]:
        """``(single-run function, batch of all entries)`` over the first ``generations``, compiled once."""
        if generations not in self._short:
            run = make_run(self.es, generations, self.case.shift)
            inputs = [self.entry_inputs(i) for i in range(len(SEEDS))]
            stacked = jax.tree.map(lambda *leaves: jnp.stack(leaves), *inputs)
            self._short[generations] = (fast_jit(run), fast_jit(jax.vmap(run))(*stacked))
        return self._short[generations]


@pytest.fixture(scope="module", params=list(ARCHIVE), ids=list(ARCHIVE))
def archive_run(request) -> ArchiveRun:
    """Batch entries: 0-3 seeds 0-3 with default params; 4: seed 0 with the ``hyper`` field changed;
    5: seed 1 with poisoned fitness (:func:`tests.es.archive_contract.objective`)."""
    case = ARCHIVE[request.param]
    es = case.make_es()
    run = make_run(es, case.gens, case.shift)

    def entry_inputs(i):
        params = es.default_params()
        if i == 4:
            field, value = case.hyper
            params = params.replace(**{field: jnp.asarray(value, jnp.float32)})
        return jax.random.key(SEEDS[i]), params, jnp.asarray(POISON[i])

    inputs = [entry_inputs(i) for i in range(len(SEEDS))]
    stacked = jax.tree.map(lambda *leaves: jnp.stack(leaves), *inputs)
    batch = fast_jit(jax.vmap(run))(*stacked)
    return ArchiveRun(case, fast_jit(run), entry_inputs, batch, es)


def test_solves_shifted_sphere(archive_run):
    state, (best, _) = archive_run.batch
    best = np.asarray(best[:4])
    assert np.all(best[:, -1] < archive_run.case.tol), best[:, -1]
    assert np.all(np.diff(best, axis=1) <= 0)  # best-so-far is monotone
    assert np.all(best[:, -1] < best[:, 0])  # and the search improved on its first generation


@pytest.mark.parametrize("entry", [0, 4, 5], ids=["seed", "hyperparameter", "poisoned"])
@pytest.mark.parametrize(
    "archive_run",
    [
        pytest.param(name, marks=[pytest.mark.fusion_emitters] * case.vmap_needs_fusion_emitters)
        for name, case in ARCHIVE.items()
    ],
    ids=list(ARCHIVE),
    indirect=True,
)
def test_vmap_equals_separate_runs_bitwise(archive_run, entry):
    case, inputs = archive_run.case, archive_run.entry_inputs(entry)
    single = archive_run.run_one(*inputs)
    if case.gpu_vmap_horizon is not None and not bit_exact_platform():
        # rank-chaotic strategies off CPU (see GPU_VMAP_HORIZON): the separate run solves the sphere
        # like the batched entries, and the two agree over the first generations
        if entry == 0:
            assert float(single[1][0][-1]) < case.tol
        run_short, batch = archive_run.short(case.gpu_vmap_horizon)
        single = run_short(*inputs)
    else:
        batch = archive_run.batch
    batched = jax.tree.map(lambda leaf: leaf[entry], batch)
    for a, b in zip(jax.tree.leaves(single), jax.tree.leaves(batched), strict=True):
        assert_equal_on_cpu_close_on_gpu(b, a)  # bitwise on CPU


def test_nan_fitness_never_enters_state(archive_run):
    state, (best, valid_min) = jax.tree.map(lambda leaf: leaf[5], archive_run.batch)
    for leaf in jax.tree.leaves(state):
        if jnp.issubdtype(leaf.dtype, jnp.floating):
            assert not np.isnan(np.asarray(leaf)).any()
    valid_min = np.asarray(valid_min)
    assert np.isinf(valid_min).any()  # some generations were entirely invalid
    np.testing.assert_array_equal(np.asarray(best), np.minimum.accumulate(valid_min))
    assert np.isfinite(np.asarray(best)[-1])


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=() if case.long_run_in_default_suite else pytest.mark.slow)
        for name, case in ARCHIVE.items()
    ],
)
def test_long_float32_run_stays_finite(name):
    case = ARCHIVE[name]
    es30 = case.make_es(num_dims=30)
    state, (best, _) = fast_jit(make_run(es30, 3000, case.shift))(
        jax.random.key(7), es30.default_params(), jnp.asarray(False)
    )
    for leaf in jax.tree.leaves(state):
        assert np.all(np.isfinite(np.asarray(leaf)))
    assert float(best[-1]) < float(best[0])


# --------------------------------------------------------------------------------------------------
# GRADIENT: gradient-estimating and natural evolution strategies
# --------------------------------------------------------------------------------------------------
X0 = fdg.X0  # 3 * ones(10)
X30 = jnp.full(30, 1.0)  # the start of the 3,000-generation runs


def shrinking(v: float, rate: float = 0.98) -> optax.Schedule:
    """``v`` decaying by ``1 - rate`` per generation, without a floor."""
    return optax.exponential_decay(v, 1, rate)


def shrinking_adam(rate: float = 0.98) -> dict:
    """Adam from 0.05 and sigma from 0.3, both shrinking by ``1 - rate`` per generation (the long runs:
    sigma ends near 1e-27, where sigma^2 underflows in float32)."""
    return dict(optimizer=optax.adam(shrinking(0.05, rate)), sigma_schedule=shrinking(0.3, rate))


@dataclasses.dataclass(frozen=True)
class GradientCase:
    """One row. ``sphere`` builds the strategy of the 1000-generation sphere check (``f(mean) <
    sphere_tol``); ``long_run`` the one of the 3,000-generation float32 check on ``X30``
    (``f(mean) < long_tol``); ``vmap`` the one of the vmap check over the params ``overrides``
    (``None``: the sphere strategy and its compiled runner). ``after_sphere`` / ``after_long``: extra
    checks ``(es, state, metrics)`` of the strategy's own."""

    sphere: Callable[[], Any]
    long_run: Callable[[], Any]
    overrides: dict[str, list[float]]
    vmap: Callable[[], Any] | None = None
    sphere_tol: float = 1e-6
    long_tol: float = 1e-3
    vmap_in_default_suite: bool = False
    long_run_in_default_suite: bool = False
    after_sphere: Callable[[Any, Any, Any], None] | None = None
    after_long: Callable[[Any, Any, Any], None] | None = None


def _samples_near_sigma(es, state, metrics):
    # OpenES' samples sit at distance ~sigma * sqrt(d) from the mean
    assert float(metrics["best_fitness"]) < 0.3**2 * 10


def _sigma_underflowed(es, state, metrics):
    assert float(es.sigma(state, es.default_params())) < 1e-25


def _open_es(**kwargs):
    return lambda: OpenES(40, X0, optimizer=optax.adam(fdg.decay(0.1)), sigma_init=0.3, **kwargs)


GRADIENT = {
    # constant sigma 0.3, Adam with a decaying step
    "OpenES": GradientCase(
        sphere=_open_es(),
        long_run=lambda: OpenES(32, X30, **shrinking_adam()),
        overrides={"sigma_init": [0.1, 0.3, 0.05]},
        vmap_in_default_suite=True,
        long_run_in_default_suite=True,
        after_sphere=_samples_near_sigma,
        after_long=_sigma_underflowed,
    ),
    # regenerated noise: the rebuilt perturbations are rounded as the rows were (``sigma z`` below the
    # mean's resolution gives 0, not the ~1/sigma of ``2 sigma z / 2 sigma``), so Adam's moments stay
    # finite as sigma goes to ~1e-27
    "OpenES-regenerated-noise": GradientCase(
        sphere=_open_es(regenerate_noise=True),
        long_run=lambda: OpenES(32, X30, regenerate_noise=True, **shrinking_adam()),
        overrides={"sigma_init": [0.1, 0.3, 0.05]},
        vmap_in_default_suite=True,
        long_run_in_default_suite=True,
    ),
    # Adam and sigma decaying 1%/generation, b/N = 0.5
    "ARS": GradientCase(
        sphere=lambda: ARS(40, X0, elite_ratio=0.5, **fdg.decaying_adam()),
        long_run=lambda: ARS(32, X30, elite_ratio=0.5, **shrinking_adam()),
        vmap=lambda: ARS(20, X0, optimizer=optax.adam(0.05), elite_ratio=0.5),
        overrides={"sigma_init": [0.3, 0.1, 0.5]},
    ),
    # ClipUp with a decaying step
    "PGPE": GradientCase(
        sphere=lambda: PGPE(40, X0, optimizer=clipup(fdg.decay(0.3)), sigma_init=1.0),
        long_run=lambda: PGPE(32, X30, optimizer=clipup(shrinking(0.1)), sigma_init=0.3),
        overrides={"sigma_init": [1.0, 0.3, 0.1], "sigma_learning_rate": [0.1, 0.2, 0.05]},
    ),
    # 41 = the mean + 20 pairs; Adam and sigma decaying 1%/generation; centered ranks, which include
    # the baseline row (test_esmc runs the vmap check with z-scores too)
    "ESMC": GradientCase(
        sphere=lambda: ESMC(41, X0, fitness_shaping=centered_ranks, **fdg.decaying_adam()),
        long_run=lambda: ESMC(33, X30, fitness_shaping=z_score, **shrinking_adam()),
        vmap=lambda: ESMC(21, X0, optimizer=optax.adam(0.05), fitness_shaping=centered_ranks),
        overrides={"sigma_init": [0.3, 0.1, 0.5]},
    ),
    # k=1, Adam and sigma decaying 1%/generation, centered ranks
    "GuidedES": GradientCase(
        sphere=lambda: GuidedES(40, X0, fitness_shaping=centered_ranks, **fdg.decaying_adam()),
        long_run=lambda: GuidedES(32, X30, fitness_shaping=centered_ranks, **shrinking_adam(0.99)),
        vmap=lambda: GuidedES(20, X0, optimizer=optax.adam(0.05), fitness_shaping=centered_ranks),
        overrides={"sigma_init": [0.3, 0.1, 0.5], "alpha": [0.5, 0.2, 0.9]},
    ),
    # k=5, Adam and sigma decaying 1%/generation, centered ranks (with z-scores the finite stand-in
    # for a NaN member, max + 1, dominates the weights near the optimum)
    "ASEBO": GradientCase(
        sphere=lambda: ASEBO(
            40,
            X0,
            subspace_dims=5,
            min_subspace_dims=2,
            fitness_shaping=centered_ranks,
            **fdg.decaying_adam(),
        ),
        long_run=lambda: ASEBO(32, X30, subspace_dims=10, min_subspace_dims=2, **shrinking_adam()),
        vmap=lambda: ASEBO(20, X0, subspace_dims=3, min_subspace_dims=1, optimizer=optax.adam(0.05)),
        overrides={"sigma_init": [0.3, 0.1, 0.5], "threshold": [0.995, 0.9, 0.5]},
    ),
    # T=100, K=10; Adam and sigma decaying 1%/generation, centered ranks
    "PersistentES": GradientCase(
        sphere=lambda: PersistentES(40, X0, fitness_shaping=centered_ranks, **fdg.decaying_adam()),
        long_run=lambda: PersistentES(32, X30, fitness_shaping=centered_ranks, **shrinking_adam(0.99)),
        vmap=lambda: PersistentES(
            20, X0, optimizer=optax.adam(0.05), fitness_shaping=centered_ranks, T=20, K=5
        ),
        overrides={"sigma_init": [0.3, 0.1, 0.5]},
    ),
    "NoiseReuseES": GradientCase(
        sphere=lambda: NoiseReuseES(40, X0, fitness_shaping=centered_ranks, **fdg.decaying_adam()),
        long_run=lambda: NoiseReuseES(32, X30, fitness_shaping=centered_ranks, **shrinking_adam()),
        vmap=lambda: NoiseReuseES(
            20, X0, optimizer=optax.adam(0.05), fitness_shaping=centered_ranks, T=20, K=5
        ),
        overrides={"sigma_init": [0.3, 0.1, 0.5]},
    ),
    # all defaults (lambda = 10); in 30-d the default rates are still converging (f ~ 1e-5) at 3000
    # generations
    "XNES": GradientCase(
        sphere=lambda: XNES(None, X0),
        long_run=lambda: XNES(None, X30),
        overrides={"sigma_init": [1.0, 0.5, 2.0], "eta_mean": [1.0, 0.5, 0.8]},
        sphere_tol=1e-8,
    ),
    # all defaults (lambda = 10)
    "SNES": GradientCase(
        sphere=lambda: SNES(None, X0),
        long_run=lambda: SNES(None, X30),
        overrides={"sigma_init": [1.0, 0.5, 2.0], "eta_sigma": [0.3, 0.5, 0.1]},
        sphere_tol=1e-10,
        long_tol=1e-10,
    ),
    # all defaults (lambda = 10)
    "CRFMNES": GradientCase(
        sphere=lambda: CRFMNES(None, X0),
        long_run=lambda: CRFMNES(None, X30),
        overrides={"sigma_init": [1.0, 0.5, 2.0], "c_sigma": [0.2, 0.3, 0.1]},
        sphere_tol=1e-12,
        long_tol=1e-10,
    ),
}


def _suite(names: list[str], in_default_suite: Callable[[GradientCase], bool]) -> list[Any]:
    return [
        pytest.param(name, marks=() if in_default_suite(GRADIENT[name]) else pytest.mark.slow)
        for name in names
    ]


@pytest.fixture(scope="module")
def sphere_runners() -> dict[str, tuple[Any, Any]]:
    """``{name: (es, runner)}`` of the sphere strategies, built once: the vmap check of a row without
    its own strategy reuses the compiled runner."""
    return {}


def _sphere_runner(runners: dict, name: str) -> tuple[Any, Any]:
    if name not in runners:
        es = GRADIENT[name].sphere()
        runners[name] = (es, make_runner(es, nonfinite=True))
    return runners[name]


@pytest.mark.parametrize("name", list(GRADIENT))
def test_solves_10d_sphere_despite_nonfinite_fitness(name, sphere_runners):
    """``f(mean) < sphere_tol`` after 1000 generations, two NaN/inf members per generation."""
    case = GRADIENT[name]
    es, run = _sphere_runner(sphere_runners, name)
    state, metrics = fdg.check_solves_sphere_despite_nonfinite(
        es, generations=1000, tol=case.sphere_tol, run=run
    )
    if case.after_sphere is not None:
        case.after_sphere(es, state, metrics)


@pytest.mark.parametrize("name", _suite(list(GRADIENT), lambda case: case.long_run_in_default_suite))
def test_float32_3000_generations_past_convergence_stay_finite(name):
    case = GRADIENT[name]
    es = case.long_run()
    state, metrics = fdg.check_float32_long_run_stays_finite(es, generations=3000, tol=case.long_tol)
    if case.after_long is not None:
        case.after_long(es, state, metrics)


@pytest.mark.parametrize("name", _suite(list(GRADIENT), lambda case: case.vmap_in_default_suite))
def test_vmap_over_seeds_and_hyperparameters_equals_separate_runs(name, sphere_runners):
    """Bit for bit after 25 generations, under the suite's XLA flags and XLA's defaults alike
    (``EVOTENSOR_TEST_DEFAULT_XLA=1``): see evotensor.core.numerics for what that takes."""
    case = GRADIENT[name]
    if case.vmap is None:
        es, run = _sphere_runner(sphere_runners, name)
        fdg.check_vmap_over_seeds_and_params(es, generations=25, run=run, **case.overrides)
    else:
        fdg.check_vmap_over_seeds_and_params(case.vmap(), generations=25, **case.overrides)


# --------------------------------------------------------------------------------------------------
# MEAN_SIGMA: mean-and-step-size strategies
# --------------------------------------------------------------------------------------------------
MEAN_SIGMA = {"MAES": MAES, "LMMAES": LMMAES, "RmES": RmES, "SepCMAES": SepCMAES}


@pytest.mark.parametrize("name", list(MEAN_SIGMA))
def test_solves_10d_sphere(name):
    """Documented tolerance: best f < 1e-12 on the 10-d sphere from mean 3 within 400 generations."""
    es = MEAN_SIGMA[name](num_dims=10, sigma_init=1.0, mean_init=np.full(10, 3.0))
    _, best = make_scan_run(es, sphere, 400)(jax.random.key(0), es.default_params())
    assert float(best[-1]) < 1e-12


@pytest.mark.slow  # ~3 s each; CMAES keeps its 3000-generation check in the default tier
@pytest.mark.parametrize("name", list(MEAN_SIGMA))
def test_3000_generations_stay_finite_float32(name):
    es = MEAN_SIGMA[name](num_dims=30, mean_init=np.full(30, 3.0))
    state, best = make_scan_run(es, sphere, 3000)(jax.random.key(1), es.default_params())
    assert state.mean.dtype == jnp.float32
    assert all(bool(jnp.all(jnp.isfinite(leaf))) for leaf in jax.tree_util.tree_leaves(state))
    assert float(best[-1]) < 1e-20


@pytest.mark.parametrize("name", list(MEAN_SIGMA))
def test_nonfinite_fitness_is_ranked_last(name):
    es = MEAN_SIGMA[name](num_dims=4)
    params = es.default_params()
    state = es.init(jax.random.key(0), params)
    x, state = jax.jit(es.ask)(jax.random.key(1), state, params)
    f = sphere(x)
    s1, _ = jax.jit(es.tell)(jax.random.key(2), state, x, f.at[2].set(jnp.nan), params)
    s2, _ = jax.jit(es.tell)(jax.random.key(2), state, x, f.at[2].set(1e30), params)
    for a, b in zip(jax.tree_util.tree_leaves(s1), jax.tree_util.tree_leaves(s2)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", list(MEAN_SIGMA))
def test_bad_arguments(name):
    with pytest.raises(ValueError, match="sigma_init"):
        MEAN_SIGMA[name](num_dims=3, sigma_init=0.0)
    with pytest.raises(ValueError, match="sigma_init"):
        MEAN_SIGMA[name](num_dims=3, sigma_init=-1.0)
    with pytest.raises(ValueError, match="mean_init"):
        MEAN_SIGMA[name](num_dims=3, mean_init=np.zeros(2))


@pytest.mark.parametrize("name", list(MEAN_SIGMA))
def test_vmap_over_seeds_and_sigma_init_is_bit_identical(name):
    es = MEAN_SIGMA[name](num_dims=8, mean_init=np.full(8, 2.0))
    check_vmap_over_seeds_and_sigma_init(es, generations=15)
