"""Fitness that cannot be compiled (a simulator, an external program, plain Python), evaluated by a pool
of Ray actors.

:class:`RayEvaluator` is a *host-evaluated problem* (``evaluates_on_host = True``): :func:`evotensor.run`
compiles ``ask`` and ``tell`` and, between them, calls ``evaluate(key, genotypes)`` on the host with
the generation's evaluation key and the population as NumPy arrays (a pytree with a leading
population axis). The evaluator cuts the population into chunks, runs the chunks on a pool of Ray
actors, and puts the fitness values back together in population order. Nothing else of the run
changes: the strategy, the key schedule, checkpoints and resume are those of a compiled problem.

The fitness is one of (composition, not flags):

* a plain callable ``fitness_fn(genotype, seed) -> float`` for ONE individual (``genotype``: the
  individual's pytree of NumPy arrays, without the population axis; ``seed``: an ``int`` in
  ``[0, 2**32)``), wrapped as :class:`PerIndividual`;
* :class:`Batched` ``(batch_fn)`` with ``batch_fn(chunk, seeds [c]) -> fitness [c]`` for a whole
  chunk at once (vectorized simulators, one external process per chunk);
* either with ``descriptor_size=d`` for quality-diversity: it then returns ``(fitness, descriptor
  [d])`` (per individual) or ``(fitness [c], descriptors [c, d])`` (batched).

**Seeds.** Individual ``i`` gets ``seed_i`` = 32 random bits of ``jax.random.fold_in(key, i)``
(:func:`individual_seeds`): a function of the evaluation key and the individual's index only, so
the fitness values do not depend on the number of actors, the chunk size or the order in which
the chunks run. A deterministic ``fitness_fn(genotype, seed)`` gives the same run on one actor, on
ten, and in a plain local loop (tested).

**Chunks.** ``chunk_size`` individuals per Ray task; default ``ceil(pop / (4 * actors))`` (four
chunks per actor balance unequal episode lengths at a per-task cost of about a millisecond). Each
actor has at most two chunks queued, so it never waits for the driver between chunks.

**Faults** (:class:`WorkerPool`). An actor that dies while evaluating (its process crashed or was
killed, its node was lost, or a chunk ran past ``timeout``) is replaced by a new actor and the chunks
it held are run again; a result is taken once per chunk, so no individual is lost or counted twice
(side effects of the interrupted attempt, such as files written by the fitness, may happen twice).
A chunk whose attempts kill their actor more than ``max_restarts`` times raises
:class:`ActorCrashError` naming the individuals. A fitness that *raises* is not retried (it would
raise again): :class:`FitnessError` names the individual's index and seed and chains the original
exception (its remote traceback is attached as a note).

**Cluster and lifetimes.** Nothing starts at construction. The first ``evaluate`` joins the Ray
cluster this process is already connected to, else calls ``ray.init(address, **init_kwargs)``:
with ``address=None`` (and no ``RAY_ADDRESS`` in the environment) that starts a local cluster with
one CPU per core of the machine; ``address="auto"`` or ``"ray://host:10001"`` joins a running one.
It then starts the actors (one CPU each unless ``actor_options`` says otherwise; by default as many
as the cluster has CPUs) and waits until every one is up. The actors and the fitness state they
hold (simulators built lazily inside ``fitness_fn``, see
:class:`evotensor.problems.gymnasium_control.GymnasiumPolicy`) live until :meth:`RayEvaluator.close`
(or the end of a ``with`` block); ``close`` also shuts down a local cluster that this evaluator
started, and a later ``evaluate`` starts everything again. Actors that are never closed end with
their last handle (Ray's reference counting) or with the driver process.

Example::

    def fitness(genotype, seed):              # any Python: a simulator, a subprocess, ...
        return float(np.sum(genotype**2))

    with RayEvaluator(fitness, num_actors=4) as problem:
        result = evotensor.run(OpenES(64, num_dims=10), problem, 100, jax.random.key(0))
"""

from __future__ import annotations

import collections
import functools
import math
import os
import pickle
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core.checks import ArgumentError, check_int, check_positive
from evotensor.core.evaluation import Evaluation

