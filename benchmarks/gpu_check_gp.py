"""GP section of the one-command GPU check (``benchmarks/gpu_check.py``).

* ``accuracy``: the issue-13 case. 1000 random ``+ - * / sin cos tan`` trees
  (``gp_eval.random_trees(..., seed=7)``), X uniform(-5, 5) ``[n, 2]`` from
  ``np.random.default_rng(n)``, Pagie-1's formula for y. Every float32 path is compared with a
  float64 evaluation of the same trees (NumPy, the built-ins' own formulas in float64): per path the
  predictions beyond rtol 1e-4 of float64, and the trees whose MSE is beyond rtol 1e-3 of the float64
  MSE. A path is as good as float32 allows when it is no further from float64 than the float32
  reference interpreter is.
* ``division``: Pallas's float32 division against XLA's, bitwise.
* ``fitness``: GPops/s (tree nodes x rows / s) of the fused fitness for a grid of population and
  data sizes, with compile time apart; a block-shape sweep on two cases.
* ``sr-pagie``: the whole run (pop 5000 x 100 generations) through ``evotensor.run``: compile and
  run time; ask, fitness and tell timed alone; and the GPU kernels of one compiled chunk by time
  (``jax.profiler`` trace).

``run(mode)`` returns flat dict rows; mode ``"cpu"`` shrinks every size so the section runs in
seconds (the default test suite runs it so it cannot rot).
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from gp_eval import SETS, random_trees  # noqa: E402

from evotensor.gp import FunctionSet  # noqa: E402
from evotensor.gp.evaluate import evaluate  # noqa: E402
from evotensor.gp.functions import CONST, VAR  # noqa: E402


class _Forest:
    def __init__(self, opcode, value, size):
        self.opcode, self.value, self.size = opcode, value, size
        self.output = np.full(opcode.shape, -1, np.int32)


def _pagie_y(X):
    X = X.astype(np.float64)
    return 1 / (1 + X[:, 0] ** -4) + 1 / (1 + X[:, 1] ** -4)


def _median_time(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _compile_and_time(fn, repeats):
    t0 = time.perf_counter()
    jax.block_until_ready(fn())
    first = time.perf_counter() - t0
    run = _median_time(fn, repeats)
    return max(0.0, first - run), run


# ---- float64 evaluation (the arbiter of the accuracy check) ----------------------------------------


def eval_float64(opcode, value, size, X, fs: FunctionSet) -> np.ndarray:
    """Predictions ``[pop, n]`` in float64 with the functions' NumPy formulas."""
    X = np.asarray(X, np.float64)
    impl = {f.opcode: f for f in fs.functions}
    out = np.empty((opcode.shape[0], X.shape[0]))
    with np.errstate(all="ignore"):
        for t in range(opcode.shape[0]):
            stack = []
            for i in range(int(size[t, 0]) - 1, -1, -1):
                op = int(opcode[t, i])
                if op == CONST:
                    stack.append(np.full(X.shape[0], float(value[t, i])))
                elif op == VAR:
                    stack.append(X[:, int(value[t, i])])
                else:
                    f = impl[op]
                    args = [stack.pop() for _ in range(f.arity)]
                    stack.append(np.asarray(f.numpy_fn(*args), np.float64))
            out[t] = stack[-1]
    return out


def _compare(name, pred, y, ref64, mse64):
    pred = np.asarray(pred, np.float64)
    with np.errstate(all="ignore"):
        finite = np.isfinite(ref64) & np.isfinite(pred)
        close = np.isclose(pred, ref64, rtol=1e-4, atol=1e-6) | (~np.isfinite(ref64) & ~np.isfinite(pred))
        mse = np.mean((pred - y[None]) ** 2, axis=1)
        both = np.isfinite(mse) & np.isfinite(mse64)
        rel = np.where(both, np.abs(mse - mse64) / np.maximum(np.abs(mse64), 1e-30), 0.0)
    return {
        "path": name,
        "pred_beyond_1e-4": int((~close).sum()),
        "finiteness_differs": int((np.isfinite(pred) != np.isfinite(ref64)).sum()),
        "trees_mse_beyond_1e-3": int(((rel > 1e-3) | (np.isfinite(mse) != np.isfinite(mse64))).sum()),
        "max_mse_rel_diff": float(rel.max()),
        "finite_preds": int(finite.sum()),
    }


