"""Export one GP tree: a sympy expression, a string, LaTeX, a jitted JAX callable, a NumPy callable.

Every export is faithful to the evaluated semantics (:func:`evotensor.gp.reference.reference_eval`),
including the protected operators of ``FunctionSet(..., protected=True)`` and the Modi
multi-output semantics:

* :func:`to_numpy` computes every node with :meth:`FunctionSet.apply_numpy`, in float32, in the
  reference's order: its result is bit-for-bit the reference's.
* :func:`to_jax` computes every node with the set's own ``jnp`` functions
  (:attr:`FunctionSet.functions`), inlined into one jitted program: equal to the evaluator up to the
  float32 rounding of XLA's transcendental functions (``sin``, ``exp``, ...) and its flushing of
  subnormal numbers to zero.
* :func:`to_sympy` builds the same function over the reals: protected operators become
  ``Piecewise`` with the evaluator's thresholds (e.g. protected ``div`` is
  ``Piecewise((a/b, Abs(b) > 0.0010000001), (1, True))``, see :data:`SYMPY_EPS`), ``max min`` become
  ``Max Min``, ``lt gt if_then_else`` become ``Piecewise``, constants are sympy ``Float`` s of their
  float32 values, and every variable-free subtree is folded to the float32 value the evaluator
  computes for it (``oo``/``-oo``/``nan`` where that is not finite); protected ``exp`` is
  ``Piecewise((exp(80), a > 80), (exp(a), True))``. Piecewise and their conditions are built
  unevaluated (sympy would otherwise fold nested Piecewise into large ``ITE`` conditions); a
  division by a zero branch is written with ``oo`` (the evaluator's ``x/+0``), not ``zoo``. What a
  real-number expression cannot say is not modelled: float32 rounding and overflow, NaN
  propagation, the sign of ``x/-0`` inside a branch; sympy's automatic evaluation may also extend
  the domain (``sqrt(x0)*sqrt(x0)`` is ``x0``, where the evaluator gives NaN for ``x0 < 0``).
* :func:`to_string` is :meth:`Forest.to_infix`; :func:`to_latex` is ``sympy.latex`` of
  :func:`to_sympy`.

The variables are the real sympy symbols ``x0, x1, ...`` (the names :func:`evotensor.gp.sr_data`
problems and :func:`evotensor.gp.is_symbolic_solution` use).

Example::

    fs = FunctionSet(("add", "mul", "div", "sin"), protected=True)
    forest = Forest.from_tuples([("div", ("sin", ("var", 0)), ("var", 1))], 8, fs)
    to_sympy(forest, fs)            # Piecewise((sin(x0)/x1, Abs(x1) > 0.0010000001), (1, True))
    f = to_jax(forest, fs)          # f(X [n, 2]) -> [n], jitted
    g = to_numpy(forest, fs)        # the same in NumPy float32 (bit-identical to reference_eval)
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from decimal import ROUND_CEILING, Decimal
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from evotensor.core.checks import ArgumentError, check_choice, check_int, check_positive
from evotensor.core.timeout import TimeLimitExceeded, call_with_time_limit, can_time_limit
from evotensor.gp.encoding import Forest
from evotensor.gp.functions import BUILTIN_NAMES, CONST, FIRST_FUNCTION, VAR, FunctionSet

__all__ = ["SYMPY_EPS", "to_jax", "to_latex", "to_numpy", "to_string", "to_sympy"]

# The evaluator's protection threshold (``FunctionSet`` docs: gplearn's 0.001) and exp's clip. The
# evaluator compares float32 numbers with float32(0.001); tests/gp/test_export.py checks at the
# boundary that these restatements agree with functions.py.
_EPS32 = float(np.float32(0.001))
_EXP_CLIP = 80.0


def _shortest_threshold(t: float) -> str:
    """The shortest decimal ``d`` with ``t <= d < next float32 above t``: on float32 inputs
    ``|b| > d`` is exactly ``|b| > t``, and ``d`` survives being printed to 15 digits (what
    ``sympy.lambdify`` does with a ``Float``), which ``t`` itself does not."""
    upper = Decimal(float(np.nextafter(np.float32(t), np.float32(np.inf))))
    exact = Decimal(t)
    for digits in range(1, 18):
        q = Decimal(1).scaleb(exact.adjusted() - digits + 1)
        d = exact.quantize(q, rounding=ROUND_CEILING)
        if exact <= d < upper:
            return str(d.normalize())
    return repr(t)  # pragma: no cover - 17 digits always suffice


SYMPY_EPS: str = _shortest_threshold(_EPS32)
"""The protection threshold as :func:`to_sympy` writes it (``"0.0010000001"``): for every float32
number ``b``, ``|b| > 0.0010000001`` exactly when the evaluator's ``|b| > float32(0.001)`` holds."""

_FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_DEFAULT_TIMEOUT = 5.0
_UNTIMED_MAX_OPS = 40  # simplification without a timer only for expressions this small


# ---- one tree as a post-order program -------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Step:
    pos: int  # prefix position of the node
    opcode: int
    value: float  # constant, or variable index
    kids: tuple[int, ...]  # prefix positions of the children, left to right
    output: int  # Modi output index, or -1
    has_var: bool  # the subtree reads a variable


@dataclasses.dataclass(frozen=True)
class _Program:
    steps: tuple[_Step, ...]  # children before parents, left subtrees first (the reference's order)
    n_outputs: int
    n_vars: int  # 1 + the largest variable index read (0 if none)
    names: tuple[str, ...]  # function names used


def _tree_arrays(forest: Any, index: Any) -> tuple[np.ndarray, ...]:
    fields = ("opcode", "value", "size", "output")
    if not all(hasattr(forest, f) for f in fields):
        raise ArgumentError(
            f"forest must be a Forest (fields opcode, value, size, output), got {type(forest).__name__}"
        )
    arrays = [np.asarray(getattr(forest, f)) for f in fields]
    batch = arrays[0].shape[:-1]
    if arrays[0].ndim < 1 or any(a.shape != arrays[0].shape for a in arrays):
        raise ArgumentError(
            f"forest fields must share one shape [..., max_len], got {[a.shape for a in arrays]}"
        )
    if not batch:
        if not (isinstance(index, tuple) and not index):
            check_int(index, "index", minimum=-1, maximum=0)  # a single tree: no leading axes
        return tuple(arrays)
    idx = index if isinstance(index, tuple) else (index,)
    if len(idx) != len(batch):
        raise ArgumentError(
            f"index must give {len(batch)} tree indices for a forest of shape {batch}, got {index!r}"
        )
    for i, n in zip(idx, batch):
        check_int(i, "index", minimum=-n, maximum=n - 1)
    return tuple(a[tuple(int(i) for i in idx)] for a in arrays)


def _has_modi(output: np.ndarray, length: int) -> bool:
    return bool(np.any(output[:length] >= 0))


def _resolve_n_outputs(forest: Any, n_outputs: Any, output: np.ndarray, length: int, index: Any) -> int:
    if n_outputs is not None:
        return check_int(n_outputs, "n_outputs", minimum=1)
    known = getattr(forest, "n_outputs", None)
    if isinstance(known, (int, np.integer)) and not isinstance(known, bool):
        return int(known)
    if _has_modi(output, length):
        used = sorted({int(k) for k in output[:length] if k >= 0})
        raise ArgumentError(
            f"n_outputs is needed: tree {index!r} has Modi (multi-output) nodes writing to outputs {used}; "
            "pass the n_outputs the GP was built with (n_outputs=1 evaluates the root instead)"
        )
    return 1


