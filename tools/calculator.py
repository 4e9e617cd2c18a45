"""The calculator tool: arithmetic and the math module's functions on numbers, evaluated by
simpleeval (a parser of one expression that runs nothing but the operators and functions it is
given, never ``eval``). It takes numbers only: no text, so no string formatting or repetition, no
attributes, no keyword arguments; and every value it computes on the way is bounded before it is
computed (a power, a product, round's digits) or as it comes (no whole number past MOST_DIGITS), so
that no expression needs more than microseconds. It still runs in a bounded child process
(builtin.py), for whatever this misses."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

LONGEST_EXPRESSION = 1000
# The most digits a whole number may reach (a power is refused before it is computed): far beyond
# any arithmetic a reply needs, and still computed and written in microseconds.
MOST_DIGITS = 4000


class CalculatorError(ValueError):
    """An expression the calculator does not take, and why."""


def _real_numbers(*values: Any) -> None:
    for value in values:
        if not isinstance(value, int | float):
            raise CalculatorError(f"this calculator takes real numbers only, and a value on the way is a {type(value).__name__}")


def _bounded(value: Any) -> Any:
    """``value`` where it is a real number of at most MOST_DIGITS digits."""
    _real_numbers(value)
    if isinstance(value, int) and _digits(value) > MOST_DIGITS:
        raise CalculatorError(f"a value on the way has more than {MOST_DIGITS} digits, more than this calculator writes")
    return value


def _digits(number: int) -> int:
    return max(1, math.ceil(abs(number).bit_length() * math.log10(2)))


def _of_numbers(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` given real numbers only, its value bounded."""
    def on_numbers(*values: Any) -> Any:
        _real_numbers(*values)
        return _bounded(function(*values))
    return on_numbers


def _power(base: Any, exponent: Any) -> Any:
    if isinstance(base, int) and isinstance(exponent, int) and abs(base) > 1 and exponent > 0:
        if exponent * math.log10(abs(base)) > MOST_DIGITS:
            raise CalculatorError(f"{base} ** {exponent} has more than {MOST_DIGITS} digits, more than this calculator writes")
    return operator.pow(base, exponent)


def _times(left: Any, right: Any) -> Any:
    if isinstance(left, int) and isinstance(right, int) and _digits(left) + _digits(right) > MOST_DIGITS + 1:
        raise CalculatorError(f"the product has more than {MOST_DIGITS} digits, more than this calculator writes")
    return operator.mul(left, right)


def _round(number: Any, digits: Any = None) -> Any:
    # round(1, -10**7) computes 10**(10**7) first: seconds, and minutes at -10**8.
    if digits is not None and (not isinstance(digits, int) or abs(digits) > MOST_DIGITS):
        raise CalculatorError(f"round takes a whole number of digits from -{MOST_DIGITS} to {MOST_DIGITS}, not {digits}")
    return round(number) if digits is None else round(number, digits)


FUNCTIONS = {name: _of_numbers(function) for name, function in ({name: getattr(math, name) for name in (
    "sqrt", "cbrt", "exp", "log", "log2", "log10", "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh",
    "degrees", "radians", "floor", "ceil", "trunc", "hypot", "gcd", "isqrt",
)} | {"abs": abs, "round": _round, "min": min, "max": max}).items()}
NAMES = {"pi": math.pi, "e": math.e, "tau": math.tau, "inf": math.inf}
OPERATORS = {kind: _of_numbers(function) for kind, function in {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: _times, ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod, ast.Pow: _power, ast.USub: operator.neg, ast.UAdd: operator.pos,
}.items()}


def calculate(expression: str) -> str:
    """The value of ``expression``, as text; a CalculatorError that says what is wrong with it."""
    from simpleeval import InvalidExpression, OperatorNotDefined, SimpleEval

    if len(expression) > LONGEST_EXPRESSION:
        raise CalculatorError(f"the expression is {len(expression)} characters long; this calculator takes at most {LONGEST_EXPRESSION}")
    evaluator = SimpleEval(operators=OPERATORS, functions=FUNCTIONS, names=NAMES)
    # Only these parts of an expression: any other (text, f-strings, attributes, subscripts,
    # comparisons, keyword arguments) is refused by simpleeval as not available.
    evaluator.nodes = {ast.Expr: evaluator._eval_expr, ast.Name: evaluator._eval_name, ast.UnaryOp: evaluator._eval_unaryop,
                       ast.BinOp: evaluator._eval_binop, ast.Call: evaluator._eval_call, ast.Constant: _number}
    try:
        value = evaluator.eval(expression)
    except CalculatorError:
        raise
    except (InvalidExpression, SyntaxError) as error:
        why = "it has an operator this calculator lacks" if isinstance(error, OperatorNotDefined) else str(error)
        raise CalculatorError(f"{expression!r} is not an expression this calculator takes ({why}). It takes numbers, + - * / // % **, "
                              f"parentheses, {', '.join(NAMES)} and {', '.join(FUNCTIONS)}") from None
    except (ArithmeticError, ValueError, TypeError, RecursionError) as error:
        raise CalculatorError(f"{expression!r} has no value: {error}") from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CalculatorError(f"{expression!r} is not a number but {type(value).__name__}")
    return repr(value)


def _number(node: ast.Constant) -> int | float:
    if isinstance(node.value, bool) or not isinstance(node.value, int | float):
        raise CalculatorError(f"{node.value!r} is not a real number: this calculator takes real numbers only (no text, no True or False)")
    return node.value
