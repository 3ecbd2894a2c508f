"""The GP function set: opcodes, arities, and one semantics shared by every evaluation path.

Opcodes are ``int32``. Three are reserved for non-functions::

    PAD = 0     padding after a tree's last node (size 0)
    CONST = 1   a constant; the node's value is the constant
    VAR = 2     an input variable; the node's value is the variable index (stored as a float)

Function opcodes start at :data:`FIRST_FUNCTION` (3), in the order of the names given to
:class:`FunctionSet`.

Built-in functions (arity in brackets)::

    add sub mul div pow max min lt gt   [2]
    sin cos tan sinh cosh tanh exp log sqrt abs neg inv   [1]
    if_then_else   [3]   cond > 0 ? a : b
    lt / gt        return 1.0 when a < b (a > b), else 0.0

Raw semantics (the default) is exactly the math function in float32: ``div(1, 0) = inf``,
``log(-1) = nan``, ``sqrt(-1) = nan``, ``pow(-2, 0.5) = nan``; ``max``/``min`` propagate NaN; a NaN
condition of ``if_then_else`` selects ``b`` (``nan > 0`` is false). Non-finite predictions make a
tree's fitness the worst value, so an evolved expression means exactly what it prints.

Protected semantics (``protected=True``, opt-in, gplearn's 0.001 thresholds) removes the domain
singularities; everything not listed is unchanged (overflow, e.g. in ``mul`` or ``cosh``, stays
possible)::

    div(a, b) = a / b if |b| > 0.001 else 1
    inv(a)    = 1 / a if |a| > 0.001 else 0           (gplearn's protected inverse)
    log(a)    = log|a| if |a| > 0.001 else 0
    sqrt(a)   = sqrt|a|
    pow(a, b) = |a| ** b, except 1 where |a| <= 0.001 and b < 0
    exp(a)    = exp(min(a, 80))                        (finite in float32)

Every evaluation path (:func:`evotensor.gp.reference.reference_eval`, the JAX path, the Pallas
kernel) computes these functions through this module, so the semantics is defined once:
:meth:`FunctionSet.apply` (branch-free ``jnp`` select, usable under ``vmap`` and inside a Pallas
kernel) and :meth:`FunctionSet.apply_numpy` (the slow NumPy reference). ``sin cos tan`` also
have vectorizable fast forms (:meth:`FunctionSet.apply_fast`, |error| < 1e-7 for |x| < 3e6) that
the CPU evaluator uses, falling back to the exact functions outside that domain.

Example::

    fs = FunctionSet(("add", "mul", "sin"), custom=None)
    fs.opcode("mul")        # 4
    fs.arity[fs.opcode("sin")]  # 1
    fs.apply(jnp.int32(4), jnp.array([2.0, 3.0, 0.0]))  # 6.0
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

PAD = 0
CONST = 1
VAR = 2
FIRST_FUNCTION = 3
_RESERVED = ("pad", "const", "var")

_EPS = 0.001  # gplearn's protection threshold
_EXP_CLIP = 80.0  # exp(80) ~ 5.5e34 < float32 max


# ---- protected helpers, written once against an array namespace (jnp or np) --------------------


def _p_div(xp, a, b):
    ok = xp.abs(b) > _EPS
    return xp.where(ok, a / xp.where(ok, b, 1.0), 1.0)


def _p_inv(xp, a):
    ok = xp.abs(a) > _EPS
    return xp.where(ok, 1.0 / xp.where(ok, a, 1.0), 0.0)


def _p_log(xp, a):
    ok = xp.abs(a) > _EPS
    return xp.where(ok, xp.log(xp.where(ok, xp.abs(a), 1.0)), 0.0)


def _p_pow(xp, a, b):
    singular = (xp.abs(a) <= _EPS) & (b < 0)
    return xp.where(singular, 1.0, xp.power(xp.where(singular, 1.0, xp.abs(a)), b))


def _p_exp(xp, a):
    # a select rather than minimum(a, 80): Triton's float min returns the non-NaN operand
    return xp.exp(xp.where(a > _EXP_CLIP, _EXP_CLIP, a))


# ---- fast sin / cos / tan for the CPU evaluator -----------------------------------------------------
# XLA's CPU sin/cos are scalar library calls (~10x the cost of an add per element), and a
# select-all tree evaluator computes every function of the set at every node. The evaluator can use
# these vectorizable forms instead: octant reduction x = j * pi/4 + r, then Cephes' single-precision
# minimax polynomials for sin r and cos r. The reduction is exact enough for |x| < 3e6: pi/4 is
# split into four 12-bit chunks and j into two 12-bit halves, so every product j_k * chunk is exact
# in float32, and the differences are accumulated with error-free TwoSum steps (|error| ~ 1e-7).
# Non-finite input gives nan. For finite |x| >= 3e6 the caller must fall back to the exact function;
# `Function.fast_ok` says where the fast form is valid.

_TRIG_LIMIT = 3.0e6  # j = round(|x| * 4 / pi) < 2**22
_FOUR_OVER_PI = 1.27323954473516


def _pio4_chunks(n_chunks: int = 4, bits: int = 12) -> tuple[float, ...]:
    """pi/4 as a sum of float32 numbers with ``bits`` significant bits each (signed)."""
    from decimal import Decimal, getcontext

    getcontext().prec = 80
    rest = Decimal("3.14159265358979323846264338327950288419716939937510582097494459230781640628") / 4
    chunks = []
    for _ in range(n_chunks):
        exponent = np.frexp(float(rest))[1]
        chunk = round(float(rest) * 2.0 ** (bits - exponent)) * 2.0 ** (exponent - bits)
        chunks.append(chunk)
        rest -= Decimal(chunk)
    return tuple(chunks)


_PIO4 = _pio4_chunks()


def _two_sum(a, b):
    """Error-free a + b = s + e (Knuth)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _sincos_reduced(x):
    """(sin x, cos x) for |x| < 3e6 (float32, ~1e-7 absolute error); nan for non-finite x."""
    ax = jnp.abs(x)
    j = jnp.where(ax < _TRIG_LIMIT, ax * _FOUR_OVER_PI, 0.0).astype(jnp.int32)
    j = j + (j & 1)  # round up to an even octant
    y_hi = (j & ~4095).astype(jnp.float32)  # both halves have <= 12 significant bits
    y_lo = (j & 4095).astype(jnp.float32)
    p1, p2, p3, p4 = _PIO4
    # the products are exact; the two leading chunks' differences are accumulated error-free, the
    # tail (|tail| < 2e-3) needs no compensation
    r, err = ax, jnp.zeros_like(ax)
    for product in (y_hi * p1, y_lo * p1, y_hi * p2, y_lo * p2):
        r, e = _two_sum(r, -product)
        err = err + e
    tail = (y_hi * p3 + y_lo * p3) + (y_hi * p4 + y_lo * p4)
    z = r + (err - tail)
    zz = z * z
    sin_poly = ((-1.9515295891e-4 * zz + 8.3321608736e-3) * zz - 1.6666654611e-1) * zz * z + z
    cos_poly = ((2.443315711809948e-5 * zz - 1.388731625493765e-3) * zz + 4.166664568298827e-2) * zz * zz
    cos_poly = cos_poly - 0.5 * zz + 1.0
    q = (j >> 1) & 3  # quadrant 0..3 of |x|
    swap = (q & 1) == 1
    s = jnp.where(swap, cos_poly, sin_poly)
    c = jnp.where(swap, sin_poly, cos_poly)
    s = jnp.where((q >= 2) != (x < 0), -s, s)  # sin is odd
    s = jnp.where(x == 0, x, s)  # keep sin(+-0) = +-0
    c = jnp.where((q == 1) | (q == 2), -c, c)
    finite = jnp.isfinite(x)  # sin/cos of inf or nan is nan
    return jnp.where(finite, s, jnp.nan), jnp.where(finite, c, jnp.nan)


