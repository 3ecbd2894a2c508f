"""The ES family's tasks (``evotensor list`` shows them; the registry finds this module).

Classic functions: ``es-sphere``, ``es-rastrigin``, ``es-rosenbrock``, ``es-ackley`` (an ES on a
classic function; the initial mean is drawn uniformly from the function's conventional box with the
run's seed, the initial step size is ``sigma_frac`` times the box width: CMA-ES practice, about a
third).

BBOB and neuroevolution: ``es-bbob``, ``es-bbob-noisy``, ``es-cartpole``, ``es-brax-ant``,
``es-digits``.
* ``es-bbob`` — CMA-ES on one BBOB function instance (default f15, rotated Rastrigin, 10-d). The
  initial mean is uniform in ``[-4, 4]^D`` from the run's seed; sigma is 2 (a fifth of the
  ``[-5, 5]`` box, pycma's usual advice for BBOB).
* ``es-bbob-noisy`` — the same CMA-ES on a function of the noisy testbed f101-f130 (default f101,
  sphere with moderate Gaussian noise, 10-d); the report gives the *noiseless* gaps of the final
  mean and of the best individual, since recorded fitnesses are noisy draws.
* ``es-cartpole`` — OpenAI-ES evolving a ``4-16-2`` tanh MLP on gymnax CartPole-v1 (mean return
  over 4 episodes; 500 is the maximum).
* ``es-brax-ant`` — OpenAI-ES evolving a ``27-32-32-8`` tanh MLP on brax Ant (1000 steps). Needs
  brax; slow on CPU, meant for a GPU.
* ``es-digits`` — OpenAI-ES evolving a ``64-32-10`` MLP on scikit-learn's digits, maximizing
  minus the cross-entropy of 256-example minibatches.
* ``es-ray-cartpole`` — OpenAI-ES evolving a ``4-16-2`` MLP on gymnasium's CartPole-v1, a NumPy
  simulator JAX cannot compile, evaluated by a pool of Ray actors (a local cluster starts by
  itself; ``address`` joins one) between the compiled ask and tell (mean return over 2 episodes).
  ``es-ray-hopper`` — the same on MuJoCo's Hopper-v5 (``11-32-32-3``; needs ``gymnasium[mujoco]``).

For the neuroevolution tasks the strategy's ``solution`` is the network's parameter pytree, the
decoder is a :class:`~evotensor.problems.networks.ParamsDecoder` (identity decode), and the
network is initialised from the run's seed.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import optax

from evotensor.problems.bbob import BBOB, BBOB_NAMES
from evotensor.problems.bbob_noisy import BBOBNoisy
from evotensor.problems.classic import ClassicFunction
from evotensor.problems.networks import ParamsDecoder, init_mlp, mlp_apply
from evotensor.tasks import (
    Task,
    hidden_sizes_option,
    positive_float_option,
    positive_int_option,
    register_task,
)

_STRATEGIES = ("cma_es", "simple_es")


def build_classic(name: str, cfg: dict[str, Any], default_generations: int) -> Task:
    """Build an ES task on the classic function ``name`` from a task config."""
    from evotensor import es

    dims = positive_int_option(cfg, "dims")
    problem = ClassicFunction(name, dims)
    low, high = problem.bounds
    rng = np.random.default_rng(cfg["seed"])
    mean_init = rng.uniform(low, high, size=dims).astype(np.float32)
    sigma = float(cfg["sigma_frac"]) * (high - low)
    if not sigma > 0:
        raise ValueError(f"option sigma_frac must be > 0, got {cfg['sigma_frac']!r}")
    strategy_name = cfg["strategy"]
    if strategy_name == "cma_es":
        strategy = es.CMAES(cfg["pop"], num_dims=dims, sigma_init=sigma, mean_init=mean_init)
    elif strategy_name == "simple_es":
        strategy = es.SimpleES(cfg["pop"] or 4 * dims, num_dims=dims, sigma_init=sigma, mean_init=mean_init)
    else:
        raise ValueError(f"option strategy must be one of {', '.join(_STRATEGIES)}, got {strategy_name!r}")
    return Task(strategy=strategy, problem=problem, generations=cfg["generations"] or default_generations)


def _register(name: str, dims: int, pop: int | None, generations: int, description: str) -> None:
    defaults = {"dims": dims, "strategy": "cma_es", "sigma_frac": 0.3, "pop": pop}

    @register_task(f"es-{name}", description, defaults=defaults)
    def _build(cfg: dict[str, Any]) -> Task:
        return build_classic(name, cfg, generations)


_register("sphere", 10, None, 300, "CMA-ES on the 10-d sphere (smoke test: reaches ~1e-12)")
_register("rastrigin", 30, 200, 1200, "CMA-ES, pop 200, on 30-d Rastrigin")
_register("rosenbrock", 10, None, 2000, "CMA-ES on 10-d Rosenbrock")
_register("ackley", 10, None, 600, "CMA-ES on 10-d Ackley")


# ---- BBOB and neuroevolution ---------------------------------------------------------------------

NEURO_STRATEGIES = ("open_es", "simple_es", "cma_es", "snes")


def _maybe_int(value: Any) -> Any:
    return int(value) if isinstance(value, str) and value.isdigit() else value


def neuro_strategy(cfg: dict[str, Any], solution: Any, default_pop: int) -> Any:
    """The ES of a neuroevolution task: ``cfg["strategy"]`` over the parameter pytree ``solution``.

    ``cfg["pop"]`` None means ``default_pop`` for OpenES / SimpleES and the literature default
    ``4 + floor(3 ln n)`` for CMA-ES and SNES.
    """
    from evotensor import es

    name = cfg["strategy"]
    pop = default_pop if cfg["pop"] is None else cfg["pop"]
    sigma = positive_float_option(cfg, "sigma")
    if name == "open_es":
        lr = positive_float_option(cfg, "lr")
        return es.OpenES(pop, solution=solution, optimizer=optax.adam(lr), sigma_init=sigma)
    if name == "simple_es":
        return es.SimpleES(pop, solution=solution, sigma_init=sigma)
    if name == "cma_es":
        return es.CMAES(cfg["pop"], solution=solution, sigma_init=sigma)
    if name == "snes":
        return es.SNES(cfg["pop"], solution=solution, sigma_init=sigma)
    raise ValueError(f"option strategy must be one of {', '.join(NEURO_STRATEGIES)}, got {name!r}")


def _policy(cfg: dict[str, Any], sizes_in: int, sizes_out: int) -> Any:
    return init_mlp(jax.random.key(cfg["seed"]), (sizes_in, *hidden_sizes_option(cfg), sizes_out))


# -- es-bbob ---------------------------------------------------------------------------------------
def _bbob_cma_es(cfg: dict[str, Any], num_dims: int) -> Any:
    """CMA-ES of the BBOB tasks: mean uniform in ``[-4, 4]^D`` from the run's seed, sigma ``cfg["sigma"]``."""
    from evotensor import es

    mean_init = np.random.default_rng(cfg["seed"]).uniform(-4.0, 4.0, size=num_dims).astype(np.float32)
    return es.CMAES(
        cfg["pop"], num_dims=num_dims, sigma_init=positive_float_option(cfg, "sigma"), mean_init=mean_init
    )