__all__ = [
    "ActorCrashError",
    "Batched",
    "FitnessError",
    "PerIndividual",
    "RayEvaluator",
    "WorkerPool",
    "as_chunk_fitness",
    "connect",
    "individual_seeds",
]

# how long a new pool waits for all its actors to come up (an autoscaling cluster may add nodes)
ACTOR_START_TIMEOUT = 300.0
# chunks queued on one actor at a time: the second hides the round trip to the driver
QUEUE_DEPTH = 2


# ---- errors ------------------------------------------------------------------------------------


class FitnessError(RuntimeError):
    """The fitness function raised (or returned something that is not a fitness) for an individual.

    Attributes:
        index: the individual's index in the population (``None`` when a batched fitness failed on
            a whole chunk; the message then names the chunk's first and last index).
        seed: its seed (``None`` for a chunk).
        remote_traceback: the traceback text on the actor that ran it.
    """

    def __init__(
        self, message: str, index: int | None = None, seed: int | None = None, remote_traceback: str = ""
    ):
        super().__init__(message)
        self.index, self.seed, self.remote_traceback = index, seed, remote_traceback
        self.original: BaseException | None = None

    def __reduce__(self):  # keep the fields (and the original exception) across processes
        return (
            _rebuild_fitness_error,
            (self.args[0], self.index, self.seed, self.remote_traceback, self.original),
        )


def _rebuild_fitness_error(message, index, seed, remote_traceback, original):
    err = FitnessError(message, index, seed, remote_traceback)
    err.original = original
    return err


class ActorCrashError(RuntimeError):
    """A chunk killed its actor (crash, lost node or ``timeout``) more often than ``max_restarts``
    allows; the message names the individuals of the chunk and the last failure."""


# ---- seeds -------------------------------------------------------------------------------------


@jax.jit
def _seeds(key: jax.Array, indices: jax.Array) -> jax.Array:
    return jax.vmap(lambda i: jax.random.bits(jax.random.fold_in(key, i), dtype=jnp.uint32))(indices)


def individual_seeds(key: jax.Array, count: int, start: int = 0) -> np.ndarray:
    """Seeds of individuals ``start .. start + count - 1``: ``int64 [count]`` in ``[0, 2**32)``.

    ``seed_i`` is 32 random bits of ``jax.random.fold_in(key, i)``: it depends on the key and on
    ``i`` only (not on ``count``, chunking or scheduling).
    """
    count, start = check_int(count, "count", minimum=0), check_int(start, "start", minimum=0)
    bucket = max(64, 1 << max(count - 1, 0).bit_length())  # few shapes, few compilations
    indices = jnp.arange(start, start + bucket, dtype=jnp.uint32)
    return np.asarray(_seeds(key, indices))[:count].astype(np.int64)


# ---- the fitness, chunk by chunk ---------------------------------------------------------------


def _picklable(err: BaseException) -> BaseException:
    """``err`` if it survives pickling (to travel to the driver), else a ``RuntimeError`` with its text."""
    try:
        pickle.loads(pickle.dumps(err))
        return err
    except Exception:  # noqa: BLE001 - any failure means: send the text instead
        return RuntimeError(f"{type(err).__name__}: {err}")


def _failure(message: str, err: BaseException, index: int | None = None, seed: int | None = None):
    failure = FitnessError(f"{message}: {type(err).__name__}: {err}", index, seed, traceback.format_exc())
    failure.original = _picklable(err)
    return failure


def _descriptor_size(value: Any) -> int | None:
    if value is None:
        return None
    return check_int(value, "descriptor_size", minimum=1)


def _row(chunk: Any, i: int) -> Any:
    return jax.tree_util.tree_map(lambda a: a[i], chunk)


def _chunk_length(chunk: Any) -> int:
    return int(np.shape(jax.tree_util.tree_leaves(chunk)[0])[0])


