"""Task ``sr-pagie``: tree GP on the Pagie-1 symbolic-regression benchmark (the EvoGP paper's task).

``evotensor run sr-pagie`` evolves ``pop`` trees (default 5000) for 100 generations on the 676-point
Pagie-1 grid with EvoGP's function set ``+ - * / sin cos tan`` (raw semantics), training MSE as the
fitness, then prints the best expression (infix, constants rounded) beside the true one and saves
``pred_vs_true.png`` into the run directory (``fitness.png`` comes from the run loop).

Options (``--set KEY=VALUE``) besides ``pop``/``generations``/``seed``: ``max_len`` (64),
``max_depth`` (6), ``selection`` (``tournament``; ``lexicase`` makes the problem return per-row
errors), ``tournament_size`` (7), ``elite_rate`` (0.01), ``parsimony_coefficient`` (0.0, a number or
``auto``; see :class:`evotensor.gp.GP`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from evotensor.gp.encoding import Forest
from evotensor.gp.strategy import GP
from evotensor.tasks import Task, register_task


def _report(problem: Any, precision: int = 3):
    def report(result: Any, run_dir: Path | None) -> str:
        best: Forest = result.best_genotype
        fs = problem.function_set
        found = best.to_infix(fs, precision=precision)
        pred = np.asarray(problem.predict(best))[:, 0]
        y = np.asarray(problem.y)
        mse = float(np.mean((pred - y) ** 2))
        lines = [
            f"found: {found}",
            f"true:  {problem.true_expression}",
            f"training MSE {mse:.4g} ({int(best.length)} nodes)",
        ]
        if run_dir is not None:
            path = Path(run_dir) / "pred_vs_true.png"
            _plot(pred, y, found, problem.true_expression, mse, path)
            lines.append(f"plot: {path}")
        return "\n".join(lines)

    return report


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
        "tournament_size": 7,
        "elite_rate": 0.01,
        "parsimony_coefficient": 0.0,
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
        tournament_size=int(cfg["tournament_size"]),
        elite_rate=float(cfg["elite_rate"]),
        const_range=(-5.0, 5.0),
        parsimony_coefficient=c if isinstance(c, str) else float(c),
    )
    fs = problem.function_set
    return Task(
        strategy=strategy,
        problem=problem,
        decoder=strategy.decoder,
        generations=cfg["generations"] or 100,
        report=_report(problem),
        best_to_text=lambda best: best.to_infix(fs, precision=6),
    )
