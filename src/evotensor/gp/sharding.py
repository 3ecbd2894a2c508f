"""GP on many devices: the forest's population axis split over a mesh, the data's rows as an option.

GP's evaluators are custom calls (the native C++ evaluator through XLA's FFI on a CPU, the Pallas
kernel on a GPU) that XLA's SPMD partitioner cannot split: left to it, every device would run the
kernel on the whole forest. The functions here run them per device inside ``jax.shard_map``, on the
layout a :class:`ForestMesh` describes:

* **population axis** (``axis``, ``"pop"``): each device evaluates its own ``pop / n`` trees on
  every row with the chosen backend (the custom call's operand is the local ``[pop / n, max_len]``
  slice), and the ``[pop]`` fitness is gathered, replicated, for selection. Each tree's fitness is
  computed by the same kernel on the same rows as on one device, so the results are bit-identical to
  the same program on one device (:func:`evotensor.gp.fitness` under ``jit``). Every metric, linear
  scaling, per-case errors and constant optimization (the chosen trees split over the devices, each
  tuned on every row; the tuned forest comes back population-sharded: Lamarckian) work unchanged.
  A population that does not split evenly is padded with one-node trees whose results are dropped.
* **data axis** (optional, ``data_axis``, e.g. ``"data"``): each device evaluates its trees on its
  own ``n // d`` rows and the per-tree partial sums are added over the data axis with ``psum``: the
  metric's sums (:func:`evotensor.gp.metrics.row_terms`), linear scaling's moments (mean, ``M2`` and
  the co-moment ``C``, merged as Chan et al.'s pairwise update does in the evaluators:
  ``M2 = sum M2_s + n_s (mean_s - mean)^2``, ``C = sum C_s + (mean_s - mean) sum_s yc``), and
  constant optimization's centered normal equations (the same merge for the means and cross
  products; native linearization only). Rows that do not split evenly (``n mod d``) are evaluated by
  every device as a separate group that only the data axis' first device counts (zero weight
  elsewhere), so no row count is refused (only fewer rows than devices). The merge runs in float32
  (float64 with ``jax_enable_x64``): results equal one device to float32 summation order, about
  ``1e-6`` relative (``tests/gp/test_sharding.py`` states the tolerances it checks), and the native
  evaluator's fast ``sin``/``cos`` may take another (equally accurate) path for a row whose
  256-row chunk changed.

The data ``X, y`` stay constants of the compiled program, as on one device; each device reads its
own rows (``X`` is not copied into a mesh-placed array, so the same program runs in every process of
a ``jax.distributed`` job).

Entry points: :meth:`evotensor.gp.SymbolicRegression.on_mesh` (and every problem built on it) and
:meth:`evotensor.gp.GP.on_mesh` use them; :func:`evotensor.run` with ``mesh=`` calls both. Directly::

    layout = ForestMesh.of(jax.make_mesh((2, 2), ("pop", "data")), "pop", data_axis="data")
    fit = fitness_on_mesh(layout, forest, X, y, fs, "mse", linear_scaling=True)   # [pop], replicated
    pred = evaluate_on_mesh(layout, forest, X, fs)     # [pop, n, n_out], split along pop and data

Layouts are stated on :func:`evotensor.core.mesh.auto_mesh` of the mesh given (XLA's partitioner
places everything between the kernels). A whole forest moves between devices packed into one int32
array (:func:`pack_forest`), so gathering it is one collective (:meth:`ForestMesh.gathered`,
:func:`all_gather_forest`); GP's variation on a mesh (:mod:`evotensor.gp.mesh_variation`) uses it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from evotensor.core.checks import ArgumentError, check_choice
from evotensor.core.mesh import POPULATION_AXIS, auto_mesh, axis_size, check_mesh
from evotensor.core.packing import all_gather_rows
from evotensor.gp import constants, native, scaling
from evotensor.gp.encoding import Forest
from evotensor.gp.evaluate import (
    BACKENDS,
    check_fitness_arguments,
    checked_forest,
    choose_backend,
    evaluate,
    fitness,
)
from evotensor.gp.functions import CONST, PAD, FunctionSet
from evotensor.gp.jax_evaluator import block_sizes, fitness_sums_jax, moments_jax
from evotensor.gp.metrics import (
    MAXIMIZED_METRICS,
    METRICS,
    check_function_set,
    check_X,
    finalize_metric,
    forest_fields,
    is_concrete,
    row_terms,
    total_sum_of_squares,
)

__all__ = ["ForestMesh", "evaluate_on_mesh", "fitness_on_mesh", "optimize_on_mesh", "tune_on_mesh"]


@dataclasses.dataclass(frozen=True)
class ForestMesh:
    """Where a GP population and its data live on a mesh.

    Attributes:
        mesh: the mesh (its :func:`~evotensor.core.mesh.auto_mesh`).
        axis: the mesh axis the population (trees) is split along.
        data_axis: the mesh axis the data's rows are split along, or ``None`` (every device reads
            every row). Any other mesh axis holds copies.
    """

    mesh: Mesh
    axis: str = POPULATION_AXIS
    data_axis: str | None = None

    @staticmethod
    def of(
        mesh: Any,
        axis: str = POPULATION_AXIS,
        data_axis: str | None = None,
        population_size: int | None = None,
    ) -> ForestMesh:
        """A checked layout: ``axis`` (and ``data_axis``, another axis) must be axes of ``mesh``;
        with ``population_size``, ``axis``'s size must divide it (:func:`~evotensor.core.mesh.check_mesh`).
        Raises :class:`~evotensor.core.checks.ArgumentError` naming the argument."""
        mesh = check_mesh(mesh, axis, population_size)
        if data_axis is not None:
            if not isinstance(data_axis, str) or data_axis not in mesh.axis_names:
                raise ArgumentError(
                    f"data_axis must name one of the mesh's axes {tuple(mesh.axis_names)}, got {data_axis!r}"
                )
            if data_axis == axis:
                raise ArgumentError(
                    f"data_axis must differ from the population axis {axis!r}: the rows and the trees "
                    "are split along two different mesh axes"
                )
        return ForestMesh(auto_mesh(mesh), axis, data_axis)

    @property
    def tree_shards(self) -> int:
        """Devices along the population axis."""
        return axis_size(self.mesh, self.axis)

    @property
    def row_shards(self) -> int:
        """Devices along the data axis (1 without one)."""
        return 1 if self.data_axis is None else axis_size(self.mesh, self.data_axis)

    def sharding(self, *spec: Any) -> NamedSharding:
        """``NamedSharding(mesh, P(*spec))``."""
        return NamedSharding(self.mesh, P(*spec))

    def constrain(self, tree: Any, *spec: Any) -> Any:
        """Every leaf of ``tree`` laid out as ``P(*spec)`` (inside ``jit``: a sharding constraint)."""
        sharding = self.sharding(*spec)
        return jax.tree_util.tree_map(lambda a: jax.lax.with_sharding_constraint(a, sharding), tree)

    def forest_spec(self, tree: Any) -> Any:
        """``P(axis)`` for every leaf of ``tree``: a population split along the population axis."""
        return jax.tree_util.tree_map(lambda _: P(self.axis), tree)

    def shard_map(self, fn: Callable, in_specs: Any, out_specs: Any) -> Callable:
        # check_vma=False: the FFI and Pallas calls carry no replication rule for JAX to check
        return jax.shard_map(fn, mesh=self.mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)

    def gathered(self, forest: Forest) -> Forest:
        """Inside ``jit``: the population-sharded ``forest`` whole on every device, by one all-gather
        of its packed fields (:func:`all_gather_forest`) instead of one per field and op that XLA's
        partitioner would place around each use."""
        spec = self.forest_spec(forest)
        whole = jax.tree_util.tree_map(lambda _: P(), forest)
        return self.shard_map(lambda f: all_gather_rows(f, self.axis), (spec,), whole)(forest)

    def rows(self, n_points: int, what: str = "X") -> tuple[int, int]:
        """``(split, rest)``: the first ``split = d * (n // d)`` rows are divided over the data axis'
        ``d`` devices, the last ``rest = n mod d`` are a group of their own (see the module
        docstring). Raises :class:`ArgumentError` when ``what`` has fewer rows than devices."""
        d = self.row_shards
        if n_points < d:
            raise ArgumentError(
                f"{what} has {n_points} row(s), fewer than the {d} devices of data axis {self.data_axis!r}: "
                "split the rows over fewer devices (or use no data axis)"
            )
        split = d * (n_points // d)
        return split, n_points - split


# ---- forests ------------------------------------------------------------------------------------------


def _as_forest(forest: Any) -> Forest:
    """``forest`` as a :class:`Forest` pytree (a :class:`~evotensor.gp.encoding.DecodedForest`
    keeps its static ``n_vars``/``n_outputs``; anything else with the four fields is converted)."""
    if isinstance(forest, Forest):
        return forest
    opcode, value, size, output, _ = forest_fields(forest)
    return Forest(opcode, value, size, output)


def _is_population(forest: Any) -> bool:
    return len(getattr(getattr(forest, "opcode", None), "shape", ())) == 2


def _pad_trees(forest: Forest, multiple: int) -> Forest:
    """``forest`` with one-node trees appended up to a multiple of ``multiple`` trees (their results
    are dropped: they only make the population split evenly)."""
    pop, max_len = forest.opcode.shape
    extra = (-pop) % multiple
    if not extra:
        return forest
    first = jnp.broadcast_to(jnp.arange(max_len) == 0, (extra, max_len))
    pad = dataclasses.replace(
        forest,
        opcode=jnp.where(first, CONST, PAD).astype(forest.opcode.dtype),
        value=jnp.zeros((extra, max_len), forest.value.dtype),
        size=jnp.where(first, 1, 0).astype(forest.size.dtype),
        output=jnp.full((extra, max_len), -1, forest.output.dtype),
    )
    return jax.tree_util.tree_map(lambda a, b: jnp.concatenate([a, b]), forest, pad)


def _refuse_malformed(
    forest: Forest, X: jax.Array, fs: FunctionSet, n_outputs: int, materialize: bool
) -> None:
    """The boundary checks of :func:`evotensor.gp.evaluate` on the whole forest when it is concrete
    (a malformed tree is refused naming it, as on one device); a traced forest is checked on every
    device, where malformed trees get the worst fitness."""
    if is_concrete(forest.opcode, forest.value, forest.size, forest.output):
        checked_forest(forest, X, fs, n_outputs, materialize)


# ---- per-device partial results over a group of rows ---------------------------------------------------


def _metric_sums(arrays, X, yt, fs, n_outputs, metric, path):
    """``(term_sum, bad_sum)`` ``[trees]`` over the rows of ``X`` (:func:`evotensor.gp.metrics.row_terms`)."""
    if path == "native":
        return native.fitness_sums(arrays, X, yt, fs, n_outputs, METRICS.index(metric))
    if path == "jax":
        tb, rb = block_sizes(arrays[0].shape[0], X.shape[0], None, None)
        return fitness_sums_jax(arrays, X, yt, fs, n_outputs, metric, tb, rb)
    # the Pallas kernel's fused fitness returns the metric, not its sums: reduce predictions
    from evotensor.gp import pallas_kernel  # Pallas/Triton imported only where used

    pred = pallas_kernel.evaluate_pallas(arrays, X, fs, n_outputs)
    term, bad = row_terms(jnp.moveaxis(pred, 2, 0), yt, metric)
    return term.sum(-1), bad.sum(-1)


def _moments(arrays, X, yct, fs, n_outputs, path):
    """``(moments [trees, n_outputs, 3], bad_sum [trees])`` over the rows of ``X``; ``yct`` are the
    targets centered on the WHOLE data's mean (so the groups' co-moments add up)."""
    if path == "native":
        return native.scaling_moments(arrays, X, yct, fs, n_outputs)
    if path == "jax":
        tb, rb = block_sizes(arrays[0].shape[0], X.shape[0], None, None)
        return moments_jax(arrays, X, yct, fs, n_outputs, tb, rb)
    from evotensor.gp import pallas_kernel

    pred = pallas_kernel.evaluate_pallas(arrays, X, fs, n_outputs)
    return scaling.moments_from_predictions(pred, yct)


def _wide() -> Any:
    """The float type partial results are merged in: float64 when JAX has it, else float32."""
    return jnp.float64 if jax.config.jax_enable_x64 else jnp.float32


def _first_on(axis: str) -> jax.Array:
    """Inside ``shard_map``: whether this device is the first along ``axis``."""
    return jax.lax.axis_index(axis) == 0


def _add_groups(groups: list, data_axis: str | None) -> Any:
    """Sum pytrees of per-group contributions (each already weighted) over the groups and, inside
    ``shard_map``, the data axis (``None``: the groups of one device only)."""
    total = jax.tree_util.tree_map(lambda *a: sum(a[1:], a[0]), *groups)
    return total if data_axis is None else jax.lax.psum(total, data_axis)


def _merge_sums(groups: list, data_axis: str | None) -> tuple[jax.Array, jax.Array]:
    """``groups``: ``(weight, (term_sum, bad_sum))``; the whole data's sums."""
    wide = _wide()
    parts = [jax.tree_util.tree_map(lambda a, w=w: jnp.where(w, a.astype(wide), 0.0), s) for w, s in groups]
    term, bad = _add_groups(parts, data_axis)
    return term.astype(jnp.float32), bad.astype(jnp.float32)