class PerIndividual:
    """``fitness_fn(genotype, seed) -> float`` (or ``-> (float, descriptor [d])`` with
    ``descriptor_size=d``) applied to each individual of a chunk in turn.

    Called as ``chunk_fitness(chunk, seeds [c], start) -> (fitness float32 [c], descriptors float32
    [c, d] or None)``, where ``chunk`` is a pytree of NumPy arrays with a leading axis ``c`` and
    ``start`` the population index of its first individual (for error messages). Raises
    :class:`FitnessError` naming the individual whose fitness raised or returned a non-number.
    """

    batched = False

    def __init__(self, fitness_fn: Callable[[Any, int], Any], descriptor_size: int | None = None):
        if not callable(fitness_fn):
            raise ArgumentError(f"fitness_fn must be callable (genotype, seed) -> float, got {fitness_fn!r}")
        self.fitness_fn = fitness_fn
        self.descriptor_size = _descriptor_size(descriptor_size)

    @property
    def name(self) -> str:
        """The fitness function's name (for ``repr`` and run identities)."""
        return _callable_name(self.fitness_fn)

    def __call__(self, chunk: Any, seeds: np.ndarray, start: int) -> tuple[np.ndarray, np.ndarray | None]:
        count = len(seeds)
        fitness = np.empty(count, np.float32)
        d = self.descriptor_size
        descriptors = None if d is None else np.empty((count, d), np.float32)
        for i in range(count):
            index, seed = start + i, int(seeds[i])
            try:
                value = self.fitness_fn(_row(chunk, i), seed)
            except Exception as err:  # noqa: BLE001 - reported with the individual's index
                raise _failure(
                    f"fitness_fn raised on individual {index} (seed {seed})", err, index, seed
                ) from err
            if d is not None:
                if not (isinstance(value, tuple) and len(value) == 2):
                    raise FitnessError(
                        f"fitness_fn must return (fitness, descriptor) with descriptor_size={d}; on "
                        f"individual {index} (seed {seed}) it returned {_short(value)}",
                        index,
                        seed,
                    )
                value, descriptor = value
                descriptor = np.asarray(descriptor, np.float32)
                if descriptor.shape != (d,):
                    raise FitnessError(
                        f"fitness_fn returned a descriptor of shape {descriptor.shape} on individual "
                        f"{index} (seed {seed}); descriptor_size={d} needs shape ({d},)",
                        index,
                        seed,
                    )
                descriptors[i] = descriptor
            fitness[i] = _scalar(value, index, seed)
        return fitness, descriptors


class Batched:
    """``batch_fn(chunk, seeds [c]) -> fitness [c]`` (or ``-> (fitness [c], descriptors [c, d])``
    with ``descriptor_size=d``) called once per chunk: for vectorized simulators or one external
    process per chunk. Same call as :class:`PerIndividual`; a failure names the chunk's individuals
    (``start .. start + c - 1``), since which individual failed is unknown."""

    batched = True

    def __init__(self, batch_fn: Callable[[Any, np.ndarray], Any], descriptor_size: int | None = None):
        if not callable(batch_fn):
            raise ArgumentError(
                f"batch_fn must be callable (chunk, seeds) -> fitness [chunk], got {batch_fn!r}"
            )
        self.batch_fn = batch_fn
        self.descriptor_size = _descriptor_size(descriptor_size)

    @property
    def name(self) -> str:
        """The batch function's name (for ``repr`` and run identities)."""
        return _callable_name(self.batch_fn)

    def __call__(self, chunk: Any, seeds: np.ndarray, start: int) -> tuple[np.ndarray, np.ndarray | None]:
        count, d = len(seeds), self.descriptor_size
        where = f"the chunk of individuals {start}..{start + count - 1}"
        try:
            value = self.batch_fn(chunk, np.asarray(seeds))
        except Exception as err:  # noqa: BLE001 - reported with the chunk's indices
            raise _failure(f"batch_fn raised on {where}", err) from err
        descriptors = None
        if d is not None:
            if not (isinstance(value, tuple) and len(value) == 2):
                raise FitnessError(f"batch_fn must return (fitness, descriptors) with descriptor_size={d}; "
                                   f"on {where} it returned {_short(value)}")  # fmt: skip
            value, descriptors = value
            descriptors = np.asarray(descriptors, np.float32)
            if descriptors.shape != (count, d):
                raise FitnessError(
                    f"batch_fn returned descriptors of shape {descriptors.shape} on {where}; "
                    f"expected ({count}, {d})"
                )
        try:
            fitness = np.asarray(value, np.float32)
        except (TypeError, ValueError):
            fitness = None
        if fitness is None or fitness.shape != (count,):
            raise FitnessError(
                f"batch_fn must return fitness of shape ({count},); on {where} it returned {_short(value)}"
            )
        return fitness, descriptors


