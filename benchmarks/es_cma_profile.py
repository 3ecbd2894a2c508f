"""CMA-ES step profile: evotensor vs evosax, paired rounds (run by hand, not a test).

Workload (issue 4): CMA-ES d=100, population 256 (``--pop``), Rastrigin, float32, one run or
``--seeds`` runs vmapped. Only the jitted generation step (ask, evaluate, tell) is timed, not a
whole ``lax.scan``. The shared 2-core machine
makes single timings swing by several x, so the driver keeps one worker process per library alive
(evotensor in this venv, evosax in the ``es`` venv of ``bench_venvs.py``), both compiled and warm,
and runs MANY short rounds alternately (A B, B A, ...). Each round is ``--steps`` calls of the step
and is timed in process CPU time (and wall time); the figure reported is the median over rounds of the paired
ratio evotensor / evosax, with the 25-75 % range, so that load changes between rounds cancel.

    .venv/bin/python benchmarks/es_cma_profile.py --blas-threads 1   # paired rounds + HLO stats
    .venv/bin/python benchmarks/es_cma_profile.py --blas-threads 1 --pieces --no-paired
    .venv/bin/python benchmarks/es_cma_profile.py --rounds 300 --steps 5 --hlo-dir /tmp/cma_hlo

``--blas-threads 1`` sets ``OPENBLAS_NUM_THREADS`` for both workers: jaxlib's CPU ``eigh`` is
scipy's OpenBLAS ``ssyevd``, whose two default threads busy-wait for each other on a loaded 2-core
machine and make a generation cost ~87 ms of CPU instead of ~2 ms, in bursts (see
``results_es_cma.md``, run 6).

``--before-src DIR`` adds a third worker, ``evotensor_before``: the same step built from another
copy of the library (``DIR`` goes first on its ``PYTHONPATH``, e.g. a ``git archive HEAD src/evotensor``
unpacked in /tmp), for before/after comparisons of a change; ``--impls`` picks the workers.

    .venv/bin/python benchmarks/es_cma_profile.py --blas-threads 1 --pop 17 --seeds 16 \
        --before-src /tmp/evotensor_before/src --impls evotensor,evotensor_before,evosax

``--pieces`` times evotensor's parts separately (sampling, ranking, mean and paths, covariance
update, decomposition, the whole ``tell``) as jitted functions on a realistic state.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time

from bench_venvs import venv_python

DIMS, POP, GENS = 100, 256, 300
EVOSAX_PYTHON = venv_python("es")


def rastrigin(jnp, x):
    return 10 * x.shape[-1] + jnp.sum(x**2 - 10 * jnp.cos(2 * jnp.pi * x), axis=-1)


# --------------------------------------------------------------------------------------------------
# the two steps (each built in its own interpreter)
# --------------------------------------------------------------------------------------------------
def batched(step, init, seeds: int):
    """``(jit(step), carry)`` for one run (``seeds == 0``) or ``seeds`` runs vmapped."""
    import jax

    if seeds == 0:
        return jax.jit(step), init(jax.random.key(0))
    return jax.jit(jax.vmap(step)), jax.vmap(init)(jax.random.split(jax.random.key(0), seeds))


def build_evotensor(pop: int = POP, seeds: int = 0):
    """``(step, carry)``: ``step(carry) -> carry`` is one jitted generation; carry = (state, key)."""
    import jax
    import jax.numpy as jnp

    from evotensor.es import CMAES

    es = CMAES(pop, num_dims=DIMS, sigma_init=2.0, mean_init=[3.0] * DIMS)
    params = es.default_params()

    def step(carry):
        state, key = carry
        key, k1, k2 = jax.random.split(key, 3)
        x, state = es.ask(k1, state, params)
        state, _ = es.tell(k2, state, x, rastrigin(jnp, x), params)
        return state, key

    return batched(step, lambda key: (es.init(key, params), key), seeds)


def build_evosax(pop: int = POP, seeds: int = 0):
    import jax
    import jax.numpy as jnp
    from evosax.algorithms import CMA_ES

    es = CMA_ES(population_size=pop, solution=jnp.zeros(DIMS))
    params = es.default_params.replace(std_init=2.0)

    def step(carry):
        state, key = carry
        key, k1, k2 = jax.random.split(key, 3)
        x, state = es.ask(k1, state, params)
        state, _ = es.tell(k2, x, rastrigin(jnp, x), state, params)
        return state, key

    return batched(step, lambda key: (es.init(key, jnp.full(DIMS, 3.0), params), key), seeds)


# --------------------------------------------------------------------------------------------------
# HLO statistics
# --------------------------------------------------------------------------------------------------
HLO_OPS = (
    "fusion",
    "while",
    "conditional",
    "custom-call",
    "sort",
    "dot",
    "gather",
    "scatter",
    "copy",
    "reduce",
)


def hlo_stats(text: str) -> dict:
    """Instruction counts of an optimized HLO module (all computations, fused ones included)."""
    stats = {op: len(re.findall(rf"^\s*(?:ROOT )?%?\S+ = .* {op}\(", text, re.M)) for op in HLO_OPS}
    stats["eigh (syevd)"] = len(re.findall(r'custom_call_target="[^"]*(?:syevd|heevd)[^"]*"', text))
    stats["custom-call targets"] = sorted(set(re.findall(r'custom_call_target="([^"]+)"', text)))
    stats["dot shapes"] = sorted(re.findall(r"= (\S+) dot\(", text))
    return stats


# --------------------------------------------------------------------------------------------------
# worker: one library, compiled once, answers commands on stdin
# --------------------------------------------------------------------------------------------------
def worker(impl: str, hlo_dir: str | None, pop: int, seeds: int):
    import jax

    step, carry = (build_evosax if impl == "evosax" else build_evotensor)(pop, seeds)
    t0 = time.perf_counter()
    carry = jax.block_until_ready(step(carry))
    compile_s = time.perf_counter() - t0
    text = step.lower(carry).compile().as_text()
    if hlo_dir:
        os.makedirs(hlo_dir, exist_ok=True)
        with open(os.path.join(hlo_dir, f"{impl}_step.hlo.txt"), "w") as f:
            f.write(text)
    print(json.dumps(dict(ready=impl, compile_s=compile_s, jax=jax.__version__, hlo=hlo_stats(text))))
    sys.stdout.flush()
    start, done = carry, 1
    for line in sys.stdin:
        n = int(line)
        if n <= 0:
            break
        w0, c0 = time.perf_counter(), time.process_time()
        for _ in range(n):
            if done == GENS:  # restart: keep timing the workload's 300 generations, not a longer run
                carry, done = start, 0
            carry = step(carry)
            done += 1
        jax.block_until_ready(carry)
        print(json.dumps(dict(wall=time.perf_counter() - w0, cpu=time.process_time() - c0)))
        sys.stdout.flush()


class Worker:
    def __init__(self, impl: str, python: str, hlo_dir: str | None, args, src: str | None = None):
        cmd = [python, os.path.abspath(__file__), "--worker", impl, "--pop", str(args.pop)]
        cmd += ["--seeds", str(args.seeds)]
        if hlo_dir:
            cmd += ["--hlo-dir", hlo_dir]
        self.impl = impl
        env = dict(os.environ)
        if src:  # another copy of the library first on the path (before/after comparisons)
            env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.ready = self._read()

    def _read(self) -> dict:
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"{self.impl} worker exited (rc={self.proc.wait()})")
            if line.startswith("{"):
                return json.loads(line)

    def run(self, steps: int) -> dict:
        self.proc.stdin.write(f"{steps}\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self):
        self.proc.stdin.write("0\n")
        self.proc.stdin.flush()
        self.proc.wait()


def quartiles(v):
    q = statistics.quantiles(v, n=4)
    return dict(median=statistics.median(v), q25=q[0], q75=q[2], min=min(v))


def paired(args) -> dict:
    """Rounds rotate over the workers (A B C, B C A, ...); ratios are of each to the first."""
    known = {
        "evotensor": (sys.executable, None),
        "evotensor_before": (sys.executable, args.before_src),
        "evosax": (EVOSAX_PYTHON, None),
    }
    names = args.impls.split(",")
    if "evotensor_before" in names and not args.before_src:
        raise SystemExit("--impls evotensor_before needs --before-src")
    workers = [Worker(name, known[name][0], args.hlo_dir, args, known[name][1]) for name in names]
    for w in workers:  # warm-up round each
        w.run(args.steps)
    per = {w.impl: dict(cpu=[], wall=[]) for w in workers}
    for r in range(args.rounds):
        shift = r % len(workers)
        order = workers[shift:] + workers[:shift]
        for w in order:
            t = w.run(args.steps)
            per[w.impl]["cpu"].append(1e3 * t["cpu"] / args.steps)
            per[w.impl]["wall"].append(1e3 * t["wall"] / args.steps)
    for w in workers:
        w.close()
    out = dict(
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        machine=platform.processor() or platform.machine(),
        cpus=os.cpu_count(),
        load_end=os.getloadavg(),
        openblas_threads=os.environ.get("OPENBLAS_NUM_THREADS", "default"),
        rounds=args.rounds,
        steps_per_round=args.steps,
        dims=DIMS,
        population_size=args.pop,
        seeds_vmapped=args.seeds,
        compile_s={w.impl: w.ready["compile_s"] for w in workers},
        hlo={w.impl: w.ready["hlo"] for w in workers},
    )
    first = names[0]
    for kind in ("cpu", "wall"):
        out[f"{kind}_ms_per_step"] = {n: quartiles(per[n][kind]) for n in names}
        for n in names[1:]:
            ratios = [x / y for x, y in zip(per[first][kind], per[n][kind])]
            out[f"{kind}_ratio_{first}_over_{n}"] = quartiles(ratios)
        out[f"{kind}_rounds"] = {n: [round(x, 3) for x in per[n][kind]] for n in names}
    return out


# --------------------------------------------------------------------------------------------------
# evotensor's step in pieces
# --------------------------------------------------------------------------------------------------
def pieces(reps: int = 60, warm_gens: int = 20) -> dict:
    """Median CPU ms per call of each part of evotensor's step, on a state after ``warm_gens``."""
    import jax
    import jax.numpy as jnp

    from evotensor.core.numerics import exact_sum
    from evotensor.es import CMAES
    from evotensor.es.core import cma as m

    es = CMAES(POP, num_dims=DIMS, sigma_init=2.0, mean_init=[3.0] * DIMS)
    params = es.default_params()
    step, (state, key) = build_evotensor()
    carry = (state, key)
    for _ in range(warm_gens):
        carry = step(carry)
    state = carry[0]
    x, _ = es.ask(jax.random.key(1), state, params)
    f = rastrigin(jnp, x)

    def rank(state, x, f):
        order = jnp.argsort(f, stable=True)
        xs = x[order]
        return xs, (xs - state.mean) * (1 / state.sigma)

    def mean_paths(state, xs):
        w = params.weights
        w_pos = jnp.where(w > 0, w, 0.0)
        mean = state.mean + (exact_sum(w_pos[:, None] * xs, axis=0) - state.mean)
        dm = (mean - state.mean) * (1 / state.sigma)
        bt_dm = exact_sum(state.B * dm[:, None], axis=0) / state.D
        z_mean = exact_sum(state.B * bt_dm[None, :], axis=1)
        return mean, z_mean, exact_sum(z_mean**2)

    def covariance(state, ys):
        w = params.weights
        maha = jnp.sqrt(exact_sum(((ys @ state.B) / state.D) ** 2, axis=1))
        w_c = jnp.where(w < 0, w * DIMS / (maha + 1e-9) ** 2, w)
        return state.C * 0.9 + 0.01 * jnp.outer(state.p_c, state.p_c) + 0.01 * (ys.T * w_c) @ ys

    def decompose(state):
        return m.decompose(state.C + 0.0, state.B, state.D, params.max_condition)

    def eigh_only(state):
        return jnp.linalg.eigh(state.C)

    xs, ys = jax.jit(rank)(state, x, f)
    jobs = {
        "ask (sample)": (jax.jit(lambda s, k: es.ask(k, s, params)[0]), (state, jax.random.key(3))),
        "rastrigin": (jax.jit(lambda x: rastrigin(jnp, x)), (x,)),
        "rank (argsort, gather, y)": (jax.jit(rank), (state, x, f)),
        "mean + conjugate path (exact_sum)": (jax.jit(mean_paths), (state, xs)),
        "covariance update (maha + rank-mu)": (jax.jit(covariance), (state, ys)),
        "decompose (eigh + guards)": (jax.jit(decompose), (state,)),
        "eigh alone": (jax.jit(eigh_only), (state,)),
        "whole tell": (jax.jit(lambda s, x, f: es.tell(key, s, x, f, params)[0]), (state, x, f)),
        "whole step (ask + f + tell)": (step, ((state, key),)),
    }
    for fn, a in jobs.values():
        jax.block_until_ready(fn(*a))
    times = {name: [] for name in jobs}
    for _ in range(reps):  # round-robin over the pieces, so load drift hits them all alike
        for name, (fn, a) in jobs.items():
            c0 = time.process_time()
            for _ in range(3):
                r = fn(*a)
            jax.block_until_ready(r)
            times[name].append(1e3 * (time.process_time() - c0) / 3)
    out = {name: round(statistics.median(v), 3) for name, v in times.items()}
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", choices=["evotensor", "evotensor_before", "evosax"])
    ap.add_argument("--pop", type=int, default=POP, help="population size (lambda)")
    ap.add_argument("--seeds", type=int, default=0, help="runs vmapped in one step (0: one run, unbatched)")
    ap.add_argument(
        "--impls", default="evotensor,evosax", help="workers of the paired rounds; first = reference"
    )
    ap.add_argument("--before-src", default=None, help="library copy (a src dir) for evotensor_before")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--steps", type=int, default=20, help="generations per timed round")
    ap.add_argument("--hlo-dir", default=None, help="write each step's optimized HLO here")
    ap.add_argument("--pieces", action="store_true", help="also time evotensor's step in pieces")
    ap.add_argument("--no-paired", action="store_true", help="skip the paired rounds")
    ap.add_argument(
        "--blas-threads",
        default=None,
        help="set OPENBLAS_NUM_THREADS for both workers (jaxlib's CPU eigh calls scipy's OpenBLAS LAPACK)",
    )
    args = ap.parse_args()
    if args.blas_threads is not None:  # before any import of jax/scipy here or in the workers
        os.environ["OPENBLAS_NUM_THREADS"] = str(args.blas_threads)
    if args.worker:
        return worker(args.worker, args.hlo_dir, args.pop, args.seeds)
    if not args.no_paired:
        print(json.dumps(paired(args), indent=1))
    if args.pieces:
        print(json.dumps(dict(pieces_cpu_ms=pieces(), load=os.getloadavg()), indent=1))


if __name__ == "__main__":
    sys.exit(main())