def _merge_moments(groups: list, n_points: int, data_axis: str | None) -> tuple[jax.Array, jax.Array]:
    """``groups``: ``(weight, n_rows, (moments [t, k, 3], bad [t]), yc_sum [k])``, each group's
    moments over its own rows; the whole data's moments (Chan et al.'s pairwise merge)."""
    wide = _wide()

    def part(w, value):
        return jnp.where(w, value, 0.0)

    # 1. the mean: sum of n_g * mean_g over the groups and devices
    total = _add_groups([part(w, n * m[..., 0].astype(wide)) for w, n, (m, _), _ in groups], data_axis)
    mean = total / n_points
    # 2. M2 and C about the common mean, and the rows with a non-finite prediction
    pieces = []
    for w, n, (m, bad), yc_sum in groups:
        shift = m[..., 0].astype(wide) - mean
        m2 = m[..., 1].astype(wide) + n * shift * shift
        co = m[..., 2].astype(wide) + shift * yc_sum.astype(wide)
        pieces.append((part(w, m2), part(w, co), part(w, bad.astype(wide))))
    m2, co, bad = _add_groups(pieces, data_axis)
    moments = jnp.stack([mean, m2, co], axis=-1).astype(jnp.float32)
    return moments, bad.astype(jnp.float32)