def _program(forest: Any, function_set: Any, index: Any, n_outputs: Any) -> _Program:
    if not isinstance(function_set, FunctionSet):
        raise ArgumentError(f"function_set must be a FunctionSet, got {type(function_set).__name__}")
    opcode, value, size, output = _tree_arrays(forest, index)
    one = Forest(opcode[None], value[None], size[None], output[None])
    try:
        one.check(function_set)
    except ValueError as err:
        raise ArgumentError(f"forest: tree {index!r} is malformed: {err}") from None
    length = int(size[0])
    n_out = _resolve_n_outputs(forest, n_outputs, output, length, index)
    arity = function_set.arity
    steps: list[_Step] = []
    has_var = np.zeros(length, bool)
    stack: list[tuple[int, bool]] = [(0, False)]
    n_vars = 0
    while stack:  # iterative post-order: a tree of any depth
        i, expanded = stack.pop()
        o = int(opcode[i])
        kids = []
        j = i + 1
        for _ in range(int(arity[o])):
            kids.append(j)
            j += int(size[j])
        if not expanded and kids:
            stack.append((i, True))
            stack.extend((k, False) for k in reversed(kids))
            continue
        if o == VAR:
            has_var[i] = True
            n_vars = max(n_vars, int(value[i]) + 1)
        else:
            has_var[i] = any(has_var[k] for k in kids)
        steps.append(_Step(i, o, float(value[i]), tuple(kids), int(output[i]), bool(has_var[i])))
    names = tuple(sorted({function_set.name(s.opcode) for s in steps if s.opcode >= FIRST_FUNCTION}))
    return _Program(tuple(steps), n_out, n_vars, names)


def _run(program: _Program, leaf: Callable, apply: Callable, zero: Callable) -> list:
    """Fold the program: ``leaf(step)``, ``apply(step, children's passed values)``; returns the
    outputs (the root's value for one output, else the Modi sums, in the reference's order)."""
    multi = program.n_outputs > 1
    outs = [None] * program.n_outputs
    vals: dict[int, tuple[Any, Any]] = {}  # position -> (value, value passed to the parent)
    for s in program.steps:
        args = [vals.pop(k)[1] for k in s.kids]
        v = leaf(s) if s.opcode in (CONST, VAR) else apply(s, args)
        passed = v
        if multi and s.output >= 0:
            if s.output < program.n_outputs:
                prev = zero() if outs[s.output] is None else outs[s.output]
                outs[s.output] = prev + v
            passed = args[-1] if args else v
        vals[s.pos] = (v, passed)
    if not multi:
        return [vals[0][0]]
    return [zero() if o is None else o for o in outs]


def _check_X(X: Any, n_vars: int, xp: Any, dtype: Any) -> Any:
    if getattr(X, "ndim", None) is None:
        X = np.asarray(X)
    if X.ndim != 2:
        raise ArgumentError(f"X must be [n_points, n_vars], got shape {tuple(X.shape)}")
    if X.shape[1] < n_vars:
        raise ArgumentError(f"X has {X.shape[1]} columns but the tree reads x{n_vars - 1}")
    return xp.asarray(X, dtype)


# ---- JAX and NumPy callables ------------------------------------------------------------------------


def to_jax(
    forest: Any, function_set: FunctionSet, index: Any = 0, *, n_outputs: int | None = None
) -> Callable:
    """A jitted ``f(X)`` computing tree ``index`` of ``forest`` on every row of ``X``.

    Args:
        forest: a :class:`Forest` (``[pop, max_len]`` or a single tree ``[max_len]``).
        function_set: the :class:`FunctionSet` it was evolved with (raw or protected; custom
            functions are called as given).
        index: which tree (an int, negative from the end; a tuple for several leading axes).
        n_outputs: the GP's number of outputs. Default: the forest's own (a GP's decoded forest
            carries it), else 1 for a tree without Modi nodes; a tree with Modi nodes needs it.

    Returns:
        ``f(X [n, n_vars]) -> float32 [n]`` (``[n, n_outputs]`` when ``n_outputs > 1``), a
        ``jax.jit`` function (composable with ``vmap``/``grad``), computing every node with the set's
        own ``jnp`` functions: what :func:`evotensor.gp.evaluate` computes, up to XLA's float32
        rounding of transcendental functions and its flushing of subnormals to zero.

    Raises:
        ArgumentError: a bad ``index``, a malformed tree, a missing ``n_outputs``; when called, an
            ``X`` that is not 2-D or lacks a variable the tree reads.
    """
    program = _program(forest, function_set, index, n_outputs)
    functions = function_set.functions

    def f(X):
        X = _check_X(X, program.n_vars, jnp, jnp.float32)
        n = X.shape[0]

        def leaf(s):
            return X[:, int(s.value)] if s.opcode == VAR else jnp.full((n,), s.value, jnp.float32)

        def apply(s, args):
            fn = functions[s.opcode - FIRST_FUNCTION].fn
            return jnp.broadcast_to(jnp.asarray(fn(*args), jnp.float32), (n,))

        outs = _run(program, leaf, apply, lambda: jnp.zeros((n,), jnp.float32))
        return outs[0] if program.n_outputs == 1 else jnp.stack(outs, axis=1)

    return jax.jit(f)


