"""GP parent selection cost: epsilon-lexicase on realistic per-case errors (``--lexicase``).

Times :func:`evotensor.gp.selection.epsilon_lexicase` drawing a whole generation of parents,
``n = 2 * (pop - n_elite)`` with ``n_elite = ceil(0.01 * pop)`` (what ``GP(selection="lexicase")``
draws in ``tell``), on the per-case squared errors of

* ``init``: the GP's initial population (ramped half-and-half, ``max_len`` 64, EvoGP's function set
  ``+ - * / sin cos tan``, raw semantics; a row with a non-finite error is ``+inf`` everywhere, as the
  strategy passes it);
* ``evolved``: the population after ``--generations`` generations of the same GP with tournament
  selection (clones and near-clones appear, pools stay large for many cases),

for Pagie-1 (676 grid points) and 4096 random points in [-5, 5]^2, pop 1000 and 5000. Compile time is
measured separately from the steady state (best of ``--repeats`` calls with fresh keys). Besides the
whole call it times its parts: the default epsilon (:func:`lexicase_epsilon`), the case-order draw (an
argsort of ``[n, n_cases]`` uniforms) and the filtering kernel (:func:`lexicase_from_draws`).

Process CPU time is the figure to compare on a shared machine (wall time is printed too). To measure
another version of the selection module (e.g. the one before a change), pass its file::

    git show <commit>:src/evotensor/gp/selection.py > /tmp/selection_old.py
    .venv/bin/python benchmarks/gp_select.py --lexicase --impl /tmp/selection_old.py

Usage::

    .venv/bin/python benchmarks/gp_select.py --lexicase                      # everything
    .venv/bin/python benchmarks/gp_select.py --lexicase --pops 1000 --cases 676 --kinds init
    .venv/bin/python benchmarks/gp_select.py --lexicase --cache /tmp/lex-errors  # reuse error matrices
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import platform
import time

import numpy as np


def load_impl(path: str | None):
    if path is None:
        from evotensor.gp import selection

        return selection
    spec = importlib.util.spec_from_file_location("selection_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def data(n_cases: int):
    from evotensor.gp.regression import pagie1_data

    if n_cases == 676:
        return pagie1_data()
    X = np.random.default_rng(0).uniform(-5, 5, (n_cases, 2)).astype(np.float32)
    return X, (1 / (1 + X[:, 0] ** -4) + 1 / (1 + X[:, 1] ** -4)).astype(np.float32)


def case_errors(pop: int, n_cases: int, generations: int, seed: int = 0) -> np.ndarray:
    """Per-case errors ``[pop, n_cases]`` of a GP population after ``generations`` generations."""
    import jax

    from evotensor.gp import GP, FunctionSet
    from evotensor.gp.regression import EVOGP_SR_FUNCTIONS, SymbolicRegression

    fs = FunctionSet(EVOGP_SR_FUNCTIONS)
    X, y = data(n_cases)
    problem = SymbolicRegression(X, y, fs, case_errors=True)
    gp = GP(pop, fs, n_vars=2, max_len=64, selection="tournament")
    key = jax.random.key(seed)
    state = gp.init(key)

    @jax.jit
    def ask_eval(k, s):
        forest, s = gp.ask(k, s)
        return forest, s, problem.evaluate(k, forest)

    tell = jax.jit(gp.tell)
    for g in range(generations + 1):
        k = jax.random.fold_in(key, g)
        forest, state, evaluation = ask_eval(k, state)
        if g == generations:
            return np.asarray(gp._case_errors(evaluation))
        state, _ = tell(k, state, forest, evaluation)
    raise AssertionError("unreachable")


def timed(fn, args, repeats: int, fresh):
    """(compile CPU s, best steady CPU s, its wall s) of a jitted ``fn``; ``fresh(i)`` varies args."""
    import jax

    t = time.process_time()
    compiled = jax.jit(fn).lower(*args).compile()
    compile_cpu = time.process_time() - t
    jax.block_until_ready(compiled(*args))
    best = (math.inf, math.inf)
    for i in range(repeats):
        a = fresh(i, args)
        t, w = time.process_time(), time.perf_counter()
        jax.block_until_ready(compiled(*a))
        best = min(best, (time.process_time() - t, time.perf_counter() - w))
    return compile_cpu, best[0], best[1]


def bench_lexicase(args) -> None:
    import jax
    import jax.numpy as jnp

    sel = load_impl(args.impl)
    print(
        f"# {platform.node()} {platform.processor() or platform.machine()} cpus={os.cpu_count()} "
        f"load={os.getloadavg()[0]:.1f} jax={jax.__version__} impl={args.impl or 'evotensor'}"
    )
    print(
        "| errors | cases | pop | n | distinct rows | whole: compile / steady CPU s (wall) "
        "| epsilon | orders | kernel |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for kind in args.kinds:
        generations = 0 if kind == "init" else args.generations
        for n_cases in args.cases:
            for pop in args.pops:
                path = (
                    None
                    if args.cache is None
                    else os.path.join(args.cache, f"errors_{n_cases}_{pop}_g{generations}.npy")
                )
                if path and os.path.exists(path):
                    errors = np.load(path)
                else:
                    errors = case_errors(pop, n_cases, generations)
                    if path:
                        os.makedirs(args.cache, exist_ok=True)
                        np.save(path, errors)
                n = 2 * (pop - math.ceil(0.01 * pop))
                e = jnp.asarray(errors)

                def fresh_key(i, a):
                    return (jax.random.key(100 + i),) + tuple(a[1:])

                whole = timed(
                    lambda k, e, n=n: sel.epsilon_lexicase(k, e, n),
                    (jax.random.key(0), e),
                    args.repeats,
                    fresh_key,
                )
                eps_t = timed(sel.lexicase_epsilon, (e,), args.repeats, lambda i, a: a)

                def draw(k, n=n, n_cases=n_cases):
                    k_order, k_pick = jax.random.split(k)
                    return jnp.argsort(jax.random.uniform(k_order, (n, n_cases)), axis=1), jax.random.uniform(
                        k_pick, (n,)
                    )

                orders_t = timed(draw, (jax.random.key(0),), args.repeats, fresh_key)
                orders, u = draw(jax.random.key(1))
                eps = sel.lexicase_epsilon(e)
                kernel_t = timed(sel.lexicase_from_draws, (e, eps, orders, u), args.repeats, lambda i, a: a)
                distinct = len(np.unique(errors, axis=0))
                print(
                    f"| {kind} | {n_cases} | {pop} | {n} | {distinct} | {whole[0]:.1f} / {whole[1]:.2f} "
                    f"({whole[2]:.2f}) | {eps_t[1]:.2f} | {orders_t[1]:.2f} | {kernel_t[1]:.2f} |",
                    flush=True,
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lexicase", action="store_true", help="time epsilon-lexicase selection")
    parser.add_argument("--pops", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--cases", type=int, nargs="+", default=[676, 4096], help="676 = Pagie-1 grid")
    parser.add_argument("--kinds", nargs="+", default=["init", "evolved"], choices=["init", "evolved"])
    parser.add_argument("--generations", type=int, default=20, help="generations before 'evolved'")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--impl", default=None, help="a selection.py file to time instead of evotensor's")
    parser.add_argument("--cache", default=None, help="directory to keep the error matrices in")
    args = parser.parse_args()
    if not args.lexicase:
        parser.error("choose a mode: --lexicase")
    bench_lexicase(args)


if __name__ == "__main__":
    main()
