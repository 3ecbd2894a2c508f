"""Command line: ``evotensor list | run TASK | show RUN_DIR``.

Every problem with the input — an unknown task, command or option, an option value that does not
parse or is out of range, a missing, damaged or wrong file or directory, a checkpoint of another
run, an option that would change a resumed run — and every file-system error during a run (a full
disk, a read-only directory) prints ONE line ``error: ...`` on stderr that names the option, file or
directory, and exits with status 2, without a traceback (``EVOTENSOR_TRACEBACK=1`` shows tracebacks
instead, for bug reports). When a run stops on such an error or on Ctrl-C (exit status 130), the
line says whether its last checkpoint is intact and how to resume it.

The CLI turns on JAX's persistent compilation cache (repeat runs skip most compile time) and stops
JAX from preallocating most of a GPU's memory.

Many devices and hosts (``run``): ``--devices N|all`` spreads the population over a mesh of N devices
(``evotensor.run(..., mesh=...)``); ``--cpu-devices N`` gives the process N host CPU devices first.
``--distributed`` joins a multi-process job before anything else uses JAX (settings from
``--coordinator``, ``--num-processes``, ``--process-id``, ``EVOTENSOR_*`` variables, SLURM or Open MPI:
:mod:`evotensor.distributed.cluster`), and the mesh then spans every process's devices. Every process
runs the same command; process 0 alone writes the run directory and prints, a problem found by any
process stops all of them (each prints its ``error:`` line; other processes' lines name the process).
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import sys
import tempfile
import tomllib
from pathlib import Path
from typing import Any, NoReturn

import typer

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    help="evotensor: evolutionary computation as fixed-shape tensors on JAX.",
)

SEED_MAX = 2**32 - 1  # jax.random.key maps larger seeds onto smaller ones (2**32 -> 0)
INT32_MAX = 2**31 - 1  # the generation counter and population indices are int32
_RESUME_MAY_CHANGE = "--generations, --chunk-size and --quiet"
_interrupt_reported = False  # the run command printed its own "interrupted; ..." line
# click's exception classes, as the click that typer uses defines them (typer may vendor its own)
_CLICK_EXCEPTION = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")
_USAGE_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


class _Problem(Exception):
    """A problem with the user's input or files: one line on stderr, exit status 2."""


def _one_line(text: str) -> str:
    return re.sub(r"\s*\n\s*", " ", str(text).strip())


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {_process_tag()}{_one_line(message)}", err=True)
    raise typer.Exit(code=2)


def _process_tag() -> str:
    """``"[process 3] "`` in a process other than 0 of a multi-process job, else ``""``."""
    import jax

    if not jax.distributed.is_initialized() or jax.process_index() == 0:
        return ""
    return f"[process {jax.process_index()}] "


def _message(err: BaseException) -> str:
    return str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err)


def _traceback_wanted() -> bool:
    return os.environ.get("EVOTENSOR_TRACEBACK", "") not in ("", "0")


def _configure_jax() -> None:
    """Persistent compilation cache (:mod:`evotensor.core.compile_cache`, as for the Python API) + no
    GPU memory preallocation (before JAX starts)."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    from evotensor.core.compile_cache import enable_default_cache

    enable_default_cache()


def _parse_value(text: str) -> Any:
    """``--set key=value`` values: TOML scalars (ints, floats, bools, "strings"), else raw text."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


# ---- files and directories ------------------------------------------------------------------------


def _path_option(value: str | None, flag: str) -> Path | None:
    if value is None:
        return None
    if not value.strip():
        raise _Problem(f"{flag} needs a path, got an empty string")
    return Path(value)