def accuracy(mode):
    rows = []
    n_trees, sizes = (1000, (676, 4096)) if mode == "gpu" else (40, (64,))
    names = SETS["sr"]
    fs = FunctionSet(names)
    opcode, value, size = random_trees(names, n_trees, seed=7)
    forest = _Forest(opcode, value, size)
    for n in sizes:
        X = np.random.default_rng(n).uniform(-5, 5, (n, 2)).astype(np.float32)
        y = _pagie_y(X)
        ref64 = eval_float64(opcode, value, size, X, fs)
        with np.errstate(all="ignore"):
            mse64 = np.mean((ref64 - y[None]) ** 2, axis=1)
        paths = {
            "pallas": lambda X=X: evaluate(forest, X, fs, backend="pallas"),
            "jax": lambda X=X: evaluate(forest, X, fs, backend="jax"),
        }
        if n * n_trees <= 1_000_000:
            from evotensor.gp.reference import reference_eval

            paths["reference_f32"] = lambda X=X: reference_eval(forest, X, fs, 1)
        preds = {}
        for name, fn in paths.items():
            preds[name] = np.asarray(fn())[..., 0]
            rows.append({"section": "gp-accuracy", "n": n, **_compare(name, preds[name], y, ref64, mse64)})
        # the issue's own measure: the kernel against the JAX path
        a, b = preds["pallas"], preds["jax"]
        with np.errstate(all="ignore"):
            differ = ~(np.isclose(a, b, rtol=1e-4, atol=1e-6) | (~np.isfinite(a) & ~np.isfinite(b)))
            # where they differ, which side is nearer float64?
            err_a = np.abs(a - ref64)[differ]
            err_b = np.abs(b - ref64)[differ]
        rows.append(
            {
                "section": "gp-accuracy",
                "n": n,
                "path": "pallas vs jax",
                "pred_beyond_1e-4": int(differ.sum()),
                "pallas_nearer_f64": int((err_a < err_b).sum()),
                "jax_nearer_f64": int((err_b < err_a).sum()),
            }
        )
    return rows


def division(mode):
    """Bitwise: Pallas's float32 division (what the kernel's ``div`` and ``inv`` compile to) and XLA's."""
    from jax.experimental import pallas as pl

    from evotensor.gp import pallas_kernel

    n = 1 << 20 if mode == "gpu" else 1 << 10
    rng = np.random.default_rng(3)
    a = (rng.standard_normal(n) * 10.0 ** rng.uniform(-30, 30, n)).astype(np.float32)
    b = (rng.standard_normal(n) * 10.0 ** rng.uniform(-30, 30, n)).astype(np.float32)
    xla = np.asarray(jnp.asarray(a) / jnp.asarray(b))

    def body(a_ref, b_ref, o_ref):
        o_ref[...] = a_ref[...] / b_ref[...]

    spec = pl.BlockSpec((1024,), lambda i: (i,))
    got = np.asarray(
        pl.pallas_call(
            body,
            grid=(n // 1024,),
            in_specs=[spec, spec],
            out_specs=spec,
            out_shape=jax.ShapeDtypeStruct((n,), jnp.float32),
            interpret=jax.default_backend() != "gpu",
            compiler_params=pallas_kernel._compiler_params(None),
        )(a, b)
    )
    same = (got.view(np.int32) == xla.view(np.int32)) | (np.isnan(got) & np.isnan(xla))
    rows = [
        {
            "section": "gp-division",
            "what": "Pallas a / b vs XLA, bitwise",
            "n": n,
            "differ": int((~same).sum()),
        }
    ]
    # float32 denormals: kept or flushed to zero by XLA and by the kernel (x * 1 for x = 1e-40)
    tiny = jnp.full((1024,), 1e-40, jnp.float32)
    one = jnp.ones((1024,), jnp.float32)
    xla_tiny = float(jax.jit(lambda a, b: a * b)(tiny, one)[0])

    def mul(a_ref, b_ref, o_ref):
        o_ref[...] = a_ref[...] * b_ref[...]

    spec = pl.BlockSpec((1024,), lambda i: (i,))
    kernel_tiny = float(
        pl.pallas_call(
            mul,
            grid=(1,),
            in_specs=[spec, spec],
            out_specs=spec,
            out_shape=jax.ShapeDtypeStruct((1024,), jnp.float32),
            interpret=jax.default_backend() != "gpu",
            compiler_params=pallas_kernel._compiler_params(None),
        )(tiny, one)[0]
    )
    rows.append(
        {
            "section": "gp-division",
            "what": "1e-40 * 1 (denormal kept?)",
            "xla": xla_tiny,
            "kernel": kernel_tiny,
        }
    )
    return rows


def throughput(mode):
    names = SETS["sr"]
    fs = FunctionSet(names)
    if mode == "gpu":
        grid = [
            (1000, 676),
            (5000, 676),
            (1000, 4096),
            (5000, 4096),
            (1000, 32768),
            (5000, 32768),
            (5000, 262144),
        ]
        sweep_cases = [(5000, 676), (5000, 32768)]
        sweep = [(tb, rb, w) for tb in (1, 4, 16) for rb in (128, 512) for w in (None,)]
        repeats = 5
    else:
        grid, sweep_cases, sweep, repeats = [(16, 64)], [(16, 64)], [(4, 32, 2)], 2
    rows = []
    trees = {pop: random_trees(names, pop, seed=1) for pop in sorted({p for p, _ in grid + sweep_cases})}

    def one(pop, n, **kw):
        opcode, value, size = trees[pop]
        X = np.random.default_rng(n).uniform(-5, 5, (n, 2)).astype(np.float32)
        y = _pagie_y(X).astype(np.float32)
        f = tuple(jnp.asarray(a) for a in (opcode, value, size, np.full(opcode.shape, -1, np.int32)))
        Xj, yj = jnp.asarray(X), jnp.asarray(y)
        from evotensor.gp.pallas_kernel import fitness_pallas

        call = jax.jit(lambda f_, X_, y_: fitness_pallas(f_, X_, y_, fs, **kw))
        compile_s, run_s = _compile_and_time(lambda: call(f, Xj, yj), repeats)
        nodes = float(size[:, 0].sum())
        return {
            "pop": pop,
            "n_points": n,
            "compile_s": round(compile_s, 3),
            "ms": round(1e3 * run_s, 3),
            "gpops": float(f"{nodes * n / run_s / 1e9:.3g}"),  # 3 significant digits: tiny in CPU mode
        }

    for pop, n in grid:
        rows.append({"section": "gp-fitness", "config": "default", **one(pop, n)})
    for pop, n in sweep_cases:
        for tb, rb, w in sweep:
            scheme = "data_parallel" if tb == 1 else "hybrid"
            kw = dict(scheme=scheme, tree_block=tb, row_block=rb, num_warps=w)
            rows.append(
                {"section": "gp-sweep", "config": f"tb{tb} rb{rb} w{w or 'auto'}", **one(pop, n, **kw)}
            )
    return rows


def _kernel_table(trace_dir, top=15):
    """GPU kernels of a ``jax.profiler`` trace by total time (from its perfetto JSON)."""
    paths = glob.glob(os.path.join(trace_dir, "**", "*.trace.json.gz"), recursive=True)
    if not paths:
        return []
    with gzip.open(paths[0], "rt") as fh:
        events = json.load(fh).get("traceEvents", [])
    pid_names = {
        e["pid"]: e.get("args", {}).get("name", "")
        for e in events
        if e.get("ph") == "M" and e.get("name") == "process_name"
    }
    totals: dict[str, list] = {}
    for e in events:
        if e.get("ph") != "X" or "dur" not in e:
            continue
        if "/device:GPU" not in pid_names.get(e.get("pid"), ""):
            continue
        t = totals.setdefault(e.get("name", "?")[:80], [0.0, 0])
        t[0] += e["dur"]
        t[1] += 1
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][0])[:top]
    return [{"kernel": k, "total_ms": round(v[0] / 1e3, 3), "calls": v[1]} for k, v in ranked]