@register_task(
    "es-bbob",
    "CMA-ES on a BBOB function instance (default f15 rotated Rastrigin, 10-d)",
    defaults={"function": "rastrigin", "dims": 10, "instance": 1, "noise": None, "sigma": 2.0},
)
def build_bbob(cfg: dict[str, Any]) -> Task:
    # Values may arrive as strings from the command line.
    function, dims, instance = (_maybe_int(cfg[name]) for name in ("function", "dims", "instance"))
    problem = BBOB(function, dims, instance=instance, noise=cfg["noise"])
    strategy = _bbob_cma_es(cfg, problem.num_dims)

    def report(result: Any, run_dir: Any) -> str:
        gap = float(result.best_fitness) - float(problem.f_opt)
        return f"BBOB f{problem.fn_id} ({BBOB_NAMES[problem.fn_id - 1]}): f - f_opt = {gap:.3e}"

    return Task(strategy=strategy, problem=problem, generations=cfg["generations"] or 400, report=report)


# -- es-bbob-noisy ---------------------------------------------------------------------------------
@register_task(
    "es-bbob-noisy",
    "CMA-ES on a noisy BBOB function f101-f130 (default f101 sphere, moderate Gaussian noise, 10-d)",
    defaults={"function": 101, "dims": 10, "instance": 1, "sigma": 2.0},
)
def build_bbob_noisy(cfg: dict[str, Any]) -> Task:
    function, dims, instance = (_maybe_int(cfg[name]) for name in ("function", "dims", "instance"))
    problem = BBOBNoisy(function, dims, instance=instance)
    strategy = _bbob_cma_es(cfg, problem.num_dims)

    def report(result: Any, run_dir: Any) -> str:
        # Recorded fitnesses are noisy draws (the best one is biased low): judge the final mean and
        # the best individual by their noiseless values instead.
        f_opt = float(problem.f_opt)
        at_mean = float(problem(np.asarray(result.state.mean, np.float32))) - f_opt
        at_best = float(problem(np.asarray(result.best_genotype, np.float32))) - f_opt
        return (
            f"BBOB f{problem.fn_id} ({problem.name}, {problem.noise}): noiseless f - f_opt = "
            f"{at_mean:.3e} at the final mean, {at_best:.3e} at the best individual"
        )

    return Task(strategy=strategy, problem=problem, generations=cfg["generations"] or 400, report=report)