def _read_text(path: Path, what: str) -> str:
    """The UTF-8 text of the file ``path``; ``what`` names it in errors (e.g. ``--config c.toml``)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise _Problem(f"{what}: file not found") from None
    except IsADirectoryError:
        raise _Problem(f"{what}: is a directory, not a file") from None
    except OSError as err:
        raise _Problem(f"{what}: cannot read it ({err.strerror or err})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise _Problem(f"{what}: not a text file (invalid UTF-8 at byte {err.start})") from None


def _read_json_object(path: Path, what: str) -> dict[str, Any]:
    text = _read_text(path, what)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise _Problem(f"{what} is damaged (not valid JSON: {err})") from None
    if not isinstance(value, dict):
        raise _Problem(f"{what} is damaged (not a JSON object)")
    return value


def _run_record(run_dir: Path, flag: str) -> dict[str, Any]:
    """``run_dir/config.json`` of a run directory, checked for the fields the CLI reads."""
    where = f"{flag} {run_dir}".strip()
    if not run_dir.exists():
        raise _Problem(f"{where} is not a run directory (no such directory)")
    if not run_dir.is_dir():
        raise _Problem(f"{where} is not a run directory (not a directory)")
    record_path = run_dir / "config.json"
    if not record_path.exists():
        raise _Problem(f"{where} is not a run directory (no config.json)")
    record = _read_json_object(record_path, str(record_path))
    if not isinstance(record.get("task"), str) or not isinstance(record.get("config"), dict):
        raise _Problem(f"{record_path} is damaged or not a run record (no 'task' name and 'config' table)")
    return record


def _prepare_run_dir(path: Path, flag: str) -> None:
    """Create the run directory ``path`` if needed and make sure a run can write there (process 0
    of a multi-process job only: the others never write it)."""
    from evotensor.io.multihost import is_main_process

    if not is_main_process():
        return
    if path.exists() and not path.is_dir():
        raise _Problem(f"{flag} {path}: exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise _Problem(f"{flag} {path}: a parent of it is not a directory") from None
    except OSError as err:
        raise _Problem(f"{flag} {path}: cannot create the directory ({err.strerror or err})") from None
    try:
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as err:
        raise _Problem(f"{flag} {path}: cannot write there ({err.strerror or err})") from None


# ---- options --------------------------------------------------------------------------------------


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _check_type(name: str, value: Any, default: Any) -> None:
    """Refuse a value whose kind does not fit the option's default (a float option needs a number,
    a bool option true/false, an int option an int; ints and strings are left to the task builder,
    which names the option, where an option takes several forms such as ``hidden = "32,32"``)."""
    if default is None or isinstance(default, (list, tuple, dict)):
        return
    if isinstance(default, bool):
        ok = (
            isinstance(value, bool)
            or (type(value) is int and value in (0, 1))
            or (isinstance(value, str) and value.lower() in ("true", "false", "0", "1"))
        )
        if not ok:
            raise _Problem(f"option {name} must be true or false, got {value!r}")
    elif isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise _Problem(f"option {name} must be a finite number, got {value!r}")
    elif isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise _Problem(f"option {name} must be an int, got {value!r}")
    elif isinstance(default, str):
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise _Problem(f"option {name} must be a string, got {value!r}")


def _check_common(name: str, value: Any) -> Any:
    """``pop``, ``generations`` and ``seed``, whatever their source (``None``: the task default)."""
    from evotensor.core.checks import ArgumentError, check_int

    if value is None and name in ("pop", "generations"):
        return None
    bounds = {"pop": (1, INT32_MAX), "generations": (1, INT32_MAX), "seed": (0, SEED_MAX)}[name]
    try:
        return check_int(value, name, minimum=bounds[0], maximum=bounds[1])
    except ArgumentError as err:
        raise _Problem(str(err)) from None


def _collect_options(task, pop, generations, seed, config, set_, resume) -> dict[str, Any]:
    """Merge config.json (resume) < TOML file < --set < flags into one task config.

    Returns ``{"task", "config", "generations", "given": {option: where it came from},
    "recorded": the resumed run's config or None}``.
    """
    cfg: dict[str, Any] = {}
    given: dict[str, str] = {}
    recorded = None
    if resume is not None:
        record = _run_record(resume, "--resume")
        if record["task"] != task:
            raise _Problem(f"--resume {resume} is a run of task {record['task']!r}, not {task!r}")
        recorded = dict(record["config"])
        cfg.update(recorded)
    if config is not None:
        where = f"--config {config}"
        try:
            table = tomllib.loads(_read_text(config, where))
        except tomllib.TOMLDecodeError as err:
            raise _Problem(f"{where}: invalid TOML ({err})") from None
        cfg.update(table)
        given.update({key: where for key in table})
    for item in set_:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise _Problem(f"--set expects KEY=VALUE, got {item!r}")
        cfg[key.strip()] = _parse_value(value.strip())
        given[key.strip()] = f"--set {item}"
    for key, value in (("pop", pop), ("seed", seed), ("generations", generations)):
        if value is not None:
            cfg[key] = value
            given[key] = f"--{key} {value}"
    for key in ("pop", "generations", "seed"):
        if key in cfg:
            try:
                cfg[key] = _check_common(key, cfg[key])
            except _Problem as problem:
                where = given.get(key, f"{resume}/config.json")
                raise _Problem(f"{where}: {problem}") from None
    total = cfg.get("generations")
    if resume is not None:
        cfg.pop("generations", None)
        given.pop("generations", None)
    return {"task": task, "config": cfg, "generations": total, "given": given, "recorded": recorded}


def _check_options(spec: Any, options: dict[str, Any], resume: Path | None) -> None:
    """Unknown options, values of the wrong kind, and (on resume) options that would change the run."""
    given, cfg = options["given"], options["config"]
    for name in cfg:
        if name not in spec.defaults:
            where = given.get(name, f"{resume}/config.json")
            raise _Problem(
                f"{where}: task {spec.name!r} has no option(s) {name}; "
                f"valid options: {', '.join(sorted(spec.defaults))}"
            )
    for name, value in cfg.items():
        if name not in ("pop", "generations", "seed"):
            try:
                _check_type(name, value, spec.defaults[name])
            except _Problem as problem:
                raise _Problem(f"{given.get(name, f'{resume}/config.json')}: {problem}") from None
    if resume is not None:
        before = {**spec.defaults, **options["recorded"]}
        for name, where in given.items():
            if not _same_value(cfg[name], before.get(name)):
                raise _Problem(
                    f"{where}: {name} cannot change when resuming (the run used {before.get(name)!r}); "
                    f"a resumed run keeps its problem and strategy, only {_RESUME_MAY_CHANGE} may be given"
                )


def _data_options(spec: Any, options: dict[str, Any], data: Any, target: Any, resume: Path | None) -> None:
    """``--data``/``--target`` into the task config: the data file (from any source) as an absolute
    path, so a resumed run reads the same file from any directory, and, on a fresh run, its SHA-256
    as ``data_sha256``, which the task checks again on ``--resume`` (a changed file is refused)."""
    cfg, given = options["config"], options["given"]
    if data is not None:
        cfg["data"], given["data"] = data, f"--data {data}"
    if target is not None:
        cfg["target"], given["target"] = target, f"--target {target}"
    if "data" not in given or not isinstance(cfg["data"], str):
        return  # a resumed run's recorded path is absolute already; a non-string is the task's to refuse
    if not cfg["data"].strip():
        raise _Problem(f"{given['data']}: needs a path, got an empty string")
    path = Path(cfg["data"]).expanduser().absolute()
    cfg["data"] = str(path)
    if resume is None and "data_sha256" in spec.defaults and "data_sha256" not in given:
        from evotensor.io.files import file_sha256

        cfg["data_sha256"] = file_sha256(path, given["data"], error=_Problem)


def _build(spec: Any, options: dict[str, Any]) -> Any:
    """The task built from its options; any failure is a one-line problem naming the options."""
    try:
        return spec.build(options["config"])
    except Exception as err:
        if _traceback_wanted():
            raise
        message = _one_line(_message(err))
        if not isinstance(err, (ValueError, TypeError, KeyError)):
            message = f"{type(err).__name__}: {message}"
        given = options["given"]
        if given and not any(re.search(rf"\b{re.escape(name)}\b", message) for name in given):
            message += f" (options given: {', '.join(given.values())})"
        raise _Problem(f"task {spec.name}: {message}") from None


def _resume_hint(run_dir: Path, task: str, resume: bool) -> str:
    """What survives in ``run_dir`` and the command that continues it (``"; ..."``), or ``""`` when a
    resumed run's own checkpoint is unreadable (the error is about that checkpoint)."""
    from evotensor.io.rundir import RunDirectory

    try:
        generation = RunDirectory.checkpoint_generation(run_dir)
    except Exception:  # no checkpoint, or an unreadable one
        return "" if resume else "; no checkpoint was written, start the run again"
    command = f"evotensor run {task} --resume {shlex.quote(str(run_dir))}"
    return f"; resume with `{command}` (its checkpoint of generation {generation} is intact)"


# ---- commands -------------------------------------------------------------------------------------


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
    seed: int | None = typer.Option(None, "--seed", min=0, help=f"random seed, 0 to {SEED_MAX} (default 0)"),
    out: str | None = typer.Option(None, "--out", help="run directory (default runs/<task>-<time>)"),
    resume: str | None = typer.Option(None, "--resume", help="continue the run in this directory"),
    config: str | None = typer.Option(None, "--config", help="TOML file of task options"),
    set_: list[str] = typer.Option([], "--set", help="task option KEY=VALUE (repeatable)"),
    chunk_size: int | None = typer.Option(None, "--chunk-size", min=1, help="generations per compiled chunk"),
    quiet: bool = typer.Option(False, "--quiet", help="no progress output"),
    data: str | None = typer.Option(None, "--data", help="CSV file with a header line (task sr)"),
    target: str | None = typer.Option(None, "--target", help="the --data file's target column"),
    devices: str | None = typer.Option(
        None, "--devices", help="spread the population over N devices, or 'all' (a mesh for evotensor.run)"
    ),
    cpu_devices: int | None = typer.Option(
        None, "--cpu-devices", help="give this process N host CPU devices (to use --devices N on a CPU)"
    ),
    distributed: bool = typer.Option(
        False,
        "--distributed",
        help="join a multi-process job first (flags below, EVOTENSOR_*, SLURM, Open MPI)",
    ),
    coordinator: str | None = typer.Option(
        None, "--coordinator", help="HOST:PORT of process 0 (--distributed)"
    ),
    num_processes: int | None = typer.Option(
        None, "--num-processes", help="processes in the job (--distributed)"
    ),
    process_id: int | None = typer.Option(None, "--process-id", help="this process's index (--distributed)"),
    checkpoint_format: str | None = typer.Option(
        None,
        "--checkpoint-format",
        help="single (one checkpoint.npz, the default) or sharded (each process writes its own shards)",
    ),
) -> None:
    """Run TASK and write a run directory (config, metrics, checkpoint, best solution, plots).

    With --resume DIR the run continues from DIR's checkpoint, bit-identically; its task options,
    --pop and --seed cannot change (only --generations, --chunk-size and --quiet may be given, and
    the device flags: a checkpoint resumes on any number of devices).
    A --data file's absolute path and SHA-256 are recorded: --resume reads it again and refuses it
    if it changed.

    --devices N (or all) runs on a mesh of N devices (the population size must be a multiple of N);
    on a CPU add --cpu-devices N. --distributed runs one process of a multi-process job (every
    process runs the same command; process 0 writes the run directory, which must be on a file
    system all processes share); the mesh spans every process's devices unless --devices says how
    many (a multiple of the number of processes). --checkpoint-format sharded writes checkpoints as
    directories in which every process writes only its own devices' shards (for states larger than
    one host); --resume reads either format.
    """
    if checkpoint_format is not None and checkpoint_format not in ("single", "sharded"):
        _fail(f"--checkpoint-format must be 'single' or 'sharded', got {checkpoint_format!r}")
    try:
        placement = _start_devices(devices, cpu_devices, distributed, coordinator, num_processes, process_id)
    except _Problem as problem:
        _fail(str(problem))
    error, prepared, mesh = None, None, None
    try:
        prepared = _prepare_run(task, pop, generations, seed, out, resume, config, set_, data, target)
        mesh = _mesh(placement)
    except _Problem as problem:
        error = str(problem)
    if placement.distributed:  # all processes stop together, each saying why
        _agree_or_fail(error)
    if error is not None:
        _fail(error)
    _execute(
        *prepared,
        chunk_size=chunk_size,
        quiet=quiet,
        resume=resume is not None,
        mesh=mesh,
        checkpoint_format=checkpoint_format,
    )
    if placement.distributed:
        from evotensor.distributed import shutdown

        shutdown()


