"""Tasks cls-*, sr-nguyen, sr-feynman and sr (gp/sr_tasks.py): builds, reports on known trees, tiny runs,
and (slow) the classification quality goals."""

from __future__ import annotations

import hashlib
import re
from types import SimpleNamespace

import jax
import numpy as np
import pytest

import evotensor
from evotensor.core.checks import ArgumentError
from evotensor.gp import Forest
from evotensor.gp.sr_tasks import file_sha256
from evotensor.tasks import all_tasks, get_task

TASKS = ("cls-iris", "cls-breast-cancer", "cls-wine", "cls-digits", "sr-nguyen", "sr-feynman", "sr")
TINY = {"pop": 16, "max_len": 16, "max_depth": 3}


def report_of(task, best):
    return task.report(SimpleNamespace(best_genotype=best), None)


def tree(task, expr):
    return Forest.from_tuples([expr], task.strategy.config.max_len, task.problem.function_set)[0]


@pytest.fixture
def csv_file(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (40, 2))
    y = 3 * X[:, 0] * X[:, 1] + 1
    path = tmp_path / "d.csv"
    lines = ["speed,angle,power"] + [f"{a:.17g},{b:.17g},{c:.17g}" for a, b, c in zip(X[:, 0], X[:, 1], y)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_every_task_is_registered():
    tasks = all_tasks()
    for name in TASKS:
        assert name in tasks, name
    assert tasks["sr-nguyen"].defaults["problem"] == "nguyen-1"
    assert tasks["sr-feynman"].defaults["problem"] == "feynman-I.6.2a"
    assert {"data", "target", "test_fraction", "functions", "data_sha256"} <= set(tasks["sr"].defaults)


def test_sr_nguyen_reports_an_exact_tree_as_both_solutions():
    task = get_task("sr-nguyen").build({**TINY, "max_len": 32})
    x = ("var", 0)
    exact = tree(task, ("add", ("mul", ("mul", x, x), x), ("add", ("mul", x, x), x)))
    text = report_of(task, exact)
    assert "true:  x0**3 + x0**2 + x0" in text, text
    assert re.search(r"test R2 1\.0000", text), text
    assert "symbolic solution: yes; accuracy solution (test R2 > 0.999): yes" in text, text
    wrong = report_of(task, tree(task, ("sin", x)))
    assert "symbolic solution: no; accuracy solution (test R2 > 0.999): no" in wrong, wrong


def test_sr_feynman_finds_a_scaled_tree_symbolic_through_linear_scaling():
    # exp(x0 * x0 * -0.5) is the truth exp(-x0**2/2)/sqrt(2 pi) up to the factor linear scaling fits
    task = get_task("sr-feynman").build(dict(TINY))
    x = ("var", 0)
    gauss = ("exp", ("mul", ("mul", x, x), ("const", -0.5)))
    text = report_of(task, tree(task, gauss))
    assert "true:  exp(-x0**2/2)/sqrt(2*pi)" in text, text
    assert "symbolic solution: yes; accuracy solution (test R2 > 0.999): yes" in text, text
    # best.txt: the tree with its training linear scaling a * (f) + b
    scaled_tree = tree(task, gauss)
    a, b = (float(np.ravel(v)[0]) for v in task.problem.scaling(scaled_tree))
    sign = "-" if b < 0 else "+"
    assert task.best_to_text(scaled_tree) == f"{a:.6g} * (exp((x0 * x0) * (-0.5))) {sign} {abs(b):.6g}"
    assert re.search(r"found:0\.3989\d*\*exp\(-0\.5\d*\*x0\*\*2\)", text.replace(" ", "")), text


def test_cls_report_gives_accuracies_size_and_the_features_read():
    task = get_task("cls-iris").build({**TINY, "logit_scaling": False})  # the trees' own outputs
    p = task.problem
    x2 = ("var", 2)  # petal length, standardized
    best = tree(
        task,
        ("add", ("modi", 0, ("sub", ("const", 0.0), x2)), ("modi", 2, ("sub", x2, ("const", 0.5)))),
    )
    text = report_of(task, best)
    acc, test_acc = float(p.accuracy(best)), float(p.test_accuracy(best))
    assert f"iris: train accuracy {acc:.4f}, test accuracy {test_acc:.4f}" in text, text
    assert f"({round(test_acc * 38)}/38 test rows)" in text and f"{int(best.length)} nodes" in text, text
    assert "score of class 'setosa': -x2" in text, text
    assert "x2 = (petal length (cm) - " in text, text
    binary = get_task("cls-breast-cancer").build({**TINY, "logit_scaling": False})
    text = report_of(binary, tree(binary, ("sub", ("var", 0), ("const", 0.25))))
    assert "class 'benign' if > 0 (else 'malignant'): x0 - 0.25" in text, text
    # with logit scaling (the default) the scores are the fitted slope * f + intercept
    scaled = get_task("cls-breast-cancer").build(dict(TINY))
    x0 = tree(scaled, ("sub", ("var", 0), ("const", 0.25)))
    a, b = (float(np.ravel(v)[0]) for v in scaled.problem.scaling(x0))
    text = report_of(scaled, x0)
    c = b - 0.25 * a  # a * (x0 - 0.25) + b
    line = next(x for x in text.splitlines() if "class 'benign' if > 0" in x)
    assert f"{abs(a):.3g}*x0" in line and f"{abs(c):.3g}" in line and abs(a) > 0.1, (line, a, c)
    # best.txt carries the map too (the raw tree alone would not be the model)
    sign = "-" if b < 0 else "+"
    assert scaled.best_to_text(x0) == f"x0 - 0.25; scaled: {a:.6g}*out[0] {sign} {abs(b):.6g}"
    assert binary.best_to_text(tree(binary, ("sub", ("var", 0), ("const", 0.25)))) == "x0 - 0.25"


@pytest.mark.parametrize("name", ["cls-iris", "sr-nguyen"])
def test_tiny_runs_end_with_a_report(name):
    task = get_task(name).build({**TINY, "generations": 2})
    result = evotensor.run(task.strategy, task.problem, 2, jax.random.key(0), progress=False)
    assert np.isfinite(result.best_fitness)
    text = task.report(result, None)
    assert ("test accuracy" if name.startswith("cls") else "test R2") in text, text


def test_sr_task_reads_the_csv_and_checks_its_hash(csv_file):
    spec = get_task("sr")
    task = spec.build(
        {**TINY, "data": str(csv_file), "target": "power", "data_sha256": file_sha256(csv_file)}
    )
    p = task.problem
    assert p.n_vars == 2 and p.X.shape == (30, 2) and p.X_test.shape == (10, 2)
    assert file_sha256(csv_file) == hashlib.sha256(csv_file.read_bytes()).hexdigest()
    x0, x1 = ("var", 0), ("var", 1)
    text = report_of(task, tree(task, ("mul", x0, x1)))
    assert re.search(r"found: 3\.0*\*angle\*speed \+ 1\.0*", text), text
    assert re.search(r"train R2 1\.0000\d*, test R2 1\.0000", text), text
    # no test split
    assert spec.build({**TINY, "data": str(csv_file), "test_fraction": 0}).problem.X_test is None
    with pytest.raises(ArgumentError, match="changed since the run was started"):
        spec.build({**TINY, "data": str(csv_file), "data_sha256": "0" * 64})


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("sr", {}, "task sr needs a data file"),
        ("sr", {"data": "/nonexistent/d.csv"}, "/nonexistent/d.csv: no such file"),
        ("sr", {"target": "nope"}, "target column 'nope' is not in"),
        ("sr", {"features": "speed,zz"}, "features: column 'zz' is not in"),
        ("sr", {"test_fraction": 1.0}, r"option test_fraction must be a number in \[0, 1\)"),
        ("sr", {"test_fraction": 0.99}, "a split needs at least 2 training rows"),
        ("sr", {"functions": "add,foo"}, "option functions='add,foo': unknown function name 'foo'"),
        ("sr", {"metric": "accuracy"}, "option metric must be 'mse', 'rmse' or 'r2'"),
        ("sr", {"drop_missing": "yes"}, "option drop_missing must be true or false"),
        ("sr-nguyen", {"problem": "nguyen-99"}, "option problem must be one of"),
        ("sr-nguyen", {"noise": -1.0}, "option noise must be a finite number >= 0"),
        ("cls-iris", {"metric": "mse"}, "option metric must be 'cross_entropy' or 'accuracy'"),
        ("cls-iris", {"test_fraction": 0.0}, r"option test_fraction must be a number in \(0, 1\)"),
        ("cls-wine", {"protected": "no"}, "option protected must be true or false"),
    ],
)
def test_bad_options_are_refused_naming_them(csv_file, name, options, message):
    cfg = {**TINY, **options}
    if name == "sr" and options and "data" not in options:
        cfg["data"] = str(csv_file)
    with pytest.raises((ArgumentError, ValueError), match=message):
        get_task(name).build(cfg)


