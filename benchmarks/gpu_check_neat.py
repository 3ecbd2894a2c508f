"""NEAT section of the one-command GPU check (``benchmarks/gpu_check.py``): one whole NEAT generation
over population sizes, and the network forward pass over genome sizes.

``neat-generation`` rows: one generation is ``evotensor.core.run.Loop.step`` (``ask``, decode
(:func:`~evotensor.neat.network.transform`), evaluate, ``NEAT.tell``: stagnation, reproduction
plan, crossover, mutation, speciation; plus best-so-far: exactly a generation of
``evotensor.run``), jitted with the run state donated, for

* ``xor``: ``NEAT.from_mode("neat-python", 2, 1, population_size=P, max_nodes=32,
  max_conns=64)`` on ``evotensor.problems.function_fit.XOR`` (the ``neat-xor`` task) at
  P = 150, 1000, 10000 (mode ``"cpu"``: 32);
* ``cartpole``: the ``neat-cartpole`` task (``NEAT.from_mode("neat-python", 4, 2, P, 32, 64)``
  on gymnax ``CartPole-v1``, one episode of at most 500 steps) at P = 1000, mode ``"gpu"`` only
  (each generation row is a compilation of NEAT's whole ``tell``, tens of seconds on a small CPU;
  mode ``"cpu"`` keeps one, XOR at P = 32); skipped with a note if gymnax does not import.

Each row: ``compile_s`` (``lower(...).compile()`` of the generation, timed on its own),
``ms_per_gen`` (median over the generations after the first ``WARMUP``, one call plus
``jax.block_until_ready`` each, so one dispatch and one host sync per generation that
``evotensor.run``'s compiled chunks avoid), ``genomes_per_s``, and the state after the timed
generations: best fitness so far, species, mean hidden+output nodes and enabled connections.

``neat-forward`` rows: :func:`~evotensor.neat.network.transform` of a population and
:func:`~evotensor.neat.network.forward_batch` of every network on ``BATCH`` inputs, each compiled
alone, over (pop, max_nodes, max_conns) (and the dense / sparse path: ``method="auto"`` is dense
up to 32 node rows). The genomes are synthetic and full: every node row holds a node (4 inputs,
2 outputs, the rest hidden) and every connection row a random feedforward link (input or hidden
-> hidden or output, earlier -> later in a fixed order), so the network depth is large (reported
as ``mean_depth``): the worst case for the level loop at that size. Per row: compile seconds,
milliseconds per call (median of ``REPEATS``), ``samples_per_s`` (pop x batch / forward time) and
XLA's memory figures of the compiled call (``compiled.memory_analysis()``: temporaries,
arguments + outputs, and its ``peak_memory_in_bytes`` where the backend gives one), in MiB.

``neat-grad`` rows: one step of gradient descent through every topology
(:func:`evotensor.neat.loss_and_grad` of the same full populations on ``BATCH`` inputs, the MSE of
the outputs against zero), compiled alone: compile seconds, milliseconds per call (median of
``REPEATS``), ``genomes_per_s`` and whether every gradient is finite.

Mode ``"gpu"`` stops adding rows to a part once ``budget_s`` seconds have been spent on it;
mode ``"cpu"`` uses tiny sizes (about 30 CPU-seconds, nearly all compilation). A row that raises
is recorded as an error row and the others still run.

    .venv/bin/python benchmarks/gpu_check_neat.py cpu      # or gpu; prints one JSON row per line
    # from Python: sys.path.insert(0, "benchmarks"); import gpu_check_neat; rows = gpu_check_neat.run("cpu")
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax_measure import memory_mib, timed

from evotensor.core.run import Loop
from evotensor.neat import NEAT, Genome, forward_batch, loss_and_grad, transform
from evotensor.neat.genome import EMPTY
from evotensor.problems.function_fit import XOR

WARMUP = 2  # generations left out of the median
BATCH = 16  # inputs per network in the forward rows
REPEATS = 5
SIZES = {
    "gpu": dict(
        generation=(("xor", 150, 30), ("xor", 1000, 30), ("xor", 10000, 20), ("cartpole", 1000, 10)),
        forward=(
            (1000, 32, 64, "auto"),
            (10000, 32, 64, "auto"),
            (10000, 32, 64, "sparse"),
            (10000, 64, 128, "auto"),
            (10000, 128, 256, "auto"),
            (100000, 32, 64, "auto"),
        ),
        grad=((1000, 32, 64), (10000, 32, 64), (10000, 64, 128)),
        cartpole_steps=None,
        budget_s=90.0,
    ),
    "cpu": dict(
        generation=(("xor", 32, 4),),
        forward=((16, 8, 12, "auto"), (16, 40, 60, "auto")),
        grad=((16, 12, 20),),
        cartpole_steps=20,
        budget_s=60.0,
    ),
}


# ---------------------------------------------------------------------------------- generation


def generation_row(task: str, pop: int, generations: int, cartpole_steps: int | None, seed: int = 0) -> dict:
    """Compile and time ``generations`` NEAT generations of ``task`` at population ``pop``."""
    if task == "xor":
        problem = XOR()
        strategy = NEAT.from_mode("neat-python", 2, 1, population_size=pop, max_nodes=32, max_conns=64)
    else:
        from evotensor.problems.control import GymnaxProblem

        problem = GymnaxProblem("CartPole-v1", max_steps=cartpole_steps)
        strategy = NEAT.from_mode("neat-python", 4, 2, population_size=pop, max_nodes=32, max_conns=64)
    loop = Loop(strategy, problem)
    carry, loop_key = jax.jit(loop.init)(jax.random.key(seed), None)
    carry = jax.block_until_ready(carry)
    t0 = time.perf_counter()
    step = jax.jit(loop.step, donate_argnums=0).lower(carry, loop_key, None).compile()
    compile_s = time.perf_counter() - t0
    times, metrics = [], {}
    for _ in range(generations):
        t0 = time.perf_counter()
        carry, metrics = step(carry, loop_key, None)
        jax.block_until_ready(carry)
        times.append(time.perf_counter() - t0)
    ms = 1e3 * statistics.median(times[WARMUP:] if len(times) > WARMUP else times)
    m = jax.device_get(metrics)
    return {
        "family": "neat",
        "section": "neat-generation",
        "case": task
        + ("" if cartpole_steps is None or task != "cartpole" else f" (episodes <= {cartpole_steps})"),
        "pop": pop,
        "max_nodes": strategy.spec.max_nodes,
        "max_conns": strategy.spec.max_conns,
        "generations": generations,
        "compile_s": round(compile_s, 3),
        "ms_per_gen": round(ms, 3),
        "genomes_per_s": round(pop / (ms / 1e3)),
        "best_fitness": round(float(m["best_fitness"]), 4),
        "species": int(m["num_species"]),
        "mean_nodes": round(float(m["mean_nodes"]), 2),
        "mean_conns": round(float(m["mean_conns"]), 2),
        "timed_s": round(sum(times), 2),
        "backend": jax.default_backend(),
    }


# ---------------------------------------------------------------------------------- forward pass


def full_population(strategy: NEAT, seed: int = 0) -> Genome:
    """``strategy.population_size`` genomes with every node row a node and every connection row a
    random feedforward link (module docstring); attributes from the genes' ``init``."""
    spec, pop = strategy.spec, strategy.population_size
    n_in, n_out, N, C = spec.num_inputs, spec.num_outputs, spec.max_nodes, spec.max_conns
    hidden = N - n_in - n_out
    keys = np.concatenate([-1 - np.arange(n_in), np.arange(n_out), n_out + np.arange(hidden)]).astype(
        np.int32
    )
    # topological order: inputs, hidden, outputs; rows: inputs, outputs, hidden
    order = np.concatenate([np.arange(n_in), n_in + hidden + np.arange(n_out), n_in + np.arange(hidden)])
    src_ok = np.r_[np.ones(n_in, bool), np.zeros(n_out, bool), np.ones(hidden, bool)]
    dst_ok = ~np.r_[np.ones(n_in, bool), np.zeros(n_out + hidden, bool)]
    a, b = np.meshgrid(np.arange(N), np.arange(N), indexing="ij")
    allowed = src_ok[a] & dst_ok[b] & (order[a] < order[b])
    pairs_src, pairs_dst = a[allowed], b[allowed]
    P = len(pairs_src)
    rows = min(C, P)
    rng = np.random.default_rng(seed)
    pick = np.stack([rng.choice(P, rows, replace=False) for _ in range(pop)])  # [pop, rows]
    conn_in = np.full((pop, C), EMPTY, np.int32)
    conn_out = np.full((pop, C), EMPTY, np.int32)
    innov = np.full((pop, C), EMPTY, np.int32)
    conn_in[:, :rows] = keys[pairs_src[pick]]
    conn_out[:, :rows] = keys[pairs_dst[pick]]
    innov[:, :rows] = pick
    k_node, k_conn = jax.random.split(jax.random.key(seed))
    attrs, act, agg = spec.node_gene.init_attrs(k_node, (pop, N))
    is_input = jnp.arange(N) < n_in
    w = spec.conn_gene.init_attrs(k_conn, (pop, C))
    used = jnp.arange(C) < rows
    return Genome(
        node_key=jnp.broadcast_to(jnp.asarray(keys), (pop, N)),
        node_attrs=jnp.where(is_input[None, :, None], 0.0, attrs),
        node_act=jnp.where(is_input[None], 0, act),
        node_agg=jnp.where(is_input[None], 0, agg),
        conn_in=jnp.asarray(conn_in),
        conn_out=jnp.asarray(conn_out),
        conn_innov=jnp.asarray(innov),
        conn_enabled=jnp.broadcast_to(used, (pop, C)),
        conn_attrs=jnp.where(used[None, :, None], w, 0.0),
    )


