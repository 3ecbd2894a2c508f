"""The compiled run loop: ``run`` and ``run_many``.

One generation is ``ask -> decode -> evaluate -> to_minimization -> tell`` plus best-so-far
tracking; ``lax.scan`` runs a *chunk* of generations on device, and between chunks the host shows
progress, appends metrics, writes a checkpoint and calls an optional callback.

Randomness follows a fixed schedule so that chunking, checkpoint/resume and ``run_many`` never
change results::

    init_key, loop_key = jax.random.split(key)
    ask_key, eval_key, tell_key = jax.random.split(jax.random.fold_in(loop_key, generation), 3)

(:func:`generation_keys` returns the three keys.) A hand-written loop that follows this schedule
reproduces :func:`run` exactly.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core.evaluation import Evaluation, to_minimization, to_natural
from evotensor.core.problem import is_policy_problem
from evotensor.core.pytree import pytree_dataclass


@pytree_dataclass
class RunState:
    """The scan carry: strategy state plus best-so-far (minimized) and the generation counter."""

    strategy_state: Any
    best_genotype: Any
    best_fitness: jax.Array  # [] minimized orientation
    generation: jax.Array  # [] int32: generations completed


@dataclasses.dataclass
class RunResult:
    """What :func:`run` returns.

    Attributes:
        state: final strategy state.
        best_genotype: best individual seen (no population axis).
        best_fitness: its fitness in the problem's natural orientation (float).
        history: per-generation metrics, each ``np.ndarray [generations]`` (natural orientation):
            ``best_fitness`` (so far), ``generation_best``, ``generation_mean``,
            ``generation_std``, ``nonfinite`` and the strategy's own scalar metrics.
        generations: number of generations run in total.
        evaluations: total fitness evaluations.
        compile_seconds: time spent compiling (reported separately from run time).
        run_seconds: time spent running compiled generations.
        run_dir: the run directory, if one was written.
    """

    state: Any
    best_genotype: Any
    best_fitness: float
    history: dict[str, np.ndarray]
    generations: int
    evaluations: int
    compile_seconds: float
    run_seconds: float
    run_dir: Path | None = None


@dataclasses.dataclass
class RunManyResult:
    """What :func:`run_many` returns: like :class:`RunResult` with a leading ``[runs]`` axis."""

    state: Any
    best_genotype: Any
    best_fitness: np.ndarray  # [runs]
    history: dict[str, np.ndarray]  # each [runs, generations]
    generations: int
    evaluations: int
    compile_seconds: float
    run_seconds: float


def generation_keys(
    loop_key: jax.Array, generation: jax.Array | int
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The ``(ask, evaluate, tell)`` keys of one generation (see the module docstring)."""
    keys = jax.random.split(jax.random.fold_in(loop_key, generation), 3)
    return keys[0], keys[1], keys[2]


def _check_key(key: Any) -> jax.Array:
    if not (isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key)):
        raise TypeError("key must be a new-style PRNG key from jax.random.key(seed)")
    return key


