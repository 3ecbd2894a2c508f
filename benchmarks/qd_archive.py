"""MAP-Elites archive insertion throughput: evotensor vs pyribs and QDax (run by hand, not a test).

Workload: ``add`` of one batch of ``B`` candidates (solution_dim 10, 2 measures) into an archive
pre-filled to exactly 50 % of its cells, so that a batch holds new cells, improvements and
rejections. Grid archives of 32x32, 100x100 and 316x316 cells over [-1, 1]^2, batches of 128,
1024 and 8192; a CVT archive of 10^4 centroids with batches of 1024. Objectives are N(0, 1),
measures uniform in the ranges, solutions N(0, 1); all inputs are drawn in float64 with NumPy and
rounded to float32 (a float64 archive gets the same, float32-representable, values). Each repeat
adds a different batch to the same pre-filled archive.

Reported per configuration: solutions inserted per second, ``B / t``, with ``t`` the wall time of
one ``add`` (minimum and median of the repeats), the median process CPU time of one ``add``, and
the load average before and after.

* evotensor: ``jax.jit(archive.add)`` compiled ahead of time (compile time reported, excluded),
  one untimed call, then timed calls with ``block_until_ready``. Two variants: the state not
  donated (every call copies the elite arrays), and donated (``donate_argnums=0``: the elite
  arrays are updated in place; each repeat gets a fresh copy of the pre-filled state, made outside
  the timing).
* QDax: ``jax.jit(lambda r, ...: r.add(genotypes, descriptors, fitnesses))`` on a
  ``MapElitesRepertoire`` whose centroids are the grid's cell centres
  (``compute_euclidean_centroids``); the same two variants, except where ``B * C > 5e7`` (only
  the non-donated one: there donation is noise beside the lookup). Its cell lookup is a brute-force
  nearest centroid, O(B * C * D) (a [B, C] distance matrix: 3.3 GB at C = 10^5, B = 8192; the
  pre-fill is added in slices of 4096).
* pyribs: ``GridArchive.add`` / ``CVTArchive.add`` (NumPy) with ``dtype`` float64 (its default)
  and float32; each repeat adds into a ``copy.deepcopy`` of the pre-filled archive (outside the
  timing). CVT: its default nearest-neighbour search (``scipy_kd_tree``) and ``brute_force``.

CVT centroids: the same [10^4, 2] array for every library, a 100x100 grid of cell centres each
moved uniformly within +-0.4 cell (``numpy.random.default_rng(7)``), so that the lookup cost, not
a k-means run, is what is timed.

    .venv/bin/python benchmarks/qd_archive.py                  # everything; competitors via their venv
    .venv/bin/python benchmarks/qd_archive.py --impl evotensor
    .venv/bin/python benchmarks/qd_archive.py --check          # parity with pyribs (exact)

``--check`` feeds identical float32 inputs (several batches with cell collisions, exact objective
ties within a batch and with the elites in place, measures on cell boundaries and outside the
ranges) to evotensor's ``GridArchive`` and pyribs' ``GridArchive(dtype=np.float32)``, and compares
after every batch: ``status``, ``value``, the cell index, the occupied cells and the elites'
objective, solution, measures and threshold, bit for bit. Once with plain MAP-Elites thresholds and
once with CMA-MAE ones (``learning_rate=0.1, threshold_min=-1``).

pyribs and QDax live in the ``qd`` venv of ``bench_venvs.py`` (``make bench-venvs VENVS=qd``);
the driver runs each in its own interpreter, one after the other. OpenBLAS is pinned to one thread
as in es_cma.py (nothing here calls LAPACK; it keeps the processes comparable).
"""

from __future__ import annotations

import argparse
import json
import os

from bench_venvs import venv_python

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before NumPy loads; see es_cma.py
import copy
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

