"""Parsimony as two objectives: the hall of fame, the (loss, size) Pareto front, PySR's score and
model selection, and NSGA-II's non-dominated sorting and crowding distance.

Everything that runs every generation is fixed-shape, jittable and free of host loops:

* :class:`HallOfFame`: the best tree seen so far for every complexity (tree length in nodes, a
  weighted variable counting as one (:mod:`evotensor.gp.weighted`); ``1..max_len``):
  ``loss [max_len]`` (``+inf`` where none yet) and ``forest [max_len, max_len]``;
  :func:`update` takes a told population in (a per-length segment minimum, lowest index on ties; an
  entry is replaced only by a strictly better loss). Its Pareto front is a prefix-minimum scan over
  complexity (:meth:`HallOfFame.front_mask`).
* :func:`pareto_front`: the non-dominated ``(size, loss)`` points of any ``n`` points, ordered by
  size with strictly decreasing loss, as fixed-size indices plus a mask
  (:func:`pareto_front_indices` is the NumPy convenience).
* :func:`front_scores` and :func:`select_model`: PySR's score ``-d log(loss) / d complexity`` between
  consecutive front members (0 for the first, ``+inf`` for a member of loss 0) and its
  ``model_selection`` rules ``"accuracy"`` (lowest loss), ``"score"`` (highest score) and ``"best"``
  (highest score among the members whose loss is at most 1.5x the lowest loss; PySR's default).
* :func:`nondominated_rank`, :func:`crowding_distance`, :func:`nsga2_order`: NSGA-II (Deb et al.
  2002) on ``(loss, size)``, both minimized (``nsga2_order`` eliminates duplicate points by
  default, see there). A point with a non-finite loss is infeasible: it is
  dominated by every feasible point (Deb's constrained domination), all infeasible points share the
  last front and have crowding distance 0. Sizes are integers in ``[1, max_size]``, so the ranks
  come from one sweep over the sizes: ``O(n log n)`` for the sort plus ``O(n * max_size)``, memory
  ``O(n)`` (never the ``n x n`` domination matrix).

Showing a front: :func:`front_table` (rows of complexity, loss, score, chosen, expression),
:func:`format_front` (plain text), :func:`write_front_csv` / :func:`read_front_csv` and
:func:`plot_front`.

Example::

    hof = HallOfFame.empty(max_len)
    hof = update(hof, forest, loss, forest.length)            # every generation, inside jit
    rows = front_table(hof, function_set)                     # after the run, on the host
    chosen = next(r for r in rows if r["chosen"])             # PySR's "best" rule
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core.checks import ArgumentError, check_int
from evotensor.core.pareto import crowding_distance, feasible_loss, nondominated_rank
from evotensor.core.pytree import pytree_dataclass
from evotensor.gp.encoding import Forest

__all__ = [
    "BEST_LOSS_FACTOR",
    "FRONT_COLUMNS",
    "MODEL_SELECTIONS",
    "HallOfFame",
    "crowding_distance",
    "duplicate_mask",
    "format_front",
    "front_scores",
    "front_table",
    "nondominated_rank",
    "nsga2_order",
    "pareto_front",
    "pareto_front_indices",
    "plot_front",
    "read_front_csv",
    "select_model",
    "update",
    "write_front_csv",
]

BEST_LOSS_FACTOR = 1.5
"""PySR's ``model_selection="best"``: candidates have ``loss <= 1.5 * min(loss)`` (PySR PR #177)."""

FRONT_COLUMNS = ("complexity", "loss", "score", "chosen", "expression")
"""The columns of :func:`front_table`'s rows and of ``front.csv``."""


# -- hall of fame ----------------------------------------------------------------------------------------


@pytree_dataclass
class HallOfFame:
    """The best tree seen so far for every complexity (length in nodes).

    Attributes:
        loss: float32 ``[max_len]``: entry ``c - 1`` is the lowest (minimized) loss seen among trees of
            length ``c``; ``+inf`` where none has been seen (or only non-finite losses).
        forest: Forest ``[max_len, max_len]``: row ``c - 1`` is that tree (padding where none).
    """

    loss: jax.Array
    forest: Forest

    @staticmethod
    def empty(max_len: int) -> HallOfFame:
        """A hall of fame for trees of ``max_len`` slots, with no entry."""
        max_len = check_int(max_len, "max_len")
        return HallOfFame(loss=jnp.full(max_len, jnp.inf, jnp.float32), forest=Forest.empty(max_len, max_len))

    @property
    def max_len(self) -> int:
        """Slots per tree (static), also the number of complexities."""
        return int(self.loss.shape[-1])

    @property
    def complexity(self) -> jax.Array:
        """int32 ``[max_len]``: ``1, 2, ..., max_len``."""
        return jnp.arange(1, self.max_len + 1, dtype=jnp.int32)

    @property
    def exists(self) -> jax.Array:
        """bool ``[max_len]``: the complexities that have an entry."""
        return jnp.isfinite(self.loss)

    def front_mask(self) -> jax.Array:
        """bool ``[max_len]``: the entries on the Pareto front, i.e. whose loss is strictly below the
        loss of every simpler entry (a prefix-minimum scan over complexity)."""
        before = jnp.concatenate([jnp.full(1, jnp.inf, self.loss.dtype), self.loss[:-1]])
        return self.exists & (self.loss < jax.lax.cummin(before))

    def front_size(self) -> jax.Array:
        """int32 ``[]``: the number of entries on the Pareto front."""
        return jnp.sum(self.front_mask()).astype(jnp.int32)


def update(hof: HallOfFame, forest: Forest, loss: jax.Array, length: jax.Array | None = None) -> HallOfFame:
    """``hof`` with the trees of a told population taken in.

    Args:
        hof: the hall of fame (``max_len`` equal to the forest's).
        forest: Forest ``[pop, max_len]``.
        loss: ``[pop]`` minimized loss; a non-finite loss never enters.
        length: int ``[pop]`` the trees' complexities (default ``forest.length``; ``GP`` passes
            :meth:`~evotensor.gp.GP.complexity`, where a weighted variable counts as one node,
            :func:`evotensor.gp.weighted.weighted_length`); a length outside ``[1, max_len]`` (an
            empty slot) never enters.

    Returns:
        The new hall of fame. For every complexity ``c``, the population's lowest loss among trees of
        length ``c`` (the lowest index on ties) replaces the entry only if strictly lower.
    """
    L = hof.max_len
    if forest.opcode.ndim != 2 or forest.max_len != L:
        raise ArgumentError(
            f"forest must be [pop, {L}] (the hall of fame's max_len), got {forest.opcode.shape}"
        )
    pop = forest.opcode.shape[0]
    loss = jnp.asarray(loss, jnp.float32)
    length = forest.length if length is None else jnp.asarray(length, jnp.int32)
    if loss.shape != (pop,) or length.shape != (pop,):
        raise ArgumentError(f"loss and length must have shape ({pop},), got {loss.shape} and {length.shape}")
    valid = jnp.isfinite(loss) & (length >= 1) & (length <= L)
    seg = jnp.where(valid, length - 1, L)  # segment L collects what never enters
    key = jnp.where(valid, loss, jnp.inf)
    best = jax.ops.segment_min(key, seg, num_segments=L + 1)[:L]
    # the lowest index among the trees that reach their segment's minimum
    hits = valid & (key == best[jnp.minimum(seg, L - 1)])
    index = jnp.where(hits, jnp.arange(pop, dtype=jnp.int32), pop)
    winner = jax.ops.segment_min(index, seg, num_segments=L + 1)[:L]
    better = best < hof.loss  # +inf (no candidate) never is
    rows = jax.tree_util.tree_map(lambda a: a[jnp.minimum(winner, pop - 1)], forest)
    new_forest = jax.tree_util.tree_map(
        lambda new, old: jnp.where(better[:, None], new, old), rows, hof.forest
    )
    return HallOfFame(loss=jnp.where(better, best, hof.loss), forest=new_forest)


# -- Pareto front of n points ----------------------------------------------------------------------------


