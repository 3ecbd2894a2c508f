"""The classic symbolic-regression benchmarks with their published sampling, and SRBench's
ground-truth checks.

Every problem is a :class:`SRProblemSpec` in the registry :data:`SR_PROBLEMS`: its formula (a NumPy
callable), the same formula as a sympy-parsable string in ``x0, x1, ...``, its training and test
sampling, and the function set the literature suggests (as evotensor function names).
:func:`sr_data` draws ``(X_train, y_train, X_test, y_test)`` for a seed, with optional target noise;
:func:`sr_problem` wraps that in a :class:`~evotensor.gp.SymbolicRegression` with the test set
attached; :func:`is_symbolic_solution` and :func:`is_accuracy_solution` are SRBench's two success
criteria.

Sampling notation (McDermott et al. 2012)::

    U[a, b, n]      n rows, every variable drawn independently and uniformly from [a, b]
    E[a, b, step]   the evenly spaced grid a, a + step, ..., b (both ends included), one axis per
                    variable; several variables give the full Cartesian grid (first variable slowest)

Sources of the tables:

* Koza-1..3, Nguyen-1..12, Keijzer-1..15, Pagie-1, Vladislavleva-1/4/6/7: formulas, variable counts,
  training and test sampling and function sets from McDermott et al., "Genetic programming needs
  better benchmarks", GECCO 2012, its table of symbolic-regression benchmarks (with the function-set
  table beside it), which collects Koza (1992), Uy/Nguyen et al. (GPEM 2011), Keijzer (EuroGP 2003),
  Pagie & Hogeweg (1997) and Vladislavleva et al. (IEEE TEC 2009).
* Feynman: formulas and variable ranges from the AI Feynman database (Udrescu & Tegmark 2020,
  ``FeynmanEquations.csv``), the ground-truth set of SRBench (La Cava et al., "Contemporary
  symbolic regression methods and their relative performance", NeurIPS 2021 Datasets &
  Benchmarks). Sample sizes 10000 training / 10000 test rows as in HeuristicLab's Feynman
  instances (the AI Feynman files hold 10**5-10**6 rows; SRBench subsamples them).
* Target noise (:func:`sr_data`): SRBench's ``evaluate_model.py``: ``y_train += N(0, noise *
  RMS(y_train))``, on the training target only; levels used there are 0, 0.001, 0.01, 0.1.
* Success criteria: SRBench's ground-truth evaluation: a *symbolic solution* is a model whose
  difference with the truth simplifies to a constant, or whose ratio with it simplifies to a
  non-zero constant; an *accuracy solution* has test R^2 > 0.999.

Choices made where the sources are silent or disagree:

* McDermott's table gives no test set for Koza-1..3, Nguyen-1..12 and Pagie-1. Here the test set of
  Koza and Nguyen is a second, independent draw of the training specification (``U[-1, 1, 20]`` for
  Koza-1), and Pagie-1's is ``U[-5, 5, 1000]`` (its training set is the whole grid, so there is no
  held-out grid point).
* Nguyen-12 takes McDermott's ``U[-1, 1, 20]`` (other papers sample it with other sizes and ranges).
* Keijzer-6 is the harmonic number ``sum_{i=1}^{x} 1/i``; it is only sampled at integers, and the
  formula evaluates the analytic continuation ``digamma(x + 1) + euler_gamma`` (sympy's
  ``harmonic(x0)``), equal to the sum there.
* I.6.2a is Feynman's equation I.6.20a (the database file is named ``I.6.2a``).
* I.34.27 is ``E_n = (h / (2 pi)) omega`` as in the AI Feynman database (variables ``omega, h`` in
  that order); HeuristicLab's instance drops the ``2 pi``.
* Function sets, mapped to evotensor names: Koza ``{+, -, *, %, sin, cos, exp, ln|n|}`` ->
  ``add sub mul div sin cos exp log`` (the literature's protected ``%`` and ``ln|n|`` are evotensor's
  ``protected=True`` semantics); Keijzer ``{+, *, 1/n, -n, sqrt}`` -> ``add mul inv neg sqrt``;
  Vladislavleva-A ``{+, -, *, %, n^c, n + c, n * c}`` -> ``add sub mul div pow`` (the constant forms
  are a function applied to a constant leaf); B = A + ``{n^2, e^n, e^-n}`` -> adds ``exp neg`` (``n^2``
  is ``mul``/``pow``, ``e^-n`` is ``exp(neg(n))``); C = B + ``{sin, cos}``. Vladislavleva-1 and -6
  use B, -4 and -7 use C. SRBench prescribes no set for the Feynman problems; they get
  ``add sub mul div sqrt exp log sin cos`` here.

Example::

    X, y, X_test, y_test = sr_data("nguyen-7", seed=3, noise=0.01)
    problem = sr_problem("keijzer-11", seed=0)          # SymbolicRegression with X_test/y_test
    is_symbolic_solution("x0*x1 + sin((1 - x0)*(1 - x1)) + 2", "keijzer-11")   # True
    is_accuracy_solution(0.9995)                                              # True
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from evotensor.core.checks import ArgumentError, check_int, check_real
from evotensor.core.timeout import TimeLimitExceeded, call_with_time_limit
from evotensor.gp.functions import FunctionSet
from evotensor.gp.regression import SymbolicRegression

__all__ = [
    "ACCURACY_R2",
    "SR_PROBLEMS",
    "Grid",
    "SRProblemSpec",
    "Uniform",
    "is_accuracy_solution",
    "is_symbolic_solution",
    "sr_data",
    "sr_problem",
]

ACCURACY_R2 = 0.999
"""SRBench's accuracy-solution threshold: test R^2 strictly above this."""