def forward_row(pop: int, max_nodes: int, max_conns: int, method: str) -> dict:
    """Compile and time ``transform`` and ``forward_batch`` of a full population (module docstring)."""
    strategy = NEAT.from_mode(
        "neat-python", 4, 2, population_size=max(pop, 2), max_nodes=max_nodes, max_conns=max_conns
    )
    spec, cfg = strategy.spec, strategy.config
    genomes = jax.block_until_ready(full_population(strategy))
    x = jax.random.normal(jax.random.key(1), (BATCH, spec.num_inputs), jnp.float32)

    t0 = time.perf_counter()
    tr = jax.jit(lambda g: transform(spec, g, method)).lower(genomes).compile()
    transform_compile_s = time.perf_counter() - t0
    nets = jax.block_until_ready(tr(genomes))

    def fwd(nets, x):
        return jax.vmap(lambda n: forward_batch(spec, n, x, functions=cfg.functions, outputs=cfg.outputs))(
            nets
        )

    t0 = time.perf_counter()
    fw = jax.jit(fwd).lower(nets, x).compile()
    forward_compile_s = time.perf_counter() - t0
    transform_s = timed(tr, genomes, repeats=REPEATS)[0]
    forward_s = timed(fw, nets, x, repeats=REPEATS)[0]
    y = np.asarray(fw(nets, x))
    resolved = "dense" if nets.dense_weight is not None else "sparse"
    row = {
        "family": "neat",
        "section": "neat-forward",
        "pop": pop,
        "max_nodes": max_nodes,
        "max_conns": max_conns,
        "method": f"{method} ({resolved})" if method == "auto" else method,
        "batch": BATCH,
        "mean_depth": round(float(np.mean(np.asarray(nets.max_depth))), 1),
        "transform_compile_s": round(transform_compile_s, 3),
        "transform_ms": round(1e3 * transform_s, 3),
        "forward_compile_s": round(forward_compile_s, 3),
        "forward_ms": round(1e3 * forward_s, 3),
        "samples_per_s": round(pop * BATCH / forward_s),
        "finite_outputs": bool(np.all(np.isfinite(y))),
        "backend": jax.default_backend(),
    }
    row.update({f"transform_{k}": v for k, v in memory_mib(tr).items()})
    row.update({f"forward_{k}": v for k, v in memory_mib(fw).items()})
    return row


