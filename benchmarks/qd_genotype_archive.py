"""Inserting genotype pytrees into a MAP-Elites grid: evotensor's ``GridArchive(genotype=...)`` beside
QDax's ``MapElitesRepertoire`` (whose genotypes are pytrees too), like for like (run by hand).

Genotypes (the same leaves in both libraries, drawn with NumPy from fixed seeds, float32 / int32):

* ``mlp``: the parameters of an 8-64-2 MLP, ``{"w1": [8, 64], "b1": [64], "w2": [64, 2], "b2": [2]}``
  (706 float32);
* ``genome``: a NEAT genome's tables at ``max_nodes`` 24, ``max_conns`` 48 (neat-python mode's
  genes): int32 keys, innovation numbers and endpoints, bool flags, float32 attributes, as
  ``evotensor.neat.GenomeSpec`` lays them out (QDax stores them as any other pytree).

Archive: a 100 x 100 grid over ``[-1, 1]^2`` (QDax: ``compute_euclidean_centroids``, the same cell
centres), pre-filled to exactly half its cells (one candidate at each chosen centre); then ``add`` of
a batch of ``B`` (1024, 8192) candidates, measures uniform in the square, objectives N(0, 1), both
libraries ``jax.jit``-ed ahead of time with the archive state donated (compile time reported
separately), each repeat on a fresh copy of the pre-filled state (copied outside the timing).
Reported: compile s, median and min ms per add, candidates per second, and the occupied cells after
the first batch (a check that both did the same work: QDax finds cells by nearest centroid, we by
the grid formula; they agree off the cell boundaries).

QDax runs in the ``qd`` venv of ``bench_venvs.py`` (``make bench-venvs VENVS=qd``), this script
calling itself there with ``--impl qdax``; the two alternate per configuration.

    .venv/bin/python benchmarks/qd_genotype_archive.py
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

DIMS, LOW, HIGH = (100, 100), -1.0, 1.0
BATCHES = (1024, 8192)
REPEATS = 7


def genotype_shapes(kind: str) -> dict[str, tuple[tuple[int, ...], str]]:
    """``{leaf: (shape, dtype)}`` of one genotype (no leading axis)."""
    if kind == "mlp":
        return {
            "w1": ((8, 64), "float32"),
            "b1": ((64,), "float32"),
            "w2": ((64, 2), "float32"),
            "b2": ((2,), "float32"),
        }
    N, C, A, B = 24, 48, 2, 1  # neat-python mode: node bias and response, connection weight
    return {
        "node_key": ((N,), "int32"),
        "node_attrs": ((N, A), "float32"),
        "node_act": ((N,), "int32"),
        "node_agg": ((N,), "int32"),
        "conn_in": ((C,), "int32"),
        "conn_out": ((C,), "int32"),
        "conn_innov": ((C,), "int32"),
        "conn_enabled": ((C,), "bool"),
        "conn_attrs": ((C, B), "float32"),
    }


def draw(kind: str, n: int, seed: int) -> dict[str, np.ndarray]:
    """``n`` random genotypes of ``kind`` (finite floats, any ints)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, (shape, dtype) in genotype_shapes(kind).items():
        if dtype == "float32":
            out[name] = rng.normal(size=(n, *shape)).astype(np.float32)
        elif dtype == "int32":
            out[name] = rng.integers(-(2**31), 2**31 - 1, (n, *shape), dtype=np.int32)
        else:
            out[name] = rng.integers(0, 2, (n, *shape)).astype(bool)
    return out


def centres() -> np.ndarray:
    """``[cells, 2]`` grid cell centres in row-major order (float32)."""
    axes = [LOW + (np.arange(d) + 0.5) * (HIGH - LOW) / d for d in DIMS]
    return np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 2).astype(np.float32)