def _prepare_run(task, pop, generations, seed, out, resume, config, set_, data=None, target=None):
    resume_dir = _path_option(resume, "--resume")
    config_path = _path_option(config, "--config")
    out_dir = _path_option(out, "--out")
    if resume_dir is not None and out_dir is not None:
        raise _Problem("--out cannot be combined with --resume (a resumed run stays in its directory)")
    options = _collect_options(task, pop, generations, seed, config_path, set_, resume_dir)
    _configure_jax()
    from evotensor.io.rundir import default_run_dir
    from evotensor.tasks import get_task

    try:
        spec = get_task(options["task"])
    except KeyError as err:
        raise _Problem(_message(err)) from None
    _data_options(spec, options, data, target, resume_dir)
    _check_options(spec, options, resume_dir)
    built = _build(spec, options)
    cfg = {**spec.defaults, **options["config"]}
    if resume_dir is not None:
        run_dir, flag = resume_dir, "--resume"
    elif out_dir is not None:
        run_dir, flag = out_dir, "--out"
    else:  # a name from the clock: process 0's, so that every process of a job agrees on it
        from evotensor.io.multihost import broadcast_text, is_main_process

        name = str(default_run_dir(spec.name)) if is_main_process() else None
        run_dir, flag = Path(broadcast_text(name)), "run directory"
    _prepare_run_dir(run_dir, flag)
    total = options["generations"] if options["generations"] is not None else built.generations
    try:
        total = _check_common("generations", total)
    except _Problem as problem:
        raise _Problem(f"task {spec.name}: {problem}") from None
    return spec, built, cfg, run_dir, total