def to_numpy(
    forest: Any,
    function_set: FunctionSet,
    index: Any = 0,
    *,
    n_outputs: int | None = None,
    dtype: Any = np.float32,
) -> Callable:
    """A plain NumPy ``f(X)`` computing tree ``index`` of ``forest`` on every row of ``X``.

    Args:
        forest, function_set, index, n_outputs: as in :func:`to_jax`.
        dtype: ``np.float32`` (default: every node through :meth:`FunctionSet.apply_numpy`, in the
            reference's order, so the result is bit-for-bit :func:`reference_eval`'s) or
            ``np.float64`` (the same formulas in double precision: closer to the real-number
            function, not bit-identical to the evaluator).

    Returns:
        ``f(X [n, n_vars]) -> dtype [n]`` (``[n, n_outputs]`` when ``n_outputs > 1``). Calling it
        needs only NumPy for the built-in functions (a custom function without a NumPy twin calls
        its ``jnp`` function).

    Raises:
        ArgumentError: as :func:`to_jax`, and a ``dtype`` other than float32/float64.
    """
    try:
        if dtype is None:
            raise TypeError
        dtype = np.dtype(dtype)
    except TypeError:
        raise ArgumentError(f"dtype must be np.float32 or np.float64, got {dtype!r}") from None
    dtype = check_choice(dtype, "dtype", _FLOAT_DTYPES)
    program = _program(forest, function_set, index, n_outputs)
    functions = function_set.functions

    def f(X):
        X = _check_X(X, program.n_vars, np, dtype)
        n = X.shape[0]

        def leaf(s):
            return X[:, int(s.value)].copy() if s.opcode == VAR else np.full(n, s.value, dtype)

        def apply(s, args):
            name = function_set.name(s.opcode)
            if dtype == np.float32:
                out = function_set.apply_numpy(name, *args)
            else:
                with np.errstate(all="ignore"):
                    out = functions[s.opcode - FIRST_FUNCTION].numpy_fn(*args)
            return np.broadcast_to(np.asarray(out, dtype), (n,))

        with np.errstate(all="ignore"):
            outs = _run(program, leaf, apply, lambda: np.zeros(n, dtype))
        return outs[0] if program.n_outputs == 1 else np.stack(outs, axis=1)

    return f


# ---- sympy ------------------------------------------------------------------------------------------


