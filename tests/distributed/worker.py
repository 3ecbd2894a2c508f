"""One process of a multi-device test run (started by :mod:`tests.distributed.harness`).

``python -m tests.distributed.worker --devices N [--coordinator HOST:PORT --num-processes P
--process-id I] MODULE:FUNCTION ...`` (run from the repository root) gives JAX ``N`` CPU devices
before JAX initializes, joins a ``jax.distributed`` job with gloo collectives when a coordinator is
given, then calls each scenario function (no arguments, returns a JSON-serializable dict) and prints
one line per scenario::

    EVOTENSOR_SCENARIO {"scenario": "tests.qd.mesh_scenarios:scenario_grid", "result": {...}}
    EVOTENSOR_SCENARIO {"scenario": "...", "error": "Traceback ..."}

and ``EVOTENSOR_WORKER_DONE`` at the end. A scenario that raises is reported with its traceback;
in a single process the remaining scenarios still run, in a multi-process job the worker stops at
the first error (its peers would wait in a collective that never comes) and exits with status 1.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import traceback
from typing import Any

SCENARIO_PREFIX = "EVOTENSOR_SCENARIO "
DONE_LINE = "EVOTENSOR_WORKER_DONE"


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, required=True, help="CPU devices in this process")
    parser.add_argument("--coordinator", default=None, help="HOST:PORT of process 0 (multi-process runs)")
    parser.add_argument("--num-processes", type=int, default=1)
    parser.add_argument("--process-id", type=int, default=0)
    parser.add_argument("--init-timeout", type=int, default=120, help="seconds to wait for every process")
    parser.add_argument(
        "scenarios", nargs="+", help="MODULE:FUNCTION, e.g. tests.qd.mesh_scenarios:scenario_grid"
    )
    return parser.parse_args(argv)


def _start_jax(args: argparse.Namespace) -> None:
    # Before the first `import jax` anywhere: the platform and device count are read once.
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax

    jax.config.update("jax_num_cpu_devices", args.devices)
    if args.coordinator is not None:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            args.coordinator,
            num_processes=args.num_processes,
            process_id=args.process_id,
            initialization_timeout=args.init_timeout,
        )
    expected = args.devices * args.num_processes
    if jax.device_count() != expected or jax.local_device_count() != args.devices:
        raise RuntimeError(
            f"worker asked for {args.devices} devices x {args.num_processes} processes, JAX has "
            f"{jax.local_device_count()} local of {jax.device_count()} (is XLA_FLAGS forcing a device count?)"
        )


def _function(spec: str) -> Any:
    module_name, sep, function_name = spec.partition(":")
    if not sep or not module_name or not function_name:
        raise ValueError(f"scenario must be 'module.path:function', got {spec!r}")
    return getattr(importlib.import_module(module_name), function_name)


def _plain(value: Any) -> Any:
    """JSON fallback for NumPy values and fully addressable JAX arrays (lists keep float32 values exact)."""
    import numpy as np

    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if getattr(value, "is_fully_addressable", False):
        return np.asarray(value).tolist()
    raise TypeError(
        f"scenario result holds a {type(value).__name__}, which is not JSON-serializable "
        "(return lists/floats; read a multi-process array with .addressable_data(0))"
    )


def _report(payload: dict) -> None:
    print(SCENARIO_PREFIX + json.dumps(payload, default=_plain), flush=True)


def main(argv: list[str] | None = None) -> int:
    args = _arguments(sys.argv[1:] if argv is None else argv)
    _start_jax(args)
    import jax

    multiprocess = args.coordinator is not None
    failed = False
    for spec in args.scenarios:
        try:
            result = _function(spec)()
            line = json.dumps({"scenario": spec, "result": result}, default=_plain)
        except Exception:  # reported to the launcher, which raises with the traceback
            _report({"scenario": spec, "error": traceback.format_exc()})
            failed = True
            if multiprocess:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(1)  # a clean shutdown would wait at a barrier for the peers
            continue
        print(SCENARIO_PREFIX + line, flush=True)
    if multiprocess:
        jax.distributed.shutdown()
    print(DONE_LINE, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