def _fast_sin(a):
    return _sincos_reduced(a)[0]


def _fast_cos(a):
    return _sincos_reduced(a)[1]


def _fast_tan(a):
    s, c = _sincos_reduced(a)
    return s / c


def _trig_ok(a):
    return (jnp.abs(a) < _TRIG_LIMIT) | ~jnp.isfinite(a)


@dataclasses.dataclass(frozen=True)
class _Builtin:
    arity: int
    symbol: str
    infix: bool
    raw: Callable  # raw(xp, *args)
    protected: Callable | None = None  # protected(xp, *args); None: same as raw
    fast: Callable | None = None  # jnp fast form valid where _trig_ok (see above)
    cheap: bool = True  # a few vector instructions per element (see Function.cheap)


# max / min propagate NaN explicitly: XLA's and NumPy's do, but the Pallas kernel's (Triton's
# minnumf / maxnumf) return the non-NaN operand.


def _max(xp, a, b):
    return xp.where(xp.isnan(a) | xp.isnan(b), a + b, xp.maximum(a, b))


def _min(xp, a, b):
    return xp.where(xp.isnan(a) | xp.isnan(b), a + b, xp.minimum(a, b))


def _lt(xp, a, b):
    return xp.where(a < b, 1.0, 0.0)


def _gt(xp, a, b):
    return xp.where(a > b, 1.0, 0.0)