def _sympy_builtins(sp: Any, protected: bool) -> dict[str, Callable]:
    eps = sp.Float(SYMPY_EPS)
    clip = sp.Float(_EXP_CLIP)
    clipped = sp.exp(clip)  # a Float: exp(80)
    one, zero = sp.S.One, sp.S.Zero

    def cmp(rel, a, b):
        """A condition, left unevaluated unless both sides are numbers: sympy's evaluation of a
        relation between Piecewise expressions folds them into large ITE forms that lambdify
        cannot print for NumPy."""
        if not (a.is_number and b.is_number):
            return rel(a, b, evaluate=False)
        try:
            return rel(a, b, evaluate=True)
        except TypeError:  # a NaN or non-real operand: the evaluator's comparison is false
            return sp.false

    def pw(*pairs):
        return _piecewise(sp, pairs)

    raw = {
        "add": lambda a, b: a + b,
        "sub": lambda a, b: a - b,
        "mul": lambda a, b: a * b,
        "div": lambda a, b: a / b,
        "pow": lambda a, b: a**b,
        "max": sp.Max,
        "min": sp.Min,
        "lt": lambda a, b: pw((one, cmp(sp.Lt, a, b)), (zero, True)),
        "gt": lambda a, b: pw((one, cmp(sp.Gt, a, b)), (zero, True)),
        "sin": sp.sin,
        "cos": sp.cos,
        "tan": sp.tan,
        "sinh": sp.sinh,
        "cosh": sp.cosh,
        "tanh": sp.tanh,
        "exp": sp.exp,
        "log": sp.log,
        "sqrt": sp.sqrt,
        "abs": sp.Abs,
        "neg": lambda a: -a,
        "inv": lambda a: 1 / a,
        "if_then_else": lambda c, a, b: pw((a, cmp(sp.Gt, c, zero)), (b, True)),
    }
    if protected:
        raw.update(
            div=lambda a, b: pw((a / b, cmp(sp.Gt, sp.Abs(b), eps)), (one, True)),
            inv=lambda a: pw((1 / a, cmp(sp.Gt, sp.Abs(a), eps)), (zero, True)),
            log=lambda a: pw((sp.log(sp.Abs(a)), cmp(sp.Gt, sp.Abs(a), eps)), (zero, True)),
            sqrt=lambda a: sp.sqrt(sp.Abs(a)),
            pow=lambda a, b: pw(
                (one, sp.And(cmp(sp.Le, sp.Abs(a), eps), cmp(sp.Lt, b, zero))), (sp.Abs(a) ** b, True)
            ),
            exp=lambda a: pw((clipped, cmp(sp.Gt, a, clip)), (sp.exp(a), True)),
        )
    assert set(raw) == set(BUILTIN_NAMES)
    return raw


def _piecewise(sp: Any, pairs: Any) -> Any:
    """``Piecewise(*pairs)`` built unevaluated (see ``cmp`` in :func:`_sympy_builtins`), except that
    branches whose condition is a literal False are dropped and a literal True condition ends it."""
    kept = []
    for value, condition in pairs:
        if condition is sp.false:
            continue
        kept.append((value, condition))
        if condition is sp.true or condition is True:
            break
    if len(kept) == 1:
        return kept[0][0]
    return sp.Piecewise(*kept, evaluate=False)


def _sympy_number(sp: Any, v: float) -> Any:
    if math.isnan(v):
        return sp.nan
    if math.isinf(v):
        return sp.oo if v > 0 else -sp.oo
    return sp.Float(v)


def _check_sympy_functions(function_set: FunctionSet, sympy_functions: Any) -> dict[str, Callable]:
    if sympy_functions is None:
        return {}
    if not isinstance(sympy_functions, Mapping):
        raise ArgumentError(f"sympy_functions must be a mapping {{name: callable}}, got {sympy_functions!r}")
    custom = [n for n in function_set.names if n not in BUILTIN_NAMES]
    for name, fn in sympy_functions.items():
        if name not in custom:
            raise ArgumentError(
                f"sympy_functions[{name!r}]: not a custom function of the set (custom functions: {custom}; "
                "built-ins have their own faithful mapping)"
            )
        if not callable(fn):
            raise ArgumentError(f"sympy_functions[{name!r}] must be callable, got {fn!r}")
    return dict(sympy_functions)


