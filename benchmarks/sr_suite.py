"""SRBench-style ground-truth suite: evotensor, gplearn and Operon side by side on the classic problems.

Every problem of :data:`evotensor.gp.SR_PROBLEMS` (Koza-1..3, Nguyen-1..12, Keijzer-1..15, Pagie-1,
Vladislavleva-1/4/6/7, Feynman) is drawn with its published sampling by ``sr_data(name, seed,
noise)`` (training and test sets; seed ``s`` of the suite is data seed ``s`` and every engine's
``random_state``). Each engine gets the same evaluation budget (``--pop`` x ``--generations``) and
the problem's function set, and is scored the same way (SRBench's ground-truth evaluation):

* test R² (``1 - SSE / SST`` on the test draw, float64; a model with non-finite test predictions
  gets R² = -inf, counted as -1 in the medians and IQRs);
* symbolic solution: the model, parsed by sympy with raw semantics (see below), its floats rounded as
  SRBench's post-processing does (to 3 decimals, ``|c| < 1e-4`` to 0), passes
  ``is_symbolic_solution(model, name)`` (the difference or ratio with the truth simplifies to a
  constant; 10 s of sympy at most per model);
* accuracy solution: test R² > 0.999 (``is_accuracy_solution``);
* model size: the engine's own node count (evotensor's tree length without the linear-scaling
  ``a, b``; gplearn's ``length_``; Operon's ``model_length``, its scale / offset nodes included) and
  SRBench's sympy complexity (nodes of the rounded sympy expression), the same yardstick for all;
* wall and CPU time of ``fit``. evotensor's first fit in a fresh process (compile included, and
  reported apart) and a second fit with the same settings in that process (nothing left to
  compile); the import of each engine is timed apart.

Side by side, alternating: for each problem and seed the engines run one after the other, the order
rotated by the seed (seed 0: A B C, seed 1: B C A, ...), each in a fresh process of its own: evotensor
in this interpreter's venv, gplearn and Operon in the competitor venv (``--competitor-python``,
default the ``gp`` venv of ``bench_venvs.py``: gplearn 0.4.3, pyoperon 0.6.2); this script calls itself
there with ``--worker``. The data reach a worker as a ``.npz`` file, so every engine sees the same
float32 arrays (gplearn and Operon fit them as float64). PySR is not run: it needs a Julia toolchain,
which this machine does not have.

Like for like, and not:

* evotensor: ``evotensor.gp.SymbolicRegressor`` with linear scaling (its default), the problem's
  function set with raw semantics (``FunctionSet(names, protected=False)``: a tree with non-finite
  outputs gets the worst fitness; the estimator's default for a tuple of names would be gplearn's
  protected operators, whose faithful sympy form is a ``Piecewise`` that no simplification proves
  equal to the truth), ``population_size``, ``generations``, ``random_state`` and its defaults
  otherwise (tournament 7, elite 1%, mutation 10%, max_len 64, init depth 2..6, model picked by
  PySR's "best" rule from the (loss, size) front). ``evotensor+co`` is the same with
  ``constant_optimization="auto"`` (Levenberg-Marquardt on the constants; being made faster at the
  time of writing: it measures what is there). ``evotensor+exact`` is the setting for exact symbolic
  recovery (:func:`exact_options`: ``survival="nsga2"``, ``constant_optimization="auto"``,
  ``refine_top=64``, and ``function_weights`` 0.1 for every one-argument function but ``exp``, 0.02 for
  ``exp``, 1 for the others: ``sin``/``exp(exp(x))``/... near-misses otherwise crowd the polynomials
  out); its documented budget is :data:`EXACT_BUDGET`, pop 10000 x 20. Its model text is
  ``model.sympy()`` (simplified; 30 s at most, then unsimplified). For evotensor the symbolic column
  also counts the runs where *any* member of the (loss, size) front is a symbolic solution (``front
  k``; ``front_solution_size`` in the JSON: the smallest such member), which tells a search that never
  found the exact form from a model selection that passed it over. ``evotensor+portfolio``
  (``evotensor.gp.SymbolicPortfolio.exact_recovery``, both members seeded with the suite's seed)
  splits the same evaluations between two searches: ``evotensor+exact`` with the suite's terminal set
  at the full population for 90% of them, and a small, short search with random constants and
  uniform function weights for the other 10%; its model is picked by the "best" rule from the union
  of the two fronts (``member`` in the JSON: the search that found it).
* gplearn 0.4.3 ``SymbolicRegressor``: ``population_size``, ``generations``, the function set,
  ``n_jobs=1``, ``random_state`` and its defaults otherwise: metric mean absolute error, tournament
  20, ``parsimony_coefficient`` 0.001, ``p_crossover`` 0.9, subtree / hoist / point mutation 0.01 each,
  constants in [-1, 1], init depth 2..6, no linear scaling, no elitism. Its operators are protected
  (``div``, ``log``, ``sqrt``, ``inv``); ``exp`` and ``pow``, which gplearn lacks, are added with
  ``make_function`` in evotensor's protected form (``exp(min(a, 80))``, ``|a| ** b``). Its program is
  converted to sympy with raw semantics (``div`` as ``/``, ``log`` as ``log``), as SRBench does.
* Operon (pyoperon 0.6.2 ``SymbolicRegressor``): ``population_size``, ``generations``, the function
  set (``allowed_symbols``; Operon has no ``neg`` / ``inv``: its leaves carry a weight each, which
  gives the sign, and ``inv`` becomes ``div``), ``symbolic_mode`` for ``operon+symbolic`` (Operon's
  own setting for exact expressions: integer leaf weights in [-5, 5], no coefficient fitting),
  ``max_evaluations`` raised so it never stops early, ``n_threads=1``, ``random_state``, and its
  defaults otherwise (R² objective with linear scaling, tournament 5, keep-best reinsertion, BTC
  init, max length 50, local search ``optimizer_iterations`` at its default 0 in 0.6.2). Its model
  text is ``get_model_string`` with 8 decimals (``^`` read as ``**``).
* Terminal set (``--terminals``), the same for every engine: ``erc`` (default) gives each engine
  random constants (evotensor: half the new leaves, uniform in [-1, 1]; gplearn: ``const_range``
  (-1, 1); Operon: ``constant`` leaves); ``variables`` gives the variables only, as the Koza and
  Nguyen problems are usually run (evotensor: ``const_prob=0``; gplearn: ``const_range=None``;
  Operon: no ``constant`` symbol, though its variable leaves still carry a fitted weight each,
  which pyoperon cannot switch off); ``variables+one`` gives the variables and the constant 1, a
  leaf that is never tuned (evotensor: ``const_prob=0``, ``fixed_constants=(1.0,)`` at
  ``fixed_constant_prob`` :data:`FIXED_CONSTANT_PROB` (``--fixed-constant-prob``), a column of ones
  that Levenberg-Marquardt cannot touch; gplearn: ``const_range=(1, 1)``, which it never tunes;
  Operon: its ``constant`` symbol, the closest it has: pyoperon 0.6.2 has no fixed-value leaf, its
  constants are drawn and mutated, integers in ``symbolic_mode``). Every engine keeps its linear
  scaling (evotensor's and Operon's ``a * f + b``; gplearn has none), so ``x/x`` or a scaling makes
  any constant factor.
* Budget: each engine evaluates ``pop`` trees per generation for ``generations`` generations
  (Operon also its initial population: its ``evaluations`` field is recorded). evotensor's
  evaluator uses both cores of this machine, gplearn and Operon one each: CPU time is reported
  beside wall time.
* Compilation cache (``--compile-cache``): ``fresh`` (default) gives evotensor an empty persistent
  cache for this invocation, so the first seed of each configuration compiles cold and later seeds
  of the same shapes read the cache, as a user's later runs would; ``off`` compiles every fit;
  ``user`` uses the user's cache (``~/.cache/evotensor/jax``).
* ``--single-fit`` skips evotensor's second (compiled) fit; ``--in-process`` runs evotensor's fits in
  the driver process, compiled once and reused (no import or compile-cache read per fit: "fit s" is
  then the compiled run), for many seeds on a loaded machine; ``--resume JSON`` keeps the runs of an
  interrupted ``--out`` file and runs only the missing ones.

Usage::

    .venv/bin/python benchmarks/sr_suite.py --quick
    .venv/bin/python benchmarks/sr_suite.py --pop 500 --generations 50 --seeds 3 --out sr.json
    .venv/bin/python benchmarks/sr_suite.py --problems nguyen-7,keijzer-6 --engines evotensor,operon
    .venv/bin/python benchmarks/sr_suite.py --table sr.json      # the tables of a saved run again
    .venv/bin/python benchmarks/sr_suite.py --problems nguyen-1,koza-2 --seeds 10 --pop 2000 \
        --generations 100 --engines evotensor+exact,operon --single-fit --in-process --out exact.json
    .venv/bin/python benchmarks/sr_suite.py --problems nguyen-3 --seeds 10 --pop 2000 --generations 100 \
        --terminals variables --engines evotensor+exact,operon+symbolic --single-fit --in-process
    .venv/bin/python benchmarks/sr_suite.py --problems nguyen-7,nguyen-8 --seeds 10 --pop 10000 \
        --generations 20 --terminals variables --engines evotensor+exact --single-fit --in-process
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np
from bench_venvs import venv_python

T_START = time.perf_counter()

DEFAULT_PROBLEMS = (
    *(f"nguyen-{i}" for i in range(1, 9)),
    "koza-1",
    "koza-2",
    "koza-3",
    "keijzer-6",
    "vladislavleva-4",
    "pagie-1",
)
QUICK_PROBLEMS = ("nguyen-1", "nguyen-7", "keijzer-6")
ENGINES = (
    "evotensor",
    "evotensor+co",
    "evotensor+exact",
    "evotensor+portfolio",
    "gplearn",
    "operon",
    "operon+symbolic",
)
EXACT_BUDGET = (10000, 20)
"""``evotensor+exact``'s documented budget for exact recovery (``--pop``, ``--generations``): the 200,000
evaluations of pop 2000 x 100 spent on a larger population for fewer generations, which the
near-misses take over less (98/110 symbolic solutions on Nguyen-1..8 and Koza-1..3 against 86/110 at
2000 x 100, Nguyen-7 1/10 -> 7/10; ``evotensor+portfolio`` at this budget: 105/110, at least 7/10 on
each problem; results_sr_suite.md, 2026-11-26 night)."""
TERMINALS = ("erc", "variables", "variables+one")
FIXED_CONSTANT_PROB = 0.2
"""``--terminals variables+one``: evotensor's share of the constant 1 among new variable leaves
(``SymbolicRegressor(fixed_constant_prob=)``; ``--fixed-constant-prob``)."""

DEFAULT_ENGINES = ("evotensor", "gplearn", "operon")
SYMBOLIC_TIMEOUT = 10.0  # seconds of sympy per model, as is_symbolic_solution's default
SIMPLIFY_TIMEOUT = 30.0  # seconds for evotensor's model.sympy() before falling back to unsimplified


def exact_options(function_set: tuple[str, ...]) -> dict:
    """``evotensor+exact``'s ``SymbolicRegressor`` options for a problem's function set:
    ``evotensor.gp.portfolio.exact_options`` (``EXACT_OPTIONS`` and the one-argument functions'
    weights), so this engine and ``SymbolicPortfolio.exact_recovery``'s main member are one setting.
    The same for every problem: nothing here looks at the truth."""
    from evotensor.gp.functions import FunctionSet
    from evotensor.gp.portfolio import exact_options as options

    out = options(FunctionSet(tuple(function_set), protected=False))
    return out if out["function_weights"] else {k: v for k, v in out.items() if k != "function_weights"}


# ---- workers (one fresh process per fit pair) ------------------------------------------------------


def _load(path: str):
    d = np.load(path)
    return d["X"], d["y"], d["X_test"], d["y_test"]


def r2_score(y: np.ndarray, pred: np.ndarray) -> float:
    """Test R² in float64; -inf when a prediction is not finite."""
    y, pred = np.asarray(y, np.float64), np.asarray(pred, np.float64)
    if pred.shape != y.shape or not np.all(np.isfinite(pred)):
        return -math.inf
    sst = float(np.sum((y - y.mean()) ** 2))
    return 1.0 - float(np.sum((y - pred) ** 2)) / sst if sst > 0 else -math.inf


def _terminal_options(options: dict, a) -> dict:
    """``options`` with the suite's terminal set (``--terminals``) for evotensor."""
    if a.terminals == "variables":  # no constant leaves (the linear scaling a, b stay)
        return {**options, "const_prob": 0.0}
    if a.terminals == "variables+one":  # and the constant 1, a leaf that nothing tunes
        return {
            **options,
            "const_prob": 0.0,
            "fixed_constants": (1.0,),
            "fixed_constant_prob": a.fixed_constant_prob,
        }
    return dict(options)