def as_chunk_fitness(fitness: Any) -> PerIndividual | Batched:
    """``fitness`` as a chunk fitness: a :class:`PerIndividual` or :class:`Batched` as it is, any
    other callable wrapped as ``PerIndividual(fitness)``."""
    if isinstance(fitness, (PerIndividual, Batched)):
        return fitness
    if not callable(fitness):
        raise ArgumentError(
            "fitness_fn must be a callable (genotype, seed) -> float, a PerIndividual or a Batched, "
            f"got {fitness!r}"
        )
    return PerIndividual(fitness)


def _scalar(value: Any, index: int, seed: int) -> float:
    if isinstance(value, (bool, np.bool_)) or np.ndim(value) != 0:
        raise FitnessError(f"fitness_fn must return a number; on individual {index} (seed {seed}) it "
                           f"returned {_short(value)}", index, seed)  # fmt: skip
    try:
        return float(value)
    except (TypeError, ValueError):
        raise FitnessError(f"fitness_fn must return a number; on individual {index} (seed {seed}) it "
                           f"returned {_short(value)}", index, seed) from None  # fmt: skip


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{type(value).__name__} {text[:77]}..."


def _callable_name(fn: Any) -> str:
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return f"{getattr(fn, '__module__', None) or type(fn).__module__}.{name}"


# ---- the Ray cluster ---------------------------------------------------------------------------


def _ray():
    try:
        import ray
    except ModuleNotFoundError as err:  # pragma: no cover - the extra is part of the test setup
        raise ModuleNotFoundError(
            "evotensor's Ray evaluators need ray: pip install 'evotensor[distributed]'"
        ) from err
    return ray


def connect(address: str | None = None, init_kwargs: dict[str, Any] | None = None) -> bool:
    """Connect this process to a Ray cluster; return whether this call started it (it then owns it).

    Already connected: nothing happens (``False``). Otherwise ``ray.init(address=address,
    **init_kwargs)``: ``address=None`` starts a local cluster (unless ``RAY_ADDRESS`` is set, which
    Ray then joins), ``"auto"`` or ``"ray://host:port"`` joins a running one. The dashboard is off
    unless ``init_kwargs`` asks for it. Returns ``True`` only when a local cluster was started.
    """
    ray = _ray()
    if ray.is_initialized():
        return False
    kwargs = {"include_dashboard": False, **(init_kwargs or {})}
    if address is not None:
        kwargs["address"] = address
    starts_local = kwargs.get("address") is None and not os.environ.get("RAY_ADDRESS")
    with warnings.catch_warnings():
        # Ray starts its processes with fork + exec, which JAX's warning about fork does not know
        warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
        ray.init(**kwargs)
    return starts_local


def _is_actor_failure(err: BaseException) -> bool:
    """A failure of the actor (its process or node), not of the code it ran."""
    ray = _ray()
    failures = (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError)
    return isinstance(err, failures) or isinstance(err, ray.exceptions.ObjectLostError)


class _Host:
    """The body of every pool actor: builds its worker object once and runs its methods."""

    def __init__(self, factory: Callable[[], Any]):
        self.worker = factory()

    def ready(self) -> int:
        return os.getpid()

    def call(self, method: str, *args: Any) -> Any:
        return getattr(self.worker, method)(*args)


