"""Pictures of NEAT networks and runs with matplotlib alone (no graphviz): :func:`draw` for one
genome, :func:`plot_species` and :func:`plot_fitness` for a run's history.

Host-side only. The figures are built with ``matplotlib.figure.Figure`` directly (not through
``pyplot``), so nothing global changes, no GUI backend is needed and nothing is left open: the
caller owns the returned figure.

:func:`draw` layout: input pins in the left column (``-1`` at the top), outputs in the right
column, hidden nodes in between by level. Feedforward genomes: a node's level is its longest path
from a node without incoming connections, over every connection gene (enabled or not: a
feedforward genome has no cycle through either). Recurrent genomes: the breadth-first distance from
the inputs over every connection gene (hidden nodes the inputs cannot reach go to the first hidden
column). Within a column nodes are sorted by key. Every connection gene is one
``matplotlib.lines.Line2D`` (``gid`` ``"edge IN->OUT"``): solid if enabled, dashed if disabled,
green for a positive weight and red for a negative one, width growing with ``|weight|``; an edge
that goes right is straight, one that goes back or stays in its column is a curve, and a
self-connection a loop above its node. Arrowheads are separate polygon patches.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from evotensor.core.checks import ArgumentError
from evotensor.neat.export import NetworkGraph
from evotensor.neat.genome import Genome, GenomeSpec

__all__ = ["draw", "network_levels", "plot_fitness", "plot_species", "species_sizes"]

POSITIVE = "tab:green"
NEGATIVE = "tab:red"


def network_levels(spec: GenomeSpec, genome: Genome) -> dict[int, int]:
    """``{node key: column}`` of :func:`draw`'s layout for one genome: inputs 0, outputs the last
    column, hidden nodes ``1 ..`` (module docstring)."""
    g = NetworkGraph(spec, genome)
    return _levels(g, [(a, b) for a, b, *_ in g.connections])


def _levels(g: NetworkGraph, pairs: list[tuple[int, int]]) -> dict[int, int]:
    hidden = [k for k in g.nodes if k not in g.outputs]
    level = {k: 0 for k in g.inputs}
    if g.spec.feed_forward:
        # inputs at 0, every other node at least 1 (a hidden node without inputs too), then
        # longest paths
        depth = {**{k: 0 for k in g.inputs}, **{k: 1 for k in g.nodes}}
        for _ in range(len(depth) + 1):
            changed = False
            for a, b in pairs:
                if a != b and depth[a] + 1 > depth[b]:
                    depth[b] = depth[a] + 1
                    changed = True
            if not changed:
                break
        for k in hidden:
            level[k] = depth[k]
    else:
        dist = {k: 0 for k in g.inputs}
        frontier = list(g.inputs)
        while frontier:
            nxt = []
            for a, b in pairs:
                if a in frontier and b not in dist:
                    dist[b] = dist[a] + 1
                    nxt.append(b)
            frontier = nxt
        for k in hidden:
            level[k] = max(1, dist.get(k, 1))
    last = max([level[k] for k in hidden], default=0) + 1
    for k in g.outputs:
        level[k] = last
    return level


def _figure(figsize: tuple[float, float]):
    from matplotlib.figure import Figure

    return Figure(figsize=figsize, dpi=100)


def _bezier(p0: np.ndarray, p1: np.ndarray, bend: float, n: int = 32) -> np.ndarray:
    """A quadratic Bezier from ``p0`` to ``p1`` bulging ``bend`` * chord length to the left."""
    d = p1 - p0
    normal = np.array([-d[1], d[0]])
    ctrl = (p0 + p1) / 2 + bend * normal
    t = np.linspace(0.0, 1.0, n)[:, None]
    return (1 - t) ** 2 * p0 + 2 * (1 - t) * t * ctrl + t**2 * p1


def _trim(points: np.ndarray, start: np.ndarray, end: np.ndarray, radius: float) -> np.ndarray:
    """Drop the parts of a polyline inside the start and end nodes' circles."""
    keep = (np.linalg.norm(points - end, axis=1) >= radius) & (
        np.linalg.norm(points - start, axis=1) >= radius
    )
    out = points[keep]
    return out if len(out) >= 2 else points[[0, -1]]


