"""Population-axis sharding for evolution strategies, on one host or many.

:func:`sharded` turns a strategy into a jitted ``(ask, tell)`` pair whose population ``[pop, dims]``
is split along ``pop`` over one axis of a ``jax.sharding.Mesh``, and no device ever holds the whole
population:

* **ask**: inside ``shard_map`` device ``s`` draws its own ``rows = pop / n`` candidates from
  ``jax.random.fold_in(key, s)``;
* **tell**: the ``[pop]`` fitness vector is replicated (ranks and other fitness shaping need all of
  it) and turned into per-member weights; each device reduces its own rows to the strategy's
  *sufficient statistics* (sums over rows such as ``sum_i w_i z_i`` and ``sum_i w_i z_i^2``), one
  ``psum`` adds them, and the strategy's own update code runs on the result, replicated. The best
  candidate's row (for best-so-far tracking) comes from its owner by a second ``psum``.

So only ``[pop]`` fitness/weights, ``[dims]``-sized statistics and one ``[dims]`` row cross devices
(tested on the compiled HLO). The same code runs over several processes after
``jax.distributed.initialize()`` (tested with two CPU processes; see below).

Shardable strategies — every one whose candidates are independent rows ``mean + sigma * noise`` and
whose update needs only weighted sums over rows: :class:`~evotensor.es.open_es.OpenES`,
:class:`~evotensor.es.pgpe.PGPE`, :class:`~evotensor.es.ars.ARS`, :class:`~evotensor.es.snes.SNES`,
:class:`~evotensor.es.simple_es.SimpleES`, :class:`~evotensor.es.sep_cma_es.SepCMAES`,
:class:`~evotensor.es.persistent_es.PersistentES` and
:class:`~evotensor.es.noise_reuse_es.NoiseReuseES` (their per-pair ``perturbation`` state is sharded
too: each device keeps the rows of its own pairs), :class:`~evotensor.es.esmc.ESMC` (see its layout
below), :class:`~evotensor.es.guided_es.GuidedES` and :class:`~evotensor.es.asebo.ASEBO` (their rows
are independent once the guiding subspace is known: it is computed once per generation, in the
replicated part of the program, and handed to every shard). Any other strategy raises ``TypeError``.

A strategy is shardable when it implements this protocol (:class:`Shardable`); its unsharded ``tell``
runs the same hooks on the whole population (:func:`evotensor.es.core.gradient_es.tell_by_statistics`),
so the update math exists once:

* ``_sample(key, state, params, rows) -> (x [rows, dims], state)`` — its ``ask`` for ``rows``
  candidates (its ``_ask`` is ``_sample(..., population_size)``);
* ``_member_weights(state, fitness [pop], params) -> (weights, aux)`` — ``weights`` a pytree of
  ``[pop]`` arrays (split with the rows), ``aux`` anything replicated (a baseline, ``sigma_R``);
* ``_row_statistics(state, params, x [rows, dims], weights [rows], aux) -> stats`` — a pytree of
  sums over the rows;
* ``_update_from_statistics(key, state, params, stats, aux, fitness [pop], best_row [dims])``
  ``-> (state, metrics)``;
* ``shard_pairs`` (rows ``i`` and ``i + rows/2`` are mirrored pairs) and ``shard_state_fields``
  (state fields with one row per member or pair, sharded with the population).

Two optional hooks:

* ``_sample_context(state, params) -> (state, context)`` — the part of sampling that every shard
  shares (Guided ES's orthonormal basis, ASEBO's PCA of its gradient buffer). :func:`sharded`'s
  ``ask`` runs it once, outside ``shard_map``, and passes the replicated ``context`` to
  ``_sample(key, state, params, rows, context)``; the unsharded ``ask`` does the same with one shard.
* ``_shard_layout(num_shards) -> source [n * rows]`` (int NumPy) — the strategy row held at each
  position of the sharded population, when that is not the default below; a row may be held by
  several shards (its fitness is then taken from the first position). It raises ``ValueError`` when
  the population cannot be split ``num_shards`` ways.

Row layout. With ``n`` shards, shard ``s`` holds rows ``s*rows .. (s+1)*rows - 1`` of the sharded
population. For strategies with mirrored pairs, shard ``s`` holds ``[mean + e_s; mean - e_s]`` with
``e_s`` drawn from ``fold_in(key, s)``, so pairs never straddle devices; :func:`population_order`
gives the permutation to the strategy's own row order (pairs at ``i`` and ``i + pop/2``). The sample
differs from the unsharded ``ask`` for the same key (equally distributed); the update is the
unsharded update of that sample up to float32 summation order (tested against the unsharded
``tell`` on the gathered population).

ESMC's population is its mean (row 0, the baseline ``f(mean)``) plus ``N = (pop - 1) / 2`` mirrored
pairs, an odd count that cannot be split evenly. Its sharded population has ``pop + n - 1`` rows:
every shard holds ``[mean; mean + sigma e_s; mean - sigma e_s]`` with ``N / n`` pairs, so each
shard is self-contained; the baseline is shard 0's copy and the other ``n - 1`` copies of the mean
are evaluated but ignored (``n - 1`` extra evaluations per generation, e.g. 7 of 1025 on 8 devices).
``ask`` and ``tell`` then take ``[pop + n - 1]`` rows and fitness values (:func:`population_layout`);
``(pop - 1)`` must be divisible by ``2 n``.

Example (4 CPU devices via ``XLA_FLAGS=--xla_force_host_platform_device_count=4``)::

    mesh = jax.make_mesh((4,), ("pop",))
    es = SNES(1024, num_dims=100_000)
    ask, tell = sharded(es, mesh)
    state = shard_state(es, es.init(key), mesh)   # optional: the first ask then compiles only once
    x, state = ask(k1, state)           # x: [1024, 100000], sharded 4 ways along pop
    state, metrics = tell(k2, state, x, fitness_fn(x))

Multi-host: call ``jax.distributed.initialize(coordinator, num_processes, process_id)`` in every
process (on CPU first ``jax.config.update("jax_cpu_collectives_implementation", "gloo")``), build
the mesh over ``jax.devices()`` (all processes' devices), and run the same program in every
process: ``ask`` returns a global array of which each process holds its own devices' rows, the
fitness function evaluates them where they are, and ``tell`` returns a replicated state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from evotensor.core.evaluation import Evaluation, worst_for_nonfinite
from evotensor.es.core.base import keep_state_if_all_invalid, state_float_dtype

HOOKS = ("_sample", "_member_weights", "_row_statistics", "_update_from_statistics")
SHARDABLE = "OpenES, PGPE, ARS, SNES, SimpleES, SepCMAES, PersistentES, NoiseReuseES, ESMC, GuidedES, ASEBO"


class Shardable(Protocol):
    """What :func:`sharded` needs of a strategy (see the module docstring)."""

    population_size: int
    num_dims: int
    shard_pairs: bool
    shard_state_fields: tuple[str, ...]

    def _sample(self, key: jax.Array, state: Any, params: Any, rows: int) -> tuple[jax.Array, Any]: ...

    def _member_weights(self, state: Any, fitness: jax.Array, params: Any) -> tuple[Any, Any]: ...

    def _row_statistics(self, state: Any, params: Any, x: jax.Array, weights: Any, aux: Any) -> Any: ...

    def _update_from_statistics(
        self, key: jax.Array, state: Any, params: Any, stats: Any, aux: Any, fitness: jax.Array, best_row: Any
    ) -> tuple[Any, dict[str, jax.Array]]: ...


def population_sharding(mesh: Mesh, axis_name: str = "pop") -> NamedSharding:
    """``NamedSharding`` that splits the leading (population) axis over ``axis_name``."""
    _num_shards(mesh, axis_name)
    return NamedSharding(mesh, P(axis_name))


def shard_population(population: Any, mesh: Mesh, axis_name: str = "pop") -> Any:
    """Place every leaf of a population pytree (leading ``pop`` axis) sharded along ``axis_name``."""
    sharding = population_sharding(mesh, axis_name)
    n = mesh.shape[axis_name]
    for leaf in jax.tree_util.tree_leaves(population):
        if leaf.shape[0] % n:
            raise ValueError(
                f"population axis {leaf.shape[0]} is not divisible by the {n} shards of {axis_name!r}"
            )
    return jax.device_put(population, sharding)


def shard_state(strategy: Any, state: Any, mesh: Mesh, axis_name: str = "pop") -> Any:
    """Place a strategy state as :func:`sharded`'s ``ask``/``tell`` keep it: the per-member fields
    (``strategy.shard_state_fields``) split along ``axis_name``, every other leaf replicated.

    Optional: ``ask`` places a fresh state itself, but a state placed beforehand lets the first call
    compile the same program as every later one (one compilation instead of two).
    """
    _num_shards(mesh, axis_name)
    fields = tuple(getattr(strategy, "shard_state_fields", ()))
    shardings = jax.tree_util.tree_map(lambda _: NamedSharding(mesh, P()), state)
    if fields:
        shardings = shardings.replace(**{f: NamedSharding(mesh, P(axis_name)) for f in fields})
    return jax.device_put(state, shardings)


def _num_shards(mesh: Mesh, axis_name: str) -> int:
    if axis_name not in mesh.axis_names:
        raise ValueError(f"axis_name {axis_name!r} is not an axis of the mesh {mesh.axis_names}")
    return int(mesh.shape[axis_name])


def check_shardable(strategy: Any) -> None:
    """Raise ``TypeError`` (naming the strategy) unless it implements the :class:`Shardable` hooks."""
    missing = [h for h in HOOKS if not callable(getattr(strategy, h, None))]
    if missing:
        raise TypeError(
            f"{type(strategy).__name__} cannot be sharded along the population (its update is not a "
            f"sum over independently drawn rows; it lacks {', '.join(missing)}). Shardable: {SHARDABLE}"
        )


def population_layout(strategy: Any, num_shards: int) -> np.ndarray:
    """``source [n * rows]``: the strategy row (in its own, unsharded order) at each position of the
    population sharded ``num_shards`` ways; shard ``s`` holds positions ``s*rows .. (s+1)*rows - 1``.

    A permutation of ``arange(pop)`` unless the strategy repeats rows (ESMC's mean, one copy per
    shard: ``n * rows = pop + n - 1``). Raises ``ValueError`` if the population does not split.
    """
    custom = getattr(strategy, "_shard_layout", None)
    if callable(custom):
        return np.asarray(custom(num_shards), dtype=np.int64)
    pop = strategy.population_size
    pairs = bool(getattr(strategy, "shard_pairs", False))
    if pop % (2 * num_shards if pairs else num_shards):
        what = f"2 * {num_shards}" if pairs else f"{num_shards}"
        raise ValueError(
            f"population_size {pop} of {type(strategy).__name__} must be divisible by {what} (the "
            f"{num_shards} shards{', pairs stay on one device' if pairs else ''})"
        )
    if not pairs:
        return np.arange(pop)
    rows = pop // num_shards
    half = rows // 2
    pair = np.arange(pop // 2)
    plus = (pair // half) * rows + pair % half  # sharded position of the k-th "+" row
    return np.argsort(np.concatenate([plus, plus + half]))


def population_order(strategy: Any, num_shards: int) -> np.ndarray:
    """``order [pop]`` such that ``x_sharded[order]`` is in the strategy's own row order.

    For strategies with mirrored pairs (:attr:`shard_pairs`), the unsharded order puts the mirror of
    row ``i`` at ``i + pop/2``; the sharded layout keeps each pair on one shard (see the module
    docstring). A row held by several shards (ESMC's mean) is taken from its first position.
    Otherwise the two orders are the same and ``order`` is ``arange(pop)``.
    """
    source = population_layout(strategy, num_shards)
    values, first = np.unique(source, return_index=True)
    if not np.array_equal(values, np.arange(strategy.population_size)):
        raise ValueError(f"the shard layout of {type(strategy).__name__} does not cover every row")
    return first


def sharded(
    strategy: Any, mesh: Mesh, axis_name: str = "pop"
) -> tuple[Callable[..., tuple[Any, Any]], Callable[..., tuple[Any, dict]]]:
    """Jitted ``(ask, tell)`` of ``strategy`` with the population sharded over ``mesh[axis_name]``.

    Args:
        strategy: a shardable strategy (module docstring); ``population_size`` must be divisible
            by the number of shards (by twice that number with mirrored pairs; ESMC:
            ``population_size - 1`` by twice that number).
        mesh: the device mesh (may span processes; explicit or auto axes); other mesh axes replicate.
        axis_name: the mesh axis that splits the population.

    Returns:
        ``ask(key, state, params=None) -> (genotypes [pop, ...] sharded along pop, state)`` and
        ``tell(key, state, genotypes, evaluation, params=None) -> (state, metrics)`` with the
        strategy's own state, params and template (``evaluation`` an :class:`Evaluation` or
        ``[pop]`` minimized fitness; NaN/inf handled as in the unsharded ``tell``). ``pop`` here is
        ``len(population_layout(strategy, n))``: the population size, or more for strategies that
        repeat a row on every shard (ESMC: ``population_size + n - 1``). Both are
        ``jax.jit`` functions (``.lower(...)`` works); per-member state fields stay sharded.

    Raises:
        TypeError: the strategy is not shardable. ValueError: bad ``axis_name`` or population size.
    """
    check_shardable(strategy)
    n = _num_shards(mesh, axis_name)
    fields = tuple(getattr(strategy, "shard_state_fields", ()))
    source = population_layout(strategy, n)  # strategy-order index of each sharded position
    order = population_order(strategy, n)  # sharded position of each row in strategy order
    size = len(source)  # rows of the sharded population (pop, or more when rows are repeated)
    rows = size // n
    context_hook = getattr(strategy, "_sample_context", None)
    split, whole = NamedSharding(mesh, P(axis_name)), NamedSharding(mesh, P())

    def state_specs(state):
        specs = jax.tree_util.tree_map(lambda _: P(), state)
        return specs.replace(**{f: P(axis_name) for f in fields}) if fields else specs

    # explicit-sharding meshes need each layout stated (reshard); auto ones take it as a constraint
    explicit = mesh.axis_types[mesh.axis_names.index(axis_name)] == jax.sharding.AxisType.Explicit
    constrain = jax.sharding.reshard if explicit else jax.lax.with_sharding_constraint

    def place(state):
        return jax.tree_util.tree_map(
            lambda a, s: constrain(a, NamedSharding(mesh, s)), state, state_specs(state)
        )

    def local_ask(key, state, params, *context):
        key = jax.random.fold_in(key, jax.lax.axis_index(axis_name))
        return strategy._sample(key, state, params, rows, *context)

    def local_statistics(state, params, x, weights, aux, best):
        stats = jax.lax.psum(strategy._row_statistics(state, params, x, weights, aux), axis_name)
        # the best candidate's row: its owner contributes it, every other shard zeros
        mine = jax.lax.axis_index(axis_name) == best // rows
        row = jax.lax.psum(jnp.where(mine, x[best % rows], jnp.zeros_like(x[0])), axis_name)
        return stats, row

    def _params(params):
        return strategy.default_params() if params is None else params

    @jax.jit
    def ask(key: jax.Array, state: Any, params: Any = None) -> tuple[Any, Any]:
        params = _params(params)
        state = place(state)
        context = ()
        if callable(context_hook):  # shared by every shard: computed once, replicated
            state, shared = context_hook(state, params)
            state, context = place(state), (shared,)
        specs = state_specs(state)
        x, state = jax.shard_map(
            local_ask,
            mesh=mesh,
            in_specs=(P(), specs, P(), *(P() for _ in context)),
            out_specs=(P(axis_name), specs),
        )(key, state, params, *context)
        return strategy.space.unravel_population(x), state

    @jax.jit
    def tell(
        key: jax.Array, state: Any, genotypes: Any, evaluation: Any, params: Any = None
    ) -> tuple[Any, dict[str, jax.Array]]:
        params = _params(params)
        fitness = evaluation.fitness if isinstance(evaluation, Evaluation) else jnp.asarray(evaluation)
        if fitness.shape != (size,):
            raise ValueError(f"fitness must have shape ({size},), got {fitness.shape}")
        x = strategy.space.ravel_population(genotypes)
        if x.shape != (size, strategy.num_dims):
            raise ValueError(f"genotypes flatten to {x.shape}, expected ({size}, {strategy.num_dims})")
        # the [pop] fitness vector is replicated: it is the only per-member data that crosses devices
        fitness = constrain(fitness.astype(state_float_dtype(state)), whole)
        fitness = fitness[order]  # strategy row order: shaping, pairing and tie-breaks as unsharded
        if strategy.invalid_fitness_as_inf:
            shown = jnp.where(jnp.isfinite(fitness), fitness, jnp.inf)
        else:
            shown = worst_for_nonfinite(fitness)
        weights, aux = strategy._member_weights(state, shown, params)
        weights = jax.tree_util.tree_map(lambda w: constrain(w[source], split), weights)
        best = jnp.asarray(order)[jnp.argmin(shown)]  # sharded position of the best row
        state = place(state)
        stats, best_row = jax.shard_map(
            local_statistics,
            mesh=mesh,
            in_specs=(state_specs(state), P(), P(axis_name), P(axis_name), P(), P()),
            out_specs=(P(), P()),
        )(state, params, constrain(x, split), weights, aux, best)
        new, metrics = strategy._update_from_statistics(key, state, params, stats, aux, shown, best_row)
        if strategy.freeze_on_all_invalid:
            new = keep_state_if_all_invalid(
                state, new, fitness, strategy.counter_fields, strategy.active_mask(state)
            )
        return place(new), metrics

    return ask, tell


def sharded_open_es(es: Any, mesh: Mesh, axis_name: str = "pop"):
    """:func:`sharded` for an :class:`~evotensor.es.open_es.OpenES` (kept for compatibility)."""
    from evotensor.es.open_es import OpenES  # an algorithm: imported here, machinery never needs it

    if not isinstance(es, OpenES):
        raise TypeError(f"es must be an OpenES, got {type(es).__name__}")
    return sharded(es, mesh, axis_name)