_BUILTINS: dict[str, _Builtin] = {
    "add": _Builtin(2, "+", True, lambda xp, a, b: a + b),
    "sub": _Builtin(2, "-", True, lambda xp, a, b: a - b),
    "mul": _Builtin(2, "*", True, lambda xp, a, b: a * b),
    "div": _Builtin(2, "/", True, lambda xp, a, b: a / b, _p_div),
    "pow": _Builtin(2, "**", True, lambda xp, a, b: xp.power(a, b), _p_pow, cheap=False),
    "max": _Builtin(2, "max", False, _max),
    "min": _Builtin(2, "min", False, _min),
    "lt": _Builtin(2, "<", True, _lt),
    "gt": _Builtin(2, ">", True, _gt),
    "sin": _Builtin(1, "sin", False, lambda xp, a: xp.sin(a), fast=_fast_sin, cheap=False),
    "cos": _Builtin(1, "cos", False, lambda xp, a: xp.cos(a), fast=_fast_cos, cheap=False),
    "tan": _Builtin(1, "tan", False, lambda xp, a: xp.tan(a), fast=_fast_tan, cheap=False),
    "sinh": _Builtin(1, "sinh", False, lambda xp, a: xp.sinh(a), cheap=False),
    "cosh": _Builtin(1, "cosh", False, lambda xp, a: xp.cosh(a), cheap=False),
    "tanh": _Builtin(1, "tanh", False, lambda xp, a: xp.tanh(a), cheap=False),
    "exp": _Builtin(1, "exp", False, lambda xp, a: xp.exp(a), _p_exp, cheap=False),
    "log": _Builtin(1, "log", False, lambda xp, a: xp.log(a), _p_log, cheap=False),
    "sqrt": _Builtin(1, "sqrt", False, lambda xp, a: xp.sqrt(a), lambda xp, a: xp.sqrt(xp.abs(a))),
    "abs": _Builtin(1, "abs", False, lambda xp, a: xp.abs(a)),
    "neg": _Builtin(1, "neg", False, lambda xp, a: -a),
    "inv": _Builtin(1, "inv", False, lambda xp, a: 1.0 / a, _p_inv),
    "if_then_else": _Builtin(3, "if_then_else", False, lambda xp, c, a, b: xp.where(c > 0, a, b)),
}

BUILTIN_NAMES: tuple[str, ...] = tuple(_BUILTINS)


@dataclasses.dataclass(frozen=True)
class Function:
    """One function of a set, as the evaluators inline it.

    Attributes:
        opcode: its ``int32`` opcode.
        name: its name.
        arity: 1, 2 or 3.
        fn: ``jnp``-traceable ``fn(*args) -> value``, elementwise on float32 arrays of equal shape.
        numpy_fn: the same semantics on float32 NumPy arrays (the reference).
        fast_fn: optional cheaper ``jnp`` form, equal to ``fn`` within float32 rounding where
            ``fast_ok(*args)`` holds (``sin cos tan``: vectorizable polynomials, valid for
            ``|x| < 3e6``); None if ``fn`` is already cheap.
        fast_ok: the domain of ``fast_fn`` (elementwise bool), or None.
        cheap: True if ``fn`` compiles to a few vector instructions per element (``+ - * /``,
            ``max min abs neg inv sqrt``, comparisons, ``if_then_else``). The CPU evaluator computes
            cheap functions for every node and the others (transcendental functions, ``pow``, custom
            functions) only for the trees of a block whose node needs one (see
            :mod:`evotensor.gp.jax_evaluator`); the semantics is the same either way.
    """

    opcode: int
    name: str
    arity: int
    fn: Callable
    numpy_fn: Callable
    fast_fn: Callable | None = None
    fast_ok: Callable | None = None
    cheap: bool = False