def _execute(
    spec, built, cfg, run_dir, total, *, chunk_size, quiet, resume, mesh=None, checkpoint_format=None
) -> None:
    import jax

    import evotensor
    from evotensor.io.checkpoint import CheckpointError
    from evotensor.io.multihost import ProcessFailure, gather_to_host, is_main_process

    main = is_main_process()  # the others of a multi-process job run without printing or writing
    if main:
        typer.echo(f"task {spec.name}: {spec.description}", err=True)
        typer.echo(f"run directory: {run_dir}", err=True)
        if mesh is not None:
            typer.echo(f"devices: {_mesh_summary(mesh)}", err=True)
    options = {"mesh": mesh} if mesh is not None else {}
    if checkpoint_format is not None:
        options["checkpoint_format"] = checkpoint_format
    try:
        result = evotensor.run(
            built.strategy,
            built.problem,
            total,
            jax.random.key(cfg["seed"]),
            decoder=built.decoder,
            chunk_size=chunk_size,
            run_dir=run_dir,
            resume=resume,
            progress=not quiet and main,
            config={**cfg, "generations": total},
            task_name=spec.name,
            best_to_text=built.best_to_text,
            **options,
        )
        if built.report is not None and jax.process_count() > 1:
            # a report reads the final state, whose sharded arrays every process must gather
            result.state = gather_to_host(result.state)
        if main:
            direction = "maximizes" if built.problem.maximize else "minimizes"
            typer.echo(f"best fitness: {result.best_fitness:.6g}  (problem {direction})")
            typer.echo(
                f"{result.generations} generations, {result.evaluations:,} evaluations, "
                f"compile {result.compile_seconds:.1f}s, run {result.run_seconds:.1f}s"
            )
            if built.report is not None:
                typer.echo(built.report(result, Path(run_dir)))
    except KeyboardInterrupt:
        global _interrupt_reported
        _interrupt_reported = True
        typer.echo(f"interrupted{_resume_hint(run_dir, spec.name, resume)}", err=True)
        raise typer.Exit(code=130) from None
    except (CheckpointError, FileNotFoundError) as err:
        if _traceback_wanted():
            raise
        _fail(f"--resume {run_dir}: {_message(err)}" if resume else _message(err))
    except OSError as err:
        if _traceback_wanted():
            raise
        where = f" ({err.filename})" if err.filename else ""
        _fail(f"{err.strerror or err}{where}{_resume_hint(run_dir, spec.name, resume)}")
    except ProcessFailure as err:  # another process of the job failed (it prints its own error)
        if _traceback_wanted():
            raise
        _fail(f"{err}{_resume_hint(run_dir, spec.name, resume)}")
    except ValueError as err:  # e.g. --generations below the checkpoint's generation
        if _traceback_wanted():
            raise
        message = _message(err)
        if mesh is not None and message.startswith("mesh"):  # run()'s check of the population split
            message = f"--devices ({mesh.devices.size} devices): {message} (the population size is --pop)"
        _fail(message)
    except Exception as err:
        if "RESOURCE_EXHAUSTED" not in str(err) or _traceback_wanted():
            raise
        _fail(
            f"out of memory running task {spec.name} (reduce --pop or the task's size options)"
            f"{_resume_hint(run_dir, spec.name, resume)}"
        )
    if main:
        checkpoint = "checkpoint-<generation>/" if checkpoint_format == "sharded" else "checkpoint.npz"
        files = f"config.json metrics.csv {checkpoint} best.npz best.txt best.json fitness.png"
        typer.echo(f"wrote {run_dir}/: {files}")