# -- es-cartpole -----------------------------------------------------------------------------------
@register_task(
    "es-cartpole",
    "OpenAI-ES evolving a 4-16-2 MLP on gymnax CartPole-v1 (max return 500)",
    defaults={"strategy": "open_es", "hidden": 16, "episodes": 4, "max_steps": 500, "sigma": 0.1, "lr": 0.05},
)
def build_cartpole(cfg: dict[str, Any]) -> Task:
    from evotensor.problems.control import GymnaxProblem

    problem = GymnaxProblem(
        "CartPole-v1",
        num_episodes=positive_int_option(cfg, "episodes"),
        max_steps=positive_int_option(cfg, "max_steps"),
    )
    params = _policy(cfg, problem.observation_size, problem.output_size)
    strategy = neuro_strategy(cfg, params, default_pop=64)
    decoder = ParamsDecoder(mlp_apply)
    return Task(strategy=strategy, problem=problem, decoder=decoder, generations=cfg["generations"] or 50)


# -- es-brax-ant -----------------------------------------------------------------------------------
@register_task(
    "es-brax-ant",
    "OpenAI-ES evolving a 27-32-32-8 MLP on brax Ant, 1000 steps (needs brax; use a GPU)",
    defaults={
        "strategy": "open_es",
        "hidden": "32,32",
        "episodes": 1,
        "episode_length": 1000,
        "backend": None,
        "sigma": 0.05,
        "lr": 0.02,
    },
)
def build_brax_ant(cfg: dict[str, Any]) -> Task:
    from evotensor.problems.control import BraxProblem

    problem = BraxProblem(
        "ant",
        episode_length=positive_int_option(cfg, "episode_length"),
        num_episodes=positive_int_option(cfg, "episodes"),
        backend=cfg["backend"],
    )
    params = _policy(cfg, problem.observation_size, problem.output_size)
    strategy = neuro_strategy(cfg, params, default_pop=256)
    decoder = ParamsDecoder(mlp_apply)
    return Task(strategy=strategy, problem=problem, decoder=decoder, generations=cfg["generations"] or 500)