def worker_portfolio(a, t_import: float) -> dict:
    """``evotensor+portfolio``: ``SymbolicPortfolio.exact_recovery(--pop, --generations)``, the
    documented recipe (``evotensor+exact`` with the suite's terminal set for about 90% of the
    evaluations, a small, short search with tuned random constants and uniform function weights for
    the rest), its model chosen by PySR's "best" rule from the union of the two fronts. Both members
    are seeded with ``--seed`` itself (``exact__random_state``, ``erc__random_state``), as this
    worker's figures of 2026-11-26 were, rather than with seeds the portfolio draws from it."""
    from importlib.metadata import version

    import jax

    from evotensor.gp import SymbolicPortfolio
    from evotensor.gp.functions import FunctionSet

    t_import = time.perf_counter() - t_import
    X, y, X_test, y_test = _load(a.data)
    fs = FunctionSet(tuple(a.function_set.split(",")), protected=False)
    # the "exact" member's terminal set; with --terminals erc it keeps the estimator's const_prob 0.5
    terminals = _terminal_options({"const_prob": 0.5}, a)
    portfolio = SymbolicPortfolio.exact_recovery(a.pop, a.generations, fs, **terminals)
    portfolio.set_params(exact__random_state=a.seed, erc__random_state=a.seed)
    t0, c0 = time.perf_counter(), time.process_time()
    portfolio.fit(X, y)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    front, best = portfolio.front_models_, portfolio.best_
    compile_s, run_s, evaluations = portfolio.compile_seconds_, portfolio.run_seconds_, portfolio.evaluations_
    from evotensor.core.timeout import TimeLimitExceeded, call_with_time_limit

    try:
        text, simplified = str(call_with_time_limit(best.sympy, SIMPLIFY_TIMEOUT)), True
    except TimeLimitExceeded:
        text, simplified = str(best.sympy(simplify=False)), False
    return {
        "front_models": [str(m.sympy(simplify=False)) for m in front],
        "front_sizes": [int(m.complexity) for m in front],
        "r2_test": r2_score(y_test, best.raw_predict(X_test)[:, 0]),
        "r2_train": r2_score(y, best.raw_predict(X)[:, 0]),
        "size": int(best.complexity),
        "model": text,
        "model_simplified": simplified,
        "expression": best.expression,
        "member": portfolio.best_member_,
        "wall_s": wall,
        "cpu_s": cpu,
        "compile_s": compile_s,
        "run_s": run_s,
        "wall2_s": None,
        "cpu2_s": None,
        "compile2_s": None,
        "import_s": t_import,
        "evaluations": evaluations,
        "version": f"evotensor {version('evotensor')}, jax {jax.__version__}",
    }


