"""NEAT's network forward pass side by side with TensorNEAT's: throughput, compile time and memory
over (pop, max_nodes, max_conns), on the same networks, with their outputs compared.

The networks. For each size ``(P, N, C)``, ``P`` synthetic feedforward genomes with 4 inputs and 2
outputs, every one of the ``N`` node rows a node (the rest hidden) and every one of the ``C``
connection rows an enabled link, drawn by :func:`synthetic_networks` (seeded): the nodes in a fixed
topological order (inputs, hidden nodes, outputs), every hidden and output node first given one
incoming link from an earlier node (so no node is left without inputs: TensorNEAT leaves such a
node's value NaN where neat-python's semantics give ``act(bias)``, and the outputs could not be
compared), then the remaining rows filled with distinct random earlier-to-later links. Biases and
weights N(0, 1), responses 1, sigmoid + sum on every node: TensorNEAT's ``DefaultNode`` /
``DefaultConn`` defaults, and evotensor's ``"tensorneat"`` mode (no activation on the outputs, as
TensorNEAT's ``DefaultNode`` does). Full networks are the worst case of either forward pass at
that size (deep, every row used).

What runs. Each engine takes the same arrays (a ``.npz`` file) in a fresh process of its own venv:

* evotensor (this venv): ``transform(spec, genomes, method)`` of the population, then
  ``jax.vmap(forward_batch)`` of every network on the ``B`` inputs (``method`` ``auto``: a dense
  ``[N, N]`` path up to 32 node rows, the edge-list path above; ``--method`` forces one);
* TensorNEAT (``.bench/venvs/tensorneat``, ``neat_anchor_tensorneat.py forward``):
  ``jax.vmap(genome.transform)`` of the population (``DefaultGenome``: topological sort and the
  ``[N, N]`` connection-index matrix), then ``jax.vmap`` over networks of ``jax.vmap`` over the
  ``B`` inputs of ``genome.forward`` (its ``fori_loop`` over the ``N`` node rows).

Per engine and size, timed alike by :mod:`jax_measure` (``jit(fn).lower(...).compile()``;
median of ``--repeats`` calls after one left out): compile s and ms per call of transform and of
forward, ``samples_per_s`` (P x B / forward time), XLA's memory figures of each compiled program
(temporaries, arguments + outputs), the worker process's peak RSS, and the outputs: the largest
absolute difference between the engines' ``[P, B, 2]`` outputs is printed beside the rows (float32
sums in a different order: ~1e-6 expected; a large one means the two did not compute the same
networks). The engines alternate per size (size 0: evotensor first, size 1: TensorNEAT first, ...).

Usage (the anchor needs ``make bench-venvs VENVS=tensorneat``)::

    .venv/bin/python benchmarks/neat_forward.py                              # default sizes
    .venv/bin/python benchmarks/neat_forward.py --sizes 1000x32x64 10000x64x128 --batch 16
    .venv/bin/python benchmarks/neat_forward.py --engines evotensor          # ours only (also on a GPU)

Raw JSON lines go to ``.bench/neat/forward_<time>.jsonl`` (first line: date, CPU, load, argv).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

NUM_INPUTS, NUM_OUTPUTS = 4, 2
SIZES = ("1000x16x32", "1000x32x64", "1000x64x128", "10000x32x64", "10000x64x128")
BATCH = 16
ENGINES = ("evotensor", "tensorneat")


def synthetic_networks(pop: int, max_nodes: int, max_conns: int, batch: int, seed: int = 0) -> dict:
    """``pop`` full feedforward networks (module docstring) in a neutral form, evotensor's node keys
    (inputs ``-1..-n_in``, outputs ``0..n_out-1``, hidden from ``n_out``):

    ``node_key [P, N]`` int32, ``bias``, ``response [P, N]`` float32, ``conn_src``, ``conn_dst
    [P, C]`` int32 (node keys), ``weight [P, C]`` float32, ``x [B, n_in]`` float32.
    """
    n_in, n_out, N, C = NUM_INPUTS, NUM_OUTPUTS, max_nodes, max_conns
    hidden = N - n_in - n_out
    if hidden < 0 or C < N - n_in:
        raise ValueError(
            f"size {pop}x{N}x{C}: needs max_nodes >= {n_in + n_out} and max_conns >= max_nodes - {n_in}"
        )
    keys = np.concatenate([-1 - np.arange(n_in), np.arange(n_out), n_out + np.arange(hidden)])
    keys = keys.astype(np.int32)
    # topological positions: inputs, then hidden nodes, then outputs (rows: inputs, outputs, hidden)
    position = np.concatenate([np.arange(n_in), n_in + hidden + np.arange(n_out), n_in + np.arange(hidden)])
    by_position = np.argsort(position)  # rows in topological order
    is_source = np.r_[np.ones(n_in, bool), np.zeros(n_out, bool), np.ones(hidden, bool)]
    a, b = np.meshgrid(np.arange(N), np.arange(N), indexing="ij")
    allowed = is_source[a] & (b >= n_in) & (position[a] < position[b])
    pair_src, pair_dst = a[allowed], b[allowed]
    pair_id = -np.ones((N, N), np.int64)
    pair_id[pair_src, pair_dst] = np.arange(len(pair_src))
    if C > len(pair_src):
        raise ValueError(f"size {pop}x{N}x{C}: only {len(pair_src)} distinct feedforward links exist")
    rng = np.random.default_rng(seed)
    src = np.empty((pop, C), np.int64)
    dst = np.empty((pop, C), np.int64)
    targets = by_position[n_in:]  # every non-input node, in topological order
    for p in range(pop):
        first = []
        for t in targets:
            earlier = by_position[: position[t]]
            earlier = earlier[is_source[earlier]]
            first.append(pair_id[rng.choice(earlier), t])
        first = np.asarray(first)
        rest = np.setdiff1d(np.arange(len(pair_src)), first, assume_unique=True)
        chosen = np.concatenate([first, rng.choice(rest, C - len(first), replace=False)])
        src[p], dst[p] = pair_src[chosen], pair_dst[chosen]
    bias = rng.standard_normal((pop, N)).astype(np.float32)
    bias[:, :n_in] = 0.0
    return {
        "node_key": np.broadcast_to(keys, (pop, N)).copy(),
        "bias": bias,
        "response": np.ones((pop, N), np.float32),
        "conn_src": keys[src],
        "conn_dst": keys[dst],
        "weight": rng.standard_normal((pop, C)).astype(np.float32),
        "x": rng.standard_normal((batch, n_in)).astype(np.float32),
        "num_inputs": np.int32(n_in),
        "num_outputs": np.int32(n_out),
    }


def peak_rss_mib() -> float:
    """This process's peak resident set size, MiB (Linux ``ru_maxrss`` is in KiB)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def run_evotensor(data: dict, method: str, repeats: int) -> tuple[dict, np.ndarray]:
    """Transform and forward of ``data``'s networks with evotensor (module docstring)."""
    import jax
    import jax.numpy as jnp
    from jax_measure import compiled_with_time, figures

    from evotensor.neat import NEAT, Genome, forward_batch, transform
    from evotensor.neat.genome import EMPTY

    pop, N = data["node_key"].shape
    C = data["conn_src"].shape[1]
    strategy = NEAT.from_mode(
        "tensorneat", NUM_INPUTS, NUM_OUTPUTS, population_size=pop, max_nodes=N, max_conns=C
    )
    spec, cfg = strategy.spec, strategy.config
    attrs = np.stack([data["bias"], data["response"]], axis=-1)  # the tensorneat node gene: bias, response
    genomes = Genome(
        node_key=jnp.asarray(data["node_key"]),
        node_attrs=jnp.asarray(attrs),
        node_act=jnp.zeros((pop, N), jnp.int32),
        node_agg=jnp.zeros((pop, N), jnp.int32),
        conn_in=jnp.asarray(data["conn_src"]),
        conn_out=jnp.asarray(data["conn_dst"]),
        conn_innov=jnp.broadcast_to(jnp.arange(C, dtype=jnp.int32), (pop, C)),
        conn_enabled=jnp.ones((pop, C), bool),
        conn_attrs=jnp.asarray(data["weight"])[..., None],
    )
    assert int(EMPTY) not in np.asarray(genomes.node_key)
    x = jnp.asarray(data["x"])

    def fwd(nets, x):
        one = lambda n: forward_batch(spec, n, x, functions=cfg.functions, outputs=cfg.outputs)  # noqa: E731
        return jax.vmap(one)(nets)

    tr, transform_compile_s = compiled_with_time(lambda g: transform(spec, g, method), genomes)
    nets = jax.block_until_ready(tr(genomes))
    fw, forward_compile_s = compiled_with_time(fwd, nets, x)
    y = np.asarray(fw(nets, x))
    resolved = "dense" if nets.dense_weight is not None else "sparse"
    row = {
        "engine": "evotensor",
        "method": resolved,
        "mean_depth": round(float(np.mean(np.asarray(nets.max_depth))), 1),
        **figures("transform", tr, transform_compile_s, genomes, repeats=repeats),
        **figures("forward", fw, forward_compile_s, nets, x, repeats=repeats),
        "versions": {"jax": jax.__version__},
        "backend": jax.default_backend(),
    }
    return row, y


