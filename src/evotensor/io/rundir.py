"""The run directory: everything needed to inspect, reproduce and resume a run.

``runs/<task>-<timestamp>/`` holds

* ``config.json`` — task, seed, every hyperparameter, package versions, device, command line;
* ``metrics.csv`` — one row per generation (natural orientation);
* ``checkpoint.npz`` — the full run state after the last completed chunk (atomic write);
* ``best.npz`` / ``best.json`` / ``best.txt`` — the best solution, reloadable, and its fitness;
* ``fitness.png`` — best-so-far and generation-mean fitness curves (plus task-specific plots).
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import json
import platform
import sys
from importlib import metadata as _metadata
from pathlib import Path
from typing import Any

import jax
import numpy as np

from evotensor.io.atomic import write_text_atomic
from evotensor.io.checkpoint import load_extra_arrays, load_metadata, load_pytree, save_pytree

CHECKPOINT = "checkpoint.npz"
_HISTORY = "history/"


def default_run_dir(task: str, root: str | Path = "runs") -> Path:
    """``root/<task>-<YYYYmmdd-HHMMSS>`` (a numeric suffix is added if it exists)."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = Path(root) / f"{task}-{stamp}"
    i = 1
    while path.exists():
        path = Path(root) / f"{task}-{stamp}-{i}"
        i += 1
    return path


def package_versions() -> dict[str, str]:
    """Versions of the packages that determine a run's numbers."""
    out = {"python": platform.python_version()}
    for name in ("evotensor", "jax", "jaxlib", "numpy", "optax"):
        try:
            out[name] = _metadata.version(name)
        except _metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def device_description() -> dict[str, Any]:
    """The JAX backend and devices this process computes on."""
    devices = jax.devices()
    return {
        "backend": jax.default_backend(),
        "devices": [f"{d.platform}:{getattr(d, 'device_kind', '')}" for d in devices],
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
    }


def _jsonable(value: Any) -> Any:
    """Best-effort conversion of hyperparameters to JSON (arrays -> lists)."""
    if isinstance(value, (str, bool, int, float)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.ndarray, jax.Array, np.generic)):
        arr = np.asarray(value)
        if jax.dtypes.issubdtype(arr.dtype, jax.dtypes.prng_key):
            return "<prng key>"
        return arr.tolist()
    return repr(value)


def _static_config(obj: Any) -> dict[str, Any]:
    """Public scalar/str/tuple attributes of a strategy or problem (its static configuration)."""
    out: dict[str, Any] = {"class": f"{type(obj).__module__}.{type(obj).__qualname__}"}
    for name, value in sorted(vars(obj).items()) if hasattr(obj, "__dict__") else []:
        if name.startswith("_"):
            continue
        if isinstance(value, (str, bool, int, float, tuple)) or value is None:
            out[name] = _jsonable(value)
    return out


def params_to_dict(params: Any) -> dict[str, Any]:
    """A params pytree as ``{path: value}`` (JSON-ready)."""
    flat = jax.tree_util.tree_flatten_with_path(params)[0]
    return {jax.tree_util.keystr(path) or "<root>": _jsonable(leaf) for path, leaf in flat}