def grad_row(pop: int, max_nodes: int, max_conns: int) -> dict:
    """Compile and time one :func:`loss_and_grad` of a full population (module docstring)."""
    strategy = NEAT.from_mode(
        "neat-python", 4, 2, population_size=max(pop, 2), max_nodes=max_nodes, max_conns=max_conns
    )
    genomes = jax.block_until_ready(full_population(strategy))
    x = jax.random.normal(jax.random.key(1), (BATCH, strategy.spec.num_inputs), jnp.float32)
    step = jax.jit(lambda g, x: loss_and_grad(strategy.decoder, g, x, lambda y: jnp.mean(y**2)))
    t0 = time.perf_counter()
    compiled = step.lower(genomes, x).compile()
    compile_s = time.perf_counter() - t0
    seconds = timed(compiled, genomes, x, repeats=REPEATS)[0]
    loss, grads = compiled(genomes, x)
    return {
        "family": "neat",
        "section": "neat-grad",
        "pop": pop,
        "max_nodes": max_nodes,
        "max_conns": max_conns,
        "batch": BATCH,
        "compile_s": round(compile_s, 3),
        "ms_per_step": round(1e3 * seconds, 3),
        "genomes_per_s": round(pop / seconds),
        "finite": bool(np.all(np.isfinite(np.asarray(loss))) and all(np.all(np.isfinite(g)) for g in grads)),
        "backend": jax.default_backend(),
    }


# ---------------------------------------------------------------------------------- section


def run(mode: str) -> list[dict]:
    """The NEAT rows for ``mode`` (``"gpu"``: real sizes; ``"cpu"``: tiny sizes). A row that raises
    becomes an error row; the others still run."""
    if mode not in SIZES:
        raise ValueError(f"mode must be 'gpu' or 'cpu', got {mode!r}")
    cfg = SIZES[mode]
    rows: list[dict] = []
    parts = (
        ("neat-generation", cfg["generation"], lambda c: generation_row(*c, cfg["cartpole_steps"])),
        ("neat-forward", cfg["forward"], lambda c: forward_row(*c)),
        ("neat-grad", cfg["grad"], lambda c: grad_row(*c)),
    )
    for section, cases, measure in parts:
        t_start = time.perf_counter()
        for case in cases:
            head = {"family": "neat", "section": section, "case": " ".join(map(str, case))}
            if mode == "gpu" and time.perf_counter() - t_start > cfg["budget_s"]:
                rows.append(
                    {**head, "note": f"skipped: the part's time budget ({cfg['budget_s']} s) was spent"}
                )
                continue
            if case[0] == "cartpole":
                try:
                    import gymnax  # noqa: F401
                except ImportError as e:
                    rows.append({**head, "note": f"skipped: gymnax does not import ({e})"})
                    continue
            try:
                rows.append(measure(case))
            except Exception as e:  # one broken row must not hide the others
                rows.append({**head, "error": f"{type(e).__name__}: {e}"[:2000]})
    return rows


if __name__ == "__main__":
    for r in run(sys.argv[1] if len(sys.argv) > 1 else ("gpu" if jax.default_backend() == "gpu" else "cpu")):
        print(json.dumps(r), flush=True)
