"""The competitors' virtual environments of the side-by-side benchmarks.

Anchors are never installed into the project's venv: each lives in a venv of its own under
``$EVOTENSOR_BENCH_VENVS`` (default ``<repo>/.bench/venvs``, git-ignored), one per group below. The
benchmark scripts find a group's Python with :func:`venv_python`; ``make bench-venvs`` (this file run
as a script) creates the groups, or only those named: ``make bench-venvs VENVS="es qd"``.

The versions are those the figures in ``benchmarks/results_*.md`` were measured with. The torch
anchors use the CPU wheel of PyTorch (``--index-url https://download.pytorch.org/whl/cpu``).
"""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# group -> pip arguments
VENVS: dict[str, list[str]] = {
    "es": ["evosax==0.3.2", "jax==0.10.2", "jaxlib==0.10.2"],
    "evotorch": ["--extra-index-url", "https://download.pytorch.org/whl/cpu", "torch", "evotorch==0.6.1"],
    "evox": ["--extra-index-url", "https://download.pytorch.org/whl/cpu", "torch", "evox==1.4.0"],
    "gp": ["gplearn==0.4.3", "pyoperon", "deap==1.4.4"],
    "qd": ["ribs==0.12.0", "qdax==0.5.0", "jax==0.10.2", "jaxlib==0.10.2"],
    "tree": ["DI-treetensor==0.5.0", "tianshou"],
}


def venv_root() -> str:
    return os.environ.get("EVOTENSOR_BENCH_VENVS") or os.path.join(ROOT, ".bench", "venvs")


def venv_python(group: str) -> str:
    """The Python of competitor venv ``group`` (one of :data:`VENVS`); it may not exist yet."""
    if group not in VENVS:
        raise ValueError(f"unknown benchmark venv {group!r}; known: {', '.join(VENVS)}")
    return os.path.join(venv_root(), group, "bin", "python")


def create(groups: list[str]) -> None:
    for group in groups or list(VENVS):
        python = venv_python(group)
        if not os.path.exists(python):
            subprocess.run(
                [sys.executable, "-m", "venv", os.path.dirname(os.path.dirname(python))], check=True
            )
        subprocess.run([python, "-m", "pip", "install", "--quiet", "--upgrade", "pip"], check=True)
        subprocess.run([python, "-m", "pip", "install", "--quiet", *VENVS[group]], check=True)
        print(f"{group}: {python}")


if __name__ == "__main__":
    create(sys.argv[1:])