# ---- devices and processes ------------------------------------------------------------------------


class _Placement:
    """What the device flags asked for: ``devices`` (None, "all" or an int) and whether this
    process joined a multi-process job."""

    def __init__(self, devices: int | str | None, distributed: bool):
        self.devices, self.distributed = devices, distributed


def _start_devices(devices, cpu_devices, distributed, coordinator, num_processes, process_id) -> _Placement:
    """Check the device flags and set JAX up before anything else uses it: the CPU device count,
    then (``--distributed``) the multi-process job."""
    from evotensor.core.checks import ArgumentError

    count: int | str | None = None
    if devices is not None:
        text = devices.strip().lower()
        if text == "all":
            count = "all"
        elif text.isdigit() and int(text) >= 1:
            count = int(text)
        else:
            raise _Problem(f"--devices must be a positive int or 'all', got {devices!r}")
    if not distributed:
        given = [f for f, v in (("--coordinator", coordinator), ("--num-processes", num_processes),
                                ("--process-id", process_id)) if v is not None]  # fmt: skip
        if given:
            raise _Problem(f"{', '.join(given)} only apply with --distributed")
    if cpu_devices is not None:
        if cpu_devices < 1:
            raise _Problem(f"--cpu-devices must be a positive int, got {cpu_devices}")
        from evotensor.distributed.devices import use_cpu_devices

        try:
            use_cpu_devices(cpu_devices)
        except RuntimeError as err:
            raise _Problem(f"--cpu-devices {cpu_devices}: {err}") from None
    if distributed:
        from evotensor.distributed.cluster import CLI_NAMES, initialize

        try:
            spec = initialize(coordinator, num_processes, process_id, names=CLI_NAMES)
        except (ArgumentError, RuntimeError) as err:
            raise _Problem(f"--distributed: {err}") from None
        if spec.process_id == 0:
            typer.echo(f"distributed: {spec.describe()}", err=True)
    return _Placement(count, distributed)