QD_PYTHON = venv_python("qd")
SOLUTION_DIM = 10
LOW, HIGH = -1.0, 1.0
GRIDS = ((32, 32), (100, 100), (316, 316))
BATCHES = (128, 1024, 8192)
CVT_CELLS, CVT_BATCH = 10_000, 1024
REPEATS = 15
BUDGET_S = 4.0  # per configuration: stop repeating after this much timed wall time (>= 3 repeats)


class Clock:
    """Wall time and this process's CPU time (all threads) since construction, in seconds."""

    def __init__(self):
        self.wall0, self.cpu0 = time.perf_counter(), time.process_time()

    def read(self):
        return time.perf_counter() - self.wall0, time.process_time() - self.cpu0


# ----------------------------------------------------------------------------------------------
# inputs (NumPy only, identical in every process)


def f32(x):
    """float64 draws rounded to float32 (and kept as float32)."""
    return np.asarray(x, np.float64).astype(np.float32)


def grid_centres(dims):
    """[prod(dims), 2] cell centres in row-major cell order."""
    axes = [LOW + (HIGH - LOW) * (np.arange(n) + 0.5) / n for n in dims]
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack([m.reshape(-1) for m in mesh], axis=1)


def cvt_centroids():
    rng = np.random.default_rng(7)
    side = int(round(CVT_CELLS**0.5))
    cell = (HIGH - LOW) / side
    return f32(grid_centres((side, side)) + rng.uniform(-0.4 * cell, 0.4 * cell, (CVT_CELLS, 2)))