# ---- sampling specifications ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Uniform:
    """``U[a, b, n]``: ``n`` rows, variable ``i`` uniform in ``ranges[i] = (a_i, b_i)``."""

    ranges: tuple[tuple[float, float], ...]
    n: int

    @property
    def n_vars(self) -> int:
        """Number of variables (columns of :meth:`sample`)."""
        return len(self.ranges)

    @property
    def n_rows(self) -> int:
        """Rows :meth:`sample` returns (the same interface as :class:`Grid`)."""
        return self.n

    @property
    def bounds(self) -> tuple[tuple[float, float], ...]:
        """``(low, high)`` per variable."""
        return self.ranges

    def sample(self, rng: np.random.Generator) -> np.ndarray:
        """``[n, n_vars]`` float64 rows drawn from ``rng``."""
        lo = np.array([r[0] for r in self.ranges])
        hi = np.array([r[1] for r in self.ranges])
        return lo + (hi - lo) * rng.random((self.n, self.n_vars))


@dataclasses.dataclass(frozen=True)
class Grid:
    """``E[a, b, step]`` per variable: ``axes[i] = (a_i, b_i, step_i)``; the rows are the Cartesian
    product of the axes (first variable slowest)."""

    axes: tuple[tuple[float, float, float], ...]

    @property
    def n_vars(self) -> int:
        """Number of variables (columns of :meth:`sample`)."""
        return len(self.axes)

    def axis(self, i: int) -> np.ndarray:
        """The values of axis ``i``: ``a, a + step, ..., b`` (rounded to 10 decimals, so a step of
        0.1 lands exactly on its decimal values)."""
        a, b, step = self.axes[i]
        count = int(round((b - a) / step)) + 1
        return np.round(a + step * np.arange(count), 10)

    @property
    def n_rows(self) -> int:
        """Rows :meth:`sample` returns: the product of the axis lengths."""
        return math.prod(self.axis(i).size for i in range(self.n_vars))

    @property
    def bounds(self) -> tuple[tuple[float, float], ...]:
        """``(low, high)`` per variable."""
        return tuple((a, b) for a, b, _ in self.axes)

    def sample(self, rng: np.random.Generator | None = None) -> np.ndarray:
        """The grid ``[n_rows, n_vars]`` float64 (``rng`` is ignored: a grid is fixed)."""
        del rng
        mesh = np.meshgrid(*(self.axis(i) for i in range(self.n_vars)), indexing="ij")
        return np.stack([m.ravel() for m in mesh], axis=1)


def _U(a: float, b: float, n: int, n_vars: int = 1) -> Uniform:
    return Uniform(((float(a), float(b)),) * n_vars, n)


def _E(a: float, b: float, step: float, n_vars: int = 1) -> Grid:
    return Grid(((float(a), float(b), float(step)),) * n_vars)