def sr_pagie(mode):
    import evotensor
    from evotensor.core import to_minimization
    from evotensor.tasks import get_task

    pop, gens = (5000, 100) if mode == "gpu" else (64, 4)
    task = get_task("sr-pagie").build({"pop": pop, "generations": gens})
    es, problem = task.strategy, task.problem
    rows = []
    for attempt in ("first",):
        t0 = time.perf_counter()
        res = evotensor.run(es, problem, gens, jax.random.key(0), progress=False)
        total = time.perf_counter() - t0
        rows.append(
            {
                "section": "sr-pagie",
                "what": f"evotensor.run ({attempt})",
                "pop": pop,
                "generations": gens,
                "total_s": round(total, 3),
                "compile_s": round(res.compile_seconds, 3),
                "run_s": round(res.run_seconds, 3),
                "ms_per_gen": round(1e3 * res.run_seconds / gens, 3),
                "best_mse": float(res.best_fitness),
                "evals_per_s": round(pop * gens / res.run_seconds),
            }
        )
    # the pieces of one generation, each jitted alone
    params = es.default_params()
    state = res.state
    ask = jax.jit(es.ask)
    evaluate_ = jax.jit(problem.evaluate)
    tell = jax.jit(es.tell)
    k = jax.random.key(1)
    forest, _ = ask(k, state, params)
    ev = to_minimization(evaluate_(k, forest), problem.maximize)
    for name, fn in (
        ("ask", lambda: ask(k, state, params)),
        ("evaluate", lambda: evaluate_(k, forest)),
        ("tell", lambda: tell(k, state, forest, ev, params)),
    ):
        c, r = _compile_and_time(fn, 10)
        rows.append(
            {
                "section": "sr-pagie",
                "what": f"{name} alone",
                "compile_s": round(c, 3),
                "ms": round(1e3 * r, 3),
            }
        )
    # where a compiled chunk spends its time on the device
    if mode == "gpu":
        with tempfile.TemporaryDirectory() as d:
            evotensor.run(es, problem, 3, jax.random.key(2), progress=False)  # compile the 3-chunk
            jax.profiler.start_trace(d, create_perfetto_trace=True)
            evotensor.run(es, problem, 3, jax.random.key(2), progress=False)
            jax.profiler.stop_trace()
            for r in _kernel_table(d):
                rows.append({"section": "sr-pagie-kernels (3 generations)", **r})
    return rows


def run(mode: str) -> list[dict]:
    rows = []
    for part in (division, accuracy, throughput, sr_pagie):
        t0 = time.perf_counter()
        try:
            new = part(mode)
        except Exception as e:  # a broken part must not hide the others' figures
            new = [{"section": part.__name__, "error": f"{type(e).__name__}: {e}"[:2000]}]
        rows.extend(new)
        for r in new:  # as they come, so a run cut short still shows them
            print(json.dumps(r, default=str), flush=True)
        print(f"[gp] {part.__name__}: {time.perf_counter() - t0:.1f} s", flush=True)
    return rows