class RunDirectory:
    """Writes (and resumes from) one run directory."""

    def __init__(self, path: Path, task_name: str = "run"):
        self.path = Path(path)
        self.task_name = task_name
        self.path.mkdir(parents=True, exist_ok=True)

    # -- start -----------------------------------------------------------------------------
    def start(
        self, config: dict[str, Any], *, strategy: Any, problem: Any, params: Any, key: jax.Array
    ) -> None:
        """Write ``config.json`` and an empty ``metrics.csv``."""
        record = {
            "task": self.task_name,
            "config": _jsonable(config),
            "strategy": _static_config(strategy),
            "params": params_to_dict(params),
            "problem": _static_config(problem) | {"repr": repr(problem)},
            "key_data": np.asarray(jax.random.key_data(key)).tolist(),
            "versions": package_versions(),
            "device": device_description(),
            "command": sys.argv,
            "created": _dt.datetime.now().isoformat(timespec="seconds"),
        }
        write_text_atomic(self.path / "config.json", json.dumps(record, indent=2) + "\n")
        (self.path / "metrics.csv").unlink(missing_ok=True)

    # -- per chunk -------------------------------------------------------------------------
    def append_metrics(self, metrics: dict[str, np.ndarray], first_generation: int) -> None:
        """Append one CSV row per generation of a chunk (9 significant digits: float32-exact)."""
        path = self.path / "metrics.csv"
        names = [n for n in metrics if np.ndim(metrics[n]) == 1]  # vector metrics live in the history only
        new = not path.exists()
        with path.open("a", newline="") as handle:
            writer = csv.writer(handle)
            if new:
                writer.writerow(["generation", *names])
            for row in range(len(metrics[names[0]])):
                writer.writerow(
                    [first_generation + row + 1] + [format(float(metrics[n][row]), ".9g") for n in names]
                )

    def save_checkpoint(self, carry: Any, history: dict[str, np.ndarray]) -> None:
        """Atomically write the run state and the metric history so far."""
        save_pytree(
            self.path / CHECKPOINT,
            carry,
            metadata={"generation": int(carry.generation), "task": self.task_name},
            extra_arrays={_HISTORY + k: v for k, v in history.items()},
        )

    def load_checkpoint(self, template: Any) -> tuple[Any, dict[str, np.ndarray]]:
        """``(carry, history)`` from ``checkpoint.npz``; rewrites ``metrics.csv`` to match it."""
        path = self.path / CHECKPOINT
        if not path.exists():
            raise FileNotFoundError(f"no checkpoint to resume from: {path} does not exist")
        carry = load_pytree(path, template)
        history = {
            k[len(_HISTORY) :]: v for k, v in load_extra_arrays(path).items() if k.startswith(_HISTORY)
        }
        # metrics.csv may hold rows past the checkpoint (a crash between the two writes): rebuild it.
        (self.path / "metrics.csv").unlink(missing_ok=True)
        if history:
            self.append_metrics(history, first_generation=0)
        return carry, history

    @staticmethod
    def checkpoint_generation(path: Path) -> int:
        """The generation a run directory's checkpoint was written at."""
        return int(load_metadata(Path(path) / CHECKPOINT)["generation"])

    # -- end -------------------------------------------------------------------------------
    def finish(self, result: Any, best_to_text: Any = None) -> None:
        """Write ``best.*`` and ``fitness.png``."""
        save_pytree(self.path / "best.npz", result.best_genotype, metadata={"fitness": result.best_fitness})
        summary = {
            "best_fitness": result.best_fitness,
            "generations": result.generations,
            "evaluations": result.evaluations,
            "compile_seconds": round(result.compile_seconds, 3),
            "run_seconds": round(result.run_seconds, 3),
        }
        write_text_atomic(self.path / "best.json", json.dumps(summary, indent=2) + "\n")
        if best_to_text is not None:
            text = best_to_text(result.best_genotype)
        else:
            buffer = io.StringIO()
            for path, leaf in jax.tree_util.tree_flatten_with_path(result.best_genotype)[0]:
                name = jax.tree_util.keystr(path) or "best"
                buffer.write(f"{name} = {np.array2string(np.asarray(leaf), precision=6, threshold=100000)}\n")
            text = buffer.getvalue()
        write_text_atomic(self.path / "best.txt", text if text.endswith("\n") else text + "\n")
        plot_fitness(result.history, self.path / "fitness.png", title=self.task_name)


def plot_fitness(history: dict[str, np.ndarray], path: Path, title: str = "") -> None:
    """Best-so-far and generation-mean fitness against generation, saved as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    generations = np.arange(1, len(history["best_fitness"]) + 1)
    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    ax.plot(generations, history["best_fitness"], label="best so far")
    ax.plot(generations, history["generation_best"], label="generation best", alpha=0.6)
    ax.plot(generations, history["generation_mean"], label="generation mean", alpha=0.6)
    values = np.concatenate([history["best_fitness"], history["generation_mean"]])
    values = values[np.isfinite(values)]
    if values.size and values.min() > 0 and values.max() / max(values.min(), 1e-300) > 100:
        ax.set_yscale("log")
    ax.set_xlabel("generation")
    ax.set_ylabel("fitness")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    tmp = path.with_name("." + path.name + ".tmp.png")
    fig.savefig(tmp)
    plt.close(fig)
    tmp.replace(path)


def read_metrics(path: str | Path) -> dict[str, np.ndarray]:
    """``metrics.csv`` as ``{column: array}``."""
    with Path(path).open() as handle:
        rows = list(csv.reader(handle))
    header, body = rows[0], rows[1:]
    return {name: np.array([float(r[i]) for r in body]) for i, name in enumerate(header)}
