"""Integer arithmetic on extents, folded when both sides are constants.

Domain-building code (split, merge, reshape, pad, slice) computes new extents with these,
so that a fully static shape stays static and a symbolic one records the arithmetic.
"""
from __future__ import annotations

from .base import Scalar
from .dtype import DataType
from .exprs import BinaryOp, BinaryOpType


def _int(x: Scalar | int) -> Scalar:
    return x if isinstance(x, Scalar) else Scalar(DataType.Int, int(x))


def _fold(op: BinaryOpType, a: int, b: int) -> int:
    if op is BinaryOpType.Add:
        return a + b
    if op is BinaryOpType.Sub:
        return a - b
    if op is BinaryOpType.Mul:
        return a * b
    if op is BinaryOpType.CeilDiv:
        return -(-a // b)
    if op is BinaryOpType.Div:
        return int(a / b) if b else 0  # C truncation, matching integer division on the GPU
    if op is BinaryOpType.Max:
        return max(a, b)
    if op is BinaryOpType.Min:
        return min(a, b)
    raise ValueError(f"no folding for {op}")


def _binary(op: BinaryOpType, a: Scalar | int, b: Scalar | int) -> Scalar:
    a, b = _int(a), _int(b)
    if a.is_const and b.is_const:
        return Scalar(DataType.Int, _fold(op, a.value, b.value))
    # identities keep symbolic extents readable (i0 * 1 stays i0)
    if op is BinaryOpType.Mul and a.is_const and a.value == 1:
        return b
    if op in (BinaryOpType.Mul, BinaryOpType.CeilDiv, BinaryOpType.Div) and b.is_const and b.value == 1:
        return a
    if op in (BinaryOpType.Add, BinaryOpType.Sub) and b.is_const and b.value == 0:
        return a
    if op is BinaryOpType.Add and a.is_const and a.value == 0:
        return b
    out = Scalar(DataType.Int)
    BinaryOp([a, b], [out], op_type=op)
    return out


def add(a: Scalar | int, b: Scalar | int) -> Scalar:
    return _binary(BinaryOpType.Add, a, b)


def sub(a: Scalar | int, b: Scalar | int) -> Scalar:
    return _binary(BinaryOpType.Sub, a, b)


def mul(a: Scalar | int, b: Scalar | int) -> Scalar:
    return _binary(BinaryOpType.Mul, a, b)


def ceil_div(a: Scalar | int, b: Scalar | int) -> Scalar:
    return _binary(BinaryOpType.CeilDiv, a, b)


def div(a: Scalar | int, b: Scalar | int) -> Scalar:
    return _binary(BinaryOpType.Div, a, b)


def maximum(a: Scalar | int, b: Scalar | int) -> Scalar:
    return _binary(BinaryOpType.Max, a, b)


def minimum(a: Scalar | int, b: Scalar | int) -> Scalar:
    return _binary(BinaryOpType.Min, a, b)
