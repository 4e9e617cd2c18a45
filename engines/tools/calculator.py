"""The calculator tool: arithmetic and the math module's functions, evaluated by simpleeval (a
parser of one expression that runs nothing but the operators and functions it is given, never
``eval``), with every operator bounded so that no expression holds the server for long."""

from __future__ import annotations

import ast
import math
import operator
from typing import Any

LONGEST_EXPRESSION = 1000
# The most digits a whole number may reach (a power is refused before it is computed): far beyond
# any arithmetic a reply needs, and still computed and written in microseconds.
MOST_DIGITS = 4000

FUNCTIONS = {name: getattr(math, name) for name in (
    "sqrt", "cbrt", "exp", "log", "log2", "log10", "sin", "cos", "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "tanh",
    "degrees", "radians", "floor", "ceil", "trunc", "hypot", "gcd", "isqrt",
)} | {"abs": abs, "round": round, "min": min, "max": max}
NAMES = {"pi": math.pi, "e": math.e, "tau": math.tau, "inf": math.inf}


class CalculatorError(ValueError):
    """An expression the calculator does not take, and why."""


def _power(base: Any, exponent: Any) -> Any:
    _numbers(base, exponent)
    if isinstance(base, int) and isinstance(exponent, int) and abs(base) > 1 and exponent > 0:
        if exponent * math.log10(abs(base)) > MOST_DIGITS:
            raise CalculatorError(f"{base} ** {exponent} has more than {MOST_DIGITS} digits, more than this calculator writes")
    return operator.pow(base, exponent)


def _times(left: Any, right: Any) -> Any:
    _numbers(left, right)
    if isinstance(left, int) and isinstance(right, int) and _digits(left) + _digits(right) > MOST_DIGITS + 1:
        raise CalculatorError(f"the product has more than {MOST_DIGITS} digits, more than this calculator writes")
    return operator.mul(left, right)


def _numbers(*values: Any) -> None:
    """Only numbers are multiplied: a text times a number would be as long as the number says."""
    if not all(isinstance(value, int | float) for value in values):
        raise CalculatorError("this calculator multiplies numbers only")


def _digits(number: int) -> int:
    return max(1, math.ceil(abs(number).bit_length() * math.log10(2)))


OPERATORS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: _times, ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod, ast.Pow: _power, ast.USub: operator.neg, ast.UAdd: operator.pos,
}


def calculate(expression: str) -> str:
    """The value of ``expression``, as text; a CalculatorError that says what is wrong with it."""
    from simpleeval import InvalidExpression, OperatorNotDefined, SimpleEval

    if len(expression) > LONGEST_EXPRESSION:
        raise CalculatorError(f"the expression is {len(expression)} characters long; this calculator takes at most {LONGEST_EXPRESSION}")
    evaluator = SimpleEval(operators=OPERATORS, functions=FUNCTIONS, names=NAMES)
    try:
        value = evaluator.eval(expression)
    except CalculatorError:
        raise
    except (InvalidExpression, SyntaxError) as error:
        why = "it has an operator this calculator lacks" if isinstance(error, OperatorNotDefined) else str(error)
        raise CalculatorError(f"{expression!r} is not an expression this calculator takes ({why}). It takes numbers, + - * / // % **, "
                              f"parentheses, {', '.join(NAMES)} and {', '.join(FUNCTIONS)}") from None
    except (ArithmeticError, ValueError, TypeError) as error:
        raise CalculatorError(f"{expression!r} has no value: {error}") from None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CalculatorError(f"{expression!r} is not a number but {type(value).__name__}")
    return repr(value)