class WorkerPool:
    """A fixed number of Ray actors, each holding one worker object ``factory()``, that runs method
    calls on them with fault handling. The machinery of :class:`RayEvaluator` and of the ES
    distributed-gradient mode (:mod:`evotensor.es.core.ray_gradient`).

    Args:
        factory: a picklable zero-argument callable building an actor's worker object (it runs once
            per actor, in the actor's process; it is put in Ray's object store once).
        num_actors: actors to start (``>= 1``).
        max_restarts: how often one call may kill its actor and be run again on a new one.
        timeout: seconds a call may run before its actor is killed and replaced (``None``: no limit;
            on a replaced actor the clock includes its start-up, a few seconds).
        actor_options: Ray actor options (``num_cpus`` (default 1), ``num_gpus``, ``resources``,
            ``runtime_env``, ...).

    The actors start at construction, which waits until all of them run (raises ``RuntimeError`` if
    they are not up within ``ACTOR_START_TIMEOUT`` seconds, e.g. a cluster without the CPUs asked
    for). :meth:`close` kills them.
    """

    def __init__(
        self,
        factory: Callable[[], Any],
        num_actors: int,
        *,
        max_restarts: int = 3,
        timeout: float | None = None,
        actor_options: dict[str, Any] | None = None,
    ):
        ray = _ray()
        self.num_actors = check_int(num_actors, "num_actors")
        self.max_restarts = check_int(max_restarts, "max_restarts", minimum=0)
        self.timeout = None if timeout is None else check_positive(timeout, "timeout")
        self.actor_options = {"num_cpus": 1, **(actor_options or {}), "max_restarts": 0}
        self._remote = ray.remote(_Host).options(**self.actor_options)
        self._factory = ray.put(factory)
        self.restarts = 0  # actors replaced over the pool's life
        self.actors = [self._remote.remote(self._factory) for _ in range(self.num_actors)]
        self._wait_ready(self.actors)
        self.last_slots: list[int] = []  # which actor ran each item of the last map

    def pids(self) -> list[int]:
        """The process id of each actor (asks them: a replaced actor has a new one)."""
        return list(_ray().get([actor.ready.remote() for actor in self.actors]))

    def _wait_ready(self, actors: list[Any]) -> list[int]:
        ray = _ray()
        refs = [a.ready.remote() for a in actors]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=ACTOR_START_TIMEOUT)
        if len(ready) < len(refs):
            for a in actors:
                ray.kill(a)
            cpus = ray.cluster_resources().get("CPU", 0)
            raise RuntimeError(
                f"only {len(ready)} of {len(refs)} Ray actors started within {ACTOR_START_TIMEOUT:.0f} s "
                f"(the cluster has {cpus:g} CPUs; each actor asks for {self.actor_options})"
            )
        try:
            return list(ray.get(refs))
        except ray.exceptions.RayActorError as err:
            for a in actors:
                ray.kill(a)
            raise RuntimeError(
                f"a Ray actor failed to start (its worker object's factory raised): {err}"
            ) from err

    def _replace(self, slot: int) -> None:
        ray = _ray()
        try:
            ray.kill(self.actors[slot], no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass
        self.actors[slot] = self._remote.remote(self._factory)
        self.restarts += 1

    def map(
        self,
        method: str,
        items: Sequence[tuple],
        *,
        affinity: Sequence[int] | None = None,
        describe: Callable[[int], str] | None = None,
    ) -> list[Any]:
        """``[worker.method(*item) for item in items]``, run on the actors; results in item order.

        Args:
            method: name of the worker object's method.
            items: argument tuples (Ray ``ObjectRef``s among them are resolved on the actor).
            affinity: the actor slot (``0 .. num_actors - 1``) of each item; default: whichever
                actor is free next. :attr:`last_slots` says where each item ran.
            describe: ``index -> str`` naming an item in error messages (``"item 3"`` by default).

        Raises:
            FitnessError: a worker raised it (re-raised on the driver with the original chained).
            ActorCrashError: an item killed its actor more than ``max_restarts`` times.
        """
        n = len(items)
        if affinity is not None and (
            len(affinity) != n or any(not 0 <= s < self.num_actors for s in affinity)
        ):
            raise ArgumentError(
                f"affinity must give an actor slot in [0, {self.num_actors}) for each of {n} items"
            )
        run = _MapRun(self, method, items, affinity, describe or (lambda i: f"item {i}"))
        try:
            run.drive()
        except BaseException:
            run.cancel()  # the actors stop working on this map (best effort)
            raise
        self.last_slots = run.slots
        return run.results

    def close(self) -> None:
        """Kill every actor (what they hold is lost)."""
        ray = _ray()
        for actor in self.actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self.actors = []


class _MapRun:
    """One :meth:`WorkerPool.map`: per-actor queues, at most ``QUEUE_DEPTH`` calls in flight per
    actor, replacement of failed actors, timeouts."""

    def __init__(self, pool: WorkerPool, method, items, affinity, describe):
        self.pool, self.method, self.items, self.describe = pool, method, items, describe
        n, actors = len(items), pool.num_actors
        self.pinned = affinity is not None
        self.queues = [collections.deque() for _ in range(actors)]  # items pinned to an actor
        self.shared = collections.deque(() if self.pinned else range(n))  # items for any actor
        for i, slot in enumerate(affinity or ()):
            self.queues[slot].append(i)
        self.results: list[Any] = [None] * n
        self.slots = [0] * n
        self.attempts = [0] * n
        self.running: dict[Any, tuple[int, int]] = {}  # ref -> (item, slot)
        self.on_slot = [collections.deque() for _ in range(actors)]  # refs in submission order
        self.busy_since = [time.monotonic()] * actors  # when the slot's current call started

    def submit(self, slot: int) -> None:
        while len(self.on_slot[slot]) < QUEUE_DEPTH:
            source = self.queues[slot] if self.queues[slot] else self.shared
            if not source:
                return
            i = source.popleft()
            if not self.on_slot[slot]:
                self.busy_since[slot] = time.monotonic()
            ref = self.pool.actors[slot].call.remote(self.method, *self.items[i])
            self.running[ref] = (i, slot)
            self.on_slot[slot].append(ref)

    def fail(self, slot: int, reason: str) -> None:
        """The actor in ``slot`` is gone: its first queued call was running (it takes the blame),
        the others had not started; all go back to the front of their queue on a new actor."""
        refs = list(self.on_slot[slot])
        self.on_slot[slot].clear()
        victim = self.running[refs[0]][0]
        self.attempts[victim] += 1
        for ref in reversed(refs):
            i, _ = self.running.pop(ref)
            (self.queues[slot] if self.pinned else self.shared).appendleft(i)
        self.pool._replace(slot)
        if self.attempts[victim] > self.pool.max_restarts:
            raise ActorCrashError(
                f"{self.describe(victim)} killed its Ray actor {self.attempts[victim]} times "
                f"(max_restarts={self.pool.max_restarts}); last failure: {reason}"
            )
        self.submit(slot)

    def collect(self, ref: Any) -> bool:
        """Take the result of ``ref`` (``True``), or handle its actor's failure (``False``)."""
        ray = _ray()
        i, slot = self.running[ref]
        try:
            value = ray.get(ref)
        except ray.exceptions.RayTaskError as err:
            raise _driver_error(err, self.describe(i)) from _cause(err)
        except Exception as err:
            if not _is_actor_failure(err):
                raise
            if getattr(err, "actor_init_failed", False):
                raise RuntimeError(f"a Ray actor failed to start (its worker factory raised): {err}") from err
            self.fail(slot, f"{type(err).__name__}: {_first_line(err)}")
            return False
        del self.running[ref]
        self.on_slot[slot].remove(ref)
        self.busy_since[slot] = time.monotonic()  # the next queued call starts now
        self.results[i], self.slots[i] = value, slot
        self.submit(slot)
        return True

    def drive(self) -> None:
        ray, timeout = _ray(), self.pool.timeout
        for slot in range(self.pool.num_actors):
            self.submit(slot)
        done = 0
        while done < len(self.items):
            wait = None  # until a result comes, or until the longest-running call times out
            if timeout is not None:
                busy = [self.busy_since[s] for s in range(self.pool.num_actors) if self.on_slot[s]]
                wait = max(0.0, min(busy) + timeout - time.monotonic()) if busy else 0.0
            ready, _ = ray.wait(list(self.running), num_returns=1, timeout=wait)
            for ref in ready:
                if ref in self.running:  # else: from an actor already replaced
                    done += self.collect(ref)
            if timeout is not None:
                now = time.monotonic()
                for slot in range(self.pool.num_actors):
                    if self.on_slot[slot] and now - self.busy_since[slot] > timeout:
                        self.fail(slot, f"timed out after {timeout:g} s")

    def cancel(self) -> None:
        ray = _ray()
        for ref in self.running:
            try:
                ray.cancel(ref)
            except Exception:  # noqa: BLE001 - best effort: the error that stopped the map matters
                pass
        self.running.clear()


def _cause(err: BaseException) -> BaseException | None:
    cause = getattr(err, "cause", None)
    if isinstance(cause, FitnessError):
        return cause.original
    return cause if isinstance(cause, BaseException) else None


def _first_line(err: BaseException) -> str:
    lines = [line for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else type(err).__name__


def _driver_error(err: BaseException, where: str) -> BaseException:
    """A worker's exception as the driver raises it: a :class:`FitnessError` as it was raised (its
    remote traceback as a note), anything else as a ``RuntimeError`` naming ``where``."""
    cause = getattr(err, "cause", None)
    if isinstance(cause, FitnessError):
        out = FitnessError(str(cause), cause.index, cause.seed, cause.remote_traceback)
        out.original = cause.original
        if cause.remote_traceback:
            out.add_note(f"traceback on the Ray actor:\n{cause.remote_traceback}")
        return out
    return RuntimeError(f"a Ray worker failed on {where}: {err}")


# ---- the evaluator -----------------------------------------------------------------------------


def default_num_actors(actor_options: dict[str, Any] | None = None) -> int:
    """As many actors as the connected cluster has free CPUs for (``num_cpus`` each, default 1); at
    least 1."""
    ray = _ray()
    per_actor = float((actor_options or {}).get("num_cpus", 1) or 0)
    cpus = float(ray.available_resources().get("CPU", 1))
    return max(1, int(cpus // per_actor) if per_actor > 0 else int(cpus))


class RayEvaluator:
    """A host-evaluated problem: a Python fitness evaluated chunk by chunk on a pool of Ray actors
    (module docstring: seeds, chunks, faults, lifetimes).

    Args:
        fitness_fn: ``fitness_fn(genotype, seed) -> float`` for one individual, or a
            :class:`PerIndividual` / :class:`Batched` (with ``descriptor_size`` for QD). Pickled
            (cloudpickle) and sent to every actor once.
        num_actors: actors in the pool; default: one per free CPU of the cluster.
        address: the Ray cluster to join when this process is not connected yet (see
            :func:`connect`); ``None`` starts a local one.
        chunk_size: individuals per Ray task; default ``ceil(pop / (4 * num_actors))``.
        max_restarts: how often one chunk may kill its actor and be run again on a new one.
        maximize: whether the fitness is to be maximized (the run loop negates it for strategies).
        init_kwargs: keyword arguments of ``ray.init`` when a cluster is started or joined
            (``num_cpus``, ``runtime_env``, ...).
        actor_options: Ray actor options (``num_cpus`` per actor, default 1; ``num_gpus``,
            ``resources``, ``runtime_env``).
        timeout: seconds one chunk may run before its actor is killed and the chunk re-run
            (``None``: no limit); counts against ``max_restarts``.

    ``evaluate(key, genotypes) -> Evaluation`` takes a pytree of arrays with a leading population
    axis ``[pop, ...]`` and returns ``fitness float32 [pop]`` (NumPy) in the fitness function's own
    orientation (and ``descriptor [pop, d]`` with a ``descriptor_size``).

    Example::

        problem = RayEvaluator(Batched(vectorized_fitness), num_actors=8, maximize=True)
        evaluation = problem.evaluate(jax.random.key(0), {"w": np.zeros((64, 10), np.float32)})
        problem.close()
    """

    evaluates_on_host = True

    def __init__(
        self,
        fitness_fn: Any,
        *,
        num_actors: int | None = None,
        address: str | None = None,
        chunk_size: int | None = None,
        max_restarts: int = 3,
        maximize: bool = False,
        init_kwargs: dict[str, Any] | None = None,
        actor_options: dict[str, Any] | None = None,
        timeout: float | None = None,
    ):
        self.fitness = as_chunk_fitness(fitness_fn)
        # public scalars are the run's identity (checked on resume): only what changes results
        self.maximize = _check_bool(maximize, "maximize")
        self.fitness_name = self.fitness.name
        self.batched = self.fitness.batched
        self.descriptor_size = self.fitness.descriptor_size
        self._num_actors = None if num_actors is None else check_int(num_actors, "num_actors")
        self._chunk_size = None if chunk_size is None else check_int(chunk_size, "chunk_size")
        self._max_restarts = check_int(max_restarts, "max_restarts", minimum=0)
        self._timeout = None if timeout is None else check_positive(timeout, "timeout")
        if address is not None and not isinstance(address, str):
            raise ArgumentError(
                f"address must be a str such as 'auto' or 'ray://host:10001', got {address!r}"
            )
        self._address = address
        self._init_kwargs = _check_dict(init_kwargs, "init_kwargs")
        self._actor_options = _check_dict(actor_options, "actor_options")
        self._pool: WorkerPool | None = None
        self._owns_cluster = False

    # -- lifetime ------------------------------------------------------------------------------
    @property
    def pool(self) -> WorkerPool:
        """The actor pool, started (with the cluster connection) on first use."""
        if self._pool is None:
            self._owns_cluster = connect(self._address, self._init_kwargs) or self._owns_cluster
            count = self._num_actors or default_num_actors(self._actor_options)
            self._pool = WorkerPool(
                functools.partial(_itself, self.fitness),
                count,
                max_restarts=self._max_restarts,
                timeout=self._timeout,
                actor_options=self._actor_options,
            )
        return self._pool

    def close(self) -> None:
        """Kill the actors and shut down a local cluster this evaluator started; a later
        ``evaluate`` starts them again."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._owns_cluster:
            _ray().shutdown()
            self._owns_cluster = False

    def __enter__(self) -> RayEvaluator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:  # a copy (e.g. sent elsewhere) starts its own pool
        return {**self.__dict__, "_pool": None, "_owns_cluster": False}

    def __repr__(self) -> str:
        kind = "Batched" if self.batched else "PerIndividual"
        extra = "" if self.descriptor_size is None else f", descriptor_size={self.descriptor_size}"
        return f"RayEvaluator({kind}({self.fitness_name}{extra}), maximize={self.maximize})"

    # -- evaluation ----------------------------------------------------------------------------
    def chunks(self, population_size: int) -> list[tuple[int, int]]:
        """The ``(start, stop)`` index ranges the population is cut into."""
        pop = check_int(population_size, "population_size")
        actors = self._num_actors or (self._pool.num_actors if self._pool else 1)
        size = self._chunk_size or max(1, math.ceil(pop / (4 * actors)))
        return [(start, min(start + size, pop)) for start in range(0, pop, size)]

    def evaluate(self, key: jax.Array, genotypes: Any) -> Evaluation:
        """Fitness (and descriptors) of every individual of ``genotypes`` (leading axis ``[pop]``);
        ``key``: the generation's evaluation key, from which every individual's seed is drawn."""
        population = jax.tree_util.tree_map(np.asarray, genotypes)
        leaves = jax.tree_util.tree_leaves(population)
        if not leaves or any(np.ndim(leaf) == 0 for leaf in leaves):
            raise ArgumentError("genotypes must be a pytree of arrays with a leading population axis")
        pop = int(leaves[0].shape[0])
        if any(leaf.shape[0] != pop for leaf in leaves):
            shapes = [leaf.shape for leaf in leaves]
            raise ArgumentError(f"genotypes' leaves must share the population axis, got shapes {shapes}")
        seeds = individual_seeds(key, pop)
        pool = self.pool
        ranges = self.chunks(pop)
        items = [
            (jax.tree_util.tree_map(lambda a, s=start, e=stop: a[s:e], population), seeds[start:stop], start)
            for start, stop in ranges
        ]
        out = pool.map("__call__", items, describe=lambda i: _chunk_name(*ranges[i]))
        fitness = np.concatenate([f for f, _ in out])
        descriptor = None if self.descriptor_size is None else np.concatenate([d for _, d in out])
        return Evaluation(fitness=fitness, descriptor=descriptor)


def _chunk_name(start: int, stop: int) -> str:
    return f"the chunk of individuals {start}..{stop - 1}"


def _itself(obj: Any) -> Any:
    return obj


def _check_bool(value: Any, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ArgumentError(f"{name} must be a bool, got {value!r}")
    return bool(value)


def _check_dict(value: Any, name: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ArgumentError(f"{name} must be a dict of keyword arguments or None, got {value!r}")
    return dict(value)