def draw(
    spec: GenomeSpec,
    genome: Genome,
    path: str | Path | None = None,
    *,
    node_names: dict[int, str] | None = None,
    show_disabled: bool = True,
    prune_unused: bool = False,
    show_functions: bool = False,
    title: str | None = None,
    ax: Any = None,
    figsize: tuple[float, float] | None = None,
    dpi: int = 110,
) -> Any:
    """Draw one genome's network (module docstring) and save it to ``path`` (PNG, or any format
    matplotlib infers from the suffix) if given.

    Args:
        spec, genome: the spec and one genome (arrays ``[N]``, ``[C]``).
        node_names: labels by node key (default: the key).
        show_disabled: draw disabled connections (dashed).
        prune_unused: leave out hidden nodes that feed no output through enabled connections, and
            their connections (neat-python's ``draw_net(prune_unused=True)``).
        show_functions: write each non-input node's activation (and aggregation, if not ``sum``)
            under it.
        title: axes title.
        ax: draw into this matplotlib Axes instead of a new figure.
        figsize: the new figure's size in inches (default: from the layout).
        dpi: resolution of the saved file.

    Returns:
        The matplotlib ``Figure``.
    """
    from matplotlib.lines import Line2D
    from matplotlib.patches import Circle, Polygon, Rectangle

    g = NetworkGraph(spec, genome)
    if node_names is not None and not isinstance(node_names, dict):
        raise ArgumentError(f"node_names must be a dict {{key: label}}, got {type(node_names).__name__}")
    node_names = node_names or {}
    nodes = set(g.nodes)
    if prune_unused:
        nodes = g.required()
    conns = [c for c in g.connections if c[1] in nodes and (c[0] in nodes or c[0] in g.inputs)]
    if not show_disabled:
        conns = [c for c in conns if c[3]]
    level = _levels(g, [(a, b) for a, b, *_ in conns])
    level = {k: v for k, v in level.items() if k in nodes or k in g.inputs}
    if prune_unused:  # outputs stay in the last column of the pruned layout
        inner = [v for k, v in level.items() if k not in g.outputs and k not in g.inputs]
        for k in g.outputs:
            level[k] = max(inner, default=0) + 1

    columns: dict[int, list[int]] = {}
    for k in level:
        columns.setdefault(level[k], []).append(k)
    pos: dict[int, np.ndarray] = {}
    xgap, ygap = 2.0, 1.2
    for col, keys in columns.items():
        if col == 0:
            keys = sorted(keys, reverse=True)  # -1 at the top
        else:
            keys = sorted(keys)
        for i, k in enumerate(keys):
            pos[k] = np.array([col * xgap, ((len(keys) - 1) / 2 - i) * ygap])

    ncols = max(columns) + 1
    nrows = max(len(v) for v in columns.values())
    own = ax is None
    if own:
        size = figsize or (max(4.0, 1.6 * ncols + 1.5), max(3.0, 0.9 * nrows + 1.5))
        fig = _figure(size)
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    radius = 0.32
    wmax = max([abs(w) for _, _, w, *_ in conns], default=1.0) or 1.0

    for a, b, w, enabled, _ in conns:
        p0, p1 = pos[a], pos[b]
        if a == b:
            t = np.linspace(0.0, 2 * np.pi, 48)
            r = 0.3
            center = p0 + np.array([0.0, radius + r * 0.8])
            pts = center + r * np.stack([np.sin(t), -np.cos(t)], axis=1)
        elif p1[0] > p0[0] + 1.5 * xgap:  # skips a column: a slight bend past the nodes there
            pts = _bezier(p0, p1, 0.08)
        elif p1[0] > p0[0]:
            pts = p0 + (p1 - p0) * np.linspace(0.0, 1.0, 16)[:, None]
        else:
            pts = _bezier(p0, p1, 0.35)
        pts = _trim(pts, p0, p1, radius) if a != b else pts
        color = NEGATIVE if w < 0 else POSITIVE
        width = 0.6 + 3.0 * abs(w) / wmax
        line = Line2D(
            pts[:, 0],
            pts[:, 1],
            color=color,
            linewidth=width,
            linestyle="-" if enabled else "--",
            alpha=1.0 if enabled else 0.5,
            zorder=1,
            gid=f"edge {a}->{b}",
        )
        ax.add_line(line)
        # arrowhead at the end of the (trimmed) polyline
        tip = pts[-1]
        d = pts[-1] - pts[-2]
        norm = float(np.hypot(*d)) or 1.0
        d = d / norm
        back, side = tip - 0.16 * d, np.array([-d[1], d[0]]) * 0.08
        ax.add_patch(
            Polygon(
                [tip, back + side, back - side],
                closed=True,
                color=color,
                alpha=1.0 if enabled else 0.5,
                zorder=2,
            )
        )

    for k, p in pos.items():
        if k in g.inputs:
            patch = Rectangle(p - radius, 2 * radius, 2 * radius, facecolor="lightgray", edgecolor="black")
        else:
            face = "lightblue" if k in g.outputs else "white"
            patch = Circle(p, radius, facecolor=face, edgecolor="black")
        patch.set_zorder(3)
        ax.add_patch(patch)
        ax.text(p[0], p[1], node_names.get(k, str(k)), ha="center", va="center", fontsize=9, zorder=4)
        if show_functions and k in g.nodes:
            node = g.nodes[k]
            label = node["activation"] + ("" if node["aggregation"] == "sum" else f"\n{node['aggregation']}")
            ax.text(p[0], p[1] - radius - 0.08, label, ha="center", va="top", fontsize=7, zorder=4)

    xs = np.array([p[0] for p in pos.values()])
    ys = np.array([p[1] for p in pos.values()])
    ax.set_xlim(xs.min() - 0.8, xs.max() + 0.8)
    ax.set_ylim(ys.min() - 0.9, ys.max() + 1.3)
    ax.set_aspect("equal")
    ax.axis("off")
    if title:
        ax.set_title(title)
    if own:
        fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=dpi)
    return fig


