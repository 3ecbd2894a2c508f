"""A sharded QD checkpoint of a 999,999-cell grid archive (100-dim solutions, 417 MB) on 4 host
devices: wall time and peak resident memory of one save or one restore, per process.

    python benchmarks/qd_checkpoint_memory.py save DIR                     # one process, 4 devices
    python benchmarks/qd_checkpoint_memory.py restore DIR
    python benchmarks/qd_checkpoint_memory.py save DIR PROCESS_ID 2 PORT   # each of 2 processes, 2 devices

Prints one JSON line (wall s, extra peak RSS and anonymous RSS in MiB over the process' size
before the call). Run the same commands with ``PYTHONPATH`` pointing at another source tree to
compare versions (a tree whose ``portable_state`` has no ``keep_padded`` hands over the archive
trimmed, i.e. gathered). A restore checks every restored shard against the saved state.
Figures: benchmarks/results_scale.md.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import threading
import time

phase, directory = sys.argv[1], sys.argv[2]
pid, nproc, port = (int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]) if len(sys.argv) > 3 else (0, 1, None)
os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={4 // nproc}"
os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

if nproc > 1:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(f"127.0.0.1:{port}", nproc, pid)

from evotensor.core import mesh as M  # noqa: E402
from evotensor.io.sharded_checkpoint import load_sharded, save_sharded  # noqa: E402
from evotensor.qd import GaussianEmitter, GridArchive, MAPElites  # noqa: E402

DIMS, GRID = 100, (999, 1001)  # 999,999 cells: padded to 1,000,000 rows on 4 devices


def status() -> tuple[float, float]:
    with open("/proc/self/status") as f:
        rows = [line for line in f if line.startswith(("VmRSS", "RssAnon"))]
    d = {line.split(":")[0]: int(line.split()[1]) / 1024 for line in rows}
    return d["VmRSS"], d["RssAnon"]


def main() -> None:
    mesh = M.auto_mesh(jax.make_mesh((4,), ("pop",)))
    me = MAPElites(
        GridArchive(solution_dim=DIMS, dims=GRID, ranges=[(0, 1), (0, 1)]),
        [GaussianEmitter(0.1, np.full(DIMS, 0.5), batch_size=64)],
    )
    sharded = me.on_mesh(mesh)
    state = sharded.init(M.place(jax.random.key(0), M.replicated(mesh)))
    # every cell filled with distinct values, in place on each device (nothing whole is built);
    # the padding rows stay empty, as in a real archive
    cells = jnp.arange(sharded.archive.padded_cells)
    real = cells < sharded.archive.num_cells

    def fill(s):
        solutions = jnp.where(real[:, None], s.archive.solutions + cells[:, None], 0.0)
        return s.replace(archive=s.archive.replace(solutions=solutions, occupied=real))

    state = jax.block_until_ready(jax.jit(fill, out_shardings=sharded.state_shardings(state))(state))
    keep = "keep_padded" in inspect.signature(M.portable_state).parameters

    def portable(s):
        return M.portable_state(sharded, s, True) if keep else M.portable_state(sharded, s)

    samples, stop = [status()], threading.Event()

    def watch():
        while not stop.is_set():
            samples.append(status())
            time.sleep(0.002)

    base = status()
    thread = threading.Thread(target=watch)
    thread.start()
    t0 = time.perf_counter()
    if phase == "save":
        save_sharded(directory, portable(state))
    else:
        loaded = M.from_portable_state(sharded, load_sharded(directory, portable(state)))
        loaded = jax.block_until_ready(loaded)
        for a, b in zip(jax.tree_util.tree_leaves(loaded.archive), jax.tree_util.tree_leaves(state.archive)):
            assert a.sharding == b.sharding
            for x, y in zip(a.addressable_shards, b.addressable_shards):
                assert np.array_equal(np.asarray(x.data), np.asarray(y.data))
    wall = time.perf_counter() - t0
    stop.set()
    thread.join()
    record = {
        "phase": phase,
        "process": pid,
        "padded_handover": keep,
        "wall_s": round(wall, 2),
        "rss_before_MiB": round(base[0]),
        "peak_extra_rss_MiB": round(max(s[0] for s in samples) - base[0]),
        "peak_extra_anon_MiB": round(max(s[1] for s in samples) - base[1]),
    }
    print(json.dumps(record))


if __name__ == "__main__":
    main()
