"""Host-side pictures of an archive (matplotlib, imported lazily; nothing here runs under jit).

* :func:`archive_heatmap` — the elites' objective over a 2-D measure space: a grid archive as an
  image of its cells, a CVT archive as its Voronoi cells, rasterised with the archive's own
  nearest-centroid rule (so the picture shows exactly the cells ``add`` uses). Empty cells are
  blank.
* :func:`plot_qd_history` — coverage and QD score (or MOME's MOQD score) per generation from a
  run's history.
* :func:`plot_pareto_fronts` — a two-objective MOME archive's solutions in objective space.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np

from evotensor.qd.archive import Archive, ArchiveState, CVTArchive, GridArchive
from evotensor.qd.sampled_archive import SampledCellsArchive


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def archive_image(
    archive: Archive, state: ArchiveState | None, resolution: int = 300, values: Any = None
) -> tuple[np.ndarray, tuple]:
    """``(image [rows, cols], extent)`` of elite objectives over the two measures, NaN where empty.

    Grid archives give one pixel per cell (``[dims[1], dims[0]]``, measure 0 along columns);
    CVT archives a ``resolution x resolution`` raster of their Voronoi cells. ``values [C]``
    (NaN where empty) replaces the elites' objectives, e.g. a MOME archive's hypervolume per cell
    drawn over its ``cells`` archive (``state`` is then unused).
    """
    if archive.measure_dim != 2:
        raise ValueError(f"archive_image needs 2 measures, the archive has {archive.measure_dim}")
    if values is None:
        objective = np.where(np.asarray(state.occupied), np.asarray(state.objective, np.float64), np.nan)
    else:
        objective = np.asarray(values, np.float64)
    if isinstance(archive, SampledCellsArchive):  # one elite per cell of its grid or CVT archive
        archive = archive.cells
    (x0, x1), (y0, y1) = archive.ranges
    extent = (x0, x1, y0, y1)
    if isinstance(archive, GridArchive):
        return objective.reshape(archive.dims).T, extent
    if isinstance(archive, CVTArchive):
        xs = np.linspace(x0, x1, resolution, endpoint=False) + (x1 - x0) / (2 * resolution)
        ys = np.linspace(y0, y1, resolution, endpoint=False) + (y1 - y0) / (2 * resolution)
        grid = np.stack(np.meshgrid(xs, ys, indexing="xy"), axis=-1).reshape(-1, 2)
        cells = np.asarray(archive.index_of(jnp.asarray(grid, jnp.float32)))
        return objective[cells].reshape(resolution, resolution), extent
    raise TypeError(f"archive_image supports GridArchive and CVTArchive, got {type(archive).__name__}")


def archive_heatmap(
    archive: Archive,
    state: ArchiveState,
    path: str | Path | None = None,
    *,
    ax: Any = None,
    title: str = "",
    labels: tuple[str, str] = ("measure 0", "measure 1"),
    vmin: float | None = None,
    vmax: float | None = None,
    values: Any = None,
    value_label: str = "objective",
) -> Any:
    """Draw the archive's elites (see :func:`archive_image`; ``values`` per cell instead, named
    ``value_label``) on ``ax`` (a new figure if None) and save it to ``path`` if given. Returns the
    matplotlib image."""
    plt = _pyplot()
    image, extent = archive_image(archive, state, values=values)
    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=(5.5, 4.5), dpi=100)
    shown = ax.imshow(image, origin="lower", extent=extent, aspect="auto", vmin=vmin, vmax=vmax, cmap="magma")
    ax.figure.colorbar(shown, ax=ax, label=value_label)
    ax.set_xlabel(labels[0])
    ax.set_ylabel(labels[1])
    if title:
        ax.set_title(title)
    if own:
        fig.tight_layout()
        if path is not None:
            fig.savefig(path, dpi=110)
        plt.close(fig)
    return shown


def plot_qd_history(
    history: dict[str, np.ndarray], path: str | Path, title: str = "", score: str = "qd_score"
) -> None:
    """Coverage and a score (default the QD score; ``"moqd_score"`` for MOME) against generations
    (``history`` from :func:`evotensor.run`)."""
    plt = _pyplot()
    generations = np.arange(1, len(history["coverage"]) + 1)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8), dpi=100)
    left.plot(generations, 100 * np.asarray(history["coverage"]))
    left.set_ylabel("coverage (% of cells)")
    right.plot(generations, history[score])
    right.set_ylabel({"qd_score": "QD score", "moqd_score": "MOQD score"}.get(score, score))
    for ax in (left, right):
        ax.set_xlabel("generation")
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    _save(plt, fig, path)


def _save(plt: Any, fig: Any, path: str | Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_pareto_fronts(archive: Any, state: Any, path: str | Path, title: str = "") -> None:
    """A two-objective MOME archive's stored solutions in objective space, coloured by cell, with
    the front of all of them together drawn as a line."""
    if archive.num_objectives != 2:
        raise ValueError(f"plot_pareto_fronts needs 2 objectives, the archive has {archive.num_objectives}")
    plt = _pyplot()
    data = archive.data(state)
    objective, cells = data["objective"], data["index"]
    fig, ax = plt.subplots(figsize=(5.5, 4.5), dpi=100)
    ax.scatter(objective[:, 0], objective[:, 1], c=cells, s=6, cmap="viridis", alpha=0.7)
    if len(objective):
        order = np.lexsort((-objective[:, 1], -objective[:, 0]))  # objective 0 descending
        best = np.maximum.accumulate(objective[order, 1])
        on_front = np.concatenate([[True], best[1:] > best[:-1]])
        front = objective[order][on_front]
        ax.step(front[:, 0], front[:, 1], where="post", color="black", lw=1, label="global front")
        ax.legend(loc="lower left")
    ax.set_xlabel("objective 0")
    ax.set_ylabel("objective 1")
    ax.grid(alpha=0.3)
    if title:
        ax.set_title(title)
    _save(plt, fig, path)
