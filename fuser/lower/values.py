"""The Fusion IR's elementwise expressions as kernel IR value expressions."""
from __future__ import annotations

from typing import Callable

from fuser.ir import (
    BinaryOp,
    BroadcastOp,
    DataType,
    ExpandOp,
    FullOp,
    GatherOp,
    IndexSelectOp,
    IotaOp,
    IterDomain,
    LoadStoreOp,
    ReductionOp,
    ReshapeOp,
    RNGOp,
    SelectOp,
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
from .kir import Binary, Cast, Const, Expr, IndexBinary, IntLit, Random, Ternary, Unary
from .params import ParamTable

Operand = Callable[[Val], Expr]


def arith(e, out: Val, operand: Operand) -> Expr:
    """`out` of the unary, binary or ternary op `e`, its operands via `operand`."""
    if isinstance(e, UnaryOp):
        (x,) = e.inputs
        return Unary(e.op_type, operand(x), x.dtype, out.dtype, approx=e.approx)
    if isinstance(e, BinaryOp):
        a, b = e.inputs
        # comparisons run in the type PyTorch compares in (a scalar does not widen a tensor)
        return Binary(e.op_type, operand(a), operand(b), a.dtype, b.dtype, out.dtype, common_dtype(a, b),
                      rounded=e.rounded, by_reciprocal=e.by_reciprocal)
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
                 axis_index: Callable[[IterDomain], Expr], index_dtype: DataType,
                 lookup: Callable[..., Expr] | None = None) -> Expr | None:
    """The element of `out` that `e` computes (None: a view, the same element as its
    operand's); `axis_index` gives an axis's index (iota reads it) in `index_dtype`.
    `lookup(e, out, operand, axis_index)` lowers index ops (see lookup.Lookups.value);
    without it they are not lowerable."""
    if lookup is not None and isinstance(e, (SelectOp, IndexSelectOp, GatherOp)):
        return lookup(e, out, operand, axis_index)
    if isinstance(e, (UnaryOp, BinaryOp, TernaryOp)):
        return arith(e, out, operand)
    if isinstance(e, (BroadcastOp, ExpandOp, SqueezeOp)):
        return None
    if isinstance(e, ReshapeOp):
        # the lowerings that call this index a reshape's output and input at the same
        # position of the reference (TensorIndexer.index_map): the same element there
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
    if isinstance(e, RNGOp):
        return _random(e, out, params, axis_index)
    raise NotLowerable(f"{type(e).__name__} in a pointwise kernel")


def _fold(outer: Expr, extent: Expr, inner: Expr) -> Expr:
    """outer * extent + inner: the loop index m itself where outer and inner are m / extent
    and m % extent (the axes of a merged loop), so no division is left to undo."""
    if (isinstance(outer, IndexBinary) and isinstance(inner, IndexBinary) and outer.op is BinaryOpType.Div
            and inner.op is BinaryOpType.Mod and outer.lhs == inner.lhs and outer.rhs == extent == inner.rhs):
        return outer.lhs
    return outer * extent + inner


def _random(e: RNGOp, out: TensorView, params: ParamTable, axis_index: Callable[[IterDomain], Expr]) -> Random:
    """An RNG op's element: its stream's numbers at the element's row-major linear index in
    the output's logical shape, so any schedule draws the same number for it."""
    index: Expr | None = None
    for axis in out.logical_no_reductions():
        if axis.is_broadcast:  # extent 1: index 0 adds nothing
            continue
        ext = axis.extent
        extent = IntLit(int(ext.value)) if ext.is_const else params.extent(ext)
        index = axis_index(axis) if index is None else _fold(index, extent, axis_index(axis))
    ndim = len(out.logical)
    lo, hi = e.inputs[ndim], e.inputs[ndim + 1]
    if e.has_seed:
        seed_val, offset_val = e.inputs[ndim + 2], e.inputs[ndim + 3]
        for what, v in (("rng_seed", seed_val), ("rng_offset", offset_val)):
            if not v.dtype.is_integral:
                raise NotLowerable(f"{what} of dtype {v.dtype}")
        seed, offset = scalar(seed_val, params), scalar(offset_val, params)
    else:
        seed, base = params.philox()
        offset = Binary(BinaryOpType.Add, base, Const(e.stream, DataType.Int), DataType.Int, DataType.Int, DataType.Int)
    return Random(e.rng_type, out.dtype, f"rng{out.name}", seed, offset, index if index is not None else IntLit(0),
                  (scalar(lo, params), scalar(hi, params)), (lo.dtype, hi.dtype))