def pareto_front(loss: jax.Array, size: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The non-dominated points of ``(size, loss)`` (both minimized), jittable, fixed-size.

    Args:
        loss: ``[n]``; a non-finite loss is never on the front.
        size: ``[n]`` (int or float) complexities.

    Returns:
        ``(index int32 [n], valid bool [n])``: the first ``valid.sum()`` entries of ``index`` are the
        front's points, by size ascending with strictly decreasing loss; of equal points only the one
        of lowest index is listed. The rest of ``index`` is ``-1``.
    """
    key, feasible = feasible_loss(loss)
    size = jnp.asarray(size)
    n = key.shape[0]
    idx = jnp.arange(n, dtype=jnp.int32)
    order = jnp.lexsort((idx, key, size))  # size, then loss, then index
    sorted_loss = key[order]
    before = jnp.concatenate([jnp.full(1, jnp.inf, jnp.float32), sorted_loss[:-1]])
    on_front = feasible[order] & (sorted_loss < jax.lax.cummin(before))
    # compact: the front's points first, in their sorted order (a stable sort of the flags)
    compact = jnp.argsort(~on_front, stable=True)
    valid = on_front[compact]
    return jnp.where(valid, order[compact], -1).astype(jnp.int32), valid


def pareto_front_indices(loss: Any, size: Any) -> np.ndarray:
    """NumPy convenience of :func:`pareto_front`: the front's indices ``int [k]`` (size ascending)."""
    loss, size = np.asarray(loss), np.asarray(size)
    if loss.ndim != 1 or loss.shape != size.shape:
        raise ArgumentError(
            f"loss and size must be [n] arrays of one shape, got {loss.shape} and {size.shape}"
        )
    index, valid = pareto_front(jnp.asarray(loss), jnp.asarray(size))
    return np.asarray(index)[np.asarray(valid)]


# -- PySR's score and model selection ---------------------------------------------------------------------


def front_scores(loss: jax.Array, complexity: jax.Array, valid: jax.Array | None = None) -> jax.Array:
    """PySR's score of each front member: ``-(log loss_i - log loss_{i-1}) / (c_i - c_{i-1})`` against
    the previous member, 0 for the first, ``+inf`` for a member of loss 0 (PySR's rule).

    Args:
        loss: ``[k]`` the front's losses (``>= 0``; PySR refuses negative losses: a negative one gives
            NaN here), ordered by ``complexity`` ascending.
        complexity: ``[k]`` ascending.
        valid: optional bool ``[k]`` (e.g. :meth:`HallOfFame.front_mask`): only these entries are
            members; "previous" means the previous valid entry. Invalid entries score NaN.

    Returns:
        float32 ``[k]``.
    """
    loss = jnp.asarray(loss, jnp.float32)
    c = jnp.asarray(complexity, jnp.float32)
    k = loss.shape[0]
    valid = jnp.ones(k, bool) if valid is None else jnp.asarray(valid, bool)
    idx = jnp.arange(k, dtype=jnp.int32)
    last = jax.lax.cummax(jnp.where(valid, idx, -1))
    prev = jnp.concatenate([jnp.full(1, -1, jnp.int32), last[:-1]])
    p = jnp.maximum(prev, 0)
    with_prev = -jnp.log(loss / loss[p]) / (c - c[p])
    score = jnp.where(prev < 0, 0.0, jnp.where(loss > 0, with_prev, jnp.inf))
    score = jnp.where(loss < 0, jnp.nan, score)
    return jnp.where(valid, score, jnp.nan).astype(jnp.float32)


def _accuracy(loss: jax.Array, score: jax.Array, complexity: jax.Array) -> jax.Array:
    return jnp.argmin(loss)


def _score(loss: jax.Array, score: jax.Array, complexity: jax.Array) -> jax.Array:
    return jnp.argmax(jnp.where(jnp.isnan(score), -jnp.inf, score))


def _best(loss: jax.Array, score: jax.Array, complexity: jax.Array) -> jax.Array:
    candidate = loss <= BEST_LOSS_FACTOR * jnp.min(loss)
    return jnp.argmax(jnp.where(candidate & ~jnp.isnan(score), score, -jnp.inf))


MODEL_SELECTIONS: dict[str, Callable[[jax.Array, jax.Array, jax.Array], jax.Array]] = {
    "accuracy": _accuracy,
    "score": _score,
    "best": _best,
}
"""PySR's ``model_selection`` rules: ``name -> rule(loss [k], score [k], complexity [k]) -> index``
(non-members have ``loss = +inf``, ``score = NaN``; ties go to the first, simplest, member)."""


def select_model(
    loss: jax.Array,
    complexity: jax.Array,
    rule: str | Callable[..., Any] = "best",
    valid: jax.Array | None = None,
) -> jax.Array:
    """The position of the chosen front member (jittable), PySR's ``model_selection``.

    Args:
        loss: ``[k]`` front losses (``>= 0``), by ``complexity`` ascending (strictly decreasing).
        complexity: ``[k]``.
        rule: ``"best"`` (default: the highest score among members with ``loss <= 1.5 * min loss``;
            with a member of loss 0 that is the one), ``"accuracy"`` (the lowest loss), ``"score"``
            (the highest score), or a callable ``rule(loss [k], score [k], complexity [k]) -> index``
            (non-members: ``loss = +inf``, ``score = NaN``).
        valid: optional bool ``[k]``: only these entries are members (a hall of fame's
            :meth:`~HallOfFame.front_mask`).

    Returns:
        int32 ``[]``: an index into ``loss``.
    """
    if isinstance(rule, str):
        if rule not in MODEL_SELECTIONS:
            raise ArgumentError(f"rule must be one of {tuple(MODEL_SELECTIONS)} or a callable, got {rule!r}")
        fn = MODEL_SELECTIONS[rule]
    elif callable(rule):
        fn = rule
    else:
        raise ArgumentError(f"rule must be one of {tuple(MODEL_SELECTIONS)} or a callable, got {rule!r}")
    loss = jnp.asarray(loss, jnp.float32)
    if not isinstance(loss, jax.core.Tracer) and bool(jnp.any(loss < 0)):
        raise ArgumentError(
            f"select_model needs losses >= 0 (PySR's score is a log-loss slope), got a minimum of "
            f"{float(jnp.min(loss))}; for a maximized metric such as r2 pass a loss such as 1 - r2"
        )
    score = front_scores(loss, complexity, valid)
    if valid is not None:
        loss = jnp.where(jnp.asarray(valid, bool), loss, jnp.inf)
    return jnp.asarray(fn(loss, score, jnp.asarray(complexity)), jnp.int32)


# -- NSGA-II: nondominated_rank and crowding_distance live in evotensor.core.pareto (QD's NSLC ranker
# uses them too); re-exported here ---------------------------------------------------------------------


def duplicate_mask(loss: jax.Array, size: jax.Array) -> jax.Array:
    """bool ``[n]``: the points equal in ``(loss, size)`` to a point of lower index (every copy but
    the first; non-finite losses count as equal to each other). Jittable."""
    key, _ = feasible_loss(loss)
    size = jnp.asarray(size)
    n = key.shape[0]
    idx = jnp.arange(n, dtype=jnp.int32)
    order = jnp.lexsort((idx, size, key))
    k, s = key[order], size[order]
    same = jnp.concatenate([jnp.zeros(1, bool), (k[1:] == k[:-1]) & (s[1:] == s[:-1])])
    return jnp.zeros(n, bool).at[order].set(same)


def nsga2_order(loss: jax.Array, size: jax.Array, max_size: int, unique: bool = True) -> jax.Array:
    """The points from best to worst by NSGA-II's crowded comparison: rank ascending, then crowding
    distance descending, then index. ``nsga2_order(...)[:k]`` are NSGA-II's ``k`` survivors (whole
    fronts first, the split front by crowding). int32 ``[n]``.

    Args:
        loss, size, max_size: as in :func:`nondominated_rank`.
        unique: duplicate elimination (as pymoo's ``eliminate_duplicates``): every copy of an
            ``(loss, size)`` point but the first (:func:`duplicate_mask`) is left out of the ranking
            and comes after all distinct feasible points (best loss first), before the infeasible
            ones. GP makes many copies of its small trees; without this, copies of the few points of
            the first fronts fill the population and it collapses onto them (measured on Pagie-1,
            pop 1000: 6 distinct points after 40 generations). ``False``: Deb's NSGA-II as published.
    """
    key, feasible = feasible_loss(loss)
    n = key.shape[0]
    idx = jnp.arange(n, dtype=jnp.int32)
    dup = duplicate_mask(key, size) & feasible if unique else jnp.zeros(n, bool)
    ranked_loss = jnp.where(dup, jnp.inf, key)  # a copy is ranked apart: as if infeasible
    rank = nondominated_rank(ranked_loss, size, max_size)
    crowd = crowding_distance(ranked_loss, size, rank)
    group = jnp.where(feasible, jnp.where(dup, 1, 0), 2)  # distinct, copies, infeasible
    tail_loss = jnp.where(dup, key, 0.0)
    return jnp.lexsort((idx, -crowd, tail_loss, group, rank)).astype(jnp.int32)


# -- showing a front ---------------------------------------------------------------------------------------


def front_table(
    hall_of_fame: HallOfFame,
    function_set: Any,
    *,
    scaling: Callable[[Forest], Any] | None = None,
    precision: int = 4,
    rule: str | Callable[..., Any] = "best",
) -> list[dict[str, Any]]:
    """The hall of fame's Pareto front as rows, simplest first.

    Args:
        hall_of_fame: a :class:`HallOfFame` (e.g. ``GPState.hall_of_fame``).
        function_set: the trees' :class:`~evotensor.gp.functions.FunctionSet`.
        scaling: optional ``forest [k, L] -> (slope [k, n_outputs], intercept [k, n_outputs])`` (a
            linear-scaling problem's ``scaling``; ``None`` results mean none): expressions are then
            written ``a*(f) + b`` (single-output trees).
        precision: significant digits of the constants in the expressions.
        rule: the model selection marking the ``chosen`` row (see :func:`select_model`); applied only
            when every loss is ``>= 0`` (else no row is chosen and scores are NaN).

    Returns:
        ``[{"complexity": int, "loss": float, "score": float, "chosen": bool, "expression": str}]``.
    """
    from evotensor.gp.export import to_string

    precision = check_int(precision, "precision")
    if not isinstance(hall_of_fame, HallOfFame):
        raise ArgumentError(f"hall_of_fame must be a HallOfFame, got {type(hall_of_fame).__name__}")
    mask = np.asarray(hall_of_fame.front_mask())
    if mask.ndim != 1:
        raise ArgumentError(f"hall_of_fame must be a single hall of fame (loss [max_len]), got {mask.shape}")
    members = np.flatnonzero(mask)
    loss = np.asarray(hall_of_fame.loss)[members]
    complexity = members + 1
    nonneg = bool(np.all(loss >= 0))
    if nonneg and members.size:
        score = np.asarray(front_scores(loss, complexity))
        chosen = int(select_model(loss, complexity, rule))
    else:
        score, chosen = np.full(members.size, np.nan), -1
    forest = jax.tree_util.tree_map(lambda a: np.asarray(a)[members], hall_of_fame.forest)
    slope = intercept = None
    if scaling is not None and members.size:
        scaled = scaling(jax.tree_util.tree_map(jnp.asarray, forest))
        if scaled is not None:
            slope, intercept = (np.asarray(x).reshape(members.size, -1) for x in scaled)
    rows = []
    for i in range(members.size):
        expression = to_string(forest, function_set, i, precision)
        if slope is not None and slope.shape[1] == 1:
            expression = _scaled(expression, float(slope[i, 0]), float(intercept[i, 0]), precision)
        rows.append(
            {
                "complexity": int(complexity[i]),
                "loss": float(loss[i]),
                "score": float(score[i]),
                "chosen": i == chosen,
                "expression": expression,
            }
        )
    return rows


def _scaled(expression: str, slope: float, intercept: float, precision: int) -> str:
    """``a*(f) + b`` with the constants to ``precision`` digits (``f`` alone when a=1, b=0)."""
    if slope == 0.0:  # a constant model (a tree whose output does not vary)
        return f"{intercept:.{precision}g}"
    text = expression if slope == 1.0 else f"{slope:.{precision}g}*({expression})"
    if intercept != 0.0:
        text += f" {'-' if intercept < 0 else '+'} {abs(intercept):.{precision}g}"
    return text


def write_front_csv(path: str | Path, rows: Sequence[dict[str, Any]]) -> Path:
    """Write :func:`front_table` rows to ``path`` (a CSV with the header :data:`FRONT_COLUMNS`)."""
    path = Path(path)
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=FRONT_COLUMNS)
        writer.writeheader()
        for row in rows:
            missing = set(FRONT_COLUMNS) - set(row)
            if missing:
                raise ArgumentError(f"a front row lacks {sorted(missing)}: {row!r:.120}")
            writer.writerow(
                {
                    "complexity": int(row["complexity"]),
                    "loss": repr(float(row["loss"])),
                    "score": repr(float(row["score"])),
                    "chosen": int(bool(row["chosen"])),
                    "expression": row["expression"],
                }
            )
    return path