def prefill(kind: str) -> tuple:
    """Half the cells, one candidate at each centre: ``(genotypes, objective, measures)``."""
    c = centres()
    chosen = np.sort(np.random.default_rng(0).permutation(len(c))[: len(c) // 2])
    n = len(chosen)
    objective = np.random.default_rng(1).normal(size=n).astype(np.float32)
    return draw(kind, n, 2), objective, c[chosen]


def batch(kind: str, size: int, r: int) -> tuple:
    rng = np.random.default_rng(100 + r)
    measures = rng.uniform(LOW, HIGH, (size, 2)).astype(np.float32)
    objective = rng.normal(size=size).astype(np.float32)
    return draw(kind, size, 200 + r), objective, measures


def timed(add, state0, batches) -> dict:
    """Compile, then each repeat on a fresh copy of ``state0``: compile s, ms per add, cells after."""
    import jax
    import jax.numpy as jnp

    t0 = time.perf_counter()
    compiled = jax.jit(add, donate_argnums=0).lower(state0, *batches[0]).compile()
    compile_s = time.perf_counter() - t0

    def fresh():
        return jax.block_until_ready(jax.tree_util.tree_map(jnp.copy, state0))

    first = jax.block_until_ready(compiled(fresh(), *batches[0]))
    times = []
    for b in batches:
        state = fresh()
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(state, *b))
        times.append(time.perf_counter() - t0)
    return {"compile_s": compile_s, "ms": [1e3 * t for t in times], "first": first}


def run_evotensor(kind: str, size: int) -> dict:
    import jax
    import jax.numpy as jnp

    from evotensor.qd import GridArchive

    template = {k: jnp.zeros(s, d) for k, (s, d) in genotype_shapes(kind).items()}
    archive = GridArchive(genotype=template, dims=DIMS, ranges=[(LOW, HIGH)] * 2)
    g, o, m = prefill(kind)
    state0 = jax.jit(archive.add)(archive.init(), g, o, m)[0]
    assert int(state0.occupied.sum()) == np.prod(DIMS) // 2
    batches = [batch(kind, size, r) for r in range(REPEATS)]
    out = timed(lambda s, g, o, m: archive.add(s, g, o, m)[0], state0, batches)
    out["cells"] = int(out.pop("first").occupied.sum())
    return out


def run_qdax(kind: str, size: int) -> dict:
    import jax
    import jax.numpy as jnp
    from qdax.core.containers.mapelites_repertoire import MapElitesRepertoire, compute_euclidean_centroids

    centroids = compute_euclidean_centroids(DIMS, LOW, HIGH)
    template = {k: jnp.zeros(s, d) for k, (s, d) in genotype_shapes(kind).items()}
    rep = MapElitesRepertoire.init_default(genotype=template, centroids=centroids)
    g, o, m = prefill(kind)
    add = jax.jit(lambda r, g, d, f: r.add(g, d, f))
    for i in range(0, len(o), 1024):  # its lookup holds a [batch, cells] distance matrix
        part = slice(i, i + 1024)
        rep = add(rep, {k: v[part] for k, v in g.items()}, m[part], o[part])
    assert int(jnp.sum(rep.fitnesses > -jnp.inf)) == np.prod(DIMS) // 2
    batches = [batch(kind, size, r) for r in range(REPEATS)]
    out = timed(lambda r, g, o, m: r.add(g, m, o), rep, batches)
    out["cells"] = int(jnp.sum(out.pop("first").fitnesses > -jnp.inf))
    return out


def row(impl: str, kind: str, size: int, out: dict) -> dict:
    return {
        "impl": impl,
        "genotype": kind,
        "batch": size,
        "compile_s": round(out["compile_s"], 3),
        "ms_median": round(statistics.median(out["ms"]), 3),
        "ms_min": round(min(out["ms"]), 3),
        "per_s": round(size / (statistics.median(out["ms"]) / 1e3)),
        "cells_after": out["cells"],
        "load": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--impl", choices=["both", "evotensor", "qdax"], default="both")
    p.add_argument("--kind", choices=["mlp", "genome"], default=None)
    p.add_argument("--batch", type=int, default=None)
    args = p.parse_args()
    if args.impl == "qdax":  # one configuration, in the qd venv
        print(json.dumps(row("qdax", args.kind, args.batch, run_qdax(args.kind, args.batch))))
        return
    sys.path.insert(0, os.path.dirname(__file__))
    from bench_venvs import machine, venv_python

    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"# genotype pytrees into a 100 x 100 grid (half full), {now}; {machine()}")
    columns = ("impl", "genotype", "batch", "compile s", "ms per add (median)", "min", "candidates/s")
    print("| " + " | ".join(columns + ("cells after", "load")) + " |")
    print("|---|---|---|---|---|---|---|---|---|")
    qdax_python = venv_python("qd")
    for kind in ("mlp", "genome"):
        for size in BATCHES:
            rows = [row("evotensor", kind, size, run_evotensor(kind, size))]
            if args.impl == "both" and os.path.exists(qdax_python):
                cmd = [qdax_python, __file__, "--impl", "qdax", "--kind", kind, "--batch", str(size)]
                env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
                proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
                rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            for r in rows:
                print("| " + " | ".join(str(v) for v in r.values()) + " |", flush=True)


if __name__ == "__main__":
    main()