def worker_evotensor(a, t_import: float) -> dict:
    """Two fits in this fresh process: the first compiles (or reads the persistent cache), the second
    reuses the compiled programs."""
    from importlib.metadata import version

    import jax

    from evotensor.gp import SymbolicRegressor
    from evotensor.gp.functions import FunctionSet

    t_import = time.perf_counter() - t_import
    X, y, X_test, y_test = _load(a.data)
    fs = FunctionSet(tuple(a.function_set.split(",")), protected=False)

    options = {"constant_optimization": "auto"} if a.worker == "evotensor+co" else {}
    options = exact_options(fs.names) if a.worker == "evotensor+exact" else options
    options = _terminal_options(options, a)

    def make():
        return SymbolicRegressor(
            population_size=a.pop,
            generations=a.generations,
            function_set=fs,
            random_state=a.seed,
            **options,
        )

    timings = []
    for _ in range(1 if a.single_fit else 2):
        est = make()
        t0, c0 = time.perf_counter(), time.process_time()
        est.fit(X, y)
        timings.append((time.perf_counter() - t0, time.process_time() - c0, est))
    wall1, cpu1, first = timings[0]
    wall2, cpu2, est = timings[-1] if len(timings) == 2 else (None, None, first)
    from evotensor.core.timeout import TimeLimitExceeded, call_with_time_limit

    try:
        text, simplified = str(call_with_time_limit(est.sympy, SIMPLIFY_TIMEOUT)), True
    except TimeLimitExceeded:
        text, simplified = str(est.sympy(simplify=False)), False
    return {
        # every front member, unsimplified, for the "exact form anywhere on the front" column
        "front_models": [str(m.sympy(simplify=False)) for m in est.front_models_],
        "front_sizes": [int(m.complexity) for m in est.front_models_],
        "r2_test": r2_score(y_test, est.predict(X_test)),
        "r2_train": r2_score(y, est.predict(X)),
        "size": int(est.best_.complexity),
        "model": text,
        "model_simplified": simplified,
        "expression": est.best_.expression,
        "wall_s": wall1,
        "cpu_s": cpu1,
        "compile_s": float(first.compile_seconds_),
        "run_s": float(first.run_seconds_),
        "wall2_s": wall2,
        "cpu2_s": cpu2,
        "compile2_s": float(est.compile_seconds_) if wall2 is not None else None,
        "same_model": first.best_.expression == est.best_.expression,
        "import_s": t_import,
        "evaluations": a.pop * a.generations,
        "version": f"evotensor {version('evotensor')}, jax {jax.__version__}",
    }