def _mesh(placement: _Placement) -> Any:
    """The mesh the flags ask for (None: one device, as without the flags)."""
    if placement.devices is None and not placement.distributed:
        return None
    import jax

    from evotensor.core.checks import ArgumentError
    from evotensor.distributed.devices import global_mesh

    wanted = None if placement.devices in (None, "all") else placement.devices
    try:
        return global_mesh(devices=wanted)
    except ArgumentError as err:
        hint = ""
        if jax.default_backend() == "cpu" and jax.local_device_count() < (wanted or 0):
            hint = f" (on a CPU, add --cpu-devices {wanted // jax.process_count()})"
        raise _Problem(f"--devices {placement.devices}: {err}{hint}") from None


def _mesh_summary(mesh: Any) -> str:
    import jax

    devices = list(mesh.devices.flat)
    processes = sorted({d.process_index for d in devices})
    where = (
        f", {len(devices) // len(processes)} in each of {len(processes)} processes"
        if len(processes) > 1
        else ""
    )
    return f"{len(devices)} {jax.default_backend()} devices on mesh axis {mesh.axis_names[0]!r}{where}"


def _agree_or_fail(error: str | None) -> None:
    """Every process of the job learns whether all prepared the run; a process whose peer failed
    exits with that peer's message (its own failure is reported by the caller)."""
    from evotensor.io.multihost import agree

    failures = agree(error)
    if error is None and failures:
        process, message = min(failures.items())
        _fail(f"process {process}: {message}")


@app.command("show")
def show(run_dir: str = typer.Argument(..., help="a run directory written by `evotensor run`")) -> None:
    """Summarize a run directory: configuration, best result, last metrics and the plots."""
    try:
        table, plots = _show_table(run_dir)
        front = _front_table(Path(run_dir))
    except _Problem as problem:
        _fail(str(problem))
    from rich.console import Console

    Console().print(table)
    if front is not None:  # a GP run's Pareto front (front.csv)
        Console().print(front)
    for plot in plots:  # full paths outside the table, so they are never truncated
        typer.echo(f"plot: {plot}")


