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

``run(..., mesh=mesh)`` runs every generation on a ``jax.sharding.Mesh`` as :mod:`evotensor.core.mesh`
describes: the genotypes split along the population axis right after ``ask`` (so the evaluation is
spread over the devices), the strategy state kept between chunks in the layout its mesh hook asks for
(replicated by default), the best-so-far, the generation counter and the metrics replicated. On a
1-device mesh the results are bit-identical to a run without a mesh.

A problem with ``evaluates_on_host = True`` (fitness that cannot be compiled) is called on the host
between a compiled ask program and a compiled tell program, generation by generation, with the same
key schedule (:mod:`evotensor.core.host_problem`, which also says why this is not an ``io_callback``).

Every argument of :func:`run` and :func:`run_many` is checked before anything is compiled or
written (:class:`~evotensor.core.checks.ArgumentError` naming it): ``generations`` and
``chunk_size`` must be ints (``chunk_size=2.7`` is refused, not truncated), ``params`` must have the
tree structure and leaf shapes of ``strategy.default_params()`` and no NaN (nor an infinity where
the default is finite). The metric history is copied chunk by chunk into NumPy arrays allocated
once for the whole run, so host memory does not grow with the number of chunks.

With ``EVOTENSOR_CACHE_DIR`` set, both turn on JAX's persistent compilation cache there
(:mod:`evotensor.core.compile_cache`) unless the user configured JAX's own: a repeated run in a
fresh process then loads its compiled programs instead of compiling them again.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core.checks import ArgumentError, check_int
from evotensor.core.compile_cache import enable_requested_cache
from evotensor.core.compiler_options import compile_lowered, merged_compiler_options, platform_of
from evotensor.core.evaluation import Evaluation, to_minimization, to_natural
from evotensor.core.host_problem import HostGenerations, is_host_problem
from evotensor.core.mesh import (
    POPULATION_AXIS,
    auto_mesh,
    check_mesh,
    constrain_population,
    from_portable_state,
    on_mesh,
    place,
    portable_state,
    replicated,
    replicated_shardings,
    spans_processes,
    state_shardings,
)
from evotensor.core.problem import evaluate_genotypes, is_policy_problem, takes_genotypes
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
        best_fitness: its fitness in the problem's natural orientation (float); with several
            objectives (a strategy with ``num_objectives``, e.g. MOME) their sum, by which the
            best individual is then chosen.
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
        raise ArgumentError(
            f"key must be a new-style PRNG key from jax.random.key(seed), got {_describe(key)}"
        )
    if key.ndim != 0:
        raise ArgumentError(
            f"key must be a single key (shape ()), got shape {key.shape}; run_many takes a batch of keys"
        )
    return key


def _describe(value: Any) -> str:
    """A short description of ``value`` for an error message (type, shape and dtype of arrays)."""
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"{type(value).__name__} of shape {tuple(value.shape)} and dtype {value.dtype}"
    text = repr(value)
    return text if len(text) <= 80 else f"{type(value).__name__} {text[:77]}..."


def _check_optional(value: Any, name: str, check: Callable[[Any], bool], what: str) -> Any:
    if value is not None and not check(value):
        raise ArgumentError(f"{name} must be {what} or None, got {_describe(value)}")
    return value