def _p_exp(a):
    with np.errstate(all="ignore"):
        return np.exp(np.minimum(a, 80.0))


def _p_pow(a, b):
    with np.errstate(all="ignore"):
        singular = (np.abs(a) <= 0.001) & (b < 0)
        out = np.where(singular, 1.0, np.power(np.where(singular, 1.0, np.abs(a)), b))
    return np.where(np.isfinite(out), out, 0.0)  # gplearn needs closed functions


def worker_gplearn(a, t_import: float) -> dict:
    from importlib.metadata import version

    from gplearn.functions import make_function
    from gplearn.genetic import SymbolicRegressor

    t_import = time.perf_counter() - t_import
    X, y, X_test, y_test = _load(a.data)
    extra = {
        "exp": make_function(function=_p_exp, name="exp", arity=1),
        "pow": make_function(function=_p_pow, name="pow", arity=2),
    }
    fs = [extra.get(f, f) for f in a.function_set.split(",")]
    est = SymbolicRegressor(
        population_size=a.pop,
        generations=a.generations,
        function_set=fs,
        n_jobs=1,
        random_state=a.seed,
        # None: no constants; (1, 1): the constant 1 (gplearn never tunes a constant)
        const_range={"variables": None, "variables+one": (1.0, 1.0)}.get(a.terminals, (-1.0, 1.0)),
    )
    wall, cpu, r2_test, r2_train = _fit_and_score(est, X, y, X_test, y_test)
    return {
        "r2_test": r2_test,
        "r2_train": r2_train,
        "size": int(est._program.length_),
        "model": str(est._program),
        "expression": str(est._program),
        "wall_s": wall,
        "cpu_s": cpu,
        "import_s": t_import,
        "evaluations": a.pop * a.generations,
        "version": f"gplearn {version('gplearn')}",
    }


