"""Host-side progress display between compiled chunks.

On a terminal: a ``rich`` progress bar with generation, best, mean, evals/s and ETA. Elsewhere
(CI, pipes, ``make run`` logs): one plain line per chunk on stderr.
"""

from __future__ import annotations

import sys

import numpy as np


def _fmt(value: float) -> str:
    return f"{value:.6g}"


class ProgressReporter:
    """Shows ``generation / total``, best-so-far, generation mean, evals/s and ETA."""

    def __init__(self, total: int, start: int, population_size: int, enabled: bool = True):
        self.total = total
        self.start = start
        self.enabled = enabled
        self._bar = None
        if enabled and sys.stderr.isatty():
            from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

            self._bar = Progress(
                TextColumn("gen {task.completed}/{task.total}"),
                BarColumn(),
                TextColumn("{task.fields[stats]}"),
                TimeRemainingColumn(),
                transient=False,
            )
            self._task = self._bar.add_task("run", total=total, completed=start, stats="")
            self._bar.start()

    def update(
        self, generation: int, metrics: dict[str, np.ndarray], evals_per_second: float, run_seconds: float
    ) -> None:
        """Show the state after a chunk; ``run_seconds``: compiled run time so far (no compile)."""
        if not self.enabled:
            return
        best = float(metrics["best_fitness"][-1])
        mean = float(metrics["generation_mean"][-1])
        stats = f"best {_fmt(best)}  mean {_fmt(mean)}  {evals_per_second:,.0f} evals/s"
        if self._bar is not None:
            self._bar.update(self._task, completed=generation, stats=stats)
            return
        done = generation - self.start
        eta = run_seconds / max(done, 1) * (self.total - generation)
        width = len(str(self.total))
        print(
            f"gen {generation:>{width}}/{self.total}  {stats}  ETA {eta:5.1f}s", file=sys.stderr, flush=True
        )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