def read_front_csv(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a ``front.csv`` written by :func:`write_front_csv`.

    Raises:
        ArgumentError: the file's header is not :data:`FRONT_COLUMNS` or a cell does not parse (the
            message names the file, the line and the column).
    """
    path = Path(path)
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        if tuple(reader.fieldnames or ()) != FRONT_COLUMNS:
            raise ArgumentError(f"{path}: header must be {','.join(FRONT_COLUMNS)}, got {reader.fieldnames}")
        rows = []
        for row in reader:
            try:
                rows.append(
                    {
                        "complexity": int(row["complexity"]),
                        "loss": float(row["loss"]),
                        "score": float(row["score"]),
                        "chosen": row["chosen"] == "1",
                        "expression": row["expression"] or "",
                    }
                )
            except (TypeError, ValueError):
                raise ArgumentError(f"{path}, line {reader.line_num}: bad row {row!r:.120}") from None
    return rows


def plot_front(
    rows: Sequence[dict[str, Any]], path: str | Path, title: str | None = None, loss_label: str = "loss"
) -> Path:
    """Save the front (loss vs complexity, log-scale loss where every loss is positive) with the
    chosen model marked, as a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    c = np.asarray([r["complexity"] for r in rows], float)
    loss = np.asarray([r["loss"] for r in rows], float)
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    ax.step(c, loss, where="post", color="0.6", lw=1)
    ax.plot(c, loss, "o", ms=4, label="front")
    chosen = [r for r in rows if r["chosen"]]
    for r in chosen:
        short = r["expression"] if len(r["expression"]) <= 60 else r["expression"][:57] + "..."
        ax.plot([r["complexity"]], [r["loss"]], "r*", ms=14, label=f"chosen: {short}")
    if loss.size and np.all(loss > 0):
        ax.set_yscale("log")
    ax.set_xlabel("complexity (nodes)")
    ax.set_ylabel(loss_label + (" (log scale)" if loss.size and np.all(loss > 0) else ""))
    ax.set_title(title or "Pareto front of the hall of fame")
    ax.grid(True, alpha=0.3)
    if rows:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def format_front(rows: Sequence[dict[str, Any]], max_expression: int = 90) -> str:
    """The rows as a plain-text table (``>`` marks the chosen model)."""
    lines = [f"  {'complexity':>10}  {'loss':>11}  {'score':>9}  expression"]
    for r in rows:
        expr = r["expression"]
        expr = expr if len(expr) <= max_expression else expr[: max_expression - 3] + "..."
        score = "" if math.isnan(r["score"]) else f"{r['score']:.4g}"
        mark = ">" if r["chosen"] else " "
        lines.append(f"{mark} {r['complexity']:>10}  {r['loss']:>11.5g}  {score:>9}  {expr}")
    return "\n".join(lines)