def _fit_and_score(est, X, y, X_test, y_test) -> tuple[float, float, float, float]:
    """A competitor's ``fit`` on float64 data, timed: ``-> (wall s, CPU s, test R², train R²)``
    (:func:`r2_score`'s)."""
    t0, c0 = time.perf_counter(), time.process_time()
    est.fit(X.astype(np.float64), y.astype(np.float64))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    with np.errstate(all="ignore"):
        r2_test = r2_score(y_test, est.predict(X_test.astype(np.float64)))
        r2_train = r2_score(y, est.predict(X.astype(np.float64)))
    return wall, cpu, r2_test, r2_train


def operon_symbols(names: list[str], constants: bool = True) -> str:
    """evotensor function names -> Operon's ``allowed_symbols``: ``neg`` dropped (a weighted leaf
    carries the sign), ``inv`` as ``div``; ``constant`` leaves unless ``constants=False``."""
    out: list[str] = []
    for f in names:
        f = {"inv": "div", "neg": None}.get(f, f)
        if f is not None and f not in out:
            out.append(f)
    return ",".join([*out, *(["constant"] if constants else []), "variable"])


def worker_operon(a, t_import: float) -> dict:
    from importlib.metadata import version

    from pyoperon.sklearn import SymbolicRegressor

    t_import = time.perf_counter() - t_import
    X, y, X_test, y_test = _load(a.data)
    est = SymbolicRegressor(
        allowed_symbols=operon_symbols(a.function_set.split(","), constants=a.terminals != "variables"),
        symbolic_mode=a.worker == "operon+symbolic",
        population_size=a.pop,
        generations=a.generations,
        max_evaluations=100 * a.pop * (a.generations + 1),
        n_threads=1,
        random_state=a.seed,
    )
    wall, cpu, r2_test, r2_train = _fit_and_score(est, X, y, X_test, y_test)
    names = [f"x{i}" for i in range(X.shape[1])]
    return {
        "r2_test": r2_test,
        "r2_train": r2_train,
        "size": int(est.stats_["model_length"]),
        "model": est.get_model_string(est.model_, 8, names).replace("^", "**"),
        "expression": est.get_model_string(est.model_, 3, names),
        "wall_s": wall,
        "cpu_s": cpu,
        "import_s": t_import,
        "evaluations": int(est.stats_["evaluation_count"]),
        "generations_run": int(est.stats_["generations"]),
        "version": f"pyoperon {version('pyoperon')}",
    }


WORKERS = {
    "evotensor": worker_evotensor,
    "evotensor+co": worker_evotensor,
    "evotensor+exact": worker_evotensor,
    "evotensor+portfolio": worker_portfolio,
    "gplearn": worker_gplearn,
    "operon": worker_operon,
    "operon+symbolic": worker_operon,
}


# ---- scoring (this process) ----------------------------------------------------------------------