# -- es-digits -------------------------------------------------------------------------------------
@register_task(
    "es-digits",
    "OpenAI-ES evolving a 64-32-10 MLP on scikit-learn digits (maximize minus cross-entropy)",
    defaults={"strategy": "open_es", "hidden": 32, "batch_size": 256, "sigma": 0.05, "lr": 0.03},
)
def build_digits(cfg: dict[str, Any]) -> Task:
    from evotensor.problems.classification import DigitsClassification

    problem = DigitsClassification(
        metric="neg_cross_entropy", batch_size=positive_int_option(cfg, "batch_size"), seed=cfg["seed"]
    )
    params = _policy(cfg, 64, problem.output_size)
    strategy = neuro_strategy(cfg, params, default_pop=128)
    decoder = ParamsDecoder(mlp_apply)

    def report(result: Any, run_dir: Any) -> str:
        best = jax.tree.map(lambda a: a[None], result.best_genotype)
        test = problem.test_evaluate(best, decoder.apply)
        return f"held-out accuracy of the best network: {float(test.info['accuracy'][0]):.3f}"

    generations = cfg["generations"] or 300
    return Task(strategy=strategy, problem=problem, decoder=decoder, generations=generations, report=report)


# -- es-ray-cartpole, es-ray-hopper ----------------------------------------------------------------
_RAY_OPTIONS = {"strategy": "open_es", "actors": None, "address": None}


def build_ray_gymnasium(cfg: dict[str, Any], default_generations: int) -> Task:
    """A gymnasium environment stepped in NumPy on Ray actors (a fitness JAX cannot compile):
    ``evotensor.run``'s host path calls the :class:`~evotensor.distributed.ray_evaluator.RayEvaluator`
    between the compiled ask and tell. ``env`` may name any gymnasium environment with a Box
    observation space; ``actors`` defaults to one per CPU; ``address`` joins a running cluster."""
    from evotensor.distributed.ray_evaluator import Batched, RayEvaluator
    from evotensor.problems.gymnasium_control import GymnasiumPolicy

    policy = GymnasiumPolicy(
        str(cfg["env"]), hidden_sizes_option(cfg), episodes=positive_int_option(cfg, "episodes")
    )
    strategy = neuro_strategy(cfg, policy.init_params(jax.random.key(cfg["seed"])), default_pop=64)
    actors = None if cfg["actors"] is None else positive_int_option(cfg, "actors")
    if cfg["address"] is not None and not isinstance(cfg["address"], str):
        raise ValueError(f"option address must be a Ray address such as 'auto', got {cfg['address']!r}")
    problem = RayEvaluator(Batched(policy.batch), num_actors=actors, address=cfg["address"], maximize=True)

    def report(result: Any, run_dir: Any) -> str:
        problem.close()  # the actors (and a local cluster this run started) are no longer needed
        best = jax.tree_util.tree_map(lambda a: np.asarray(a)[None], result.best_genotype)
        tenfold = jax.tree_util.tree_map(lambda a: np.repeat(a, 10, axis=0), best)
        returns = policy.batch(tenfold, np.arange(10))  # seeds 0..9: episodes training did not see
        return f"best policy on 10 new episodes of {policy.env_id}: mean return {float(np.mean(returns)):.1f}"

    generations = cfg["generations"] or default_generations
    return Task(strategy=strategy, problem=problem, generations=generations, report=report)


@register_task(
    "es-ray-cartpole",
    "OpenAI-ES evolving a 4-16-2 MLP on gymnasium CartPole-v1 (NumPy, not JAX) on Ray actors (max 500)",
    defaults={**_RAY_OPTIONS, "env": "CartPole-v1", "hidden": 16, "episodes": 2, "sigma": 0.1, "lr": 0.05},
)
def build_ray_cartpole(cfg: dict[str, Any]) -> Task:
    return build_ray_gymnasium(cfg, 40)


@register_task(
    "es-ray-hopper",
    "OpenAI-ES evolving an 11-32-32-3 MLP on MuJoCo Hopper-v5 (gymnasium[mujoco]) on Ray actors",
    defaults={
        **_RAY_OPTIONS,
        "env": "Hopper-v5",
        "hidden": "32,32",
        "episodes": 1,
        "sigma": 0.05,
        "lr": 0.02,
    },
)
def build_ray_hopper(cfg: dict[str, Any]) -> Task:
    return build_ray_gymnasium(cfg, 200)
