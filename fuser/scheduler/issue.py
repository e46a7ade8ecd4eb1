"""How much of an SM's instruction issue a segment's arithmetic takes at memory speed.

A pointwise kernel keeps memory busy only while its SMs issue the loads fast enough; a
thread that loads one vector, computes on it and stores it leaves the memory idle while
it computes. Where the arithmetic takes most of the issue slots an SM has per element
memory delivers, loading the next vector before computing on this one (unroll 2) hides it.
The same fusion needs that on a GPU whose memory is faster per SM clock and not on
another: GELU bf16 [16384, 8192] (rewritten to a sigmoid) ran at 93.1% of copy with one
vector per thread and 96.7% with two on an H200, 100.4% and 99.6% on an H100.
"""
from __future__ import annotations

from typing import Iterable

from fuser.ir import BinaryOp, BinaryOpType, DataType, Expr, RNGOp, TensorView, UnaryOp, UnaryOpType

from .runtime_info import DeviceLimits

#: FP32 lanes an SM issues per clock (4 schedulers x 32)
LANES = 128
#: issue slots per element, in FP32-instruction units, of the ops that take more than one:
#: the libdevice routine or intrinsic sequence fuser's runtime calls (a multi-function-unit
#: instruction, a quarter of the lanes' rate, counts 4 or more). Every other op is one.
_UNARY_COST = {
    "Exp": 10, "Exp2": 8, "Expm1": 14, "Log": 12, "Log2": 10, "Log10": 12, "Log1p": 14,
    "Sigmoid": 12, "Silu": 13, "Tanh": 30, "Sin": 20, "Cos": 20, "Tan": 30, "Sinh": 24, "Cosh": 24,
    "Asin": 24, "Acos": 24, "Atan": 24, "Asinh": 30, "Acosh": 30, "Atanh": 30, "Erf": 20, "Erfc": 20,
    "Erfinv": 30, "Erfcinv": 30, "Lgamma": 40, "Rsqrt": 6, "Reciprocal": 8,
}
_BINARY_COST = {"Div": 10, "Pow": 30, "Atan2": 30, "Fmod": 10, "Remainder": 12, "Mod": 10, "Gcd": 40,
                "Nextafter": 4, "CeilDiv": 10}
#: per element besides its ops: address arithmetic and predicates, amortised over a vector
PER_ELEMENT = 2
#: the share of the issue slots above which unroll 2 pays: between the H100's GELU (0.63:
#: 100.4% of copy at 1, 99.6% at 2) and the H200's (0.90: 93.1% at 1, 96.7% at 2; at
#: [4096, 4096] 84.4% and 90.2%). Sigmoid and SiLU on an H200 (0.57, 0.61) ran within 1% at
#: 1, 2 and 4; GELU with tanhf (1.5 on an H200, 1.05 on an H100) best at 2 on the H200
#: (83.5%, 89.7%, 87.6% at 1, 2, 4) and level on the H100 (99.5% at 1 and 2)
UNROLL_ABOVE = 0.75


#: ops whose values a persistent kernel keeps in registers across a reduction rather than
#: recomputing them from the loaded row: many instructions each (softmax's exp: keeping
#: it measured +10 points of copy bandwidth for bf16 [16384, 4096] on an H100)
_KEPT_UNARY = frozenset({
    UnaryOpType.Exp, UnaryOpType.Exp2, UnaryOpType.Expm1, UnaryOpType.Log, UnaryOpType.Log10, UnaryOpType.Log1p,
    UnaryOpType.Log2, UnaryOpType.Tanh, UnaryOpType.Sigmoid, UnaryOpType.Silu, UnaryOpType.Erf, UnaryOpType.Erfc,
    UnaryOpType.Erfinv, UnaryOpType.Erfcinv, UnaryOpType.Lgamma, UnaryOpType.Sin, UnaryOpType.Cos, UnaryOpType.Tan,
    UnaryOpType.Sinh, UnaryOpType.Cosh, UnaryOpType.Asin, UnaryOpType.Acos, UnaryOpType.Atan, UnaryOpType.Asinh,
    UnaryOpType.Acosh, UnaryOpType.Atanh,
})


def kept_in_registers(e: Expr) -> bool:
    """Whether a persistent kernel keeps `e`'s values in registers across a reduction
    rather than recomputing them from the loaded row (the lowering's rule)."""
    if isinstance(e, UnaryOp):
        return e.op_type in _KEPT_UNARY
    if isinstance(e, RNGOp):  # ten Philox rounds per block of numbers
        return True
    return isinstance(e, BinaryOp) and e.op_type in (BinaryOpType.Pow, BinaryOpType.Atan2)


def op_cost(e: Expr) -> int:
    """Issue slots per element of `e` (FP32 units; double arithmetic counts twice)."""
    kind = getattr(e, "op_type", None)
    name = getattr(kind, "name", "")
    cost = _UNARY_COST.get(name) or _BINARY_COST.get(name) or (0 if kind is None else 1)
    out = e.outputs[0] if e.outputs else None
    if isinstance(out, TensorView) and out.dtype is DataType.Double:
        cost *= 2
    return cost


def issue_share(exprs: Iterable[Expr], bytes_per_element: int, limits: DeviceLimits) -> float:
    """The share of an SM's issue slots `exprs` take per element when the SM moves
    `bytes_per_element` bytes (read and written) per element at the memory's rated speed."""
    cost = PER_ELEMENT + sum(op_cost(e) for e in exprs)
    elements_per_clock = limits.bytes_per_sm_clock / max(bytes_per_element, 1)
    return cost * elements_per_clock / LANES


__all__ = ["LANES", "UNROLL_ABOVE", "issue_share", "kept_in_registers", "op_cost"]