# ---------------------------------------------------------------------------------------------
# run history


def _history(history: Any) -> dict[str, np.ndarray]:
    history = getattr(history, "history", history)
    if not isinstance(history, dict):
        raise ArgumentError(
            f"history must be a dict of per-generation arrays (or a RunResult), got {history!r}"
        )
    return {k: np.asarray(v) for k, v in history.items()}


def species_sizes(history: Any) -> dict[int, np.ndarray] | None:
    """Per-species sizes ``{species: int [G]}`` from a history, or ``None`` if it has none.

    Reads ``species_sizes [G, S]`` (members per species slot each generation); with
    ``species_keys [G, S]`` (each slot's species id, ``<= 0`` for an empty slot) the columns follow
    species ids across slot reuse, otherwise the slots themselves.
    """
    h = _history(history)
    sizes = h.get("species_sizes")
    if sizes is None or sizes.ndim != 2:
        return None
    sizes = np.asarray(sizes, np.int64)
    keys = h.get("species_keys")
    if keys is None or np.shape(keys) != sizes.shape:
        return {s: sizes[:, s] for s in range(sizes.shape[1]) if np.any(sizes[:, s] > 0)}
    out: dict[int, np.ndarray] = {}
    for gen in range(sizes.shape[0]):
        for slot in range(sizes.shape[1]):
            key, n = int(keys[gen, slot]), int(sizes[gen, slot])
            if key > 0 and n > 0:
                out.setdefault(key, np.zeros(sizes.shape[0], np.int64))[gen] += n
    return dict(sorted(out.items()))


def plot_species(history: Any, path: str | Path | None = None, *, title: str = "", ax: Any = None) -> Any:
    """Species over generations from a run's history (``RunResult.history`` or the result).

    With per-species sizes in the history (:func:`species_sizes`: a ``species_sizes [G, S]``
    metric, optionally ``species_keys [G, S]``) a stacked area plot of the sizes (neat-python's
    ``plot_species``); otherwise the number of species per generation (``num_species``, which the
    strategy reports). Saved to ``path`` if given; returns the Figure.
    """
    h = _history(history)
    per_species = species_sizes(h)
    if per_species is None and "num_species" not in h:
        raise ArgumentError("history has neither species_sizes nor num_species")
    own = ax is None
    fig = _figure((6.0, 4.0)) if own else ax.figure
    if own:
        ax = fig.add_subplot()
    if per_species:
        gens = np.arange(1, len(next(iter(per_species.values()))) + 1)
        ax.stackplot(gens, *per_species.values(), linewidth=0.3, edgecolor="white")
        ax.set_ylabel("size per species")
        ax.set_title(title or "Speciation")
    else:
        num = h["num_species"]
        gens = np.arange(1, len(num) + 1)
        ax.step(gens, num, where="mid", color="tab:blue")
        ax.set_ylabel("number of species")
        ax.set_ylim(bottom=0)
        ax.set_title(title or "Number of species")
    ax.set_xlabel("generation")
    if own:
        fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig


def plot_fitness(
    history: Any, path: str | Path | None = None, *, title: str = "", ylog: bool = False, ax: Any = None
) -> Any:
    """Best and mean fitness per generation from a run's history: ``best_fitness`` (best so far),
    ``generation_best``, ``generation_mean`` with a ``generation_std`` band (whichever are
    present; neat-python's ``plot_stats``). Saved to ``path`` if given; returns the Figure."""
    h = _history(history)
    present = [k for k in ("best_fitness", "generation_best", "generation_mean") if k in h]
    if not present:
        raise ArgumentError("history has none of best_fitness, generation_best, generation_mean")
    own = ax is None
    fig = _figure((6.0, 4.0)) if own else ax.figure
    if own:
        ax = fig.add_subplot()
    gens = np.arange(1, len(h[present[0]]) + 1)
    labels = {"best_fitness": "best so far", "generation_best": "generation best", "generation_mean": "mean"}
    styles = {
        "best_fitness": ("tab:red", 1.0),
        "generation_best": ("tab:orange", 0.6),
        "generation_mean": ("tab:blue", 0.9),
    }
    for key in present:
        color, alpha = styles[key]
        ax.plot(gens, h[key], color=color, alpha=alpha, label=labels[key])
    if "generation_mean" in h and "generation_std" in h:
        mean, std = h["generation_mean"], h["generation_std"]
        ax.fill_between(gens, mean - std, mean + std, color="tab:blue", alpha=0.15, label="mean +- 1 sd")
    if ylog:
        ax.set_yscale("symlog")
    ax.set_xlabel("generation")
    ax.set_ylabel("fitness")
    ax.set_title(title or "Fitness")
    ax.grid(alpha=0.3)
    ax.legend(loc="best")
    if own:
        fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig
