"""The run directory: everything needed to inspect, reproduce and resume a run.

``runs/<task>-<timestamp>/`` holds

* ``config.json`` — task, seed, every hyperparameter, package versions, device, command line;
* ``metrics.csv`` — one row per generation (natural orientation);
* ``checkpoint.npz`` — the full run state after the last completed chunk (atomic write);
* ``best.npz`` / ``best.json`` / ``best.txt`` — the best solution, reloadable, and its fitness;
* ``fitness.png`` — best-so-far and generation-mean fitness curves (plus task-specific plots).

Every file but ``metrics.csv`` (appended row by row, rebuilt from the checkpoint on resume) is
written atomically (:mod:`evotensor.io.atomic`). The checkpoint carries the *identity* of its run
(:func:`run_identity`: task, configuration, strategy, params, problem, key); resuming checks it and
refuses a checkpoint of another run. A fresh run into a directory removes the files of the run that
was there before (so a later resume cannot pick up that run's checkpoint), and starting or resuming
removes the temporary files that a killed write left behind.

**Several processes** (a job started with :func:`evotensor.distributed.initialize`): every process
creates the same :class:`RunDirectory` and makes the same calls (the run loop does), but only
process 0 writes; the others run without touching the directory. A checkpoint is written
collectively: every process takes part in gathering the state's arrays that are sharded over several
processes (:func:`evotensor.io.multihost.gather_to_host`), process 0 writes the file atomically, and
all processes then agree that it was written (:func:`evotensor.io.multihost.agree`, a barrier) — a
failure on one process (a full disk on process 0) raises on every process instead of leaving the
others waiting in a collective. On resume every process reads the checkpoint itself (the directory
must be on a file system that all processes share, as it is on a cluster's shared home or scratch),
they check that all read the same bytes, and each places the values onto its devices' shards of the
current mesh (the checkpoint holds global arrays, so it restores onto any number of devices).

**Checkpoint formats** (``RunDirectory(..., checkpoint_format=...)``, ``evotensor.run(...,
checkpoint_format=...)``): ``"single"`` (the default, :class:`~evotensor.io.checkpoint.SingleFileCheckpoints`)
writes ``checkpoint.npz`` as above; ``"sharded"`` or a
:class:`~evotensor.io.sharded_checkpoint.ShardedCheckpoints` (``keep=N``) writes directories
``checkpoint-<generation>/`` in which every process writes its own shards and nothing is gathered,
for states that do not fit one host. The format is only how a checkpoint is *written*: a resume
reads whichever format the directory holds (the newest checkpoint of either), so a run may switch
formats or device counts between resumes; a new checkpoint removes the other format's.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as _dt
import errno
import io
import json
import math
import platform
import re
import sys
from collections.abc import Iterator
from importlib import metadata as _metadata
from pathlib import Path
from typing import Any

import jax
import numpy as np

from evotensor.core.checks import ArgumentError
from evotensor.io import atomic, multihost
from evotensor.io.checkpoint import CheckpointError, SingleFileCheckpoints, save_pytree
from evotensor.io.sharded_checkpoint import ShardedCheckpoints

CHECKPOINT = "checkpoint.npz"
_HISTORY = "history/"
# the files a run writes into its directory (a fresh run removes those of an earlier run)
RUN_FILES = ("config.json", "metrics.csv", CHECKPOINT, "best.npz", "best.json", "best.txt", "fitness.png")


CHECKPOINT_FORMATS = {"single": SingleFileCheckpoints, "sharded": ShardedCheckpoints}


def resolve_checkpoint_format(value: Any) -> Any:
    """The checkpoint format object for ``value``: ``None`` or ``"single"`` (one ``checkpoint.npz``),
    ``"sharded"`` (``ShardedCheckpoints()``), or a format object (``ShardedCheckpoints(keep=3)``, or
    one following the same protocol: methods ``find``, ``stage``, ``commit``, ``remove_all``,
    ``remove_stale``, ``metadata``, ``digest``, ``read``, ``extra_arrays``, ``place`` and attributes
    ``name``, ``agree_before_commit``; see the two built-in formats).

    Raises:
        ArgumentError: naming ``checkpoint_format`` and showing the value.
    """
    if value is None:
        return SingleFileCheckpoints()
    if isinstance(value, str):
        if value not in CHECKPOINT_FORMATS:
            raise ArgumentError(
                f"checkpoint_format must be one of {tuple(CHECKPOINT_FORMATS)} or a format object such as "
                f"evotensor.io.sharded_checkpoint.ShardedCheckpoints(keep=2), got {value!r}"
            )
        return CHECKPOINT_FORMATS[value]()
    needed = ("find", "stage", "commit", "remove_all", "remove_stale", "metadata", "digest", "read", "place")
    missing = [name for name in (*needed, "extra_arrays") if not callable(getattr(value, name, None))]
    missing += [name for name in ("name", "agree_before_commit") if not hasattr(value, name)]
    if missing:
        raise ArgumentError(
            f"checkpoint_format must be 'single', 'sharded' or a checkpoint format object, got "
            f"{type(value).__name__} {value!r} (it has no {', '.join(missing)})"
        )
    return value


def _generation(reader: Any, path: Path) -> int:
    generation = reader.metadata(path).get("generation")
    if isinstance(generation, bool) or not isinstance(generation, int):
        raise CheckpointError(f"{path} is damaged (no generation in its metadata)")
    return generation


def latest_checkpoint(run_path: Path, chosen: Any = None) -> tuple[Any, Path] | None:
    """``(format, path)`` of the newest checkpoint in ``run_path`` of any format (``chosen``'s first
    on a tie), or ``None``. Both formats are present only after a crash between writing one and
    removing the other, or when the run switched formats: the higher generation wins.

    Raises:
        CheckpointError: a checkpoint whose generation cannot be read while another format's exists.
    """
    found = [
        (reader, path)
        for reader in _readers(resolve_checkpoint_format(chosen))
        if (path := reader.find(run_path))
    ]
    if len(found) <= 1:
        return found[0] if found else None
    return max(found, key=lambda pair: _generation(*pair))  # max keeps the first of equals


def _readers(chosen: Any) -> list[Any]:
    """The formats a resume looks for: the run's own first, then every built-in one."""
    others = [cls() for cls in CHECKPOINT_FORMATS.values() if not isinstance(chosen, cls)]
    return [chosen, *others]


class MetricsError(ValueError):
    """A ``metrics.csv`` that cannot be parsed; the message names the file and the line."""


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
    """The JAX backend and devices the run computes on (every process's devices in a multi-process
    job), and the number of processes."""
    devices = jax.devices()
    return {
        "backend": jax.default_backend(),
        "processes": jax.process_count(),
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


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _canonical(value: Any) -> Any:
    """JSON-ready ``value`` without memory addresses (``<object at 0x...>`` differs per process)."""
    if isinstance(value, str):
        return _ADDRESS.sub("", value)
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return value


def run_identity(
    task_name: str, config: dict[str, Any] | None, *, strategy: Any, problem: Any, params: Any, key: jax.Array
) -> dict[str, Any]:
    """What makes a run *this* run, as JSON: the task name, its configuration (without
    ``generations``, which a resume may extend), the strategy's class and static configuration, its
    params, the problem's class and static configuration, and the key's data.

    Two runs with equal identities compute the same generations; a checkpoint stores the identity of
    its run and :meth:`RunDirectory.load_checkpoint` refuses one whose identity differs.
    """
    config = {k: v for k, v in (config or {}).items() if k != "generations"}
    return _canonical(
        {
            "task": task_name,
            "config": _jsonable(config),
            "strategy": _static_config(strategy),
            "params": params_to_dict(params),
            "problem": _static_config(problem),
            "key_data": np.asarray(jax.random.key_data(key)).tolist(),
        }
    )


def _same(a: Any, b: Any) -> bool:
    """Equal JSON values; floats to a relative 1e-5 (params and derived constants may be computed on
    another device or libm), NaN equal to NaN."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    numbers = (int, float)
    if (
        isinstance(a, numbers)
        and isinstance(b, numbers)
        and not isinstance(a, bool)
        and not isinstance(b, bool)
    ):
        if isinstance(a, int) and isinstance(b, int):
            return a == b
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-30)
    return type(a) is type(b) and a == b


def _first_difference(saved: Any, current: Any, where: str = "") -> str:
    """Where two identities first differ, e.g. ``config['function']: 'rastrigin' vs 'sphere'``."""
    if isinstance(saved, dict) and isinstance(current, dict):
        for k in sorted(set(saved) | set(current)):
            if k not in saved or k not in current:
                side = "the checkpoint's" if k in saved else "this run's"
                return f"{where}[{k!r}] is only in {side}"
            if not _same(saved[k], current[k]):
                return _first_difference(saved[k], current[k], f"{where}[{k!r}]")
    if isinstance(saved, list) and isinstance(current, list) and len(saved) == len(current):
        for i, (x, y) in enumerate(zip(saved, current)):
            if not _same(x, y):
                return _first_difference(x, y, f"{where}[{i}]")

    def short(v: Any) -> str:
        text = repr(v)
        return text if len(text) <= 60 else text[:57] + "..."

    return f"{where}: checkpoint {short(saved)}, this run {short(current)}"


def check_identity(path: Path, saved: Any, current: dict[str, Any]) -> None:
    """Refuse (:class:`CheckpointError`) a checkpoint whose stored identity ``saved`` is not
    ``current``, naming the first difference."""
    if not isinstance(saved, dict):
        raise CheckpointError(
            f"checkpoint {path} carries no run identity (written by an older evotensor), so it cannot "
            "be checked against this run; start a new run"
        )
    if not _same(saved, current):
        part = next((k for k in current if not _same(saved.get(k), current[k])), "task")
        what = {"key_data": "key (seed)", "params": "strategy params"}.get(part, part)
        raise CheckpointError(
            f"checkpoint {path} belongs to another run: mismatch in its {what} "
            f"({part}{_first_difference(saved.get(part), current[part])}); resume with the task, "
            "configuration, strategy, problem and key the run was started with, or start a new run"
        )


class RunDirectory:
    """Writes (and resumes from) one run directory.

    In a multi-process job only process 0 (``writes``) touches the directory; every process must
    create it and make the same calls (see the module docstring). ``writes`` may be given to choose
    otherwise (a test, or a job whose processes each keep their own directory).

    Raises:
        NotADirectoryError: ``path`` (or a parent) exists and is not a directory.
        OSError: the directory cannot be created.
        evotensor.io.multihost.ProcessFailure: (several processes) another process failed.
    """

    def __init__(
        self,
        path: Path,
        task_name: str = "run",
        *,
        writes: bool | None = None,
        checkpoint_format: Any = None,
    ):
        self.path = Path(path)
        self.task_name = task_name
        self.checkpoints = resolve_checkpoint_format(checkpoint_format)
        self.last_checkpoint: Path | None = None  # what save_checkpoint wrote last (process 0)
        self.identity: dict[str, Any] | None = None
        self.processes = jax.process_count()
        self.writes = multihost.is_main_process() if writes is None else bool(writes)
        self._pending: BaseException | None = None  # a write error held until the next agreement
        self._saved_identity: Any = None
        error = None
        if self.writes:
            try:
                self._create()
            except OSError as err:
                error = err
        self._settle(error, f"creating the run directory {self.path}")

    def _create(self) -> None:
        if self.path.exists() and not self.path.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "exists and is not a directory", str(self.path))
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except FileExistsError as err:  # a parent is a file
            raise NotADirectoryError(errno.ENOTDIR, "a parent is not a directory", str(self.path)) from err
        atomic.remove_stale_temp_files(self.path, RUN_FILES)
        for reader in _readers(self.checkpoints):
            reader.remove_stale(self.path)

    def _settle(self, error: BaseException | None, what: str) -> None:
        """One process: raise ``error`` if any. Several: all processes learn who failed (a
        collective); a failed process raises its own error, the others :class:`ProcessFailure`."""
        if self._pending is not None and error is None:
            error, self._pending = self._pending, None
        if self.processes == 1:
            if error is not None:
                raise error
            return
        failures = multihost.agree(None if error is None else _one_line(error))
        if error is not None:
            raise error
        multihost.raise_for_failures(failures, what)

    @contextlib.contextmanager
    def _writing(self, name: str) -> Iterator[None]:
        """Give an ``OSError`` while writing ``name`` the file's path and a note on what survives."""
        try:
            yield
        except OSError as err:
            if err.filename is None:
                err.filename = str(self.path / name)
            try:
                found = self._latest()
                generation: int | None = None if found is None else _generation(*found)
            except (OSError, ValueError):
                generation = None
            if generation is None or found is None:
                err.add_note(f"no checkpoint of this run in {self.path} yet: start the run again")
            else:
                err.add_note(
                    f"{found[1]} (generation {generation}) is intact: resume with "
                    f"run(..., run_dir={str(self.path)!r}, resume=True) once the cause is fixed"
                )
            raise

    # -- start -----------------------------------------------------------------------------
    def start(
        self, config: dict[str, Any], *, strategy: Any, problem: Any, params: Any, key: jax.Array
    ) -> None:
        """Begin a fresh run: remove the files of an earlier run in this directory, write
        ``config.json``; checkpoints written from now on carry this run's identity."""
        self.identity = run_identity(
            self.task_name, config, strategy=strategy, problem=problem, params=params, key=key
        )
        error = None
        if self.writes:
            try:
                self._write_config(config, strategy=strategy, problem=problem, params=params, key=key)
            except OSError as err:
                error = err
        self._settle(error, f"starting the run in {self.path}")

    def _write_config(
        self, config: dict[str, Any], *, strategy: Any, problem: Any, params: Any, key: Any
    ) -> None:
        for reader in _readers(
            self.checkpoints
        ):  # checkpoints first: a kill in between leaves nothing to resume
            reader.remove_all(self.path)
        for name in RUN_FILES:
            (self.path / name).unlink(missing_ok=True)
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
        with self._writing("config.json"):
            atomic.write_text_atomic(self.path / "config.json", json.dumps(record, indent=2) + "\n")

    def resume(
        self,
        template: Any,
        config: dict[str, Any],
        *,
        strategy: Any,
        problem: Any,
        params: Any,
        key: jax.Array,
    ) -> tuple[Any, dict[str, np.ndarray]]:
        """Continue the run whose checkpoint is here: ``(carry, history)``, after checking that the
        checkpoint belongs to the run described by the arguments (as for :meth:`start`). The carry's
        arrays are placed like ``template``'s (its shardings: the current mesh).

        Raises:
            FileNotFoundError: there is no checkpoint.
            CheckpointError: it is damaged, or it belongs to another run (task, configuration,
                strategy, params, problem or key differ), or its state does not fit ``template``.
        """
        self.identity = run_identity(
            self.task_name, config, strategy=strategy, problem=problem, params=params, key=key
        )
        return self.load_checkpoint(template, identity=self.identity)

    # -- per chunk -------------------------------------------------------------------------
    def append_metrics(self, metrics: dict[str, np.ndarray], first_generation: int) -> None:
        """Append one CSV row per generation of a chunk (9 significant digits: float32-exact).

        With several processes a failure is raised (on every process) by the next
        :meth:`save_checkpoint`, which every process reaches."""
        if not self.writes or self._pending is not None:
            return
        path = self.path / "metrics.csv"
        new = not path.exists()
        try:
            with self._writing("metrics.csv"), path.open("a", newline="", encoding="utf-8") as handle:
                handle.write(_metrics_csv(metrics, first_generation, header=new))
        except OSError as err:
            if self.processes == 1:
                raise
            self._pending = err

    def save_checkpoint(self, carry: Any, history: dict[str, np.ndarray]) -> None:
        """Atomically write the run state, the metric history so far and the run's identity, in
        this directory's checkpoint format.

        A collective with several processes: every process calls it. Single file: the state's
        sharded arrays are gathered, process 0 writes, all agree that it was written. Sharded: every
        process writes its own shards, all agree, process 0 writes the manifest and renames the
        checkpoint into place, all agree again."""
        checkpoints = self.checkpoints
        generation = int(np.asarray(carry.generation))  # replicated: readable on every process
        error, staged = None, None
        try:  # every process: a gather (single file) or writing its own shards (sharded)
            with self._writing(checkpoints.name):
                staged = checkpoints.stage(self.path, carry, generation)
        except OSError as err:
            error = err
        if checkpoints.agree_before_commit:  # nobody commits unless every process wrote its part
            self._settle(error, f"writing the shards of the checkpoint in {self.path}")
        error = None
        if self.writes and self._pending is None and staged is not None:
            metadata = {"generation": generation, "task": self.task_name, "identity": self.identity}
            try:
                with self._writing(checkpoints.name):
                    written = checkpoints.commit(
                        staged, metadata, extra_arrays={_HISTORY + k: v for k, v in history.items()}
                    )
                    for reader in _readers(checkpoints)[1:]:  # older, in the format not chosen
                        reader.remove_all(self.path)
            except (OSError, CheckpointError) as err:
                error = err
            else:
                self.last_checkpoint = written
        self._settle(error, f"writing the checkpoint in {self.path}")

    def _latest(self) -> tuple[Any, Path] | None:
        """``(format, path)`` of the newest checkpoint here, of any format; ``None`` if there is none."""
        return latest_checkpoint(self.path, self.checkpoints)

    def load_checkpoint(
        self, template: Any, identity: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, np.ndarray]]:
        """``(carry, history)`` from the newest checkpoint (``checkpoint.npz`` or a sharded
        ``checkpoint-<generation>/``), the carry placed like ``template``; rewrites ``metrics.csv``
        to match it.

        With ``identity`` (see :func:`run_identity`), a checkpoint of another run is refused. With
        several processes every process reads the checkpoint (a sharded one: the manifest and its
        own devices' slices), and all of them check that they read the same bytes (the run
        directory must be on a shared file system) before any places it.

        Raises:
            FileNotFoundError: there is no checkpoint.
            CheckpointError: it is damaged, belongs to another run, or does not fit ``template``.
        """
        error, loaded = None, None
        try:
            loaded = self._read_checkpoint(template, identity)
        except (OSError, ValueError) as err:
            error = err
        self._settle(error, f"reading the checkpoint in {self.path}")
        assert loaded is not None
        reader, path, values, history, digest = loaded
        if self.processes > 1:
            differ = multihost.differing_processes(digest)
            if differ:
                raise CheckpointError(
                    f"{path}: process(es) {differ} read other bytes than process 0; "
                    "the run directory must be on a file system that every process shares"
                )
        self.identity = identity if identity is not None else self._saved_identity
        return reader.place(values, template), history

    def _read_checkpoint(
        self, template: Any, identity: dict[str, Any] | None
    ) -> tuple[Any, Path, Any, dict[str, np.ndarray], bytes]:
        """Host-side part of :meth:`load_checkpoint` (no device program): the format and path of
        the checkpoint, its checked values, the history and the digest all processes must agree on;
        process 0 rewrites ``metrics.csv``."""
        found = self._latest()
        if found is None:
            raise FileNotFoundError(
                f"no checkpoint to resume from: {self.path / CHECKPOINT} does not exist "
                "(nor a sharded checkpoint-<generation> directory)"
            )
        reader, path = found
        digest = reader.digest(path)
        metadata = reader.metadata(path)
        if identity is not None:
            check_identity(path, metadata.get("identity"), identity)
        try:
            values = reader.read(path, template)
        except CheckpointError as err:
            raise CheckpointError(f"{err} (the checkpoint does not fit this run's strategy state)") from err
        history = {
            k[len(_HISTORY) :]: v for k, v in reader.extra_arrays(path).items() if k.startswith(_HISTORY)
        }
        saved_generation = getattr(values, "generation", metadata.get("generation", 0))
        generation = int(np.asarray(saved_generation))
        if metadata.get("generation") != generation or len({len(v) for v in history.values()}) > 1:
            raise CheckpointError(
                f"{path} is damaged: its metadata (generation {metadata.get('generation')!r}), its state "
                f"(generation {generation}) and its metric history do not agree"
            )
        # metrics.csv may hold rows past the checkpoint (a crash between the two writes): rebuild it.
        if self.writes:
            with self._writing("metrics.csv"):
                if history:
                    atomic.write_text_atomic(self.path / "metrics.csv", _metrics_csv(history, 0, header=True))
                else:
                    (self.path / "metrics.csv").unlink(missing_ok=True)
        self._saved_identity = metadata.get("identity")
        return reader, path, values, history, digest

    @staticmethod
    def checkpoint_generation(path: Path) -> int:
        """The generation of a run directory's newest checkpoint (of either format).

        Raises:
            FileNotFoundError: no checkpoint. CheckpointError: a damaged one.
        """
        found = latest_checkpoint(Path(path))
        if found is None:
            raise FileNotFoundError(
                errno.ENOENT,
                "no checkpoint (nor a sharded checkpoint-<generation>)",
                str(Path(path) / CHECKPOINT),
            )
        return _generation(*found)

    # -- end -------------------------------------------------------------------------------
    def finish(self, result: Any, best_to_text: Any = None) -> None:
        """Write ``best.*`` and ``fitness.png`` (a collective with several processes, like
        :meth:`save_checkpoint`)."""
        best = multihost.gather_to_host(result.best_genotype)
        error = None
        if self.writes:
            try:
                self._write_best(result, best, best_to_text)
            except OSError as err:
                error = err
        self._settle(error, f"writing the best solution and plots into {self.path}")

    def _write_best(self, result: Any, best: Any, best_to_text: Any) -> None:
        with self._writing("best.npz"):
            save_pytree(self.path / "best.npz", best, metadata={"fitness": result.best_fitness})
        summary = {
            "best_fitness": result.best_fitness,
            "generations": result.generations,
            "evaluations": result.evaluations,
            "compile_seconds": round(result.compile_seconds, 3),
            "run_seconds": round(result.run_seconds, 3),
        }
        with self._writing("best.json"):
            atomic.write_text_atomic(self.path / "best.json", json.dumps(summary, indent=2) + "\n")
        if best_to_text is not None:
            text = best_to_text(best)
        else:
            buffer = io.StringIO()
            for path, leaf in jax.tree_util.tree_flatten_with_path(best)[0]:
                name = jax.tree_util.keystr(path) or "best"
                buffer.write(f"{name} = {np.array2string(np.asarray(leaf), precision=6, threshold=100000)}\n")
            text = buffer.getvalue()
        with self._writing("best.txt"):
            atomic.write_text_atomic(self.path / "best.txt", text if text.endswith("\n") else text + "\n")
        with self._writing("fitness.png"):
            plot_fitness(result.history, self.path / "fitness.png", title=self.task_name)


