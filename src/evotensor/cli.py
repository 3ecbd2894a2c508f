"""Command line: ``evotensor list | run TASK | show RUN_DIR``.

Bad input (unknown task, bad option, missing run directory) prints one clear message and exits
with status 2, never a traceback. The CLI turns on JAX's persistent compilation cache (repeat runs
skip most compile time) and stops JAX from preallocating most of a GPU's memory.
"""

from __future__ import annotations

import json
import os
import sys
import tomllib
from pathlib import Path
from typing import Any

import typer

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    help="evotensor: evolutionary computation as fixed-shape tensors on JAX.",
)

# Errors that are the user's input, reported without a traceback.
_USER_ERRORS = (ValueError, KeyError, TypeError, FileNotFoundError, tomllib.TOMLDecodeError)


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code=2)


def _message(err: BaseException) -> str:
    return str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err)


def _configure_jax() -> None:
    """Persistent compilation cache + no GPU memory preallocation (before JAX starts)."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax

    cache = os.environ.get("EVOTENSOR_CACHE_DIR", str(Path.home() / ".cache" / "evotensor" / "jax"))
    try:
        Path(cache).mkdir(parents=True, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    except OSError:
        pass  # an unwritable home only costs compile time


def _parse_value(text: str) -> Any:
    """``--set key=value`` values: TOML scalars (ints, floats, bools, "strings"), else raw text."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


@app.command("list")
def list_tasks() -> None:
    """List the registered tasks with one-line descriptions."""
    from rich.console import Console
    from rich.table import Table

    from evotensor.tasks import all_tasks

    table = Table("task", "description", "options")
    for name, spec in all_tasks().items():
        options = ", ".join(
            f"{k}={v}" for k, v in spec.defaults.items() if k not in ("pop", "generations", "seed")
        )
        table.add_row(name, spec.description, options)
    Console().print(table)


@app.command("run")
def run_task(
    task: str = typer.Argument(..., help="task name (see `evotensor list`)"),
    pop: int | None = typer.Option(None, "--pop", min=1, help="population size"),
    generations: int | None = typer.Option(None, "--generations", min=1, help="number of generations"),
    seed: int | None = typer.Option(None, "--seed", min=0, help="random seed (default 0)"),
    out: Path | None = typer.Option(None, "--out", help="run directory (default runs/<task>-<time>)"),
    resume: Path | None = typer.Option(None, "--resume", help="continue the run in this directory"),
    config: Path | None = typer.Option(None, "--config", help="TOML file of task options"),
    set_: list[str] = typer.Option([], "--set", help="task option KEY=VALUE (repeatable)"),
    chunk_size: int | None = typer.Option(None, "--chunk-size", min=1, help="generations per compiled chunk"),
    quiet: bool = typer.Option(False, "--quiet", help="no progress output"),
) -> None:
    """Run TASK and write a run directory (config, metrics, checkpoint, best solution, plots)."""
    try:
        options = _collect_options(task, pop, generations, seed, config, set_, resume)
    except _USER_ERRORS as err:
        _fail(_message(err))
        return
    _configure_jax()
    import jax

    import evotensor
    from evotensor.io.rundir import default_run_dir
    from evotensor.tasks import get_task

    try:
        spec = get_task(options["task"])
        built = spec.build(options["config"])
    except _USER_ERRORS as err:
        _fail(_message(err))
        return
    cfg = {**spec.defaults, **options["config"]}
    run_dir = resume if resume is not None else (out or default_run_dir(spec.name))
    total = options["generations"] or built.generations
    typer.echo(f"task {spec.name}: {spec.description}", err=True)
    typer.echo(f"run directory: {run_dir}", err=True)
    try:
        result = evotensor.run(
            built.strategy,
            built.problem,
            total,
            jax.random.key(cfg["seed"]),
            decoder=built.decoder,
            chunk_size=chunk_size,
            run_dir=run_dir,
            resume=resume is not None,
            progress=not quiet,
            config={**cfg, "generations": total},
            task_name=spec.name,
            best_to_text=built.best_to_text,
        )
    except _USER_ERRORS as err:
        _fail(_message(err))
        return
    direction = "maximizes" if built.problem.maximize else "minimizes"
    typer.echo(f"best fitness: {result.best_fitness:.6g}  (problem {direction})")
    typer.echo(
        f"{result.generations} generations, {result.evaluations:,} evaluations, "
        f"compile {result.compile_seconds:.1f}s, run {result.run_seconds:.1f}s"
    )
    if built.report is not None:
        typer.echo(built.report(result, Path(run_dir)))
    typer.echo(
        f"wrote {run_dir}/: config.json metrics.csv checkpoint.npz best.npz best.txt best.json fitness.png"
    )