class Loop:
    """The pure, jit-able pieces of a run for one (strategy, problem, decoder) triple."""

    def __init__(self, strategy: Any, problem: Any, decoder: Any = None):
        for method in ("init", "ask", "tell"):
            if not callable(getattr(strategy, method, None)):
                raise TypeError(f"strategy must have an {method}() method (got {type(strategy).__name__})")
        if not callable(getattr(problem, "evaluate", None)):
            raise TypeError(f"problem must have an evaluate() method (got {type(problem).__name__})")
        # a family may carry its own decoder (GP trees run directly on data)
        decoder = decoder if decoder is not None else getattr(strategy, "decoder", None)
        if is_policy_problem(problem) and decoder is None:
            raise ValueError("a policy problem needs a decoder (with decode() and apply())")
        self.strategy = strategy
        self.problem = problem
        self.decoder = decoder
        self.maximize = bool(getattr(problem, "maximize", False))
        # a strategy that filters NaN/inf itself (a QD archive) sees them unchanged
        self.keep_nonfinite = bool(getattr(strategy, "accepts_nonfinite", False))

    def evaluate(self, key: jax.Array, genotypes: Any) -> Evaluation:
        """Score genotypes in the problem's natural orientation."""
        if is_policy_problem(self.problem):
            return self.problem.evaluate(key, self.decoder.decode(genotypes), self.decoder.apply)
        if self.decoder is not None:
            return self.problem.evaluate(key, self.decoder.decode(genotypes))
        return self.problem.evaluate(key, genotypes)

    def init(self, key: jax.Array, params: Any) -> tuple[RunState, jax.Array]:
        """``(RunState, loop_key)`` for a run started from ``key``."""
        init_key, loop_key = jax.random.split(key)
        state = self.strategy.init(init_key, params)
        genotypes, _ = jax.eval_shape(lambda: self.strategy.ask(loop_key, state, params))
        best = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape[1:], s.dtype), genotypes)
        return RunState(state, best, jnp.array(jnp.inf, jnp.float32), jnp.zeros((), jnp.int32)), loop_key

    def step(
        self, carry: RunState, loop_key: jax.Array, params: Any
    ) -> tuple[RunState, dict[str, jax.Array]]:
        """One generation. Metrics are in natural orientation."""
        ask_key, eval_key, tell_key = generation_keys(loop_key, carry.generation)
        genotypes, state = self.strategy.ask(ask_key, carry.strategy_state, params)
        natural = self.evaluate(eval_key, genotypes)
        if jnp.ndim(natural.fitness) != 1:
            raise ValueError(
                "run() tracks a single objective: fitness must be [pop], "
                f"got shape {jnp.shape(natural.fitness)}"
            )
        minimized = to_minimization(natural, self.maximize, self.keep_nonfinite)
        state, strategy_metrics = self.strategy.tell(tell_key, state, genotypes, minimized, params)

        finite = jnp.isfinite(natural.fitness)
        raw_min = jnp.where(finite, -natural.fitness if self.maximize else natural.fitness, jnp.inf)
        i = jnp.argmin(raw_min)
        improved = raw_min[i] < carry.best_fitness
        best_fitness = jnp.where(improved, raw_min[i], carry.best_fitness)
        best_genotype = jax.tree_util.tree_map(
            lambda old, pop: jnp.where(improved, pop[i], old), carry.best_genotype, genotypes
        )
        n_finite = jnp.maximum(finite.sum(), 1)
        mean = jnp.where(finite, natural.fitness, 0.0).sum() / n_finite
        var = jnp.where(finite, (natural.fitness - mean) ** 2, 0.0).sum() / n_finite
        metrics = {
            "best_fitness": to_natural(best_fitness, self.maximize),
            "generation_best": to_natural(raw_min[i], self.maximize),
            "generation_mean": mean,
            "generation_std": jnp.sqrt(var),
            "nonfinite": (~finite).sum().astype(jnp.int32),
        }
        # scalars always; a fixed-shape vector only when the strategy names it in
        # ``vector_metrics`` (e.g. NEAT's species sizes), kept in the history but not in metrics.csv
        vectors = getattr(self.strategy, "vector_metrics", ())
        for name, value in (strategy_metrics or {}).items():
            if name not in metrics and (jnp.ndim(value) == 0 or (name in vectors and jnp.ndim(value) == 1)):
                metrics[name] = value
        return RunState(state, best_genotype, best_fitness, carry.generation + 1), metrics

    def chunk(self, carry: RunState, loop_key: jax.Array, params: Any, length: int):
        """``length`` generations in one ``lax.scan``: ``-> (carry, metrics [length])``."""
        return jax.lax.scan(lambda c, _: self.step(c, loop_key, params), carry, None, length=length)


def _default_chunk(generations: int) -> int:
    """~20 progress updates, at least 1 and at most 500 generations per compiled chunk; preferably a
    length that divides ``generations``, since a shorter last chunk is a second compilation."""
    target = int(min(500, max(1, math.ceil(generations / 20))))
    for length in range(target, min(2 * target, 500, generations) + 1):
        if generations % length == 0:
            return length
    return target


