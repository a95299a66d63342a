"""kiln.symexpr: the expression language of proto/base/int_expr.h, with its semantics
(Python's floor division and modulo, ** above unary minus, the nesting limit)."""

from __future__ import annotations

import pytest

from kiln.symexpr import MAX_NESTING, ExprError, compile_expr

SYMBOLS = ["s0", "s75", "u3"]
VALUES = [5, 70, -7]


@pytest.mark.parametrize("text, value", [
    ("42", 42),
    ("s0", 5),
    ("256*s75 + 3", 17923),
    ("s0 - 2 - 1", 2),
    ("-s0//3", -2),           # floor toward negative infinity, as Python
    ("u3 % 3", 2),
    ("u3 // 2", -4),
    ("2**10", 1024),
    ("-2**2", -4),            # ** binds tighter than unary minus
    ("(s0 + 1)**2", 36),
    ("Max(1, s0 - 9)", 1),
    ("Min(s0, s75, 3)", 3),
    ("max(s0, 9)", 9),
    ("Abs(u3)", 7),
    ("FloorDiv(u3, 2)", -4),
    ("CleanDiv(s75, 7)", 10),
    ("CeilDiv(s75, 32)", 3),
    ("Mod(u3, 3)", 2),
    ("PythonMod(-7, 3)", 2),
    ("PowByNatural(s0, 2)", 25),
    ("32*CeilToInt(IntTrueDiv(s75, 32))", 96),
    ("FloorToInt(IntTrueDiv(s75, 32))", 2),
    ("Max(1, 32*CeilToInt(IntTrueDiv(s75, 32)))", 96),
])
def test_values(text: str, value: int) -> None:
    assert compile_expr(text, SYMBOLS)(VALUES) == value


@pytest.mark.parametrize("text, message", [
    ("", "empty expression"),
    ("s9", "unknown symbol 's9' at position 0"),
    ("Foo(1)", "unknown function 'Foo'"),
    ("1 +", "unexpected end at position 3"),
    ("((1)", "expected ')' at position 4"),
    ("1.5", "unexpected character '.' at position 1"),
    ("s0 < 3", "unexpected character '<'"),
    ("CeilToInt(s0)", "CeilToInt applies only to IntTrueDiv(a, b)"),
    ("Abs(1, 2)", "Abs takes 1 argument(s), not 2"),
    ("FloorDiv(1)", "FloorDiv takes 2 argument(s), not 1"),
    ("1 2", "unexpected '2'"),
])
def test_text_outside_the_language_is_refused_with_where(text: str, message: str) -> None:
    with pytest.raises(ExprError, match=message.replace("(", r"\(").replace(")", r"\)")):
        compile_expr(text, SYMBOLS)


def test_nesting_is_limited() -> None:
    ok = "(" * MAX_NESTING + "1" + ")" * MAX_NESTING
    assert compile_expr(ok, [])([]) == 1
    with pytest.raises(ExprError, match="nested deeper than 64"):
        compile_expr("(" + ok + ")", [])
    with pytest.raises(ExprError, match="nested deeper"):
        compile_expr("-" * (MAX_NESTING + 1) + "1", [])


@pytest.mark.parametrize("text, message", [
    ("s0 // (s0 - 5)", "division by zero"),
    ("s0 % (s0 - 5)", "modulo by zero"),
    ("2 ** u3", "negative exponent -7"),
])
def test_evaluation_errors(text: str, message: str) -> None:
    evaluate = compile_expr(text, SYMBOLS)
    with pytest.raises(ExprError, match=message):
        evaluate(VALUES)
