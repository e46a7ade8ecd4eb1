"""Kernel IR expressions -> C++ expressions.

Index arithmetic prints with C's operators and the fewest parentheses C's precedence
needs, plus a few for the reader: around `/` or `%` beside `*`, around `&&` inside `||`,
and around any operand of a comparison that is not a name, literal, call or subscript.
The Fusion IR's arithmetic goes through the emitters of `fuser.codegen.ops`, which give it
PyTorch's semantics per DataType.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fuser.ir.domain import ParallelType
from fuser.ir.dtype import DataType
from fuser.ir.exprs import BinaryOpType, RNGOpType, UnaryOpType
from fuser.ir.infix import ATOM, INFIX, PREFIX
from fuser.lower.kir import (
    AddressOf,
    Binary,
    Cast,
    CheckedIndex,
    Const,
    Element,
    Expr,
    Member,
    IndexBinary,
    IndexCast,
    IntLit,
    Lookup,
    Not,
    ColumnWidth,
    ParallelDim,
    ParallelIndex,
    Param,
    Random,
    ReciprocalScale,
    StateOr,
    Ternary,
    Unary,
    Var,
)

from .ops import binds_tightly, ctype, emit_binary, emit_cast, emit_constant, emit_random, emit_ternary, emit_unary

#: the name generated code gives the kernel's index type (a typedef at the top)
INDEX_TYPE = "nvfuser_index_t"

_CALLS = {BinaryOpType.Max: "max", BinaryOpType.Min: "min"}
_ADDITIVE = (BinaryOpType.Add, BinaryOpType.Sub)
_COMPARISONS = (BinaryOpType.Lt, BinaryOpType.Le, BinaryOpType.Gt, BinaryOpType.Ge, BinaryOpType.Eq, BinaryOpType.Ne)

_INDEX_NAMES = {
    ParallelType.BIDx: "blockIdx.x", ParallelType.BIDy: "blockIdx.y", ParallelType.BIDz: "blockIdx.z",
    ParallelType.TIDx: "threadIdx.x", ParallelType.TIDy: "threadIdx.y", ParallelType.TIDz: "threadIdx.z",
}
_DIM_NAMES = {
    ParallelType.BIDx: "gridDim.x", ParallelType.BIDy: "gridDim.y", ParallelType.BIDz: "gridDim.z",
    ParallelType.TIDx: "blockDim.x", ParallelType.TIDy: "blockDim.y", ParallelType.TIDz: "blockDim.z",
}


def expr(e: Expr) -> str:
    """`e` as a C++ expression (unparenthesised at the top)."""
    return _print(e)[0]


def value_ctype(dtype: DataType | None) -> str:
    """The C++ type of a value of `dtype` (None: the kernel's index type)."""
    return INDEX_TYPE if dtype is None else ctype(dtype)


def _print(e: Expr) -> tuple[str, int]:
    """`e`'s text and how tightly it binds."""
    if isinstance(e, (Var, Param)):
        return e.name, ATOM
    if isinstance(e, IntLit):
        return (str(e.value), ATOM) if e.value >= 0 else (f"({e.value})", ATOM)
    if isinstance(e, ParallelIndex):
        return _INDEX_NAMES[e.ptype], ATOM
    if isinstance(e, ParallelDim):
        return _DIM_NAMES[e.ptype], ATOM
    if isinstance(e, ColumnWidth):
        return f"fuser::column_width({expr(e.n_cols)}, {e.threads})", ATOM
    if isinstance(e, IndexCast):
        return f"(({INDEX_TYPE}){_operand(e.value, PREFIX)})", ATOM
    if isinstance(e, IndexBinary):
        return _index_binary(e)
    if isinstance(e, Not):
        return f"!{_operand(e.value, PREFIX)}", PREFIX
    if isinstance(e, AddressOf):
        return f"&{_operand(e.value, PREFIX)}", PREFIX
    if isinstance(e, Member):
        return f"{_operand(e.base, ATOM)}.{e.field}", ATOM
    if isinstance(e, Element):
        return f"{_operand(e.base, ATOM)}[{expr(e.index)}]", ATOM
    if isinstance(e, StateOr):
        state = _operand(e.state, ATOM)
        return f"({state} != nullptr ? {state}[{e.k}] : {_operand(e.given, ATOM)})", ATOM
    if isinstance(e, CheckedIndex):
        flag = expr(e.flag) if e.flag is not None else "nullptr"
        wrap = "true" if e.wrap else "false"
        return f"fuser::checked_index<{wrap}>({expr(e.value)}, {expr(e.extent)}, {flag}, {e.check})", ATOM
    if isinstance(e, Lookup):
        return f"fuser::lookup({expr(e.base)}, {expr(e.offset)}, {expr(e.position)}, {expr(e.stride)})", ATOM
    text = _value(e)
    return text, ATOM if binds_tightly(text) else 0


def _value(e: Expr) -> str:
    """A Fusion IR value expression through the emitters."""
    if isinstance(e, Const):
        return emit_constant(e.value, e.dtype)
    if isinstance(e, Cast):
        return _folded(e.value, e.src, e.dst) or emit_cast(expr(e.value), e.src, e.dst)
    if isinstance(e, Unary):
        if e.op is UnaryOpType.Cast:
            folded = _folded(e.operand, e.dtype, e.out)
            if folded:
                return folded
        return emit_unary(e.op, expr(e.operand), e.dtype, e.out, approx=e.approx)
    if isinstance(e, Binary):
        return emit_binary(e.op, expr(e.lhs), expr(e.rhs), e.lhs_dtype, e.rhs_dtype, e.out, common=e.common,
                           rounded=e.rounded, by_reciprocal=e.by_reciprocal)
    if isinstance(e, ReciprocalScale):
        return f"fuser::reciprocal_scale({emit_cast(expr(e.value), e.dtype, e.out)})"
    if isinstance(e, Random):
        return emit_random(e.op is RNGOpType.Normal, e.out, e.state, expr(e.seed), expr(e.offset), expr(e.index),
                           (expr(e.params[0]), expr(e.params[1])), e.param_dtypes)
    if isinstance(e, Ternary):
        a, b, c = (expr(x) for x in e.operands)
        return emit_ternary(e.op, a, b, c, e.dtypes, e.out, common=e.common)
    raise TypeError(f"no C++ for {type(e).__name__}")


def _folded(value: Expr, src: DataType, dst: DataType) -> str | None:
    """A float constant's conversion to another float type, done here rather than on the
    device for every element (a `full` of bf16 zeros: the conversion is an asm the compiler
    cannot fold); None where `value` is not such a constant."""
    if not (isinstance(value, Const) and src in (DataType.Float, DataType.Double) and dst.is_floating):
        return None
    v = float(value.value.real if isinstance(value.value, complex) else value.value)
    if src is DataType.Float:
        with np.errstate(over="ignore"):
            v = float(np.float32(v))
    return emit_constant(v, dst)


def _operand(e: Expr, at_least: int) -> str:
    """`e` parenthesised unless it binds at least as tightly as `at_least`."""
    text, prec = _print(e)
    return text if prec >= at_least else f"({text})"


def _index_binary(e: IndexBinary) -> tuple[str, int]:
    if e.op is BinaryOpType.CeilDiv:  # extents are non-negative
        return _index_binary(IndexBinary(BinaryOpType.Div, e.lhs + e.rhs - 1, e.rhs))
    if e.op in _CALLS:
        return f"{_CALLS[e.op]}({expr(e.lhs)}, {expr(e.rhs)})", ATOM
    symbol, prec = INFIX[e.op]
    lhs = _side(e.lhs, e.op, prec, right=False)
    rhs = _side(e.rhs, e.op, prec, right=True)
    return f"{lhs} {symbol} {rhs}", prec


def _side(child: Expr, op: BinaryOpType, prec: int, *, right: bool) -> str:
    """An operand of binary `op`, parenthesised where C needs it or a reader would."""
    text, child_prec = _print(child)
    child_op = child.op if isinstance(child, IndexBinary) else None
    if op in _COMPARISONS:
        paren = child_prec < ATOM
    elif child_prec > prec:
        paren = op is BinaryOpType.LogicalOr and child_op is BinaryOpType.LogicalAnd
    elif child_prec < prec or right:
        paren = True
    else:  # a left operand of the same precedence: a - b + c, but (a / b) * c
        paren = not (child_op is op or (op in _ADDITIVE and child_op in _ADDITIVE))
    return f"({text})" if paren else text