def _bind(f: Callable, xp) -> Callable:
    return lambda *args: f(xp, *args)


def _numpy_of_custom(fn: Callable) -> Callable:
    def numpy_fn(*args):
        return np.asarray(fn(*(jnp.asarray(a, jnp.float32) for a in args)), np.float32)

    return numpy_fn


class FunctionSet:
    """An ordered set of functions with explicit arities; the opcode table of a forest.

    Args:
        names: function names in opcode order (opcode ``3 + position``). Built-ins are listed in
            :data:`BUILTIN_NAMES`; custom functions must also be listed here.
        protected: use the protected (gplearn-style) variants of ``div inv log sqrt pow exp``
            (see the module docstring). Default False: raw math semantics.
        custom: ``{name: (arity, fn)}`` or ``{name: (arity, fn, numpy_fn)}``. ``fn`` is a
            ``jnp``-traceable elementwise function of ``arity`` float32 arrays; ``numpy_fn`` (optional)
            is its NumPy twin for the reference interpreter (default: ``fn`` called on NumPy input
            and converted back).

    Attributes:
        names: ``tuple[str, ...]`` function names in opcode order.
        arity: ``np.ndarray int32 [n_opcodes]``, 0 for PAD/CONST/VAR.
        max_arity: largest function arity (1..3).
        n_opcodes: ``3 + len(names)``.
        symbols: ``tuple[str, ...] [n_opcodes]`` printing symbols ("+", "sin", ...); PAD/CONST/VAR
            print as "pad", "const", "var".
        functions: ``tuple[Function, ...]`` in opcode order (for kernels that inline them).
        protected: whether the protected variants are used.

    Raises:
        ValueError: empty ``names``, unknown or duplicated name, a custom name that clashes with a
            built-in or a reserved name, a custom arity outside 1..3, a custom entry not in ``names``.

    A ``FunctionSet`` is immutable and hashable (usable as a static argument of ``jax.jit``).
    """

    def __init__(
        self,
        names: Sequence[str] = ("add", "sub", "mul", "div"),
        protected: bool = False,
        custom: Mapping[str, tuple] | None = None,
    ):
        if isinstance(names, str):
            raise ValueError(f"names must be a sequence of function names, got the string {names!r}")
        names = tuple(names)
        if not names:
            raise ValueError("names must list at least one function")
        custom = dict(custom or {})
        seen: set[str] = set()
        for n in names:
            if not isinstance(n, str):
                raise ValueError(f"names must be strings, got {n!r}")
            if n in seen:
                raise ValueError(f"function name {n!r} appears twice in names")
            seen.add(n)
        for n, spec in custom.items():
            if n in _BUILTINS or n in _RESERVED:
                raise ValueError(f"custom function name {n!r} clashes with a built-in or reserved name")
            if n not in seen:
                raise ValueError(f"custom function {n!r} is not listed in names={names}")
            if not isinstance(spec, tuple) or len(spec) not in (2, 3):
                raise ValueError(f"custom[{n!r}] must be (arity, fn) or (arity, fn, numpy_fn), got {spec!r}")
            arity = spec[0]
            if isinstance(arity, bool) or not isinstance(arity, (int, np.integer)) or not 1 <= arity <= 3:
                raise ValueError(f"custom[{n!r}] arity must be an int in 1..3, got {arity!r}")
            if not callable(spec[1]) or (len(spec) == 3 and not callable(spec[2])):
                raise ValueError(f"custom[{n!r}] functions must be callable")
        for n in names:
            if n in _RESERVED:
                raise ValueError(f"{n!r} is a reserved opcode name, not a function")
            if n not in _BUILTINS and n not in custom:
                raise ValueError(
                    f"unknown function name {n!r}; built-ins are {BUILTIN_NAMES}, others go in `custom`"
                )

        self.names = names
        self.protected = bool(protected)
        self._custom_key = tuple((n, int(s[0]), id(s[1])) for n, s in sorted(custom.items()))
        self._custom = custom  # keep the callables alive (their ids are in the hash key)
        functions = []
        symbols = list(_RESERVED)
        infix = [False, False, False]
        for i, n in enumerate(names):
            op = FIRST_FUNCTION + i
            if n in _BUILTINS:
                b = _BUILTINS[n]
                f = b.protected if (self.protected and b.protected is not None) else b.raw
                fast = (b.fast, _trig_ok) if b.fast is not None else (None, None)
                functions.append(Function(op, n, b.arity, _bind(f, jnp), _bind(f, np), *fast, cheap=b.cheap))
                symbols.append(b.symbol)
                infix.append(b.infix)
            else:
                spec = custom[n]
                numpy_fn = spec[2] if len(spec) == 3 else _numpy_of_custom(spec[1])
                functions.append(Function(op, n, int(spec[0]), spec[1], numpy_fn))
                symbols.append(n)
                infix.append(False)
        self.functions: tuple[Function, ...] = tuple(functions)
        self.symbols: tuple[str, ...] = tuple(symbols)
        self._infix = tuple(infix)
        self.n_opcodes = FIRST_FUNCTION + len(names)
        arity = np.zeros(self.n_opcodes, np.int32)
        for f in functions:
            arity[f.opcode] = f.arity
        arity.setflags(write=False)
        self.arity = arity
        self.max_arity = int(arity.max())
        self._index = {f.name: f.opcode for f in functions}

    def __reduce__(self):
        """Pickled as its arguments (its built-ins are bound in closures, which do not pickle): a set
        pickles whenever its custom functions do (module-level ones, not lambdas)."""
        return (FunctionSet, (self.names, self.protected, self._custom or None))

    # ---- lookup ---------------------------------------------------------------------------------

    def opcode(self, name: str) -> int:
        """Opcode of a function name (or of "pad"/"const"/"var")."""
        if name in _RESERVED:
            return _RESERVED.index(name)
        try:
            return self._index[name]
        except KeyError:
            raise ValueError(f"function {name!r} is not in this set {self.names}") from None

    def name(self, opcode: int) -> str:
        """Name of an opcode ("pad", "const", "var" for the reserved ones)."""
        op = int(opcode)
        if not 0 <= op < self.n_opcodes:
            raise ValueError(f"opcode {op} is outside 0..{self.n_opcodes - 1}")
        return _RESERVED[op] if op < FIRST_FUNCTION else self.names[op - FIRST_FUNCTION]

    def is_infix(self, opcode: int) -> bool:
        """True for binary operators printed between their operands (+ - * / ** < >)."""
        op = int(opcode)
        if not 0 <= op < self.n_opcodes:
            raise ValueError(f"opcode {op} is outside 0..{self.n_opcodes - 1}")
        return self._infix[op]

    @property
    def function_opcodes(self) -> np.ndarray:
        """``int32 [len(names)]`` the function opcodes."""
        return np.arange(FIRST_FUNCTION, self.n_opcodes, dtype=np.int32)

    # ---- semantics -------------------------------------------------------------------------------

    def apply_unpacked(self, opcode, a, b=None, c=None):
        """Like :meth:`apply` with the arguments given separately (``b``/``c`` may be None if unused).

        Every function of the set is computed and the result selected by ``opcode`` (branch-free,
        vmappable, Pallas-friendly). Non-function opcodes (PAD/CONST/VAR) give 0.
        """
        return self._select(opcode, a, b, c, fast=False)[0]

    def apply_fast(self, opcode, a, b=None, c=None):
        """:meth:`apply_unpacked` with the functions' fast forms, and where they were invalid.

        Returns:
            ``(value, needs_exact)``: ``needs_exact`` is an elementwise bool array, True where the
            selected function's argument was outside its fast form's domain (there ``value`` is
            not to be used; the caller recomputes with :meth:`apply_unpacked`; the CPU evaluator
            does so per block of trees and rows). Elementwise, so a loop can OR it into its
            carry without a reduction per step.
        """
        return self._select(opcode, a, b, c, fast=True)

    def _select(self, opcode, a, b, c, fast):
        a = jnp.asarray(a, jnp.float32)
        b = jnp.zeros_like(a) if b is None else jnp.asarray(b, jnp.float32)
        c = jnp.zeros_like(a) if c is None else jnp.asarray(c, jnp.float32)
        return select_function(self.functions, jnp.asarray(opcode, jnp.int32), (a, b, c), fast)

    def apply(self, opcode, args):
        """Value of function ``opcode`` on ``args``.

        Args:
            opcode: ``int32`` scalar or array broadcastable against ``args[..., 0]``.
            args: ``float32 [..., 3]``; argument ``j`` is ``args[..., j]`` (unused ones ignored).

        Returns:
            ``float32 [...]``; 0 where ``opcode`` is not a function opcode.
        """
        args = jnp.asarray(args, jnp.float32)
        if args.ndim == 0 or args.shape[-1] != 3:
            raise ValueError(f"args must have a trailing axis of size 3, got shape {args.shape}")
        return self.apply_unpacked(opcode, args[..., 0], args[..., 1], args[..., 2])

    def apply_numpy(self, name: str, *args) -> np.ndarray:
        """Reference semantics in NumPy float32: ``apply_numpy("div", a, b)``.

        Args:
            name: a function name of this set.
            *args: exactly ``arity`` float arrays (or scalars) of broadcastable shapes.
        """
        op = self.opcode(name)
        if op < FIRST_FUNCTION:
            raise ValueError(f"{name!r} is not a function")
        f = self.functions[op - FIRST_FUNCTION]
        if len(args) != f.arity:
            raise ValueError(f"function {name!r} takes {f.arity} arguments, got {len(args)}")
        args = tuple(np.asarray(a, np.float32) for a in args)
        with np.errstate(all="ignore"):
            return np.asarray(f.numpy_fn(*args), np.float32)

    # ---- identity (a static jit argument) ---------------------------------------------------------

    def _key(self):
        return (self.names, self.protected, self._custom_key)

    def __eq__(self, other):
        return isinstance(other, FunctionSet) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        extra = ", protected=True" if self.protected else ""
        return f"FunctionSet({self.names!r}{extra})"