# ---- problem specifications ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SRProblemSpec:
    """One ground-truth symbolic-regression problem.

    Attributes:
        name: registry key, e.g. ``"nguyen-7"``, ``"feynman-I.6.2a"``.
        n_vars: input variables.
        formula: NumPy callable ``X [n, n_vars] -> y [n]`` (float64 in, float64 out).
        expression: the same function as a sympy-parsable string in ``x0, x1, ...``.
        train, test: sampling specifications (:class:`Uniform` or :class:`Grid`).
        function_set: the literature's suggested function set, as evotensor function names.
        variables: the variables' names in the source (``x0, x1, ...`` where it names none).
        source: where the problem and its sampling come from.
    """

    name: str
    n_vars: int
    formula: Callable[[np.ndarray], np.ndarray]
    expression: str
    train: Uniform | Grid
    test: Uniform | Grid
    function_set: tuple[str, ...]
    variables: tuple[str, ...] = ()
    source: str = ""


KOZA_SET = ("add", "sub", "mul", "div", "sin", "cos", "exp", "log")
KEIJZER_SET = ("add", "mul", "inv", "neg", "sqrt")
VLADISLAVLEVA_A = ("add", "sub", "mul", "div", "pow")
VLADISLAVLEVA_B = (*VLADISLAVLEVA_A, "exp", "neg")
VLADISLAVLEVA_C = (*VLADISLAVLEVA_B, "sin", "cos")
FEYNMAN_SET = ("add", "sub", "mul", "div", "sqrt", "exp", "log", "sin", "cos")

_MCDERMOTT = "McDermott et al. 2012 (GECCO), table of symbolic-regression benchmarks"


def _harmonic(x: np.ndarray) -> np.ndarray:
    from scipy.special import digamma

    return digamma(x + 1.0) + np.euler_gamma


def _c(X: np.ndarray, i: int) -> np.ndarray:
    return X[:, i]