def _as_numpy(metrics: dict[str, jax.Array]) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in metrics.items()}


def _concat_history(parts: list[dict[str, np.ndarray]], axis: int = 0) -> dict[str, np.ndarray]:
    if not parts:
        return {}
    return {k: np.concatenate([p[k] for p in parts], axis=axis) for k in parts[0]}


def run(
    strategy: Any,
    problem: Any,
    generations: int,
    key: jax.Array,
    *,
    params: Any = None,
    decoder: Any = None,
    chunk_size: int | None = None,
    run_dir: str | Path | None = None,
    resume: bool = False,
    progress: bool | None = None,
    callback: Callable[[dict[str, Any]], None] | None = None,
    config: dict[str, Any] | None = None,
    task_name: str = "run",
    best_to_text: Callable[[Any], str] | None = None,
) -> RunResult:
    """Run ``strategy`` on ``problem`` for ``generations`` generations, compiled in chunks.

    Args:
        strategy: follows :class:`evotensor.core.Strategy`.
        problem: a function problem, or a policy problem (then ``decoder`` is required).
        generations: total number of generations (> 0).
        key: ``jax.random.key(seed)``.
        params: strategy params (default ``strategy.default_params()``).
        decoder: genotype -> phenotype map (``decode``, ``apply``) for policy problems; default
            ``strategy.decoder`` when the strategy has one (GP), else none.
        chunk_size: generations per compiled ``lax.scan`` chunk (default: ~20 chunks).
        run_dir: if given, write ``config.json``, ``metrics.csv``, ``checkpoint.npz``,
            ``best.npz``/``best.txt``/``best.json`` and ``fitness.png`` there.
        resume: continue from ``run_dir/checkpoint.npz`` (bit-identical to an uninterrupted run).
        progress: show progress (default: on when ``run_dir`` is given).
        callback: called on the host after every chunk with a dict (generation, best_fitness,
            evals_per_second, metrics of the chunk); it may raise to stop the run (the checkpoint
            of that chunk is already written).
        config: extra JSON-serializable configuration recorded in ``config.json``.
        task_name: name used in the run directory's files.
        best_to_text: optional ``best_genotype -> str`` for ``best.txt``.

    Returns:
        :class:`RunResult` (natural orientation).
    """
    from evotensor.io.progress import ProgressReporter
    from evotensor.io.rundir import RunDirectory

    if isinstance(generations, bool) or not isinstance(generations, int) or generations < 1:
        raise ValueError(f"generations must be a positive int, got {generations!r}")
    key = _check_key(key)
    chunk_size = _default_chunk(generations) if chunk_size is None else int(chunk_size)
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    params = strategy.default_params() if params is None else params
    loop = Loop(strategy, problem, decoder)
    population_size = int(getattr(strategy, "population_size", 0))

    init = jax.jit(loop.init)
    carry, loop_key = init(key, params)
    history_parts: list[dict[str, np.ndarray]] = []
    directory = None
    if run_dir is not None:
        directory = RunDirectory(Path(run_dir), task_name=task_name)
        if resume:
            carry, history = directory.load_checkpoint(carry)
            history_parts.append(history)
        else:
            directory.start(config or {}, strategy=strategy, problem=problem, params=params, key=key)
    elif resume:
        raise ValueError("resume=True needs run_dir")

    start = int(carry.generation)
    if start > generations:
        raise ValueError(f"the checkpoint is at generation {start}, past the requested {generations}")
    show = (run_dir is not None) if progress is None else bool(progress)
    reporter = ProgressReporter(generations, start, population_size, enabled=show)

    compiled: dict[int, Any] = {}
    compile_seconds = 0.0
    run_seconds = 0.0
    generation = start
    try:
        while generation < generations:
            length = min(chunk_size, generations - generation)
            if length not in compiled:
                t0 = time.perf_counter()
                fn = jax.jit(loop.chunk, static_argnums=3)
                compiled[length] = fn.lower(carry, loop_key, params, length).compile()
                compile_seconds += time.perf_counter() - t0
            t0 = time.perf_counter()
            carry, metrics = compiled[length](carry, loop_key, params)
            metrics = _as_numpy(jax.block_until_ready(metrics))
            elapsed = time.perf_counter() - t0
            run_seconds += elapsed
            generation += length
            history_parts.append(metrics)
            evals_per_second = population_size * length / max(elapsed, 1e-12)
            if directory is not None:
                directory.append_metrics(metrics, first_generation=generation - length)
                directory.save_checkpoint(carry, _concat_history(history_parts))
            reporter.update(generation, metrics, evals_per_second, run_seconds)
            if callback is not None:
                callback(
                    {
                        "generation": generation,
                        "best_fitness": float(metrics["best_fitness"][-1]),
                        "evals_per_second": evals_per_second,
                        "metrics": metrics,
                    }
                )
    finally:
        reporter.close()

    history = _concat_history(history_parts)
    best_fitness = float(to_natural(carry.best_fitness, loop.maximize))
    result = RunResult(
        state=carry.strategy_state,
        best_genotype=carry.best_genotype,
        best_fitness=best_fitness,
        history=history,
        generations=generations,
        evaluations=generations * population_size,
        compile_seconds=compile_seconds,
        run_seconds=run_seconds,
        run_dir=directory.path if directory is not None else None,
    )
    if directory is not None:
        directory.finish(result, best_to_text=best_to_text)
    return result


