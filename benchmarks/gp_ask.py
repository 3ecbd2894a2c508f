"""``GP.ask`` (selection + variation) on its own: steady-state CPU time per piece and compile time.

Setting: the ``sr-pagie`` task (Pagie-1, EvoGP's function set, max_len 64, tournament 7, elite 1 %,
crossover 0.9 with Koza's bias, 10 % of the children mutated), pop 1000, with or without
parsimony 0.001. ``ask`` runs on the state after ``--generations`` (30) generations of that task;
the state is made once by the current package and cached (``--state``), so "before" and "after"
vary the very same population.

Times are CPU time (``time.process_time``, all threads), best of ``--repeats`` rounds of
``--inner`` calls: the box is a shared 2-core machine where wall time follows the load.
Compile time is ``lowered.compile()`` in CPU-s, with the optimized HLO's fusion / while counts.

"Before" runs a copy of the package: ``--package /tmp/copy`` puts ``/tmp/copy`` (a directory that
holds an ``evotensor`` package) first on ``sys.path``. Never commit such a copy.

Usage::

    .venv/bin/python benchmarks/gp_ask.py                          # after (this checkout)
    .venv/bin/python benchmarks/gp_ask.py --package /tmp/before    # before (a copy of the old src)
    .venv/bin/python benchmarks/gp_ask.py --parsimony 0.001 --compile
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time


def _args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--package", default=None, help="directory holding an evotensor package to import first")
    p.add_argument("--pop", type=int, default=1000)
    p.add_argument("--parsimony", type=float, default=0.0)
    p.add_argument("--generations", type=int, default=30, help="age of the state ask runs on")
    p.add_argument("--state", default=None, help="cache file of that state (default /tmp/gp_ask_state_*.npz)")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--inner", type=int, default=20)
    p.add_argument("--compile", action="store_true", help="also compile each piece alone and count kernels")
    p.add_argument("--no-pieces", action="store_true", help="time the whole ask only")
    return p.parse_args()


ARGS = _args()
if ARGS.package:
    sys.path.insert(0, os.path.abspath(ARGS.package))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import evotensor  # noqa: E402
from evotensor.gp.encoding import Forest  # noqa: E402
from evotensor.gp.evaluate import fitness as gp_fitness  # noqa: E402
from evotensor.tasks import get_task  # noqa: E402


def build():
    cfg = {"pop": ARGS.pop, "generations": 100, "seed": 0, "parsimony_coefficient": ARGS.parsimony}
    task = get_task("sr-pagie").build(cfg)
    return task.strategy, task.problem


def make_state(gp, problem):
    """The GP state after ``--generations`` generations (cached in a .npz)."""
    path = ARGS.state or f"/tmp/gp_ask_state_pop{ARGS.pop}_c{ARGS.parsimony}_g{ARGS.generations}.npz"
    state = gp.init(jax.random.key(0))
    if os.path.exists(path):
        z = np.load(path)
        forest = Forest(*(jnp.asarray(z[f]) for f in ("opcode", "value", "size", "output")))
        return state.replace(
            forest=forest, fitness=jnp.asarray(z["fitness"]), generation=jnp.int32(ARGS.generations)
        )
    X, y, fs = problem.X, problem.y, problem.function_set

    @jax.jit
    def step(key, state):
        k1, k2 = jax.random.split(key)
        forest, state = gp.ask(k1, state)
        fit = gp_fitness(forest, X, y, fs)
        state, _ = gp.tell(k2, state, forest, fit)
        return state

    for g in range(ARGS.generations):
        state = step(jax.random.key(1000 + g), state)
    f = state.forest
    np.savez(path, opcode=f.opcode, value=f.value, size=f.size, output=f.output, fitness=state.fitness)
    return state


def cpu_ms(fn, *args):
    """Best-of-repeats CPU milliseconds per call of the jitted ``fn``."""
    jax.block_until_ready(fn(*args))
    best = float("inf")
    for _ in range(ARGS.repeats):
        c0 = time.process_time()
        for _ in range(ARGS.inner):
            out = fn(*args)
        jax.block_until_ready(out)
        best = min(best, (time.process_time() - c0) / ARGS.inner)
    return best * 1e3


def compile_stats(fn, *args):
    lowered = jax.jit(fn).lower(*args)
    c0 = time.process_time()
    text = lowered.compile().as_text()
    cpu = time.process_time() - c0
    return cpu, len(re.findall(r" fusion\(", text)), len(re.findall(r" while\(", text))


def _take(f, idx):
    return jax.tree_util.tree_map(lambda a: a[idx], f)


def _slices(gp, forest):
    """Children slices per mutation, as the strategy cuts them (the first ``n_m`` after the previous)."""
    out, start = {}, 0
    for m, n_m in enumerate(gp.mutation_counts):
        if n_m:
            out[m] = jax.tree_util.tree_map(lambda a, s=start, n=n_m: a[s : s + n], forest)
        start += n_m
    return out


def pieces_old(gp, state, params, key):
    """The pieces of the ``_offspring`` that has ``GP._uniforms`` / ``GP._mutate`` (the code before)."""
    from evotensor.gp import operators as ops
    from evotensor.gp import selection as sel
    from evotensor.gp.strategy import MUTATIONS

    P, E = gp.population_size, gp.n_elite
    C = P - E
    keys = jax.random.split(key, 4)
    uniforms = jax.jit(gp._uniforms)(keys[1:])
    parents = jax.jit(
        lambda k, s: sel.tournament(k, gp.selection_fitness(s, params), 2 * C, gp.tournament_size)
    )(keys[0], state)
    rec, don = _take(state.forest, parents[:C]), _take(state.forest, parents[C:])
    cross_name = gp.crossover + "_crossover"
    out = {
        "tournament selection (incl. parsimony fitness)": (
            lambda k, s: sel.tournament(k, gp.selection_fitness(s, params), 2 * C, gp.tournament_size),
            (keys[0], state),
        ),
        "random draws (splits + batched uniforms)": (
            lambda k: gp._uniforms(jax.random.split(k, 4)[1:]),
            (key,),
        ),
        "parent gather": (lambda f, p: (_take(f, p[:C]), _take(f, p[C:])), (state.forest, parents)),
        "crossover + coin": (
            lambda u, r, d: ops.apply_with_uniforms(
                cross_name, u[cross_name], r, d, gp.function_set, params.internal_bias
            ),
            (uniforms, rec, don),
        ),
        "elites": (lambda s: _take(s.forest, sel.elite_indices(s.fitness, E)), (state,)),
    }
    for m, part in _slices(gp, rec).items():
        name = MUTATIONS[m]
        out[f"mutation {name} ({gp.mutation_counts[m]})"] = (
            lambda u, f, n=name: gp._mutate(n, u[n], f, params),
            (uniforms, part),
        )
    return out


def pieces_new(gp, state, params, key):
    """The pieces of the restructured ``_offspring`` (one draw, fused mutation passes): one piece per
    block of ``gp.mutation_blocks`` (the operator registry's plan of the generation's mutations)."""
    from evotensor.gp import selection as sel

    E = gp.n_elite
    u = jax.jit(gp._draw)(key)
    parents = jax.jit(lambda u, s: gp._parents(u, s, params, key))(u, state)
    pair = _take(state.forest, parents)
    children, _ = jax.jit(lambda u, p: gp._crossover(u, p, params))(u, pair)
    out = {
        "random draws (one bits call)": (gp._draw, (key,)),
        "tournament selection (incl. parsimony fitness)": (
            lambda u, s: gp._parents(u, s, params, key),
            (u, state),
        ),
        "parent gather": (lambda f, p: _take(f, p), (state.forest, parents)),
        "crossover (points + exchange + coin)": (lambda u, p: gp._crossover(u, p, params), (u, pair)),
        "elites": (lambda s: _take(s.forest, sel.elite_indices(s.fitness, E)), (state,)),
    }
    row = 0
    for block in gp.mutation_blocks:
        draws = tuple(block.draw_name(i) for i in range(len(block.shapes)))
        rows = jax.tree_util.tree_map(lambda a, lo=row, hi=row + block.size: a[lo:hi], children)
        out[f"{block.name} mutations {block.counts} (one pass)"] = (
            lambda u, f, b=block, d=draws: b.apply(tuple(u[n] for n in d), f, gp.context, params),
            (u, rows),
        )
        row += block.size
    out["mutations + concatenation"] = (
        lambda u, c, e: jax.tree_util.tree_map(
            lambda *a: jnp.concatenate(a), e, *gp._mutations(u, c, params)[0]
        ),
        (u, children, _take(state.forest, jnp.arange(E))),
    )
    return out


def main():
    gp, problem = build()
    state = make_state(gp, problem)
    params = gp.default_params()
    key = jax.random.key(7)
    length = np.asarray(state.forest.size[:, 0])
    print(
        f"# GP.ask, sr-pagie pop {ARGS.pop}, parsimony {ARGS.parsimony}, state after {ARGS.generations} "
        f"generations (mean length {length.mean():.1f}), package {os.path.dirname(evotensor.__file__)}, "
        f"load {os.getloadavg()[0]:.1f}, jax {jax.__version__}",
        flush=True,
    )
    whole = {
        "ask (whole)": (lambda k, s: gp.ask(k, s, params), (key, state)),
        "_offspring (ask without the first-call cond)": (
            lambda k, s: gp._offspring(k, s, params),
            (key, state),
        ),
    }
    pieces = {}
    if not ARGS.no_pieces:
        new = hasattr(gp, "_draw")
        pieces = pieces_new(gp, state, params, key) if new else pieces_old(gp, state, params, key)
    for name, (fn, args) in {**whole, **pieces}.items():
        line = ""
        if ARGS.compile:  # first: a later compile of the same program would hit JAX's in-memory cache
            cpu, fus, wh = compile_stats(fn, *args)
            line = f" | compile {cpu:6.2f} CPU-s fusions {fus:4d} while {wh:3d}"
        print(f"{name:50s} {cpu_ms(jax.jit(fn), *args):7.3f} CPU-ms" + line, flush=True)
    print(f"# load at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
