"""The Fusion IR's elementwise expressions as kernel IR value expressions."""
from __future__ import annotations

from typing import Callable

from fuser.ir import (
    BinaryOp,
    BroadcastOp,
    DataType,
    ExpandOp,
    FullOp,
    IotaOp,
    IterDomain,
    LoadStoreOp,
    ReductionOp,
    SqueezeOp,
    TensorView,
    TernaryOp,
    UnaryOp,
    Val,
)
from fuser.ir.exprs import BinaryOpType, TernaryOpType
from fuser.ops.arith import common_dtype
from fuser.scheduler.analysis import is_trivial_reduction

from .errors import NotLowerable
from .kir import Binary, Cast, Const, Expr, Ternary, Unary
from .params import ParamTable

Operand = Callable[[Val], Expr]


def arith(e, out: Val, operand: Operand) -> Expr:
    """`out` of the unary, binary or ternary op `e`, its operands via `operand`."""
    if isinstance(e, UnaryOp):
        (x,) = e.inputs
        return Unary(e.op_type, operand(x), x.dtype, out.dtype)
    if isinstance(e, BinaryOp):
        a, b = e.inputs
        # comparisons run in the type PyTorch compares in (a scalar does not widen a tensor)
        return Binary(e.op_type, operand(a), operand(b), a.dtype, b.dtype, out.dtype, common_dtype(a, b))
    if isinstance(e, TernaryOp):
        a, b, c = e.inputs
        common = common_dtype(a, b) if e.op_type is TernaryOpType.Threshold else None
        return Ternary(e.op_type, (operand(a), operand(b), operand(c)), (a.dtype, b.dtype, c.dtype), out.dtype, common)
    raise NotLowerable(f"{type(e).__name__} on scalars")


def scalar(s: Val, params: ParamTable) -> Expr:
    """A scalar operand: a constant, a scalar input, or host arithmetic on them."""
    if s.is_const:
        return Const(s.value, s.dtype)
    d = s.definition
    if d is None:
        return params.scalar(s)
    return arith(d, s, lambda v: scalar(v, params))


def tensor_value(e, out: TensorView, operand: Operand, params: ParamTable,
                 axis_index: Callable[[IterDomain], Expr], index_dtype: DataType) -> Expr | None:
    """The element of `out` that `e` computes (None: a view, the same element as its
    operand's); `axis_index` gives an axis's index (iota reads it) in `index_dtype`."""
    if isinstance(e, (UnaryOp, BinaryOp, TernaryOp)):
        return arith(e, out, operand)
    if isinstance(e, (BroadcastOp, ExpandOp, SqueezeOp)):
        return None
    if isinstance(e, LoadStoreOp):
        x = e.inputs[0]
        return None if x.dtype == out.dtype else Cast(operand(x), x.dtype, out.dtype)
    if isinstance(e, ReductionOp) and is_trivial_reduction(e):  # a squeeze in all but name
        x = e.inputs[0]
        return Cast(operand(x), x.dtype, out.dtype) if x.dtype != out.dtype else None
    if isinstance(e, FullOp):
        fill = e.inputs[-1]
        value = scalar(fill, params)
        return Cast(value, fill.dtype, out.dtype) if fill.dtype != out.dtype else value
    if isinstance(e, IotaOp):
        _, start, step = e.inputs
        (axis,) = out.logical_no_reductions()
        dt = out.dtype
        i = Cast(axis_index(axis), index_dtype, dt)
        return Binary(BinaryOpType.Add, Cast(scalar(start, params), start.dtype, dt),
                      Binary(BinaryOpType.Mul, i, Cast(scalar(step, params), step.dtype, dt), dt, dt, dt), dt, dt, dt)
    raise NotLowerable(f"{type(e).__name__} in a pointwise kernel")