def _merge_normal_equations(groups: list, data_axis: str | None):
    """``groups``: ``(weight, n_rows, (mean [t, Q], cov [t, Q, Q], sse [t, 2], bad [t]))`` as
    :func:`evotensor.gp.native.normal_equations` returns them over each group's rows; the whole data's
    statistics: means and centered cross products merged as Chan et al., ``sum (y - f)^2`` added, and
    the least squared error of ``a f + b`` as a sum of non-negative terms (no cancellation)::

        SSE* = sum_g SSE*_g + M2_g (a - a_g)^2 + n_g (dy_g - a df_g)^2

    with ``a = C / M2`` the whole data's slope, ``a_g`` the group's and ``df_g, dy_g`` the group's
    mean minus the whole data's (over the rows with a finite prediction)."""
    wide = _wide()

    def part(w, value):
        return jnp.where(w, value, 0.0)

    counted = []
    for w, n, (mean, cov, sse, bad) in groups:
        n_ok = (n - bad.astype(wide))[:, None]  # rows with a finite prediction (the others are left out)
        counted.append((w, n_ok, mean.astype(wide), cov.astype(wide), sse.astype(wide), bad.astype(wide)))
    parts = [(part(w, n_ok), part(w, n_ok * jnp.where(n_ok > 0, m, 0.0))) for w, n_ok, m, *_ in counted]
    n_ok_all, weighted = _add_groups(parts, data_axis)
    mu = weighted / jnp.maximum(n_ok_all, 1.0)
    pieces = []
    for w, n_ok, m, cov, sse, bad in counted:
        d = jnp.where(n_ok > 0, m - mu, 0.0)
        spread = cov + n_ok[..., None] * d[:, :, None] * d[:, None, :]
        pieces.append((part(w, spread), part(w, sse[:, 0]), part(w, bad)))
    cov, sse0, bad = _add_groups(pieces, data_axis)
    K = mu.shape[-1] - 2

    def slope(c):
        m2 = c[:, K, K]
        return jnp.where(m2 > 0, c[:, K, K + 1] / jnp.where(m2 > 0, m2, 1.0), 0.0)

    a = slope(cov)
    terms = []
    for w, n_ok, m, cov_g, sse, _ in counted:
        d = jnp.where(n_ok > 0, m - mu, 0.0)
        within = cov_g[:, K, K] * jnp.square(a - slope(cov_g))  # the group's own slope is not a
        between = n_ok[:, 0] * jnp.square(d[:, K + 1] - a * d[:, K])  # nor is its own intercept
        terms.append(part(w, sse[:, 1] + within + between))
    sse1 = _add_groups(terms, data_axis)
    f32 = lambda x: x.astype(jnp.float32)  # noqa: E731
    return f32(mu), f32(cov), f32(jnp.stack([sse0, sse1], axis=-1)), f32(bad)


