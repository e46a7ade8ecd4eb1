"""Binary ops written as infix operators, with C's precedence: generated code's index
arithmetic and the kernel IR printer parenthesise by the same table."""
from __future__ import annotations

from .exprs import BinaryOpType

#: how tightly names, literals, calls, subscripts and parenthesised expressions bind
ATOM = 16
#: ... prefix operators (!, &, casts)
PREFIX = 15
#: op -> (symbol, precedence); a higher number binds tighter
INFIX: dict[BinaryOpType, tuple[str, int]] = {
    BinaryOpType.Mul: ("*", 13),
    BinaryOpType.Div: ("/", 13),
    BinaryOpType.Mod: ("%", 13),
    BinaryOpType.Add: ("+", 12),
    BinaryOpType.Sub: ("-", 12),
    BinaryOpType.Lshift: ("<<", 11),
    BinaryOpType.Rshift: (">>", 11),
    BinaryOpType.Lt: ("<", 10),
    BinaryOpType.Le: ("<=", 10),
    BinaryOpType.Gt: (">", 10),
    BinaryOpType.Ge: (">=", 10),
    BinaryOpType.Eq: ("==", 9),
    BinaryOpType.Ne: ("!=", 9),
    BinaryOpType.BitwiseAnd: ("&", 8),
    BinaryOpType.BitwiseXor: ("^", 7),
    BinaryOpType.BitwiseOr: ("|", 6),
    BinaryOpType.LogicalAnd: ("&&", 5),
    BinaryOpType.LogicalOr: ("||", 4),
}

__all__ = ["ATOM", "INFIX", "PREFIX"]