def _faithful_sympy(program: _Program, function_set: FunctionSet, output: int, mapping: dict) -> Any:
    import sympy as sp

    builtins = _sympy_builtins(sp, function_set.protected)
    for name in program.names:
        if name not in builtins and name not in mapping:
            raise ArgumentError(
                f"the tree uses the custom function {name!r}, which has no sympy form; pass "
                f"sympy_functions={{{name!r}: <callable on sympy expressions>}}"
            )
    # variable-free subtrees: the float32 value the evaluator computes (one evaluation on one row),
    # and the value each passes to its parent (another one for a Modi node)
    folded: dict[int, float] = {}
    passed: dict[int, float] = {}

    def leaf(s):
        v = np.full(1, s.value, np.float32)
        folded[s.pos] = float(v[0])
        return v

    def apply(s, args):
        out = np.broadcast_to(function_set.apply_numpy(function_set.name(s.opcode), *args), (1,))
        folded[s.pos] = float(out[0])
        return out

    const_program = dataclasses.replace(program, steps=tuple(s for s in program.steps if not s.has_var))
    passed.update((k, float(v[0])) for k, v in _run_all(const_program, leaf, apply).items())

    symbols = {k: sp.Symbol(f"x{k}", real=True) for k in range(program.n_vars)}

    def sym_leaf(s):
        if s.opcode == VAR:
            return symbols[int(s.value)]
        return _sympy_number(sp, folded[s.pos])

    def sym_apply(s, args):
        if not s.has_var:
            return _sympy_number(sp, folded[s.pos])
        name = function_set.name(s.opcode)
        if not function_set.protected and name in ("div", "inv", "log") and args[-1].is_zero:
            # x/0, 1/0, log(0): sympy's unsigned zoo, which NumPy cannot compute; the evaluator's
            # value is a signed infinity (x/+0 = x*inf: +-inf, or NaN for x = 0)
            kid = s.kids[-1]
            sign = math.copysign(1.0, passed[kid]) if kid in passed else 1.0
            infinity = sp.oo if sign > 0 else -sp.oo
            return {"div": args[0] * infinity, "inv": infinity, "log": -sp.oo}[name]
        fn = mapping.get(name, builtins.get(name))
        try:
            value = sp.sympify(fn(*args))
        except (TypeError, ValueError, ArithmeticError, RecursionError):
            # sympy's automatic evaluation fails on some inputs (e.g. Max of a branch that is zoo)
            with sp.evaluate(False):
                value = sp.sympify(fn(*args))
        # an unsigned infinity inside a branch (1/Piecewise(..., (0, True))): the evaluator's
        # zeros there are +0, so its x/0 is x*inf
        return value.xreplace({sp.zoo: sp.oo}) if value.has(sp.zoo) else value

    expr = _run(program, sym_leaf, sym_apply, lambda: sp.S.Zero)[output]
    return expr.xreplace({sp.zoo: sp.nan})  # any other unsigned infinity: a NaN


def _run_all(program: _Program, leaf: Callable, apply: Callable) -> dict[int, Any]:
    """Compute every node of a program whose steps may be several disjoint subtrees (:func:`_run`
    without the outputs); returns the values the subtrees' roots pass up, by position."""
    multi = program.n_outputs > 1
    passed: dict[int, Any] = {}
    for s in program.steps:
        args = [passed.pop(k) for k in s.kids]
        v = leaf(s) if s.opcode in (CONST, VAR) else apply(s, args)
        passed[s.pos] = args[-1] if (multi and s.output >= 0 and args) else v
    return passed


def _with_timer(fn: Callable[[], Any], seconds: float) -> tuple[bool, Any]:
    """``(True, fn())`` stopped after ``seconds`` (``(True, None)`` then), or ``(False, None)`` without
    running ``fn`` where no timer can be set (:func:`evotensor.core.timeout.can_time_limit`)."""
    if not can_time_limit():
        return False, None
    try:
        return True, call_with_time_limit(fn, seconds)
    except TimeLimitExceeded:
        return True, None


