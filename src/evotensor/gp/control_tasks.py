"""GP control tasks: ``gp-cartpole``, ``gp-hopper`` and ``gp-control`` (any gymnax or brax env).

Multi-output trees as policies (:mod:`evotensor.gp.control`): ``n_vars`` = the observation size,
one output per action (discrete: ``argmax``) or per action dimension (continuous: ``tanh``),
function set ``+ - * /`` with protected division (EvoGP's control setup), fitness the mean episode
return. The report prints the best return, the best policy's mean return on fresh test episodes,
its expression for every output (simplified, faithful to the evaluation) and its size.

* ``gp-cartpole`` — gymnax CartPole-v1 (4 observations, 2 actions; return at most 500), pop 256 x 20
  generations, 4 episodes per policy: about a minute on a 2-core CPU.
* ``gp-hopper`` — brax Hopper (11 observations, 3 action dimensions), pop 64 x 5 generations of
  200-step episodes: a smoke-sized default for a CPU (compiling brax's physics takes most of it);
  scale up on a GPU with ``--pop 1024 --generations 100 --set episode_length=1000``.
* ``gp-control`` — ``--set env=NAME``: a gymnax id (``Acrobot-v1``, ``Pendulum-v1``,
  ``MountainCarContinuous-v0``, ``CartPole-v1``, ...) or a brax env (``halfcheetah``, ``hopper``,
  ``walker2d``, ...), pop 256 x 20 generations.

Options (``--set KEY=VALUE``) besides ``pop``/``generations``/``seed``: ``episodes`` (per policy
and generation; 4 on gymnax, 1 on brax), ``max_steps`` (gymnax) / ``episode_length`` (brax),
``max_len`` (64), ``max_depth`` (initial trees' depth, 4), ``tournament_size`` (7), ``elite_rate``
(0.01), ``test_episodes`` (fresh episodes the report runs the best policy on; 20 on gymnax, 0 on
brax), ``evaluator`` (``auto``, ``tree`` or ``forest``, see :class:`evotensor.gp.control.TreePolicy`),
``brax_backend`` (brax's physics pipeline; default the environment's).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np

from evotensor.core.checks import ArgumentError
from evotensor.gp.control import EVALUATORS, TreePolicy, gp_for_control, policy_expressions
from evotensor.gp.encoding import Forest
from evotensor.tasks import Task, positive_float_option, positive_int_option, register_task

# episodes / test_episodes: None = 4 / 20 on a gymnax env, 1 / 0 on a brax env (slow on a CPU)
_COMMON = {
    "episodes": None,
    "max_len": 64,
    "max_depth": 4,
    "tournament_size": 7,
    "elite_rate": 0.01,
    "test_episodes": None,
    "evaluator": "auto",
}
_GYMNAX = {**_COMMON, "max_steps": None}
_BRAX = {**_COMMON, "episode_length": 200, "brax_backend": None}


def _non_negative_int(cfg: dict[str, Any], name: str) -> int:
    value = cfg[name]
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"option {name} must be an int >= 0, got {value!r}")
    return value


def _elite_rate(cfg: dict[str, Any]) -> float:
    value = cfg["elite_rate"]
    if value == 0:
        return 0.0
    rate = positive_float_option(cfg, "elite_rate")
    if rate >= 1:
        raise ValueError(f"option elite_rate must be in [0, 1), got {value!r}")
    return rate


def _gymnax_problem(env: str, cfg: dict[str, Any], episodes: int) -> Any:
    from evotensor.problems.control import GymnaxProblem

    max_steps = None if cfg.get("max_steps") is None else positive_int_option(cfg, "max_steps")
    return GymnaxProblem(env, num_episodes=episodes, max_steps=max_steps)


def _brax_problem(env: str, cfg: dict[str, Any], episodes: int) -> Any:
    from evotensor.problems.control import BraxProblem

    return BraxProblem(
        env,
        episode_length=positive_int_option(cfg, "episode_length"),
        num_episodes=episodes,
        backend=cfg.get("brax_backend"),
    )


def _is_gymnax(env: str) -> bool:
    import gymnax

    return env in gymnax.registered_envs


def _test_returns(make_problem: Any, tree: Forest, policy: TreePolicy, episodes: int, seed: int) -> Any:
    """The returns ``[episodes]`` of ``tree`` on fresh episodes: the tree repeated ``episodes`` times
    on a one-episode problem, so each copy gets its own reset key (keys no training run used)."""
    problem = make_problem(1)
    copies = jax.tree_util.tree_map(lambda a: np.repeat(np.asarray(a)[None], episodes, axis=0), tree)
    key = jax.random.fold_in(jax.random.key(seed), 0x7E57)
    evaluate = jax.jit(lambda k, f: problem.evaluate(k, policy.decode(f), policy.apply))
    return np.asarray(evaluate(key, copies).fitness)


class _Expressions:
    """:func:`~evotensor.gp.control.policy_expressions` of a tree, computed once (the report and
    ``best.txt`` both print the best tree; sympy's simplification takes a while)."""

    def __init__(self, policy: TreePolicy):
        self.policy, self.cache = policy, {}

    def __call__(self, tree: Forest) -> list[str]:
        key = tuple(np.asarray(getattr(tree, f)).tobytes() for f in ("opcode", "value", "size", "output"))
        if key not in self.cache:
            self.cache[key] = policy_expressions(tree, self.policy)
        return self.cache[key]


def _report(
    problem: Any, policy: TreePolicy, expressions: _Expressions, make_problem: Any, cfg: dict, tests: int
):
    def report(result: Any, run_dir: Path | None) -> str:
        best: Forest = result.best_genotype
        lines = [f"best return: {result.best_fitness:.6g} (mean of {problem.num_episodes} episode(s))"]
        if tests:
            returns = _test_returns(make_problem, best, policy, tests, int(cfg["seed"]))
            lines.append(
                f"test return over {tests} fresh episodes: mean {returns.mean():.6g}, "
                f"min {returns.min():.6g}, max {returns.max():.6g}"
            )
        how = "action = argmax(out)" if getattr(problem, "discrete", False) else "action = tanh(out)"
        lines.append(f"policy ({how}; x0..x{policy.n_vars - 1}: the observation):")
        lines += [f"  out[{k}] = {e}" for k, e in enumerate(expressions(best))]
        sizes = np.asarray(result.state.forest.length)
        lines.append(
            f"tree: {int(best.length)} nodes (max_len {best.opcode.shape[-1]}); population mean "
            f"{sizes.mean():.1f}, max {int(sizes.max())}"
        )
        return "\n".join(lines)

    return report


def _best_to_text(policy: TreePolicy, expressions: _Expressions):
    def text(best: Forest) -> str:
        outs = "\n".join(f"out[{k}] = {e}" for k, e in enumerate(expressions(best)))
        return f"{outs}\ntree: {best.to_infix(policy.function_set, precision=6)}"

    return text


def build_control_task(env: str, cfg: dict[str, Any], default_pop: int, default_generations: int) -> Task:
    """A :class:`~evotensor.tasks.Task`: GP policies (:func:`evotensor.gp.control.gp_for_control`)
    on the gymnax or brax environment ``env``, configured by the options of the module docstring."""
    if not isinstance(env, str) or not env:
        raise ValueError(f"option env must be a gymnax or brax environment name, got {env!r}")
    evaluator = cfg["evaluator"]
    if evaluator not in EVALUATORS:
        raise ValueError(f"option evaluator must be one of {EVALUATORS}, got {evaluator!r}")
    gymnax_env = _is_gymnax(env)
    cfg = {
        **cfg,
        "episodes": (4 if gymnax_env else 1) if cfg["episodes"] is None else cfg["episodes"],
        "test_episodes": (20 if gymnax_env else 0) if cfg["test_episodes"] is None else cfg["test_episodes"],
    }
    episodes = positive_int_option(cfg, "episodes")
    test_episodes = _non_negative_int(cfg, "test_episodes")
    make = _gymnax_problem if gymnax_env else _brax_problem
    try:
        problem = make(env, cfg, episodes)
    except ArgumentError as err:
        raise ValueError(f"option env={env!r} is neither a gymnax nor a brax environment ({err})") from None
    depth = positive_int_option(cfg, "max_depth")
    gp, policy = gp_for_control(
        problem,
        cfg["pop"] or default_pop,
        max_len=positive_int_option(cfg, "max_len"),
        init_depth=(1, depth),
        tournament_size=positive_int_option(cfg, "tournament_size"),
        elite_rate=_elite_rate(cfg),
        evaluator=evaluator,
    )
    expressions = _Expressions(policy)
    return Task(
        strategy=gp,
        problem=problem,
        decoder=policy,
        generations=cfg["generations"] or default_generations,
        report=_report(problem, policy, expressions, lambda n: make(env, cfg, n), cfg, test_episodes),
        best_to_text=_best_to_text(policy, expressions),
    )


@register_task(
    "gp-cartpole",
    "GP multi-output trees as policies on gymnax CartPole-v1 (max return 500), pop 256 x 20 generations",
    defaults=_GYMNAX,
)
def _build_cartpole(cfg: dict[str, Any]) -> Task:
    return build_control_task("CartPole-v1", cfg, default_pop=256, default_generations=20)


@register_task(
    "gp-hopper",
    "GP multi-output trees as policies on brax Hopper, pop 64 x 5 generations of 200 steps (use a GPU)",
    defaults=_BRAX,
)
def _build_hopper(cfg: dict[str, Any]) -> Task:
    return build_control_task("hopper", cfg, default_pop=64, default_generations=5)


@register_task(
    "gp-control",
    "GP policies on any gymnax or brax env (--set env=Acrobot-v1|Pendulum-v1|hopper|...), pop 256 x 20",
    defaults={**_GYMNAX, "env": "Acrobot-v1", "episode_length": 1000, "brax_backend": None},
)
def _build_control(cfg: dict[str, Any]) -> Task:
    return build_control_task(cfg["env"], cfg, default_pop=256, default_generations=20)