def _front_table(run_dir: Path) -> Any:
    """The rows of ``run_dir/front.csv`` (a GP run's Pareto front, written by
    ``evotensor.gp.front.write_front_csv``) as a table, or None without one."""
    import csv

    from rich.table import Table

    path = run_dir / "front.csv"
    if not path.exists():
        return None
    if not path.is_file():
        raise _Problem(f"{path}: is a directory, not a file")
    columns = ["complexity", "loss", "score", "chosen", "expression"]
    title = f"Pareto front ({path.name}; > chosen)"
    table = Table("", "complexity", "loss", "score", "expression", title=title)
    try:
        with path.open(newline="") as fh:
            reader = csv.DictReader(fh)
            if reader.fieldnames != columns:
                raise _Problem(f"{path}: header must be {','.join(columns)}, got {reader.fieldnames}")
            for row in reader:
                try:
                    loss, score = float(row["loss"]), float(row["score"])
                    cells = [
                        str(int(row["complexity"])),
                        f"{loss:.6g}",
                        "" if math.isnan(score) else f"{score:.4g}",
                    ]
                except (TypeError, ValueError):
                    raise _Problem(f"{path}, line {reader.line_num}: bad row {row!r:.120}") from None
                table.add_row(">" if row["chosen"] == "1" else "", *cells, row["expression"] or "")
    except (OSError, UnicodeDecodeError) as err:
        raise _Problem(f"{path}: cannot read it ({getattr(err, 'strerror', None) or err})") from None
    return table


def _show_table(run_dir_text: str) -> tuple[Any, list[Path]]:
    from rich.table import Table

    from evotensor.io.rundir import MetricsError, read_metrics

    if not run_dir_text.strip():
        raise _Problem("show needs a run directory, got an empty string")
    run_dir = Path(run_dir_text)
    record = _run_record(run_dir, "")

    def text(value: Any) -> str:
        return value if isinstance(value, str) else json.dumps(value)

    table = Table("field", "value", title=f"run {run_dir}")
    table.add_row("task", record["task"])
    for key, value in record["config"].items():
        table.add_row(f"  {key}", text(value))
    device = record.get("device")
    devices = device.get("devices") if isinstance(device, dict) else None
    table.add_row("device", ", ".join(map(str, devices)) if isinstance(devices, list) else "not recorded")
    versions = record.get("versions")
    if isinstance(versions, dict):
        table.add_row("versions", ", ".join(f"{k} {v}" for k, v in versions.items()))
    best_path = run_dir / "best.json"
    if best_path.exists():
        best = _read_json_object(best_path, str(best_path))
        for key, value in best.items():
            table.add_row(key, f"{value:.6g}" if isinstance(value, float) else text(value))
    else:
        table.add_row("status", f"unfinished (resume with `evotensor run {record['task']} --resume DIR`)")
    metrics_path = run_dir / "metrics.csv"
    if metrics_path.is_file() and metrics_path.stat().st_size > 0:
        try:
            metrics = read_metrics(metrics_path)
        except MetricsError as err:
            raise _Problem(f"{err} (resuming the run rewrites it from the checkpoint)") from None
        except OSError as err:
            raise _Problem(f"{metrics_path}: cannot read it ({err.strerror or err})") from None
        if len(metrics["generation"]):
            table.add_row("generations logged", str(int(metrics["generation"][-1])))
            for key, values in metrics.items():
                if key != "generation":
                    table.add_row(f"  last {key}", f"{values[-1]:.6g}")
    elif metrics_path.exists() and not metrics_path.is_file():
        raise _Problem(f"{metrics_path}: is a directory, not a file")
    plots = sorted(p for p in run_dir.glob("*.png") if p.is_file())
    table.add_row("plots", ", ".join(p.name for p in plots) or "none")
    return table, plots


def main(argv: list[str] | None = None) -> NoReturn:
    """Entry point of the ``evotensor`` command (``argv``: the arguments, default ``sys.argv[1:]``).

    Exits with 0 on success, 2 on any problem with the input or the files (one ``error:`` line on
    stderr), 130 on Ctrl-C.
    """
    command = typer.main.get_command(app)
    try:
        code = command.main(args=argv, prog_name="evotensor", standalone_mode=False)
    except _CLICK_EXCEPTION as err:
        if type(err).__name__ == "NoArgsIsHelpError":  # bare `evotensor`: the help text
            err.show()
        else:
            hint = ""
            if isinstance(err, _USAGE_ERROR) and getattr(err, "ctx", None) is not None:
                hint = f" (see `{err.ctx.command_path} --help`)"
            typer.echo(f"error: {_one_line(err.format_message())}{hint}", err=True)
        code = err.exit_code
    except typer.Abort:
        typer.echo("error: aborted (end of input)", err=True)
        code = 1
    except KeyboardInterrupt:
        code = 130
    if code == 130 and not _interrupt_reported:
        typer.echo("interrupted", err=True)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