def prefill(centres):
    """Half the cells, one elite each, measures at the cell's centre / centroid."""
    cells = centres.shape[0]
    rng = np.random.default_rng(1000 + cells)
    chosen = rng.choice(cells, cells // 2, replace=False)
    return (
        f32(rng.normal(size=(chosen.size, SOLUTION_DIM))),
        f32(rng.normal(size=chosen.size)),
        f32(centres[chosen]),
    )


def batch(cells, size, repeat):
    rng = np.random.default_rng([cells, size, repeat])
    return (
        f32(rng.normal(size=(size, SOLUTION_DIM))),
        f32(rng.normal(size=size)),
        f32(rng.uniform(LOW, HIGH, (size, 2))),
    )


def configs(only_cvt=False):
    """(label, dims or None for CVT, cells, batch size)."""
    out = [] if only_cvt else [(f"grid {a}x{b}", (a, b), a * b, bs) for a, b in GRIDS for bs in BATCHES]
    out.append((f"cvt {CVT_CELLS}", None, CVT_CELLS, CVT_BATCH))
    return out


def summarize(impl, variant, label, cells, size, times, compile_s=None, status=None, load0=None):
    walls = [w for w, _ in times]
    cpus = [c for _, c in times]
    row = dict(
        impl=impl,
        variant=variant,
        archive=label,
        cells=cells,
        batch=size,
        repeats=len(times),
        wall_min_ms=1e3 * min(walls),
        wall_median_ms=1e3 * statistics.median(walls),
        cpu_median_ms=1e3 * statistics.median(cpus),
        inserts_per_s_best=size / min(walls),
        inserts_per_s_median=size / statistics.median(walls),
        load_before=load0,
        load_after=os.getloadavg()[0],
    )
    if compile_s is not None:
        row["compile_s"] = compile_s
    if status is not None:
        row["status_counts"] = status  # [not added, improved, new] in the first timed batch
    return row


def repeat_timed(call, prepare, repeats):
    """[(wall, cpu)] of `call(prepare(r))` for r < repeats, stopping after BUDGET_S of wall time."""
    times, spent = [], 0.0
    for r in range(repeats):
        arg = prepare(r)
        clock = Clock()
        call(arg)
        times.append(clock.read())
        spent += times[-1][0]
        if spent > BUDGET_S and len(times) >= 3:
            break
    return times


# ----------------------------------------------------------------------------------------------
# evotensor and QDax (jitted)


def jax_rows(impl, state0, add_fn, label, cells, size, repeats, status_of=None, donated=True):
    """Both variants (state not donated / donated) of a jitted add into the pre-filled `state0`."""
    import jax
    import jax.numpy as jnp

    state0 = jax.block_until_ready(state0)
    batches = [tuple(jnp.asarray(a) for a in batch(cells, size, r)) for r in range(repeats)]
    rows = []
    for variant, donate in (("jit", ()), ("jit+donate", (0,)))[: 2 if donated else 1]:
        load0 = os.getloadavg()[0]
        clock = Clock()
        compiled = jax.jit(add_fn, donate_argnums=donate).lower(state0, *batches[0]).compile()
        compile_s = clock.read()[0]

        def fresh(r, donate=donate):
            return jax.block_until_ready(jax.tree.map(jnp.copy, state0)) if donate else state0

        out = jax.block_until_ready(compiled(fresh(0), *batches[0]))  # untimed warm call
        status = status_of(out) if status_of is not None else None
        times = repeat_timed(
            lambda args, compiled=compiled: jax.block_until_ready(compiled(*args)),
            lambda r: (fresh(r), *batches[r]),
            repeats,
        )
        rows.append(summarize(impl, variant, label, cells, size, times, compile_s, status, load0))
    return rows


def bench_evotensor(repeats, only_cvt=False):
    import jax

    from evotensor.qd import CVTArchive, GridArchive

    rows = []
    for label, dims, cells, size in configs(only_cvt):
        ranges = [(LOW, HIGH)] * 2
        if dims is None:
            archive = CVTArchive(solution_dim=SOLUTION_DIM, centroids=cvt_centroids(), ranges=ranges)
            centres = cvt_centroids()
        else:
            archive = GridArchive(solution_dim=SOLUTION_DIM, dims=dims, ranges=ranges)
            centres = f32(grid_centres(dims))
        fill = prefill(centres)
        state0 = jax.jit(archive.add)(archive.init(), *fill)[0]
        filled = int(state0.occupied.sum())
        assert filled == cells // 2, (label, filled)

        def status_of(out):
            return np.bincount(np.asarray(out[1].status), minlength=3).tolist()

        rows += jax_rows("evotensor", state0, archive.add, label, cells, size, repeats, status_of)
        print(json.dumps(rows[-1]), file=sys.stderr)
    return rows


def bench_qdax(repeats, only_cvt=False):
    import jax
    import jax.numpy as jnp
    from qdax.core.containers.mapelites_repertoire import MapElitesRepertoire, compute_euclidean_centroids

    rows, filled_cache = [], {}
    for label, dims, cells, size in configs(only_cvt):
        if dims is None:
            centroids = jnp.asarray(cvt_centroids())
            centres = cvt_centroids()
        else:
            centroids = compute_euclidean_centroids(dims, LOW, HIGH)
            centres = f32(grid_centres(dims))
        sol, obj, meas = prefill(centres)

        if label not in filled_cache:  # one pre-fill per archive, shared by its batch sizes
            # in slices: QDax's lookup holds a [batch, cells] distance matrix (20 GB for C/2 x C at 10^5)
            rep = MapElitesRepertoire.init_default(genotype=jnp.zeros(SOLUTION_DIM), centroids=centroids)
            add = jax.jit(lambda r, g, d, f: r.add(g, d, f))
            for i in range(0, obj.size, 4096):
                part = slice(i, i + 4096)
                rep = add(rep, sol[part], meas[part], obj[part])
            filled = int(jnp.sum(rep.fitnesses > -jnp.inf))
            assert filled == cells // 2, (label, filled)
            filled_cache[label] = rep

        def add(rep, g, f, d):  # our argument order (solutions, objective, measures)
            return rep.add(g, d, f)

        # donation only saves a copy of the [C, 10] elites; beside an O(B C) lookup of > 5e7 pairs it
        # is noise (measured once: 316x316, B = 8192, 10.4-13.6 s either way), so it is skipped there
        donated = size * cells <= 5e7
        rows += jax_rows("qdax", filled_cache[label], add, label, cells, size, repeats, donated=donated)
        print(json.dumps(rows[-1]), file=sys.stderr)
    return rows


# ----------------------------------------------------------------------------------------------
# pyribs (NumPy)


def bench_pyribs(repeats, only_cvt=False):
    from ribs.archives import CVTArchive, GridArchive

    rows = []
    for label, dims, cells, size in configs(only_cvt):
        ranges = [(LOW, HIGH)] * 2
        variants = []
        for dtype in (np.float64, np.float32):
            name = np.dtype(dtype).name
            if dims is None:
                for nn in ("scipy_kd_tree", "brute_force"):
                    variants.append(
                        (
                            f"{name} {nn}",
                            dtype,
                            lambda dtype=dtype, nn=nn, ranges=ranges: CVTArchive(
                                solution_dim=SOLUTION_DIM,
                                centroids=cvt_centroids().astype(dtype),
                                ranges=ranges,
                                dtype=dtype,
                                nearest_neighbors=nn,
                            ),
                        )
                    )
            else:
                variants.append(
                    (
                        name,
                        dtype,
                        lambda dtype=dtype, dims=dims, ranges=ranges: GridArchive(
                            solution_dim=SOLUTION_DIM, dims=dims, ranges=ranges, dtype=dtype
                        ),
                    )
                )
        centres = cvt_centroids() if dims is None else f32(grid_centres(dims))
        fill = prefill(centres)
        for variant, dtype, build in variants:
            load0 = os.getloadavg()[0]
            archive0 = build()
            archive0.add(*(a.astype(dtype) for a in fill))
            assert len(archive0) == cells // 2, (label, len(archive0))
            batches = [tuple(a.astype(dtype) for a in batch(cells, size, r)) for r in range(repeats)]
            info = copy.deepcopy(archive0).add(*batches[0])  # untimed warm call
            status = np.bincount(info["status"], minlength=3).tolist()

            def prepare(r):
                return copy.deepcopy(archive0), batches[r]  # noqa: B023

            times = repeat_timed(lambda args: args[0].add(*args[1]), prepare, repeats)
            rows.append(summarize("pyribs", variant, label, cells, size, times, None, status, load0))
            print(json.dumps(rows[-1]), file=sys.stderr)
    return rows


# ----------------------------------------------------------------------------------------------
# parity (--check)

CHECK_DIMS = (10, 7)
CHECK_RANGES = ((-1.0, 1.0), (0.0, 3.0))
CHECK_BATCHES, CHECK_B = 8, 256
CMA_MAE = dict(learning_rate=0.1, threshold_min=-1.0)


def check_inputs():
    """[(solutions, objective, measures)] float32: collisions (256 candidates, 70 cells), objectives
    on a 0.25 grid (exact ties in a batch and with the elites in place), a quarter of the measures on
    cell boundaries (low + k * size / dims, rounded to float32), some outside the ranges."""
    rng = np.random.default_rng(2026)
    lows = np.array([lo for lo, _ in CHECK_RANGES])
    highs = np.array([hi for _, hi in CHECK_RANGES])
    dims = np.array(CHECK_DIMS)
    out = []
    for _ in range(CHECK_BATCHES):
        meas = rng.uniform(lows - 0.1 * (highs - lows), highs + 0.1 * (highs - lows), (CHECK_B, 2))
        on_edge = rng.random(CHECK_B) < 0.25
        k = rng.integers(0, dims + 1, (CHECK_B, 2))
        meas[on_edge] = (lows + k * (highs - lows) / dims)[on_edge]
        obj = rng.integers(-8, 9, CHECK_B) / 4.0
        out.append((f32(rng.normal(size=(CHECK_B, SOLUTION_DIM))), f32(obj), f32(meas)))
    return out


def check_evotensor(inputs, cma_mae):
    """Per batch: status, value, index and the dense archive after the batch."""
    import jax

    from evotensor.qd import GridArchive

    kwargs = CMA_MAE if cma_mae else {}
    archive = GridArchive(solution_dim=SOLUTION_DIM, dims=CHECK_DIMS, ranges=CHECK_RANGES, **kwargs)
    add = jax.jit(archive.add)
    state = archive.init()
    out = []
    for sol, obj, meas in inputs:
        state, info = add(state, sol, obj, meas)
        out.append(
            dict(
                status=np.asarray(info.status),
                value=np.asarray(info.value),
                index=np.asarray(info.index),
                occupied=np.asarray(state.occupied),
                objective=np.asarray(state.objective),
                solution=np.asarray(state.solutions),
                measures=np.asarray(state.measures),
                threshold=np.asarray(state.threshold),
            )
        )
    return out


def check_pyribs(inputs, cma_mae):
    from ribs.archives import GridArchive

    kwargs = CMA_MAE if cma_mae else {}
    archive = GridArchive(
        solution_dim=SOLUTION_DIM, dims=CHECK_DIMS, ranges=CHECK_RANGES, dtype=np.float32, **kwargs
    )
    cells = int(np.prod(CHECK_DIMS))
    out = []
    for sol, obj, meas in inputs:
        index = archive.index_of(meas)
        info = archive.add(sol, obj, meas)
        data = archive.data()
        dense = dict(
            occupied=np.zeros(cells, bool),
            objective=np.zeros(cells, np.float32),
            solution=np.zeros((cells, SOLUTION_DIM), np.float32),
            measures=np.zeros((cells, 2), np.float32),
            threshold=np.full(cells, archive.threshold_min, np.float32),
        )
        dense["occupied"][data["index"]] = True
        for name in ("objective", "solution", "measures", "threshold"):
            dense[name][data["index"]] = data[name]
        out.append(dict(status=info["status"], value=info["value"], index=index, **dense))
    return out


def compare(ours, theirs):
    """Per field: number of differing entries over all batches, and the largest difference in ulps
    for float fields (elite fields compared at cells occupied in both)."""
    report = {}
    fields = ("status", "value", "index", "occupied", "objective", "solution", "measures", "threshold")
    for name in fields:
        bad, ulps, absdiff, first = 0, 0, 0.0, None
        for b, (a, t) in enumerate(zip(ours, theirs)):
            x, y = np.asarray(a[name]), np.asarray(t[name])
            if name in ("objective", "solution", "measures", "threshold"):
                both = a["occupied"] & t["occupied"]
                x, y = x[both], y[both]
            if x.dtype.kind == "f":
                x, y = x.astype(np.float32), y.astype(np.float32)
                diff = ~((x == y) | (np.isnan(x) & np.isnan(y)))
                if diff.any():
                    ix = x[diff].view(np.int32).astype(np.int64)
                    iy = y[diff].view(np.int32).astype(np.int64)
                    ulps = max(ulps, int(np.max(np.abs(ix - iy))))
                    absdiff = max(absdiff, float(np.max(np.abs(x[diff].astype(np.float64) - y[diff]))))
            else:
                diff = x != y
            bad += int(np.sum(diff))
            if diff.any() and first is None:
                first = b
        report[name] = dict(differing=bad, max_ulps=ulps, max_abs=absdiff, first_batch=first)
    return report


SWEEP_GRIDS = ((10, 7), (100, 100), (316, 316))
SWEEP_RANDOM = 1_000_000


def sweep_points(dims):
    """[N, 2] float32 measures for the index sweep: every cell boundary of each axis (``low + k *
    size / dims``, k = 0..dims, rounded to float32) and its float32 neighbours up to 2 ulps away,
    the other coordinate at a cell centre; then SWEEP_RANDOM uniform points in the ranges."""
    lows = np.array([lo for lo, _ in CHECK_RANGES])
    highs = np.array([hi for _, hi in CHECK_RANGES])
    parts = []
    for axis in (0, 1):
        k = np.arange(dims[axis] + 1)
        edge = f32(lows[axis] + k * (highs[axis] - lows[axis]) / dims[axis])
        near = [edge]
        for direction in (-np.inf, np.inf):
            step = edge
            for _ in range(2):
                step = np.nextafter(step, np.float32(direction))
                near.append(step)
        values = np.concatenate(near)
        other = 1 - axis
        centre = lows[other] + (highs[other] - lows[other]) * (dims[other] // 2 + 0.5) / dims[other]
        pts = np.empty((values.size, 2), np.float32)
        pts[:, axis], pts[:, other] = values, centre
        parts.append(pts)
    rng = np.random.default_rng(99)
    parts.append(f32(rng.uniform(lows, highs, (SWEEP_RANDOM, 2))))
    return np.concatenate(parts)


def index_sweep(tmp):
    """Cell index of the sweep points, evotensor vs pyribs (float32 archive), per grid."""
    import jax

    from evotensor.qd import GridArchive

    path, out_path = os.path.join(tmp, "sweep.npz"), os.path.join(tmp, "sweep_pyribs.npz")
    points = {f"{a}x{b}": sweep_points((a, b)) for a, b in SWEEP_GRIDS}
    np.savez(path, **points)
    proc = subprocess.run(
        [QD_PYTHON, __file__, "--impl", "pyribs-index", "--inputs", path, "--out", out_path],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        raise SystemExit("pyribs index sweep failed")
    theirs = np.load(out_path)
    report = {}
    for (a, b), (name, pts) in zip(SWEEP_GRIDS, points.items()):
        archive = GridArchive(solution_dim=1, dims=(a, b), ranges=CHECK_RANGES)
        ours = np.asarray(jax.jit(archive.index_of)(pts))
        diff = ours != theirs[name]
        boundary = pts.shape[0] - SWEEP_RANDOM
        ex = np.nonzero(diff)[0][:3]
        report[name] = dict(
            boundary_points=int(boundary),
            boundary_differing=int(diff[:boundary].sum()),
            random_points=SWEEP_RANDOM,
            random_differing=int(diff[boundary:].sum()),
            examples=[
                dict(measures=pts[i].tolist(), evotensor=int(ours[i]), pyribs=int(theirs[name][i]))
                for i in ex
            ],
        )
    return report


def pyribs_index_main(args):
    from ribs.archives import GridArchive

    saved = np.load(args.inputs)
    out = {}
    for name in saved.files:
        dims = tuple(int(d) for d in name.split("x"))
        # pyribs' default dtype (float64): its float32 archive rounds ``m - low`` in float32 first
        archive = GridArchive(solution_dim=1, dims=dims, ranges=CHECK_RANGES)
        out[name] = archive.index_of(saved[name].astype(np.float64))
    np.savez(args.out, **out)


def run_check():
    inputs = check_inputs()
    with tempfile.TemporaryDirectory(prefix="qd-check-") as tmp:
        path = os.path.join(tmp, "inputs.npz")
        np.savez(path, **{f"{k}{i}": a for i, b in enumerate(inputs) for k, a in zip("som", b)})
        results = {}
        for cma_mae in (False, True):
            ours = check_evotensor(inputs, cma_mae)
            out_path = os.path.join(tmp, f"pyribs{int(cma_mae)}.npz")
            cmd = [QD_PYTHON, __file__, "--impl", "pyribs-check", "--inputs", path, "--out", out_path]
            cmd += ["--cma-mae"] if cma_mae else []
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                print(proc.stderr[-3000:], file=sys.stderr)
                raise SystemExit("pyribs check failed")
            saved = np.load(out_path)
            theirs = [{k: saved[f"{k}{i}"] for k in ours[0]} for i in range(len(inputs))]
            mode = "cma_mae" if cma_mae else "map_elites"
            results[mode] = compare(ours, theirs)
            results[mode]["added_per_batch"] = [int((o["status"] > 0).sum()) for o in ours]
            results[mode]["elites_after"] = int(ours[-1]["occupied"].sum())
        sweep = index_sweep(tmp)
    print(json.dumps(dict(check="evotensor vs pyribs GridArchive float32", **results), indent=1))
    print(json.dumps(dict(index_sweep=sweep), indent=1))
    for mode, fields in results.items():
        bad = {k: v for k, v in fields.items() if isinstance(v, dict) and v["differing"]}
        print(
            f"PARITY {mode} ({CHECK_DIMS} grid, {CHECK_BATCHES} batches of {CHECK_B}):",
            "exact" if not bad else f"differences in {sorted(bad)}",
        )
    for name, r in sweep.items():
        print(
            f"INDEX {name}: {r['boundary_differing']}/{r['boundary_points']} boundary points and "
            f"{r['random_differing']}/{r['random_points']} uniform points map to another cell"
        )


def pyribs_check_main(args):
    saved = np.load(args.inputs)
    inputs = [tuple(saved[f"{k}{i}"] for k in "som") for i in range(len(saved.files) // 3)]
    out = check_pyribs(inputs, args.cma_mae)
    np.savez(args.out, **{f"{k}{i}": v for i, d in enumerate(out) for k, v in d.items()})


# ----------------------------------------------------------------------------------------------


def versions(impl):
    from importlib.metadata import version

    names = {"evotensor": ("evotensor", "jax", "jaxlib", "numpy"), "qdax": ("qdax", "jax", "jaxlib", "flax")}
    names["pyribs"] = ("ribs", "numpy", "scipy", "numba", "numpy_groupies")
    return {n: version(n) for n in names[impl]}


def main():
    global BUDGET_S
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--impl",
        choices=["all", "evotensor", "pyribs", "qdax", "pyribs-check", "pyribs-index"],
        default="all",
    )
    ap.add_argument("--competitors", default="pyribs,qdax", help="with --impl all: which to run")
    ap.add_argument("--repeats", type=int, default=REPEATS)
    ap.add_argument("--budget", type=float, default=BUDGET_S, help="timed seconds per configuration")
    ap.add_argument("--cvt-only", action="store_true")
    ap.add_argument("--check", action="store_true", help="parity with pyribs instead of timings")
    ap.add_argument("--inputs", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--cma-mae", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    BUDGET_S = args.budget
    if args.impl == "pyribs-check":
        return pyribs_check_main(args)
    if args.impl == "pyribs-index":
        return pyribs_index_main(args)
    if args.check:
        return run_check()
    if args.impl != "all":
        rows = globals()[f"bench_{args.impl}"](args.repeats, args.cvt_only)
        print(json.dumps(dict(impl=args.impl, versions=versions(args.impl))))
        for r in rows:
            print(json.dumps(r))
        return None
    info = dict(
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        machine=platform.processor() or platform.machine(),
        cpus=os.cpu_count(),
        load_start=os.getloadavg(),
    )
    lines = [json.dumps(dict(impl="evotensor", versions=versions("evotensor")))]
    lines += [json.dumps(r) for r in bench_evotensor(args.repeats, args.cvt_only)]
    for impl in args.competitors.split(","):
        if not os.path.exists(QD_PYTHON):
            lines.append(json.dumps(dict(impl=impl, error=f"{QD_PYTHON} not found")))
            continue
        cmd = [QD_PYTHON, __file__, "--impl", impl, "--repeats", str(args.repeats), "--budget", str(BUDGET_S)]
        cmd += ["--cvt-only"] if args.cvt_only else []
        out = subprocess.run(cmd, capture_output=True, text=True)  # one competitor at a time
        got = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
        lines += got if got else [json.dumps(dict(impl=impl, error=out.stderr[-2000:]))]
    info["load_end"] = os.getloadavg()
    print(json.dumps(info))
    for line in lines:
        print(line)
    return None


if __name__ == "__main__":
    sys.exit(main())