def _sample_points(n_points: int, n_symbols: int) -> np.ndarray:
    """Fixed float64 test points: half in [-3, 3], half ``+-10**u`` with ``u`` in [-3, 3]."""
    rng = np.random.default_rng(20240611)
    small = rng.uniform(-3.0, 3.0, (n_points // 2, n_symbols))
    sign = np.where(rng.random((n_points - n_points // 2, n_symbols)) < 0.5, -1.0, 1.0)
    wide = sign * 10.0 ** rng.uniform(-3.0, 3.0, (n_points - n_points // 2, n_symbols))
    return np.concatenate([small, wide])


def _same_numbers(sp: Any, before: Any, after: Any) -> bool:
    """``after`` computes what ``before`` computes (NumPy float64, :data:`_CHECK_POINTS` fixed points):
    the same finite/non-finite pattern and finite values equal to 1e-6 relative. False where either
    cannot be evaluated numerically."""
    symbols = sorted(before.free_symbols | after.free_symbols, key=str)
    points = _sample_points(_CHECK_POINTS, len(symbols))
    try:
        with np.errstate(all="ignore"):
            values = []
            for e in (before, after):
                f = sp.lambdify(symbols, e, "numpy")
                v = np.asarray(f(*points.T), dtype=complex)
                v = np.where(np.abs(v.imag) > 0, np.nan, v.real)  # a complex value: NaN in float32 too
                values.append(np.broadcast_to(v, (len(points),)).astype(np.float64))
    except Exception:  # noqa: BLE001 - anything lambdify or NumPy cannot compute: keep `before`
        return False
    a, b = values
    finite = np.isfinite(a)
    if not np.array_equal(finite, np.isfinite(b)):
        return False
    scale = np.maximum(np.abs(a[finite]), 1.0)
    return bool(np.all(np.abs(a[finite] - b[finite]) <= 1e-6 * scale))


_CHECK_POINTS = 64


def _simplify_keeping_piecewise(sp: Any, expr: Any) -> Any:
    """``sympy.simplify`` of the raw parts only: every ``Piecewise`` stays a ``Piecewise`` with the
    same conditions and branches in the same order (each branch and each side of each condition is
    simplified on its own); between them, the Piecewise subterms are opaque real symbols. A
    simplified part replaces the original only if it computes the same numbers at fixed sample
    points (:func:`_same_numbers`): sympy's complex-analytic rewrites (e.g. ``Abs(x)**-1.5 ->
    Abs(x**-1.5)``, NaN for ``x < 0`` in NumPy) or domain extensions (``sqrt(x)**2 -> x``) are refused."""

    def simplify(e):
        if e.is_Atom:
            return e
        if isinstance(e, sp.Piecewise):
            return _piecewise(sp, [(simplify(v), condition(c)) for v, c in e.args])
        opaque: dict[Any, Any] = {}

        def hide(x):
            if isinstance(x, sp.Piecewise):
                d = sp.Dummy(real=True)
                opaque[d] = simplify(x)
                return d
            if x.is_Atom:
                return x
            return x.func(*[hide(a) for a in x.args])

        hidden = hide(e)
        try:
            candidate = sp.simplify(hidden)
        except TimeLimitExceeded:
            raise
        except Exception:  # noqa: BLE001 - sympy fails on some inputs (e.g. "zoo is not comparable")
            candidate = hidden
        if candidate != hidden and not _same_numbers(sp, hidden, candidate):
            candidate = hidden
        return candidate.xreplace(opaque)

    def condition(c):
        if isinstance(c, sp.core.relational.Relational):
            return c.func(simplify(c.lhs), simplify(c.rhs), evaluate=False)
        if isinstance(c, (sp.And, sp.Or, sp.Not)):
            return c.func(*[condition(a) for a in c.args])
        return c

    return simplify(expr)


def to_sympy(
    forest: Any,
    function_set: FunctionSet,
    index: Any = 0,
    output: int = 0,
    simplify: bool = True,
    *,
    n_outputs: int | None = None,
    sympy_functions: Mapping[str, Callable] | None = None,
    timeout: float = _DEFAULT_TIMEOUT,
) -> Any:
    """Tree ``index`` of ``forest`` (its output ``output``) as a sympy expression over the real
    symbols ``x0, x1, ...``, faithful to the evaluated semantics (module docstring).

    Args:
        forest, function_set, index, n_outputs: as in :func:`to_jax`.
        output: which output of a multi-output tree (``0 <= output < n_outputs``): the sum of its
            Modi nodes' values (0 if none writes to it).
        simplify: apply ``sympy.simplify`` to the raw parts of the expression, at most ``timeout``
            seconds. Every ``Piecewise`` (a protected operator, ``lt gt if_then_else``) is kept
            with its conditions and branches, each simplified on its own, so the thresholds stay
            exactly the evaluator's; between them, sympy's simplification is exact real algebra
            (it may remove a removable singularity, e.g. ``x0*x1/x1 -> x0``, where the evaluator
            gives NaN). Past ``timeout`` (a SIGALRM timer: the main thread of a POSIX process) the
            unsimplified expression is returned; where no timer can be set, only expressions of at
            most 40 operations are simplified.
        sympy_functions: ``{name: callable}``, the sympy form of the set's custom functions (a
            callable of sympy expressions returning one). A tree using a custom function without an
            entry is refused.
        timeout: seconds (> 0) of simplification at most.

    Returns:
        A sympy expression. ``sympy.lambdify`` of it (with ``numpy``) reproduces the evaluator to
        float32 rounding on points away from the thresholds and exactly in the protected branches.

    Raises:
        ArgumentError: a bad ``index``/``output``/``n_outputs``/``timeout``, a malformed tree, a
            custom function without a ``sympy_functions`` entry, a bad ``sympy_functions``.
    """
    import sympy as sp

    program = _program(forest, function_set, index, n_outputs)
    output = check_int(output, "output", minimum=0, maximum=program.n_outputs - 1)
    timeout = check_positive(timeout, "timeout")
    if not isinstance(simplify, (bool, np.bool_)):
        raise ArgumentError(f"simplify must be a bool, got {simplify!r}")
    mapping = _check_sympy_functions(function_set, sympy_functions)
    expr = _faithful_sympy(program, function_set, output, mapping)
    if not simplify or expr.is_Atom:
        return expr
    timed, simplified = _with_timer(lambda: _simplify_keeping_piecewise(sp, expr), timeout)
    if not timed and sp.count_ops(expr) <= _UNTIMED_MAX_OPS:
        simplified = _simplify_keeping_piecewise(sp, expr)
    return expr if simplified is None else simplified


def to_string(forest: Any, function_set: FunctionSet, index: Any = 0, precision: int = 3) -> str:
    """Tree ``index`` as an infix string (:meth:`Forest.to_infix`: constants to ``precision``
    significant digits, ``x0, x1, ...``, Modi nodes as ``out[k]=<expr>``).

    Raises:
        ArgumentError: a bad ``index`` or ``precision``, a malformed tree.
    """
    precision = check_int(precision, "precision", minimum=1)
    _program(forest, function_set, index, 1)  # checks the tree and the index
    opcode, value, size, output = _tree_arrays(forest, index)
    return Forest(opcode, value, size, output).to_infix(function_set, precision)


def to_latex(
    forest: Any,
    function_set: FunctionSet,
    index: Any = 0,
    output: int = 0,
    simplify: bool = True,
    *,
    n_outputs: int | None = None,
    sympy_functions: Mapping[str, Callable] | None = None,
    timeout: float = _DEFAULT_TIMEOUT,
    precision: int | None = None,
) -> str:
    """``sympy.latex`` of :func:`to_sympy` (same arguments); variables print as ``x_{0}, x_{1}, ...``.

    Args:
        precision: print constants with this many significant digits (display only; the thresholds
            are printed as they are); None: every digit of their float32 values.
    """
    import sympy as sp

    if precision is not None:
        precision = check_int(precision, "precision", minimum=1)
    expr = to_sympy(
        forest,
        function_set,
        index,
        output,
        simplify,
        n_outputs=n_outputs,
        sympy_functions=sympy_functions,
        timeout=timeout,
    )
    if precision is not None:
        eps = sp.Float(SYMPY_EPS)
        expr = expr.xreplace({f: sp.Float(f, precision) for f in expr.atoms(sp.Float) if f != eps})
    return sp.latex(expr)