def _row_groups(layout: ForestMesh, n_points: int, body: Callable) -> list:
    """Inside ``shard_map``: ``[(weight, n_rows, body(rows))]`` for this device's rows and, when the
    rows do not split evenly, the remaining rows (weight: the data axis' first device only)."""
    split, rest = layout.rows(n_points)
    groups = [(jnp.bool_(True), split // layout.row_shards, body("split"))]
    if rest:
        groups.append((_first_on(layout.data_axis), rest, body("rest")))
    return groups


def _row_specs(layout: ForestMesh, rows_axis: int) -> tuple[Any, Any]:
    """In-specs of the split rows and of the remaining rows of an array whose rows are ``rows_axis``."""
    split = [None] * (rows_axis + 1)
    split[rows_axis] = layout.data_axis
    return P(*split), P()


def _split_rows(a: jax.Array, split: int, rows_axis: int) -> tuple[jax.Array, jax.Array]:
    lead = (slice(None),) * rows_axis
    return a[lead + (slice(0, split),)], a[lead + (slice(split, None),)]


# ---- the entry points ------------------------------------------------------------------------------------


def fitness_on_mesh(
    layout: ForestMesh,
    forest: Any,
    X: Any,
    y: Any,
    function_set: FunctionSet,
    metric: str = "mse",
    n_outputs: int | None = None,
    *,
    backend: str = "auto",
    linear_scaling: bool = False,
) -> jax.Array:
    """:func:`evotensor.gp.fitness` with the forest's trees (and, with a data axis, ``X``'s rows)
    split over ``layout``'s mesh, every device running the backend on its own slice.

    Args:
        layout: a :class:`ForestMesh`.
        forest: ``[pop, max_len]`` (any population size; a single tree ``[max_len]`` is evaluated as
            :func:`evotensor.gp.fitness` does); X, y, function_set, metric, n_outputs, backend,
            linear_scaling: as in :func:`evotensor.gp.fitness`.

    Returns:
        float32 ``[pop]``, replicated on the mesh: bit-identical to :func:`evotensor.gp.fitness` under
        ``jit`` without a data axis; with one, equal to float32 summation order (module docstring).
    """
    fs, X, yt, n_out = check_fitness_arguments(X, y, function_set, metric, n_outputs, backend, linear_scaling)
    if not _is_population(forest):
        return fitness(forest, X, y, fs, metric, n_out, backend=backend, linear_scaling=linear_scaling)
    forest = _as_forest(forest)
    _refuse_malformed(forest, X, fs, n_out, materialize=False)
    pop = forest.opcode.shape[0]
    trees = layout.constrain(_pad_trees(forest, layout.tree_shards), layout.axis)
    if layout.data_axis is None:

        def per_device(f, X, y):
            return fitness(f, X, y, fs, metric, n_out, backend=backend, linear_scaling=linear_scaling)

        specs = (layout.forest_spec(trees), P(), P())
        out = layout.shard_map(per_device, specs, P(layout.axis))(trees, X, jnp.asarray(y, jnp.float32))
    else:
        out = _fitness_by_rows(
            layout, trees, X, yt, fs, metric, n_out, choose_backend(backend, fs), linear_scaling
        )
    return layout.constrain(out[:pop], None)


def _fitness_by_rows(layout, trees, X, yt, fs, metric, n_out, path, linear_scaling):
    """The fitness of ``trees`` (padded) with the rows split along the data axis: ``[pop]``."""
    n = X.shape[0]
    split, _ = layout.rows(n)
    _, yct, syy = scaling.centered_targets(yt)
    targets = yct if linear_scaling else yt
    X_split, X_rest = _split_rows(X, split, 0)
    t_split, t_rest = _split_rows(targets, split, 1)

    def per_device(f, X_split, t_split, X_rest, t_rest):
        arrays, _, valid = checked_forest(f, X_split, fs, n_out, materialize=path == "pallas")
        data = {"split": (X_split, t_split), "rest": (X_rest, t_rest)}
        if linear_scaling:

            def body(which):
                Xg, tg = data[which]
                return _moments(arrays, Xg, tg, fs, n_out, path)

            groups = _row_groups(layout, n, body)
            yc_sums = {"split": t_split.sum(axis=1), "rest": t_rest.sum(axis=1)}
            named = zip(("split", "rest"), groups)
            merged = _merge_moments(
                [(w, k, s, yc_sums[which]) for which, (w, k, s) in named], n, layout.data_axis
            )
        else:

            def body(which):
                Xg, tg = data[which]
                return _metric_sums(arrays, Xg, tg, fs, n_out, metric, path)

            merged = _merge_sums([(w, s) for w, _, s in _row_groups(layout, n, body)], layout.data_axis)
        return merged, valid

    x_specs, t_specs = _row_specs(layout, 0), _row_specs(layout, 1)
    in_specs = (layout.forest_spec(trees), x_specs[0], t_specs[0], x_specs[1], t_specs[1])
    out_specs = ((P(layout.axis), P(layout.axis)), P(layout.axis))
    rows = (
        layout.constrain(X_split, layout.data_axis),
        layout.constrain(t_split, None, layout.data_axis),
        X_rest,
        t_rest,
    )
    (stat, bad), valid = layout.shard_map(per_device, in_specs, out_specs)(trees, *rows)
    if linear_scaling:
        stat = scaling.scaled_sse(stat, syy, n)
    out = finalize_metric(stat, bad, metric, n, n_out, total_sum_of_squares(yt))
    return jnp.where(valid, out, -jnp.inf if metric in MAXIMIZED_METRICS else jnp.inf)


def evaluate_on_mesh(
    layout: ForestMesh,
    forest: Any,
    X: Any,
    function_set: FunctionSet,
    n_outputs: int = 1,
    *,
    backend: str = "auto",
) -> jax.Array:
    """:func:`evotensor.gp.evaluate` with the trees (and, with a data axis, the rows) split over
    ``layout``'s mesh: predictions ``float32 [pop, n_points, n_outputs]``, split along the population
    axis (and the data axis), each row's prediction computed by the same kernel as on one device.
    Arguments as in :func:`evotensor.gp.evaluate`; a single tree is evaluated as it does."""
    fs = check_function_set(function_set)
    check_choice(backend, "backend", BACKENDS)
    X = check_X(X)
    if not _is_population(forest):
        return evaluate(forest, X, fs, n_outputs, backend=backend)
    forest = _as_forest(forest)
    _refuse_malformed(forest, X, fs, n_outputs, materialize=True)
    pop = forest.opcode.shape[0]
    trees = layout.constrain(_pad_trees(forest, layout.tree_shards), layout.axis)

    def per_device(f, X):
        return evaluate(f, X, fs, n_outputs, backend=backend)

    tree_spec = layout.forest_spec(trees)
    if layout.data_axis is None:
        out = layout.shard_map(per_device, (tree_spec, P()), P(layout.axis))(trees, X)
        return out[:pop]
    split, rest = layout.rows(X.shape[0])
    X_split, X_rest = _split_rows(X, split, 0)
    X_split = layout.constrain(X_split, layout.data_axis)
    out = layout.shard_map(per_device, (tree_spec, P(layout.data_axis)), P(layout.axis, layout.data_axis))(
        trees, X_split
    )
    if rest:  # the remaining rows: every device of the data axis computes them for its trees
        tail = layout.shard_map(per_device, (tree_spec, P()), P(layout.axis))(trees, X_rest)
        out = jnp.concatenate([out, tail], axis=1)
    return out[:pop]


def optimize_on_mesh(layout: ForestMesh) -> Callable:
    """A stand-in for :func:`evotensor.gp.constants.optimize_constants` (same signature and results)
    that tunes the batch of trees split over ``layout``'s mesh: without a data axis each device runs
    :func:`~evotensor.gp.constants.optimize_constants` on its own trees over every row (bit-identical
    to one device); with one, the Levenberg-Marquardt steps run on the (population-sharded) batch and
    each linearization runs the native kernel per device on its trees and rows, the statistics merged
    over the data axis (native linearization only: the jax path is refused with an
    :class:`ArgumentError`). Pass it as ``ConstantOptimizer(...)(..., optimize=optimize_on_mesh(layout))``."""

    def optimize(forest: Any, X: Any, y: Any, function_set: FunctionSet, **options: Any):
        batch = _as_forest(forest)
        if not _is_population(batch):
            return constants.optimize_constants(batch, X, y, function_set, **options)
        count = batch.opcode.shape[0]
        trees = layout.constrain(_pad_trees(batch, layout.tree_shards), layout.axis)
        if layout.data_axis is None:

            def per_device(f, X, y):
                return constants.optimize_constants(f, X, y, function_set, **options)

            specs = (layout.forest_spec(trees), P(), P())
            X, y = jnp.asarray(X, jnp.float32), jnp.asarray(y, jnp.float32)
            value, loss = layout.shard_map(per_device, specs, (P(layout.axis), P(layout.axis)))(trees, X, y)
            return value[:count], loss[:count]
        path = constants.choose_backend(options.get("backend", "auto"), function_set)
        if path != "native":
            raise ArgumentError(
                "constant optimization with the rows split over a data axis needs the native "
                f"linearization (backend 'native' on a CPU), but backend={options.get('backend', 'auto')!r} "
                f"resolves to {path!r} here: use a mesh without a data axis for constant optimization"
            )
        statistics = _normal_equations_on_mesh(layout)
        value, loss = constants.optimize_constants(
            trees, X, y, function_set, normal_equations=statistics, **options
        )
        return value[:count], loss[:count]

    return optimize


def tune_on_mesh(
    layout: ForestMesh,
    optimizer: Any,
    key: jax.Array,
    forest: Forest,
    minimized: jax.Array,
    X: Any,
    y: Any,
    function_set: FunctionSet,
    **options: Any,
) -> Forest:
    """``optimizer`` (a :class:`~evotensor.gp.constants.ConstantOptimizer`) applied to the
    population-sharded ``forest`` ``[pop, max_len]`` with its per-tree ``minimized`` loss ``[pop]``,
    everything inside one ``shard_map`` over the population axis (no data axis): every device gathers
    the forest, chooses the same batch, tunes its own share of it (``ceil(batch / n)`` trees) and
    gathers the tuned constants back; returns the forest with the tuned constants written back, split
    along the axis as it came. Three collectives (the forest, the loss, the tuned batch) instead of
    the dozens XLA's partitioner places around the choice, the gather and the write-back of a
    sharded forest; the same results as one device (every tree is tuned on its own)."""
    n, axis = layout.tree_shards, layout.axis
    X, y = jnp.asarray(X, jnp.float32), jnp.asarray(y, jnp.float32)

    def optimize(batch: Any, X: Any, y: Any, fs: FunctionSet, **kw: Any):
        whole = _pad_trees(_as_forest(batch), n)
        count, k = batch.opcode.shape[0], whole.opcode.shape[0] // n
        start = jax.lax.axis_index(axis) * k
        mine = jax.tree_util.tree_map(lambda a: jax.lax.dynamic_slice_in_dim(a, start, k), whole)
        value, loss = constants.optimize_constants(mine, X, y, fs, **kw)
        packed = jnp.concatenate([value, loss[:, None].astype(value.dtype)], axis=1)
        packed = jax.lax.all_gather(packed, axis, tiled=True)[:count]  # one collective for both
        return packed[:, :-1], packed[:, -1]

    def per_device(key, local, minimized, X, y):
        whole = all_gather_rows(local, axis)
        value, _ = optimizer(key, whole, minimized, X, y, function_set, optimize=optimize, **options)
        rows = local.opcode.shape[0]
        start = jax.lax.axis_index(axis) * rows
        return dataclasses.replace(local, value=jax.lax.dynamic_slice_in_dim(value, start, rows))

    forest = _as_forest(forest)
    spec = layout.forest_spec(forest)
    run = layout.shard_map(per_device, (P(), spec, P(), P(), P()), spec)
    return run(key, forest, layout.constrain(minimized, None), X, y)


def _normal_equations_on_mesh(layout: ForestMesh) -> Callable:
    """:func:`evotensor.gp.native.normal_equations` with the trees and rows split over the mesh."""

    def statistics(arrays, X, y, slots, fs):
        n = X.shape[0]
        split, _ = layout.rows(n, "X (constant optimization)")
        y = jnp.asarray(y, jnp.float32).reshape(-1)
        X_split, X_rest = _split_rows(X, split, 0)
        y_split, y_rest = _split_rows(y, split, 0)

        def per_device(arrays, slots, X_split, y_split, X_rest, y_rest):
            data = {"split": (X_split, y_split), "rest": (X_rest, y_rest)}

            def body(which):
                Xg, yg = data[which]
                return native.normal_equations(arrays, Xg, yg, slots, fs)

            return _merge_normal_equations(_row_groups(layout, n, body), layout.data_axis)

        pop_spec = P(layout.axis)
        in_specs = ((pop_spec,) * 4, pop_spec, P(layout.data_axis), P(layout.data_axis), P(), P())
        rows = (layout.constrain(X_split, layout.data_axis), layout.constrain(y_split, layout.data_axis))
        arrays = layout.constrain(tuple(arrays), layout.axis)
        slots = layout.constrain(slots, layout.axis)
        return layout.shard_map(per_device, in_specs, (pop_spec,) * 4)(arrays, slots, *rows, X_rest, y_rest)

    return statistics