def _worker(args) -> None:
    """``--worker evotensor``: one size, in this fresh process; writes the outputs to ``--out-npy``."""
    data = {k: v for k, v in np.load(args.npz).items() if v.ndim}
    row, y = run_evotensor(data, args.method, args.repeats)
    np.save(args.out_npy, y)
    row["peak_rss_mib"] = peak_rss_mib()
    print(json.dumps(row), flush=True)


def _run_engine(engine: str, npz: str, out_npy: str, args) -> dict:
    if engine == "evotensor":
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "evotensor", "--npz", npz]
        cmd += ["--out-npy", out_npy, "--method", args.method, "--repeats", str(args.repeats)]
    else:
        from bench_venvs import venv_python

        cmd = [venv_python("tensorneat"), os.path.join(HERE, "neat_anchor_tensorneat.py"), "forward"]
        cmd += ["--npz", npz, "--out-npy", out_npy, "--repeats", str(args.repeats)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        error = done.stderr.strip().splitlines()[-1:] or ["exit"]
        return {"engine": engine, "error": error, "rc": done.returncode}
    rec = json.loads(done.stdout.strip().splitlines()[-1])
    rec["engine"] = engine
    return rec


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", default=list(SIZES), help="PxNxC, e.g. 1000x32x64")
    ap.add_argument("--batch", type=int, default=BATCH, help="inputs per network")
    ap.add_argument("--engines", nargs="+", choices=ENGINES, default=list(ENGINES))
    ap.add_argument("--method", choices=("auto", "dense", "sparse"), default="auto", help="evotensor's path")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="JSON lines (default .bench/neat/forward_<time>.jsonl)")
    ap.add_argument("--worker", choices=["evotensor"], help=argparse.SUPPRESS)
    ap.add_argument("--npz", help=argparse.SUPPRESS)
    ap.add_argument("--out-npy", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return _worker(args)

    now = datetime.datetime.now(datetime.UTC)
    out = args.out or os.path.join(ROOT, ".bench", "neat", f"forward_{now:%Y%m%d_%H%M%S}.jsonl")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    meta = {
        "record": "meta",
        "date": now.strftime("%Y-%m-%d %H:%M:%S UTC"),
        "cpu": platform.processor() or platform.machine(),
        "nproc": os.cpu_count(),
        "load": os.getloadavg(),
        "argv": sys.argv,
    }
    print(f"# {meta['date']}, {meta['nproc']} CPUs, load {_load()}; raw -> {out}", flush=True)
    rows = []
    with open(out, "w") as f, tempfile.TemporaryDirectory() as tmp:
        f.write(json.dumps(meta) + "\n")
        for i, size in enumerate(args.sizes):
            try:
                pop, N, C = (int(v) for v in size.lower().split("x"))
            except ValueError:
                raise SystemExit(f"--sizes: {size!r} is not PxNxC (e.g. 1000x32x64)") from None
            data = synthetic_networks(pop, N, C, args.batch, args.seed)
            npz = os.path.join(tmp, f"nets_{i}.npz")
            np.savez(npz, **data)
            order = list(args.engines) if i % 2 == 0 else list(reversed(args.engines))
            outputs = {}
            for engine in order:
                out_npy = os.path.join(tmp, f"{engine}_{i}.npy")
                load = _load()
                rec = _run_engine(engine, npz, out_npy, args)
                rec.update(record="forward", pop=pop, max_nodes=N, max_conns=C, batch=args.batch, load=load)
                if "error" not in rec:
                    rec["samples_per_s"] = pop * args.batch / (rec["forward_ms"] / 1e3)
                    outputs[engine] = np.load(out_npy)
                    rec["finite_outputs"] = bool(np.all(np.isfinite(outputs[engine])))
                rows.append(rec)
            if len(outputs) == 2:
                diff = float(np.max(np.abs(outputs["evotensor"] - outputs["tensorneat"])))
                for rec in rows[-2:]:
                    rec["max_abs_diff"] = diff
            for rec in rows[-len(order) :]:
                f.write(json.dumps(rec) + "\n")
                f.flush()
                print(_line(rec), flush=True)
    print()
    print(table(rows))


def _line(rec: dict) -> str:
    if "error" in rec:
        size = f"{rec['pop']}x{rec['max_nodes']}x{rec['max_conns']}"
        return f"{rec['engine']:<11} {size}: FAILED {rec['error']}"
    return (
        f"{rec['engine']:<11} {rec['pop']}x{rec['max_nodes']}x{rec['max_conns']}: forward "
        f"{rec['forward_ms']:.2f} ms ({rec['forward_compile_s']:.2f} s compile), transform "
        f"{rec['transform_ms']:.2f} ms, peak RSS {rec['peak_rss_mib']} MiB, load {rec['load']}"
    )


def table(rows: list[dict]) -> str:
    """A Markdown table of the ``forward`` records."""
    head = (
        "| pop x max_nodes x max_conns | engine | forward ms (CPU ms) | samples / s | transform ms | "
        "compile s (transform + forward) | XLA temp MiB (transform / forward) | peak RSS MiB | "
        "max abs diff | load |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        size = f"{r['pop']} x {r['max_nodes']} x {r['max_conns']}"
        if "error" in r:
            lines.append(f"| {size} | {r['engine']} | failed: {r['error']} |" + " |" * 7)
            continue
        name = r["engine"] + (f" ({r['method']})" if r.get("method") else "")
        lines.append(
            f"| {size} | {name} | {r['forward_ms']:.2f} ({r['forward_cpu_ms']:.2f}) | "
            f"{r['samples_per_s']:.3g} | "
            f"{r['transform_ms']:.2f} | {r['transform_compile_s']:.2f} + {r['forward_compile_s']:.2f} | "
            f"{r.get('transform_temp_mib', '-')} / {r.get('forward_temp_mib', '-')} | {r['peak_rss_mib']} | "
            f"{r.get('max_abs_diff', float('nan')):.1e} | {r['load']} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