@pytest.mark.parametrize(
    ("name", "pop", "generations"),
    [
        ("cls-iris", 4000, 100),
        ("cls-breast-cancer", 1000, 40),
        ("cls-wine", 1000, 40),
        ("cls-digits", 1000, 200),
    ],
)
def test_classification_tasks_run_at_their_documented_budgets(name, pop, generations):
    """The budget the issue's accuracy goals are measured at (results_gp_classification.md): what
    the task builds, what its description says, and ``--set pop=/generations=`` still overrides it."""
    spec = get_task(name)
    assert f"pop {pop} x {generations} generations" in spec.description
    task = spec.build({"max_len": 16})
    assert (task.strategy.population_size, task.generations) == (pop, generations)
    small = spec.build({**TINY, "generations": 3})
    assert (small.strategy.population_size, small.generations) == (TINY["pop"], 3)


@pytest.mark.slow
@pytest.mark.parametrize("name", TASKS[:-1])
def test_every_task_runs_tiny(name):
    task = get_task(name).build({**TINY, "generations": 2})
    result = evotensor.run(task.strategy, task.problem, 2, jax.random.key(0), progress=False)
    assert np.isfinite(result.best_fitness) and task.report(result, None)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "goal"), [("cls-iris", 0.97), ("cls-breast-cancer", 0.95)])
def test_classification_meets_its_test_accuracy_goal_in_most_seeds(name, goal):
    """The issue's goal at the task's default budget, over 3 seeds (the split and the run both
    follow the seed): at least 2 of 3 reach it."""
    reached = []
    for seed in range(3):
        task = get_task(name).build({"seed": seed})
        result = evotensor.run(
            task.strategy, task.problem, task.generations, jax.random.key(seed), progress=False
        )
        reached.append(float(task.problem.test_accuracy(result.best_genotype)))
    assert sum(a >= goal for a in reached) >= 2, reached