def to_sympy(text: str, n_vars: int):
    """A worker's model text (evotensor's sympy, gplearn's prefix program, Operon's infix) as a
    sympy expression in the real symbols ``x0..``, with raw semantics for every operator."""
    import sympy as sp

    xs = {f"x{i}": sp.Symbol(f"x{i}", real=True) for i in range(n_vars)}
    local = {
        **xs,
        **{f"X{i}": xs[f"x{i}"] for i in range(n_vars)},  # gplearn's variable names
        "add": lambda a, b: a + b,
        "sub": lambda a, b: a - b,
        "mul": lambda a, b: a * b,
        "div": lambda a, b: a / b,
        "neg": lambda a: -a,
        "inv": lambda a: 1 / a,
        "pow": lambda a, b: a**b,
        "harmonic": sp.harmonic,
    }
    return sp.parse_expr(text, local_dict=local)


def round_floats(expr):
    """SRBench's post-processing of a model before the symbolic check: floats to 3 decimals,
    ``|c| < 1e-4`` to 0."""
    import sympy as sp

    subs = {}
    for node in sp.preorder_traversal(expr):
        if isinstance(node, sp.Float):
            subs[node] = sp.Integer(0) if abs(node) < 1e-4 else sp.Float(round(float(node), 3))
    return expr.xreplace(subs)


def score(row: dict, spec) -> dict:
    """Add the symbolic / accuracy checks and SRBench's sympy complexity to a worker's row."""
    import sympy as sp

    from evotensor.gp import is_accuracy_solution, is_symbolic_solution

    row["accuracy_solution"] = bool(is_accuracy_solution(row["r2_test"]))
    t0 = time.perf_counter()
    try:
        expr = round_floats(to_sympy(row["model"], spec.n_vars))
        row["sympy_size"] = sum(1 for _ in sp.preorder_traversal(expr))
        row["symbolic_solution"] = bool(is_symbolic_solution(expr, spec, timeout=SYMBOLIC_TIMEOUT))
    except Exception as e:  # noqa: BLE001 - an unparsable or unprovable model is not a solution
        row["symbolic_solution"] = False
        row["symbolic_error"] = f"{type(e).__name__}: {e}"[:200]
        row.setdefault("sympy_size", None)
    if "front_models" in row:  # the simplest front member that is a symbolic solution, if any
        row["front_solution_size"] = None
        for size, text in zip(row["front_sizes"], row.pop("front_models"), strict=True):
            try:
                if is_symbolic_solution(
                    round_floats(to_sympy(text, spec.n_vars)), spec, timeout=SYMBOLIC_TIMEOUT
                ):
                    row["front_solution_size"] = size
                    break
            except Exception:  # noqa: BLE001 - as above
                continue
    row["check_s"] = time.perf_counter() - t0
    return row


# ---- the driver ----------------------------------------------------------------------------------


def machine() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        model = next(ln.split(":", 1)[1].strip() for ln in out.splitlines() if ln.startswith("Model name"))
    except (OSError, subprocess.CalledProcessError, StopIteration):
        model = platform.processor() or platform.machine()
    return f"{model}, {os.cpu_count()} cores"


def summarize(rows: list[dict], engines: list[str], problems: list[str]) -> str:
    """The markdown tables: one row per problem and engine, then one per engine over all problems."""

    def r2s(rs):
        return np.array([max(r["r2_test"], -1.0) for r in rs])  # -inf / very negative counted as -1

    def med(xs, fmt="{:.2f}"):
        xs = [x for x in xs if x is not None]
        return fmt.format(float(np.median(xs))) if xs else "—"

    def r2_cell(rs):
        q1, m, q3 = np.percentile(r2s(rs), [25, 50, 75])
        return f"{m:.4f} [{q1:.4f}, {q3:.4f}]"

    def sizes(rs):
        return f"{med([r['size'] for r in rs], '{:.0f}')} / {med([r['sympy_size'] for r in rs], '{:.0f}')}"

    def time_cells(rs, engine):
        fit = med([r["wall_s"] for r in rs])
        cpu = med([r["cpu_s"] for r in rs])
        if engine.startswith("evotensor"):
            comp = [r["compile_s"] for r in rs]
            return (
                f"{fit} | {med(comp)} (max {max(comp):.1f}) | {med([r['wall2_s'] for r in rs])} | {cpu} "
                f"({med([r['cpu2_s'] for r in rs])})"
            )
        return f"{fit} | — | — | {cpu}"

    def symbolic(rs, percent=False):
        n, k = len(rs), sum(r["symbolic_solution"] for r in rs)
        cell = f"{k}/{n}" + (f" ({100 * k / n:.0f}%)" if percent else "")
        if any("front_solution_size" in r for r in rs):  # evotensor: any front member a solution
            cell += f", front {sum(r.get('front_solution_size') is not None for r in rs)}"
        return cell

    head = (
        "| {first} | engine | runs | test R² median [IQR] | symbolic | accuracy | size (nodes / sympy) "
        "| fit s (1st, fresh process) | compile s | 2nd fit s | CPU s (2nd) |"
    )
    rule = "|---|---|---|---|---|---|---|---|---|---|---|"
    lines = [head.format(first="problem"), rule]
    for p in problems:
        for e in engines:
            rs = [r for r in rows if r["problem"] == p and r["engine"] == e]
            if not rs:
                continue
            lines.append(
                f"| {p} | {e} | {len(rs)} | {r2_cell(rs)} | {symbolic(rs)} | "
                f"{sum(r['accuracy_solution'] for r in rs)}/{len(rs)} | "
                f"{sizes(rs)} | {time_cells(rs, e)} |"
            )
    lines += ["", head.format(first="all problems"), rule]
    for e in engines:
        rs = [r for r in rows if r["engine"] == e]
        if not rs:
            continue
        n = len(rs)
        acc = sum(r["accuracy_solution"] for r in rs)
        lines.append(
            f"| {len({r['problem'] for r in rs})} problems | {e} | {n} | {r2_cell(rs)} | "
            f"{symbolic(rs, percent=True)} | {acc}/{n} ({100 * acc / n:.0f}%) | "
            f"{sizes(rs)} | {time_cells(rs, e)} |"
        )
    totals = ", ".join(
        f"{e} {sum(r['wall_s'] for r in rows if r['engine'] == e):.0f} s"
        for e in engines
        if any(r["engine"] == e for r in rows)
    )
    lines += ["", f"Total fit wall time (first fits): {totals}."]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--problems", default=",".join(DEFAULT_PROBLEMS), help="comma-separated SR_PROBLEMS names"
    )
    ap.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 (data seed = every engine's seed)")
    ap.add_argument("--pop", type=int, default=500)
    ap.add_argument("--generations", type=int, default=50)
    ap.add_argument("--noise", type=float, default=0.0, help="SRBench's target noise level (sr_data)")
    ap.add_argument(
        "--terminals",
        choices=TERMINALS,
        default="erc",
        help="leaves of every engine: variables and random constants (erc), the variables only, or the "
        "variables and the constant 1 (variables+one)",
    )
    ap.add_argument(
        "--fixed-constant-prob",
        type=float,
        default=FIXED_CONSTANT_PROB,
        help="--terminals variables+one: evotensor's share of the constant 1 among new variable leaves",
    )
    ap.add_argument("--engines", default=",".join(DEFAULT_ENGINES), help=f"comma-separated, of {ENGINES}")
    ap.add_argument("--out", default=None, help="write every run and the settings to this JSON file")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 seed, 3 problems, pop 200 x 20")
    ap.add_argument("--compile-cache", choices=("fresh", "off", "user"), default="fresh")
    ap.add_argument(
        "--single-fit", action="store_true", help="evotensor: one fit per process (no second-fit timing)"
    )
    ap.add_argument(
        "--in-process",
        action="store_true",
        help="evotensor fits in this process (compiled once, reused): for many seeds on a loaded machine",
    )
    ap.add_argument("--resume", metavar="JSON", help="keep the runs of this --out file, run the missing ones")
    ap.add_argument("--competitor-python", default=venv_python("gp"))
    ap.add_argument("--table", metavar="JSON", help="only print the tables of a saved --out file")
    ap.add_argument("--worker", choices=ENGINES, help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--function-set", help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()

    if a.worker:
        print(json.dumps(WORKERS[a.worker](a, T_START)))
        return

    if a.table:
        with open(a.table) as fh:
            saved = json.load(fh)
        print(summarize(saved["runs"], saved["meta"]["engines"], saved["meta"]["problems"]))
        return

    from evotensor.gp import SR_PROBLEMS, sr_data

    if a.quick:
        a.seeds, a.pop, a.generations = 1, 200, 20
        if a.problems == ",".join(DEFAULT_PROBLEMS):
            a.problems = ",".join(QUICK_PROBLEMS)
    by_lower = {k.lower(): k for k in SR_PROBLEMS}
    problems = [by_lower.get(p.strip().lower(), p.strip()) for p in a.problems.split(",") if p.strip()]
    bad = [p for p in problems if p not in SR_PROBLEMS]
    if bad:
        ap.error(f"--problems: unknown {bad}; known: {', '.join(SR_PROBLEMS)}")
    engines = [e.strip() for e in a.engines.split(",") if e.strip()]
    if not engines or any(e not in ENGINES for e in engines):
        ap.error(f"--engines must name some of {ENGINES}, got {a.engines!r}")

    tmp = tempfile.mkdtemp(prefix="sr_suite_")
    env = dict(os.environ)
    if a.compile_cache == "fresh":
        env["EVOTENSOR_CACHE_DIR"] = os.path.join(tmp, "jax_cache")
    elif a.compile_cache == "off":
        env["EVOTENSOR_CACHE_DIR"] = "off"
    meta = {
        "command": " ".join([os.path.relpath(sys.executable), *sys.argv]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine(),
        "load_start": os.getloadavg(),
        "pop": a.pop,
        "generations": a.generations,
        "seeds": a.seeds,
        "noise": a.noise,
        "terminals": a.terminals,
        "fixed_constant_prob": a.fixed_constant_prob,
        "compile_cache": a.compile_cache,
        "problems": problems,
        "engines": engines,
    }
    print(f"# {meta['date']}, {meta['machine']}, load {meta['load_start']}")
    print(f"# {meta['command']}", flush=True)
    rows: list[dict] = []
    if a.resume:  # the runs of an interrupted --out file, kept; only the missing ones are run
        with open(a.resume) as fh:
            rows = [r for r in json.load(fh)["runs"] if r["problem"] in problems and r["engine"] in engines]
    done = {(r["problem"], r["seed"], r["engine"]) for r in rows}
    versions: dict[str, str] = {}

    def save():
        if a.out:
            with open(a.out, "w") as fh:
                json.dump({"meta": {**meta, "versions": versions}, "runs": rows}, fh, indent=1)

    for problem in problems:
        spec = SR_PROBLEMS[problem]
        for seed in range(a.seeds):
            X, y, X_test, y_test = sr_data(problem, seed, a.noise)
            path = os.path.join(tmp, f"{problem}_{seed}.npz")
            np.savez(path, X=X, y=y, X_test=X_test, y_test=y_test)
            k = seed % len(engines)
            for engine in engines[k:] + engines[:k]:  # rotated by the seed: A B C, B C A, ...
                if (problem, seed, engine) in done:
                    continue
                python = sys.executable if engine.startswith("evotensor") else a.competitor_python
                cmd = [python, os.path.abspath(__file__), "--worker", engine, "--data", path]
                cmd += ["--function-set", ",".join(spec.function_set), "--seed", str(seed)]
                cmd += ["--pop", str(a.pop), "--generations", str(a.generations)]
                cmd += ["--terminals", a.terminals, "--fixed-constant-prob", str(a.fixed_constant_prob)]
                cmd += ["--single-fit"] if a.single_fit else []
                load = os.getloadavg()[0]
                if a.in_process and engine.startswith("evotensor"):
                    # this process's compiled programs serve every fit after the first: no import,
                    # no compile-cache read (fit s is then the compiled run, compile s is 0)
                    ns = ap.parse_args(cmd[2:])
                    row = WORKERS[engine](ns, time.perf_counter())
                    row["in_process"] = True
                else:
                    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
                    if out.returncode != 0:
                        print(f"{engine} {problem} seed {seed} FAILED:\n{out.stderr[-2000:]}", flush=True)
                        continue
                    row = json.loads(out.stdout.strip().splitlines()[-1])
                row.update(engine=engine, problem=problem, seed=seed, load=load)
                versions[engine] = row["version"]
                rows.append(score(row, spec))
                extra = f" (compile {row['compile_s']:.1f}" if "compile_s" in row else ""
                extra += f", 2nd fit {row['wall2_s']:.2f} s)" if row.get("wall2_s") is not None else ""
                extra += ")" if extra and row.get("wall2_s") is None else ""
                if "front_solution_size" in row:
                    extra += f" front-sol {row['front_solution_size']}"
                print(
                    f"{problem:16s} seed {seed} {engine:13s} R2 {row['r2_test']:9.5f} "
                    f"sym {int(row['symbolic_solution'])} size {row['size']:3d} "
                    f"fit {row['wall_s']:6.2f} s{extra} cpu {row['cpu_s']:6.2f} s load {load:.1f} | "
                    f"{row['expression'][:90]}",
                    flush=True,
                )
                save()
    meta["end"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    meta["load_end"] = os.getloadavg()
    save()
    print(f"# end {meta['end']}, load {meta['load_end']}; {', '.join(versions.values())}\n")
    print(summarize(rows, engines, problems))


if __name__ == "__main__":
    main()