def _one_line(error: BaseException) -> str:
    """An exception as one line for another process's message (type, text, file)."""
    text = " ".join(str(error).split())
    filename = getattr(error, "filename", None)
    if filename and str(filename) not in text:
        text = f"{text} ({filename})"
    return f"{type(error).__name__}: {text}"


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
    try:
        with atomic.atomic_open(path, "wb") as handle:
            fig.savefig(handle, format="png")
    finally:
        plt.close(fig)


def _metrics_csv(metrics: dict[str, np.ndarray], first_generation: int, header: bool) -> str:
    """CSV rows (9 significant digits: float32-exact) of the scalar metrics, one per generation."""
    names = [n for n in metrics if np.ndim(metrics[n]) == 1]  # vector metrics live in the history only
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    if header:
        writer.writerow(["generation", *names])
    for row in range(len(metrics[names[0]]) if names else 0):
        writer.writerow([first_generation + row + 1] + [format(float(metrics[n][row]), ".9g") for n in names])
    return buffer.getvalue()


def read_metrics(path: str | Path) -> dict[str, np.ndarray]:
    """``metrics.csv`` as ``{column: array}``.

    A last line without its line end (an append cut short by a kill) is left out.

    Raises:
        MetricsError: (a ``ValueError``) the file is not such a table; the message names the file
            and the line.
        OSError: it cannot be read.
    """
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise MetricsError(f"{path} is damaged (not UTF-8 text: byte {err.start})") from err
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith(("\n", "\r")):
        lines = lines[:-1]
    try:
        rows = list(csv.reader(lines))
    except csv.Error as err:
        raise MetricsError(f"{path} is damaged ({err})") from err
    if not rows or not rows[0] or rows[0][0] != "generation" or len(set(rows[0])) != len(rows[0]):
        raise MetricsError(
            f"{path} is damaged or not a metrics file (line 1 must be a header starting 'generation')"
        )
    header, body = rows[0], rows[1:]
    columns: list[list[float]] = [[] for _ in header]
    for line, row in enumerate(body, start=2):
        if len(row) != len(header):
            raise MetricsError(f"{path}, line {line}: {len(row)} fields, the header has {len(header)}")
        for i, value in enumerate(row):
            try:
                columns[i].append(float(value))
            except ValueError:
                raise MetricsError(f"{path}, line {line}: {header[i]} {value!r} is not a number") from None
    return {name: np.array(values, dtype=np.float64) for name, values in zip(header, columns)}