def run_many(
    strategy: Any,
    problem: Any,
    generations: int,
    keys: jax.Array,
    *,
    params: Any = None,
    params_batched: bool = False,
    decoder: Any = None,
) -> RunManyResult:
    """Run many independent runs in ONE compiled call (``vmap`` over runs).

    Args:
        strategy, problem, decoder: as in :func:`run`.
        generations: generations per run.
        keys: ``[runs]`` typed keys (e.g. ``jax.random.split(jax.random.key(0), 8)``); run ``i``
            equals ``run(..., key=keys[i])``.
        params: strategy params; with ``params_batched=True`` every leaf has a leading
            ``[runs]`` axis (a hyperparameter sweep), otherwise they are shared by all runs.

    Returns:
        :class:`RunManyResult` whose arrays have a leading ``[runs]`` axis.
    """
    if isinstance(generations, bool) or not isinstance(generations, int) or generations < 1:
        raise ValueError(f"generations must be a positive int, got {generations!r}")
    if not (
        isinstance(keys, jax.Array) and jnp.issubdtype(keys.dtype, jax.dtypes.prng_key) and keys.ndim == 1
    ):
        raise TypeError("keys must be a 1-d array of typed keys, e.g. jax.random.split(jax.random.key(0), 8)")
    runs = keys.shape[0]
    params = strategy.default_params() if params is None else params
    if params_batched:
        for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
            if jnp.ndim(leaf) == 0 or jnp.shape(leaf)[0] != runs:
                raise ValueError(
                    f"params_batched=True: leaf {jax.tree_util.keystr(path)} must have a leading "
                    f"axis of {runs} runs, got shape {jnp.shape(leaf)}"
                )
    loop = Loop(strategy, problem, decoder)
    p_axis = 0 if params_batched else None

    def whole(key, p):
        carry, loop_key = loop.init(key, p)
        return loop.chunk(carry, loop_key, p, generations)

    t0 = time.perf_counter()
    compiled = jax.jit(jax.vmap(whole, in_axes=(0, p_axis))).lower(keys, params).compile()
    compile_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    carry, metrics = jax.block_until_ready(compiled(keys, params))
    run_seconds = time.perf_counter() - t0
    population_size = int(getattr(strategy, "population_size", 0))
    return RunManyResult(
        state=carry.strategy_state,
        best_genotype=carry.best_genotype,
        best_fitness=np.asarray(to_natural(carry.best_fitness, loop.maximize)),
        history=_as_numpy(metrics),
        generations=generations,
        evaluations=runs * generations * population_size,
        compile_seconds=compile_seconds,
        run_seconds=run_seconds,
    )
