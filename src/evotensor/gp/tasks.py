"""Tasks ``sr-pagie``: tree GP on the Pagie-1 symbolic-regression benchmark (the EvoGP paper's task),
and ``sr-map-elites``: MAP-Elites over trees on Pagie-1 (:mod:`evotensor.gp.qd`), one cell per tree
length and depth, scaled R² as the objective; the report gives the best R² of every length and the
shortest tree with R² >= 0.99.

``evotensor run sr-pagie`` evolves ``pop`` trees (default 5000) for 100 generations on the 676-point
Pagie-1 grid with EvoGP's function set ``+ - * / sin cos tan`` (raw semantics), training MSE as the
fitness. The report prints the model chosen from the hall of fame's Pareto front by PySR's "best"
rule, simplified (:func:`evotensor.gp.export.to_sympy`), beside the true expression, then the most
accurate tree, then the front as a table (complexity, MSE, PySR's score, expression); it saves
``front.csv``, ``front.png`` (MSE vs complexity, log scale, the chosen model marked) and
``pred_vs_true.png`` into the run directory (``fitness.png`` comes from the run loop).
``evotensor show RUN_DIR`` prints the front again from ``front.csv``.

Options (``--set KEY=VALUE``) besides ``pop``/``generations``/``seed``: ``max_len`` (64),
``max_depth`` (6), ``selection`` (``tournament``; ``lexicase`` makes the problem return per-row
errors), ``tournament_size`` (0: the GP's default, 7, or 2 with ``survival=nsga2``), ``elite_rate``
(0.01), ``parsimony_coefficient`` (0.0, a number or ``auto``; see :class:`evotensor.gp.GP`),
``survival`` (``generational``, or ``nsga2``: NSGA-II on (MSE, size)).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from evotensor.gp import front
from evotensor.gp.encoding import Forest
from evotensor.gp.strategy import GP
from evotensor.tasks import Task, register_task


def _report(problem: Any, precision: int = 3):
    def report(result: Any, run_dir: Path | None) -> str:
        best: Forest = result.best_genotype
        fs = problem.function_set
        found = _expression(problem, best, precision)
        pred = np.asarray(problem.predict(best)).reshape(-1)
        y = np.asarray(problem.y)
        mse = float(np.mean((pred - y) ** 2))
        # the one place the problem's linear scaling enters the front (None without scaling)
        rows = front.front_table(
            result.state.hall_of_fame, fs, scaling=getattr(problem, "scaling", None), precision=precision + 1
        )
        lines = []
        chosen = next((i for i, r in enumerate(rows) if r["chosen"]), None)
        if chosen is not None:
            r = rows[chosen]
            tree = result.state.hall_of_fame.forest[r["complexity"] - 1 : r["complexity"]]
            lines += [
                f"chosen: {_simplified(problem, tree, precision + 1)}",
                f'        (PySR\'s "best" rule on the Pareto front: {r["complexity"]} nodes, '
                f"training MSE {r['loss']:.4g})",
            ]
        lines += [
            f"true:  {problem.true_expression}",
            f"found: {found}",
            f"       (most accurate: training MSE {mse:.4g} ({int(best.length)} nodes))",
            "Pareto front (the most accurate tree of each size; > chosen):",
            front.format_front(rows),
        ]
        if run_dir is not None:
            run_dir = Path(run_dir)
            front.write_front_csv(run_dir / "front.csv", rows)
            front.plot_front(
                rows, run_dir / "front.png", title="Pagie-1: Pareto front", loss_label="training MSE"
            )
            path = run_dir / "pred_vs_true.png"
            _plot(pred, y, found, problem.true_expression, mse, path)
            lines.append(f"front: {run_dir / 'front.csv'}, {run_dir / 'front.png'}")
            lines.append(f"plot: {path}")
        return "\n".join(lines)

    return report


def _expression(problem: Any, tree: Forest, precision: int) -> str:
    """A tree as infix, with the problem's linear scaling ``a*f + b`` when it has one."""
    if tree.opcode.ndim == 1:
        tree = Forest(*(a[None] for a in (tree.opcode, tree.value, tree.size, tree.output)))
    if hasattr(problem, "expression"):
        return str(problem.expression(tree, "string", precision=precision))
    return tree[0].to_infix(problem.function_set, precision=precision)


def _simplified(problem: Any, tree: Forest, precision: int) -> str:
    """A one-tree forest as a simplified sympy expression (faithful to the evaluator; with the
    problem's linear scaling), constants to ``precision`` digits."""
    import sympy as sp

    from evotensor.gp.export import SYMPY_EPS, to_sympy

    if hasattr(problem, "expression"):
        expr = problem.expression(tree, "sympy")
    else:
        expr = to_sympy(tree, problem.function_set, 0)
    eps = sp.Float(SYMPY_EPS)
    expr = expr.xreplace({f: sp.Float(f, precision) for f in expr.atoms(sp.Float) if f != eps})
    return str(expr)


