"""Distributed evolution strategies on a Ray cluster, as in Salimans et al. (2017): every actor draws
its own part of the population from a shared seed, so the population itself never travels.

Salimans, Ho, Chen, Sidor, Sutskever (2017), "Evolution Strategies as a Scalable Alternative to
Reinforcement Learning", arXiv:1703.03864 (Algorithm 2: workers share the random seeds, send each
other only scalar returns and rebuild each other's perturbations).

:class:`RayGradientES` runs a *shardable* strategy (:mod:`evotensor.es.core.sharding`: OpenES,
PGPE, ARS, SNES, SimpleES, SepCMAES, ESMC, GuidedES, ASEBO) on a fitness that cannot be compiled
(a simulator on CPU, an external program), with the population split into ``num_shards``
sub-populations held by a pool of Ray actors. One generation:

1. the driver puts the small search state (mean, step sizes, optimizer moments: ``O(dims)``) and
   the generation's keys in Ray's object store once;
2. actor ``s`` samples sub-population ``s`` with the strategy's own ``_sample`` from
   ``jax.random.fold_in(ask_key, s)`` — the exact rows :func:`~evotensor.es.core.sharding.sharded`
   gives device ``s`` — evaluates it with the fitness and returns its ``rows`` fitness values;
3. the driver ranks the whole ``[pop]`` fitness (``_member_weights``: fitness shaping needs all of
   it) and sends actor ``s`` its slice of the weights;
4. actor ``s`` reduces its rows to the strategy's sufficient statistics (``_row_statistics``: sums
   such as ``sum_i w_i eps_i``, ``O(dims)``), the owner of the best row also returns that row;
5. the driver adds the statistics (in shard order) and runs the strategy's own update
   (``_update_from_statistics``).

Per actor and generation ``O(pop / shards + dims)`` numbers cross the network, never
``O(pop x dims)``; :attr:`RayGradientES.traffic` holds the measured bytes (pickled payloads) and the
history records them. The update is the unsharded ``tell`` of the gathered population (rows in the
strategy's own order, :func:`~evotensor.es.core.sharding.population_order`) up to float32 summation
order (tested against ``strategy.tell``); the sample depends on ``num_shards`` (like the sharded
sample depends on the device count) but not on the number of actors or on scheduling.

Keys follow :func:`evotensor.run`'s schedule (``init_key, loop_key = split(key)``, then
:func:`evotensor.core.run.generation_keys`), and individual ``i`` (its position in the shard layout)
gets the seed :func:`evotensor.distributed.ray_evaluator.individual_seeds` gives: the same fitness
calls as a :class:`~evotensor.distributed.ray_evaluator.RayEvaluator` would make for that layout.

Faults are those of :class:`~evotensor.distributed.ray_evaluator.WorkerPool`: an actor that dies is
replaced and its calls run again. A replaced actor that did not sample the shard rebuilds the rows
from the shared key before it reduces them (a sample is a pure function of the broadcast state and
key), so a crash between steps 2 and 4 costs a resample, never a re-evaluation.

Not supported: strategies with per-member state (PersistentES, NoiseReuseES: their perturbations
would have to stay on the actors between generations) and checkpoint/resume (keep the state that
:meth:`RayGradientES.step` returns).

Example::

    es = OpenES(256, solution=init_mlp(jax.random.key(0), (4, 16, 2)), sigma_init=0.1)
    with RayGradientES(es, Batched(cartpole.batch), maximize=True) as dist:
        result = dist.run(100, jax.random.key(1))   # a RunResult, as evotensor.run returns
"""

from __future__ import annotations

import functools
import pickle
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core.checks import ArgumentError, check_int, check_positive
from evotensor.core.evaluation import stand_ins_for_nonfinite, to_natural, worst_for_nonfinite
from evotensor.core.run import RunResult, check_params, generation_keys
from evotensor.distributed.ray_evaluator import (
    WorkerPool,
    as_chunk_fitness,
    connect,
    default_num_actors,
    individual_seeds,
)
from evotensor.es.core.base import keep_state_if_all_invalid, state_float_dtype
from evotensor.es.core.sharding import check_shardable, population_layout, population_order

__all__ = ["RayGradientES", "ShardWorker", "payload_bytes"]


def payload_bytes(obj: Any) -> int:
    """Bytes of ``obj`` pickled (protocol 5, as Ray ships NumPy arrays): what crosses the network."""
    return len(pickle.dumps(obj, protocol=5))


def to_host(tree: Any) -> Any:
    """``tree`` with NumPy leaves (PRNG-key leaves stay JAX arrays, which pickle by themselves)."""

    def leaf(a: Any) -> Any:
        if isinstance(a, jax.Array) and jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
            return a
        return np.asarray(a)

    return jax.tree_util.tree_map(leaf, tree)


class ShardWorker:
    """What each actor holds: the strategy, the fitness, and the rows of the shards it sampled in the
    current generation.

    Args:
        strategy: the shardable strategy.
        fitness: a chunk fitness (:func:`~evotensor.distributed.ray_evaluator.as_chunk_fitness`).
        rows: rows per shard.

    The broadcast of a generation is a dict ``{"token", "ask_key", "state", "params", "context"}``
    (``context``: ``()`` or the strategy's replicated ``_sample_context``).
    """

    def __init__(self, strategy: Any, fitness: Any, rows: int):
        self.strategy, self.fitness, self.rows = strategy, fitness, rows
        sample = lambda key, state, params, ctx: strategy._sample(key, state, params, rows, *ctx)[0]
        self._sample = jax.jit(sample)
        self._statistics = jax.jit(strategy._row_statistics)
        self._rows: dict[int, jax.Array] = {}
        self._token: Any = None

    def rows_of(self, shard: int, broadcast: dict[str, Any]) -> jax.Array:
        """``x [rows, dims]`` of ``shard``: drawn from ``fold_in(ask_key, shard)``, or cached."""
        if broadcast["token"] != self._token:
            self._rows, self._token = {}, broadcast["token"]
        if shard not in self._rows:
            key = jax.random.fold_in(broadcast["ask_key"], shard)
            self._rows[shard] = self._sample(
                key, broadcast["state"], broadcast["params"], broadcast["context"]
            )
        return self._rows[shard]

    def evaluate(self, shard: int, broadcast: dict[str, Any], seeds: np.ndarray) -> tuple[Any, Any]:
        """The fitness (and descriptors) of the shard's rows, as the genotypes the strategy asks."""
        x = self.rows_of(shard, broadcast)
        genotypes = jax.tree_util.tree_map(np.asarray, self.strategy.space.unravel_population(x))
        return self.fitness(genotypes, seeds, shard * self.rows)

    def statistics(
        self, shard: int, broadcast: dict[str, Any], weights: Any, aux: Any, best: int | None
    ) -> tuple[Any, np.ndarray | None]:
        """``(_row_statistics of the shard's rows with their weights, row best [dims] or None)``."""
        x = self.rows_of(shard, broadcast)
        stats = self._statistics(broadcast["state"], broadcast["params"], x, weights, aux)
        return to_host(stats), (None if best is None else np.asarray(x[best]))