def select_function(functions, opcode, args, fast: bool):
    """Compute each of ``functions`` on ``args`` and select the one named by ``opcode`` (0 elsewhere).

    Args:
        functions: the :class:`Function` s to compute (a set's, or a subset of it).
        opcode: int array, broadcastable against the arguments.
        args: ``(a, b, c)`` float32 arrays (a function of arity ``k`` reads the first ``k``).
        fast: use the functions' fast forms where they have one.

    Returns:
        ``(value, needs_exact)``: ``needs_exact`` is True where the selected function's argument
        left its fast form's domain (only with ``fast``).
    """
    a = args[0]
    out = jnp.zeros(jnp.broadcast_shapes(a.shape, opcode.shape), jnp.float32)
    needs_exact = jnp.zeros(out.shape, bool)
    for f in functions:
        selected = opcode == f.opcode
        if fast and f.fast_fn is not None:
            value = f.fast_fn(*args[: f.arity])
            needs_exact = needs_exact | (selected & ~f.fast_ok(*args[: f.arity]))
        else:
            value = f.fn(*args[: f.arity])
        out = jnp.where(selected, value.astype(jnp.float32), out)
    return out, needs_exact


def table_lookup(table: np.ndarray | Sequence[float], index: jax.Array) -> jax.Array:
    """``jnp.asarray(table)[index]`` for a small constant ``table [n]`` (e.g. the arity of every
    opcode) and integer ``index [...]``, with the same results for every index (negative ones
    counted from the end, the rest clamped into ``[0, n)``, as JAX's indexing does), by comparisons
    on the runs of equal entries instead of a gather: elementwise, so XLA fuses it into its
    consumers, where on a CPU a gather from the table costs a kernel of its own per call site."""
    t = np.asarray(table)
    if t.ndim != 1 or not 0 < t.shape[0] <= 256:
        return jnp.asarray(t)[index]
    n = t.shape[0]
    t = t.astype(jax.dtypes.canonicalize_dtype(t.dtype))  # the dtype jnp.asarray(table) has
    i = jnp.clip(jnp.where(index < 0, index + n, index), 0, n - 1)
    out = jnp.full(jnp.shape(index), t[0], t.dtype)
    start = 0
    for end in range(1, n + 1):  # one select per run of equal entries after the first
        if end == n or t[end] != t[start]:
            if t[start] != t[0]:
                out = jnp.where((i >= start) & (i < end), t[start], out)
            start = end
    return out
