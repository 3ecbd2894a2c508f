"""Problems evaluated on the host: fitness that cannot be compiled.

A MuJoCo or gymnasium simulator on CPU, an external program, a pool of Ray actors: such a fitness
is ordinary Python. A problem says so with ``evaluates_on_host = True``; then :func:`evotensor.run`
compiles each generation as two programs and calls the problem between them::

    genotypes (and their decoded phenotypes) = ask program(carry)          # compiled, on device
    evaluation = problem.evaluate(eval_key, NumPy phenotypes)               # Python, on the host
    carry, metrics = tell program(carry, genotypes, evaluation)             # compiled, on device

The protocol (fixed; the Ray evaluator builds on it):

* ``problem.evaluates_on_host = True`` and ``problem.maximize`` as for any problem;
* ``problem.evaluate(key, genotypes) -> Evaluation`` is called on the host with ``key`` the
  generation's evaluation key (a JAX key: the schedule of :func:`evotensor.generation_keys` is
  unchanged, so a run equals a hand-written loop) and ``genotypes`` a NumPy pytree whose leaves have
  the leading population axis (the *decoded* phenotypes when a decoder is given: decoding runs on
  device in the ask program). Its :class:`~evotensor.core.Evaluation` may hold NumPy or JAX arrays:
  ``fitness [pop]``, optionally ``descriptor`` (quality-diversity) and Lamarckian ``genotypes``.
* Policy problems (``evaluate(key, phenotypes, apply)``) are not supported on this path: ``apply``
  is a compiled function, and a host problem runs its own policy.

Everything else is the same as for a compiled problem: chunks (a chunk is a host loop over its
generations), checkpoints and bit-identical resume, the callback and progress, NaN/inf fitness,
Lamarckian genotypes. A host fitness that raises stops the run with :class:`HostEvaluationError`
naming the generation, the original exception chained (``__cause__``); the checkpoint of the last
completed chunk is intact.

Why between two compiled programs and not ``jax.experimental.io_callback`` inside the compiled
scan: a callback is a blocking external call *inside* a compiled program. The program cannot see
retries, timeouts or a restarted worker (all an evaluator on a cluster needs); an exception in the
callback surfaces as an opaque XLA runtime error instead of the user's exception; the device stays
held (and on GPU, the stream blocked) while the host works; and in a multi-process job every process
would run the callback on its own shards, with no say over which host talks to the cluster. Two
programs per generation cost one dispatch and one transfer of the population each way, small next
to a fitness that needs a simulator. A run whose problem and decoder are JAX should stay compiled.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any

import jax
import numpy as np

from evotensor.core.compiler_options import compile_lowered
from evotensor.core.evaluation import Evaluation


class HostEvaluationError(RuntimeError):
    """A host-evaluated problem raised (or returned something unusable) in a generation.

    Attributes:
        generation: the generation's 0-based index (``generation_keys(loop_key, generation)``).
    """

    def __init__(self, message: str, generation: int):
        super().__init__(message)
        self.generation = generation


def is_host_problem(problem: Any) -> bool:
    """True when ``problem`` declares ``evaluates_on_host = True``."""
    return getattr(problem, "evaluates_on_host", False) is True


def to_host(tree: Any) -> Any:
    """A pytree of device arrays as NumPy arrays (one copy each)."""
    return jax.tree_util.tree_map(lambda leaf: np.array(leaf, copy=True), tree)


def _canonical(leaf: Any) -> np.ndarray:
    """``leaf`` as a NumPy array of the dtype JAX would compute in (float64 -> float32 without x64),
    so the tell program compiles once whatever precision the host returns."""
    value = np.asarray(leaf)
    if value.dtype.kind not in "biuf":
        raise TypeError(f"holds a {value.dtype} array; fitness and descriptors must be numbers")
    return value.astype(jax.dtypes.canonicalize_dtype(value.dtype), copy=False)


def evaluate_on_host(
    problem: Any, key: jax.Array, genotypes: Any, generation: int, population_size: int
) -> Evaluation:
    """``problem.evaluate(key, genotypes)`` with its result checked and made NumPy.

    Raises:
        HostEvaluationError: the problem raised (chained as ``__cause__``), or returned no
            :class:`Evaluation`, or a fitness that is not ``[population_size]`` numbers.
    """
    name = type(problem).__name__
    where = f"in generation {generation} (0-based, as in generation_keys)"
    try:
        evaluation = problem.evaluate(key, genotypes)
    except Exception as err:
        raise HostEvaluationError(
            f"the host-evaluated problem {name} raised {where}: {type(err).__name__}: {err}", generation
        ) from err
    if not isinstance(evaluation, Evaluation):
        raise HostEvaluationError(
            f"the host-evaluated problem {name} returned a {type(evaluation).__name__} {where}; "
            "evaluate must return an evotensor.core.Evaluation(fitness=[pop] array, ...)",
            generation,
        )
    try:
        fields = {
            field.name: jax.tree_util.tree_map(_canonical, getattr(evaluation, field.name))
            for field in dataclasses.fields(evaluation)
            if getattr(evaluation, field.name) is not None
        }
    except TypeError as err:
        raise HostEvaluationError(f"the Evaluation of {name} {where} {err}", generation) from err
    fitness = fields["fitness"]
    if fitness.shape != (population_size,):
        raise HostEvaluationError(
            f"the host-evaluated problem {name} returned fitness of shape {fitness.shape} {where}; "
            f"run() tracks a single objective: fitness must be [{population_size}] (one per individual)",
            generation,
        )
    return Evaluation(**fields)


class HostGenerations:
    """Runs generations of a host-evaluated problem: the compiled ask program, the host evaluation,
    the compiled tell program, one generation after another.

    ``ask(carry, loop_key, params) -> (genotypes, phenotypes, state, eval_key, tell_key)`` and
    ``tell(carry, state, genotypes, evaluation, tell_key, params) -> (carry, metrics)`` are the
    run loop's pure pieces; ``tell_out_shardings`` keeps the carry in its layout on a mesh;
    ``compiler_options``: XLA options both programs compile with (:mod:`evotensor.core.compiler_options`).
    """

    def __init__(
        self,
        problem: Any,
        ask: Callable[..., Any],
        tell: Callable[..., Any],
        population_size: int,
        tell_out_shardings: Any = None,
        compiler_options: Mapping[str, Any] | None = None,
    ):
        self.problem = problem
        self.compiler_options = compiler_options
        self.population_size = population_size
        self._ask = jax.jit(ask)
        jit_kwargs = {} if tell_out_shardings is None else {"out_shardings": tell_out_shardings}
        self._tell = jax.jit(tell, **jit_kwargs)
        self._compiled: dict[Any, Any] = {}
        self.compile_seconds = 0.0

    def compile_ask(self, carry: Any, loop_key: jax.Array, params: Any) -> Any:
        """The compiled ask program (compiled on first use; its time counts as compile time)."""
        if "ask" not in self._compiled:
            t0 = time.perf_counter()
            lowered = self._ask.lower(carry, loop_key, params)
            self._compiled["ask"] = compile_lowered(lowered, self.compiler_options)
            self.compile_seconds += time.perf_counter() - t0
        return self._compiled["ask"]

    def _compiled_tell(self, *args: Any) -> Any:
        """The compiled tell program for this evaluation's structure, shapes and dtypes (the only
        arguments whose types can change between generations: they come from the host)."""
        leaves, treedef = jax.tree_util.tree_flatten(args[3])
        signature = ("tell", treedef, tuple((x.shape, x.dtype) for x in leaves))
        if signature not in self._compiled:
            t0 = time.perf_counter()
            self._compiled[signature] = compile_lowered(self._tell.lower(*args), self.compiler_options)
            self.compile_seconds += time.perf_counter() - t0
        return self._compiled[signature]

    def chunk(self, carry: Any, loop_key: jax.Array, params: Any, first: int, length: int):
        """Generations ``first .. first + length - 1``: ``-> (carry, metrics)`` with every metric
        ``np.ndarray [length]``, as a compiled chunk returns them."""
        rows = []
        for generation in range(first, first + length):
            ask = self.compile_ask(carry, loop_key, params)
            genotypes, phenotypes, state, eval_key, tell_key = ask(carry, loop_key, params)
            evaluation = evaluate_on_host(
                self.problem, eval_key, to_host(phenotypes), generation, self.population_size
            )
            args = (carry, state, genotypes, evaluation, tell_key, params)
            # waited for: multi-device XLA:CPU programs can hang in a rendezvous when dispatched ahead
            carry, metrics = jax.block_until_ready(self._compiled_tell(*args)(*args))
            rows.append(to_host(metrics))
        return carry, {name: np.stack([row[name] for row in rows]) for name in rows[0]}
