"""Integer expressions over symbols, as kiln.v1.SymInt.expr carries them in artifacts.

The same language proto/base/int_expr.h reads (the integer subset of sympy's printing):

    sum     := term { ("+" | "-") term }
    term    := unary { ("*" | "//" | "%") unary }
    unary   := "-" unary | power
    power   := primary [ "**" unary ]
    primary := INT | SYMBOL | "(" sum ")" | FUNCTION "(" sum { "," sum } ")"

with Max/Min (max/min), Abs (abs), FloorDiv/CleanDiv, CeilDiv, Mod/PythonMod, PowByNatural,
and CeilToInt/FloorToInt applied to IntTrueDiv(a, b). `//` and `%` floor as Python's do.
An expression is parsed once into a function of the symbols' values (a sequence indexed as
the `symbols` given to compile), so the runtime only calls it. Division by zero and a
negative exponent raise ExprError when evaluated; text outside the language raises it when
compiled, naming the text and the position.
"""

from __future__ import annotations

import re
from typing import Callable, Sequence

Evaluator = Callable[[Sequence[int]], int]

MAX_NESTING = 64

_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z_0-9]*)|(\*\*|//|[-+*%(),]))")


class ExprError(ValueError):
    """An expression that does not parse, names an unknown symbol, or cannot be evaluated."""


def _floordiv(a: int, b: int) -> int:
    if b == 0:
        raise ExprError("division by zero")
    return a // b


def _mod(a: int, b: int) -> int:
    if b == 0:
        raise ExprError("modulo by zero")
    return a % b


def _ceildiv(a: int, b: int) -> int:
    if b == 0:
        raise ExprError("division by zero")
    return -((-a) // b)


def _pow(a: int, b: int) -> int:
    if b < 0:
        raise ExprError(f"negative exponent {b}")
    return a**b


_BINARY = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
           "//": _floordiv, "%": _mod, "**": _pow}

# name -> (fewest arguments, most arguments or None, function of the argument values)
_FUNCTIONS: dict[str, tuple[int, int | None, Callable[..., int]]] = {
    "Max": (1, None, max), "max": (1, None, max),
    "Min": (1, None, min), "min": (1, None, min),
    "Abs": (1, 1, abs), "abs": (1, 1, abs),
    "FloorDiv": (2, 2, _floordiv), "CleanDiv": (2, 2, _floordiv),
    "CeilDiv": (2, 2, _ceildiv),
    "Mod": (2, 2, _mod), "PythonMod": (2, 2, _mod),
    "PowByNatural": (2, 2, _pow),
}


class _Parser:
    def __init__(self, text: str, symbols: dict[str, int]) -> None:
        self.text = text
        self.symbols = symbols
        self.tokens: list[tuple[str, str, int]] = []  # (kind, text, position)
        pos = 0
        while True:
            while pos < len(text) and text[pos].isspace():
                pos += 1
            if pos == len(text):
                break
            m = _TOKEN.match(text, pos)
            if m is None:
                raise self.error(f"unexpected character {text[pos]!r}", pos)
            kind = "int" if m.group(1) else "name" if m.group(2) else "op"
            self.tokens.append((kind, m.group(m.lastindex or 0), m.start(m.lastindex or 0)))
            pos = m.end()
        self.i = 0
        self.depth = 0

    def error(self, what: str, pos: int | None = None) -> ExprError:
        if pos is None:
            pos = self.tokens[self.i][2] if self.i < len(self.tokens) else len(self.text)
        return ExprError(f"expression {self.text!r}: {what} at position {pos}")

    def peek(self) -> str | None:
        return self.tokens[self.i][1] if self.i < len(self.tokens) else None

    def take(self, expected: str) -> None:
        if self.peek() != expected:
            raise self.error(f"expected {expected!r}")
        self.i += 1

    def nest(self) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.error(f"nested deeper than {MAX_NESTING} levels")

    def parse(self) -> Evaluator:
        if not self.tokens:
            raise self.error("empty expression")
        e = self.sum()
        if self.i != len(self.tokens):
            raise self.error(f"unexpected {self.peek()!r}")
        return e

    def sum(self) -> Evaluator:
        e = self.term()
        while self.peek() in ("+", "-"):
            e = self.binary(e, self.tokens[self.i][1], self.term)
        return e

    def term(self) -> Evaluator:
        e = self.unary()
        while self.peek() in ("*", "//", "%"):
            e = self.binary(e, self.tokens[self.i][1], self.unary)
        return e

    def binary(self, left: Evaluator, op: str, right_of: Callable[[], Evaluator]) -> Evaluator:
        self.i += 1
        right = right_of()
        fn = _BINARY[op]
        return lambda s: fn(left(s), right(s))

    def unary(self) -> Evaluator:
        if self.peek() == "-":
            self.i += 1
            self.nest()
            inner = self.unary()
            self.depth -= 1
            return lambda s: -inner(s)
        return self.power()

    def power(self) -> Evaluator:
        base = self.primary()
        if self.peek() != "**":
            return base
        self.i += 1
        self.nest()
        exponent = self.unary()
        self.depth -= 1
        return lambda s: _pow(base(s), exponent(s))

    def primary(self) -> Evaluator:
        if self.i >= len(self.tokens):
            raise self.error("unexpected end")
        kind, text, pos = self.tokens[self.i]
        self.i += 1
        if kind == "int":
            value = int(text)
            return lambda s: value
        if text == "(":
            self.nest()
            e = self.sum()
            self.take(")")
            self.depth -= 1
            return e
        if kind != "name":
            raise self.error(f"unexpected {text!r}", pos)
        if self.peek() == "(":
            return self.call(text, pos)
        if text not in self.symbols:
            raise self.error(f"unknown symbol {text!r}", pos)
        index = self.symbols[text]
        return lambda s: s[index]

    def arguments(self) -> list[Evaluator]:
        self.take("(")
        self.nest()
        args = [self.sum()]
        while self.peek() == ",":
            self.i += 1
            args.append(self.sum())
        self.take(")")
        self.depth -= 1
        return args

    def call(self, name: str, pos: int) -> Evaluator:
        if name in ("CeilToInt", "FloorToInt"):
            self.take("(")
            self.nest()
            if self.peek() != "IntTrueDiv":
                raise self.error(f"{name} applies only to IntTrueDiv(a, b)")
            self.i += 1
            a, b = self.exact_arguments("IntTrueDiv", 2)
            self.take(")")
            self.depth -= 1
            fn = _ceildiv if name == "CeilToInt" else _floordiv
            return lambda s: fn(a(s), b(s))
        if name not in _FUNCTIONS:
            raise self.error(f"unknown function {name!r}", pos)
        fewest, most, fn = _FUNCTIONS[name]
        args = self.arguments()
        if len(args) < fewest or (most is not None and len(args) > most):
            raise self.error(f"{name} takes {fewest if most == fewest else 'at least %d' % fewest}"
                             f" argument(s), not {len(args)}", pos)
        if len(args) == 1:
            (only,) = args
            return (lambda s: fn(only(s))) if name in ("Abs", "abs") else only
        if len(args) == 2:
            a, b = args
            return lambda s: fn(a(s), b(s))
        return lambda s: fn(*(x(s) for x in args))

    def exact_arguments(self, name: str, count: int) -> list[Evaluator]:
        args = self.arguments()
        if len(args) != count:
            raise self.error(f"{name} takes {count} arguments, not {len(args)}")
        return args


def compile_expr(text: str, symbols: Sequence[str]) -> Evaluator:
    """The function that evaluates `text` with symbol i bound to values[i]."""
    return _Parser(text, {name: i for i, name in enumerate(symbols)}).parse()


def compile_symint(symint: object, symbols: Sequence[str]) -> Evaluator:
    """A kiln.v1.SymInt (a constant or an expression) as a function of the symbols."""
    if symint.WhichOneof("kind") == "expr":  # type: ignore[attr-defined]
        return compile_expr(symint.expr, symbols)  # type: ignore[attr-defined]
    value = int(symint.value)  # type: ignore[attr-defined]
    return lambda s: value
