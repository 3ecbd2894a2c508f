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

Through the one entry point: every shardable strategy has ``on_mesh(mesh, axis)`` (the
:mod:`evotensor.core.mesh` hook, from :class:`ShardableStrategy`), which returns a
:class:`MeshStrategy`: the same ``init/ask/tell`` protocol on this module's ``ask`` and ``tell``, so
``evotensor.run(es, problem, generations, key, mesh=mesh)`` runs it with the population split for
sampling, evaluation and the update alike. Strategies without the hooks have no ``on_mesh``: the
run loop then replicates their state and splits only the evaluation of their population.

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
from evotensor.core.mesh import auto_mesh, check_mesh
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
    return jax.device_put(state, state_layout(strategy, state, mesh, axis_name))


def state_layout(strategy: Any, state: Any, mesh: Mesh, axis_name: str = "pop") -> Any:
    """Per-leaf ``NamedSharding`` of a strategy state as :func:`sharded` keeps it (same structure as
    ``state``): the per-member fields (``strategy.shard_state_fields``) split along ``axis_name``,
    every other leaf replicated."""
    _num_shards(mesh, axis_name)
    specs = _state_specs(strategy, state, axis_name)
    return jax.tree_util.tree_map(lambda spec: NamedSharding(mesh, spec), specs, is_leaf=_is_spec)


def _is_spec(x: Any) -> bool:
    return isinstance(x, P)


def _state_specs(strategy: Any, state: Any, axis_name: str) -> Any:
    fields = tuple(getattr(strategy, "shard_state_fields", ()))
    specs = jax.tree_util.tree_map(lambda _: P(), state)
    return specs.replace(**{f: P(axis_name) for f in fields}) if fields else specs


def _constrainer(mesh: Mesh, axis_name: str) -> Callable[[Any, NamedSharding], Any]:
    """How a layout is stated inside ``jit``: explicit-sharding meshes (``jax.make_mesh``'s default)
    need ``reshard``, auto ones take a ``with_sharding_constraint``."""
    explicit = mesh.axis_types[mesh.axis_names.index(axis_name)] == jax.sharding.AxisType.Explicit
    return jax.sharding.reshard if explicit else jax.lax.with_sharding_constraint


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
    source = population_layout(strategy, n)  # strategy-order index of each sharded position
    order = population_order(strategy, n)  # sharded position of each row in strategy order
    size = len(source)  # rows of the sharded population (pop, or more when rows are repeated)
    rows = size // n
    context_hook = getattr(strategy, "_sample_context", None)
    split, whole = NamedSharding(mesh, P(axis_name)), NamedSharding(mesh, P())

    def state_specs(state):
        return _state_specs(strategy, state, axis_name)

    constrain = _constrainer(mesh, axis_name)

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
    # recognized by its name, not isinstance: the machinery imports no algorithm (OpenES's own module
    # imports this one through its base class's ``on_mesh``)
    if getattr(es, "name", None) != "open_es":
        raise TypeError(f"es must be an OpenES, got {type(es).__name__}")
    return sharded(es, mesh, axis_name)