class RayGradientES:
    """A shardable ES whose population is sampled, evaluated and reduced on Ray actors (module
    docstring).

    Args:
        strategy: a shardable strategy (:func:`~evotensor.es.core.sharding.check_shardable`) without
            per-member state.
        fitness_fn: ``fitness_fn(genotype, seed) -> float`` or a
            :class:`~evotensor.distributed.ray_evaluator.PerIndividual` /
            :class:`~evotensor.distributed.ray_evaluator.Batched` (descriptors are ignored).
        num_actors: actors in the pool; default one per free CPU of the cluster (at most
            ``num_shards``).
        num_shards: sub-populations; the population (or ESMC's ``population_size - 1``) must
            split into them as for :func:`~evotensor.es.core.sharding.sharded`. Default: the most,
            up to one per actor, that split it. Fix it to get the same run on clusters of different
            sizes (the sample depends on it).
        maximize: whether the fitness is to be maximized.
        address, init_kwargs, actor_options, max_restarts, timeout: as
            :class:`~evotensor.distributed.ray_evaluator.RayEvaluator` (``timeout`` per call).

    Methods: :meth:`init`, :meth:`step` (one generation), :meth:`run` (``generations`` of them, a
    :class:`~evotensor.core.run.RunResult`), :meth:`close` (or a ``with`` block). Actors start on the
    first :meth:`step` (or :meth:`start`) and live until :meth:`close`; from then on
    :attr:`num_actors`, :attr:`num_shards` and :attr:`rows` (per shard) hold the resolved counts.
    """

    def __init__(
        self,
        strategy: Any,
        fitness_fn: Any,
        *,
        num_actors: int | None = None,
        num_shards: int | None = None,
        maximize: bool = False,
        address: str | None = None,
        init_kwargs: dict[str, Any] | None = None,
        actor_options: dict[str, Any] | None = None,
        max_restarts: int = 3,
        timeout: float | None = None,
    ):
        check_shardable(strategy)
        kept = tuple(getattr(strategy, "shard_state_fields", ()))
        if kept:
            raise TypeError(
                f"{type(strategy).__name__} keeps per-member state ({', '.join(kept)}) between "
                "generations, which RayGradientES does not hold on its actors; run it with "
                "evotensor.es.core.sharding.sharded or evotensor.run with a RayEvaluator"
            )
        self.strategy = strategy
        self.fitness = as_chunk_fitness(fitness_fn)
        if not isinstance(maximize, (bool, np.bool_)):
            raise ArgumentError(f"maximize must be a bool, got {maximize!r}")
        self.maximize = bool(maximize)
        self.num_actors = None if num_actors is None else check_int(num_actors, "num_actors")
        self.num_shards = None if num_shards is None else check_int(num_shards, "num_shards")
        if self.num_shards is not None:
            self._layout(self.num_shards)  # refuse a population that does not split, now
        if address is not None and not isinstance(address, str):
            raise ArgumentError(
                f"address must be a str such as 'auto' or 'ray://host:10001', got {address!r}"
            )
        for name, value in (("init_kwargs", init_kwargs), ("actor_options", actor_options)):
            if value is not None and not isinstance(value, dict):
                raise ArgumentError(f"{name} must be a dict of keyword arguments or None, got {value!r}")
        self._address = address
        self._init_kwargs = dict(init_kwargs or {})
        self._actor_options = dict(actor_options or {})
        self._max_restarts = check_int(max_restarts, "max_restarts", minimum=0)
        self._timeout = None if timeout is None else check_positive(timeout, "timeout")
        self._pool: WorkerPool | None = None
        self._owns_cluster = False
        self._programs: dict[str, Any] = {}
        self._generation_token = 0
        self.traffic: dict[str, int] = {"to_actors": 0, "from_actors": 0}

    def _splits(self, shards: int) -> bool:
        try:
            population_layout(self.strategy, shards)
            return True
        except ValueError:
            return False

    def _layout(self, shards: int) -> tuple[np.ndarray, np.ndarray]:
        try:
            return population_layout(self.strategy, shards), population_order(self.strategy, shards)
        except ValueError as err:
            raise ArgumentError(f"num_shards={shards}: {err}") from None

    # -- lifetime ------------------------------------------------------------------------------
    def start(self) -> WorkerPool:
        """Connect to (or start) the cluster and start the actors, if not done yet; the pool."""
        if self._pool is None:
            self._owns_cluster = connect(self._address, self._init_kwargs) or self._owns_cluster
            if self.num_shards is None:  # the most sub-populations, up to one per actor, that split
                most = self.num_actors or default_num_actors(self._actor_options)
                self.num_shards = next(n for n in range(most, 0, -1) if self._splits(n))
            shards = self.num_shards
            self._source, self._order = self._layout(shards)
            self.rows = len(self._source) // shards
            actors = min(self.num_actors or default_num_actors(self._actor_options), shards)
            self.num_actors = actors
            factory = functools.partial(ShardWorker, self.strategy, self.fitness, self.rows)
            self._pool = WorkerPool(
                factory, actors, max_restarts=self._max_restarts, timeout=self._timeout,
                actor_options=self._actor_options,
            )  # fmt: skip
        return self._pool

    def close(self) -> None:
        """Kill the actors, and shut down a local cluster this object started."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._owns_cluster:
            import ray

            ray.shutdown()
            self._owns_cluster = False

    def __enter__(self) -> RayGradientES:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- the driver's compiled pieces ----------------------------------------------------------
    def _program(self, name: str) -> Callable[..., Any]:
        if name not in self._programs:
            strategy, source, order = self.strategy, jnp.asarray(self._source), jnp.asarray(self._order)
            maximize = self.maximize

            def weigh(state, params, natural):
                # what evotensor.run hands tell (minimized, NaN/inf as stand-ins), then sharded's tell
                fitness = stand_ins_for_nonfinite(-natural if maximize else natural)
                fitness = fitness.astype(state_float_dtype(state))[order]  # strategy row order
                if strategy.invalid_fitness_as_inf:
                    shown = jnp.where(jnp.isfinite(fitness), fitness, jnp.inf)
                else:
                    shown = worst_for_nonfinite(fitness)
                weights, aux = strategy._member_weights(state, shown, params)
                weights = jax.tree_util.tree_map(lambda w: w[source], weights)  # shard positions
                return weights, aux, fitness, shown, order[jnp.argmin(shown)]

            def update(key, state, params, stats, aux, fitness, shown, best_row):
                new, metrics = strategy._update_from_statistics(
                    key, state, params, stats, aux, shown, best_row
                )
                if strategy.freeze_on_all_invalid:
                    new = keep_state_if_all_invalid(
                        state, new, fitness, strategy.counter_fields, strategy.active_mask(state)
                    )
                return new, metrics

            context = getattr(strategy, "_sample_context", None)
            self._programs = {
                "weigh": jax.jit(weigh),
                "update": jax.jit(update),
                "context": jax.jit(context) if callable(context) else None,
            }
        return self._programs[name]

    # -- generations ---------------------------------------------------------------------------
    def init(self, key: jax.Array, params: Any = None) -> tuple[Any, jax.Array]:
        """``(strategy state, loop_key)`` for a run from ``key`` (:func:`evotensor.run`'s split)."""
        params = check_params(self.strategy, params)
        init_key, loop_key = jax.random.split(key)
        return self.strategy.init(init_key, params), loop_key

    def step(
        self, state: Any, keys: tuple[jax.Array, jax.Array, jax.Array], params: Any = None
    ) -> tuple[Any, dict[str, Any]]:
        """One generation from ``keys = (ask_key, eval_key, tell_key)``.

        Returns:
            ``(state, info)``: ``info`` has ``fitness [n * rows]`` (natural orientation, shard
            layout), ``best_index`` (its best position), ``best_row [dims]`` (that individual,
            flat), ``metrics`` (the strategy's) and ``bytes_to_actors`` / ``bytes_from_actors``.
        """
        pool = self.start()
        params = check_params(self.strategy, params)
        ask_key, eval_key, tell_key = keys
        context: tuple = ()
        if self._program("context") is not None:
            state, shared = self._program("context")(state, params)
            context = (shared,)
        self._generation_token += 1
        broadcast = {
            "token": (id(self), self._generation_token),
            "ask_key": ask_key,
            "state": to_host(state),
            "params": to_host(params),
            "context": to_host(context),
        }
        sent = payload_bytes(broadcast) * self.num_shards
        received = 0
        import ray

        ref = ray.put(broadcast)
        n, rows = self.num_shards, self.rows
        seeds = individual_seeds(eval_key, n * rows)
        items = [(s, ref, seeds[s * rows : (s + 1) * rows]) for s in range(n)]
        sent += sum(payload_bytes(item[2]) + payload_bytes(s) for s, item in enumerate(items))
        describe = lambda s: f"shard {s} (individuals {s * rows}..{(s + 1) * rows - 1})"
        out = pool.map("evaluate", items, describe=describe)
        received += sum(payload_bytes(o[0]) for o in out)
        natural = np.concatenate([o[0] for o in out])

        weights, aux, fitness, shown, best = self._program("weigh")(state, params, jnp.asarray(natural))
        weights, aux, best = to_host(weights), to_host(aux), int(best)
        items = [
            (
                s,
                ref,
                jax.tree_util.tree_map(lambda w, s=s: w[s * rows : (s + 1) * rows], weights),
                aux,
                best % rows if best // rows == s else None,
            )
            for s in range(n)
        ]
        sent += sum(payload_bytes(item[2:]) for item in items)
        out = pool.map("statistics", items, affinity=pool.last_slots, describe=describe)
        received += sum(payload_bytes(o) for o in out)
        stats = functools.reduce(lambda a, b: jax.tree_util.tree_map(np.add, a, b), [o[0] for o in out])
        best_row = out[best // rows][1]
        state, metrics = self._program("update")(
            tell_key, state, params, stats, aux, fitness, shown, best_row
        )
        self.traffic["to_actors"] += sent
        self.traffic["from_actors"] += received
        info = {
            "fitness": natural,
            "best_index": best,
            "best_row": best_row,
            "metrics": metrics,
            "bytes_to_actors": sent,
            "bytes_from_actors": received,
        }
        return state, info

    def run(
        self,
        generations: int,
        key: jax.Array,
        *,
        params: Any = None,
        callback: Callable[[dict[str, Any]], None] | None = None,
    ) -> RunResult:
        """``generations`` generations from ``key`` on :func:`evotensor.run`'s key schedule.

        ``callback`` (optional) is called after every generation with ``{"generation",
        "best_fitness", "generation_best", "generation_mean", "seconds"}`` (natural orientation)
        and may raise to stop. Returns a :class:`~evotensor.core.run.RunResult` (no run directory;
        ``evaluations`` counts every evaluated row, ESMC's repeated means included).
        """
        generations = check_int(generations, "generations")
        params = check_params(self.strategy, params)
        state, loop_key = self.init(key, params)
        self.start()
        best_fitness, best_genotype = np.inf, None  # minimized orientation
        history: dict[str, list[Any]] = {}
        t0 = time.perf_counter()
        for g in range(generations):
            state, info = self.step(state, generation_keys(loop_key, g), params)
            natural = info["fitness"]
            finite = np.isfinite(natural)
            minimized = np.where(finite, -natural if self.maximize else natural, np.inf)
            i = int(info["best_index"])
            if minimized[i] < best_fitness:
                best_fitness = float(minimized[i])
                best_genotype = self.strategy.space.unravel(jnp.asarray(info["best_row"]))
            values = natural[finite]
            row = {
                "best_fitness": float(to_natural(best_fitness, self.maximize)),
                "generation_best": float(to_natural(minimized[i], self.maximize)),
                "generation_mean": float(values.mean()) if values.size else 0.0,
                "generation_std": float(values.std()) if values.size else 0.0,
                "nonfinite": int((~finite).sum()),
                "bytes_to_actors": info["bytes_to_actors"],
                "bytes_from_actors": info["bytes_from_actors"],
            }
            for name, value in info["metrics"].items():
                if name not in row and np.ndim(value) == 0:
                    row[name] = np.asarray(value).item()
            for name, value in row.items():
                history.setdefault(name, []).append(value)
            if callback is not None:
                callback({"generation": g + 1, "seconds": time.perf_counter() - t0, **row})
        if best_genotype is None:  # no finite fitness in the whole run
            best_genotype = self.strategy.space.unravel(jnp.zeros((self.strategy.num_dims,), jnp.float32))
        return RunResult(
            state=state,
            best_genotype=best_genotype,
            best_fitness=float(to_natural(best_fitness, self.maximize)),
            history={k: np.asarray(v) for k, v in history.items()},
            generations=generations,
            evaluations=generations * self.num_shards * self.rows,
            compile_seconds=0.0,
            run_seconds=time.perf_counter() - t0,
        )