def _registry() -> dict[str, SRProblemSpec]:
    specs: list[SRProblemSpec] = []

    def add(name, n_vars, formula, expression, train, test, fset, variables=(), source=_MCDERMOTT):
        variables = tuple(variables) or tuple(f"x{i}" for i in range(n_vars))
        specs.append(SRProblemSpec(name, n_vars, formula, expression, train, test, fset, variables, source))

    # the table reads best one problem to a line or two, so the formatter leaves it alone
    # fmt: off
    u20 = _U(-1, 1, 20)
    # Koza (1992); no test set in the table: an independent draw of the same specification
    add("koza-1", 1, lambda X: X[:, 0] ** 4 + X[:, 0] ** 3 + X[:, 0] ** 2 + X[:, 0],
        "x0**4 + x0**3 + x0**2 + x0", u20, u20, KOZA_SET)
    add("koza-2", 1, lambda X: X[:, 0] ** 5 - 2 * X[:, 0] ** 3 + X[:, 0],
        "x0**5 - 2*x0**3 + x0", u20, u20, KOZA_SET)
    add("koza-3", 1, lambda X: X[:, 0] ** 6 - 2 * X[:, 0] ** 4 + X[:, 0] ** 2,
        "x0**6 - 2*x0**4 + x0**2", u20, u20, KOZA_SET)

    # Nguyen (Uy et al. 2011): sums of powers 1..k, then the others
    for k, idx in ((3, 1), (4, 2), (5, 3), (6, 4)):
        add(f"nguyen-{idx}", 1, lambda X, k=k: sum(X[:, 0] ** p for p in range(1, k + 1)),
            " + ".join(f"x0**{p}" for p in range(k, 0, -1)), u20, u20, KOZA_SET)
    add("nguyen-5", 1, lambda X: np.sin(X[:, 0] ** 2) * np.cos(X[:, 0]) - 1,
        "sin(x0**2)*cos(x0) - 1", u20, u20, KOZA_SET)
    add("nguyen-6", 1, lambda X: np.sin(X[:, 0]) + np.sin(X[:, 0] + X[:, 0] ** 2),
        "sin(x0) + sin(x0 + x0**2)", u20, u20, KOZA_SET)
    add("nguyen-7", 1, lambda X: np.log(X[:, 0] + 1) + np.log(X[:, 0] ** 2 + 1),
        "log(x0 + 1) + log(x0**2 + 1)", _U(0, 2, 20), _U(0, 2, 20), KOZA_SET)
    add("nguyen-8", 1, lambda X: np.sqrt(X[:, 0]), "sqrt(x0)", _U(0, 4, 20), _U(0, 4, 20), KOZA_SET)
    u100 = _U(-1, 1, 100, 2)
    add("nguyen-9", 2, lambda X: np.sin(X[:, 0]) + np.sin(X[:, 1] ** 2),
        "sin(x0) + sin(x1**2)", u100, u100, KOZA_SET)
    add("nguyen-10", 2, lambda X: 2 * np.sin(X[:, 0]) * np.cos(X[:, 1]),
        "2*sin(x0)*cos(x1)", u100, u100, KOZA_SET)
    add("nguyen-11", 2, lambda X: X[:, 0] ** X[:, 1], "x0**x1", _U(0, 1, 100, 2), _U(0, 1, 100, 2), KOZA_SET)
    add("nguyen-12", 2, lambda X: X[:, 0] ** 4 - X[:, 0] ** 3 + X[:, 1] ** 2 / 2 - X[:, 1],
        "x0**4 - x0**3 + x1**2/2 - x1", _U(-1, 1, 20, 2), _U(-1, 1, 20, 2), KOZA_SET)

    # Keijzer (2003)
    for idx, r in ((1, 1), (2, 2), (3, 3)):
        add(f"keijzer-{idx}", 1, lambda X: 0.3 * X[:, 0] * np.sin(2 * np.pi * X[:, 0]),
            "3*x0*sin(2*pi*x0)/10", _E(-r, r, 0.1), _E(-r, r, 0.001), KEIJZER_SET)
    add("keijzer-4", 1,
        lambda X: X[:, 0] ** 3 * np.exp(-X[:, 0]) * np.cos(X[:, 0]) * np.sin(X[:, 0])
        * (np.sin(X[:, 0]) ** 2 * np.cos(X[:, 0]) - 1),
        "x0**3*exp(-x0)*cos(x0)*sin(x0)*(sin(x0)**2*cos(x0) - 1)",
        _E(0, 10, 0.05), _E(0.05, 10.05, 0.05), KEIJZER_SET)
    k5 = ((-1.0, 1.0), (1.0, 2.0), (-1.0, 1.0))
    add("keijzer-5", 3, lambda X: 30 * X[:, 0] * X[:, 2] / ((X[:, 0] - 10) * X[:, 1] ** 2),
        "30*x0*x2/((x0 - 10)*x1**2)", Uniform(k5, 1000), Uniform(k5, 10000), KEIJZER_SET)
    add("keijzer-6", 1, lambda X: _harmonic(X[:, 0]), "harmonic(x0)",
        _E(1, 50, 1), _E(1, 120, 1), KEIJZER_SET)
    add("keijzer-7", 1, lambda X: np.log(X[:, 0]), "log(x0)", _E(1, 100, 1), _E(1, 100, 0.1), KEIJZER_SET)
    add("keijzer-8", 1, lambda X: np.sqrt(X[:, 0]), "sqrt(x0)", _E(0, 100, 1), _E(0, 100, 0.1), KEIJZER_SET)
    add("keijzer-9", 1, lambda X: np.arcsinh(X[:, 0]), "asinh(x0)",
        _E(0, 100, 1), _E(0, 100, 0.1), KEIJZER_SET)
    add("keijzer-10", 2, lambda X: X[:, 0] ** X[:, 1], "x0**x1",
        _U(0, 1, 100, 2), _E(0, 1, 0.01, 2), KEIJZER_SET)
    u3, e3 = _U(-3, 3, 20, 2), _E(-3, 3, 0.01, 2)
    add("keijzer-11", 2, lambda X: X[:, 0] * X[:, 1] + np.sin((X[:, 0] - 1) * (X[:, 1] - 1)),
        "x0*x1 + sin((x0 - 1)*(x1 - 1))", u3, e3, KEIJZER_SET)
    add("keijzer-12", 2, lambda X: X[:, 0] ** 4 - X[:, 0] ** 3 + X[:, 1] ** 2 / 2 - X[:, 1],
        "x0**4 - x0**3 + x1**2/2 - x1", u3, e3, KEIJZER_SET)
    add("keijzer-13", 2, lambda X: 6 * np.sin(X[:, 0]) * np.cos(X[:, 1]), "6*sin(x0)*cos(x1)", u3, e3,
        KEIJZER_SET)
    add("keijzer-14", 2, lambda X: 8 / (2 + X[:, 0] ** 2 + X[:, 1] ** 2), "8/(2 + x0**2 + x1**2)", u3, e3,
        KEIJZER_SET)
    add("keijzer-15", 2, lambda X: X[:, 0] ** 3 / 5 + X[:, 1] ** 3 / 2 - X[:, 1] - X[:, 0],
        "x0**3/5 + x1**3/2 - x1 - x0", u3, e3, KEIJZER_SET)

    # Pagie & Hogeweg (1997): the 26 x 26 grid (0 is not on it); x**4 / (1 + x**4) is the same
    # function without the division by zero at x = 0 (reachable by the uniform test draw)
    add("pagie-1", 2, lambda X: X[:, 0] ** 4 / (1 + X[:, 0] ** 4) + X[:, 1] ** 4 / (1 + X[:, 1] ** 4),
        "1/(1 + x0**(-4)) + 1/(1 + x1**(-4))", _E(-5, 5, 0.4, 2), _U(-5, 5, 1000, 2), KOZA_SET)

    # Vladislavleva et al. (2009)
    add("vladislavleva-1", 2, lambda X: np.exp(-((X[:, 0] - 1) ** 2)) / (1.2 + (X[:, 1] - 2.5) ** 2),
        "exp(-(x0 - 1)**2)/(6/5 + (x1 - 5/2)**2)", _U(0.3, 4, 100, 2), _E(-0.2, 4.2, 0.1, 2), VLADISLAVLEVA_B)
    add("vladislavleva-4", 5, lambda X: 10 / (5 + np.sum((X - 3) ** 2, axis=1)),
        "10/(5 + " + " + ".join(f"(x{i} - 3)**2" for i in range(5)) + ")",
        _U(0.05, 6.05, 1024, 5), _U(-0.25, 6.35, 5000, 5), VLADISLAVLEVA_C)
    add("vladislavleva-6", 2, lambda X: 6 * np.sin(X[:, 0]) * np.cos(X[:, 1]), "6*sin(x0)*cos(x1)",
        _U(0.1, 5.9, 30, 2), _E(-0.05, 6.05, 0.02, 2), VLADISLAVLEVA_B)
    add("vladislavleva-7", 2,
        lambda X: (X[:, 0] - 3) * (X[:, 1] - 3) + 2 * np.sin((X[:, 0] - 4) * (X[:, 1] - 4)),
        "(x0 - 3)*(x1 - 3) + 2*sin((x0 - 4)*(x1 - 4))",
        _U(0.05, 6.05, 300, 2), _U(-0.25, 6.35, 1000, 2), VLADISLAVLEVA_C)

    # AI Feynman / SRBench ground truth: uniform in the database's ranges, 10000 + 10000 rows
    def feynman(eq, formula, expression, variables, ranges):
        spec = Uniform(tuple((float(a), float(b)) for a, b in ranges), 10000)
        add(f"feynman-{eq}", len(variables), formula, expression, spec, spec, FEYNMAN_SET, variables,
            f"AI Feynman database (FeynmanEquations.csv, {eq}); SRBench ground-truth set")

    feynman("I.6.2a", lambda X: np.exp(-X[:, 0] ** 2 / 2) / np.sqrt(2 * np.pi), "exp(-x0**2/2)/sqrt(2*pi)",
            ("theta",), [(1, 3)])
    feynman("I.12.1", lambda X: X[:, 0] * X[:, 1], "x0*x1", ("mu", "Nn"), [(1, 5), (1, 5)])
    feynman("I.14.3", lambda X: X[:, 0] * X[:, 1] * X[:, 2], "x0*x1*x2", ("m", "g", "z"), [(1, 5)] * 3)
    feynman("I.25.13", lambda X: X[:, 0] / X[:, 1], "x0/x1", ("q", "C"), [(1, 5), (1, 5)])
    feynman("I.29.4", lambda X: X[:, 0] / X[:, 1], "x0/x1", ("omega", "c"), [(1, 10), (1, 10)])
    feynman("I.34.27", lambda X: X[:, 1] / (2 * np.pi) * X[:, 0], "x1/(2*pi)*x0", ("omega", "h"),
            [(1, 5), (1, 5)])
    feynman("II.3.24", lambda X: X[:, 0] / (4 * np.pi * X[:, 1] ** 2), "x0/(4*pi*x1**2)", ("Pwr", "r"),
            [(1, 5), (1, 5)])
    feynman("II.27.16", lambda X: X[:, 0] * X[:, 1] * X[:, 2] ** 2, "x0*x1*x2**2", ("epsilon", "c", "Ef"),
            [(1, 5)] * 3)
    # fmt: on
    return {s.name: s for s in specs}


