"""An expression (a string or a sympy expression) as a GP tree in a given function set: the way to
seed a search with known or guessed models (PySR's ``guesses``).

:func:`parse_expression` returns the nested-tuple form of :meth:`evotensor.gp.Forest.from_tuples`.
sympy parses a string with the variables named ``x0, x1, ...`` (or the given ``names``), then the
expression is rewritten with the set's functions only:

* sums and products of several terms become left-nested binary ``add`` / ``mul`` (a term with a
  negative sign after the first becomes ``sub`` where the set has it; a factor with a negative
  integer power moves under ``div``);
* an integer power ``b**n`` (``2 <= n <= 8``) becomes products of ``b`` (``pow`` where the set has it
  and ``mul`` not), ``b**-n`` is ``1 / b**n``, ``b**(1/2)`` is ``sqrt``, any other power ``pow``;
* ``-t`` is ``neg`` where the set has it, else ``(-1) * t``;
* the functions ``sin cos tan sinh cosh tanh exp log sqrt abs`` keep their names; numbers (``pi``,
  ``E``, rationals) become float constants.

Anything the set cannot express raises an :class:`~evotensor.core.checks.ArgumentError` that names
it. The tree computes the expression with the set's (possibly protected) operators: a guess with a
division computes ``div``'s protected quotient where the denominator is near 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evotensor.core.checks import ArgumentError

__all__ = ["parse_expression"]

_UNARY = ("sin", "cos", "tan", "sinh", "cosh", "tanh", "exp", "log", "sqrt", "abs")
_MAX_EXPANDED_POWER = 8


def parse_expression(
    expression: Any, function_set: Any, n_vars: int, names: Sequence[str] | None = None
) -> tuple:
    """The tree of ``expression`` over ``function_set``'s functions (nested tuples).

    Args:
        expression: a string (parsed by sympy) or a sympy expression.
        function_set: :class:`evotensor.gp.FunctionSet` the tree may use.
        n_vars: variables ``0 .. n_vars - 1``.
        names: the variables' names in the expression (default ``x0 .. x{n_vars - 1}``).

    Returns:
        ``("add", ("var", 0), ("const", 2.0))``-style nested tuples
        (:meth:`~evotensor.gp.Forest.from_tuples`).
    """
    import sympy

    names = tuple(f"x{j}" for j in range(n_vars)) if names is None else tuple(str(n) for n in names)
    if len(names) != n_vars:
        raise ArgumentError(f"names must hold {n_vars} variable names, got {len(names)}")
    symbols = {name: sympy.Symbol(name) for name in names}
    if isinstance(expression, str):
        try:
            expr = sympy.sympify(expression, locals=symbols)
        except (sympy.SympifyError, SyntaxError, TypeError) as err:
            raise ArgumentError(f"expression {expression!r} does not parse: {err}") from None
    elif isinstance(expression, sympy.Basic):
        expr = expression
    else:
        raise ArgumentError(
            f"expression must be a string or a sympy expression, got {type(expression).__name__}"
        )
    return _Builder(function_set, {sym: j for j, sym in enumerate(symbols.values())}, expression).tree(expr)


class _Builder:
    def __init__(self, function_set: Any, variables: dict, source: Any):
        self.fs, self.variables, self.source = function_set, variables, source
        self.available = set(function_set.names)

    def fail(self, what: str) -> ArgumentError:
        return ArgumentError(
            f"expression {str(self.source)!r}: {what} cannot be written with the functions "
            f"{tuple(self.fs.names)}"
        )

    def has(self, name: str) -> bool:
        return name in self.available

    def call(self, name: str, *args: tuple) -> tuple:
        if not self.has(name):
            raise self.fail(f"{name!r}")
        return (name, *args)

    def tree(self, e: Any) -> tuple:
        import sympy

        if e.is_Symbol:
            if e not in self.variables:
                raise ArgumentError(
                    f"expression {str(self.source)!r}: unknown variable {str(e)!r} "
                    f"(the variables are {tuple(str(v) for v in self.variables)})"
                )
            return ("var", self.variables[e])
        if e.is_number:
            value = complex(e.evalf())
            if value.imag != 0 or value.real != value.real or abs(value.real) == float("inf"):
                raise ArgumentError(f"expression {str(self.source)!r}: {e} is not a finite real number")
            return ("const", float(value.real))
        if e.is_Add:
            return self.sum(list(e.as_ordered_terms()))
        if e.is_Mul:
            return self.product(e)
        if e.is_Pow:
            return self.power(e.base, e.exp)
        name = type(e).__name__.lower()
        if isinstance(e, sympy.Function) and name in _UNARY and len(e.args) == 1:
            return self.call(name, self.tree(e.args[0]))
        raise self.fail(f"{type(e).__name__} ({e})")

    def sum(self, terms: list) -> tuple:
        acc = self.tree(terms[0])
        for t in terms[1:]:
            if t.could_extract_minus_sign() and self.has("sub"):
                acc = ("sub", acc, self.tree(-t))
            else:
                acc = self.call("add", acc, self.tree(t))
        return acc

    def product(self, e: Any) -> tuple:
        coefficient, factors = e.as_coeff_mul()
        numerator, denominator = [], []
        for f in factors:
            if f.is_Pow and f.exp.is_Integer and f.exp < 0:
                denominator.append(f.base**-f.exp)
            else:
                numerator.append(f)
        negate = coefficient == -1 and bool(numerator or denominator)
        if coefficient != 1 and not negate:
            numerator.insert(0, coefficient)
        top = self.fold("mul", numerator) if numerator else ("const", 1.0)
        if denominator:
            top = self.call("div", top, self.fold("mul", denominator))
        if negate:
            return ("neg", top) if self.has("neg") else self.call("mul", ("const", -1.0), top)
        return top

    def fold(self, name: str, items: list) -> tuple:
        acc = self.tree(items[0])
        for item in items[1:]:
            acc = self.call(name, acc, self.tree(item))
        return acc

    def power(self, base: Any, exponent: Any) -> tuple:
        import sympy

        if exponent.is_Integer:
            n = int(exponent)
            if n < 0:
                return self.call("div", ("const", 1.0), self.power(base, sympy.Integer(-n)))
            if n == 0:
                return ("const", 1.0)
            if n == 1:
                return self.tree(base)
            if n <= _MAX_EXPANDED_POWER and self.has("mul"):
                b = self.tree(base)
                acc = b
                for _ in range(n - 1):
                    acc = ("mul", acc, b)
                return acc
        if exponent == sympy.Rational(1, 2) and self.has("sqrt"):
            return ("sqrt", self.tree(base))
        if exponent == sympy.Rational(-1, 2) and self.has("sqrt"):
            return self.call("div", ("const", 1.0), ("sqrt", self.tree(base)))
        if self.has("pow"):
            return ("pow", self.tree(base), self.tree(exponent))
        raise self.fail(f"the power {base}**{exponent}")