def _collect_options(task, pop, generations, seed, config, set_, resume) -> dict[str, Any]:
    """Merge config.json (resume) < TOML file < --set < flags into one task config."""
    cfg: dict[str, Any] = {}
    if resume is not None:
        record_path = Path(resume) / "config.json"
        if not record_path.exists():
            raise FileNotFoundError(f"--resume {resume}: no config.json there (not a run directory)")
        record = json.loads(record_path.read_text())
        if record["task"] != task:
            raise ValueError(f"--resume {resume} is a run of task {record['task']!r}, not {task!r}")
        cfg.update(record["config"])
    if config is not None:
        if not Path(config).exists():
            raise FileNotFoundError(f"--config {config}: file not found")
        cfg.update(tomllib.loads(Path(config).read_text()))
    for item in set_:
        if "=" not in item:
            raise ValueError(f"--set expects KEY=VALUE, got {item!r}")
        key, value = item.split("=", 1)
        cfg[key.strip()] = _parse_value(value.strip())
    for key, value in (("pop", pop), ("seed", seed)):
        if value is not None:
            if resume is not None and cfg.get(key) != value:
                raise ValueError(f"--{key} cannot change when resuming (the run used {cfg.get(key)})")
            cfg[key] = value
    total = generations if generations is not None else cfg.get("generations")
    if resume is not None:
        cfg.pop("generations", None)
    return {"task": task, "config": cfg, "generations": total}


@app.command("show")
def show(run_dir: Path = typer.Argument(..., help="a run directory written by `evotensor run`")) -> None:
    """Summarize a run directory: configuration, best result, last metrics and the plots."""
    from rich.console import Console
    from rich.table import Table

    from evotensor.io.rundir import read_metrics

    record_path = run_dir / "config.json"
    if not record_path.exists():
        _fail(f"{run_dir} is not a run directory (no config.json)")
    record = json.loads(record_path.read_text())
    table = Table("field", "value", title=f"run {run_dir}")
    table.add_row("task", record["task"])
    for key, value in record["config"].items():
        table.add_row(f"  {key}", str(value))
    table.add_row("device", ", ".join(record["device"]["devices"]))
    table.add_row("versions", ", ".join(f"{k} {v}" for k, v in record["versions"].items()))
    best_path = run_dir / "best.json"
    if best_path.exists():
        best = json.loads(best_path.read_text())
        for key, value in best.items():
            table.add_row(key, f"{value:.6g}" if isinstance(value, float) else str(value))
    else:
        table.add_row("status", "unfinished (resume with --resume)")
    metrics_path = run_dir / "metrics.csv"
    if metrics_path.exists() and metrics_path.stat().st_size > 0:
        metrics = read_metrics(metrics_path)
        if len(metrics["generation"]):
            table.add_row("generations logged", str(int(metrics["generation"][-1])))
            for key, values in metrics.items():
                if key != "generation":
                    table.add_row(f"  last {key}", f"{values[-1]:.6g}")
    plots = sorted(run_dir.glob("*.png"))
    table.add_row("plots", ", ".join(p.name for p in plots) or "none")
    Console().print(table)
    for plot in plots:  # full paths outside the table, so they are never truncated
        typer.echo(f"plot: {plot}")


def main() -> None:
    """Entry point of the ``evotensor`` command."""
    try:
        app()
    except KeyboardInterrupt:
        typer.echo("interrupted; resume with `evotensor run TASK --resume RUN_DIR`", err=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