class MeshStrategy:
    """A shardable strategy laid out on a mesh: what ``strategy.on_mesh(mesh, axis)`` returns, and
    what ``evotensor.run(strategy, problem, ..., mesh=mesh)`` runs.

    The :class:`~evotensor.core.Strategy` protocol (``default_params``, ``init``, ``ask``, ``tell``)
    over the strategy's own state and params, with :func:`sharded`'s ``ask`` and ``tell``: the
    population ``[population_size, ...]`` is split along ``axis`` and never whole on one device,
    the per-member state fields stay split with it (:meth:`state_shardings`), everything else is
    replicated. Public attributes of the strategy (``space``, ``num_dims``, ``mean_solution``,
    ``name``, ...) are its own, so a :class:`MeshStrategy` reads like the strategy it lays out.

    What to expect: the sharded sample is drawn per device from ``fold_in(key, device)`` (module
    docstring), so for the same key a run on a mesh draws a different population than a run on one
    device, from the same distribution, and follows a different (equally good) trajectory; the
    update of a given population is the one-device update up to float32 summation order (tested
    against a one-device emulation that draws every device's rows itself). The same key on the same
    number of devices gives the same run.

    Attributes:
        strategy: the strategy laid out.
        mesh, axis: the mesh (with Auto axes: :func:`~evotensor.core.mesh.auto_mesh`) and the axis
            that splits the population.
        population_size: rows of the sharded population: the strategy's population size, or more for
            strategies that repeat a row on every device (ESMC: ``population_size + n - 1``, see the
            module docstring); ``ask`` returns and ``tell`` takes this many.
        order: ``int [strategy.population_size]`` (:func:`population_order`): ``x[order]`` puts a
            sharded population in the strategy's own row order.

    Raises (at construction): :class:`~evotensor.core.checks.ArgumentError` for a bad mesh or axis,
    ``ValueError`` when the population does not split over the axis (pairs stay on one device).
    """

    def __init__(self, strategy: Any, mesh: Mesh, axis: str = "pop"):
        check_shardable(strategy)
        # the same devices with Auto axes, as run() uses them: init then lays the state out by a
        # sharding constraint, which explicit axes would refuse outside a ``jax.set_mesh`` context
        self.mesh = auto_mesh(check_mesh(mesh, axis))
        self.axis = axis
        self.strategy = strategy
        n = _num_shards(self.mesh, axis)
        self._sharded_ask, self._sharded_tell = sharded(strategy, self.mesh, axis)
        self.population_size = len(population_layout(strategy, n))
        self.order = population_order(strategy, n)

    def default_params(self) -> Any:
        """The strategy's ``default_params()``."""
        return self.strategy.default_params()

    def init(self, key: jax.Array, params: Any = None) -> Any:
        """The strategy's initial state, laid out as :meth:`state_shardings` says."""
        state = self.strategy.init(key, params)
        return jax.tree_util.tree_map(jax.lax.with_sharding_constraint, state, self.state_shardings(state))

    def ask(self, key: jax.Array, state: Any, params: Any = None) -> tuple[Any, Any]:
        """``(genotypes [population_size, ...] split along axis, state)`` (:func:`sharded`)."""
        return self._sharded_ask(key, state, params)

    def tell(
        self, key: jax.Array, state: Any, genotypes: Any, evaluation: Any, params: Any = None
    ) -> tuple[Any, dict[str, jax.Array]]:
        """``(state, metrics)`` from the sharded population and its ``[population_size]`` minimized
        fitness (:func:`sharded`)."""
        return self._sharded_tell(key, state, genotypes, evaluation, params)

    def state_shardings(self, state: Any) -> Any:
        """Where the run loop keeps ``state`` between compiled chunks (:func:`state_layout`)."""
        return state_layout(self.strategy, state, self.mesh, self.axis)

    def on_mesh(self, mesh: Mesh, axis: str = "pop") -> MeshStrategy:
        """The strategy laid out on another mesh (not nested in this one)."""
        return MeshStrategy(self.strategy, mesh, axis)

    def __getattr__(self, name: str) -> Any:
        # only public attributes are the strategy's: its private sharding hooks stay its own, so a
        # MeshStrategy is never mistaken for a strategy that :func:`sharded` could lay out again
        strategy = self.__dict__.get("strategy")
        if name.startswith("_") or strategy is None:
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")
        return getattr(strategy, name)

    def __repr__(self) -> str:
        return f"{self.strategy!r}.on_mesh({_num_shards(self.mesh, self.axis)} devices along {self.axis!r})"


class ShardableStrategy:
    """Mixin of the strategies that implement the :class:`Shardable` hooks: gives them ``on_mesh``,
    the hook of :mod:`evotensor.core.mesh` that ``evotensor.run(..., mesh=mesh)`` calls. Strategies
    without the hooks (CMA-ES, xNES, DE, PSO, the GAs, ...) have no ``on_mesh``: on a mesh their
    state is replicated and only their evaluation is split."""

    def on_mesh(self, mesh: Mesh, axis: str = "pop") -> MeshStrategy:
        """This strategy with its population split over ``mesh[axis]`` (:class:`MeshStrategy`)."""
        return MeshStrategy(self, mesh, axis)