SR_PROBLEMS: dict[str, SRProblemSpec] = _registry()
"""The registry: ``{name: SRProblemSpec}``; names are lower case except the Feynman equation number
(``"feynman-I.6.2a"``); lookups by :func:`sr_data` and friends ignore case."""

_BY_LOWER = {k.lower(): k for k in SR_PROBLEMS}


def _spec(name_or_spec: Any, arg: str = "name") -> SRProblemSpec:
    if isinstance(name_or_spec, SRProblemSpec):
        return name_or_spec
    if isinstance(name_or_spec, str) and name_or_spec.lower() in _BY_LOWER:
        return SR_PROBLEMS[_BY_LOWER[name_or_spec.lower()]]
    raise ArgumentError(
        f"{arg} must be one of {tuple(SR_PROBLEMS)} (or an SRProblemSpec), got {name_or_spec!r}"
    )


# ---- data ------------------------------------------------------------------------------------------


def sr_data(
    name: Any, seed: int = 0, noise: float = 0.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Draw one data set of a registered problem: ``(X_train, y_train, X_test, y_test)``, float32.

    Args:
        name: a key of :data:`SR_PROBLEMS` (case-insensitive) or an :class:`SRProblemSpec`.
        seed: int >= 0. The training inputs, the test inputs and the noise come from three
            independent NumPy generators seeded by ``(seed, 0)``, ``(seed, 1)``, ``(seed, 2)``, so the
            inputs do not depend on ``noise``. A grid (``E[...]``) is the same for every seed.
        noise: SRBench's target noise, a finite float >= 0: Gaussian noise with standard deviation
            ``noise * RMS(y_train)`` (RMS of the noise-free training target) is added to ``y_train``;
            ``y_test`` stays noise-free.

    Returns:
        ``X_train [n_train, n_vars]``, ``y_train [n_train]``, ``X_test [n_test, n_vars]``,
        ``y_test [n_test]``, the targets computed in float64 from the float64 inputs.

    Raises:
        ArgumentError: an unknown name (the message lists the valid ones), a seed that is not an
            int >= 0, a noise that is negative, NaN or infinite.
    """
    spec = _spec(name)
    seed = check_int(seed, "seed", minimum=0)
    noise = check_real(noise, "noise", low=0.0)
    X_train = spec.train.sample(np.random.default_rng([seed, 0]))
    X_test = spec.test.sample(np.random.default_rng([seed, 1]))
    with np.errstate(all="ignore"):
        y_train = np.asarray(spec.formula(X_train), np.float64)
        y_test = np.asarray(spec.formula(X_test), np.float64)
    if noise > 0.0:
        scale = noise * math.sqrt(float(np.mean(np.square(y_train))))
        y_train = y_train + np.random.default_rng([seed, 2]).normal(0.0, scale, size=y_train.shape)
    return (
        X_train.astype(np.float32),
        y_train.astype(np.float32),
        X_test.astype(np.float32),
        y_test.astype(np.float32),
    )


def sr_problem(
    name: Any,
    seed: int = 0,
    noise: float = 0.0,
    *,
    function_set: FunctionSet | None = None,
    protected: bool = False,
    metric: str = "mse",
    backend: str = "auto",
    case_errors: bool = False,
) -> SymbolicRegression:
    """A :class:`~evotensor.gp.SymbolicRegression` on :func:`sr_data` ``(name, seed, noise)``'s
    training data, with its test data as ``X_test``/``y_test`` (for ``test_evaluate``).

    Args:
        name, seed, noise: as in :func:`sr_data`.
        function_set: default ``FunctionSet(spec.function_set, protected=protected)``, the
            literature's set.
        protected: the default set's semantics (default False: raw math, as everywhere in evotensor;
            the literature's ``%`` and ``ln|n|`` are ``protected=True``).
        metric, backend, case_errors: as in :class:`~evotensor.gp.SymbolicRegression`.

    The problem carries ``spec`` (the :class:`SRProblemSpec`) and ``true_expression`` (its
    expression) as attributes.
    """
    spec = _spec(name)
    X, y, X_test, y_test = sr_data(spec, seed, noise)
    fs = FunctionSet(spec.function_set, protected=bool(protected)) if function_set is None else function_set
    problem = SymbolicRegression(
        X, y, fs, metric=metric, X_test=X_test, y_test=y_test, backend=backend, case_errors=case_errors
    )
    problem.spec = spec
    problem.true_expression = spec.expression
    return problem


# ---- success criteria ------------------------------------------------------------------------------


def is_accuracy_solution(r2_test: Any) -> Any:
    """SRBench's accuracy solution: test R^2 > :data:`ACCURACY_R2` (0.999).

    ``r2_test`` is a real number (a bool result) or an array of them (a bool array, elementwise,
    e.g. ``problem.test_evaluate(forest).fitness`` of an ``r2`` problem). NaN counts as not solved.

    Raises:
        ArgumentError: a bool, a string, or a non-real array.
    """
    if isinstance(r2_test, (bool, np.bool_, str, bytes)):
        raise ArgumentError(f"r2_test must be a real number or array, got {r2_test!r}")
    try:
        arr = np.asarray(r2_test)
    except Exception as e:  # noqa: BLE001 - anything that is not array-like
        raise ArgumentError(f"r2_test must be a real number or array, got {r2_test!r}") from e
    real = np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
    if arr.dtype == np.bool_ or not real:
        raise ArgumentError(f"r2_test must be a real number or array, got {r2_test!r}")
    out = arr > ACCURACY_R2
    return bool(out) if out.ndim == 0 else out


def _sympy_locals(sp: Any, n_vars: int) -> dict[str, Any]:
    names = {f"x{i}": sp.Symbol(f"x{i}", real=True) for i in range(n_vars)}
    names.update(
        neg=lambda a: -a,
        inv=lambda a: 1 / a,
        max=sp.Max,
        min=sp.Min,
        abs=sp.Abs,
        if_then_else=lambda c, a, b: sp.Piecewise((a, c > 0), (b, True)),
        harmonic=sp.harmonic,
    )
    return names


def _to_sympy(sp: Any, expr: Any, n_vars: int, arg: str) -> Any:
    """``expr`` (a string or sympy expression over ``x0..``) as a sympy expression in the real
    symbols ``x0..x{n_vars-1}``, floats made exact rationals of their printed decimals."""
    local = _sympy_locals(sp, n_vars)
    if isinstance(expr, str):
        try:
            out = sp.parse_expr(expr, local_dict=local)
        except Exception as e:  # noqa: BLE001 - sympy raises many kinds on bad text
            raise ArgumentError(f"{arg} is not a parsable expression over x0..: {expr!r} ({e})") from e
    elif isinstance(expr, sp.Basic):
        out = expr.xreplace({s: local[s.name] for s in expr.free_symbols if s.name in local})
    else:
        raise ArgumentError(f"{arg} must be a string or a sympy expression, got {expr!r}")
    if not isinstance(out, sp.Expr) or isinstance(out, sp.logic.boolalg.Boolean):
        raise ArgumentError(f"{arg} must be an algebraic expression, got {expr!r}")
    allowed = {local[f"x{i}"] for i in range(n_vars)}
    extra = sorted(str(s) for s in out.free_symbols if s not in allowed)
    if extra:
        raise ArgumentError(
            f"{arg} uses {extra}, but the problem's variables are x0..x{n_vars - 1}: {expr!r}"
        )
    return sp.nsimplify(out, rational=True)


def _numerically_constant(sp: Any, model: Any, truth: Any, spec: SRProblemSpec) -> bool | None:
    """Cheap screen on 64 points of the training region: False when neither the difference nor
    the ratio is constant there; None when the expressions cannot be evaluated numerically."""
    symbols = [sp.Symbol(f"x{i}", real=True) for i in range(spec.n_vars)]
    rng = np.random.default_rng(12345)
    lo = np.array([b[0] for b in spec.train.bounds])
    hi = np.array([b[1] for b in spec.train.bounds])
    X = lo + (hi - lo) * rng.random((64, spec.n_vars))
    try:
        with np.errstate(all="ignore"):
            fm = np.broadcast_to(np.asarray(sp.lambdify(symbols, model, "numpy")(*X.T), np.float64), (64,))
            ft = np.broadcast_to(np.asarray(sp.lambdify(symbols, truth, "numpy")(*X.T), np.float64), (64,))
    except Exception:  # noqa: BLE001 - no numeric form (e.g. harmonic), or a complex result
        return None
    ok = np.isfinite(fm) & np.isfinite(ft)
    if ok.sum() < 8:
        return None
    fm, ft = fm[ok], ft[ok]
    d = fm - ft
    scale = max(1.0, float(np.max(np.abs(fm))), float(np.max(np.abs(ft))))
    if np.ptp(d) <= 1e-6 * scale:
        return True
    nz = np.abs(ft) > 1e-12 * scale
    if nz.sum() >= 8:
        r = fm[nz] / ft[nz]
        if np.ptp(r) <= 1e-6 * max(1.0, float(np.max(np.abs(r)))) and float(np.max(np.abs(r))) > 0:
            return True
    return False


def _is_constant(sp: Any, e: Any, nonzero: bool) -> bool:
    if e.free_symbols or e.has(sp.nan, sp.zoo, sp.oo, -sp.oo):
        return False
    return not (nonzero and e == 0)


def is_symbolic_solution(expr: Any, name_or_spec: Any, timeout: float = 10.0) -> bool:
    """SRBench's symbolic solution: ``expr - truth`` simplifies to a constant, or ``expr / truth``
    simplifies to a non-zero constant.

    Args:
        expr: the model, a string (e.g. :meth:`Forest.to_infix` output: ``neg``, ``inv``, ``max``,
            ``min``, ``abs``, ``if_then_else`` are understood) or a sympy expression, over
            ``x0 .. x{n_vars-1}``. Floats count as the exact decimals they print as (``0.3`` is
            ``3/10``). A string is parsed by sympy's ``parse_expr``, which evaluates Python code:
            pass only text you trust (a printed tree is fine).
        name_or_spec: a registered problem name or an :class:`SRProblemSpec`.
        timeout: seconds (> 0) of sympy simplification at most (a SIGALRM timer, so only on the
            main thread of a POSIX process; unbounded elsewhere). A model that was not proven within
            it counts as not a solution.

    A quick numeric screen on the training region rejects models whose difference and ratio with
    the truth both vary there, before any simplification; the proof itself is symbolic
    (``simplify``, also after rewriting in ``log``/``exp`` form, so e.g. ``log(x0 + sqrt(x0**2 + 1))``
    is accepted for ``asinh(x0)``).

    Raises:
        ArgumentError: an unknown problem, an unparsable or non-algebraic expression (a comparison),
            a variable outside ``x0..x{n_vars-1}``, a bad ``timeout``.
    """
    import sympy as sp

    spec = _spec(name_or_spec, "name_or_spec")
    timeout = check_real(timeout, "timeout", low=0.0, low_open=True)
    model = _to_sympy(sp, expr, spec.n_vars, "expr")
    truth = _to_sympy(sp, spec.expression, spec.n_vars, "the truth")
    if _numerically_constant(sp, model, truth, spec) is False:
        return False

    def prove() -> bool:
        diff, ratio = model - truth, model / truth
        for e, nonzero in ((diff, False), (ratio, True)):
            for form in (e, e.rewrite(sp.log), e.rewrite(sp.exp)):
                if _is_constant(sp, sp.simplify(form), nonzero):
                    return True
        return False

    try:
        return bool(call_with_time_limit(prove, timeout))
    except TimeLimitExceeded:
        return False