def check_params(strategy: Any, params: Any, runs: int | None = None) -> Any:
    """``params``, or ``strategy.default_params()`` when it is ``None``, after checking it against the
    defaults: the same tree structure, numeric leaves of the same shapes (with a leading ``[runs]``
    axis when ``runs`` is given: a batch of params for :func:`run_many`), no NaN, and no infinity
    where the default is finite. Raises :class:`~evotensor.core.checks.ArgumentError` naming the
    leaf (``params.<field>``)."""
    default = strategy.default_params()
    if params is None:
        return default
    default_leaves, treedef = jax.tree_util.tree_flatten(default)
    if jax.tree_util.tree_structure(params) != treedef:
        raise ArgumentError(
            f"params must have the structure of strategy.default_params() ({type(default).__name__}: "
            f"{treedef}), got {type(params).__name__}: {jax.tree_util.tree_structure(params)}"
        )
    paths = [path for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]]
    for path, leaf, reference in zip(paths, jax.tree_util.tree_leaves(params), default_leaves):
        name = f"params{jax.tree_util.keystr(path)}"
        if isinstance(leaf, jax.core.Tracer):
            continue
        if isinstance(leaf, (str, bytes)) or (
            hasattr(leaf, "dtype") and jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key)
        ):
            raise ArgumentError(f"{name} must be a number or a numeric array, got {_describe(leaf)}")
        value = np.asarray(leaf)
        if value.dtype.kind not in "biuf":
            raise ArgumentError(f"{name} must be a number or a numeric array, got {_describe(leaf)}")
        expected = np.shape(reference) if runs is None else (runs, *np.shape(reference))
        if value.shape != expected:
            raise ArgumentError(f"{name} must have shape {expected}, got {value.shape}")
        if value.dtype.kind == "f":
            allowed_inf = ~np.isfinite(np.asarray(reference, np.float64)) & ~np.isnan(
                np.asarray(reference, np.float64)
            )
            bad = np.isnan(value) | (np.isinf(value) & ~allowed_inf)
            if bad.any():
                raise ArgumentError(f"{name} must be finite, got {leaf!r}")
    return params


class _History:
    """The per-generation metrics of a run: one NumPy array per metric, allocated once for
    ``capacity`` generations (grown if ever needed), filled chunk by chunk with *copies*. A list of
    per-chunk arrays held the device buffers alive through NumPy views (~22 KB per chunk, without
    bound); this holds nothing but the history itself."""

    def __init__(self, capacity: int):
        self.capacity = max(int(capacity), 1)
        self.length = 0
        self.arrays: dict[str, np.ndarray] = {}

    def extend(self, metrics: Mapping[str, Any]) -> None:
        """Append the rows of one chunk: every value ``[length, ...]`` (host or device arrays)."""
        if not metrics:
            return
        values = {k: np.asarray(v) for k, v in metrics.items()}
        n = len(next(iter(values.values())))
        if self.length + n > self.capacity:
            self.capacity = max(self.length + n, 2 * self.capacity)
            for k, a in self.arrays.items():
                grown = np.zeros((self.capacity, *a.shape[1:]), a.dtype)
                grown[: self.length] = a[: self.length]
                self.arrays[k] = grown
        for k, v in values.items():
            if k not in self.arrays:
                self.arrays[k] = np.zeros((self.capacity, *v.shape[1:]), v.dtype)
            self.arrays[k][self.length : self.length + n] = v  # a copy into our own storage
        self.length += n

    def view(self) -> dict[str, np.ndarray]:
        """The history so far (views of the storage, ``[generations so far, ...]`` each)."""
        return {k: a[: self.length] for k, a in self.arrays.items()}

    def result(self) -> dict[str, np.ndarray]:
        """The final history: the storage itself when it is full, else a trimmed copy."""
        return {k: a if len(a) == self.length else a[: self.length].copy() for k, a in self.arrays.items()}


def _lamarckian_genotypes(asked: Any, returned: Any) -> Any:
    """``Evaluation.genotypes`` checked against the asked genotypes: same tree structure, shapes and
    dtypes (else an error naming the first difference), so tell and best tracking stay typed."""
    a_leaves, a_def = jax.tree_util.tree_flatten(asked)
    r_leaves, r_def = jax.tree_util.tree_flatten(returned)
    if a_def != r_def:
        raise ArgumentError(
            f"Evaluation.genotypes must have the structure of the asked genotypes ({a_def}), got {r_def}"
        )
    for path_leaf, r in zip(jax.tree_util.tree_flatten_with_path(asked)[0], r_leaves):
        path, a = path_leaf
        if jnp.shape(a) != jnp.shape(r) or jnp.result_type(a) != jnp.result_type(r):
            raise ArgumentError(
                f"Evaluation.genotypes{jax.tree_util.keystr(path)} must be {jnp.result_type(a)}"
                f"{list(jnp.shape(a))} like the asked genotypes, got {jnp.result_type(r)}{list(jnp.shape(r))}"
            )
    return returned


def _as_bits(x: jax.Array) -> jax.Array:
    """``x``'s bit patterns as unsigned integers of its width (bools as ``uint8``)."""
    if x.dtype == jnp.bool_:
        return x.astype(jnp.uint8)
    return jax.lax.bitcast_convert_type(x, jnp.dtype(f"uint{8 * x.dtype.itemsize}"))


