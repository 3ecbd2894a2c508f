"""Tasks ``cls-iris``, ``cls-breast-cancer``, ``cls-wine``, ``cls-digits``, ``sr-nguyen``,
``sr-feynman`` and ``sr`` (symbolic regression on the user's CSV file).

**Classification** (``cls-*``): tree GP on a scikit-learn data set (:func:`evotensor.gp.classification.
classification_problem`: stratified split, features standardized with the training rows), fitness the
training cross-entropy (smooth) of each tree's outputs through its fitted per-output logit scaling
(:mod:`evotensor.gp.logit_scaling`; ``--set logit_scaling=false`` for the raw outputs, ``ridge`` its
weight; off by default for digits, where it costs ~10x the evaluation), multi-output trees for more
than two classes (one logit output for breast cancer). The report gives train and test accuracy, the
model's size and each class's score (scaling included) as a
simplified expression, with the standardization of every feature it reads. Budget: pop 1000 x 40
generations (the EvoGP paper's middle setting; digits: 200 generations; iris: pop 4000 x 100, cheap on
its 112 training rows). ``--seed`` picks both the
split and the run, so seeds measure the spread over splits as well as over runs.

**Benchmarks** (``sr-nguyen``, ``sr-feynman``): tree GP on one problem of
:data:`evotensor.gp.SR_PROBLEMS` (``--set problem=nguyen-7``; any registered name works in both
tasks), drawn with its published sampling (:func:`evotensor.gp.sr_problem`, ``seed``, ``noise``),
with the literature's function set unless ``functions`` is given. The report gives test R², the found
expression simplified (:func:`evotensor.gp.to_sympy`) beside the truth, and SRBench's two success
criteria (:func:`evotensor.gp.is_symbolic_solution`, :func:`evotensor.gp.is_accuracy_solution`).

**User data** (``sr``): ``evotensor run sr --data file.csv --target y`` reads the CSV
(:func:`evotensor.gp.data.load_csv`; default target: the last column), holds out ``test_fraction``
of the rows (default 0.25, ``0`` for none) and reports train and test R² and the expression in the
file's column names. The CLI records the file's absolute path and SHA-256 in the run record, so
``--resume`` reads the same data, and refuses a file that changed.

Every task builds on :class:`evotensor.gp.SymbolicRegression`, so it gets that problem's defaults
(linear scaling for regression, constant optimization where enabled). Options (``--set KEY=VALUE``)
are listed by ``evotensor list``; ``functions`` is a comma-separated list of function names.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from evotensor.core.checks import ArgumentError
from evotensor.gp.encoding import Forest
from evotensor.gp.functions import FunctionSet
from evotensor.gp.strategy import GP
from evotensor.io.files import file_sha256 as io_file_sha256
from evotensor.tasks import Task, positive_int_option, register_task

__all__ = ["file_sha256"]

# the GP settings every task here shares (GPConfig's defaults otherwise)
_GP_DEFAULTS = {
    "max_len": 64,
    "max_depth": 6,
    "tournament_size": 7,
    "elite_rate": 0.01,
    "parsimony_coefficient": 0.0,
}
_SIMPLIFY_SECONDS = 5.0  # per expression in a report


def file_sha256(path: Any) -> str:
    """The SHA-256 of the file at ``path`` (hex), what the CLI records for ``--data``; a missing or
    unreadable file is an :class:`ArgumentError` naming it."""
    return io_file_sha256(path, error=ArgumentError)


# ---- options --------------------------------------------------------------------------------------


def _functions_option(cfg: dict[str, Any], default: tuple[str, ...]) -> FunctionSet:
    text = cfg["functions"]
    if not isinstance(text, str):
        raise ArgumentError(
            f"option functions must be comma-separated names like 'add,mul,sin', got {text!r}"
        )
    names = tuple(n.strip() for n in text.split(",") if n.strip()) or default
    protected = cfg["protected"]
    if not isinstance(protected, bool):
        raise ArgumentError(f"option protected must be true or false, got {protected!r}")
    try:
        return FunctionSet(names, protected=protected)
    except (ValueError, TypeError) as err:
        raise ArgumentError(f"option functions={text!r}: {err}") from None


def _fraction_option(cfg: dict[str, Any], name: str, allow_zero: bool) -> float:
    value = cfg[name]
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    ok = ok and (0.0 <= value < 1.0 if allow_zero else 0.0 < value < 1.0)
    if not ok:
        span = "[0, 1) (0: no test set)" if allow_zero else "(0, 1)"
        raise ArgumentError(f"option {name} must be a number in {span}, got {value!r}")
    return float(value)


def _strategy(cfg: dict[str, Any], problem: Any, pop: int, const_range: tuple[float, float]) -> GP:
    c = cfg["parsimony_coefficient"]
    return GP(
        population_size=pop,
        function_set=problem.function_set,
        n_vars=problem.n_vars,
        max_len=positive_int_option(cfg, "max_len"),
        n_outputs=problem.n_outputs,
        init_depth=(min(2, positive_int_option(cfg, "max_depth")), positive_int_option(cfg, "max_depth")),
        tournament_size=positive_int_option(cfg, "tournament_size"),
        elite_rate=float(cfg["elite_rate"]),
        const_range=const_range,
        parsimony_coefficient=c if isinstance(c, str) else float(c),
    )


# ---- reports --------------------------------------------------------------------------------------


def _round_floats(expr: Any, digits: int = 4) -> Any:
    import sympy as sp

    return expr.xreplace({f: sp.Float(f, digits) for f in expr.atoms(sp.Float)})


def _model_sympy(forest: Forest, fs: FunctionSet, output: int = 0, n_outputs: int = 1, scale=(1.0, 0.0)):
    """Tree output ``output`` as a simplified sympy expression ``a * f + b`` (constants as float32
    values; ``None`` if the export fails, e.g. a custom function without a sympy form)."""
    from evotensor.gp.export import to_sympy

    try:
        f = to_sympy(forest, fs, output=output, n_outputs=n_outputs, timeout=_SIMPLIFY_SECONDS)
    except (ArgumentError, ValueError, TypeError):
        return None
    a, b = scale
    return f if (a, b) == (1.0, 0.0) else a * f + b


def _best_text(problem: Any):
    """``best.txt``'s text: the best tree as the problem scores it (with its linear or logit
    scaling), constants to 6 significant digits."""

    return lambda best: str(problem.expression(best, "string", precision=6))  # one tree or forest[i]


def _r2(pred: np.ndarray, y: np.ndarray) -> float:
    pred, y = pred.astype(np.float64), y.astype(np.float64)
    if not np.all(np.isfinite(pred)):
        return float("-inf")
    sst = float(np.sum((y - y.mean()) ** 2))
    sse = float(np.sum((pred - y) ** 2))
    return 1.0 - sse / sst if sst > 0 else (1.0 if sse == 0 else 0.0)


def _scale_of(problem: Any, best: Forest) -> tuple[float, float]:
    """The training ``(a, b)`` the problem scores the best tree with (``(1, 0)`` without linear
    scaling; :meth:`evotensor.gp.SymbolicRegression.scaling`)."""
    get = getattr(problem, "scaling", None)
    ab = get(best) if callable(get) else None
    if ab is None:
        return 1.0, 0.0
    return float(np.ravel(ab[0])[0]), float(np.ravel(ab[1])[0])


def _rename(expr: Any, names: tuple[str, ...]) -> Any:
    import sympy as sp

    table = {s: sp.Symbol(names[int(s.name[1:])]) for s in expr.free_symbols if s.name[1:].isdigit()}
    return expr.xreplace(table)


def _sr_report(problem: Any, spec: Any = None, feature_names: tuple[str, ...] | None = None):
    def report(result: Any, run_dir: Path | None) -> str:
        from evotensor.gp.sr_problems import is_accuracy_solution, is_symbolic_solution

        best: Forest = result.best_genotype
        fs = problem.function_set
        # predict() is the model as scored: a * f + b with the training a, b when the problem scales
        train = np.asarray(problem.predict(best))[:, 0]
        test = None if problem.X_test is None else np.asarray(problem.predict(best, problem.X_test))[:, 0]
        scale = _scale_of(problem, best)
        y = np.asarray(problem.y, np.float64)
        # an intercept at float32 rounding level of the target is noise: shown as 0
        shown_scale = (scale[0], 0.0 if abs(scale[1]) <= 1e-6 * float(np.abs(y).max()) else scale[1])
        expr = _model_sympy(best, fs, scale=shown_scale)
        shown = "(no sympy form)" if expr is None else _round_floats(expr)
        if expr is not None and feature_names is not None:
            shown = _rename(shown, feature_names)
        lines = [f"found: {shown}"]
        if spec is not None:
            lines.append(f"true:  {spec.expression}")
        lines.append(
            f"infix: {best.to_infix(fs, precision=4)}"
            + (
                ""
                if scale == (1.0, 0.0)
                else f"  (scaled: {scale[0]:.6g} * f {'-' if scale[1] < 0 else '+'} {abs(scale[1]):.6g})"
            )
        )
        r2_train = _r2(train, y)
        line = f"train R2 {r2_train:.6f}"
        if test is not None:
            r2_test = _r2(test, np.asarray(problem.y_test))
            line += f", test R2 {r2_test:.6f}"
        lines.append(line + f" ({int(best.length)} nodes)")
        if spec is not None:
            symbolic = False
            if expr is not None:
                raw = _model_sympy(best, fs)  # the unscaled tree: the check allows a scale or a shift
                symbolic = any(
                    e is not None and is_symbolic_solution(e, spec, timeout=_SIMPLIFY_SECONDS)
                    for e in ((raw, expr) if scale != (1.0, 0.0) else (expr,))
                )
            accurate = test is not None and is_accuracy_solution(r2_test)
            lines.append(
                f"symbolic solution: {'yes' if symbolic else 'no'}; accuracy solution (test R2 > 0.999): "
                f"{'yes' if accurate else 'no'}"
            )
        return "\n".join(lines)

    return report


def _cls_report(problem: Any):
    def report(result: Any, run_dir: Path | None) -> str:
        import sympy as sp

        best: Forest = result.best_genotype
        meta = problem.data
        fs = problem.function_set
        train_acc = float(problem.accuracy(best))
        test_acc = float(problem.test_accuracy(best))
        n_test = int(problem.X_test.shape[0])
        # -inf: a non-finite output on some row (the metrics' worst value)
        rows = (
            f"{round(test_acc * n_test)}/{n_test}"
            if np.isfinite(test_acc)
            else f"non-finite output on the {n_test}"
        )
        lines = [
            f"{meta.name}: train accuracy {train_acc:.4f}, test accuracy {test_acc:.4f} "
            f"({rows} test rows), {int(best.length)} nodes",
        ]
        outputs = range(problem.n_outputs)
        used: set[int] = set()
        # with logit scaling the class scores are slope * f + intercept (fitted on the training rows)
        ab = problem.scaling(best) if callable(getattr(problem, "scaling", None)) else None
        for k in outputs:
            scale = (1.0, 0.0) if ab is None else (float(np.ravel(ab[0])[k]), float(np.ravel(ab[1])[k]))
            expr = _model_sympy(best, fs, output=k, n_outputs=problem.n_outputs, scale=scale)
            if expr is None:
                continue
            used |= {int(s.name[1:]) for s in expr.free_symbols if s.name[1:].isdigit()}
            if problem.n_outputs == 1:
                label = f"class {meta.class_names[1]!r} if > 0 (else {meta.class_names[0]!r})"
            else:
                label = f"score of class {meta.class_names[k]!r}"
            lines.append(f"  {label}: {_round_floats(expr, 3)}")
        for j in sorted(used):
            x = sp.Symbol(f"x{j}")
            lines.append(f"  {x} = ({meta.feature_names[j]} - {meta.mean[j]:.4g}) / {meta.std[j]:.4g}")
        return "\n".join(lines)

    return report


# ---- classification tasks ---------------------------------------------------------------------------

_CLS_DEFAULTS = {
    **_GP_DEFAULTS,
    "test_fraction": 0.25,
    "functions": "",
    "protected": True,
    "metric": "cross_entropy",
    "logit_scaling": True,
    "ridge": 0.01,
}


def _build_classification(name: str, cfg: dict[str, Any], generations: int, pop: int = 1000) -> Task:
    from evotensor.gp.classification import CLASSIFICATION_FUNCTIONS, classification_problem

    fs = _functions_option(cfg, CLASSIFICATION_FUNCTIONS)
    if cfg["metric"] not in ("cross_entropy", "accuracy"):
        raise ArgumentError(f"option metric must be 'cross_entropy' or 'accuracy', got {cfg['metric']!r}")
    problem = classification_problem(
        name,
        seed=cfg["seed"],
        test_fraction=_fraction_option(cfg, "test_fraction", allow_zero=False),
        function_set=fs,
        metric=cfg["metric"],
        logit_scaling=cfg["logit_scaling"],
        ridge=cfg["ridge"],
    )
    strategy = _strategy(cfg, problem, cfg["pop"] or pop, (-1.0, 1.0))
    return Task(
        strategy=strategy,
        problem=problem,
        decoder=strategy.decoder,
        generations=cfg["generations"] or generations,
        report=_cls_report(problem),
        best_to_text=_best_text(problem),
    )


# digits: logit scaling off by default, its fit over 10 outputs x 1348 rows costs ~10x the
# evaluation there (results_gp_classification.md); --set logit_scaling=true turns it on.
# iris: pop 4000 x 100, cheap on its 112 training rows; it reached the 0.97 goal on
# more splits than pop 1000 x 40 (19/30 vs 16/30), at the same mean accuracy
# (results_gp_classification.md, session 15)
for _name, _data, _classes, _pop, _gens, _scaled in (
    ("iris", "iris", 3, 4000, 100, True),
    ("breast-cancer", "breast_cancer", 2, 1000, 40, True),
    ("wine", "wine", 3, 1000, 40, True),
    ("digits", "digits", 10, 1000, 200, False),
):
    register_task(
        f"cls-{_name}",
        f"Tree GP classification of scikit-learn's {_data} ({_classes} classes), pop {_pop} x {_gens} "
        "generations, cross-entropy fitness"
        + (" with logit scaling" if _scaled else "")
        + ", test accuracy reported",
        defaults={**_CLS_DEFAULTS, "logit_scaling": _scaled},
    )(lambda cfg, _data=_data, _gens=_gens, _pop=_pop: _build_classification(_data, cfg, _gens, _pop))


# ---- benchmark problems -------------------------------------------------------------------------------

_BENCH_DEFAULTS = {**_GP_DEFAULTS, "functions": "", "protected": False, "noise": 0.0}


def _build_benchmark(cfg: dict[str, Any]) -> Task:
    from evotensor.gp.sr_problems import SR_PROBLEMS, sr_problem

    by_lower = {k.lower(): k for k in SR_PROBLEMS}
    spec_name = cfg["problem"]
    if not isinstance(spec_name, str) or spec_name.lower() not in by_lower:
        raise ArgumentError(f"option problem must be one of {', '.join(SR_PROBLEMS)}; got {spec_name!r}")
    spec = SR_PROBLEMS[by_lower[spec_name.lower()]]
    noise = cfg["noise"]
    if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not 0 <= noise < math.inf:
        raise ArgumentError(f"option noise must be a finite number >= 0, got {noise!r}")
    fs = _functions_option(cfg, spec.function_set)
    problem = sr_problem(spec, seed=cfg["seed"], noise=float(noise), function_set=fs)
    strategy = _strategy(cfg, problem, cfg["pop"] or 1000, (-5.0, 5.0))
    return Task(
        strategy=strategy,
        problem=problem,
        decoder=strategy.decoder,
        generations=cfg["generations"] or 50,
        report=_sr_report(problem, spec),
        best_to_text=_best_text(problem),
    )


for _task, _default in (("sr-nguyen", "nguyen-1"), ("sr-feynman", "feynman-I.6.2a")):
    register_task(
        _task,
        f"Tree GP, pop 1000 x 50 generations, on an SR benchmark (default {_default}; "
        "--set problem=NAME), test R2 and SRBench's solution checks reported",
        defaults={**_BENCH_DEFAULTS, "problem": _default},
    )(_build_benchmark)


# ---- the user's data ------------------------------------------------------------------------------------


@register_task(
    "sr",
    "Tree GP symbolic regression on your CSV file (--data FILE.csv --target COLUMN), pop 1000 x 100 "
    "generations, train/test R2 reported",
    defaults={
        **_GP_DEFAULTS,
        "data": "",
        "target": "",
        "features": "",
        "test_fraction": 0.25,
        "drop_missing": False,
        "functions": "add,sub,mul,div,sin,cos",
        "protected": True,
        "metric": "mse",
        "data_sha256": "",
    },
)
def _build_user_data(cfg: dict[str, Any]) -> Task:
    from evotensor.gp.data import load_csv, train_test_split
    from evotensor.gp.regression import SymbolicRegression

    path = cfg["data"]
    if not isinstance(path, str) or not path.strip():
        raise ArgumentError("task sr needs a data file: evotensor run sr --data FILE.csv --target COLUMN")
    recorded = cfg["data_sha256"]
    if recorded:
        now = file_sha256(path)
        if now != recorded:
            raise ArgumentError(
                f"data {path} changed since the run was started (SHA-256 {now[:12]}... now, "
                f"{str(recorded)[:12]}... recorded); restore the file or start a new run"
            )
    target = cfg["target"] or None
    features = [f.strip() for f in str(cfg["features"]).split(",") if f.strip()] or None
    if not isinstance(cfg["drop_missing"], bool):
        raise ArgumentError(f"option drop_missing must be true or false, got {cfg['drop_missing']!r}")
    X, y, names = load_csv(path, target, features, drop_missing=cfg["drop_missing"])
    fraction = _fraction_option(cfg, "test_fraction", allow_zero=True)
    X_test = y_test = None
    if fraction > 0:
        X, y, X_test, y_test = train_test_split(X, y, fraction, cfg["seed"])
    if cfg["metric"] not in ("mse", "rmse", "r2"):
        raise ArgumentError(f"option metric must be 'mse', 'rmse' or 'r2', got {cfg['metric']!r}")
    fs = _functions_option(cfg, ())
    problem = SymbolicRegression(X, y, fs, metric=cfg["metric"], X_test=X_test, y_test=y_test)
    strategy = _strategy(cfg, problem, cfg["pop"] or 1000, (-5.0, 5.0))
    return Task(
        strategy=strategy,
        problem=problem,
        decoder=strategy.decoder,
        generations=cfg["generations"] or 100,
        report=_sr_report(problem, feature_names=names),
        best_to_text=_best_text(problem),
    )