def _plot(pred: np.ndarray, y: np.ndarray, found: str, true: str, mse: float, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    side = int(round(np.sqrt(y.size)))
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    ax = axes[0]
    ax.scatter(y, pred, s=6, alpha=0.6)
    lo, hi = float(min(y.min(), np.nanmin(pred))), float(max(y.max(), np.nanmax(pred)))
    ax.plot([lo, hi], [lo, hi], "k--", lw=1)
    ax.set_xlabel("true")
    ax.set_ylabel("predicted")
    ax.set_title(f"Pagie-1, training MSE {mse:.3g}")
    if side * side == y.size:  # the grid: show both surfaces
        for a, z, title in ((axes[1], y, "true"), (axes[2], pred, "predicted")):
            im = a.imshow(
                z.reshape(side, side).T, origin="lower", extent=(-5, 5, -5, 5), vmin=y.min(), vmax=y.max()
            )
            a.set_title(title)
            a.set_xlabel("x0")
            a.set_ylabel("x1")
            fig.colorbar(im, ax=a, shrink=0.8)
    short = found if len(found) <= 120 else found[:117] + "..."
    fig.suptitle(f"found: {short}\ntrue: {true}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


@register_task(
    "sr-pagie",
    "Tree GP (EvoGP setup), pop 5000 x 100 generations, on Pagie-1 symbolic regression",
    defaults={
        "max_len": 64,
        "max_depth": 6,
        "selection": "tournament",
        "tournament_size": 0,
        "elite_rate": 0.01,
        "parsimony_coefficient": 0.0,
        "survival": "generational",
    },
)
def _build_pagie(cfg: dict[str, Any]) -> Task:
    from evotensor.gp.regression import Pagie1

    problem = Pagie1(case_errors=cfg["selection"] == "lexicase")
    c = cfg["parsimony_coefficient"]
    strategy = GP(
        population_size=cfg["pop"] or 5000,
        function_set=problem.function_set,
        n_vars=problem.n_vars,
        max_len=int(cfg["max_len"]),
        init_depth=(2, int(cfg["max_depth"])),
        selection=cfg["selection"],
        tournament_size=int(cfg["tournament_size"]) or None,  # 0: the GP's default
        elite_rate=float(cfg["elite_rate"]),
        const_range=(-5.0, 5.0),
        parsimony_coefficient=c if isinstance(c, str) else float(c),
        survival=cfg["survival"],
    )
    return Task(
        strategy=strategy,
        problem=problem,
        decoder=strategy.decoder,
        generations=cfg["generations"] or 100,
        report=_report(problem),
        best_to_text=lambda best: _expression(problem, best, 6),  # with the linear scaling
    )


@register_task(
    "sr-map-elites",
    "MAP-Elites over GP trees on Pagie-1 (scaled R2), one cell per tree length and depth, batch 512 x "
    "300 generations: the best expression of every shape",
    defaults={"max_len": 32},
)
def _build_map_elites(cfg: dict[str, Any]) -> Task:
    from evotensor.gp.qd import GPEmitter, ShapeDescriptors
    from evotensor.gp.regression import Pagie1
    from evotensor.qd import GridArchive, MAPElites
    from evotensor.qd.plots import archive_heatmap, plot_qd_history

    pagie = Pagie1(metric="r2")  # with linear scaling: R2 in [0, 1] for every finite tree
    max_len = int(cfg["max_len"])
    strategy = GP(
        population_size=cfg["pop"] or 512,
        function_set=pagie.function_set,
        n_vars=pagie.n_vars,
        max_len=max_len,
        elite_rate=0.0,  # the archive keeps the elites
        const_range=(-5.0, 5.0),
    )
    emitter = GPEmitter(strategy)
    problem = ShapeDescriptors(pagie, max_len)
    archive = GridArchive(genotype=emitter.genotype, dims=problem.grid, ranges=problem.descriptor_ranges)
    me = MAPElites(archive, [emitter])

    def report(result: Any, run_dir: Path | None) -> str:
        state = result.state.archive
        stats = {k: float(v) for k, v in archive.stats(state).items()}
        elites = archive.data(state)
        length, r2 = elites["measures"][:, 0].astype(int), elites["objective"]
        lines = [
            f"archive: {int(stats['num_elites'])} tree shapes (length x depth), QD score "
            f"{stats['qd_score']:.4g}, best R2 {stats['obj_max']:.4f}",
            "best R2 by length: " + ", ".join(f"{n}: {r2[length == n].max():.4f}" for n in np.unique(length)),
        ]
        good = np.flatnonzero(r2 >= 0.99)
        for name, row in (
            ("shortest with R2 >= 0.99", good[np.argmin(length[good])] if good.size else None),
            ("most accurate", int(np.argmax(r2))),
        ):
            if row is not None:
                tree = elites["solutions"][int(row)]
                lines.append(
                    f"{name} (length {length[row]}, R2 {r2[row]:.4f}): {_expression(pagie, tree, 3)}"
                )
        lines.append(f"true: {pagie.true_expression}")
        if run_dir is not None:
            run_dir = Path(run_dir)
            archive_heatmap(archive, state, run_dir / "archive.png", labels=("length", "depth"))
            plot_qd_history(result.history, run_dir / "qd.png")
            lines.append("wrote archive.png qd.png")
        return "\n".join(lines)

    return Task(
        strategy=me,
        problem=problem,
        generations=cfg["generations"] or 300,
        report=report,
        best_to_text=lambda best: _expression(pagie, best, 6),
    )


import evotensor.gp.control_tasks  # noqa: E402,F401  (registers gp-cartpole, gp-hopper, gp-control)
import evotensor.gp.sr_tasks  # noqa: E402,F401  (registers cls-*, sr-nguyen, sr-feynman, sr)