def _from_bits(bits: jax.Array, dtype: Any) -> jax.Array:
    """The inverse of :func:`_as_bits`."""
    if dtype == jnp.bool_:
        return bits != 0
    return jax.lax.bitcast_convert_type(bits, dtype)


class Loop:
    """The pure, jit-able pieces of a run for one (strategy, problem, decoder) triple.

    With ``mesh``, the genotypes (and their evaluation) are laid out along ``mesh_axis`` inside the
    programs; ``population_size`` (default: the strategy's) says which leaves hold the population.
    """

    def __init__(
        self,
        strategy: Any,
        problem: Any,
        decoder: Any = None,
        *,
        mesh: Any = None,
        mesh_axis: str = POPULATION_AXIS,
        population_size: int | None = None,
    ):
        for method in ("init", "ask", "tell", "default_params"):
            if not callable(getattr(strategy, method, None)):
                raise ArgumentError(
                    f"strategy must have an {method}() method (got {type(strategy).__name__})"
                )
        if not callable(getattr(problem, "evaluate", None)):
            raise ArgumentError(f"problem must have an evaluate() method (got {type(problem).__name__})")
        if decoder is not None and not callable(getattr(decoder, "decode", None)):
            raise ArgumentError(f"decoder must have a decode() method (got {type(decoder).__name__})")
        # a family may carry its own decoder (GP trees run directly on data)
        decoder = decoder if decoder is not None else getattr(strategy, "decoder", None)
        self.host = is_host_problem(problem)
        if self.host and is_policy_problem(problem):
            raise ArgumentError(
                f"problem {type(problem).__name__} is a policy problem (kind='policy') evaluated on the "
                "host: not supported (apply() is compiled); let the host problem run its policy itself and "
                "take genotypes or decoded phenotypes in evaluate(key, genotypes)"
            )
        if is_policy_problem(problem) and decoder is None:
            raise ValueError("a policy problem needs a decoder (with decode() and apply())")
        self.mesh = mesh
        self.mesh_axis = mesh_axis
        self.population_size = population_size or int(getattr(strategy, "population_size", 0)) or None
        self.strategy = strategy
        self.problem = problem
        self.decoder = decoder
        self.maximize = bool(getattr(problem, "maximize", False))
        # a strategy that filters NaN/inf itself (a QD archive) sees them unchanged
        self.keep_nonfinite = bool(getattr(strategy, "accepts_nonfinite", False))
        # XLA options the parts ask for (evotensor.core.compiler_options); every program of the
        # run compiles with them (Loop.compile)
        platform = platform_of(mesh)
        self.compiler_options = merged_compiler_options(strategy, problem, decoder, platform=platform)

    def compile(self, lowered: Any) -> Any:
        """``lowered.compile()`` with :attr:`compiler_options` (a program of this loop's pieces)."""
        return compile_lowered(lowered, self.compiler_options)

    def _has_layout(self) -> bool:
        """Whether the (mesh-placed) strategy lays its state and population out itself."""
        return callable(getattr(self.strategy, "state_shardings", None))

    def _whole(self, tree: Any) -> Any:
        """Inside ``jit``: every leaf of ``tree`` whole on every device of the mesh."""
        whole = replicated(self.mesh)
        return jax.tree_util.tree_map(lambda leaf: jax.lax.with_sharding_constraint(leaf, whole), tree)

    def _row(self, population: Any, i: jax.Array) -> Any:
        """Row ``i`` of a population pytree. On a mesh the row's owner supplies it: a masked sum of
        the rows' bit patterns (exact for every value, ``-0.0`` and NaN payloads included), which
        moves one row between devices where ``population[i]`` would gather the whole population."""
        if self.mesh is None:
            return jax.tree_util.tree_map(lambda leaf: leaf[i], population)

        def pick(leaf):
            bits = _as_bits(leaf)
            hit = (jnp.arange(leaf.shape[0]) == i).reshape((-1,) + (1,) * (leaf.ndim - 1))
            return _from_bits(jnp.sum(jnp.where(hit, bits, 0), axis=0, dtype=bits.dtype), leaf.dtype)

        return jax.tree_util.tree_map(pick, population)

    def _on_population_axis(self, tree: Any) -> Any:
        """``tree``'s population leaves split along the mesh axis (nothing without a mesh)."""
        if self.mesh is None:
            return tree
        return constrain_population(tree, self.mesh, self.mesh_axis, self.population_size)

    def evaluate(self, key: jax.Array, genotypes: Any) -> Evaluation:
        """Score genotypes in the problem's natural orientation."""
        return evaluate_genotypes(self.problem, key, genotypes, self.decoder)

    def init(self, key: jax.Array, params: Any) -> tuple[RunState, jax.Array]:
        """``(RunState, loop_key)`` for a run started from ``key``."""
        init_key, loop_key = jax.random.split(key)
        state = self.strategy.init(init_key, params)
        genotypes, _ = jax.eval_shape(lambda: self.strategy.ask(loop_key, state, params))
        best = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape[1:], s.dtype), genotypes)
        return RunState(state, best, jnp.array(jnp.inf, jnp.float32), jnp.zeros((), jnp.int32)), loop_key

    def ask(self, carry: RunState, loop_key: jax.Array, params: Any):
        """The ask half of a generation: ``-> (genotypes, state, eval_key, tell_key)``."""
        ask_key, eval_key, tell_key = generation_keys(loop_key, carry.generation)
        genotypes, state = self.strategy.ask(ask_key, carry.strategy_state, params)
        if self.mesh is not None and not self._has_layout():
            # a strategy without its own layout samples whole on every device, as on one device
            # (split by XLA, its sampling matmul would round differently), then each device keeps
            # its rows for the evaluation
            genotypes = self._whole(genotypes)
        return self._on_population_axis(genotypes), state, eval_key, tell_key

    def host_ask(self, carry: RunState, loop_key: jax.Array, params: Any):
        """The ask program of a host-evaluated problem: ``-> (genotypes, phenotypes, state,
        eval_key, tell_key)``, the phenotypes decoded on device (the genotypes without a decoder or for
        a problem of ``kind = "genotype"``)."""
        genotypes, state, eval_key, tell_key = self.ask(carry, loop_key, params)
        decode = self.decoder is not None and not takes_genotypes(self.problem)
        phenotypes = self.decoder.decode(genotypes) if decode else genotypes
        return genotypes, phenotypes, state, eval_key, tell_key

    def step(
        self, carry: RunState, loop_key: jax.Array, params: Any
    ) -> tuple[RunState, dict[str, jax.Array]]:
        """One generation. Metrics are in natural orientation."""
        genotypes, state, eval_key, tell_key = self.ask(carry, loop_key, params)
        natural = self._on_population_axis(self.evaluate(eval_key, genotypes))
        return self.tell(carry, state, genotypes, natural, tell_key, params)

    def tell(
        self,
        carry: RunState,
        state: Any,
        genotypes: Any,
        natural: Evaluation,
        tell_key: jax.Array,
        params: Any,
    ) -> tuple[RunState, dict[str, jax.Array]]:
        """The tell half of a generation, given the asked ``genotypes`` (and the strategy ``state``
        ask returned) and their ``natural`` evaluation: ``-> (carry, metrics)``."""
        objectives = getattr(self.strategy, "num_objectives", None)
        want = 1 if objectives is None else 2
        if jnp.ndim(natural.fitness) != want or (want == 2 and jnp.shape(natural.fitness)[1] != objectives):
            shape = "[pop]" if objectives is None else f"[pop, {objectives}] (the strategy's num_objectives)"
            raise ValueError(f"fitness must be {shape}, got shape {jnp.shape(natural.fitness)}")
        if natural.genotypes is not None:  # Lamarckian: the problem improved the individuals
            genotypes = _lamarckian_genotypes(genotypes, natural.genotypes)
            natural = natural.replace(genotypes=None)  # type: ignore[attr-defined]
        if self.mesh is not None:
            # the [pop] fitness whole on every device: the metrics' sums then run in one device's
            # order (bit-identical to no mesh); a strategy without its own layout (replicated state)
            # also gets the whole population, so its tell is the one-device computation
            natural = natural.replace(fitness=self._whole(natural.fitness))
            if not self._has_layout():
                genotypes = self._whole(genotypes)
        minimized = to_minimization(natural, self.maximize, self.keep_nonfinite)
        state, strategy_metrics = self.strategy.tell(tell_key, state, genotypes, minimized, params)

        # several objectives (MOME): the best individual and the generation's figures go by their sum
        tracked = natural.fitness if objectives is None else jnp.sum(natural.fitness, axis=1)
        finite = jnp.isfinite(tracked)
        raw_min = jnp.where(finite, -tracked if self.maximize else tracked, jnp.inf)
        i = jnp.argmin(raw_min)
        improved = raw_min[i] < carry.best_fitness
        best_fitness = jnp.where(improved, raw_min[i], carry.best_fitness)
        best_genotype = jax.tree_util.tree_map(
            lambda old, row: jnp.where(improved, row, old), carry.best_genotype, self._row(genotypes, i)
        )
        n_finite = jnp.maximum(finite.sum(), 1)
        mean = jnp.where(finite, tracked, 0.0).sum() / n_finite
        var = jnp.where(finite, (tracked - mean) ** 2, 0.0).sum() / n_finite
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
    """Host *copies* (``np.array``, not ``np.asarray``: a view would keep the device buffer alive)."""
    return {k: np.array(v, copy=True) for k, v in metrics.items()}


def _portable(loop: Loop, carry: RunState, checkpoints: Any = None) -> RunState:
    """The carry as a checkpoint holds it: the strategy state in one device's shapes (the same
    checkpoint then resumes on any mesh, or none). Leaves the mesh layout pads stay
    :class:`~evotensor.core.mesh.Padded` (sharded, nothing gathered) for a format that writes them
    shard by shard (``checkpoints.writes_padded``), and are cut to their rows for any other."""
    keep = bool(getattr(checkpoints, "writes_padded", False))
    return carry.replace(strategy_state=portable_state(loop.strategy, carry.strategy_state, keep))


def _population_of(loop: Loop, key: jax.Array, params: Any) -> int:
    """The population size from the shapes ``ask`` returns (traced, nothing compiled)."""
    carry, loop_key = jax.eval_shape(loop.init, key, params)
    genotypes = jax.eval_shape(loop.strategy.ask, loop_key, carry.strategy_state, params)[0]
    return int(jax.tree_util.tree_leaves(genotypes)[0].shape[0])


def _carry_shardings(loop: Loop, key: jax.Array, params: Any, mesh: Any) -> RunState:
    """Where the carry lives between chunks: the strategy state as its mesh hook says (replicated
    by default), the best-so-far and the generation counter replicated."""
    carry, _ = jax.eval_shape(loop.init, key, params)
    return RunState(
        state_shardings(loop.strategy, carry.strategy_state, mesh),
        replicated_shardings(carry.best_genotype, mesh),
        replicated(mesh),
        replicated(mesh),
    )


class _Chunks:
    """The programs that run a chunk of generations: one compiled ``lax.scan`` per chunk length,
    or, for a host-evaluated problem, the host loop of :class:`HostGenerations`. With a mesh the
    carry keeps ``carry_shardings`` and the metrics come back replicated."""

    def __init__(self, loop: Loop, population_size: int, carry_shardings: RunState | None):
        self.loop = loop
        self.carry_shardings = carry_shardings
        self.compiled: dict[int, Any] = {}
        self.host = None
        if loop.host:
            out = None if carry_shardings is None else (carry_shardings, replicated(loop.mesh))
            self.host = HostGenerations(
                loop.problem, loop.host_ask, loop.tell, population_size, out, loop.compiler_options
            )
        self._compile_seconds = 0.0

    @property
    def compile_seconds(self) -> float:
        return self._compile_seconds + (self.host.compile_seconds if self.host is not None else 0.0)

    def prepare(self, carry: RunState, loop_key: jax.Array, params: Any, length: int) -> None:
        """Compile what a chunk of ``length`` generations needs, if not yet compiled."""
        if self.host is not None:
            self.host.compile_ask(carry, loop_key, params)
            return
        if length in self.compiled:
            return
        t0 = time.perf_counter()
        if self.carry_shardings is None:
            fn = jax.jit(self.loop.chunk, static_argnums=3)
            self.compiled[length] = self.loop.compile(fn.lower(carry, loop_key, params, length))
        else:
            everywhere = replicated(self.loop.mesh)
            fn = jax.jit(
                functools.partial(self.loop.chunk, length=length),
                in_shardings=(self.carry_shardings, everywhere, everywhere),
                out_shardings=(self.carry_shardings, everywhere),
            )
            self.compiled[length] = self.loop.compile(fn.lower(carry, loop_key, params))
        self._compile_seconds += time.perf_counter() - t0

    def run(self, carry: RunState, loop_key: jax.Array, params: Any, first: int, length: int):
        """Generations ``first .. first + length - 1``: ``-> (carry, metrics as NumPy [length])``."""
        if self.host is not None:
            return self.host.chunk(carry, loop_key, params, first, length)
        # waited for: multi-device XLA:CPU programs can hang in a rendezvous when dispatched ahead
        carry, metrics = jax.block_until_ready(self.compiled[length](carry, loop_key, params))
        return carry, _as_numpy(metrics)


def placed_decoder(strategy: Any, placed: Any, decoder: Any) -> Any:
    """The decoder a run on a mesh uses: the placed strategy's own (a family may lay its decoding
    out per device, as NEAT does) when ``decoder`` is the unplaced ``strategy``'s own decoder passed
    explicitly (as the CLI tasks do), else ``decoder`` as given (``None``: the placed strategy's)."""
    if decoder is not None and decoder is getattr(strategy, "decoder", None):
        return getattr(placed, "decoder", decoder)
    return decoder


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
    mesh: Any = None,
    mesh_axis: str = POPULATION_AXIS,
    checkpoint_format: Any = None,
) -> RunResult:
    """Run ``strategy`` on ``problem`` for ``generations`` generations, compiled in chunks.

    Args:
        strategy: follows :class:`evotensor.core.Strategy`.
        problem: a function problem, or a policy problem (then ``decoder`` is required), or a
            problem evaluated on the host (``evaluates_on_host = True``: see
            :mod:`evotensor.core.host_problem`).
        generations: total number of generations (> 0).
        key: ``jax.random.key(seed)``.
        params: strategy params (default ``strategy.default_params()``).
        decoder: genotype -> phenotype map (``decode``, ``apply``) for policy problems; default
            ``strategy.decoder`` when the strategy has one (GP), else none.
        chunk_size: generations per compiled ``lax.scan`` chunk (default: ~20 chunks).
        run_dir: if given, write ``config.json``, ``metrics.csv``, ``checkpoint.npz``,
            ``best.npz``/``best.txt``/``best.json`` and ``fitness.png`` there.
        resume: continue from ``run_dir/checkpoint.npz`` (bit-identical to an uninterrupted run). The
            checkpoint must belong to this run: the same ``task_name``, ``config`` (``generations``
            aside), strategy and its static configuration, ``params``, problem and ``key``;
            otherwise, or when it is damaged, :class:`evotensor.io.checkpoint.CheckpointError` (a
            ``ValueError``) is raised. Without ``resume``, a run into a directory that holds an
            earlier run removes that run's checkpoint, metrics and ``best.*`` files first.
        progress: show progress (default: on when ``run_dir`` is given).
        callback: called on the host after every chunk with a dict (generation, best_fitness,
            evals_per_second, metrics of the chunk); it may raise to stop the run (the checkpoint
            of that chunk is already written).
        config: extra JSON-serializable configuration recorded in ``config.json``.
        task_name: name used in the run directory's files.
        best_to_text: optional ``best_genotype -> str`` for ``best.txt``.
        mesh: a ``jax.sharding.Mesh`` to run on (see :mod:`evotensor.core.mesh`): the population
            is split along ``mesh_axis``, whose size must divide the population size; the strategy
            and problem are put on the mesh through their ``on_mesh`` hooks when they have them.
            A checkpoint holds plain arrays, so a run may resume on another mesh (or none).
            A host-evaluated problem needs a mesh of this process's devices.
        mesh_axis: the mesh axis the population is split along (default ``"pop"``).
        checkpoint_format: how ``run_dir``'s checkpoints are written: ``"single"`` (default: one
            ``checkpoint.npz``, the state gathered onto process 0), ``"sharded"`` (a directory
            ``checkpoint-<generation>/`` in which every process writes its own shards, nothing
            gathered: for states larger than one host's memory), or a format object such as
            ``evotensor.io.sharded_checkpoint.ShardedCheckpoints(keep=3)``. A resume reads either
            format, onto any mesh.

    Returns:
        :class:`RunResult` (natural orientation). With a mesh, ``state`` is laid out on it (its
        sharded leaves span every process of a multi-process run); ``best_genotype`` is replicated.
    """
    from evotensor.io.progress import ProgressReporter
    from evotensor.io.rundir import RunDirectory, resolve_checkpoint_format

    generations = check_int(generations, "generations")
    key = _check_key(key)
    chunk_size = _default_chunk(generations) if chunk_size is None else check_int(chunk_size, "chunk_size")
    loop = Loop(strategy, problem, decoder)
    params = check_params(strategy, params)
    enable_requested_cache()
    _check_optional(run_dir, "run_dir", lambda v: isinstance(v, (str, os.PathLike)), "a path (str or Path)")
    for name, flag in (("resume", resume), ("progress", progress)):
        if not isinstance(flag, (bool, np.bool_)) and not (name == "progress" and flag is None):
            raise ArgumentError(
                f"{name} must be a bool{' or None' if name == 'progress' else ''}, got {flag!r}"
            )
    _check_optional(callback, "callback", callable, "a callable")
    _check_optional(best_to_text, "best_to_text", callable, "a callable")
    _check_optional(config, "config", lambda v: isinstance(v, Mapping), "a dict")
    if not isinstance(task_name, str) or not task_name:
        raise ArgumentError(f"task_name must be a non-empty str, got {task_name!r}")
    checkpoints = resolve_checkpoint_format(checkpoint_format)
    if checkpoint_format is not None and run_dir is None:
        raise ArgumentError(f"checkpoint_format={checkpoint_format!r} needs run_dir (checkpoints go there)")
    population_size = int(getattr(strategy, "population_size", 0))
    if population_size <= 0 and (mesh is not None or loop.host):
        population_size = _population_of(loop, key, params)
    run_key, run_params, carry_shardings = key, params, None
    if mesh is not None:
        mesh = auto_mesh(check_mesh(mesh, mesh_axis))
        if loop.host and spans_processes(mesh):
            raise ArgumentError(
                "mesh spans several processes, and a host-evaluated problem would then be evaluated by "
                "every process; run a host-evaluated problem with a mesh of this process's devices "
                "(jax.local_devices()), and spread its evaluation with the evaluator itself (e.g. Ray)"
            )
        placed = on_mesh(strategy, mesh, mesh_axis)
        # the rows the placed strategy asks: its population, or more where a layout repeats a row
        # on every device (the sharded ESMC asks population_size + n - 1)
        rows = int(getattr(placed, "population_size", 0)) or population_size
        check_mesh(mesh, mesh_axis, rows)
        loop = Loop(
            placed,
            on_mesh(problem, mesh, mesh_axis),
            placed_decoder(strategy, placed, decoder),
            mesh=mesh,
            mesh_axis=mesh_axis,
            population_size=rows,
        )
        carry_shardings = _carry_shardings(loop, key, params, mesh)
        # every input laid out on the mesh (replicated): programs of a multi-process job need
        # global arrays, and a committed single-device input would clash with the mesh
        run_key, run_params = place(key, replicated(mesh)), place(params, replicated(mesh))
        init = jax.jit(loop.init, out_shardings=(carry_shardings, replicated(mesh)))
    else:
        init = jax.jit(loop.init)
    carry, loop_key = jax.block_until_ready(init(run_key, run_params))
    store = _History(generations)
    directory = None
    if run_dir is not None:
        directory = RunDirectory(Path(run_dir), task_name=task_name, checkpoint_format=checkpoints)
        if resume:
            carry, history = directory.resume(
                _portable(loop, carry, checkpoints),
                config or {},
                strategy=strategy,
                problem=problem,
                params=params,
                key=key,
            )
            carry = carry.replace(strategy_state=from_portable_state(loop.strategy, carry.strategy_state))
            if carry_shardings is not None:  # the checkpoint's plain arrays, onto this run's mesh
                carry = place(carry, carry_shardings)
            store.extend(history)
        else:
            directory.start(config or {}, strategy=strategy, problem=problem, params=params, key=key)
    elif resume:
        raise ValueError("resume=True needs run_dir")

    start = int(carry.generation)
    if start > generations:
        raise ValueError(f"the checkpoint is at generation {start}, past the requested {generations}")
    show = (run_dir is not None) if progress is None else bool(progress)
    reporter = ProgressReporter(generations, start, population_size, enabled=show)

    chunks = _Chunks(loop, population_size, carry_shardings)
    run_seconds = 0.0
    generation = start
    try:
        while generation < generations:
            length = min(chunk_size, generations - generation)
            chunks.prepare(carry, loop_key, run_params, length)
            t0, compiled_before = time.perf_counter(), chunks.compile_seconds
            carry, metrics = chunks.run(carry, loop_key, run_params, generation, length)
            # a host chunk compiles its tell program in its first generation: not run time
            elapsed = time.perf_counter() - t0 - (chunks.compile_seconds - compiled_before)
            run_seconds += elapsed
            generation += length
            store.extend(metrics)
            evals_per_second = population_size * length / max(elapsed, 1e-12)
            if directory is not None:
                directory.append_metrics(metrics, first_generation=generation - length)
                directory.save_checkpoint(_portable(loop, carry, checkpoints), store.view())
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

    history = store.result()
    best_fitness = float(np.asarray(carry.best_fitness))  # replicated: readable in every process
    best_fitness = -best_fitness if loop.maximize else best_fitness
    result = RunResult(
        state=carry.strategy_state,
        best_genotype=carry.best_genotype,
        best_fitness=best_fitness,
        history=history,
        generations=generations,
        evaluations=generations * population_size,
        compile_seconds=chunks.compile_seconds,
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

    On one device only: ``run_many`` takes no mesh (run each on a mesh with :func:`run`, or put
    the runs of a sweep on different devices yourself), and no host-evaluated problem (its
    fitness cannot be vmapped; :func:`run` takes it).

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
    generations = check_int(generations, "generations")
    if not (
        isinstance(keys, jax.Array)
        and jnp.issubdtype(keys.dtype, jax.dtypes.prng_key)
        and keys.ndim == 1
        and keys.shape[0] >= 1
    ):
        raise ArgumentError(
            "keys must be a 1-d array of typed keys, e.g. jax.random.split(jax.random.key(0), 8), "
            f"got {_describe(keys)}"
        )
    runs = keys.shape[0]
    if not isinstance(params_batched, (bool, np.bool_)):
        raise ArgumentError(f"params_batched must be a bool, got {params_batched!r}")
    loop = Loop(strategy, problem, decoder)
    if loop.host:
        raise ArgumentError(
            f"problem {type(problem).__name__} is evaluated on the host (evaluates_on_host=True), which "
            "run_many cannot vmap; run it with evotensor.run, one run at a time"
        )
    if params is None and params_batched:
        raise ArgumentError("params_batched=True needs params with a leading [runs] axis, got params=None")
    params = strategy.default_params() if params is None else params
    if params_batched:
        for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
            if jnp.ndim(leaf) == 0 or jnp.shape(leaf)[0] != runs:
                raise ArgumentError(
                    f"params_batched=True: leaf {jax.tree_util.keystr(path)} must have a leading "
                    f"axis of {runs} runs, got shape {jnp.shape(leaf)}"
                )
    params = check_params(strategy, params, runs if params_batched else None)
    enable_requested_cache()
    p_axis = 0 if params_batched else None

    def whole(key, p):
        carry, loop_key = loop.init(key, p)
        return loop.chunk(carry, loop_key, p, generations)

    t0 = time.perf_counter()
    compiled = loop.compile(jax.jit(jax.vmap(whole, in_axes=(0, p_axis))).lower(keys, params))
    compile_seconds = time.perf_counter() - t0
    t0 = time.perf_counter()
    carry, metrics = jax.block_until_ready(compiled(keys, params))
    run_seconds = time.perf_counter() - t0
    population_size = int(getattr(strategy, "population_size", 0))
    return RunManyResult(
        state=carry.strategy_state,
        best_genotype=carry.best_genotype,
        best_fitness=np.asarray(to_natural(carry.best_fitness, loop.maximize)),
        history=_as_numpy(metrics),  # one copy of the whole history: no view keeps device buffers
        generations=generations,
        evaluations=runs * generations * population_size,
        compile_seconds=compile_seconds,
        run_seconds=run_seconds,
    )
